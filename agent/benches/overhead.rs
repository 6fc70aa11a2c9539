//! Per-stage overhead of the agent on a no-op step (not a test). Run with
//! `cargo bench -p nodewright-agent --bench overhead`.
//!
//! Prints medians over many runs: process start → exit, config parse and validation, flag
//! handling, and a whole `apply` stage through the binary minus the no-op step's own cost.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nodewright_agent::config;
use nodewright_agent::flags;

const RUNS: usize = 60;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time_n(n: usize, mut f: impl FnMut()) -> Duration {
    median(
        (0..n)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .collect(),
    )
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let bin = env!("CARGO_BIN_EXE_nodewright-agent");
    // A sandbox on tmpfs separates the agent's cost from the disk's; set
    // NODEWRIGHT_BENCH_DIR to measure on a given filesystem instead.
    let base = std::env::var("NODEWRIGHT_BENCH_DIR").unwrap_or_else(|_| {
        if Path::new("/dev/shm").is_dir() {
            "/dev/shm".into()
        } else {
            std::env::temp_dir().display().to_string()
        }
    });
    let dir = tempfile::tempdir_in(&base).expect("tempdir");
    let root = dir.path().join("root");
    let copy_dir = "/var/lib/skyhook/bench/noop-1.0.0-uid-1";
    let pkg = root.join(copy_dir.trim_start_matches('/'));
    std::fs::create_dir_all(pkg.join("skyhook_dir")).expect("mkdir");
    // The no-op step is a copy of `true`: no shell start-up in the figure.
    let true_bin = ["/bin/true", "/usr/bin/true"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
        .expect("a `true` binary");
    for f in ["noop", "noop_check"] {
        std::fs::copy(true_bin, pkg.join("skyhook_dir").join(f)).expect("copy true");
    }
    let step = |p: &str| {
        serde_json::json!({"name": p, "path": p, "arguments": [], "returncodes": [0], "on_host": true,
                           "idempotence": true, "upgrade_step": false, "env": {}})
    };
    let cfg = serde_json::json!({"schema_version": "v1", "package_name": "noop", "package_version": "1.0.0",
        "expected_config_files": [], "modes": {"apply": [step("noop")], "apply-check": [step("noop_check")]}});
    std::fs::write(pkg.join("config.json"), cfg.to_string()).expect("write config");

    let agent = |mode: &str| {
        let st = Command::new(bin)
            .args([mode, root.to_str().expect("utf8"), copy_dir])
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("COPY_RESOLV", "false")
            .env("SKYHOOK_RESOURCE_ID", "bench-uid-1_noop_1.0.0")
            .env("SKYHOOK_ROOT_DIR", "/var/lib/skyhook/bench")
            .env("SKYHOOK_LOG_DIR", "/var/log/skyhook/bench")
            .env("NODEWRIGHT_AGENT_NO_CHROOT", "1")
            .env("NODEWRIGHT_AGENT_STEP_DELAY_MS", "0")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run agent");
        assert!(st.success(), "agent {mode} failed");
    };

    // Warm the page cache and the binary before measuring.
    for _ in 0..5 {
        agent("not-a-mode");
        agent("apply");
    }
    let start_exit = time_n(RUNS, || agent("not-a-mode"));
    let parse = time_n(RUNS * 10, || {
        config::load(&pkg).expect("valid config");
    });
    let flag = pkg.join("bench-flag");
    let flags_t = time_n(RUNS * 10, || {
        let s = config::Step::new("noop");
        let _ = flags::marker(&s.arguments, &s.returncodes);
        let _ = flag.exists();
        flags::write_flag(&flag, true).expect("write flag");
    });
    let now_t = time_n(RUNS * 10, || {
        let _ = nodewright_agent::timefmt::local_iso_now();
    });
    let write_t = time_n(RUNS * 10, || {
        std::fs::write(&flag, "x").expect("write");
    });
    let step_alone = time_n(RUNS, || {
        Command::new(pkg.join("skyhook_dir/noop"))
            .status()
            .expect("run noop");
    });
    let apply = time_n(RUNS, || agent("apply"));
    let check = time_n(RUNS, || agent("apply-check"));

    println!(
        "nodewright-agent per-stage overhead (median of {RUNS} runs, no-op step, no chroot, sandbox in {base})"
    );
    println!(
        "  start -> exit (unknown mode, no work)  {}",
        ms(start_exit)
    );
    println!("  config.json parse + validate           {}", ms(parse));
    println!("  flag marker + exists + write           {}", ms(flags_t));
    println!("    of which local timestamp             {}", ms(now_t));
    println!("    of which file write                  {}", ms(write_t));
    println!(
        "  no-op step exec alone                  {}",
        ms(step_alone)
    );
    println!("  apply stage, end to end                {}", ms(apply));
    println!("  apply-check stage, end to end          {}", ms(check));
    println!(
        "  => agent overhead per stage            {}  (apply minus the step itself)",
        ms(apply.saturating_sub(step_alone))
    );
    if let Ok(st) = Command::new("python3")
        .args(["-c", "pass"])
        .stdout(Stdio::null())
        .status()
        && st.success()
    {
        let py = time_n(20, || {
            Command::new("python3")
                .args(["-c", "pass"])
                .status()
                .expect("python3");
        });
        println!("  for reference: `python3 -c pass`       {}", ms(py));
    }
}
