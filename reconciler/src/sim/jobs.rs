//! The Job controller and the kubelet for Job pods (spec/operator.md §8, seed 002).
//!
//! One pod per attempt; init containers strictly in order, stopping at the first failure;
//! `restartPolicy: Never` (a failed attempt stays Failed and a new pod follows once it is
//! terminal, paced ≈10 s/20 s/40 s) or `OnFailure` (in-place restarts after the kubelet's
//! crash-loop backoff, each restart counting toward `backoffLimit`); `podFailurePolicy`;
//! `podReplacementPolicy`; per-attempt and Job-level `activeDeadlineSeconds`; `suspend`;
//! `ttlSecondsAfterFinished`; conditions `FailureTarget` → `Failed`, `Complete`, `Suspended`;
//! foreground deletion.

use std::sync::Arc;
use std::time::Duration;

use crate::job::Job;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{JobCondition, JobSpec, JobStatus};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateWaiting, ContainerStatus, Pod, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use nodewright_schema::keys;

use super::nodes::node_boot_id;
use super::packages::{ContainerRun, Effect};
use super::util;
use super::workload::{
    PodKind, PodRt, has_ready_condition, set_pod_condition, terminate_running, terminated,
};
use super::{Key, Shared, SimCluster, Timer};
pub use crate::engine::jobs::{has_condition, is_finished};
use crate::plan::Outcome;
use crate::snapshot::pod_has_ended;

/// Default `backoffLimit` of the Job API.
const DEFAULT_BACKOFF_LIMIT: i32 = 6;
/// First delay of the Job controller's failure backoff.
const JOB_BACKOFF_BASE: Duration = Duration::from_secs(10);
/// Cap of the Job controller's failure backoff.
const JOB_BACKOFF_MAX: Duration = Duration::from_secs(360);
/// First delay of the kubelet's crash-loop backoff.
const CRASHLOOP_BASE: Duration = Duration::from_secs(10);
/// Cap of the kubelet's crash-loop backoff.
const CRASHLOOP_MAX: Duration = Duration::from_secs(300);
/// The Job controller's sync period after a failure that does not count (rate limit).
const JOB_RESYNC: Duration = Duration::from_secs(1);
/// containerd's exit code and reason for a container whose task died with the host.
const LOST_WITH_HOST_EXIT: i32 = 255;
const LOST_WITH_HOST_REASON: &str = "Unknown";
/// From the kubelet's first report after a boot to the new sandbox's first container: the
/// sandbox is made and the PLEG's next relist (every second) sees the container start.
const SANDBOX_RECREATION: Duration = Duration::from_secs(1);

/// Simulator-side Job state.
#[derive(Clone, Debug, Default)]
pub(super) struct JobRt {
    /// When the last counted failure happened.
    pub failed_at: Option<Timestamp>,
    /// When the last ignored (disruption) failure happened.
    pub ignored_at: Option<Timestamp>,
    /// Pending JobSync timer instant (dedup).
    pub sync_at: Option<Timestamp>,
    /// Pending TTL instant (dedup).
    pub ttl_at: Option<Timestamp>,
}

/// `NODEWRIGHT/PACKAGE/STAGE/NODE` of a reconciler Job (spec/scenarios.md §5): the package is
/// the `name` of the Job's package annotation (for interrupt Jobs, the owner of the merged
/// interrupt), else the `package` label without its version.
pub fn job_address(job: &Job) -> Option<String> {
    let labels = job.metadata.labels.as_ref()?;
    let nw = labels.get(keys::JOB_LABEL_NAME)?;
    let stage = labels
        .get(keys::JOB_LABEL_STAGE)
        .map(String::as_str)
        .unwrap_or("");
    /// The two fields of the package annotation an address reads; the rest is skipped.
    #[derive(serde::Deserialize)]
    struct Named<'a> {
        #[serde(borrow, default)]
        name: Option<std::borrow::Cow<'a, str>>,
        #[serde(borrow, default)]
        version: Option<std::borrow::Cow<'a, str>>,
    }
    let annotation = job
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(keys::JOB_ANNOTATION_PACKAGE))
        .and_then(|v| serde_json::from_str::<Named<'_>>(v).ok());
    let package = annotation
        .as_ref()
        .and_then(|a| a.name.as_deref())
        .map(str::to_string)
        .or_else(|| {
            let label = labels.get(keys::JOB_LABEL_PACKAGE)?;
            let version = annotation.as_ref().and_then(|a| a.version.as_deref());
            Some(
                match version.and_then(|v| label.strip_suffix(&format!("-{v}"))) {
                    Some(name) => name.to_string(),
                    None => strip_version(label),
                },
            )
        })
        .unwrap_or_default();
    let node = job
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.node_name.clone())
        .or_else(|| labels.get(keys::JOB_LABEL_NODE).cloned())
        .unwrap_or_default();
    Some(format!("{nw}/{package}/{stage}/{node}"))
}

/// `tuning-1.2.0` → `tuning`: cut at the last `-` followed by a digit.
fn strip_version(label: &str) -> String {
    let bytes = label.as_bytes();
    for (i, b) in bytes.iter().enumerate().rev() {
        if *b == b'-' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit) {
            return label[..i].to_string();
        }
    }
    label.to_string()
}

fn condition<'a>(job: &'a Job, type_: &str) -> Option<&'a JobCondition> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

fn set_condition(
    job: &mut Job,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    let st = job.status.get_or_insert_with(JobStatus::default);
    let conditions = st.conditions.get_or_insert_with(Vec::new);
    let t = util::time(now);
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = Some(t.clone());
            }
            c.status = status.into();
            c.reason = Some(reason.into());
            c.message = Some(message.into());
            c.last_probe_time = Some(t);
        }
        None => conditions.push(JobCondition {
            type_: type_.into(),
            status: status.into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            last_probe_time: Some(t.clone()),
            last_transition_time: Some(t),
        }),
    }
}

fn restart_policy(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always")
}

/// `(image, version)` of the package a Job pod runs: the `done` main container carries the
/// package image (`image:version` or `image@digest`); the package annotation has the version.
fn package_of(pod: &Pod) -> (String, String) {
    let image = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default();
    let annotated = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(keys::JOB_ANNOTATION_PACKAGE))
        .and_then(|v| serde_json::from_str::<serde_json::Value>(v).ok())
        .and_then(|v| {
            v.get("version")
                .and_then(|v| v.as_str())
                .map(str::to_string)
        });
    if let Some((bare, _digest)) = image.split_once('@') {
        return (bare.to_string(), annotated.unwrap_or_default());
    }
    let slash = image.rfind('/').map_or(0, |i| i + 1);
    match image[slash..].rfind(':') {
        Some(i) => {
            let (bare, tag) = image.split_at(slash + i);
            (
                bare.to_string(),
                annotated.unwrap_or_else(|| tag[1..].to_string()),
            )
        }
        None => (image.clone(), annotated.unwrap_or_default()),
    }
}

fn backoff(base: Duration, max: Duration, n: i32) -> Duration {
    let shift = (n.max(1) - 1).min(20) as u32;
    base.saturating_mul(1u32 << shift).min(max)
}

/// The labels a Job's pods carry: its uid and name, prefixed and in the legacy form.
fn job_pod_labels(name: &str, uid: &str) -> [(String, String); 4] {
    [
        (keys::JOB_CONTROLLER_UID_LABEL.into(), uid.into()),
        (keys::JOB_NAME_LABEL.into(), name.into()),
        (keys::LEGACY_JOB_CONTROLLER_UID_LABEL.into(), uid.into()),
        (keys::LEGACY_JOB_NAME_LABEL.into(), name.into()),
    ]
}

/// The apiserver's Job defaulting: unless `spec.manualSelector` is set, the Job selects its
/// pods by its uid label, which the pod template gets, so that a client looking for the Job's
/// pods by its selector (`kubectl logs job/NAME`) finds this Job's and no other's.
fn default_selector(job: &mut Job) {
    let name = job.metadata.name.clone().unwrap_or_default();
    let uid = job.metadata.uid.clone().unwrap_or_default();
    let Some(spec) = job.spec.as_mut().map(Arc::make_mut) else {
        return;
    };
    if spec.manual_selector == Some(true) {
        return;
    }
    spec.selector = Some(LabelSelector {
        match_labels: Some([(keys::JOB_CONTROLLER_UID_LABEL.to_string(), uid.clone())].into()),
        match_expressions: None,
    });
    spec.template
        .metadata
        .get_or_insert_with(Default::default)
        .labels
        .get_or_insert_with(Default::default)
        .extend(job_pod_labels(&name, &uid));
}

impl SimCluster {
    /// Moves a Job's resourceVersion (every write does; snapshots reuse unchanged objects).
    fn bump_job(&mut self, name: &str) {
        let rv = self.next_rv();
        if let Some(job) = self.jobs.get_mut(name) {
            job.metadata.resource_version = Some(rv);
        }
    }

    pub(super) fn job_uid(&self, name: &str) -> Option<String> {
        self.jobs.get(name).and_then(|j| j.metadata.uid.clone())
    }

    /// Creates a Job (the Job controller then creates its first pod unless suspended).
    pub fn create_job(&mut self, mut job: Job) -> Outcome {
        let name = job.metadata.name.clone().unwrap_or_default();
        if self.jobs.contains_key(&name) {
            return Outcome::AlreadyExists;
        }
        let ns = job
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| self.namespace.clone());
        let mut meta = self.new_meta(&name, Some(&ns));
        meta.labels = job.metadata.labels.take();
        meta.annotations = job.metadata.annotations.take();
        meta.owner_references = job.metadata.owner_references.take();
        meta.finalizers = job.metadata.finalizers.take();
        meta.generation = Some(1);
        job.metadata = meta;
        default_selector(&mut job);
        job.status = Some(JobStatus::default());
        if let Some(address) = job_address(&job) {
            self.history.record(self.now, format!("job {address}"));
        }
        self.jobs.insert(name.clone(), Shared::new(job));
        self.job_rt.insert(name.clone(), JobRt::default());
        self.unfinished_jobs.insert(name.clone());
        self.dirty_jobs.insert(name);
        self.settle();
        Outcome::Done
    }

    /// Foreground deletion: the Job stays (with a deletionTimestamp) until its pods are gone.
    pub fn delete_job(&mut self, name: &str, uid: Option<&str>) -> Outcome {
        let Some(job) = self.jobs.get_mut(name) else {
            return Outcome::NotFound;
        };
        if uid.is_some_and(|u| job.metadata.uid.as_deref() != Some(u)) {
            return Outcome::NotFound;
        }
        if job.metadata.deletion_timestamp.is_none() {
            job.metadata.deletion_timestamp = Some(util::time(self.now));
            job.metadata
                .finalizers
                .get_or_insert_with(Vec::new)
                .push("foregroundDeletion".into());
            let rv = self.next_rv();
            if let Some(job) = self.jobs.get_mut(name) {
                job.metadata.resource_version = Some(rv);
            }
        }
        self.dirty_jobs.insert(name.to_string());
        self.settle();
        Outcome::Done
    }

    /// Sets `spec.suspend` (a spec change: generation bumps).
    pub fn suspend_job(&mut self, name: &str, suspend: bool) -> Outcome {
        let rv = self.next_rv();
        let Some(job) = self.jobs.get_mut(name) else {
            return Outcome::NotFound;
        };
        let spec = job.spec.get_or_insert_with(Default::default);
        if spec.suspend.unwrap_or(false) != suspend {
            Arc::make_mut(spec).suspend = Some(suspend);
            job.metadata.generation = Some(job.metadata.generation.unwrap_or(1) + 1);
            job.metadata.resource_version = Some(rv);
        }
        self.dirty_jobs.insert(name.to_string());
        self.settle();
        Outcome::Done
    }

    /// Ends a Job as failed (the operator's restart budget, §8.16): FailureTarget, pods
    /// terminated, then Failed.
    pub fn fail_job(&mut self, name: &str, reason: &str) -> Outcome {
        let now = self.now;
        let Some(job) = self.jobs.get_mut(name) else {
            return Outcome::NotFound;
        };
        if !is_finished(job) && !has_condition(job, "FailureTarget") {
            set_condition(
                job,
                "FailureTarget",
                "True",
                "FailedByController",
                reason,
                now,
            );
        }
        self.bump_job(name);
        self.dirty_jobs.insert(name.to_string());
        self.settle();
        Outcome::Done
    }

    /// The Job controller's sync of one Job.
    pub(super) fn sync_job(&mut self, name: &str) {
        let Some(job) = self.jobs.get(name) else {
            return;
        };
        let uid = job.metadata.uid.clone().unwrap_or_default();
        let keys: Vec<Key> = self
            .pods_by_job
            .get(&uid)
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        if job.metadata.deletion_timestamp.is_some() {
            for key in &keys {
                self.delete_pod_graceful(key, None, None, true);
            }
            if self.pods_by_job.get(&uid).is_none_or(|s| s.is_empty()) {
                self.jobs.remove(name);
                self.job_rt.remove(name);
                self.pods_by_job.remove(&uid);
                self.forget_archived(&uid);
            }
            return;
        }
        // The Job as this sync found it, shared with the world: the sync works on a scratch
        // status and copies the Job only when that status changed, so a sync that changes
        // nothing keeps the same object (a held snapshot keeps sharing it, the engine's cache
        // recognises it) and costs no copy of the pod template.
        let job = job.clone();
        let before = job.status.clone();
        let mut state = Job {
            status: before.clone(),
            ..Job::default()
        };
        let no_spec = JobSpec::default();
        let spec = job.spec.as_deref().unwrap_or(&no_spec);
        let (mut active, mut terminating, mut succeeded, mut ready, mut restarts) = (0, 0, 0, 0, 0);
        let mut active_keys = Vec::new();
        for key in &keys {
            let Some(pod) = self.pods.get(key) else {
                continue;
            };
            if pod.metadata.deletion_timestamp.is_some() && !pod_has_ended(pod) {
                terminating += 1;
            } else if !pod_has_ended(pod) {
                active += 1;
                active_keys.push(key.clone());
                if pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
                    ready += 1;
                }
                if restart_policy(pod) == "OnFailure" {
                    let st = pod.status.as_ref();
                    restarts += st
                        .into_iter()
                        .flat_map(|s| {
                            s.init_container_statuses
                                .iter()
                                .flatten()
                                .chain(s.container_statuses.iter().flatten())
                        })
                        .map(|c| c.restart_count)
                        .sum::<i32>();
                }
            } else if super::workload::phase(pod) == "Succeeded" {
                succeeded += 1;
            }
        }
        let failed = state.status.as_ref().and_then(|s| s.failed).unwrap_or(0);
        let now = self.now;
        let address = job_address(&job);
        let mut resync = false;
        'decide: {
            if is_finished(&state) {
                break 'decide;
            }
            if succeeded >= spec.completions.unwrap_or(1) {
                set_condition(&mut state, "Complete", "True", "", "", now);
                if let Some(st) = state.status.as_mut() {
                    st.completion_time = Some(util::time(now));
                }
                if let Some(a) = &address {
                    self.history.record(now, format!("job-ok {a}"));
                }
                break 'decide;
            }
            if let Some(target) = condition(&state, "FailureTarget")
                .filter(|c| c.status == "True")
                .cloned()
            {
                for key in &active_keys {
                    self.delete_pod_graceful(key, None, None, true);
                }
                let still_running = keys
                    .iter()
                    .any(|k| self.pods.get(k).is_some_and(|p| !pod_has_ended(p)));
                if !still_running {
                    set_condition(
                        &mut state,
                        "Failed",
                        "True",
                        target.reason.as_deref().unwrap_or(""),
                        target.message.as_deref().unwrap_or(""),
                        now,
                    );
                    if let Some(a) = &address {
                        self.history.record(now, format!("job-fail {a}"));
                    }
                }
                active = 0;
                break 'decide;
            }
            let limit = spec.backoff_limit.unwrap_or(DEFAULT_BACKOFF_LIMIT);
            if i64::from(failed) + i64::from(restarts) > i64::from(limit) {
                set_condition(
                    &mut state,
                    "FailureTarget",
                    "True",
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit",
                    now,
                );
                resync = true;
                break 'decide;
            }
            if let (Some(ads), Some(start)) = (
                spec.active_deadline_seconds,
                state.status.as_ref().and_then(|s| s.start_time.clone()),
            ) && !spec.suspend.unwrap_or(false)
            {
                let deadline = util::add(start.0, Duration::from_secs(ads.max(0) as u64));
                if now >= deadline {
                    set_condition(
                        &mut state,
                        "FailureTarget",
                        "True",
                        "DeadlineExceeded",
                        "Job was active longer than specified deadline",
                        now,
                    );
                    resync = true;
                    break 'decide;
                }
                self.job_sync_at(name, &uid, deadline);
            }
            if spec.suspend.unwrap_or(false) {
                for key in &active_keys {
                    self.delete_pod_graceful(key, None, None, true);
                }
                active = 0;
                if let Some(st) = state.status.as_mut() {
                    st.start_time = None;
                }
                if !has_condition(&state, "Suspended") {
                    set_condition(
                        &mut state,
                        "Suspended",
                        "True",
                        "JobSuspended",
                        "Job suspended",
                        now,
                    );
                }
                break 'decide;
            }
            if has_condition(&state, "Suspended") {
                set_condition(
                    &mut state,
                    "Suspended",
                    "False",
                    "JobResumed",
                    "Job resumed",
                    now,
                );
            }
            let st = state.status.get_or_insert_with(JobStatus::default);
            if st.start_time.is_none() {
                st.start_time = Some(util::time(now));
                if let Some(ads) = spec.active_deadline_seconds {
                    let deadline = util::add(now, Duration::from_secs(ads.max(0) as u64));
                    self.job_sync_at(name, &uid, deadline);
                }
            }
            let wait_terminating = spec.pod_replacement_policy.as_deref() == Some("Failed")
                || spec.pod_failure_policy.is_some();
            if active == 0 && (terminating == 0 || !wait_terminating) {
                let rt = self.job_rt.get(name).cloned().unwrap_or_default();
                let mut earliest = now;
                if let Some(at) = rt.failed_at
                    && failed > 0
                {
                    earliest = earliest.max(util::add(
                        at,
                        backoff(JOB_BACKOFF_BASE, JOB_BACKOFF_MAX, failed),
                    ));
                }
                if let Some(at) = rt.ignored_at {
                    earliest = earliest.max(util::add(at, JOB_RESYNC));
                }
                if earliest <= now {
                    self.create_job_pod(&job);
                    active = 1;
                } else {
                    self.job_sync_at(name, &uid, earliest);
                }
            }
        }
        let st = state.status.get_or_insert_with(JobStatus::default);
        st.active = (active > 0).then_some(active);
        st.terminating = Some(terminating);
        st.ready = Some(ready);
        st.succeeded = (succeeded > 0).then_some(succeeded);
        let changed = state.status != before;
        if is_finished(&state)
            && let Some(ttl) = spec.ttl_seconds_after_finished
        {
            let finished_at = condition(&state, "Complete")
                .filter(|c| c.status == "True")
                .or_else(|| condition(&state, "Failed"))
                .and_then(|c| c.last_transition_time.clone())
                .map_or(now, |t| t.0);
            let due = util::add(finished_at, Duration::from_secs(ttl.max(0) as u64));
            let rt = self.job_rt.entry(name.to_string()).or_default();
            if rt.ttl_at != Some(due) {
                rt.ttl_at = Some(due);
                if due <= now {
                    self.expired_jobs.insert((name.to_string(), uid.clone()));
                } else {
                    self.schedule(
                        due,
                        Timer::JobTtl {
                            job: name.to_string(),
                            uid: uid.clone(),
                        },
                    );
                }
            }
        }
        // What the sync found is what it writes back, over anything written meanwhile (the
        // pods it deleted or created may have touched the Job).
        let current = self.jobs.get(name).map(Shared::arc);
        let untouched = current.is_some_and(|c| Arc::ptr_eq(&c, &job.arc()));
        if changed || !untouched {
            // The world lets go of its handle first, so the write below copies the Job only
            // when a snapshot still holds it.
            self.jobs.remove(name);
            let mut job = job;
            if changed {
                job.status = state.status;
                self.touch(&mut job.metadata);
            }
            self.jobs.insert(name.to_string(), job);
        }
        if resync {
            self.dirty_jobs.insert(name.to_string());
        }
    }

    /// Keeps [`SimCluster::unfinished_jobs`] as the sync of `name` left the Job.
    pub(super) fn note_unfinished(&mut self, name: &str) {
        if self.jobs.get(name).is_some_and(|job| !is_finished(job)) {
            self.unfinished_jobs.insert(name.to_string());
        } else {
            self.unfinished_jobs.remove(name);
        }
    }

    pub(super) fn job_sync_at(&mut self, name: &str, uid: &str, at: Timestamp) {
        let rt = self.job_rt.entry(name.to_string()).or_default();
        if rt.sync_at == Some(at) {
            return;
        }
        rt.sync_at = Some(at);
        self.schedule(
            at,
            Timer::JobSync {
                job: name.to_string(),
                uid: uid.to_string(),
            },
        );
    }

    pub(super) fn job_ttl(&mut self, name: &str, uid: &str) {
        let Some(job) = self.jobs.get(name) else {
            return;
        };
        if job.metadata.uid.as_deref() != Some(uid) || !is_finished(job) {
            return;
        }
        let rt = self.job_rt.get(name).cloned().unwrap_or_default();
        if rt.ttl_at.is_some_and(|t| t > self.now) {
            return;
        }
        // The TTL controller deletes with background propagation; pods are garbage-collected.
        self.delete_job(name, Some(uid));
    }

    fn create_job_pod(&mut self, job: &Job) {
        let job_name = job.metadata.name.clone().unwrap_or_default();
        let uid = job.metadata.uid.clone().unwrap_or_default();
        let template = job
            .spec
            .as_ref()
            .map(|s| s.template.clone())
            .unwrap_or_default();
        let name = format!("{job_name}-{}", self.rng.suffix());
        let ns = job
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| self.namespace.clone());
        let mut meta = self.new_meta(&name, Some(&ns));
        let tmeta = template.metadata.unwrap_or_default();
        let mut labels = tmeta.labels.unwrap_or_default();
        labels.extend(job_pod_labels(&job_name, &uid));
        meta.labels = Some(labels);
        meta.annotations = tmeta.annotations;
        meta.owner_references = Some(vec![OwnerReference {
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            name: job_name.clone(),
            uid: uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]);
        let pod = Pod {
            metadata: meta,
            spec: template.spec,
            status: Some(PodStatus {
                phase: Some("Pending".into()),
                ..PodStatus::default()
            }),
        };
        let key = (ns, name);
        self.insert_pod(
            key.clone(),
            pod,
            PodRt::new(PodKind::Job { job: job_name, uid }),
        );
        self.kubelet_admit(&key);
    }

    /// The kubelet acknowledges a Job pod: start time, then the first init container.
    pub(super) fn job_pod_start(&mut self, key: &Key) {
        let now = util::time(self.now);
        let Some(rt) = self.pod_rt.get_mut(key) else {
            return;
        };
        if rt.started {
            return;
        }
        rt.started = true;
        let Some(pod) = self.pods.get_mut(key) else {
            return;
        };
        let spec = pod.spec.clone().unwrap_or_default();
        let st = pod.status.get_or_insert_with(PodStatus::default);
        st.start_time = Some(now.clone());
        let waiting = |name: &str, image: Option<String>| ContainerStatus {
            name: name.to_string(),
            image: image.unwrap_or_default(),
            state: Some(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some("PodInitializing".into()),
                    message: None,
                }),
                ..ContainerState::default()
            }),
            ..ContainerStatus::default()
        };
        st.init_container_statuses = Some(
            spec.init_containers
                .iter()
                .flatten()
                .map(|c| waiting(&c.name, c.image.clone()))
                .collect(),
        );
        st.container_statuses = Some(
            spec.containers
                .iter()
                .map(|c| waiting(&c.name, c.image.clone()))
                .collect(),
        );
        set_pod_condition(pod, "PodScheduled", "True", None, None, &now);
        set_pod_condition(
            pod,
            "Initialized",
            "False",
            Some("ContainersNotInitialized"),
            None,
            &now,
        );
        if let Some(ads) = spec.active_deadline_seconds {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            self.schedule(
                util::add(self.now, Duration::from_secs(ads.max(0) as u64)),
                Timer::PodDeadline {
                    pod: key.clone(),
                    uid,
                },
            );
        }
        self.run_container(key);
    }

    fn run_container(&mut self, key: &Key) {
        let now = util::time(self.now);
        let Some(pod) = self.pods.get(key) else {
            return;
        };
        let Some(rt) = self.pod_rt.get(key) else {
            return;
        };
        let idx = rt.container;
        let spec = pod.spec.as_ref();
        let inits = spec
            .and_then(|s| s.init_containers.as_deref())
            .unwrap_or_default();
        let api_pod = matches!(rt.kind, PodKind::Api);
        if idx >= inits.len() && api_pod {
            self.api_pod_running(key);
            return;
        }
        if idx >= inits.len() {
            let mains: Vec<String> = spec
                .map(|s| s.containers.iter().map(|c| c.name.clone()).collect())
                .unwrap_or_default();
            // The main containers (`done`: `exit 0`) finish at once.
            let pod = self.pods.get_mut(key).expect("checked above");
            let st = pod.status.get_or_insert_with(PodStatus::default);
            st.phase = Some("Succeeded".into());
            for c in st.container_statuses.iter_mut().flatten() {
                c.state = Some(terminated(0, "Completed", None, &now));
                c.started = Some(false);
            }
            set_pod_condition(pod, "Initialized", "True", None, None, &now);
            set_pod_condition(pod, "Ready", "False", Some("PodCompleted"), None, &now);
            // They ran (and printed nothing): their log reads empty, not "waiting to start".
            for c in &mains {
                self.log_start(key, c);
            }
            self.bump_pod(key);
            self.job_pod_terminal(key);
            return;
        }
        let container = &inits[idx];
        let args = container.args.clone().unwrap_or_default();
        let mode = args.first().cloned().unwrap_or_else(|| "copy".to_string());
        let name = container.name.clone();
        let (image, version) = if api_pod {
            super::pods::api_pod_package(pod)
        } else {
            package_of(pod)
        };
        let node = spec.and_then(|s| s.node_name.clone()).unwrap_or_default();
        let boot = self
            .nodes
            .get(&node)
            .map(|n| node_boot_id(n).to_string())
            .unwrap_or_default();
        let reboot_completed = rt.reboot_fired_boot.as_ref().is_some_and(|b| *b != boot);
        let pod_name = key.1.clone();
        let result = self.runner.run(&ContainerRun {
            node: &node,
            pod: &pod_name,
            image: &image,
            version: &version,
            mode: &mode,
            args: &args,
            boot_id: &boot,
            reboot_completed,
        });
        let mut result = result;
        // The first line appears as the container starts; the rest when it ends.
        let first = result.log.find('\n').map_or(result.log.len(), |i| i + 1);
        let first: String = result.log.drain(..first).collect();
        self.log_start(key, &name);
        self.log_append(key, &name, &first);
        let duration = result.duration;
        let rt = self.pod_rt.get_mut(key).expect("checked above");
        rt.pending = Some(result);
        let epoch = rt.epoch;
        if let Some(pod) = self.pods.get_mut(key)
            && let Some(c) = pod
                .status
                .as_mut()
                .and_then(|s| s.init_container_statuses.as_mut())
                .and_then(|l| l.get_mut(idx))
        {
            c.state = Some(ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(now),
                }),
                ..ContainerState::default()
            });
            c.started = Some(true);
        }
        self.bump_pod(key);
        self.schedule(
            util::add(self.now, duration),
            Timer::ContainerDone {
                pod: key.clone(),
                epoch,
            },
        );
    }

    pub(super) fn container_done(&mut self, key: &Key, epoch: u64) {
        let now = util::time(self.now);
        let Some(rt) = self.pod_rt.get_mut(key) else {
            return;
        };
        if rt.epoch != epoch {
            return;
        }
        let Some(result) = rt.pending.take() else {
            return;
        };
        let idx = rt.container;
        let container = self
            .pods
            .get(key)
            .and_then(|p| p.spec.as_ref())
            .and_then(|s| s.init_containers.as_ref())
            .and_then(|l| l.get(idx))
            .map(|c| c.name.clone());
        if let Some(name) = container {
            self.log_append(key, &name, &result.log);
        }
        let Some(pod) = self.pods.get(key) else {
            return;
        };
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        if let Effect::Reboot(takes) = result.effect {
            let boot = self.nodes.get(&node).map(|n| node_boot_id(n).to_string());
            if let Some(rt) = self.pod_rt.get_mut(key) {
                rt.reboot_fired_boot = boot;
            }
            self.reboot(&node, takes);
            return;
        }
        let policy = restart_policy(pod).to_string();
        let pod = self.pods.get_mut(key).expect("checked above");
        let st = pod.status.get_or_insert_with(PodStatus::default);
        let status = st
            .init_container_statuses
            .as_mut()
            .and_then(|l| l.get_mut(idx));
        if result.exit_code == 0 {
            if let Some(c) = status {
                c.state = Some(terminated(0, "Completed", None, &now));
            }
            if let Some(rt) = self.pod_rt.get_mut(key) {
                rt.container += 1;
            }
            self.bump_pod(key);
            self.run_container(key);
            return;
        }
        if policy == "OnFailure" {
            let mut restarts = 1;
            if let Some(c) = status {
                c.restart_count += 1;
                restarts = c.restart_count;
                c.last_state = Some(terminated(
                    result.exit_code,
                    "Error",
                    result.message.clone(),
                    &now,
                ));
                c.state = Some(ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: Some("CrashLoopBackOff".into()),
                        message: Some(format!("back-off restarting failed container {}", c.name)),
                    }),
                    ..ContainerState::default()
                });
            }
            let delay = backoff(CRASHLOOP_BASE, CRASHLOOP_MAX, restarts);
            self.bump_pod(key);
            self.schedule(
                util::add(self.now, delay),
                Timer::ContainerRestart {
                    pod: key.clone(),
                    epoch,
                },
            );
            if let Some(PodKind::Job { job, .. }) = self.pod_rt.get(key).map(|r| r.kind.clone()) {
                self.dirty_jobs.insert(job);
            }
            return;
        }
        if let Some(c) = status {
            c.state = Some(terminated(result.exit_code, "Error", result.message, &now));
        }
        st.phase = Some("Failed".into());
        self.bump_pod(key);
        self.job_pod_terminal(key);
    }

    pub(super) fn container_restart(&mut self, key: &Key, epoch: u64) {
        if self.pod_rt.get(key).is_some_and(|r| r.epoch == epoch) {
            self.run_container(key);
        }
    }

    /// Per-attempt deadline: the kubelet kills the pod, Failed with reason DeadlineExceeded.
    pub(super) fn pod_deadline(&mut self, key: &Key, uid: &str) {
        let now = util::time(self.now);
        let Some(pod) = self.pods.get_mut(key) else {
            return;
        };
        if pod.metadata.uid.as_deref() != Some(uid)
            || pod_has_ended(pod)
            || pod.metadata.deletion_timestamp.is_some()
        {
            return;
        }
        let st = pod.status.get_or_insert_with(PodStatus::default);
        st.phase = Some("Failed".into());
        st.reason = Some("DeadlineExceeded".into());
        st.message = Some("Pod was active on the node longer than the specified deadline".into());
        terminate_running(st, 137, "Error", &now);
        if let Some(rt) = self.pod_rt.get_mut(key) {
            rt.epoch += 1;
            rt.pending = None;
        }
        self.bump_pod(key);
        self.job_pod_terminal(key);
    }

    /// The Job controller accounts a terminal pod once: a failure counts toward
    /// `backoffLimit` unless the pod failure policy ignores it or the controller deleted it.
    pub(super) fn job_pod_terminal(&mut self, key: &Key) {
        let Some(rt) = self.pod_rt.get_mut(key) else {
            return;
        };
        if rt.counted {
            return;
        }
        let PodKind::Job { job, .. } = rt.kind.clone() else {
            return;
        };
        let Some(pod) = self.pods.get(key) else {
            return;
        };
        if !pod_has_ended(pod) {
            return;
        }
        rt.counted = true;
        let controller_deleted = rt.controller_deleted;
        self.dirty_jobs.insert(job.clone());
        if super::workload::phase(pod) != "Failed" || controller_deleted {
            return;
        }
        let action = self
            .jobs
            .get(&job)
            .and_then(|j| failure_policy_action(j, pod));
        let now = self.now;
        self.bump_job(&job);
        match action.as_deref() {
            Some("Ignore") => {
                self.job_rt.entry(job).or_default().ignored_at = Some(now);
            }
            Some("FailJob") => {
                if let Some(j) = self.jobs.get_mut(&job) {
                    let st = j.status.get_or_insert_with(JobStatus::default);
                    st.failed = Some(st.failed.unwrap_or(0) + 1);
                    set_condition(
                        j,
                        "FailureTarget",
                        "True",
                        "PodFailurePolicy",
                        "Container failed with a FailJob rule",
                        now,
                    );
                }
            }
            _ => {
                if let Some(j) = self.jobs.get_mut(&job) {
                    let st = j.status.get_or_insert_with(JobStatus::default);
                    st.failed = Some(st.failed.unwrap_or(0) + 1);
                }
                self.job_rt.entry(job).or_default().failed_at = Some(now);
            }
        }
    }

    /// A reboot kills the node's Job pods: `Never` pods end Failed with DisruptionTarget;
    /// `OnFailure` pods restart in place when the node returns. Their kubelet goes down with
    /// the node without reporting (graceful node shutdown is off by default: kubelet
    /// `shutdownGracePeriod: 0`), so their containers still read as running meanwhile.
    pub(super) fn job_pod_node_down(&mut self, key: &Key) {
        let now = util::time(self.now);
        let Some(rt) = self.pod_rt.get_mut(key) else {
            return;
        };
        if !rt.started {
            return;
        }
        rt.epoch += 1;
        rt.pending = None;
        let Some(pod) = self.pods.get_mut(key) else {
            return;
        };
        if restart_policy(pod) == "Never" {
            set_pod_condition(
                pod,
                "DisruptionTarget",
                "True",
                Some("TerminationByKubelet"),
                Some("Pod was terminated in response to imminent node shutdown."),
                &now,
            );
            let st = pod.status.get_or_insert_with(PodStatus::default);
            st.phase = Some("Failed".into());
            terminate_running(st, 137, "Error", &now);
            self.bump_pod(key);
            self.job_pod_terminal(key);
        } else {
            if let Some(rt) = self.pod_rt.get_mut(key) {
                rt.restart_on_boot = true;
            }
            // The node lifecycle controller's only write: a ready pod turns not ready.
            if has_ready_condition(pod) {
                set_pod_condition(pod, "Ready", "False", Some("NodeNotReady"), None, &now);
                self.bump_pod(key);
            }
        }
    }

    /// The kubelet back after a reboot first reports what the runtime restored: containerd
    /// reads a container that was running when its task vanished as exited 255 `Unknown`.
    /// The pod's sandbox is dead, so the kubelet makes a new one and starts again from the
    /// first init container (kuberuntime `computePodActions`), a PLEG relist later.
    pub(super) fn job_pod_restart_after_boot(&mut self, key: &Key) {
        let now = util::time(self.now);
        let Some(rt) = self.pod_rt.get_mut(key) else {
            return;
        };
        rt.restart_on_boot = false;
        rt.epoch += 1;
        let epoch = rt.epoch;
        if let Some(st) = self.pods.get_mut(key).and_then(|p| p.status.as_mut()) {
            terminate_running(st, LOST_WITH_HOST_EXIT, LOST_WITH_HOST_REASON, &now);
        }
        self.bump_pod(key);
        if let Some(PodKind::Job { job, .. }) = self.pod_rt.get(key).map(|r| r.kind.clone()) {
            self.dirty_jobs.insert(job);
        }
        self.schedule(
            util::add(self.now, SANDBOX_RECREATION),
            Timer::SandboxRecreated {
                pod: key.clone(),
                epoch,
            },
        );
    }

    /// The new sandbox: every container that ran in the old one starts again with one more
    /// restart and its last run as `lastState`, init containers first.
    pub(super) fn sandbox_recreated(&mut self, key: &Key, epoch: u64) {
        let Some(rt) = self.pod_rt.get_mut(key) else {
            return;
        };
        if rt.epoch != epoch {
            return;
        }
        rt.container = 0;
        if let Some(st) = self.pods.get_mut(key).and_then(|p| p.status.as_mut()) {
            for c in [
                st.init_container_statuses.as_mut(),
                st.container_statuses.as_mut(),
            ]
            .into_iter()
            .flatten()
            .flatten()
            {
                if c.state.as_ref().is_some_and(|s| s.terminated.is_some()) {
                    c.restart_count += 1;
                    c.last_state = c.state.take();
                    c.state = Some(ContainerState {
                        waiting: Some(ContainerStateWaiting {
                            reason: Some("PodInitializing".into()),
                            message: None,
                        }),
                        ..ContainerState::default()
                    });
                    c.ready = false;
                }
            }
        }
        self.run_container(key);
    }
}

/// The action of the first `podFailurePolicy` rule matching a failed pod.
fn failure_policy_action(job: &Job, pod: &Pod) -> Option<String> {
    let policy = job.spec.as_ref()?.pod_failure_policy.as_ref()?;
    let conditions = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let statuses: Vec<&ContainerStatus> = pod
        .status
        .as_ref()
        .into_iter()
        .flat_map(|s| {
            s.init_container_statuses
                .iter()
                .flatten()
                .chain(s.container_statuses.iter().flatten())
        })
        .collect();
    for rule in &policy.rules {
        let by_condition = rule.on_pod_conditions.as_ref().is_some_and(|pats| {
            pats.iter().any(|pat| {
                conditions
                    .iter()
                    .any(|c| c.type_ == pat.type_ && c.status == pat.status)
            })
        });
        let by_exit = rule.on_exit_codes.as_ref().is_some_and(|req| {
            statuses.iter().any(|c| {
                if req.container_name.as_ref().is_some_and(|n| *n != c.name) {
                    return false;
                }
                let Some(code) = c
                    .state
                    .as_ref()
                    .and_then(|s| s.terminated.as_ref())
                    .map(|t| t.exit_code)
                else {
                    return false;
                };
                match req.operator.as_str() {
                    "In" => req.values.contains(&code),
                    "NotIn" => code != 0 && !req.values.contains(&code),
                    _ => false,
                }
            })
        });
        if by_condition || by_exit {
            return Some(rule.action.clone());
        }
    }
    None
}

#[cfg(test)]
mod address_tests {
    use super::*;

    #[test]
    fn package_label_without_annotation_drops_the_version() {
        assert_eq!(strip_version("tuning-1.2.0"), "tuning");
        assert_eq!(strip_version("gpu-driver-550.1"), "gpu-driver");
        assert_eq!(strip_version("plain"), "plain");
    }
}
