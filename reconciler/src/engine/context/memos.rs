//! What a pass remembers of each selected node's derived facts, so the rule modules ask
//! for a fact and never see how it is kept: within a pass, until the node is next written;
//! across passes, for the same node object (what `start.rs` carries in).

use std::sync::Arc;

use super::PassCtx;
use crate::engine::complete::{self, NodeDigest};
use crate::engine::incremental::state_cache::JobMatchMemo;
use crate::engine::jobs::{self, MatchTarget, PackageJobs};
use crate::engine::reboots::BootTracked;
use crate::job::Job;
use nodewright_schema::{Package, Status, names};

/// What the sweep compares unfinished Jobs against (§8.14 rule 1): the target of the Job that
/// would be built now, with the id the pass remembers comparisons against it by.
pub struct ExpectedJob {
    target: MatchTarget,
    id: Option<u64>,
}

/// The sweep's comparisons of Jobs with the Jobs that would be built now (§8.14 rule 1),
/// remembered across passes per Job version and target when the pass has a cache.
pub struct JobComparisons<'p> {
    pub(super) memo: Option<&'p JobMatchMemo>,
}

impl JobComparisons<'_> {
    /// `job`, built now, as an expected Job of the sweep.
    pub fn expected_job(&self, job: &Job) -> ExpectedJob {
        let target = MatchTarget::of(job);
        let id = self.memo.map(|memo| memo.target_id(&target));
        ExpectedJob { target, id }
    }
    /// Whether `job` matches `expected` ([`jobs::job_matches`]); a Job without uid or
    /// resourceVersion is compared every time.
    pub fn matches(&self, job: &Job, expected: &ExpectedJob) -> bool {
        match (self.memo, expected.id) {
            (Some(memo), Some(id)) => memo.recall(job, &expected.target, id, jobs::job_matches),
            _ => jobs::job_matches(job, &expected.target),
        }
    }
}

impl PassCtx<'_> {
    /// Whether node `id`, selected by NodeWright `nw`, carries that NodeWright's drain
    /// blockers, `drainBlocked_<nw>` (§7.10); false for a node it does not select.
    /// Remembered for the node object across passes.
    pub fn carries_drain_blockers(&self, nw: usize, id: usize) -> bool {
        let view = &self.nws[nw];
        view.position(id).is_some_and(|p| {
            self.nodes[id]
                .has_annotation_remembered(&view.keys.drain_blocked, &view.drain_blocked[p])
        })
    }
    /// Whether node `id`, selected by NodeWright `nw`, carries that NodeWright's operator
    /// version, `version_<nw>` (§4.1); false for a node it does not select. Remembered for
    /// the node object across passes.
    pub fn carries_version_stamp(&self, nw: usize, id: usize) -> bool {
        let view = &self.nws[nw];
        view.position(id).is_some_and(|p| {
            self.nodes[id].has_annotation_remembered(&view.keys.version, &view.version_stamped[p])
        })
    }
    /// Whether `name` is the name of node `id`'s metadata ConfigMap (§9.1) for NodeWright
    /// `nw`; the name, a hash, is remembered for the node across passes.
    pub fn is_metadata_configmap_of(&self, nw: usize, id: usize, name: &str) -> bool {
        let view = &self.nws[nw];
        let node = self.node(id);
        let derive = || names::node_metadata_configmap(view.name, node.name());
        match node.memo() {
            Some(memo) => memo.is_metadata_configmap(view.memo_id, name, derive),
            None => derive() == name,
        }
    }
    /// The name of node `id`'s metadata ConfigMap (§9.1) for NodeWright `nw`, remembered for
    /// the node across passes.
    pub fn metadata_configmap_name(&self, nw: usize, id: usize) -> String {
        let view = &self.nws[nw];
        let node = self.node(id);
        let derive = || names::node_metadata_configmap(view.name, node.name());
        match node.memo() {
            Some(memo) => memo.metadata_configmap(view.memo_id, derive),
            None => derive(),
        }
    }
    /// The parts every Job of `package` (named `name`) shares for NodeWright `nw`, derived
    /// once per pass and package version.
    pub fn package_jobs(&self, nw: usize, name: &str, package: &Package) -> Arc<PackageJobs> {
        let view = &self.nws[nw];
        if let Some(known) = (view.package_jobs.borrow().get(name)).filter(|k| k.is_of(package)) {
            return Arc::clone(known);
        }
        let parts = Arc::new(PackageJobs::of(view.nw, self.settings, name, package));
        (view.package_jobs.borrow_mut()).insert(name.to_string(), Arc::clone(&parts));
        parts
    }

    /// Finds the completion (§6.4) of every node NodeWright `nw` selects. It depends only on
    /// the node (its state and `configApplied` record) and on the NodeWright as the snapshot
    /// holds it, so a node not written since it was last found keeps its completion.
    pub fn refresh_completion(&mut self, nw: usize) {
        let mut completion = std::mem::take(&mut self.nws[nw].complete);
        let mut at = std::mem::take(&mut self.nws[nw].complete_at);
        for (p, &n) in self.nws[nw].selected.iter().enumerate() {
            let writes = self.nodes[n].writes;
            if at[p] != writes {
                completion[p] = complete::node_complete(self, nw, n);
                at[p] = writes;
            }
        }
        self.nws[nw].complete = completion;
        self.nws[nw].complete_at = at;
    }
    /// Runs introspection's `write_back` (§5.12 preamble) on every node NodeWright `nw`
    /// selects where it could change anything: not on a node unwritten since its last
    /// write-back whose mirrors were left alone meanwhile.
    pub fn write_back_each(&mut self, nw: usize, write_back: fn(&mut PassCtx<'_>, usize, usize)) {
        for p in 0..self.nws[nw].selected.len() {
            let n = self.nws[nw].selected[p];
            if self.nws[nw].written_back_at[p] == self.nodes[n].writes {
                continue;
            }
            write_back(self, nw, n);
            self.nws[nw].written_back_at[p] = self.nodes[n].writes;
        }
    }

    /// Runs reboot tracking's `track` (§10.6) on every node NodeWright `nw` selects unless
    /// `status.nodeBootIds` is known to hold its boot id: found so for the same node object
    /// and status version, and not written since. Returns whether `track` wrote.
    pub fn track_boot_ids(
        &mut self,
        nw: usize,
        track: fn(&mut PassCtx<'_>, usize, usize) -> BootTracked,
    ) -> bool {
        let mut wrote = false;
        for p in 0..self.nws[nw].selected.len() {
            let n = self.nws[nw].selected[p];
            let view = &self.nws[nw];
            let name = self.nodes[n].name();
            if view.boot_recorded[p] && view.node_boot_ids.untouched(name) {
                continue;
            }
            match track(self, nw, n) {
                BootTracked::Recorded => {
                    let view = &mut self.nws[nw];
                    view.boot_recorded[p] = view.node_boot_ids.untouched(self.nodes[n].name());
                }
                BootTracked::Written => wrote = true,
                BootTracked::Unreported => {}
            }
        }
        wrote
    }

    /// The `Ready` message (§12.1) of NodeWright `nw`: `derive` of its selected nodes' names
    /// and `status.nodeStatus` values, in selection order. A plain function of those alone, so
    /// the last pass's message stands while this pass selects the same nodes and has not
    /// changed `status.nodeStatus`; this pass's is kept for the next on the same terms.
    pub fn ready_message(&mut self, nw: usize, derive: fn(&[(&str, Status)]) -> String) -> String {
        let view = &self.nws[nw];
        let unchanged = view.node_status.unchanged();
        let message = match view.carried_ready.as_deref().filter(|_| unchanged) {
            Some(carried) => carried.to_string(),
            None => {
                let nodes: Vec<(&str, Status)> = (view.selected.iter().enumerate())
                    .map(|(p, &n)| {
                        let name = self.nodes[n].name();
                        (name, view.published_node_status_at(p, name))
                    })
                    .collect();
                derive(&nodes)
            }
        };
        self.nws[nw].ready_message = unchanged.then(|| message.clone());
        message
    }

    /// Lends `read` the digest of node `node` for NodeWright `nw` in the working state; `None`
    /// when the node's state annotation is malformed (such a node is never complete, §4.2).
    ///
    /// While the node's state is still the snapshot's parse, the digest is remembered in that
    /// parse (engine/incremental/state_cache.rs), keyed by the NodeWright's completion inputs
    /// and the node's `configApplied` value, so later passes over an unchanged node skip the
    /// package walk.
    pub fn node_digest<R>(
        &self,
        nw: usize,
        node: usize,
        read: impl FnOnce(Option<&NodeDigest>) -> R,
    ) -> R {
        let view = &self.nws[nw];
        let n = self.node(node);
        let Some(p) = view.position(node) else {
            return read(self.derive_digest(nw, node).as_deref());
        };
        // A steady pass reads the digests of thousands of nodes several times each, so `read`
        // borrows the remembered digest; it only reads, so nothing memoises one meanwhile.
        if let Some((at, digest)) = &view.digests.borrow()[p]
            && *at == n.writes()
        {
            return read(digest.as_deref());
        }
        let digest = self.derive_digest(nw, node);
        let out = read(digest.as_deref());
        view.digests.borrow_mut()[p] = Some((n.writes(), digest));
        out
    }

    /// [`PassCtx::node_digest`] without the per-pass memo: from the node's parse when it
    /// remembers one.
    fn derive_digest(&self, nw: usize, node: usize) -> Option<Arc<NodeDigest>> {
        let view = &self.nws[nw];
        let n = self.node(node);
        let unwritten = n.unwritten_state(view.state_key());
        let applied = n.annotation(&view.keys.config_applied);
        if let Some(known) = unwritten.and_then(|p| p.digest(&view.completion_inputs, applied)) {
            return Some(known);
        }
        let state = n.state(view.state_key()).ok()?;
        if state.0.is_empty() {
            let mut empty = view.empty_digest.borrow_mut();
            if let Some((at, digest)) = empty.as_ref()
                && at.as_deref() == applied
            {
                return Some(Arc::clone(digest));
            }
            let digest = Arc::new(NodeDigest::of(
                &view.completion_inputs,
                state,
                &complete::parse_applied(applied),
            ));
            *empty = Some((applied.map(Box::from), Arc::clone(&digest)));
            return Some(digest);
        }
        let digest = Arc::new(NodeDigest::of(
            &view.completion_inputs,
            state,
            &complete::parse_applied(applied),
        ));
        if let Some(parsed) = unwritten {
            parsed.remember_digest(&view.completion_inputs, applied, Arc::clone(&digest));
        }
        Some(digest)
    }
}
