//! Running a command on the host: chroot (or sandbox prefixing), environment, working
//! directory, output capture with timestamps and log files (§10.2–§10.5).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::layout::under;
use crate::timefmt::local_iso_now;

/// A command could not be started.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The working directory is relative (§10.2).
    #[error("working directory {0:?} must be an absolute path")]
    RelativeCwd(String),
    /// A log file could not be created.
    #[error("cannot create log file {path}: {source}")]
    Log {
        /// File path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The step file could not be made executable.
    #[error("cannot chmod {path}: {source}")]
    Chmod {
        /// File path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// `chroot` was refused: the agent is not root.
    #[error(
        "cannot chroot into {root} to run {program}: {source}; the agent must run as root, or \
         set NODEWRIGHT_AGENT_NO_CHROOT=1 for a sandbox root"
    )]
    ChrootDenied {
        /// Root mount.
        root: String,
        /// Program.
        program: String,
        /// Cause.
        source: std::io::Error,
    },
    /// fork/chroot/exec failed.
    #[error("cannot run {program}: {source}")]
    Spawn {
        /// Program.
        program: String,
        /// Cause.
        source: std::io::Error,
    },
}

/// How commands reach the host.
#[derive(Debug, Clone)]
pub struct Runner {
    /// Root mount (container path of the node's `/`).
    pub root_mount: String,
    /// Sandbox mode: no chroot, host paths prefixed with the root mount.
    pub no_chroot: bool,
    /// Max bytes per pipe read.
    pub buffer_limit: usize,
}

/// One command to run.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// Program: a host path, or a bare name resolved through `PATH` on the host.
    pub program: String,
    /// Arguments.
    pub args: Vec<String>,
    /// Full environment of the command.
    pub env: BTreeMap<String, String>,
    /// Working directory (host path, absolute).
    pub cwd: String,
    /// Add `a+x` to the program file first (steps, not interrupts).
    pub chmod: bool,
    /// `(stdout log, stderr log)` container paths, truncated.
    pub logs: Option<(PathBuf, PathBuf)>,
    /// Text written unprefixed as the first line of stdout and the `.log` (interrupts).
    pub echo: Option<String>,
}

/// How a command ended: its exit code, or minus the signal that killed it (Python's
/// convention).
pub type Status = i32;

fn status_of(s: std::process::ExitStatus) -> Status {
    match (s.code(), s.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => -sig,
        // Neither code nor signal cannot happen for a waited child; report failure.
        (None, None) => 1,
    }
}

/// Formats one chunk as upstream does: the stream's first chunk gets `<label><t> `, every `\n`
/// becomes `\n<label><t> `.
pub fn format_chunk(label: &str, ts: &str, text: &str, first: bool) -> String {
    let prefix = format!("{label}{ts} ");
    let mut out = String::with_capacity(text.len() + 32);
    if first {
        out.push_str(&prefix);
    }
    out.push_str(&text.replace('\n', &format!("\n{prefix}")));
    out
}

/// Streams one pipe to the console and a log file, chunk by chunk.
fn pump(
    mut src: impl Read,
    label: &'static str,
    limit: usize,
    mut log: Option<File>,
    to_stderr: bool,
) {
    let mut buf = vec![0u8; limit];
    let mut first = true;
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let msg = format!("{label}{} ERROR reading stream: {e}", local_iso_now());
                emit(&msg, &mut log, to_stderr);
                break;
            }
        };
        let text = String::from_utf8_lossy(&buf[..n]);
        let chunk = format_chunk(label, &local_iso_now(), &text, first);
        first = false;
        emit(&chunk, &mut log, to_stderr);
    }
}

fn emit(text: &str, log: &mut Option<File>, to_stderr: bool) {
    // Console and log writes are best effort: a full disk or closed console must not kill the
    // step whose output we relay.
    if to_stderr {
        let mut e = std::io::stderr().lock();
        let _ = e.write_all(text.as_bytes());
        let _ = e.flush();
    } else {
        let mut o = std::io::stdout().lock();
        let _ = o.write_all(text.as_bytes());
        let _ = o.flush();
    }
    if let Some(f) = log {
        let _ = f.write_all(text.as_bytes());
        let _ = f.flush();
    }
}

fn create_log(path: &Path) -> Result<File, Error> {
    let err = |source| Error::Log {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    File::create(path).map_err(err)
}

impl Runner {
    /// Finds a bare program name on the host `PATH` under the root mount (sandbox mode only;
    /// with chroot, `execvp` searches inside the chroot itself).
    fn resolve_in_sandbox(&self, name: &str, env: &BTreeMap<String, String>) -> String {
        let path = env
            .get("PATH")
            .map(String::as_str)
            .unwrap_or("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
        for dir in path.split(':').filter(|d| !d.is_empty()) {
            let cand = under(&self.root_mount, &format!("{dir}/{name}"));
            if cand.is_file() {
                return cand.display().to_string();
            }
        }
        // Not found: exec fails with ENOENT, reported as a spawn error.
        under(&self.root_mount, &format!("/usr/bin/{name}"))
            .display()
            .to_string()
    }

    /// Runs a command to completion, streaming its output; returns its status.
    pub fn run(&self, inv: &Invocation) -> Result<Status, Error> {
        if !inv.cwd.starts_with('/') {
            return Err(Error::RelativeCwd(inv.cwd.clone()));
        }
        if inv.chmod {
            let p = under(&self.root_mount, &inv.program);
            let chmod = |source| Error::Chmod {
                path: p.clone(),
                source,
            };
            let mode = std::fs::metadata(&p).map_err(chmod)?.permissions().mode();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode | 0o111))
                .map_err(chmod)?;
        }
        let (mut out_log, err_log) = match &inv.logs {
            Some((o, e)) => (Some(create_log(o)?), Some(create_log(e)?)),
            None => (None, None),
        };
        if let Some(line) = &inv.echo {
            emit(&format!("{line}\n"), &mut out_log, false);
        }

        let mut cmd;
        if self.no_chroot {
            let program = if inv.program.contains('/') {
                under(&self.root_mount, &inv.program).display().to_string()
            } else {
                self.resolve_in_sandbox(&inv.program, &inv.env)
            };
            cmd = Command::new(program);
            cmd.current_dir(under(&self.root_mount, &inv.cwd));
        } else {
            cmd = Command::new(&inv.program);
            let root =
                std::ffi::CString::new(self.root_mount.as_bytes()).map_err(|e| Error::Spawn {
                    program: inv.program.clone(),
                    source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
                })?;
            let cwd = std::ffi::CString::new(inv.cwd.as_bytes()).map_err(|e| Error::Spawn {
                program: inv.program.clone(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
            })?;
            // SAFETY: runs in the forked child before exec; chroot and chdir are
            // async-signal-safe and touch only the pre-built C strings.
            #[allow(unsafe_code)]
            unsafe {
                cmd.pre_exec(move || {
                    if libc::chroot(root.as_ptr()) != 0 || libc::chdir(c"/".as_ptr()) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    if libc::chdir(cwd.as_ptr()) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        cmd.args(&inv.args)
            .env_clear()
            .envs(&inv.env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = spawn_retrying_busy(&mut cmd).map_err(|source| {
            if !self.no_chroot && source.raw_os_error() == Some(libc::EPERM) {
                Error::ChrootDenied {
                    root: self.root_mount.clone(),
                    program: inv.program.clone(),
                    source,
                }
            } else {
                Error::Spawn {
                    program: inv.program.clone(),
                    source,
                }
            }
        })?;
        let limit = self.buffer_limit;
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        std::thread::scope(|s| {
            if let Some(o) = stdout {
                s.spawn(move || pump(o, "[out]", limit, out_log, false));
            }
            if let Some(e) = stderr {
                s.spawn(move || pump(e, "[err]", limit, err_log, true));
            }
        });
        let status = child.wait().map_err(|source| Error::Spawn {
            program: inv.program.clone(),
            source,
        })?;
        Ok(status_of(status))
    }
}

/// Spawns, retrying briefly on `ETXTBSY`: a program file that another process has only just
/// finished writing (a package copy racing a fork elsewhere) is briefly unexecutable.
fn spawn_retrying_busy(cmd: &mut Command) -> std::io::Result<std::process::Child> {
    let mut attempts = 0;
    loop {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && attempts < 10 => {
                attempts += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

/// Keeps the five newest `<prefix>-*.log` files by mtime and deletes the rest (§10.5). Like
/// upstream, the glob also matches steps whose path starts with `<path>-`; `.log.err` files are
/// not reaped (§16 Q7).
pub fn reap_logs(prefix: &Path) -> std::io::Result<usize> {
    let (Some(dir), Some(stem)) = (prefix.parent(), prefix.file_name()) else {
        return Ok(0);
    };
    let stem = format!("{}-", stem.to_string_lossy());
    let mut logs = vec![];
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(&stem) && name.ends_with(".log") {
            let mtime = entry.metadata()?.modified()?;
            logs.push((mtime, entry.path()));
        }
    }
    logs.sort_by_key(|l| std::cmp::Reverse(l.0));
    let mut deleted = 0;
    for (_, p) in logs.iter().skip(5) {
        std::fs::remove_file(p)?;
        deleted += 1;
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_prefix_applies_to_first_chunk_and_each_newline() {
        assert_eq!(
            format_chunk("[out]", "T", "1\n2\n", true),
            "[out]T 1\n[out]T 2\n[out]T "
        );
        assert_eq!(format_chunk("[out]", "U", "tail", false), "tail");
    }

    #[test]
    fn reaping_seven_candidates_deletes_the_two_oldest() {
        let d = tempfile::tempdir().unwrap();
        let base = std::time::SystemTime::now() - std::time::Duration::from_secs(100);
        for i in 0..7u64 {
            let p = d.path().join(format!("foo.sh-2026-01-01-00000{i}.log"));
            std::fs::write(&p, "x").unwrap();
            let f = File::options().write(true).open(&p).unwrap();
            f.set_modified(base + std::time::Duration::from_secs(i))
                .unwrap();
        }
        assert_eq!(reap_logs(&d.path().join("foo.sh")).unwrap(), 2);
        let mut left: Vec<String> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left.len(), 5);
        assert!(
            !left
                .iter()
                .any(|n| n.ends_with("000000.log") || n.ends_with("000001.log"))
        );
    }
}
