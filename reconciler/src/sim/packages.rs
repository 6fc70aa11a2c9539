//! What a package container does when the simulated kubelet runs it (spec/scenarios.md §3).
//!
//! The kubelet asks a [`ContainerRunner`] to run one container of a stage or interrupt pod;
//! the runner answers how long it takes, how it exits and whether it reboots the node. The
//! default runner is the behaviour model of the scenario's `packages:` key ([`ModelRunner`]).
//! Packages given as a real directory (`path:`) are delegated to a second runner, the seam for
//! the real agent binary (it runs the agent against a per-node sandbox root).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use base64::Engine;
use serde::Deserialize;

/// How one stage (agent mode) of a package behaves.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageModel {
    /// How long the container runs.
    #[serde(default, with = "go_duration_opt")]
    pub duration: Option<Duration>,
    /// The first N attempts (per node, package version and stage) exit 1.
    #[serde(default)]
    pub failures: u32,
    /// Always exits 1.
    #[serde(default)]
    pub fail: bool,
}

/// How a package image behaves (one `packages:` entry).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PackageModel {
    /// Any stage not listed in `stages`.
    #[serde(default)]
    pub default: Option<StageModel>,
    /// Per agent mode (`apply`, `apply-check`, `interrupt`, …).
    #[serde(default)]
    pub stages: BTreeMap<String, StageModel>,
    /// NotReady time of a reboot interrupt owned by this package.
    #[serde(default, with = "go_duration_opt")]
    pub reboot_takes: Option<Duration>,
    /// A real package directory, run by the real agent.
    #[serde(default)]
    pub path: Option<String>,
}

/// Behaviour of an image no key describes: every stage succeeds after 2 s.
pub const DEFAULT_STAGE_DURATION: Duration = Duration::from_secs(2);
/// NotReady time of a reboot when the model does not say.
pub const DEFAULT_REBOOT_TAKES: Duration = Duration::from_secs(60);

mod go_duration_opt {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let text = Option::<String>::deserialize(d)?;
        text.map(|t| {
            nodewright_schema::duration::parse_go_duration(&t)
                .map(|p| p.non_negative())
                .map_err(serde::de::Error::custom)
        })
        .transpose()
    }
}

/// The `packages:` map: image reference with or without tag → model.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PackageModels(pub BTreeMap<String, PackageModel>);

impl PackageModels {
    /// The model for an image at a version: `image:version` wins over `image`.
    pub fn lookup(&self, image: &str, version: &str) -> Option<&PackageModel> {
        self.0
            .get(&format!("{image}:{version}"))
            .or_else(|| self.0.get(image))
    }

    /// Whether any package is a real directory.
    pub fn has_real_packages(&self) -> bool {
        self.0.values().any(|m| m.path.is_some())
    }
}

/// One container the kubelet is about to run.
#[derive(Clone, Debug)]
pub struct ContainerRun<'a> {
    /// Node name.
    pub node: &'a str,
    /// Pod name.
    pub pod: &'a str,
    /// Bare package image (no tag or digest).
    pub image: &'a str,
    /// Package version.
    pub version: &'a str,
    /// Agent mode (`args[0]`); `copy` for the first init container of a stage pod.
    pub mode: &'a str,
    /// The container's args.
    pub args: &'a [String],
    /// The node's boot id now.
    pub boot_id: &'a str,
    /// Whether this pod already fired a reboot that has since happened (the agent's boot-id
    /// protocol then completes the interrupt).
    pub reboot_completed: bool,
}

/// What running a container does to the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Nothing beyond the exit code.
    None,
    /// The container reboots the node, which stays NotReady this long.
    Reboot(Duration),
}

/// The result of running one container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerResult {
    /// Run time.
    pub duration: Duration,
    /// Exit code (0 = success).
    pub exit_code: i32,
    /// Host effect, applied when the container finishes.
    pub effect: Effect,
    /// Text for the container's termination message.
    pub message: Option<String>,
    /// What the container prints (stdout and stderr): the first line appears when it
    /// starts, the rest when it ends.
    pub log: String,
}

/// Runs a container's mode on a node. Implemented by the behaviour models and, later, by the
/// real agent.
pub trait ContainerRunner: Send {
    /// Run one container attempt.
    fn run(&mut self, run: &ContainerRun<'_>) -> ContainerResult;
}

/// The interrupt payload of an `interrupt` container (last arg, base64 JSON).
pub fn interrupt_type(args: &[String]) -> Option<String> {
    let last = args.last()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(last)
        .ok()?;
    let value: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    value.get("type")?.as_str().map(str::to_string)
}

/// The behaviour-model runner of spec/scenarios.md §3.
pub struct ModelRunner {
    models: PackageModels,
    /// Attempts so far per (node, image, version, mode).
    attempts: HashMap<(String, String, String, String), u32>,
    /// Runs containers of `path:` packages (the real agent), when plugged in.
    real: Option<Box<dyn ContainerRunner>>,
}

impl ModelRunner {
    /// A runner over the scenario's models.
    pub fn new(models: PackageModels) -> Self {
        ModelRunner {
            models,
            attempts: HashMap::new(),
            real: None,
        }
    }

    /// Plugs in the runner for real package directories.
    pub fn with_real_agent(mut self, real: Box<dyn ContainerRunner>) -> Self {
        self.real = Some(real);
        self
    }

    /// The reboot time of a package (its `rebootTakes`, else 60 s).
    pub fn reboot_takes(&self, image: &str, version: &str) -> Duration {
        self.models
            .lookup(image, version)
            .and_then(|m| m.reboot_takes)
            .unwrap_or(DEFAULT_REBOOT_TAKES)
    }
}

/// The first line every behaviour-model container prints.
fn model_banner(run: &ContainerRun<'_>, attempt: Option<u32>) -> String {
    let attempt = attempt.map(|a| format!(" attempt={a}")).unwrap_or_default();
    format!(
        "nodewright-agent (behaviour model) mode={} package={}:{} node={}{attempt}\n",
        run.mode, run.image, run.version, run.node
    )
}

impl ContainerRunner for ModelRunner {
    fn run(&mut self, run: &ContainerRun<'_>) -> ContainerResult {
        let model = self.models.lookup(run.image, run.version);
        if model.is_some_and(|m| m.path.is_some()) {
            return match self.real.as_mut() {
                Some(real) => real.run(run),
                None => {
                    let message = format!(
                        "package {} is a real package directory but no real-agent runner is plugged into the simulator",
                        run.image
                    );
                    ContainerResult {
                        duration: Duration::ZERO,
                        exit_code: 1,
                        effect: Effect::None,
                        log: format!("ERROR: {message}\n"),
                        message: Some(message),
                    }
                }
            };
        }
        if run.mode == "copy" {
            return ContainerResult {
                duration: Duration::ZERO,
                exit_code: 0,
                effect: Effect::None,
                message: None,
                log: format!(
                    "{}copied the package into {}\n",
                    model_banner(run, None),
                    run.args.get(2).map(String::as_str).unwrap_or("the host")
                ),
            };
        }
        let stage = model.and_then(|m| m.stages.get(run.mode).or(m.default.as_ref()));
        let duration = stage
            .map(|s| s.duration.unwrap_or(DEFAULT_STAGE_DURATION))
            .unwrap_or(DEFAULT_STAGE_DURATION);
        let interrupt = (run.mode == "interrupt")
            .then(|| interrupt_type(run.args))
            .flatten();
        let is_reboot = interrupt.as_deref() == Some("node_restart");
        if is_reboot && run.reboot_completed {
            // Boot-id protocol: the restarted container sees a new boot id and completes.
            return ContainerResult {
                duration: Duration::ZERO,
                exit_code: 0,
                effect: Effect::None,
                message: None,
                log: format!(
                    "{}Boot id changed (now {}): node restart complete\n",
                    model_banner(run, None),
                    run.boot_id
                ),
            };
        }
        let key = (
            run.node.to_string(),
            run.image.to_string(),
            run.version.to_string(),
            run.mode.to_string(),
        );
        let attempt = self.attempts.entry(key).or_insert(0);
        *attempt += 1;
        let attempt = *attempt;
        let failed = stage.is_some_and(|s| s.fail || attempt <= s.failures);
        let exit_code = i32::from(failed);
        let effect = if is_reboot && !failed {
            Effect::Reboot(self.reboot_takes(run.image, run.version))
        } else {
            Effect::None
        };
        let message = failed.then(|| format!("{} exited 1 (behaviour model)", run.mode));
        if run.mode.starts_with('-') {
            // The copy container of a stage pod is a shell (`sh -c "mkdir … && cp …"`), not
            // the agent: it prints nothing unless it fails.
            return ContainerResult {
                duration,
                exit_code,
                effect,
                log: message
                    .as_ref()
                    .map(|m| format!("cp: {m}\n"))
                    .unwrap_or_default(),
                message,
            };
        }
        let mut log = model_banner(run, Some(attempt));
        match &interrupt {
            Some(kind) => log.push_str(&format!("running interrupt {kind}\n")),
            None => log.push_str(&format!(
                "running {} step of {} ({})\n",
                run.mode,
                run.image,
                nodewright_schema::duration::format_go_duration(duration)
            )),
        }
        match &message {
            Some(m) => log.push_str(&format!("ERROR: {m}\n{} failed: exit code 1\n", run.mode)),
            None if is_reboot => log.push_str("rebooting the node\n"),
            None => log.push_str(&format!("{} succeeded: exit code 0\n", run.mode)),
        }
        ContainerResult {
            duration,
            exit_code,
            effect,
            message,
            log,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn models(yaml: &str) -> PackageModels {
        PackageModels(serde_yaml::from_str(yaml).unwrap())
    }

    fn run<'a>(mode: &'a str, args: &'a [String]) -> ContainerRun<'a> {
        ContainerRun {
            node: "n1",
            pod: "p",
            image: "example/tuning",
            version: "1.2.0",
            mode,
            args,
            boot_id: "b",
            reboot_completed: false,
        }
    }

    #[test]
    fn failures_count_per_node_version_and_stage() {
        let m = models(
            "example/tuning:\n  default: {duration: 2s}\n  stages:\n    apply-check: {duration: 1s, failures: 2}\n",
        );
        let mut runner = ModelRunner::new(m);
        let args = vec!["apply-check".to_string()];
        let codes: Vec<i32> = (0..3)
            .map(|_| runner.run(&run("apply-check", &args)).exit_code)
            .collect();
        assert_eq!(codes, [1, 1, 0]);
        let apply = vec!["apply".to_string()];
        let r = runner.run(&run("apply", &apply));
        assert_eq!((r.exit_code, r.duration), (0, Duration::from_secs(2)));
    }

    #[test]
    fn tagged_key_wins_and_unknown_images_take_two_seconds() {
        let m = models(
            "example/tuning: {default: {duration: 5s}}\nexample/tuning:1.2.0: {default: {duration: 7s}}\n",
        );
        let mut runner = ModelRunner::new(m);
        let args = vec!["apply".to_string()];
        assert_eq!(
            runner.run(&run("apply", &args)).duration,
            Duration::from_secs(7)
        );
        let mut other = run("apply", &args);
        other.image = "example/unknown";
        assert_eq!(runner.run(&other).duration, DEFAULT_STAGE_DURATION);
    }

    #[test]
    fn reboot_interrupts_are_read_from_the_payload() {
        let payload =
            base64::engine::general_purpose::STANDARD.encode(br#"{"type":"node_restart"}"#);
        let args = vec![
            "interrupt".to_string(),
            "/root".to_string(),
            "/x".to_string(),
            payload,
        ];
        let m = models("example/tuning: {rebootTakes: 90s}\n");
        let mut runner = ModelRunner::new(m);
        let r = runner.run(&run("interrupt", &args));
        assert_eq!(r.effect, Effect::Reboot(Duration::from_secs(90)));
        let mut again = run("interrupt", &args);
        again.reboot_completed = true;
        assert_eq!(runner.run(&again).effect, Effect::None);
    }
}
