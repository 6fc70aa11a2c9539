//! Equivalents of the upstream agent helper and use-case tests (spec §17 items 13–15, 57–117
//! not covered by unit tests), driven through the real binary against a sandbox root.

mod common;

use common::*;
use serde_json::json;

/// A package with one apply step and one apply-check step that record their runs.
fn simple(sb: &Sandbox, apply_body: &str, check_body: &str) {
    sb.write_config(&config(
        "pkg",
        "1.0.0",
        json!({"apply": [step("apply.sh", &[], false)], "apply-check": [step("apply_check.sh", &[], false)]}),
    ));
    sb.script("apply.sh", apply_body);
    sb.script("apply_check.sh", check_body);
}

fn history_versions(h: &serde_json::Value) -> Vec<String> {
    h["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["version"].as_str().unwrap().to_string())
        .collect()
}

// §17.13
#[test]
fn missing_copy_dir_argument_is_an_error_and_nothing_runs() {
    let sb = Sandbox::new();
    simple(&sb, &record("apply"), "exit 0");
    let r = sb.run_args(&["apply"]);
    assert_eq!(r.code, 1);
    assert!(sb.calls().is_empty());
    assert!(!sb.flags_dir().join("START").exists());
}

// §17.14
#[test]
fn relative_copy_dir_fails_with_must_be_absolute_and_nothing_runs() {
    let sb = Sandbox::new();
    simple(&sb, &record("apply"), "exit 0");
    let rel = COPY_DIR.trim_start_matches('/');
    let r = sb.run_args(&["apply", sb.root().to_str().unwrap(), rel]);
    assert_eq!(r.code, 1);
    // An error is one `ERROR:` line on stderr (docs/agent.md).
    assert!(
        r.stderr
            .contains("ERROR: step apply.sh could not run: working directory")
            && r.stderr.contains("must be an absolute path"),
        "{}",
        r.stderr
    );
    assert!(sb.calls().is_empty());
}

// §17.15
#[test]
fn absolute_copy_dir_is_the_step_working_directory() {
    let sb = Sandbox::new();
    simple(&sb, "pwd > \"$SKYHOOK_DIR/pwd.txt\"", "exit 0");
    assert_eq!(sb.run("apply").code, 0);
    let pwd = std::fs::read_to_string(sb.copy().join("pwd.txt")).unwrap();
    assert_eq!(
        std::path::Path::new(pwd.trim()).canonicalize().unwrap(),
        sb.copy().canonicalize().unwrap()
    );
}

// §17.57
#[test]
fn interrupt_command_line_is_echoed_first_in_stdout_and_log() {
    let sb = Sandbox::new();
    sb.host_command("/usr/bin/systemctl", "echo ran");
    let r = sb.interrupt(r#"{"type": "service_restart", "services": ["containerd"]}"#);
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert!(
        r.stdout.contains("systemctl daemon-reload\n[out]"),
        "{}",
        r.stdout
    );
    let logs = sb.logs(&format!("{LOG_DIR}/pkg/1.0.0/interrupts"));
    let log0 = logs
        .iter()
        .find(|(n, _)| n.starts_with("service_restart_0-") && n.ends_with(".log"))
        .unwrap();
    assert_eq!(log0.1.lines().next(), Some("systemctl daemon-reload"));
}

// §17.58
#[test]
fn lines_longer_than_the_buffer_keep_their_line_structure() {
    let mut sb = Sandbox::new();
    sb.set("SKYHOOK_AGENT_BUFFER_LIMIT", "4");
    simple(&sb, "printf 'abcdefghij\\nxyz\\n'", "exit 0");
    assert_eq!(sb.run("apply").code, 0);
    let logs = sb.logs(&format!("{LOG_DIR}/pkg/1.0.0"));
    let (_, log) = logs
        .iter()
        .find(|(n, _)| n.starts_with("apply.sh-") && n.ends_with(".log"))
        .unwrap();
    let lines: Vec<&str> = log.split('\n').collect();
    assert_eq!(lines.len(), 3, "{log:?}");
    let text = |l: &str| l.split_once(' ').unwrap().1.to_string();
    assert!(lines.iter().all(|l| l.starts_with("[out]")), "{log:?}");
    assert_eq!(
        (text(lines[0]), text(lines[1]), text(lines[2])),
        ("abcdefghij".into(), "xyz".into(), "".into())
    );
}

// §17.60
#[test]
fn default_log_file_is_var_log_skyhook_package_version_step_timestamp() {
    let mut sb = Sandbox::new();
    sb.unset("SKYHOOK_LOG_DIR");
    simple(&sb, "echo hi", "exit 0");
    assert_eq!(sb.run("apply").code, 0);
    let logs = sb.logs("/var/log/skyhook/pkg/1.0.0");
    let names: Vec<&str> = logs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    let stamp = names[0]
        .strip_prefix("apply.sh-")
        .unwrap()
        .strip_suffix(".log")
        .unwrap();
    assert_eq!(stamp.len(), "2026-11-29-063944".len(), "{stamp}");
    assert_eq!(names[1], format!("{}.err", names[0]));
}

// §17.62
#[test]
fn successful_step_runs_from_skyhook_dir_with_env_chmod_and_logs() {
    let sb = Sandbox::new();
    simple(
        &sb,
        &format!(
            "{}\necho \"$STEP_ROOT|$SKYHOOK_DIR|$0|$*\" > \"$SKYHOOK_DIR/seen\"",
            record("apply")
        ),
        "exit 0",
    );
    sb.write_config(&config(
        "pkg",
        "1.0.0",
        json!({"apply": [step("apply.sh", &["a", "b"], false)], "apply-check": [step("apply_check.sh", &[], false)]}),
    ));
    let r = sb.run("apply");
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let seen = std::fs::read_to_string(sb.copy().join("seen")).unwrap();
    let copy = sb.copy().display().to_string();
    assert_eq!(
        seen.trim(),
        format!("{copy}/skyhook_dir|{copy}|{copy}/skyhook_dir/apply.sh|a b")
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(sb.copy().join("skyhook_dir/apply.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o111, 0o111);
    assert_eq!(sb.logs(&format!("{LOG_DIR}/pkg/1.0.0")).len(), 2);
    assert!(
        sb.flag("pkg", "1.0.0", "apply.sh", &["a", "b"], &[0])
            .is_file()
    );
}

// §17.63
#[test]
fn exit_1_with_returncodes_0_is_a_failure() {
    let sb = Sandbox::new();
    simple(&sb, "exit 1", "exit 0");
    let r = sb.run("apply");
    assert_eq!(r.code, 1);
    assert!(r.stdout.contains("FAILED: apply.sh  1"), "{}", r.stdout);
    assert!(!sb.flag("pkg", "1.0.0", "apply.sh", &[], &[0]).exists());
}

// §17.65
#[test]
fn two_missing_env_variables_print_a_message_each_and_nothing_runs() {
    let sb = Sandbox::new();
    sb.write_config(&config(
        "pkg",
        "1.0.0",
        json!({"apply": [step("apply.sh", &["env:MISSING_A", "env:MISSING_B"], false)], "apply-check": [step("apply_check.sh", &[], false)]}),
    ));
    sb.script("apply.sh", &record("apply"));
    sb.script("apply_check.sh", "exit 0");
    let r = sb.run("apply");
    assert_eq!(r.code, 1);
    assert!(
        r.stdout
            .contains("apply.sh: Expected environment variable did not exist: MISSING_A"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("apply.sh: Expected environment variable did not exist: MISSING_B")
    );
    assert!(sb.calls().is_empty());
}

// §17.68 (the upstream no-op writer stands in for absent log files)
#[test]
fn output_without_log_files_goes_to_the_console_only() {
    let mut sb = Sandbox::new();
    sb.set("SKYHOOK_AGENT_WRITE_LOGS", "false");
    simple(&sb, "echo console-only", "exit 0");
    let r = sb.run("apply");
    assert_eq!(r.code, 0);
    assert!(
        r.stdout
            .lines()
            .any(|l| l.starts_with("[out]") && l.ends_with(" console-only")),
        "{}",
        r.stdout
    );
    assert!(!sb.host(LOG_DIR).exists());
}

// §17.69
#[test]
fn interrupt_mode_bootstraps_the_copy_dir_before_the_interrupt() {
    let mut sb = Sandbox::new();
    let data = sb.dir.path().join("data");
    std::fs::create_dir_all(data.join("skyhook_dir")).unwrap();
    std::fs::write(data.join("config.json"), "{}").unwrap();
    sb.set("SKYHOOK_DATA_DIR", data.to_str().unwrap());
    let r = sb.interrupt(r#"{"type": "no_op"}"#);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(sb.copy().join("config.json").is_file());
    assert!(sb.interrupt_flags().join("no_op.complete").is_file());
}

fn uninstall_pkg(sb: &Sandbox, check_body: &str) {
    sb.write_config(&config(
        "pkg",
        "1.0.0",
        json!({
            "apply": [step("apply.sh", &["x"], false)], "apply-check": [step("apply_check.sh", &[], false)],
            "uninstall": [step("uninstall.sh", &[], true)], "uninstall-check": [step("uninstall_check.sh", &[], true)]
        }),
    ));
    for s in ["apply.sh", "apply_check.sh", "uninstall.sh"] {
        sb.script(s, "exit 0");
    }
    sb.script("uninstall_check.sh", check_body);
}

// §17.70
#[test]
fn successful_uninstall_check_deletes_the_configs_step_flags_and_keeps_unrelated_ones() {
    let sb = Sandbox::new();
    uninstall_pkg(&sb, "exit 0");
    assert_eq!(sb.run("apply").code, 0);
    assert_eq!(sb.run("uninstall").code, 0);
    let unrelated = sb.flag("pkg", "1.0.0", "other.sh", &[], &[0]);
    std::fs::write(&unrelated, "").unwrap();
    let apply_flag = sb.flag("pkg", "1.0.0", "apply.sh", &["x"], &[0]);
    let uninstall_flag = sb.flag("pkg", "1.0.0", "uninstall.sh", &[], &[0]);
    assert!(apply_flag.exists() && uninstall_flag.exists());
    assert_eq!(sb.run("uninstall-check").code, 0);
    assert!(!apply_flag.exists() && !uninstall_flag.exists());
    assert!(unrelated.exists());
    assert!(sb.flags_dir().join("START").exists());
}

// §17.71
#[test]
fn failed_uninstall_check_deletes_nothing() {
    let sb = Sandbox::new();
    uninstall_pkg(&sb, "exit 1");
    assert_eq!(sb.run("apply").code, 0);
    assert_eq!(sb.run("uninstall-check").code, 1);
    assert!(sb.flag("pkg", "1.0.0", "apply.sh", &["x"], &[0]).exists());
    assert!(sb.history("pkg").is_none());
}

// §17.72
#[test]
fn apply_check_creates_history_with_one_entry() {
    let sb = Sandbox::new();
    simple(&sb, "exit 0", "exit 0");
    assert_eq!(sb.run("apply-check").code, 0);
    let h = sb.history("pkg").unwrap();
    assert_eq!(h["current-version"], "1.0.0");
    assert_eq!(history_versions(&h), ["1.0.0"]);
    let time = h["history"][0]["time"].as_str().unwrap();
    assert!(time.ends_with("+00:00") && time.contains('T'), "{time}");
    let raw = std::fs::read_to_string(sb.host(&format!("{ROOT_DIR}/history/pkg.json"))).unwrap();
    assert!(
        raw.starts_with(
            r#"{"current-version": "1.0.0", "history": [{"version": "1.0.0", "time": ""#
        ),
        "{raw}"
    );
}

// §17.73
#[test]
fn failed_apply_check_writes_no_history() {
    let sb = Sandbox::new();
    simple(&sb, "exit 0", "exit 1");
    assert_eq!(sb.run("apply-check").code, 1);
    assert!(sb.history("pkg").is_none());
}

// §17.74
#[test]
fn corrupt_history_is_backed_up_and_a_fresh_history_written() {
    let sb = Sandbox::new();
    simple(&sb, "exit 0", "exit 0");
    let hist = sb.host(&format!("{ROOT_DIR}/history/pkg.json"));
    std::fs::create_dir_all(hist.parent().unwrap()).unwrap();
    std::fs::write(&hist, "{not json").unwrap();
    assert_eq!(sb.run("apply-check").code, 0);
    assert_eq!(
        std::fs::read_to_string(hist.with_extension("json.backup")).unwrap(),
        "{not json"
    );
    assert_eq!(history_versions(&sb.history("pkg").unwrap()), ["1.0.0"]);
}

fn seed_history(sb: &Sandbox, version: &str) {
    let hist = sb.host(&format!("{ROOT_DIR}/history/pkg.json"));
    std::fs::create_dir_all(hist.parent().unwrap()).unwrap();
    std::fs::write(
        &hist,
        format!(r#"{{"current-version": "{version}", "history": [{{"version": "{version}", "time": "2026-01-01T00:00:00+00:00"}}]}}"#),
    )
    .unwrap();
}

// §17.75
#[test]
fn apply_check_over_0_0_9_prepends_1_0_0() {
    let sb = Sandbox::new();
    simple(&sb, "exit 0", "exit 0");
    seed_history(&sb, "0.0.9");
    assert_eq!(sb.run("apply-check").code, 0);
    let h = sb.history("pkg").unwrap();
    assert_eq!(history_versions(&h), ["1.0.0", "0.0.9"]);
    assert_eq!(h["current-version"], "1.0.0");
}

fn upgrade_pkg(sb: &Sandbox, upgrade_step: bool) {
    let mut up = step("upgrade.sh", &[], true);
    up["upgrade_step"] = json!(upgrade_step);
    sb.write_config(&config(
        "pkg",
        "1.0.0",
        json!({
            "apply": [step("apply.sh", &[], true)], "apply-check": [step("apply_check.sh", &[], true)],
            "upgrade": [up], "upgrade-check": [step("upgrade_check.sh", &[], true)]
        }),
    ));
    sb.script("apply.sh", "exit 0");
    sb.script("apply_check.sh", "exit 0");
    sb.script(
        "upgrade.sh",
        &record("upgrade $PREVIOUS_VERSION $CURRENT_VERSION args:$*"),
    );
    sb.script(
        "upgrade_check.sh",
        &record("check $PREVIOUS_VERSION $CURRENT_VERSION args:$*"),
    );
}

// §17.76
#[test]
fn upgrade_check_creates_history() {
    let sb = Sandbox::new();
    upgrade_pkg(&sb, false);
    assert_eq!(sb.run("upgrade-check").code, 0);
    assert_eq!(history_versions(&sb.history("pkg").unwrap()), ["1.0.0"]);
}

// §17.77
#[test]
fn upgrade_check_over_0_0_9_prepends_1_0_0() {
    let sb = Sandbox::new();
    upgrade_pkg(&sb, false);
    seed_history(&sb, "0.0.9");
    assert_eq!(sb.run("upgrade-check").code, 0);
    assert_eq!(sb.calls(), ["check 0.0.9 1.0.0 args:"]);
    assert_eq!(
        history_versions(&sb.history("pkg").unwrap()),
        ["1.0.0", "0.0.9"]
    );
}

// §17.78
#[test]
fn uninstall_check_over_0_0_9_makes_uninstalled_current() {
    let sb = Sandbox::new();
    uninstall_pkg(&sb, "exit 0");
    seed_history(&sb, "0.0.9");
    assert_eq!(sb.run("uninstall-check").code, 0);
    let h = sb.history("pkg").unwrap();
    assert_eq!(h["current-version"], "uninstalled");
    assert_eq!(history_versions(&h), ["uninstalled", "0.0.9"]);
}

// §17.79
#[test]
fn upgrade_with_history_0_0_9_sets_version_env_without_extra_args() {
    let sb = Sandbox::new();
    upgrade_pkg(&sb, false);
    seed_history(&sb, "0.0.9");
    assert_eq!(sb.run("upgrade").code, 0);
    assert_eq!(sb.calls(), ["upgrade 0.0.9 1.0.0 args:"]);
}

// §17.80
#[test]
fn upgrade_step_with_history_2024_07_28_gets_versions_as_arguments() {
    let sb = Sandbox::new();
    upgrade_pkg(&sb, true);
    seed_history(&sb, "2024.07.28");
    assert_eq!(sb.run("upgrade").code, 0);
    assert_eq!(
        sb.calls(),
        ["upgrade 2024.07.28 1.0.0 args:2024.07.28 1.0.0"]
    );
    // The flag uses the arguments before appending.
    assert!(sb.flag("pkg", "1.0.0", "upgrade.sh", &[], &[0]).exists());
}

// §17.81
#[test]
fn upgrade_without_history_has_previous_version_unknown() {
    let sb = Sandbox::new();
    upgrade_pkg(&sb, false);
    let r = sb.run("upgrade");
    assert_eq!(r.code, 0);
    assert_eq!(sb.calls(), ["upgrade unknown 1.0.0 args:"]);
    assert!(
        r.stdout
            .contains("no existing history found for pkg, could be first installation..."),
        "{}",
        r.stdout
    );
}

// §17.82
#[test]
fn apply_exports_step_root_and_skyhook_dir_and_runs_the_step_under_skyhook_dir() {
    let sb = Sandbox::new();
    sb.write_config(&config(
        "pkg",
        "1.0.0",
        json!({"apply": [step("bar", &[], true)], "apply-check": [step("bar_check", &[], true)]}),
    ));
    sb.script("bar", &record("$0 $STEP_ROOT $SKYHOOK_DIR"));
    sb.script("bar_check", "exit 0");
    assert_eq!(sb.run("apply").code, 0);
    let c = sb.copy().display().to_string();
    assert_eq!(
        sb.calls(),
        [format!("{c}/skyhook_dir/bar {c}/skyhook_dir {c}")]
    );
}

// §17.83
#[test]
fn unknown_mode_warns_with_the_supported_modes_and_touches_nothing() {
    let sb = Sandbox::new();
    simple(&sb, &record("apply"), "exit 0");
    let r = sb.run("reboot-now");
    assert_eq!(r.code, 0);
    assert!(
        r.stderr.contains("This version of the Agent doesn't support the reboot-now mode. Options are: uninstall,uninstall-check,upgrade,upgrade-check,apply,apply-check,config,config-check,interrupt,post-interrupt,post-interrupt-check."),
        "{}",
        r.stderr
    );
    assert!(!sb.host(ROOT_DIR).join("flags").exists());
}

// §17.84
#[test]
fn valid_mode_prints_no_unsupported_mode_warning() {
    let sb = Sandbox::new();
    simple(&sb, "exit 0", "exit 0");
    let r = sb.run("apply");
    assert_eq!(r.code, 0);
    assert!(!r.stderr.contains("doesn't support"), "{}", r.stderr);
}

// §17.85
#[test]
fn config_with_no_config_steps_warns_no_op() {
    let sb = Sandbox::new();
    simple(&sb, "exit 0", "exit 0");
    let r = sb.run("config");
    assert_eq!(r.code, 0);
    assert!(
        r.stderr
            .contains("There are no config steps defined. This will be ran as a no-op."),
        "{}",
        r.stderr
    );
    assert!(sb.flags_dir().join("START").exists());
}

// §17.86
#[test]
fn apply_with_steps_prints_no_no_op_warning() {
    let sb = Sandbox::new();
    simple(&sb, "exit 0", "exit 0");
    let r = sb.run("apply");
    assert!(!r.stderr.contains("no-op"), "{}", r.stderr);
    assert_eq!(r.code, 0);
}

// §17.87
#[test]
fn config_with_steps_prints_no_no_op_warning() {
    let sb = Sandbox::new();
    sb.write_config(&config(
        "pkg",
        "1.0.0",
        json!({"config": [step("c.sh", &[], true)], "config-check": [step("c_check.sh", &[], true)]}),
    ));
    sb.script("c.sh", "exit 0");
    sb.script("c_check.sh", "exit 0");
    let r = sb.run("config");
    assert_eq!(r.code, 0);
    assert!(!r.stderr.contains("no-op"), "{}", r.stderr);
}

fn two_step(sb: &Sandbox, a: serde_json::Value, b: serde_json::Value) {
    sb.write_config(&config(
        "pkg",
        "1.0.0",
        json!({"apply": [a, b], "apply-check": [step("s_check.sh", &[], true)]}),
    ));
    sb.script("s.sh", &record("s $*"));
    sb.script("t.sh", &record("t $*"));
    sb.script("s_check.sh", "exit 0");
}

// §17.88
#[test]
fn same_path_with_different_arguments_runs_both() {
    let sb = Sandbox::new();
    two_step(
        &sb,
        step("s.sh", &["1"], false),
        step("s.sh", &["2"], false),
    );
    assert_eq!(sb.run("apply").code, 0);
    assert_eq!(sb.calls(), ["s 1", "s 2"]);
    assert!(sb.flag("pkg", "1.0.0", "s.sh", &["1"], &[0]).exists());
    assert!(sb.flag("pkg", "1.0.0", "s.sh", &["2"], &[0]).exists());
}

// §17.89
#[test]
fn flag_on_the_first_of_two_steps_runs_only_the_second() {
    let sb = Sandbox::new();
    two_step(&sb, step("s.sh", &["1"], false), step("t.sh", &[], false));
    let f = sb.flag("pkg", "1.0.0", "s.sh", &["1"], &[0]);
    std::fs::create_dir_all(f.parent().unwrap()).unwrap();
    std::fs::write(&f, "").unwrap();
    let r = sb.run("apply");
    assert_eq!(r.code, 0);
    assert_eq!(sb.calls(), ["t "]);
    assert!(
        r.stdout
            .contains(&format!("Skipping s.sh because {} exists.", f.display())),
        "{}",
        r.stdout
    );
}

// §17.90
#[test]
fn always_run_runs_both_steps_despite_flags() {
    let mut sb = Sandbox::new();
    two_step(&sb, step("s.sh", &["1"], false), step("t.sh", &[], false));
    assert_eq!(sb.run("apply").code, 0);
    sb.set("OVERLAY_ALWAYS_RUN_STEP", "True");
    let r = sb.run("apply");
    assert_eq!(r.code, 0);
    assert_eq!(sb.calls(), ["s 1", "t ", "s 1", "t "]);
    assert!(r.stdout.contains("OVERLAY_ALWAYS_RUN_STEP"), "{}", r.stdout);
}

// §17.91
#[test]
fn second_of_three_failing_stops_before_the_third() {
    let sb = Sandbox::new();
    sb.write_config(&config(
        "pkg",
        "1.0.0",
        json!({"apply": [step("a.sh", &[], true), step("b.sh", &[], true), step("c.sh", &[], true)],
               "apply-check": [step("a_check.sh", &[], true)]}),
    ));
    sb.script("a.sh", &record("a"));
    sb.script("b.sh", &format!("{}\nexit 1", record("b")));
    sb.script("c.sh", &record("c"));
    sb.script("a_check.sh", "exit 0");
    assert_eq!(sb.run("apply").code, 1);
    assert_eq!(sb.calls(), ["a", "b"]);
    assert!(sb.flag("pkg", "1.0.0", "a.sh", &[], &[0]).exists());
    assert!(!sb.flag("pkg", "1.0.0", "b.sh", &[], &[0]).exists());
}

// §17.92
#[test]
fn apply_check_without_steps_succeeds_without_all_checked() {
    let sb = Sandbox::new();
    sb.write_config(&config(
        "pkg",
        "1.0.0",
        json!({"config": [step("c.sh", &[], true)], "config-check": [step("c_check.sh", &[], true)]}),
    ));
    sb.script("c.sh", "exit 0");
    sb.script("c_check.sh", "exit 0");
    assert_eq!(sb.run("apply-check").code, 0);
    assert!(!sb.flags_dir().join("apply-check_ALL_CHECKED").exists());
    assert!(!sb.flags_dir().join("check_results").exists());
    assert_eq!(history_versions(&sb.history("pkg").unwrap()), ["1.0.0"]);
}

// §17.94
#[test]
fn one_failing_check_of_three_runs_all_and_fails_without_all_checked() {
    let sb = Sandbox::new();
    sb.write_config(&config(
        "pkg",
        "1.0.0",
        json!({"apply": [step("a.sh", &[], true)],
               "apply-check": [step("a_check.sh", &[], true), step("b_check.sh", &[], true), step("c_check.sh", &[], true)]}),
    ));
    sb.script("a.sh", "exit 0");
    sb.script("a_check.sh", &record("a"));
    sb.script("b_check.sh", &format!("{}\nexit 3", record("b")));
    sb.script("c_check.sh", &record("c"));
    assert_eq!(sb.run("apply-check").code, 1);
    assert_eq!(sb.calls(), ["a", "b", "c"]);
    assert_eq!(
        std::fs::read_to_string(sb.flags_dir().join("check_results")).unwrap(),
        "a_check.sh False\nb_check.sh True\nc_check.sh False"
    );
    assert!(!sb.flags_dir().join("apply-check_ALL_CHECKED").exists());
}

// §17.95
#[test]
fn real_script_output_on_both_streams_is_prefixed_and_logged() {
    let sb = Sandbox::new();
    sb.write_config(&config("pkg", "1.0.0", json!({"apply": [step("foo.sh", &[], true)], "apply-check": [step("foo_check.sh", &[], true)]})));
    sb.script("foo.sh", "echo 1; echo 2; echo e1 >&2");
    sb.script("foo_check.sh", "exit 0");
    let r = sb.run("apply");
    assert_eq!(r.code, 0);
    assert!(
        r.stdout
            .trim_end_matches('\n')
            .ends_with("SUCEEDED: foo.sh "),
        "{:?}",
        r.stdout
    );
    assert!(
        r.stderr.contains("[err]") && r.stderr.contains(" e1\n"),
        "{}",
        r.stderr
    );
    let logs = sb.logs(&format!("{LOG_DIR}/pkg/1.0.0"));
    let out = &logs.iter().find(|(n, _)| n.ends_with(".log")).unwrap().1;
    let err = &logs
        .iter()
        .find(|(n, _)| n.ends_with(".log.err"))
        .unwrap()
        .1;
    let is_ts = |l: &str, label: &str, body: &str| {
        let rest = l.strip_prefix(label).unwrap_or("");
        let (ts, b) = rest.split_once(' ').unwrap_or(("", "x"));
        ts.len() >= 19 && &ts[10..11] == "T" && b == body
    };
    let lines: Vec<&str> = out.split('\n').collect();
    assert!(lines.len() == 3 || lines.len() == 4, "{out:?}");
    // Output may arrive as one chunk or two; either way each line is prefixed and a dangling
    // prefix ends the log.
    let bodies: Vec<&str> = lines
        .iter()
        .map(|l| l.split_once(' ').map_or("", |x| x.1))
        .collect();
    assert_eq!(
        bodies
            .iter()
            .filter(|b| !b.is_empty())
            .copied()
            .collect::<Vec<_>>(),
        ["1", "2"],
        "{out:?}"
    );
    assert!(is_ts(lines[0], "[out]", "1"), "{out:?}");
    assert!(is_ts(lines.last().unwrap(), "[out]", ""), "{out:?}");
    assert!(
        is_ts(err.split('\n').next().unwrap(), "[err]", "e1"),
        "{err:?}"
    );
}

// §17.97
#[test]
fn with_all_flags_set_only_the_idempotence_disabled_step_runs() {
    let sb = Sandbox::new();
    two_step(&sb, step("s.sh", &[], false), step("t.sh", &[], true));
    assert_eq!(sb.run("apply").code, 0);
    assert_eq!(sb.run("apply").code, 0);
    assert_eq!(sb.calls(), ["s ", "t ", "t "]);
}

fn fake_systemctl(sb: &Sandbox, fail_on: &str) {
    sb.host_command(
        "/usr/bin/systemctl",
        &format!(
            "{}\n[ \"$*\" = \"{fail_on}\" ] && exit 4\nexit 0",
            record("systemctl $*")
        ),
    );
}

// §17.98
#[test]
fn service_interrupt_reloads_then_restarts_and_logs_under_the_resource_id() {
    let sb = Sandbox::new();
    fake_systemctl(&sb, "never");
    let r = sb.interrupt(r#"{"type": "service_restart", "services": ["containerd"]}"#);
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert_eq!(
        sb.calls(),
        ["systemctl daemon-reload", "systemctl restart containerd"]
    );
    let names: Vec<String> = sb
        .logs(&format!("{LOG_DIR}/pkg/1.0.0/interrupts"))
        .into_iter()
        .map(|x| x.0)
        .collect();
    assert_eq!(names.len(), 4, "{names:?}");
    assert!(
        names[0].starts_with("service_restart_0-") && names[2].starts_with("service_restart_1-"),
        "{names:?}"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(sb.host("/usr/bin/systemctl"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o755
    );
}

// §17.99
#[test]
fn existing_node_restart_complete_means_reboot_is_not_run() {
    let sb = Sandbox::new();
    sb.host_command("/sbin/reboot", &record("reboot"));
    std::fs::create_dir_all(sb.interrupt_flags()).unwrap();
    std::fs::write(sb.interrupt_flags().join("node_restart_0.complete"), "1.0").unwrap();
    let r = sb.interrupt(r#"{"type": "node_restart"}"#);
    assert_eq!(r.code, 0);
    assert!(sb.calls().is_empty());
    assert!(
        r.stdout
            .contains("Skipping interrupt node_restart_0 because it was already run for"),
        "{}",
        r.stdout
    );
}

// §17.100
#[test]
fn each_service_interrupt_command_gets_its_complete_flag() {
    let sb = Sandbox::new();
    fake_systemctl(&sb, "never");
    assert_eq!(
        sb.interrupt(r#"{"type": "service_restart", "services": ["a", "b"]}"#)
            .code,
        0
    );
    for i in 0..3 {
        let f = sb
            .interrupt_flags()
            .join(format!("service_restart_{i}.complete"));
        let t: f64 = std::fs::read_to_string(&f).unwrap().parse().unwrap();
        assert!(t > 1.0e9);
    }
}

// §17.101
#[test]
fn second_command_failing_keeps_flag_0_removes_flag_1_and_skips_command_2() {
    let sb = Sandbox::new();
    fake_systemctl(&sb, "restart a");
    let r = sb.interrupt(r#"{"type": "service_restart", "services": ["a", "b"]}"#);
    assert_eq!(r.code, 1);
    assert!(
        r.stdout
            .contains("INTERRUPT FAILED: ['systemctl', 'restart', 'a'] return_code: 4"),
        "{}",
        r.stdout
    );
    assert_eq!(
        sb.calls(),
        ["systemctl daemon-reload", "systemctl restart a"]
    );
    let d = sb.interrupt_flags();
    assert!(d.join("service_restart_0.complete").exists());
    assert!(!d.join("service_restart_1.complete").exists());
    assert!(!d.join("service_restart_2.complete").exists());
    // Re-run: command 0 skipped, the rest retried.
    assert_eq!(
        sb.interrupt(r#"{"type": "service_restart", "services": ["c", "b"]}"#)
            .code,
        0
    );
    assert_eq!(
        sb.calls()[2..],
        ["systemctl restart c", "systemctl restart b"]
    );
}

// §17.102 (superseded by §11.5: the pending marker, not the complete flag, is kept)
#[test]
fn reboot_killed_by_a_signal_keeps_the_pending_marker_and_exits_0() {
    let sb = Sandbox::new();
    sb.host_command("/sbin/reboot", "kill -TERM $$");
    let r = sb.interrupt(r#"{"type": "node_restart"}"#);
    assert_eq!(r.code, 0, "{}", r.stdout);
    let d = sb.interrupt_flags();
    assert_eq!(
        std::fs::read_to_string(d.join("node_restart_0.pending")).unwrap(),
        "boot-aaaa"
    );
    assert!(!d.join("node_restart_0.complete").exists());
}

// §17.103
#[test]
fn two_services_run_exactly_three_commands() {
    let sb = Sandbox::new();
    fake_systemctl(&sb, "never");
    assert_eq!(
        sb.interrupt(r#"{"type": "service_restart", "services": ["a", "b"]}"#)
            .code,
        0
    );
    assert_eq!(sb.calls().len(), 3);
}

// §17.104
#[test]
fn interrupt_failure_is_agent_failure() {
    let sb = Sandbox::new();
    sb.host_command("/usr/sbin/service", "exit 2");
    assert_eq!(sb.interrupt(r#"{"type": "restart_all_services"}"#).code, 1);
    assert!(
        !sb.interrupt_flags()
            .join("restart_all_services_0.complete")
            .exists()
    );
}

// §17.105
#[test]
fn interrupt_logs_follow_the_resource_id_not_the_config() {
    let mut sb = Sandbox::new();
    sb.set("SKYHOOK_RESOURCE_ID", "nw-uid-7_nvidia-setup_0.2.1");
    sb.host_command("/usr/sbin/service", &record("service $*"));
    assert_eq!(sb.interrupt(r#"{"type": "restart_all_services"}"#).code, 0);
    assert_eq!(sb.calls(), ["service procps force-reload"]);
    assert_eq!(
        sb.logs(&format!("{LOG_DIR}/nvidia-setup/0.2.1/interrupts"))
            .len(),
        2
    );
    assert!(sb.host(&format!("{ROOT_DIR}/interrupts/flags/nw-uid-7_nvidia-setup_0.2.1/restart_all_services_0.complete")).exists());
}

// §17.106
#[test]
fn noop_interrupt_writes_no_op_complete_in_the_resource_id_dir() {
    let sb = Sandbox::new();
    assert_eq!(sb.interrupt(r#"{"type": "no_op"}"#).code, 0);
    assert!(sb.interrupt_flags().join("no_op.complete").is_file());
}

// §17.108
#[test]
fn cli_reads_overlay_always_run_step_true_and_false() {
    let mut sb = Sandbox::new();
    two_step(&sb, step("s.sh", &[], false), step("t.sh", &[], false));
    sb.set("OVERLAY_ALWAYS_RUN_STEP", "true");
    assert!(sb.run("apply").stdout.contains("always_run_step: True"));
    sb.set("OVERLAY_ALWAYS_RUN_STEP", "false");
    let r = sb.run("apply");
    assert!(r.stdout.contains("always_run_step: False"));
    assert_eq!(sb.calls(), ["s ", "t "]);
}

// §17.109
#[test]
fn resolv_conf_is_copied_only_when_copy_resolv_is_true() {
    let mut sb = Sandbox::new();
    simple(&sb, "exit 0", "exit 0");
    let dst = sb.host("/etc/resolv.conf");
    assert_eq!(sb.run("apply").code, 0);
    assert!(!dst.exists());
    let Ok(src) = std::fs::read("/etc/resolv.conf") else {
        println!("SKIP part of resolv_conf test: the test machine has no /etc/resolv.conf");
        return;
    };
    sb.set("COPY_RESOLV", "True");
    assert_eq!(sb.run("apply").code, 0);
    assert_eq!(std::fs::read(&dst).unwrap(), src);
}

// §17.111
#[test]
fn uninstall_modes_skip_root_dir_and_configmap_check_apply_requires_configmaps() {
    let sb = Sandbox::new();
    uninstall_pkg(&sb, "exit 0");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(sb.copy().join("config.json")).unwrap())
            .unwrap();
    cfg["expected_config_files"] = json!(["service"]);
    sb.write_config(&cfg);
    std::fs::create_dir_all(sb.copy().join("root_dir/etc/pkg")).unwrap();
    std::fs::write(sb.copy().join("root_dir/etc/pkg/a.conf"), "x=1").unwrap();
    assert_eq!(sb.run("uninstall").code, 0);
    assert_eq!(sb.run("uninstall-check").code, 0);
    assert!(!sb.host("/etc/pkg/a.conf").exists());
    let r = sb.run("apply");
    assert_eq!(r.code, 1);
    assert!(
        r.stderr
            .contains("Expected config file service not found in configmaps directory."),
        "{}",
        r.stderr
    );
    // The overlay precedes the configmap check.
    assert_eq!(
        std::fs::read_to_string(sb.host("/etc/pkg/a.conf")).unwrap(),
        "x=1"
    );
    std::fs::create_dir_all(sb.copy().join("configmaps")).unwrap();
    std::fs::write(sb.copy().join("configmaps/service"), "svc").unwrap();
    assert_eq!(sb.run("apply").code, 0);
}

// §17.114
#[test]
fn logs_off_writes_no_log_files_and_reaps_nothing() {
    let mut sb = Sandbox::new();
    sb.set("SKYHOOK_AGENT_WRITE_LOGS", "off");
    simple(&sb, "echo x", "exit 0");
    let dir = sb.host(&format!("{LOG_DIR}/pkg/1.0.0"));
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..7 {
        std::fs::write(dir.join(format!("apply.sh-2020-01-01-00000{i}.log")), "").unwrap();
    }
    assert_eq!(sb.run("apply").code, 0);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 7);
}

// §17.115
#[test]
fn logs_on_writes_log_and_err_and_reaps_once() {
    let sb = Sandbox::new();
    simple(&sb, "echo x", "exit 0");
    let dir = sb.host(&format!("{LOG_DIR}/pkg/1.0.0"));
    std::fs::create_dir_all(&dir).unwrap();
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    for i in 0..6 {
        let p = dir.join(format!("apply.sh-2020-01-01-00000{i}.log"));
        std::fs::write(&p, "").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(old + std::time::Duration::from_secs(i))
            .unwrap();
    }
    assert_eq!(sb.run("apply").code, 0);
    let names: Vec<String> = sb
        .logs(&format!("{LOG_DIR}/pkg/1.0.0"))
        .into_iter()
        .map(|x| x.0)
        .collect();
    let logs: Vec<&String> = names.iter().filter(|n| n.ends_with(".log")).collect();
    assert_eq!(logs.len(), 5, "{names:?}");
    assert!(!names.contains(&"apply.sh-2020-01-01-000000.log".to_string()));
    assert!(!names.contains(&"apply.sh-2020-01-01-000001.log".to_string()));
    assert_eq!(names.iter().filter(|n| n.ends_with(".log.err")).count(), 1);
}

// §17.116
#[test]
fn logs_off_streaming_creates_no_files_for_checks_either() {
    let mut sb = Sandbox::new();
    sb.set("SKYHOOK_AGENT_WRITE_LOGS", "False");
    simple(&sb, "exit 0", "echo checking");
    assert_eq!(sb.run("apply-check").code, 0);
    assert!(!sb.host(LOG_DIR).exists());
}

// §17.117
#[test]
fn six_runs_leave_five_logs_each_with_its_err() {
    let sb = Sandbox::new();
    simple(&sb, "echo x; echo y >&2", "exit 0");
    let dir = sb.host(&format!("{LOG_DIR}/pkg/1.0.0"));
    std::fs::create_dir_all(&dir).unwrap();
    // Five earlier runs (older timestamps and mtimes), then one real run.
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    for i in 0..5 {
        for ext in ["log", "log.err"] {
            let p = dir.join(format!("apply.sh-2020-01-01-00000{i}.{ext}"));
            std::fs::write(&p, "").unwrap();
            std::fs::File::options()
                .write(true)
                .open(&p)
                .unwrap()
                .set_modified(old + std::time::Duration::from_secs(i))
                .unwrap();
        }
    }
    assert_eq!(sb.run("apply").code, 0);
    let names: Vec<String> = sb
        .logs(&format!("{LOG_DIR}/pkg/1.0.0"))
        .into_iter()
        .map(|x| x.0)
        .collect();
    let logs: Vec<&String> = names.iter().filter(|n| n.ends_with(".log")).collect();
    assert_eq!(logs.len(), 5, "{names:?}");
    assert!(
        !names.contains(&"apply.sh-2020-01-01-000000.log".to_string()),
        "oldest gone"
    );
    for l in logs {
        assert!(names.contains(&format!("{l}.err")), "{l} has its .err");
    }
}

// §16 Q3: step modes tolerate a missing resource id (banner shows unknown).
#[test]
fn step_modes_tolerate_a_missing_resource_id() {
    let mut sb = Sandbox::new();
    sb.unset("SKYHOOK_RESOURCE_ID");
    simple(&sb, &record("apply"), "exit 0");
    let r = sb.run("apply");
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .contains("flag_dir: /var/lib/skyhook/nw/flags/unknown/unknown"),
        "{}",
        r.stdout
    );
    assert_eq!(sb.calls(), ["apply"]);
}

// §6.6: invalid JSON fails before START with one error line naming the file.
#[test]
fn invalid_config_json_fails_before_start_with_one_error_line() {
    let sb = Sandbox::new();
    std::fs::create_dir_all(sb.copy()).unwrap();
    std::fs::write(sb.copy().join("config.json"), "{\"schema_version\": ").unwrap();
    let r = sb.run("apply");
    assert_eq!(r.code, 1);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    assert!(
        r.stderr.starts_with("ERROR: invalid config.json:")
            && r.stderr.contains("config.json is not valid JSON"),
        "{}",
        r.stderr
    );
    assert!(!sb.flags_dir().join("START").exists());
}

// §4.2: PREVIOUS_VERSION is empty when the history file is corrupt.
#[test]
fn upgrade_with_corrupt_history_has_empty_previous_version_and_backs_it_up() {
    let sb = Sandbox::new();
    upgrade_pkg(&sb, false);
    let hist = sb.host(&format!("{ROOT_DIR}/history/pkg.json"));
    std::fs::create_dir_all(hist.parent().unwrap()).unwrap();
    std::fs::write(&hist, "garbage").unwrap();
    assert_eq!(sb.run("upgrade").code, 0);
    assert_eq!(sb.calls(), ["upgrade  1.0.0 args:"]);
    assert!(hist.with_extension("json.backup").exists());
}

// §9.5: identical path/arguments/returncodes share one flag across modes; config ignores it.
#[test]
fn apply_flag_makes_identical_post_interrupt_step_skip_but_config_reruns() {
    let sb = Sandbox::new();
    sb.write_config(&config(
        "pkg",
        "1.0.0",
        json!({
            "apply": [step("s.sh", &["x"], false)], "apply-check": [step("s_check.sh", &[], true)],
            "config": [step("s.sh", &["x"], false)], "config-check": [step("s_check.sh", &[], true)],
            "post-interrupt": [step("s.sh", &["x"], false)], "post-interrupt-check": [step("s_check.sh", &[], true)]
        }),
    ));
    sb.script("s.sh", &record("s $*"));
    sb.script("s_check.sh", "exit 0");
    assert_eq!(sb.run("apply").code, 0);
    let r = sb.run("post-interrupt");
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains("Skipping s.sh because"), "{}", r.stdout);
    let r = sb.run("config");
    assert_eq!(r.code, 0);
    assert!(
        r.stdout.contains("Flag exists but CONFIG, UNINSTALL, and UPGRADE mode don't support idempotence so running step anyway."),
        "{}",
        r.stdout
    );
    assert_eq!(sb.calls(), ["s x", "s x"]);
}
