//! How a pass starts: nodes and NodeWrights from the snapshot, in node order with their
//! selections, from what the cache kept of the last pass where it still holds.

use super::*;

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
}
