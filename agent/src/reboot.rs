//! The reboot boot-id protocol (§11.5, seed 001): a node restart is complete only when a later
//! invocation sees a different host boot id.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::env::ResourceId;
use crate::interrupts::{invocation, write_flag};
use crate::{Context, Error, Result, io_err};

/// Flag written once the restart is proven.
pub const COMPLETE: &str = "node_restart_0.complete";
/// Pending marker holding the boot id read before rebooting. Name chosen by NodeWright; keep it
/// stable, nodes carry it across agent versions.
pub const PENDING: &str = "node_restart_0.pending";
/// The kernel's boot id, same value in the container and on the host.
pub const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// Where the boot id is read from: the first readable candidate. In production the host's
/// procfs under the root mount, then the container's own (same kernel); a sandbox root fakes it
/// by holding the file.
pub fn boot_id_candidates(root_mount: &str) -> Vec<PathBuf> {
    vec![
        crate::layout::under(root_mount, BOOT_ID_PATH),
        PathBuf::from(BOOT_ID_PATH),
    ]
}

/// Reads the current boot id; `None` when no candidate is readable or all are empty.
pub fn read_boot_id(candidates: &[PathBuf]) -> Option<String> {
    candidates.iter().find_map(|p| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    })
}

/// Writes the marker and makes it durable (file and directory fsync): after a power cut
/// mid-reboot the next boot must still find it.
fn write_marker(path: &Path, boot_id: &str) -> std::io::Result<()> {
    let mut f = std::fs::File::create(path)?;
    f.write_all(boot_id.as_bytes())?;
    f.sync_all()?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Runs a `node_restart` interrupt; returns the exit code.
pub fn run(ctx: &Context, rid: &ResourceId, dir: &Path) -> Result<i32> {
    let id = ctx.env.resource_id();
    let complete = dir.join(COMPLETE);
    let pending = dir.join(PENDING);
    let candidates = boot_id_candidates(&ctx.layout.root_mount);
    // 1. Done before (also by the Python agent).
    if complete.exists() {
        println!("Skipping interrupt node_restart_0 because it was already run for {id}");
        return Ok(0);
    }
    // 2. A pending marker from an earlier invocation.
    if pending.exists() {
        let stored = std::fs::read_to_string(&pending)
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let current = read_boot_id(&candidates);
        match current {
            Some(cur) if !stored.is_empty() && cur != stored => {
                write_flag(&complete).map_err(io_err("cannot write", &complete))?;
                std::fs::remove_file(&pending).map_err(io_err("cannot remove", &pending))?;
                println!("Boot id changed ({stored} -> {cur}): node restart complete for {id}");
                return Ok(0);
            }
            _ => {
                println!(
                    "Boot id unchanged since the restart was requested ({stored:?}): removing the \
                     stale marker and restarting again"
                );
                std::fs::remove_file(&pending).map_err(io_err("cannot remove", &pending))?;
            }
        }
    }
    // 3. Record the current boot id, then reboot.
    let boot_id = read_boot_id(&candidates).ok_or_else(|| {
        Error::BootId(
            candidates
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(" or "),
        )
    })?;
    write_marker(&pending, &boot_id).map_err(io_err("cannot write", &pending))?;
    let cmd = vec!["reboot".to_string()];
    let status = match ctx
        .runner
        .run(&invocation(ctx, rid, "node_restart_0", &cmd))
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ERROR: interrupt node_restart_0 could not run: {e}");
            1
        }
    };
    if status < 0 {
        // 4. Shutdown killed `reboot` first: the restart is under way.
        println!(
            "reboot was killed by signal {}: restart under way; keeping {PENDING}",
            -status
        );
        return Ok(0);
    }
    if status == 0 {
        // 5. Give shutdown the window to kill us. `thread::sleep` resumes after signals, so a
        // SIGTERM from shutdown does not cut the wait short into an early failure exit.
        std::thread::sleep(ctx.reboot_wait);
        println!(
            "reboot was enqueued but did not take effect within {:?}; keeping {PENDING} to retry",
            ctx.reboot_wait
        );
        return Ok(1);
    }
    // 6. reboot failed.
    std::fs::remove_file(&pending).map_err(io_err("cannot remove", &pending))?;
    println!("INTERRUPT FAILED: ['reboot'] return_code: {status}");
    Ok(1)
}
