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
//! Facts carry over to the same version of an object ([`Held::same_version`]): the same
//! allocation, or the same uid and resourceVersion, so a relist that renews every object
//! keeps everything the last pass derived. The cache holds no object alive ([`Held`]).
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

use std::sync::{Arc, Weak};

use k8s_openapi::Metadata;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

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

    /// Whether an object with metadata `meta` is this version.
    fn is_of(&self, meta: &ObjectMeta) -> bool {
        meta.uid.as_deref() == Some(&*self.uid)
            && meta.resource_version.as_deref() == Some(&*self.resource_version)
    }
}

/// The object a carried fact was derived from, known by its allocation and its version
/// without keeping it alive: a replaced object is freed by whoever replaced it (a reflector,
/// the simulated world), not by the next pass, and the cache holds no second copy of what
/// changed. The allocation itself stays while the cache refers to it, so its address cannot
/// name another object meanwhile.
#[derive(Debug)]
pub(in crate::engine) struct Held<K> {
    object: Weak<K>,
    version: Option<ObjectVersion>,
}

impl<K> Clone for Held<K> {
    fn clone(&self) -> Self {
        Held {
            object: Weak::clone(&self.object),
            version: self.version.clone(),
        }
    }
}

impl<K: Metadata<Ty = ObjectMeta>> Held<K> {
    /// Remembers `object`.
    pub(in crate::engine) fn of(object: &Arc<K>) -> Held<K> {
        Held {
            object: Arc::downgrade(object),
            version: ObjectVersion::of(object.metadata()),
        }
    }

    /// Whether `object` is the very allocation held.
    pub(in crate::engine) fn is(&self, object: &Arc<K>) -> bool {
        std::ptr::eq(self.object.as_ptr(), Arc::as_ptr(object))
    }

    /// The held allocation's address, for finding `object` among many by [`Arc::as_ptr`].
    pub(in crate::engine) fn address(&self) -> usize {
        self.object.as_ptr() as usize
    }

    /// Whether `now` is the version of the object held, which is what carries a fact derived
    /// from it over to `now`: the same allocation, or the same [`ObjectVersion`]. A relist's
    /// copy of an unchanged object is the same version; an object without a version (a
    /// hand-built snapshot) is only ever itself.
    pub(in crate::engine) fn same_version(&self, now: &Arc<K>) -> bool {
        self.is(now)
            || self
                .version
                .as_ref()
                .is_some_and(|v| v.is_of(now.metadata()))
    }

    /// Holds `now`, another object of the same version (a relist's copy), from now on.
    pub(in crate::engine) fn hold(&mut self, now: &Arc<K>) {
        debug_assert!(self.same_version(now), "only a copy of the same version");
        if !self.is(now) {
            self.object = Arc::downgrade(now);
        }
    }

    /// The held object's uid.
    pub(in crate::engine) fn uid(&self) -> Option<&str> {
        self.version.as_ref().map(|v| &*v.uid)
    }

    /// The held object's uid and resourceVersion.
    pub(in crate::engine) fn version(&self) -> Option<(&str, &str)> {
        (self.version.as_ref()).map(|v| (&*v.uid, &*v.resource_version))
    }
}
