//! `ci/upstream-compare` (issue 26): the comparison of two recorded runs, always; and the
//! side-by-side run of the upstream operator and `nodewright run` on the lifecycle fleet of
//! `ci/compare/`, when an upstream manager is at hand (`NODEWRIGHT_UPSTREAM_MANAGER`; its
//! CRDs beside it or in `UPSTREAM_CRDS`), with `kubectl`, `python3` and PyYAML.
//!
//! The comparison is Python (standard library only); without `python3` these print SKIP.

use std::path::{Path, PathBuf};
use std::process::Command;

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())
    })
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn the_comparison_unit_tests_pass() {
    if which("python3").is_none() {
        println!("SKIP: python3 is not on PATH");
        return;
    }
    let out = Command::new("python3")
        .args(["-m", "unittest", "discover", "-s", "ci/compare"])
        .current_dir(root())
        .output()
        .expect("python3 runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("OK"), "{stderr}");
}

#[test]
fn a_recorded_pair_with_one_unexplained_divergence_exits_1() {
    if which("python3").is_none() {
        println!("SKIP: python3 is not on PATH");
        return;
    }
    let fixtures = root().join("ci/compare/fixtures");
    let out = Command::new(root().join("ci/upstream-compare"))
        .arg("--facts")
        .arg(fixtures.join("upstream.json"))
        .arg(fixtures.join("ours.json"))
        .output()
        .expect("ci/upstream-compare runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert_eq!(
        stdout.trim_end().lines().last(),
        Some("unexplained divergences: 1"),
        "{stdout}"
    );
    // The deliberate one is matched to its docs/compatibility.md entry by name.
    assert!(
        stdout.contains("`execution-kind` phase 1: upstream Pod; ours Job — deliberate: Stage executions are Jobs, not bare pods"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "`cordoned-at-end` phase 1 node-1: upstream False; ours True — **unexplained**"
        ),
        "{stdout}"
    );
}

#[test]
fn a_usage_error_exits_2() {
    if which("python3").is_none() {
        println!("SKIP: python3 is not on PATH");
        return;
    }
    let out = Command::new(root().join("ci/upstream-compare"))
        .args(["--fleet", "ci/compare/lifecycle/fleet.yaml"])
        .current_dir(root())
        .output()
        .expect("ci/upstream-compare runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--manager is required"));
}

#[test]
fn the_upstream_operator_and_nodewright_run_agree_on_the_lifecycle_fleet() {
    let Some(manager) = std::env::var_os("NODEWRIGHT_UPSTREAM_MANAGER").map(PathBuf::from) else {
        println!("SKIP: NODEWRIGHT_UPSTREAM_MANAGER names no upstream manager");
        return;
    };
    for tool in ["kubectl", "python3"] {
        if which(tool).is_none() {
            println!("SKIP: {tool} is not on PATH");
            return;
        }
    }
    let out = Command::new(root().join("ci/upstream-compare"))
        .arg("--manager")
        .arg(&manager)
        .args([
            "--fleet",
            "ci/compare/lifecycle/fleet.yaml",
            "--repo",
            "ci/compare/lifecycle/repo",
            "--rev",
            "v1",
            "--speed",
            "10",
        ])
        .current_dir(root())
        .env("NODEWRIGHT", env!("CARGO_BIN_EXE_nodewright"))
        .output()
        .expect("ci/upstream-compare runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        stdout.trim_end().lines().last(),
        Some("unexplained divergences: 0"),
        "{stdout}"
    );
    assert_eq!(out.status.code(), Some(0));
}
