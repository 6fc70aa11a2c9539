//! The snapshot's pods by the controller UID label their Job gives them (§8.10), kept from
//! pass to pass and brought up to each new snapshot by what changed in it.
//!
//! Finding a Job's pods means reading that label on every pod. On a 10,000-node fleet that is
//! thousands of label maps the pass would not otherwise touch, and a pass where a single pod
//! object is new had to read them all again. [`PodIndex`] holds the pods it was built from,
//! so it knows which positions hold a pod it has not seen, reads the label of those alone,
//! and tells the Job table ([`super::job_table`]) which uids gained or lost a pod
//! ([`PodChanges`]): every other Job has the same pods it had, at positions the index knows.
//!
//! It also keeps, per pod version, whether §8.10 found its evidence quiet: a fact of the pod
//! and the operator namespace alone, so the same version is not read again, wherever it now
//! sits.

use std::hash::BuildHasher;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use nodewright_schema::keys;
use rustc_hash::{FxBuildHasher, FxHashMap};

use super::{Released, hold, same_version};
use crate::engine::context::Few;

/// A position with no pod in this snapshot (the pod left).
const GONE: u32 = u32::MAX;

/// Past this many positions holding another pod object, the pods are taken to have shifted
/// (a pod joined or left before them) rather than to have been rewritten in place.
const REWRITTEN_LIMIT: usize = 32;

/// The hash [`PodChanges::touched`] compares a Job's uid by.
pub(in crate::engine) fn uid_hash(uid: &str) -> u64 {
    FxBuildHasher.hash_one(uid)
}

/// The hash of a pod's uid and resourceVersion, by which a relist's copy of a held pod is
/// found; `None` without them. Equal hashes are confirmed with [`same_version`].
fn version_key(pod: &Pod) -> Option<u64> {
    let meta = &pod.metadata;
    Some(FxBuildHasher.hash_one((meta.uid.as_deref()?, meta.resource_version.as_deref()?)))
}

/// The controller UID label of a pod (`batch.kubernetes.io/controller-uid`).
fn controller_uid(pod: &Pod) -> Option<&str> {
    pod.metadata
        .labels
        .as_ref()?
        .get(keys::JOB_CONTROLLER_UID_LABEL)
        .map(String::as_str)
}

/// Pod positions by controller UID label, over the pods it holds.
#[derive(Debug, Default)]
pub(in crate::engine) struct PodIndex {
    /// The pods the positions are of. Held, so that the address of a pod without a version
    /// names one object alone.
    pods: Vec<Arc<Pod>>,
    /// Positions of the pods with each label, in snapshot order.
    by_uid: FxHashMap<Box<str>, Few<u32>>,
    /// Per held pod: whether its §8.10 evidence was quiet, when judged.
    quiet: Vec<Option<bool>>,
    /// The operator namespace the quiet verdicts were found in.
    quiet_in: Box<str>,
}

/// What changed between the pods an index held and a snapshot's, from [`PodIndex::update`].
#[derive(Debug, Default)]
pub(in crate::engine) struct PodChanges {
    /// Every pod's position now by its position before, [`GONE`] for a pod that left; `None`
    /// when every pod that stayed kept its position.
    moved: Option<Vec<u32>>,
    /// The uids of pods that left or joined, by [`uid_hash`]: a Job's question costs one
    /// look-up of its carried hash, however many uids a batch of Jobs touched.
    touched: FxHashMap<u64, Vec<Box<str>>>,
    /// Nothing was known before: every uid counts as touched.
    all_touched: bool,
}

impl PodChanges {
    /// Changes that tell nothing: every uid counts as touched.
    pub(in crate::engine) fn unknown() -> PodChanges {
        PodChanges {
            all_touched: true,
            ..PodChanges::default()
        }
    }

    fn touch(&mut self, uid: &str) {
        if self.all_touched {
            return;
        }
        let uids = self.touched.entry(uid_hash(uid)).or_default();
        if !uids.iter().any(|u| **u == *uid) {
            uids.push(uid.into());
        }
    }

    /// Whether a pod labelled with the uid whose [`uid_hash`] is `hash` joined or left. The
    /// uid itself is asked for only when a touched uid has that hash.
    pub(in crate::engine) fn touched<'u>(
        &self,
        hash: u64,
        uid: impl FnOnce() -> Option<&'u str>,
    ) -> bool {
        if self.all_touched {
            return true;
        }
        let Some(uids) = self.touched.get(&hash) else {
            return false;
        };
        let uid = uid();
        uids.iter().any(|u| Some(&**u) == uid)
    }

    /// Where the pods at positions `before` in the last snapshot are now, in snapshot order;
    /// `None` when one of them left.
    pub(in crate::engine) fn now_at(&self, before: &Few<u32>) -> Option<Few<u32>> {
        let Some(moved) = &self.moved else {
            return Some(before.clone());
        };
        let mut now = before
            .iter()
            .map(|&q| moved.get(q as usize).copied().filter(|&p| p != GONE))
            .collect::<Option<Few<u32>>>()?;
        if !now.is_sorted() {
            now.sort_unstable();
        }
        Some(now)
    }
}

/// Adds position `at` under `uid`, keeping the positions in order.
fn add(by_uid: &mut FxHashMap<Box<str>, Few<u32>>, uid: &str, at: u32) {
    let list = match by_uid.get_mut(uid) {
        Some(list) => list,
        None => by_uid.entry(uid.into()).or_default(),
    };
    if let Err(i) = list.binary_search(&at) {
        list.insert(i, at);
    }
}

/// Removes position `at` from under `uid`, and the uid once it has no pod.
fn remove(by_uid: &mut FxHashMap<Box<str>, Few<u32>>, uid: &str, at: u32) {
    if let Some(list) = by_uid.get_mut(uid) {
        list.retain(|p| *p != at);
        if list.is_empty() {
            by_uid.remove(uid);
        }
    }
}

impl PodIndex {
    /// The index of `pods`, every label read.
    pub(in crate::engine) fn new(pods: &[Arc<Pod>]) -> PodIndex {
        let mut by_uid = FxHashMap::with_capacity_and_hasher(pods.len(), FxBuildHasher);
        for (pod, at) in pods.iter().zip(0..) {
            if let Some(uid) = controller_uid(pod) {
                add(&mut by_uid, uid, at);
            }
        }
        PodIndex {
            pods: pods.to_vec(),
            by_uid,
            quiet: vec![None; pods.len()],
            quiet_in: Box::default(),
        }
    }

    /// Whether the pod at `at` was found quiet in operator namespace `namespace` (§8.10).
    pub(in crate::engine) fn quiet(&self, at: usize, namespace: &str) -> bool {
        *self.quiet_in == *namespace && self.quiet.get(at).copied().flatten() == Some(true)
    }

    /// Records whether the pod at `at` is quiet in operator namespace `namespace`; verdicts
    /// found in another namespace are dropped.
    pub(in crate::engine) fn record_quiet(&mut self, at: usize, namespace: &str, quiet: bool) {
        if *self.quiet_in != *namespace {
            self.quiet.fill(None);
            self.quiet_in = namespace.into();
        }
        if let Some(v) = self.quiet.get_mut(at) {
            *v = Some(quiet);
        }
    }

    /// Calls every held pod quiet, true or not, so a test can tell a carried verdict from a
    /// fresh read.
    #[cfg(test)]
    pub(in crate::engine) fn quiet_everywhere(&mut self, namespace: &str) {
        self.quiet.fill(Some(true));
        self.quiet_in = namespace.into();
    }

    /// The positions of the pods labelled `uid`, in snapshot order.
    pub(in crate::engine) fn of(&self, uid: &str) -> Few<u32> {
        self.by_uid.get(uid).cloned().unwrap_or_default()
    }

    /// Brings the index up to `pods`, this snapshot's, reading the labels of the pods it did
    /// not hold alone, and says what changed. The pods it held that were replaced or left go
    /// to `released`.
    pub(in crate::engine) fn update(
        &mut self,
        pods: &[Arc<Pod>],
        released: &mut Released,
    ) -> PodChanges {
        let mut changes = PodChanges::default();
        let same_count = self.pods.len() == pods.len();
        // A few pods that are not the same version held at their position are taken to have
        // replaced it (a pod rewritten by the API server). Many are a shift: a pod joined or
        // left before them.
        if same_count
            && (self.pods.iter().zip(pods))
                .filter(|(held, pod)| !same_version(held, pod))
                .nth(REWRITTEN_LIMIT)
                .is_none()
        {
            for ((held, pod), at) in self.pods.iter_mut().zip(pods).zip(0..) {
                if same_version(held, pod) {
                    hold(held, pod);
                    continue;
                }
                if let Some(uid) = controller_uid(held) {
                    remove(&mut self.by_uid, uid, at);
                    changes.touch(uid);
                }
                if let Some(uid) = controller_uid(pod) {
                    add(&mut self.by_uid, uid, at);
                    changes.touch(uid);
                }
                released.pods.push(std::mem::replace(held, Arc::clone(pod)));
                if let Some(quiet) = self.quiet.get_mut(at as usize) {
                    *quiet = None;
                }
            }
            return changes;
        }
        // Otherwise each pod is found by its address, which reads no pod; one that is not (a
        // pod that joined, or a relist's copy) by its version among the held pods left.
        let before: FxHashMap<usize, u32> = (self.pods.iter())
            .map(|p| Arc::as_ptr(p) as usize)
            .zip(0..)
            .collect();
        let mut moved = vec![GONE; self.pods.len()];
        let mut source = Vec::with_capacity(pods.len());
        let mut missed = Vec::new();
        for (pod, at) in pods.iter().zip(0u32..) {
            match before.get(&(Arc::as_ptr(pod) as usize)) {
                Some(&q) if moved[q as usize] == GONE => {
                    moved[q as usize] = at;
                    source.push(q);
                }
                _ => {
                    missed.push(at);
                    source.push(GONE);
                }
            }
        }
        if !missed.is_empty() {
            let by_version: FxHashMap<u64, u32> = (self.pods.iter().zip(0u32..))
                .filter(|(_, q)| moved[*q as usize] == GONE)
                .filter_map(|(p, q)| Some((version_key(p)?, q)))
                .collect();
            for at in missed {
                let pod = &pods[at as usize];
                if let Some(&q) = version_key(pod).and_then(|key| by_version.get(&key))
                    && moved[q as usize] == GONE
                    && same_version(&self.pods[q as usize], pod)
                {
                    moved[q as usize] = at;
                    source[at as usize] = q;
                }
            }
        }
        let mut held: Vec<Option<Arc<Pod>>> = self.pods.drain(..).map(Some).collect();
        let mut quiet = Vec::with_capacity(pods.len());
        let mut joined = Vec::new();
        for ((pod, &q), at) in pods.iter().zip(&source).zip(0u32..) {
            match held.get_mut(q as usize).and_then(Option::take) {
                // The same version moves to its new position.
                Some(mut p) => {
                    hold(&mut p, pod);
                    self.pods.push(p);
                    quiet.push(self.quiet.get(q as usize).copied().flatten());
                }
                None => {
                    joined.push(at);
                    self.pods.push(Arc::clone(pod));
                    quiet.push(None);
                }
            }
        }
        self.quiet = quiet;
        for pod in held.into_iter().flatten() {
            if let Some(uid) = controller_uid(&pod) {
                changes.touch(uid);
            }
            released.pods.push(pod);
        }
        for list in self.by_uid.values_mut() {
            let mut now: Few<u32> = list
                .iter()
                .map(|&q| moved[q as usize])
                .filter(|&p| p != GONE)
                .collect();
            if !now.is_sorted() {
                now.sort_unstable();
            }
            *list = now;
        }
        self.by_uid.retain(|_, list| !list.is_empty());
        for &at in &joined {
            if let Some(uid) = controller_uid(&pods[at as usize]) {
                add(&mut self.by_uid, uid, at);
                changes.touch(uid);
            }
        }
        changes.moved = Some(moved);
        changes
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::Pod;
    use nodewright_schema::keys;

    use super::{PodIndex, Released, uid_hash};

    fn pod(name: &str, uid: Option<&str>) -> Arc<Pod> {
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.into());
        pod.metadata.labels =
            uid.map(|u| [(keys::JOB_CONTROLLER_UID_LABEL.to_string(), u.to_string())].into());
        Arc::new(pod)
    }

    /// Every uid's positions, as a fresh index reads them.
    fn all(index: &PodIndex, pods: &[Arc<Pod>]) -> Vec<(String, Vec<u32>)> {
        let fresh = PodIndex::new(pods);
        let mut uids: Vec<&str> = fresh.by_uid.keys().map(|k| &**k).collect();
        uids.extend(index.by_uid.keys().map(|k| &**k));
        uids.sort();
        uids.dedup();
        uids.iter()
            .map(|u| (u.to_string(), index.of(u).to_vec()))
            .collect()
    }

    fn fresh(pods: &[Arc<Pod>]) -> Vec<(String, Vec<u32>)> {
        all(&PodIndex::new(pods), pods)
    }

    /// Brought up to a snapshot, the index holds what a fresh one reads; every uid that
    /// gained or lost a pod object is named as touched, a uid whose pods stayed where they
    /// were is not, and the pods of an untouched uid are found where they went.
    #[test]
    fn an_updated_index_reads_as_a_fresh_one_and_names_what_changed() {
        let uids = ["a", "b", "c", "d"];
        let mut pods = vec![
            pod("a1", Some("a")),
            pod("b1", Some("b")),
            pod("x", None),
            pod("a2", Some("a")),
            pod("c1", Some("c")),
        ];
        let mut index = PodIndex::new(&pods);
        let mut step = |pods: &[Arc<Pod>], touched: &[&str], what: &str| {
            let before = uids.map(|u| index.of(u));
            let changes = index.update(pods, &mut Released::default());
            assert_eq!(all(&index, pods), fresh(pods), "{what}");
            for (uid, before) in uids.iter().zip(&before) {
                let is_touched = changes.touched(uid_hash(uid), || Some(uid));
                assert_eq!(
                    is_touched,
                    touched.contains(uid),
                    "{what}: is {uid} touched"
                );
                if !is_touched {
                    let now = changes.now_at(before);
                    assert_eq!(now, Some(index.of(uid)), "{what}: where {uid}'s pods went");
                }
            }
        };
        step(&pods, &[], "nothing changed");
        pods[1] = pod("b1", Some("b"));
        step(&pods, &["b"], "a pod replaced by a new object");
        pods[2] = pod("d1", Some("d"));
        step(
            &pods,
            &["d"],
            "an unlabelled pod replaced by a labelled one",
        );
        pods[0] = pod("c2", Some("c"));
        step(&pods, &["a", "c"], "a pod of another Job in a pod's place");
        pods.insert(0, pod("b2", Some("b")));
        step(&pods, &["b"], "a pod joined in front");
        pods.remove(3);
        step(&pods, &["d"], "a pod left");
        // Swapped in place reads as replaced: both uids are looked up again.
        pods.swap(0, 4);
        step(&pods, &["b", "c"], "two pods swapped");
        let kept = vec![pods[3].clone(), pods[1].clone(), pods[0].clone()];
        step(&kept, &["b"], "pods left and the rest reordered");
        step(&[], &["a", "c"], "every pod left");
    }

    /// The pods an update lets go of are exactly those replaced or gone, whether the pods
    /// stayed in place or shifted, and nothing is let go of when nothing changed.
    #[test]
    fn an_update_lets_go_of_the_pods_replaced_or_gone() {
        let mut pods: Vec<_> = (0..4)
            .map(|i| pod(&format!("p{i}"), Some(&format!("u{i}"))))
            .collect();
        let mut index = PodIndex::new(&pods);
        let released_by = |index: &mut PodIndex, pods: &[Arc<Pod>]| {
            let mut released = Released::default();
            index.update(pods, &mut released);
            let names: Vec<String> = (released.pods.iter())
                .map(|p| p.metadata.name.clone().unwrap_or_default())
                .collect();
            names
        };
        assert!(released_by(&mut index, &pods).is_empty());
        pods[1] = pod("p1", Some("u1"));
        assert_eq!(released_by(&mut index, &pods), ["p1"], "replaced in place");
        let gone = pods.remove(0);
        assert_eq!(
            released_by(&mut index, &pods),
            ["p0"],
            "left, the rest shifted"
        );
        assert_eq!(Arc::strong_count(&gone), 1, "the index holds it no more");
    }

    /// A mass change (a relist renews every pod object) names each uid whose pods it
    /// renewed, however many, and no other.
    #[test]
    fn a_mass_change_names_every_renewed_uid_and_no_other() {
        let old: Vec<_> = (0..1000)
            .map(|i| pod(&format!("p{i}"), Some(&format!("u{i}"))))
            .collect();
        let mut index = PodIndex::new(&old);
        let new: Vec<_> = (0..1000)
            .map(|i| pod(&format!("p{i}"), Some(&format!("u{i}"))))
            .collect();
        let changes = index.update(&new, &mut Released::default());
        for i in 0..1000 {
            let uid = format!("u{i}");
            assert!(changes.touched(uid_hash(&uid), || Some(&uid)), "{uid}");
        }
        assert!(!changes.touched(uid_hash("elsewhere"), || Some("elsewhere")));
        assert_eq!(all(&index, &new), fresh(&new));
    }
}
