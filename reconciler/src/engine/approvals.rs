//! Approval gates (docs/approvals.md): in a compartment the NodeWright's `approval-required`
//! gates, batch k ≥ 2 admits no node until the approvals in force for this rollout reach k.
//! Nodes admitted earlier finish; other compartments and NodeWrights go on. Which approvals
//! are in force is decided from Git history by the source and handed over in the snapshot.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use nodewright_schema::approvals::{self, Gated, PENDING_SEPARATOR, Pending};
use nodewright_schema::keys::{condition, reason};
use nodewright_schema::{BatchState, Status};

use super::context::PassCtx;
use super::policy::CompartmentDef;
use super::select;

/// The gate of a NodeWright: `None` when it declares none. A gate that cannot be read holds
/// every compartment: a rollout that was meant to wait must not go on by accident.
fn gate(ctx: &PassCtx<'_>, nw: usize) -> Option<Gated> {
    approvals::declared(ctx.nws[nw].nw.metadata.annotations.as_ref())
        .map(|g| g.unwrap_or(Gated::All))
}

/// The batch a compartment holds back for want of an approval, if any.
fn waiting_batch(
    ctx: &PassCtx<'_>,
    nw: usize,
    gate: &Gated,
    def: &CompartmentDef,
    state: &BatchState,
) -> Option<u32> {
    if def.strategy.is_none() || !gate.covers(&def.name) || state.should_stop {
        return None;
    }
    let batch = u32::try_from(state.current_batch)
        .ok()
        .filter(|&b| b >= 2)?;
    let approved = ctx
        .snap
        .approvals
        .get(ctx.nws[nw].name)
        .and_then(|a| a.get(&def.name))
        .copied()
        .unwrap_or(0);
    (approved < batch).then_some(batch)
}

/// Whether a compartment may admit new nodes as far as approvals go.
pub fn admits(ctx: &PassCtx<'_>, nw: usize, def: &CompartmentDef, state: &BatchState) -> bool {
    gate(ctx, nw).is_none_or(|g| waiting_batch(ctx, nw, &g, def, state).is_none())
}

/// The batches of a NodeWright waiting for their approval, with the results so far, in
/// compartment order. A compartment with no node left to roll out waits for nothing.
pub fn pending(ctx: &PassCtx<'_>, nw: usize) -> Vec<Pending> {
    let Some(gate) = gate(ctx, nw) else {
        return Vec::new();
    };
    let view = &ctx.nws[nw];
    let mut out = Vec::new();
    for (ci, def) in view.compartments.iter().enumerate() {
        let state = select::batch_state(ctx, nw, def);
        let Some(batch) = waiting_batch(ctx, nw, &gate, def, &state) else {
            continue;
        };
        let nodes = select::compartment_nodes(ctx, nw, ci);
        let complete = nodes.iter().filter(|&&n| view.is_complete(n)).count();
        if complete == nodes.len() {
            continue;
        }
        let failed = nodes
            .iter()
            .filter(|&&n| !view.is_complete(n) && ctx.node_status(nw, n) == Status::Erroring)
            .count();
        out.push(Pending {
            compartment: def.name.clone(),
            batch,
            complete: complete as u32,
            failed: failed as u32,
        });
    }
    out
}

/// The `AwaitingApproval` condition, present whenever the NodeWright declares a gate.
pub fn refresh(ctx: &mut PassCtx<'_>, nw: usize) {
    if gate(ctx, nw).is_none() {
        ctx.nws[nw].remove_condition(condition::AWAITING_APPROVAL);
        return;
    }
    let pending = pending(ctx, nw);
    let (status, why, message) = if pending.is_empty() {
        (
            "False",
            reason::NOTHING_PENDING,
            "no batch waits for approval".to_string(),
        )
    } else {
        let parts: Vec<String> = pending.iter().map(Pending::to_string).collect();
        (
            "True",
            reason::BATCH_NOT_APPROVED,
            parts.join(PENDING_SEPARATOR),
        )
    };
    let now = ctx.now;
    ctx.nws[nw].set_condition(
        Condition {
            type_: condition::AWAITING_APPROVAL.to_string(),
            status: status.to_string(),
            reason: why.to_string(),
            message,
            last_transition_time: Time(now),
            observed_generation: None,
        },
        now,
    );
}
