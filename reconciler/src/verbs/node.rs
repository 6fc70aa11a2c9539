//! `node list|status|ignore|unignore` (§14.3). `node reset` lives with `reset` (same rules).

use std::collections::BTreeMap;

use nodewright_schema::{Status, keys};
use serde::Serialize;

use super::{
    NodePatterns, VerbError, VerbPlan, find_nodewright, is_cordoned, node_annotation, node_name,
    node_state_of, selects,
};
use crate::plan::{Action, NodePatch};
use crate::snapshot::Snapshot;

/// One row of `node list` / `node status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRow {
    /// Node name.
    pub node: String,
    /// NodeWright name.
    pub nodewright: String,
    /// The node's Status for that NodeWright (`unknown` when absent).
    pub status: String,
    /// Packages complete / packages tracked on the node.
    pub packages_complete: String,
    /// Package entries as `name|version: stage/state`.
    pub packages: BTreeMap<String, String>,
    /// `spec.unschedulable`.
    pub cordoned: bool,
    /// The persistent runtime-required cordon annotation is present.
    pub runtime_required_cordon: bool,
    /// The ignore label is set.
    pub ignored: bool,
}

fn row(snapshot_node: &k8s_openapi::api::core::v1::Node, nw: &str) -> NodeRow {
    let mut packages = BTreeMap::new();
    let mut complete = 0;
    match node_state_of(snapshot_node, nw) {
        Some(Ok(state)) => {
            for (key, entry) in &state.0 {
                let stage = entry.stage.map(|s| s.as_str()).unwrap_or("");
                let st = entry.state.map(|s| s.as_str()).unwrap_or("");
                if entry.state == Some(nodewright_schema::State::Complete) {
                    complete += 1;
                }
                packages.insert(key.clone(), format!("{stage}/{st}"));
            }
        }
        Some(Err(reason)) => {
            packages.insert("<malformed>".into(), reason);
        }
        None => {}
    }
    let total = packages.len();
    NodeRow {
        node: node_name(snapshot_node).to_string(),
        nodewright: nw.to_string(),
        status: Status::from_annotation(node_annotation(snapshot_node, &keys::status(nw)))
            .to_string(),
        packages_complete: format!("{complete}/{total}"),
        packages,
        cordoned: is_cordoned(snapshot_node),
        runtime_required_cordon: node_annotation(snapshot_node, keys::RUNTIME_REQUIRED_CORDON)
            .is_some(),
        ignored: snapshot_node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(keys::IGNORE_LABEL))
            .is_some_and(|v| v == "true"),
    }
}

/// `node list --nodewright <nw>`: nodes the NodeWright targets.
pub fn list(snapshot: &Snapshot, nw_name: &str) -> Result<Vec<NodeRow>, VerbError> {
    let nw = find_nodewright(snapshot, nw_name)?;
    let mut rows: Vec<NodeRow> = snapshot
        .nodes
        .iter()
        .filter(|n| selects(nw, n))
        .map(|n| row(n, nw_name))
        .collect();
    rows.sort_by(|a, b| a.node.cmp(&b.node));
    Ok(rows)
}

/// `node status [patterns…] [--nodewright <nw>]`: per node and NodeWright.
pub fn status(
    snapshot: &Snapshot,
    patterns: &NodePatterns,
    nw_name: Option<&str>,
) -> Result<Vec<NodeRow>, VerbError> {
    let nodewrights: Vec<&nodewright_schema::NodeWright> = match nw_name {
        Some(name) => vec![find_nodewright(snapshot, name)?],
        None => snapshot.nodewrights.iter().map(|nw| &**nw).collect(),
    };
    let mut rows = Vec::new();
    for node in snapshot
        .nodes
        .iter()
        .filter(|n| patterns.matches(node_name(n)))
    {
        for nw in &nodewrights {
            let tracked = node_state_of(node, nw.name()).is_some();
            if selects(nw, node) || tracked {
                rows.push(row(node, nw.name()));
            }
        }
    }
    if rows.is_empty()
        && !patterns.is_empty()
        && !snapshot
            .nodes
            .iter()
            .any(|n| patterns.matches(node_name(n)))
    {
        return Err(VerbError::NoNodeMatches(patterns.describe()));
    }
    rows.sort_by(|a, b| (&a.node, &a.nodewright).cmp(&(&b.node, &b.nodewright)));
    Ok(rows)
}

/// Table rendering of node rows.
pub fn table(rows: &[NodeRow], wide: bool) -> Vec<Vec<String>> {
    let mut out = vec![vec![
        "NODE".to_string(),
        "NODEWRIGHT".into(),
        "STATUS".into(),
        "PACKAGES".into(),
        "CORDONED".into(),
        "RUNTIME-REQUIRED-CORDON".into(),
        "IGNORED".into(),
    ]];
    if wide {
        out[0].push("DETAIL".into());
    }
    for r in rows {
        let mut line = vec![
            r.node.clone(),
            r.nodewright.clone(),
            r.status.clone(),
            r.packages_complete.clone(),
            r.cordoned.to_string(),
            r.runtime_required_cordon.to_string(),
            r.ignored.to_string(),
        ];
        if wide {
            line.push(
                r.packages
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" "),
            );
        }
        out.push(line);
    }
    out
}

/// `node ignore` (`ignore = true`) / `node unignore` (`ignore = false`): nodes already in the
/// target state are skipped. No confirmation is needed.
pub fn plan_ignore(
    snapshot: &Snapshot,
    patterns: &NodePatterns,
    ignore: bool,
) -> Result<VerbPlan, VerbError> {
    let mut plan = VerbPlan::default();
    let mut matched = false;
    for node in snapshot
        .nodes
        .iter()
        .filter(|n| patterns.matches(node_name(n)))
    {
        matched = true;
        let name = node_name(node);
        let current = node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(keys::IGNORE_LABEL))
            .map(String::as_str);
        let is_ignored = current == Some("true");
        if is_ignored == ignore && (ignore || current.is_none()) {
            plan.notes.push(format!(
                "{name}: already {}",
                if ignore { "ignored" } else { "not ignored" }
            ));
            continue;
        }
        let mut patch = NodePatch::new(name);
        if ignore {
            patch
                .labels
                .insert(keys::IGNORE_LABEL.to_string(), Some("true".to_string()));
            plan.changes
                .push(format!("{name}: set label {}=true", keys::IGNORE_LABEL));
        } else {
            patch.labels.insert(keys::IGNORE_LABEL.to_string(), None);
            plan.changes
                .push(format!("{name}: remove label {}", keys::IGNORE_LABEL));
        }
        plan.actions.push(Action::PatchNode(patch));
    }
    if !matched {
        return Err(VerbError::NoNodeMatches(patterns.describe()));
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::testkit::{cordoned, node, nodewright};

    #[test]
    fn ignore_and_unignore_round_trip_and_skip_nodes_already_there() {
        let snap = Snapshot {
            nodes: vec![
                node("n1", &[], &[]),
                node("n2", &[("nodewright.nvidia.com/ignore", "true")], &[]),
            ]
            .into_iter()
            .map(std::sync::Arc::new)
            .collect(),
            ..Snapshot::default()
        };
        let all = NodePatterns::new(&["n.*".into()]).unwrap();
        let plan = plan_ignore(&snap, &all, true).unwrap();
        assert_eq!(plan.actions.len(), 1);
        let Action::PatchNode(p) = &plan.actions[0] else {
            panic!()
        };
        assert_eq!(p.node, "n1");
        assert_eq!(
            p.labels.get("nodewright.nvidia.com/ignore"),
            Some(&Some("true".into()))
        );
        let plan = plan_ignore(&snap, &all, false).unwrap();
        let Action::PatchNode(p) = &plan.actions[0] else {
            panic!()
        };
        assert_eq!(
            (
                p.node.as_str(),
                p.labels.get("nodewright.nvidia.com/ignore")
            ),
            ("n2", Some(&None))
        );
    }

    #[test]
    fn status_shows_cordon_columns() {
        let n1 = cordoned(node(
            "n1",
            &[("pool", "gpu")],
            &[
                ("nodewright.nvidia.com/runtimeRequiredCordon", "true"),
                ("nodewright.nvidia.com/status_tuning", "complete"),
            ],
        ));
        let snap = Snapshot {
            nodes: vec![std::sync::Arc::new(n1)],
            nodewrights: vec![std::sync::Arc::new(nodewright(
                "tuning",
                &[("pool", "gpu")],
                &[],
            ))],
            ..Snapshot::default()
        };
        let rows = status(&snap, &NodePatterns::new(&[]).unwrap(), None).unwrap();
        assert_eq!(rows.len(), 1);
        assert!(rows[0].cordoned && rows[0].runtime_required_cordon);
        assert_eq!(rows[0].status, "complete");
        let listed = list(&snap, "tuning").unwrap();
        assert_eq!(listed, rows);
    }
}
