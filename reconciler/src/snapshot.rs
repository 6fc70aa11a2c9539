//! What the engine sees in one pass (spec/operator.md §5.3): every object it decides from,
//! the current time, and the few in-memory timers the spec allows (§13.2).
//!
//! A snapshot is built by a [`crate::cluster::Cluster`] adapter. The engine never reads
//! anything else: no clock, no API, no files.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::job::Job;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Node, Pod, PodSpec, PodStatus, PodTemplateSpec,
};
use nodewright_schema::approvals::ApprovedBatches;
use nodewright_schema::{DeploymentPolicy, NodeWright};

/// Whether a pod has run to its end (`Succeeded` or `Failed`, which Kubernetes never takes
/// back).
pub fn pod_has_ended(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Leaves an unfinished Job's pod template with `unfinished_job_template_kept`; a finished
/// Job is left alone.
pub fn trim_unfinished_job_template(job: &mut Job) {
    if !crate::engine::jobs::is_unfinished(job) {
        return;
    }
    if let Some(spec) = job.spec.as_mut() {
        let kept = unfinished_job_template_kept(&spec.template);
        Arc::make_mut(spec).template = kept;
    }
}

/// What a pass reads of an unfinished Job's pod template: its metadata (the LimitRanger
/// mark), its node, and per init container the name, image, args, env and resources
/// (staleness, §8.14; the interrupt budget, §8.16). Volumes, mounts, security contexts, the
/// main container and the run-specific variables staleness ignores are written once and
/// never read back, while a batch of thousands of nodes keeps as many Jobs running.
fn unfinished_job_template_kept(template: &PodTemplateSpec) -> PodTemplateSpec {
    let spec = template.spec.as_ref().map(|spec| PodSpec {
        node_name: spec.node_name.clone(),
        init_containers: spec.init_containers.as_ref().map(|containers| {
            containers
                .iter()
                .map(|c| Container {
                    name: c.name.clone(),
                    image: c.image.clone(),
                    args: c.args.clone(),
                    env: c
                        .env
                        .as_ref()
                        .map(|_| crate::engine::jobs::compared_env(c).cloned().collect()),
                    resources: c.resources.clone(),
                    ..Container::default()
                })
                .collect()
        }),
        ..PodSpec::default()
    });
    PodTemplateSpec {
        metadata: template.metadata.clone(),
        spec,
    }
}

/// Takes an ended pod's spec, leaving [`ended_pod_spec_kept`]. `None`, leaving the pod alone,
/// while it has not ended.
pub fn take_ended_pod_spec(pod: &mut Pod, keep_container_names: bool) -> Option<PodSpec> {
    if !pod_has_ended(pod) {
        return None;
    }
    let spec = pod.spec.as_mut()?;
    let kept = ended_pod_spec_kept(spec, keep_container_names);
    Some(std::mem::replace(spec, kept))
}

/// What a pass needs of an ended pod's spec, or of a package pod's: its node, as drains read
/// the spec of running and pending workload pods only. Logs are listed by a pod's init
/// containers' names, which `keep_container_names` keeps.
pub fn ended_pod_spec_kept(spec: &PodSpec, keep_container_names: bool) -> PodSpec {
    let init_containers = spec
        .init_containers
        .as_ref()
        .filter(|_| keep_container_names)
        .map(|containers| {
            containers
                .iter()
                .map(|c| Container {
                    name: c.name.clone(),
                    ..Container::default()
                })
                .collect()
        });
    PodSpec {
        node_name: spec.node_name.clone(),
        init_containers,
        ..PodSpec::default()
    }
}

/// Leaves a succeeded pod's status with its phase alone. Conditions and container statuses
/// serve failure classification (§8.7), in-flight evidence (§8.10) and the interrupt budget
/// (§8.16), which read failed and unfinished pods only, while a rollout keeps every succeeded
/// stage pod until its Job's TTL.
pub fn trim_succeeded_pod_status(pod: &mut Pod) {
    if let Some(status) = pod.status.as_mut()
        && status.phase.as_deref() == Some("Succeeded")
    {
        *status = PodStatus {
            phase: status.phase.take(),
            ..PodStatus::default()
        };
    }
}

/// Leaves a succeeded Job whose outcome is recorded (§8.8) with what the passes read of it:
/// its labels, its `package` annotation and marker (the rerun predicate and the sweeps,
/// §8.14), and its conditions' types, statuses and reasons. Its digests and resource id
/// serve parked, unfinished and unprocessed Jobs only, its times and counts completion
/// processing, and its owner the garbage collector, while a rollout keeps one such Job per
/// stage and node until its TTL.
pub fn trim_recorded_success(job: &mut Job) {
    use nodewright_schema::keys;
    if !(crate::engine::jobs::is_complete(job) && crate::engine::jobs::is_processed(job)) {
        return;
    }
    job.metadata.owner_references = None;
    if let Some(annotations) = job.metadata.annotations.as_mut() {
        annotations.retain(|key, _| {
            key == keys::JOB_ANNOTATION_PACKAGE || key == keys::JOB_ANNOTATION_STATE_RECORDED
        });
    }
    if let Some(status) = job.status.as_mut() {
        let conditions = status.conditions.take().map(|conditions| {
            conditions
                .into_iter()
                .map(|c| JobCondition {
                    type_: c.type_,
                    status: c.status,
                    reason: c.reason,
                    ..JobCondition::default()
                })
                .collect()
        });
        *status = JobStatus {
            conditions,
            ..JobStatus::default()
        };
    }
}

/// The world as one pass sees it.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// The pass's "now" (virtual in the simulator).
    pub now: Timestamp,
    /// Every NodeWright (including ones being deleted). Shared like `nodes`: an adapter hands
    /// over its cache's allocation, and a status of thousands of nodes is not copied per pass.
    pub nodewrights: Vec<Arc<NodeWright>>,
    /// Every DeploymentPolicy.
    pub policies: Vec<DeploymentPolicy>,
    /// Every Node. Shared, so an adapter hands over the same allocation for a node that did
    /// not change since its last snapshot, as a cheap first answer to "nothing changed" (a
    /// writer must `Arc::make_mut`, which copies while the cache still holds the old one); a
    /// new allocation of the same uid and resourceVersion, as after a relist, is the same
    /// version to the engine's cache too.
    pub nodes: Vec<Arc<Node>>,
    /// Jobs in the operator namespace carrying the NodeWright `name` label. Shared like
    /// `nodes`: an unchanged Job is the same allocation from snapshot to snapshot, so what a
    /// pass derives from it (its labels resolved, its package, its pods) carries over.
    pub jobs: Vec<Arc<Job>>,
    /// Pods the lifecycle looks at: package pods in the operator namespace, and workload pods
    /// bound to nodes (for drain classification and the non-interrupt barrier). Shared like
    /// `nodes`, for the same reason: an unchanged pod is the same allocation from snapshot to
    /// snapshot, which the engine's cache recognises.
    pub pods: Vec<Arc<Pod>>,
    /// ConfigMaps in the operator namespace owned by NodeWrights. Shared like `nodes`: the
    /// adapter hands over its cache's allocations instead of copying every ConfigMap per pass.
    pub config_maps: Vec<Arc<ConfigMap>>,
    /// Approvals from Git: per NodeWright, the batches approved for the rollout in force
    /// (source/approvals.rs decides which values count). Rebuilt from the repository on
    /// restart, like the desired state.
    pub approvals: BTreeMap<String, ApprovedBatches>,
    /// In-memory state carried between passes (lost on restart, by design).
    pub memory: Memory,
}

/// The in-memory timers and observations the spec allows to live outside the cluster
/// (§7.9 PDB throttle, §8.9 FailureTarget grace). A restarted reconciler starts empty.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Memory {
    /// Per node: the last eviction refusal and the pods it reported blocking.
    pub eviction_refusals: BTreeMap<String, EvictionRefusal>,
    /// Per Job name: when it was first seen at `FailureTarget` without a terminal condition.
    pub failure_target_seen: BTreeMap<String, Timestamp>,
}

/// A refused eviction attempt on one node (§7.9).
#[derive(Clone, Debug, PartialEq)]
pub struct EvictionRefusal {
    /// When the refusal happened.
    pub at: Timestamp,
    /// The NodeWright whose drain attempted the eviction.
    pub nodewright: String,
    /// Pods refused, with the apiserver's message.
    pub blockers: Vec<RefusedPod>,
}

/// One pod whose eviction was refused with HTTP 429 (DisruptionBudget).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusedPod {
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// The apiserver's message, verbatim.
    pub message: String,
}
