//! Environment variables read by the agent and the environment given to steps (§4).

use std::collections::BTreeMap;
use std::time::Duration;

/// Set to `1`/`true` to run steps without `chroot`, resolving host paths under the root mount by
/// prefixing instead. For unprivileged tests and the simulator's sandbox roots; never set by the
/// operator.
pub const NO_CHROOT_VAR: &str = "NODEWRIGHT_AGENT_NO_CHROOT";
/// Overrides the 10 s window the agent waits for shutdown after `reboot` returned 0 (§11.5),
/// in milliseconds. Test-only; production keeps the default.
pub const REBOOT_WAIT_VAR: &str = "NODEWRIGHT_AGENT_REBOOT_WAIT_MS";
/// Overrides upstream's 1 s pause before every step (§10.2), in milliseconds. Test and
/// simulator knob; production keeps the default.
pub const STEP_DELAY_VAR: &str = "NODEWRIGHT_AGENT_STEP_DELAY_MS";
/// Exported to steps and interrupt commands in no-chroot mode only: the root mount, so scripts
/// that write host files can prefix them (`${NODEWRIGHT_HOST_ROOT:-}/etc/...`).
pub const HOST_ROOT_EXPORT: &str = "NODEWRIGHT_HOST_ROOT";

/// Production wait for shutdown after a successful `reboot` (seed 001).
pub const DEFAULT_REBOOT_WAIT: Duration = Duration::from_secs(10);
/// Upstream's pause before each step.
pub const DEFAULT_STEP_DELAY: Duration = Duration::from_secs(1);

/// An environment variable the agent reads had a value it cannot use.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A numeric variable did not parse.
    #[error("environment variable {name}={value:?} is not a positive integer")]
    NotANumber {
        /// Variable name.
        name: &'static str,
        /// Offending value.
        value: String,
    },
}

/// The agent's own environment: a snapshot taken once at start-up, so library code never reads
/// the process environment and tests can run in parallel.
#[derive(Debug, Clone, Default)]
pub struct AgentEnv {
    vars: BTreeMap<String, String>,
}

/// `true` in any letter case → on; anything else → off (§4.1).
fn is_true(v: Option<&str>, default: bool) -> bool {
    match v {
        None => default,
        Some(v) => v.eq_ignore_ascii_case("true"),
    }
}

fn millis(env: &AgentEnv, name: &'static str, default: Duration) -> Result<Duration, Error> {
    match env.get(name) {
        None => Ok(default),
        Some(v) => v
            .trim()
            .parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|_| Error::NotANumber {
                name,
                value: v.to_string(),
            }),
    }
}

impl AgentEnv {
    /// Snapshot of the process environment (non-UTF-8 bytes replaced).
    pub fn from_process() -> Self {
        Self::from_pairs(std::env::vars_os().map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        }))
    }

    /// Builds an environment from pairs (tests, embedding).
    pub fn from_pairs<I, K, V>(pairs: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        Self {
            vars: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    /// Value of a variable.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// Every variable, for pass-through to steps (§4.2).
    pub fn vars(&self) -> &BTreeMap<String, String> {
        &self.vars
    }

    /// `SKYHOOK_RESOURCE_ID`, empty when absent.
    pub fn resource_id(&self) -> &str {
        self.get("SKYHOOK_RESOURCE_ID").unwrap_or("")
    }

    /// `SKYHOOK_DATA_DIR`: container path of the packaged files.
    pub fn data_dir(&self) -> &str {
        self.get("SKYHOOK_DATA_DIR").unwrap_or("/skyhook-package")
    }

    /// `SKYHOOK_ROOT_DIR`: host path of flags, history and interrupt flags.
    pub fn root_dir(&self) -> &str {
        self.get("SKYHOOK_ROOT_DIR").unwrap_or("/etc/skyhook")
    }

    /// `SKYHOOK_LOG_DIR`: host path of the logs.
    pub fn log_dir(&self) -> &str {
        self.get("SKYHOOK_LOG_DIR").unwrap_or("/var/log/skyhook")
    }

    /// `SKYHOOK_AGENT_WRITE_LOGS`, default on.
    pub fn write_logs(&self) -> bool {
        is_true(self.get("SKYHOOK_AGENT_WRITE_LOGS"), true)
    }

    /// `COPY_RESOLV`, default on.
    pub fn copy_resolv(&self) -> bool {
        is_true(self.get("COPY_RESOLV"), true)
    }

    /// `OVERLAY_ALWAYS_RUN_STEP`, default off.
    pub fn always_run(&self) -> bool {
        is_true(self.get("OVERLAY_ALWAYS_RUN_STEP"), false)
    }

    /// `SKYHOOK_AGENT_BUFFER_LIMIT`, default 8192 bytes per pipe read.
    pub fn buffer_limit(&self) -> Result<usize, Error> {
        match self.get("SKYHOOK_AGENT_BUFFER_LIMIT") {
            None => Ok(8192),
            Some(v) => match v.trim().parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(Error::NotANumber {
                    name: "SKYHOOK_AGENT_BUFFER_LIMIT",
                    value: v.to_string(),
                }),
            },
        }
    }

    /// Whether steps run without chroot ([`NO_CHROOT_VAR`]).
    pub fn no_chroot(&self) -> bool {
        matches!(self.get(NO_CHROOT_VAR), Some(v) if v == "1" || v.eq_ignore_ascii_case("true"))
    }

    /// Window to wait for shutdown after `reboot` returned 0.
    pub fn reboot_wait(&self) -> Result<Duration, Error> {
        millis(self, REBOOT_WAIT_VAR, DEFAULT_REBOOT_WAIT)
    }

    /// Pause before each step.
    pub fn step_delay(&self) -> Result<Duration, Error> {
        millis(self, STEP_DELAY_VAR, DEFAULT_STEP_DELAY)
    }
}

/// The three fields of `SKYHOOK_RESOURCE_ID` (§2.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceId {
    /// `<nodewright>-<uid>-<generation>`.
    pub owner: String,
    /// The package's CR key.
    pub package: String,
    /// The package's CR version.
    pub version: String,
}

impl ResourceId {
    /// Splits on `_`; exactly three fields are required, each safe as a path component: the
    /// owner and the whole id name interrupt flag directories, the package and version name
    /// interrupt log directories (§11.2, §11.4).
    pub fn parse(id: &str) -> Option<Self> {
        let mut it = id.split('_');
        let (Some(a), Some(b), Some(c), None) = (it.next(), it.next(), it.next(), it.next()) else {
            return None;
        };
        if !(crate::names::is_owner_component(a)
            && crate::names::is_package_key(b)
            && crate::names::is_version_component(c))
        {
            return None;
        }
        Some(Self {
            owner: a.to_string(),
            package: b.to_string(),
            version: c.to_string(),
        })
    }
}

/// Merges the three environment levels of §4.3, lowest first: the container environment, the
/// environment read inside the chroot, and the injected (step) variables.
pub fn compose(
    container: &BTreeMap<String, String>,
    chroot: &BTreeMap<String, String>,
    injected: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut out = container.clone();
    for level in [chroot, injected] {
        for (k, v) in level {
            out.insert(k.clone(), v.clone());
        }
    }
    out
}

/// Parses the output of `env` (`K=V` lines) as upstream does; kept for compatibility tooling.
/// The agent itself passes the container environment verbatim (§16 Q8), so it never runs `env`.
pub fn parse_env_output(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(p: &[(&str, &str)]) -> BTreeMap<String, String> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn compose_disjoint_maps_is_union() {
        let m = compose(
            &map(&[("A", "1")]),
            &map(&[("B", "2")]),
            &map(&[("C", "3")]),
        );
        assert_eq!(m, map(&[("A", "1"), ("B", "2"), ("C", "3")]));
    }

    #[test]
    fn compose_chroot_overrides_container() {
        let m = compose(&map(&[("A", "c")]), &map(&[("A", "r")]), &map(&[]));
        assert_eq!(m["A"], "r");
    }

    #[test]
    fn compose_injected_overrides_all() {
        let m = compose(
            &map(&[("A", "c")]),
            &map(&[("A", "r")]),
            &map(&[("A", "i")]),
        );
        assert_eq!(m["A"], "i");
    }

    #[test]
    fn compose_empty_maps_give_empty_and_single_map_passes_through() {
        assert!(compose(&map(&[]), &map(&[]), &map(&[])).is_empty());
        let one = map(&[("X", "1"), ("Y", "2")]);
        assert_eq!(compose(&map(&[]), &one, &map(&[])), one);
        assert_eq!(compose(&one, &map(&[]), &map(&[])), one);
        assert_eq!(compose(&map(&[]), &map(&[]), &one), one);
    }

    #[test]
    fn compose_full_precedence_per_key() {
        let m = compose(
            &map(&[("A", "c"), ("B", "c"), ("C", "c")]),
            &map(&[("B", "r"), ("C", "r")]),
            &map(&[("C", "i")]),
        );
        assert_eq!(m, map(&[("A", "c"), ("B", "r"), ("C", "i")]));
    }

    #[test]
    fn compose_leaves_inputs_unchanged() {
        let (a, b, c) = (map(&[("A", "1")]), map(&[("A", "2")]), map(&[("A", "3")]));
        let _ = compose(&a, &b, &c);
        assert_eq!(
            (a["A"].as_str(), b["A"].as_str(), c["A"].as_str()),
            ("1", "2", "3")
        );
    }

    #[test]
    fn parse_env_output_reads_lines() {
        assert_eq!(
            parse_env_output("A=1\nB=2\n"),
            map(&[("A", "1"), ("B", "2")])
        );
    }

    #[test]
    fn parse_env_output_splits_on_first_equals() {
        assert_eq!(parse_env_output("A=b=c")["A"], "b=c");
    }

    #[test]
    fn parse_env_output_ignores_lines_without_equals_and_blank_lines() {
        assert_eq!(parse_env_output("junk\n\nA=1\n"), map(&[("A", "1")]));
    }

    #[test]
    fn parse_env_output_empty_is_empty() {
        assert!(parse_env_output("").is_empty());
    }

    #[test]
    fn parse_env_output_keeps_empty_values() {
        assert_eq!(parse_env_output("A=")["A"], "");
    }

    #[test]
    fn parse_env_output_keeps_spaces_and_special_characters() {
        assert_eq!(
            parse_env_output("A= x $y 'z' \"w\"")["A"],
            " x $y 'z' \"w\""
        );
    }

    #[test]
    fn env_config_reads_explicit_values_and_defaults() {
        let d = AgentEnv::default();
        assert_eq!(
            (
                d.resource_id(),
                d.data_dir(),
                d.root_dir(),
                d.log_dir(),
                d.write_logs()
            ),
            (
                "",
                "/skyhook-package",
                "/etc/skyhook",
                "/var/log/skyhook",
                true
            )
        );
        let e = AgentEnv::from_pairs([
            ("SKYHOOK_RESOURCE_ID", "a-b-1_p_1.0.0"),
            ("SKYHOOK_DATA_DIR", "/d"),
            ("SKYHOOK_ROOT_DIR", "/r"),
            ("SKYHOOK_LOG_DIR", "/l"),
        ]);
        assert_eq!(
            (e.resource_id(), e.data_dir(), e.root_dir(), e.log_dir()),
            ("a-b-1_p_1.0.0", "/d", "/r", "/l")
        );
    }

    #[test]
    fn write_logs_true_any_case_on_anything_else_off() {
        for (v, want) in [
            ("true", true),
            ("True", true),
            ("TRUE", true),
            ("false", false),
            ("False", false),
            ("yes", false),
            ("1", false),
        ] {
            assert_eq!(
                AgentEnv::from_pairs([("SKYHOOK_AGENT_WRITE_LOGS", v)]).write_logs(),
                want,
                "{v}"
            );
        }
    }

    #[test]
    fn resource_id_requires_three_fields() {
        assert_eq!(
            ResourceId::parse("nw-uid-3_tuning_1.1.4").map(|r| r.package),
            Some("tuning".to_string())
        );
        assert!(ResourceId::parse("a_b").is_none());
        assert!(ResourceId::parse("nw-uid-3_../../etc_1.0.0").is_none());
        assert!(ResourceId::parse("../x_tuning_1.0.0").is_none());
        assert!(ResourceId::parse("nw-uid-3_tuning_..").is_none());
        assert!(ResourceId::parse("a_b_c_d").is_none());
    }

    #[test]
    fn test_knobs_default_to_production_values() {
        let d = AgentEnv::default();
        assert_eq!(d.reboot_wait().unwrap(), Duration::from_secs(10));
        assert_eq!(d.step_delay().unwrap(), Duration::from_secs(1));
        assert!(!d.no_chroot());
    }
}
