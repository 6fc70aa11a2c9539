//! The per-pass working state (spec/operator.md §5.3, §5.15).
//!
//! A pass reads the [`Snapshot`] once, works on copies of the few things it may change (node
//! metadata, node-state entries, taints, `unschedulable`, NodeWright status) and turns the
//! differences into one [`NodePatch`] per node and one status patch per NodeWright at the end.
//! Writing through these copies is what keeps the pass from re-asserting values it never
//! changed, which other writers (Job handler, other controllers) may have moved meanwhile.

use std::borrow::Cow;
use std::cell::{Cell, OnceCell, RefCell};
use std::collections::BTreeMap;

// The pass's lookup tables are keyed by object names and UIDs; Fx hashing is deterministic
// (the engine uses no randomness) and several times cheaper than SipHash on short keys.
use rustc_hash::{FxHashMap, FxHashSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
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
use super::job_table::{JobTable, SweptVerdict};
use super::jobs::{self, JobFacts, PackageAnnotation};
use super::node_map::NodeMap;
use super::state_cache::{
    CarriedFacts, CarriedNode, JobMatchMemo, NodeEntry, NodeMemo, NodeMoves, NodeWrightId,
    ParsedState, SelectionCarry, StateCache, StatusVersion, VersionId,
};
use super::write_order::{self, After, Writes};

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
    /// Packages dispatched (a stage Job created or already running counts).
    pub dispatched: usize,
}

/// One NodeWright's node-state annotation on one node: as read, and as the pass leaves it.
#[derive(Clone, Debug)]
pub(super) struct StateSlot {
    /// The snapshot value and its parse (shared with [`StateCache`]); `None` when the
    /// annotation is absent.
    original: Option<Arc<ParsedState>>,
    /// The working value once a writer touched it; until then the working value is the
    /// original (absent or malformed annotation = empty). Unused while malformed.
    current: Option<NodeState>,
    /// The pass deleted the whole annotation (a reset); it must not be re-created.
    deleted: bool,
    /// Some writer touched the working value (a cheap filter for the final diff).
    changed: bool,
}

static EMPTY_STATE: NodeState = NodeState(BTreeMap::new());

/// A node's state slots, by the [`StateKey`] index of their NodeWright, ascending.
pub(super) type StateSlots = Vec<(u32, StateSlot)>;

/// Names one NodeWright's node-state annotation on a node: the NodeWright's position among
/// the pass's NodeWrights ([`NwView::state_key`]) and its name. A slot is found by the
/// position, an integer; the name is read only to load an annotation or to write a patch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateKey<'n> {
    index: u32,
    name: &'n str,
}

impl StateSlot {
    fn new(original: Option<Arc<ParsedState>>) -> StateSlot {
        StateSlot {
            original,
            current: None,
            deleted: false,
            changed: false,
        }
    }

    /// The snapshot value and its parse, `None` when the annotation is absent.
    pub(super) fn original(&self) -> Option<&Arc<ParsedState>> {
        self.original.as_ref()
    }

    /// The slot as read from the node object, this pass's working value dropped: what the
    /// next pass starts from for the same object.
    fn reset(&mut self) {
        self.current = None;
        self.deleted = false;
        self.changed = false;
    }

    /// The parsed snapshot value when it parses.
    fn original_state(&self) -> Option<&NodeState> {
        self.original.as_deref().and_then(|p| p.parsed().ok())
    }

    fn malformed(&self) -> Option<&MalformedNodeState> {
        if self.deleted {
            return None;
        }
        self.original.as_deref().and_then(|p| p.parsed().err())
    }

    /// The working value.
    fn current(&self) -> &NodeState {
        match &self.current {
            Some(state) => state,
            None => self.original_state().unwrap_or(&EMPTY_STATE),
        }
    }

    /// The working value, copied from the original on first write.
    fn current_mut(&mut self) -> &mut NodeState {
        let original = &self.original;
        self.current.get_or_insert_with(|| {
            original
                .as_deref()
                .and_then(|p| p.parsed().ok())
                .cloned()
                .unwrap_or_default()
        })
    }
}

/// The working copy of one node.
#[derive(Clone, Debug)]
pub struct NodeWork<'a> {
    node: &'a Node,
    name: &'a str,
    created: Option<Timestamp>,
    annotations: Cow<'a, BTreeMap<String, String>>,
    labels: Cow<'a, BTreeMap<String, String>>,
    taints: Cow<'a, [Taint]>,
    unschedulable: bool,
    /// Some metadata/spec writer ran (annotations, labels, taints, unschedulable).
    dirty: bool,
    /// Count of writes to this node so far in the pass; derived values computed at one count
    /// stay valid while it does not move (see [`NwView::complete`]).
    writes: u32,
    /// This pass's NodeWright states on this node; parsed on first use. Handed from pass to
    /// pass with the node object ([`StateCache`]), so a node the fleet did not change starts
    /// with every parse in place.
    states: StateSlots,
    /// Values derived from the snapshot's node object, shared with the caller's cache (absent
    /// without one).
    memo: Option<Arc<NodeMemo>>,
    /// The snapshot's `Arc` of this node as the cache held it, handed back at the end.
    held: Option<Arc<Node>>,
}

impl<'a> NodeWork<'a> {
    fn new(node: &'a Node) -> NodeWork<'a> {
        let spec = node.spec.as_ref();
        NodeWork {
            node,
            name: node.metadata.name.as_deref().unwrap_or_default(),
            created: node.metadata.creation_timestamp.as_ref().map(|t| t.0),
            annotations: Cow::Borrowed(node.metadata.annotations.as_ref().unwrap_or(&EMPTY_MAP)),
            labels: Cow::Borrowed(node.metadata.labels.as_ref().unwrap_or(&EMPTY_MAP)),
            taints: Cow::Borrowed(
                spec.and_then(|s| s.taints.as_ref())
                    .unwrap_or(&EMPTY_TAINTS),
            ),
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            dirty: false,
            writes: 0,
            states: Vec::new(),
            memo: None,
            held: None,
        }
    }

    /// Values derived from the snapshot's node object alone, remembered across passes; `None`
    /// without a cache. Facts about the working copy must not go through it.
    pub fn memo(&self) -> Option<&NodeMemo> {
        self.memo.as_deref()
    }

    /// The node as the snapshot holds it.
    pub fn node(&self) -> &'a Node {
        self.node
    }
    /// Node name.
    pub fn name(&self) -> &'a str {
        self.name
    }
    /// `metadata.creationTimestamp`.
    pub fn created(&self) -> Option<Timestamp> {
        self.created
    }
    /// Current (working) annotation value.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key).map(String::as_str)
    }
    /// Whether the working annotations carry `key`. `seen` remembers the answer for the
    /// snapshot's node object (a pass may start it from the last pass's, for the same object):
    /// it is used and set only while this pass has not written the annotations.
    pub fn has_annotation_remembered(&self, key: &str, seen: &Cell<Option<bool>>) -> bool {
        if self.annotations_written() {
            return self.annotation(key).is_some();
        }
        match seen.get() {
            Some(known) => known,
            None => {
                let present = self.annotation(key).is_some();
                seen.set(Some(present));
                present
            }
        }
    }
    /// Whether this pass wrote the annotations (they may no longer read as the snapshot's).
    pub fn annotations_written(&self) -> bool {
        matches!(self.annotations, Cow::Owned(_))
    }
    /// All working annotations.
    pub fn annotations(&self) -> &BTreeMap<String, String> {
        &self.annotations
    }
    /// Current (working) label value.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }
    /// All working labels.
    pub fn labels(&self) -> &BTreeMap<String, String> {
        &self.labels
    }
    /// Working taints.
    pub fn taints(&self) -> &[Taint] {
        &self.taints
    }
    /// Working `spec.unschedulable`.
    pub fn unschedulable(&self) -> bool {
        self.unschedulable
    }
    /// `spec.unschedulable` as persisted in the API (the snapshot), for the durable cordon (§7.2).
    pub fn api_unschedulable(&self) -> bool {
        self.node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false)
    }
    /// The node's boot id (`status.nodeInfo.bootID`), when reported.
    pub fn boot_id(&self) -> Option<&'a str> {
        self.node
            .status
            .as_ref()
            .and_then(|s| s.node_info.as_ref())
            .map(|i| i.boot_id.as_str())
            .filter(|s| !s.is_empty())
    }

    /// Sets an annotation.
    pub fn set_annotation(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.writes = self.writes.wrapping_add(1);
        let (key, value) = (key.into(), value.into());
        if self.annotations.get(&key) != Some(&value) {
            self.dirty = true;
            self.annotations.to_mut().insert(key, value);
        }
    }
    /// Removes an annotation.
    pub fn remove_annotation(&mut self, key: &str) {
        self.writes = self.writes.wrapping_add(1);
        if self.annotations.contains_key(key) {
            self.dirty = true;
            self.annotations.to_mut().remove(key);
        }
    }
    /// Sets a label.
    pub fn set_label(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.writes = self.writes.wrapping_add(1);
        let (key, value) = (key.into(), value.into());
        if self.labels.get(&key) != Some(&value) {
            self.dirty = true;
            self.labels.to_mut().insert(key, value);
        }
    }
    /// Removes a label.
    pub fn remove_label(&mut self, key: &str) {
        self.writes = self.writes.wrapping_add(1);
        if self.labels.contains_key(key) {
            self.dirty = true;
            self.labels.to_mut().remove(key);
        }
    }
    /// Adds a taint, replacing one with the same key and effect.
    pub fn add_taint(&mut self, taint: Taint) {
        self.writes = self.writes.wrapping_add(1);
        self.dirty = true;
        let taints = self.taints.to_mut();
        taints.retain(|t| !(t.key == taint.key && t.effect == taint.effect));
        taints.push(taint);
    }
    /// Removes every taint with this key.
    pub fn remove_taint(&mut self, key: &str) {
        self.writes = self.writes.wrapping_add(1);
        if self.taints.iter().any(|t| t.key == key) {
            self.dirty = true;
            self.taints.to_mut().retain(|t| t.key != key);
        }
    }
    /// Sets `spec.unschedulable`.
    pub fn set_unschedulable(&mut self, value: bool) {
        self.writes = self.writes.wrapping_add(1);
        if self.unschedulable != value {
            self.dirty = true;
            self.unschedulable = value;
        }
    }

    fn slot_index(&self, nw: StateKey<'_>) -> Result<usize, usize> {
        self.states.binary_search_by_key(&nw.index, |(k, _)| *k)
    }

    fn slot(&mut self, nw: StateKey<'_>) -> &mut StateSlot {
        let i = match self.slot_index(nw) {
            Ok(i) => i,
            Err(i) => {
                let raw = self
                    .node
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(&keys::node_state(nw.name)));
                let slot = StateSlot::new(raw.map(|r| Arc::new(ParsedState::parse(r))));
                self.states.insert(i, (nw.index, slot));
                i
            }
        };
        &mut self.states[i].1
    }

    /// Loads a NodeWright's state from the snapshot annotation `key` (`nodeState_<nw>`),
    /// unless the node already holds it (the slots came with the node object from the last
    /// pass). `earlier` are the slots the last pass left for an earlier object of this node:
    /// a parse made from the same value is taken from there rather than parsed again.
    /// `slots` is how many NodeWrights the pass has: the node's slots are sized for them all
    /// on the first load, rather than grown one at a time.
    fn load_state_reusing(
        &mut self,
        nw: StateKey<'_>,
        key: &str,
        earlier: &[(u32, StateSlot)],
        slots: usize,
    ) {
        let Err(i) = self.slot_index(nw) else {
            return;
        };
        if self.states.capacity() == 0 {
            self.states.reserve_exact(slots);
        }
        let original = self
            .node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(|raw| {
                earlier
                    .iter()
                    .filter(|(k, _)| *k == nw.index)
                    .find_map(|(_, slot)| slot.original.as_ref().filter(|p| p.is_of(raw)))
                    .map_or_else(|| Arc::new(ParsedState::parse(raw)), Arc::clone)
            });
        self.states.insert(i, (nw.index, StateSlot::new(original)));
    }

    /// The snapshot's parse of this NodeWright's state, while the working state is still
    /// exactly that parse (no writer touched it); `None` once written or when absent.
    pub fn unwritten_state(&self, nw: StateKey<'_>) -> Option<&Arc<ParsedState>> {
        let slot = &self.states[self.slot_index(nw).ok()?].1;
        if slot.current.is_some() || slot.deleted {
            return None;
        }
        slot.original.as_ref()
    }

    /// What the next pass starts this node from ([`StateCache`]): the node object (`node`,
    /// the snapshot's `Arc` of it), its memo, and its slots as read from the object. `None`
    /// without a memo (a pass without a cache).
    fn into_entry(self, node: &Arc<Node>) -> Option<NodeEntry> {
        let memo = self.memo?;
        let mut slots = self.states;
        for (_, slot) in &mut slots {
            slot.reset();
        }
        Some(NodeEntry {
            node: self.held.unwrap_or_else(|| Arc::clone(node)),
            memo,
            slots,
        })
    }

    /// Parses this NodeWright's node state now, so later reads through `&self` see it.
    pub fn load_state(&mut self, nw: StateKey<'_>) {
        self.slot(nw);
    }

    /// The working node state of a NodeWright (absent annotation reads as empty).
    /// Call [`NodeWork::load_state`] (or any writer) first; [`PassCtx::new`] loads every
    /// selected node's state.
    pub fn state(&self, nw: StateKey<'_>) -> Result<&NodeState, &MalformedNodeState> {
        match self.slot_index(nw) {
            Ok(i) => {
                let slot = &self.states[i].1;
                match slot.malformed() {
                    Some(e) => Err(e),
                    None => Ok(slot.current()),
                }
            }
            Err(_) => Ok(&EMPTY_STATE),
        }
    }
    /// Whether the state annotation does not parse.
    pub fn malformed(&self, nw: StateKey<'_>) -> bool {
        self.state(nw).is_err()
    }
    /// Whether the node carries the annotation for this NodeWright after this pass's changes.
    pub fn state_present(&self, nw: StateKey<'_>) -> bool {
        match self.slot_index(nw) {
            Ok(i) => {
                let slot = &self.states[i].1;
                !slot.deleted && (slot.original.is_some() || !slot.current().is_empty())
            }
            Err(_) => self.annotations.contains_key(&keys::node_state(nw.name)),
        }
    }
    /// Upserts an entry (keyed `<name>|<version>`). Refused on a malformed annotation, and
    /// after the pass deleted the annotation (a reset must not be undone in the same pass).
    pub fn set_entry(
        &mut self,
        nw: StateKey<'_>,
        entry: PackageStatus,
    ) -> Result<(), MalformedNodeState> {
        self.writes = self.writes.wrapping_add(1);
        let slot = self.slot(nw);
        if let Some(e) = slot.malformed() {
            return Err(e.clone());
        }
        if slot.deleted {
            return Ok(());
        }
        slot.changed = true;
        slot.current_mut().upsert(entry);
        Ok(())
    }
    /// Removes an entry by key.
    pub fn remove_entry(&mut self, nw: StateKey<'_>, key: &str) {
        self.writes = self.writes.wrapping_add(1);
        let slot = self.slot(nw);
        if slot.malformed().is_none()
            && slot.current().0.contains_key(key)
            && slot.current_mut().0.remove(key).is_some()
        {
            slot.changed = true;
        }
    }
    /// Deletes the whole annotation (a reset, §10.6): the working state reads empty, and no
    /// later write of this pass re-creates it.
    pub fn delete_state(&mut self, nw: StateKey<'_>) {
        self.writes = self.writes.wrapping_add(1);
        let slot = self.slot(nw);
        slot.current = Some(NodeState::default());
        slot.deleted = true;
        slot.changed = true;
    }

    /// The node's write count (see the `writes` field).
    pub fn writes(&self) -> u32 {
        self.writes
    }

    /// Whether a writer touched the node (otherwise its patch is empty).
    fn touched(&self) -> bool {
        self.dirty || self.states.iter().any(|(_, slot)| slot.changed)
    }

    /// The changes of this pass as one patch (empty when nothing changed).
    /// `names` are the pass's NodeWright names by [`StateKey`] index.
    fn patch(&self, names: &[&str]) -> NodePatch {
        let mut patch = NodePatch::new(self.name);
        if self.dirty {
            let orig_ann = self
                .node
                .metadata
                .annotations
                .as_ref()
                .unwrap_or(&EMPTY_MAP);
            let state_keys: Vec<String> = self
                .states
                .iter()
                .map(|(nw, _)| keys::node_state(slot_name(names, *nw)))
                .collect();
            diff_maps(orig_ann, &self.annotations, &mut patch.annotations, |k| {
                state_keys.iter().any(|s| s == k)
            });
            let orig_labels = self.node.metadata.labels.as_ref().unwrap_or(&EMPTY_MAP);
            diff_maps(orig_labels, &self.labels, &mut patch.labels, |_| false);
            let orig_taints = self
                .node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .unwrap_or(&EMPTY_TAINTS);
            for t in self.taints.iter() {
                if !orig_taints.contains(t) {
                    patch.add_taints.push(t.clone());
                }
            }
            for t in orig_taints {
                if !self.taints.iter().any(|w| w.key == t.key)
                    && !patch.remove_taints.contains(&t.key)
                {
                    patch.remove_taints.push(t.key.clone());
                }
            }
            if self.unschedulable != self.api_unschedulable() {
                patch.unschedulable = Some(self.unschedulable);
            }
        }
        for (nw, slot) in &self.states {
            if !slot.changed {
                continue;
            }
            let nw = slot_name(names, *nw);
            if slot.deleted {
                if slot.original.is_some() {
                    patch.node_state.push(NodeStateDelta::Delete {
                        nodewright: nw.to_string(),
                    });
                }
                continue;
            }
            if slot.malformed().is_some() {
                continue;
            }
            let before = slot.original_state().unwrap_or(&EMPTY_STATE);
            let current = slot.current();
            let mut upsert = BTreeMap::new();
            for (k, v) in &current.0 {
                if before.0.get(k) != Some(v) {
                    upsert.insert(k.clone(), v.clone());
                }
            }
            let remove: Vec<String> = before
                .0
                .keys()
                .filter(|k| !current.0.contains_key(*k))
                .cloned()
                .collect();
            if !upsert.is_empty() || !remove.is_empty() {
                patch.node_state.push(NodeStateDelta::Entries {
                    nodewright: nw.to_string(),
                    upsert,
                    remove,
                });
            }
        }
        patch
    }
}

/// The name of the NodeWright at `index` among the pass's, from its [`StateKey`] index. Slots
/// are keyed only by indices of the pass's NodeWrights (the cache remaps them by name when
/// the NodeWrights change), so the name is always there.
fn slot_name<'n>(names: &[&'n str], index: u32) -> &'n str {
    names.get(index as usize).copied().unwrap_or_default()
}

/// Longest Job label value; longer node names are hashed into the `node` label (§4.7).
const LABEL_MAX: usize = 63;

/// Nodes that joined since the last pass, up to which each is put in its place in the last
/// pass's node order; past it the order is sorted afresh.
const JOINED_INSERTED: usize = 64;

static EMPTY_MAP: BTreeMap<String, String> = BTreeMap::new();
static EMPTY_TAINTS: Vec<Taint> = Vec::new();

fn diff_maps(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
    out: &mut BTreeMap<String, Option<String>>,
    skip: impl Fn(&str) -> bool,
) {
    for (k, v) in after {
        if !skip(k) && before.get(k) != Some(v) {
            out.insert(k.clone(), Some(v.clone()));
        }
    }
    for k in before.keys() {
        if !skip(k) && !after.contains_key(k) {
            out.insert(k.clone(), None);
        }
    }
}

/// One NodeWright as the pass sees it.
#[derive(Clone, Debug)]
pub struct NwView<'a> {
    /// The object.
    pub nw: &'a NodeWright,
    /// Its name.
    pub name: &'a str,
    /// Its position among the pass's NodeWrights (priority order), which keys its node-state
    /// slots ([`StateKey`]).
    index: u32,
    /// Selected node ids, sorted by `creationTimestamp`, then name (§5.3).
    pub selected: Vec<usize>,
    /// The referenced policy, when it exists.
    pub policy: Option<&'a DeploymentPolicy>,
    /// `spec.deploymentPolicy` names a policy that does not exist (§2.9).
    pub policy_missing: bool,
    /// Working status without its per-node maps (those are [`NwView::node_status`],
    /// [`NwView::node_state`] and [`NwView::node_boot_ids`]); published when it differs from
    /// the snapshot's.
    pub status: NodeWrightStatus,
    /// Working `status.nodeStatus`.
    pub node_status: NodeMap<'a, Status>,
    /// Working `status.nodeState`.
    pub node_state: NodeMap<'a, NodeState>,
    /// Working `status.nodeBootIds`.
    pub node_boot_ids: NodeMap<'a, String>,
    /// Working `status.nodePriority`: the snapshot's until first written, so marks taken
    /// while it is unwritten copy nothing (see [`NwView::node_priority`]).
    node_priority: Cow<'a, Option<PriorityMap>>,
    /// Status value at the start of the pass (for transition events, §1.10).
    pub initial_status: Option<Status>,
    /// The Status changed in this pass (for the Transition mirror, §12.3).
    pub transitioned: bool,
    /// Node id → position in `selected` ([`NOT_SELECTED`] when not selected).
    pub pos: Vec<u32>,
    /// Completion by package state, parallel to `selected` (refreshed by introspection).
    pub complete: Vec<bool>,
    /// The node's write count when `complete` was computed, parallel to `selected`
    /// ([`NOT_COMPUTED`] before the first computation).
    pub complete_at: Vec<u32>,
    /// The node's Status as last read from its annotation, with the node's write count then,
    /// parallel to `selected` (see [`PassCtx::node_status`]).
    status_memo: Vec<Cell<(u32, Status)>>,
    /// The node's write count when its `nodeState` mirror was last refreshed, parallel to
    /// `selected`; reset whenever the mirror changes by other means (see
    /// [`PassCtx::publish_node`]).
    published_at: Vec<u32>,
    /// The node's write count when introspection last wrote back its Status (§5.12), parallel
    /// to `selected`; reset like `published_at`.
    pub(super) written_back_at: Vec<u32>,
    /// The node's `status.nodeStatus` value as the last pass found it under this very status
    /// version, parallel to `selected` (`None`: not known); holds while the pass leaves that
    /// entry untouched (see [`NwView::published_node_status_at`]).
    published_seed: Vec<Option<Status>>,
    /// The last pass's `Ready` message, when it was made from exactly the names and
    /// `nodeStatus` values this pass starts with (see [`NwView::carried_ready_message`]).
    carried_ready: Option<String>,
    /// The `Ready` message this pass made from the snapshot's `nodeStatus`, for the next pass.
    pub(super) ready_message: Option<String>,
    /// The last pass found no departed node in the per-node maps this pass starts with, over
    /// the very nodes this pass selects (see [`NwView::nothing_departed`]).
    carried_nothing_departed: bool,
    /// This pass found no departed node in the per-node maps as the snapshot holds them.
    nothing_departed: bool,
    /// Which of its two node conditions the snapshot's node object already carries as wanted
    /// (§4.5), under one input of completion and erroring, parallel to `selected`. A fact of
    /// the node object alone, so it holds whatever the pass writes.
    pub conditions_current: Vec<Cell<Option<(u8, u8)>>>,
    /// Whether the snapshot's node object carries `version_<nw>` (§4.1), parallel to
    /// `selected`; read through the working annotations, so it holds only while the pass has
    /// not written them.
    pub version_stamped: Vec<Cell<Option<bool>>>,
    /// Whether the snapshot's node object carries `drain_blocked_<nw>` (§7.6), parallel to
    /// `selected`; like `version_stamped`.
    pub drain_blocked: Vec<Cell<Option<bool>>>,
    /// `status.nodeBootIds` of the snapshot's status version holds the node object's boot id
    /// (§10.6), parallel to `selected`; holds while the pass leaves that entry untouched.
    pub boot_recorded: Vec<bool>,
    /// Compartment definitions of this pass (§2.5, §2.8), filled by selection.
    pub compartments: Vec<super::policy::CompartmentDef>,
    /// Compartment index per selected node, parallel to `selected`.
    pub compartment_of: Vec<usize>,
    /// This NodeWright's node keys, built once per pass.
    pub keys: NwKeys,
    /// Count of changes made to `status.nodeState` (compared instead of the big map).
    pub node_state_changes: u64,
    /// What node completion reads of this NodeWright; shared with the parse cache so that
    /// completions remembered in earlier passes are reused while it is unchanged.
    pub completion_inputs: Arc<CompletionInputs>,
    /// The digest of an empty node state (no annotation yet, the common case before a node's
    /// first package) under the last `configApplied` value asked for: the same for every such
    /// node, so it is derived once per pass rather than once per node.
    pub empty_digest: RefCell<Option<AppliedDigest>>,
    /// Per selected node (parallel to `selected`): its digest and the node's write count it
    /// was derived at; several steps of a pass read it, and it holds while the count does.
    pub digests: RefCell<Vec<Option<CountedDigest>>>,
    /// The version of the NodeWright as the snapshot holds it (what the `nodeState` mirror
    /// comparisons remembered in node parses are keyed by); only with a cache.
    pub status_version: Option<VersionId>,
    /// The NodeWright's key in node memos (meaningful only with a cache).
    pub memo_id: NodeWrightId,
}

/// A node digest with the `configApplied` value it was derived under.
pub type AppliedDigest = (Option<Box<str>>, Arc<NodeDigest>);

/// A node digest (`None`: malformed state) with the node write count it was derived at.
pub type CountedDigest = (u32, Option<Arc<NodeDigest>>);

/// The per-NodeWright node keys (§4.1), built once per pass.
#[derive(Clone, Debug)]
pub struct NwKeys {
    /// `status_<nw>`.
    pub status: String,
    /// `nodeState_<nw>`.
    pub node_state: String,
    /// `cordon_<nw>`.
    pub cordon: String,
    /// `configApplied_<nw>`.
    pub config_applied: String,
}

/// A cheap mark of a NodeWright status to tell whether a step changed it: every field but
/// the per-node maps, plus the count of changes made to the `nodeState` mirror and
/// `nodePriority` as it stood (the snapshot's, by reference, until the pass writes it).
#[derive(Clone, Debug)]
pub struct StatusMark<'a>(NodeWrightStatus, u64, Cow<'a, Option<PriorityMap>>);

impl PartialEq for StatusMark<'_> {
    fn eq(&self, other: &Self) -> bool {
        let same_priority = match (&self.2, &other.2) {
            (Cow::Borrowed(a), Cow::Borrowed(b)) if std::ptr::eq(*a, *b) => true,
            (a, b) => a == b,
        };
        self.1 == other.1 && same_priority && self.0 == other.0
    }
}

/// `status.nodePriority`: node name → pick time (§2.6).
pub type PriorityMap = BTreeMap<String, Time>;

/// `status` without its per-node maps (`nodeStatus`, `nodeState`, `nodeBootIds`,
/// `nodePriority`), which a pass keeps apart ([`NwView`]).
pub fn without_node_state(s: &NodeWrightStatus) -> NodeWrightStatus {
    NodeWrightStatus {
        status: s.status,
        node_status: None,
        node_state: None,
        conditions: s.conditions.clone(),
        observed_generation: s.observed_generation,
        node_boot_ids: None,
        node_priority: None,
        node_order_offset: s.node_order_offset,
        config_updates: s.config_updates.clone(),
        compartment_statuses: s.compartment_statuses.clone(),
        nodes_in_progress: s.nodes_in_progress,
        complete_nodes: s.complete_nodes.clone(),
        package_list: s.package_list.clone(),
    }
}

/// Marker in [`NwView::pos`] for a node the NodeWright does not select.
pub const NOT_SELECTED: u32 = u32::MAX;

/// Marker in [`NwView::complete_at`] for a completion not computed yet. A node's write count
/// would need 2³² writes in one pass to reach it.
pub const NOT_COMPUTED: u32 = u32::MAX;

impl<'a> NwView<'a> {
    /// A mark of the working status, to compare before/after a step.
    pub fn mark(&self) -> StatusMark<'a> {
        // `status` carries no per-node maps during a pass (they live in the `NodeMap`s and
        // `node_priority`).
        StatusMark(
            self.status.clone(),
            self.node_state_changes,
            self.node_priority.clone(),
        )
    }
    /// Working `status.nodePriority` (§2.6).
    pub fn node_priority(&self) -> Option<&PriorityMap> {
        self.node_priority.as_ref().as_ref()
    }
    /// Working `status.nodePriority` to write (the snapshot's is copied on first write).
    pub fn node_priority_mut(&mut self) -> &mut Option<PriorityMap> {
        self.node_priority.to_mut()
    }
    /// Whether `status.nodePriority` still reads as the snapshot's.
    fn node_priority_unchanged(&self) -> bool {
        let original = self
            .nw
            .status
            .as_ref()
            .and_then(|s| s.node_priority.as_ref());
        match &self.node_priority {
            Cow::Borrowed(_) => true,
            Cow::Owned(now) => now.as_ref() == original,
        }
    }
    /// Clears the `nodeState` mirror (a counted change).
    pub fn clear_node_state(&mut self) {
        self.forget_published();
        if self.node_state.clear() {
            self.node_state_changes += 1;
        }
    }
    /// The mirror changed other than through [`PassCtx::publish_node`]: every node is
    /// compared again on its next refresh.
    fn forget_published(&mut self) {
        self.published_at.fill(NOT_COMPUTED);
        self.written_back_at.fill(NOT_COMPUTED);
    }
    /// Records a node's Status in `status.nodeStatus` (a counted change when it differs).
    pub fn publish_status(&mut self, node: &str, status: Status) {
        if self.node_status.set(node, &status) {
            self.node_state_changes += 1;
        }
    }
    /// Records a node's boot id in `status.nodeBootIds` (a counted change when it differs).
    pub fn publish_boot_id(&mut self, node: &str, boot: &str) {
        if self.node_boot_ids.get(node).map(String::as_str) != Some(boot) {
            self.node_boot_ids.set(node, &boot.to_string());
            self.node_state_changes += 1;
        }
    }
    /// Keeps only the named nodes in `nodeStatus`, `nodeState` and `nodeBootIds` (counted).
    pub fn retain_nodes(&mut self, keep: impl Fn(&str) -> bool) {
        self.forget_published();
        let removed = self.node_status.retain(&keep)
            + self.node_state.retain(&keep)
            + self.node_boot_ids.retain(&keep);
        self.node_state_changes += removed as u64;
    }
    /// Drops one node from the `nodeState` mirror (a counted change).
    pub fn drop_node_state(&mut self, node: &str) {
        self.forget_published();
        if self.node_state.remove(node) {
            self.node_state_changes += 1;
        }
    }
    /// Starts this pass's per-node memos from what the last pass derived for the same node
    /// objects ([`SelectionCarry`]), as values at write count 0 (before this pass writes
    /// the node): each holds for the same object under the same inputs.
    /// Digests move out of `carry` (and back in [`NwView::carry_out`]) rather than being
    /// cloned: moving the count of thousands of shared digests costs a trip to memory each.
    /// `same_names` says this pass selects the nodes of the same names as the last pass.
    fn seed(&mut self, nodes: &[NodeWork<'_>], carry: &mut SelectionCarry, same_names: bool) {
        let same_inputs = carry
            .inputs
            .as_ref()
            .is_some_and(|i| Arc::ptr_eq(i, &self.completion_inputs));
        let same_version = carry.version.is_some() && carry.version == self.status_version;
        // Selection order is stable, so the node at the same position is tried first; a node
        // that joined or left shifts the rest, which are then found by their memo.
        let mut by_memo: Option<FxHashMap<*const NodeMemo, usize>> = None;
        // Every selected node is the very object the last pass had at its position.
        let mut in_place = carry.nodes.len() == self.selected.len();
        let digests = self.digests.get_mut();
        for (p, &i) in self.selected.iter().enumerate() {
            let Some(memo) = nodes[i].memo.as_ref() else {
                in_place = false;
                continue;
            };
            let carried = match carry.nodes.get(p) {
                Some(c) if Arc::ptr_eq(&c.memo, memo) => Some(p),
                _ => {
                    in_place = false;
                    by_memo
                        .get_or_insert_with(|| {
                            let memos = carry.nodes.iter().map(|c| Arc::as_ptr(&c.memo));
                            memos.zip(0..).collect()
                        })
                        .get(&Arc::as_ptr(memo))
                        .copied()
                }
            };
            let Some(c) = carried.map(|k| &mut carry.nodes[k].facts) else {
                continue;
            };
            self.conditions_current[p].set(c.conditions);
            self.version_stamped[p].set(c.stamped);
            self.drain_blocked[p].set(c.drain_blocked);
            if let Some(status) = c.status {
                self.status_memo[p].set((0, status));
            }
            if same_inputs && let Some(digest) = c.digest.take() {
                self.complete[p] = digest.as_ref().is_some_and(|d| d.complete);
                self.complete_at[p] = 0;
                digests[p] = Some((0, digest));
            }
            if same_version {
                self.published_seed[p] = c.published;
                self.boot_recorded[p] = c.boot_recorded;
                if c.mirrored {
                    self.published_at[p] = 0;
                    if c.written_back {
                        self.written_back_at[p] = 0;
                    }
                }
            }
        }
        // The same names with the same published Statuses make the same message.
        let every_node_carried = carry.nodes.len() == self.selected.len()
            && self.published_seed.iter().all(Option::is_some);
        if same_version && every_node_carried {
            self.carried_ready = carry.ready_message.clone();
        }
        // Which entries name departed nodes depends on the names of the selected nodes alone.
        self.carried_nothing_departed =
            same_version && (in_place || same_names) && carry.nothing_departed;
    }

    /// Whether the last pass found no departed node in the per-node maps this pass starts
    /// with, over the very nodes this pass selects (status version and nodes unchanged).
    pub fn carried_nothing_departed(&self) -> bool {
        self.carried_nothing_departed
    }

    /// Records whether this pass found no departed node in the maps as the snapshot holds
    /// them, for the next pass.
    pub fn set_nothing_departed(&mut self, nothing: bool) {
        self.nothing_departed = nothing;
    }

    /// Whether the per-node maps (`nodeStatus`, `nodeState`, `nodeBootIds`, `nodePriority`)
    /// are still the snapshot's: this pass changed none of them yet.
    pub fn maps_unchanged(&self) -> bool {
        self.node_status.unchanged()
            && self.node_state.unchanged()
            && self.node_boot_ids.unchanged()
            && self.node_priority_unchanged()
    }

    /// Refills `carry` with what this pass derived for each selected node before writing it
    /// (see [`NwView::seed`]).
    fn carry_out(&self, nodes: &[NodeWork<'_>], carry: &mut SelectionCarry) {
        carry.inputs = Some(Arc::clone(&self.completion_inputs));
        carry.version = self.status_version;
        // Taken, not cloned (see [`NwView::seed`]): the pass derives nothing after this.
        let mut digests = self.digests.borrow_mut();
        for (p, &i) in self.selected.iter().enumerate() {
            let n = &nodes[i];
            let Some(memo) = n.memo.as_ref() else {
                // A pass without a cache has no memos, and nothing to carry.
                carry.nodes.clear();
                return;
            };
            let digest = match digests[p].take() {
                Some((0, digest)) => Some(digest),
                _ => None,
            };
            let status = match self.status_memo[p].get() {
                (0, status) => Some(status),
                _ => None,
            };
            let mirrored = self.published_at[p] == 0 && self.node_state.untouched(n.name);
            let published_untouched = self.node_status.untouched(n.name);
            let written_back = mirrored && self.written_back_at[p] == 0 && published_untouched;
            let published = published_untouched.then(|| self.published_node_status_at(p, n.name));
            let facts = CarriedFacts {
                digest,
                status,
                mirrored,
                written_back,
                published,
                conditions: self.conditions_current[p].get(),
                stamped: self.version_stamped[p].get(),
                drain_blocked: self.drain_blocked[p].get(),
                boot_recorded: self.boot_recorded[p] && self.node_boot_ids.untouched(n.name),
            };
            // Refilled in place: at steady state the same node sits at the same position,
            // and its memo is kept rather than cloned again.
            match carry.nodes.get_mut(p) {
                Some(old) if Arc::ptr_eq(&old.memo, memo) => old.facts = facts,
                Some(old) => {
                    *old = CarriedNode {
                        memo: Arc::clone(memo),
                        facts,
                    }
                }
                None => carry.nodes.push(CarriedNode {
                    memo: Arc::clone(memo),
                    facts,
                }),
            }
        }
        carry.nodes.truncate(self.selected.len());
        carry.ready_message = self.ready_message.clone();
        carry.nothing_departed = self.nothing_departed;
    }

    /// [`NwView::published_node_status`] of the selected node at position `p` named `node`,
    /// from the last pass's finding while this pass left the entry alone.
    pub fn published_node_status_at(&self, p: usize, node: &str) -> Status {
        match self.published_seed[p] {
            Some(s) if self.node_status.untouched(node) => s,
            _ => self.published_node_status(node),
        }
    }

    /// The last pass's `Ready` message, while this pass has not changed `status.nodeStatus`
    /// and selects the very nodes the last pass did: it was made from the same input.
    pub fn carried_ready_message(&self) -> Option<&str> {
        self.carried_ready
            .as_deref()
            .filter(|_| self.node_status.unchanged())
    }

    /// The status write: the working status fields and this pass's per-node map changes.
    fn into_status_patch(self) -> StatusPatch {
        let mut status = self.status;
        status.node_priority = self.node_priority.into_owned();
        StatusPatch::new(
            status,
            self.node_status.into_patch(),
            self.node_state.into_patch(),
            self.node_boot_ids.into_patch(),
        )
    }
    /// The key of this NodeWright's node state on a node.
    pub fn state_key(&self) -> StateKey<'a> {
        StateKey {
            index: self.index,
            name: self.name,
        }
    }
    /// `disable` annotation (§5.11).
    pub fn disabled(&self) -> bool {
        self.nw.is_disabled()
    }
    /// `pause` annotation, unless disabled (disabled wins, §16.3).
    pub fn paused(&self) -> bool {
        self.nw.is_paused() && !self.nw.is_disabled()
    }
    /// Being deleted.
    pub fn deleting(&self) -> bool {
        self.nw.is_deleting()
    }
    /// `metadata.generation`.
    pub fn generation(&self) -> i64 {
        self.nw.metadata.generation.unwrap_or(0)
    }

    /// Inserts or replaces a condition by type. The transition time is kept while the
    /// status is unchanged (§12.4); an identical condition changes nothing.
    pub fn set_condition(&mut self, mut cond: Condition, now: Timestamp) {
        let list = self.status.conditions.get_or_insert_with(Vec::new);
        match list.iter_mut().find(|c| c.type_ == cond.type_) {
            Some(existing) => {
                if existing.status == cond.status {
                    cond.last_transition_time = existing.last_transition_time.clone();
                } else {
                    cond.last_transition_time = Time(now);
                }
                if *existing != cond {
                    *existing = cond;
                }
            }
            None => {
                cond.last_transition_time = Time(now);
                list.push(cond);
            }
        }
    }
    /// Removes a condition by type.
    pub fn remove_condition(&mut self, type_: &str) {
        if let Some(list) = self.status.conditions.as_mut() {
            list.retain(|c| c.type_ != type_);
            if list.is_empty() {
                self.status.conditions = None;
            }
        }
    }
    /// A condition by type.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.status
            .conditions
            .as_ref()
            .and_then(|l| l.iter().find(|c| c.type_ == type_))
    }
    /// Whether the node id is selected by this NodeWright.
    pub fn selects(&self, node: usize) -> bool {
        self.pos.get(node).is_some_and(|p| *p != NOT_SELECTED)
    }
    /// Completion by package state of a selected node (false when not selected).
    pub fn is_complete(&self, node: usize) -> bool {
        match self.pos.get(node) {
            Some(&p) if p != NOT_SELECTED => self.complete[p as usize],
            _ => false,
        }
    }
    /// Every selected node complete by package state (vacuously true).
    pub fn all_complete(&self) -> bool {
        self.complete.iter().all(|c| *c)
    }
    /// Working per-node Status as published in `status.nodeStatus` (absent = `unknown`).
    pub fn published_node_status(&self, node: &str) -> Status {
        self.node_status
            .get(node)
            .copied()
            .unwrap_or(Status::Unknown)
    }
}

/// Lookups into the snapshot's Jobs, pods and ConfigMaps, built once per pass so per-node and
/// per-Job steps do not scan every object (10,000-node fleets have thousands of Jobs). Every
/// list keeps snapshot order and every by-name/UID map keeps the first object, so a lookup
/// returns what a scan with `find`/`filter` over the snapshot would.
///
/// The tables every pass reads are built up front; those only node work, drain and failing
/// pods read are built on first use, so a pass that works no node does not build them.
#[derive(Debug)]
pub struct SnapIndex<'a> {
    jobs: &'a [Arc<Job>],
    pods: &'a [Arc<Pod>],
    /// Jobs by name.
    job_by_name: OnceCell<FxHashMap<&'a str, &'a Job>>,
    /// Jobs by UID.
    job_by_uid: OnceCell<FxHashMap<&'a str, &'a Job>>,
    /// Jobs by NodeWright `name` label, then `node` label.
    jobs_on: OnceCell<FxHashMap<&'a str, FxHashMap<&'a str, Few<&'a Job>>>>,
    /// Jobs by NodeWright `name` label (any node, with or without a `node` label).
    jobs_of_nw: FxHashMap<&'a str, Vec<&'a Job>>,
    /// Jobs by `node` label (any NodeWright).
    jobs_on_node: OnceCell<FxHashMap<&'a str, Few<&'a Job>>>,
    /// Pods by `spec.nodeName`.
    pods_on_node: OnceCell<FxHashMap<&'a str, Few<&'a Pod>>>,
    /// ConfigMaps by name.
    pub config_map_by_name: FxHashMap<&'a str, &'a ConfigMap>,
    /// What the pass reads of each snapshot Job: facts, `package` annotation, pods.
    pub jobs_read: JobTable<'a>,
}

impl<'a> SnapIndex<'a> {
    fn build(snap: &'a Snapshot, jobs_read: JobTable<'a>) -> SnapIndex<'a> {
        let mut jobs_of_nw: FxHashMap<&'a str, Vec<&'a Job>> = FxHashMap::default();
        for (job, facts) in jobs_read.with_facts() {
            if let Some(nw) = facts.nodewright {
                jobs_of_nw.entry(nw).or_default().push(job);
            }
        }
        // Sized up front: growing maps of thousands of entries rehashes them several times.
        let mut config_map_by_name = sized(snap.config_maps.len());
        for cm in &snap.config_maps {
            if let Some(name) = cm.metadata.name.as_deref() {
                config_map_by_name.entry(name).or_insert(cm);
            }
        }
        SnapIndex {
            jobs: &snap.jobs,
            pods: &snap.pods,
            job_by_name: OnceCell::new(),
            job_by_uid: OnceCell::new(),
            jobs_on: OnceCell::new(),
            jobs_of_nw,
            jobs_on_node: OnceCell::new(),
            pods_on_node: OnceCell::new(),
            config_map_by_name,
            jobs_read,
        }
    }

    /// The snapshot's Jobs with their facts.
    fn jobs_with_facts(&self) -> impl Iterator<Item = (&'a Job, &JobFacts<'a>)> {
        self.jobs_read.with_facts()
    }

    /// The first Job of this name.
    pub fn job_by_name(&self, name: &str) -> Option<&'a Job> {
        let table = self
            .job_by_name
            .get_or_init(|| first_by(self.jobs, |m| m.name.as_deref()));
        table.get(name).copied()
    }
    /// The first Job of this UID.
    pub fn job_by_uid(&self, uid: &str) -> Option<&'a Job> {
        let table = self
            .job_by_uid
            .get_or_init(|| first_by(self.jobs, |m| m.uid.as_deref()));
        table.get(uid).copied()
    }
    /// Jobs of a NodeWright on a node, by the Job `node` label value
    /// (`names::node_label_value`).
    pub fn jobs_of(&self, nw: &str, node_label: &str) -> &[&'a Job] {
        let table = self.jobs_on.get_or_init(|| {
            let mut table: FxHashMap<&'a str, FxHashMap<&'a str, Few<&'a Job>>> =
                FxHashMap::default();
            for (job, facts) in self.jobs_with_facts() {
                if let (Some(nw), Some(node)) = (facts.nodewright, facts.node_label) {
                    table
                        .entry(nw)
                        .or_default()
                        .entry(node)
                        .or_default()
                        .push(job);
                }
            }
            table
        });
        table
            .get(nw)
            .and_then(|m| m.get(node_label))
            .map_or(&[], Few::as_slice)
    }
    /// Jobs carrying this NodeWright `name` label.
    pub fn nw_jobs(&self, nw: &str) -> &[&'a Job] {
        self.jobs_of_nw.get(nw).map_or(&[], Vec::as_slice)
    }
    /// Jobs carrying this `node` label, any NodeWright.
    pub fn node_jobs(&self, node_label: &str) -> &[&'a Job] {
        let table = self.jobs_on_node.get_or_init(|| {
            let mut table: FxHashMap<&'a str, Few<&'a Job>> = sized(self.jobs.len());
            for (job, facts) in self.jobs_with_facts() {
                if let Some(node) = facts.node_label {
                    table.entry(node).or_default().push(job);
                }
            }
            table
        });
        table.get(node_label).map_or(&[], Few::as_slice)
    }
    /// Pods whose Job controller UID label is `job`'s uid, in snapshot order.
    pub fn pods_of(&self, job: &Job) -> Few<&'a Pod> {
        self.jobs_read.pods_of(job)
    }
    /// Pods bound to a node (`spec.nodeName`).
    pub fn pods_on(&self, node: &str) -> &[&'a Pod] {
        let table = self.pods_on_node.get_or_init(|| {
            let mut table: FxHashMap<&'a str, Few<&'a Pod>> = sized(self.pods.len());
            for pod in self.pods {
                if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                    table.entry(node).or_default().push(pod);
                }
            }
            table
        });
        table.get(node).map_or(&[], Few::as_slice)
    }
}

/// The first Job of each key (a name or uid of its metadata), like a `find` over `jobs`.
fn first_by<'a>(
    jobs: &'a [Arc<Job>],
    key: impl Fn(&'a ObjectMeta) -> Option<&'a str>,
) -> FxHashMap<&'a str, &'a Job> {
    let mut table = sized(jobs.len());
    for job in jobs.iter().map(|j| &**j) {
        if let Some(key) = key(&job.metadata) {
            table.entry(key).or_insert(job);
        }
    }
    table
}

/// The objects under one key of a lookup table: usually one (a Job's pod, a node's Jobs of
/// one NodeWright), kept inline so building the tables allocates only for the exceptions.
pub type Few<T> = smallvec::SmallVec<[T; 2]>;

/// An empty lookup table with room for `n` entries.
fn sized<K, V>(n: usize) -> FxHashMap<K, V> {
    FxHashMap::with_capacity_and_hasher(n, Default::default())
}

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
                if let Some(name) = job.metadata.name.as_deref() {
                    self.created_jobs.insert(name.to_string());
                }
                if !super::jobs::is_interrupt_job(job)
                    && let Some(node) = super::jobs::label(job, keys::JOB_LABEL_NODE)
                {
                    self.stage_jobs_on.insert(node.to_string());
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

/// A Job `node` label value that more than one node of the snapshot maps to (hashed long
/// names colliding with each other or with a short name): callers then scan, as before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AmbiguousNodeLabel;

/// The nodes one distinct node selector picks in a pass.
struct Selection<'s> {
    selector: Option<&'s LabelSelector>,
    /// The selector's id in the cache (absent without one).
    id: Option<u64>,
    nodes: Vec<usize>,
    /// The same positions as the last pass selected, with the same node names at them.
    same_as_last: bool,
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
    /// Some label maps to more than one node (see [`AmbiguousNodeLabel`]).
    label_collision: bool,
    /// NodeWrights sorted by priority, then name.
    pub nws: Vec<NwView<'a>>,
    /// What the last pass derived per NodeWright and selected node, moved out of the cache
    /// for this pass to start from and refill (empty without a cache).
    carries: FxHashMap<NodeWrightId, SelectionCarry>,
    /// Snapshot indexes, built once per pass (lookups by name/UID/node instead of scans).
    pub index: SnapIndex<'a>,
    /// Sweep comparisons remembered across passes (only with a cache).
    pub job_matches: Option<Arc<JobMatchMemo>>,
    actions: Vec<Action>,
    /// What emitted actions rely on (engine/write_order.rs).
    after: Vec<(usize, After)>,
    emitted_index: EmittedIndex,
    events: Vec<Event>,
    requeue_active: bool,
    requeue_after: Option<Duration>,
    errors: Vec<String>,
}

impl<'a> PassCtx<'a> {
    /// Builds the working state: nodes, NodeWrights in priority order with their selected
    /// nodes sorted (§5.3), each selected node's state parsed.
    pub fn new(snap: &'a Snapshot, settings: &'a Settings) -> PassCtx<'a> {
        PassCtx::new_cached(snap, settings, None)
    }

    /// [`PassCtx::new`], starting from what `cache` kept of the last pass (the result is the
    /// same as without a cache). The nodes' entries move out of the cache into the pass;
    /// [`PassCtx::into_actions`] hands them back.
    pub fn new_cached(
        snap: &'a Snapshot,
        settings: &'a Settings,
        cache: Option<&mut StateCache>,
    ) -> PassCtx<'a> {
        let runtime_taint = settings.runtime_required_taint();
        let mut nodes: Vec<NodeWork<'a>> = snap.nodes.iter().map(|n| NodeWork::new(n)).collect();
        let node_ids: FxHashMap<&'a str, usize> =
            nodes.iter().enumerate().map(|(i, n)| (n.name, i)).collect();
        let mut label_collision = node_ids.len() != nodes.len();
        let mut long_labels: FxHashMap<String, usize> = FxHashMap::default();
        for (i, n) in nodes.iter().enumerate() {
            if n.name.len() > LABEL_MAX {
                let label = names::node_label_value(n.name);
                label_collision |= node_ids.contains_key(label.as_str());
                match long_labels.entry(label) {
                    std::collections::hash_map::Entry::Occupied(_) => label_collision = true,
                    std::collections::hash_map::Entry::Vacant(v) => {
                        v.insert(i);
                    }
                }
            }
        }
        let mut nw_refs: Vec<&NodeWright> = snap.nodewrights.iter().collect();
        let slots = nw_refs.len();
        nw_refs.sort_by(|a, b| {
            a.spec
                .priority
                .cmp(&b.spec.priority)
                .then_with(|| a.name().cmp(b.name()))
        });
        let names: Vec<&'a str> = nw_refs.iter().map(|nw| nw.name()).collect();
        // Each node starts from what the last pass left for it. For the very same node object
        // that is its memo and its slots with every parse in place, moved rather than looked
        // up or copied; a node whose object changed keeps the last pass's slots aside, for the
        // parses of values that did not change.
        let mut earlier: Vec<(usize, StateSlots)> = Vec::new();
        // Positions of the nodes that are not the very object the last pass had there.
        let mut renewed: Vec<usize> = Vec::new();
        let mut nodes_moved = true;
        // With some node not where the last pass had it: where each node went.
        let mut node_moves: Option<NodeMoves> = None;
        // Positions of the nodes the last pass did not have.
        let mut joined: Vec<usize> = Vec::new();
        // Every node the last pass had kept its creationTimestamp.
        let mut created = true;
        // Every node has the name and creationTimestamp the last pass had at its position.
        let mut same_order = false;
        let mut jobs_carried = None;
        let mut carries = FxHashMap::default();
        let cache: Option<&StateCache> = match cache {
            Some(c) => {
                carries = c.take_carries();
                jobs_carried = Some(c.take_jobs());
                let mut carried = c.take_nodes(&names);
                for (i, (work, node)) in nodes.iter_mut().zip(&snap.nodes).enumerate() {
                    match carried.take(i, node) {
                        Some(entry) if Arc::ptr_eq(&entry.node, node) => {
                            work.memo = Some(entry.memo);
                            work.states = entry.slots;
                            work.held = Some(entry.node);
                        }
                        found => {
                            renewed.push(i);
                            match &found {
                                Some(e) => {
                                    created &= e.node.metadata.creation_timestamp
                                        == node.metadata.creation_timestamp;
                                }
                                None => joined.push(i),
                            }
                            work.memo = Some(Arc::new(NodeMemo::new(node)));
                            if let Some(entry) = found.filter(|e| !e.slots.is_empty()) {
                                earlier.push((i, entry.slots));
                            }
                        }
                    }
                }
                nodes_moved = carried.moved(snap.nodes.len());
                same_order = created && joined.is_empty() && !nodes_moved;
                if nodes_moved {
                    node_moves = Some(carried.into_moves());
                }
                Some(&*c)
            }
            None => None,
        };
        // Node order used by every NodeWright: creationTimestamp, then name. The last pass's
        // order holds while every position has the same name and creationTimestamp. When
        // nodes joined, left or moved, and every node that stayed kept its creationTimestamp,
        // it holds for those (`follow`), and each node that joined takes its place in it.
        // (Names are unique, so the order has no ties.)
        let follow = created
            && joined.len() <= JOINED_INSERTED
            && node_ids.len() == nodes.len()
            && node_moves.is_some();
        let followed = |kept: &[usize]| {
            let moves = node_moves.as_ref()?;
            if kept.len() != moves.to.len() {
                return None;
            }
            let key = |i: usize| (&nodes[i].created, nodes[i].name);
            let mut order: Vec<usize> = kept.iter().filter_map(|&k| moves.now(k)).collect();
            for &i in &joined {
                let at = order.partition_point(|&q| key(q) < key(i));
                order.insert(at, i);
            }
            (order.len() == nodes.len()).then_some(order)
        };
        let order: Vec<usize> = match cache.map(StateCache::node_order) {
            Some(kept) if same_order && kept.len() == nodes.len() => kept.to_vec(),
            Some(kept) if let Some(order) = followed(kept).filter(|_| follow) => order,
            _ => {
                let mut order: Vec<usize> = (0..nodes.len()).collect();
                order.sort_by(|&a, &b| {
                    nodes[a]
                        .created
                        .cmp(&nodes[b].created)
                        .then_with(|| nodes[a].name.cmp(nodes[b].name))
                });
                order
            }
        };
        let mut nws = Vec::with_capacity(nw_refs.len());
        // NodeWrights often target the same pool: each distinct selector is matched once.
        let mut selections: Vec<Selection<'_>> = Vec::new();
        for nw in nw_refs {
            let name = nw.name();
            let memo_id = cache.map(|c| c.nodewright_id(name)).unwrap_or_default();
            let wanted = nw.spec.node_selectors.as_ref();
            let (selected, same_selection) = match selections.iter().find(|s| s.selector == wanted)
            {
                Some(s) => (s.nodes.clone(), s.same_as_last),
                None => {
                    // With a cache, whether a node matches is remembered per node object and
                    // selector id, so an unchanged node is not matched again.
                    let id =
                        cache.map(|c| c.selector_id(wanted).unwrap_or_else(|| c.new_selector_id()));
                    // Parsed once per pass; an invalid selector selects nothing.
                    let selector = wanted.map(nodewright_schema::selector::Selector::parse);
                    let matches = |n: &NodeWork<'_>| match &selector {
                        None => true,
                        Some(Ok(sel)) => sel.matches(&n.labels),
                        Some(Err(_)) => false,
                    };
                    let recall = |i: usize| {
                        let n = &nodes[i];
                        let memo = id.and(n.memo());
                        let input = id.unwrap_or_default();
                        NodeMemo::recall_selected(memo, memo_id, input, || matches(n))
                    };
                    // While the last pass's order holds (in place, or followed), a node that is
                    // the very object the last pass had keeps its answer: only renewed nodes
                    // are matched again.
                    let kept = id
                        .filter(|_| same_order || follow)
                        .and_then(|id| cache?.selected_by(id));
                    let now = |k: usize| match &node_moves {
                        Some(moves) if !same_order => moves.now(k),
                        _ => Some(k),
                    };
                    let (selected, same_as_last) = match kept {
                        Some(kept) if same_order && renewed.is_empty() => (kept.to_vec(), true),
                        Some(kept) => {
                            let mut member = vec![false; nodes.len()];
                            for &k in kept {
                                if let Some(m) = now(k).and_then(|i| member.get_mut(i)) {
                                    *m = true;
                                }
                            }
                            for &i in &renewed {
                                member[i] = recall(i);
                            }
                            let selected: Vec<usize> =
                                order.iter().copied().filter(|&i| member[i]).collect();
                            let same = same_order && selected == kept;
                            (selected, same)
                        }
                        None => (
                            order.iter().copied().filter(|&i| recall(i)).collect(),
                            false,
                        ),
                    };
                    selections.push(Selection {
                        selector: wanted,
                        id,
                        nodes: selected.clone(),
                        same_as_last,
                    });
                    (selected, same_as_last)
                }
            };
            let key = StateKey {
                index: nws.len() as u32,
                name,
            };
            let state_key = keys::node_state(name);
            for &i in &selected {
                let before = match earlier.binary_search_by_key(&i, |(n, _)| *n) {
                    Ok(k) => earlier[k].1.as_slice(),
                    Err(_) => &[],
                };
                nodes[i].load_state_reusing(key, &state_key, before, slots);
            }
            let (policy, policy_missing) = match nw.spec.deployment_policy.as_deref() {
                Some(p) if !p.is_empty() => {
                    let found = snap
                        .policies
                        .iter()
                        .find(|d| d.metadata.name.as_deref() == Some(p));
                    (found, found.is_none())
                }
                _ => (None, false),
            };
            let original = nw.status.as_ref();
            let status = original.map(without_node_state).unwrap_or_default();
            let mut pos = vec![NOT_SELECTED; nodes.len()];
            for (p, &i) in selected.iter().enumerate() {
                pos[i] = p as u32;
            }
            let completion_inputs = match cache {
                Some(c) => c.completion_inputs(nw),
                None => Arc::new(CompletionInputs::of(nw)),
            };
            let complete = vec![false; selected.len()];
            let complete_at = vec![NOT_COMPUTED; selected.len()];
            let status_memo = vec![Cell::new((NOT_COMPUTED, Status::Unknown)); selected.len()];
            let published_at = vec![NOT_COMPUTED; selected.len()];
            let written_back_at = vec![NOT_COMPUTED; selected.len()];
            let mut view = NwView {
                keys: NwKeys {
                    status: keys::status(name),
                    node_state: state_key,
                    cordon: keys::cordon(name),
                    config_applied: keys::config_applied(name),
                },
                node_state_changes: 0,
                completion_inputs,
                empty_digest: RefCell::new(None),
                digests: RefCell::new(vec![None; selected.len()]),
                status_version: cache.and_then(|c| Some(c.version_id(&StatusVersion::of(nw)?))),
                memo_id,
                pos,
                complete,
                complete_at,
                status_memo,
                published_at,
                published_seed: vec![None; selected.len()],
                conditions_current: vec![Cell::new(None); selected.len()],
                version_stamped: vec![Cell::new(None); selected.len()],
                drain_blocked: vec![Cell::new(None); selected.len()],
                boot_recorded: vec![false; selected.len()],
                carried_ready: None,
                ready_message: None,
                carried_nothing_departed: false,
                nothing_departed: false,
                written_back_at,
                compartments: Vec::new(),
                compartment_of: Vec::new(),
                nw,
                name,
                index: key.index,
                selected,
                policy,
                policy_missing,
                initial_status: status.status,
                status,
                node_status: NodeMap::new(original.and_then(|s| s.node_status.as_ref())),
                node_state: NodeMap::new(original.and_then(|s| s.node_state.as_ref())),
                node_boot_ids: NodeMap::new(original.and_then(|s| s.node_boot_ids.as_ref())),
                node_priority: match original {
                    Some(s) => Cow::Borrowed(&s.node_priority),
                    None => Cow::Owned(None),
                },
                transitioned: false,
            };
            if let Some(carry) = carries.get_mut(&memo_id) {
                view.seed(&nodes, carry, same_selection);
            }
            nws.push(view);
        }
        let selector_ids = selections
            .iter()
            .filter_map(|s| Some((s.selector, s.id?)))
            .collect();
        let selections = selections
            .into_iter()
            .filter_map(|s| Some((s.id?, s.nodes)))
            .collect();
        let jobs_read = JobTable::build(
            snap,
            settings,
            jobs_carried,
            &nodes,
            &node_ids,
            cache.is_some() && !nodes_moved,
            node_moves.as_ref(),
        );
        PassCtx {
            snap,
            settings,
            selector_ids,
            order,
            selections,
            now: snap.now,
            runtime_taint,
            nodes,
            node_moves,
            node_ids,
            long_labels,
            label_collision,
            nws,
            carries,
            index: SnapIndex::build(snap, jobs_read),
            job_matches: cache.map(StateCache::job_matches),
            actions: Vec::new(),
            after: Vec::new(),
            emitted_index: EmittedIndex::default(),
            events: Vec::new(),
            requeue_active: false,
            requeue_after: None,
            errors: Vec::new(),
        }
    }

    /// Hands what this pass resolved of its NodeWrights, selectors and Jobs to `cache`, for
    /// the next pass (the nodes go back at the end, [`PassCtx::into_actions`]).
    pub fn fill_cache(&mut self, cache: &mut StateCache) {
        cache.keep_order(
            std::mem::take(&mut self.order),
            std::mem::take(&mut self.selections),
        );
        cache.retain_completion_inputs(self.nws.iter().map(|v| (v.name, &v.completion_inputs)));
        cache.retain_selectors(self.selector_ids.iter().copied());
        cache.job_matches().begin_pass();
        cache.retain_memo_ids(self.nws.iter().map(|v| {
            let version = StatusVersion::of(v.nw).zip(v.status_version);
            (v.name, v.memo_id, version)
        }));
    }

    /// Hands `cache` what this pass derived for each NodeWright's selected nodes before
    /// writing them, for the next pass to start from ([`SelectionCarry`]). Called last, when
    /// nothing more is derived.
    pub fn carry_into(&mut self, cache: &mut StateCache) {
        let carries: Vec<(NodeWrightId, SelectionCarry)> = self
            .nws
            .iter()
            .map(|view| {
                let mut carry = self.carries.remove(&view.memo_id).unwrap_or_default();
                view.carry_out(&self.nodes, &mut carry);
                (view.memo_id, carry)
            })
            .collect();
        // Those of NodeWrights no longer in the pass go.
        self.carries.clear();
        cache.keep_carries(carries);
    }

    /// Whether the last pass's sweep left `job` alone having judged it from exactly what this
    /// pass would judge it from (see [`SweptVerdict`]): the same Job version, NodeWright spec
    /// and uid, node object (not written in this pass), and settings. A verdict found
    /// standing is kept for the next pass.
    pub fn swept_before(&self, nw: usize, node: usize, job: &Job) -> bool {
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

    /// Records that the sweep left `job` alone, judged from the snapshot's node `node`, for
    /// the next pass ([`PassCtx::swept_before`]); nothing is recorded without a cache, for a
    /// Job not in the snapshot, or once the pass wrote the node.
    pub fn left_alone(&mut self, nw: usize, node: usize, job: &Job) {
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

    /// Whether the pod at position `at` of the snapshot is an object an earlier pass found
    /// quiet (§8.10) in this pass's operator namespace.
    pub fn pod_quiet_before(&self, at: usize) -> bool {
        (self.index.jobs_read).pod_quiet_before(at, &self.settings.namespace)
    }

    /// Records whether the evidence of the pod at position `at` was quiet, for the next pass.
    pub fn record_pod(&mut self, at: usize, quiet: bool) {
        let namespace = &self.settings.namespace;
        (self.index.jobs_read).record_pod_quiet(at, namespace, quiet);
    }

    /// Node id by name.
    pub fn node_id(&self, name: &str) -> Option<usize> {
        self.node_ids.get(name).copied()
    }
    /// The node whose Job `node` label value (`names::node_label_value`) is `label`, or
    /// `Err` when the snapshot has colliding labels and only a scan can tell.
    pub fn node_by_label(&self, label: &str) -> Result<Option<usize>, AmbiguousNodeLabel> {
        if self.label_collision {
            return Err(AmbiguousNodeLabel);
        }
        if let Some(&id) = self.node_ids.get(label)
            && self.nodes[id].name.len() <= LABEL_MAX
        {
            return Ok(Some(id));
        }
        Ok(self.long_labels.get(label).copied())
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
        match view.pos.get(node) {
            Some(&p) if p != NOT_SELECTED => {
                let memo = &view.status_memo[p as usize];
                let (at, status) = memo.get();
                if at == n.writes {
                    return status;
                }
                let status = read();
                memo.set((n.writes, status));
                status
            }
            _ => read(),
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
        let pos = view.pos.get(node).copied().filter(|&p| p != NOT_SELECTED);
        if let Some(p) = pos
            && view.published_at[p as usize] == n.writes
        {
            return;
        }
        // The snapshot's mirror was found equal to this very parse under this very status
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
            view.published_at[p as usize] = n.writes;
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
    pub fn create_job(&mut self, node: usize, job: Job) -> usize {
        let mut after = vec![After::Node(self.nodes[node].name.to_string())];
        let mounted = job
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|v| v.config_map.as_ref().map(|c| c.name.as_str()));
        for name in mounted {
            if let Some(&at) = self.emitted_index.upserted_config_maps.get(name) {
                after.push(After::Emitted(at));
            }
        }
        self.emit_after(Action::CreateJob(Box::new(job)), after)
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
            if let Some(jobs) = index.jobs_read.into_carried() {
                cache.keep_jobs(jobs);
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

    use k8s_openapi::api::batch::v1::Job;
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
