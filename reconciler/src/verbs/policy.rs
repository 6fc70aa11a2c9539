//! `deployment-policy reset <nw>` (alias `dp reset`, §14.6).

use super::reset::reset_batch_state;
use super::{VerbError, VerbPlan, find_nodewright};
use crate::snapshot::Snapshot;

/// Resets every compartment's batch state and (per S003) clears `nodeOrderOffset` and
/// `nodePriority`; a NodeWright without compartment statuses is a no-op with a message.
pub fn plan_reset(snapshot: &Snapshot, nw_name: &str) -> Result<VerbPlan, VerbError> {
    let nw = find_nodewright(snapshot, nw_name)?;
    let has_compartments = nw
        .status
        .as_ref()
        .and_then(|s| s.compartment_statuses.as_ref())
        .is_some_and(|c| !c.is_empty());
    let mut plan = VerbPlan::default();
    if !has_compartments {
        plan.notes.push(format!(
            "nodewright {nw_name} has no compartment statuses; nothing to reset"
        ));
        return Ok(plan);
    }
    reset_batch_state(&mut plan, nw, true);
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Action;
    use crate::verbs::testkit::nodewright;
    use nodewright_schema::{BatchState, CompartmentStatus};
    use std::collections::BTreeMap;

    #[test]
    fn resets_compartments_and_node_order() {
        let mut nw = nodewright("tuning", &[], &[]);
        let snap = Snapshot {
            nodewrights: vec![std::sync::Arc::new(nw.clone())],
            ..Snapshot::default()
        };
        assert!(plan_reset(&snap, "tuning").unwrap().is_noop());
        let status = nw.status.as_mut().unwrap();
        status.node_order_offset = Some(7);
        status.compartment_statuses = Some(BTreeMap::from([(
            "a".to_string(),
            CompartmentStatus {
                batch_state: Some(BatchState {
                    current_batch: 4,
                    consecutive_failures: 2,
                    should_stop: true,
                    ..BatchState::default()
                }),
                ..CompartmentStatus::default()
            },
        )]));
        let snap = Snapshot {
            nodewrights: vec![std::sync::Arc::new(nw)],
            ..Snapshot::default()
        };
        let plan = plan_reset(&snap, "tuning").unwrap();
        let Action::PatchNodeWrightStatus { patch, .. } = &plan.actions[0] else {
            panic!()
        };
        let status = patch.fields();
        assert_eq!(
            status.compartment_statuses.as_ref().unwrap()["a"].batch_state,
            Some(BatchState::reset())
        );
        assert_eq!(
            (status.node_order_offset, status.node_priority.as_ref()),
            (Some(0), None)
        );
    }
}
