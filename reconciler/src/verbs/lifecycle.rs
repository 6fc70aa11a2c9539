//! `pause`, `resume`, `disable`, `enable` (§14.5): annotations on the NodeWright, which do not
//! bump `metadata.generation`.

use std::collections::BTreeMap;

use nodewright_schema::keys;

use super::{VerbError, VerbPlan, find_nodewright};
use crate::plan::Action;
use crate::snapshot::Snapshot;

/// The four lifecycle verbs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifecycle {
    /// Set `pause: "true"`.
    Pause,
    /// Remove `pause`.
    Resume,
    /// Set `disable: "true"`.
    Disable,
    /// Remove `disable`.
    Enable,
}

/// Plans a lifecycle verb.
pub fn plan(snapshot: &Snapshot, nw_name: &str, verb: Lifecycle) -> Result<VerbPlan, VerbError> {
    let nw = find_nodewright(snapshot, nw_name)?;
    let (key, value) = match verb {
        Lifecycle::Pause => (keys::PAUSE, Some("true")),
        Lifecycle::Resume => (keys::PAUSE, None),
        Lifecycle::Disable => (keys::DISABLE, Some("true")),
        Lifecycle::Enable => (keys::DISABLE, None),
    };
    let current = nw
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str);
    let mut plan = VerbPlan::default();
    if current == value {
        plan.notes.push(format!(
            "nodewright {nw_name} is already {}",
            match verb {
                Lifecycle::Pause => "paused",
                Lifecycle::Resume => "not paused",
                Lifecycle::Disable => "disabled",
                Lifecycle::Enable => "enabled",
            }
        ));
        return Ok(plan);
    }
    plan.changes.push(match value {
        Some(v) => format!("nodewright {nw_name}: set annotation {key}={v}"),
        None => format!("nodewright {nw_name}: remove annotation {key}"),
    });
    plan.actions.push(Action::PatchNodeWrightAnnotations {
        name: nw_name.to_string(),
        annotations: BTreeMap::from([(key.to_string(), value.map(str::to_string))]),
    });
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::testkit::nodewright;

    #[test]
    fn pause_sets_and_resume_removes_the_annotation() {
        let mut nw = nodewright("tuning", &[], &[]);
        let snap = Snapshot {
            nodewrights: vec![std::sync::Arc::new(nw.clone())],
            ..Snapshot::default()
        };
        let p = plan(&snap, "tuning", Lifecycle::Pause).unwrap();
        assert_eq!(
            p.actions,
            vec![Action::PatchNodeWrightAnnotations {
                name: "tuning".into(),
                annotations: BTreeMap::from([(
                    "nodewright.nvidia.com/pause".into(),
                    Some("true".into())
                )])
            }]
        );
        assert!(plan(&snap, "tuning", Lifecycle::Resume).unwrap().is_noop());
        nw.metadata.annotations = Some(BTreeMap::from([(
            "nodewright.nvidia.com/disable".into(),
            "true".into(),
        )]));
        let snap = Snapshot {
            nodewrights: vec![std::sync::Arc::new(nw)],
            ..Snapshot::default()
        };
        assert!(plan(&snap, "tuning", Lifecycle::Disable).unwrap().is_noop());
        assert_eq!(
            plan(&snap, "tuning", Lifecycle::Enable)
                .unwrap()
                .actions
                .len(),
            1
        );
        assert_eq!(
            plan(&snap, "nope", Lifecycle::Pause),
            Err(VerbError::NodeWrightNotFound("nope".into()))
        );
    }
}
