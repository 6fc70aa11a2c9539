//! Pods: workload pods and their owners, graceful deletion, the Eviction API with
//! PodDisruptionBudgets, the scheduler and the taint manager.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus,
    EmptyDirVolumeSource, Pod, PodCondition, PodSpec, PodStatus, Toleration, Volume,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use nodewright_schema::keys;
use nodewright_schema::selector::{self, Selector};
use nodewright_schema::toleration;

use super::nodes::{is_ready, is_schedulable, taints};
use super::packages::ContainerResult;
use super::util;
use super::{Key, Shared, SimCluster, Timer};
use crate::snapshot::pod_has_ended;

/// Who owns a workload pod (spec/scenarios.md §2 `owner`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnerKind {
    /// Recreated at once under a new name, scheduled anywhere that fits.
    ReplicaSet,
    /// Recreated under the same name once the old pod is gone.
    StatefulSet,
    /// Recreated on the same node once the old pod is gone.
    DaemonSet,
    /// A Job's pod: recreated at once under a new name.
    Job,
    /// A static pod's mirror (owner kind Node): the kubelet recreates it at once.
    Mirror,
    /// Unmanaged: gone once deleted.
    None,
}

impl OwnerKind {
    /// Parses the scenario spelling.
    pub fn parse(text: &str) -> Option<OwnerKind> {
        Some(match text {
            "ReplicaSet" => OwnerKind::ReplicaSet,
            "StatefulSet" => OwnerKind::StatefulSet,
            "DaemonSet" => OwnerKind::DaemonSet,
            "Job" => OwnerKind::Job,
            "Node" | "Mirror" | "mirror" => OwnerKind::Mirror,
            "none" | "None" | "" => OwnerKind::None,
            _ => return None,
        })
    }
    fn kind(self) -> Option<&'static str> {
        match self {
            OwnerKind::ReplicaSet => Some("ReplicaSet"),
            OwnerKind::StatefulSet => Some("StatefulSet"),
            OwnerKind::DaemonSet => Some("DaemonSet"),
            OwnerKind::Job => Some("Job"),
            OwnerKind::Mirror => Some("Node"),
            OwnerKind::None => None,
        }
    }
}

/// A workload pod as a scenario declares it.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadPodInput {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Node it is bound to (unbound pods are scheduled).
    pub node: Option<String>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Owner kind.
    pub owner: OwnerKind,
    /// Tolerations.
    pub tolerations: Vec<Toleration>,
    /// Whether it has an emptyDir volume.
    pub empty_dir: bool,
    /// Finishes (Succeeded) after this long; `None` runs until evicted.
    pub run_for: Option<Duration>,
    /// `terminationGracePeriodSeconds` (default 30).
    pub grace_seconds: Option<i64>,
}

/// A PodDisruptionBudget as a scenario declares it.
#[derive(Clone, Debug, PartialEq)]
pub struct PdbInput {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Pod selector.
    pub selector: BTreeMap<String, String>,
    /// `minAvailable` (int or percent).
    pub min_available: Option<IntOrString>,
    /// `maxUnavailable` (int or percent).
    pub max_unavailable: Option<IntOrString>,
}

/// Why an eviction did not happen.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvictionError {
    /// No such pod (404).
    #[error("pods \"{0}\" not found")]
    NotFound(String),
    /// 429 with a DisruptionBudget cause.
    #[error("{message} ({cause})")]
    Refused {
        /// The status message.
        message: String,
        /// The DisruptionBudget cause text.
        cause: String,
    },
    /// 500: the pod matches more than one PDB.
    #[error("{0}")]
    MultiplePdbs(String),
}

/// The apiserver's message for a PDB refusal.
pub const PDB_REFUSAL_MESSAGE: &str =
    "Cannot evict pod as it would violate the pod's disruption budget.";

/// Simulator-side pod state.
#[derive(Clone, Debug)]
pub(super) struct PodRt {
    /// Bumped whenever execution is interrupted, making pending timers stale.
    pub epoch: u64,
    pub kind: PodKind,
    /// The Job controller has accounted this pod's terminal phase.
    pub counted: bool,
    /// Deleted by the Job controller itself (suspend, deadline, limit): not a failure.
    pub controller_deleted: bool,
    /// Boot id of the node when this pod fired a reboot.
    pub reboot_fired_boot: Option<String>,
    /// Killed by a reboot; restarts in place when the node returns.
    pub restart_on_boot: bool,
    /// Index of the running container (init containers, then the main containers).
    pub container: usize,
    /// Result of the running container, applied when it finishes.
    pub pending: Option<ContainerResult>,
    /// The kubelet has acknowledged the pod.
    pub started: bool,
    /// Container output, by container name (`pods/log`).
    pub logs: super::logs::PodLogs,
}

#[derive(Clone, Debug)]
pub(super) enum PodKind {
    Job {
        job: String,
        uid: String,
    },
    Workload {
        owner: OwnerKind,
        base: String,
        run_for: Option<Duration>,
    },
    /// Created through the API: run by the Job pods' kubelet, main containers kept running.
    Api,
}

impl PodRt {
    pub fn new(kind: PodKind) -> Self {
        PodRt {
            epoch: 0,
            kind,
            counted: false,
            controller_deleted: false,
            reboot_fired_boot: None,
            restart_on_boot: false,
            container: 0,
            pending: None,
            started: false,
            logs: Default::default(),
        }
    }
}

/// Pod phase.
pub fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

/// The grace period a deletion with `requested` gives the pod (the request's, else the pod's
/// `terminationGracePeriodSeconds`, else 30 s), or `None` when the pod disappears at once:
/// terminal, never bound to a node, or a grace period of zero.
fn termination_grace(pod: &Pod, requested: Option<i64>) -> Option<i64> {
    let grace = requested
        .or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
        })
        .unwrap_or(30)
        .max(0);
    let bound = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_ref())
        .is_some();
    (bound && grace > 0 && !pod_has_ended(pod)).then_some(grace)
}

/// Ready for a PodDisruptionBudget: running, not terminating, its `Ready` condition true.
fn is_pod_ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none() && phase(pod) == "Running" && has_ready_condition(pod)
}

/// Whether the pod's `Ready` condition is `True`.
pub(super) fn has_ready_condition(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

pub(super) fn set_pod_condition(
    pod: &mut Pod,
    type_: &str,
    status: &str,
    reason: Option<&str>,
    message: Option<&str>,
    now: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) {
    let st = pod.status.get_or_insert_with(PodStatus::default);
    let conditions = st.conditions.get_or_insert_with(Vec::new);
    let cond = PodCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.map(str::to_string),
        message: message.map(str::to_string),
        last_transition_time: Some(now.clone()),
        ..PodCondition::default()
    };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => *c = cond,
        None => conditions.push(cond),
    }
}

fn int_or_percent(value: &IntOrString, total: i32) -> i32 {
    match value {
        IntOrString::Int(i) => *i,
        IntOrString::String(s) => {
            let pct: i64 = s.trim_end_matches('%').parse().unwrap_or(0);
            // Kubernetes rounds up for PDBs (GetScaledValueFromIntOrPercent(…, true)).
            ((pct * i64::from(total) + 99) / 100) as i32
        }
    }
}

impl SimCluster {
    /// Adds a workload pod (bound when `node` is set, else scheduled).
    pub fn add_workload_pod(&mut self, input: WorkloadPodInput) {
        let base = input.name.clone();
        self.create_workload_pod(&input, &input.name.clone(), input.node.clone(), &base);
        self.settle();
    }

    fn create_workload_pod(
        &mut self,
        input: &WorkloadPodInput,
        name: &str,
        node: Option<String>,
        base: &str,
    ) {
        let mut meta = self.new_meta(name, Some(&input.namespace));
        meta.labels = Some(input.labels.clone());
        let mut tolerations = input.tolerations.clone();
        if let Some(kind) = input.owner.kind() {
            meta.owner_references = Some(vec![OwnerReference {
                api_version: if kind == "Node" {
                    "v1"
                } else if kind == "Job" {
                    "batch/v1"
                } else {
                    "apps/v1"
                }
                .into(),
                kind: kind.into(),
                name: if kind == "Node" {
                    node.clone().unwrap_or_default()
                } else {
                    base.to_string()
                },
                uid: util::seed_from(&format!("{}/{base}", input.namespace)).to_string(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]);
        }
        if input.owner == OwnerKind::Mirror {
            meta.annotations = Some(
                [(
                    keys::MIRROR_POD_ANNOTATION.to_string(),
                    "mirror".to_string(),
                )]
                .into(),
            );
        }
        if input.owner == OwnerKind::DaemonSet {
            // The DaemonSet controller adds these to every pod it creates.
            for (key, effect) in [
                (keys::TAINT_NOT_READY, "NoExecute"),
                (keys::TAINT_UNREACHABLE, "NoExecute"),
                (keys::TAINT_UNSCHEDULABLE, "NoSchedule"),
            ] {
                tolerations.push(Toleration {
                    key: Some(key.into()),
                    operator: Some("Exists".into()),
                    effect: Some(effect.into()),
                    ..Toleration::default()
                });
            }
        }
        let pod = Pod {
            metadata: meta,
            spec: Some(PodSpec {
                node_name: node.clone(),
                tolerations: Some(tolerations),
                termination_grace_period_seconds: Some(input.grace_seconds.unwrap_or(30)),
                restart_policy: Some(
                    if input.run_for.is_some() {
                        "OnFailure"
                    } else {
                        "Always"
                    }
                    .into(),
                ),
                containers: vec![Container {
                    name: "main".into(),
                    image: Some("example/workload:latest".into()),
                    ..Container::default()
                }],
                volumes: input.empty_dir.then(|| {
                    vec![Volume {
                        name: "scratch".into(),
                        empty_dir: Some(EmptyDirVolumeSource::default()),
                        ..Volume::default()
                    }]
                }),
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: Some("Pending".into()),
                ..PodStatus::default()
            }),
        };
        let key = (input.namespace.clone(), name.to_string());
        let rt = PodRt::new(PodKind::Workload {
            owner: input.owner,
            base: base.to_string(),
            run_for: input.run_for,
        });
        self.workload_specs.insert(key.clone(), input.clone());
        self.insert_pod(key.clone(), pod, rt);
        if node.is_some() {
            self.kubelet_admit(&key);
        }
    }

    pub(super) fn insert_pod(&mut self, key: Key, pod: Pod, rt: PodRt) {
        match pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
            Some(node) => {
                self.pods_by_node
                    .entry(node)
                    .or_default()
                    .insert(key.clone());
            }
            None => {
                self.unscheduled.insert(key.clone());
            }
        }
        if let PodKind::Job { uid, .. } = &rt.kind {
            self.pods_by_job
                .entry(uid.clone())
                .or_default()
                .insert(key.clone());
        }
        self.pods.insert(key.clone(), Shared::new(pod));
        self.pod_rt.insert(key, rt);
    }

    fn remove_pod(&mut self, key: &Key) -> Option<(Pod, PodRt)> {
        let pod = self.pods.remove(key)?;
        let rt = self.pod_rt.remove(key)?;
        self.forget_archived(pod.metadata.uid.as_deref().unwrap_or_default());
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_ref())
            && let Some(set) = self.pods_by_node.get_mut(node)
        {
            set.remove(key);
        }
        self.unscheduled.remove(key);
        if let PodKind::Job { job, uid } = &rt.kind {
            if let Some(set) = self.pods_by_job.get_mut(uid) {
                set.remove(key);
            }
            self.dirty_jobs.insert(job.clone());
        }
        Some((pod.into_inner(), rt))
    }

    /// The kubelet acknowledges a bound pod when its node is Ready.
    pub(super) fn kubelet_admit(&mut self, key: &Key) {
        let Some(pod) = self.pods.get(key) else {
            return;
        };
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            return;
        };
        if !self.nodes.get(&node).is_some_and(|n| is_ready(n))
            || pod_has_ended(pod)
            || pod.metadata.deletion_timestamp.is_some()
        {
            return;
        }
        match self.pod_rt.get(key).map(|r| r.kind.clone()) {
            Some(PodKind::Job { .. } | PodKind::Api) => self.job_pod_start(key),
            Some(PodKind::Workload { run_for, .. }) => self.workload_start(key, run_for),
            None => {}
        }
    }

    fn workload_start(&mut self, key: &Key, run_for: Option<Duration>) {
        let now = util::time(self.now);
        let Some(rt) = self.pod_rt.get_mut(key) else {
            return;
        };
        rt.started = true;
        rt.restart_on_boot = false;
        let epoch = rt.epoch;
        if let Some(pod) = self.pods.get_mut(key) {
            let st = pod.status.get_or_insert_with(PodStatus::default);
            st.phase = Some("Running".into());
            if st.start_time.is_none() {
                st.start_time = Some(now.clone());
            }
            let restarts = st
                .container_statuses
                .as_ref()
                .and_then(|c| c.first())
                .map(|c| c.restart_count)
                .unwrap_or(0);
            st.container_statuses = Some(vec![ContainerStatus {
                name: "main".into(),
                ready: true,
                restart_count: restarts,
                started: Some(true),
                image: "example/workload:latest".into(),
                image_id: String::new(),
                state: Some(ContainerState {
                    running: Some(ContainerStateRunning {
                        started_at: Some(now.clone()),
                    }),
                    ..ContainerState::default()
                }),
                ..ContainerStatus::default()
            }]);
            set_pod_condition(pod, "Ready", "True", None, None, &now);
        }
        self.bump_pod(key);
        if let Some(d) = run_for {
            self.schedule(
                util::add(self.now, d),
                Timer::WorkloadDone {
                    pod: key.clone(),
                    epoch,
                },
            );
        }
    }

    pub(super) fn workload_done(&mut self, key: &Key, epoch: u64) {
        if self.pod_rt.get(key).is_none_or(|r| r.epoch != epoch) {
            return;
        }
        let now = util::time(self.now);
        if let Some(pod) = self.pods.get_mut(key) {
            if pod.metadata.deletion_timestamp.is_some() {
                return;
            }
            let st = pod.status.get_or_insert_with(PodStatus::default);
            st.phase = Some("Succeeded".into());
            terminate_containers(st, 0, "Completed", &now);
            set_pod_condition(pod, "Ready", "False", Some("PodCompleted"), None, &now);
        }
        self.bump_pod(key);
    }

    pub(super) fn bump_pod(&mut self, key: &Key) {
        let rv = self.next_rv();
        if let Some(pod) = self.pods.get_mut(key) {
            pod.metadata.resource_version = Some(rv);
        }
    }

    /// Deletes a pod as an outside party or the API would (graceful).
    pub fn delete_pod(&mut self, namespace: &str, name: &str, grace: Option<i64>) -> bool {
        let key = (namespace.to_string(), name.to_string());
        if !self.pods.contains_key(&key) {
            return false;
        }
        self.delete_pod_graceful(&key, grace, None, false);
        self.settle();
        true
    }

    /// The pod as a graceful deletion with `grace` would leave it, without deleting it: with
    /// its deletionTimestamp and grace period while it terminates, `None` when it would
    /// disappear at once (what a dry-run DELETE answers).
    pub fn pod_after_deletion(&self, key: &Key, grace: Option<i64>) -> Option<Pod> {
        let pod = self.pods.get(key)?;
        if pod.metadata.deletion_timestamp.is_some() {
            return Some((**pod).clone());
        }
        let grace = termination_grace(pod, grace)?;
        let mut pod = (**pod).clone();
        let until = util::add(self.now, Duration::from_secs(grace.unsigned_abs()));
        pod.metadata.deletion_timestamp = Some(util::time(until));
        pod.metadata.deletion_grace_period_seconds = Some(grace);
        Some(pod)
    }

    /// Whether an eviction of the pod would be allowed now: 404 for a missing pod, a
    /// refusal when its PodDisruptionBudget allows no disruption. A pod already terminating
    /// may always be evicted (the eviction changes nothing).
    pub fn check_eviction(&self, namespace: &str, name: &str) -> Result<(), EvictionError> {
        let key = (namespace.to_string(), name.to_string());
        let Some(pod) = self.pods.get(&key) else {
            return Err(EvictionError::NotFound(name.to_string()));
        };
        if pod.metadata.deletion_timestamp.is_some() || pod_has_ended(pod) {
            return Ok(());
        }
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let matching: Vec<Key> = self
            .pdbs
            .iter()
            .filter(|((ns, _), pdb)| {
                ns == namespace
                    && pdb
                        .spec
                        .as_ref()
                        .and_then(|s| s.selector.as_ref())
                        .is_some_and(|sel| selector::matches(Some(sel), &labels))
            })
            .map(|(k, _)| k.clone())
            .collect();
        if matching.len() > 1 {
            return Err(EvictionError::MultiplePdbs(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.".into(),
            ));
        }
        let Some(pdb_key) = matching.first() else {
            return Ok(());
        };
        let (healthy, desired) = self.pdb_health(pdb_key);
        let allowed = if is_pod_ready(pod) {
            healthy - desired > 0
        } else {
            healthy >= desired
        };
        if allowed {
            return Ok(());
        }
        Err(EvictionError::Refused {
            message: PDB_REFUSAL_MESSAGE.into(),
            cause: format!(
                "The disruption budget {} needs {desired} healthy pods and has {healthy} currently",
                pdb_key.1
            ),
        })
    }

    /// Graceful deletion: a running pod gets a deletionTimestamp and disappears after its
    /// grace period; a terminal or never-started pod disappears at once.
    pub(super) fn delete_pod_graceful(
        &mut self,
        key: &Key,
        grace: Option<i64>,
        disruption: Option<(&str, &str)>,
        by_controller: bool,
    ) {
        let now_t = util::time(self.now);
        let Some(pod) = self.pods.get_mut(key) else {
            return;
        };
        if pod.metadata.deletion_timestamp.is_some() {
            return;
        }
        let lingers = termination_grace(pod, grace);
        if let Some((reason, message)) = disruption
            && !pod_has_ended(pod)
        {
            set_pod_condition(
                pod,
                "DisruptionTarget",
                "True",
                Some(reason),
                Some(message),
                &now_t,
            );
        }
        if let Some(rt) = self.pod_rt.get_mut(key) {
            rt.controller_deleted |= by_controller;
        }
        let Some(grace) = lingers else {
            self.finish_pod(key);
            self.drop_pod(key);
            return;
        };
        let until = util::add(self.now, Duration::from_secs(grace.unsigned_abs()));
        if let Some(pod) = self.pods.get_mut(key) {
            pod.metadata.deletion_timestamp = Some(util::time(until));
            pod.metadata.deletion_grace_period_seconds = Some(grace);
            set_pod_condition(pod, "Ready", "False", None, None, &now_t);
        }
        if let Some(rt) = self.pod_rt.get_mut(key) {
            rt.epoch += 1;
            rt.pending = None;
        }
        self.bump_pod(key);
        let uid = self
            .pods
            .get(key)
            .and_then(|p| p.metadata.uid.clone())
            .unwrap_or_default();
        self.schedule(
            until,
            Timer::PodGone {
                pod: key.clone(),
                uid,
            },
        );
        self.replace_early(key);
    }

    /// Removes a pod at once (pod GC), marking it failed first so its Job counts it.
    pub(super) fn kill_pod_now(&mut self, key: &Key, disruption: Option<(&str, &str)>) {
        let now = util::time(self.now);
        if let Some(pod) = self.pods.get_mut(key)
            && let Some((reason, message)) = disruption
            && !pod_has_ended(pod)
        {
            set_pod_condition(
                pod,
                "DisruptionTarget",
                "True",
                Some(reason),
                Some(message),
                &now,
            );
        }
        self.finish_pod(key);
        self.drop_pod(key);
    }

    pub(super) fn pod_gone(&mut self, key: &Key, uid: &str) {
        if self.pods.get(key).and_then(|p| p.metadata.uid.as_deref()) != Some(uid) {
            return;
        }
        self.finish_pod(key);
        self.drop_pod(key);
    }

    /// A pod that stops while not terminal ends Failed (killed), and its Job accounts it.
    fn finish_pod(&mut self, key: &Key) {
        let now = util::time(self.now);
        let is_job = matches!(
            self.pod_rt.get(key).map(|r| &r.kind),
            Some(PodKind::Job { .. })
        );
        if let Some(pod) = self.pods.get_mut(key)
            && !pod_has_ended(pod)
        {
            let st = pod.status.get_or_insert_with(PodStatus::default);
            st.phase = Some("Failed".into());
            terminate_running(st, 137, "Error", &now);
        }
        if is_job {
            self.job_pod_terminal(key);
        }
    }

    /// Removes the object and lets owners replace it.
    fn drop_pod(&mut self, key: &Key) {
        let Some((pod, rt)) = self.remove_pod(key) else {
            return;
        };
        if let PodKind::Workload { owner, base, .. } = rt.kind
            && let Some(input) = self.workload_specs.remove(key)
        {
            let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
            match owner {
                OwnerKind::StatefulSet => self.create_workload_pod(&input, &key.1, None, &base),
                OwnerKind::DaemonSet => {
                    if node.as_ref().is_some_and(|n| self.nodes.contains_key(n)) {
                        let name = format!("{base}-{}", self.rng.suffix());
                        self.create_workload_pod(&input, &name, node, &base);
                    }
                }
                OwnerKind::Mirror => {
                    if node.as_ref().is_some_and(|n| self.nodes.contains_key(n)) {
                        self.create_workload_pod(&input, &key.1, node, &base);
                    }
                }
                OwnerKind::ReplicaSet | OwnerKind::Job | OwnerKind::None => {}
            }
        }
    }

    /// ReplicaSets (and Jobs with the default replacement policy) replace a pod as soon as it
    /// starts terminating.
    fn replace_early(&mut self, key: &Key) {
        let Some(PodKind::Workload { owner, base, .. }) =
            self.pod_rt.get(key).map(|r| r.kind.clone())
        else {
            return;
        };
        if matches!(owner, OwnerKind::ReplicaSet | OwnerKind::Job)
            && let Some(input) = self.workload_specs.get(key).cloned()
        {
            let name = format!("{base}-{}", self.rng.suffix());
            self.create_workload_pod(&input, &name, None, &base);
        }
    }

    /// What the namespace controller does in a namespace being deleted: the owners of its
    /// workload pods go first (so no pod is replaced), then its pods terminate gracefully and
    /// its Jobs (when it is the operator namespace), ConfigMaps and PodDisruptionBudgets are
    /// deleted.
    pub fn delete_namespace_contents(&mut self, namespace: &str) {
        let in_namespace = |(ns, _): &Key| ns == namespace;
        self.workload_specs.retain(|key, _| !in_namespace(key));
        let from = (namespace.to_string(), String::new());
        let pods: Vec<Key> = self
            .pods
            .range(from.clone()..)
            .map(|(key, _)| key)
            .take_while(|key| in_namespace(key))
            .cloned()
            .collect();
        for key in pods {
            self.delete_pod_graceful(&key, None, None, false);
        }
        if namespace == self.namespace {
            let jobs: Vec<String> = self.jobs.keys().cloned().collect();
            for name in jobs {
                self.delete_job(&name, None);
            }
        }
        let pdbs: Vec<Key> = self
            .pdbs
            .range(from.clone()..)
            .map(|(key, _)| key)
            .take_while(|key| in_namespace(key))
            .cloned()
            .collect();
        for (ns, name) in pdbs {
            self.delete_pdb(&ns, &name);
        }
        self.config_maps.retain(|key, _| !in_namespace(key));
        self.settle();
    }

    /// The Eviction API (`pods/eviction`): PDB accounting, 429 refusals, graceful deletion
    /// with DisruptionTarget.
    pub fn evict(
        &mut self,
        namespace: &str,
        name: &str,
        grace: Option<i64>,
    ) -> Result<(), EvictionError> {
        self.check_eviction(namespace, name)?;
        let key = (namespace.to_string(), name.to_string());
        if self
            .pods
            .get(&key)
            .is_some_and(|p| p.metadata.deletion_timestamp.is_some())
        {
            return Ok(());
        }
        self.delete_pod_graceful(
            &key,
            grace,
            Some(("EvictionByEvictionAPI", "Eviction API: evicting")),
            false,
        );
        self.settle();
        Ok(())
    }

    /// `(currentHealthy, desiredHealthy)` of a PDB, as the disruption controller computes them.
    pub fn pdb_health(&self, pdb_key: &Key) -> (i32, i32) {
        let Some(pdb) = self.pdbs.get(pdb_key) else {
            return (0, 0);
        };
        let spec = pdb.spec.clone().unwrap_or_default();
        // Parsed once for every pod; an invalid selector matches nothing, as in Kubernetes.
        let selector = Selector::parse(&spec.selector.clone().unwrap_or_default());
        let pods: Vec<&Pod> = self
            .pods
            .iter()
            .filter(|((ns, _), p)| {
                ns == &pdb_key.0
                    && selector.as_ref().is_ok_and(|s| {
                        s.matches(p.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()))
                    })
            })
            .map(|(_, p)| &**p)
            .collect();
        let healthy = pods
            .iter()
            .filter(|p| {
                is_pod_ready(p)
                    && p.spec
                        .as_ref()
                        .and_then(|s| s.node_name.as_ref())
                        .and_then(|n| self.nodes.get(n))
                        .is_some_and(|n| is_ready(n))
            })
            .count() as i32;
        let expected = pods
            .iter()
            .filter(|p| !pod_has_ended(p) && p.metadata.deletion_timestamp.is_none())
            .count() as i32;
        let desired = if let Some(max) = &spec.max_unavailable {
            (expected - int_or_percent(max, expected)).max(0)
        } else if let Some(min) = &spec.min_available {
            int_or_percent(min, expected)
        } else {
            0
        };
        (healthy, desired)
    }

    /// Adds a PodDisruptionBudget.
    pub fn add_pdb(&mut self, input: PdbInput) {
        let meta = self.new_meta(&input.name, Some(&input.namespace));
        let pdb = PodDisruptionBudget {
            metadata: meta,
            spec: Some(PodDisruptionBudgetSpec {
                selector: Some(LabelSelector {
                    match_labels: Some(input.selector),
                    ..LabelSelector::default()
                }),
                min_available: input.min_available,
                max_unavailable: input.max_unavailable,
                ..PodDisruptionBudgetSpec::default()
            }),
            status: None,
        };
        self.pdbs.insert((input.namespace, input.name), pdb);
    }

    /// Deletes a PodDisruptionBudget.
    pub fn delete_pdb(&mut self, namespace: &str, name: &str) -> bool {
        self.pdbs
            .remove(&(namespace.to_string(), name.to_string()))
            .is_some()
    }

    /// The scheduler: binds each unbound pod to a schedulable node whose NoSchedule and
    /// NoExecute taints it tolerates (fewest pods first, then by name); others stay Pending.
    pub(super) fn schedule_pending(&mut self) {
        if self.unscheduled.is_empty() {
            return;
        }
        let pending: Vec<Key> = self.unscheduled.iter().cloned().collect();
        for key in pending {
            let Some(pod) = self.pods.get(&key) else {
                continue;
            };
            if pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let tolerations = pod
                .spec
                .as_ref()
                .and_then(|s| s.tolerations.clone())
                .unwrap_or_default();
            let best = self
                .nodes
                .iter()
                .filter(|(_, n)| is_schedulable(n))
                .filter(|(_, n)| {
                    taints(n)
                        .iter()
                        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
                        .all(|t| toleration::tolerated(&tolerations, t))
                })
                .min_by_key(|(name, _)| {
                    (
                        self.pods_by_node.get(*name).map_or(0, |s| s.len()),
                        (*name).clone(),
                    )
                })
                .map(|(name, _)| name.clone());
            let Some(node) = best else { continue };
            self.unscheduled.remove(&key);
            if let Some(pod) = self.pods.get_mut(&key) {
                pod.spec.get_or_insert_with(PodSpec::default).node_name = Some(node.clone());
            }
            self.pods_by_node
                .entry(node)
                .or_default()
                .insert(key.clone());
            self.bump_pod(&key);
            self.kubelet_admit(&key);
        }
    }

    /// The taint manager's deletion of one pod: graceful, with the DisruptionTarget reason the
    /// real taint manager sets.
    pub(super) fn evict_by_taint_manager(&mut self, key: &Key) {
        self.delete_pod_graceful(
            key,
            None,
            Some((
                "DeletionByTaintManager",
                "Taint manager: deleting due to NoExecute taint",
            )),
            false,
        );
    }

    /// The taint manager: pods that do not tolerate a NoExecute taint of their node are
    /// deleted with DisruptionTarget. The lifecycle controller's not-ready taint is left to
    /// the default 300 s toleration every pod gets at admission, longer than any reboot here.
    pub(super) fn taint_manager(&mut self, node: &str) {
        let Some(n) = self.nodes.get(node) else {
            return;
        };
        let no_execute: Vec<_> = taints(n)
            .iter()
            .filter(|t| {
                t.effect == "NoExecute"
                    && t.key != keys::TAINT_NOT_READY
                    && t.key != keys::TAINT_UNREACHABLE
            })
            .cloned()
            .collect();
        if no_execute.is_empty() {
            return;
        }
        let keys_on = self.pod_keys_on(node);
        for key in keys_on {
            let Some(pod) = self.pods.get(&key) else {
                continue;
            };
            if pod_has_ended(pod) || pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let tolerations = pod
                .spec
                .as_ref()
                .and_then(|s| s.tolerations.clone())
                .unwrap_or_default();
            if no_execute
                .iter()
                .any(|t| !toleration::tolerated(&tolerations, t))
            {
                self.evict_by_taint_manager(&key);
            }
        }
    }

    /// A node goes down: running containers die.
    pub(super) fn kubelet_node_down(&mut self, key: &Key) {
        let Some(pod) = self.pods.get(key) else {
            return;
        };
        if pod_has_ended(pod) || pod.metadata.deletion_timestamp.is_some() {
            return;
        }
        match self.pod_rt.get(key).map(|r| r.kind.clone()) {
            Some(PodKind::Job { .. } | PodKind::Api) => self.job_pod_node_down(key),
            Some(PodKind::Workload { .. }) => {
                let now = util::time(self.now);
                if let Some(rt) = self.pod_rt.get_mut(key) {
                    rt.epoch += 1;
                    rt.restart_on_boot = rt.started;
                }
                if let Some(pod) = self.pods.get_mut(key) {
                    set_pod_condition(pod, "Ready", "False", Some("NodeNotReady"), None, &now);
                }
                self.bump_pod(key);
            }
            None => {}
        }
    }

    /// A node comes back: killed containers restart in place, waiting pods start.
    pub(super) fn kubelet_node_up(&mut self, key: &Key) {
        let Some(rt) = self.pod_rt.get(key) else {
            return;
        };
        let restart = rt.restart_on_boot;
        let started = rt.started;
        match rt.kind.clone() {
            PodKind::Job { .. } | PodKind::Api => {
                if restart {
                    self.job_pod_restart_after_boot(key);
                } else if !started {
                    self.kubelet_admit(key);
                }
            }
            PodKind::Workload { run_for, .. } => {
                if restart {
                    if let Some(st) = self.pods.get_mut(key).and_then(|p| p.status.as_mut())
                        && let Some(c) = st.container_statuses.as_mut().and_then(|c| c.first_mut())
                    {
                        c.restart_count += 1;
                    }
                    self.workload_start(key, run_for);
                } else if !started {
                    self.kubelet_admit(key);
                }
            }
        }
    }
}

/// Marks every running container terminated.
pub(super) fn terminate_running(
    st: &mut PodStatus,
    code: i32,
    reason: &str,
    now: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) {
    for list in [
        st.init_container_statuses.as_mut(),
        st.container_statuses.as_mut(),
    ]
    .into_iter()
    .flatten()
    {
        for c in list.iter_mut() {
            let running = c.state.as_ref().is_some_and(|s| s.running.is_some());
            if running {
                c.state = Some(terminated(code, reason, None, now));
                c.ready = false;
            }
        }
    }
}

fn terminate_containers(
    st: &mut PodStatus,
    code: i32,
    reason: &str,
    now: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) {
    for c in st.container_statuses.iter_mut().flatten() {
        c.state = Some(terminated(code, reason, None, now));
        c.ready = false;
    }
}

/// A terminated container state.
pub(super) fn terminated(
    code: i32,
    reason: &str,
    message: Option<String>,
    now: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: code,
            reason: Some(reason.into()),
            message,
            finished_at: Some(now.clone()),
            ..ContainerStateTerminated::default()
        }),
        ..ContainerState::default()
    }
}
