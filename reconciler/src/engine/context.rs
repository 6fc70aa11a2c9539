//! The per-pass working state (spec/operator.md §5.3, §5.15).
//!
//! A pass reads the [`Snapshot`] once, works on copies of the few things it may change (node
//! metadata, node-state entries, taints, `unschedulable`, NodeWright status) and turns the
//! differences into one [`NodePatch`] per node and one status patch per NodeWright at the end.
//! Writing through these copies is what keeps the pass from re-asserting values it never
//! changed, which other writers (Job handler, other controllers) may have moved meanwhile.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use nodewright_schema::keys;
use nodewright_schema::node_state::MalformedNodeState;
use nodewright_schema::{
    DeploymentPolicy, NodeState, NodeWright, NodeWrightStatus, PackageStatus, Status,
};

use crate::plan::{Action, Event, EventObject, EventType, NodePatch, NodeStateDelta};
use crate::settings::Settings;
use crate::snapshot::Snapshot;

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
struct StateSlot {
    /// The snapshot value parsed; `None` when the annotation is absent.
    original: Option<Result<NodeState, MalformedNodeState>>,
    /// The working value (absent annotation = empty). Unused while malformed.
    current: NodeState,
    /// The pass deleted the whole annotation (a reset); it must not be re-created.
    deleted: bool,
}

impl StateSlot {
    fn parse(raw: Option<&str>) -> StateSlot {
        let original = raw.map(NodeState::parse);
        let current = match &original {
            Some(Ok(state)) => state.clone(),
            _ => NodeState::default(),
        };
        StateSlot {
            original,
            current,
            deleted: false,
        }
    }

    fn malformed(&self) -> Option<&MalformedNodeState> {
        if self.deleted {
            return None;
        }
        match &self.original {
            Some(Err(e)) => Some(e),
            _ => None,
        }
    }
}

/// The working copy of one node.
#[derive(Clone, Debug)]
pub struct NodeWork<'a> {
    node: &'a Node,
    name: &'a str,
    created: Option<Timestamp>,
    annotations: BTreeMap<String, String>,
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    unschedulable: bool,
    /// Per NodeWright name; parsed on first use.
    states: BTreeMap<String, StateSlot>,
}

impl<'a> NodeWork<'a> {
    fn new(node: &'a Node) -> NodeWork<'a> {
        let spec = node.spec.as_ref();
        NodeWork {
            node,
            name: node.metadata.name.as_deref().unwrap_or_default(),
            created: node.metadata.creation_timestamp.as_ref().map(|t| t.0),
            annotations: node.metadata.annotations.clone().unwrap_or_default(),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            taints: spec.and_then(|s| s.taints.clone()).unwrap_or_default(),
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            states: BTreeMap::new(),
        }
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
        self.annotations.insert(key.into(), value.into());
    }
    /// Removes an annotation.
    pub fn remove_annotation(&mut self, key: &str) {
        self.annotations.remove(key);
    }
    /// Sets a label.
    pub fn set_label(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.labels.insert(key.into(), value.into());
    }
    /// Removes a label.
    pub fn remove_label(&mut self, key: &str) {
        self.labels.remove(key);
    }
    /// Adds a taint, replacing one with the same key and effect.
    pub fn add_taint(&mut self, taint: Taint) {
        self.taints
            .retain(|t| !(t.key == taint.key && t.effect == taint.effect));
        self.taints.push(taint);
    }
    /// Removes every taint with this key.
    pub fn remove_taint(&mut self, key: &str) {
        self.taints.retain(|t| t.key != key);
    }
    /// Sets `spec.unschedulable`.
    pub fn set_unschedulable(&mut self, value: bool) {
        self.unschedulable = value;
    }

    fn slot(&mut self, nw: &str) -> &mut StateSlot {
        if !self.states.contains_key(nw) {
            let raw = self
                .node
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(&keys::node_state(nw)));
            self.states
                .insert(nw.to_string(), StateSlot::parse(raw.map(String::as_str)));
        }
        // Inserted just above when missing.
        self.states.get_mut(nw).expect("slot present")
    }

    /// Parses this NodeWright's node state now, so later reads through `&self` see it.
    pub fn load_state(&mut self, nw: &str) {
        self.slot(nw);
    }

    /// The working node state of a NodeWright (absent annotation reads as empty).
    /// Call [`NodeWork::load_state`] (or any writer) first; [`PassCtx::new`] loads every
    /// selected node's state.
    pub fn state(&self, nw: &str) -> Result<&NodeState, &MalformedNodeState> {
        static EMPTY: NodeState = NodeState(BTreeMap::new());
        match self.states.get(nw) {
            Some(slot) => match slot.malformed() {
                Some(e) => Err(e),
                None => Ok(&slot.current),
            },
            None => Ok(&EMPTY),
        }
    }
    /// Whether the state annotation does not parse.
    pub fn malformed(&self, nw: &str) -> bool {
        self.state(nw).is_err()
    }
    /// Whether the node carries the annotation for this NodeWright after this pass's changes.
    pub fn state_present(&self, nw: &str) -> bool {
        match self.states.get(nw) {
            Some(slot) => !slot.deleted && (slot.original.is_some() || !slot.current.is_empty()),
            None => self.annotations.contains_key(&keys::node_state(nw)),
        }
    }
    /// Upserts an entry (keyed `<name>|<version>`). Refused on a malformed annotation, and
    /// after the pass deleted the annotation (a reset must not be undone in the same pass).
    pub fn set_entry(&mut self, nw: &str, entry: PackageStatus) -> Result<(), MalformedNodeState> {
        let slot = self.slot(nw);
        if let Some(e) = slot.malformed() {
            return Err(e.clone());
        }
        if slot.deleted {
            return Ok(());
        }
        slot.current.upsert(entry);
        Ok(())
    }
    /// Removes an entry by key.
    pub fn remove_entry(&mut self, nw: &str, key: &str) {
        let slot = self.slot(nw);
        if slot.malformed().is_none() {
            slot.current.0.remove(key);
        }
    }
    /// Deletes the whole annotation (a reset, §10.6): the working state reads empty, and no
    /// later write of this pass re-creates it.
    pub fn delete_state(&mut self, nw: &str) {
        let slot = self.slot(nw);
        slot.current = NodeState::default();
        slot.deleted = true;
    }

    /// The changes of this pass as one patch (empty when nothing changed).
    fn patch(&self) -> NodePatch {
        let mut patch = NodePatch::new(self.name);
        let orig_ann = self.node.metadata.annotations.clone().unwrap_or_default();
        let state_keys: BTreeMap<String, ()> = self
            .states
            .keys()
            .map(|nw| (keys::node_state(nw), ()))
            .collect();
        diff_maps(&orig_ann, &self.annotations, &mut patch.annotations, |k| {
            state_keys.contains_key(k)
        });
        let orig_labels = self.node.metadata.labels.clone().unwrap_or_default();
        diff_maps(&orig_labels, &self.labels, &mut patch.labels, |_| false);
        for (nw, slot) in &self.states {
            if slot.deleted {
                if slot.original.is_some() {
                    patch.node_state.push(NodeStateDelta::Delete {
                        nodewright: nw.clone(),
                    });
                }
                continue;
            }
            if slot.malformed().is_some() {
                continue;
            }
            let empty = NodeState::default();
            let before = match &slot.original {
                Some(Ok(s)) => s,
                _ => &empty,
            };
            let mut upsert = BTreeMap::new();
            for (k, v) in &slot.current.0 {
                if before.0.get(k) != Some(v) {
                    upsert.insert(k.clone(), v.clone());
                }
            }
            let remove: Vec<String> = before
                .0
                .keys()
                .filter(|k| !slot.current.0.contains_key(*k))
                .cloned()
                .collect();
            if !upsert.is_empty() || !remove.is_empty() {
                patch.node_state.push(NodeStateDelta::Entries {
                    nodewright: nw.clone(),
                    upsert,
                    remove,
                });
            }
        }
        let orig_taints = self
            .node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        for t in &self.taints {
            if !orig_taints.contains(t) {
                patch.add_taints.push(t.clone());
            }
        }
        for t in &orig_taints {
            if !self.taints.iter().any(|w| w.key == t.key) && !patch.remove_taints.contains(&t.key)
            {
                patch.remove_taints.push(t.key.clone());
            }
        }
        if self.unschedulable != self.api_unschedulable() {
            patch.unschedulable = Some(self.unschedulable);
        }
        patch
    }
}

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
    /// Selected node ids, sorted by `creationTimestamp`, then name (§5.3).
    pub selected: Vec<usize>,
    /// The referenced policy, when it exists.
    pub policy: Option<&'a DeploymentPolicy>,
    /// `spec.deploymentPolicy` names a policy that does not exist (§2.9).
    pub policy_missing: bool,
    /// Working status; published when it differs from the snapshot's.
    pub status: NodeWrightStatus,
    /// Status value at the start of the pass (for transition events, §1.10).
    pub initial_status: Option<Status>,
    /// The Status changed in this pass (for the Transition mirror, §12.3).
    pub transitioned: bool,
    /// Node id → position in `selected` ([`NOT_SELECTED`] when not selected).
    pub pos: Vec<u32>,
    /// Completion by package state, parallel to `selected` (refreshed by introspection).
    pub complete: Vec<bool>,
    /// Compartment definitions of this pass (§2.5, §2.8), filled by selection.
    pub compartments: Vec<super::policy::CompartmentDef>,
    /// Compartment index per selected node, parallel to `selected`.
    pub compartment_of: Vec<usize>,
}

/// Marker in [`NwView::pos`] for a node the NodeWright does not select.
pub const NOT_SELECTED: u32 = u32::MAX;

impl<'a> NwView<'a> {
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
        self.status
            .node_status
            .as_ref()
            .and_then(|m| m.get(node))
            .copied()
            .unwrap_or(Status::Unknown)
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
    /// Every node by id (index in `snap.nodes`).
    pub nodes: Vec<NodeWork<'a>>,
    node_ids: HashMap<&'a str, usize>,
    /// NodeWrights sorted by priority, then name.
    pub nws: Vec<NwView<'a>>,
    actions: Vec<Action>,
    events: Vec<Event>,
    requeue_active: bool,
    requeue_after: Option<Duration>,
    errors: Vec<String>,
}

impl<'a> PassCtx<'a> {
    /// Builds the working state: nodes, NodeWrights in priority order with their selected
    /// nodes sorted (§5.3), each selected node's state parsed.
    pub fn new(snap: &'a Snapshot, settings: &'a Settings) -> PassCtx<'a> {
        let runtime_taint = settings.runtime_required_taint();
        let mut nodes: Vec<NodeWork<'a>> = snap.nodes.iter().map(NodeWork::new).collect();
        let node_ids = nodes.iter().enumerate().map(|(i, n)| (n.name, i)).collect();
        let mut nw_refs: Vec<&NodeWright> = snap.nodewrights.iter().collect();
        nw_refs.sort_by(|a, b| {
            a.spec
                .priority
                .cmp(&b.spec.priority)
                .then_with(|| a.name().cmp(b.name()))
        });
        // Node order used by every NodeWright: creationTimestamp, then name.
        let mut order: Vec<usize> = (0..nodes.len()).collect();
        order.sort_by(|&a, &b| {
            nodes[a]
                .created
                .cmp(&nodes[b].created)
                .then_with(|| nodes[a].name.cmp(nodes[b].name))
        });
        let mut nws = Vec::with_capacity(nw_refs.len());
        for nw in nw_refs {
            let name = nw.name();
            let selector = nw.spec.node_selectors.as_ref();
            let selected: Vec<usize> = order
                .iter()
                .copied()
                .filter(|&i| {
                    selector.is_none_or(|s| super::select::selector_matches(s, &nodes[i].labels))
                })
                .collect();
            for &i in &selected {
                nodes[i].load_state(name);
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
            let status = nw.status.clone().unwrap_or_default();
            let mut pos = vec![NOT_SELECTED; nodes.len()];
            for (p, &i) in selected.iter().enumerate() {
                pos[i] = p as u32;
            }
            let complete = vec![false; selected.len()];
            nws.push(NwView {
                pos,
                complete,
                compartments: Vec::new(),
                compartment_of: Vec::new(),
                nw,
                name,
                selected,
                policy,
                policy_missing,
                initial_status: status.status,
                status,
                transitioned: false,
            });
        }
        PassCtx {
            snap,
            settings,
            now: snap.now,
            runtime_taint,
            nodes,
            node_ids,
            nws,
            actions: Vec::new(),
            events: Vec::new(),
            requeue_active: false,
            requeue_after: None,
            errors: Vec::new(),
        }
    }

    /// Node id by name.
    pub fn node_id(&self, name: &str) -> Option<usize> {
        self.node_ids.get(name).copied()
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
    pub fn node_status(&self, nw: usize, node: usize) -> Status {
        let key = keys::status(self.nws[nw].name);
        Status::from_annotation(self.nodes[node].annotation(&key))
    }

    /// Sets a node's Status for a NodeWright: annotation, label, `status.nodeStatus` and
    /// `status.nodeState` (§5.12). `complete` releases this NodeWright's cordon (§7.3) and
    /// leaves `nodePriority` (§10.1).
    pub fn set_node_status(&mut self, nw: usize, node: usize, status: Status) {
        let name = self.nws[nw].name;
        let key = keys::status(name);
        let value = status.as_str();
        let n = &mut self.nodes[node];
        n.set_annotation(key.clone(), value);
        n.set_label(key, value);
        let node_name = n.name.to_string();
        self.publish_node(nw, node);
        self.nws[nw]
            .status
            .node_status
            .get_or_insert_with(BTreeMap::new)
            .insert(node_name.clone(), status);
        if status == Status::Complete {
            self.uncordon(nw, node);
            self.remove_from_priority(nw, &node_name);
        }
    }

    /// Refreshes `status.nodeState[node]` from the working node state (§1.9).
    pub fn publish_node(&mut self, nw: usize, node: usize) {
        let name = self.nws[nw].name;
        let n = &self.nodes[node];
        if let Ok(state) = n.state(name) {
            let node_name = n.name.to_string();
            let state = state.clone();
            self.nws[nw]
                .status
                .node_state
                .get_or_insert_with(BTreeMap::new)
                .insert(node_name, state);
        }
    }

    /// Removes a node from `nodePriority`, counting the removal in `nodeOrderOffset` (§5.14).
    pub fn remove_from_priority(&mut self, nw: usize, node: &str) {
        let status = &mut self.nws[nw].status;
        if let Some(prio) = status.node_priority.as_mut()
            && prio.remove(node).is_some()
        {
            *status.node_order_offset.get_or_insert(0) += 1;
            if prio.is_empty() {
                status.node_priority = None;
            }
        }
    }

    /// Cordons a node for a NodeWright (§7.2): `unschedulable` and `cordon_<nw>`.
    pub fn cordon(&mut self, nw: usize, node: usize) {
        let key = keys::cordon(self.nws[nw].name);
        let n = &mut self.nodes[node];
        n.set_annotation(key, "true");
        n.set_unschedulable(true);
    }

    /// Releases this NodeWright's cordon under the shared-ownership rules (§7.3).
    pub fn uncordon(&mut self, nw: usize, node: usize) {
        let key = keys::cordon(self.nws[nw].name);
        let n = &mut self.nodes[node];
        if n.annotation(&key).is_none() {
            return;
        }
        n.remove_annotation(&key);
        let others = n.annotations.keys().any(|k| keys::is_cordon_key(k))
            || n.annotations.contains_key(keys::RUNTIME_REQUIRED_CORDON);
        if !others {
            n.set_unschedulable(false);
        }
    }

    /// Queues an action (executed in emission order, before node and status patches).
    pub fn emit(&mut self, action: Action) {
        self.actions.push(action);
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

    /// Turns the working state into the plan's actions (§5.15 order): emitted actions, node
    /// patches, node conditions (given), NodeWright status patches, events.
    pub fn into_actions(
        self,
        node_conditions: Vec<Action>,
    ) -> (Vec<Action>, bool, Option<Duration>, Vec<String>) {
        let PassCtx {
            nodes,
            nws,
            mut actions,
            events,
            requeue_active,
            requeue_after,
            errors,
            ..
        } = self;
        let mut wrote = !actions.is_empty();
        for n in &nodes {
            let patch = n.patch();
            if !patch.is_empty() {
                wrote = true;
                actions.push(Action::PatchNode(patch));
            }
        }
        wrote |= !node_conditions.is_empty();
        actions.extend(node_conditions);
        for v in &nws {
            let original = v.nw.status.clone().unwrap_or_default();
            if v.status != original {
                wrote = true;
                actions.push(Action::PatchNodeWrightStatus {
                    name: v.name.to_string(),
                    status: Box::new(v.status.clone()),
                });
            }
        }
        actions.extend(events.into_iter().map(Action::RecordEvent));
        (actions, requeue_active || wrote, requeue_after, errors)
    }
}
