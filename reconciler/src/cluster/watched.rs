//! What the watches hold: each watched kind's objects by name, in name order.
//!
//! A pass reads every node and every Job the reconciler made, sorted by name, so the engine
//! finds each where it left it; a rollout of 10,000 nodes keeps some 60,000 finished Jobs
//! until their TTL. So the store keeps each object once, keyed by its name alone (a store
//! covers one namespace or none), already in the order a snapshot hands it over, and a
//! relist's copy of an object the store holds at the same version is the object it holds.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use futures::StreamExt;
use kube::Resource;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::Notify;

use crate::engine::incremental::ObjectVersion;

/// One watched kind's objects, shared between its watch and the passes.
pub(super) struct Watched<K> {
    objects: Arc<RwLock<BTreeMap<String, Arc<K>>>>,
    synced: tokio::sync::watch::Receiver<bool>,
}

impl<K> Clone for Watched<K> {
    fn clone(&self) -> Self {
        Watched {
            objects: self.objects.clone(),
            synced: self.synced.clone(),
        }
    }
}

impl<K> Watched<K> {
    fn read(&self) -> RwLockReadGuard<'_, BTreeMap<String, Arc<K>>> {
        // Every change of the map completes under the lock, so a panic elsewhere leaves it whole.
        self.objects.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The object called `name`, as the watch last delivered it.
    pub(super) fn get(&self, name: &str) -> Option<Arc<K>> {
        self.read().get(name).cloned()
    }

    /// Every object, in name order.
    pub(super) fn all(&self) -> Vec<Arc<K>> {
        self.read().values().cloned().collect()
    }

    /// Waits until the watch has listed every object once; an error when the watch ended
    /// before that.
    pub(super) async fn synced(&self) -> Result<(), WatchEnded>
    where
        K: Resource,
        K::DynamicType: Default,
    {
        let mut synced = self.synced.clone();
        match synced.wait_for(|synced| *synced).await {
            Ok(_) => Ok(()),
            Err(_) => Err(WatchEnded {
                kind: K::kind(&K::DynamicType::default()).into_owned(),
            }),
        }
    }
}

/// A watch that ended before it listed its objects once.
#[derive(Debug, PartialEq, thiserror::Error)]
#[error("the watch of {kind} objects ended before it listed them")]
pub(super) struct WatchEnded {
    kind: String,
}

/// An empty store, not yet synced: the watch's side and the passes' side.
fn store<K>() -> (Keeper<K>, Watched<K>) {
    let objects = Arc::new(RwLock::new(BTreeMap::new()));
    let (synced_tx, synced) = tokio::sync::watch::channel(false);
    let keeper = Keeper {
        objects: objects.clone(),
        synced: synced_tx,
        relisting: None,
    };
    (keeper, Watched { objects, synced })
}

/// The watch's side of a store: applies what the API server reports.
struct Keeper<K> {
    objects: Arc<RwLock<BTreeMap<String, Arc<K>>>>,
    synced: tokio::sync::watch::Sender<bool>,
    /// The objects of a relist so far, shown once it is complete, as an API server's list is
    /// one consistent view.
    relisting: Option<BTreeMap<String, Arc<K>>>,
}

impl<K: Resource + Clone> Keeper<K> {
    fn write(&self) -> RwLockWriteGuard<'_, BTreeMap<String, Arc<K>>> {
        self.objects.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies one event of the watch; whether a pass has something new to see.
    fn apply(&mut self, event: watcher::Event<K>) -> bool {
        match event {
            watcher::Event::Apply(object) => {
                if let Some(name) = object.meta().name.clone() {
                    self.write().insert(name, kept(&object));
                }
                true
            }
            watcher::Event::Delete(object) => {
                if let Some(name) = object.meta().name.as_deref() {
                    self.write().remove(name);
                }
                true
            }
            watcher::Event::Init => {
                self.relisting = Some(BTreeMap::new());
                false
            }
            watcher::Event::InitApply(object) => {
                let Some(name) = object.meta().name.clone() else {
                    return false;
                };
                let held = self.objects.read().unwrap_or_else(|e| e.into_inner());
                let object = match held.get(&name) {
                    Some(same) if ObjectVersion::same(same.meta(), object.meta()) => same.clone(),
                    _ => kept(&object),
                };
                drop(held);
                self.relisting
                    .get_or_insert_with(BTreeMap::new)
                    .insert(name, object);
                false
            }
            watcher::Event::InitDone => {
                let listed = self.relisting.take().unwrap_or_default();
                // The old view is freed after the lock: a pass does not wait on it.
                let replaced = std::mem::replace(&mut *self.write(), listed);
                drop(replaced);
                self.synced.send_replace(true);
                true
            }
        }
    }
}

/// The copy of a delivered object a store keeps. A decoded object's blocks lie among the
/// blocks its decoding used and the trim freed; held for an hour among them, they keep
/// whole pages of the heap resident (at 10,000 nodes the reconciler's peak grew from about
/// 520 to 570 MiB), while a copy made once decoding is done fills the gaps they leave.
fn kept<K: Clone>(object: &K) -> Arc<K> {
    Arc::new(object.clone())
}

/// Starts the watch of `api` with `config` into a new store, each object passed through
/// `trim` before it is kept, notifying `changed` whenever a pass has something new to see.
pub(super) fn watch<K>(
    api: kube::Api<K>,
    config: watcher::Config,
    changed: Arc<Notify>,
    trim: impl FnMut(&mut K) + Send + 'static,
) -> (Watched<K>, tokio::task::JoinHandle<()>)
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (mut keeper, store) = store();
    let stream = watcher(api, config).modify(trim).default_backoff();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(event) => {
                    if keeper.apply(event) {
                        changed.notify_one();
                    }
                }
                Err(e) => tracing::warn!(
                    error = %super::kube::watch_error_text(&e),
                    "watch error; retrying with backoff"
                ),
            }
        }
    });
    (store, task)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn cm(name: &str, uid: &str, rv: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(uid.into()),
                resource_version: Some(rv.into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    fn names(store: &Watched<ConfigMap>) -> Vec<String> {
        store
            .all()
            .iter()
            .map(|o| o.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    #[test]
    fn a_store_hands_its_objects_over_in_name_order_and_forgets_deleted_ones() {
        let (mut keeper, store) = store::<ConfigMap>();
        keeper.apply(watcher::Event::Init);
        for name in ["n10", "n2", "n1"] {
            keeper.apply(watcher::Event::InitApply(cm(name, name, "1")));
        }
        assert!(store.all().is_empty(), "a list shows once it is complete");
        keeper.apply(watcher::Event::InitDone);
        assert_eq!(names(&store), ["n1", "n10", "n2"]);
        keeper.apply(watcher::Event::Apply(cm("n0", "n0", "2")));
        keeper.apply(watcher::Event::Delete(cm("n10", "n10", "3")));
        assert_eq!(names(&store), ["n0", "n1", "n2"]);
        assert_eq!(
            store
                .get("n0")
                .and_then(|o| o.metadata.resource_version.clone()),
            Some("2".into())
        );
        assert!(store.get("n10").is_none());
    }

    #[test]
    fn a_relist_keeps_the_objects_it_finds_unchanged_and_drops_the_vanished() {
        let (mut keeper, store) = store::<ConfigMap>();
        keeper.apply(watcher::Event::Init);
        keeper.apply(watcher::Event::InitApply(cm("a", "ua", "1")));
        keeper.apply(watcher::Event::InitApply(cm("b", "ub", "1")));
        keeper.apply(watcher::Event::InitApply(cm("gone", "ug", "1")));
        keeper.apply(watcher::Event::InitDone);
        let a = store.get("a").expect("listed");
        let b = store.get("b").expect("listed");

        keeper.apply(watcher::Event::Init);
        keeper.apply(watcher::Event::InitApply(cm("a", "ua", "1")));
        keeper.apply(watcher::Event::InitApply(cm("b", "ub", "7")));
        assert_eq!(
            names(&store),
            ["a", "b", "gone"],
            "the old view until the relist ends"
        );
        keeper.apply(watcher::Event::InitDone);

        assert_eq!(names(&store), ["a", "b"]);
        assert!(Arc::ptr_eq(&a, &store.get("a").expect("relisted")));
        assert!(!Arc::ptr_eq(&b, &store.get("b").expect("relisted")));
    }

    #[tokio::test]
    async fn a_store_is_synced_after_its_first_list_and_not_before() {
        let (mut keeper, store) = store::<ConfigMap>();
        keeper.apply(watcher::Event::Init);
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(20), store.synced());
        assert!(
            waiting.await.is_err(),
            "not synced before the list is complete"
        );
        keeper.apply(watcher::Event::InitDone);
        assert_eq!(store.synced().await, Ok(()));
        drop(keeper);
        assert_eq!(store.synced().await, Ok(()), "synced stays true");
    }

    #[tokio::test]
    async fn a_watch_that_ends_before_its_list_names_its_kind() {
        let (mut keeper, store) = store::<ConfigMap>();
        keeper.apply(watcher::Event::Init);
        drop(keeper);
        let ended = store.synced().await.map_err(|e| e.to_string());
        assert_eq!(
            ended,
            Err("the watch of ConfigMap objects ended before it listed them".to_string())
        );
    }
}
