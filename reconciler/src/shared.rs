//! A handle on an object that snapshots share.
//!
//! Nodes, pods, Jobs and NodeWrights reach the engine as `Arc`s (`Snapshot::nodes`, `pods`,
//! `jobs`, `nodewrights`), and a large rollout holds tens of thousands of package Jobs and
//! pods. The simulated world keeps each one in a [`Shared`] and a snapshot takes the same `Arc`,
//! so an object exists once however many snapshots (and the engine's cache) hold it. A
//! write through the handle copies the object first when anyone else still holds it, so what a
//! snapshot holds never changes under it, and a changed object is a new allocation, which the
//! engine's cache tells from the old one without comparing versions. The kube adapter's
//! NodeWright store holds the same handle: kube's store keeps a clone of every object a watch
//! delivers, and a NodeWright whose status mirrors thousands of nodes is tens of megabytes.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A copy-on-write handle: reads go through; a write copies the object when it is shared.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Shared<T>(Arc<T>);

impl<T> Shared<T> {
    /// Takes ownership of `object`.
    pub fn new(object: T) -> Self {
        Shared(Arc::new(object))
    }

    /// The object, copied only when it is shared.
    pub fn into_inner(self) -> T
    where
        T: Clone,
    {
        Arc::unwrap_or_clone(self.0)
    }

    /// Where the object lives: the same address while it is unchanged and a snapshot holds it.
    pub fn as_ptr(&self) -> *const T {
        Arc::as_ptr(&self.0)
    }

    /// The shared allocation, for a snapshot.
    pub fn arc(&self) -> Arc<T> {
        Arc::clone(&self.0)
    }
}

impl<T> Deref for Shared<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: Clone> DerefMut for Shared<T> {
    fn deref_mut(&mut self) -> &mut T {
        Arc::make_mut(&mut self.0)
    }
}

impl<T: Serialize> Serialize for Shared<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (*self.0).serialize(serializer)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Shared<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        T::deserialize(deserializer).map(Shared::new)
    }
}

impl<T: kube::Resource + Clone> kube::Resource for Shared<T> {
    type DynamicType = T::DynamicType;
    type Scope = T::Scope;

    fn kind(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        T::kind(dt)
    }
    fn group(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        T::group(dt)
    }
    fn version(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        T::version(dt)
    }
    fn plural(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        T::plural(dt)
    }
    fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        self.0.meta()
    }
    fn meta_mut(&mut self) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        Arc::make_mut(&mut self.0).meta_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_object_is_cloned_by_reference_and_trimmed_in_place() {
        use kube::{Resource, ResourceExt};
        let mut delivered: Shared<nodewright_schema::NodeWright> =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "gpu"}, "spec": {}}))
                .unwrap();
        let before = delivered.as_ptr();
        delivered.meta_mut().managed_fields = None;
        assert_eq!(delivered.as_ptr(), before, "trimmed where it was delivered");
        let stored = delivered.clone();
        assert!(Arc::ptr_eq(&stored.arc(), &delivered.arc()));
        assert_eq!(stored.name_any(), "gpu");
    }

    #[test]
    fn a_write_leaves_what_a_snapshot_holds_alone_and_makes_a_new_object() {
        let mut held = Shared::new(String::from("before"));
        let snapshot = held.arc();
        held.push_str(" and after");
        assert_eq!(*snapshot, "before");
        assert_eq!(*held, "before and after");
        assert!(!Arc::ptr_eq(&snapshot, &held.arc()));

        // Nobody else holds it: written in place.
        let mut alone = Shared::new(String::from("x"));
        let before = Arc::as_ptr(&alone.0);
        alone.push('y');
        assert_eq!(Arc::as_ptr(&alone.0), before);
    }
}
