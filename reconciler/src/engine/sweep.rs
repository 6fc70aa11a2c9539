//! The Job sweep of the preamble (spec/operator.md §8.14 rules 1, 2 and 4, §16.3 parked-Job
//! staleness) and pause → suspend / resume (§8.15).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use crate::job::Job;
use nodewright_schema::{Interrupt, InterruptType, NodeState, NodeWright, Stage, State, keys};

use super::context::{ExpectedJob, JobComparisons, PassCtx};
use super::jobs::{self, InterruptJobInput, JobFacts, PackageAnnotation, StageJobInput};
use super::write_order::After;
use crate::plan::Action;
use crate::settings::Settings;

fn nw_jobs<'s>(ctx: &PassCtx<'s>, nw: usize) -> Vec<&'s Job> {
    ctx.index.nw_jobs(ctx.nws[nw].name).to_vec()
}

fn node_of(ctx: &PassCtx<'_>, nw: usize, facts: &JobFacts<'_>) -> Option<usize> {
    ctx.node_of_job_label(facts.node_label?)
        .filter(|&id| ctx.nws[nw].selects(id))
}

/// What a Job would look like if built now (for staleness), from the Job's own stage.
fn expected(seen: &SweptJob<'_>, package_name: &str) -> Option<Job> {
    let nw = seen.nodewright;
    let stage = seen.facts.stage?;
    let package = nw.spec.packages().get(package_name)?;
    if seen.facts.interrupt {
        // The interrupt object is not compared (§8.14); any placeholder serves.
        let interrupt = package.interrupt.clone().unwrap_or(Interrupt {
            kind: InterruptType::Noop,
            services: Vec::new(),
        });
        Some(jobs::build_interrupt_job(
            nw,
            seen.settings,
            InterruptJobInput {
                package_name,
                package,
                stage,
                interrupt: &interrupt,
                node: seen.node,
                node_order: 0,
            },
        ))
    } else {
        Some(jobs::build_stage_job(
            nw,
            seen.settings,
            StageJobInput {
                package_name,
                package,
                stage,
                node: seen.node,
                node_order: 0,
            },
        ))
    }
}

fn delete(ctx: &mut PassCtx<'_>, job: &Job, reason: &str, invalidate: bool) {
    let name = jobs::job_name(job).to_string();
    let mut marked = None;
    if invalidate && let Some(mut pkg) = ctx.package_annotation(job).map(Cow::into_owned) {
        pkg.invalid = true;
        marked = Some(ctx.emit(Action::AnnotateJob {
            name: name.clone(),
            uid: job.metadata.uid.clone(),
            annotations: BTreeMap::from([(
                keys::JOB_ANNOTATION_PACKAGE.to_string(),
                pkg.to_json(),
            )]),
            ttl_seconds_after_finished: None,
        }));
    }
    // A Job that completes while it is being deleted must read invalid, or its completion
    // would be recorded (engine/write_order.rs).
    ctx.emit_after(
        Action::DeleteJob {
            name,
            uid: job.metadata.uid.clone(),
            reason: reason.to_string(),
        },
        marked.map(After::Emitted),
    );
}

/// The Jobs a sweep compares against, by stage and kind (interrupt or not), then package.
/// [`jobs::job_matches`] compares nothing that depends on the node (names, node selector and
/// volumes differ per node; labels, images and env do not), so one build serves every node
/// instead of one per unfinished Job. The package name is the inner key, so a look-up
/// borrows it and only a build copies it.
type ExpectedJobs = HashMap<(Stage, bool), HashMap<String, Option<ExpectedJob>>>;

/// Why an unfinished Job no longer matches (§8.14 rule 1), if it does not.
fn validation_failure(seen: &SweptJob<'_>, built: &mut ExpectedJobs) -> Option<&'static str> {
    let pkg = seen.package?;
    let stage = seen.facts.stage?;
    let spec = seen.nodewright.spec.packages().get(&pkg.name);
    let uninstall_exempt =
        stage == Stage::Uninstall && spec.is_none_or(|p| p.version != pkg.version);
    if spec.is_none_or(|p| p.version != pkg.version) && !uninstall_exempt {
        return Some("no spec package matches the Job");
    }
    let Some(entry) = seen.state.get(&pkg.name, &pkg.version) else {
        return Some("the node has no entry for the package");
    };
    if entry.stage != Some(stage) {
        return Some("the entry's stage differs from the Job's stage");
    }
    if uninstall_exempt {
        return None;
    }
    let of_kind = built.entry((stage, seen.facts.interrupt)).or_default();
    if !of_kind.contains_key(pkg.name.as_str()) {
        let expected = expected(seen, &pkg.name).map(|job| seen.comparisons.expected_job(&job));
        of_kind.insert(pkg.name.clone(), expected);
    }
    if let Some(Some(expected)) = of_kind.get(pkg.name.as_str())
        && !seen.comparisons.matches(seen.job, expected)
    {
        return Some("the Job no longer matches the package spec");
    }
    None
}

/// Whether a processed finished Job must go so its stage can run again (§8.14 rule 2).
fn rerun_due(seen: &SweptJob<'_>) -> bool {
    let (Some(pkg), Some(stage)) = (seen.package, seen.facts.stage) else {
        return false;
    };
    let Some(entry) = seen.state.get(&pkg.name, &pkg.version) else {
        return true;
    };
    let Some(entry_stage) = entry.stage else {
        return true;
    };
    if seen.facts.failed && entry_stage == stage && entry.state == Some(State::Erroring) {
        // Parked; a package edit makes it stale (§16.3).
        return (seen.nodewright.spec.packages().get(&pkg.name))
            .is_some_and(|p| jobs::package_edited(seen.job, p, seen.settings));
    }
    if entry_stage.order() < stage.order() {
        return true;
    }
    entry_stage == stage && entry.state != Some(State::Complete)
}

/// Preamble step 5a: invalidate stale unfinished Jobs, clear rerun-eligible processed ones,
/// and sweep Jobs of nodes no longer selected (§8.14 rules 1, 2, 4).
pub fn sweep(ctx: &mut PassCtx<'_>, nw: usize) {
    let all = nw_jobs(ctx, nw);
    let mut built = ExpectedJobs::new();
    for job in all {
        let facts = ctx.job_facts(job);
        if ctx.job_invalid(job) {
            // An invalid Job was marked for foreground deletion (§4.7); when that delete did
            // not land (an API error between the two writes), it is issued again. Left alone it
            // would shadow its stage forever: handlers skip invalid Jobs and no rule deletes them.
            if job.metadata.deletion_timestamp.is_none() {
                delete(
                    ctx,
                    job,
                    "the Job was invalidated and its deletion did not land",
                    false,
                );
            }
            continue;
        }
        let Some(node) = node_of(ctx, nw, &facts) else {
            delete(
                ctx,
                job,
                "the Job's node no longer exists or is no longer selected",
                false,
            );
            continue;
        };
        if ctx.node(node).malformed(ctx.nws[nw].state_key()) {
            continue;
        }
        if let Some(removal) = ctx.sweep_verdict(nw, node, job, &mut built, judge) {
            delete(ctx, job, removal.reason, removal.invalidate);
        }
    }
}

/// Everything the sweep's judgement of a Job of a selected node reads (§8.14 rules 1 and 2),
/// and nothing else: the Job, its node's name and parsed state, the NodeWright and the
/// settings. Its verdict is remembered under exactly these (see
/// [`PassCtx::sweep_verdict`]).
pub struct SweptJob<'p> {
    /// The Job.
    pub job: &'p Job,
    /// Its label and status facts.
    pub facts: JobFacts<'p>,
    /// Its parsed `package` annotation.
    pub package: Option<&'p PackageAnnotation>,
    /// The node it runs on.
    pub node: &'p str,
    /// That node's state for the NodeWright.
    pub state: &'p NodeState,
    /// The NodeWright.
    pub nodewright: &'p NodeWright,
    /// The pass's settings.
    pub settings: &'p Settings,
    /// Comparisons with the Jobs that would be built now, remembered per Job version and
    /// target.
    pub comparisons: &'p JobComparisons<'p>,
}

/// Why the sweep deletes a Job of a selected node, and whether it first marks it invalid.
pub struct JobRemoval {
    /// The reason the deletion gives.
    pub reason: &'static str,
    /// A stale unfinished Job is marked invalid first (§8.14 rule 1).
    pub invalidate: bool,
}

/// §8.14 rules 1 and 2 for a Job of a selected node: a stale unfinished Job is invalidated,
/// a processed one whose stage must run again is deleted, any other is left alone.
fn judge(seen: &SweptJob<'_>, built: &mut ExpectedJobs) -> Option<JobRemoval> {
    if seen.facts.unfinished() {
        validation_failure(seen, built).map(|reason| JobRemoval {
            reason,
            invalidate: true,
        })
    } else if seen.facts.processed && rerun_due(seen) {
        Some(JobRemoval {
            reason: "node state no longer records the Job's stage as done",
            invalidate: false,
        })
    } else {
        None
    }
}

fn deleted_this_pass(ctx: &PassCtx<'_>, job: &Job) -> bool {
    ctx.job_deleted(jobs::job_name(job))
}

/// Paused NodeWright (§8.15): suspend its unfinished, valid, not yet suspended Jobs.
pub fn suspend_jobs(ctx: &mut PassCtx<'_>, nw: usize) {
    for job in nw_jobs(ctx, nw) {
        if jobs::is_unfinished(job) && !ctx.job_invalid(job) && !jobs::is_suspended(job) {
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
        // Suspension first: few Jobs are suspended, and it is the cheaper question.
        if jobs::is_suspended(job)
            && jobs::is_unfinished(job)
            && !ctx.job_invalid(job)
            && !deleted_this_pass(ctx, job)
        {
            ctx.emit(Action::SuspendJob {
                name: jobs::job_name(job).to_string(),
                suspend: false,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::StateCache;
    use super::super::context::PassCtx;
    use super::super::incremental::job_table::SweptVerdict;
    use super::super::jobs::{StageJobInput, build_stage_job};
    use super::super::testkit::{node, nw, package, settings, world};
    use super::*;
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
    use std::sync::Arc;

    fn job(obj: &NodeWright, pkg: &str, stage: Stage, node: &str) -> Job {
        let package = obj.spec.packages()[pkg].clone();
        build_stage_job(
            obj,
            &settings(),
            StageJobInput {
                package_name: pkg,
                package: &package,
                stage,
                node,
                node_order: 0,
            },
        )
    }

    fn finish(mut j: Job, condition: &str, processed: bool) -> Job {
        j.status = Some(JobStatus {
            conditions: Some(vec![JobCondition {
                type_: condition.into(),
                status: "True".into(),
                ..JobCondition::default()
            }]),
            ..JobStatus::default()
        });
        if processed {
            j.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(keys::JOB_ANNOTATION_STATE_RECORDED.into(), "true".into());
        }
        j
    }

    fn deleted(ctx: &PassCtx<'_>) -> Vec<String> {
        ctx.emitted()
            .iter()
            .filter_map(|a| match a {
                Action::DeleteJob { name, .. } => Some(name.clone()),
                _ => None,
            })
            .collect()
    }

    fn sweep_of(snap: &crate::snapshot::Snapshot) -> Vec<String> {
        let s = settings();
        let mut ctx = PassCtx::new(snap, &s);
        sweep(&mut ctx, 0);
        deleted(&ctx)
    }

    #[test]
    fn unfinished_jobs_are_invalidated_when_they_no_longer_match() {
        let obj = nw("nw").package("tuning", "1.0.0").build();
        let running = job(&obj, "tuning", Stage::Apply, "n1");
        let name = running.metadata.name.clone().unwrap();
        // Matching entry and spec: kept.
        let snap = world()
            .node(node("n1").state(
                "nw",
                &[("tuning", "1.0.0", Stage::Apply, State::InProgress)],
            ))
            .nw(nw("nw").package("tuning", "1.0.0"))
            .job(running.clone())
            .build();
        assert!(sweep_of(&snap).is_empty());
        // The entry moved to another stage: stale.
        let snap = world()
            .node(node("n1").state(
                "nw",
                &[("tuning", "1.0.0", Stage::Uninstall, State::InProgress)],
            ))
            .nw(nw("nw").package("tuning", "1.0.0"))
            .job(running.clone())
            .build();
        assert_eq!(sweep_of(&snap), std::slice::from_ref(&name));
        // The package image changed: stale (§8.14 staleness).
        let mut edited = package("tuning", "1.0.0");
        edited.image = "example/other".into();
        let snap = world()
            .node(node("n1").state(
                "nw",
                &[("tuning", "1.0.0", Stage::Apply, State::InProgress)],
            ))
            .nw(nw("nw").with_package("tuning", edited))
            .job(running.clone())
            .build();
        assert_eq!(sweep_of(&snap), std::slice::from_ref(&name));
        // The node left the selection: orphan (rule 4), whatever the status.
        let snap = world()
            .node(node("n1").label("pool", "cpu"))
            .nw(nw("nw").package("tuning", "1.0.0").selects("pool", "gpu"))
            .job(finish(running, "Complete", false))
            .build();
        assert_eq!(sweep_of(&snap), [name]);
    }

    #[test]
    fn remembered_comparisons_follow_package_edits_and_job_writes() {
        // With a cache, a comparison is remembered per Job version (uid, resourceVersion) and
        // expected Job: an edited package or a rewritten Job is compared afresh.
        let entry = [("tuning", "1.0.0", Stage::Apply, State::InProgress)];
        let snapshot = |pkg: nodewright_schema::Package, job: &Job| {
            world()
                .node(node("n1").state("nw", &entry))
                .nw(nw("nw").with_package("tuning", pkg))
                .job(job.clone())
                .build()
        };
        let versioned = |pkg: nodewright_schema::Package, rv: &str| {
            let mut j = job(
                &nw("nw").with_package("tuning", pkg).build(),
                "tuning",
                Stage::Apply,
                "n1",
            );
            j.metadata.uid = Some("uid-1".into());
            j.metadata.resource_version = Some(rv.into());
            j
        };
        let s = settings();
        let mut cache = StateCache::new();
        let mut warm = |snap: &crate::snapshot::Snapshot| {
            let mut ctx = PassCtx::new_cached(snap, &s, Some(&mut cache));
            ctx.fill_cache(&mut cache);
            sweep(&mut ctx, 0);
            let gone = deleted(&ctx);
            let _ = ctx.into_actions(Vec::new(), Some(&mut cache));
            gone
        };
        let original = package("tuning", "1.0.0");
        let mut edited = original.clone();
        edited.image = "example/other".into();
        let running = versioned(original.clone(), "1");
        let name = running.metadata.name.clone().unwrap();
        assert!(warm(&snapshot(original.clone(), &running)).is_empty());
        assert!(warm(&snapshot(original.clone(), &running)).is_empty());
        assert_eq!(
            warm(&snapshot(edited.clone(), &running)),
            std::slice::from_ref(&name)
        );
        assert!(warm(&snapshot(original.clone(), &running)).is_empty());
        // The Job rewritten for the edited package, under a new resourceVersion.
        let rewritten = versioned(edited.clone(), "2");
        assert!(warm(&snapshot(edited.clone(), &rewritten)).is_empty());
        assert_eq!(
            warm(&snapshot(original.clone(), &rewritten)),
            std::slice::from_ref(&name)
        );
        // The memo trusts the version: a Job changed without moving its resourceVersion (which
        // the API server never does) is answered as remembered; a cold pass compares it.
        assert!(warm(&snapshot(original.clone(), &running)).is_empty());
        let edited_in_place = versioned(edited, "1");
        assert!(warm(&snapshot(original.clone(), &edited_in_place)).is_empty());
        assert_eq!(sweep_of(&snapshot(original, &edited_in_place)), [name]);
    }

    #[test]
    fn a_job_left_alone_is_judged_again_once_what_it_was_judged_from_changes() {
        let entry = [("tuning", "1.0.0", Stage::Apply, State::InProgress)];
        let mut other = package("tuning", "1.0.0");
        other.image = "example/other".into();
        // The Job as built for the current package, and as built for another image (stale),
        // both under one uid and the given resourceVersion.
        let built = |pkg: nodewright_schema::Package, rv: &str| {
            let obj = nw("nw").with_package("tuning", pkg).build();
            let mut j = job(&obj, "tuning", Stage::Apply, "n1");
            j.metadata.uid = Some("uid-1".into());
            j.metadata.resource_version = Some(rv.into());
            j
        };
        let current = |rv: &str| built(package("tuning", "1.0.0"), rv);
        let stale = |rv: &str| built(other.clone(), rv);
        let name = current("1").metadata.name.clone().unwrap();
        let mut snap = world()
            .node(node("n1").state("nw", &entry))
            .nw(nw("nw").package("tuning", "1.0.0"))
            .job(current("1"))
            .build();
        let s = settings();
        let mut cache = StateCache::new();
        let warm = |snap: &crate::snapshot::Snapshot, cache: &mut StateCache| {
            let mut ctx = PassCtx::new_cached(snap, &s, Some(&mut *cache));
            ctx.fill_cache(cache);
            sweep(&mut ctx, 0);
            let gone = deleted(&ctx);
            ctx.carry_into(cache);
            let _ = ctx.into_actions(Vec::new(), Some(cache));
            gone
        };
        assert!(warm(&snap, &mut cache).is_empty());
        assert!(warm(&snap, &mut cache).is_empty());
        // A stale Job is deleted; a verdict that says it was left alone under exactly these
        // inputs is believed (so the verdict is what the pass reads), until the Job moves on.
        snap.jobs[0] = std::sync::Arc::new(stale("2"));
        assert_eq!(warm(&snap, &mut cache), std::slice::from_ref(&name));
        let forged_under = |cache: &mut StateCache, snap: &crate::snapshot::Snapshot, under| {
            let inputs = cache.completion_inputs(&snap.nodewrights[0]);
            let node = cache.node("n1").and_then(|c| c.memo_for(&snap.nodes[0]));
            let verdict = SweptVerdict {
                nodewright_uid: snap.nodewrights[0].metadata.uid.as_deref().map(Box::from),
                inputs,
                node: node.expect("n1's memo"),
            };
            cache.jobs_mut().forge_swept(&under, &verdict);
        };
        let forged = |cache: &mut StateCache, snap: &crate::snapshot::Snapshot| {
            forged_under(cache, snap, settings())
        };
        // Judged under other settings: judged afresh.
        let mut elsewhere = settings();
        elsewhere.namespace = "elsewhere".into();
        forged_under(&mut cache, &snap, elsewhere);
        assert_eq!(warm(&snap, &mut cache), std::slice::from_ref(&name));
        forged(&mut cache, &snap);
        let mut believing = PassCtx::new_cached(&snap, &s, Some(&mut cache));
        believing.fill_cache(&mut cache);
        sweep(&mut believing, 0);
        assert!(
            deleted(&believing).is_empty(),
            "the carried verdict was not read"
        );
        let _ = believing.into_actions(Vec::new(), Some(&mut cache));
        forged(&mut cache, &snap);
        snap.jobs[0] = std::sync::Arc::new(stale("3"));
        assert_eq!(warm(&snap, &mut cache), std::slice::from_ref(&name));
        // A Job on a changed node (another node object) is judged afresh too.
        snap.jobs[0] = std::sync::Arc::new(current("4"));
        assert!(warm(&snap, &mut cache).is_empty());
        let moved_on = [("tuning", "1.0.0", Stage::Config, State::InProgress)];
        snap.nodes[0] = std::sync::Arc::new(node("n1").state("nw", &moved_on).build());
        assert_eq!(warm(&snap, &mut cache), std::slice::from_ref(&name));
        // So is a Job whose package was edited in the NodeWright's spec.
        snap.nodes[0] = std::sync::Arc::new(node("n1").state("nw", &entry).build());
        snap.jobs[0] = std::sync::Arc::new(current("5"));
        assert!(warm(&snap, &mut cache).is_empty());
        assert!(warm(&snap, &mut cache).is_empty());
        let package = (std::sync::Arc::make_mut(&mut snap.nodewrights[0])
            .spec
            .packages
            .as_mut())
        .and_then(|p| p.get_mut("tuning"));
        package.expect("package tuning").image = "example/other".into();
        assert_eq!(warm(&snap, &mut cache), [name]);
    }

    #[test]
    fn each_unfinished_job_is_judged_on_its_own_when_many_share_a_stage() {
        // One expected Job serves every node of a (package, stage): a matching Job on one node
        // must not vouch for a stale one on another, in either order.
        let current = nw("nw").package("tuning", "1.0.0").build();
        let mut edited = package("tuning", "1.0.0");
        edited.image = "example/old".into();
        let old = nw("nw").with_package("tuning", edited).build();
        let entry = [("tuning", "1.0.0", Stage::Apply, State::InProgress)];
        for (first, second, stale_node) in [(&current, &old, "n2"), (&old, &current, "n1")] {
            let snap = world()
                .node(node("n1").state("nw", &entry))
                .node(node("n2").state("nw", &entry))
                .nw(nw("nw").package("tuning", "1.0.0"))
                .job(job(first, "tuning", Stage::Apply, "n1"))
                .job(job(second, "tuning", Stage::Apply, "n2"))
                .build();
            let stale = job(&current, "tuning", Stage::Apply, stale_node);
            assert_eq!(sweep_of(&snap), [stale.metadata.name.unwrap()]);
        }
    }

    #[test]
    fn processed_jobs_go_only_when_their_stage_must_run_again() {
        let obj = nw("nw").package("tuning", "1.0.0").build();
        let done = finish(job(&obj, "tuning", Stage::Apply, "n1"), "Complete", true);
        let name = done.metadata.name.clone().unwrap();
        let at = |stage, state| {
            world()
                .node(node("n1").state("nw", &[("tuning", "1.0.0", stage, state)]))
                .nw(nw("nw").package("tuning", "1.0.0"))
                .job(done.clone())
                .build()
        };
        assert!(sweep_of(&at(Stage::Config, State::InProgress)).is_empty());
        assert!(sweep_of(&at(Stage::Apply, State::Complete)).is_empty());
        assert_eq!(
            sweep_of(&at(Stage::Apply, State::InProgress)),
            std::slice::from_ref(&name)
        );
        assert_eq!(
            sweep_of(&at(Stage::Uninstall, State::InProgress)),
            std::slice::from_ref(&name)
        );
        // Unprocessed finished Jobs are never deleted here.
        let unprocessed = finish(job(&obj, "tuning", Stage::Apply, "n1"), "Complete", false);
        let snap = world()
            .node(node("n1").state(
                "nw",
                &[("tuning", "1.0.0", Stage::Apply, State::InProgress)],
            ))
            .nw(nw("nw").package("tuning", "1.0.0"))
            .job(unprocessed)
            .build();
        assert!(sweep_of(&snap).is_empty());
    }

    #[test]
    fn an_invalidated_job_whose_deletion_failed_is_deleted_again() {
        // Found under API faults: the invalidation landed, the delete did not, and the Job then
        // finished; nothing else would ever remove it and its stage would never run again.
        let obj = nw("nw").package("tuning", "1.0.0").build();
        let mut stale = finish(job(&obj, "tuning", Stage::Config, "n1"), "Complete", false);
        let mut pkg = jobs::read_package_annotation(&stale).unwrap();
        pkg.invalid = true;
        stale
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(keys::JOB_ANNOTATION_PACKAGE.into(), pkg.to_json());
        let name = stale.metadata.name.clone().unwrap();
        let at = |j: Job| {
            world()
                .node(node("n1").state("nw", &[("tuning", "1.0.0", Stage::Apply, State::Complete)]))
                .nw(nw("nw").package("tuning", "1.0.0"))
                .job(j)
                .build()
        };
        assert_eq!(sweep_of(&at(stale.clone())), [name]);
        // Already being deleted (foreground, pods still terminating): nothing more to do.
        stale.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
        assert!(sweep_of(&at(stale)).is_empty());
    }

    #[test]
    fn a_parked_job_stays_until_the_package_is_edited() {
        let obj = nw("nw").package("tuning", "1.0.0").build();
        let parked = finish(job(&obj, "tuning", Stage::Apply, "n1"), "Failed", true);
        let name = parked.metadata.name.clone().unwrap();
        let snap = world()
            .node(node("n1").state("nw", &[("tuning", "1.0.0", Stage::Apply, State::Erroring)]))
            .nw(nw("nw").package("tuning", "1.0.0"))
            .job(parked.clone())
            .build();
        assert!(sweep_of(&snap).is_empty());
        let mut edited = package("tuning", "1.0.0");
        edited.env = Some(vec![k8s_openapi::api::core::v1::EnvVar {
            name: "X".into(),
            value: Some("1".into()),
            value_from: None,
        }]);
        let snap = world()
            .node(node("n1").state("nw", &[("tuning", "1.0.0", Stage::Apply, State::Erroring)]))
            .nw(nw("nw").with_package("tuning", edited))
            .job(parked)
            .build();
        assert_eq!(sweep_of(&snap), [name]);
    }

    #[test]
    fn pause_suspends_unfinished_jobs_and_resume_clears_it() {
        let obj = nw("nw").package("tuning", "1.0.0").build();
        let running = job(&obj, "tuning", Stage::Apply, "n1");
        let snap = world()
            .node(node("n1").state(
                "nw",
                &[("tuning", "1.0.0", Stage::Apply, State::InProgress)],
            ))
            .nw(nw("nw").package("tuning", "1.0.0").paused())
            .job(running.clone())
            .build();
        let s = settings();
        let mut ctx = PassCtx::new(&snap, &s);
        suspend_jobs(&mut ctx, 0);
        resume_jobs(&mut ctx, 0);
        assert_eq!(
            ctx.emitted(),
            &[Action::SuspendJob {
                name: running.metadata.name.clone().unwrap(),
                suspend: true
            }]
        );
        let mut suspended = running;
        Arc::make_mut(suspended.spec.as_mut().unwrap()).suspend = Some(true);
        let snap = world()
            .node(node("n1").state(
                "nw",
                &[("tuning", "1.0.0", Stage::Apply, State::InProgress)],
            ))
            .nw(nw("nw").package("tuning", "1.0.0").paused().disabled())
            .job(suspended.clone())
            .build();
        let mut ctx = PassCtx::new(&snap, &s);
        resume_jobs(&mut ctx, 0);
        assert!(
            ctx.emitted().is_empty(),
            "disable keeps suspended Jobs suspended"
        );
        let snap = world()
            .node(node("n1").state(
                "nw",
                &[("tuning", "1.0.0", Stage::Apply, State::InProgress)],
            ))
            .nw(nw("nw").package("tuning", "1.0.0"))
            .job(suspended.clone())
            .build();
        let mut ctx = PassCtx::new(&snap, &s);
        resume_jobs(&mut ctx, 0);
        assert_eq!(ctx.emitted().len(), 1);
    }
}
