//! `package status|rerun|logs` (§14.4).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use nodewright_schema::node_state::entry_key;
use nodewright_schema::{PackageStatus, Stage, State, keys, names};
use serde::Serialize;

use super::{NodePatterns, VerbError, VerbPlan, find_nodewright, node_name, node_state_of};
use crate::plan::{Action, NodePatch, NodeStateDelta};
use crate::snapshot::Snapshot;

/// One row of `package status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PackageRow {
    /// Node name.
    pub node: String,
    /// Package name.
    pub package: String,
    /// Entry version.
    pub version: String,
    /// Stage (empty when unset).
    pub stage: String,
    /// State (empty when unset).
    pub state: String,
    /// Failed attempts.
    pub restarts: i32,
}

/// `package status <pkg> --nodewright <nw> [--node <pattern>…]`.
pub fn status(
    snapshot: &Snapshot,
    nw_name: &str,
    package: &str,
    nodes: &NodePatterns,
) -> Result<Vec<PackageRow>, VerbError> {
    find_nodewright(snapshot, nw_name)?;
    let mut rows = Vec::new();
    for node in snapshot
        .nodes
        .iter()
        .filter(|n| nodes.matches(node_name(n)))
    {
        if let Some(Ok(state)) = node_state_of(node, nw_name) {
            for entry in state.entries_of(package) {
                rows.push(PackageRow {
                    node: node_name(node).to_string(),
                    package: entry.name.clone(),
                    version: entry.version.clone(),
                    stage: entry.stage.map(|s| s.to_string()).unwrap_or_default(),
                    state: entry.state.map(|s| s.to_string()).unwrap_or_default(),
                    restarts: entry.restarts,
                });
            }
        }
    }
    rows.sort_by(|a, b| (&a.node, &a.version).cmp(&(&b.node, &b.version)));
    Ok(rows)
}

/// Table rendering of package rows.
pub fn table(rows: &[PackageRow], _wide: bool) -> Vec<Vec<String>> {
    let mut out = vec![vec![
        "NODE".into(),
        "PACKAGE".into(),
        "VERSION".into(),
        "STAGE".into(),
        "STATE".into(),
        "RESTARTS".into(),
    ]];
    out.extend(rows.iter().map(|r| {
        vec![
            r.node.clone(),
            r.package.clone(),
            r.version.clone(),
            r.stage.clone(),
            r.state.clone(),
            r.restarts.to_string(),
        ]
    }));
    out
}

/// Stages `package rerun --stage` accepts.
const RERUN_STAGES: [Stage; 4] = [
    Stage::Apply,
    Stage::Config,
    Stage::Interrupt,
    Stage::PostInterrupt,
];

/// Parses a `--stage` value with upstream's message.
pub fn parse_rerun_stage(value: &str) -> Result<Stage, VerbError> {
    RERUN_STAGES
        .into_iter()
        .find(|s| s.as_str() == value)
        .ok_or_else(|| {
            VerbError::InvalidArgument(format!(
                "invalid stage {value:?}: must be one of apply, config, interrupt, post-interrupt"
            ))
        })
}

/// `package rerun <pkg> --nodewright <nw> --node <pattern>… [--stage S]`: only nodes whose state
/// has `<pkg>|<spec version>` are touched. Without a stage the entry is removed (re-run from
/// `apply`); with one it is set to `(S, in_progress)`.
pub fn plan_rerun(
    snapshot: &Snapshot,
    nw_name: &str,
    package: &str,
    nodes: &NodePatterns,
    stage: Option<Stage>,
) -> Result<VerbPlan, VerbError> {
    let nw = find_nodewright(snapshot, nw_name)?;
    let spec = nw
        .spec
        .packages()
        .get(package)
        .ok_or_else(|| VerbError::PackageNotInSpec {
            nodewright: nw_name.to_string(),
            package: package.to_string(),
        })?;
    let key = entry_key(package, &spec.version);
    let mut plan = VerbPlan::default();
    let mut matched = false;
    for node in snapshot
        .nodes
        .iter()
        .filter(|n| nodes.matches(node_name(n)))
    {
        matched = true;
        let name = node_name(node);
        let state = match node_state_of(node, nw_name) {
            Some(Ok(state)) => state,
            Some(Err(reason)) => {
                plan.warnings.push(format!(
                    "{name}: {} does not parse ({reason}); skipped",
                    keys::node_state(nw_name)
                ));
                continue;
            }
            None => continue,
        };
        let Some(entry) = state.0.get(&key) else {
            plan.notes.push(format!("{name}: no entry {key}; skipped"));
            continue;
        };
        let delta = match stage {
            None if state.0.len() == 1 => {
                plan.changes.push(format!("{name}: remove entry {key} (the last one: annotation removed); {package} re-runs from apply"));
                NodeStateDelta::Delete {
                    nodewright: nw_name.to_string(),
                }
            }
            None => {
                plan.changes.push(format!(
                    "{name}: remove entry {key}; {package} re-runs from apply"
                ));
                NodeStateDelta::Entries {
                    nodewright: nw_name.to_string(),
                    upsert: BTreeMap::new(),
                    remove: vec![key.clone()],
                }
            }
            Some(stage) => {
                let updated = PackageStatus {
                    stage: Some(stage),
                    state: Some(State::InProgress),
                    ..entry.clone()
                };
                plan.changes
                    .push(format!("{name}: set {key} to {stage}/in_progress"));
                NodeStateDelta::Entries {
                    nodewright: nw_name.to_string(),
                    upsert: BTreeMap::from([(key.clone(), updated)]),
                    remove: Vec::new(),
                }
            }
        };
        let mut patch = NodePatch::new(name);
        patch.node_state.push(delta);
        plan.actions.push(Action::PatchNode(patch));
    }
    if !matched {
        return Err(VerbError::NoNodeMatches(nodes.describe()));
    }
    Ok(plan)
}

/// Stage pods of a package, for `package logs`: selected by the `name` and `package` labels
/// (retained Jobs and failed-attempt archives included), optionally by node and stage, oldest
/// first.
pub fn log_pods<'a>(
    snapshot: &'a Snapshot,
    nw_name: &str,
    package: &str,
    version: &str,
    node: Option<&str>,
    stage: Option<&str>,
) -> Vec<&'a Pod> {
    let package_label = format!("{package}-{version}");
    let node_label = node.map(names::node_label_value);
    let mut pods: Vec<&Pod> = snapshot
        .pods
        .iter()
        .map(|pod| &**pod)
        .filter(|pod| {
            let labels = pod.metadata.labels.as_ref();
            let label = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
            label(keys::JOB_LABEL_NAME) == Some(nw_name)
                && label(keys::JOB_LABEL_PACKAGE) == Some(package_label.as_str())
                && node_label
                    .as_deref()
                    .is_none_or(|n| label(keys::JOB_LABEL_NODE) == Some(n))
                && stage.is_none_or(|s| label(keys::JOB_LABEL_STAGE) == Some(s))
        })
        .collect();
    pods.sort_by(|a, b| {
        let key = |p: &Pod| {
            (
                p.metadata.creation_timestamp.as_ref().map(|t| t.0),
                p.metadata.name.clone(),
            )
        };
        key(a).cmp(&key(b))
    });
    pods
}

/// One container log `package logs` reads: which Job, pod, attempt and container.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LogTarget {
    /// Node the pod ran on.
    pub node: String,
    /// Stage label of the Job.
    pub stage: String,
    /// The Job.
    pub job: String,
    /// Pod namespace.
    pub namespace: String,
    /// The pod (one attempt).
    pub pod: String,
    /// 1-based position of this attempt among the Job's retained pods, oldest first.
    pub attempt: usize,
    /// Retained pods of the Job (running attempt + archives, §8.11).
    pub attempts: usize,
    /// What the attempt is: `running`, `failed` (an archived failed attempt), `succeeded`,
    /// `pending` or `terminating`.
    pub attempt_state: String,
    /// The container (a package step: the init containers of a stage pod, §8.3).
    pub container: String,
    /// The container's state: `running`, `exit N (Reason)`, `waiting (Reason)`.
    pub container_state: String,
    /// In-place restarts of the container (interrupt pods, `OnFailure`).
    pub restarts: i32,
}

impl LogTarget {
    /// Whether the container may still write (the running attempt's unfinished container).
    pub fn live(&self) -> bool {
        matches!(self.attempt_state.as_str(), "running" | "pending")
            && !self.container_state.starts_with("exit ")
    }
}

fn attempt_state(pod: &Pod) -> String {
    if pod.metadata.deletion_timestamp.is_some() {
        return "terminating".into();
    }
    let status = pod.status.as_ref();
    // A stage pod stays in phase Pending while its init containers (the package's steps) run.
    let started = status
        .into_iter()
        .flat_map(|s| {
            s.init_container_statuses
                .iter()
                .flatten()
                .chain(s.container_statuses.iter().flatten())
        })
        .any(|c| {
            c.state
                .as_ref()
                .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
        });
    match status.and_then(|s| s.phase.as_deref()) {
        Some("Succeeded") => "succeeded",
        Some("Failed") => "failed",
        Some("Running") => "running",
        _ if started => "running",
        _ => "pending",
    }
    .into()
}

fn container_state(status: Option<&k8s_openapi::api::core::v1::ContainerStatus>) -> String {
    let state = status.and_then(|s| s.state.as_ref());
    if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
        return format!(
            "exit {} ({})",
            t.exit_code,
            t.reason.as_deref().unwrap_or("Terminated")
        );
    }
    if state.and_then(|s| s.running.as_ref()).is_some() {
        return "running".into();
    }
    let reason = state
        .and_then(|s| s.waiting.as_ref())
        .and_then(|w| w.reason.clone())
        .unwrap_or_else(|| "PodInitializing".into());
    format!("waiting ({reason})")
}

/// The container logs `package logs` reads, per node, Job, attempt (oldest first) and
/// container (in run order). The package's steps are the init containers of its pods (§8.3);
/// the main container is a no-op and is left out.
pub fn log_targets(
    snapshot: &Snapshot,
    nw_name: &str,
    package: &str,
    node: Option<&str>,
    stage: Option<&str>,
) -> Result<Vec<LogTarget>, VerbError> {
    let nw = find_nodewright(snapshot, nw_name)?;
    let spec = nw
        .spec
        .packages()
        .get(package)
        .ok_or_else(|| VerbError::PackageNotInSpec {
            nodewright: nw_name.to_string(),
            package: package.to_string(),
        })?;
    let pods = log_pods(snapshot, nw_name, package, &spec.version, node, stage);
    let job_of = |pod: &Pod| {
        pod.metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.kind == "Job")
            .map(|o| o.name.clone())
            .unwrap_or_default()
    };
    let mut per_job: BTreeMap<String, usize> = BTreeMap::new();
    for pod in &pods {
        *per_job.entry(job_of(pod)).or_default() += 1;
    }
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut targets = Vec::new();
    for pod in pods {
        let job = job_of(pod);
        let attempt = {
            let n = seen.entry(job.clone()).or_default();
            *n += 1;
            *n
        };
        let label = |k: &str| {
            pod.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(k))
                .cloned()
                .unwrap_or_default()
        };
        let statuses = pod
            .status
            .as_ref()
            .and_then(|s| s.init_container_statuses.clone())
            .unwrap_or_default();
        for container in pod
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.as_ref())
            .into_iter()
            .flatten()
        {
            let status = statuses.iter().find(|s| s.name == container.name);
            targets.push(LogTarget {
                node: pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_else(|| label(keys::JOB_LABEL_NODE)),
                stage: label(keys::JOB_LABEL_STAGE),
                job: job.clone(),
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                pod: pod.metadata.name.clone().unwrap_or_default(),
                attempt,
                attempts: per_job[&job],
                attempt_state: attempt_state(pod),
                container: container.name.clone(),
                container_state: container_state(status),
                restarts: status.map_or(0, |s| s.restart_count),
            });
        }
    }
    targets.sort_by(|a, b| (&a.node, &a.job, a.attempt).cmp(&(&b.node, &b.job, b.attempt)));
    Ok(targets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::testkit::{node, nodewright};

    const STATE: &str = r#"{"tuning|1.0.0":{"name":"tuning","version":"1.0.0","image":"example/tuning","stage":"config","state":"erroring","restarts":3},"other|2.0.0":{"name":"other","version":"2.0.0","image":"example/other","stage":"apply","state":"complete"}}"#;

    fn snap() -> Snapshot {
        Snapshot {
            nodes: vec![
                node("n1", &[], &[("nodewright.nvidia.com/nodeState_gpu", STATE)]),
                node("n2", &[], &[]),
            ]
            .into_iter()
            .map(std::sync::Arc::new)
            .collect(),
            nodewrights: vec![std::sync::Arc::new(nodewright(
                "gpu",
                &[],
                &[("tuning", "1.0.0"), ("other", "2.0.0")],
            ))],
            ..Snapshot::default()
        }
    }

    #[test]
    fn rerun_without_stage_removes_the_entry_and_with_stage_sets_it_in_progress() {
        let all = NodePatterns::new(&[]).unwrap();
        let plan = plan_rerun(&snap(), "gpu", "tuning", &all, None).unwrap();
        let Action::PatchNode(p) = &plan.actions[0] else {
            panic!()
        };
        assert_eq!(
            p.node_state,
            vec![NodeStateDelta::Entries {
                nodewright: "gpu".into(),
                upsert: BTreeMap::new(),
                remove: vec!["tuning|1.0.0".into()]
            }]
        );
        let plan = plan_rerun(&snap(), "gpu", "tuning", &all, Some(Stage::Config)).unwrap();
        let Action::PatchNode(p) = &plan.actions[0] else {
            panic!()
        };
        let NodeStateDelta::Entries { upsert, .. } = &p.node_state[0] else {
            panic!()
        };
        let entry = &upsert["tuning|1.0.0"];
        assert_eq!(
            (entry.stage, entry.state, entry.restarts),
            (Some(Stage::Config), Some(State::InProgress), 3)
        );
    }

    #[test]
    fn rerun_rejects_unknown_packages_and_stages() {
        let all = NodePatterns::new(&[]).unwrap();
        assert!(matches!(
            plan_rerun(&snap(), "gpu", "nope", &all, None),
            Err(VerbError::PackageNotInSpec { .. })
        ));
        assert_eq!(
            parse_rerun_stage("upgrade").unwrap_err().to_string(),
            r#"invalid stage "upgrade": must be one of apply, config, interrupt, post-interrupt"#
        );
    }

    #[test]
    fn status_lists_entries_per_node() {
        let rows = status(&snap(), "gpu", "tuning", &NodePatterns::new(&[]).unwrap()).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(
            (
                rows[0].stage.as_str(),
                rows[0].state.as_str(),
                rows[0].restarts
            ),
            ("config", "erroring", 3)
        );
    }
}

/// Which nodes `package update-state` rewrites.
#[derive(Debug, Clone)]
pub struct UpdateTargets {
    /// `--node` patterns (empty: no name filter).
    pub nodes: NodePatterns,
    /// `-l` selector (none: no label filter).
    pub selector: Option<nodewright_schema::selector::Selector>,
    /// `--add`: create the entry where it is missing.
    pub add: bool,
}

/// `package update-state <nw> <pkg> <version> <stage> <state>` (UP+, §14.4): rewrites the entry
/// `<pkg>|<version>` to `(stage, state)` in place on the matching nodes, without validating the
/// pair. Without `--add` only nodes that have the entry are touched; with it the entry is
/// created (image from the spec when the package is there) and `--node` or `-l` is required.
/// The reconciler may be racing for the same annotation: pause the NodeWright first.
pub fn plan_update_state(
    snapshot: &Snapshot,
    nw_name: &str,
    package: &str,
    version: &str,
    stage: Stage,
    state: State,
    targets: &UpdateTargets,
) -> Result<VerbPlan, VerbError> {
    let nw = find_nodewright(snapshot, nw_name)?;
    if targets.add && targets.nodes.is_empty() && targets.selector.is_none() {
        return Err(VerbError::InvalidArgument(
            "--add creates entries: name the nodes with --node or -l".into(),
        ));
    }
    let image = nw
        .spec
        .packages()
        .get(package)
        .map(|p| p.image.clone())
        .unwrap_or_default();
    let key = entry_key(package, version);
    let mut plan = VerbPlan::default();
    let paused = nw
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(keys::PAUSE))
        .is_some_and(|v| v == "true");
    if !paused {
        plan.warnings.push(format!(
            "nodewright {nw_name} is not paused: the reconciler may overwrite this change (pause it first)"
        ));
    }
    let mut matched = false;
    for node in snapshot.nodes.iter().filter(|n| {
        targets.nodes.matches(node_name(n))
            && targets.selector.as_ref().is_none_or(|sel| {
                sel.matches(n.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()))
            })
    }) {
        matched = true;
        let name = node_name(node);
        let current = match node_state_of(node, nw_name) {
            Some(Ok(current)) => current,
            Some(Err(reason)) => {
                plan.warnings.push(format!(
                    "{name}: {} does not parse ({reason}); skipped",
                    keys::node_state(nw_name)
                ));
                continue;
            }
            None => Default::default(),
        };
        let updated = match current.0.get(&key) {
            Some(entry) if entry.stage == Some(stage) && entry.state == Some(state) => {
                plan.notes
                    .push(format!("{name}: {key} is already {stage}/{state}"));
                continue;
            }
            Some(entry) => PackageStatus {
                stage: Some(stage),
                state: Some(state),
                ..entry.clone()
            },
            None if targets.add => PackageStatus {
                name: package.to_string(),
                version: version.to_string(),
                image: image.clone(),
                container_sha: String::new(),
                stage: Some(stage),
                state: Some(state),
                restarts: 0,
                extra: Default::default(),
            },
            None => {
                plan.notes.push(format!(
                    "{name}: no entry {key}; skipped (--add creates it)"
                ));
                continue;
            }
        };
        plan.changes.push(format!(
            "{name}: {} {key} as {stage}/{state}",
            if current.0.contains_key(&key) {
                "set"
            } else {
                "add"
            }
        ));
        let mut patch = NodePatch::new(name);
        patch.node_state.push(NodeStateDelta::Entries {
            nodewright: nw_name.to_string(),
            upsert: BTreeMap::from([(key.clone(), updated)]),
            remove: Vec::new(),
        });
        plan.actions.push(Action::PatchNode(patch));
    }
    if !matched {
        return Err(VerbError::NoNodeMatches(targets.nodes.describe()));
    }
    Ok(plan)
}
