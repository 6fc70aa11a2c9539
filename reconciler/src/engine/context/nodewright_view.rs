//! One NodeWright as the pass sees it: selection, working status and per-node maps (§5.3,
//! §5.12, §5.13).

use super::*;
use crate::engine::conditions::{ConditionFacts, WantedConditions};

/// One NodeWright as the pass sees it.
#[derive(Clone, Debug)]
pub struct NwView<'a> {
    /// The object.
    pub nw: &'a NodeWright,
    /// Its name.
    pub name: &'a str,
    /// Its position among the pass's NodeWrights (priority order), which keys its node-state
    /// slots ([`StateKey`]).
    pub(super) index: u32,
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
    pub(super) node_priority: Cow<'a, Option<PriorityMap>>,
    /// `node_priority` in pick order (second-truncated pick time, then name), read from it
    /// when first asked after it changed.
    pub(super) pick_order: OnceCell<Vec<(i64, Box<str>)>>,
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
    pub(super) complete_at: Vec<u32>,
    /// The node's Status as last read from its annotation, with the node's write count then,
    /// parallel to `selected` (see [`PassCtx::node_status`]).
    pub(super) status_memo: Vec<Cell<(u32, Status)>>,
    /// The node's write count when its `nodeState` mirror was last refreshed, parallel to
    /// `selected`; reset whenever the mirror changes by other means (see
    /// [`PassCtx::publish_node`]).
    pub(super) published_at: Vec<u32>,
    /// The node's write count when introspection last wrote back its Status (§5.12), parallel
    /// to `selected`; reset like `published_at`.
    pub(super) written_back_at: Vec<u32>,
    /// The node's `status.nodeStatus` value as the last pass found it under this status
    /// version, parallel to `selected` (`None`: not known); holds while the pass leaves that
    /// entry untouched (see [`NwView::published_node_status_at`]).
    pub(super) published_seed: Vec<Option<Status>>,
    /// The last pass's `Ready` message, when it was made from exactly the names and
    /// `nodeStatus` values this pass starts with (see [`PassCtx::ready_message`]).
    pub(super) carried_ready: Option<String>,
    /// The `Ready` message this pass made from the snapshot's `nodeStatus`, for the next pass.
    pub(super) ready_message: Option<String>,
    /// The last pass found no departed node in the per-node maps this pass starts with, over
    /// the same nodes this pass selects (see [`NwView::nothing_departed`]).
    pub(super) carried_nothing_departed: bool,
    /// This pass found no departed node in the per-node maps as the snapshot holds them.
    pub(super) nothing_departed: bool,
    /// Which of its two node conditions the snapshot's node object already carries as wanted
    /// (§4.5), under one input of completion and erroring, parallel to `selected`. A fact of
    /// the node object alone, so it holds whatever the pass writes.
    pub(super) conditions_current: Vec<Cell<Option<(ConditionFacts, u8)>>>,
    /// Whether the snapshot's node object carries `version_<nw>` (§4.1), parallel to
    /// `selected`; read through the working annotations, so it holds only while the pass has
    /// not written them.
    pub(super) version_stamped: Vec<Cell<Option<bool>>>,
    /// Whether the snapshot's node object carries `drain_blocked_<nw>` (§7.6), parallel to
    /// `selected`; like `version_stamped`.
    pub(super) drain_blocked: Vec<Cell<Option<bool>>>,
    /// `status.nodeBootIds` of the snapshot's status version holds the node object's boot id
    /// (§10.6), parallel to `selected`; holds while the pass leaves that entry untouched.
    pub(super) boot_recorded: Vec<bool>,
    /// Compartment definitions of this pass (§2.5, §2.8), filled by selection.
    pub compartments: Vec<crate::engine::policy::CompartmentDef>,
    /// Compartment index per selected node, parallel to `selected`.
    pub compartment_of: Vec<usize>,
    /// This NodeWright's node keys, built once per pass.
    pub keys: NwKeys,
    /// Count of changes made to `status.nodeState` (compared instead of the big map).
    pub(super) node_state_changes: u64,
    /// What node completion reads of this NodeWright; shared with the parse cache so that
    /// completions remembered in earlier passes are reused while it is unchanged.
    pub(super) completion_inputs: Arc<CompletionInputs>,
    /// The digest of an empty node state (no annotation yet, the common case before a node's
    /// first package) under the last `configApplied` value asked for: the same for every such
    /// node, so it is derived once per pass rather than once per node.
    pub(super) empty_digest: RefCell<Option<AppliedDigest>>,
    /// Per selected node (parallel to `selected`): its digest and the node's write count it
    /// was derived at; several steps of a pass read it, and it holds while the count does.
    pub(super) digests: RefCell<Vec<Option<CountedDigest>>>,
    /// The parts every Job of a package shares, by package name, for this pass
    /// ([`PassCtx::package_jobs`]).
    pub(super) package_jobs: RefCell<FxHashMap<String, std::sync::Arc<jobs::PackageJobs>>>,
    /// The version of the NodeWright as the snapshot holds it (what the `nodeState` mirror
    /// comparisons remembered in node parses are keyed by); only with a cache.
    pub(super) status_version: Option<VersionId>,
    /// The NodeWright's key in node memos (meaningful only with a cache).
    pub(super) memo_id: NodeWrightId,
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
    /// `drainBlocked_<nw>`.
    pub drain_blocked: String,
    /// `version_<nw>`.
    pub version: String,
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

/// Marker in `NwView::complete_at` for a completion not computed yet. A node's write count
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
        self.pick_order.take();
        self.node_priority.to_mut()
    }
    /// How many nodes of `nodePriority` were picked before `name`, picked at `at` (§5.14):
    /// by second-truncated pick time, then name.
    pub fn picked_before(&self, at: i64, name: &str) -> usize {
        let order = self.pick_order.get_or_init(|| {
            let mut order: Vec<(i64, Box<str>)> = self
                .node_priority()
                .into_iter()
                .flatten()
                .map(|(n, t)| (t.0.as_second(), n.as_str().into()))
                .collect();
            order.sort_unstable();
            order
        });
        order.partition_point(|(t, n)| (*t, &**n) < (at, name))
    }
    /// Whether `status.nodePriority` still reads as the snapshot's.
    pub(super) fn node_priority_unchanged(&self) -> bool {
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
    pub(super) fn forget_published(&mut self) {
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
    pub(super) fn seed(
        &mut self,
        nodes: &[NodeWork<'_>],
        carry: &mut SelectionCarry,
        same_names: bool,
    ) {
        let same_inputs = carry
            .inputs
            .as_ref()
            .is_some_and(|i| Arc::ptr_eq(i, &self.completion_inputs));
        let same_version = carry.version.is_some() && carry.version == self.status_version;
        // Selection order is stable, so the node at the same position is tried first; a node
        // that joined or left shifts the rest, which are then found by their memo.
        let mut by_memo: Option<FxHashMap<*const NodeMemo, usize>> = None;
        // Every selected node is the same object the last pass had at its position.
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

    /// Whether no entry of the per-node maps names a departed node, known without reading
    /// them: which entries do depends only on the maps' names and on the selected nodes, and
    /// the last pass found none over the same nodes in the maps this pass has not changed.
    pub fn known_nothing_departed(&self) -> bool {
        self.maps_unchanged() && self.carried_nothing_departed
    }

    /// Records for the next pass whether the maps, as the snapshot holds them, name no
    /// departed node; `none_found` is what this pass found in the maps as they are now.
    pub fn note_departed(&mut self, none_found: bool) {
        self.nothing_departed = self.maps_unchanged() && none_found;
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
    pub(super) fn carry_out(&self, nodes: &[NodeWork<'_>], carry: &mut SelectionCarry) {
        carry.inputs = Some(Arc::clone(&self.completion_inputs));
        carry.version = self.status_version;
        // Digests move back rather than being cloned (see [`NwView::seed`]); the pass derives
        // nothing after this.
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

    /// Which of the NodeWright's two node conditions (§4.5) node `id`, the object `node`,
    /// already carries as `wanted`: bit `i` for the `i`th condition. `derive` is a plain
    /// function of the node object and the wanted conditions, which the NodeWright's name and
    /// their facts make whole, so the answer kept for a selected node's object and those facts
    /// cannot miss an input, whatever the pass writes.
    pub fn node_conditions_current(
        &self,
        id: usize,
        node: &Node,
        wanted: &WantedConditions,
        derive: fn(&Node, &WantedConditions) -> u8,
    ) -> u8 {
        let Some(known) = self.position(id).map(|p| &self.conditions_current[p]) else {
            return derive(node, wanted);
        };
        match known.get() {
            Some((facts, bits)) if facts == wanted.facts() => bits,
            _ => {
                let bits = derive(node, wanted);
                known.set(Some((wanted.facts(), bits)));
                bits
            }
        }
    }

    /// The status write: the working status fields and this pass's per-node map changes.
    pub(super) fn into_status_patch(self) -> StatusPatch {
        let mut status = self.status;
        status.node_priority = self.node_priority.into_owned();
        StatusPatch::new(
            status,
            self.node_status.into_patch(),
            self.node_state.into_patch(),
            self.node_boot_ids.into_patch(),
        )
    }
    /// What node completion reads of this NodeWright (spec, deletion, `configUpdates`), with
    /// its configuration values' digests derived once.
    pub fn completion_inputs(&self) -> &CompletionInputs {
        &self.completion_inputs
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
    /// The node's place among the nodes this NodeWright selects (none when not selected).
    pub fn position(&self, node: usize) -> Option<usize> {
        self.pos
            .get(node)
            .filter(|&&p| p != NOT_SELECTED)
            .map(|&p| p as usize)
    }
    /// Whether the node id is selected by this NodeWright.
    pub fn selects(&self, node: usize) -> bool {
        self.position(node).is_some()
    }
    /// Completion by package state of a selected node (false when not selected):
    /// [`crate::engine::complete::node_complete`] as last found by
    /// [`PassCtx::refresh_completion`].
    pub fn is_complete(&self, node: usize) -> bool {
        self.position(node).is_some_and(|p| self.complete[p])
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
