//! How a pass starts: nodes and NodeWrights from the snapshot, in node order with their
//! selections, from what the cache kept of the last pass where it still holds.

use super::*;
use crate::engine::incremental::same_version;

/// Nodes that joined since the last pass, up to which each is put in its place in the last
/// pass's node order; past it the order is sorted afresh.
pub(super) const JOINED_INSERTED: usize = 64;

/// The nodes one distinct node selector picks in a pass.
pub(super) struct Selection<'s> {
    pub(super) selector: Option<&'s LabelSelector>,
    /// The selector's id in the cache (absent without one).
    pub(super) id: Option<u64>,
    pub(super) nodes: Vec<usize>,
    /// The same positions as the last pass selected, with the same node names at them.
    pub(super) same_as_last: bool,
}

/// The Job `node` label values of the snapshot's nodes (§4.7): a name up to [`LABEL_MAX`]
/// characters is its own label; a longer one is hashed.
struct NodeLabels<'a> {
    /// Node id by name.
    node_ids: FxHashMap<&'a str, usize>,
    /// Node id by hashed label, for names longer than a label; the first node wins.
    long_labels: FxHashMap<String, usize>,
    /// Two nodes share a name or a label: only a scan can tell them apart.
    collision: bool,
}

impl<'a> NodeLabels<'a> {
    fn of(nodes: &[NodeWork<'a>]) -> NodeLabels<'a> {
        let node_ids: FxHashMap<&'a str, usize> =
            nodes.iter().enumerate().map(|(i, n)| (n.name, i)).collect();
        let mut collision = node_ids.len() != nodes.len();
        let mut long_labels: FxHashMap<String, usize> = FxHashMap::default();
        for (i, n) in nodes.iter().enumerate() {
            if n.name.len() > LABEL_MAX {
                let label = names::node_label_value(n.name);
                collision |= node_ids.contains_key(label.as_str());
                match long_labels.entry(label) {
                    std::collections::hash_map::Entry::Occupied(_) => collision = true,
                    std::collections::hash_map::Entry::Vacant(v) => {
                        v.insert(i);
                    }
                }
            }
        }
        NodeLabels {
            node_ids,
            long_labels,
            collision,
        }
    }
}

/// How this snapshot's nodes relate to the last pass's, once each node took what the cache
/// kept for it.
struct NodesSinceLast {
    /// The slots the last pass left for an earlier object of a renewed node, by node id
    /// ascending: parses of annotation values that did not change are reused from there.
    earlier: Vec<(usize, StateSlots)>,
    /// Node ids that are not the object the last pass had at their position.
    renewed: Vec<usize>,
    /// Some node is not at the position the last pass had it (always so without a cache).
    moved: bool,
    /// Where each node went, when some node moved and a cache tells.
    moves: Option<NodeMoves>,
    /// Node ids the last pass did not have.
    joined: Vec<usize>,
    /// Every node the last pass had kept its creationTimestamp.
    created_kept: bool,
    /// Every position holds the name and creationTimestamp the last pass had there.
    same_order: bool,
    /// The last pass's order holds for the nodes that stayed ([`NodesSinceLast::follows`]).
    follow: bool,
}

impl NodesSinceLast {
    /// A pass without a cache: nothing is known of the last pass.
    fn unknown() -> NodesSinceLast {
        NodesSinceLast {
            earlier: Vec::new(),
            renewed: Vec::new(),
            moved: true,
            moves: None,
            joined: Vec::new(),
            created_kept: true,
            same_order: false,
            follow: false,
        }
    }

    /// Gives each node what the cache kept for it. The same version of the node gets its memo
    /// and its slots with every parse in place; a renewed one gets a fresh memo, and the last
    /// pass's slots are kept aside for the parses of values that did not change.
    fn take(
        cache: &mut StateCache,
        snap: &Snapshot,
        nodes: &mut [NodeWork<'_>],
        names: &[&str],
    ) -> NodesSinceLast {
        let mut since = NodesSinceLast {
            moved: false,
            ..NodesSinceLast::unknown()
        };
        let mut carried = cache.take_nodes(names);
        let mut replaced = Vec::new();
        for (i, (work, node)) in nodes.iter_mut().zip(&snap.nodes).enumerate() {
            match carried.take(i, node) {
                Some(entry) if same_version(&entry.node, node) => {
                    work.memo = Some(entry.memo);
                    work.states = entry.slots;
                    // A relist's copy replaces the copy the entry held, which can then go.
                    work.held = Arc::ptr_eq(&entry.node, node).then_some(entry.node);
                }
                found => {
                    since.renewed.push(i);
                    match &found {
                        Some(e) => {
                            since.created_kept &= e.node.metadata.creation_timestamp
                                == node.metadata.creation_timestamp;
                        }
                        None => since.joined.push(i),
                    }
                    work.memo = Some(Arc::new(NodeMemo::default()));
                    if let Some(entry) = found {
                        if !entry.slots.is_empty() {
                            since.earlier.push((i, entry.slots));
                        }
                        replaced.push(entry.node);
                    }
                }
            }
        }
        since.moved = carried.moved(snap.nodes.len());
        since.same_order = since.created_kept && since.joined.is_empty() && !since.moved;
        if since.moved {
            since.moves = Some(carried.into_moves());
        }
        cache.release_nodes(replaced);
        since
    }

    /// Whether the last pass's node order holds for the nodes that stayed, with the joined
    /// ones put in their places: nodes joined, left or moved, every node that stayed kept its
    /// creationTimestamp, and names are unique (so the order has no ties).
    fn follows(&self, unique_names: bool) -> bool {
        self.created_kept
            && self.joined.len() <= JOINED_INSERTED
            && unique_names
            && self.moves.is_some()
    }

    /// The last pass's order `kept` carried over to this pass's positions, with each joined
    /// node inserted in its place; `None` when it does not cover every node.
    fn followed_order(&self, nodes: &[NodeWork<'_>], kept: &[usize]) -> Option<Vec<usize>> {
        let moves = self.moves.as_ref()?;
        if kept.len() != moves.to.len() {
            return None;
        }
        let key = |i: usize| (&nodes[i].created, nodes[i].name);
        let mut order: Vec<usize> = kept.iter().filter_map(|&k| moves.now(k)).collect();
        for &i in &self.joined {
            let at = order.partition_point(|&q| key(q) < key(i));
            order.insert(at, i);
        }
        (order.len() == nodes.len()).then_some(order)
    }

    /// The nodes a selector picks, in node order (§5.3), and whether they are the ones the last
    /// pass selected at the same positions. With a cache, whether a node matches is remembered
    /// per node object and selector id, and while the last pass's order holds (in place, or
    /// followed) only renewed nodes are matched again.
    fn select(
        &self,
        wanted: Option<&LabelSelector>,
        id: Option<u64>,
        memo_id: NodeWrightId,
        nodes: &[NodeWork<'_>],
        order: &[usize],
        cache: Option<&StateCache>,
    ) -> (Vec<usize>, bool) {
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
        let kept = id
            .filter(|_| self.same_order || self.follow)
            .and_then(|id| cache?.selected_by(id));
        match kept {
            Some(kept) if self.same_order && self.renewed.is_empty() => (kept.to_vec(), true),
            Some(kept) => {
                let mut member = vec![false; nodes.len()];
                for &k in kept {
                    if let Some(m) = self.now(k).and_then(|i| member.get_mut(i)) {
                        *m = true;
                    }
                }
                for &i in &self.renewed {
                    member[i] = recall(i);
                }
                let selected: Vec<usize> = order.iter().copied().filter(|&i| member[i]).collect();
                let same = self.same_order && selected == kept;
                (selected, same)
            }
            None => (
                order.iter().copied().filter(|&i| recall(i)).collect(),
                false,
            ),
        }
    }

    /// The node a position of the last pass holds now.
    fn now(&self, k: usize) -> Option<usize> {
        match &self.moves {
            Some(moves) if !self.same_order => moves.now(k),
            _ => Some(k),
        }
    }
}

/// The node order every NodeWright selects in (§5.3): creationTimestamp, then name. The last
/// pass's order is reused while it holds (same names and timestamps at every position) or
/// can follow the nodes that moved.
fn node_order(
    nodes: &[NodeWork<'_>],
    since: &NodesSinceLast,
    cache: Option<&StateCache>,
) -> Vec<usize> {
    match cache.map(StateCache::node_order) {
        Some(kept) if since.same_order && kept.len() == nodes.len() => kept.to_vec(),
        Some(kept)
            if let Some(order) = since.followed_order(nodes, kept).filter(|_| since.follow) =>
        {
            order
        }
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
    }
}

impl<'a> NwView<'a> {
    /// A NodeWright's view at the start of a pass: its selected nodes, its policy, and its
    /// working status as the snapshot holds it, with every per-node memo not yet computed.
    fn start(
        snap: &'a Snapshot,
        nw: &'a NodeWright,
        key: StateKey<'a>,
        state_key: String,
        selected: Vec<usize>,
        memo_id: NodeWrightId,
        cache: Option<&StateCache>,
    ) -> NwView<'a> {
        let name = key.name;
        let (policy, policy_missing) = crate::engine::policy::policy_of(&snap.policies, nw);
        let original = nw.status.as_ref();
        let status = original.map(without_node_state).unwrap_or_default();
        let mut pos = vec![NOT_SELECTED; snap.nodes.len()];
        for (p, &i) in selected.iter().enumerate() {
            pos[i] = p as u32;
        }
        let completion_inputs = match cache {
            Some(c) => c.completion_inputs(nw),
            None => Arc::new(CompletionInputs::of(nw)),
        };
        let n = selected.len();
        NwView {
            keys: NwKeys {
                status: keys::status(name),
                node_state: state_key,
                cordon: keys::cordon(name),
                config_applied: keys::config_applied(name),
                drain_blocked: keys::drain_blocked(name),
                version: keys::node_version(name),
            },
            node_state_changes: 0,
            completion_inputs,
            empty_digest: RefCell::new(None),
            digests: RefCell::new(vec![None; n]),
            package_jobs: RefCell::default(),
            status_version: cache
                .and_then(|c| Some(c.version_id(&ObjectVersion::of(&nw.metadata)?))),
            memo_id,
            pos,
            complete: vec![false; n],
            complete_at: vec![NOT_COMPUTED; n],
            status_memo: vec![Cell::new((NOT_COMPUTED, Status::Unknown)); n],
            published_at: vec![NOT_COMPUTED; n],
            published_seed: vec![None; n],
            conditions_current: vec![Cell::new(None); n],
            version_stamped: vec![Cell::new(None); n],
            drain_blocked: vec![Cell::new(None); n],
            boot_recorded: vec![false; n],
            carried_ready: None,
            ready_message: None,
            carried_nothing_departed: false,
            nothing_departed: false,
            written_back_at: vec![NOT_COMPUTED; n],
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
            pick_order: OnceCell::new(),
            transitioned: false,
        }
    }
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
        let mut nodes: Vec<NodeWork<'a>> = snap.nodes.iter().map(|n| NodeWork::new(n)).collect();
        let labels = NodeLabels::of(&nodes);
        let mut nw_refs: Vec<&NodeWright> = snap.nodewrights.iter().map(|nw| &**nw).collect();
        nw_refs.sort_by(|a, b| {
            a.spec
                .priority
                .cmp(&b.spec.priority)
                .then_with(|| a.name().cmp(b.name()))
        });
        let names: Vec<&'a str> = nw_refs.iter().map(|nw| nw.name()).collect();
        let mut jobs_carried = None;
        let mut carries = FxHashMap::default();
        let (mut since, cache) = match cache {
            Some(c) => {
                c.free_released();
                carries = c.take_carries();
                jobs_carried = Some(c.take_jobs());
                let since = NodesSinceLast::take(c, snap, &mut nodes, &names);
                (since, Some(&*c))
            }
            None => (NodesSinceLast::unknown(), None),
        };
        since.follow = since.follows(labels.node_ids.len() == nodes.len());
        let order = node_order(&nodes, &since, cache);
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
                    let id =
                        cache.map(|c| c.selector_id(wanted).unwrap_or_else(|| c.new_selector_id()));
                    let (selected, same_as_last) =
                        since.select(wanted, id, memo_id, &nodes, &order, cache);
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
                let before = match since.earlier.binary_search_by_key(&i, |(n, _)| *n) {
                    Ok(k) => since.earlier[k].1.as_slice(),
                    Err(_) => &[],
                };
                nodes[i].load_state_reusing(key, &state_key, before, names.len());
            }
            let mut view = NwView::start(snap, nw, key, state_key, selected, memo_id, cache);
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
            &labels.node_ids,
            cache.is_some() && !since.moved,
            since.moves.as_ref(),
        );
        PassCtx {
            snap,
            settings,
            selector_ids,
            order,
            selections,
            now: snap.now,
            runtime_taint: settings.runtime_required_taint(),
            nodes,
            node_moves: since.moves,
            node_ids: labels.node_ids,
            long_labels: labels.long_labels,
            label_collision: labels.collision,
            nws,
            carries,
            index: SnapIndex::build(snap, jobs_read),
            job_matches: cache.map(StateCache::job_matches),
            actions: Vec::new(),
            after: Vec::new(),
            emitted_index: EmittedIndex::default(),
            job_settings: OnceCell::new(),
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
            let version = ObjectVersion::of(&v.nw.metadata).zip(v.status_version);
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
}
