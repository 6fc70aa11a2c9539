//! `reset <nw>` (§14.2) and `node reset` (§14.3), with the cordon-annotation rules of seed 001
//! ("Orphaned Cordon Recovery") and the project's reach decision (§16.3).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use nodewright_schema::node_state::split_entry_key;
use nodewright_schema::{BatchState, NodeWright, NodeWrightStatus, keys};

use super::{
    NodePatterns, VerbError, VerbPlan, node_annotation, node_name, node_state_of, selects,
};
use crate::plan::{Action, MapPatch, NodePatch, NodeStateDelta, StatusPatch};
use crate::snapshot::Snapshot;

/// Options of `reset <nw>`.
#[derive(Clone, Debug, Default)]
pub struct ResetOptions {
    /// Leave batch state, node order and `nodePriority` alone.
    pub skip_batch_reset: bool,
    /// Remove only this package's entry (`name` or `name:version`).
    pub package: Option<String>,
}

/// How the NodeWright looked up: present, gone, or unreadable (the CLI could not read it).
#[derive(Clone, Copy, Debug)]
pub enum Lookup<'a> {
    /// Found.
    Found(&'a NodeWright),
    /// Does not exist (e.g. force-deleted).
    Gone,
    /// The read failed; the cordon annotation is kept with a warning.
    Unreadable,
}

impl<'a> Lookup<'a> {
    /// Looks the NodeWright up in a snapshot (a snapshot read never fails per object).
    pub fn in_snapshot(snapshot: &'a Snapshot, name: &str) -> Self {
        match snapshot.nodewrights.iter().find(|nw| nw.name() == name) {
            Some(nw) => Lookup::Found(nw),
            None => Lookup::Gone,
        }
    }
}

/// Plans `reset <nw>`.
pub fn plan_reset(
    snapshot: &Snapshot,
    nw_name: &str,
    options: &ResetOptions,
) -> Result<VerbPlan, VerbError> {
    let lookup = Lookup::in_snapshot(snapshot, nw_name);
    let mut plan = VerbPlan::default();
    if let Some(spec) = &options.package {
        let (package, version) = match spec.split_once(':') {
            Some((p, v)) => (p, Some(v)),
            None => (spec.as_str(), None),
        };
        for node in &snapshot.nodes {
            remove_package_entry(&mut plan, node, nw_name, package, version);
        }
        if plan.is_noop() {
            plan.notes.push(format!(
                "no node has an entry for package {spec} of nodewright {nw_name}"
            ));
        }
        return Ok(plan);
    }
    for node in &snapshot.nodes {
        if touched_by(node, nw_name) {
            reset_node(&mut plan, node, nw_name, lookup);
        }
    }
    if let (false, Lookup::Found(nw)) = (options.skip_batch_reset, lookup) {
        reset_batch_state(&mut plan, nw, true);
    }
    if plan.is_noop() {
        plan.notes.push(format!(
            "no node carries state of nodewright {nw_name}; nothing to reset"
        ));
    }
    Ok(plan)
}

/// Plans `node reset <patterns…> --nodewright <nw>`.
pub fn plan_node_reset(
    snapshot: &Snapshot,
    nw_name: &str,
    patterns: &NodePatterns,
) -> Result<VerbPlan, VerbError> {
    let lookup = Lookup::in_snapshot(snapshot, nw_name);
    let matching: Vec<&Node> = snapshot
        .nodes
        .iter()
        .map(|n| &**n)
        .filter(|n| patterns.matches(node_name(n)))
        .collect();
    if matching.is_empty() {
        return Err(VerbError::NoNodeMatches(patterns.describe()));
    }
    let mut plan = VerbPlan::default();
    for node in matching {
        if touched_by(node, nw_name) {
            reset_node(&mut plan, node, nw_name, lookup);
        } else {
            plan.notes.push(format!(
                "{}: no state of nodewright {nw_name}; skipped",
                node_name(node)
            ));
        }
    }
    Ok(plan)
}

/// Whether the node carries any of this NodeWright's per-node records (§16.3 reach).
fn touched_by(node: &Node, nw: &str) -> bool {
    [
        keys::node_state(nw),
        keys::status(nw),
        keys::cordon(nw),
        keys::drain_start(nw),
        keys::drain_blocked(nw),
    ]
    .iter()
    .any(|key| node_annotation(node, key).is_some())
        || node
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(&keys::status(nw)))
}

/// Clears one node's records of a NodeWright; `spec.unschedulable` and `runtimeRequiredCordon`
/// are never touched.
fn reset_node(plan: &mut VerbPlan, node: &Node, nw: &str, lookup: Lookup<'_>) {
    let name = node_name(node);
    if let Some(Err(reason)) = node_state_of(node, nw) {
        plan.warnings.push(format!(
            "{name}: {} does not parse ({reason}); skipped — repair or remove the annotation by hand",
            keys::node_state(nw)
        ));
        return;
    }
    let mut patch = NodePatch::new(name);
    if node_annotation(node, &keys::node_state(nw)).is_some() {
        patch.node_state.push(NodeStateDelta::Delete {
            nodewright: nw.to_string(),
        });
        plan.changes.push(format!(
            "{name}: remove annotation {}",
            keys::node_state(nw)
        ));
    }
    for key in [
        keys::status(nw),
        keys::node_version(nw),
        keys::drain_start(nw),
        keys::drain_blocked(nw),
        keys::config_applied(nw),
    ] {
        if node_annotation(node, &key).is_some() {
            patch.annotations.insert(key.clone(), None);
            plan.changes
                .push(format!("{name}: remove annotation {key}"));
        }
    }
    let status_label = keys::status(nw);
    if node
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(&status_label))
    {
        patch.labels.insert(status_label.clone(), None);
        plan.changes
            .push(format!("{name}: remove label {status_label}"));
    }
    let cordon_key = keys::cordon(nw);
    if node_annotation(node, &cordon_key).is_some() {
        match lookup {
            Lookup::Found(found) if selects(found, node) => plan.notes.push(format!(
                "{name}: keep {cordon_key}: nodewright {nw} still selects the node and releases the cordon when its re-run completes"
            )),
            Lookup::Unreadable => plan.warnings.push(format!(
                "{name}: keep {cordon_key}: nodewright {nw} could not be read; re-run the reset once the lookup works"
            )),
            Lookup::Found(_) | Lookup::Gone => {
                patch.annotations.insert(cordon_key.clone(), None);
                plan.changes.push(format!("{name}: remove annotation {cordon_key} (no re-run will release it)"));
                if crate::verbs::is_cordoned(node) {
                    plan.warnings.push(uncordon_advice(node, nw));
                }
            }
        }
    }
    if !patch.is_empty() {
        plan.actions.push(Action::PatchNode(patch));
    }
}

fn uncordon_advice(node: &Node, nw: &str) -> String {
    let name = node_name(node);
    let other_cordons = node
        .metadata
        .annotations
        .iter()
        .flatten()
        .any(|(k, _)| keys::is_cordon_key(k) && *k != keys::cordon(nw));
    let persistent = node_annotation(node, keys::RUNTIME_REQUIRED_CORDON).is_some();
    if other_cordons {
        format!("{name} stays cordoned: another NodeWright still holds a cordon on it")
    } else if persistent {
        format!(
            "{name} stays cordoned: it carries {} (a persistent cordon a NodeWright applied on purpose); uncordon only if removing it is intended",
            keys::RUNTIME_REQUIRED_CORDON
        )
    } else {
        format!(
            "{name} stays cordoned; no NodeWright owns the cordon any more, so `kubectl uncordon {name}` is a safe recovery step"
        )
    }
}

/// `--package`: remove one package's entry (optionally only at one version).
fn remove_package_entry(
    plan: &mut VerbPlan,
    node: &Node,
    nw: &str,
    package: &str,
    version: Option<&str>,
) {
    let name = node_name(node);
    let state = match node_state_of(node, nw) {
        None => return,
        Some(Err(reason)) => {
            plan.warnings.push(format!(
                "{name}: {} does not parse ({reason}); skipped",
                keys::node_state(nw)
            ));
            return;
        }
        Some(Ok(state)) => state,
    };
    let mut remove = Vec::new();
    for (key, _) in state
        .0
        .iter()
        .filter(|(k, _)| split_entry_key(k).0 == package)
    {
        let entry_version = split_entry_key(key).1;
        if version.is_none_or(|v| v == entry_version) {
            remove.push(key.clone());
        } else {
            plan.notes.push(format!(
                "{name}: entry {key} is at another version; left in place"
            ));
        }
    }
    if remove.is_empty() {
        return;
    }
    let delta = if remove.len() == state.0.len() {
        plan.changes.push(format!(
            "{name}: remove entries {} (the last ones: the annotation {} is removed)",
            remove.join(", "),
            keys::node_state(nw)
        ));
        NodeStateDelta::Delete {
            nodewright: nw.to_string(),
        }
    } else {
        plan.changes
            .push(format!("{name}: remove entries {}", remove.join(", ")));
        NodeStateDelta::Entries {
            nodewright: nw.to_string(),
            upsert: BTreeMap::new(),
            remove,
        }
    };
    let mut patch = NodePatch::new(name);
    patch.node_state.push(delta);
    plan.actions.push(Action::PatchNode(patch));
}

/// Resets every compartment's batch state (§2.7); with `clear_order` also `nodeOrderOffset` and
/// `nodePriority` (S003). Returns whether there was any compartment status to reset.
pub fn reset_batch_state(plan: &mut VerbPlan, nw: &NodeWright, clear_order: bool) -> bool {
    let mut status: NodeWrightStatus = nw.status.clone().unwrap_or_default();
    let mut had_compartments = false;
    if let Some(compartments) = status.compartment_statuses.as_mut() {
        for (compartment, entry) in compartments.iter_mut() {
            had_compartments = true;
            entry.batch_state = Some(BatchState::reset());
            plan.changes.push(format!(
                "nodewright {}: reset batch state of compartment {compartment} to batch 1",
                nw.name()
            ));
        }
    }
    if clear_order {
        if status.node_order_offset.unwrap_or(0) != 0
            || status.node_priority.as_ref().is_some_and(|p| !p.is_empty())
        {
            plan.changes.push(format!(
                "nodewright {}: clear nodePriority and nodeOrderOffset (node order restarts at 0)",
                nw.name()
            ));
        }
        status.node_order_offset = Some(0);
        status.node_priority = None;
    }
    if nw.status.as_ref() != Some(&status) {
        plan.actions.push(Action::PatchNodeWrightStatus {
            name: nw.name().to_string(),
            // The per-node maps are the controller's; a reset leaves them as they are live.
            patch: Box::new(StatusPatch::new(
                status,
                MapPatch::default(),
                MapPatch::default(),
                MapPatch::default(),
            )),
        });
    }
    had_compartments
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::testkit::{cordoned, node, nodewright};
    use nodewright_schema::CompartmentStatus;

    const STATE: &str = r#"{"tuning|1.0.0":{"name":"tuning","version":"1.0.0","image":"example/tuning","stage":"config","state":"erroring"}}"#;

    fn snapshot(nodes: Vec<Node>, nws: Vec<NodeWright>) -> Snapshot {
        Snapshot {
            nodes: nodes.into_iter().map(std::sync::Arc::new).collect(),
            nodewrights: nws.into_iter().map(std::sync::Arc::new).collect(),
            ..Snapshot::default()
        }
    }

    fn patch_for<'a>(plan: &'a VerbPlan, node: &str) -> &'a NodePatch {
        plan.actions
            .iter()
            .find_map(|a| match a {
                Action::PatchNode(p) if p.node == node => Some(p),
                _ => None,
            })
            .unwrap()
    }

    #[test]
    fn reset_clears_state_but_keeps_the_cordon_on_selected_nodes_and_never_uncordons() {
        let n1 = cordoned(node(
            "n1",
            &[("pool", "gpu")],
            &[
                ("nodewright.nvidia.com/nodeState_tuning", STATE),
                ("nodewright.nvidia.com/status_tuning", "erroring"),
                ("nodewright.nvidia.com/cordon_tuning", "true"),
                (
                    "nodewright.nvidia.com/drainStart_tuning",
                    "2026-01-01T00:00:00.000000000Z",
                ),
            ],
        ));
        let nw = nodewright("tuning", &[("pool", "gpu")], &[("tuning", "1.0.0")]);
        let plan = plan_reset(
            &snapshot(vec![n1], vec![nw]),
            "tuning",
            &ResetOptions::default(),
        )
        .unwrap();
        let p = patch_for(&plan, "n1");
        assert_eq!(
            p.node_state,
            vec![NodeStateDelta::Delete {
                nodewright: "tuning".into()
            }]
        );
        assert_eq!(
            p.annotations.get("nodewright.nvidia.com/status_tuning"),
            Some(&None)
        );
        assert_eq!(
            p.annotations.get("nodewright.nvidia.com/drainStart_tuning"),
            Some(&None)
        );
        assert!(
            !p.annotations
                .contains_key("nodewright.nvidia.com/cordon_tuning")
        );
        assert_eq!(p.unschedulable, None);
    }

    #[test]
    fn reset_removes_the_cordon_annotation_where_no_rerun_will_come() {
        let n1 = cordoned(node(
            "n1",
            &[("pool", "cpu")],
            &[
                ("nodewright.nvidia.com/cordon_tuning", "true"),
                ("nodewright.nvidia.com/nodeState_tuning", STATE),
            ],
        ));
        let nw = nodewright("tuning", &[("pool", "gpu")], &[("tuning", "1.0.0")]);
        let plan = plan_reset(
            &snapshot(vec![n1.clone()], vec![nw]),
            "tuning",
            &ResetOptions::default(),
        )
        .unwrap();
        assert_eq!(
            patch_for(&plan, "n1")
                .annotations
                .get("nodewright.nvidia.com/cordon_tuning"),
            Some(&None)
        );
        assert!(
            plan.warnings
                .iter()
                .any(|w| w.contains("kubectl uncordon n1"))
        );
        // NodeWright gone: also removed, and no batch reset is attempted.
        let plan = plan_reset(
            &snapshot(vec![n1], vec![]),
            "tuning",
            &ResetOptions::default(),
        )
        .unwrap();
        assert_eq!(plan.actions.len(), 1);
    }

    #[test]
    fn reset_resets_batches_and_node_order_unless_skipped() {
        let mut nw = nodewright("tuning", &[], &[("tuning", "1.0.0")]);
        let status = nw.status.as_mut().unwrap();
        status.node_order_offset = Some(4);
        status.compartment_statuses = Some(BTreeMap::from([(
            "__default__".to_string(),
            CompartmentStatus {
                batch_state: Some(BatchState {
                    current_batch: 3,
                    should_stop: true,
                    ..BatchState::default()
                }),
                ..CompartmentStatus::default()
            },
        )]));
        let snap = snapshot(vec![], vec![nw]);
        let plan = plan_reset(&snap, "tuning", &ResetOptions::default()).unwrap();
        let Action::PatchNodeWrightStatus { patch, .. } = &plan.actions[0] else {
            panic!()
        };
        let status = patch.fields();
        assert_eq!(status.node_order_offset, Some(0));
        assert_eq!(
            status.compartment_statuses.as_ref().unwrap()["__default__"].batch_state,
            Some(BatchState::reset())
        );
        let skipped = plan_reset(
            &snap,
            "tuning",
            &ResetOptions {
                skip_batch_reset: true,
                package: None,
            },
        )
        .unwrap();
        assert!(skipped.is_noop());
    }

    #[test]
    fn package_reset_removes_only_that_package_and_reports_other_versions() {
        let state = r#"{"a|1.0.0":{"name":"a","version":"1.0.0","image":"i","stage":"apply","state":"complete"},"a|2.0.0":{"name":"a","version":"2.0.0","image":"i","stage":"upgrade","state":"erroring"},"b|1.0.0":{"name":"b","version":"1.0.0","image":"i","stage":"apply","state":"complete"}}"#;
        let n1 = node(
            "n1",
            &[],
            &[("nodewright.nvidia.com/nodeState_tuning", state)],
        );
        let opts = ResetOptions {
            skip_batch_reset: false,
            package: Some("a:2.0.0".into()),
        };
        let plan = plan_reset(&snapshot(vec![n1], vec![]), "tuning", &opts).unwrap();
        let p = patch_for(&plan, "n1");
        assert_eq!(
            p.node_state,
            vec![NodeStateDelta::Entries {
                nodewright: "tuning".into(),
                upsert: BTreeMap::new(),
                remove: vec!["a|2.0.0".into()]
            }]
        );
        assert!(plan.notes.iter().any(|n| n.contains("a|1.0.0")));
    }

    #[test]
    fn malformed_state_is_skipped_with_a_warning() {
        let n1 = node(
            "n1",
            &[],
            &[("nodewright.nvidia.com/nodeState_tuning", "{oops")],
        );
        let plan = plan_reset(
            &snapshot(vec![n1], vec![]),
            "tuning",
            &ResetOptions::default(),
        )
        .unwrap();
        assert!(plan.is_noop());
        assert!(plan.warnings[0].contains("does not parse"));
    }

    #[test]
    fn node_reset_touches_only_matching_nodes() {
        let a = node(
            "gpu-1",
            &[],
            &[("nodewright.nvidia.com/nodeState_tuning", STATE)],
        );
        let b = node(
            "gpu-2",
            &[],
            &[("nodewright.nvidia.com/nodeState_tuning", STATE)],
        );
        let patterns = NodePatterns::new(&["gpu-1".into()]).unwrap();
        let plan = plan_node_reset(&snapshot(vec![a, b], vec![]), "tuning", &patterns).unwrap();
        assert_eq!(plan.actions.len(), 1);
        assert!(matches!(
            plan_node_reset(&snapshot(vec![], vec![]), "tuning", &patterns),
            Err(VerbError::NoNodeMatches(_))
        ));
    }
}
