//! Status documents for the status branch (ARCHITECTURE §4 "Status in Git"):
//! `status/<nodewright>.yaml` per NodeWright and `status/README.md`, rendered from CR status.
//!
//! Rendering is pure and deterministic (maps are ordered), so two renders of the same status
//! are byte-identical and "changed materially" is a digest comparison of the material part.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use nodewright_schema::{NodeWright, NodeWrightStatus, Status, approvals, keys};
use serde::Serialize;
use sha2::{Digest, Sha256};

/// Folder of the status documents on the status branch.
pub const STATUS_DIR: &str = "status";

/// Nodes listed in full when complete (incomplete nodes are always listed).
pub const DEFAULT_NODE_DETAIL_LIMIT: usize = 200;

/// One rendered file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusFile {
    /// Path on the status branch (`status/tuning.yaml`).
    pub path: String,
    /// Content.
    pub content: String,
}

/// The status document of one NodeWright.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct StatusDocument {
    /// NodeWright name.
    pub nodewright: String,
    /// The Git commit the applied spec came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_commit: Option<String>,
    /// `metadata.generation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// `status.observedGeneration`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Roll-up Status.
    pub status: String,
    /// `<complete>/<selected>`.
    pub complete_nodes: String,
    /// Nodes in progress or erroring.
    pub nodes_in_progress: i32,
    /// Spec packages `name:version`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub packages: String,
    /// Nodes per Status (non-zero buckets only).
    pub node_counts: BTreeMap<String, usize>,
    /// Every selected node's Status (as `status.nodeStatus`).
    pub node_status: BTreeMap<String, String>,
    /// Conditions: type → `{status, reason, message}`.
    pub conditions: BTreeMap<String, ConditionSummary>,
    /// Batch progress per compartment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub compartments: BTreeMap<String, CompartmentSummary>,
    /// Batches waiting for an approval in Git, each with its results and the value that
    /// approves it (from the `AwaitingApproval` condition, docs/approvals.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_approvals: Vec<String>,
    /// Per-node detail: every incomplete node, and complete ones up to the limit.
    pub nodes: BTreeMap<String, NodeSummary>,
    /// Complete nodes left out of `nodes` because of the limit.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub nodes_omitted: usize,
}

fn is_zero(v: &usize) -> bool {
    *v == 0
}

/// A condition without its timestamps.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct ConditionSummary {
    /// `True` / `False` / `Unknown`.
    pub status: String,
    /// Reason.
    pub reason: String,
    /// Message.
    pub message: String,
}

/// One compartment's counters and batch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct CompartmentSummary {
    /// Nodes in the compartment.
    pub matched: i32,
    /// Budget ceiling.
    pub ceiling: i32,
    /// Nodes in progress.
    pub in_progress: i32,
    /// Nodes complete.
    pub completed: i32,
    /// Percent complete.
    pub progress_percent: i32,
    /// Current batch number, when the compartment has a strategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_batch: Option<i32>,
    /// Consecutive failing batches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_failures: Option<i32>,
    /// The compartment stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<bool>,
}

/// One node's detail.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct NodeSummary {
    /// The node's Status.
    pub status: String,
    /// `name|version` → `stage/state` (with ` (restarts N)` when any).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub packages: BTreeMap<String, String>,
}

/// `<complete>/<selected>` as the CR status counts it, when it parses.
fn counted(complete_nodes: Option<&str>) -> Option<(usize, usize)> {
    let (complete, selected) = complete_nodes?.split_once('/')?;
    Some((complete.trim().parse().ok()?, selected.trim().parse().ok()?))
}

/// Builds the document of one NodeWright.
///
/// A document never claims a state that is not current, and its counts agree with each
/// other:
/// - node counts and `completeNodes` are both counted from the per-node statuses the document
///   lists (out of the CR's selected-node count);
/// - right after a spec change the CR still carries the previous generation's per-node
///   statuses while its counters already describe the new spec (`observedGeneration` older
///   than `generation`, and the counted complete nodes disagree with the listed ones). Those
///   nodes and the roll-up are then rendered `unknown`, and a `Ready` condition from that
///   earlier evaluation is `Unknown`: nothing is complete for a spec not yet worked on.
pub fn document(nw: &NodeWright, node_detail_limit: usize) -> StatusDocument {
    // Read in place: the per-node maps hold an entry per selected node, and the writer
    // renders the document every pass.
    let no_status = NodeWrightStatus::default();
    let status = nw.status.as_ref().unwrap_or(&no_status);
    let (no_node_status, no_node_state) = (BTreeMap::new(), BTreeMap::new());
    let node_status = status.node_status.as_ref().unwrap_or(&no_node_status);
    let node_state = status.node_state.as_ref().unwrap_or(&no_node_state);
    let counted = counted(status.complete_nodes.as_deref());
    let listed_complete = node_status
        .values()
        .filter(|s| **s == Status::Complete)
        .count();
    let generation = nw.metadata.generation;
    let previous_generation = generation
        .is_some_and(|g| status.observed_generation.is_none_or(|seen| seen < g))
        && counted.is_some_and(|(complete, _)| complete != listed_complete);
    // A node complete for an earlier generation is not complete for this one.
    let shown = |s: Status| match s {
        Status::Complete if previous_generation => Status::Unknown,
        s => s,
    };
    let rollup = shown(status.status.unwrap_or(Status::Unknown));
    let node_status: Vec<(&String, Status)> =
        node_status.iter().map(|(n, s)| (n, shown(*s))).collect();
    let mut node_counts: BTreeMap<String, usize> = BTreeMap::new();
    for (_, s) in &node_status {
        *node_counts.entry(s.to_string()).or_default() += 1;
    }
    let complete = node_counts
        .get(Status::Complete.as_str())
        .copied()
        .unwrap_or(0);
    let selected = counted.map_or(node_status.len(), |(_, selected)| selected);
    let rollup = match rollup {
        Status::Complete if complete < selected => Status::Unknown,
        rollup => rollup,
    };
    let conditions = status
        .conditions
        .iter()
        .flatten()
        .map(|c| {
            let mut summary = ConditionSummary {
                status: c.status.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
            };
            // `Ready` and its legacy mirror `nodewright.nvidia.com/Ready` (§12.3).
            if previous_generation && c.type_.rsplit('/').next() == Some(keys::condition::READY) {
                summary.status = "Unknown".to_string();
                summary.message = format!(
                    "generation {} is not yet observed; earlier: {}",
                    generation.unwrap_or_default(),
                    c.message
                );
            }
            (c.type_.clone(), summary)
        })
        .collect();
    let pending_approvals = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == keys::condition::AWAITING_APPROVAL && c.status == "True")
        .map(|c| {
            approvals::pending_parts(&c.message)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let compartments = status
        .compartment_statuses
        .iter()
        .flatten()
        .map(|(name, c)| {
            (
                name.clone(),
                CompartmentSummary {
                    matched: c.matched,
                    ceiling: c.ceiling,
                    in_progress: c.in_progress,
                    completed: c.completed,
                    progress_percent: c.progress_percent,
                    current_batch: c.batch_state.as_ref().map(|b| b.current_batch.max(1)),
                    consecutive_failures: c.batch_state.as_ref().map(|b| b.consecutive_failures),
                    stopped: c.batch_state.as_ref().map(|b| b.should_stop),
                },
            )
        })
        .collect();
    let mut nodes = BTreeMap::new();
    let mut complete_listed = 0;
    let mut nodes_omitted = 0;
    for &(node, s) in &node_status {
        if s == Status::Complete {
            if complete_listed >= node_detail_limit {
                nodes_omitted += 1;
                continue;
            }
            complete_listed += 1;
        }
        let packages = node_state
            .get(node)
            .map(|state| {
                state
                    .0
                    .iter()
                    .map(|(key, e)| {
                        let mut v = format!(
                            "{}/{}",
                            e.stage.map(|s| s.as_str()).unwrap_or(""),
                            e.state.map(|s| s.as_str()).unwrap_or("")
                        );
                        if e.restarts > 0 {
                            v.push_str(&format!(" (restarts {})", e.restarts));
                        }
                        (key.clone(), v)
                    })
                    .collect()
            })
            .unwrap_or_default();
        nodes.insert(
            node.clone(),
            NodeSummary {
                status: s.to_string(),
                packages,
            },
        );
    }
    StatusDocument {
        nodewright: nw.name().to_string(),
        source_commit: nw
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(keys::SOURCE_COMMIT))
            .cloned(),
        generation: nw.metadata.generation,
        observed_generation: status.observed_generation,
        status: rollup.to_string(),
        complete_nodes: format!("{complete}/{selected}"),
        nodes_in_progress: status.nodes_in_progress.unwrap_or(0),
        packages: status.package_list.clone().unwrap_or_default(),
        node_counts,
        node_status: node_status
            .iter()
            .map(|(n, s)| ((*n).clone(), s.to_string()))
            .collect(),
        conditions,
        compartments,
        pending_approvals,
        nodes,
        nodes_omitted,
    }
}

/// The scenario runner's `gitStatus:` hook: the document `status/<name>.yaml` holds.
pub fn scenario_git_status(
    nw: &NodeWright,
    _settings: &crate::settings::Settings,
) -> serde_yaml::Value {
    serde_yaml::to_value(document(nw, DEFAULT_NODE_DETAIL_LIMIT)).unwrap_or(serde_yaml::Value::Null)
}

/// Renders every status file: one YAML per NodeWright plus the README table.
pub fn render_all<N: Borrow<NodeWright>>(
    nodewrights: &[N],
    node_detail_limit: usize,
) -> Vec<StatusFile> {
    render_documents(&documents(nodewrights, node_detail_limit))
}

/// Every NodeWright's status document, in name order.
pub fn documents<N: Borrow<NodeWright>>(
    nodewrights: &[N],
    node_detail_limit: usize,
) -> Vec<StatusDocument> {
    let mut docs: Vec<StatusDocument> = nodewrights
        .iter()
        .map(|nw| document(nw.borrow(), node_detail_limit))
        .collect();
    docs.sort_by(|a, b| a.nodewright.cmp(&b.nodewright));
    docs
}

/// The status files of documents in name order: one per NodeWright and the README.
pub fn render_documents(docs: &[StatusDocument]) -> Vec<StatusFile> {
    let mut files: Vec<StatusFile> = docs
        .iter()
        .map(|doc| StatusFile {
            path: format!("{STATUS_DIR}/{}.yaml", doc.nodewright),
            content: format!(
                "# Rollout status of NodeWright {}, written by nodewright. Do not edit: it is rewritten.\n{}",
                doc.nodewright,
                serde_yaml::to_string(doc).unwrap_or_default()
            ),
        })
        .collect();
    files.push(StatusFile {
        path: format!("{STATUS_DIR}/README.md"),
        content: readme(docs),
    });
    files
}

fn readme(docs: &[StatusDocument]) -> String {
    let mut out = String::from(
        "# Fleet rollout status\n\nWritten by nodewright from the cluster's NodeWright status. One file per NodeWright holds the detail.\n\n",
    );
    if docs.is_empty() {
        out.push_str("No NodeWright is declared.\n");
        return out;
    }
    out.push_str("| NodeWright | Status | Complete | In progress | Erroring | Blocked/Waiting | Source commit | Ready |\n");
    out.push_str("|---|---|---|---|---|---|---|---|\n");
    for d in docs {
        let count = |s: &str| d.node_counts.get(s).copied().unwrap_or(0);
        let ready = d
            .conditions
            .get("Ready")
            .map(|c| c.message.replace('|', "\\|"))
            .unwrap_or_default();
        out.push_str(&format!(
            "| [{name}]({name}.yaml) | {status} | {complete} | {ip} | {err} | {bw} | {commit} | {ready} |\n",
            name = d.nodewright,
            status = d.status,
            complete = d.complete_nodes,
            ip = count("in_progress"),
            err = count("erroring"),
            bw = count("blocked") + count("waiting"),
            commit = d.source_commit.as_deref().map(|c| &c[..c.len().min(12)]).unwrap_or("-"),
        ));
    }
    if docs.iter().any(|d| !d.pending_approvals.is_empty()) {
        out.push_str("\n## Waiting for approval\n\nEach batch below starts once an approval commit reaches the tracked branch (docs/approvals.md).\n\n");
        for d in docs {
            for pending in &d.pending_approvals {
                out.push_str(&format!("- {}: {pending}\n", d.nodewright));
            }
        }
    }
    out
}

/// Digest of the rendered files, identifying their material content.
pub fn digest(files: &[StatusFile]) -> String {
    let mut hasher = Sha256::new();
    for f in files {
        hasher.update(f.path.as_bytes());
        hasher.update([0]);
        hasher.update(f.content.as_bytes());
        hasher.update([0]);
    }
    hex::encode(hasher.finalize())
}

/// A commit message saying what changed: `tuning: 12/40 complete, 1 erroring; driver: complete`.
pub fn commit_message(before: &[StatusDocument], after: &[StatusDocument]) -> String {
    let previous: BTreeMap<&str, &StatusDocument> =
        before.iter().map(|d| (d.nodewright.as_str(), d)).collect();
    let mut parts = Vec::new();
    for d in after {
        let before = previous.get(d.nodewright.as_str());
        if before.is_some_and(|p| *p == d) {
            continue;
        }
        let line = summary(d);
        // Same counts as before: say which nodes moved, so the log does not repeat a subject.
        match before.filter(|p| summary(p) == line) {
            Some(p) => parts.push(format!("{line} ({})", node_moves(p, d))),
            None => parts.push(line),
        }
    }
    for d in before {
        if !after.iter().any(|a| a.nodewright == d.nodewright) {
            parts.push(format!("{}: removed", d.nodewright));
        }
    }
    if parts.is_empty() {
        "status: no change".to_string()
    } else {
        format!("status: {}", parts.join("; "))
    }
}

/// What changed in the per-node detail between two documents with the same counts: at most
/// three nodes, each with its packages' new `stage/state`.
fn node_moves(before: &StatusDocument, after: &StatusDocument) -> String {
    const SHOWN: usize = 3;
    let mut moves = Vec::new();
    for (node, summary) in &after.nodes {
        let old = before.nodes.get(node);
        if old == Some(summary) {
            continue;
        }
        let changed: Vec<String> = summary
            .packages
            .iter()
            .filter(|(pkg, state)| old.and_then(|o| o.packages.get(*pkg)) != Some(*state))
            .map(|(pkg, state)| {
                let name = pkg.split('|').next().unwrap_or(pkg);
                format!("{name} {state}")
            })
            .collect();
        moves.push(if changed.is_empty() {
            format!("{node} {}", summary.status.replace('_', " "))
        } else {
            format!("{node}: {}", changed.join(", "))
        });
    }
    let gone = before
        .nodes
        .keys()
        .filter(|n| !after.nodes.contains_key(*n))
        .count();
    let total = moves.len();
    let mut text = moves.into_iter().take(SHOWN).collect::<Vec<_>>().join("; ");
    if total > SHOWN {
        text.push_str(&format!("; {} more nodes", total - SHOWN));
    }
    if gone > 0 {
        if !text.is_empty() {
            text.push_str("; ");
        }
        text.push_str(&format!("{gone} nodes settled"));
    }
    if text.is_empty() {
        "conditions or batches updated".to_string()
    } else {
        text
    }
}

/// One NodeWright's one-line summary.
pub fn summary(d: &StatusDocument) -> String {
    if d.status == Status::Complete.as_str() {
        return format!("{}: complete ({})", d.nodewright, d.complete_nodes);
    }
    let mut s = format!("{}: {} complete", d.nodewright, d.complete_nodes);
    for bucket in [
        "erroring",
        "blocked",
        "in_progress",
        "waiting",
        "paused",
        "disabled",
        "unknown",
    ] {
        if let Some(n) = d.node_counts.get(bucket).filter(|n| **n > 0) {
            s.push_str(&format!(", {n} {}", bucket.replace('_', " ")));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_schema::{
        NodeState, NodeWrightSpec, NodeWrightStatus, PackageStatus, Stage, State,
    };

    fn nw(name: &str, statuses: &[(&str, Status)]) -> NodeWright {
        let mut nw = NodeWright::new(name, NodeWrightSpec::default());
        let mut state = NodeState::default();
        state.upsert(PackageStatus::new(
            "tuning",
            "1.0.0",
            "example/tuning",
            Stage::Config,
            State::Erroring,
        ));
        nw.status = Some(NodeWrightStatus {
            status: Some(Status::InProgress),
            node_status: Some(statuses.iter().map(|(n, s)| (n.to_string(), *s)).collect()),
            node_state: Some(
                statuses
                    .iter()
                    .map(|(n, _)| (n.to_string(), state.clone()))
                    .collect(),
            ),
            complete_nodes: Some("1/3".into()),
            ..NodeWrightStatus::default()
        });
        nw
    }

    #[test]
    fn document_counts_nodes_and_limits_complete_detail() {
        let nw = nw(
            "tuning",
            &[
                ("a", Status::Complete),
                ("b", Status::Complete),
                ("c", Status::Erroring),
            ],
        );
        let doc = document(&nw, 1);
        assert_eq!(doc.node_counts["complete"], 2);
        assert_eq!(doc.nodes.len(), 2);
        assert_eq!(doc.nodes_omitted, 1);
        assert_eq!(doc.nodes["c"].packages["tuning|1.0.0"], "config/erroring");
        assert_eq!(summary(&doc), "tuning: 2/3 complete, 1 erroring");
    }

    #[test]
    fn rendering_is_deterministic_and_digest_tracks_content() {
        let a = vec![nw("tuning", &[("a", Status::Complete)])];
        let b = vec![nw("tuning", &[("a", Status::Erroring)])];
        assert_eq!(render_all(&a, 10), render_all(&a, 10));
        assert_ne!(digest(&render_all(&a, 10)), digest(&render_all(&b, 10)));
        let files = render_all(&a, 10);
        assert_eq!(
            files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(),
            ["status/tuning.yaml", "status/README.md"]
        );
        let parsed: serde_yaml::Value = serde_yaml::from_str(&files[0].content).unwrap();
        assert_eq!(parsed["status"], "in_progress");
        assert!(
            files[1]
                .content
                .contains("| [tuning](tuning.yaml) | in_progress | 1/3 |")
        );
    }

    #[test]
    fn commit_subject_names_the_nodes_that_moved_when_counts_did_not() {
        let before = document(&nw("tuning", &[("a", Status::InProgress)]), 10);
        let mut after = before.clone();
        after
            .nodes
            .get_mut("a")
            .unwrap()
            .packages
            .insert("tuning|1.0.0".into(), "interrupt/in_progress".into());
        assert_eq!(
            commit_message(std::slice::from_ref(&before), std::slice::from_ref(&after)),
            "status: tuning: 0/3 complete, 1 in progress (a: tuning interrupt/in_progress)"
        );
        // Counts that changed speak for themselves.
        let done = document(&nw("tuning", &[("a", Status::Erroring)]), 10);
        assert_eq!(
            commit_message(&[before], &[done]),
            "status: tuning: 0/3 complete, 1 erroring"
        );
    }

    /// Issue 28 item 5: a stopped run's CR said `completeNodes: 4/8` while only two nodes'
    /// statuses were complete; the document counts both from the statuses it lists.
    #[test]
    fn completed_nodes_and_node_counts_agree_in_one_document() {
        let mut nw = nw(
            "tuning",
            &[
                ("a", Status::Complete),
                ("b", Status::Complete),
                ("c", Status::InProgress),
                ("d", Status::Waiting),
            ],
        );
        let status = nw.status.as_mut().expect("the fixture has a status");
        status.complete_nodes = Some("4/8".into());
        nw.metadata.generation = Some(1);
        status.observed_generation = Some(1);
        let doc = document(&nw, 10);
        assert_eq!(doc.complete_nodes, "2/8");
        assert_eq!(doc.node_counts["complete"], 2);
        assert_eq!(
            summary(&doc),
            "tuning: 2/8 complete, 1 in progress, 1 waiting"
        );
    }

    /// Issue 28 item 5: right after a version bump the CR's counters describe the new spec
    /// (0 of 2 complete) while its roll-up, per-node statuses and Ready condition still describe
    /// the previous generation; nothing of that is rendered as complete.
    #[test]
    fn a_spec_not_yet_worked_on_is_never_rendered_complete() {
        let mut nw = nw(
            "tuning",
            &[("a", Status::Complete), ("b", Status::Complete)],
        );
        nw.metadata.generation = Some(2);
        let status = nw.status.as_mut().expect("the fixture has a status");
        status.status = Some(Status::Complete);
        status.observed_generation = Some(1);
        status.complete_nodes = Some("0/2".into());
        status.conditions = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: "NodesConverged".into(),
                message: "2/2 nodes complete (a, b)".into(),
                observed_generation: Some(1),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    jiff::Timestamp::UNIX_EPOCH,
                ),
            },
        ]);
        let doc = document(&nw, 10);
        assert_eq!(doc.status, "unknown");
        assert_eq!(doc.complete_nodes, "0/2");
        assert_eq!(
            doc.node_counts,
            BTreeMap::from([("unknown".to_string(), 2)])
        );
        assert_eq!(doc.conditions["Ready"].status, "Unknown");
        assert_eq!(doc.node_status["a"], "unknown");
        assert_eq!(doc.nodes.len(), 2, "no node is listed as complete");
        assert_eq!(summary(&doc), "tuning: 0/2 complete, 2 unknown");
        // The same CR once its counters agree (a spec change that left every node complete)
        // is complete.
        nw.status.as_mut().expect("still there").complete_nodes = Some("2/2".into());
        assert_eq!(document(&nw, 10).status, "complete");
        // And once the generation is observed, every node reads complete again.
        nw.status.as_mut().expect("still there").observed_generation = Some(2);
        let doc = document(&nw, 10);
        assert_eq!(doc.status, "complete");
        assert_eq!(
            doc.node_counts,
            BTreeMap::from([("complete".to_string(), 2)])
        );
    }
}
