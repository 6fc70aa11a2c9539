//! The scenario file format (spec/scenarios.md §1–§5), parsed strictly: an unknown key is an
//! error naming it, so a typo never silently weakens a test.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Taint, Toleration};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Deserialize;
use serde_yaml::Value;

use crate::settings::Settings;
use crate::sim::PackageModel;

/// A parse error with the file it comes from.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// YAML syntax or shape.
    #[error("{file}: {message}")]
    Invalid {
        /// File.
        file: String,
        /// What is wrong.
        message: String,
    },
}

/// A Go-style duration (`500ms`, `2s`, `1h30m`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        nodewright_schema::duration::parse_go_duration(&text)
            .map(|p| Dur(p.non_negative()))
            .map_err(serde::de::Error::custom)
    }
}

/// One scenario file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Name.
    pub name: String,
    /// Description.
    #[serde(default)]
    pub description: String,
    /// Operator settings overrides (spec/operator.md §13 names, camelCase).
    #[serde(default)]
    pub settings: Settings,
    /// The starting cluster.
    #[serde(default)]
    pub cluster: ClusterSpec,
    /// Package behaviour models by image (with or without tag).
    #[serde(default)]
    pub packages: BTreeMap<String, PackageModel>,
    /// The starting repository.
    #[serde(default)]
    pub repo: RepoSpec,
    /// The steps.
    #[serde(default)]
    pub steps: Vec<Step>,
}

/// `cluster:`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSpec {
    /// Nodes and node generators.
    #[serde(default)]
    pub nodes: Vec<NodeEntry>,
    /// Workload pods.
    #[serde(default)]
    pub pods: Vec<PodEntry>,
    /// PodDisruptionBudgets.
    #[serde(default)]
    pub pdbs: Vec<PdbEntry>,
}

/// A node or a generator of nodes.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum NodeEntry {
    /// `generate: {count, namePrefix, labels}`.
    Generate {
        /// The generator.
        generate: Generate,
    },
    /// One node.
    Node(NodeSpecEntry),
}

/// `generate:` — `count` nodes named `<namePrefix>0 …`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Generate {
    /// How many.
    pub count: usize,
    /// Name prefix.
    pub name_prefix: String,
    /// Labels of every node.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Annotations of every node.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Taints of every node.
    #[serde(default)]
    pub taints: Vec<Taint>,
    /// Cordoned.
    #[serde(default)]
    pub unschedulable: bool,
}

/// One node.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpecEntry {
    /// Name.
    pub name: String,
    /// Labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Taints.
    #[serde(default)]
    pub taints: Vec<Taint>,
    /// Cordoned.
    #[serde(default)]
    pub unschedulable: bool,
}

/// A workload pod.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PodEntry {
    /// Name.
    pub name: String,
    /// Namespace (default `default`).
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Node it runs on; omitted = scheduled.
    #[serde(default)]
    pub node: Option<String>,
    /// Labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// `ReplicaSet | StatefulSet | DaemonSet | Job | none` (default ReplicaSet).
    #[serde(default)]
    pub owner: Option<String>,
    /// Tolerations.
    #[serde(default)]
    pub tolerations: Vec<Toleration>,
    /// Has an emptyDir volume.
    #[serde(default)]
    pub empty_dir: bool,
    /// Finishes by itself after this long.
    #[serde(default)]
    pub run_for: Option<Dur>,
    /// Termination grace period (default 30s).
    #[serde(default)]
    pub termination_grace_period: Option<Dur>,
}

fn default_namespace() -> String {
    "default".into()
}

/// A PodDisruptionBudget.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PdbEntry {
    /// Name.
    pub name: String,
    /// Namespace (default `default`).
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// `matchLabels` selector.
    #[serde(default)]
    pub selector: BTreeMap<String, String>,
    /// `minAvailable` (int or `N%`).
    #[serde(default)]
    pub min_available: Option<IntOrString>,
    /// `maxUnavailable` (int or `N%`).
    #[serde(default)]
    pub max_unavailable: Option<IntOrString>,
}

/// `repo:`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepoSpec {
    /// Path → content of the first commit.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
}

/// One step (spec/scenarios.md §4).
#[derive(Clone, Debug)]
pub enum Step {
    /// `advance: 30s`.
    Advance(Duration),
    /// `until: {expect, within}`.
    Until {
        /// What must hold.
        expect: Box<Expect>,
        /// How long to wait at most.
        within: Duration,
    },
    /// `expect: {…}`.
    Expect(Box<Expect>),
    /// `commit: {message, files, delete}`.
    Commit(CommitStep),
    /// `node: {…}`.
    Node(Box<NodeStep>),
    /// `add: {nodes, pods, pdbs}`.
    Add(ClusterSpec),
    /// `delete: {pods, pdbs}`.
    Delete(DeleteStep),
    /// `annotate: {nodewright, set, remove}`.
    Annotate(AnnotateStep),
    /// `cli: [args…]` with an optional expected `exit`.
    Cli {
        /// Arguments after `nodewright`.
        args: Vec<String>,
        /// Expected exit code (default 0).
        exit: i32,
    },
    /// `restartReconciler: {}`.
    RestartReconciler,
    /// `failApi: {rate, for}`.
    FailApi {
        /// Share of writes that fail.
        rate: f64,
        /// For how long.
        duration: Duration,
    },
}

impl Step {
    /// The step's key, for reports.
    pub fn kind(&self) -> &'static str {
        match self {
            Step::Advance(_) => "advance",
            Step::Until { .. } => "until",
            Step::Expect(_) => "expect",
            Step::Commit(_) => "commit",
            Step::Node(_) => "node",
            Step::Add(_) => "add",
            Step::Delete(_) => "delete",
            Step::Annotate(_) => "annotate",
            Step::Cli { .. } => "cli",
            Step::RestartReconciler => "restartReconciler",
            Step::FailApi { .. } => "failApi",
        }
    }
}

/// `commit:`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitStep {
    /// Commit message.
    #[serde(default)]
    pub message: String,
    /// Files written.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// Files removed.
    #[serde(default)]
    pub delete: Vec<String>,
}

/// `node:`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeStep {
    /// Node name.
    pub name: String,
    /// Labels to set.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Label keys to remove.
    #[serde(default)]
    pub remove_labels: Vec<String>,
    /// Annotations to set.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Annotation keys to remove.
    #[serde(default)]
    pub remove_annotations: Vec<String>,
    /// Taints to add.
    #[serde(default)]
    pub taints: Vec<Taint>,
    /// Taint keys to remove.
    #[serde(default)]
    pub remove_taints: Vec<String>,
    /// Cordon (`true`) or uncordon (`false`).
    #[serde(default)]
    pub unschedulable: Option<bool>,
    /// Reboot the node (NotReady for 60 s).
    #[serde(default)]
    pub reboot: bool,
    /// Delete the node.
    #[serde(default)]
    pub delete: bool,
}

/// `delete:`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeleteStep {
    /// `ns/name` of pods.
    #[serde(default)]
    pub pods: Vec<String>,
    /// `ns/name` of PDBs.
    #[serde(default)]
    pub pdbs: Vec<String>,
}

/// `annotate:`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnnotateStep {
    /// NodeWright name.
    pub nodewright: String,
    /// Annotations to set.
    #[serde(default)]
    pub set: BTreeMap<String, String>,
    /// Annotation keys to remove.
    #[serde(default)]
    pub remove: Vec<String>,
}

/// `expect:` (spec/scenarios.md §5). Sections are kept as YAML and matched by the rules of
/// [`super::matcher`].
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Expect {
    /// By NodeWright name.
    #[serde(default)]
    pub nodewrights: Option<BTreeMap<String, Value>>,
    /// By node name.
    #[serde(default)]
    pub nodes: Option<BTreeMap<String, Value>>,
    /// Jobs owned by the reconciler.
    #[serde(default)]
    pub jobs: Option<JobsExpect>,
    /// By `namespace/name`.
    #[serde(default)]
    pub config_maps: Option<BTreeMap<String, Value>>,
    /// By `namespace/name`.
    #[serde(default)]
    pub pods: Option<BTreeMap<String, Value>>,
    /// Events.
    #[serde(default)]
    pub events: Option<EventsExpect>,
    /// Prometheus series → exact value, or the word `absent`.
    #[serde(default)]
    pub metrics: Option<BTreeMap<String, MetricExpect>>,
    /// Status documents by NodeWright name.
    #[serde(default)]
    pub git_status: Option<BTreeMap<String, Value>>,
    /// History.
    #[serde(default)]
    pub history: Option<HistoryExpect>,
}

/// The expected value of one metric series (spec/scenarios.md §5): a number, or `absent` for a
/// series that must not be exported at all. An absent series also matches `0`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MetricExpect {
    /// The series reads exactly this value (an absent series reads 0).
    Value(f64),
    /// The series is not exported.
    Absent,
}

impl<'de> Deserialize<'de> for MetricExpect {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::Number(n) => n
                .as_f64()
                .map(MetricExpect::Value)
                .ok_or_else(|| serde::de::Error::custom(format!("{n:?} is not a number"))),
            Value::String(s) if s == "absent" => Ok(MetricExpect::Absent),
            // A quoted number compares by value, as everywhere in expectations.
            Value::String(s) if let Ok(v) = s.trim().parse::<f64>() => Ok(MetricExpect::Value(v)),
            other => Err(serde::de::Error::custom(format!(
                "a metric expectation is a number or the word `absent`, not {}",
                super::matcher::scalar_text(&other)
            ))),
        }
    }
}

/// `jobs:`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobsExpect {
    /// Jobs that exist.
    #[serde(default)]
    pub count: Option<usize>,
    /// Jobs not finished.
    #[serde(default)]
    pub active: Option<usize>,
    /// `NW/PACKAGE/STAGE/NODE` → subset of the Job.
    #[serde(default)]
    pub items: BTreeMap<String, Value>,
    /// Addresses with no Job.
    #[serde(default)]
    pub absent: Vec<String>,
}

/// `events:`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsExpect {
    /// Each must match some recorded event.
    #[serde(default)]
    pub contains: Vec<EventExpect>,
}

/// One expected event; `message` is a substring.
#[derive(Clone, Debug, Default, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct EventExpect {
    /// Reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Object name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    /// `Normal` or `Warning`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Substring of the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `history:`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryExpect {
    /// First occurrences in this order.
    #[serde(default)]
    pub order: Vec<String>,
    /// Never occur.
    #[serde(default)]
    pub never: Vec<String>,
    /// Exact counts.
    #[serde(default)]
    pub count: BTreeMap<String, usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UntilStep {
    expect: Expect,
    within: Dur,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FailApiStep {
    rate: f64,
    #[serde(rename = "for")]
    duration: Dur,
}

impl<'de> Deserialize<'de> for Step {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let value = Value::deserialize(d)?;
        let Value::Mapping(map) = &value else {
            return Err(D::Error::custom(
                "a step is a mapping with one key, e.g. `advance: 30s`",
            ));
        };
        let key_of = |v: &Value| v.as_str().map(str::to_string).unwrap_or_default();
        let keys: Vec<String> = map.keys().map(key_of).collect();
        let get = |k: &str| {
            map.get(Value::String(k.into()))
                .cloned()
                .unwrap_or(Value::Null)
        };
        let parse = |k: &str| -> Result<Value, D::Error> { Ok(get(k)) };
        if keys.iter().any(|k| k == "cli") {
            if let Some(extra) = keys.iter().find(|k| *k != "cli" && *k != "exit") {
                return Err(D::Error::custom(format!(
                    "unknown key `{extra}` in a cli step (allowed: cli, exit)"
                )));
            }
            let args: Vec<Value> = from::<_, D::Error>(parse("cli")?)?;
            let args = args
                .into_iter()
                .map(|v| match v {
                    Value::String(s) => s,
                    Value::Number(n) => n.to_string(),
                    Value::Bool(b) => b.to_string(),
                    other => serde_yaml::to_string(&other)
                        .unwrap_or_default()
                        .trim()
                        .to_string(),
                })
                .collect();
            let exit = match get("exit") {
                Value::Null => 0,
                v => from::<_, D::Error>(v)?,
            };
            return Ok(Step::Cli { args, exit });
        }
        if keys.len() != 1 {
            return Err(D::Error::custom(format!(
                "a step has exactly one key, found {keys:?}"
            )));
        }
        let key = keys[0].as_str();
        let body = get(key);
        Ok(match key {
            "advance" => Step::Advance(from::<Dur, D::Error>(body)?.0),
            "until" => {
                let u: UntilStep = from::<_, D::Error>(body)?;
                Step::Until {
                    expect: Box::new(u.expect),
                    within: u.within.0,
                }
            }
            "expect" => Step::Expect(Box::new(from::<_, D::Error>(body)?)),
            "commit" => Step::Commit(from::<_, D::Error>(body)?),
            "node" => Step::Node(Box::new(from::<_, D::Error>(body)?)),
            "add" => Step::Add(from::<_, D::Error>(body)?),
            "delete" => Step::Delete(from::<_, D::Error>(body)?),
            "annotate" => Step::Annotate(from::<_, D::Error>(body)?),
            "restartReconciler" => Step::RestartReconciler,
            "failApi" => {
                let f: FailApiStep = from::<_, D::Error>(body)?;
                if !(0.0..=1.0).contains(&f.rate) {
                    return Err(D::Error::custom(format!(
                        "failApi rate {} is not between 0 and 1",
                        f.rate
                    )));
                }
                Step::FailApi {
                    rate: f.rate,
                    duration: f.duration.0,
                }
            }
            other => {
                return Err(D::Error::custom(format!(
                    "unknown step `{other}` (steps: advance, until, expect, commit, node, add, delete, annotate, cli, restartReconciler, failApi)"
                )));
            }
        })
    }
}

fn from<T: serde::de::DeserializeOwned, E: serde::de::Error>(v: Value) -> Result<T, E> {
    serde_yaml::from_value(v).map_err(E::custom)
}

/// Parses a scenario file's text.
pub fn parse(file: &str, text: &str) -> Result<Scenario, FormatError> {
    serde_yaml::from_str(text).map_err(|e| FormatError::Invalid {
        file: file.to_string(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_step_kind_parses() {
        let s = parse(
            "t.yaml",
            r#"
name: all steps
settings: {reconcileInterval: 5s, jobStageTimeout: 1h, reapplyOnReboot: true}
cluster:
  nodes:
    - {name: n1, labels: {nodepool: gpu}, taints: [{key: dedicated, value: gpu, effect: NoSchedule}]}
    - generate: {count: 3, namePrefix: gpu-, labels: {nodepool: gpu}}
  pods:
    - {name: train-0, node: n1, owner: StatefulSet, runFor: 10m, terminationGracePeriod: 30s, emptyDir: true}
  pdbs:
    - {name: web, namespace: default, selector: {app: web}, minAvailable: 1}
    - {name: web2, selector: {app: web2}, maxUnavailable: "50%"}
packages:
  example/tuning:
    default: {duration: 2s}
    stages: {apply-check: {duration: 1s, failures: 2}}
  example/driver: {rebootTakes: 90s}
repo: {files: {a.yaml: "x: 1"}}
steps:
  - advance: 1h30m
  - until: {expect: {nodes: {n1: {ready: true}}}, within: 5m}
  - expect: {history: {order: [a, b], never: [c], count: {d: 1}}}
  - commit: {message: m, files: {b.yaml: "y"}, delete: [a.yaml]}
  - node: {name: n1, removeLabels: [k], reboot: true, unschedulable: true}
  - add: {nodes: [{name: n9}], pods: [], pdbs: []}
  - delete: {pods: [default/train-0], pdbs: [default/web]}
  - annotate: {nodewright: tuning, set: {k: v}, remove: [x]}
  - cli: [node, reset, n1, --nodewright, tuning, --confirm]
  - {cli: [version], exit: 1}
  - restartReconciler: {}
  - failApi: {rate: 0.2, for: 5m}
"#,
        )
        .unwrap();
        assert_eq!(s.steps.len(), 12);
        assert_eq!(s.settings.reconcile_interval(), Duration::from_secs(5));
        assert!(matches!(s.steps[0], Step::Advance(d) if d == Duration::from_secs(5400)));
        assert!(matches!(&s.steps[9], Step::Cli { exit: 1, .. }));
        assert!(matches!(s.steps[11], Step::FailApi { rate, .. } if rate == 0.2));
    }

    #[test]
    fn unknown_keys_are_errors_that_name_the_key() {
        let err = parse("t.yaml", "name: x\nsteps:\n  - advanse: 1s\n").unwrap_err();
        assert!(err.to_string().contains("advanse"), "{err}");
        let err = parse("t.yaml", "name: x\nsettings: {reconcileIntreval: 1s}\n").unwrap_err();
        assert!(err.to_string().contains("reconcileIntreval"), "{err}");
        let err = parse("t.yaml", "name: x\nsteps:\n  - expect: {nodez: {}}\n").unwrap_err();
        assert!(err.to_string().contains("nodez"), "{err}");
    }
}
