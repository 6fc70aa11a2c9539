//! The Job handler (spec/operator.md §8.8–§8.13, §8.16) and the Pod-evidence handler
//! (§8.10), run once at the start of every pass over the snapshot's Jobs and pods.
//!
//! Both write node-state entries through the pass's working state, so their writes are
//! entry deltas merged onto the node like every other (§5.15). Completion is recorded
//! exactly once: the state write comes first, the `state-recorded` marker after it, and a
//! re-served completion finds its postcondition already true (§8.8 step 2).

use std::borrow::Cow;
use std::collections::BTreeMap;

use crate::job::Job;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use nodewright_schema::node_state::entry_key;
use nodewright_schema::{PackageStatus, Stage, State, Status, keys};

use super::complete::{self, AppliedConfig};
use super::context::PassCtx;
use super::jobs::{self, PackageAnnotation};
use super::write_order::After;
use crate::plan::{Action, EventObject, EventType};
use crate::settings::constants::FAILURE_TARGET_GRACE;

/// Class of a Failed pod (§8.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureClass {
    /// Evicted, preempted, taint-killed, PodGC'd: spends nothing, writes nothing.
    Disruption,
    /// Kubelet admission rejection: spends an attempt, not the package's failure.
    Rejection,
    /// A step container failed or the attempt ran past its deadline.
    Genuine,
    /// Not failed (yet).
    NotFailed,
}

fn pod_condition_true(pod: &Pod, kind: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == kind && c.status == "True"))
}

fn all_statuses(pod: &Pod) -> impl Iterator<Item = &ContainerStatus> {
    let status = pod.status.as_ref();
    status
        .and_then(|s| s.init_container_statuses.as_ref())
        .into_iter()
        .flatten()
        .chain(
            status
                .and_then(|s| s.container_statuses.as_ref())
                .into_iter()
                .flatten(),
        )
}

/// A container terminated with a real non-zero verdict (incl. `OOMKilled`, not
/// `ContainerStatusUnknown`).
fn real_failure(c: &ContainerStatus) -> bool {
    let terminated = c
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .or_else(|| c.last_state.as_ref().and_then(|s| s.terminated.as_ref()));
    terminated
        .is_some_and(|t| t.exit_code != 0 && t.reason.as_deref() != Some("ContainerStatusUnknown"))
}

fn pod_reason(pod: &Pod) -> Option<&str> {
    pod.status.as_ref().and_then(|s| s.reason.as_deref())
}

/// Classifies a pod of a stage Job (§8.7).
pub fn classify_failure(pod: &Pod) -> FailureClass {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if phase != Some("Failed") {
        return FailureClass::NotFailed;
    }
    if pod_condition_true(pod, "DisruptionTarget") {
        return FailureClass::Disruption;
    }
    if pod_reason(pod) == Some("DeadlineExceeded") || all_statuses(pod).any(real_failure) {
        return FailureClass::Genuine;
    }
    FailureClass::Rejection
}

fn node_of(ctx: &PassCtx<'_>, job: &Job) -> Option<usize> {
    ctx.node_of_job_label(jobs::label(job, keys::JOB_LABEL_NODE)?)
}

fn ttl_seconds(d: std::time::Duration) -> i32 {
    i32::try_from(d.as_secs()).unwrap_or(i32::MAX)
}

/// The `state-recorded` marker (§8.8 step 4), sent only once the node's write of this pass
/// took effect (engine/write_order.rs): a marked Job is never served again, so its outcome
/// must already be on the node.
fn mark_processed(ctx: &mut PassCtx<'_>, job: &Job, succeeded: bool, node: Option<usize>) {
    let ttl = if succeeded {
        ctx.settings.job_ttl_succeeded()
    } else {
        ctx.settings.job_ttl_failed()
    };
    let after = node.map(|n| After::Node(ctx.node(n).name().to_string()));
    ctx.emit_after(
        Action::AnnotateJob {
            name: jobs::job_name(job).to_string(),
            uid: job.metadata.uid.clone(),
            annotations: BTreeMap::from([(
                keys::JOB_ANNOTATION_STATE_RECORDED.to_string(),
                "true".to_string(),
            )]),
            ttl_seconds_after_finished: Some(ttl_seconds(ttl)),
        },
        after,
    );
}

/// Runs the Job handler and the Pod-evidence handler over the snapshot (once per pass).
pub fn run(ctx: &mut PassCtx<'_>) {
    let snap = ctx.snap;
    for job in snap.jobs.iter().map(|j| &**j) {
        let facts = ctx.job_facts(job);
        let Some(nw_name) = facts.nodewright else {
            continue;
        };
        let Some(nw) = ctx.nw_index(nw_name) else {
            continue;
        };
        if ctx.job_invalid(job) {
            continue;
        }
        if !facts.processed {
            if facts.complete {
                complete_job(ctx, nw, job);
                continue;
            }
            if facts.failed {
                fail_job(ctx, nw, job);
                continue;
            }
        }
        if facts.unfinished() {
            if !facts.interrupt {
                prune_archives(ctx, job, facts.node_label);
            }
            // Both act only at FailureTarget (§8.9); most unfinished Jobs are running.
            if facts.failure_target {
                failure_target(ctx, nw, job);
                last_logs(ctx, job);
            }
            if facts.interrupt {
                interrupt_budget(ctx, nw, job);
            }
        }
    }
    pod_evidence(ctx);
}

/// §8.8: record a completed stage exactly once.
fn complete_job(ctx: &mut PassCtx<'_>, nw: usize, job: &Job) {
    let Some(node) = node_of(ctx, job) else {
        mark_processed(ctx, job, true, None);
        return;
    };
    let Some(pkg) = ctx.package_annotation(job).map(Cow::into_owned) else {
        mark_processed(ctx, job, true, Some(node));
        return;
    };
    let Some(stage) = jobs::job_stage(job) else {
        mark_processed(ctx, job, true, Some(node));
        return;
    };
    let nw_name = ctx.nws[nw].name.to_string();
    let state_key = ctx.nws[nw].state_key();
    let node_name = ctx.node(node).name().to_string();
    let nw_obj = ctx.nws[nw].nw;
    let key = entry_key(&pkg.name, &pkg.version);
    let interrupt_container = jobs::is_interrupt_job(job);
    // Only the entries this completion may write are copied out of the node state: a copy of
    // the whole state per completed Job made a node with P packages cost P² per stage.
    let Ok(state) = ctx.node(node).state(state_key) else {
        // A malformed node state cannot take the write; the next pass retries (§4.2).
        return;
    };
    let entry = state.0.get(&key).cloned();
    let skipped: Vec<PackageStatus> = if interrupt_container {
        nw_obj
            .spec
            .packages()
            .iter()
            .filter_map(|(n, p)| state.get(n, &p.version))
            .filter(|e| e.is(Stage::Interrupt, State::Skipped))
            .cloned()
            .collect()
    } else {
        Vec::new()
    };
    let others: Vec<String> = if !interrupt_container && stage == Stage::Upgrade {
        state
            .entries_of(&pkg.name)
            .filter(|e| e.version != pkg.version)
            .map(|e| entry_key(&e.name, &e.version))
            .collect()
    } else {
        Vec::new()
    };
    let mut wrote = false;

    if interrupt_container {
        // §8.8 step 2: the owner's entry at the interrupt stage complete or later in the
        // §8.14 stage order (a cancelled uninstall moved on to apply), or an uninstall's
        // entry gone.
        let owner_done = match &entry {
            None => stage == Stage::UninstallInterrupt,
            Some(e) => {
                (e.stage == Some(stage) && e.state == Some(State::Complete))
                    || e.stage.is_some_and(|s| s.order() > stage.order())
            }
        };
        if !(owner_done && skipped.is_empty()) {
            for mut e in skipped {
                e.state = Some(State::Complete);
                ctx.record_and_publish_entry(nw, node, e);
            }
            if let Some(mut e) = entry.clone() {
                e.stage = Some(stage);
                e.state = Some(State::Complete);
                ctx.record_and_publish_entry(nw, node, e);
            }
            applied_event(ctx, &nw_name, &node_name, &pkg, stage);
            wrote = true;
        }
    } else {
        match stage {
            Stage::Upgrade => {
                let done = others.is_empty()
                    && entry.as_ref().is_some_and(|e| {
                        e.state == Some(State::Complete)
                            || e.stage.is_some_and(|s| s.order() > Stage::Upgrade.order())
                    });
                if !done && let Some(mut e) = entry.clone() {
                    for k in others {
                        ctx.remove_and_publish_entry(nw, node, &k);
                    }
                    e.stage = Some(Stage::Upgrade);
                    e.state = Some(State::Complete);
                    e.restarts = jobs::failed_count(job);
                    ctx.record_and_publish_entry(nw, node, e);
                    applied_event(ctx, &nw_name, &node_name, &pkg, stage);
                    wrote = true;
                }
            }
            Stage::Uninstall => {
                let spec = nw_obj.spec.packages().get(&pkg.name);
                let same_version = spec.is_some_and(|p| p.version == pkg.version);
                let with_interrupt = same_version && spec.is_some_and(|p| p.has_spec_interrupt());
                let done = match &entry {
                    None => true,
                    Some(e) => with_interrupt && e.stage == Some(Stage::UninstallInterrupt),
                };
                if !done && let Some(mut e) = entry.clone() {
                    if with_interrupt {
                        e.stage = Some(Stage::UninstallInterrupt);
                        e.state = Some(State::InProgress);
                        e.restarts = 0;
                        ctx.record_and_publish_entry(nw, node, e);
                    } else {
                        ctx.remove_and_publish_entry(nw, node, &key);
                    }
                    applied_event(ctx, &nw_name, &node_name, &pkg, stage);
                    wrote = true;
                }
            }
            _ => {
                let done = entry.as_ref().is_some_and(|e| {
                    (e.stage == Some(stage) && e.state == Some(State::Complete))
                        || e.stage.is_some_and(|s| s.order() > stage.order())
                });
                if !done && let Some(mut e) = entry.clone() {
                    e.stage = Some(stage);
                    e.state = Some(State::Complete);
                    e.restarts = jobs::failed_count(job);
                    ctx.record_and_publish_entry(nw, node, e);
                    applied_event(ctx, &nw_name, &node_name, &pkg, stage);
                    wrote = true;
                }
                if stage == Stage::Config && entry.is_some() {
                    wrote |= record_config(ctx, nw, node, job, &key);
                }
            }
        }
    }
    if wrote {
        ctx.requeue_active();
    }
    mark_processed(ctx, job, true, Some(node));
}

/// §16.3: a completed config stage records the configMap the Job ran with.
/// Returns whether it changed the record.
fn record_config(ctx: &mut PassCtx<'_>, nw: usize, node: usize, job: &Job, key: &str) -> bool {
    let nw_name = ctx.nws[nw].name.to_string();
    let Some(record) = jobs::annotation(job, keys::JOB_ANNOTATION_CONFIG_DIGESTS)
        .and_then(|v| serde_json::from_str::<BTreeMap<String, String>>(v).ok())
    else {
        return false;
    };
    let ann_key = keys::config_applied(&nw_name);
    let mut applied: AppliedConfig = complete::parse_applied(ctx.node(node).annotation(&ann_key));
    if record.is_empty() {
        if applied.remove(key).is_none() {
            return false;
        }
    } else if applied.get(key) == Some(&record) {
        return false;
    } else {
        applied.insert(key.to_string(), record);
    }
    let n = ctx.node_mut(node);
    if applied.is_empty() {
        n.remove_annotation(&ann_key);
    } else {
        n.set_annotation(ann_key, serde_json::to_string(&applied).unwrap_or_default());
    }
    true
}

fn applied_event(
    ctx: &mut PassCtx<'_>,
    nw: &str,
    node: &str,
    pkg: &PackageAnnotation,
    stage: Stage,
) {
    for object in [
        EventObject::Node(node.to_string()),
        EventObject::NodeWright(nw.to_string()),
    ] {
        ctx.event(
            object,
            EventType::Normal,
            keys::event::APPLY,
            format!(
                "[nodewright:{nw}] state complete: {}:{} stage {stage} on node {node}",
                pkg.name, pkg.version
            ),
        );
    }
}

/// Genuine failure evidence of a terminal Job (§8.9).
fn genuine_evidence(ctx: &PassCtx<'_>, job: &Job, entry_erroring: bool) -> bool {
    if jobs::annotation(job, keys::JOB_ANNOTATION_RESTART_LIMIT_EXCEEDED).is_some() {
        return true;
    }
    if jobs::condition_reason(job, "Failed") == Some("DeadlineExceeded") {
        return true;
    }
    let pods = ctx.index.pods_of(job);
    if pods
        .iter()
        .any(|p| classify_failure(p) == FailureClass::Genuine)
    {
        return true;
    }
    // Archives gone, but pod evidence already recorded the failure.
    pods.iter()
        .all(|p| classify_failure(p) == FailureClass::NotFailed)
        && entry_erroring
}

/// §8.9: a stage that gave up is `erroring` and parked; no genuine evidence → re-run.
fn fail_job(ctx: &mut PassCtx<'_>, nw: usize, job: &Job) {
    let Some(node) = node_of(ctx, job) else {
        mark_processed(ctx, job, false, None);
        return;
    };
    let (Some(pkg), Some(stage)) = (
        ctx.package_annotation(job).map(Cow::into_owned),
        jobs::job_stage(job),
    ) else {
        mark_processed(ctx, job, false, Some(node));
        return;
    };
    let state_key = ctx.nws[nw].state_key();
    let Ok(state) = ctx.node(node).state(state_key).cloned() else {
        return;
    };
    let entry = state.get(&pkg.name, &pkg.version).cloned();
    let at_stage = entry.as_ref().filter(|e| e.stage == Some(stage));
    let erroring = at_stage.is_some_and(|e| e.state == Some(State::Erroring));
    let mut wrote = false;
    if genuine_evidence(ctx, job, erroring)
        && let Some(mut e) = at_stage.cloned()
        && e.state != Some(State::Complete)
    {
        let restarts = e.restarts.max(jobs::failed_count(job));
        if e.state != Some(State::Erroring) || e.restarts != restarts {
            e.state = Some(State::Erroring);
            e.restarts = restarts;
            ctx.record_and_publish_entry(nw, node, e);
            wrote = true;
        }
        if ctx.node_status(nw, node) != Status::Erroring {
            ctx.set_node_status(nw, node, Status::Erroring);
            wrote = true;
        }
    }
    if wrote {
        ctx.requeue_active();
    }
    mark_processed(ctx, job, false, Some(node));
}

/// §8.9: a Job stuck at `FailureTarget` past the grace window is erroring evidence (state
/// write only). The first-seen time lives in memory; the controller records it.
fn failure_target(ctx: &mut PassCtx<'_>, nw: usize, job: &Job) {
    if !jobs::has_condition(job, "FailureTarget") {
        return;
    }
    let name = jobs::job_name(job).to_string();
    let seen = ctx.snap.memory.failure_target_seen.get(&name).copied();
    let grace = jiff::SignedDuration::try_from(FAILURE_TARGET_GRACE).unwrap_or_default();
    let Some(seen) = seen else {
        ctx.requeue_after(FAILURE_TARGET_GRACE + std::time::Duration::from_secs(1));
        return;
    };
    let due: Timestamp = seen.checked_add(grace).unwrap_or(seen);
    if ctx.now < due {
        if let Ok(left) = std::time::Duration::try_from(due.duration_since(ctx.now)) {
            ctx.requeue_after(left + std::time::Duration::from_secs(1));
        }
        return;
    }
    write_erroring(ctx, nw, job, None);
}

fn write_erroring(ctx: &mut PassCtx<'_>, nw: usize, job: &Job, restarts: Option<i32>) {
    let Some(node) = node_of(ctx, job) else {
        return;
    };
    let (Some(pkg), Some(stage)) = (
        ctx.package_annotation(job).map(Cow::into_owned),
        jobs::job_stage(job),
    ) else {
        return;
    };
    let state_key = ctx.nws[nw].state_key();
    let Ok(state) = ctx.node(node).state(state_key) else {
        return;
    };
    if let Some(e) = state.get(&pkg.name, &pkg.version).cloned()
        && e.stage == Some(stage)
        && e.state != Some(State::Complete)
    {
        let restarts = restarts.unwrap_or(e.restarts.max(jobs::failed_count(job)));
        if e.state != Some(State::Erroring) || e.restarts != restarts {
            let mut e = e;
            e.state = Some(State::Erroring);
            e.restarts = restarts;
            ctx.record_and_publish_entry(nw, node, e);
        }
    }
}

/// §8.12: while a Job is at `FailureTarget` with no genuine archive and no `last-logs` yet,
/// snapshot its stuck container (the first of the newest attempt that did not complete): a
/// container that ran gets its log tail through [`Action::SnapshotLastLogs`] (the executor
/// does the read; its waiting reason is the fallback); one that never started gets its
/// waiting reason and message written directly.
fn last_logs(ctx: &mut PassCtx<'_>, job: &Job) {
    if !jobs::has_condition(job, "FailureTarget")
        || jobs::annotation(job, keys::JOB_ANNOTATION_LAST_LOGS).is_some()
    {
        return;
    }
    let pods = ctx.index.pods_of(job);
    if pods
        .iter()
        .any(|p| classify_failure(p) == FailureClass::Genuine)
    {
        return;
    }
    let Some(pod) = pods.iter().max_by_key(|p| {
        (
            p.metadata.creation_timestamp.as_ref().map(|t| t.0),
            p.metadata.name.as_deref(),
        )
    }) else {
        return;
    };
    let completed = |c: &ContainerStatus| {
        c.state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .is_some_and(|t| t.exit_code == 0)
    };
    let Some(stuck) = all_statuses(pod).find(|c| !completed(c)) else {
        return;
    };
    let state = stuck.state.as_ref();
    let waiting = state.and_then(|s| s.waiting.as_ref()).map(|w| {
        format!(
            "{}: {}: {}",
            stuck.name,
            w.reason.as_deref().unwrap_or_default(),
            w.message.as_deref().unwrap_or_default()
        )
    });
    let started = stuck.restart_count > 0
        || stuck
            .last_state
            .as_ref()
            .is_some_and(|s| s.terminated.is_some())
        || state.is_some_and(|s| s.running.is_some() || s.terminated.is_some());
    if started {
        ctx.emit(Action::SnapshotLastLogs {
            job: jobs::job_name(job).to_string(),
            uid: job.metadata.uid.clone(),
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            pod: pod.metadata.name.clone().unwrap_or_default(),
            container: stuck.name.clone(),
            fallback: waiting,
        });
        return;
    }
    let Some(text) = waiting else { return };
    ctx.emit(Action::AnnotateJob {
        name: jobs::job_name(job).to_string(),
        uid: job.metadata.uid.clone(),
        annotations: BTreeMap::from([(
            keys::JOB_ANNOTATION_LAST_LOGS.to_string(),
            crate::plan::last_logs_text(text.as_bytes()),
        )]),
        ttl_seconds_after_finished: None,
    });
}

/// §8.11: keep the first and the most recent genuine failures; prune other Failed pods of a
/// stage Job (interrupt Jobs keep theirs).
fn prune_archives(ctx: &mut PassCtx<'_>, job: &Job, node_label: Option<&str>) {
    fn prunable(p: &Pod) -> bool {
        p.metadata.deletion_timestamp.is_none() && classify_failure(p) != FailureClass::NotFailed
    }
    // Most Jobs have no failed pod: nothing to collect, sort or copy.
    if !ctx.any_pod_prunable(job, prunable) {
        return;
    }
    let pods = ctx.index.pods_of(job);
    let mut failed: Vec<&Pod> = pods.iter().copied().filter(|p| prunable(p)).collect();
    failed.sort_by_key(|p| {
        (
            p.metadata.creation_timestamp.as_ref().map(|t| t.0),
            p.metadata.name.clone(),
        )
    });
    let genuine: Vec<&Pod> = failed
        .iter()
        .copied()
        .filter(|p| classify_failure(p) == FailureClass::Genuine)
        .collect();
    let keep: Vec<&str> = [genuine.first(), genuine.last()]
        .into_iter()
        .flatten()
        .filter_map(|p| p.metadata.name.as_deref())
        .collect();
    let node = node_label.unwrap_or_default().to_string();
    for pod in failed {
        let name = pod.metadata.name.clone().unwrap_or_default();
        if keep.contains(&name.as_str()) {
            continue;
        }
        ctx.emit(Action::DeletePod(crate::plan::PodRef {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name,
            node: node.clone(),
            nodewright: None,
            grace_period_seconds: None,
        }));
    }
}

fn interrupt_status(pod: &Pod) -> Option<&ContainerStatus> {
    pod.status
        .as_ref()
        .and_then(|s| s.init_container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == "interrupt"))
}

fn crash_looping(c: &ContainerStatus) -> bool {
    c.state
        .as_ref()
        .and_then(|s| s.waiting.as_ref())
        .is_some_and(|w| w.reason.as_deref() == Some("CrashLoopBackOff"))
        || c.state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .is_some_and(|t| t.exit_code != 0)
}

/// §8.16: a non-reboot interrupt failing again with restarts at `JOB_BACKOFF_LIMIT` is ended.
fn interrupt_budget(ctx: &mut PassCtx<'_>, nw: usize, job: &Job) {
    let Some(interrupt_type) = job
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.init_containers.as_ref())
        .and_then(|cs| cs.first())
        .and_then(|c| c.args.as_ref())
        .and_then(|a| a.get(3))
        .and_then(|b64| {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.decode(b64).ok()
        })
        .and_then(|raw| serde_json::from_slice::<serde_json::Value>(&raw).ok())
        .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_string))
    else {
        return;
    };
    if interrupt_type == "node_restart" {
        return;
    }
    let limit = ctx.settings.job_backoff_limit;
    let over =
        ctx.index.pods_of(job).iter().any(|p| {
            interrupt_status(p).is_some_and(|c| c.restart_count >= limit && crash_looping(c))
        });
    if !over || jobs::annotation(job, keys::JOB_ANNOTATION_RESTART_LIMIT_EXCEEDED).is_some() {
        return;
    }
    let name = jobs::job_name(job).to_string();
    ctx.emit(Action::AnnotateJob {
        name: name.clone(),
        uid: job.metadata.uid.clone(),
        annotations: BTreeMap::from([(
            keys::JOB_ANNOTATION_RESTART_LIMIT_EXCEEDED.to_string(),
            "true".to_string(),
        )]),
        ttl_seconds_after_finished: None,
    });
    ctx.emit(Action::FailJob {
        name,
        reason: keys::reason::RESTART_LIMIT_EXCEEDED.to_string(),
    });
    let nw_name = ctx.nws[nw].name.to_string();
    let node = jobs::label(job, keys::JOB_LABEL_NODE)
        .unwrap_or_default()
        .to_string();
    for object in [
        EventObject::Node(node.clone()),
        EventObject::NodeWright(nw_name.clone()),
    ] {
        ctx.event(
            object,
            EventType::Warning,
            keys::event::INTERRUPT,
            format!(
                "[nodewright:{nw_name}] {}: interrupt on node {node} failed {limit} times",
                keys::reason::RESTART_LIMIT_EXCEEDED
            ),
        );
    }
}

/// The first filters of §8.10, which read the pod alone: `None` when its evidence is quiet
/// (another namespace, no labels, being deleted, not failing, or disrupted), else its labels
/// and, for an interrupt pod, its restart count.
fn quiet_evidence<'p>(
    pod: &'p Pod,
    namespace: &str,
) -> Option<(&'p BTreeMap<String, String>, Option<i32>)> {
    if pod.metadata.namespace.as_deref() != Some(namespace) {
        return None;
    }
    let labels = pod.metadata.labels.as_ref()?;
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    // Whether the pod is failing is checked before its other labels are read: nearly every
    // pod of a pass is not, and every check here only filters.
    let interrupt = labels.get(keys::JOB_LABEL_INTERRUPT).map(String::as_str) == Some("True");
    let (failing, restarts) = if interrupt {
        match interrupt_status(pod) {
            Some(c) if crash_looping(c) => (true, Some(c.restart_count)),
            _ => (false, None),
        }
    } else {
        let deadline = pod_reason(pod) == Some("DeadlineExceeded");
        let step_failed = pod
            .status
            .as_ref()
            .and_then(|s| s.init_container_statuses.as_ref())
            .is_some_and(|cs| cs.iter().any(real_failure));
        (deadline || step_failed, None)
    };
    if !failing || pod_condition_true(pod, "DisruptionTarget") {
        return None;
    }
    Some((labels, restarts))
}

/// §8.10: in-flight `erroring` evidence from stage pods; never creates or regresses an entry
/// and never sets the node Status.
fn pod_evidence(ctx: &mut PassCtx<'_>) {
    let snap = ctx.snap;
    for (at, pod) in snap.pods.iter().enumerate() {
        let Some((labels, restarts)) = ctx.pod_evidence(at, quiet_evidence) else {
            continue;
        };
        let (Some(nw_name), Some(_), Some(stage)) = (
            labels.get(keys::JOB_LABEL_NAME),
            labels.get(keys::JOB_LABEL_PACKAGE),
            labels
                .get(keys::JOB_LABEL_STAGE)
                .and_then(|s| s.parse::<Stage>().ok()),
        ) else {
            continue;
        };
        let Some(nw) = ctx.nw_index(nw_name) else {
            continue;
        };
        let Some(pkg) = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(keys::JOB_ANNOTATION_PACKAGE))
            .and_then(|v| serde_json::from_str::<PackageAnnotation>(v).ok())
        else {
            continue;
        };
        let owner_job = match labels.get(keys::JOB_CONTROLLER_UID_LABEL) {
            Some(uid) => ctx.index.job_by_uid(uid.as_str()),
            None => ctx
                .snap
                .jobs
                .iter()
                .map(|j| &**j)
                .find(|j| j.metadata.uid.is_none()),
        };
        let Some(job) = owner_job else { continue };
        if stage != jobs::job_stage(job).unwrap_or(stage) {
            continue;
        }
        let failed = jobs::failed_count(job).max(1);
        write_erroring(ctx, nw, job, Some(restarts.unwrap_or(failed)));
        let _ = &pkg;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, PodCondition, PodStatus,
    };

    fn failed_pod(reason: Option<&str>, exit: Option<i32>, disruption: bool) -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: Some("Failed".into()),
                reason: reason.map(Into::into),
                conditions: disruption.then(|| {
                    vec![PodCondition {
                        type_: "DisruptionTarget".into(),
                        status: "True".into(),
                        ..PodCondition::default()
                    }]
                }),
                init_container_statuses: exit.map(|code| {
                    vec![ContainerStatus {
                        name: "p-apply".into(),
                        state: Some(ContainerState {
                            terminated: Some(ContainerStateTerminated {
                                exit_code: code,
                                ..ContainerStateTerminated::default()
                            }),
                            ..ContainerState::default()
                        }),
                        ..ContainerStatus::default()
                    }]
                }),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    #[test]
    fn failure_classes_of_section_8_7() {
        assert_eq!(
            classify_failure(&failed_pod(None, Some(1), true)),
            FailureClass::Disruption
        );
        assert_eq!(
            classify_failure(&failed_pod(Some("OutOfcpu"), None, false)),
            FailureClass::Rejection
        );
        assert_eq!(
            classify_failure(&failed_pod(None, Some(137), false)),
            FailureClass::Genuine
        );
        assert_eq!(
            classify_failure(&failed_pod(Some("DeadlineExceeded"), None, false)),
            FailureClass::Genuine
        );
        assert_eq!(classify_failure(&Pod::default()), FailureClass::NotFailed);
    }

    use super::super::context::PassCtx;
    use super::super::jobs::{StageJobInput, build_stage_job};
    use super::super::testkit::{node, nw, settings, world};
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
    use nodewright_schema::NodeWright;

    fn finished(
        nw_obj: &NodeWright,
        pkg: &str,
        stage: Stage,
        condition: &str,
        reason: &str,
    ) -> Job {
        let package = nw_obj.spec.packages()[pkg].clone();
        let mut job = build_stage_job(
            nw_obj,
            &settings(),
            StageJobInput {
                package_name: pkg,
                package: &package,
                stage,
                node: "n1",
                node_order: 0,
            },
        );
        job.metadata.uid = Some(format!("uid-{pkg}-{stage}"));
        job.status = Some(JobStatus {
            failed: Some(if condition == "Failed" { 4 } else { 1 }),
            conditions: Some(vec![JobCondition {
                type_: condition.into(),
                status: "True".into(),
                reason: Some(reason.into()),
                ..JobCondition::default()
            }]),
            ..JobStatus::default()
        });
        job
    }

    fn entry(ctx: &PassCtx<'_>, key: &str) -> Option<(Stage, State, i32)> {
        let id = ctx.node_id("n1").unwrap();
        let nw = ctx.nw_index("nw").unwrap();
        ctx.node(id)
            .state(ctx.nws[nw].state_key())
            .unwrap()
            .0
            .get(key)
            .map(|e| (e.stage.unwrap(), e.state.unwrap(), e.restarts))
    }

    fn marked(ctx: &PassCtx<'_>) -> Vec<Option<i32>> {
        ctx.emitted()
            .iter()
            .filter_map(|a| match a {
                Action::AnnotateJob {
                    annotations,
                    ttl_seconds_after_finished,
                    ..
                } if annotations.contains_key(keys::JOB_ANNOTATION_STATE_RECORDED) => {
                    Some(*ttl_seconds_after_finished)
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn completion_is_recorded_once_and_never_creates_an_entry() {
        let obj = nw("nw").package("tuning", "1.0.0").build();
        let job = finished(&obj, "tuning", Stage::Apply, "Complete", "");
        let snap = apply_world(&job).build();
        let s = settings();
        let mut ctx = PassCtx::new(&snap, &s);
        run(&mut ctx);
        assert_eq!(
            entry(&ctx, "tuning|1.0.0"),
            Some((Stage::Apply, State::Complete, 1))
        );
        // The marker, with the success TTL, is sent only once the node's write took effect.
        assert_eq!(marked(&ctx), [Some(3600)]);
        let writes = ctx.into_actions(Vec::new(), None);
        let at = |f: &dyn Fn(&Action) -> bool| writes.actions.iter().position(f).unwrap();
        let node_write = at(&|a| matches!(a, Action::PatchNode(p) if p.node == "n1"));
        let marker = at(&|a| matches!(a, Action::AnnotateJob { .. }));
        assert!(writes.requires.contains(&crate::plan::Requirement {
            action: marker,
            needs: node_write
        }));

        // Next pass: the state shows the outcome, so the Job is only marked.
        let snap = world()
            .node(node("n1").state("nw", &[("tuning", "1.0.0", Stage::Apply, State::Complete)]))
            .nw(nw("nw").package("tuning", "1.0.0"))
            .job(job.clone())
            .build();
        let mut ctx = PassCtx::new(&snap, &s);
        run(&mut ctx);
        assert_eq!(marked(&ctx), [Some(3600)]);
        let writes = ctx.into_actions(Vec::new(), None);
        assert!(
            !writes
                .actions
                .iter()
                .any(|a| matches!(a, Action::PatchNode(_))),
            "nothing to write on the node"
        );

        // A re-served completion whose outcome already holds only marks the Job.
        let snap = world()
            .node(node("n1").state(
                "nw",
                &[("tuning", "1.0.0", Stage::Config, State::InProgress)],
            ))
            .nw(nw("nw").package("tuning", "1.0.0"))
            .job(job.clone())
            .build();
        let mut ctx = PassCtx::new(&snap, &s);
        run(&mut ctx);
        assert_eq!(
            entry(&ctx, "tuning|1.0.0"),
            Some((Stage::Config, State::InProgress, 0))
        );
        assert_eq!(marked(&ctx).len(), 1);

        // An absent entry is never created.
        let snap = world()
            .node(node("n1").state("nw", &[]))
            .nw(nw("nw").package("tuning", "1.0.0"))
            .job(job)
            .build();
        let mut ctx = PassCtx::new(&snap, &s);
        run(&mut ctx);
        assert_eq!(entry(&ctx, "tuning|1.0.0"), None);
    }

    #[test]
    fn upgrade_completion_removes_the_other_versions() {
        let obj = nw("nw").package("tuning", "2.0.0").build();
        let job = finished(&obj, "tuning", Stage::Upgrade, "Complete", "");
        let snap = world()
            .node(node("n1").state(
                "nw",
                &[
                    ("tuning", "1.0.0", Stage::Config, State::Complete),
                    ("tuning", "2.0.0", Stage::Upgrade, State::InProgress),
                ],
            ))
            .nw(nw("nw").package("tuning", "2.0.0"))
            .job(job)
            .build();
        let s = settings();
        let mut ctx = PassCtx::new(&snap, &s);
        run(&mut ctx);
        assert_eq!(entry(&ctx, "tuning|1.0.0"), None);
        assert_eq!(
            entry(&ctx, "tuning|2.0.0"),
            Some((Stage::Upgrade, State::Complete, 1))
        );
    }

    #[test]
    fn a_failed_job_without_genuine_evidence_writes_nothing() {
        let obj = nw("nw").package("tuning", "1.0.0").build();
        let job = finished(
            &obj,
            "tuning",
            Stage::Apply,
            "Failed",
            "BackoffLimitExceeded",
        );
        let snap = apply_world(&job).build();
        let s = settings();
        let mut ctx = PassCtx::new(&snap, &s);
        run(&mut ctx);
        assert_eq!(
            entry(&ctx, "tuning|1.0.0"),
            Some((Stage::Apply, State::InProgress, 0))
        );
        assert_eq!(marked(&ctx), [Some(86400)]);

        // With a retained genuine archive the stage is parked erroring.
        let mut archive = failed_pod(None, Some(1), false);
        archive.metadata.labels = Some(BTreeMap::from([(
            keys::JOB_CONTROLLER_UID_LABEL.to_string(),
            job.metadata.uid.clone().unwrap(),
        )]));
        let snap = world()
            .node(node("n1").state(
                "nw",
                &[("tuning", "1.0.0", Stage::Apply, State::InProgress)],
            ))
            .nw(nw("nw").package("tuning", "1.0.0"))
            .job(job)
            .pod(archive)
            .build();
        let mut ctx = PassCtx::new(&snap, &s);
        run(&mut ctx);
        assert_eq!(
            entry(&ctx, "tuning|1.0.0"),
            Some((Stage::Apply, State::Erroring, 4))
        );
        let id = ctx.node_id("n1").unwrap();
        assert_eq!(ctx.node_status(0, id), nodewright_schema::Status::Erroring);
    }

    /// The package's interrupt Job on n1 at `stage`, completed.
    fn completed_interrupt(obj: &NodeWright, pkg: &str, stage: Stage) -> Job {
        let package = obj.spec.packages()[pkg].clone();
        let mut job = super::super::jobs::build_interrupt_job(
            obj,
            &settings(),
            super::super::jobs::InterruptJobInput {
                package_name: pkg,
                package: &package,
                stage,
                interrupt: package.interrupt.as_ref().unwrap(),
                node: "n1",
                node_order: 0,
            },
        );
        job.status = Some(JobStatus {
            conditions: Some(vec![JobCondition {
                type_: "Complete".into(),
                status: "True".into(),
                ..JobCondition::default()
            }]),
            ..JobStatus::default()
        });
        job
    }

    #[test]
    fn the_interrupt_completion_promotes_skipped_siblings() {
        let obj = nw("nw")
            .reboot_package("alpha", "1.0.0")
            .reboot_package("beta", "1.0.0")
            .build();
        let job = completed_interrupt(&obj, "alpha", Stage::Interrupt);
        let snap = world()
            .node(node("n1").state(
                "nw",
                &[
                    ("alpha", "1.0.0", Stage::Interrupt, State::InProgress),
                    ("beta", "1.0.0", Stage::Interrupt, State::Skipped),
                ],
            ))
            .nw(nw("nw")
                .reboot_package("alpha", "1.0.0")
                .reboot_package("beta", "1.0.0"))
            .job(job)
            .build();
        let s = settings();
        let mut ctx = PassCtx::new(&snap, &s);
        run(&mut ctx);
        assert_eq!(
            entry(&ctx, "alpha|1.0.0"),
            Some((Stage::Interrupt, State::Complete, 0))
        );
        assert_eq!(
            entry(&ctx, "beta|1.0.0"),
            Some((Stage::Interrupt, State::Complete, 0))
        );
    }

    #[test]
    fn an_uninstall_interrupt_already_behind_the_entry_only_marks_its_job() {
        // The uninstall was cancelled: its interrupt completed, the entry was removed and the
        // re-install started at apply before this completion was served (§6.10, §8.8 step 2).
        let obj = nw("nw").reboot_package("alpha", "1.0.0").build();
        let job = completed_interrupt(&obj, "alpha", Stage::UninstallInterrupt);
        let snap = world()
            .node(node("n1").state("nw", &[("alpha", "1.0.0", Stage::Apply, State::InProgress)]))
            .nw(nw("nw").reboot_package("alpha", "1.0.0"))
            .job(job)
            .build();
        let s = settings();
        let mut ctx = PassCtx::new(&snap, &s);
        run(&mut ctx);
        assert_eq!(
            entry(&ctx, "alpha|1.0.0"),
            Some((Stage::Apply, State::InProgress, 0)),
            "the re-install's entry is not overwritten"
        );
        assert_eq!(marked(&ctx).len(), 1);
    }

    fn child(job: &Job, name: &str, created: i64, pod: Pod) -> Pod {
        let mut pod = pod;
        pod.metadata.name = Some(name.into());
        pod.metadata.namespace = Some("nodewright".into());
        pod.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::from_second(created).unwrap(),
            ));
        let mut labels = job
            .spec
            .as_ref()
            .unwrap()
            .template
            .metadata
            .as_ref()
            .unwrap()
            .labels
            .clone()
            .unwrap();
        labels.insert(
            keys::JOB_CONTROLLER_UID_LABEL.into(),
            job.metadata.uid.clone().unwrap(),
        );
        pod.metadata.labels = Some(labels);
        pod.metadata.annotations = job
            .spec
            .as_ref()
            .unwrap()
            .template
            .metadata
            .as_ref()
            .unwrap()
            .annotations
            .clone();
        pod
    }

    /// A world with `job`, a Job of `tuning`'s apply stage on `n1`, whose entry there is
    /// still in progress.
    fn apply_world(job: &Job) -> crate::engine::testkit::World {
        world()
            .node(node("n1").state(
                "nw",
                &[("tuning", "1.0.0", Stage::Apply, State::InProgress)],
            ))
            .nw(nw("nw").package("tuning", "1.0.0"))
            .job(job.clone())
    }

    fn running_job(obj: &NodeWright) -> Job {
        let mut job = finished(obj, "tuning", Stage::Apply, "Complete", "");
        job.status = Some(JobStatus {
            failed: Some(3),
            ..JobStatus::default()
        });
        job
    }

    #[test]
    fn archives_keep_the_first_and_the_latest_genuine_failure() {
        let obj = nw("nw").package("tuning", "1.0.0").build();
        let job = running_job(&obj);
        let snap = apply_world(&job)
            .pod(child(&job, "a1", 1, failed_pod(None, Some(1), false)))
            .pod(child(&job, "a2", 2, failed_pod(None, Some(1), false)))
            .pod(child(&job, "evicted", 3, failed_pod(None, Some(1), true)))
            .pod(child(&job, "a3", 4, failed_pod(None, Some(1), false)))
            .build();
        let s = settings();
        let mut ctx = PassCtx::new(&snap, &s);
        run(&mut ctx);
        let mut pruned: Vec<String> = ctx
            .emitted()
            .iter()
            .filter_map(|a| match a {
                Action::DeletePod(p) => Some(p.name.clone()),
                _ => None,
            })
            .collect();
        pruned.sort();
        assert_eq!(pruned, ["a2", "evicted"]);
    }

    #[test]
    fn pod_evidence_writes_erroring_only_on_a_genuine_live_failure() {
        let obj = nw("nw").package("tuning", "1.0.0").build();
        let job = running_job(&obj);
        let build = |pod: Pod| apply_world(&job).pod(pod).build();
        let s = settings();
        let snap = build(child(&job, "a1", 1, failed_pod(None, Some(1), false)));
        let mut ctx = PassCtx::new(&snap, &s);
        run(&mut ctx);
        assert_eq!(
            entry(&ctx, "tuning|1.0.0"),
            Some((Stage::Apply, State::Erroring, 3))
        );
        let id = ctx.node_id("n1").unwrap();
        assert_eq!(
            ctx.node_status(0, id),
            nodewright_schema::Status::Unknown,
            "pod evidence never sets the node Status"
        );

        for quiet in [
            failed_pod(None, Some(1), true),
            failed_pod(Some("OutOfcpu"), None, false),
            {
                let mut p = failed_pod(None, Some(1), false);
                p.metadata.deletion_timestamp =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        jiff::Timestamp::UNIX_EPOCH,
                    ));
                p
            },
        ] {
            let snap = build(child(&job, "a1", 1, quiet));
            let mut ctx = PassCtx::new(&snap, &s);
            run(&mut ctx);
            assert_eq!(
                entry(&ctx, "tuning|1.0.0"),
                Some((Stage::Apply, State::InProgress, 0))
            );
        }
    }

    #[test]
    fn a_pod_found_quiet_is_not_read_again_until_its_version_changes() {
        use crate::engine::StateCache;
        let obj = nw("nw").package("tuning", "1.0.0").build();
        let job = running_job(&obj);
        let mut snap = apply_world(&job)
            .pod(child(&job, "a1", 1, failed_pod(None, Some(1), false)))
            .build();
        let s = settings();
        let mut cache = StateCache::new();
        let pass = |snap: &crate::snapshot::Snapshot, cache: &mut StateCache| {
            let mut ctx = PassCtx::new_cached(snap, &s, Some(&mut *cache));
            run(&mut ctx);
            let found = entry(&ctx, "tuning|1.0.0");
            let _ = ctx.into_actions(Vec::new(), Some(cache));
            found
        };
        let erroring = Some((Stage::Apply, State::Erroring, 3));
        assert_eq!(pass(&snap, &mut cache), erroring);
        // A verdict that calls the same failing pod object quiet is believed: it is what the
        // pass read.
        cache.jobs_mut().quiet_every_pod(&s.namespace);
        let untouched = Some((Stage::Apply, State::InProgress, 0));
        assert_eq!(pass(&snap, &mut cache), untouched);
        // So it is for the same object after a pod joined in front of it.
        cache.jobs_mut().quiet_every_pod(&s.namespace);
        let mut other = Pod::default();
        other.metadata.name = Some("a0".into());
        snap.pods.insert(0, std::sync::Arc::new(other));
        assert_eq!(pass(&snap, &mut cache), untouched);
        // Not in another operator namespace.
        cache.jobs_mut().quiet_every_pod("elsewhere");
        assert_eq!(pass(&snap, &mut cache), erroring);
        // Another object of a pod without a version is read again.
        cache.jobs_mut().quiet_every_pod(&s.namespace);
        snap.pods[1] = std::sync::Arc::new((*snap.pods[1]).clone());
        assert_eq!(pass(&snap, &mut cache), erroring);
        // With a uid and resourceVersion, a relist's copy is the same version: believed;
        // another version is read again.
        let meta = &mut std::sync::Arc::make_mut(&mut snap.pods[1]).metadata;
        meta.uid = Some("uid-a1".into());
        meta.resource_version = Some("1".into());
        assert_eq!(pass(&snap, &mut cache), erroring);
        cache.jobs_mut().quiet_every_pod(&s.namespace);
        snap.pods[1] = std::sync::Arc::new((*snap.pods[1]).clone());
        assert_eq!(pass(&snap, &mut cache), untouched);
        cache.jobs_mut().quiet_every_pod(&s.namespace);
        std::sync::Arc::make_mut(&mut snap.pods[1])
            .metadata
            .resource_version = Some("2".into());
        assert_eq!(pass(&snap, &mut cache), erroring);
    }

    /// A running attempt whose containers are `(name, state)`: `ok` (exited 0), `crash`
    /// (CrashLoopBackOff after a failed run), `pull` (ImagePullBackOff, never started).
    fn attempt(containers: &[(&str, &str)]) -> Pod {
        use k8s_openapi::api::core::v1::ContainerStateWaiting;
        let terminated = |code| ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        };
        let waiting = |reason: &str, message: &str| ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.into()),
                message: Some(message.into()),
            }),
            ..ContainerState::default()
        };
        let statuses = containers
            .iter()
            .map(|(name, state)| match *state {
                "ok" => ContainerStatus {
                    name: name.to_string(),
                    state: Some(terminated(0)),
                    ..ContainerStatus::default()
                },
                "crash" => ContainerStatus {
                    name: name.to_string(),
                    restart_count: 3,
                    last_state: Some(terminated(1)),
                    state: Some(waiting("CrashLoopBackOff", "back-off 40s")),
                    ..ContainerStatus::default()
                },
                _ => ContainerStatus {
                    name: name.to_string(),
                    state: Some(waiting("ImagePullBackOff", "registry unreachable")),
                    ..ContainerStatus::default()
                },
            })
            .collect();
        Pod {
            status: Some(PodStatus {
                phase: Some("Pending".into()),
                init_container_statuses: Some(statuses),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    fn at_failure_target(obj: &NodeWright, annotated: bool) -> Job {
        let mut job = running_job(obj);
        job.status.as_mut().unwrap().conditions = Some(vec![JobCondition {
            type_: "FailureTarget".into(),
            status: "True".into(),
            reason: Some("BackoffLimitExceeded".into()),
            ..JobCondition::default()
        }]);
        if annotated {
            job.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(keys::JOB_ANNOTATION_LAST_LOGS.into(), "earlier".into());
        }
        job
    }

    fn last_logs_actions(job: &Job, pods: Vec<Pod>) -> Vec<Action> {
        let mut world = apply_world(job);
        for (i, pod) in pods.into_iter().enumerate() {
            world = world.pod(child(job, &format!("a{i}"), i as i64 + 1, pod));
        }
        let snap = world.build();
        let s = settings();
        let mut ctx = PassCtx::new(&snap, &s);
        last_logs(&mut ctx, job);
        ctx.emitted().to_vec()
    }

    #[test]
    fn last_logs_asks_the_executor_to_tail_the_stuck_container_that_ran() {
        let obj = nw("nw").package("tuning", "1.0.0").build();
        let job = at_failure_target(&obj, false);
        let actions = last_logs_actions(
            &job,
            vec![
                attempt(&[("tuning-init", "ok"), ("tuning-apply", "ok")]),
                attempt(&[("tuning-init", "ok"), ("tuning-apply", "crash")]),
            ],
        );
        assert_eq!(
            actions,
            vec![Action::SnapshotLastLogs {
                job: jobs::job_name(&job).to_string(),
                uid: job.metadata.uid.clone(),
                namespace: "nodewright".into(),
                pod: "a1".into(),
                container: "tuning-apply".into(),
                fallback: Some("tuning-apply: CrashLoopBackOff: back-off 40s".into()),
            }],
            "the newest attempt's first unfinished container, with its waiting reason as fallback"
        );
    }

    #[test]
    fn last_logs_of_a_container_that_never_started_is_its_waiting_reason() {
        let obj = nw("nw").package("tuning", "1.0.0").build();
        let job = at_failure_target(&obj, false);
        let actions = last_logs_actions(
            &job,
            vec![attempt(&[("tuning-init", "ok"), ("tuning-apply", "pull")])],
        );
        let [Action::AnnotateJob { annotations, .. }] = actions.as_slice() else {
            panic!("{actions:?}")
        };
        assert_eq!(
            annotations[keys::JOB_ANNOTATION_LAST_LOGS],
            "tuning-apply: ImagePullBackOff: registry unreachable"
        );
    }

    #[test]
    fn last_logs_is_taken_once_only_at_failure_target_and_never_over_a_genuine_archive() {
        let obj = nw("nw").package("tuning", "1.0.0").build();
        let crash = || attempt(&[("tuning-init", "ok"), ("tuning-apply", "crash")]);
        assert!(last_logs_actions(&at_failure_target(&obj, true), vec![crash()]).is_empty());
        assert!(last_logs_actions(&running_job(&obj), vec![crash()]).is_empty());
        assert!(
            last_logs_actions(
                &at_failure_target(&obj, false),
                vec![failed_pod(None, Some(1), false), crash()]
            )
            .is_empty(),
            "a genuine archive keeps the logs"
        );
    }
}
