//! Node selection (spec/operator.md §5.6–§5.9) and compartment assignment/admission
//! (§2.5–§2.6). Label-selector and toleration matching live in the schema crate
//! (`nodewright_schema::{selector, toleration}`).

use k8s_openapi::api::core::v1::Toleration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use nodewright_schema::keys::{self, condition};
use nodewright_schema::toleration::tolerates_all;
use nodewright_schema::{BatchState, Status};

use super::context::PassCtx;
use super::policy::{self, CompartmentDef};
use crate::settings::constants::CONDITION_NODE_LIST_CAP;

/// Builds the compartments of a NodeWright and assigns each selected node to one (§2.5,
/// §2.8). Recomputed from current labels every pass.
pub fn assign(ctx: &mut PassCtx, nw: usize) {
    let view = &ctx.nws[nw];
    let defs = policy::compartments(
        view.nw,
        view.policy,
        view.policy_missing,
        view.selected.len() as i32,
    );
    let default_idx = defs.len().saturating_sub(1);
    // Matches per compartment selector over this NodeWright's selected nodes (for tie-breaks).
    let matches: Vec<Vec<bool>> = defs
        .iter()
        .map(|d| {
            let parsed = d
                .selector
                .as_ref()
                .filter(|_| !d.legacy)
                .map(nodewright_schema::selector::Selector::parse);
            view.selected
                .iter()
                .map(|&n| matches!(&parsed, Some(Ok(sel)) if sel.matches(ctx.node(n).labels())))
                .collect()
        })
        .collect();
    let counts: Vec<i32> = matches
        .iter()
        .map(|m| m.iter().filter(|b| **b).count() as i32)
        .collect();
    let mut of = Vec::with_capacity(view.selected.len());
    for p in 0..view.selected.len() {
        let mut cands: Vec<usize> = matches
            .iter()
            .enumerate()
            .filter(|(c, m)| defs[*c].selector.is_some() && m[p])
            .map(|(c, _)| c)
            .collect();
        cands.sort_by(|&a, &b| {
            let ca = policy::ceiling(defs[a].budget, counts[a].max(1));
            let cb = policy::ceiling(defs[b].budget, counts[b].max(1));
            defs[a]
                .safety_rank()
                .cmp(&defs[b].safety_rank())
                .then(ca.cmp(&cb))
                .then_with(|| defs[a].name.cmp(&defs[b].name))
        });
        of.push(cands.first().copied().unwrap_or(default_idx));
    }
    let view = &mut ctx.nws[nw];
    view.compartments = defs;
    view.compartment_of = of;
}

/// The batch state a compartment starts the pass with (§2.5): the persisted one for
/// compartments with a strategy, `{currentBatch: 1}` otherwise or when absent.
pub fn batch_state(ctx: &PassCtx, nw: usize, def: &CompartmentDef) -> BatchState {
    if def.strategy.is_none() {
        return BatchState::reset();
    }
    ctx.nws[nw]
        .status
        .compartment_statuses
        .as_ref()
        .and_then(|m| m.get(&def.name))
        .and_then(|c| c.batch_state.clone())
        .unwrap_or_else(BatchState::reset)
}

/// Selected node ids of one compartment, in node order.
pub fn compartment_nodes(ctx: &PassCtx, nw: usize, comp: usize) -> Vec<usize> {
    let view = &ctx.nws[nw];
    view.selected
        .iter()
        .zip(&view.compartment_of)
        .filter(|(_, c)| **c == comp)
        .map(|(n, _)| *n)
        .collect()
}

/// Whether a node carries the ignore label with the exact value `"true"` (§5.9).
pub fn ignored(ctx: &PassCtx, node: usize) -> bool {
    ctx.node(node).label(keys::IGNORE_LABEL) == Some("true")
}

/// The toleration set of the taint check (§5.8).
pub fn check_tolerations(ctx: &PassCtx, nw: usize) -> Vec<Toleration> {
    let spec = &ctx.nws[nw].nw.spec;
    let mut tols = vec![Toleration {
        key: Some(keys::TAINT_UNSCHEDULABLE.to_string()),
        operator: Some("Exists".to_string()),
        effect: Some("NoSchedule".to_string()),
        ..Toleration::default()
    }];
    tols.extend(spec.additional_tolerations.iter().flatten().cloned());
    if spec.runtime_required {
        let t = &ctx.runtime_taint;
        tols.push(Toleration {
            key: Some(t.key.clone()),
            operator: Some("Equal".to_string()),
            value: t.value.clone(),
            effect: Some(t.effect.clone()),
            ..Toleration::default()
        });
    }
    tols
}

/// Whether every taint of the node is tolerated (§5.8).
pub fn tolerable(ctx: &PassCtx, node: usize, tols: &[Toleration]) -> bool {
    tolerates_all(tols, ctx.node(node).taints())
}

/// Nodes admitted by one compartment this pass (§2.6), before the ignore/taint checks.
/// `size` is the compartment's batch size (§2.3).
/// While `admitting` is false — outside a maintenance window, or while the batch waits for
/// its approval — only nodes admitted earlier (in progress, or picked and not yet complete)
/// go on; no new node takes a batch slot.
pub fn admit(
    ctx: &PassCtx,
    nw: usize,
    nodes: &[usize],
    size: i32,
    stopped: bool,
    admitting: bool,
) -> Vec<usize> {
    if stopped {
        return Vec::new();
    }
    let view = &ctx.nws[nw];
    let prio = view.node_priority();
    let sticky =
        |n: usize| prio.is_some_and(|p| p.contains_key(ctx.node(n).name())) && !view.is_complete(n);
    let in_progress: Vec<usize> = nodes
        .iter()
        .copied()
        .filter(|&n| ctx.node_status(nw, n) == Status::InProgress)
        .collect();
    if !in_progress.is_empty() {
        // UP+: top up with sticky nodes to the batch size.
        let room = (size - in_progress.len() as i32).max(0) as usize;
        let mut out = in_progress.clone();
        out.extend(
            nodes
                .iter()
                .copied()
                .filter(|&n| !in_progress.contains(&n) && sticky(n))
                .take(room),
        );
        return out;
    }
    let stickies: Vec<usize> = nodes.iter().copied().filter(|&n| sticky(n)).collect();
    if !stickies.is_empty() || !admitting {
        return stickies;
    }
    if size <= 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for tier in [
        Status::Waiting,
        Status::Unknown,
        Status::Blocked,
        Status::Erroring,
    ] {
        for &n in nodes {
            if out.len() as i32 >= size {
                return out;
            }
            if !view.is_complete(n) && ctx.node_status(nw, n) == tier {
                out.push(n);
            }
        }
    }
    out
}

/// Node selection for one NodeWright (§5.6): admission per compartment, ignore label and taint
/// checks (`blocked`), `nodePriority` records, and the `TaintNotTolerable`/`NodesIgnored`
/// conditions over all nodes. Returns the picked node ids in dispatch order.
pub fn select_nodes(ctx: &mut PassCtx, nw: usize) -> Vec<usize> {
    prune_complete_priority(ctx, nw);
    let tols = check_tolerations(ctx, nw);
    let mut picked = Vec::new();
    let defs = ctx.nws[nw].compartments.clone();
    let window_open = super::maintenance::admits(ctx, nw);
    let pick_time = Time(jiff::Timestamp::from_second(ctx.now.as_second()).unwrap_or(ctx.now));
    for (ci, def) in defs.iter().enumerate() {
        let nodes = compartment_nodes(ctx, nw, ci);
        let state = batch_state(ctx, nw, def);
        let stopped = def.strategy.is_some() && state.should_stop;
        let size = policy::batch_size(def, nodes.len() as i32, &state);
        let admitting = window_open && super::approvals::admits(ctx, nw, def, &state);
        for n in admit(ctx, nw, &nodes, size, stopped, admitting) {
            if ignored(ctx, n) || !tolerable(ctx, n, &tols) {
                if ctx.node_status(nw, n) != Status::Blocked {
                    ctx.set_node_status(nw, n, Status::Blocked);
                }
                continue;
            }
            let name = ctx.node(n).name();
            let view = &mut ctx.nws[nw];
            if !view.node_priority().is_some_and(|p| p.contains_key(name)) {
                let name = name.to_string();
                let prio = view
                    .node_priority_mut()
                    .get_or_insert_with(Default::default);
                prio.insert(name, pick_time.clone());
            }
            picked.push(n);
        }
    }
    let selected = ctx.nws[nw].selected.clone();
    let mut untolerated = Vec::new();
    let mut ignored_nodes = Vec::new();
    for &n in &selected {
        if ignored(ctx, n) {
            ignored_nodes.push(ctx.node(n).name().to_string());
        }
        if !tolerable(ctx, n, &tols) {
            untolerated.push(ctx.node(n).name().to_string());
        }
    }
    untolerated.sort();
    ignored_nodes.sort();
    let now = ctx.now;
    let taint_cond = list_condition(
        condition::TAINT_NOT_TOLERABLE,
        condition::TAINT_NOT_TOLERABLE,
        &untolerated,
        "has taints that are not tolerable. Skipping.",
        "nodes have taints that are not tolerable. Skipping.",
        "All nodes have tolerable taints.",
    );
    let ignore_cond = list_condition(
        condition::NODES_IGNORED,
        condition::NODES_IGNORED,
        &ignored_nodes,
        "has ignore label set. Skipping.",
        "nodes have ignore label set. Skipping.",
        "No nodes have ignore label set.",
    );
    let view = &mut ctx.nws[nw];
    view.set_condition(taint_cond, now);
    view.set_condition(ignore_cond, now);
    picked
}

fn list_condition(
    type_: &str,
    reason: &str,
    names: &[String],
    one: &str,
    many: &str,
    none: &str,
) -> Condition {
    let (status, message) = if names.is_empty() {
        ("False", none.to_string())
    } else if names.len() > CONDITION_NODE_LIST_CAP {
        ("True", format!("{} {many}", names.len()))
    } else {
        ("True", format!("Node [{}] {one}", names.join(", ")))
    };
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message,
        last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
        observed_generation: None,
    }
}

/// Removes nodes reading `complete` from `nodePriority` (§2.6).
pub fn prune_complete_priority(ctx: &mut PassCtx, nw: usize) {
    let Some(prio) = ctx.nws[nw].node_priority() else {
        return;
    };
    let done: Vec<String> = prio
        .keys()
        .filter(|name| {
            ctx.node_id(name)
                .is_some_and(|id| ctx.node_status(nw, id) == Status::Complete)
        })
        .cloned()
        .collect();
    for name in done {
        ctx.remove_from_priority(nw, &name);
    }
}
