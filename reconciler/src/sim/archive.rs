//! What an in-process world keeps of finished Jobs and ended pods.
//!
//! A rollout keeps every finished Job and its ended pods until the Job's TTL: on a 10,000-node
//! fleet, tens of thousands of objects whose pod templates and specs (several containers and
//! volumes each) nothing in the lifecycle reads again. While no server answers from the world,
//! such an object keeps what a pass reads (as the kube adapter's stores do) and the rest is
//! kept as JSON, from which a reader that wants the whole object (a scenario's expectations,
//! the verbs, a log request) gets it back. A served world keeps whole objects: it answers
//! every read.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use crate::job::Job;
use k8s_openapi::api::batch::v1::JobSpec;
use k8s_openapi::api::core::v1::{Pod, PodSpec, PodTemplateSpec};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Key, Shared, SimCluster};
use crate::snapshot::{Memory, Snapshot, ended_pod_spec_kept, pod_has_ended};

/// The pod templates of finished Jobs and the specs of ended pods, as JSON by object uid. A
/// Job's pod is made from its template, so a pod's spec and its Job's template spec are mostly
/// the same text, kept once.
#[derive(Debug, Default)]
pub(super) struct Archive {
    templates: HashMap<String, ArchivedTemplate>,
    specs: HashMap<String, Arc<str>>,
}

impl Archive {
    /// The Job whole, when its template is archived.
    fn whole_job(&self, job: &Job) -> Option<Job> {
        let archived = self.templates.get(uid(&job.metadata))?;
        let mut whole = job.clone();
        if let Some(spec) = &mut whole.spec {
            Arc::make_mut(spec).template = archived.restore();
        }
        Some(whole)
    }

    /// The pod whole, when its spec is archived.
    fn whole_pod(&self, pod: &Pod) -> Option<Pod> {
        let json = self.specs.get(uid(&pod.metadata))?;
        Some(Pod {
            spec: Some(from_json::<PodSpec>(json)),
            ..pod.clone()
        })
    }
}

#[derive(Debug)]
struct ArchivedTemplate {
    metadata: Box<str>,
    spec: Option<Arc<str>>,
}

impl ArchivedTemplate {
    fn new(template: &PodTemplateSpec) -> Self {
        ArchivedTemplate {
            metadata: to_json(&template.metadata),
            spec: template.spec.as_ref().map(|spec| Arc::from(to_json(spec))),
        }
    }

    fn restore(&self) -> PodTemplateSpec {
        PodTemplateSpec {
            metadata: from_json(&self.metadata),
            spec: self.spec.as_deref().map(from_json),
        }
    }
}

fn to_json<T: Serialize>(part: &T) -> Box<str> {
    // A k8s-openapi type serializes to JSON without fail: its maps have string keys.
    serde_json::to_string(part)
        .expect("a Kubernetes object part serializes to JSON")
        .into_boxed_str()
}

fn from_json<T: DeserializeOwned>(json: &str) -> T {
    // The text is what `to_json` wrote from the same type.
    serde_json::from_str(json).expect("an archived part reads back as the type that wrote it")
}

fn uid(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &str {
    meta.uid.as_deref().unwrap_or_default()
}

/// What the world keeps of a finished Job's spec (`Complete` or `Failed`, which Kubernetes
/// never takes back) while it archives the pod template: everything else, which its TTL
/// controller and a served Job read. The lifecycle reads templates of unfinished Jobs only
/// (staleness, the interrupt budget), while a rollout keeps every finished Job until its TTL,
/// thousands of templates of several containers each. Every field is named, so a field a new
/// API version adds is a compile error here rather than lost.
fn finished_job_spec_kept(spec: &JobSpec) -> JobSpec {
    let JobSpec {
        active_deadline_seconds,
        backoff_limit,
        backoff_limit_per_index,
        completion_mode,
        completions,
        managed_by,
        manual_selector,
        max_failed_indexes,
        parallelism,
        pod_failure_policy,
        pod_replacement_policy,
        selector,
        success_policy,
        suspend,
        template: _,
        ttl_seconds_after_finished,
    } = spec;
    JobSpec {
        active_deadline_seconds: *active_deadline_seconds,
        backoff_limit: *backoff_limit,
        backoff_limit_per_index: *backoff_limit_per_index,
        completion_mode: completion_mode.clone(),
        completions: *completions,
        managed_by: managed_by.clone(),
        manual_selector: *manual_selector,
        max_failed_indexes: *max_failed_indexes,
        parallelism: *parallelism,
        pod_failure_policy: pod_failure_policy.clone(),
        pod_replacement_policy: pod_replacement_policy.clone(),
        selector: selector.clone(),
        success_policy: success_policy.clone(),
        suspend: *suspend,
        template: PodTemplateSpec::default(),
        ttl_seconds_after_finished: *ttl_seconds_after_finished,
    }
}

impl SimCluster {
    /// Archives what a Job that has finished, and each of its ended pods, no longer needs; run
    /// after the Job controller's sync, which sees the Job finish. The world's object is
    /// replaced by a new one made without the archived part, which a snapshot may still hold.
    pub(super) fn archive_finished(&mut self, job_name: &str) {
        let Some(archive) = &mut self.archive else {
            return;
        };
        let Some(slot) = self.jobs.get_mut_unrecorded(job_name) else {
            return;
        };
        let job_uid = uid(&slot.metadata);
        if crate::engine::jobs::is_unfinished(slot) || archive.templates.contains_key(job_uid) {
            return;
        }
        let job_uid = job_uid.to_string();
        let Some(spec) = &slot.spec else {
            return;
        };
        let template = ArchivedTemplate::new(&spec.template);
        let template_spec = template.spec.clone();
        *slot = Shared::new(Job {
            metadata: slot.metadata.clone(),
            spec: Some(Arc::new(finished_job_spec_kept(spec))),
            status: slot.status.clone(),
        });
        archive.templates.insert(job_uid.clone(), template);
        for key in self.pods_by_job.get(&job_uid).into_iter().flatten() {
            let Some(slot) = self.pods.get_mut_unrecorded(key) else {
                continue;
            };
            let Some(spec) = slot.spec.as_ref().filter(|_| pod_has_ended(slot)) else {
                continue;
            };
            let json = to_json(spec);
            let json = match &template_spec {
                Some(same) if **same == *json => Arc::clone(same),
                _ => Arc::from(json),
            };
            archive.specs.insert(uid(&slot.metadata).to_string(), json);
            *slot = Shared::new(Pod {
                metadata: slot.metadata.clone(),
                spec: Some(ended_pod_spec_kept(spec, false)),
                status: slot.status.clone(),
            });
        }
    }

    /// Forgets what was archived of an object that left the world.
    pub(super) fn forget_archived(&mut self, object_uid: &str) {
        if let Some(archive) = &mut self.archive {
            archive.templates.remove(object_uid);
            archive.specs.remove(object_uid);
        }
    }

    /// From now on keeps whole objects, restoring those archived: a server answers from them.
    pub(super) fn stop_archiving(&mut self) {
        let Some(archive) = self.archive.take() else {
            return;
        };
        for job in self.jobs.values_mut_unrecorded() {
            if let Some(whole) = archive.whole_job(job) {
                *job = Shared::new(whole);
            }
        }
        for pod in self.pods.values_mut_unrecorded() {
            if let Some(whole) = archive.whole_pod(pod) {
                *pod = Shared::new(whole);
            }
        }
    }

    /// The world as a client reading the cluster sees it (the verbs): every object whole.
    pub fn whole_snapshot(&self, memory: Memory) -> Snapshot {
        let mut snapshot = self.snapshot(memory);
        if let Some(archive) = &self.archive {
            for job in &mut snapshot.jobs {
                if let Some(whole) = archive.whole_job(job) {
                    *job = Arc::new(whole);
                }
            }
            for pod in &mut snapshot.pods {
                if let Some(whole) = archive.whole_pod(pod) {
                    *pod = Arc::new(whole);
                }
            }
        }
        snapshot
    }

    /// A Job as the cluster holds it, its pod template included once it has finished.
    pub fn whole_job(&self, name: &str) -> Option<Cow<'_, Job>> {
        let job = self.jobs.get(name)?;
        let whole = self.archive.as_ref().and_then(|a| a.whole_job(job));
        Some(whole.map_or(Cow::Borrowed(&**job), Cow::Owned))
    }

    /// A pod as the cluster holds it, its spec whole once it has ended.
    pub fn whole_pod(&self, key: &Key) -> Option<Cow<'_, Pod>> {
        let pod = self.pods.get(key)?;
        let whole = self.archive.as_ref().and_then(|a| a.whole_pod(pod));
        Some(whole.map_or(Cow::Borrowed(&**pod), Cow::Owned))
    }
}
