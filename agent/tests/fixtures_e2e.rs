//! Fixture packages (spec §18 shapes) run end to end against a sandbox root without chroot;
//! each test asserts the files, flags, logs and exit codes a user would observe.

mod common;

use common::*;
use serde_json::json;

fn read(p: std::path::PathBuf) -> String {
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn ok(r: &Run) {
    assert_eq!(r.code, 0, "stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
}

/// F1: one dispatcher for every stage, configmap-driven, env arguments, root_dir overlay,
/// service interrupt, uninstall with flag removal.
#[test]
fn shellscript_package_runs_its_whole_lifecycle() {
    let mut sb = Sandbox::new();
    sb.install_fixture("shellscript");
    sb.set("DEMO_ARG", "from-agent-env")
        .set("SKYHOOK_NODE_ORDER", "4");
    std::fs::write(sb.copy().join("configmaps/setting"), "fast").unwrap();

    ok(&sb.run("apply"));
    // root_dir overlay and configmap-driven step.
    assert_eq!(
        read(sb.host("/etc/shellscript/overlay.conf")),
        "enabled=true\n"
    );
    assert_eq!(read(sb.host("/var/lib/shellscript/stages")), "applied\n");
    // env: arguments come from the agent environment; step env wins inside the step.
    let env = read(sb.host("/var/lib/shellscript/env.txt"));
    assert!(env.contains("args=from-agent-env literal\n"), "{env}");
    assert!(
        env.contains("STEP_VAR=from-config\n") && env.contains("DEMO_ARG=overridden-by-step-env\n"),
        "{env}"
    );
    assert!(
        env.contains(&format!("SKYHOOK_RESOURCE_ID={RESOURCE_ID}\n"))
            && env.contains("SKYHOOK_NODE_ORDER=4\n"),
        "{env}"
    );
    // Flags: same script, distinct arguments → distinct flags; raw env: argument in the marker.
    let run_apply = sb.flag(
        "shellscript",
        "1.1.1",
        "shellscript_run.sh",
        &["apply"],
        &[0],
    );
    let show_env = sb.flag(
        "shellscript",
        "1.1.1",
        "show_env.sh",
        &["env:DEMO_ARG", "literal"],
        &[0],
    );
    assert!(show_env.ends_with("show_env.sh_WydlbnY6REVNT19BUkcnLCAnbGl0ZXJhbCddX1swXQ=="));
    assert!(read(run_apply.clone()).ends_with("step_always_runs: True"));
    assert!(read(show_env.clone()).ends_with("step_always_runs: False"));
    assert!(sb.flags_dir().join("START").exists());

    ok(&sb.run("apply-check"));
    assert!(sb.flags_dir().join("apply-check_ALL_CHECKED").exists());
    assert_eq!(
        read(sb.flags_dir().join("check_results")),
        "shellscript_run.sh False\nshow_env_check.sh False"
    );
    assert_eq!(
        sb.history("shellscript").unwrap()["current-version"],
        "1.1.1"
    );

    // Re-apply: the idempotence:true step re-runs, the auto one is skipped.
    let r = sb.run("apply");
    ok(&r);
    assert_eq!(
        read(sb.host("/var/lib/shellscript/stages")),
        "applied\napplied\n"
    );
    assert!(
        r.stdout.contains("Skipping show_env.sh because"),
        "{}",
        r.stdout
    );

    ok(&sb.run("config"));
    ok(&sb.run("config-check"));
    assert_eq!(read(sb.host("/etc/shellscript/setting")), "fast");
    assert!(sb.flags_dir().join("config-check_ALL_CHECKED").exists());

    sb.host_command("/usr/bin/systemctl", &record("systemctl $*"));
    ok(&sb.interrupt(r#"{"type": "service_restart", "services": ["containerd", "kubelet"]}"#));
    assert_eq!(
        sb.calls(),
        [
            "systemctl daemon-reload",
            "systemctl restart containerd",
            "systemctl restart kubelet"
        ]
    );
    // Same generation re-run: nothing repeats.
    ok(&sb.interrupt(r#"{"type": "service_restart", "services": ["containerd", "kubelet"]}"#));
    assert_eq!(sb.calls().len(), 3);

    ok(&sb.run("post-interrupt"));
    ok(&sb.run("post-interrupt-check"));
    assert!(
        sb.flags_dir()
            .join("post-interrupt-check_ALL_CHECKED")
            .exists()
    );

    ok(&sb.run("uninstall"));
    let uninstall_flag = sb.flag(
        "shellscript",
        "1.1.1",
        "shellscript_run.sh",
        &["uninstall"],
        &[0],
    );
    assert!(uninstall_flag.exists());
    ok(&sb.run("uninstall-check"));
    for f in [&run_apply, &show_env, &uninstall_flag] {
        assert!(
            !f.exists(),
            "{} should be removed after uninstall-check",
            f.display()
        );
    }
    let h = sb.history("shellscript").unwrap();
    assert_eq!(h["current-version"], "uninstalled");
    // root_dir files, interrupt flags, START and logs stay.
    assert!(sb.host("/etc/shellscript/overlay.conf").exists());
    assert!(
        sb.interrupt_flags()
            .join("service_restart_2.complete")
            .exists()
    );
    assert!(!sb.logs(&format!("{LOG_DIR}/shellscript/1.1.1")).is_empty());
}

/// Checks that fail: every check runs, results recorded, exit 1; passing later writes
/// ALL_CHECKED and history.
#[test]
fn failing_checks_report_all_results_and_pass_once_fixed() {
    let sb = Sandbox::new();
    sb.install_fixture("checks-fail");
    ok(&sb.run("apply"));
    let r = sb.run("apply-check");
    assert_eq!(r.code, 1);
    assert_eq!(
        read(sb.flags_dir().join("check_results")),
        "install_check.sh False\nready_check.sh True\nlast_check.sh False"
    );
    assert_eq!(read(sb.host("/opt/checks-fail/last_check_runs")), "ran\n");
    assert!(!sb.flags_dir().join("apply-check_ALL_CHECKED").exists());
    assert!(sb.history("checks-fail").is_none());
    let err_logs = sb.logs(&format!("{LOG_DIR}/checks-fail/0.1.0"));
    assert!(
        err_logs
            .iter()
            .any(|(n, c)| n.starts_with("ready_check.sh-")
                && n.ends_with(".err")
                && c.contains("node not ready"))
    );
    // Checks never write flags.
    assert!(
        !sb.flag("checks-fail", "0.1.0", "ready_check.sh", &[], &[0])
            .exists()
    );

    std::fs::create_dir_all(sb.host("/etc/checks-fail")).unwrap();
    std::fs::write(sb.host("/etc/checks-fail/ready"), "").unwrap();
    ok(&sb.run("apply-check"));
    assert!(sb.flags_dir().join("apply-check_ALL_CHECKED").exists());
    assert_eq!(
        sb.history("checks-fail").unwrap()["current-version"],
        "0.1.0"
    );
}

/// F5 + F4: expected configmaps, helper trees, CR env pass-through, config name ≠ CR key, a
/// flag marker containing `/`, and a post-interrupt check that passes only after a reboot.
#[test]
fn nvidia_setup_package_needs_configmaps_and_completes_through_a_reboot() {
    let mut sb = Sandbox::new();
    sb.set("SKYHOOK_RESOURCE_ID", "gpu-9f3e-2_nvidia-setup_0.2.1");
    sb.set("NVIDIA_SETUP_INSTALL_KERNEL", "true");
    sb.install_fixture("nvidia-setup");

    let r = sb.run("apply");
    assert_eq!(r.code, 1);
    assert!(
        r.stderr
            .contains("Expected config file service not found in configmaps directory."),
        "{}",
        r.stderr
    );
    assert!(
        !sb.flags_dir().join("START").exists(),
        "validation errors come before START"
    );

    std::fs::create_dir_all(sb.copy().join("configmaps")).unwrap();
    std::fs::write(sb.copy().join("configmaps/service"), "gke").unwrap();
    std::fs::write(sb.copy().join("configmaps/accelerator"), "h100").unwrap();
    ok(&sb.run("apply"));
    assert_eq!(
        read(sb.host("/etc/nvidia-setup/driver")),
        "driver=550 service=gke\ninstall_kernel=true\n"
    );
    // Step flags follow config.json's package_name; the `??` argument's marker contains `/`.
    let tune = sb.flag("nvidia_setup", "0.2.1", "steps/tune.sh", &["??"], &[0]);
    assert!(
        tune.display()
            .to_string()
            .ends_with("steps/tune.sh_Wyc/PyddX1swXQ=="),
        "{}",
        tune.display()
    );
    assert!(tune.is_file());
    ok(&sb.run("apply-check"));

    sb.host_command(
        "/sbin/reboot",
        &format!("{}\nkill -TERM $$", record("reboot")),
    );
    ok(&sb.interrupt(r#"{"type": "node_restart"}"#));
    let d = sb.host(&format!(
        "{ROOT_DIR}/interrupts/flags/gpu-9f3e-2_nvidia-setup_0.2.1"
    ));
    assert!(d.join("node_restart_0.pending").exists());
    // Interrupt logs follow the CR key, not the config name.
    assert_eq!(
        sb.logs(&format!("{LOG_DIR}/nvidia-setup/0.2.1/interrupts"))
            .len(),
        2
    );

    assert_eq!(
        sb.run("post-interrupt-check").code,
        1,
        "boot id unchanged: not rebooted yet"
    );
    sb.set_boot_id("boot-after");
    ok(&sb.interrupt(r#"{"type": "node_restart"}"#));
    assert!(d.join("node_restart_0.complete").exists());
    ok(&sb.run("post-interrupt-check"));
    assert_eq!(sb.calls(), ["reboot"]);
}

/// Upgrade steps receive versions; flags keyed by the new version; history moves forward.
#[test]
fn upgrade_package_migrates_from_the_recorded_version() {
    let sb = Sandbox::new();
    sb.install_fixture("upgrade");
    let hist = sb.host(&format!("{ROOT_DIR}/history/upgrader.json"));
    std::fs::create_dir_all(hist.parent().unwrap()).unwrap();
    std::fs::write(&hist, r#"{"current-version": "1.4.0", "history": [{"version": "1.4.0", "time": "2026-01-01T00:00:00+00:00"}]}"#).unwrap();
    ok(&sb.run("upgrade"));
    assert_eq!(
        read(sb.host("/opt/upgrader/migrations")),
        "from=1.4.0 to=2.0.0 env=1.4.0->2.0.0\n"
    );
    assert!(
        sb.flag("upgrader", "2.0.0", "migrate.sh", &[], &[0])
            .exists()
    );
    // upgrade ignores flags: a second run migrates again.
    ok(&sb.run("upgrade"));
    assert_eq!(read(sb.host("/opt/upgrader/migrations")).lines().count(), 2);
    ok(&sb.run("upgrade-check"));
    let h = sb.history("upgrader").unwrap();
    assert_eq!(h["current-version"], "2.0.0");
    assert_eq!(h["history"][1]["version"], "1.4.0");
    assert!(sb.flags_dir().join("upgrade-check_ALL_CHECKED").exists());
}

/// §10.3 / §16 Q1: the real exit status is compared with `returncodes`.
#[test]
fn returncodes_compare_the_real_exit_status() {
    let sb = Sandbox::new();
    let mut two = step("two.sh", &[], true);
    two["returncodes"] = json!([0, 2]);
    let mut three = step("three.sh", &[], true);
    three["returncodes"] = json!([1]);
    sb.write_config(&config(
        "rc",
        "1.0.0",
        json!({"apply": [two], "apply-check": [three]}),
    ));
    sb.script("two.sh", "exit 2");
    sb.script("three.sh", "exit 3");
    ok(&sb.run("apply"));
    assert!(
        sb.flag("rc", "1.0.0", "two.sh", &[], &[0, 2])
            .display()
            .to_string()
            .ends_with("two.sh_W11fWzAsIDJd")
    );
    assert!(sb.flag("rc", "1.0.0", "two.sh", &[], &[0, 2]).exists());
    let r = sb.run("apply-check");
    assert_eq!(r.code, 1);
    assert!(r.stdout.contains("FAILED: three.sh  3"), "{}", r.stdout);
}

/// Packages built on packages (§5.6): a config referencing scripts only the base provides.
#[test]
fn derived_package_uses_base_scripts_from_the_union_copy_dir() {
    let sb = Sandbox::new();
    sb.install_fixture("checks-fail");
    sb.write_config(&config(
        "derived",
        "0.2.0",
        json!({"apply": [step("install.sh", &[], false), step("extra.sh", &[], true)],
               "apply-check": [step("install_check.sh", &[], true)]}),
    ));
    sb.script("extra.sh", &record("extra"));
    ok(&sb.run("apply"));
    ok(&sb.run("apply-check"));
    assert_eq!(sb.calls(), ["extra"]);
    assert!(
        sb.flag("derived", "0.2.0", "install.sh", &[], &[0])
            .exists()
    );
}

/// The example package the simulator runs (`examples/packages/tuning`), full lifecycle.
#[test]
fn tuning_example_package_renders_configmaps_and_cleans_up() {
    let mut sb = Sandbox::new();
    sb.set("SKYHOOK_RESOURCE_ID", "nw-0b7c1a52-3_gpu-tuning_1.2.0");
    copy_tree(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/packages/tuning"),
        &sb.copy(),
    );
    std::fs::write(
        sb.copy().join("configmaps/ulimit.conf"),
        "* soft nofile 65536\n",
    )
    .unwrap();
    std::fs::write(
        sb.copy().join("configmaps/service_containerd.conf"),
        "[Service]\nLimitNOFILE=1048576\n",
    )
    .unwrap();

    for mode in ["apply", "apply-check", "config", "config-check"] {
        ok(&sb.run(mode));
    }
    let sysctl = read(sb.host("/etc/sysctl.d/99-gpu-tuning.conf"));
    assert!(
        sysctl.contains("vm.max_map_count=262144\nnet.core.somaxconn=4096\n"),
        "{sysctl}"
    );
    assert!(read(sb.host("/etc/security/limits.d/99-gpu-tuning.conf")).contains("nofile 65536"));
    assert!(
        read(sb.host("/etc/systemd/system/containerd.service.d/99-gpu-tuning.conf"))
            .contains("LimitNOFILE")
    );
    assert_eq!(sb.history("tuning").unwrap()["current-version"], "1.2.0");

    // A configmap change: new value rendered, removed key's drop-in deleted; check agrees.
    std::fs::write(
        sb.copy().join("configmaps/sysctl.conf"),
        "vm.swappiness=10\n",
    )
    .unwrap();
    std::fs::remove_file(sb.copy().join("configmaps/ulimit.conf")).unwrap();
    ok(&sb.run("config"));
    ok(&sb.run("config-check"));
    assert_eq!(
        read(sb.host("/etc/sysctl.d/99-gpu-tuning.conf"))
            .lines()
            .last(),
        Some("vm.swappiness=10")
    );
    assert!(
        !sb.host("/etc/security/limits.d/99-gpu-tuning.conf")
            .exists()
    );

    sb.host_command("/usr/sbin/service", &record("service $*"));
    ok(&sb.interrupt(r#"{"type": "restart_all_services"}"#));
    assert_eq!(sb.calls(), ["service procps force-reload"]);
    ok(&sb.run("post-interrupt"));
    ok(&sb.run("post-interrupt-check"));
    assert_eq!(
        read(sb.host("/var/lib/nodewright-tuning/gpu-tuning/active")),
        "vm.swappiness=10\n"
    );

    // apply is auto-idempotent: a second apply is skipped through its flag.
    let r = sb.run("apply");
    ok(&r);
    assert!(
        r.stdout.contains("Skipping install.sh because"),
        "{}",
        r.stdout
    );

    ok(&sb.run("uninstall"));
    ok(&sb.run("uninstall-check"));
    assert!(!sb.host("/etc/sysctl.d/99-gpu-tuning.conf").exists());
    assert!(!sb.host("/var/lib/nodewright-tuning/gpu-tuning").exists());
    assert!(!sb.flag("tuning", "1.2.0", "install.sh", &[], &[0]).exists());
    assert_eq!(
        sb.history("tuning").unwrap()["current-version"],
        "uninstalled"
    );
}

#[test]
fn validate_subcommand_accepts_the_example_and_rejects_broken_packages() {
    let sb = Sandbox::new();
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/packages/tuning");
    let r = sb.run_args(&["validate", example.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("OK: tuning 1.2.0"), "{}", r.stdout);
    let broken = sb.dir.path().join("broken");
    copy_tree(&example, &broken);
    std::fs::remove_file(broken.join("skyhook_dir/activate_check.sh")).unwrap();
    let r = sb.run_args(&["validate", broken.to_str().unwrap()]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("activate_check.sh"), "{}", r.stderr);
    assert!(
        !sb.root().join("var").exists(),
        "validate touches no host state"
    );
}

/// F7: steps write into the copy dir, and a mutating step runs in a check mode.
#[test]
fn steps_may_write_into_the_copy_dir_even_in_check_modes() {
    let sb = Sandbox::new();
    sb.write_config(&config(
        "gke",
        "0.1.1",
        json!({
            "config": [step("prepare.sh", &[], false), step("update.sh", &[], true)],
            "config-check": [step("prepare.sh", &[], false), step("update_check.sh", &[], true)]
        }),
    ));
    std::fs::create_dir_all(sb.copy().join("profiles/h100")).unwrap();
    std::fs::write(sb.copy().join("profiles/h100/sysctl.conf"), "x=1\n").unwrap();
    sb.script("prepare.sh", "mkdir -p \"$SKYHOOK_DIR/configmaps\"; cp \"$SKYHOOK_DIR/profiles/h100/sysctl.conf\" \"$SKYHOOK_DIR/configmaps/\"");
    sb.script(
        "update.sh",
        "cp \"$SKYHOOK_DIR/configmaps/sysctl.conf\" \"$NODEWRIGHT_HOST_ROOT/applied.conf\"",
    );
    sb.script(
        "update_check.sh",
        "cmp \"$SKYHOOK_DIR/configmaps/sysctl.conf\" \"$NODEWRIGHT_HOST_ROOT/applied.conf\"",
    );
    ok(&sb.run("config"));
    std::fs::remove_file(sb.copy().join("configmaps/sysctl.conf")).unwrap();
    ok(&sb.run("config-check"));
    assert_eq!(read(sb.copy().join("configmaps/sysctl.conf")), "x=1\n");
    assert_eq!(
        read(sb.flags_dir().join("check_results")),
        "prepare.sh False\nupdate_check.sh False"
    );
}
