//! The lifecycle engine: the functional core `reconcile(&Snapshot, &Settings) -> Plan`
//! (the shared ARCHITECTURE.md §2.2, spec/operator.md §5). Pure and deterministic: no I/O,
//! no clock (the snapshot carries `now`), no randomness.
//!
//! One call is one heavy pass (§5.2). The Job handler and the Pod-evidence handler (§5.1)
//! run inside the same pass, first, so their recordings are visible to the heavy-pass steps
//! and all node changes of the pass merge into one patch per node (§5.15).
//!
//! # The pass
//!
//! [`reconcile`] builds the working state ([`context::PassCtx`]) and runs, in order:
//!
//! 1. the Job and Pod-evidence handlers ([`handlers::run`]), then `ctx.refresh_completion`,
//!    which finds each selected node's completion by package state
//!    ([`complete::node_complete`]) as the handlers left it;
//! 2. §5.2: auto-taint of new nodes ([`runtime`]) and reboot tracking ([`reboots`]), in
//!    `heavy_pass`, whose comments number the steps as §5.2 does;
//! 3. every NodeWright's preamble, in priority order (§5.4: conditions, finalizer,
//!    ReportState, pause, the sweep and ConfigMaps, resume, introspection);
//! 4. then every dispatchable NodeWright's dispatch loop (§5.5: select the batch, then
//!    [`node_work::work_node`] on each picked, ready, incomplete node);
//! 5. the runtime-required taint's removal (skipped by a pass that ended early);
//! 6. in every pass, ended early or not (`finish`): the approvals and `Ready` conditions, the
//!    version stamps (§5.2 step 4, with the pass's node patches), the node conditions, and the
//!    working state turned into the plan.
//!
//! Some steps end the pass when they change something, as §5.2 and §5.4 say: auto-taint,
//! reboot tracking, the finalizer, ReportState, the pause and introspection. Such a step
//! returns `true` or [`context::Flow::EndPass`]; what was decided so far is written and the
//! pass requeues. ReportState and introspection judge only their own changes, comparing the
//! NodeWright's working status before and after themselves (`NwView::mark`), so what the
//! handlers recorded earlier in the pass does not end it. The preamble's data steps (the
//! sweep and the ConfigMaps) never end it (docs/decisions.md). The package-lane steps are
//! called through a table, `steps::Hooks::STANDARD`, which names each step's function (tests
//! swap steps out).
//!
//! # The working state
//!
//! Steps never write the cluster; they write the pass context, and the plan is its difference
//! from the snapshot:
//!
//! - nodes by *node id* (position in `snapshot.nodes`): metadata, taints, `unschedulable` and
//!   node-state entries ([`context::NodeWork`]), diffed entry by entry at the end, so an entry
//!   the pass did not touch is not sent and a concurrent writer's change survives (§5.15);
//! - NodeWrights by *nw index* (priority, then name), each with its selected node ids in
//!   node order (§5.3) and a working status ([`context::NwView`]), published as one status
//!   patch when it changed;
//! - node Status through [`context::PassCtx::set_node_status`] (annotation, label,
//!   `nodeStatus`, `nodeState`; `complete` releases the cordon and leaves `nodePriority`),
//!   cordons through `cordon`/`uncordon` (§7.2, §7.3);
//! - every other write through `emit`/`emit_after`, with what it relies on
//!   ([`write_order`]); events, requeues and errors likewise.
//!
//! # One package on one node, from apply to config
//!
//! The path reads through the rule modules alone. It is that of a package without an
//! `interrupt`: with one, interrupt processing (`node_work`, §6.12: cordon, wait, drain) holds
//! the node before `apply`, and the package completes only after its `post-interrupt`.
//!
//! 1. A new node's first passes end early: ReportState's counters move, then introspection
//!    ([`status::introspect`], §5.12) sets its Status `unknown`, then `waiting`. In the next
//!    pass the dispatch loop's batch selection ([`select::select_nodes`], §2, §5.5) picks it,
//!    and [`node_work::work_node`] runs on it once it is ready ([`order::node_ready`]).
//! 2. For the runnable package, interrupt processing (`interrupt_processing`, §6.12) lets
//!    it through at once, as it has no interrupt, and it dispatches the next stage
//!    (`dispatch_stage`, §6.3), which asks [`packages::choose_stage`]: `apply` for a package
//!    the node has no entry for.
//! 3. Dispatch starts the stage Job, a [`jobs::PackageJob`] (built by the executor when it
//!    sends it, §8.2–§8.5): it records the entry `(apply, in_progress)` and the node's
//!    `in_progress` Status, then `ctx.create_job` queues the Job after the node's patch and
//!    after this pass's writes of the ConfigMaps it mounts ([`write_order`]), so the entry
//!    reaches the node before the Job starts.
//! 4. While the Job runs, later passes find it unfinished and dispatch leaves it (the
//!    in-flight gate); the sweep ([`sweep::sweep`], §8.14) checks that it still matches the
//!    package.
//! 5. When the Job succeeds, [`handlers::run`], first in the next pass, records
//!    `(apply, complete)` and marks the Job processed (§8.8).
//! 6. The same pass's dispatch asks `choose_stage` again: after a complete `apply` it answers
//!    `config` (`packages::next_stage`), and steps 3 to 5 repeat for the config Job. On its
//!    success the handler also records the configuration it ran with, for a package with a
//!    `configMap` (§16.3).
//! 7. With every package complete, the node is complete by package state
//!    ([`complete::node_complete`]). The pass that recorded it ends at ReportState
//!    ([`status::report_state`], §5.4 step 3), as the NodeWright's counters moved; in the next
//!    one introspection sets the node's Status `complete` (which releases its cordon, if it
//!    had one, and takes it out of `nodePriority`) and that pass ends there (§5.4 step 7).
//!
//! `engine::lifecycle_tests` follows this path pass by pass
//! (`the_pass_that_records_a_stage_s_success_starts_the_next_and_completion_follows_a_pass_later`).
//!
//! Completion predicates (§6.4, §16.3) have one home, [`complete`]; label selectors and
//! tolerations match through the schema crate. What a pass carries to the next, and why a
//! warm pass plans what a cold one does, is docs/engine-performance.md.

pub mod approvals;
pub mod complete;
pub mod conditions;
pub mod configmaps;
pub mod context;
pub mod deletion;
pub mod drain;
pub mod handlers;
pub mod incremental;
pub mod interrupts;
pub mod jobs;
pub mod maintenance;
pub mod metrics;
pub mod node_map;
pub mod node_work;
pub mod order;
pub mod packages;
pub mod policy;
pub mod reboots;
pub mod runtime;
pub mod select;
pub mod status;
mod steps;
pub mod sweep;
pub mod write_order;

#[cfg(test)]
mod lifecycle_tests;
#[cfg(test)]
mod pass_tests;
#[cfg(test)]
mod prop_tests;
#[cfg(test)]
mod scenario_tests;
#[cfg(test)]
mod sim_tests;
#[cfg(test)]
pub mod testkit;
#[cfg(test)]
mod warm_prop_tests;

use nodewright_schema::Status;

use crate::plan::{Plan, Requeue};
use crate::settings::Settings;
use crate::snapshot::Snapshot;

use context::{Flow, PassCtx};
pub use incremental::StateCache;
// The step table is public only where a caller swaps steps: tests, and the engine bench's
// per-step timing (feature `step-timing`).
#[cfg(not(any(test, feature = "step-timing")))]
use steps::Hooks;
#[cfg(any(test, feature = "step-timing"))]
pub use steps::{Hooks, SideFn, StepFn, WorkFn};

/// One heavy pass over a snapshot (§5.2).
pub fn reconcile(snapshot: &Snapshot, settings: &Settings) -> Plan {
    run_pass(snapshot, settings, &Hooks::STANDARD, None)
}

/// One heavy pass, reusing (and then refreshing) the caller's parsed node states. The plan is
/// the one [`reconcile`] returns; the cache only saves work (engine/incremental).
pub fn reconcile_cached(snapshot: &Snapshot, settings: &Settings, cache: &mut StateCache) -> Plan {
    run_pass(snapshot, settings, &Hooks::STANDARD, Some(cache))
}

/// One heavy pass with explicit steps.
#[cfg(any(test, feature = "step-timing"))]
pub fn reconcile_with(snapshot: &Snapshot, settings: &Settings, hooks: &Hooks) -> Plan {
    reconcile_with_cache(snapshot, settings, hooks, None)
}

/// One heavy pass with explicit steps and an optional cache.
#[cfg(any(test, feature = "step-timing"))]
pub fn reconcile_with_cache(
    snapshot: &Snapshot,
    settings: &Settings,
    hooks: &Hooks,
    cache: Option<&mut StateCache>,
) -> Plan {
    run_pass(snapshot, settings, hooks, cache)
}

/// One heavy pass with the given steps and an optional cache.
fn run_pass(
    snapshot: &Snapshot,
    settings: &Settings,
    hooks: &Hooks,
    cache: Option<&mut StateCache>,
) -> Plan {
    // §5.2 step 1: nothing to do without NodeWrights or nodes; no requeue.
    if snapshot.nodewrights.is_empty() || snapshot.nodes.is_empty() {
        return Plan::independent(Vec::new(), Requeue::Idle);
    }
    let mut cache = cache;
    let mut ctx = PassCtx::new_cached(snapshot, settings, cache.as_deref_mut());
    if let Some(cache) = cache.as_deref_mut() {
        ctx.fill_cache(cache);
    }
    (hooks.handlers)(&mut ctx);
    for nw in 0..ctx.nws.len() {
        ctx.refresh_completion(nw);
    }
    let _ = heavy_pass(&mut ctx, hooks);
    finish(ctx, cache)
}

/// Steps 3 and 5–8 of §5.2; returns early when a step ends the pass. Step 4's version stamps
/// go out with the pass's node patches ([`finish`]; docs/decisions.md, "Engine part 1").
fn heavy_pass(ctx: &mut PassCtx<'_>, hooks: &Hooks) -> Flow {
    // Step 3: auto-taint new nodes.
    if runtime::auto_taint(ctx) {
        ctx.requeue_active();
        return Flow::EndPass;
    }
    // Step 5: reboot tracking.
    if reboots::track(ctx) {
        ctx.requeue_active();
        return Flow::EndPass;
    }
    // Step 6: per-NodeWright preamble, in priority order.
    for nw in 0..ctx.nws.len() {
        if preamble(ctx, hooks, nw) == Flow::EndPass {
            ctx.requeue_active();
            return Flow::EndPass;
        }
    }
    // Step 7: dispatch.
    for nw in 0..ctx.nws.len() {
        if dispatchable(ctx, nw) && dispatch(ctx, hooks, nw) {
            ctx.requeue_active();
        }
    }
    // Step 8: runtime-required taint removal.
    runtime::remove_runtime_taint(ctx);
    Flow::Continue
}

/// The per-NodeWright preamble (§5.4).
fn preamble(ctx: &mut PassCtx<'_>, hooks: &Hooks, nw: usize) -> Flow {
    // 1. Conditions that stay current even when paused/disabled/deleting.
    conditions::refresh_malformed(ctx, nw);
    conditions::refresh_policy_not_found(ctx, nw);
    maintenance::refresh(ctx, nw);
    (hooks.refresh_conditions)(ctx, nw);
    // 2. Finalizer.
    if (hooks.finalizer)(ctx, nw) == Flow::EndPass {
        return Flow::EndPass;
    }
    // 3. ReportState.
    if status::report_state(ctx, nw) {
        return Flow::EndPass;
    }
    let view = &ctx.nws[nw];
    // 4. Paused (disabled wins over paused, §16.3).
    if view.paused() {
        let before = ctx.nws[nw].mark();
        status::set_nodewright_status(ctx, nw, Status::Paused);
        for n in ctx.nws[nw].selected.clone() {
            if ctx.node_status(nw, n) != Status::Paused {
                ctx.set_node_status(nw, n, Status::Paused);
            }
        }
        if ctx.nws[nw].mark() != before {
            return Flow::EndPass;
        }
        (hooks.suspend_jobs)(ctx, nw);
        return Flow::Continue;
    }
    // 5. Validate and upsert data. None of these ends the pass (docs/decisions.md, "The
    // preamble's data steps do not end the pass").
    (hooks.sweep)(ctx, nw);
    (hooks.node_metadata)(ctx, nw);
    (hooks.package_configmaps)(ctx, nw);
    // 6. Resume (only when neither paused nor disabled).
    if !ctx.nws[nw].disabled() {
        (hooks.resume_jobs)(ctx, nw);
    }
    // 7. Introspect.
    if status::introspect(ctx, nw) {
        return Flow::EndPass;
    }
    // 8. Version changes are decided lazily at dispatch (§16.3).
    Flow::Continue
}

/// §5.2 step 7: whether a NodeWright is dispatched at all.
fn dispatchable(ctx: &PassCtx<'_>, nw: usize) -> bool {
    let view = &ctx.nws[nw];
    if view.disabled() || view.paused() || view.policy_missing {
        return false;
    }
    if view.all_complete() {
        return false;
    }
    view.selected
        .iter()
        .any(|&n| !view.is_complete(n) && order::node_ready(ctx, nw, n))
}

/// The dispatch loop of one NodeWright (§5.5). Returns whether it wants a requeue.
fn dispatch(ctx: &mut PassCtx<'_>, hooks: &Hooks, nw: usize) -> bool {
    // Steps 1–3 write nothing under lazy admission (§16.3); the stage is chosen per node.
    // Step 4: introspect again.
    let changed = status::introspect(ctx, nw);
    if !changed && ctx.nws[nw].status.status == Some(Status::Complete) {
        return false;
    }
    // Step 5: select.
    let picked = select::select_nodes(ctx, nw);
    // Step 6: work each picked node.
    let mut requeue = false;
    for n in picked {
        if !order::node_ready(ctx, nw, n) {
            continue;
        }
        if complete::node_complete(ctx, nw, n) {
            continue;
        }
        let result = (hooks.work_node)(ctx, nw, n);
        requeue |= result.requeue;
    }
    ctx.refresh_completion(nw);
    status::recompute_counters(ctx, nw);
    // Step 7.
    requeue || !ctx.nws[nw].all_complete()
}

/// Ready conditions, version stamps, node conditions, the carry for the next pass, and the
/// plan (§5.15).
fn finish(mut ctx: PassCtx<'_>, cache: Option<&mut StateCache>) -> Plan {
    for nw in 0..ctx.nws.len() {
        approvals::refresh(&mut ctx, nw);
        conditions::refresh_ready(&mut ctx, nw);
        stamp_versions(&mut ctx, nw);
    }
    let node_conditions = conditions::node_conditions(&ctx);
    let mut cache = cache;
    if let Some(cache) = cache.as_deref_mut() {
        ctx.carry_into(cache);
    }
    let reconcile_interval = ctx.settings.reconcile_interval();
    let writes = ctx.into_actions(node_conditions, cache);
    let requeue = if writes.active || !writes.errors.is_empty() {
        // A timer due before the next active pass (a maintenance window opening) wins.
        match writes.after {
            Some(d) if d < reconcile_interval => Requeue::After(d),
            _ => Requeue::Active,
        }
    } else if let Some(d) = writes.after {
        Requeue::After(d)
    } else {
        Requeue::Idle
    };
    Plan {
        actions: writes.actions,
        requires: writes.requires,
        requeue,
    }
}

/// `version_<nw>` is written when absent on nodes carrying this NodeWright's state (§4.1).
fn stamp_versions(ctx: &mut PassCtx<'_>, nw: usize) {
    for i in 0..ctx.nws[nw].selected.len() {
        let n = ctx.nws[nw].selected[i];
        if ctx.node(n).state_present(ctx.nws[nw].state_key()) && !ctx.carries_version_stamp(nw, n) {
            let key = ctx.nws[nw].keys.version.clone();
            let version = ctx.settings.operator_version.clone();
            ctx.node_mut(n).set_annotation(key, version);
        }
    }
}
