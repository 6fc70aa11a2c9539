//! Issue 28 items 9 and 10, through the real binary against a sandbox root: names that would
//! leave the state directories are refused before the host is touched, a failed step leaves
//! its command and exit status in its `.log.err`, and an error is one `ERROR:` line on stderr.

mod common;

use common::*;
use serde_json::json;

fn one_step(sb: &Sandbox, name: &str, body: &str, args: &[&str]) {
    sb.write_config(&config(
        name,
        "1.0.0",
        json!({"apply": [step("apply.sh", args, false)], "apply-check": [step("apply_check.sh", &[], false)]}),
    ));
    sb.script("apply.sh", body);
    sb.script("apply_check.sh", "exit 0");
}

/// Every file under the sandbox root, as paths relative to it.
fn files(sb: &Sandbox) -> Vec<String> {
    fn walk(dir: &std::path::Path, root: &std::path::Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, root, out);
            } else {
                out.push(p.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let mut out = vec![];
    walk(sb.dir.path(), sb.dir.path(), &mut out);
    out.sort();
    out
}

#[test]
fn a_package_name_that_climbs_out_is_refused_before_any_flag_log_or_history() {
    for name in ["../../../../escaped", "a/../../b", "..", "Pkg"] {
        let sb = Sandbox::new();
        one_step(&sb, name, &record("apply"), &[]);
        let before = files(&sb);
        let r = sb.run("apply");
        assert_eq!(r.code, 1, "{name}: {}{}", r.stdout, r.stderr);
        assert!(
            r.stderr.contains("is not a valid package name"),
            "{name}: {}",
            r.stderr
        );
        assert!(sb.calls().is_empty(), "{name}: the step ran");
        assert_eq!(files(&sb), before, "{name}: something was written");
    }
}

#[test]
fn an_upstream_config_name_with_underscores_still_runs() {
    let sb = Sandbox::new();
    one_step(&sb, "nvidia_setup", &record("apply"), &[]);
    let r = sb.run("apply");
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(sb.calls(), ["apply"]);
}

#[test]
fn an_interrupt_for_a_resource_id_that_climbs_out_writes_nothing() {
    let mut sb = Sandbox::new();
    sb.set("SKYHOOK_RESOURCE_ID", "nw-0b7c1a52-3_../../x_1.0.0");
    let before = files(&sb);
    let r = sb.interrupt(r#"{"type": "no_op"}"#);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.starts_with("ERROR: SKYHOOK_RESOURCE_ID"),
        "{}",
        r.stderr
    );
    assert_eq!(files(&sb), before);
}

#[test]
fn a_failed_step_leaves_its_command_and_exit_status_in_the_err_log() {
    let sb = Sandbox::new();
    one_step(&sb, "pkg", "echo oops >&2; exit 3", &["--fast"]);
    let r = sb.run("apply");
    assert_eq!(r.code, 1);
    let logs = sb.logs(&format!("{LOG_DIR}/pkg/1.0.0"));
    let (_, err) = logs
        .iter()
        .find(|(n, _)| n.ends_with(".log.err"))
        .expect("an .err log");
    assert!(err.contains("oops"), "{err}");
    // The command as the host sees it (the copy dir's host path), then how it ended.
    assert!(
        err.ends_with(&format!(
            "Command '['{COPY_DIR}/skyhook_dir/apply.sh', '--fast']' returned non-zero exit status 3.\n"
        )),
        "{err}"
    );
}

#[test]
fn a_step_that_cannot_start_is_one_error_line_and_its_argument_is_echoed_once() {
    let sb = Sandbox::new();
    // An argument larger than the kernel accepts for one string: exec fails with E2BIG.
    let huge = "x".repeat(200 * 1024);
    one_step(&sb, "pkg", "exit 0", &[&huge]);
    let r = sb.run("apply");
    assert_eq!(r.code, 1);
    let errors: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("ERROR:"))
        .collect();
    assert_eq!(errors.len(), 1, "{}", r.stderr);
    assert!(
        errors[0].contains("step apply.sh could not run"),
        "{}",
        errors[0]
    );
    assert!(!errors[0].contains(&huge[..100]));
    assert_eq!(
        r.stdout.matches(&huge[..]).count() + r.stderr.matches(&huge[..]).count(),
        1,
        "the argument is echoed by the pre-step line only"
    );
}
