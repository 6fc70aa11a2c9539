//! The acceptance test of `sim serve` as a cluster for other controllers (issue 25): the
//! upstream NodeWright operator rolls a Skyhook out on it, driven by `ci/upstream-operator`.
//!
//! It needs what CI does not have by default: a checkout of github.com/NVIDIA/nodewright
//! (`NODEWRIGHT_UPSTREAM`), its built manager (`NODEWRIGHT_UPSTREAM_MANAGER`) or `go` on PATH
//! to build one, `kubectl` and `python3`. Without them it prints SKIP and passes.

use std::path::{Path, PathBuf};
use std::process::Command;

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())
    })
}

#[test]
fn the_upstream_operator_rolls_a_skyhook_out_on_sim_serve() {
    let Some(upstream) = std::env::var_os("NODEWRIGHT_UPSTREAM").map(PathBuf::from) else {
        println!("SKIP: NODEWRIGHT_UPSTREAM names no upstream checkout");
        return;
    };
    if !upstream.join("operator/config/crd/bases").is_dir() {
        println!("SKIP: {} is not an upstream checkout", upstream.display());
        return;
    }
    let manager = std::env::var_os("NODEWRIGHT_UPSTREAM_MANAGER").map(PathBuf::from);
    if manager.as_ref().is_none_or(|m| !m.is_file()) && which("go").is_none() {
        println!("SKIP: no built manager (NODEWRIGHT_UPSTREAM_MANAGER) and no go to build one");
        return;
    }
    for tool in ["kubectl", "python3"] {
        if which(tool).is_none() {
            println!("SKIP: {tool} is not on PATH");
            return;
        }
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ci/upstream-operator");
    let mut command = Command::new(script);
    command
        .arg(&upstream)
        .env("NODEWRIGHT", env!("CARGO_BIN_EXE_nodewright"));
    if let Some(manager) = manager.filter(|m| m.is_file()) {
        command.arg(manager);
    }
    let out = command.output().expect("ci/upstream-operator runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "the upstream operator did not complete the rollout:\n{stdout}"
    );
    assert!(stdout.contains("PASS:"), "{stdout}");
}
