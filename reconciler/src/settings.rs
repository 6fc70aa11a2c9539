//! Operator settings (spec/operator.md §13.1) and internal constants (§13.2).
//!
//! Names are the camelCase setting names of the spec; scenario files (`settings:`) and the
//! settings ConfigMap use them verbatim. Durations are Go-style strings on the wire.

use std::time::Duration;

use k8s_openapi::api::core::v1::Taint;
use nodewright_schema::duration::{GoDuration, parse_go_duration};
use nodewright_schema::keys;
use serde::{Deserialize, Serialize};

/// Every operator setting, with the spec's defaults.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Settings {
    /// Where Jobs, pods and ConfigMaps live.
    pub namespace: String,
    /// Idle requeue ("max interval"), ≥ 1 min.
    pub default_interval: GoDuration,
    /// Requeue after a pass that wrote or still has work.
    pub reconcile_interval: GoDuration,
    /// Added to every package pod when non-empty.
    pub image_pull_secret: String,
    /// Host root for package copies and agent state; must start with `/`.
    pub copy_dir_root: String,
    /// Host log root.
    pub agent_log_root: String,
    /// Re-run everything on a node after it reboots (§10.6).
    pub reapply_on_reboot: bool,
    /// `key=value:Effect`.
    pub runtime_required_taint: String,
    /// Agent image; must contain a tag.
    pub agent_image: String,
    /// Pause image; must contain a tag (unused by Jobs).
    pub pause_image: String,
    /// TTL of processed succeeded Jobs, ≥ 1m.
    pub job_ttl_succeeded: GoDuration,
    /// TTL of processed failed Jobs, ≥ 1m.
    pub job_ttl_failed: GoDuration,
    /// Default per-attempt / whole-stage bound; `0` removes it.
    pub job_stage_timeout: GoDuration,
    /// Retries after the first attempt.
    pub job_backoff_limit: i32,
    /// Migration shim only.
    pub legacy_cleanup_delay: GoDuration,
    /// Also export `skyhook_*` metrics.
    pub publish_legacy_metrics: bool,
    /// Serve admission webhooks.
    pub enable_webhooks: bool,
    /// One active replica.
    pub leader_election: bool,
    /// The version this operator stamps (`version` annotations).
    pub operator_version: String,
    /// This reconciler's requests per second to the API server (`--kube-qps` overrides).
    pub kube_qps: f64,
    /// Requests let through at once before `kubeQps` applies (`--kube-burst` overrides).
    pub kube_burst: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            namespace: "nodewright".into(),
            default_interval: GoDuration::new("10m"),
            reconcile_interval: GoDuration::new("2s"),
            image_pull_secret: String::new(),
            copy_dir_root: "/var/lib/skyhook".into(),
            agent_log_root: "/var/log/skyhook".into(),
            reapply_on_reboot: false,
            runtime_required_taint: keys::DEFAULT_RUNTIME_REQUIRED_TAINT.into(),
            agent_image: "ghcr.io/nvidia/nodewright/agent:v7.0.0".into(),
            pause_image: "registry.k8s.io/pause:3.10".into(),
            job_ttl_succeeded: GoDuration::new("1h"),
            job_ttl_failed: GoDuration::new("24h"),
            job_stage_timeout: GoDuration::new("1h"),
            job_backoff_limit: 3,
            legacy_cleanup_delay: GoDuration::new("24h"),
            publish_legacy_metrics: true,
            enable_webhooks: true,
            leader_election: false,
            operator_version: concat!("v", env!("CARGO_PKG_VERSION")).into(),
            kube_qps: crate::cluster::api_budget::DEFAULT_QPS,
            kube_burst: crate::cluster::api_budget::DEFAULT_BURST,
        }
    }
}

/// Internal constants (§13.2).
pub mod constants {
    use std::time::Duration;
    /// Writes of one pass outstanding at once against a cluster: enough to keep the API
    /// budget's burst (upstream's 30) busy while round trips are under way; the budget, not
    /// this bound, is what protects the API server.
    pub const WRITES_IN_FLIGHT: usize = 32;
    /// After a cluster change wakes the reconciler, it waits until the burst of watch events
    /// ends, this long without a new one, so the burst becomes one pass.
    pub const CHANGE_QUIET: Duration = Duration::from_millis(10);
    /// The longest wait for a burst to end: under a steady stream of events a pass still
    /// follows the change it reacts to promptly, short next to `reconcileInterval`.
    pub const CHANGE_SETTLE: Duration = Duration::from_millis(50);
    /// How far back along the tracked branch the source looks for the commits that last
    /// changed a NodeWright's spec and its approvals; an approval older than that counts
    /// for nothing (docs/approvals.md).
    pub const APPROVAL_HISTORY_COMMITS: usize = 1000;
    /// After a PDB refusal on a node, no new eviction there for this long (§7.9).
    pub const PDB_RETRY_THROTTLE: Duration = Duration::from_secs(30);
    /// Pending config-update retry (§6.8).
    pub const CONFIG_UPDATE_RETRY: Duration = Duration::from_secs(30);
    /// Grace before a `FailureTarget` Job counts as erroring evidence (§8.9).
    pub const FAILURE_TARGET_GRACE: Duration = Duration::from_secs(300);
    /// Cap of the `last-logs` Job annotation (§8.12).
    pub const LAST_LOGS_CAP_BYTES: usize = 16 * 1024;
    /// Node names listed in a condition message before truncation (§12).
    pub const CONDITION_NODE_LIST_CAP: usize = 10;
    /// Node names listed in the NodeStateMalformed message (§12.2).
    pub const MALFORMED_NODE_LIST_CAP: usize = 5;
}

/// A setting that cannot be used; every violation is reported at once (§3.5).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid operator settings: {}", .0.join(", "))]
pub struct SettingsError(pub Vec<String>);

impl Settings {
    /// Start-up validation (§3.5, with the UP+ additions).
    pub fn validate(&self) -> Result<(), SettingsError> {
        let mut errors = Vec::new();
        if self.namespace.is_empty() {
            errors.push("namespace must be set".to_string());
        }
        if self.copy_dir_root.is_empty() {
            errors.push("copy dir root must be set".to_string());
        } else if !self.copy_dir_root.starts_with('/') {
            errors.push("copy dir root must start with /".to_string());
        }
        if self.runtime_required_taint.is_empty() {
            errors.push("runtime required taint must be set".to_string());
        } else if self.runtime_required_taint.ends_with('-') {
            errors.push("runtime required taint must not be a deletion".to_string());
        } else {
            match parse_taint(&self.runtime_required_taint) {
                Err(e) => errors.push(format!("runtime required taint is invalid: {e}")),
                Ok(taint) => {
                    if taint.key.contains('/') {
                        errors.push(
                            "runtime required taint key must not have a DNS prefix (no '/')"
                                .to_string(),
                        );
                    }
                    if taint.key.len() > 53 {
                        errors.push(
                            "runtime required taint key must be at most 53 characters".to_string(),
                        );
                    }
                }
            }
        }
        match self.default_interval.parse() {
            Ok(d) if d.non_negative() >= Duration::from_secs(60) => {}
            Ok(_) => errors.push("max interval must be at least 1 minute".to_string()),
            Err(e) => errors.push(format!("defaultInterval: {e}")),
        }
        if let Err(e) = self.reconcile_interval.parse() {
            errors.push(format!("reconcileInterval: {e}"));
        }
        if !(self.kube_qps.is_finite() && self.kube_qps > 0.0) {
            errors.push(format!(
                "kubeQps must be a positive number of requests per second, not {}",
                self.kube_qps
            ));
        }
        if self.kube_burst == 0 {
            errors.push("kubeBurst must be at least 1".to_string());
        }
        check_image(&mut errors, "agent image", &self.agent_image);
        check_image(&mut errors, "pause image", &self.pause_image);
        for (name, value) in [
            ("job ttl succeeded", &self.job_ttl_succeeded),
            ("job ttl failed", &self.job_ttl_failed),
        ] {
            match value.parse() {
                Ok(d) if !d.negative && d.magnitude >= Duration::from_secs(60) => {}
                Ok(_) => errors.push(format!("{name} must be at least 1 minute")),
                Err(e) => errors.push(format!("{name}: {e}")),
            }
        }
        match self.job_stage_timeout.parse() {
            Ok(d) if d.is_negative() => {
                errors.push("job stage timeout must be greater than or equal to 0".to_string())
            }
            Ok(_) => {}
            Err(e) => errors.push(format!("job stage timeout: {e}")),
        }
        if self.job_backoff_limit < 0 {
            errors.push("job backoff limit must be greater than or equal to 0".to_string());
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(SettingsError(errors))
        }
    }

    /// The parsed runtime-required taint (call after [`Settings::validate`]).
    pub fn runtime_required_taint(&self) -> Taint {
        parse_taint(&self.runtime_required_taint).unwrap_or_else(|_| {
            parse_taint(keys::DEFAULT_RUNTIME_REQUIRED_TAINT).unwrap_or_default()
        })
    }

    /// `reconcileInterval` as a duration (2 s when unreadable).
    pub fn reconcile_interval(&self) -> Duration {
        duration_or(&self.reconcile_interval, Duration::from_secs(2))
    }
    /// `defaultInterval` as a duration.
    pub fn default_interval(&self) -> Duration {
        duration_or(&self.default_interval, Duration::from_secs(600))
    }
    /// `jobStageTimeout` as a duration (`0` = no bound).
    pub fn job_stage_timeout(&self) -> Duration {
        duration_or(&self.job_stage_timeout, Duration::from_secs(3600))
    }
    /// `jobTtlSucceeded` as a duration.
    pub fn job_ttl_succeeded(&self) -> Duration {
        duration_or(&self.job_ttl_succeeded, Duration::from_secs(3600))
    }
    /// `jobTtlFailed` as a duration.
    pub fn job_ttl_failed(&self) -> Duration {
        duration_or(&self.job_ttl_failed, Duration::from_secs(86400))
    }
    /// The tag of the agent image (`packages.json` `agentVersion`, §9.1).
    pub fn agent_version(&self) -> &str {
        image_tag(&self.agent_image).unwrap_or_default()
    }
}

fn duration_or(value: &GoDuration, fallback: Duration) -> Duration {
    parse_go_duration(&value.0)
        .map(|d| d.non_negative())
        .unwrap_or(fallback)
}

fn check_image(errors: &mut Vec<String>, what: &str, image: &str) {
    if image.is_empty() {
        errors.push(format!("{what} must be set"));
    } else if image_tag(image).is_none() {
        errors.push(format!("{what} must contain a tag"));
    }
}

/// The tag of an image reference (after the last `:` that follows the last `/`).
pub fn image_tag(image: &str) -> Option<&str> {
    let last = image.rsplit('/').next().unwrap_or(image);
    last.split_once(':').map(|(_, tag)| tag)
}

/// Parses a taint spec `key[=value]:Effect`.
pub fn parse_taint(spec: &str) -> Result<Taint, String> {
    let (key_value, effect) = spec
        .rsplit_once(':')
        .ok_or_else(|| format!("{spec:?} has no effect; write key=value:Effect"))?;
    if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        return Err(format!(
            "effect {effect:?} must be NoSchedule, PreferNoSchedule or NoExecute"
        ));
    }
    let (key, value) = match key_value.split_once('=') {
        Some((k, v)) => (k, Some(v.to_string())),
        None => (key_value, None),
    };
    if key.is_empty() {
        return Err(format!("{spec:?} has an empty key"));
    }
    Ok(Taint {
        key: key.to_string(),
        value,
        effect: effect.to_string(),
        time_added: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        Settings::default().validate().unwrap();
        let taint = Settings::default().runtime_required_taint();
        assert_eq!(taint.key, "nodewright.nvidia.com");
        assert_eq!(taint.value.as_deref(), Some("runtime-required"));
        assert_eq!(taint.effect, "NoSchedule");
    }

    #[test]
    fn all_violations_are_reported_together() {
        let settings = Settings {
            namespace: String::new(),
            copy_dir_root: "relative".into(),
            agent_image: "agent".into(),
            default_interval: GoDuration::new("30s"),
            ..Settings::default()
        };
        let err = settings.validate().unwrap_err();
        assert_eq!(
            err.0,
            [
                "namespace must be set",
                "copy dir root must start with /",
                "max interval must be at least 1 minute",
                "agent image must contain a tag"
            ]
        );
    }

    #[test]
    fn scenario_settings_read_camel_case() {
        let s: Settings = serde_yaml::from_str(
            "reconcileInterval: 5s\njobStageTimeout: 1h\nreapplyOnReboot: true",
        )
        .unwrap();
        assert_eq!(s.reconcile_interval(), Duration::from_secs(5));
        assert!(s.reapply_on_reboot);
    }
}
