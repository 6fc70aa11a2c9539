//! Real package directories in the simulator (spec/scenarios.md §3 `path:`): each container
//! runs the real `nodewright-agent` binary against a per-node sandbox root, in the agent's
//! no-chroot mode (`NODEWRIGHT_AGENT_NO_CHROOT=1`, docs/agent.md). The exit code is the
//! container's; a reboot interrupt that the agent fired becomes a simulated reboot, and the
//! node's boot id file in the sandbox follows the simulated node, so the agent's boot-id
//! protocol (spec/agent.md §11.5) completes the interrupt after the node returns.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::packages::{
    ContainerResult, ContainerRun, ContainerRunner, Effect, PackageModels, interrupt_type,
};

/// How long a failure to start the agent binary is retried, in real time, before the
/// container counts as failed. Start failures are the harness's, not the package's: a
/// concurrent build replacing the binary (ETXTBSY, a missing file for a moment) or a
/// momentary process limit (EAGAIN) must not spend a package's attempts in virtual time.
pub const START_RETRY_FOR: Duration = Duration::from_secs(30);

/// Runs `path:` packages through the real agent.
pub struct AgentRunner {
    models: PackageModels,
    sandbox: PathBuf,
    /// The agent binary, resolved once when the runner is made.
    agent: PathBuf,
    base_dir: PathBuf,
    start_retry_for: Duration,
}

/// Finds the agent binary: `$NODEWRIGHT_AGENT_BIN`, else next to the running executable (or
/// its parent, for test binaries under `deps/`), else `nodewright-agent` on `PATH`.
pub fn agent_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("NODEWRIGHT_AGENT_BIN") {
        return PathBuf::from(path);
    }
    if let Ok(exe) = std::env::current_exe() {
        for dir in exe.ancestors().skip(1).take(2) {
            let candidate = dir.join("nodewright-agent");
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    on_path("nodewright-agent").unwrap_or_else(|| PathBuf::from("nodewright-agent"))
}

/// The first executable file called `name` in a `PATH` directory.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Runs `start` until it succeeds or `budget` of real time has passed, pausing a little longer
/// after each failure; returns the last error when time runs out.
pub fn start_retrying<T>(
    budget: Duration,
    mut start: impl FnMut() -> std::io::Result<T>,
) -> std::io::Result<T> {
    let deadline = Instant::now() + budget;
    let mut pause = Duration::from_millis(20);
    loop {
        match start() {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() + pause > deadline => return Err(e),
            Err(_) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        }
    }
}

impl AgentRunner {
    /// A runner whose node roots live under `sandbox`; package `path:`s are relative to
    /// `base_dir` (the directory scenarios are run from).
    pub fn new(models: PackageModels, sandbox: PathBuf, base_dir: PathBuf) -> Self {
        AgentRunner {
            models,
            sandbox,
            agent: agent_binary(),
            base_dir,
            start_retry_for: START_RETRY_FOR,
        }
    }

    /// The same runner with another agent binary and start-retry budget.
    pub fn with_agent(mut self, agent: PathBuf, start_retry_for: Duration) -> Self {
        self.agent = agent;
        self.start_retry_for = start_retry_for;
        self
    }

    fn fail(message: String) -> ContainerResult {
        ContainerResult {
            duration: Duration::from_secs(1),
            exit_code: 1,
            effect: Effect::None,
            log: format!("ERROR: {message}\n"),
            message: Some(message),
        }
    }

    fn node_root(&self, node: &str) -> Result<PathBuf, String> {
        let root = self.sandbox.join(node);
        for dir in [
            "sbin",
            "usr/bin",
            "usr/sbin",
            "proc/sys/kernel/random",
            "var/lib/skyhook",
            "var/log/skyhook",
        ] {
            std::fs::create_dir_all(root.join(dir))
                .map_err(|e| format!("sandbox {}: {e}", root.display()))?;
        }
        // Host commands the agent runs for interrupts. `reboot` ends itself like a real
        // shutdown would end the agent's child; the simulator then reboots the node.
        for (path, script) in [
            ("sbin/reboot", "#!/bin/sh\nkill -TERM $$\n"),
            ("usr/bin/systemctl", "#!/bin/sh\nexit 0\n"),
            ("usr/sbin/service", "#!/bin/sh\nexit 0\n"),
        ] {
            let file = root.join(path);
            if !file.exists() {
                std::fs::write(&file, script).map_err(|e| e.to_string())?;
                set_executable(&file)?;
            }
        }
        Ok(root)
    }
}

impl Drop for AgentRunner {
    fn drop(&mut self) {
        // The node roots are scratch space of this simulated world.
        let _ = std::fs::remove_dir_all(&self.sandbox);
    }
}

#[cfg(unix)]
fn set_executable(file: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| e.to_string())
}

#[cfg(not(unix))]
fn set_executable(_file: &Path) -> Result<(), String> {
    Ok(())
}

/// `<nw>-<uid>-<generation>_<pkg>_<ver>` (§8.5) from the copy directory's name
/// `<pkg>-<ver>-<uid>-<generation>` (§8.4), which is all the container's arguments carry.
fn resource_id(nodewright: &str, copy_dir_name: &str, version: &str) -> String {
    match copy_dir_name.split_once(&format!("-{version}-")) {
        Some((package, uid_generation)) => {
            format!("{nodewright}-{uid_generation}_{package}_{version}")
        }
        None => format!("{nodewright}-{copy_dir_name}_{version}"),
    }
}

/// A package path relative to `base` or to one of its parents (scenarios name paths from the
/// repository root; tests run from a crate directory).
fn resolve(base: &Path, path: &str) -> Option<PathBuf> {
    let path = Path::new(path);
    if path.is_absolute() {
        return path.is_dir().then(|| path.to_path_buf());
    }
    base.ancestors()
        .map(|dir| dir.join(path))
        .find(|p| p.is_dir())
}

/// The hook the scenario runner plugs in for `path:` packages: node roots in a fresh
/// temporary directory, paths relative to the working directory (or its parents).
pub fn scenario_real_agent(models: &PackageModels) -> Box<dyn ContainerRunner> {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let sandbox =
        std::env::temp_dir().join(format!("nodewright-sim-agent-{}-{n}", std::process::id()));
    let base = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    Box::new(AgentRunner::new(models.clone(), sandbox, base))
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

impl ContainerRunner for AgentRunner {
    fn run(&mut self, run: &ContainerRun<'_>) -> ContainerResult {
        // The copy happens with the work container (the copy container's target directory is
        // in its environment, which the simulator does not pass); it is idempotent.
        if run.mode == "copy" || run.args.len() < 3 {
            return ContainerResult {
                duration: Duration::from_millis(500),
                exit_code: 0,
                effect: Effect::None,
                message: None,
                log: String::new(),
            };
        }
        let Some(package_dir) = self
            .models
            .lookup(run.image, run.version)
            .and_then(|m| m.path.clone())
        else {
            return Self::fail(format!("no package directory for {}", run.image));
        };
        let Some(package_dir) = resolve(&self.base_dir, &package_dir) else {
            return Self::fail(format!(
                "package directory {package_dir} not found under {} or its parents",
                self.base_dir.display()
            ));
        };
        let root = match self.node_root(run.node) {
            Ok(r) => r,
            Err(e) => return Self::fail(e),
        };
        let copy_dir = run.args[2].clone();
        let host_copy = root.join(copy_dir.trim_start_matches('/'));
        if let Err(e) = copy_tree(&package_dir, &host_copy) {
            return Self::fail(format!(
                "copying {} into the sandbox: {e}",
                package_dir.display()
            ));
        }
        if let Err(e) = std::fs::write(
            root.join("proc/sys/kernel/random/boot_id"),
            format!("{}\n", run.boot_id),
        ) {
            return Self::fail(e.to_string());
        }
        let state_dir = Path::new(&copy_dir)
            .parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let nodewright = Path::new(&state_dir)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let resource = Path::new(&copy_dir)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut args: Vec<String> = run.args.to_vec();
        args[1] = root.display().to_string();
        let mut command = Command::new(&self.agent);
        command
            .args(&args)
            .env_clear()
            // Host-style PATH: in no-chroot mode the agent looks interrupt commands up under the
            // sandbox root (docs/agent.md).
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("NODEWRIGHT_AGENT_NO_CHROOT", "1")
            .env("NODEWRIGHT_AGENT_STEP_DELAY_MS", "0")
            .env("NODEWRIGHT_AGENT_REBOOT_WAIT_MS", "200")
            .env("COPY_RESOLV", "false")
            .env(
                "SKYHOOK_RESOURCE_ID",
                resource_id(&nodewright, &resource, run.version),
            )
            .env("SKYHOOK_ROOT_DIR", &state_dir)
            .env("SKYHOOK_LOG_DIR", format!("/var/log/skyhook/{nodewright}"));
        // Only the agent's own run time counts as the container's: start retries do not.
        let mut started = Instant::now();
        let output = start_retrying(self.start_retry_for, || {
            started = Instant::now();
            command.output()
        });
        let output = match output {
            Ok(o) => o,
            Err(e) => {
                return Self::fail(format!(
                    "the simulator could not start the agent {} for {}s (a harness problem, \
                     not the package's): {e}",
                    self.agent.display(),
                    self.start_retry_for.as_secs()
                ));
            }
        };
        let exit_code = output.status.code().unwrap_or(1);
        let fired_reboot = run.mode == "interrupt"
            && interrupt_type(run.args).as_deref() == Some("node_restart")
            && exit_code == 0
            && !run.reboot_completed;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        ContainerResult {
            duration: started.elapsed().max(Duration::from_secs(1)),
            exit_code,
            effect: if fired_reboot {
                Effect::Reboot(
                    self.models
                        .lookup(run.image, run.version)
                        .and_then(|m| m.reboot_takes)
                        .unwrap_or(super::packages::DEFAULT_REBOOT_TAKES),
                )
            } else {
                Effect::None
            },
            message: Some(
                text.chars()
                    .rev()
                    .take(4096)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect(),
            ),
            // The real agent's output is the container's log (the simulator caps it).
            log: text,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::PackageModel;

    #[test]
    fn start_failures_are_retried_in_real_time_until_the_agent_starts() {
        let mut busy = 2;
        let started = start_retrying(Duration::from_secs(10), || {
            if busy > 0 {
                busy -= 1;
                Err(std::io::Error::other("text file busy"))
            } else {
                Ok("ran")
            }
        });
        assert_eq!(started.unwrap(), "ran");
        assert_eq!(busy, 0);
    }

    #[test]
    fn an_agent_that_never_starts_fails_the_container_as_a_harness_problem() {
        let sandbox = tempfile::tempdir().unwrap();
        let models = PackageModels(
            [(
                "example/real".to_string(),
                PackageModel {
                    path: Some("examples/packages/tuning".into()),
                    ..PackageModel::default()
                },
            )]
            .into(),
        );
        let base = std::env::current_dir().unwrap();
        let mut runner = AgentRunner::new(models, sandbox.path().join("nodes"), base)
            .with_agent(sandbox.path().join("no-such-agent"), Duration::ZERO);
        let args: Vec<String> = [
            "apply",
            "/root",
            "/var/lib/skyhook/tuning/tuning-1.2.0-0b7c1a52-3",
        ]
        .map(String::from)
        .to_vec();
        let result = runner.run(&ContainerRun {
            node: "n1",
            pod: "p",
            image: "example/real",
            version: "1.2.0",
            mode: "apply",
            args: &args,
            boot_id: "boot-1",
            reboot_completed: false,
        });
        assert_eq!(result.exit_code, 1);
        let message = result.message.unwrap_or_default();
        assert!(
            message.contains("a harness problem, not the package's"),
            "{message}"
        );
    }
}
