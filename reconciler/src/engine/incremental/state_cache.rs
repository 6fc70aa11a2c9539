//! Parsed node-state annotations kept between passes (engine performance, issue 4).
//!
//! Parsing every `nodeState_<nw>` annotation of a 10,000-node fleet costs far more than the
//! rest of a pass, and at steady state almost none of them changed since the previous pass.
//! The cache belongs to the caller (the controller loop, the simulator, the bench): the engine
//! reads it while building the pass and hands back what it parsed afterwards, so
//! `reconcile` itself stays a function of its inputs.
//!
//! A hit requires the annotation value to be byte-for-byte the one that was parsed, so a pass
//! with a warm cache decides exactly what it would with an empty one; the cache only saves the
//! parse. Like `Memory`, it is lost on restart, and it holds only the nodes and NodeWrights of
//! the last pass (no growth across passes).
//!
//! A parse also remembers the node's completion for its NodeWright (§6.4), which is the other
//! per-node cost every pass pays. The memo is keyed exactly as well: by the NodeWright's
//! completion inputs ([`CompletionInputs`], compared once per NodeWright and pass and then
//! shared by pointer) and by the node's `configApplied_<nw>` value, byte for byte.
//!
//! Each pass also hands over what it derived: per NodeWright, for each node it selected, the
//! values it found before writing the node ([`SelectionCarry`]), and what it read of each Job
//! ([`CarriedJobs`]: facts, package, pods, the sweep's verdicts). The next pass starts from
//! them wherever what they were derived from is unchanged (the same node object, completion
//! inputs, status version, Job object or version), so a steady pass re-derives only what
//! changed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use rustc_hash::FxHashMap;

use nodewright_schema::node_state::MalformedNodeState;
use nodewright_schema::{NodeState, NodeWright, Status};

use super::job_table::CarriedJobs;
use super::{ObjectVersion, Released, same_version};
use crate::engine::complete::{CompletionInputs, NodeDigest};
use crate::engine::context::{StateSlot, StateSlots};
use crate::engine::jobs::{MatchTarget, PackageAnnotation};
use crate::job::Job;

/// A node's digest under one set of NodeWright inputs and one `configApplied` value.
#[derive(Debug)]
struct DigestMemo {
    /// Compared by pointer: the pass hands out one `Arc` per distinct input (see
    /// [`StateCache::completion_inputs`]), and holding it keeps its address from being reused.
    inputs: Arc<CompletionInputs>,
    applied: Option<Box<str>>,
    digest: Arc<NodeDigest>,
}

/// One node-state annotation as read: the raw value and what it parses to.
#[derive(Debug)]
pub struct ParsedState {
    raw: String,
    parsed: Result<NodeState, MalformedNodeState>,
    digest: Mutex<Option<DigestMemo>>,
    /// The NodeWright status version (uid, resourceVersion) whose `nodeState` mirror of this
    /// node was found equal to this parse.
    mirrored: Mutex<Option<VersionId>>,
}

/// A NodeWright status's [`ObjectVersion`] as a number the cache hands out ([`StateCache::version_id`]): one
/// number names one version, so memos compare an integer instead of two strings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VersionId(u64);

/// A NodeWright name as a number the cache hands out ([`StateCache::nodewright_id`]): the key
/// of that NodeWright's facts in a [`NodeMemo`], compared as an integer instead of a name.
/// Without a cache there are no memos, and the default id is never looked up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NodeWrightId(u64);

impl ParsedState {
    /// Whether this is the parse of exactly `raw`.
    pub fn is_of(&self, raw: &str) -> bool {
        self.raw == raw
    }

    /// Parses an annotation value.
    pub fn parse(raw: &str) -> ParsedState {
        ParsedState {
            raw: raw.to_string(),
            parsed: NodeState::parse(raw),
            digest: Mutex::new(None),
            mirrored: Mutex::new(None),
        }
    }

    /// A state as a node-state patch writes it (`apply_node_patch`), with that text as its raw
    /// value: its parse is the state itself, since the stored form reads back as it was.
    pub fn written(state: NodeState) -> ParsedState {
        ParsedState {
            raw: state.to_annotation(),
            parsed: Ok(state),
            digest: Mutex::new(None),
            mirrored: Mutex::new(None),
        }
    }

    /// The digest remembered for exactly these inputs and `configApplied` value.
    pub fn digest(
        &self,
        inputs: &Arc<CompletionInputs>,
        applied: Option<&str>,
    ) -> Option<Arc<NodeDigest>> {
        // A poisoned lock only means a panic elsewhere; the memo itself is always whole.
        let memo = self.digest.lock().unwrap_or_else(PoisonError::into_inner);
        memo.as_ref()
            .filter(|m| Arc::ptr_eq(&m.inputs, inputs) && m.applied.as_deref() == applied)
            .map(|m| Arc::clone(&m.digest))
    }

    /// Remembers the digest derived from this parse under `inputs` and `applied`.
    pub fn remember_digest(
        &self,
        inputs: &Arc<CompletionInputs>,
        applied: Option<&str>,
        digest: Arc<NodeDigest>,
    ) {
        let mut memo = self.digest.lock().unwrap_or_else(PoisonError::into_inner);
        *memo = Some(DigestMemo {
            inputs: Arc::clone(inputs),
            applied: applied.map(Box::from),
            digest,
        });
    }
    /// Whether the `nodeState` mirror in the NodeWright status of exactly this version was
    /// found equal to this parse.
    pub fn mirrored_in(&self, version: VersionId) -> bool {
        let mirrored = self.mirrored.lock().unwrap_or_else(PoisonError::into_inner);
        *mirrored == Some(version)
    }

    /// Remembers that the mirror in this version of the status equals this parse.
    pub fn remember_mirrored(&self, version: VersionId) {
        let mut mirrored = self.mirrored.lock().unwrap_or_else(PoisonError::into_inner);
        *mirrored = Some(version);
    }

    /// The annotation value this was parsed from.
    pub fn raw(&self) -> &str {
        &self.raw
    }
    /// The parse result.
    pub fn parsed(&self) -> Result<&NodeState, &MalformedNodeState> {
        self.parsed.as_ref()
    }
}

/// Values derived from one node object alone, per NodeWright, kept from pass to pass while the
/// snapshot hands over the same version of the node (`same_version`; its
/// [`NodeEntry`] holds the object). Each value is remembered with what else it depends on (a
/// selector id, a NodeWright), so a memo can never answer for inputs it was not computed from.
#[derive(Debug, Default)]
pub struct NodeMemo {
    /// Per NodeWright: whether the node's labels match the node selector (§5.6) of one id
    /// ([`StateCache::selector_id`]), so an edited selector is matched afresh.
    selections: Mutex<Vec<(NodeWrightId, u64, bool)>>,
    /// Per NodeWright: the name of the node's metadata ConfigMap (§9.1), a hash of the node's
    /// name, derived once for the node object.
    metadata_names: Mutex<Vec<(NodeWrightId, Box<str>)>>,
}

impl NodeMemo {
    /// Whether `name` is the name of this node's metadata ConfigMap for a NodeWright (§9.1):
    /// the name is `derive`d on first use and kept for the node object.
    pub fn is_metadata_configmap(
        &self,
        nodewright: NodeWrightId,
        name: &str,
        derive: impl FnOnce() -> String,
    ) -> bool {
        self.read_metadata_configmap(nodewright, derive, |known| known == name)
    }

    /// The name of this node's metadata ConfigMap for a NodeWright (§9.1): `derive`d on first
    /// use and kept for the node object.
    pub fn metadata_configmap(
        &self,
        nodewright: NodeWrightId,
        derive: impl FnOnce() -> String,
    ) -> String {
        self.read_metadata_configmap(nodewright, derive, str::to_string)
    }

    /// Lends `read` the name of this node's metadata ConfigMap for a NodeWright, `derive`d on
    /// first use: comparing a name copies nothing.
    fn read_metadata_configmap<R>(
        &self,
        nodewright: NodeWrightId,
        derive: impl FnOnce() -> String,
        read: impl FnOnce(&str) -> R,
    ) -> R {
        let mut names = self
            .metadata_names
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((_, known)) = names.iter().find(|(nw, _)| *nw == nodewright) {
            return read(known);
        }
        let derived = derive();
        let out = read(&derived);
        names.push((nodewright, derived.into_boxed_str()));
        out
    }

    /// Whether the node matched the selector of this id, as remembered for this NodeWright.
    pub fn selected(&self, nodewright: NodeWrightId, selector: u64) -> Option<bool> {
        // A poisoned lock only means a panic elsewhere; the list itself is always whole.
        let selections = self
            .selections
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (selections.iter())
            .find(|(nw, id, _)| *nw == nodewright && *id == selector)
            .map(|(_, _, matched)| *matched)
    }

    /// Whether the node matches the selector of this id: as `memo` remembers it for this
    /// NodeWright, or `matches`, then remembered; always matched without a memo.
    pub fn recall_selected(
        memo: Option<&NodeMemo>,
        nodewright: NodeWrightId,
        selector: u64,
        matches: impl FnOnce() -> bool,
    ) -> bool {
        let Some(memo) = memo else {
            return matches();
        };
        if let Some(matched) = memo.selected(nodewright, selector) {
            return matched;
        }
        let matched = matches();
        memo.remember_selected(nodewright, selector, matched);
        matched
    }

    /// Remembers a selector match for a NodeWright (replacing the one for another selector).
    pub fn remember_selected(&self, nodewright: NodeWrightId, selector: u64, matched: bool) {
        let mut selections = self
            .selections
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match selections.iter_mut().find(|(nw, _, _)| *nw == nodewright) {
            Some(slot) => *slot = (nodewright, selector, matched),
            None => selections.push((nodewright, selector, matched)),
        }
    }
}

/// What a pass leaves of one node for the next (`StateCache::take_nodes`): the node object
/// it read, the memo made for that object, and the node's state slots as read from it.
#[derive(Debug)]
pub struct NodeEntry {
    /// The snapshot's `Arc` of the node: what the next pass's node is compared with
    /// ([`super::same_version`]).
    pub(in crate::engine) node: Arc<Node>,
    /// What the pass derived from the object.
    pub(in crate::engine) memo: Arc<NodeMemo>,
    /// The node-state annotations read from the object, by the last pass's NodeWright
    /// positions (remapped to the taking pass's by [`StateCache::take_nodes`]).
    pub(in crate::engine) slots: StateSlots,
}

/// The last pass's node entries, moved out of the cache for one pass to take from.
pub(in crate::engine) struct CarriedNodes<'c> {
    entries: Vec<Option<NodeEntry>>,
    index: &'c FxHashMap<Box<str>, usize>,
    moved: bool,
    /// Per node taken so far: the position of its entry in the last pass.
    from: Vec<u32>,
}

/// A position no node holds: the node joined (it was nowhere) or left (it is nowhere now).
pub(in crate::engine) const NOWHERE: u32 = u32::MAX;

/// Where the nodes of a pass were in the last pass's snapshot, and where the last pass's
/// nodes are now, matched by object at the same position or else by name.
#[derive(Debug, Default)]
pub(in crate::engine) struct NodeMoves {
    /// Per node of this pass: its position in the last pass, or [`NOWHERE`].
    pub(in crate::engine) from: Vec<u32>,
    /// Per node of the last pass: its position in this pass, or [`NOWHERE`].
    pub(in crate::engine) to: Vec<u32>,
}

impl NodeMoves {
    /// The position now of the last pass's node at `before`, when it is still here.
    pub(in crate::engine) fn now(&self, before: usize) -> Option<usize> {
        let at = *self.to.get(before)?;
        (at != NOWHERE).then_some(at as usize)
    }
}

impl CarriedNodes<'_> {
    /// The entry of the node at position `at` of the snapshot: the last pass's entry at the
    /// same position when it holds this very object, else the entry of the same name (another
    /// copy or version of the node, or a node that moved), else `None`. Whether the entry is
    /// for this version is the caller's question ([`super::same_version`]).
    pub(in crate::engine) fn take(&mut self, at: usize, node: &Arc<Node>) -> Option<NodeEntry> {
        if let Some(entry) = self.entries.get_mut(at)
            && entry.as_ref().is_some_and(|e| Arc::ptr_eq(&e.node, node))
        {
            self.from.push(at as u32);
            return entry.take();
        }
        let found = node
            .metadata
            .name
            .as_deref()
            .and_then(|name| self.index.get(name))
            .copied();
        if found != Some(at) {
            self.moved = true;
        }
        let entry = found.and_then(|k| self.entries.get_mut(k)?.take());
        self.from.push(match (found, &entry) {
            (Some(k), Some(_)) => k as u32,
            _ => NOWHERE,
        });
        entry
    }

    /// Where each node taken was, and where each of the last pass's nodes went.
    pub(in crate::engine) fn into_moves(self) -> NodeMoves {
        let mut to = vec![NOWHERE; self.entries.len()];
        for (now, &before) in self.from.iter().enumerate() {
            if let Some(slot) = to.get_mut(before as usize) {
                *slot = now as u32;
            }
        }
        NodeMoves {
            from: self.from,
            to,
        }
    }

    /// Whether some node of a snapshot of `nodes` nodes was not where the last pass had it.
    pub(in crate::engine) fn moved(&self, nodes: usize) -> bool {
        self.moved || self.entries.len() != nodes
    }
}

/// The cached annotations of one node, from [`StateCache::node`].
#[derive(Clone, Copy, Debug)]
pub struct CachedStates<'c> {
    entry: &'c NodeEntry,
    names: &'c [Box<str>],
}

impl CachedStates<'_> {
    fn slots_of<'s>(&'s self, nodewright: &'s str) -> impl Iterator<Item = &'s StateSlot> + 's {
        self.entry
            .slots
            .iter()
            .filter(move |(k, _)| {
                self.names
                    .get(*k as usize)
                    .is_some_and(|n| &**n == nodewright)
            })
            .map(|(_, slot)| slot)
    }

    /// The parse of `raw` for this NodeWright, when cached from exactly this value.
    pub fn get(&self, nodewright: &str, raw: &str) -> Option<Arc<ParsedState>> {
        self.slots_of(nodewright)
            .find_map(|slot| slot.parse_of(raw))
            .cloned()
    }

    /// The parse cached for this NodeWright, which is the parse of its annotation whenever
    /// [`CachedStates::memo_for`] answers for the node: every parse of the entry was read from
    /// the node object the memo holds.
    pub fn get_unchanged(&self, nodewright: &str) -> Option<Arc<ParsedState>> {
        self.slots_of(nodewright)
            .find_map(StateSlot::original)
            .cloned()
    }

    /// How many parses the entry holds.
    pub fn state_count(&self) -> usize {
        self.entry
            .slots
            .iter()
            .filter(|(_, slot)| slot.original().is_some())
            .count()
    }

    /// The last pass's memo, when it was made for this version of the node.
    pub fn memo_for(&self, node: &Arc<Node>) -> Option<Arc<NodeMemo>> {
        same_version(&self.entry.node, node).then(|| Arc::clone(&self.entry.memo))
    }
}

/// Parsed node-state annotations by node and NodeWright, carried from one pass to the next
/// by the caller of [`crate::engine::reconcile_cached`]. An empty cache is always correct.
#[derive(Debug, Default)]
pub struct StateCache {
    /// Per node of the last pass, in its snapshot order.
    nodes: Vec<Option<NodeEntry>>,
    /// Position of each node in `nodes`, by name.
    node_index: FxHashMap<Box<str>, usize>,
    /// The last pass's NodeWright names by position, which key the entries' slots.
    slot_names: Vec<Box<str>>,
    /// The last pass's node order (§5.3: creationTimestamp, then name), by position.
    node_order: Vec<usize>,
    /// The last pass's selected nodes (in node order) per selector id, over the same node
    /// objects `nodes` holds.
    selections: Vec<(u64, Vec<usize>)>,
    /// The completion inputs of each NodeWright of the last pass.
    completion_inputs: Vec<(String, Arc<CompletionInputs>)>,
    /// What the last pass read from each Job, by position in its snapshot: every pass reads
    /// every Job, and at steady state none changed.
    jobs: CarriedJobs,
    /// The node selectors of the last pass with their ids: equal selectors keep their id, a
    /// new one gets the next, so an id names one selector for the cache's whole life.
    selectors: Vec<(Option<LabelSelector>, u64)>,
    /// The NodeWright names of the last pass with their ids.
    nodewright_ids: FxHashMap<Box<str>, NodeWrightId>,
    /// The NodeWright status versions of the last pass with their ids.
    version_ids: FxHashMap<ObjectVersion, VersionId>,
    /// The next selector, NodeWright or version id. Handed out through `&self` (a pass reads
    /// the cache while it builds), and never twice, even by a pass whose ids are not kept.
    next_id: AtomicU64,
    /// Sweep comparisons of unfinished Jobs, shared with the pass that adds to them.
    job_matches: Arc<JobMatchMemo>,
    /// Per NodeWright of the last pass: what it derived for each node it selected.
    carries: FxHashMap<NodeWrightId, SelectionCarry>,
    /// What the last pass let go of, until the caller takes it or the next pass starts.
    released: Released,
}

/// One node a NodeWright selected in the last pass, with what that pass derived for it.
#[derive(Clone, Debug)]
pub struct CarriedNode {
    /// The node's memo. The same `Arc` in the next pass means the same node object
    /// (the carry holds it, so its address cannot name another memo meanwhile).
    pub memo: Arc<NodeMemo>,
    /// What the pass derived for it.
    pub facts: CarriedFacts,
}

/// What one pass derived for one node a NodeWright selects while the node was still as the
/// snapshot held it (before the pass wrote it), for the next pass to start from.
#[derive(Clone, Debug, Default)]
pub struct CarriedFacts {
    /// The node's digest (§10.2) under the carry's completion inputs (`Some(None)`: its
    /// state is malformed); `None` when not derived.
    pub digest: Option<Option<Arc<NodeDigest>>>,
    /// The node's `status_<nw>` annotation, when read.
    pub status: Option<Status>,
    /// Under the carry's status version, the `nodeState` mirror equals the node's state.
    pub mirrored: bool,
    /// Under the carry's status version, the Status write-back (§5.12) changed nothing.
    pub written_back: bool,
    /// Under the carry's status version, the node's `status.nodeStatus` value (absent reads
    /// as `unknown`); `None` when the pass changed that entry.
    pub published: Option<Status>,
    /// Which node conditions the node object carries as wanted, under which input (see
    /// [`crate::engine::context::NwView::node_conditions_current`]).
    pub conditions: Option<(crate::engine::conditions::ConditionFacts, u8)>,
    /// Whether the node object carries `version_<nw>`.
    pub stamped: Option<bool>,
    /// Whether the node object carries `drain_blocked_<nw>`.
    pub drain_blocked: Option<bool>,
    /// Under the carry's status version, `status.nodeBootIds` holds the node's boot id.
    pub boot_recorded: bool,
}

/// Per NodeWright, what the last pass derived for each node it selected, in selection order.
///
/// Every value here is a function of the node object and of the inputs the carry names, so
/// the next pass seeds its per-pass memos from it for each node whose object is the same:
/// digests and completion while the completion inputs are the same `Arc`, mirror facts while
/// the status version is the same. Facts the last pass found after writing a node are not
/// carried; they held for the written copy, not the snapshot's.
#[derive(Debug, Default)]
pub struct SelectionCarry {
    /// The completion inputs the digests were derived under.
    pub inputs: Option<Arc<CompletionInputs>>,
    /// The status version the mirror facts were found under.
    pub version: Option<VersionId>,
    /// Per selected node, in selection order.
    pub nodes: Vec<CarriedNode>,
    /// The `Ready` message (§12.1), when made from the status version's `nodeStatus` as is.
    pub ready_message: Option<String>,
    /// Under the carry's status version and over exactly these nodes, dropping the entries
    /// of departed nodes (ReportState, §5.4) found none to drop.
    pub nothing_departed: bool,
}

/// A Job's parsed `package` annotation, `None` when it does not parse (shared between the
/// pass that parsed it and the cache).
pub type ParsedPackage = Arc<Option<PackageAnnotation>>;

impl StateCache {
    /// An empty cache.
    pub fn new() -> StateCache {
        StateCache::default()
    }

    /// The parse of `raw` for this node and NodeWright, when cached from exactly this value.
    pub fn get(&self, node: &str, nodewright: &str, raw: &str) -> Option<Arc<ParsedState>> {
        self.node(node)?.get(nodewright, raw)
    }

    /// The cached annotations of one node (one lookup serves all its NodeWrights).
    pub fn node(&self, node: &str) -> Option<CachedStates<'_>> {
        let &at = self.node_index.get(node)?;
        let entry = self.nodes.get(at)?.as_ref()?;
        Some(CachedStates {
            entry,
            names: &self.slot_names,
        })
    }

    /// The last pass's node order, by position in its snapshot.
    pub(in crate::engine) fn node_order(&self) -> &[usize] {
        &self.node_order
    }

    /// The nodes the last pass selected with the selector of this id, by position in its
    /// snapshot, in node order.
    pub(in crate::engine) fn selected_by(&self, selector: u64) -> Option<&[usize]> {
        self.selections
            .iter()
            .find(|(id, _)| *id == selector)
            .map(|(_, nodes)| nodes.as_slice())
    }

    /// Keeps a pass's node order and its selections per selector id, for a next pass over
    /// the same node objects.
    pub(in crate::engine) fn keep_order(
        &mut self,
        order: Vec<usize>,
        selections: Vec<(u64, Vec<usize>)>,
    ) {
        self.node_order = order;
        self.selections = selections;
    }

    /// Moves the last pass's node entries out for a pass over NodeWrights `names` (by
    /// position) to take from ([`CarriedNodes::take`]); the pass hands its own back with
    /// [`StateCache::keep_nodes`]. Slots follow their NodeWright to its position in this
    /// pass; those of a NodeWright that left are dropped.
    pub(in crate::engine) fn take_nodes(&mut self, names: &[&str]) -> CarriedNodes<'_> {
        let mut entries = std::mem::take(&mut self.nodes);
        if !self.same_slot_names(names) {
            let to: Vec<Option<u32>> = self
                .slot_names
                .iter()
                .map(|old| names.iter().position(|n| *n == &**old).map(|p| p as u32))
                .collect();
            for entry in entries.iter_mut().flatten() {
                entry.slots.retain_mut(|(k, _)| {
                    let new = to.get(*k as usize).copied().flatten();
                    *k = new.unwrap_or(u32::MAX);
                    new.is_some()
                });
                entry.slots.sort_by_key(|(k, _)| *k);
                entry.slots.dedup_by_key(|(k, _)| *k);
            }
        }
        CarriedNodes {
            entries,
            index: &self.node_index,
            moved: false,
            from: Vec::new(),
        }
    }

    /// Keeps a pass's node entries, in its snapshot order, for the next pass; `names` are its
    /// NodeWrights by position. The name index changes only when some node moved: at steady
    /// state every node is where it was. Then `moves` ([`CarriedNodes::into_moves`]) take
    /// each node to its new position, and only the names of the nodes that joined are read.
    pub(in crate::engine) fn keep_nodes(
        &mut self,
        entries: impl Iterator<Item = Option<NodeEntry>>,
        names: &[&str],
        moves: Option<&NodeMoves>,
    ) {
        self.nodes.clear();
        self.nodes.extend(entries);
        if let Some(moves) = moves {
            self.node_index.retain(|_, at| match moves.now(*at) {
                Some(now) => {
                    *at = now;
                    true
                }
                None => false,
            });
            for (at, &before) in moves.from.iter().enumerate() {
                let name = self.nodes.get(at).and_then(Option::as_ref);
                if before == NOWHERE
                    && let Some(name) = name.and_then(|e| e.node.metadata.name.as_deref())
                {
                    self.node_index.insert(name.into(), at);
                }
            }
        }
        if !self.same_slot_names(names) {
            self.slot_names = names.iter().map(|n| Box::from(*n)).collect();
        }
    }

    /// Whether `names` are the last pass's NodeWright names, position by position.
    fn same_slot_names(&self, names: &[&str]) -> bool {
        self.slot_names
            .iter()
            .map(|n| &**n)
            .eq(names.iter().copied())
    }

    /// The completion inputs of a NodeWright: the last pass's `Arc` when they are equal (so
    /// the completions remembered under it still hold), else a new one.
    pub fn completion_inputs(&self, nw: &NodeWright) -> Arc<CompletionInputs> {
        let current = CompletionInputs::of(nw);
        self.completion_inputs
            .iter()
            .find(|(name, inputs)| name == nw.name() && **inputs == current)
            .map(|(_, inputs)| Arc::clone(inputs))
            .unwrap_or_else(|| Arc::new(current))
    }

    /// The id of a node selector (`None`: select every node): the last pass's id for an
    /// equal selector, else `None`.
    pub fn selector_id(&self, selector: Option<&LabelSelector>) -> Option<u64> {
        self.selectors
            .iter()
            .find(|(s, _)| s.as_ref() == selector)
            .map(|(_, id)| *id)
    }

    /// A fresh id, never handed out before.
    fn fresh_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// A fresh selector id, never handed out before.
    pub fn new_selector_id(&self) -> u64 {
        self.fresh_id()
    }

    /// The id of a NodeWright name: the last pass's id for that name, else a fresh one.
    pub fn nodewright_id(&self, name: &str) -> NodeWrightId {
        match self.nodewright_ids.get(name) {
            Some(&id) => id,
            None => NodeWrightId(self.fresh_id()),
        }
    }

    /// The id of a status version: the last pass's id for an equal version, else a fresh
    /// one, so facts remembered against another version never answer for this one.
    pub fn version_id(&self, version: &ObjectVersion) -> VersionId {
        match self.version_ids.get(version) {
            Some(&id) => id,
            None => VersionId(self.fresh_id()),
        }
    }

    /// Keeps this pass's NodeWright names and status versions with their ids (and only those).
    pub fn retain_memo_ids<'s>(
        &mut self,
        nodewrights: impl IntoIterator<
            Item = (&'s str, NodeWrightId, Option<(ObjectVersion, VersionId)>),
        >,
    ) {
        self.nodewright_ids.clear();
        self.version_ids.clear();
        for (name, id, version) in nodewrights {
            self.nodewright_ids.insert(Box::from(name), id);
            if let Some((version, id)) = version {
                self.version_ids.insert(version, id);
            }
        }
    }

    /// What the last pass derived for the nodes this NodeWright selected.
    pub fn carry(&self, nodewright: NodeWrightId) -> Option<&SelectionCarry> {
        self.carries.get(&nodewright)
    }

    /// Moves the last pass's carries out, for a pass to start from and refill (each keeps
    /// its capacity); the pass hands them back with [`StateCache::keep_carries`].
    pub(in crate::engine) fn take_carries(&mut self) -> FxHashMap<NodeWrightId, SelectionCarry> {
        std::mem::take(&mut self.carries)
    }

    /// Keeps these carries (and only these) for the next pass.
    pub fn keep_carries(
        &mut self,
        carries: impl IntoIterator<Item = (NodeWrightId, SelectionCarry)>,
    ) {
        self.carries.clear();
        self.carries.extend(carries);
    }

    /// The memo of sweep comparisons, for a pass to consult and add to.
    pub fn job_matches(&self) -> Arc<JobMatchMemo> {
        Arc::clone(&self.job_matches)
    }

    /// Keeps this pass's selectors and their ids (and only those).
    pub fn retain_selectors<'s>(
        &mut self,
        selectors: impl IntoIterator<Item = (Option<&'s LabelSelector>, u64)>,
    ) {
        self.selectors = selectors
            .into_iter()
            .map(|(s, id)| (s.cloned(), id))
            .collect();
    }

    /// Moves the last pass's Job table out for a pass; the pass hands its own back with
    /// [`StateCache::keep_jobs`].
    pub(in crate::engine) fn take_jobs(&mut self) -> CarriedJobs {
        std::mem::take(&mut self.jobs)
    }

    /// Keeps a pass's Job table for the next pass, and what it let go of for the caller.
    pub(in crate::engine) fn keep_jobs(&mut self, jobs: CarriedJobs, released: Released) {
        self.jobs = jobs;
        self.released.append(released);
    }

    /// The nodes, Jobs and pods the last pass let go of, for the caller to free off the path
    /// from snapshot to plan (a controller, once the plan's writes are out).
    pub fn take_released(&mut self) -> Released {
        std::mem::take(&mut self.released)
    }

    /// Hands the caller the last pass's node objects a pass found replaced.
    pub(in crate::engine) fn release_nodes(&mut self, nodes: Vec<Arc<Node>>) {
        self.released.nodes.extend(nodes);
    }

    /// Frees what the caller did not take after the last pass, so it never piles up.
    pub(in crate::engine) fn free_released(&mut self) {
        self.released = Released::default();
    }

    /// The Job table the next pass starts from.
    #[cfg(test)]
    pub(in crate::engine) fn jobs_mut(&mut self) -> &mut CarriedJobs {
        &mut self.jobs
    }

    /// Keeps the completion inputs of this pass's NodeWrights (and only those).
    pub fn retain_completion_inputs<'s>(
        &mut self,
        inputs: impl IntoIterator<Item = (&'s str, &'s Arc<CompletionInputs>)>,
    ) {
        self.completion_inputs = inputs
            .into_iter()
            .map(|(name, inputs)| (name.to_string(), Arc::clone(inputs)))
            .collect();
    }

    /// Number of cached nodes.
    pub fn node_count(&self) -> usize {
        self.nodes.iter().flatten().count()
    }

    /// Number of cached annotations.
    pub fn len(&self) -> usize {
        let parses = |e: &NodeEntry| {
            e.slots
                .iter()
                .filter(|(_, s)| s.original().is_some())
                .count()
        };
        self.nodes.iter().flatten().map(parses).sum()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whether unfinished Jobs matched the Job the sweep would build now (§8.14 rule 1), per Job
/// version and expected Job: at steady state every unfinished Job is compared with the same
/// expected Job pass after pass, container by container.
///
/// A Job version is its uid and resourceVersion; the API server moves the resourceVersion on
/// every write (as for [`ObjectVersion`]), and the simulator does too. An expected Job is
/// named by the id of its [`MatchTarget`]: equal targets get one id for the memo's life, an
/// edited package a new one. A Job without uid or resourceVersion is compared every time.
/// What a pass does not consult is forgotten at the start of the next.
#[derive(Debug, Default)]
pub struct JobMatchMemo {
    inner: Mutex<JobMatches>,
}

#[derive(Debug, Default)]
struct JobMatches {
    /// Targets with their ids and the pass that last named them.
    targets: Vec<(MatchTarget, u64, u64)>,
    /// By Job uid: the version and target compared, the answer, and the pass that last used it.
    answers: FxHashMap<Box<str>, JobMatch>,
    next_target: u64,
    pass: u64,
}

#[derive(Debug)]
struct JobMatch {
    version: Box<str>,
    target: u64,
    matches: bool,
    seen: u64,
}

impl JobMatchMemo {
    /// Starts a pass: forgets the targets and answers the last pass did not use.
    pub fn begin_pass(&self) {
        let mut memo = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let last = memo.pass;
        memo.targets.retain(|(_, _, seen)| *seen == last);
        memo.answers.retain(|_, answer| answer.seen == last);
        memo.pass += 1;
    }

    /// The id of an expected Job's target: the one of an equal target, else a new one.
    pub fn target_id(&self, target: &MatchTarget) -> u64 {
        let mut memo = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let pass = memo.pass;
        if let Some((_, id, seen)) = memo.targets.iter_mut().find(|(t, _, _)| t == target) {
            *seen = pass;
            return *id;
        }
        let id = memo.next_target;
        memo.next_target += 1;
        memo.targets.push((target.clone(), id, pass));
        id
    }

    /// Whether `job` matches `target`, whose id is `id`: as remembered for this version of the
    /// Job (uid and resourceVersion) and this id, or `compare`d and remembered. `compare` is a
    /// plain function of the two, so it cannot read an input the memo does not key on.
    pub fn recall(
        &self,
        job: &Job,
        target: &MatchTarget,
        id: u64,
        compare: fn(&Job, &MatchTarget) -> bool,
    ) -> bool {
        let Some((uid, version)) = crate::engine::jobs::job_version(job) else {
            return compare(job, target);
        };
        {
            let mut memo = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            let pass = memo.pass;
            if let Some(answer) = memo.answers.get_mut(uid)
                && answer.target == id
                && *answer.version == *version
            {
                answer.seen = pass;
                return answer.matches;
            }
        }
        let matches = compare(job, target);
        let mut memo = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let seen = memo.pass;
        memo.answers.insert(
            Box::from(uid),
            JobMatch {
                version: Box::from(version),
                target: id,
                matches,
                seen,
            },
        );
        matches
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use nodewright_schema::NodeWrightSpec;

    use super::*;
    use crate::engine::{reconcile, reconcile_cached};
    use crate::plan::Plan;
    use crate::settings::Settings;
    use crate::snapshot::Snapshot;

    thread_local! {
        /// The cache carried from pass to pass (and scenario to scenario) by `cold_and_warm`.
        static CACHE: RefCell<StateCache> = RefCell::new(StateCache::new());
        /// Passes compared, annotations served from the cache, and nodes whose memo was
        /// still theirs (the same object as the pass before).
        static COUNTS: RefCell<(usize, usize, usize)> = const { RefCell::new((0, 0, 0)) };
    }

    /// The scenario runner's reconcile: every pass runs cold (no cache) and warm (the cache
    /// the previous passes, of this scenario and of those before it, left) and the two plans
    /// must be identical. The run's own cache is not used: one carried across scenarios also
    /// meets objects it never saw.
    fn cold_and_warm(snapshot: &Snapshot, settings: &Settings, _: &mut StateCache) -> Plan {
        let cold = reconcile(snapshot, settings);
        let (warm, hits) = CACHE.with(|c| {
            let mut cache = c.borrow_mut();
            let hits = hits(&cache, snapshot);
            (reconcile_cached(snapshot, settings, &mut cache), hits)
        });
        assert_eq!(
            cold, warm,
            "a warm parse cache changed the plan (snapshot at {})",
            snapshot.now
        );
        COUNTS.with(|c| {
            let mut c = c.borrow_mut();
            c.0 += 1;
            c.1 += hits.0;
            c.2 += hits.1;
        });
        warm
    }

    /// `n` warm passes, each of which must plan what a cold pass plans, carried out on `snap`
    /// (by the test kit, which leaves resourceVersions alone).
    fn warm_passes(snap: &mut Snapshot, settings: &Settings, cache: &mut StateCache, n: usize) {
        for _ in 0..n {
            let plan = reconcile_cached(snap, settings, cache);
            assert_eq!(plan, reconcile(snap, settings));
            crate::engine::testkit::apply(snap, &plan);
        }
    }

    /// A warm pass over `snap` decides exactly what a cold one does.
    #[track_caller]
    fn assert_warm_is_cold(snap: &Snapshot, settings: &Settings, cache: &mut StateCache) {
        assert_eq!(
            reconcile_cached(snap, settings, cache),
            reconcile(snap, settings)
        );
    }

    /// Node-state annotations of the snapshot the cache can serve as they are, and nodes
    /// whose memo the cache still holds for the same object.
    fn hits(cache: &StateCache, snapshot: &Snapshot) -> (usize, usize) {
        let (mut annotations, mut memos) = (0, 0);
        for node in &snapshot.nodes {
            let name = node.metadata.name.as_deref().unwrap_or_default();
            if cache.node(name).and_then(|c| c.memo_for(node)).is_some() {
                memos += 1;
            }
            for nw in &snapshot.nodewrights {
                let key = nodewright_schema::keys::node_state(nw.name());
                if let Some(raw) = node.metadata.annotations.as_ref().and_then(|a| a.get(&key))
                    && cache.get(name, nw.name(), raw).is_some()
                {
                    annotations += 1;
                }
            }
        }
        (annotations, memos)
    }

    #[test]
    fn every_corpus_pass_plans_the_same_with_a_warm_cache() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/scenarios");
        let files = crate::scenario::scenario_files(&[dir]).unwrap_or_default();
        assert!(!files.is_empty(), "the scenario corpus is empty");
        let mut hooks = crate::scenario::Hooks::product();
        hooks.reconcile = cold_and_warm;
        for file in &files {
            // Divergence panics inside the pass; scenario verdicts are the corpus test's job.
            let _ = crate::scenario::run_file(file, &hooks);
        }
        let (passes, hits, memos) = COUNTS.with(|c| *c.borrow());
        assert!(passes > 1000, "only {passes} passes compared");
        assert!(
            hits > passes,
            "the cache served only {hits} annotations over {passes} passes"
        );
        assert!(
            memos > passes,
            "only {memos} node memos carried over {passes} passes"
        );
    }

    fn parsed(raw: &str) -> Arc<ParsedState> {
        Arc::new(ParsedState::parse(raw))
    }

    #[test]
    fn a_remembered_digest_holds_only_for_the_same_inputs_and_applied_config() {
        let mut nw = NodeWright::new("nw", NodeWrightSpec::default());
        let mut cache = StateCache::new();
        let inputs = cache.completion_inputs(&nw);
        let state = parsed("{}");
        let complete = |d: Option<Arc<NodeDigest>>| d.map(|d| d.complete);
        let digest = NodeDigest::of(&inputs, &NodeState::default(), &Default::default());
        assert!(digest.complete, "no packages: complete");
        state.remember_digest(&inputs, Some("{}"), Arc::new(digest));
        assert_eq!(complete(state.digest(&inputs, Some("{}"))), Some(true));
        assert_eq!(
            complete(state.digest(&inputs, None)),
            None,
            "configApplied differs"
        );
        assert_eq!(complete(state.digest(&inputs, Some("{ }"))), None);

        // Equal inputs in the next pass are the same `Arc`, so the memo still holds.
        cache.retain_completion_inputs([("nw", &inputs)]);
        let again = cache.completion_inputs(&nw);
        assert!(Arc::ptr_eq(&inputs, &again));
        assert_eq!(complete(state.digest(&again, Some("{}"))), Some(true));

        // A spec edit, a deletion or a config update each make new inputs.
        let mut edited = nw.clone();
        edited.spec.priority = 7;
        assert_eq!(
            complete(state.digest(&cache.completion_inputs(&edited), Some("{}"))),
            None
        );
        let mut deleting = nw.clone();
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
        assert_eq!(
            complete(state.digest(&cache.completion_inputs(&deleting), Some("{}"))),
            None
        );
        nw.status = Some(nodewright_schema::NodeWrightStatus {
            config_updates: Some([("pkg".to_string(), vec!["a.conf".to_string()])].into()),
            ..Default::default()
        });
        assert_eq!(
            complete(state.digest(&cache.completion_inputs(&nw), Some("{}"))),
            None
        );

        // Another NodeWright's inputs never serve, even when equal.
        let other = NodeWright::new("other", NodeWrightSpec::default());
        assert!(!Arc::ptr_eq(&cache.completion_inputs(&other), &inputs));
    }

    #[test]
    fn a_hit_needs_the_same_value_and_the_cache_keeps_only_the_last_pass() {
        use crate::engine::testkit::{node, nw, settings, world};
        use nodewright_schema::keys;
        let key = keys::node_state("nw");
        let mut snap = world()
            .node(node("n1").annotation(&key, "{}"))
            .node(node("n2").annotation(&key, "not json"))
            .nw(nw("nw").package("p", "1.0.0"))
            .build();
        let settings = settings();
        let mut cache = StateCache::new();
        let _ = reconcile_cached(&snap, &settings, &mut cache);
        assert!(cache.get("n1", "nw", "{}").is_some());
        assert!(cache.get("n1", "nw", "{ }").is_none());
        assert!(cache.get("n1", "other", "{}").is_none());
        assert!(
            cache
                .get("n2", "nw", "not json")
                .is_some_and(|p| p.parsed().is_err())
        );
        assert_eq!(cache.len(), 2);
        // n1 leaves the fleet: its parse goes.
        snap.nodes.remove(0);
        let _ = reconcile_cached(&snap, &settings, &mut cache);
        assert!(cache.get("n1", "nw", "{}").is_none());
        assert_eq!(cache.len(), 1);
        // The NodeWright leaves (another takes its place): its parses go.
        snap.nodewrights = world()
            .nw(nw("other").package("p", "1.0.0"))
            .build()
            .nodewrights;
        let _ = reconcile_cached(&snap, &settings, &mut cache);
        assert!(cache.get("n2", "nw", "not json").is_none());
        assert!(cache.is_empty());
    }

    #[test]
    fn a_metadata_configmap_name_is_derived_once_per_nodewright_and_node_object() {
        let memo = NodeMemo::default();
        let ids = StateCache::new();
        let (a, b) = (ids.nodewright_id("a"), ids.nodewright_id("b"));
        let derived = std::cell::Cell::new(0);
        let derive = |name: &str| {
            derived.set(derived.get() + 1);
            name.to_string()
        };
        assert!(memo.is_metadata_configmap(a, "a-n1", || derive("a-n1")));
        assert!(!memo.is_metadata_configmap(a, "a-other", || derive("a-n1")));
        assert!(memo.is_metadata_configmap(a, "a-n1", || derive("a-n1")));
        assert_eq!(derived.get(), 1, "derived once for NodeWright a");
        assert!(!memo.is_metadata_configmap(b, "a-n1", || derive("b-n1")));
        assert_eq!(derived.get(), 2, "NodeWright b has its own name");
    }

    #[test]
    fn a_node_memo_answers_only_for_the_selector_and_nodewright_it_was_made_for() {
        let memo = Arc::new(NodeMemo::default());
        let ids = StateCache::new();
        let (nw, other) = (ids.nodewright_id("nw"), ids.nodewright_id("other"));
        memo.remember_selected(nw, 1, true);
        assert_eq!(memo.selected(nw, 1), Some(true));
        assert_eq!(memo.selected(nw, 2), None, "another selector");
        assert_eq!(memo.selected(other, 1), None);
        memo.remember_selected(nw, 2, false);
        assert_eq!(memo.selected(nw, 2), Some(false));
        assert_eq!(memo.selected(nw, 1), None, "replaced");
    }

    #[test]
    fn a_cache_entry_answers_only_for_the_node_version_it_was_made_for() {
        use crate::engine::testkit::{node, nw, settings, world};
        use nodewright_schema::{Stage, State};
        let mut snap = world()
            .node(node("n1").state("nw", &[("p", "1.0.0", Stage::Config, State::Complete)]))
            .nw(nw("nw").package("p", "1.0.0"))
            .build();
        let settings = settings();
        let mut cache = StateCache::new();
        let _ = reconcile_cached(&snap, &settings, &mut cache);
        let node = Arc::clone(&snap.nodes[0]);
        let entry = cache.node("n1").expect("cached");
        assert!(entry.memo_for(&node).is_some());
        assert!(entry.get_unchanged("nw").is_some());
        // Without a uid and resourceVersion, an equal copy, or the node changed through
        // `make_mut` while the cache holds it, is another object: the entry does not answer
        // for it.
        let copy: Arc<Node> = Arc::new((*node).clone());
        assert!(entry.memo_for(&copy).is_none());
        let mut written = Arc::clone(&node);
        Arc::make_mut(&mut written)
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert("k".into(), "v".into());
        assert!(entry.memo_for(&written).is_none());

        // With them, a relist's copy is the same version, and a write moves the version.
        let versioned = |rv: &str| {
            let mut node = (*node).clone();
            node.metadata.uid = Some("uid-n1".into());
            node.metadata.resource_version = Some(rv.into());
            Arc::new(node)
        };
        snap.nodes[0] = versioned("7");
        let _ = reconcile_cached(&snap, &settings, &mut cache);
        let entry = cache.node("n1").expect("cached");
        assert!(entry.memo_for(&versioned("7")).is_some());
        assert!(entry.memo_for(&versioned("8")).is_none());
        let mut other_uid = (*versioned("7")).clone();
        other_uid.metadata.uid = Some("uid-other".into());
        assert!(entry.memo_for(&Arc::new(other_uid)).is_none());
        snap.nodes[0] = Arc::clone(&node);

        // Two nodes of one name (only a hand-built snapshot has them): each object keeps its
        // own entry, and a warm pass decides as a cold one.
        snap.nodes.push(Arc::new(
            crate::engine::testkit::node("n1")
                .state("nw", &[("p", "1.0.0", Stage::Apply, State::InProgress)])
                .build(),
        ));
        for _ in 0..3 {
            assert_warm_is_cold(&snap, &settings, &mut cache);
        }
        snap.nodes.swap(0, 1);
        assert_warm_is_cold(&snap, &settings, &mut cache);
    }

    #[test]
    fn the_state_a_pass_wrote_is_served_once_the_node_shows_it_and_not_before() {
        use crate::engine::testkit::{apply, node, nw, settings, world};
        use crate::plan::Action;
        use nodewright_schema::keys;
        let key = keys::node_state("nw");
        let mut snap = world()
            .node(node("n1"))
            .nw(nw("nw").package("p", "1.0.0"))
            .build();
        let settings = settings();
        let mut cache = StateCache::new();
        let writes_state = |plan: &Plan| {
            (plan.actions.iter())
                .any(|a| matches!(a, Action::PatchNode(p) if !p.node_state.is_empty()))
        };
        let mut plan = reconcile_cached(&snap, &settings, &mut cache);
        for _ in 0..10 {
            if writes_state(&plan) {
                break;
            }
            apply(&mut snap, &plan);
            plan = reconcile_cached(&snap, &settings, &mut cache);
        }
        assert!(
            writes_state(&plan),
            "the rollout records the package on the node"
        );
        // The write did not land: the next pass reads the node as it is.
        assert_warm_is_cold(&snap, &settings, &mut cache);
        assert_eq!(reconcile_cached(&snap, &settings, &mut cache), plan);
        apply(&mut snap, &plan);
        let raw = (snap.nodes[0].metadata.annotations.as_ref())
            .and_then(|a| a.get(&key))
            .expect("the node shows the state")
            .clone();
        let served = cache.get("n1", "nw", &raw).expect("the written state");
        assert_eq!(served.raw(), raw);
        assert_eq!(served.parsed().ok(), NodeState::parse(&raw).ok().as_ref());
        assert_warm_is_cold(&snap, &settings, &mut cache);
    }

    #[test]
    fn a_written_state_reads_back_as_itself() {
        let raw = r#"{"a|1":{"name":"a","version":"1","image":"i","stage":"apply","state":"complete","zz":{"k":1}},"b|2":{"name":"b","version":"2","image":"j","stage":"config","state":"in_progress","restarts":3}}"#;
        let state = NodeState::parse(raw).expect("a valid state");
        let written = ParsedState::written(state.clone());
        assert_eq!(written.raw(), state.to_annotation());
        assert_eq!(NodeState::parse(written.raw()).ok(), Some(state));
    }

    #[test]
    fn a_warm_pass_sees_a_node_changed_behind_the_cache() {
        use crate::engine::testkit::{node, nw, settings, world};
        let mut snap = world()
            .node(node("n1"))
            .node(node("n2"))
            .nw(nw("a").package("p", "1.0.0"))
            .build();
        let settings = settings();
        let mut cache = StateCache::new();
        warm_passes(&mut snap, &settings, &mut cache, 3);
        let _ = reconcile_cached(&snap, &settings, &mut cache);
        assert!(
            cache
                .node("n1")
                .and_then(|e| e.memo_for(&snap.nodes[0]))
                .is_some(),
            "the cache remembers n1 as this pass saw it"
        );
        // Someone else drops n1's version stamp and its node conditions.
        let n1 = Arc::make_mut(&mut snap.nodes[0]);
        let version = nodewright_schema::keys::node_version("a");
        assert!(
            n1.metadata
                .annotations
                .as_mut()
                .and_then(|a| a.remove(&version))
                .is_some(),
            "the first passes stamped the version"
        );
        n1.status = None;
        let warm = reconcile_cached(&snap, &settings, &mut cache);
        assert_eq!(warm, reconcile(&snap, &settings));
        let restores = |action: &crate::plan::Action| match action {
            crate::plan::Action::PatchNode(p) => {
                p.node == "n1" && p.annotations.contains_key(&version)
            }
            _ => false,
        };
        assert!(warm.actions.iter().any(restores), "{:#?}", warm.actions);
        assert!(
            warm.actions.iter().any(|a| matches!(
                a,
                crate::plan::Action::PatchNodeConditions { node, .. } if node == "n1"
            )),
            "the node conditions are written again"
        );
    }

    /// The `nodeState_a` annotation of the node at `index`.
    fn state_of(snap: &Snapshot, index: usize) -> String {
        let key = nodewright_schema::keys::node_state("a");
        snap.nodes[index]
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(&key))
            .cloned()
            .unwrap_or_default()
    }

    /// A world at steady state under a cache: NodeWright `a` (with a uid and resourceVersion,
    /// as the API server gives it) over a complete node `n1` and a fresh node `n2`.
    fn carried_world() -> (Snapshot, Settings, StateCache) {
        use crate::engine::testkit::{node, nw, settings, world};
        use nodewright_schema::{Stage, State};
        let mut snap = world()
            .node(node("n1").state("a", &[("p", "1.0.0", Stage::Config, State::Complete)]))
            .node(node("n2"))
            .nw(nw("a").package("p", "1.0.0"))
            .build();
        let meta = &mut Arc::make_mut(&mut snap.nodewrights[0]).metadata;
        meta.uid = Some("uid-a".into());
        meta.resource_version = Some("1".into());
        let settings = settings();
        let mut cache = StateCache::new();
        warm_passes(&mut snap, &settings, &mut cache, 4);
        let _ = reconcile_cached(&snap, &settings, &mut cache);
        (snap, settings, cache)
    }

    /// What the last pass carried for the node at `index` of the snapshot, to tamper with.
    fn carried<'c>(
        cache: &'c mut StateCache,
        snap: &Snapshot,
        index: usize,
    ) -> &'c mut CarriedFacts {
        let node = &snap.nodes[index];
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let memo = (cache.node(name).and_then(|c| c.memo_for(node))).expect("the node is cached");
        let id = cache.nodewright_id("a");
        let carry = cache
            .carries
            .get_mut(&id)
            .expect("the pass carried NodeWright a");
        &mut carry
            .nodes
            .iter_mut()
            .find(|c| Arc::ptr_eq(&c.memo, &memo))
            .expect("the pass carried this node object")
            .facts
    }

    #[test]
    fn a_steady_pass_leaves_the_cache_as_it_is_and_a_changed_fleet_updates_it() {
        let (mut snap, settings, mut cache) = carried_world();
        let entry = |cache: &StateCache, snap: &Snapshot| {
            cache.node("n1").and_then(|c| c.memo_for(&snap.nodes[0]))
        };
        let before = entry(&cache, &snap).expect("n1 is cached");
        let parses = cache.len();
        let parse = cache
            .get("n1", "a", &state_of(&snap, 0))
            .expect("n1's parse");
        let _ = reconcile_cached(&snap, &settings, &mut cache);
        // A steady pass keeps the node's memo and parse as they are.
        assert!(entry(&cache, &snap).is_some_and(|m| Arc::ptr_eq(&m, &before)));
        let kept = cache
            .get("n1", "a", &state_of(&snap, 0))
            .expect("n1's parse");
        assert!(Arc::ptr_eq(&kept, &parse));
        assert_eq!((cache.node_count(), cache.len()), (2, parses));
        // n2 leaves: the cache follows, and keeps serving n1.
        snap.nodes.truncate(1);
        assert_warm_is_cold(&snap, &settings, &mut cache);
        assert_eq!(cache.node_count(), 1);
        assert!(cache.node("n2").is_none());
        assert!(entry(&cache, &snap).is_some_and(|m| Arc::ptr_eq(&m, &before)));
    }

    #[test]
    fn a_pass_starts_from_the_carry_for_the_node_versions_it_was_made_for() {
        let (mut snap, settings, mut cache) = carried_world();
        let steady = reconcile(&snap, &settings);
        assert_eq!(reconcile_cached(&snap, &settings, &mut cache), steady);
        // A carry that lies about n1's Status annotation is believed for the same object:
        // the warm pass differs from a cold one, so the carry is what it read.
        carried(&mut cache, &snap, 0).status = Some(nodewright_schema::Status::Erroring);
        let lied_to = reconcile_cached(&snap, &settings, &mut cache);
        assert_ne!(lied_to, steady, "the carried Status was not consulted");
        // An equal copy of n1 without a version is another object: the same lie is not
        // believed for it.
        let _ = reconcile_cached(&snap, &settings, &mut cache);
        carried(&mut cache, &snap, 0).status = Some(nodewright_schema::Status::Erroring);
        snap.nodes[0] = Arc::new((*snap.nodes[0]).clone());
        assert_eq!(reconcile_cached(&snap, &settings, &mut cache), steady);
        // With a uid and resourceVersion, a relist's copy is the same version: believed.
        let meta = &mut Arc::make_mut(&mut snap.nodes[0]).metadata;
        meta.uid = Some("uid-n1".into());
        meta.resource_version = Some("1".into());
        let steady = reconcile(&snap, &settings);
        assert_eq!(reconcile_cached(&snap, &settings, &mut cache), steady);
        carried(&mut cache, &snap, 0).status = Some(nodewright_schema::Status::Erroring);
        snap.nodes[0] = Arc::new((*snap.nodes[0]).clone());
        assert_ne!(
            reconcile_cached(&snap, &settings, &mut cache),
            steady,
            "the carried Status was not consulted for a relist's copy"
        );
        // Another version of n1 is read afresh.
        let _ = reconcile_cached(&snap, &settings, &mut cache);
        carried(&mut cache, &snap, 0).status = Some(nodewright_schema::Status::Erroring);
        Arc::make_mut(&mut snap.nodes[0]).metadata.resource_version = Some("2".into());
        assert_eq!(
            reconcile_cached(&snap, &settings, &mut cache),
            reconcile(&snap, &settings)
        );
    }

    #[test]
    fn carried_digests_hold_only_under_the_same_completion_inputs() {
        let (mut snap, settings, mut cache) = carried_world();
        let steady = reconcile(&snap, &settings);
        // n1 carried as malformed (no digest): believed while the inputs are the same.
        carried(&mut cache, &snap, 0).digest = Some(None);
        assert_ne!(reconcile_cached(&snap, &settings, &mut cache), steady);
        // The package is edited: the completion inputs change, and the carry is not used.
        let _ = reconcile_cached(&snap, &settings, &mut cache);
        carried(&mut cache, &snap, 0).digest = Some(None);
        let package = Arc::make_mut(&mut snap.nodewrights[0])
            .spec
            .packages
            .as_mut()
            .and_then(|p| p.get_mut("p"))
            .expect("package p");
        package.image = "example/other".into();
        Arc::make_mut(&mut snap.nodewrights[0])
            .metadata
            .resource_version = Some("2".into());
        assert_warm_is_cold(&snap, &settings, &mut cache);
    }

    #[test]
    fn a_carried_no_departures_verdict_holds_only_for_the_same_status_version_and_node_names() {
        let (snap, settings, mut cache) = carried_world();
        // `nodeStatus` names a node the fleet does not have.
        let with_ghost = |snap: &Snapshot, version: &str| {
            let mut snap = snap.clone();
            let nw = Arc::make_mut(&mut snap.nodewrights[0]);
            nw.metadata.resource_version = Some(version.into());
            let status = nw.status.get_or_insert_with(Default::default);
            let map = status.node_status.get_or_insert_with(Default::default);
            map.insert("gone".into(), nodewright_schema::Status::Complete);
            snap
        };
        // Under the status version the last pass found clean (which the API server would have
        // moved), the verdict is believed and the entry stays: the verdict is what it read.
        let lie = with_ghost(&snap, "1");
        assert_ne!(
            reconcile_cached(&lie, &settings, &mut cache),
            reconcile(&lie, &settings),
            "the carried verdict was not consulted"
        );
        // Under a new resourceVersion, the entry is dropped as in a cold pass.
        let _ = reconcile_cached(&snap, &settings, &mut cache);
        let _ = reconcile_cached(&snap, &settings, &mut cache);
        let moved = with_ghost(&snap, "2");
        assert_warm_is_cold(&moved, &settings, &mut cache);
        // The verdict reads the names of the selected nodes alone: over another object of a
        // node it is believed still.
        let _ = reconcile_cached(&snap, &settings, &mut cache);
        let _ = reconcile_cached(&snap, &settings, &mut cache);
        let mut other_object = with_ghost(&snap, "1");
        other_object.nodes[1] = Arc::new((*other_object.nodes[1]).clone());
        assert_ne!(
            reconcile_cached(&other_object, &settings, &mut cache),
            reconcile(&other_object, &settings),
            "the carried verdict was not consulted over another object of a node"
        );
        // Over a node of another name, under the same version, it is not.
        let _ = reconcile_cached(&snap, &settings, &mut cache);
        let _ = reconcile_cached(&snap, &settings, &mut cache);
        let mut other_node = with_ghost(&snap, "1");
        other_node.nodes[1] = Arc::new(crate::engine::testkit::node("n3").build());
        assert_warm_is_cold(&other_node, &settings, &mut cache);
    }

    #[test]
    fn the_node_order_and_selections_hold_only_over_the_same_node_objects() {
        use crate::engine::context::PassCtx;
        use crate::engine::testkit::{node, nw, settings, world};
        let mut snap = world()
            .node(node("n1").label("pool", "a"))
            .node(node("n2").label("pool", "a"))
            .node(node("n3").label("pool", "b"))
            .nw(nw("w").selects("pool", "a").package("p", "1.0.0"))
            .build();
        let settings = settings();
        let mut cache = StateCache::new();
        warm_passes(&mut snap, &settings, &mut cache, 3);
        let selected = |snap: &Snapshot, cache: &mut StateCache| {
            let mut ctx = PassCtx::new_cached(snap, &settings, Some(&mut *cache));
            ctx.fill_cache(cache);
            let names = ctx.nws[0]
                .selected
                .iter()
                .map(|&n| ctx.node(n).name().to_string())
                .collect::<Vec<_>>();
            let _ = ctx.into_actions(Vec::new(), Some(cache));
            names
        };
        assert_eq!(selected(&snap, &mut cache), ["n1", "n2"]);
        // A kept order and selection that lie are believed over the same node objects, so
        // they are what the pass read.
        cache.node_order = vec![1, 0, 2];
        for (_, nodes) in &mut cache.selections {
            *nodes = vec![1];
        }
        assert_eq!(selected(&snap, &mut cache), ["n2"]);
        // Another object for n3 (its labels moved it into the pool): matched afresh, in
        // the order its name and creationTimestamp give (the lying order still stands, as
        // nothing it depends on changed). n1 and n2 are the objects they were: their
        // answers stand, n1's lie included.
        cache.node_order = vec![1, 0, 2];
        let n3 = Arc::make_mut(&mut snap.nodes[2]);
        n3.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("pool".into(), "a".into());
        assert_eq!(selected(&snap, &mut cache), ["n2", "n3"]);
        // Another object for n1: matched afresh too.
        snap.nodes[0] = Arc::new((*snap.nodes[0]).clone());
        assert_eq!(selected(&snap, &mut cache), ["n2", "n1", "n3"]);
        // A node that joins takes its place in the kept order, which still lies for the rest:
        // it is what the pass read.
        snap.nodes
            .insert(0, Arc::new(node("n0").label("pool", "a").build()));
        assert_eq!(selected(&snap, &mut cache), ["n0", "n2", "n1", "n3"]);
        // A node whose creationTimestamp moved reorders from scratch.
        let n3 = Arc::make_mut(&mut snap.nodes[3]);
        n3.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::from_second(4_000_000_000).expect("a valid second"),
            ));
        assert_eq!(selected(&snap, &mut cache), ["n0", "n1", "n2", "n3"]);
        assert_warm_is_cold(&snap, &settings, &mut cache);
        // A node leaves: the rest keep their order.
        snap.nodes.remove(1);
        assert_eq!(selected(&snap, &mut cache), ["n0", "n2", "n3"]);
        assert_warm_is_cold(&snap, &settings, &mut cache);
    }

    #[test]
    fn a_carried_drain_blocked_fact_holds_only_for_the_same_node_object() {
        let (mut snap, settings, mut cache) = carried_world();
        // n1 is complete yet still carries a drain blocker record: a stale one, to drop.
        let key = nodewright_schema::keys::drain_blocked("a");
        Arc::make_mut(&mut snap.nodes[0])
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(key, "[]".into());
        let cold = reconcile(&snap, &settings);
        assert_eq!(reconcile_cached(&snap, &settings, &mut cache), cold);
        // A carry that says the object has none is believed for the same object.
        carried(&mut cache, &snap, 0).drain_blocked = Some(false);
        assert_ne!(
            reconcile_cached(&snap, &settings, &mut cache),
            cold,
            "the carried fact was not consulted"
        );
        // Not for another object of n1.
        let _ = reconcile_cached(&snap, &settings, &mut cache);
        carried(&mut cache, &snap, 0).drain_blocked = Some(false);
        snap.nodes[0] = Arc::new((*snap.nodes[0]).clone());
        assert_eq!(reconcile_cached(&snap, &settings, &mut cache), cold);
    }

    #[test]
    fn carried_status_mirror_facts_hold_only_for_the_same_status_version() {
        let (mut snap, settings, mut cache) = carried_world();
        let steady = reconcile(&snap, &settings);
        // A Ready message and a published Status that no longer match the status.
        let lie = |cache: &mut StateCache, snap: &Snapshot| {
            let id = cache.nodewright_id("a");
            let carry = cache.carries.get_mut(&id).expect("carried");
            carry.ready_message = Some("a message no pass made".into());
            carried(cache, snap, 1).published = Some(nodewright_schema::Status::Blocked);
        };
        lie(&mut cache, &snap);
        let believed = reconcile_cached(&snap, &settings, &mut cache);
        assert_ne!(
            believed, steady,
            "the carried Ready message was not consulted"
        );
        // The same status under a new resourceVersion: what was found under the old one
        // no longer counts.
        let _ = reconcile_cached(&snap, &settings, &mut cache);
        lie(&mut cache, &snap);
        Arc::make_mut(&mut snap.nodewrights[0])
            .metadata
            .resource_version = Some("2".into());
        assert_eq!(reconcile_cached(&snap, &settings, &mut cache), steady);
    }

    #[test]
    fn a_node_that_joins_shifts_the_carry_and_the_rest_are_found_by_their_memo() {
        let (mut snap, settings, mut cache) = carried_world();
        // A node created first sorts before the others (§5.3), moving them one place on.
        let mut early = crate::engine::testkit::node("n0").build();
        early.metadata.creation_timestamp = snap.nodes[0].metadata.creation_timestamp.clone();
        snap.nodes.insert(0, Arc::new(early));
        let warm = reconcile_cached(&snap, &settings, &mut cache);
        assert_eq!(warm, reconcile(&snap, &settings));
        let memo = (cache.node("n1").and_then(|c| c.memo_for(&snap.nodes[1]))).expect("n1 cached");
        let id = cache.nodewright_id("a");
        let carry = cache.carry(id).expect("carried");
        assert_eq!(carry.nodes.len(), 3);
        assert!(
            (carry.nodes.iter()).any(|c| Arc::ptr_eq(&c.memo, &memo)),
            "n1 is carried at its new place"
        );
    }

    #[test]
    fn the_status_mirrors_are_compared_again_once_the_status_moves() {
        use crate::engine::testkit::{node, nw, settings, world};
        let mut snap = world()
            .node(node("n1").boot("boot-1"))
            .node(node("n2").boot("boot-2"))
            .nw(nw("a").package("p", "1.0.0"))
            .build();
        let settings = settings();
        let mut cache = StateCache::new();
        let mut version = 0;
        // Like the API server: every write moves the resourceVersion.
        fn bump(snap: &mut Snapshot, version: &mut u32) {
            *version += 1;
            let meta = &mut Arc::make_mut(&mut snap.nodewrights[0]).metadata;
            meta.uid = Some("uid-a".into());
            meta.resource_version = Some(version.to_string());
        }
        // One warm pass, carried out like an API server would: the version moves.
        let mut step = |snap: &mut Snapshot, version: &mut u32| {
            warm_passes(snap, &settings, &mut cache, 1);
            bump(snap, version);
        };
        bump(&mut snap, &mut version);
        for _ in 0..4 {
            step(&mut snap, &mut version);
        }
        let mirror_of_n1 = |snap: &Snapshot| {
            snap.nodewrights[0]
                .status
                .as_ref()
                .and_then(|s| s.node_state.as_ref())
                .and_then(|m| m.get("n1"))
                .cloned()
        };
        let mirrored = mirror_of_n1(&snap).expect("the first passes mirrored n1's state");
        let status_of_n1 = |snap: &Snapshot| {
            let status = snap.nodewrights[0].status.as_ref();
            (
                status
                    .and_then(|s| s.node_status.as_ref())
                    .and_then(|m| m.get("n1"))
                    .copied(),
                status
                    .and_then(|s| s.node_boot_ids.as_ref())
                    .and_then(|m| m.get("n1"))
                    .cloned(),
            )
        };
        let published = status_of_n1(&snap);
        assert_eq!(published.1.as_deref(), Some("boot-1"));
        assert!(published.0.is_some());

        // Someone else rewrites n1's three mirrors: a new status version.
        let status = Arc::make_mut(&mut snap.nodewrights[0])
            .status
            .as_mut()
            .expect("status written");
        let entries = status.node_state.as_mut().expect("mirror present");
        entries.insert("n1".into(), NodeState::default());
        status
            .node_status
            .as_mut()
            .expect("node statuses present")
            .insert("n1".into(), nodewright_schema::Status::Disabled);
        status
            .node_boot_ids
            .as_mut()
            .expect("boot ids present")
            .remove("n1");
        bump(&mut snap, &mut version);
        // Reboot tracking ends the first pass once it records the boot id (§5.2 step 5).
        step(&mut snap, &mut version);
        step(&mut snap, &mut version);
        assert_eq!(
            mirror_of_n1(&snap),
            Some(mirrored),
            "the pass wrote the mirror back"
        );
        assert_eq!(
            status_of_n1(&snap),
            published,
            "the pass wrote the node's status and boot id back"
        );
    }

    #[test]
    fn nodewright_and_version_ids_hold_while_a_pass_keeps_them_and_are_never_reused() {
        let version = |rv: &str| ObjectVersion {
            uid: "uid".into(),
            resource_version: rv.into(),
        };
        let mut cache = StateCache::new();
        let (a, b) = (cache.nodewright_id("a"), cache.nodewright_id("b"));
        assert_ne!(a, b);
        let v1 = cache.version_id(&version("1"));
        cache.retain_memo_ids([("a", a, Some((version("1"), v1))), ("b", b, None)]);
        assert_eq!(cache.nodewright_id("a"), a);
        assert_eq!(cache.nodewright_id("b"), b);
        assert_eq!(cache.version_id(&version("1")), v1);
        let v2 = cache.version_id(&version("2"));
        assert_ne!(v1, v2, "a new resourceVersion is a new version");
        // A pass without "b" and with version 2 only: both are forgotten, and coming back
        // they get ids never seen before, so nothing remembered under the old ones answers.
        cache.retain_memo_ids([("a", a, Some((version("2"), v2)))]);
        let b_again = cache.nodewright_id("b");
        let v1_again = cache.version_id(&version("1"));
        assert!(![a, b].contains(&b_again));
        assert!(![v1, v2].contains(&v1_again));
    }

    #[test]
    fn job_match_answers_are_per_version_and_target_and_last_one_unused_pass() {
        use crate::engine::jobs::MatchTarget;
        use crate::job::Job;
        use std::cell::Cell;
        let target = |package: &str| {
            let mut job = Job::default();
            job.metadata.labels = Some(
                [(
                    nodewright_schema::keys::JOB_LABEL_PACKAGE.to_string(),
                    package.to_string(),
                )]
                .into(),
            );
            MatchTarget::of(&job)
        };
        thread_local!(static COMPARED: Cell<u32> = const { Cell::new(0) });
        fn matching(_: &Job, _: &MatchTarget) -> bool {
            COMPARED.with(|c| c.set(c.get() + 1));
            true
        }
        fn not_matching(job: &Job, target: &MatchTarget) -> bool {
            !matching(job, target)
        }
        let job = |uid: &str, rv: &str| {
            let mut job = Job::default();
            job.metadata.uid = Some(uid.into());
            job.metadata.resource_version = Some(rv.into());
            job
        };
        let memo = JobMatchMemo::default();
        memo.begin_pass();
        let (ta, tb) = (target("a"), target("b"));
        let (a, b) = (memo.target_id(&ta), memo.target_id(&tb));
        assert_ne!(a, b);
        assert_eq!(memo.target_id(&target("a")), a, "equal targets share an id");
        let compared = || COMPARED.with(Cell::get);
        assert!(memo.recall(&job("u", "1"), &ta, a, matching));
        assert!(
            memo.recall(&job("u", "1"), &ta, a, not_matching),
            "remembered"
        );
        assert_eq!(compared(), 1);
        assert!(
            !memo.recall(&job("u", "2"), &ta, a, not_matching),
            "another version"
        );
        assert!(
            memo.recall(&job("u", "2"), &tb, b, matching),
            "another target"
        );
        assert_eq!(compared(), 3);
        assert!(
            !memo.recall(&Job::default(), &ta, a, not_matching),
            "a Job without a version is compared every time"
        );
        assert!(memo.recall(&Job::default(), &ta, a, matching));
        assert_eq!(compared(), 5);
        // A pass that asks nothing: the next forgets the answers and targets.
        memo.begin_pass();
        assert!(
            memo.recall(&job("u", "2"), &tb, b, not_matching),
            "used in the last pass"
        );
        memo.begin_pass();
        memo.begin_pass();
        assert!(
            !memo.recall(&job("u", "2"), &tb, b, not_matching),
            "forgotten after an unused pass"
        );
        assert!(
            ![a, b].contains(&memo.target_id(&target("a"))),
            "ids are not reused"
        );
    }

    #[test]
    fn selector_ids_name_one_selector_for_the_cache_s_whole_life() {
        let pool = |p: &str| LabelSelector {
            match_labels: Some([("pool".to_string(), p.to_string())].into()),
            match_expressions: None,
        };
        let mut cache = StateCache::new();
        assert_eq!(cache.selector_id(Some(&pool("a"))), None);
        let (a, everything) = (cache.new_selector_id(), cache.new_selector_id());
        cache.retain_selectors([(Some(&pool("a")), a), (None, everything)]);
        assert_eq!(cache.selector_id(Some(&pool("a"))), Some(a));
        assert_eq!(cache.selector_id(None), Some(everything));
        // A pass without `a`: its id is gone and never handed out again.
        let b = cache.new_selector_id();
        assert!(b != a && b != everything);
        cache.retain_selectors([(Some(&pool("b")), b)]);
        assert_eq!(cache.selector_id(Some(&pool("a"))), None);
        // Ids handed out by a pass that never kept its selectors are not handed out again.
        let unkept = cache.new_selector_id();
        let again = cache.new_selector_id();
        assert!(![a, b, everything, unkept].contains(&again));
    }

    #[test]
    fn a_warm_pass_follows_an_edited_node_selector() {
        use crate::engine::context::PassCtx;
        use crate::engine::testkit::{node, nw, settings, world};
        let mut snap = world()
            .node(node("n1").label("pool", "a"))
            .node(node("n2").label("pool", "b"))
            .nw(nw("w").selects("pool", "a").package("p", "1.0.0"))
            .build();
        let settings = settings();
        let mut cache = StateCache::new();
        warm_passes(&mut snap, &settings, &mut cache, 3);
        let selected = |snap: &Snapshot, cache: &mut StateCache| {
            let ctx = PassCtx::new_cached(snap, &settings, Some(&mut *cache));
            let names = ctx.nws[0]
                .selected
                .iter()
                .map(|&n| ctx.node(n).name().to_string())
                .collect::<Vec<_>>();
            let _ = ctx.into_actions(Vec::new(), Some(cache));
            names
        };
        assert_eq!(selected(&snap, &mut cache), ["n1"]);
        Arc::make_mut(&mut snap.nodewrights[0]).spec.node_selectors = Some(LabelSelector {
            match_labels: Some([("pool".to_string(), "b".to_string())].into()),
            match_expressions: None,
        });
        assert_eq!(selected(&snap, &mut cache), ["n2"]);
        let plan = reconcile_cached(&snap, &settings, &mut cache);
        assert_eq!(plan, reconcile(&snap, &settings));
    }
}
