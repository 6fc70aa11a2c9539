//! The production path: steps and interrupt commands run through `chroot` into a minimal
//! busybox root. Skipped (with a printed message) unless running as root with busybox-static
//! installed.

mod common;

use common::*;

fn ok(r: &Run) {
    assert_eq!(r.code, 0, "stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
}

#[test]
fn chroot_steps_see_host_paths_and_write_into_the_root() {
    let Some(sb) = Sandbox::chroot("chroot_steps_see_host_paths_and_write_into_the_root") else {
        return;
    };
    sb.write_config(&config(
        "pkg",
        "1.0.0",
        serde_json::json!({"apply": [step("a.sh", &["x"], false)], "apply-check": [step("a_check.sh", &[], false)]}),
    ));
    sb.script("a.sh", "echo \"$(pwd)|$SKYHOOK_DIR|$STEP_ROOT|$0|$*|${NODEWRIGHT_HOST_ROOT:-none}\" > /tmp/seen; echo hello");
    sb.script("a_check.sh", "test -f /tmp/seen");
    ok(&sb.run("apply"));
    ok(&sb.run("apply-check"));
    let seen = std::fs::read_to_string(sb.host("/tmp/seen")).unwrap();
    assert_eq!(
        seen.trim(),
        format!("{COPY_DIR}|{COPY_DIR}|{COPY_DIR}/skyhook_dir|{COPY_DIR}/skyhook_dir/a.sh|x|none")
    );
    assert!(sb.flag("pkg", "1.0.0", "a.sh", &["x"], &[0]).exists());
    let logs = sb.logs(&format!("{LOG_DIR}/pkg/1.0.0"));
    assert!(
        logs.iter()
            .any(|(n, c)| n.starts_with("a.sh-") && n.ends_with(".log") && c.contains(" hello\n"))
    );
}

#[test]
fn chroot_shellscript_fixture_applies_and_checks() {
    let Some(mut sb) = Sandbox::chroot("chroot_shellscript_fixture_applies_and_checks") else {
        return;
    };
    sb.install_fixture("shellscript");
    sb.set("DEMO_ARG", "v");
    for mode in [
        "apply",
        "apply-check",
        "config",
        "config-check",
        "uninstall",
        "uninstall-check",
    ] {
        ok(&sb.run(mode));
    }
    assert_eq!(
        std::fs::read_to_string(sb.host("/var/lib/shellscript/stages")).unwrap(),
        "applied\nconfigured\n"
    );
    assert!(sb.host("/etc/shellscript/overlay.conf").exists());
    assert_eq!(
        sb.history("shellscript").unwrap()["current-version"],
        "uninstalled"
    );
}

#[test]
fn chroot_service_interrupt_runs_the_roots_systemctl() {
    let Some(sb) = Sandbox::chroot("chroot_service_interrupt_runs_the_roots_systemctl") else {
        return;
    };
    std::fs::create_dir_all(sb.copy()).unwrap();
    sb.host_command(
        "/usr/bin/systemctl",
        "echo \"systemctl $*\" >> /tmp/calls.log",
    );
    ok(&sb.interrupt(r#"{"type": "service_restart", "services": ["containerd"]}"#));
    assert_eq!(
        sb.calls(),
        ["systemctl daemon-reload", "systemctl restart containerd"]
    );
}

#[test]
fn chroot_reboot_protocol_promotes_after_boot_id_change() {
    let Some(sb) = Sandbox::chroot("chroot_reboot_protocol_promotes_after_boot_id_change") else {
        return;
    };
    std::fs::create_dir_all(sb.copy()).unwrap();
    sb.host_command(
        "/sbin/reboot",
        "echo reboot >> /tmp/calls.log; kill -TERM $$",
    );
    ok(&sb.interrupt(r#"{"type": "node_restart"}"#));
    let d = sb.interrupt_flags();
    assert_eq!(
        std::fs::read_to_string(d.join("node_restart_0.pending")).unwrap(),
        "boot-aaaa"
    );
    sb.set_boot_id("boot-bbbb");
    ok(&sb.interrupt(r#"{"type": "node_restart"}"#));
    assert!(d.join("node_restart_0.complete").exists());
    assert_eq!(sb.calls(), ["reboot"]);
}

#[test]
fn chroot_tuning_example_runs_with_host_paths() {
    let Some(sb) = Sandbox::chroot("chroot_tuning_example_runs_with_host_paths") else {
        return;
    };
    copy_tree(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/packages/tuning"),
        &sb.copy(),
    );
    for mode in [
        "apply",
        "apply-check",
        "config",
        "config-check",
        "post-interrupt",
        "post-interrupt-check",
    ] {
        ok(&sb.run(mode));
    }
    assert!(
        std::fs::read_to_string(sb.host("/etc/sysctl.d/99-pkg.conf"))
            .unwrap()
            .contains("vm.max_map_count=262144")
    );
}

#[test]
fn chroot_as_non_root_fails_with_a_hint_at_sandbox_mode() {
    let Some(sb) = Sandbox::chroot("chroot_as_non_root_fails_with_a_hint_at_sandbox_mode") else {
        return;
    };
    if !std::path::Path::new("/usr/bin/setpriv").is_file() {
        println!("SKIP chroot_as_non_root_fails_with_a_hint_at_sandbox_mode: no setpriv");
        return;
    }
    sb.write_config(&config(
        "pkg",
        "1.0.0",
        serde_json::json!({"apply": [step("a.sh", &[], false)], "apply-check": [step("a_check.sh", &[], false)]}),
    ));
    sb.script("a.sh", "exit 0");
    sb.script("a_check.sh", "exit 0");
    // Hand the sandbox to an unprivileged user, who can then do everything but chroot.
    let st = std::process::Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(sb.dir.path())
        .status()
        .unwrap();
    assert!(st.success());
    let out = std::process::Command::new("/usr/bin/setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            env!("CARGO_BIN_EXE_nodewright-agent"),
        ])
        .args(["apply", sb.root().to_str().unwrap(), COPY_DIR])
        .env_clear()
        .envs(&sb.env)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    // The failure is the agent's one `ERROR:` line on stderr (docs/agent.md).
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("ERROR:") && l.contains("NODEWRIGHT_AGENT_NO_CHROOT=1")),
        "{stderr}"
    );
    assert!(!sb.flag("pkg", "1.0.0", "a.sh", &[], &[0]).exists());
}
