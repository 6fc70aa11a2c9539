//! The simulated cluster: a virtual clock and a world of Nodes, Pods, Jobs, ConfigMaps, PDBs,
//! Events and NodeWright/DeploymentPolicy objects, with the Kubernetes controller and kubelet
//! semantics the node lifecycle depends on (ARCHITECTURE §2.2, spec/operator.md §7–§8).
//!
//! Time only moves when [`SimCluster::advance_to`] is called, and then it jumps from one
//! scheduled event to the next (a container finishing, a grace period ending, a node coming
//! back, a Job backoff, deadline or TTL), so idle stretches cost nothing.
//!
//! Layout: this file holds the world and its clock; `nodes`, `workload`, `jobs` and
//! `actions` add the node lifecycle, workload pods with the Eviction API, the Job controller
//! with the kubelet, and the execution of plan actions; `archive` keeps finished Jobs and
//! ended pods compact while no server answers from the world.

mod actions;
pub mod agent;
mod archive;
pub mod history;
pub mod http;
mod jobs;
pub mod logs;
mod nodes;
pub mod packages;
pub mod pods;
mod tracked;
pub mod util;
mod workload;

use std::borrow::Borrow;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crate::job::Job;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use nodewright_schema::{DeploymentPolicy, NodeWright};
use rustc_hash::FxHashMap;

use crate::snapshot::{Memory, Snapshot};

pub use crate::shared::Shared;
pub use actions::FaultWindow;
pub use history::History;
pub use jobs::{has_condition as job_has_condition, is_finished as jobs_is_finished, job_address};
pub use nodes::{NodeInput, is_ready as node_is_ready, node_boot_id, taints as node_taints};
pub use packages::{ContainerRunner, ModelRunner, PackageModel, PackageModels};
pub use workload::{EvictionError, OwnerKind, PdbInput, WorkloadPodInput};

use tracked::Tracked;
use util::Rng;

/// Virtual time at which every simulation starts: 2026-01-01T00:00:00Z.
pub fn epoch() -> Timestamp {
    // 1_767_225_600 s after the Unix epoch is 2026-01-01T00:00:00Z; always in range.
    Timestamp::from_second(1_767_225_600).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// `namespace/name` key of a namespaced object.
pub type Key = (String, String);

/// Something scheduled to happen at a virtual instant.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    /// A container of a package pod finishes (stale when the pod's epoch moved on).
    ContainerDone { pod: Key, epoch: u64 },
    /// An in-place restart (restartPolicy OnFailure) after the kubelet's crash-loop backoff.
    ContainerRestart { pod: Key, epoch: u64 },
    /// The kubelet, back after a reboot, has replaced a pod's dead sandbox and starts its
    /// containers again.
    SandboxRecreated { pod: Key, epoch: u64 },
    /// A pod's `activeDeadlineSeconds` expires.
    PodDeadline { pod: Key, uid: String },
    /// A terminating pod's grace period ends.
    PodGone { pod: Key, uid: String },
    /// A workload pod with `runFor` finishes.
    WorkloadDone { pod: Key, epoch: u64 },
    /// The Job controller looks at a Job again (backoff, deadline).
    JobSync { job: String, uid: String },
    /// A finished Job's TTL expires.
    JobTtl { job: String, uid: String },
    /// A rebooting node comes back.
    NodeBack { node: String, epoch: u64 },
    /// A node has been NotReady for the default toleration time (300 s): the taint manager
    /// evicts the pods that do not tolerate `not-ready:NoExecute` without a time limit.
    NotReadyEviction { node: String, epoch: u64 },
}

/// An Event recorded by the reconciler (or by the simulator).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedEvent {
    /// When.
    pub at: Timestamp,
    /// `Node` or `NodeWright`.
    pub object_kind: String,
    /// Object name.
    pub object: String,
    /// `Normal` or `Warning`.
    pub type_: String,
    /// Reason.
    pub reason: String,
    /// Message.
    pub message: String,
}

/// A violation of a scenario invariant detected while an action was executed (spec/scenarios.md
/// §6: interrupt before drain, uncordon of a foreign cordon, unparsable node annotation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// When.
    pub at: Timestamp,
    /// Which invariant (1–5).
    pub invariant: u8,
    /// What happened.
    pub message: String,
}

/// The simulated cluster.
pub struct SimCluster {
    now: Timestamp,
    resource_version: u64,
    sequence: u64,
    rng: Rng,
    namespace: String,
    nodes: Tracked<String, Shared<Node>>,
    node_rt: HashMap<String, nodes::NodeRt>,
    pods: Tracked<Key, Shared<Pod>>,
    pod_rt: HashMap<Key, workload::PodRt>,
    pods_by_node: HashMap<String, BTreeSet<Key>>,
    pods_by_job: HashMap<String, BTreeSet<Key>>,
    unscheduled: BTreeSet<Key>,
    jobs: Tracked<String, Shared<Job>>,
    job_rt: HashMap<String, jobs::JobRt>,
    config_maps: Tracked<Key, ConfigMap>,
    pdbs: Tracked<Key, PodDisruptionBudget>,
    events: Vec<RecordedEvent>,
    nodewrights: Tracked<String, NodeWright>,
    policies: Tracked<String, DeploymentPolicy>,
    git_annotations: HashMap<String, BTreeSet<String>>,
    timers: BinaryHeap<Reverse<(Timestamp, u64, Timer)>>,
    runner: Box<dyn ContainerRunner>,
    history: History,
    faults: Vec<FaultWindow>,
    dirty_jobs: BTreeSet<String>,
    /// The Jobs the Job controller's last sync found unfinished, by name: the Jobs in flight
    /// the invariants read, without visiting the finished ones a rollout keeps for their TTL.
    unfinished_jobs: BTreeSet<String>,
    /// Finished Jobs whose TTL has run out (name, uid): the TTL controller deletes them as soon
    /// as it sees them, so a zero TTL frees a Job within the write that set it.
    expired_jobs: BTreeSet<(String, String)>,
    violations: Vec<Violation>,
    workload_specs: HashMap<Key, WorkloadPodInput>,
    /// What finished Jobs and ended pods no longer need, while no server answers from the
    /// world (`None` once one does).
    archive: Option<archive::Archive>,
}

impl SimCluster {
    /// An empty cluster at [`epoch`]. `namespace` is the operator namespace (Jobs, ConfigMaps);
    /// `runner` runs package containers; `seed` drives every pseudo-random choice.
    pub fn new(namespace: &str, runner: Box<dyn ContainerRunner>, seed: u64) -> Self {
        SimCluster {
            now: epoch(),
            resource_version: 0,
            sequence: 0,
            rng: Rng::new(seed),
            namespace: namespace.to_string(),
            nodes: Tracked::default(),
            node_rt: HashMap::new(),
            pods: Tracked::default(),
            pod_rt: HashMap::new(),
            pods_by_node: HashMap::new(),
            pods_by_job: HashMap::new(),
            unscheduled: BTreeSet::new(),
            jobs: Tracked::default(),
            job_rt: HashMap::new(),
            config_maps: Tracked::default(),
            pdbs: Tracked::default(),
            events: Vec::new(),
            nodewrights: Tracked::default(),
            policies: Tracked::default(),
            git_annotations: HashMap::new(),
            timers: BinaryHeap::new(),
            runner,
            history: History::default(),
            faults: Vec::new(),
            dirty_jobs: BTreeSet::new(),
            unfinished_jobs: BTreeSet::new(),
            expired_jobs: BTreeSet::new(),
            violations: Vec::new(),
            workload_specs: HashMap::new(),
            archive: Some(archive::Archive::default()),
        }
    }

    /// Current virtual time.
    pub fn now(&self) -> Timestamp {
        self.now
    }
    /// The operator namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }
    /// Every node by name.
    pub fn nodes(&self) -> &BTreeMap<String, Shared<Node>> {
        &self.nodes
    }
    /// Every pod by `(namespace, name)`.
    pub fn pods(&self) -> &BTreeMap<Key, Shared<Pod>> {
        &self.pods
    }
    /// Every Job (operator namespace) by name.
    pub fn jobs(&self) -> &BTreeMap<String, Shared<Job>> {
        &self.jobs
    }
    /// The Jobs the Job controller last found unfinished (neither `Complete` nor `Failed`),
    /// by name.
    pub fn unfinished_jobs(&self) -> impl Iterator<Item = (&String, &Job)> {
        (self.unfinished_jobs.iter()).filter_map(|name| Some((name, &**self.jobs.get(name)?)))
    }
    /// Every ConfigMap by `(namespace, name)`.
    pub fn config_maps(&self) -> &BTreeMap<Key, ConfigMap> {
        &self.config_maps
    }
    /// Every PodDisruptionBudget by `(namespace, name)`.
    pub fn pdbs(&self) -> &BTreeMap<Key, PodDisruptionBudget> {
        &self.pdbs
    }
    /// Every NodeWright by name.
    pub fn nodewrights(&self) -> &BTreeMap<String, NodeWright> {
        &self.nodewrights
    }
    /// Every DeploymentPolicy by name.
    pub fn policies(&self) -> &BTreeMap<String, DeploymentPolicy> {
        &self.policies
    }
    /// Recorded Events, oldest first.
    pub fn events(&self) -> &[RecordedEvent] {
        &self.events
    }
    /// The history log.
    pub fn history(&self) -> &History {
        &self.history
    }
    /// The history so far, which the world then forgets: a caller that summarises a long run
    /// as it goes (a projected rollout) keeps no log of it.
    pub fn take_history(&mut self) -> Vec<history::Entry> {
        self.history.take()
    }
    /// The recorded Events so far, which the world then forgets.
    pub fn take_events(&mut self) -> Vec<RecordedEvent> {
        std::mem::take(&mut self.events)
    }
    /// Records a line that is not an action of the reconciler (`commit …`).
    pub fn record_history(&mut self, line: impl Into<String>) {
        self.history.record(self.now, line);
    }
    /// Invariant violations detected at action time, drained.
    pub fn take_violations(&mut self) -> Vec<Violation> {
        std::mem::take(&mut self.violations)
    }

    /// The pods bound to a node.
    pub fn pods_on(&self, node: &str) -> impl Iterator<Item = &Pod> {
        self.pods_by_node
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|k| self.pods.get(k))
            .map(|p| &**p)
    }

    /// The keys of the pods bound to a node, copied so the caller may change the pods.
    fn pod_keys_on(&self, node: &str) -> Vec<Key> {
        self.pods_by_node
            .get(node)
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    }

    /// The child pods of a Job, by its UID.
    pub fn job_pods(&self, job_uid: &str) -> impl Iterator<Item = &Pod> {
        self.pods_by_job
            .get(job_uid)
            .into_iter()
            .flatten()
            .filter_map(|k| self.pods.get(k))
            .map(|p| &**p)
    }

    /// The world as one reconcile pass sees it; `memory` is the reconciler's in-memory state.
    pub fn snapshot(&self, memory: Memory) -> Snapshot {
        let mut snapshot = Snapshot {
            memory,
            ..Snapshot::default()
        };
        self.refresh_snapshot(&mut snapshot);
        snapshot
    }

    /// Brings a previous snapshot up to date (its `memory` is left alone). Nodes, pods and
    /// Jobs are the world's own allocations ([`Shared`]): an object nothing wrote since the
    /// last snapshot is the same `Arc`, which is what lets the engine's cache recognise it,
    /// and holding one costs no copy. The other kinds are few and are reused while their
    /// resourceVersion did not move.
    pub fn refresh_snapshot(&self, snapshot: &mut Snapshot) {
        let ns = self.namespace.as_str();
        snapshot.now = self.now;
        refresh(&mut snapshot.nodewrights, self.nodewrights.values(), |n| {
            &n.metadata
        });
        refresh(&mut snapshot.policies, self.policies.values(), |p| {
            &p.metadata
        });
        share(&mut snapshot.nodes, self.nodes.values(), |_| true);
        share(&mut snapshot.jobs, self.jobs.values(), |j| {
            j.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(nodewright_schema::keys::JOB_LABEL_NAME))
        });
        share(&mut snapshot.pods, self.pods.values(), |p| {
            p.metadata.namespace.as_deref() == Some(ns)
                || p.spec.as_ref().is_some_and(|s| s.node_name.is_some())
        });
        refresh(
            &mut snapshot.config_maps,
            self.config_maps
                .iter()
                .filter(|((n, _), _)| n == ns)
                .map(|(_, c)| c),
            |c| &c.metadata,
        );
    }

    /// The instant of the next scheduled event, if any.
    pub fn next_event(&self) -> Option<Timestamp> {
        self.timers.peek().map(|Reverse((t, _, _))| *t)
    }

    /// Lets the cluster run until `until`, processing every event due on the way.
    pub fn advance_to(&mut self, until: Timestamp) {
        while self.advance_toward(until, usize::MAX) {}
    }

    /// Lets the cluster run toward `until`, reacting to `steps` of its timers at most (each
    /// a kubelet's or a controller's own write); whether timers due by `until` remain. The
    /// clock reaches `until` once none does.
    pub fn advance_toward(&mut self, until: Timestamp, steps: usize) -> bool {
        let mut fired = 0;
        while let Some(Reverse((t, _, _))) = self.timers.peek() {
            if *t > until {
                break;
            }
            if fired == steps {
                return true;
            }
            let Some(Reverse((t, _, timer))) = self.timers.pop() else {
                break;
            };
            if t > self.now {
                self.now = t;
            }
            self.fire(timer);
            self.settle();
            fired += 1;
        }
        if until > self.now {
            self.now = until;
        }
        self.settle();
        false
    }

    /// Lets the cluster run for `d`.
    pub fn advance(&mut self, d: Duration) {
        self.advance_to(util::add(self.now, d));
    }

    fn schedule(&mut self, at: Timestamp, timer: Timer) {
        self.sequence += 1;
        self.timers
            .push(Reverse((at.max(self.now), self.sequence, timer)));
    }

    fn fire(&mut self, timer: Timer) {
        match timer {
            Timer::ContainerDone { pod, epoch } => self.container_done(&pod, epoch),
            Timer::ContainerRestart { pod, epoch } => self.container_restart(&pod, epoch),
            Timer::SandboxRecreated { pod, epoch } => self.sandbox_recreated(&pod, epoch),
            Timer::PodDeadline { pod, uid } => self.pod_deadline(&pod, &uid),
            Timer::PodGone { pod, uid } => self.pod_gone(&pod, &uid),
            Timer::WorkloadDone { pod, epoch } => self.workload_done(&pod, epoch),
            Timer::JobSync { job, uid } => {
                if self.job_uid(&job).as_deref() == Some(uid.as_str()) {
                    self.dirty_jobs.insert(job);
                }
            }
            Timer::JobTtl { job, uid } => self.job_ttl(&job, &uid),
            Timer::NodeBack { node, epoch } => self.node_back(&node, epoch),
            Timer::NotReadyEviction { node, epoch } => self.not_ready_eviction(&node, epoch),
        }
    }

    /// Runs the controllers until nothing changes: Job syncs and scheduling.
    fn settle(&mut self) {
        for _ in 0..10_000 {
            if let Some(job) = self.dirty_jobs.pop_first() {
                self.sync_job(&job);
                self.note_unfinished(&job);
                self.archive_finished(&job);
                continue;
            }
            if let Some((job, uid)) = self.expired_jobs.pop_first() {
                self.job_ttl(&job, &uid);
                continue;
            }
            break;
        }
        self.schedule_pending();
    }

    /// Records from now on which objects change, for a server that publishes them.
    pub(crate) fn track_changes(&mut self) {
        self.stop_archiving();
        self.nodes.track();
        self.pods.track();
        self.jobs.track();
        self.config_maps.track();
        self.pdbs.track();
        self.nodewrights.track();
        self.policies.track();
    }

    fn next_rv(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }

    fn touch(&mut self, meta: &mut ObjectMeta) {
        meta.resource_version = Some(self.next_rv());
    }

    fn new_meta(&mut self, name: &str, namespace: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_string()),
            namespace: namespace.map(str::to_string),
            uid: Some(self.rng.uid()),
            creation_timestamp: Some(util::time(self.now)),
            resource_version: Some(self.next_rv()),
            ..ObjectMeta::default()
        }
    }

    fn record_event(&mut self, kind: &str, object: &str, type_: &str, reason: &str, msg: &str) {
        self.events.push(RecordedEvent {
            at: self.now,
            object_kind: kind.to_string(),
            object: object.to_string(),
            type_: type_.to_string(),
            reason: reason.to_string(),
            message: msg.to_string(),
        });
    }
}

/// Replaces `old` with the objects of `current`, reusing each old object whose uid and
/// resourceVersion are unchanged. Both sequences come in the world's key order, so one merge
/// walk pairs them without hashing or allocating keys.
fn refresh<'a, S: Clone + 'a, T: From<S> + Borrow<S>>(
    old: &mut Vec<T>,
    current: impl Iterator<Item = &'a S>,
    meta: impl Fn(&S) -> &ObjectMeta,
) {
    fn key(m: &ObjectMeta) -> (&str, &str) {
        (
            m.namespace.as_deref().unwrap_or_default(),
            m.name.as_deref().unwrap_or_default(),
        )
    }
    let mut previous = std::mem::take(old).into_iter().peekable();
    for object in current {
        let m = meta(object);
        while previous
            .peek()
            .is_some_and(|p| key(meta(p.borrow())) < key(m))
        {
            previous.next();
        }
        let reused = previous.next_if(|p| {
            let pm = meta(p.borrow());
            key(pm) == key(m) && pm.uid == m.uid && pm.resource_version == m.resource_version
        });
        old.push(reused.unwrap_or_else(|| T::from(object.clone())));
    }
}

/// Replaces `old`, the last snapshot this world refreshed, with the world's own allocations of
/// the `current` objects that `admit` accepts. An object that snapshot holds is the same
/// allocation only while unchanged (a write copies what a snapshot holds), so it was accepted
/// then and is handed on as it is: the tens of thousands of Jobs and pods a rollout keeps are
/// not read again on every pass.
fn share<'a, T: 'a>(
    old: &mut Vec<Arc<T>>,
    current: impl Iterator<Item = &'a Shared<T>>,
    admit: impl Fn(&T) -> bool,
) {
    let mut last: FxHashMap<*const T, Arc<T>> =
        old.drain(..).map(|o| (Arc::as_ptr(&o), o)).collect();
    for object in current {
        match last.remove(&object.as_ptr()) {
            Some(held) => old.push(held),
            None if admit(object) => old.push(object.arc()),
            None => {}
        }
    }
}

impl std::fmt::Debug for SimCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimCluster")
            .field("now", &self.now)
            .field("nodes", &self.nodes.len())
            .field("pods", &self.pods.len())
            .field("jobs", &self.jobs.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
