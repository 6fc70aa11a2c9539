//! The reboot boot-id protocol (§11.5, seed 001) through a fake boot-id file and a fake
//! `reboot` in the sandbox root.

mod common;

use std::time::{Duration, Instant};

use common::*;

const REBOOT: &str = r#"{"type": "node_restart"}"#;

fn pending(sb: &Sandbox) -> std::path::PathBuf {
    sb.interrupt_flags().join("node_restart_0.pending")
}

fn complete(sb: &Sandbox) -> std::path::PathBuf {
    sb.interrupt_flags().join("node_restart_0.complete")
}

#[test]
fn changed_boot_id_promotes_the_pending_marker_to_complete() {
    let sb = Sandbox::new();
    sb.host_command(
        "/sbin/reboot",
        &format!("{}\nkill -TERM $$", record("reboot")),
    );
    assert_eq!(sb.interrupt(REBOOT).code, 0);
    assert_eq!(std::fs::read_to_string(pending(&sb)).unwrap(), "boot-aaaa");
    assert!(
        !complete(&sb).exists(),
        "a reboot is not complete before the boot id changes"
    );
    sb.set_boot_id("boot-bbbb");
    let r = sb.interrupt(REBOOT);
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert!(complete(&sb).exists());
    assert!(!pending(&sb).exists());
    assert_eq!(sb.calls(), ["reboot"], "promotion does not reboot again");
    // And afterwards the interrupt is done for this resource id.
    assert_eq!(sb.interrupt(REBOOT).code, 0);
    assert_eq!(sb.calls(), ["reboot"]);
}

#[test]
fn unchanged_boot_id_removes_the_stale_marker_and_reboots_again() {
    let sb = Sandbox::new();
    sb.host_command(
        "/sbin/reboot",
        &format!("{}\nkill -TERM $$", record("reboot")),
    );
    assert_eq!(sb.interrupt(REBOOT).code, 0);
    let r = sb.interrupt(REBOOT);
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains("stale"), "{}", r.stdout);
    assert_eq!(sb.calls(), ["reboot", "reboot"]);
    assert_eq!(std::fs::read_to_string(pending(&sb)).unwrap(), "boot-aaaa");
    assert!(!complete(&sb).exists());
}

#[test]
fn empty_or_unreadable_marker_counts_as_stale() {
    let sb = Sandbox::new();
    sb.host_command(
        "/sbin/reboot",
        &format!("{}\nkill -TERM $$", record("reboot")),
    );
    std::fs::create_dir_all(sb.interrupt_flags()).unwrap();
    std::fs::write(pending(&sb), "").unwrap();
    sb.set_boot_id("boot-cccc");
    assert_eq!(sb.interrupt(REBOOT).code, 0);
    assert!(!complete(&sb).exists(), "an empty marker never promotes");
    assert_eq!(sb.calls(), ["reboot"]);
    assert_eq!(std::fs::read_to_string(pending(&sb)).unwrap(), "boot-cccc");
}

#[test]
fn reboot_exiting_0_without_shutdown_fails_after_the_wait_and_keeps_the_marker() {
    let mut sb = Sandbox::new();
    sb.set("NODEWRIGHT_AGENT_REBOOT_WAIT_MS", "700");
    sb.host_command("/sbin/reboot", &record("reboot"));
    let t = Instant::now();
    let r = sb.interrupt(REBOOT);
    assert!(
        t.elapsed() >= Duration::from_millis(700),
        "waited {:?}",
        t.elapsed()
    );
    assert_eq!(r.code, 1);
    assert!(
        r.stdout.contains("enqueued but did not take effect"),
        "{}",
        r.stdout
    );
    assert_eq!(std::fs::read_to_string(pending(&sb)).unwrap(), "boot-aaaa");
    assert!(!complete(&sb).exists());
    // The restarted container sees the same boot id and retries.
    let r = sb.interrupt(REBOOT);
    assert_eq!(r.code, 1);
    assert_eq!(sb.calls(), ["reboot", "reboot"]);
}

#[test]
fn sigterm_during_the_wait_does_not_end_it_early() {
    let mut sb = Sandbox::new();
    sb.set("NODEWRIGHT_AGENT_REBOOT_WAIT_MS", "1500");
    sb.host_command("/sbin/reboot", "exit 0");
    let p = base64_payload(REBOOT);
    let mut child = sb
        .command(&["interrupt", sb.root().to_str().unwrap(), COPY_DIR, &p])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    std::thread::sleep(Duration::from_millis(400));
    // SAFETY: signalling our own child by pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(1500),
        "exited after {:?}",
        t.elapsed()
    );
    assert_eq!(status.code(), Some(1));
    assert!(pending(&sb).exists());
}

#[test]
fn agent_killed_by_shutdown_completes_after_boot_through_promotion() {
    let sb = Sandbox::new();
    // Shutdown reaches the agent first: the fake reboot kills its parent.
    sb.host_command(
        "/sbin/reboot",
        &format!("{}\nkill -KILL $PPID", record("reboot")),
    );
    let r = sb.interrupt(REBOOT);
    assert_ne!(r.code, 0);
    assert_eq!(std::fs::read_to_string(pending(&sb)).unwrap(), "boot-aaaa");
    sb.set_boot_id("boot-after-reboot");
    assert_eq!(sb.interrupt(REBOOT).code, 0);
    assert!(complete(&sb).exists() && !pending(&sb).exists());
    assert_eq!(sb.calls(), ["reboot"]);
}

#[test]
fn failing_reboot_removes_the_marker_and_fails() {
    let sb = Sandbox::new();
    sb.host_command("/sbin/reboot", "echo cannot >&2; exit 3");
    let r = sb.interrupt(REBOOT);
    assert_eq!(r.code, 1);
    assert!(
        r.stdout
            .contains("INTERRUPT FAILED: ['reboot'] return_code: 3"),
        "{}",
        r.stdout
    );
    assert!(!pending(&sb).exists() && !complete(&sb).exists());
    let logs = sb.logs(&format!("{LOG_DIR}/pkg/1.0.0/interrupts"));
    assert!(
        logs.iter()
            .any(|(n, c)| n.ends_with(".log.err") && c.contains("cannot")),
        "{logs:?}"
    );
}

#[test]
fn missing_reboot_command_fails_and_removes_the_marker() {
    let sb = Sandbox::new();
    let r = sb.interrupt(REBOOT);
    assert_eq!(r.code, 1);
    assert!(!pending(&sb).exists());
}

#[test]
fn reboot_requires_a_resource_id() {
    let mut sb = Sandbox::new();
    sb.host_command("/sbin/reboot", &record("reboot"));
    sb.unset("SKYHOOK_RESOURCE_ID");
    let r = sb.interrupt(REBOOT);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("SKYHOOK_RESOURCE_ID"), "{}", r.stderr);
    assert!(sb.calls().is_empty());
}

fn base64_payload(json: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(json)
}
