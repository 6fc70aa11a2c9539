//! Status bookkeeping (spec/operator.md §1.9–§1.10), node Status introspection (§5.12), the
//! NodeWright roll-up (§5.13), batch evaluation and completion bookkeeping (§2.4, §2.7,
//! §10.1–§10.2).

use std::collections::BTreeMap;

use nodewright_schema::keys::event;
use nodewright_schema::{BatchState, CompartmentStatus, NodeWrightStatus, Status};

use super::context::PassCtx;
use super::node_map::union_sorted;
use super::order;
use super::policy::{self, Counts, Evaluation};
use super::select;
use crate::plan::{EventObject, EventType};

/// Roll-up of node Statuses into the NodeWright Status before overrides (§5.13). Each item
/// is (complete by package state, node Status).
pub fn roll_up(nodes: impl IntoIterator<Item = (bool, Status)>) -> Status {
    // One walk, no list: which Statuses the not-complete nodes show, as a set of bits.
    let bit = |s: Status| 1u32 << (s as u32);
    let mut seen = 0u32;
    for (complete, status) in nodes {
        if !complete {
            seen |= bit(status);
        }
    }
    if seen == 0 {
        return Status::Complete;
    }
    if seen & bit(Status::InProgress) != 0 {
        return Status::InProgress;
    }
    for bucket in [
        Status::Erroring,
        Status::Blocked,
        Status::Unknown,
        Status::Waiting,
    ] {
        if seen == bit(bucket) {
            return bucket;
        }
    }
    Status::Unknown
}

/// The NodeWright Status with the overrides of §5.13 applied (disabled wins over paused,
/// §16.3).
pub fn nodewright_status(ctx: &PassCtx, nw: usize) -> Status {
    let view = &ctx.nws[nw];
    let base = roll_up(
        view.selected
            .iter()
            .zip(&view.complete)
            .map(|(&n, &c)| (c, ctx.node_status(nw, n))),
    );
    if view.policy_missing {
        return Status::Blocked;
    }
    if base == Status::Complete {
        return base;
    }
    if view.disabled() {
        Status::Disabled
    } else if view.paused() {
        Status::Paused
    } else if order::blocked_by_all_predecessor(ctx, nw) {
        Status::Waiting
    } else {
        base
    }
}

/// Sets the NodeWright Status, with the transition side effects (§1.10, §2.7, §5.13, §10.2).
pub fn set_nodewright_status(ctx: &mut PassCtx, nw: usize, status: Status) {
    let old = ctx.nws[nw].status.status;
    let generation = ctx.nws[nw].generation();
    if old == Some(status) {
        // §1.9: whenever the Status is set to complete, also for a spec change that left
        // every node complete.
        let view = &mut ctx.nws[nw];
        if status == Status::Complete && view.status.observed_generation != Some(generation) {
            view.status.observed_generation = Some(generation);
        }
        return;
    }
    let name = ctx.nws[nw].name.to_string();
    let reset = policy::auto_reset_enabled(ctx.nws[nw].nw, ctx.nws[nw].policy);
    let view = &mut ctx.nws[nw];
    view.status.status = Some(status);
    view.transitioned = true;
    if status == Status::Unknown {
        // UP quirk (§1.10), only on the transition so that refreshes do not flap.
        view.clear_node_state();
    }
    if status == Status::Complete {
        view.status.observed_generation = Some(generation);
        if reset {
            reset_batch_states(&mut view.status);
        }
    }
    let old_text = old.map_or("", Status::as_str);
    ctx.event(
        EventObject::NodeWright(name.clone()),
        EventType::Normal,
        event::STATE,
        format!("[nodewright:{name}] transitioned [{old_text}] -> [{status}]"),
    );
}

/// A batch reset of every compartment (§2.7), in status.
pub fn reset_batch_states(status: &mut NodeWrightStatus) {
    if let Some(map) = status.compartment_statuses.as_mut() {
        for c in map.values_mut() {
            c.batch_state = Some(BatchState::reset());
        }
    }
}

/// ReportState (§5.4 step 3, §1.10): prunes nodes that left, recomputes counters and
/// compartment statuses. Returns whether the status changed.
pub fn report_state(ctx: &mut PassCtx, nw: usize) -> bool {
    let before = ctx.nws[nw].mark();
    select::assign(ctx, nw);
    ctx.refresh_completion(nw);
    prune_departed(ctx, nw);
    recompute_counters(ctx, nw);
    ctx.nws[nw].mark() != before
}

fn prune_departed(ctx: &mut PassCtx, nw: usize) {
    if ctx.nws[nw].known_nothing_departed() {
        ctx.nws[nw].note_departed(true);
        return;
    }
    let keep =
        |ctx: &PassCtx, name: &str| ctx.node_id(name).is_some_and(|id| ctx.nws[nw].selects(id));
    let gone_prio: Vec<String> = (ctx.nws[nw].node_priority())
        .iter()
        .flat_map(|m| m.keys())
        .filter(|n| !keep(ctx, n))
        .cloned()
        .collect();
    let view = &ctx.nws[nw];
    // The three maps mostly name the same nodes: each name is judged once.
    let names = union_sorted(
        union_sorted(view.node_status.keys(), view.node_state.keys()),
        view.node_boot_ids.keys(),
    );
    let gone: std::collections::HashSet<String> = names
        .filter(|n| !keep(ctx, n))
        .map(str::to_string)
        .collect();
    ctx.nws[nw].note_departed(gone_prio.is_empty() && gone.is_empty());
    for n in gone_prio {
        ctx.remove_from_priority(nw, &n);
    }
    if !gone.is_empty() {
        ctx.nws[nw].retain_nodes(|k| !gone.contains(k));
    }
}

/// Recomputes `completeNodes`, `nodesInProgress`, `packageList` and `compartmentStatuses`
/// (§1.9, §16.3 compartment counters).
pub fn recompute_counters(ctx: &mut PassCtx, nw: usize) {
    let view = &ctx.nws[nw];
    let total = view.selected.len();
    let complete = view.complete.iter().filter(|c| **c).count();
    let in_progress = view
        .selected
        .iter()
        .filter(|&&n| {
            matches!(
                ctx.node_status(nw, n),
                Status::InProgress | Status::Erroring
            )
        })
        .count();
    let mut pkgs: Vec<String> = view
        .nw
        .spec
        .packages()
        .iter()
        .map(|(n, p)| format!("{n}:{}", p.version))
        .collect();
    pkgs.sort();
    let mut comps = BTreeMap::new();
    for (ci, def) in view.compartments.iter().enumerate() {
        let nodes = select::compartment_nodes(ctx, nw, ci);
        let matched = nodes.len() as i32;
        let completed = nodes.iter().filter(|&&n| view.is_complete(n)).count() as i32;
        let inp = nodes
            .iter()
            .filter(|&&n| ctx.node_status(nw, n) == Status::InProgress)
            .count() as i32;
        let batch_state = def
            .strategy
            .is_some()
            .then(|| select::batch_state(ctx, nw, def));
        comps.insert(
            def.name.clone(),
            CompartmentStatus {
                matched,
                ceiling: policy::ceiling(def.budget, matched),
                in_progress: inp,
                completed,
                progress_percent: if matched == 0 {
                    0
                } else {
                    completed * 100 / matched
                },
                batch_state,
            },
        );
    }
    let st = &mut ctx.nws[nw].status;
    st.complete_nodes = Some(format!("{complete}/{total}"));
    st.nodes_in_progress = Some(in_progress as i32);
    st.package_list = Some(pkgs.join(","));
    st.compartment_statuses = (!comps.is_empty()).then_some(comps);
}

/// Introspection (§5.12–§5.13, then §2.4 batch evaluation and `nodePriority` pruning).
/// Returns whether the status changed.
pub fn introspect(ctx: &mut PassCtx, nw: usize) -> bool {
    let before = ctx.nws[nw].mark();
    let name = ctx.nws[nw].name;
    // Each selected node's completion by package state, `complete::node_complete`, as the
    // nodes stand now; `is_complete` below reads it.
    ctx.refresh_completion(nw);
    ctx.write_back_each(nw, write_back);
    let selected = ctx.nws[nw].selected.clone();
    let big_s = nodewright_status(ctx, nw);
    let has_compartments = !ctx.nws[nw].policy_missing;
    for &n in &selected {
        let s = ctx.node_status(nw, n);
        let complete = ctx.nws[nw].is_complete(n);
        let next = if matches!(big_s, Status::Disabled | Status::Paused) {
            big_s
        } else if !complete && big_s != Status::Waiting && !order::node_ready(ctx, nw, n) {
            Status::Waiting
        } else if matches!(s, Status::Disabled | Status::Paused | Status::Waiting) {
            if complete {
                Status::Complete
            } else if has_compartments {
                Status::Waiting
            } else {
                Status::Unknown
            }
        } else if s != Status::Complete && complete {
            Status::Complete
        } else if s == Status::Complete && !complete {
            Status::Unknown
        } else if s == Status::Unknown && !complete && has_compartments {
            Status::Waiting
        } else {
            s
        };
        if next != s {
            ctx.set_node_status(nw, n, next);
            if next == Status::Complete {
                // Upstream's wording: the NodeWright is complete on this node.
                let node_name = ctx.node(n).name().to_string();
                ctx.event(
                    EventObject::Node(node_name),
                    EventType::Normal,
                    event::STATE,
                    format!("[nodewright:{name}] NodeWright {name} complete."),
                );
            }
        }
    }
    let s_now = nodewright_status(ctx, nw);
    set_nodewright_status(ctx, nw, s_now);
    if s_now != Status::Complete && !ctx.nws[nw].paused() {
        evaluate_batches(ctx, nw);
    }
    select::prune_complete_priority(ctx, nw);
    recompute_counters(ctx, nw);
    ctx.nws[nw].mark() != before
}

/// Writes back node `n`'s current Status as-is (§5.12 preamble): an absent one as `unknown`;
/// a present one to `status.nodeStatus` and `status.nodeState`, releasing a complete node's
/// cordon.
fn write_back(ctx: &mut PassCtx, nw: usize, n: usize) {
    let has = ctx.node(n).annotation(&ctx.nws[nw].keys.status).is_some();
    let s = ctx.node_status(nw, n);
    if !has {
        ctx.set_node_status(nw, n, Status::Unknown);
    } else {
        if s == Status::Complete {
            ctx.uncordon(nw, n);
        }
        let node_name = ctx.node(n).name();
        ctx.nws[nw].publish_status(node_name, s);
        ctx.publish_node(nw, n);
    }
}

/// §2.4 evaluation of every compartment with a strategy; writes the batch state to status.
pub fn evaluate_batches(ctx: &mut PassCtx, nw: usize) {
    let defs = ctx.nws[nw].compartments.clone();
    for (ci, def) in defs.iter().enumerate() {
        if def.strategy.is_none() {
            continue;
        }
        let nodes = select::compartment_nodes(ctx, nw, ci);
        let view = &ctx.nws[nw];
        let mut counts = Counts {
            nodes: nodes.len() as i32,
            ..Counts::default()
        };
        for &n in &nodes {
            let s = ctx.node_status(nw, n);
            let c = view.is_complete(n);
            counts.in_progress += i32::from(s == Status::InProgress);
            counts.complete += i32::from(c);
            counts.erroring += i32::from(s == Status::Erroring && !c);
            counts.blocked += i32::from(s == Status::Blocked);
        }
        let mut state = select::batch_state(ctx, nw, def);
        if policy::evaluate(def, &mut state, counts) != Evaluation::Unchanged {
            let entry = ctx.nws[nw]
                .status
                .compartment_statuses
                .get_or_insert_with(BTreeMap::new)
                .entry(def.name.clone())
                .or_default();
            entry.batch_state = Some(state);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roll_up_precedence() {
        use Status::*;
        assert_eq!(roll_up([]), Complete);
        assert_eq!(roll_up([(true, Unknown), (true, Blocked)]), Complete);
        assert_eq!(
            roll_up([(false, Erroring), (false, InProgress)]),
            InProgress
        );
        assert_eq!(roll_up([(false, Erroring), (true, Waiting)]), Erroring);
        assert_eq!(roll_up([(false, Blocked), (false, Blocked)]), Blocked);
        assert_eq!(roll_up([(false, Waiting), (false, Waiting)]), Waiting);
        assert_eq!(roll_up([(false, Waiting), (false, Blocked)]), Unknown);
        assert_eq!(roll_up([(false, Paused)]), Unknown);
        assert_eq!(
            roll_up([(false, Complete), (false, InProgress)]),
            InProgress
        );
    }
}
