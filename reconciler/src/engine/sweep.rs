//! The Job sweep of the preamble (spec/operator.md §8.14 rules 1, 2 and 4, §16.3 parked-Job
//! staleness) and pause → suspend / resume (§8.15).

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use nodewright_schema::{Interrupt, InterruptType, NodeWright, Stage, State, keys, names};

use super::context::{Flow, PassCtx};
use super::jobs::{self, InterruptJobInput, StageJobInput};
use crate::plan::Action;

fn nw_jobs<'s>(ctx: &PassCtx<'s>, nw: usize) -> Vec<&'s Job> {
    let name = ctx.nws[nw].name;
    ctx.snap
        .jobs
        .iter()
        .filter(|j| jobs::label(j, keys::JOB_LABEL_NAME) == Some(name))
        .collect()
}

fn node_of(ctx: &PassCtx<'_>, nw: usize, job: &Job) -> Option<usize> {
    let label = jobs::label(job, keys::JOB_LABEL_NODE)?;
    ctx.nws[nw]
        .selected
        .iter()
        .copied()
        .find(|&id| names::node_label_value(ctx.node(id).name()) == label)
}

/// What a Job would look like if built now (for staleness), from the Job's own stage.
fn expected(nw: &NodeWright, ctx: &PassCtx<'_>, job: &Job, node: &str) -> Option<Job> {
    let pkg = jobs::read_package_annotation(job)?;
    let stage = jobs::job_stage(job)?;
    let package = nw.spec.packages().get(&pkg.name)?;
    if jobs::is_interrupt_job(job) {
        // The interrupt object is not compared (§8.14); any placeholder serves.
        let interrupt = package.interrupt.clone().unwrap_or(Interrupt {
            kind: InterruptType::Noop,
            services: Vec::new(),
        });
        Some(jobs::build_interrupt_job(
            nw,
            ctx.settings,
            InterruptJobInput {
                package_name: &pkg.name,
                package,
                stage,
                interrupt: &interrupt,
                node,
                node_order: 0,
            },
        ))
    } else {
        Some(jobs::build_stage_job(
            nw,
            ctx.settings,
            StageJobInput {
                package_name: &pkg.name,
                package,
                stage,
                node,
                node_order: 0,
            },
        ))
    }
}

fn delete(ctx: &mut PassCtx<'_>, job: &Job, reason: &str, invalidate: bool) {
    let name = jobs::job_name(job).to_string();
    if invalidate && let Some(mut pkg) = jobs::read_package_annotation(job) {
        pkg.invalid = true;
        ctx.emit(Action::AnnotateJob {
            name: name.clone(),
            uid: job.metadata.uid.clone(),
            annotations: BTreeMap::from([(
                keys::JOB_ANNOTATION_PACKAGE.to_string(),
                pkg.to_json(),
            )]),
            ttl_seconds_after_finished: None,
        });
    }
    ctx.emit(Action::DeleteJob {
        name,
        uid: job.metadata.uid.clone(),
        reason: reason.to_string(),
    });
}

/// Why an unfinished Job no longer matches (§8.14 rule 1), if it does not.
fn validation_failure(
    ctx: &PassCtx<'_>,
    nw: usize,
    node: usize,
    job: &Job,
) -> Option<&'static str> {
    let view = &ctx.nws[nw];
    let pkg = jobs::read_package_annotation(job)?;
    let stage = jobs::job_stage(job)?;
    let spec = view.nw.spec.packages().get(&pkg.name);
    let uninstall_exempt =
        stage == Stage::Uninstall && spec.is_none_or(|p| p.version != pkg.version);
    if spec.is_none_or(|p| p.version != pkg.version) && !uninstall_exempt {
        return Some("no spec package matches the Job");
    }
    let state = ctx.node(node).state(view.name).ok()?;
    let Some(entry) = state.get(&pkg.name, &pkg.version) else {
        return Some("the node has no entry for the package");
    };
    if entry.stage != Some(stage) {
        return Some("the entry's stage differs from the Job's stage");
    }
    if !uninstall_exempt
        && let Some(expected) = expected(view.nw, ctx, job, ctx.node(node).name())
        && !jobs::job_matches(job, &expected)
    {
        return Some("the Job no longer matches the package spec");
    }
    None
}

/// Whether a processed finished Job must go so its stage can run again (§8.14 rule 2).
fn rerun_due(ctx: &PassCtx<'_>, nw: usize, node: usize, job: &Job) -> bool {
    let view = &ctx.nws[nw];
    let (Some(pkg), Some(stage)) = (jobs::read_package_annotation(job), jobs::job_stage(job))
    else {
        return false;
    };
    let Ok(state) = ctx.node(node).state(view.name) else {
        return false;
    };
    let Some(entry) = state.get(&pkg.name, &pkg.version) else {
        return true;
    };
    let Some(entry_stage) = entry.stage else {
        return true;
    };
    if jobs::is_failed(job) && entry_stage == stage && entry.state == Some(State::Erroring) {
        // Parked; a package edit makes it stale (§16.3).
        return view
            .nw
            .spec
            .packages()
            .get(&pkg.name)
            .is_some_and(|p| jobs::package_edited(job, p, ctx.settings));
    }
    if entry_stage.order() < stage.order() {
        return true;
    }
    entry_stage == stage && entry.state != Some(State::Complete)
}

/// Preamble step 5a: invalidate stale unfinished Jobs, clear rerun-eligible processed ones,
/// and sweep Jobs of nodes no longer selected (§8.14 rules 1, 2, 4).
pub fn sweep(ctx: &mut PassCtx<'_>, nw: usize) -> Flow {
    let all = nw_jobs(ctx, nw);
    for job in all {
        if jobs::is_invalid(job) && !jobs::is_unfinished(job) {
            continue;
        }
        let Some(node) = node_of(ctx, nw, job) else {
            delete(
                ctx,
                job,
                "the Job's node no longer exists or is no longer selected",
                false,
            );
            continue;
        };
        if ctx.node(node).malformed(ctx.nws[nw].name) {
            continue;
        }
        if jobs::is_unfinished(job) {
            if jobs::is_invalid(job) {
                continue;
            }
            if let Some(reason) = validation_failure(ctx, nw, node, job) {
                delete(ctx, job, reason, true);
            }
        } else if jobs::is_processed(job) && rerun_due(ctx, nw, node, job) {
            delete(
                ctx,
                job,
                "node state no longer records the Job's stage as done",
                false,
            );
        }
    }
    Flow::Continue
}

fn deleted_this_pass(ctx: &PassCtx<'_>, job: &Job) -> bool {
    ctx.emitted()
        .iter()
        .any(|a| matches!(a, Action::DeleteJob { name, .. } if name == jobs::job_name(job)))
}

/// Paused NodeWright (§8.15): suspend its unfinished, valid, not yet suspended Jobs.
pub fn suspend_jobs(ctx: &mut PassCtx<'_>, nw: usize) {
    for job in nw_jobs(ctx, nw) {
        if jobs::is_unfinished(job) && !jobs::is_invalid(job) && !jobs::is_suspended(job) {
            ctx.emit(Action::SuspendJob {
                name: jobs::job_name(job).to_string(),
                suspend: true,
            });
        }
    }
}

/// Resume (§8.15): for a NodeWright neither paused nor disabled, after the sweep, clear
/// `suspend` on the surviving suspended Jobs.
pub fn resume_jobs(ctx: &mut PassCtx<'_>, nw: usize) {
    let view = &ctx.nws[nw];
    if view.paused() || view.disabled() {
        return;
    }
    for job in nw_jobs(ctx, nw) {
        if jobs::is_unfinished(job)
            && jobs::is_suspended(job)
            && !jobs::is_invalid(job)
            && !deleted_this_pass(ctx, job)
        {
            ctx.emit(Action::SuspendJob {
                name: jobs::job_name(job).to_string(),
                suspend: false,
            });
        }
    }
}
