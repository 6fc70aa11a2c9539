//! The pass's table of snapshot Jobs: per Job, its facts with both labels, its parsed
//! `package` annotation (§4.7) and its pods, each read once per pass, and carried to the next
//! pass for the same Job object.
//!
//! Every pass reads every Job: the handlers (§8.8–§8.11), the sweep (§8.14) and pause/resume
//! (§8.15) all start from these. On a 10,000-node fleet with thousands of Jobs, reading them
//! afresh (two label lookups, the annotation, conditions, and the pods' controller labels) was
//! a fifth of a steady pass, almost all of it waiting on memory the pass had not touched yet.
//!
//! So the table is handed from pass to pass ([`CarriedJobs`], kept in the
//! [`super::state_cache::StateCache`]):
//! - a Job that is the same version the last pass had (`same_version`: the same
//!   allocation, or the same uid and resourceVersion, as after a relist), at the same
//!   position or found elsewhere by its address or uid, starts with everything in place;
//! - another version of a Job keeps its pods while none joined or left, and is read afresh;
//! - any other Job is read afresh.
//!
//! The label strings of a carried Job are taken from where an equal string sits in this
//! snapshot (the name of the NodeWright or node it names, found when the Job was read), while
//! the NodeWrights by position are the same as then, or the node is found where it went;
//! otherwise they are read from the Job again. Its pods come from the pod index
//! (`job_pods.rs`): a Job to whose uid no pod joined and from which none left keeps its
//! pods, and its "no failed pod to prune" verdict (§8.11), which reads nothing but those pods.

use std::cell::{Cell, OnceCell};
use std::sync::Arc;

use crate::job::Job;
use k8s_openapi::api::core::v1::Pod;
use nodewright_schema::keys;
use rustc_hash::FxHashMap;

use super::job_pods::{PodChanges, PodIndex, uid_hash};
use super::state_cache::{NodeMemo, NodeMoves, ParsedPackage};
use super::{Released, hold, same_version};
use crate::engine::complete::CompletionInputs;
use crate::engine::context::{Few, NodeWork};
use crate::engine::jobs::{self, JobFacts};
use crate::settings::Settings;
use crate::snapshot::Snapshot;

/// Where a Job's label value can be found in the snapshot without reading the Job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LabelAt {
    /// The Job has no such label.
    Absent,
    /// Equal to the name of the snapshot's NodeWright at this position.
    NodeWright(u32),
    /// Equal to the name of the snapshot's node at this position.
    Node(u32),
    /// Only in the Job itself.
    Own,
}

/// What one pass read from one snapshot Job, for the next pass (see the module docs).
#[derive(Debug)]
struct CarriedJob {
    job: Arc<Job>,
    /// [`JobFacts::unlabelled`].
    facts: JobFacts<'static>,
    package: ParsedPackage,
    nodewright: LabelAt,
    node: LabelAt,
    /// [`uid_hash`] of the Job's uid.
    uid_hash: u64,
    /// Positions of the Job's pods in that pass's snapshot.
    pods: Few<u32>,
    /// None of those pods was a failed pod to prune (§8.11), when the pass judged it.
    no_prunable: Option<bool>,
    /// The sweep left the Job alone, judged from this.
    swept: Option<SweptVerdict>,
}

/// What the sweep (§8.14 rules 1 and 2) judged a Job from when it left the Job alone.
///
/// The verdict reads the Job (it is carried with the same Job object, or one of the same uid
/// and resourceVersion), its node's state as the snapshot holds it (the node object, by its
/// memo), the NodeWright's spec (its completion inputs, which hold the whole spec, compared
/// by pointer) and uid, and the settings (the same for every verdict of a pass). When all of
/// these are the same, so is the verdict.
#[derive(Clone, Debug)]
pub struct SweptVerdict {
    /// The owning NodeWright's uid.
    pub nodewright_uid: Option<Box<str>>,
    /// The NodeWright's completion inputs (its whole spec).
    pub inputs: Arc<CompletionInputs>,
    /// The memo of the Job's node object.
    pub node: Arc<NodeMemo>,
}

/// The Job table of the last pass, as the cache keeps it for the next.
#[derive(Debug, Default)]
pub struct CarriedJobs {
    entries: Vec<CarriedJob>,
    /// The NodeWright names of that pass's snapshot by position ([`LabelAt::NodeWright`]).
    nodewrights: Vec<Box<str>>,
    /// The position of each Job by its address, kept while every Job stays where it was.
    at: FxHashMap<usize, u32>,
    /// That pass's pods by controller UID label.
    pods: Option<PodIndex>,
    /// Parsed `package` annotations by their text, one per distinct value: a rollout's Jobs
    /// carry a handful of values, and a parse held per Job is kept until the Job's TTL.
    packages: FxHashMap<Box<str>, ParsedPackage>,
    /// The settings the sweep verdicts were found under.
    swept_under: Option<Settings>,
}

impl CarriedJobs {
    /// Marks every carried Job as having no failed pod to prune, true or not, so a test can
    /// tell a carried verdict from a fresh read.
    #[cfg(test)]
    pub(in crate::engine) fn no_prunable_pods_anywhere(&mut self) {
        for e in &mut self.entries {
            e.no_prunable = Some(true);
        }
    }

    /// Calls every carried pod's evidence quiet in operator namespace `namespace`, true or
    /// not, so a test can tell a carried verdict from a fresh read.
    #[cfg(test)]
    pub(in crate::engine) fn quiet_every_pod(&mut self, namespace: &str) {
        if let Some(index) = &mut self.pods {
            index.quiet_everywhere(namespace);
        }
    }

    /// Gives every carried Job this sweep verdict, found under `settings`: a verdict that
    /// lies shows it is what a pass reads.
    #[cfg(test)]
    pub(in crate::engine) fn forge_swept(&mut self, settings: &Settings, verdict: &SweptVerdict) {
        self.swept_under = Some(settings.clone());
        for e in &mut self.entries {
            e.swept = Some(verdict.clone());
        }
    }
}

/// The pass's table of snapshot Jobs (see the module docs). Positions are those of
/// `snap.jobs`.
#[derive(Debug)]
pub struct JobTable<'a> {
    jobs: &'a [Arc<Job>],
    pods: &'a [Arc<Pod>],
    facts: Vec<JobFacts<'a>>,
    /// Parsed on first use, or taken from the last pass for the same version of the Job; a
    /// pass with a cache parses the rest when it hands the table on.
    packages: Vec<OnceCell<ParsedPackage>>,
    /// Each Job's pods, by position in `snap.pods`.
    job_pods: Vec<Few<u32>>,
    no_prunable: Vec<Cell<Option<bool>>>,
    /// The snapshot's pods by their Job controller UID label.
    pod_index: PodIndex,
    /// Position by address.
    at: FxHashMap<usize, u32>,
    /// With a cache: the last pass's table, refilled for the next, and what it needs.
    carry: Option<Carry>,
    /// The last pass's Jobs and pods this table no longer holds.
    released: Released,
}

/// What a pass with a cache keeps to hand its table on.
#[derive(Debug)]
struct Carry {
    last: CarriedJobs,
    /// Every Job is the same object the last pass had at its position, and no Job left.
    all_in_place: bool,
    labels: Vec<(LabelAt, LabelAt)>,
    /// Per Job: the last pass's entry it was read from (its own position when in place).
    source: Vec<Option<u32>>,
    /// The last pass's sweep verdicts hold under this pass's settings.
    swept_valid: bool,
    /// Per Job: the sweep found the carried verdict standing.
    swept_kept: Vec<Cell<bool>>,
    /// Verdicts this pass's sweep made, by position.
    swept_fresh: Vec<(u32, SweptVerdict)>,
}

impl<'a> JobTable<'a> {
    /// Builds the table of `snap`'s Jobs. `last` is the cache's table from the last pass
    /// (`None` without a cache); `nodes` are the pass's nodes by position, `node_ids` their
    /// positions by name. `node_names_in_place` says whether every node has the name the last
    /// pass's node at its position had; otherwise `node_moves`, when known, says where each
    /// of the last pass's nodes went.
    pub(in crate::engine) fn build(
        snap: &'a Snapshot,
        settings: &Settings,
        last: Option<CarriedJobs>,
        nodes: &[NodeWork<'a>],
        node_ids: &FxHashMap<&'a str, usize>,
        node_names_in_place: bool,
        node_moves: Option<&NodeMoves>,
    ) -> JobTable<'a> {
        let n = snap.jobs.len();
        let mut table = JobTable {
            jobs: &snap.jobs,
            pods: &snap.pods,
            facts: Vec::with_capacity(n),
            packages: Vec::with_capacity(n),
            job_pods: Vec::with_capacity(n),
            no_prunable: Vec::with_capacity(n),
            pod_index: PodIndex::default(),
            at: FxHashMap::default(),
            carry: None,
            released: Released::default(),
        };
        let Some(mut last) = last else {
            table.pod_index = PodIndex::new(&snap.pods);
            for job in &snap.jobs {
                let pods = table.pods_by_uid(job);
                table.push_read(JobFacts::of(job), OnceCell::new(), pods);
            }
            table.at = addresses(&snap.jobs);
            return table;
        };
        let nw_names_kept = last.nodewrights.len() == snap.nodewrights.len()
            && last
                .nodewrights
                .iter()
                .zip(&snap.nodewrights)
                .all(|(kept, nw)| **kept == *nw.name());
        // The last pass's pods brought up to this snapshot's: a Job none of whose pods left
        // and to whose uid no pod joined has the same pods it had.
        let changes = match last.pods.take() {
            Some(mut index) => {
                let changes = index.update(&snap.pods, &mut table.released);
                table.pod_index = index;
                changes
            }
            None => {
                table.pod_index = PodIndex::new(&snap.pods);
                PodChanges::unknown()
            }
        };
        // Where the last pass's node at `k` is now, when known.
        let node_now = |k: u32| -> Option<u32> {
            if node_names_in_place {
                return Some(k);
            }
            node_moves?.now(k as usize).map(|p| p as u32)
        };
        let mut all_in_place = last.entries.len() == n;
        // Every Job is also the allocation the last pass had, so its addresses still hold.
        let mut same_objects = all_in_place;
        let mut labels = Vec::with_capacity(n);
        let mut source = Vec::with_capacity(n);
        // The last pass's Jobs by the hash of their uid, for Jobs found away from their
        // position: the hashes sit in the entries, so no Job object is read to build it.
        let mut by_uid_hash: Option<FxHashMap<u64, usize>> = None;
        for (i, job) in snap.jobs.iter().enumerate() {
            let entries = &last.entries;
            // The last pass's entry of the same uid. A Job rewritten in place (a new status, a
            // new annotation) keeps its position: only a Job that moved needs the last pass's
            // uids all read.
            let mut same_uid = || {
                let uid = job.metadata.uid.as_deref()?;
                match entries.get(i) {
                    Some(e) if e.job.metadata.uid.as_deref() == Some(uid) => Some(i),
                    _ => {
                        let by_hash = by_uid_hash.get_or_insert_with(|| {
                            entries.iter().map(|e| e.uid_hash).zip(0..).collect()
                        });
                        let k = *by_hash.get(&uid_hash(uid))?;
                        (entries[k].job.metadata.uid.as_deref() == Some(uid)).then_some(k)
                    }
                }
            };
            // The same version of the Job the last pass had: the same allocation at the same
            // position or (a Job joined or left before it) found by its address, which reads
            // no Job; else, as after a relist, the same uid and resourceVersion.
            let same_object = |k: usize| entries.get(k).is_some_and(|e| Arc::ptr_eq(&e.job, job));
            let mut uid_found = None;
            let here = Some(i)
                .filter(|&i| same_object(i))
                .or_else(|| {
                    let k = *last.at.get(&(Arc::as_ptr(job) as usize))? as usize;
                    same_object(k).then_some(k)
                })
                .or_else(|| {
                    uid_found = same_uid();
                    uid_found.filter(|&k| same_version(&entries[k].job, job))
                });
            all_in_place &= here == Some(i);
            same_objects &= all_in_place && Arc::ptr_eq(&entries[i].job, job);
            if let Some(k) = here {
                let e = &last.entries[k];
                source.push(Some(k as u32));
                let nodewright = e.nodewright;
                let node = e.node;
                let label = |at: LabelAt, key: &str| match at {
                    LabelAt::Absent => None,
                    LabelAt::NodeWright(k) if nw_names_kept => {
                        Some(snap.nodewrights[k as usize].name())
                    }
                    LabelAt::Node(k) => match node_now(k) {
                        Some(p) => Some(nodes[p as usize].name()),
                        None => jobs::label(job, key),
                    },
                    _ => jobs::label(job, key),
                };
                table.facts.push(JobFacts {
                    nodewright: label(nodewright, keys::JOB_LABEL_NAME),
                    node_label: label(node, keys::JOB_LABEL_NODE),
                    ..e.facts
                });
                table.packages.push(OnceCell::from(Arc::clone(&e.package)));
                let (pods, same_pods) = table.pods_after(job, Some(e), &changes);
                table.job_pods.push(pods);
                table
                    .no_prunable
                    .push(Cell::new(e.no_prunable.filter(|_| same_pods)));
                let facts = &table.facts[i];
                let nodewright = match nodewright {
                    LabelAt::NodeWright(_) if !nw_names_kept => {
                        resolve_nodewright(snap, facts.nodewright)
                    }
                    at => at,
                };
                let node = match node {
                    LabelAt::Node(k) => match node_now(k) {
                        Some(p) => LabelAt::Node(p),
                        None => resolve_node(node_ids, facts.node_label),
                    },
                    at => at,
                };
                let resolved = (nodewright, node);
                labels.push(resolved);
                continue;
            }
            // Another version of a Job the last pass had keeps its pods while none joined or
            // left; the rest is read afresh.
            source.push(None);
            let facts = JobFacts::of(job);
            let (pods, _) = table.pods_after(job, uid_found.map(|k| &entries[k]), &changes);
            table.push_read(facts, OnceCell::new(), pods);
            labels.push(resolve(snap, node_ids, &facts));
        }
        table.at = if same_objects {
            std::mem::take(&mut last.at)
        } else {
            addresses(&snap.jobs)
        };
        if !nw_names_kept {
            last.nodewrights = snap.nodewrights.iter().map(|nw| nw.name().into()).collect();
        }
        let swept_valid = last.swept_under.as_ref() == Some(settings);
        if !swept_valid {
            last.swept_under = Some(settings.clone());
        }
        table.carry = Some(Carry {
            last,
            all_in_place,
            labels,
            source,
            swept_valid,
            swept_kept: (0..n).map(|_| Cell::new(false)).collect(),
            swept_fresh: Vec::new(),
        });
        table
    }

    /// Adds a Job read now, with no pruning verdict carried.
    fn push_read(&mut self, facts: JobFacts<'a>, package: OnceCell<ParsedPackage>, pods: Few<u32>) {
        self.facts.push(facts);
        self.packages.push(package);
        self.job_pods.push(pods);
        self.no_prunable.push(Cell::new(None));
    }

    /// The positions of `job`'s pods in `snap.pods`, found by their controller UID label
    /// (§8.10).
    fn pods_by_uid(&self, job: &Job) -> Few<u32> {
        match job.metadata.uid.as_deref() {
            Some(uid) => self.pod_index.of(uid),
            None => Few::new(),
        }
    }

    /// The positions of `job`'s pods in `snap.pods`, and whether they are the same pods that
    /// `before` (the last pass's entry of the same uid) had. They are taken from `before`
    /// unless a pod with the Job's uid joined or left; the Job's own memory is read only then.
    fn pods_after(
        &self,
        job: &Job,
        before: Option<&CarriedJob>,
        changes: &PodChanges,
    ) -> (Few<u32>, bool) {
        if let Some(e) = before
            && !changes.touched(e.uid_hash, || job.metadata.uid.as_deref())
            && let Some(now) = changes.now_at(&e.pods)
        {
            return (now, true);
        }
        (self.pods_by_uid(job), false)
    }

    /// The Jobs of the snapshot with their facts.
    pub fn with_facts(&self) -> impl Iterator<Item = (&'a Job, &JobFacts<'a>)> {
        self.jobs.iter().map(|j| &**j).zip(&self.facts)
    }

    /// The position of `job` in `snap.jobs` when it is one of them (found by address).
    pub fn position(&self, job: &Job) -> Option<usize> {
        let at = *self.at.get(&(job as *const Job as usize))? as usize;
        (at < self.jobs.len() && std::ptr::eq(&*self.jobs[at], job)).then_some(at)
    }

    /// The facts of the Job at position `i`.
    pub fn facts(&self, i: usize) -> JobFacts<'a> {
        self.facts[i]
    }

    /// The parsed `package` annotation of the Job at position `i`, parsed on first use.
    pub fn package(&self, i: usize) -> &ParsedPackage {
        self.packages[i].get_or_init(|| Arc::new(jobs::read_package_annotation(&self.jobs[i])))
    }

    /// The pods of `job`, by its controller UID label (§8.10), in snapshot order.
    pub fn pods_of(&self, job: &Job) -> Few<&'a Pod> {
        let positions = match self.position(job) {
            Some(i) => self.job_pods[i].clone(),
            None => self.pods_by_uid(job),
        };
        let pods = self.pods;
        positions.iter().map(|&p| &*pods[p as usize]).collect()
    }

    /// Whether the pod at position `at` of the snapshot is an object an earlier pass found
    /// quiet (§8.10) in operator namespace `namespace`.
    pub fn pod_quiet_before(&self, at: usize, namespace: &str) -> bool {
        self.pod_index.quiet(at, namespace)
    }

    /// Records whether the evidence of the pod at position `at` is quiet in operator
    /// namespace `namespace`, for the next pass.
    pub fn record_pod_quiet(&mut self, at: usize, namespace: &str, quiet: bool) {
        self.pod_index.record_quiet(at, namespace, quiet);
    }

    /// Whether the last pass found no failed pod to prune among the pods of the Job at
    /// position `i`, which are the same objects it judged.
    pub fn no_prunable_before(&self, i: usize) -> bool {
        self.no_prunable
            .get(i)
            .is_some_and(|c| c.get() == Some(true))
    }

    /// Records whether the Job at position `i` has a failed pod to prune (§8.11).
    pub fn record_prunable(&self, i: usize, any: bool) {
        if let Some(c) = self.no_prunable.get(i) {
            c.set(Some(!any));
        }
    }

    /// The sweep verdict the last pass left for the Job at position `i`, found under this
    /// pass's settings; `None` without one (or without a cache).
    pub fn swept_before(&self, i: usize) -> Option<&SweptVerdict> {
        let carry = self.carry.as_ref().filter(|c| c.swept_valid)?;
        let k = (*carry.source.get(i)?)? as usize;
        carry.last.entries.get(k)?.swept.as_ref()
    }

    /// Keeps the carried verdict of the Job at position `i` for the next pass: the sweep
    /// found it standing.
    pub fn keep_swept(&self, i: usize) {
        if let Some(kept) = self.carry.as_ref().and_then(|c| c.swept_kept.get(i)) {
            kept.set(true);
        }
    }

    /// Records a verdict of this pass's sweep for the Job at position `i`, for the next
    /// pass; nothing is kept without a cache.
    pub fn record_swept(&mut self, i: usize, verdict: SweptVerdict) {
        if let Some(carry) = self.carry.as_mut() {
            carry.swept_fresh.push((i as u32, verdict));
        }
    }

    /// Whether the pass hands its table on (it has a cache).
    pub fn carried(&self) -> bool {
        self.carry.is_some()
    }

    /// What the next pass starts from, and the last pass's Jobs and pods it no longer holds;
    /// `None` without a cache.
    pub fn into_carried(self) -> Option<(CarriedJobs, Released)> {
        let JobTable {
            jobs,
            facts,
            packages,
            job_pods,
            no_prunable,
            at,
            pod_index,
            carry,
            mut released,
            ..
        } = self;
        let Carry {
            mut last,
            all_in_place,
            labels,
            source,
            swept_valid,
            swept_kept,
            swept_fresh,
        } = carry?;
        let mut swept: Vec<Option<SweptVerdict>> = Vec::new();
        if !swept_fresh.is_empty() {
            swept.resize(jobs.len(), None);
            for (i, verdict) in swept_fresh {
                swept[i as usize] = Some(verdict);
            }
        }
        let fresh = |i: usize| swept.get(i).cloned().flatten();
        let kept = |i: usize| swept_valid && swept_kept[i].get();
        let refill = |i: usize, e: &mut CarriedJob, job: &Arc<Job>| {
            hold(&mut e.job, job);
            e.no_prunable = no_prunable[i].get();
            (e.nodewright, e.node) = labels[i];
            e.pods = job_pods[i].clone();
            if let Some(verdict) = fresh(i) {
                e.swept = Some(verdict);
            } else if !kept(i) {
                e.swept = None;
            }
        };
        let shared = std::cell::RefCell::new(std::mem::take(&mut last.packages));
        let read_now =
            |i: usize, job: &Arc<Job>, carried_verdict: Option<SweptVerdict>| CarriedJob {
                job: Arc::clone(job),
                facts: facts[i].unlabelled(),
                package: shared_package(&mut shared.borrow_mut(), job, packages[i].get()),
                nodewright: labels[i].0,
                node: labels[i].1,
                uid_hash: uid_hash(job.metadata.uid.as_deref().unwrap_or_default()),
                pods: job_pods[i].clone(),
                no_prunable: no_prunable[i].get(),
                swept: fresh(i).or(carried_verdict),
            };
        if !all_in_place {
            // Jobs joined, left or moved: each entry moves to where its Job is now, and a Job
            // not carried is entered as read now.
            let mut before: Vec<Option<CarriedJob>> = std::mem::take(&mut last.entries)
                .into_iter()
                .map(Some)
                .collect();
            last.entries.reserve_exact(jobs.len());
            for (i, job) in jobs.iter().enumerate() {
                let k = source[i].map(|k| k as usize);
                let very =
                    k.and_then(|k| before.get_mut(k)?.take_if(|e| same_version(&e.job, job)));
                let entry = match very {
                    Some(mut e) => {
                        refill(i, &mut e, job);
                        e
                    }
                    None => {
                        let carried = k.filter(|_| kept(i));
                        let verdict = carried.and_then(|k| before.get(k)?.as_ref()?.swept.clone());
                        read_now(i, job, verdict)
                    }
                };
                last.entries.push(entry);
            }
            released
                .jobs
                .extend(before.into_iter().flatten().map(|e| e.job));
            last.packages = shared.into_inner();
            // A value no Job reads any more goes with its last Job.
            last.packages
                .retain(|_, package| Arc::strong_count(package) > 1);
            last.at = at;
            last.pods = Some(pod_index);
            return Some((last, released));
        }
        last.packages = shared.into_inner();
        // At steady state each Job sits where it was, and its entry is refilled in place.
        for ((i, e), job) in last.entries.iter_mut().enumerate().zip(jobs) {
            refill(i, e, job);
        }
        last.at = at;
        last.pods = Some(pod_index);
        Some((last, released))
    }
}

/// The parsed `package` annotation of a Job read now, the same `Arc` as every carried Job's
/// whose annotation has the same text (`parsed`: this pass's parse, if it made one).
fn shared_package(
    shared: &mut FxHashMap<Box<str>, ParsedPackage>,
    job: &Job,
    parsed: Option<&ParsedPackage>,
) -> ParsedPackage {
    let Some(raw) = jobs::package_annotation_raw(job) else {
        return parsed.cloned().unwrap_or_else(|| Arc::new(None));
    };
    if let Some(package) = shared.get(raw) {
        return Arc::clone(package);
    }
    let package = parsed
        .cloned()
        .unwrap_or_else(|| Arc::new(jobs::parse_package_annotation(raw)));
    shared.insert(raw.into(), Arc::clone(&package));
    package
}

/// Where the two labels of a Job read now sit in the snapshot.
fn resolve(
    snap: &Snapshot,
    node_ids: &FxHashMap<&str, usize>,
    facts: &JobFacts<'_>,
) -> (LabelAt, LabelAt) {
    (
        resolve_nodewright(snap, facts.nodewright),
        resolve_node(node_ids, facts.node_label),
    )
}

/// Where a Job's NodeWright label sits in the snapshot.
fn resolve_nodewright(snap: &Snapshot, label: Option<&str>) -> LabelAt {
    match label {
        None => LabelAt::Absent,
        Some(label) => match snap.nodewrights.iter().position(|nw| nw.name() == label) {
            Some(k) => LabelAt::NodeWright(k as u32),
            None => LabelAt::Own,
        },
    }
}

/// Where a Job's node label sits in the snapshot.
fn resolve_node(node_ids: &FxHashMap<&str, usize>, label: Option<&str>) -> LabelAt {
    match label {
        None => LabelAt::Absent,
        Some(label) => match node_ids.get(label) {
            Some(&k) => LabelAt::Node(k as u32),
            None => LabelAt::Own,
        },
    }
}

/// Each Job's position by its address.
fn addresses(jobs: &[Arc<Job>]) -> FxHashMap<usize, u32> {
    jobs.iter()
        .map(|j| Arc::as_ptr(j) as usize)
        .zip(0..)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::job::Job;
    use k8s_openapi::api::core::v1::Pod;
    use nodewright_schema::{NodeWright, Stage, keys};

    use crate::engine::StateCache;
    use crate::engine::context::PassCtx;
    use crate::engine::jobs::{StageJobInput, build_stage_job};
    use crate::engine::testkit::{node, nw, settings, world};
    use crate::snapshot::Snapshot;

    fn job(obj: &NodeWright, node: &str, uid: &str) -> Job {
        let package = obj.spec.packages()["tuning"].clone();
        let mut job = build_stage_job(
            obj,
            &settings(),
            StageJobInput {
                package_name: "tuning",
                package: &package,
                stage: Stage::Apply,
                node,
                node_order: 0,
            },
        );
        job.metadata.uid = Some(uid.into());
        job.metadata.resource_version = Some("1".into());
        job
    }

    fn pod_of(job: &Job, name: &str) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.into());
        pod.metadata.namespace = Some("nodewright".into());
        let uid = job.metadata.uid.clone().expect("the test Jobs have uids");
        pod.metadata.labels = Some([(keys::JOB_CONTROLLER_UID_LABEL.to_string(), uid)].into());
        pod
    }

    /// What a pass reads of each snapshot Job: facts, package, and the names of its pods.
    fn read(snap: &Snapshot, cache: Option<&mut StateCache>) -> Vec<String> {
        let s = settings();
        let mut cache = cache;
        let ctx = PassCtx::new_cached(snap, &s, cache.as_deref_mut());
        let seen = snap
            .jobs
            .iter()
            .map(|job| {
                let pods: Vec<_> = ctx
                    .index
                    .pods_of(job)
                    .iter()
                    .map(|p| p.metadata.name.clone())
                    .collect();
                format!(
                    "{:?} {:?} {pods:?}",
                    ctx.job_facts(job),
                    ctx.package_annotation(job)
                )
            })
            .collect();
        drop(ctx.into_actions(Vec::new(), cache));
        seen
    }

    /// A Job or pod that left the snapshot, or a node object replaced, is handed to the caller
    /// to free, once; what the caller does not take is freed when the next pass starts.
    #[test]
    fn what_a_pass_lets_go_of_is_the_caller_s_to_free_and_never_piles_up() {
        let a = nw("a").package("tuning", "1.0.0").build();
        let (j1, j2) = (job(&a, "n1", "u1"), job(&a, "n2", "u2"));
        let mut snap = world()
            .node(node("n1"))
            .node(node("n2"))
            .nw(nw("a").package("tuning", "1.0.0"))
            .job(j1.clone())
            .job(j2.clone())
            .pod(pod_of(&j1, "p1"))
            .pod(pod_of(&j2, "p2"))
            .build();
        let mut cache = StateCache::new();
        read(&snap, Some(&mut cache));
        read(&snap, Some(&mut cache));
        assert!(
            cache.take_released().is_empty(),
            "nothing left the snapshot"
        );
        let (gone_job, gone_pod) = (snap.jobs.remove(0), snap.pods.remove(0));
        let held = |cache: &mut StateCache| {
            read(&snap, Some(cache));
            (Arc::strong_count(&gone_job), Arc::strong_count(&gone_pod))
        };
        assert_eq!(held(&mut cache), (2, 2), "the cache still holds them");
        let released = cache.take_released();
        assert_eq!(released.len(), 2);
        drop(released);
        assert_eq!(
            (Arc::strong_count(&gone_job), Arc::strong_count(&gone_pod)),
            (1, 1),
            "freed with what the caller took"
        );
        let renewed = snap.nodes[0].clone();
        let mut next = (*renewed).clone();
        next.metadata.resource_version = Some("renewed".into());
        snap.nodes[0] = Arc::new(next);
        read(&snap, Some(&mut cache));
        assert_eq!(
            Arc::strong_count(&renewed),
            2,
            "the cache let go of the node replaced"
        );
        drop(cache.take_released());
        assert_eq!(Arc::strong_count(&renewed), 1);
        let (gone_job, gone_pod) = (snap.jobs.remove(0), snap.pods.remove(0));
        let counts = || (Arc::strong_count(&gone_job), Arc::strong_count(&gone_pod));
        read(&snap, Some(&mut cache));
        assert_eq!(counts(), (2, 2), "left with the cache");
        read(&snap, Some(&mut cache));
        assert_eq!(counts(), (1, 1), "freed when the next pass started");
        assert!(cache.take_released().is_empty());
    }

    /// A warm pass reads every Job as a cold one does, whatever moved since the last pass:
    /// NodeWrights, nodes, Jobs or pods.
    #[test]
    fn a_warm_pass_reads_every_job_as_a_cold_one_whatever_moved() {
        let a = nw("a").package("tuning", "1.0.0").build();
        let b = nw("b").package("tuning", "1.0.0").build();
        let (j1, j2, j3) = (
            job(&a, "n1", "u1"),
            job(&b, "n2", "u2"),
            job(&b, "n1", "u3"),
        );
        let mut snap = world()
            .node(node("n1"))
            .node(node("n2"))
            .nw(nw("a").package("tuning", "1.0.0"))
            .nw(nw("b").package("tuning", "1.0.0"))
            .job(j1.clone())
            .job(j2.clone())
            .pod(pod_of(&j1, "p1"))
            .pod(pod_of(&j2, "p2"))
            .pod(pod_of(&j1, "p3"))
            .build();
        let mut cache = StateCache::new();
        let mut check = |snap: &Snapshot, what: &str| {
            let cold = read(snap, None);
            assert_eq!(
                read(snap, Some(&mut cache)),
                cold,
                "first warm pass, {what}"
            );
            assert_eq!(
                read(snap, Some(&mut cache)),
                cold,
                "second warm pass, {what}"
            );
        };
        check(&snap, "nothing moved");
        snap.nodewrights.swap(0, 1);
        check(&snap, "NodeWrights swapped");
        snap.nodes.swap(0, 1);
        check(&snap, "nodes swapped");
        snap.nodewrights.remove(0);
        check(&snap, "a NodeWright left");
        snap.jobs.insert(0, Arc::new(j3.clone()));
        check(&snap, "a Job joined in front");
        snap.pods.swap(0, 2);
        check(&snap, "pods swapped");
        snap.pods.push(Arc::new(pod_of(&j3, "p4")));
        check(&snap, "a pod joined");
        snap.pods.remove(0);
        check(&snap, "a pod left");
        let mut relabelled = j2.clone();
        relabelled.metadata.resource_version = Some("2".into());
        let labels = relabelled
            .metadata
            .labels
            .as_mut()
            .expect("Jobs are labelled");
        labels.insert(keys::JOB_LABEL_NODE.into(), "n9".into());
        snap.jobs[2] = Arc::new(relabelled);
        check(&snap, "a Job's node label changed");
        snap.jobs.swap(0, 2);
        check(&snap, "Jobs swapped");
        let renamed = snap
            .nodes
            .iter()
            .position(|n| n.metadata.name.as_deref() == Some("n1"));
        let at = renamed.expect("n1 is in the snapshot");
        snap.nodes[at] = Arc::new(node("n1").annotation("touched", "yes").build());
        check(&snap, "a node rewritten in place");
        snap.nodes[at] = Arc::new(node("n3").build());
        check(&snap, "another node in its place");
        snap.pods[0] = Arc::new(pod_of(&j1, "p5"));
        check(&snap, "a pod of another Job in a pod's place");
        snap.nodes.remove(1);
        check(&snap, "a node left");
        let j4 = job(&b, "n2", "u4");
        snap.pods.insert(1, Arc::new(pod_of(&j4, "p6")));
        check(&snap, "a pod of a Job not yet seen joined");
        snap.jobs.push(Arc::new(j4.clone()));
        check(&snap, "its Job joined");
        let p6 = snap.pods[1].clone();
        snap.pods[1] = Arc::new(Pod::clone(&p6));
        check(&snap, "a pod replaced by a new object of itself");
        snap.pods.insert(0, Arc::new(pod_of(&j4, "p7")));
        snap.pods.remove(2);
        check(&snap, "a pod joined in front as another left");
    }

    /// Jobs whose `package` annotations read the same hold one parse between passes, and the
    /// parse goes with the last Job that holds it.
    #[test]
    fn jobs_whose_package_annotations_read_the_same_share_one_parse() {
        let obj = nw("nw").package("tuning", "1.0.0").build();
        let mut snap = world()
            .node(node("n1"))
            .node(node("n2"))
            .nw(nw("nw").package("tuning", "1.0.0"))
            .job(job(&obj, "n1", "u1"))
            .job(job(&obj, "n2", "u2"))
            .build();
        let mut cache = StateCache::new();
        let cold = read(&snap, None);
        assert_eq!(read(&snap, Some(&mut cache)), cold);
        let carried = cache.jobs_mut();
        let [first, second] = &carried.entries[..] else {
            panic!("two Jobs carried, not {}", carried.entries.len());
        };
        assert!(first.package.is_some(), "the annotation parses");
        assert!(Arc::ptr_eq(&first.package, &second.package));
        assert_eq!(carried.packages.len(), 1);
        snap.jobs.remove(0);
        assert_eq!(read(&snap, Some(&mut cache)), read(&snap, None));
        assert_eq!(cache.jobs_mut().packages.len(), 1, "one Job still holds it");
        let other = nw("other").package("tuning", "1.0.0").build();
        snap.jobs[0] = Arc::new(job(&other, "n2", "u3"));
        assert_eq!(read(&snap, Some(&mut cache)), read(&snap, None));
        let carried = cache.jobs_mut();
        assert_eq!(
            carried.packages.len(),
            1,
            "only the other NodeWright's annotation is held"
        );
        assert!(Arc::ptr_eq(
            &carried.entries[0].package,
            carried.packages.values().next().expect("one parse held")
        ));
    }

    /// The carried verdict that a Job has no failed pod to prune is what a pass reads: made
    /// to lie, it is believed for the same Job and pods, and for no other.
    #[test]
    fn a_pruning_verdict_is_carried_for_the_same_versions_of_the_job_and_pods_only() {
        use k8s_openapi::api::core::v1::PodStatus;
        let obj = nw("nw").package("tuning", "1.0.0").build();
        let j = job(&obj, "n1", "u1");
        let failed = |name: &str, created: i64| {
            let mut pod = pod_of(&j, name);
            pod.metadata.creation_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    jiff::Timestamp::from_second(created).expect("a valid second"),
                ));
            pod.status = Some(PodStatus {
                phase: Some("Failed".into()),
                reason: Some("Evicted".into()),
                ..PodStatus::default()
            });
            pod
        };
        let mut snap = world()
            .node(node("n1").state(
                "nw",
                &[(
                    "tuning",
                    "1.0.0",
                    Stage::Apply,
                    nodewright_schema::State::InProgress,
                )],
            ))
            .nw(nw("nw").package("tuning", "1.0.0"))
            .job(j.clone())
            .pod(failed("f1", 1))
            .pod(failed("f2", 2))
            .build();
        let s = settings();
        let pruned = |snap: &Snapshot, cache: &mut StateCache| {
            let mut ctx = PassCtx::new_cached(snap, &s, Some(cache));
            ctx.fill_cache(cache);
            crate::engine::handlers::run(&mut ctx);
            let mut names: Vec<String> = ctx
                .emitted()
                .iter()
                .filter_map(|a| match a {
                    crate::plan::Action::DeletePod(p) => Some(p.name.clone()),
                    _ => None,
                })
                .collect();
            names.sort();
            drop(ctx.into_actions(Vec::new(), Some(cache)));
            names
        };
        let mut cache = StateCache::new();
        // Evictions are not genuine failures: neither is kept.
        assert_eq!(pruned(&snap, &mut cache), ["f1", "f2"]);
        assert_eq!(pruned(&snap, &mut cache), ["f1", "f2"]);
        cache.jobs_mut().no_prunable_pods_anywhere();
        assert!(
            pruned(&snap, &mut cache).is_empty(),
            "the verdict was not read"
        );
        // The same Job and pods after a Job and a pod joined in front of them: believed.
        let join_in_front = |snap: &mut Snapshot| {
            let other = job(&obj, "n1", "u0");
            snap.pods.insert(0, Arc::new(pod_of(&other, "o1")));
            snap.jobs.insert(0, Arc::new(other));
        };
        cache.jobs_mut().no_prunable_pods_anywhere();
        join_in_front(&mut snap);
        assert!(
            pruned(&snap, &mut cache).is_empty(),
            "the verdict was not carried to the Job's new position"
        );
        snap.pods.remove(0);
        snap.jobs.remove(0);
        assert!(pruned(&snap, &mut cache).is_empty(), "and back in place");
        // A pod object without a version is only ever itself: another one is judged afresh.
        cache.jobs_mut().no_prunable_pods_anywhere();
        snap.pods[1] = Arc::new(Pod::clone(&snap.pods[1]));
        assert_eq!(pruned(&snap, &mut cache), ["f1", "f2"]);
        // A relist's copies of the Job and its pods (the same uids and resourceVersions):
        // believed, in place and after a Job and a pod joined in front of them.
        for (pod, rv) in snap.pods.iter_mut().zip(["1", "2"]) {
            let pod = Arc::make_mut(pod);
            pod.metadata.uid = pod.metadata.name.clone();
            pod.metadata.resource_version = Some(rv.into());
        }
        assert_eq!(pruned(&snap, &mut cache), ["f1", "f2"]);
        let relist = |snap: &mut Snapshot| {
            for pod in &mut snap.pods {
                *pod = Arc::new(Pod::clone(pod));
            }
            for job in &mut snap.jobs {
                *job = Arc::new(Job::clone(job));
            }
        };
        cache.jobs_mut().no_prunable_pods_anywhere();
        relist(&mut snap);
        assert!(
            pruned(&snap, &mut cache).is_empty(),
            "the verdict was not carried to a relist's copies"
        );
        cache.jobs_mut().no_prunable_pods_anywhere();
        join_in_front(&mut snap);
        relist(&mut snap);
        assert!(
            pruned(&snap, &mut cache).is_empty(),
            "the verdict was not carried to a relist's copies at new positions"
        );
        snap.pods.remove(0);
        snap.jobs.remove(0);
        // Another version of the Job: judged afresh.
        cache.jobs_mut().no_prunable_pods_anywhere();
        Arc::make_mut(&mut snap.jobs[0]).metadata.resource_version = Some("2".into());
        assert_eq!(pruned(&snap, &mut cache), ["f1", "f2"]);
        // Another version of a pod: judged afresh.
        cache.jobs_mut().no_prunable_pods_anywhere();
        Arc::make_mut(&mut snap.pods[1]).metadata.resource_version = Some("3".into());
        assert_eq!(pruned(&snap, &mut cache), ["f1", "f2"]);
    }
}
