//! Test harness: a sandbox root with a package copy, driven through the real binary.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use base64::Engine;

/// Host path of the package copy inside the sandbox root.
pub const COPY_DIR: &str = "/var/lib/skyhook/nw/pkg-1.0.0-0b7c1a52-3";
/// Host path of SKYHOOK_ROOT_DIR.
pub const ROOT_DIR: &str = "/var/lib/skyhook/nw";
/// Host path of SKYHOOK_LOG_DIR.
pub const LOG_DIR: &str = "/var/log/skyhook/nw";
/// The resource id the operator would send.
pub const RESOURCE_ID: &str = "nw-0b7c1a52-3_pkg_1.0.0";
/// Standard image PATH (§2.9).
pub const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

pub struct Sandbox {
    pub dir: tempfile::TempDir,
    pub env: BTreeMap<String, String>,
    /// Run without chroot (default) or with chroot (root + busybox).
    pub chroot: bool,
}

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

pub fn copy_tree(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &to);
        } else {
            std::fs::copy(e.path(), &to).unwrap();
        }
    }
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    fn from(o: Output) -> Self {
        Self {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl Sandbox {
    /// Unprivileged sandbox (no chroot).
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let env: BTreeMap<String, String> = [
            ("PATH", PATH),
            ("COPY_RESOLV", "false"),
            ("SKYHOOK_RESOURCE_ID", RESOURCE_ID),
            ("SKYHOOK_ROOT_DIR", ROOT_DIR),
            ("SKYHOOK_LOG_DIR", LOG_DIR),
            ("SKYHOOK_DATA_DIR", "/nonexistent-data-dir"),
            ("NODEWRIGHT_AGENT_NO_CHROOT", "1"),
            ("NODEWRIGHT_AGENT_STEP_DELAY_MS", "0"),
            ("NODEWRIGHT_AGENT_REBOOT_WAIT_MS", "300"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let sb = Self {
            dir,
            env,
            chroot: false,
        };
        sb.set_boot_id("boot-aaaa");
        sb
    }

    /// A chroot sandbox with a busybox root, or `None` (and a printed SKIP) when not root or
    /// busybox-static is missing.
    pub fn chroot(test: &str) -> Option<Self> {
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        if uid != 0 {
            println!("SKIP {test}: chroot tests need root");
            return None;
        }
        let Some(bb) = ["/bin/busybox", "/usr/bin/busybox"]
            .into_iter()
            .find(|p| Path::new(p).is_file())
        else {
            println!(
                "SKIP {test}: busybox-static is not installed (apt-get install busybox-static)"
            );
            return None;
        };
        let mut sb = Self::new();
        sb.env.remove("NODEWRIGHT_AGENT_NO_CHROOT");
        sb.chroot = true;
        let bin = sb.root().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::copy(bb, bin.join("busybox")).unwrap();
        for applet in [
            "sh", "cat", "echo", "env", "pwd", "mkdir", "printf", "sleep", "kill", "ls", "test",
            "true", "false", "touch", "date", "cut", "grep", "sed", "tr", "wc", "rm", "cp", "head",
            "id", "dirname", "basename",
        ] {
            std::os::unix::fs::symlink("busybox", bin.join(applet)).unwrap();
        }
        std::fs::create_dir_all(sb.root().join("tmp")).unwrap();
        Some(sb)
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// A host path inside the sandbox.
    pub fn host(&self, p: &str) -> PathBuf {
        self.root().join(p.trim_start_matches('/'))
    }

    pub fn copy(&self) -> PathBuf {
        self.host(COPY_DIR)
    }

    pub fn set(&mut self, k: &str, v: &str) -> &mut Self {
        self.env.insert(k.into(), v.into());
        self
    }

    pub fn unset(&mut self, k: &str) -> &mut Self {
        self.env.remove(k);
        self
    }

    pub fn set_boot_id(&self, id: &str) {
        let p = self.host("/proc/sys/kernel/random/boot_id");
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, format!("{id}\n")).unwrap();
    }

    /// Installs a fixture package as the copy dir.
    pub fn install_fixture(&self, name: &str) -> &Self {
        copy_tree(&fixture(name), &self.copy());
        self
    }

    pub fn write_config(&self, json: &serde_json::Value) {
        std::fs::create_dir_all(self.copy().join("skyhook_dir")).unwrap();
        std::fs::write(
            self.copy().join("config.json"),
            serde_json::to_string_pretty(json).unwrap(),
        )
        .unwrap();
    }

    /// Writes a `#!/bin/sh` step script under skyhook_dir (not executable: the agent chmods).
    pub fn script(&self, path: &str, body: &str) {
        let p = self.copy().join("skyhook_dir").join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    }

    /// Writes an executable fake host command (e.g. `/usr/bin/systemctl`).
    pub fn host_command(&self, path: &str, body: &str) {
        let p = self.host(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// Runs `nodewright-agent <mode> <root> <copy dir> [payload]`.
    pub fn run(&self, mode: &str) -> Run {
        self.run_args(&[mode, self.root().to_str().unwrap(), COPY_DIR])
    }

    pub fn interrupt(&self, payload_json: &str) -> Run {
        let p = base64::engine::general_purpose::STANDARD.encode(payload_json);
        self.run_args(&["interrupt", self.root().to_str().unwrap(), COPY_DIR, &p])
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_nodewright-agent"));
        c.args(args).env_clear().envs(&self.env);
        c
    }

    pub fn run_args(&self, args: &[&str]) -> Run {
        Run::from(self.command(args).output().unwrap())
    }

    /// Text the fake commands and scripts appended to `/tmp/calls.log`.
    pub fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.host("/tmp/calls.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    pub fn flags_dir(&self) -> PathBuf {
        self.host(&format!("{ROOT_DIR}/flags"))
    }

    /// Step flag path for the given package/version/step, computed independently of the agent
    /// from Python's repr rules for simple ASCII arguments.
    pub fn flag(&self, pkg: &str, ver: &str, path: &str, args: &[&str], codes: &[i64]) -> PathBuf {
        let a: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
        let c: Vec<String> = codes.iter().map(|c| c.to_string()).collect();
        let text = format!("[{}]_[{}]", a.join(", "), c.join(", "));
        let marker = base64::engine::general_purpose::STANDARD.encode(text);
        self.host(&format!("{ROOT_DIR}/flags/{pkg}/{ver}/{path}_{marker}"))
    }

    pub fn history(&self, pkg: &str) -> Option<serde_json::Value> {
        std::fs::read_to_string(self.host(&format!("{ROOT_DIR}/history/{pkg}.json")))
            .ok()
            .map(|s| serde_json::from_str(&s).unwrap())
    }

    pub fn interrupt_flags(&self) -> PathBuf {
        self.host(&format!("{ROOT_DIR}/interrupts/flags/{RESOURCE_ID}"))
    }

    /// Log files (name, content) directly in `dir` (host path).
    pub fn logs(&self, dir: &str) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = match std::fs::read_dir(self.host(dir)) {
            Ok(rd) => rd
                .map(|e| e.unwrap())
                .filter(|e| e.file_type().unwrap().is_file())
                .map(|e| {
                    (
                        e.file_name().to_string_lossy().into_owned(),
                        std::fs::read_to_string(e.path()).unwrap(),
                    )
                })
                .collect(),
            Err(_) => vec![],
        };
        v.sort();
        v
    }
}

/// A v1 step object.
pub fn step(path: &str, args: &[&str], idempotence: bool) -> serde_json::Value {
    serde_json::json!({
        "name": path.replace('/', "_"), "path": path, "arguments": args, "returncodes": [0],
        "on_host": true, "idempotence": idempotence, "upgrade_step": false, "env": {}
    })
}

/// A v1 config with the given modes.
pub fn config(name: &str, version: &str, modes: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "schema_version": "v1", "package_name": name, "package_version": version,
        "expected_config_files": [], "modes": modes
    })
}

/// Script body appending a line to `/tmp/calls.log` on the host.
pub fn record(line: &str) -> String {
    format!(
        "mkdir -p \"${{NODEWRIGHT_HOST_ROOT:-}}/tmp\"; echo \"{line}\" >> \"${{NODEWRIGHT_HOST_ROOT:-}}/tmp/calls.log\""
    )
}
