//! The write order of a pass: which write each effect relies on (spec/operator.md §5.15,
//! §6.8, §6.12, §8.8 step 4, §11.1).
//!
//! Any write of a pass may fail (a 409 from the kubelet, 429, a 5xx during an API-server
//! rollout) or the reconciler may stop between two writes. The rule that keeps every such
//! cut harmless: **the record comes before the effect it describes, and an effect is sent only
//! when its record took effect in the same pass** ([`crate::plan::Requirement`]). A failed
//! record then leaves the cluster exactly as the pass found it, and the next pass decides the
//! same thing again; a failed effect leaves a record the next pass completes. Outcomes are
//! never recorded ahead of the effect: they are read from the cluster by a later pass.
//!
//! Per transition, what is written first and why a cut after it is re-served harmlessly:
//! - **A stage Job starts** (§6.3): the node's entry `(stage, in_progress)`, then the Job, then
//!   nothing. Without the record, the sweep would find a Job its node does not expect and
//!   delete it (§8.14 rule 1), and the stage would run twice. A cut after the record leaves an
//!   entry in progress with no Job: dispatch's in-flight gate finds none and creates it.
//! - **An interrupt starts** (§6.12): the entry `(interrupt, in_progress)` (or
//!   `uninstall-interrupt`), then the interrupt Job. An interrupt Job whose entry still reads
//!   an earlier stage would be deleted as stale and started again: a second reboot. A cut after
//!   the record leaves an interrupt stage in progress without its Job, which §6.12 step 4
//!   creates.
//! - **A Job completes or gives up** (§8.8, §8.9): the entry's new stage and state, then the
//!   Job's `state-recorded` marker in the same pass. A marker without the state would make the
//!   completion vanish (the Job is skipped as processed, then deleted because the node does not
//!   record its stage: the stage runs again). A cut before the marker re-serves the completion,
//!   and its postcondition makes it a no-op.
//! - **A config update** (§6.8, §16.3): `status.configUpdates` (which keys changed), then the
//!   package ConfigMap, then the config Jobs that mount it. A ConfigMap updated without the
//!   keys would read "nothing changed" to every later pass, and a configuration that needs a
//!   `configInterrupts` reboot would complete without it. The node's applied-config record is
//!   written only when its config Job completes, with the entry (one patch).
//! - **An upgrade or uninstall** follows the stage-Job rule: the entry first, then the Job; the
//!   removal of other versions or of the entry is one node patch with the completion.
//! - **A node completes**: its last entry, its uncordon and its status are one node patch; the
//!   NodeWright status that reports the node (or the NodeWright) complete is sent only after it,
//!   so the CR never reads `complete` while a node still owes work.
//! - **A reboot is noticed** (§10.6): the node's reset, then its new boot id in the status,
//!   then the deletion of its Jobs. A boot id recorded without the reset would hide the reboot
//!   from every later pass.
//! - **Deletion** (§11.1): every node's cleanup and condition removal, then the finalizer.
//!   Removing the finalizer first would delete the CR with its records left on nodes.
//! - **Invalidating a Job** (§8.14): the `invalid` mark, then the deletion, so a Job that
//!   completes while it is being deleted is never recorded.
//! - Node conditions and node events follow their node's patch; they describe it.

use std::collections::HashMap;

use crate::plan::{Action, Event, EventObject, Requirement};
use nodewright_schema::Status;

/// A write an emitted action relies on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum After {
    /// The node's patch of this pass, when the pass changes the node.
    Node(String),
    /// The NodeWright's status patch of this pass, when the pass changes it.
    Status(String),
    /// An action emitted earlier in this pass, by its emission index.
    Emitted(usize),
}

/// What a pass wants written, before ordering.
#[derive(Debug, Default)]
pub struct Writes {
    /// Actions the rules emitted, in emission order.
    pub emitted: Vec<Action>,
    /// What emitted actions rely on: (emission index, prerequisite).
    pub after: Vec<(usize, After)>,
    /// One patch per changed node.
    pub node_patches: Vec<Action>,
    /// Node condition patches.
    pub node_conditions: Vec<Action>,
    /// NodeWright status patches.
    pub status_patches: Vec<Action>,
    /// Events.
    pub events: Vec<Event>,
}

/// The plan's actions in write order, with what each needs.
pub fn order(writes: Writes) -> (Vec<Action>, Vec<Requirement>) {
    let Writes {
        emitted,
        after,
        node_patches,
        node_conditions,
        status_patches,
        events,
    } = writes;
    let mut actions: Vec<Action> = Vec::with_capacity(
        emitted.len()
            + node_patches.len()
            + node_conditions.len()
            + status_patches.len()
            + events.len(),
    );
    let mut requires: Vec<Requirement> = Vec::new();

    // Emitted actions that rely on nothing go first, as the rules emitted them.
    let mut dependent = vec![false; emitted.len()];
    for (i, _) in &after {
        if let Some(d) = dependent.get_mut(*i) {
            *d = true;
        }
    }
    let mut placed: Vec<Option<usize>> = vec![None; emitted.len()];
    let mut rest = Vec::new();
    for (i, action) in emitted.into_iter().enumerate() {
        if dependent[i] {
            rest.push((i, action));
        } else {
            placed[i] = Some(actions.len());
            actions.push(action);
        }
    }

    let mut node_write: HashMap<String, usize> = HashMap::with_capacity(node_patches.len());
    for patch in node_patches {
        if let Action::PatchNode(p) = &patch {
            node_write.insert(p.node.clone(), actions.len());
        }
        actions.push(patch);
    }
    for conditions in node_conditions {
        let at = actions.len();
        if let Action::PatchNodeConditions { node, .. } = &conditions
            && let Some(&needs) = node_write.get(node)
        {
            requires.push(Requirement { action: at, needs });
        }
        actions.push(conditions);
    }
    let mut status_write: HashMap<String, usize> = HashMap::with_capacity(status_patches.len());
    for status in status_patches {
        let at = actions.len();
        if let Action::PatchNodeWrightStatus { name, patch } = &status {
            status_write.insert(name.clone(), at);
            // A node reported complete, and a node's new boot id, describe that node's write.
            let completed = patch
                .node_status
                .set
                .iter()
                .filter(|(_, s)| **s == Some(Status::Complete))
                .map(|(node, _)| node);
            let rebooted = patch.node_boot_ids.set.keys();
            let needs = completed
                .chain(rebooted)
                .filter_map(|node| node_write.get(node).copied());
            require(&mut requires, at, needs);
        }
        actions.push(status);
    }

    // Emitted actions that rely on a record, after it.
    let mut after_of: Vec<Vec<After>> = vec![Vec::new(); placed.len()];
    for (i, a) in after {
        if let Some(list) = after_of.get_mut(i) {
            list.push(a);
        }
    }
    for (i, action) in rest {
        let at = actions.len();
        let needs = after_of[i].iter().filter_map(|a| match a {
            After::Node(node) => node_write.get(node).copied(),
            After::Status(nw) => status_write.get(nw).copied(),
            After::Emitted(j) => placed.get(*j).copied().flatten(),
        });
        require(&mut requires, at, needs);
        placed[i] = Some(at);
        actions.push(action);
    }

    for event in events {
        let at = actions.len();
        if let EventObject::Node(node) = &event.object
            && let Some(&needs) = node_write.get(node)
        {
            requires.push(Requirement { action: at, needs });
        }
        actions.push(Action::RecordEvent(event));
    }
    requires.sort_unstable();
    (actions, requires)
}

/// Records that action `at` needs each of `needs` (once each).
fn require(requires: &mut Vec<Requirement>, at: usize, needs: impl Iterator<Item = usize>) {
    let mut needs: Vec<usize> = needs.collect();
    needs.sort_unstable();
    needs.dedup();
    requires.extend(
        needs
            .into_iter()
            .map(|needs| Requirement { action: at, needs }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::Job;
    use crate::plan::{EventType, MapPatch, NewJob, NodePatch, StatusPatch};
    use nodewright_schema::NodeWrightStatus;

    fn job(name: &str) -> Action {
        let mut job = Job::default();
        job.metadata.name = Some(name.into());
        Action::CreateJob(NewJob::from(job))
    }

    fn patch(node: &str) -> Action {
        let mut p = NodePatch::new(node);
        p.unschedulable = Some(true);
        Action::PatchNode(p)
    }

    fn index_of(actions: &[Action], f: impl Fn(&Action) -> bool) -> usize {
        actions
            .iter()
            .position(f)
            .expect("the action is in the plan")
    }

    #[test]
    fn an_effect_comes_after_the_record_it_relies_on_and_needs_it() {
        let writes = Writes {
            emitted: vec![
                job("apply-n1"),
                Action::DeleteConfigMap { name: "old".into() },
                job("apply-n3"),
            ],
            after: vec![(0, After::Node("n1".into())), (2, After::Node("n3".into()))],
            node_patches: vec![patch("n1"), patch("n2")],
            ..Writes::default()
        };
        let (actions, requires) = order(writes);
        let create = index_of(
            &actions,
            |a| matches!(a, Action::CreateJob(j) if j.name() == "apply-n1"),
        );
        let node = index_of(
            &actions,
            |a| matches!(a, Action::PatchNode(p) if p.node == "n1"),
        );
        assert!(node < create, "the entry is written before its Job");
        assert!(requires.contains(&Requirement {
            action: create,
            needs: node
        }));
        // A node the pass does not change has no write to wait for.
        let other = index_of(
            &actions,
            |a| matches!(a, Action::CreateJob(j) if j.name() == "apply-n3"),
        );
        assert!(requires.iter().all(|r| r.action != other));
        // Independent writes keep their place in front.
        assert!(matches!(actions[0], Action::DeleteConfigMap { .. }));
        assert!(requires.windows(2).all(|w| w[0] <= w[1]));
        assert!(requires.iter().all(|r| r.needs < r.action));
    }

    #[test]
    fn a_status_that_reports_a_node_complete_needs_that_nodes_write() {
        let mut node_status = MapPatch::default();
        node_status
            .set
            .insert("n1".to_string(), Some(Status::Complete));
        node_status
            .set
            .insert("n2".to_string(), Some(Status::InProgress));
        let status = StatusPatch::new(
            NodeWrightStatus::default(),
            node_status,
            MapPatch::default(),
            MapPatch::default(),
        );
        let writes = Writes {
            emitted: vec![Action::DeleteConfigMap { name: "cm".into() }],
            after: vec![(0, After::Status("nw".into()))],
            node_patches: vec![patch("n1"), patch("n2")],
            status_patches: vec![Action::PatchNodeWrightStatus {
                name: "nw".into(),
                patch: Box::new(status),
            }],
            events: vec![Event {
                object: EventObject::Node("n2".into()),
                kind: EventType::Normal,
                reason: "State".into(),
                message: String::new(),
            }],
            ..Writes::default()
        };
        let (actions, requires) = order(writes);
        let status = index_of(&actions, |a| {
            matches!(a, Action::PatchNodeWrightStatus { .. })
        });
        let n1 = index_of(
            &actions,
            |a| matches!(a, Action::PatchNode(p) if p.node == "n1"),
        );
        let n2 = index_of(
            &actions,
            |a| matches!(a, Action::PatchNode(p) if p.node == "n2"),
        );
        let needs: Vec<usize> = requires
            .iter()
            .filter(|r| r.action == status)
            .map(|r| r.needs)
            .collect();
        assert_eq!(needs, [n1], "only the node reported complete");
        let cm = index_of(&actions, |a| matches!(a, Action::DeleteConfigMap { .. }));
        assert!(
            cm > status
                && requires.contains(&Requirement {
                    action: cm,
                    needs: status
                })
        );
        let event = index_of(&actions, |a| matches!(a, Action::RecordEvent(_)));
        assert!(requires.contains(&Requirement {
            action: event,
            needs: n2
        }));
    }

    #[test]
    fn an_action_can_rely_on_an_earlier_emitted_one_wherever_it_lands() {
        let writes = Writes {
            emitted: vec![
                Action::UpsertConfigMap(Box::default()),
                job("config-n1"),
                Action::DeleteJob {
                    name: "stale".into(),
                    uid: None,
                    reason: String::new(),
                },
            ],
            after: vec![
                (0, After::Status("nw".into())),
                (1, After::Emitted(0)),
                (1, After::Node("n1".into())),
            ],
            node_patches: vec![patch("n1")],
            status_patches: vec![Action::PatchNodeWrightStatus {
                name: "nw".into(),
                patch: Box::default(),
            }],
            ..Writes::default()
        };
        let (actions, requires) = order(writes);
        let upsert = index_of(&actions, |a| matches!(a, Action::UpsertConfigMap(_)));
        let create = index_of(&actions, |a| matches!(a, Action::CreateJob(_)));
        assert!(upsert < create);
        assert!(requires.contains(&Requirement {
            action: create,
            needs: upsert
        }));
        assert!(requires.iter().all(|r| r.needs < r.action));
    }
}
