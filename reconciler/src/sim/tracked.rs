//! The simulator's object stores, which can remember the keys written since they were last
//! asked: `sim serve` publishes per change, so a write costs the same at 10 nodes or 10,000.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Deref;

/// A map of objects by key that, once [`track`](Tracked::track)ed, records every key any
/// mutable access reached. Reads go through `Deref` to the plain map.
#[derive(Debug)]
pub struct Tracked<K, V> {
    map: BTreeMap<K, V>,
    /// `None` while nobody publishes the changes (the in-process simulator).
    changed: Option<BTreeSet<K>>,
}

impl<K, V> Default for Tracked<K, V> {
    fn default() -> Self {
        Tracked {
            map: BTreeMap::new(),
            changed: None,
        }
    }
}

impl<K, V> Deref for Tracked<K, V> {
    type Target = BTreeMap<K, V>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl<K: Ord + Clone, V> Tracked<K, V> {
    /// Starts recording changed keys; every key present counts as changed once.
    pub fn track(&mut self) {
        self.changed = Some(self.map.keys().cloned().collect());
    }

    /// The keys written since the last call (all of them, the first time after `track`).
    pub fn take_changed(&mut self) -> BTreeSet<K> {
        self.changed
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    fn mark(&mut self, key: K) {
        if let Some(changed) = &mut self.changed {
            changed.insert(key);
        }
    }

    /// The object at `key`, to change it.
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Ord + ToOwned<Owned = K> + ?Sized,
    {
        let value = self.map.get_mut(key)?;
        if let Some(changed) = &mut self.changed {
            changed.insert(key.to_owned());
        }
        Some(value)
    }

    /// The object at `key` without recording a change: for the publisher itself, which
    /// stamps a resourceVersion on what it publishes.
    pub fn get_mut_unrecorded<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.map.get_mut(key)
    }

    /// Stores `value` at `key`, returning what was there.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        self.mark(key.clone());
        self.map.insert(key, value)
    }

    /// Removes the object at `key`.
    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Ord + ToOwned<Owned = K> + ?Sized,
    {
        let removed = self.map.remove(key)?;
        self.mark(key.to_owned());
        Some(removed)
    }

    /// Every object, to change them without recording a change: for what does not change the
    /// objects as the cluster serves them.
    pub fn values_mut_unrecorded(&mut self) -> impl Iterator<Item = &mut V> {
        self.map.values_mut()
    }

    /// Keeps the objects `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        let changed = &mut self.changed;
        self.map.retain(|k, v| {
            let kept = keep(k, v);
            if !kept && let Some(changed) = changed.as_mut() {
                changed.insert(k.clone());
            }
            kept
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_written_keys_only_once_tracked() {
        let mut map: Tracked<String, u32> = Tracked::default();
        map.insert("a".into(), 1);
        assert!(
            map.take_changed().is_empty(),
            "untracked maps record nothing"
        );
        map.track();
        assert_eq!(map.take_changed(), BTreeSet::from(["a".to_string()]));
        map.insert("b".into(), 2);
        *map.get_mut("a").unwrap() += 1;
        let _ = map.get("b");
        assert_eq!(
            map.take_changed(),
            BTreeSet::from(["a".to_string(), "b".to_string()])
        );
        map.remove("a");
        assert!(map.get_mut("missing").is_none());
        map.retain(|_, v| *v > 2);
        assert_eq!(
            map.take_changed(),
            BTreeSet::from(["a".to_string(), "b".to_string()])
        );
        *map.get_mut_unrecorded("b").unwrap_or(&mut 0) += 0;
        assert!(
            map.take_changed().is_empty(),
            "the publisher's own stamp is no change"
        );
    }
}
