//! Everything a pass carries to the next, behind one boundary. The engine is a pure function
//! of the snapshot; what lives here only saves work, and a lost cache costs one cold pass,
//! never a different plan (docs/engine-performance.md).
//!
//! - [`StateCache`] (`state_cache.rs`): the caller-owned cache, with the node entries (each
//!   node object, its memo and its parsed node states), the node order and selections, and
//!   what a pass derived per NodeWright and selected node.
//! - [`job_table`]: the pass's table of snapshot Jobs (facts, `package` annotation, pods,
//!   pruning and sweep verdicts), handed from pass to pass for the same Job object.
//! - `job_pods.rs`: the snapshot's pods by their Job controller uid, brought up to date from
//!   what changed.
//!
//! Facts carry over to the same version of an object (`same_version`): the same
//! allocation, or the same uid and resourceVersion, so a relist that renews every object
//! keeps everything the last pass derived.
//!
//! The pass starts from these in `engine/context/start.rs` (tables in node order, selections,
//! parsed states, Job rows), answers the rule modules' questions from them in
//! `engine/context/memos.rs` and `NwView`, and hands back what it learned when it turns into
//! the plan. The lifecycle modules never see this module: they read the snapshot and the
//! pass's tables, and ask the pass for derived facts.

mod job_pods;
pub mod job_table;
pub mod state_cache;

pub use state_cache::StateCache;

use std::sync::Arc;

use k8s_openapi::Metadata;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::job::Job;

/// One version of a cluster object: its uid and resourceVersion. The API server moves the
/// resourceVersion on every write, so equal versions hold equal objects; a hand-built
/// snapshot without them has no version.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectVersion {
    uid: Box<str>,
    resource_version: Box<str>,
}

impl ObjectVersion {
    /// The version of an object with this metadata; `None` without uid or resourceVersion.
    pub fn of(meta: &ObjectMeta) -> Option<ObjectVersion> {
        Some(ObjectVersion {
            uid: meta.uid.as_deref()?.into(),
            resource_version: meta.resource_version.as_deref()?.into(),
        })
    }

    /// Whether two objects' metadata name one version (both have uid and resourceVersion, and
    /// they are equal).
    pub fn same(a: &ObjectMeta, b: &ObjectMeta) -> bool {
        a.uid.is_some()
            && a.resource_version.is_some()
            && a.uid == b.uid
            && a.resource_version == b.resource_version
    }
}

/// Whether `now` is the version of an object that `held` was, which is what carries a fact
/// derived from `held` over to `now`: the same allocation, or the same [`ObjectVersion`]. A
/// relist's copy of an unchanged object is the same version; an object without a version (a
/// hand-built snapshot) is only ever itself.
pub(in crate::engine) fn same_version<K: Metadata<Ty = ObjectMeta>>(
    held: &Arc<K>,
    now: &Arc<K>,
) -> bool {
    Arc::ptr_eq(held, now) || ObjectVersion::same(held.metadata(), now.metadata())
}

/// Holds `now`, the [`same_version`] of `held`, from now on: a relist's copy replaces the
/// copy held, which can then go. The object held itself is left untouched, as every object of
/// a large snapshot would be written to otherwise.
pub(in crate::engine) fn hold<K>(held: &mut Arc<K>, now: &Arc<K>) {
    if !Arc::ptr_eq(held, now) {
        *held = Arc::clone(now);
    }
}

/// The last pass's nodes, Jobs and pods the cache let go of in a pass, because they were
/// replaced or left. The cache is often their last owner, and each is a large object graph,
/// so freeing them is the caller's to schedule off the path from snapshot to plan
/// ([`StateCache::take_released`]); whatever a caller leaves is freed when the next pass
/// starts.
#[derive(Debug, Default)]
pub struct Released {
    nodes: Vec<Arc<Node>>,
    jobs: Vec<Arc<Job>>,
    pods: Vec<Arc<Pod>>,
}

impl Released {
    /// How many objects were let go of.
    pub fn len(&self) -> usize {
        self.nodes.len() + self.jobs.len() + self.pods.len()
    }
    /// Whether nothing was let go of.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn append(&mut self, mut other: Released) {
        self.nodes.append(&mut other.nodes);
        self.jobs.append(&mut other.jobs);
        self.pods.append(&mut other.pods);
    }
}
