//! A per-node map of a NodeWright's status (`nodeStatus`, `nodeState`, `nodeBootIds`, §1.9)
//! read through the snapshot and written as an overlay.
//!
//! These maps hold one entry per selected node, so copying them at the start of every pass
//! was the largest cost of building the pass (10,000 nodes × 5 NodeWrights). The pass reads
//! the snapshot's map in place and records only what it changes, and the status write
//! carries only those changes ([`MapPatch`]).

use std::cell::{Cell, OnceCell};
use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use crate::plan::MapPatch;

/// Below this many entries a tree lookup is as cheap as hashing the name.
const INDEX_FROM: usize = 64;

/// Tree lookups a pass makes in a large map before it indexes the map. A pass that reads a
/// handful of nodes (those renewed since the last pass) does not pay for indexing thousands.
const INDEX_AFTER: u32 = 32;

/// The snapshot's map plus this pass's changes.
#[derive(Clone, Debug)]
pub struct NodeMap<'a, V> {
    /// The map as the snapshot holds it (`None` when absent).
    base: Option<&'a BTreeMap<String, V>>,
    /// `base` by name, built once a pass has looked a large map up [`INDEX_AFTER`] times: a
    /// pass that reads every selected node looks each up several times, and a tree of
    /// thousands of names costs a dozen string comparisons per lookup.
    index: OnceCell<FxHashMap<&'a str, &'a V>>,
    /// Tree lookups made so far without the index.
    tree_lookups: Cell<u32>,
    /// The whole map was cleared this pass: `base` no longer counts.
    cleared: bool,
    /// Node → new value (`None` = removed), overriding `base`. Hashed: a rollout pass
    /// changes thousands of entries, and only the status write wants them in name order.
    changes: FxHashMap<String, Option<V>>,
}

impl<'a, V: Clone + PartialEq> NodeMap<'a, V> {
    /// A map that reads as `base` until written.
    pub fn new(base: Option<&'a BTreeMap<String, V>>) -> NodeMap<'a, V> {
        NodeMap {
            base,
            index: OnceCell::new(),
            tree_lookups: Cell::new(0),
            cleared: false,
            changes: FxHashMap::default(),
        }
    }

    fn base_get(&self, node: &str) -> Option<&V> {
        if self.cleared {
            return None;
        }
        let base = self.base?;
        if base.len() < INDEX_FROM {
            return base.get(node);
        }
        if self.index.get().is_none() && self.tree_lookups.get() < INDEX_AFTER {
            self.tree_lookups.set(self.tree_lookups.get() + 1);
            return base.get(node);
        }
        self.index
            .get_or_init(|| base.iter().map(|(k, v)| (k.as_str(), v)).collect())
            .get(node)
            .copied()
    }

    /// Whether the node's value is still the snapshot's: this pass neither changed it nor
    /// cleared the map.
    pub fn untouched(&self, node: &str) -> bool {
        !self.cleared && (self.changes.is_empty() || !self.changes.contains_key(node))
    }

    /// Whether the map is still the snapshot's: this pass changed no entry nor cleared it.
    pub fn unchanged(&self) -> bool {
        !self.cleared && self.changes.is_empty()
    }

    /// The value for a node as the pass leaves it so far.
    pub fn get(&self, node: &str) -> Option<&V> {
        match self.changes.get(node) {
            Some(change) => change.as_ref(),
            None => self.base_get(node),
        }
    }

    /// Sets a node's value; returns whether it differed.
    pub fn set(&mut self, node: &str, value: &V) -> bool {
        if self.get(node) == Some(value) {
            return false;
        }
        // Set back to the snapshot's value, the node has no change left to write; a node not
        // changed yet was just compared with the snapshot.
        if self.changes.contains_key(node) && self.base_get(node) == Some(value) {
            self.changes.remove(node);
        } else {
            self.changes.insert(node.to_string(), Some(value.clone()));
        }
        true
    }

    /// Changes a node's value in place through `change`, which returns whether it changed
    /// anything; returns the same. Only what `change` touches is compared, so one package
    /// entry of a node with thousands costs one entry, not a copy of the node's state.
    pub fn update(&mut self, node: &str, change: impl FnOnce(&mut Option<V>) -> bool) -> bool {
        if let Some(value) = self.changes.get_mut(node) {
            return change(value);
        }
        let mut value = self.base_get(node).cloned();
        if !change(&mut value) {
            return false;
        }
        self.changes.insert(node.to_string(), value);
        true
    }

    /// Removes a node; returns whether it was there.
    pub fn remove(&mut self, node: &str) -> bool {
        if self.get(node).is_none() {
            return false;
        }
        if self.base_get(node).is_some() {
            self.changes.insert(node.to_string(), None);
        } else {
            self.changes.remove(node);
        }
        true
    }

    /// Empties the map; returns whether it held anything. An empty map is written as absent.
    pub fn clear(&mut self) -> bool {
        let had = !self.is_empty();
        self.cleared = true;
        self.changes.clear();
        had
    }

    /// Whether no node has a value.
    pub fn is_empty(&self) -> bool {
        self.keys().next().is_none()
    }

    /// The nodes with a value, in name order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        let base = self
            .base
            .filter(|_| !self.cleared)
            .into_iter()
            .flat_map(|m| m.keys())
            .filter(|k| !self.changes.contains_key(k.as_str()))
            .map(String::as_str);
        let mut added: Vec<&str> = (self.changes.iter())
            .filter(|(_, v)| v.is_some())
            .map(|(k, _)| k.as_str())
            .collect();
        added.sort_unstable();
        // Both halves are sorted; merging keeps name order.
        union_sorted(base, added.into_iter())
    }

    /// Removes every node for which `keep` is false; returns how many went.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) -> usize {
        let gone: Vec<String> = self
            .keys()
            .filter(|k| !keep(k))
            .map(str::to_string)
            .collect();
        for k in &gone {
            self.remove(k);
        }
        gone.len()
    }

    /// This pass's changes, as the status write carries them (§5.15).
    pub fn into_patch(self) -> MapPatch<V> {
        MapPatch {
            replace: self.cleared,
            set: self.changes.into_iter().collect(),
        }
    }
}

/// The names of `a` and `b`, two iterators of names each sorted and free of repeats, in name
/// order and each once.
pub fn union_sorted<'k>(
    a: impl Iterator<Item = &'k str>,
    b: impl Iterator<Item = &'k str>,
) -> impl Iterator<Item = &'k str> {
    let (mut a, mut b) = (a.peekable(), b.peekable());
    std::iter::from_fn(move || match (a.peek(), b.peek()) {
        (Some(x), Some(y)) if x == y => {
            b.next();
            a.next()
        }
        (Some(x), Some(y)) if x < y => a.next(),
        (Some(_), Some(_)) => b.next(),
        (Some(_), None) => a.next(),
        (None, _) => b.next(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The map a status write of `m` leaves, when the live map is the snapshot's.
    fn written(m: &NodeMap<'_, i32>) -> Option<BTreeMap<String, i32>> {
        m.clone().into_patch().apply(m.base.cloned(), &mut false)
    }

    fn base() -> BTreeMap<String, i32> {
        [("a", 1), ("c", 3), ("e", 5)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    }

    #[test]
    fn reads_through_and_overlays_writes() {
        let b = base();
        let mut m = NodeMap::new(Some(&b));
        assert_eq!(m.get("c"), Some(&3));
        assert!(!m.set("c", &3), "same value is no change");
        assert!(m.set("b", &2));
        assert!(m.set("c", &30));
        assert!(m.remove("e"));
        assert!(!m.remove("zz"));
        assert_eq!(m.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
        let out = written(&m).unwrap();
        assert_eq!(out.get("c"), Some(&30));
        assert_eq!(out.len(), 3);
        // Setting back the snapshot's value drops the override.
        assert!(m.set("c", &3));
        assert_eq!(written(&m).unwrap().get("c"), Some(&3));
    }

    #[test]
    fn clear_then_write_ignores_the_snapshot() {
        let b = base();
        let mut m = NodeMap::new(Some(&b));
        assert!(m.clear());
        assert!(!m.clear());
        assert_eq!(m.get("a"), None);
        assert_eq!(written(&m), None);
        assert!(m.set("a", &1));
        assert_eq!(written(&m).unwrap().len(), 1);
    }

    #[test]
    fn retain_removes_and_counts() {
        let b = base();
        let mut m = NodeMap::new(Some(&b));
        m.set("d", &4);
        assert_eq!(m.retain(|k| k == "a" || k == "d"), 2);
        assert_eq!(m.keys().collect::<Vec<_>>(), ["a", "d"]);
        assert_eq!(m.retain(|_| false), 2);
        assert!(m.is_empty());
        assert_eq!(written(&m), None);
        let mut absent: NodeMap<'_, i32> = NodeMap::new(None);
        assert!(absent.is_empty());
        assert!(absent.set("x", &1));
        assert_eq!(absent.keys().collect::<Vec<_>>(), ["x"]);
    }

    #[test]
    fn a_union_of_sorted_names_lists_each_once_in_order() {
        let union: Vec<&str> =
            union_sorted(["a", "c", "d"].into_iter(), ["b", "c", "e"].into_iter()).collect();
        assert_eq!(union, ["a", "b", "c", "d", "e"]);
        let union: Vec<&str> = union_sorted(
            union_sorted(["x"].into_iter(), std::iter::empty()),
            ["w", "x", "y"].into_iter(),
        )
        .collect();
        assert_eq!(union, ["w", "x", "y"]);
    }

    #[test]
    fn a_large_map_reads_the_same_through_its_index() {
        let big: BTreeMap<String, i32> = (0..INDEX_FROM as i32 * 2)
            .map(|i| (format!("n{i:03}"), i))
            .collect();
        let mut m = NodeMap::new(Some(&big));
        assert_eq!(m.get("n005"), Some(&5));
        assert_eq!(m.get("n5"), None);
        assert!(!m.set("n007", &7));
        assert!(m.set("n007", &70));
        assert!(m.remove("n008"));
        assert!(!m.remove("n008"));
        assert_eq!(m.get("n007"), Some(&70));
        assert_eq!(m.get("n008"), None);
        let out = written(&m).unwrap();
        assert_eq!(out.len(), big.len() - 1);
        assert_eq!(out["n007"], 70);
        assert!(m.clear());
        assert_eq!(
            m.get("n005"),
            None,
            "a cleared map no longer reads the snapshot"
        );
    }
}
