//! The finalizer and the deletion phases (spec/operator.md §11.1–§11.2): uninstall-enabled
//! packages are uninstalled through the normal lane first, then every node is cleaned of this
//! NodeWright's keys (keeping the records of packages whose files remain) and the finalizer
//! is released.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use nodewright_schema::node_state::split_entry_key;
use nodewright_schema::{keys, node_state::NodeState};

use super::context::{Flow, PassCtx};
use super::write_order::After;
use crate::plan::{Action, EventObject, EventType};

/// Why deletion cannot proceed (§11.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blocked {
    /// Some node's node state does not parse.
    Malformed,
    /// Paused with uninstall work pending.
    Paused,
    /// Disabled with uninstall work pending.
    Disabled,
}

/// Whether an uninstall-enabled spec package still has an entry in a node state (§11.1 scan).
pub fn pending_uninstall(nw: &nodewright_schema::NodeWright, state: &NodeState) -> bool {
    let packages = nw.spec.packages();
    state.0.keys().any(|key| {
        let (name, _) = split_entry_key(key);
        packages.get(name).is_some_and(|p| p.uninstall_enabled())
    })
}

fn blocked_condition(reason: &str, message: &str) -> Condition {
    Condition {
        type_: keys::condition::DELETION_BLOCKED.to_string(),
        status: "True".to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
        observed_generation: None,
    }
}

/// Preamble step 2 (§5.4, §11): add the finalizer to a live NodeWright; run the deletion
/// phases for one being deleted.
pub fn finalizer(ctx: &mut PassCtx<'_>, nw: usize) -> Flow {
    let view = &ctx.nws[nw];
    let nw_obj = view.nw;
    let name = view.name.to_string();
    let state_key = view.state_key();
    let has_finalizer = nw_obj
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == keys::FINALIZER));
    if !view.deleting() {
        if !has_finalizer {
            ctx.emit(Action::SetFinalizer {
                name,
                present: true,
            });
        }
        return Flow::Continue;
    }
    if !has_finalizer {
        return Flow::EndPass;
    }

    // Phase 1: scan.
    let selected = view.selected.clone();
    let mut malformed = false;
    let mut pending = false;
    for &id in &selected {
        match ctx.node(id).state(state_key) {
            Err(_) => malformed = true,
            Ok(state) => pending |= pending_uninstall(nw_obj, state),
        }
    }
    let blocked = if malformed {
        Some(Blocked::Malformed)
    } else if pending && view.disabled() {
        Some(Blocked::Disabled)
    } else if pending && view.paused() {
        Some(Blocked::Paused)
    } else {
        None
    };
    let now = ctx.now;
    if let Some(b) = blocked {
        let (reason, message) = match b {
            Blocked::Malformed => (
                keys::reason::MALFORMED_NODE_STATE,
                "deletion blocked: a node's nodeState annotation cannot be parsed; repair or reset it",
            ),
            Blocked::Paused => (
                keys::reason::PAUSED_WITH_PENDING_UNINSTALL,
                "deletion blocked: paused with pending uninstalls; remove the pause annotation",
            ),
            Blocked::Disabled => (
                keys::reason::DISABLED_WITH_PENDING_UNINSTALL,
                "deletion blocked: disabled with pending uninstalls; remove the disable annotation",
            ),
        };
        let entering = ctx.nws[nw]
            .condition(keys::condition::DELETION_BLOCKED)
            .is_none_or(|c| c.reason != reason);
        ctx.nws[nw].set_condition(blocked_condition(reason, message), now);
        if entering {
            ctx.event(
                EventObject::NodeWright(name.clone()),
                EventType::Warning,
                keys::event::DELETION_BLOCKED,
                format!("[nodewright:{name}] {message}"),
            );
        }
        if b == Blocked::Malformed {
            ctx.error(format!(
                "nodewright {name}: deletion blocked by a malformed node state"
            ));
        }
        return Flow::Continue;
    }
    ctx.nws[nw].remove_condition(keys::condition::DELETION_BLOCKED);

    // Phase 2: wait for the uninstall lane.
    if pending {
        return Flow::Continue;
    }

    // Phase 3: cleanup, then the finalizer once every node's cleanup took effect.
    let mut cleaned = Vec::new();
    for &id in &selected {
        ctx.uncordon(nw, id);
        let keep_records = ctx.node(id).state(state_key).is_ok_and(|s| !s.is_empty());
        let n = ctx.node_mut(id);
        for segment in keys::node_key::PER_NODEWRIGHT {
            let key = format!("{}{segment}{name}", keys::PREFIX);
            let record = segment == keys::node_key::NODE_STATE
                || segment == keys::node_key::VERSION
                || segment == keys::node_key::CONFIG_APPLIED;
            if keep_records && record {
                continue;
            }
            if segment == keys::node_key::NODE_STATE {
                if n.state_present(state_key) {
                    n.delete_state(state_key);
                }
                continue;
            }
            if n.annotation(&key).is_some() {
                n.remove_annotation(&key);
            }
            if segment == keys::node_key::STATUS && n.label(&key).is_some() {
                n.remove_label(&key);
            }
        }
        let node_name = n.name().to_string();
        let conditions: Vec<String> = n
            .node()
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .map(|c| c.type_.clone())
            .filter(|t| t.starts_with(&keys::node_condition_prefix(&name)))
            .collect();
        if !conditions.is_empty() {
            let at = ctx.emit_after(
                Action::PatchNodeConditions {
                    node: node_name.clone(),
                    set: Vec::new(),
                    remove: conditions,
                },
                [After::Node(node_name.clone())],
            );
            cleaned.push(After::Emitted(at));
        }
        cleaned.push(After::Node(node_name));
    }
    let view = &mut ctx.nws[nw];
    view.status.observed_generation = Some(view.status.observed_generation.unwrap_or(0) + 1);
    ctx.emit_after(
        Action::SetFinalizer {
            name,
            present: false,
        },
        cleaned,
    );
    Flow::EndPass
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_schema::{NodeWright, Package, PackageStatus, Stage, State, Uninstall};
    use std::collections::BTreeMap;

    #[test]
    fn only_uninstall_enabled_packages_hold_deletion() {
        let mut nw = NodeWright::new("nw", Default::default());
        nw.spec.packages = Some(BTreeMap::from([
            (
                "keep".to_string(),
                Package {
                    version: "1".into(),
                    image: "i".into(),
                    ..Package::default()
                },
            ),
            (
                "undo".to_string(),
                Package {
                    version: "1".into(),
                    image: "i".into(),
                    uninstall: Some(Uninstall {
                        enabled: true,
                        apply: false,
                    }),
                    ..Package::default()
                },
            ),
        ]));
        let mut state = NodeState::default();
        state.upsert(PackageStatus::new(
            "keep",
            "1",
            "i",
            Stage::Config,
            State::Complete,
        ));
        assert!(!pending_uninstall(&nw, &state));
        state.upsert(PackageStatus::new(
            "undo",
            "1",
            "i",
            Stage::Config,
            State::Complete,
        ));
        assert!(pending_uninstall(&nw, &state));
    }

    #[test]
    fn a_paused_nodewright_with_pending_uninstalls_is_not_released() {
        use super::super::testkit::{self, node, settings, world};
        let mut b = testkit::nw("nw")
            .uninstall_package("undo", "1.0.0", false)
            .paused()
            .build();
        b.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        b.metadata.finalizers = Some(vec![keys::FINALIZER.to_string()]);
        let mut snap = world()
            .node(node("n1").state("nw", &[("undo", "1.0.0", Stage::Config, State::Complete)]))
            .build();
        snap.nodewrights.push(std::sync::Arc::new(b));
        let s = settings();
        let mut ctx = PassCtx::new(&snap, &s);
        assert_eq!(finalizer(&mut ctx, 0), Flow::Continue);
        assert_eq!(
            ctx.nws[0]
                .condition(keys::condition::DELETION_BLOCKED)
                .map(|c| c.reason.clone()),
            Some("PausedWithPendingUninstall".to_string())
        );
        assert!(
            !ctx.emitted()
                .iter()
                .any(|a| matches!(a, Action::SetFinalizer { .. }))
        );
    }
}
