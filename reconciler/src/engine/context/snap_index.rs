//! Lookups into the snapshot's Jobs, pods and ConfigMaps, built once per pass.

use super::*;

/// Lookups into the snapshot's Jobs, pods and ConfigMaps, built once per pass so per-node and
/// per-Job steps do not scan every object (10,000-node fleets have thousands of Jobs). Every
/// list keeps snapshot order and every by-name/UID map keeps the first object, so a lookup
/// returns what a scan with `find`/`filter` over the snapshot would.
///
/// The tables every pass reads are built up front; those only node work, drain and failing
/// pods read are built on first use, so a pass that works no node does not build them.
#[derive(Debug)]
pub struct SnapIndex<'a> {
    pub(super) jobs: &'a [Arc<Job>],
    pub(super) pods: &'a [Arc<Pod>],
    /// Jobs by name.
    pub(super) job_by_name: OnceCell<FxHashMap<&'a str, &'a Job>>,
    /// Jobs by UID.
    pub(super) job_by_uid: OnceCell<FxHashMap<&'a str, &'a Job>>,
    /// Jobs by NodeWright `name` label, then `node` label.
    pub(super) jobs_on: OnceCell<FxHashMap<&'a str, FxHashMap<&'a str, Few<&'a Job>>>>,
    /// Jobs by NodeWright `name` label (any node, with or without a `node` label).
    pub(super) jobs_of_nw: FxHashMap<&'a str, Vec<&'a Job>>,
    /// Jobs by NodeWright `name` label, `node` label and `package` label.
    pub(super) package_jobs: OnceCell<PackageJobs<'a>>,
    /// Jobs by `node` label (any NodeWright).
    pub(super) jobs_on_node: OnceCell<FxHashMap<&'a str, Few<&'a Job>>>,
    /// Pods by `spec.nodeName`.
    pub(super) pods_on_node: OnceCell<FxHashMap<&'a str, Few<&'a Pod>>>,
    /// ConfigMaps by name.
    pub config_map_by_name: FxHashMap<&'a str, &'a ConfigMap>,
    /// What the pass reads of each snapshot Job: facts, `package` annotation, pods.
    pub jobs_read: JobTable<'a>,
}

impl<'a> SnapIndex<'a> {
    pub(super) fn build(snap: &'a Snapshot, jobs_read: JobTable<'a>) -> SnapIndex<'a> {
        let mut jobs_of_nw: FxHashMap<&'a str, Vec<&'a Job>> = FxHashMap::default();
        for (job, facts) in jobs_read.with_facts() {
            if let Some(nw) = facts.nodewright {
                jobs_of_nw.entry(nw).or_default().push(job);
            }
        }
        // Sized up front: growing maps of thousands of entries rehashes them several times.
        let mut config_map_by_name = sized(snap.config_maps.len());
        for cm in &snap.config_maps {
            if let Some(name) = cm.metadata.name.as_deref() {
                config_map_by_name.entry(name).or_insert(&**cm);
            }
        }
        SnapIndex {
            jobs: &snap.jobs,
            pods: &snap.pods,
            job_by_name: OnceCell::new(),
            job_by_uid: OnceCell::new(),
            jobs_on: OnceCell::new(),
            jobs_of_nw,
            package_jobs: OnceCell::new(),
            jobs_on_node: OnceCell::new(),
            pods_on_node: OnceCell::new(),
            config_map_by_name,
            jobs_read,
        }
    }

    /// The snapshot's Jobs with their facts.
    pub(super) fn jobs_with_facts(&self) -> impl Iterator<Item = (&'a Job, &JobFacts<'a>)> {
        self.jobs_read.with_facts()
    }

    /// The first Job of this name.
    pub fn job_by_name(&self, name: &str) -> Option<&'a Job> {
        let table = self
            .job_by_name
            .get_or_init(|| first_by(self.jobs, |m| m.name.as_deref()));
        table.get(name).copied()
    }
    /// The first Job of this UID.
    pub fn job_by_uid(&self, uid: &str) -> Option<&'a Job> {
        let table = self
            .job_by_uid
            .get_or_init(|| first_by(self.jobs, |m| m.uid.as_deref()));
        table.get(uid).copied()
    }
    /// Jobs of a NodeWright on a node, by the Job `node` label value
    /// (`names::node_label_value`).
    pub fn jobs_of(&self, nw: &str, node_label: &str) -> &[&'a Job] {
        let table = self.jobs_on.get_or_init(|| {
            let mut table: FxHashMap<&'a str, FxHashMap<&'a str, Few<&'a Job>>> =
                FxHashMap::default();
            for (job, facts) in self.jobs_with_facts() {
                if let (Some(nw), Some(node)) = (facts.nodewright, facts.node_label) {
                    table
                        .entry(nw)
                        .or_default()
                        .entry(node)
                        .or_default()
                        .push(job);
                }
            }
            table
        });
        table
            .get(nw)
            .and_then(|m| m.get(node_label))
            .map_or(&[], Few::as_slice)
    }
    /// Jobs of one package version of a NodeWright on a node, by the Job `node` and
    /// `package` label values: a node runs a Job per package, so a decision about one package
    /// must not read the Jobs of all the others.
    pub fn package_jobs_of(&self, nw: &str, node_label: &str, package_label: &str) -> &[&'a Job] {
        let table = self.package_jobs.get_or_init(|| {
            let mut table = PackageJobs::default();
            for (job, facts) in self.jobs_with_facts() {
                if let (Some(nw), Some(node), Some(package)) = (
                    facts.nodewright,
                    facts.node_label,
                    jobs::label(job, keys::JOB_LABEL_PACKAGE),
                ) {
                    let on_node = table.entry(nw).or_default().entry(node).or_default();
                    on_node.entry(package).or_default().push(job);
                }
            }
            table
        });
        table
            .get(nw)
            .and_then(|m| m.get(node_label))
            .and_then(|m| m.get(package_label))
            .map_or(&[], Few::as_slice)
    }
    /// Jobs carrying this NodeWright `name` label.
    pub fn nw_jobs(&self, nw: &str) -> &[&'a Job] {
        self.jobs_of_nw.get(nw).map_or(&[], Vec::as_slice)
    }
    /// Jobs carrying this `node` label, any NodeWright.
    pub fn node_jobs(&self, node_label: &str) -> &[&'a Job] {
        let table = self.jobs_on_node.get_or_init(|| {
            let mut table: FxHashMap<&'a str, Few<&'a Job>> = sized(self.jobs.len());
            for (job, facts) in self.jobs_with_facts() {
                if let Some(node) = facts.node_label {
                    table.entry(node).or_default().push(job);
                }
            }
            table
        });
        table.get(node_label).map_or(&[], Few::as_slice)
    }
    /// Pods whose Job controller UID label is `job`'s uid, in snapshot order.
    pub fn pods_of(&self, job: &Job) -> Few<&'a Pod> {
        self.jobs_read.pods_of(job)
    }
    /// Pods bound to a node (`spec.nodeName`).
    pub fn pods_on(&self, node: &str) -> &[&'a Pod] {
        let table = self.pods_on_node.get_or_init(|| {
            let mut table: FxHashMap<&'a str, Few<&'a Pod>> = sized(self.pods.len());
            for pod in self.pods {
                if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                    table.entry(node).or_default().push(pod);
                }
            }
            table
        });
        table.get(node).map_or(&[], Few::as_slice)
    }
}

/// Jobs by NodeWright `name` label, then `node` label, then `package` label.
pub(super) type PackageJobs<'a> =
    FxHashMap<&'a str, FxHashMap<&'a str, FxHashMap<&'a str, Few<&'a Job>>>>;

/// The first Job of each key (a name or uid of its metadata), like a `find` over `jobs`.
pub(super) fn first_by<'a>(
    jobs: &'a [Arc<Job>],
    key: impl Fn(&'a ObjectMeta) -> Option<&'a str>,
) -> FxHashMap<&'a str, &'a Job> {
    let mut table = sized(jobs.len());
    for job in jobs.iter().map(|j| &**j) {
        if let Some(key) = key(&job.metadata) {
            table.entry(key).or_insert(job);
        }
    }
    table
}

/// The objects under one key of a lookup table: usually one (a Job's pod, a node's Jobs of
/// one NodeWright), kept inline so building the tables allocates only for the exceptions.
pub type Few<T> = smallvec::SmallVec<[T; 2]>;

/// An empty lookup table with room for `n` entries.
pub(super) fn sized<K, V>(n: usize) -> FxHashMap<K, V> {
    FxHashMap::with_capacity_and_hasher(n, Default::default())
}
