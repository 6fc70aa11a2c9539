//! The per-pass working state (spec/operator.md §5.3, §5.15).
//!
//! A pass reads the [`Snapshot`] once, works on copies of the few things it may change (node
//! metadata, node-state entries, taints, `unschedulable`, NodeWright status) and turns the
//! differences into one [`NodePatch`] per node and one status patch per NodeWright at the end.
//! Writing through these copies is what keeps the pass from re-asserting values it never
//! changed, which other writers (Job handler, other controllers) may have moved meanwhile.
//!
//! This file holds the pass context ([`PassCtx`]) and its outputs; `working_node.rs` the
//! working copy of one node ([`NodeWork`]); `nodewright_view.rs` one NodeWright as the pass
//! sees it ([`NwView`]); `snap_index.rs` the snapshot's lookup tables ([`SnapIndex`]);
//! `start.rs` how a pass starts from the snapshot and what the cache kept of the last pass.

mod memos;
mod nodewright_view;
mod snap_index;
mod start;
mod working_node;

use std::borrow::Cow;
use std::cell::{Cell, OnceCell, RefCell};
use std::collections::BTreeMap;

// The pass's lookup tables are keyed by object names and UIDs; Fx hashing is deterministic
// (the engine uses no randomness) and several times cheaper than SipHash on short keys.
use rustc_hash::{FxHashMap, FxHashSet};
use std::sync::Arc;
use std::time::Duration;

use crate::job::Job;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, ObjectMeta, Time};
use nodewright_schema::node_state::MalformedNodeState;
use nodewright_schema::{
    DeploymentPolicy, NodeState, NodeWright, NodeWrightStatus, PackageStatus, Status,
};
use nodewright_schema::{keys, names};

use crate::plan::{Action, Event, EventObject, EventType, NodePatch, NodeStateDelta, StatusPatch};
use crate::settings::Settings;
use crate::snapshot::Snapshot;

use super::complete::{CompletionInputs, NodeDigest};
use super::incremental::ObjectVersion;
use super::incremental::job_table::{JobTable, SweptVerdict};
use super::incremental::state_cache::{
    CarriedFacts, CarriedNode, JobMatchMemo, NodeEntry, NodeMemo, NodeMoves, NodeWrightId,
    ParsedState, SelectionCarry, StateCache, VersionId,
};
use super::jobs::{self, JobFacts, PackageAnnotation, PackageJob};
use super::node_map::NodeMap;
use super::write_order::{self, After, Writes};

use crate::engine::sweep::{JobRemoval, SweptJob};
pub use memos::{ExpectedJob, JobComparisons};
pub use nodewright_view::*;
pub use snap_index::*;
pub use working_node::*;

/// Whether a pass goes on after a step (§5.4: several steps end the pass when they write).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Keep going.
    Continue,
    /// Stop the pass here; what was decided so far is written and the pass requeues.
    EndPass,
}

/// What the per-node work of one NodeWright did (§5.5 step 6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeWorkResult {
    /// Something is still pending on this node (waiting at a barrier, Job running, …).
    pub requeue: bool,
}

/// Longest Job label value; longer node names are hashed into the `node` label (§4.7).
const LABEL_MAX: usize = 63;

/// Names of what the pass emitted so far, so "already emitted?" checks do not scan the
/// growing action list once per node (that made dispatch quadratic in the batch size).
#[derive(Debug, Default)]
struct EmittedIndex {
    /// `CreateJob` names.
    created_jobs: FxHashSet<String>,
    /// `node` labels of non-interrupt `CreateJob`s.
    stage_jobs_on: FxHashSet<String>,
    /// `DeleteJob` names.
    deleted_jobs: FxHashSet<String>,
    /// `UpsertConfigMap` names, with their emission index.
    upserted_config_maps: FxHashMap<String, usize>,
    /// Pods an `EvictPod` or `DeletePod` names, as (namespace, name).
    removed_pods: FxHashSet<(String, String)>,
}

impl EmittedIndex {
    fn record(&mut self, action: &Action, at: usize) {
        match action {
            Action::CreateJob(job) => {
                self.created_jobs.insert(job.name().to_string());
                if !job.is_interrupt()
                    && let Some(node) = job.node_label()
                {
                    self.stage_jobs_on.insert(node.into_owned());
                }
            }
            Action::DeleteJob { name, .. } => {
                self.deleted_jobs.insert(name.clone());
            }
            Action::UpsertConfigMap(cm) => {
                if let Some(name) = cm.metadata.name.as_deref() {
                    self.upserted_config_maps.insert(name.to_string(), at);
                }
            }
            Action::EvictPod(pod) | Action::DeletePod(pod) => {
                self.removed_pods
                    .insert((pod.namespace.clone(), pod.name.clone()));
            }
            _ => {}
        }
    }
}

/// The whole working state of one pass.
pub struct PassCtx<'a> {
    /// What the pass reads.
    pub snap: &'a Snapshot,
    /// Operator settings.
    pub settings: &'a Settings,
    /// The pass's "now".
    pub now: Timestamp,
    /// The configured runtime-required taint (§4.4).
    pub runtime_taint: Taint,
    /// The distinct node selectors of the pass with their cache ids, for [`PassCtx::fill_cache`].
    selector_ids: Vec<(Option<&'a LabelSelector>, u64)>,
    /// The node order and the selections by selector id, for [`PassCtx::fill_cache`].
    order: Vec<usize>,
    selections: Vec<(u64, Vec<usize>)>,
    /// Every node by id (index in `snap.nodes`).
    pub nodes: Vec<NodeWork<'a>>,
    /// Where each node went since the last pass, when some node was not where the cache's
    /// last pass had it (see [`StateCache::keep_nodes`]).
    node_moves: Option<NodeMoves>,
    node_ids: FxHashMap<&'a str, usize>,
    /// Nodes whose Job `node` label differs from their name (names over 63 characters), by
    /// label; the first node id wins.
    long_labels: FxHashMap<String, usize>,
    /// Some Job `node` label value maps to more than one node (hashed long names colliding
    /// with each other or with a short name): only a scan can tell them apart.
    label_collision: bool,
    /// NodeWrights sorted by priority, then name.
    pub nws: Vec<NwView<'a>>,
    /// What the last pass derived per NodeWright and selected node, moved out of the cache
    /// for this pass to start from and refill (empty without a cache).
    carries: FxHashMap<NodeWrightId, SelectionCarry>,
    /// Snapshot indexes, built once per pass (lookups by name/UID/node instead of scans).
    pub index: SnapIndex<'a>,
    /// Sweep comparisons remembered across passes (only with a cache).
    pub(super) job_matches: Option<Arc<JobMatchMemo>>,
    actions: Vec<Action>,
    /// What emitted actions rely on (engine/write_order.rs).
    after: Vec<(usize, After)>,
    emitted_index: EmittedIndex,
    /// The settings as the pass's package Jobs carry them to the executor.
    job_settings: OnceCell<Arc<Settings>>,
    events: Vec<Event>,
    requeue_active: bool,
    requeue_after: Option<Duration>,
    errors: Vec<String>,
}

impl<'a> PassCtx<'a> {
    /// The sweep's verdict on `job`, on node `node` of NodeWright `nw` (§8.14): `judge`'s,
    /// or none when the last pass's sweep left the Job alone having judged it from exactly
    /// what this pass would judge it from, which [`SweptJob`] holds whole and
    /// [`SweptVerdict`] names: the same Job version, NodeWright spec and uid, node object (not
    /// written in this pass), and settings. A Job left alone is remembered for the next pass.
    /// A node whose state does not parse has nothing to judge Jobs by.
    pub fn sweep_verdict<S>(
        &mut self,
        nw: usize,
        node: usize,
        job: &'a Job,
        scratch: &mut S,
        judge: fn(&SweptJob<'_>, &mut S) -> Option<JobRemoval>,
    ) -> Option<JobRemoval> {
        if self.swept_before(nw, node, job) {
            return None;
        }
        let verdict = {
            let view = &self.nws[nw];
            let n = &self.nodes[node];
            let state = n.state(view.state_key()).ok()?;
            let package = self.package_annotation(job);
            let comparisons = JobComparisons {
                memo: self.job_matches.as_deref(),
            };
            let seen = SweptJob {
                job,
                facts: self.job_facts(job),
                package: package.as_deref(),
                node: n.name(),
                state,
                nodewright: view.nw,
                settings: self.settings,
                comparisons: &comparisons,
            };
            judge(&seen, scratch)
        };
        if verdict.is_none() {
            self.left_alone(nw, node, job);
        }
        verdict
    }

    /// Whether the last pass's verdict that `job` be left alone still stands; a standing one
    /// is kept for the next pass.
    fn swept_before(&self, nw: usize, node: usize, job: &Job) -> bool {
        let read = &self.index.jobs_read;
        let Some(i) = read.position(job) else {
            return false;
        };
        let Some(swept) = read.swept_before(i) else {
            return false;
        };
        let view = &self.nws[nw];
        let n = &self.nodes[node];
        let standing = n.writes == 0
            && (n.memo.as_ref()).is_some_and(|memo| Arc::ptr_eq(memo, &swept.node))
            && Arc::ptr_eq(&swept.inputs, &view.completion_inputs)
            && swept.nodewright_uid.as_deref() == view.nw.metadata.uid.as_deref();
        if standing {
            read.keep_swept(i);
        }
        standing
    }

    /// Remembers for the next pass that the sweep left `job` alone; nothing is remembered
    /// without a cache, for a Job not in the snapshot, or once the pass wrote the node.
    fn left_alone(&mut self, nw: usize, node: usize, job: &Job) {
        if !self.index.jobs_read.carried() {
            return;
        }
        let Some(i) = self.index.jobs_read.position(job) else {
            return;
        };
        let n = &self.nodes[node];
        let Some(memo) = n.memo.as_ref().filter(|_| n.writes == 0) else {
            return;
        };
        let view = &self.nws[nw];
        let verdict = SweptVerdict {
            nodewright_uid: view.nw.metadata.uid.as_deref().map(Box::from),
            inputs: Arc::clone(&view.completion_inputs),
            node: Arc::clone(memo),
        };
        self.index.jobs_read.record_swept(i, verdict);
    }

    /// The parsed `package` annotation of a Job (§4.7): parsed once per pass for a Job of the
    /// snapshot (every Job the pass reads), on each call for any other.
    pub fn package_annotation(&self, job: &Job) -> Option<Cow<'_, PackageAnnotation>> {
        let read = &self.index.jobs_read;
        match read.position(job) {
            Some(i) => read.package(i).as_ref().as_ref().map(Cow::Borrowed),
            None => jobs::read_package_annotation(job).map(Cow::Owned),
        }
    }

    /// The label, marker and condition facts of a Job: read once per pass for a Job of the
    /// snapshot, on each call for any other.
    pub fn job_facts(&self, job: &'a Job) -> JobFacts<'a> {
        let read = &self.index.jobs_read;
        match read.position(job) {
            Some(i) => read.facts(i),
            None => JobFacts::of(job),
        }
    }

    /// Whether a Job was invalidated (§4.7).
    pub fn job_invalid(&self, job: &Job) -> bool {
        self.package_annotation(job).is_some_and(|p| p.invalid)
    }

    /// `derive`'s evidence (§8.10) from the pod at position `at` of the snapshot in this pass's
    /// operator namespace, `None` when it is quiet. `derive` is a plain function of the pod and
    /// the namespace, so a quiet verdict is remembered per pod object and namespace and the
    /// same object is not read again.
    pub fn pod_evidence<T>(
        &mut self,
        at: usize,
        derive: fn(&'a Pod, &str) -> Option<T>,
    ) -> Option<T> {
        let namespace = &self.settings.namespace;
        if self.index.jobs_read.pod_quiet_before(at, namespace) {
            return None;
        }
        let snap: &'a Snapshot = self.snap;
        let evidence = derive(&snap.pods[at], namespace);
        (self.index.jobs_read).record_pod_quiet(at, namespace, evidence.is_none());
        evidence
    }

    /// Whether any of `job`'s pods is one `prunable` picks (§8.11). `prunable` is a plain
    /// function of the pod, so the answer is remembered while the Job's pods are the objects
    /// judged last pass.
    pub fn any_pod_prunable(&self, job: &Job, prunable: fn(&Pod) -> bool) -> bool {
        let read = &self.index.jobs_read;
        let at = read.position(job);
        if at.is_some_and(|i| read.no_prunable_before(i)) {
            return false;
        }
        let any = self.index.pods_of(job).iter().any(|p| prunable(p));
        if let Some(i) = at {
            read.record_prunable(i, any);
        }
        any
    }

    /// Node id by name.
    pub fn node_id(&self, name: &str) -> Option<usize> {
        self.node_ids.get(name).copied()
    }
    /// The node a Job's `node` label names (§4.7: the node's name, hashed when longer than a
    /// label value may be). A node named exactly `label` wins; when two nodes' labels collide,
    /// the first node in snapshot order whose label value is `label`.
    pub fn node_of_job_label(&self, label: &str) -> Option<usize> {
        if let Some(id) = self.node_id(label) {
            return Some(id);
        }
        if self.label_collision {
            return (0..self.nodes.len())
                .find(|&id| names::node_label_value(self.nodes[id].name) == label);
        }
        self.long_labels.get(label).copied()
    }
    /// Working copy of a node.
    pub fn node(&self, id: usize) -> &NodeWork<'a> {
        &self.nodes[id]
    }
    /// Mutable working copy of a node.
    pub fn node_mut(&mut self, id: usize) -> &mut NodeWork<'a> {
        &mut self.nodes[id]
    }
    /// NodeWright index by name.
    pub fn nw_index(&self, name: &str) -> Option<usize> {
        self.nws.iter().position(|v| v.name == name)
    }

    /// The node's Status for a NodeWright as its annotation reads now (§4.1).
    /// Read many times per node and pass, so remembered until the node is next written.
    pub fn node_status(&self, nw: usize, node: usize) -> Status {
        let view = &self.nws[nw];
        let n = &self.nodes[node];
        let read = || Status::from_annotation(n.annotation(&view.keys.status));
        match view.position(node) {
            Some(p) => {
                let memo = &view.status_memo[p];
                let (at, status) = memo.get();
                if at == n.writes {
                    return status;
                }
                let status = read();
                memo.set((n.writes, status));
                status
            }
            None => read(),
        }
    }

    /// Sets a node's Status for a NodeWright: annotation, label, `status.nodeStatus` and
    /// `status.nodeState` (§5.12). `complete` releases this NodeWright's cordon (§7.3) and
    /// leaves `nodePriority` (§10.1).
    pub fn set_node_status(&mut self, nw: usize, node: usize, status: Status) {
        let key = self.nws[nw].keys.status.clone();
        let value = status.as_str();
        let n = &mut self.nodes[node];
        n.set_annotation(key.clone(), value);
        n.set_label(key, value);
        let node_name = n.name.to_string();
        self.publish_node(nw, node);
        self.nws[nw].publish_status(&node_name, status);
        if status == Status::Complete {
            self.uncordon(nw, node);
            self.remove_from_priority(nw, &node_name);
        }
    }

    /// Refreshes `status.nodeState[node]` from the working node state (§1.9).
    /// Comparing a node's state with its mirror is the costly part, so a node neither written
    /// nor re-mirrored since its last refresh is skipped.
    pub fn publish_node(&mut self, nw: usize, node: usize) {
        let view = &mut self.nws[nw];
        let n = &self.nodes[node];
        let pos = view.position(node);
        if let Some(p) = pos
            && view.published_at[p] == n.writes
        {
            return;
        }
        // The snapshot's mirror was found equal to this parse under this status
        // version in an earlier pass, and neither side moved since: nothing to compare.
        let unwritten = n
            .unwritten_state(view.state_key())
            .filter(|_| view.node_state.untouched(n.name));
        let known_equal = unwritten
            .zip(view.status_version)
            .is_some_and(|(parsed, version)| parsed.mirrored_in(version));
        if !known_equal && let Ok(state) = n.state(view.state_key()) {
            if view.node_state.set(n.name, state) {
                view.node_state_changes += 1;
            } else if let Some((parsed, version)) = unwritten.zip(view.status_version) {
                parsed.remember_mirrored(version);
            }
        }
        if let Some(p) = pos {
            view.published_at[p] = n.writes;
        }
    }

    /// Records a package entry and refreshes `status.nodeState[node]` with it (§1.9). When the
    /// mirror held the node's working state just before, only this entry is mirrored: copying
    /// a state of a thousand packages for each finished Job would make a node's rollout
    /// quadratic in its packages. Returns whether the entry was recorded.
    pub fn record_and_publish_entry(
        &mut self,
        nw: usize,
        node: usize,
        entry: PackageStatus,
    ) -> bool {
        let key = nodewright_schema::node_state::entry_key(&entry.name, &entry.version);
        let in_sync = self.mirror_in_sync(nw, node);
        if !self.record_entry(nw, node, entry) {
            return false;
        }
        self.publish_entry(nw, node, &key, in_sync);
        true
    }

    /// Removes a package entry (keyed `<name>|<version>`) from a node's state and from
    /// `status.nodeState[node]`, mirroring only that entry as
    /// [`PassCtx::record_and_publish_entry`] does.
    pub fn remove_and_publish_entry(&mut self, nw: usize, node: usize, key: &str) {
        let in_sync = self.mirror_in_sync(nw, node);
        let state_key = self.nws[nw].state_key();
        self.nodes[node].remove_entry(state_key, key);
        self.publish_entry(nw, node, key, in_sync);
    }

    /// The node's position among the NodeWright's selected nodes when `status.nodeState[node]`
    /// holds the node's working state.
    fn mirror_in_sync(&self, nw: usize, node: usize) -> Option<usize> {
        self.nws[nw]
            .position(node)
            .filter(|&p| self.nws[nw].published_at[p] == self.nodes[node].writes())
    }

    /// Mirrors the node state's entry `key` into `status.nodeState[node]`: that entry alone
    /// when the mirror held the rest (`in_sync`), the whole state otherwise.
    fn publish_entry(&mut self, nw: usize, node: usize, key: &str, in_sync: Option<usize>) {
        let n = &self.nodes[node];
        let view = &mut self.nws[nw];
        match (in_sync, n.state(view.state_key())) {
            (Some(p), Ok(state)) => {
                let changed = view.node_state.update(n.name, |mirror| match mirror {
                    None => {
                        *mirror = Some(state.clone());
                        true
                    }
                    Some(m) => match state.0.get(key) {
                        Some(e) => m.0.insert(key.to_string(), e.clone()).as_ref() != Some(e),
                        None => m.0.remove(key).is_some(),
                    },
                });
                if changed {
                    view.node_state_changes += 1;
                }
                view.published_at[p] = n.writes;
            }
            _ => self.publish_node(nw, node),
        }
    }

    /// Records a package entry in a node's state for a NodeWright. A malformed state refuses
    /// it and the refusal is an error of the pass (§4.1: a malformed state is never silently
    /// treated as empty); returns whether the entry was recorded.
    pub fn record_entry(&mut self, nw: usize, node: usize, entry: PackageStatus) -> bool {
        let state_key = self.nws[nw].state_key();
        match self.nodes[node].set_entry(state_key, entry) {
            Ok(()) => true,
            Err(e) => {
                let nw_name = self.nws[nw].name;
                let node_name = self.nodes[node].name;
                self.error(format!("node {node_name}, nodewright {nw_name}: {e}"));
                false
            }
        }
    }

    /// Removes a node from `nodePriority`, counting the removal in `nodeOrderOffset` (§5.14).
    pub fn remove_from_priority(&mut self, nw: usize, node: &str) {
        let view = &mut self.nws[nw];
        if !view.node_priority().is_some_and(|p| p.contains_key(node)) {
            return;
        }
        let prio = view.node_priority_mut();
        if let Some(map) = prio.as_mut() {
            map.remove(node);
            if map.is_empty() {
                *prio = None;
            }
        }
        *view.status.node_order_offset.get_or_insert(0) += 1;
    }

    /// Cordons a node for a NodeWright (§7.2): `unschedulable` and `cordon_<nw>`.
    pub fn cordon(&mut self, nw: usize, node: usize) {
        let key = self.nws[nw].keys.cordon.clone();
        let n = &mut self.nodes[node];
        n.set_annotation(key, "true");
        n.set_unschedulable(true);
    }

    /// Releases this NodeWright's cordon under the shared-ownership rules (§7.3).
    pub fn uncordon(&mut self, nw: usize, node: usize) {
        let key = &self.nws[nw].keys.cordon;
        let n = &mut self.nodes[node];
        if n.annotation(key).is_none() {
            return;
        }
        n.remove_annotation(key);
        let others = n.annotations.keys().any(|k| keys::is_cordon_key(k))
            || n.annotations.contains_key(keys::RUNTIME_REQUIRED_CORDON);
        if !others {
            n.set_unschedulable(false);
        }
    }

    /// Queues an action that relies on no other write of the pass (executed in emission
    /// order, before node and status patches).
    pub fn emit(&mut self, action: Action) -> usize {
        let at = self.actions.len();
        self.emitted_index.record(&action, at);
        self.actions.push(action);
        at
    }

    /// Queues an action that is sent only after the given writes of this pass took effect
    /// (engine/write_order.rs); returns its emission index.
    pub fn emit_after(&mut self, action: Action, after: impl IntoIterator<Item = After>) -> usize {
        let at = self.emit(action);
        self.after.extend(after.into_iter().map(|a| (at, a)));
        at
    }

    /// Queues the start of a Job on a node: after the node's entry that records it, and after
    /// the ConfigMaps it mounts when this pass writes them (§6.3, §6.12).
    pub fn create_job(&mut self, node: usize, job: PackageJob) -> usize {
        let mut after = vec![After::Node(self.nodes[node].name.to_string())];
        for name in job.config_maps() {
            if let Some(&at) = self.emitted_index.upserted_config_maps.get(name) {
                after.push(After::Emitted(at));
            }
        }
        self.emit_after(Action::CreateJob(job.into()), after)
    }

    /// The settings a package Job of this pass is built with when it is sent.
    pub fn job_settings(&self) -> Arc<Settings> {
        Arc::clone(
            self.job_settings
                .get_or_init(|| Arc::new(self.settings.clone())),
        )
    }

    /// The emission index of this pass's `UpsertConfigMap` of that name.
    pub fn config_map_upsert(&self, name: &str) -> Option<usize> {
        self.emitted_index.upserted_config_maps.get(name).copied()
    }
    /// Whether this pass already emitted a `CreateJob` with this name.
    pub fn job_created(&self, name: &str) -> bool {
        self.emitted_index.created_jobs.contains(name)
    }
    /// Whether this pass already emitted a non-interrupt `CreateJob` with this `node` label.
    pub fn stage_job_created_on(&self, node_label: &str) -> bool {
        self.emitted_index.stage_jobs_on.contains(node_label)
    }
    /// Whether this pass already emitted a `DeleteJob` with this name.
    pub fn job_deleted(&self, name: &str) -> bool {
        self.emitted_index.deleted_jobs.contains(name)
    }
    /// Whether this pass already asked to evict or delete this pod (§7.7: an eviction in
    /// flight is not sent again).
    pub fn pod_removed(&self, namespace: &str, name: &str) -> bool {
        self.emitted_index
            .removed_pods
            .contains(&(namespace.to_string(), name.to_string()))
    }
    /// Whether this pass already emitted an `UpsertConfigMap` with this name.
    pub fn config_map_upserted(&self, name: &str) -> bool {
        self.emitted_index.upserted_config_maps.contains_key(name)
    }
    /// Records an event.
    pub fn event(
        &mut self,
        object: EventObject,
        kind: EventType,
        reason: &str,
        message: impl Into<String>,
    ) {
        self.events.push(Event {
            object,
            kind,
            reason: reason.to_string(),
            message: message.into(),
        });
    }
    /// Asks for the active requeue (`reconcileInterval`).
    pub fn requeue_active(&mut self) {
        self.requeue_active = true;
    }
    /// Asks for a requeue after a timer; the earliest wins.
    pub fn requeue_after(&mut self, after: Duration) {
        self.requeue_after = Some(self.requeue_after.map_or(after, |d| d.min(after)));
    }
    /// Records an error for this pass (others still run, §5.2 step 7).
    pub fn error(&mut self, message: impl Into<String>) {
        self.errors.push(message.into());
    }
    /// Errors recorded so far.
    pub fn errors(&self) -> &[String] {
        &self.errors
    }
    /// Whether the active requeue was asked for.
    pub fn wants_requeue(&self) -> bool {
        self.requeue_active
    }
    /// Actions emitted so far (for tests and hooks that must not emit twice).
    pub fn emitted(&self) -> &[Action] {
        &self.actions
    }
    /// Events emitted so far.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// Turns the working state into the plan's actions in write order
    /// (engine/write_order.rs): emitted actions, node patches, node conditions (given),
    /// NodeWright status patches, events, and what each relies on.
    pub fn into_actions(
        self,
        node_conditions: Vec<Action>,
        cache: Option<&mut StateCache>,
    ) -> PassWrites {
        let PassCtx {
            snap,
            nodes,
            node_moves,
            nws,
            carries,
            index,
            actions,
            after,
            events,
            requeue_active,
            requeue_after,
            errors,
            ..
        } = self;
        let names: Vec<&str> = nws.iter().map(|v| v.name).collect();
        let mut writes = Writes {
            emitted: actions,
            after,
            node_conditions,
            events,
            ..Writes::default()
        };
        for n in nodes.iter().filter(|n| n.touched()) {
            let patch = n.patch(&names);
            if !patch.is_empty() {
                writes.node_patches.push(Action::PatchNode(patch));
            }
        }
        if let Some(cache) = cache {
            let entries = nodes
                .into_iter()
                .zip(&snap.nodes)
                .map(|(n, node)| n.into_entry(node));
            cache.keep_nodes(entries, &names, node_moves.as_ref());
            // A pass that did not hand its carries on (no [`PassCtx::carry_into`]) gives the
            // last pass's back as they were.
            if !carries.is_empty() {
                cache.keep_carries(carries);
            }
            if let Some((jobs, released)) = index.jobs_read.into_carried() {
                cache.keep_jobs(jobs, released);
            }
        }
        for v in nws {
            let original =
                v.nw.status
                    .as_ref()
                    .map(without_node_state)
                    .unwrap_or_default();
            if v.status != original || v.node_state_changes > 0 || !v.node_priority_unchanged() {
                writes.status_patches.push(Action::PatchNodeWrightStatus {
                    name: v.name.to_string(),
                    patch: Box::new(v.into_status_patch()),
                });
            }
        }
        let wrote = !writes.emitted.is_empty()
            || !writes.node_patches.is_empty()
            || !writes.node_conditions.is_empty()
            || !writes.status_patches.is_empty();
        let (actions, requires) = write_order::order(writes);
        PassWrites {
            actions,
            requires,
            active: requeue_active || wrote,
            after: requeue_after,
            errors,
        }
    }
}

/// What a pass hands to the plan.
pub struct PassWrites {
    /// The actions, in write order.
    pub actions: Vec<Action>,
    /// What each action relies on.
    pub requires: Vec<crate::plan::Requirement>,
    /// Whether the pass wants the active requeue (it wrote, or asked for it).
    pub active: bool,
    /// The earliest timer the pass asked for.
    pub after: Option<Duration>,
    /// Errors recorded by the pass.
    pub errors: Vec<String>,
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use crate::job::Job;
    use nodewright_schema::keys;

    use super::PassCtx;
    use crate::engine::jobs::PackageAnnotation;
    use crate::settings::Settings;
    use crate::snapshot::Snapshot;

    fn job(name: &str, annotation: &str) -> Job {
        let mut job = Job::default();
        job.metadata.name = Some(name.into());
        job.metadata.annotations = Some(
            [(
                keys::JOB_ANNOTATION_PACKAGE.to_string(),
                annotation.to_string(),
            )]
            .into(),
        );
        job
    }

    #[test]
    fn package_annotations_are_parsed_once_for_snapshot_jobs_and_afresh_for_others() {
        let annotation = PackageAnnotation {
            name: "driver".into(),
            version: "1.0.0".into(),
            invalid: true,
            ..PackageAnnotation::default()
        };
        let snap = Snapshot {
            jobs: vec![
                std::sync::Arc::new(job("a", &annotation.to_json())),
                std::sync::Arc::new(job("b", "not json")),
            ],
            ..Snapshot::default()
        };
        let settings = Settings::default();
        let ctx = PassCtx::new(&snap, &settings);

        let first = ctx.package_annotation(&snap.jobs[0]);
        assert!(matches!(first, Some(Cow::Borrowed(p)) if *p == annotation));
        let again = ctx.package_annotation(&snap.jobs[0]);
        assert!(
            std::ptr::eq(first.as_deref().unwrap(), again.as_deref().unwrap()),
            "the second read is the same parse"
        );
        assert!(ctx.job_invalid(&snap.jobs[0]));
        assert_eq!(ctx.package_annotation(&snap.jobs[1]), None);
        assert!(!ctx.job_invalid(&snap.jobs[1]));

        // A Job that is not one of the snapshot's (an equal copy) is parsed on its own.
        let copy = Job::clone(&snap.jobs[0]);
        assert!(matches!(ctx.package_annotation(&copy), Some(Cow::Owned(p)) if p == annotation));
        let other = job("c", &PackageAnnotation::default().to_json());
        assert_eq!(
            ctx.package_annotation(&other).map(Cow::into_owned),
            Some(PackageAnnotation::default())
        );
    }
}
