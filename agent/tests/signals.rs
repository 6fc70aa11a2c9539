//! SIGTERM (§14): the running step finishes (and gets its flag), no further step starts.

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;

fn spawn_and_term(sb: &Sandbox, wait_for: &str) -> std::process::ExitStatus {
    let mut child = sb
        .command(&["apply", sb.root().to_str().unwrap(), COPY_DIR])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let marker = sb.host(wait_for);
    for _ in 0..200 {
        if marker.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(marker.exists(), "step never started");
    // SAFETY: signalling our own child by pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    child.wait().unwrap()
}

#[test]
fn sigterm_lets_the_running_step_finish_and_starts_no_more() {
    let sb = Sandbox::new();
    sb.write_config(&config(
        "pkg",
        "1.0.0",
        json!({"apply": [step("a.sh", &[], false), step("b.sh", &[], false)], "apply-check": [step("a_check.sh", &[], false)]}),
    ));
    sb.script(
        "a.sh",
        &format!(
            "{}\ntouch \"$NODEWRIGHT_HOST_ROOT/tmp/started\"\nsleep 0.5\n{}",
            record("a start"),
            record("a end")
        ),
    );
    sb.script("b.sh", &record("b"));
    sb.script("a_check.sh", "exit 0");
    let status = spawn_and_term(&sb, "/tmp/started");
    assert_eq!(status.code(), Some(1));
    assert_eq!(sb.calls(), ["a start", "a end"]);
    assert!(
        sb.flag("pkg", "1.0.0", "a.sh", &[], &[0]).exists(),
        "the finished step keeps its flag"
    );
    assert!(!sb.flag("pkg", "1.0.0", "b.sh", &[], &[0]).exists());
}

#[test]
fn sigterm_during_the_last_step_completes_normally() {
    let sb = Sandbox::new();
    sb.write_config(&config(
        "pkg",
        "1.0.0",
        json!({"apply": [step("a.sh", &[], false)], "apply-check": [step("a_check.sh", &[], false)]}),
    ));
    sb.script(
        "a.sh",
        &format!(
            "{}\ntouch \"$NODEWRIGHT_HOST_ROOT/tmp/started\"\nsleep 0.5",
            record("a")
        ),
    );
    sb.script("a_check.sh", "exit 0");
    let status = spawn_and_term(&sb, "/tmp/started");
    assert_eq!(status.code(), Some(0));
    assert!(sb.flag("pkg", "1.0.0", "a.sh", &[], &[0]).exists());
}
