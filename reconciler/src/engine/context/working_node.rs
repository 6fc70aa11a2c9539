//! The working copy of one node: metadata, taints and node-state entries as the pass leaves
//! them, diffed against the snapshot into one patch (§5.15).

use super::*;

/// One NodeWright's node-state annotation on one node: as read, and as the pass leaves it.
#[derive(Clone, Debug)]
pub(in crate::engine) struct StateSlot {
    /// The snapshot value and its parse (shared with [`StateCache`]); `None` when the
    /// annotation is absent.
    pub(super) original: Option<Arc<ParsedState>>,
    /// The working value once a writer touched it; until then the working value is the
    /// original (absent or malformed annotation = empty). Unused while malformed.
    pub(super) current: Option<NodeState>,
    /// The pass deleted the whole annotation (a reset); it must not be re-created.
    pub(super) deleted: bool,
    /// Some writer touched the working value (a cheap filter for the final diff).
    pub(super) changed: bool,
    /// What the last pass wrote, with its parse: the node's next value unless someone else
    /// writes the node first, so the next pass reads it without parsing it.
    pub(super) written: Option<Arc<ParsedState>>,
}

pub(super) static EMPTY_STATE: NodeState = NodeState::new();

/// A node's state slots, by the [`StateKey`] index of their NodeWright, ascending.
pub(in crate::engine) type StateSlots = Vec<(u32, StateSlot)>;

/// Names one NodeWright's node-state annotation on a node: the NodeWright's position among
/// the pass's NodeWrights ([`NwView::state_key`]) and its name. A slot is found by the
/// position, an integer; the name is read only to load an annotation or to write a patch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateKey<'n> {
    pub(super) index: u32,
    pub(super) name: &'n str,
}

impl StateSlot {
    pub(super) fn new(original: Option<Arc<ParsedState>>) -> StateSlot {
        StateSlot {
            original,
            current: None,
            deleted: false,
            changed: false,
            written: None,
        }
    }

    /// The snapshot value and its parse, `None` when the annotation is absent.
    pub(in crate::engine) fn original(&self) -> Option<&Arc<ParsedState>> {
        self.original.as_ref()
    }

    /// The slot as read from the node object, this pass's working value dropped: what the
    /// next pass starts from for the same object.
    pub(super) fn reset(&mut self) {
        self.current = None;
        self.deleted = false;
        self.changed = false;
        self.written = None;
    }

    /// The parse this slot holds of exactly `raw`: the snapshot value's, or what the last
    /// pass wrote.
    pub(in crate::engine) fn parse_of(&self, raw: &str) -> Option<&Arc<ParsedState>> {
        (self.original.iter())
            .chain(&self.written)
            .find(|parsed| parsed.is_of(raw))
    }

    /// The parsed snapshot value when it parses.
    pub(super) fn original_state(&self) -> Option<&NodeState> {
        self.original.as_deref().and_then(|p| p.parsed().ok())
    }

    pub(super) fn malformed(&self) -> Option<&MalformedNodeState> {
        if self.deleted {
            return None;
        }
        self.original.as_deref().and_then(|p| p.parsed().err())
    }

    /// The working value.
    pub(super) fn current(&self) -> &NodeState {
        match &self.current {
            Some(state) => state,
            None => self.original_state().unwrap_or(&EMPTY_STATE),
        }
    }

    /// The working value, copied from the original on first write.
    pub(super) fn current_mut(&mut self) -> &mut NodeState {
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
    pub(super) node: &'a Node,
    pub(super) name: &'a str,
    pub(super) created: Option<Timestamp>,
    pub(super) annotations: Cow<'a, BTreeMap<String, String>>,
    pub(super) labels: Cow<'a, BTreeMap<String, String>>,
    pub(super) taints: Cow<'a, [Taint]>,
    pub(super) unschedulable: bool,
    /// Some metadata/spec writer ran (annotations, labels, taints, unschedulable).
    pub(super) dirty: bool,
    /// Count of changes to this node so far in the pass (a write that leaves the value as it
    /// was is none); derived values computed at one count stay valid while it does not move
    /// (see [`NwView::complete`]).
    pub(super) writes: u32,
    /// This pass's NodeWright states on this node; parsed on first use. Handed from pass to
    /// pass with the node object ([`StateCache`]), so a node the fleet did not change starts
    /// with every parse in place.
    pub(super) states: StateSlots,
    /// Values derived from the snapshot's node object, shared with the caller's cache (absent
    /// without one).
    pub(super) memo: Option<Arc<NodeMemo>>,
    /// The snapshot's `Arc` of this node as the cache held it, handed back at the end.
    pub(super) held: Option<Arc<Node>>,
}

impl<'a> NodeWork<'a> {
    pub(super) fn new(node: &'a Node) -> NodeWork<'a> {
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
        let (key, value) = (key.into(), value.into());
        if self.annotations.get(&key) != Some(&value) {
            self.writes = self.writes.wrapping_add(1);
            self.dirty = true;
            self.annotations.to_mut().insert(key, value);
        }
    }
    /// Removes an annotation.
    pub fn remove_annotation(&mut self, key: &str) {
        if self.annotations.contains_key(key) {
            self.writes = self.writes.wrapping_add(1);
            self.dirty = true;
            self.annotations.to_mut().remove(key);
        }
    }
    /// Sets a label.
    pub fn set_label(&mut self, key: impl Into<String>, value: impl Into<String>) {
        let (key, value) = (key.into(), value.into());
        if self.labels.get(&key) != Some(&value) {
            self.writes = self.writes.wrapping_add(1);
            self.dirty = true;
            self.labels.to_mut().insert(key, value);
        }
    }
    /// Removes a label.
    pub fn remove_label(&mut self, key: &str) {
        if self.labels.contains_key(key) {
            self.writes = self.writes.wrapping_add(1);
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

    pub(super) fn slot_index(&self, nw: StateKey<'_>) -> Result<usize, usize> {
        self.states.binary_search_by_key(&nw.index, |(k, _)| *k)
    }

    pub(super) fn slot(&mut self, nw: StateKey<'_>) -> &mut StateSlot {
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
    pub(super) fn load_state_reusing(
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
                    .find_map(|(_, slot)| slot.parse_of(raw))
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
    pub(super) fn into_entry(self, node: &Arc<Node>) -> Option<NodeEntry> {
        let memo = self.memo?;
        let mut slots = self.states;
        for (_, slot) in &mut slots {
            let wrote = slot.changed && !slot.deleted && slot.malformed().is_none();
            let written = slot.current.take().filter(|_| wrote);
            slot.reset();
            slot.written = written.map(|state| Arc::new(ParsedState::written(state)));
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
    pub(super) fn touched(&self) -> bool {
        self.dirty || self.states.iter().any(|(_, slot)| slot.changed)
    }

    /// The changes of this pass as one patch (empty when nothing changed).
    /// `names` are the pass's NodeWright names by [`StateKey`] index.
    pub(super) fn patch(&self, names: &[&str]) -> NodePatch {
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
pub(super) fn slot_name<'n>(names: &[&'n str], index: u32) -> &'n str {
    names.get(index as usize).copied().unwrap_or_default()
}

pub(super) static EMPTY_MAP: BTreeMap<String, String> = BTreeMap::new();
pub(super) static EMPTY_TAINTS: Vec<Taint> = Vec::new();

pub(super) fn diff_maps(
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
