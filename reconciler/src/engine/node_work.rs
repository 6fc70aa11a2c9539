//! The work on one picked, ready node of one NodeWright (spec/operator.md §5.5 step 6):
//! cancel and uninstall lane, runnable packages, the config cycle under lazy admission
//! (§16.3), the merged interrupt, interrupt processing (§6.12) and stage dispatch (§6.3).

use crate::job::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use nodewright_schema::node_state::entry_key;
use nodewright_schema::{
    Interrupt, InterruptType, NodeState, Package, Stage, State, Status, keys, names,
};

use super::complete;
use super::context::{NodeWorkResult, PassCtx};
use super::drain::{self, DrainGate};
use super::interrupts::{self, Merged};
use super::jobs::{self, JobNames, PackageJob};
use super::packages::{self, UninstallStep};
use crate::plan::{Action, EventObject, EventType};

/// What interrupt processing decided for one package (§6.12).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gate {
    /// Go on to stage dispatch.
    Proceed,
    /// Not this pass; `drain` when held by cordon/wait/drain (stops a serial node).
    Wait { drain: bool },
}

/// What stage dispatch did for one package (§6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dispatch {
    /// The stage's Job runs: created by this pass, or still unfinished from an earlier one.
    Running,
    /// Nothing to run (complete, skipped, parked).
    Nothing,
    /// Something must settle first (an old Job being replaced or processed).
    Pending,
}

/// Runs §5.5 step 6 for one picked, ready node.
pub fn work_node(ctx: &mut PassCtx<'_>, nw: usize, node: usize) -> NodeWorkResult {
    let mut result = NodeWorkResult::default();
    let view = &ctx.nws[nw];
    let nw_obj = view.nw;
    let nw_name = view.name.to_string();
    let state_key = view.state_key();
    let serial = nw_obj.spec.serial;
    let packages = nw_obj.spec.packages();
    let node_name = ctx.node(node).name().to_string();

    let state = match ctx.node(node).state(state_key) {
        Ok(s) => s.clone(),
        Err(e) => {
            ctx.error(format!("node {node_name}, nodewright {nw_name}: {e}"));
            return result;
        }
    };

    // Cancel (§6.10) and the uninstall lane (§6.9), decided at dispatch (§16.3).
    let mut uninstall_work: Vec<String> = Vec::new();
    for (name, p) in packages {
        if let Some(e) = packages::cancel_entry(nw_obj, &state, name, p) {
            ctx.record_and_publish_entry(nw, node, e);
            ctx.set_node_status(nw, node, Status::InProgress);
            continue;
        }
        match packages::uninstall_step(nw_obj, &state, name, p) {
            UninstallStep::None => {}
            UninstallStep::Remove(key) => {
                ctx.remove_and_publish_entry(nw, node, &key);
                ctx.set_node_status(nw, node, Status::InProgress);
            }
            UninstallStep::Enter(e) => {
                ctx.record_and_publish_entry(nw, node, e);
                ctx.set_node_status(nw, node, Status::InProgress);
                uninstall_work.push(name.clone());
            }
            UninstallStep::Work => uninstall_work.push(name.clone()),
        }
    }

    let state = current_state(ctx, nw, node);
    let applied =
        complete::parse_applied(ctx.node(node).annotation(&keys::config_applied(&nw_name)));
    let completed = packages::completed_set(ctx.nws[nw].completion_inputs(), &state, &applied);
    let runnable: Vec<String> = packages::runnable(nw_obj, &completed)
        .into_iter()
        .filter(|name| !uninstall_work.contains(name))
        .filter(|name| {
            let p = &packages[name];
            let in_cycle = state
                .entries_of(name)
                .any(|e| e.stage.is_some_and(Stage::is_uninstall_cycle));
            let absent = state.entries_of(name).next().is_none();
            !(in_cycle || (complete::uninstall_requested(nw_obj, p) && absent))
        })
        .collect();

    // §16.3: a node whose record differs from the spec enters `config` now, before interrupt
    // processing, so a config interrupt runs only after cordon, drain and config.
    for name in &runnable {
        let p = &packages[name];
        if !complete::config_changed(ctx.nws[nw].completion_inputs(), &applied, name, p) {
            continue;
        }
        if let Some(e) = state.get(name, &p.version) {
            let configured = matches!(
                e.stage,
                Some(Stage::Config | Stage::Interrupt | Stage::PostInterrupt)
            );
            // §8.9: a parked stage is re-attempted by a config update only, not by the record
            // that still holds the last configuration that succeeded.
            let settled = e.state == Some(State::Complete)
                || (e.state == Some(State::Erroring)
                    && e.stage.is_some_and(|stage| {
                        configuration_changed_since_parked(ctx, nw, node, name, p, stage)
                    }));
            if configured && settled && !e.is(Stage::Config, State::InProgress) {
                ctx.record_and_publish_entry(
                    nw,
                    node,
                    packages::entry(name, p, Stage::Config, State::InProgress),
                );
                ctx.set_node_status(nw, node, Status::InProgress);
            }
        }
    }

    let merged = merged_interrupt(ctx, nw, node, &runnable);
    let mut order = uninstall_work.clone();
    order.extend(runnable.iter().cloned());

    for name in &order {
        let uninstalling = uninstall_work.contains(name);
        match interrupt_processing(
            ctx,
            nw,
            node,
            name,
            uninstalling,
            merged.as_ref(),
            &runnable,
        ) {
            Gate::Proceed => {}
            Gate::Wait { drain } => {
                result.requeue = true;
                if serial && drain {
                    break;
                }
                continue;
            }
        }
        match dispatch_stage(ctx, nw, node, name) {
            Dispatch::Running => {
                result.requeue = true;
                if serial {
                    break;
                }
            }
            Dispatch::Pending => result.requeue = true,
            Dispatch::Nothing => {}
        }
    }
    result
}

/// Whether the package's parked (failed) or still retrying Job at `stage` on the node runs
/// with another configMap than the spec's (§6.8 erroring clause). Without such a Job there is
/// nothing to replace: the erroring stage's own retry (§8.9, TTL expiry) uses the current spec.
fn configuration_changed_since_parked(
    ctx: &PassCtx<'_>,
    nw: usize,
    node: usize,
    name: &str,
    package: &Package,
    stage: Stage,
) -> bool {
    let wanted = jobs::config_record_json(package);
    package_jobs(ctx, nw, node, name, &package.version)
        .iter()
        .any(|j| {
            (jobs::is_failed(j) || jobs::is_unfinished(j))
                && jobs::job_stage(j) == Some(stage)
                && jobs::annotation(j, keys::JOB_ANNOTATION_CONFIG_DIGESTS) != Some(wanted.as_str())
        })
}

fn current_state(ctx: &PassCtx<'_>, nw: usize, node: usize) -> NodeState {
    ctx.node(node)
        .state(ctx.nws[nw].state_key())
        .cloned()
        .unwrap_or_default()
}

/// The entries of one package (every version) in the node's state: what a decision about that
/// package reads. Copying only these keeps a pass over a node with many packages linear; a
/// copy of the whole state per package was packages × packages.
fn package_state(ctx: &PassCtx<'_>, nw: usize, node: usize, name: &str) -> NodeState {
    ctx.node(node)
        .state(ctx.nws[nw].state_key())
        .map(|whole| whole.of_package(name))
        .unwrap_or_default()
}

fn merged_interrupt(
    ctx: &PassCtx<'_>,
    nw: usize,
    node: usize,
    runnable: &[String],
) -> Option<Merged> {
    let view = &ctx.nws[nw];
    let applied =
        complete::parse_applied(ctx.node(node).annotation(&keys::config_applied(view.name)));
    let packages = view.nw.spec.packages();
    let candidates: Vec<(&str, Vec<Interrupt>)> = runnable
        .iter()
        .filter_map(|name| {
            let p = packages.get(name)?;
            let keys = complete::interrupt_keys(view.completion_inputs(), &applied, name, p);
            complete::has_interrupt_for(p, &keys)
                .then(|| (name.as_str(), interrupts::candidates(p, &keys)))
        })
        .collect();
    interrupts::coalesce(candidates)
}

/// Jobs of this NodeWright on this node, from the snapshot.
fn node_jobs<'s>(ctx: &PassCtx<'s>, nw: usize, node: usize) -> Vec<&'s Job> {
    let label = names::node_label_value(ctx.node(node).name());
    ctx.index.jobs_of(ctx.nws[nw].name, &label).to_vec()
}

/// Jobs of this NodeWright on this node for one package version, from the snapshot.
fn package_jobs<'c, 's>(
    ctx: &'c PassCtx<'s>,
    nw: usize,
    node: usize,
    name: &str,
    version: &str,
) -> &'c [&'s Job] {
    let label = names::node_label_value(ctx.node(node).name());
    ctx.index.package_jobs_of(
        ctx.nws[nw].name,
        &label,
        &jobs::package_label(name, version),
    )
}

fn created_this_pass(ctx: &PassCtx<'_>, name: &str) -> bool {
    ctx.job_created(name)
}

/// Interrupt processing for one package (§6.12).
fn interrupt_processing(
    ctx: &mut PassCtx<'_>,
    nw: usize,
    node: usize,
    name: &str,
    uninstalling: bool,
    merged: Option<&Merged>,
    runnable: &[String],
) -> Gate {
    let view = &ctx.nws[nw];
    let Some(p) = view.nw.spec.packages().get(name).cloned() else {
        return Gate::Proceed;
    };
    let state = package_state(ctx, nw, node, name);
    let entry = state.get(name, &p.version).cloned().or_else(|| {
        uninstalling
            .then(|| {
                state
                    .entries_of(name)
                    .find(|e| e.stage.is_some_and(Stage::is_uninstall_cycle))
                    .cloned()
            })
            .flatten()
    });
    let in_uninstall_interrupt = entry
        .as_ref()
        .is_some_and(|e| e.stage == Some(Stage::UninstallInterrupt));
    let has_interrupt = complete::has_interrupt(ctx, nw, node, name);
    // §15 item 9: a committed uninstall-interrupt is finished even if `interrupt` was removed.
    if !has_interrupt && !in_uninstall_interrupt {
        return Gate::Proceed;
    }
    let local = match &entry {
        Some(e) if e.state == Some(State::Complete) => {
            e.stage.and_then(|s| packages::next_stage(s, has_interrupt))
        }
        _ => Some(Stage::Apply),
    };
    if let Some(e) = &entry {
        if e.state == Some(State::Skipped) {
            return Gate::Wait { drain: false };
        }
        // Step 4: an interrupt stage in flight must have its Job (re-create if it vanished).
        // A finished Job already recorded belongs to an earlier cycle; start_interrupt frees
        // its name, or keeps it when it is this stage's parked failure.
        if e.stage.is_some_and(Stage::is_interrupt)
            && matches!(e.state, Some(State::InProgress) | Some(State::Erroring))
        {
            let stage = e.stage.unwrap_or(Stage::Interrupt);
            let exists = node_jobs(ctx, nw, node).iter().any(|j| {
                jobs::is_interrupt_job(j)
                    && jobs::job_stage(j) == Some(stage)
                    && (jobs::is_unfinished(j) || !jobs::is_processed(j))
            });
            if !exists {
                let interrupt = if stage == Stage::Interrupt {
                    merged
                        .filter(|m| m.owner == name)
                        .map(|m| m.interrupt.clone())
                        .or_else(|| p.interrupt.clone())
                } else {
                    p.interrupt.clone()
                };
                let interrupt = interrupt.unwrap_or(Interrupt {
                    kind: InterruptType::Noop,
                    services: Vec::new(),
                });
                start_interrupt(ctx, nw, node, name, &p, stage, &interrupt, runnable, false);
            }
        }
    }
    // Step 5: cordon, wait, drain before any install or uninstall stage.
    if matches!(local, Some(Stage::Apply) | Some(Stage::Uninstall))
        && !in_uninstall_interrupt
        && drain::cordon_wait_drain(ctx, nw, node, name) == DrainGate::Wait
    {
        return Gate::Wait { drain: true };
    }
    // Step 6: the merged interrupt.
    if local == Some(Stage::Interrupt) {
        match merged {
            Some(m) if m.owner == name => {
                start_interrupt(
                    ctx,
                    nw,
                    node,
                    name,
                    &p,
                    Stage::Interrupt,
                    &m.interrupt,
                    runnable,
                    true,
                );
            }
            _ => {
                let mut skipped = packages::entry(name, &p, Stage::Interrupt, State::Skipped);
                if let Some(e) = &entry {
                    skipped.restarts = 0;
                    skipped.image = e.image.clone();
                }
                ctx.record_entry(nw, node, skipped);
            }
        }
        ctx.requeue_active();
        return Gate::Wait { drain: false };
    }
    if let Some(e) = &entry
        && e.stage.is_some_and(Stage::is_interrupt)
        && e.state != Some(State::Complete)
    {
        // Steps 7 and 8: an uninstall-interrupt starts without waiting for siblings.
        if e.stage == Some(Stage::UninstallInterrupt) && e.state == Some(State::InProgress) {
            let interrupt = p.interrupt.clone().unwrap_or(Interrupt {
                kind: InterruptType::Noop,
                services: Vec::new(),
            });
            start_interrupt(
                ctx,
                nw,
                node,
                name,
                &p,
                Stage::UninstallInterrupt,
                &interrupt,
                runnable,
                false,
            );
        }
        ctx.requeue_active();
        return Gate::Wait { drain: false };
    }
    Gate::Proceed
}

/// *Start the interrupt* (§6.12): gated on no package Job running on the node and, for a
/// merged interrupt, on every sibling having been marked skipped (§6.13 rule 3).
#[allow(clippy::too_many_arguments)]
fn start_interrupt(
    ctx: &mut PassCtx<'_>,
    nw: usize,
    node: usize,
    name: &str,
    package: &Package,
    stage: Stage,
    interrupt: &Interrupt,
    runnable: &[String],
    merged: bool,
) {
    let node_name = ctx.node(node).name().to_string();
    // Any unfinished package (stage) Job of any NodeWright on the node.
    let label = names::node_label_value(&node_name);
    let busy = ctx
        .index
        .node_jobs(&label)
        .iter()
        .any(|j| !jobs::is_interrupt_job(j) && jobs::is_unfinished(j))
        || ctx.stage_job_created_on(&label);
    if busy {
        return;
    }
    if merged && !siblings_skipped(ctx, nw, node, name, runnable) {
        return;
    }
    let running = package_jobs(ctx, nw, node, name, &package.version)
        .iter()
        .any(|j| jobs::is_interrupt_job(j) && jobs::is_unfinished(j));
    let job_name = names::interrupt_job_name(
        ctx.nws[nw].name,
        stage.as_str(),
        interrupt.kind.as_str(),
        &node_name,
    );
    if running || created_this_pass(ctx, &job_name) {
        return;
    }
    if let Some(existing) = ctx.index.job_by_name(job_name.as_str()) {
        // The name is the claim (§8.14 rule 3): a finished Job must be processed or cleared first.
        if jobs::is_processed(existing) && !parked(ctx, nw, node, existing) {
            ctx.emit(Action::DeleteJob {
                name: job_name,
                uid: existing.metadata.uid.clone(),
                reason: "interrupt Job name must be freed to run the stage again".to_string(),
            });
        }
        return;
    }
    super::configmaps::upsert_node_metadata(ctx, nw, node);
    let order = super::order::node_order(ctx, nw, node);
    let names = JobNames {
        job: job_name,
        metadata_configmap: ctx.metadata_configmap_name(nw, node),
    };
    let job = PackageJob::interrupt(
        ctx.job_settings(),
        ctx.package_jobs(nw, name, package),
        (stage, interrupt),
        (&node_name, order),
        names,
    );
    ctx.create_job(node, job);
    let state = package_state(ctx, nw, node, name);
    let mut entry = state
        .get(name, &package.version)
        .cloned()
        .unwrap_or_else(|| packages::entry(name, package, stage, State::InProgress));
    entry.stage = Some(stage);
    entry.state = Some(State::InProgress);
    entry.restarts = 0;
    if state
        .0
        .contains_key(&entry_key(&entry.name, &entry.version))
    {
        ctx.record_entry(nw, node, entry);
    }
    ctx.set_node_status(nw, node, Status::InProgress);
    let nw_name = ctx.nws[nw].name.to_string();
    for object in [
        EventObject::Node(node_name.clone()),
        EventObject::NodeWright(nw_name.clone()),
    ] {
        ctx.event(
            object,
            EventType::Normal,
            keys::event::INTERRUPT,
            format!(
                "[nodewright:{nw_name}] starting {} {} for package {name} on node {node_name}",
                stage,
                interrupt.kind.as_str()
            ),
        );
    }
}

/// §6.13 rule 3: every other interrupt package still before its interrupt has been marked
/// `skipped` at `interrupt`. Packages erroring before their interrupt do not hold it.
fn siblings_skipped(
    ctx: &PassCtx<'_>,
    nw: usize,
    node: usize,
    owner: &str,
    runnable: &[String],
) -> bool {
    let view = &ctx.nws[nw];
    let state = current_state(ctx, nw, node);
    runnable.iter().filter(|n| n.as_str() != owner).all(|name| {
        let Some(p) = view.nw.spec.packages().get(name) else {
            return true;
        };
        if !complete::has_interrupt(ctx, nw, node, name) {
            return true;
        }
        match state.get(name, &p.version) {
            None => false,
            Some(e) => match e.stage {
                Some(Stage::Interrupt) => {
                    e.state == Some(State::Skipped) || e.state == Some(State::Complete)
                }
                Some(Stage::PostInterrupt) => true,
                Some(Stage::Uninstall | Stage::UninstallInterrupt) => true,
                _ => e.state == Some(State::Erroring),
            },
        }
    })
}

/// A Failed Job whose entry sits at (stage, erroring): the timeout marker (§8.9).
fn parked(ctx: &PassCtx<'_>, nw: usize, node: usize, job: &Job) -> bool {
    if !jobs::is_failed(job) {
        return false;
    }
    let Some(annotation) = ctx.package_annotation(job) else {
        return false;
    };
    let state = package_state(ctx, nw, node, &annotation.name);
    state
        .get(&annotation.name, &annotation.version)
        .is_some_and(|e| {
            e.state == Some(State::Erroring)
                && e.stage.map(|s| s.as_str()) == Some(annotation.stage.as_str())
        })
}

/// Stage dispatch (§6.3) for one package that interrupt processing let through.
fn dispatch_stage(ctx: &mut PassCtx<'_>, nw: usize, node: usize, name: &str) -> Dispatch {
    let view = &ctx.nws[nw];
    let nw_obj = view.nw;
    let nw_name = view.name.to_string();
    let Some(p) = nw_obj.spec.packages().get(name).cloned() else {
        return Dispatch::Nothing;
    };
    let state = package_state(ctx, nw, node, name);
    let has_interrupt = complete::has_interrupt(ctx, nw, node, name);
    let in_cycle_other = state
        .entries_of(name)
        .find(|e| e.stage.is_some_and(Stage::is_uninstall_cycle) && e.version != p.version)
        .cloned();
    let (stage, entry_version) = match &in_cycle_other {
        Some(e) if state.get(name, &p.version).is_none() => (
            e.stage
                .filter(|s| *s == Stage::Uninstall && e.state != Some(State::Complete)),
            e.version.clone(),
        ),
        _ => (
            packages::choose_stage(&state, name, &p, has_interrupt),
            p.version.clone(),
        ),
    };
    let Some(stage) = stage else {
        return Dispatch::Nothing;
    };
    if stage == Stage::UninstallInterrupt || stage.is_interrupt() {
        return Dispatch::Nothing;
    }
    if state
        .get(name, &entry_version)
        .is_some_and(|e| e.state == Some(State::Skipped))
    {
        return Dispatch::Nothing;
    }
    let node_name = ctx.node(node).name().to_string();
    // In-flight gate: an unfinished Job for (NodeWright, package label, node) (§8.14).
    if package_jobs(ctx, nw, node, name, &entry_version)
        .iter()
        .any(|j| jobs::is_unfinished(j))
    {
        return Dispatch::Running;
    }
    let job_name =
        names::stage_job_name(&nw_name, name, &entry_version, stage.as_str(), &node_name);
    if created_this_pass(ctx, &job_name) {
        return Dispatch::Running;
    }
    if let Some(existing) = ctx.index.job_by_name(job_name.as_str()) {
        // §8.14 rule 3 applied before creating, so the create never meets AlreadyExists.
        if parked(ctx, nw, node, existing) && !jobs::package_edited(existing, &p, ctx.settings) {
            return Dispatch::Nothing;
        }
        if !jobs::is_processed(existing) && !jobs::is_unfinished(existing) {
            return Dispatch::Pending;
        }
        ctx.emit(Action::DeleteJob {
            name: job_name,
            uid: existing.metadata.uid.clone(),
            reason: "stage Job name must be freed to run the stage again".to_string(),
        });
        return Dispatch::Pending;
    }

    let mut package = p.clone();
    package.version = entry_version.clone();
    super::configmaps::upsert_node_metadata(ctx, nw, node);
    let order = super::order::node_order(ctx, nw, node);
    let names = JobNames {
        job: job_name,
        metadata_configmap: ctx.metadata_configmap_name(nw, node),
    };
    let job = PackageJob::stage(
        ctx.job_settings(),
        ctx.package_jobs(nw, name, &package),
        stage,
        (&node_name, order),
        names,
    );
    ctx.record_and_publish_entry(
        nw,
        node,
        packages::entry(name, &package, stage, State::InProgress),
    );
    ctx.set_node_status(nw, node, Status::InProgress);
    ctx.create_job(node, job);
    let now = ctx.now;
    ctx.nws[nw].set_condition(
        Condition {
            type_: keys::condition::APPLY_PACKAGE.to_string(),
            status: "True".to_string(),
            reason: keys::condition::APPLY_PACKAGE.to_string(),
            message: format!("Applying package [{name}:{entry_version}] to node [{node_name}]"),
            last_transition_time: Time(now),
            observed_generation: None,
        },
        now,
    );
    for object in [
        EventObject::Node(node_name.clone()),
        EventObject::NodeWright(nw_name.clone()),
    ] {
        ctx.event(
            object,
            EventType::Normal,
            keys::event::APPLY,
            format!("[nodewright:{nw_name}] applying {name}:{entry_version} stage {stage} on node {node_name}"),
        );
    }
    Dispatch::Running
}
