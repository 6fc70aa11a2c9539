//! The [`Cluster`] port over a real API server with kube-rs (issue 8).
//!
//! Reads come from stores kept current by watches (`watched`), never from a LIST per pass:
//! NodeWrights, DeploymentPolicies and Nodes cluster-wide; the reconciler's Jobs, package pods
//! and ConfigMaps in its namespace by label; and workload pods only on nodes under drain
//! (cordoned, or carrying a cordon annotation): each such node is listed once when it enters
//! that set and kept current by one watch of the cluster's bound pods (`drain_pods`).
//!
//! Writes are the [`Action`]s, each as the API call Kubernetes intends for it: node deltas as
//! merge patches under a `resourceVersion` precondition after an uncached read (retried on
//! conflict), the Eviction subresource, foreground Job deletion, status-subresource patches,
//! server-side apply for the CRs materialized from Git, and Events.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::job::Job;
use k8s_openapi::api::core::v1::{
    ConfigMap, Node, NodeStatus, NodeSystemInfo, ObjectReference, Pod,
};
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{
    DeleteParams, EvictParams, ListParams, LogParams, Patch, PatchParams, PostParams, Preconditions,
};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use nodewright_schema::{DeploymentPolicy, NodeWright, NodeWrightStatus, keys};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::watched::{Watched, watch};
use super::{Cluster, ClusterError, Desired, LogRequest};
use crate::plan::{
    Action, EventObject, EventType, MapPatch, NodePatch, Outcome, StatusPatch, apply_node_patch,
};
use crate::snapshot::Snapshot;

/// Field manager for every write of this product.
pub const FIELD_MANAGER: &str = "nodewright-gitops";
/// Patch parameters of every non-apply write, under our field manager so `managedFields` shows
/// who wrote what (and another controller writing the same status can be told apart).
fn write_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}

/// Attempts of a read-modify-write before reporting a conflict.
const CONFLICT_RETRIES: usize = 5;

/// Where `nodewright sim serve` writes its kubeconfig by default, and where `--sim` looks:
/// `$XDG_CACHE_HOME/nodewright/sim-kubeconfig.yaml` (or `~/.cache/…`).
pub fn sim_kubeconfig_path() -> std::path::PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    cache.join("nodewright").join("sim-kubeconfig.yaml")
}

/// The name of the kubeconfig cluster extension in which `sim serve` records its clock.
pub const SIM_CLOCK_EXTENSION: &str = "nodewright.nvidia.com/sim-clock";

/// Where the adapter reads "now" from: the wall clock (a real cluster), or the scaled
/// virtual clock of `nodewright sim serve --speed X`, so the engine's timers run at the same
/// pace as the simulated kubelet and Job controller.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Clock {
    /// The wall clock.
    Wall,
    /// `virtual_origin + (wall now - wall_origin) x speed`.
    #[serde(rename_all = "camelCase")]
    Scaled {
        /// Wall time at which the virtual clock read `virtual_origin`.
        wall_origin: jiff::Timestamp,
        /// Virtual time at `wall_origin`.
        virtual_origin: jiff::Timestamp,
        /// Virtual seconds per wall second.
        speed: f64,
    },
}

impl Clock {
    /// The current time on this clock.
    pub fn now(&self) -> jiff::Timestamp {
        match *self {
            Clock::Wall => jiff::Timestamp::now(),
            Clock::Scaled {
                wall_origin,
                virtual_origin,
                speed,
            } => {
                let elapsed = jiff::Timestamp::now().duration_since(wall_origin);
                let scaled = jiff::SignedDuration::try_from_secs_f64(elapsed.as_secs_f64() * speed)
                    .unwrap_or(jiff::SignedDuration::MAX);
                virtual_origin
                    .checked_add(scaled)
                    .unwrap_or(jiff::Timestamp::MAX)
            }
        }
    }

    /// The clock a kubeconfig's current cluster declares ([`SIM_CLOCK_EXTENSION`]), or the
    /// wall clock.
    pub fn from_kubeconfig(config: &kube::config::Kubeconfig) -> Clock {
        let current = config.current_context.as_deref();
        let cluster_name = config
            .contexts
            .iter()
            .find(|c| Some(c.name.as_str()) == current)
            .and_then(|c| c.context.as_ref())
            .map(|c| c.cluster.clone());
        config
            .clusters
            .iter()
            .filter(|c| cluster_name.as_deref().is_none_or(|n| n == c.name))
            .filter_map(|c| c.cluster.as_ref())
            .flat_map(|c| c.extensions.iter().flatten())
            .find(|e| e.name == SIM_CLOCK_EXTENSION)
            .and_then(|e| serde_json::from_value(e.extension.clone()).ok())
            .unwrap_or(Clock::Wall)
    }
}

/// A client for the adapter from a kubeconfig file (or, with `None`, the ambient
/// configuration: in-cluster, `$KUBECONFIG`, `~/.kube/config`), with the clock the kubeconfig
/// declares ([`Clock::from_kubeconfig`]).
///
/// kube-rs retries 429 responses by default; the adapter must see an eviction refused by a
/// PodDisruptionBudget (429) at once, as the PDB wait state, instead of stalling the pass
/// in client retries, so the default retry layer is turned off: every failed write is
/// retried by the next pass from fresh state anyway.
///
/// Every request passes `budget` (cluster/api_budget.rs): the process's token bucket and
/// request statistics.
pub async fn client(
    kubeconfig: Option<&std::path::Path>,
    budget: &super::api_budget::ApiBudget,
) -> Result<(Client, Clock), ClusterError> {
    let (mut config, clock) = match kubeconfig {
        Some(path) => {
            let raw = kube::config::Kubeconfig::read_from(path).map_err(|e| {
                ClusterError::Transport(format!("cannot read kubeconfig {}: {e}", path.display()))
            })?;
            let clock = Clock::from_kubeconfig(&raw);
            let config = kube::Config::from_custom_kubeconfig(
                raw,
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .map_err(|e| ClusterError::Transport(format!("kubeconfig {}: {e}", path.display())))?;
            (config, clock)
        }
        None => (
            kube::Config::infer()
                .await
                .map_err(|e| ClusterError::Transport(format!("no cluster configured: {e}")))?,
            Clock::Wall,
        ),
    };
    config.default_retry = false;
    let client = kube::client::ClientBuilder::try_from(config)
        .map_err(|e| ClusterError::Transport(format!("cannot build a client: {e}")))?
        .with_layer(budget)
        .build();
    Ok((client, clock))
}

/// Configuration of the kube adapter.
#[derive(Clone, Debug)]
pub struct KubeOptions {
    /// The reconciler's namespace (Jobs, pods, ConfigMaps).
    pub namespace: String,
    /// Reporting instance for Events (pod name).
    pub instance: String,
    /// Where "now" comes from.
    pub clock: Clock,
    /// Whether ended pods are kept with their init containers' names and statuses (`package
    /// logs` lists by them with their exit codes). Otherwise succeeded package pods are not
    /// watched at all: the lifecycle reads failed and unfinished pods only.
    pub keep_ended_pods_for_logs: bool,
}

impl KubeOptions {
    /// A pod as the stores keep it (see [`trim_pod`]).
    fn pod_trim(&self) -> impl Fn(&mut Pod) + Clone + Send + Sync + 'static {
        let keep_for_logs = self.keep_ended_pods_for_logs;
        move |pod| trim_pod(pod, keep_for_logs)
    }

    /// A package pod as its store keeps it (see [`trim_package_pod`]).
    fn package_pod_trim(&self) -> impl FnMut(&mut Pod) + Send + 'static {
        let keep_for_logs = self.keep_ended_pods_for_logs;
        move |pod| trim_package_pod(pod, keep_for_logs)
    }

    /// The watch of the reconciler's package pods: by the NodeWright label, and without the
    /// succeeded ones unless ended pods are kept for logs. Failure classification (§8.7),
    /// in-flight evidence (§8.10), archives (§8.11) and the interrupt budget (§8.16) never
    /// find anything in a succeeded pod, while a rollout keeps one per finished Job until
    /// the Job's TTL: tens of thousands on a large fleet.
    fn package_pod_watch(&self) -> watcher::Config {
        let labelled = watcher::Config::default().labels(keys::JOB_LABEL_NAME);
        if self.keep_ended_pods_for_logs {
            labelled
        } else {
            labelled.fields(UNSUCCEEDED_PODS)
        }
    }
}

/// The field selector of pods that have not succeeded. A pod that succeeds leaves the watch
/// as a deletion, as the API server reports an object leaving a selection.
const UNSUCCEEDED_PODS: &str = "status.phase!=Succeeded";

/// The Cluster port over kube-rs.
pub struct KubeCluster {
    client: Client,
    options: KubeOptions,
    /// Held by handle (see [`crate::shared`]): a NodeWright's status mirrors every node.
    nodewrights: Watched<crate::shared::Shared<NodeWright>>,
    policies: Watched<DeploymentPolicy>,
    nodes: Watched<Node>,
    jobs: Watched<Job>,
    package_pods: Watched<Pod>,
    package_config_maps: Watched<ConfigMap>,
    metadata_config_maps: Watched<ConfigMap>,
    drain_pods: Arc<super::drain_pods::DrainPods>,
    changed: Arc<Notify>,
    event_correlator: Mutex<EventCorrelator>,
    /// Per node: our last write's answer, until the watch delivers it (see
    /// [`KubeCluster::read_own_node_writes`] and [`KubeCluster::cached_node`]).
    written_nodes: Mutex<std::collections::HashMap<String, WrittenNode>>,
    /// Per Job name: the server's answer to our creation of it, until the watch delivers it
    /// (see [`KubeCluster::read_own_job_creations`]).
    created_jobs: Mutex<std::collections::HashMap<String, CreatedJob>>,
    tasks: Vec<JoinHandle<()>>,
    writes_allowed: Arc<std::sync::atomic::AtomicBool>,
}

/// The server's answer to a write of a node, and the `resourceVersion` that write replaced.
/// The answer is shared: snapshots hand it to the engine as the node until the watch
/// delivers it, and a table of thousands of written nodes keeps small slots.
struct WrittenNode {
    replaced: Option<String>,
    answer: Arc<Node>,
}

impl WrittenNode {
    /// Whether the answer is newer than the watched copy, i.e. the watch has not delivered it.
    /// Resource versions compare as integers where both are (as client-go's mutation cache
    /// compares them), so a later write by anyone also wins; otherwise only the version this
    /// write replaced counts as older.
    fn supersedes(&self, watched: &Node) -> bool {
        let number = |node: &Node| {
            node.metadata
                .resource_version
                .as_deref()
                .and_then(|v| v.parse::<u64>().ok())
        };
        match (number(&self.answer), number(watched)) {
            (Some(answer), Some(watched)) => answer > watched,
            _ => watched.metadata.resource_version == self.replaced,
        }
    }
}

/// A Job this process created, as the server answered, and when.
struct CreatedJob {
    answer: Arc<Job>,
    at: std::time::Instant,
}

/// How long a created Job the watch has not shown stands in for it: a watch that lags longer
/// relists, and a Job deleted by someone else before the watch showed it must not linger.
const CREATED_JOB_KEPT: Duration = Duration::from_secs(30);

impl Drop for KubeCluster {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn api_error(action: &str, e: kube::Error) -> ClusterError {
    match e {
        kube::Error::Api(status) => ClusterError::Api {
            action: action.to_string(),
            status: status.code,
            message: status.message.clone(),
        },
        other => ClusterError::Transport(format!("{action}: {other}")),
    }
}

/// Merge-patches annotations (and the TTL) into a Job, only the Job of `uid` when given.
async fn annotate_job(
    jobs: &Api<Job>,
    name: &str,
    uid: Option<&str>,
    annotations: &BTreeMap<String, String>,
    ttl_seconds_after_finished: Option<i32>,
) -> Result<Outcome, ClusterError> {
    let mut body = json!({"metadata": {"annotations": annotations}});
    if let Some(uid) = uid {
        body["metadata"]["uid"] = json!(uid);
    }
    if let Some(ttl) = ttl_seconds_after_finished {
        body["spec"] = json!({"ttlSecondsAfterFinished": ttl});
    }
    match jobs
        .patch(name, &write_params(), &Patch::Merge(&body))
        .await
    {
        Ok(_) => Ok(Outcome::Done),
        // 409 here is the UID precondition: the Job of that UID is gone (a successor took
        // the name), exactly as the simulator reports it.
        Err(e) if matches!(status_code(&e), Some(404 | 409)) => Ok(Outcome::NotFound),
        Err(e) => Err(api_error("annotate job", e)),
    }
}

fn log_params(request: &LogRequest, follow: bool) -> LogParams {
    LogParams {
        container: request.container.clone(),
        follow,
        limit_bytes: request.limit_bytes.filter(|b| *b > 0),
        previous: request.previous,
        tail_lines: request.tail_lines.filter(|n| *n >= 0),
        ..LogParams::default()
    }
}

pub(super) fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// A watch error as an operator reads it: the server's code, reason and message rather than
/// the client's rendering of the whole status object.
pub(super) fn watch_error_text(e: &watcher::Error) -> String {
    let (what, source) = match e {
        watcher::Error::InitialListFailed(source) => ("listing failed", source),
        watcher::Error::WatchStartFailed(source) => ("starting the watch failed", source),
        watcher::Error::WatchFailed(source) => ("the watch failed", source),
        watcher::Error::WatchError(status) => {
            return format!("the API server ended the watch: {}", status_text(status));
        }
        other => return other.to_string(),
    };
    format!("{what}: {}", client_error_text(source))
}

/// A client error as an operator reads it; an API refusal as the server's code, reason and
/// message.
pub(crate) fn client_error_text(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => status_text(status),
        other => other.to_string(),
    }
}

pub(super) fn status_text(status: &kube::core::Status) -> String {
    match status.reason.as_str() {
        "" => format!("{} {}", status.code, status.message),
        reason => format!("{} {reason}: {}", status.code, status.message),
    }
}

/// What the lifecycle never reads of an object held in a store: who wrote which field. A
/// cache of thousands of nodes, Jobs and pods keeps only what the passes need.
fn trim_managed_fields<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

/// A node as the store keeps it: of its status, the conditions and the boot id, which is
/// all the lifecycle reads (§4.5, reboots). Its cached container images (often tens of
/// kilobytes on a GPU node), capacity, addresses and system info are never read, and a
/// node write diffs the trimmed node against its trimmed self, so they stay as they are.
fn trim_node(node: &mut Node) {
    trim_managed_fields(node);
    if let Some(status) = &mut node.status {
        let boot_id = status.node_info.take().map(|info| info.boot_id);
        *status = NodeStatus {
            conditions: status.conditions.take(),
            node_info: boot_id.map(|boot_id| NodeSystemInfo {
                boot_id,
                ..NodeSystemInfo::default()
            }),
            ..NodeStatus::default()
        };
    }
}

/// A Job as the store keeps it: a finished one without its spec, an unfinished one with the
/// parts of its pod template a pass reads. Of a finished Job the lifecycle reads the labels,
/// annotations and status (completion, failure evidence, parking, the rerun predicate,
/// §8.8–§8.14), while a rollout keeps every finished Job until its TTL, four per node, and
/// a Job's spec takes two kilobytes of memory however little of it is set. Of a succeeded
/// Job whose outcome is recorded, only what the rerun predicate and the sweeps read stays
/// ([`crate::snapshot::trim_recorded_success`]).
fn trim_job(job: &mut Job) {
    trim_managed_fields(job);
    if crate::engine::jobs::is_unfinished(job) {
        crate::snapshot::trim_unfinished_job_template(job);
    } else {
        job.spec = None;
        crate::snapshot::trim_recorded_success(job);
    }
}

/// A pod as the lifecycle needs it: an ended one keeps only its node of its spec, and a
/// succeeded one only its phase of its status. `keep_for_logs` keeps an ended pod's init
/// containers' names and its statuses: `package logs` lists logs by them with their exit codes.
fn trim_pod(pod: &mut Pod, keep_for_logs: bool) {
    trim_managed_fields(pod);
    crate::snapshot::take_ended_pod_spec(pod, keep_for_logs);
    if !keep_for_logs {
        crate::snapshot::trim_succeeded_pod_status(pod);
    }
}

/// A package pod as its store keeps it: like any pod, and of its spec, running or not, only
/// its node (and its init containers' names with `keep_for_logs`). The drain passes package
/// pods by before it reads a spec (§7.6) and the handlers read their statuses, so a running
/// stage pod's containers, volumes and tolerations are never read, while a batch of thousands
/// of nodes keeps as many running.
fn trim_package_pod(pod: &mut Pod, keep_for_logs: bool) {
    if crate::engine::drain::is_package_pod(pod)
        && let Some(spec) = pod.spec.as_mut()
    {
        *spec = crate::snapshot::ended_pod_spec_kept(spec, keep_for_logs);
    }
    trim_pod(pod, keep_for_logs);
}

/// CRs keep who wrote them (their managed fields' managers and subresources: whether another
/// controller writes a NodeWright's status) but not which fields each wrote: on a real API
/// server that field set mirrors the status, one entry per node and package.
fn trim_field_sets<K: Resource>(object: &mut K) {
    for entry in object.meta_mut().managed_fields.iter_mut().flatten() {
        entry.fields_v1 = None;
    }
}

impl KubeCluster {
    /// Connects with the ambient configuration (in-cluster, or `KUBECONFIG`/`~/.kube/config`)
    /// and starts every watch. Returns once the stores have synced.
    pub async fn connect(client: Client, options: KubeOptions) -> Result<Self, ClusterError> {
        let changed = Arc::new(Notify::new());
        let ns = options.namespace.as_str();
        let labelled = watcher::Config::default().labels(keys::JOB_LABEL_NAME);
        let (nodewrights, t1) = watch(
            Api::<crate::shared::Shared<NodeWright>>::all(client.clone()),
            watcher::Config::default(),
            changed.clone(),
            trim_field_sets,
        );
        let (policies, t2) = watch(
            Api::<DeploymentPolicy>::all(client.clone()),
            watcher::Config::default(),
            changed.clone(),
            trim_field_sets,
        );
        let (nodes, t3) = watch(
            Api::<Node>::all(client.clone()),
            watcher::Config::default(),
            changed.clone(),
            trim_node,
        );
        let (jobs, t4) = watch(
            Api::<Job>::namespaced(client.clone(), ns),
            labelled.clone(),
            changed.clone(),
            trim_job,
        );
        let (package_pods, t5) = watch(
            Api::<Pod>::namespaced(client.clone(), ns),
            options.package_pod_watch(),
            changed.clone(),
            options.package_pod_trim(),
        );
        let (package_config_maps, t6) = watch(
            Api::<ConfigMap>::namespaced(client.clone(), ns),
            labelled,
            changed.clone(),
            trim_managed_fields,
        );
        let (metadata_config_maps, t7) = watch(
            Api::<ConfigMap>::namespaced(client.clone(), ns),
            watcher::Config::default().labels(keys::CONFIGMAP_LABEL_NODE_META),
            changed.clone(),
            trim_managed_fields,
        );
        let drain_pods = Arc::new(super::drain_pods::DrainPods::leaving_package_pods_of(ns));
        let t8 = tokio::spawn(super::drain_pods::watch(
            Api::<Pod>::all(client.clone()),
            drain_pods.clone(),
            changed.clone(),
            options.pod_trim(),
        ));
        let cluster = KubeCluster {
            client,
            options,
            nodewrights,
            policies,
            nodes,
            jobs,
            package_pods,
            package_config_maps,
            metadata_config_maps,
            drain_pods,
            changed,
            event_correlator: Mutex::new(EventCorrelator::default()),
            written_nodes: Mutex::new(std::collections::HashMap::new()),
            created_jobs: Mutex::new(std::collections::HashMap::new()),
            tasks: vec![t1, t2, t3, t4, t5, t6, t7, t8],
            writes_allowed: Arc::new(std::sync::atomic::AtomicBool::new(true)),
        };
        for ready in [
            cluster.nodewrights.synced().await,
            cluster.policies.synced().await,
            cluster.nodes.synced().await,
            cluster.jobs.synced().await,
            cluster.package_pods.synced().await,
            cluster.package_config_maps.synced().await,
            cluster.metadata_config_maps.synced().await,
        ] {
            ready.map_err(|e| ClusterError::Transport(e.to_string()))?;
        }
        Ok(cluster)
    }

    /// The flag leader election flips: when false every write is refused at once.
    pub fn writes_allowed(&self) -> Arc<std::sync::atomic::AtomicBool> {
        self.writes_allowed.clone()
    }

    fn check_writes(&self, action: &Action) -> Result<(), ClusterError> {
        if self
            .writes_allowed
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            Ok(())
        } else {
            Err(ClusterError::Api {
                action: action.kind().to_string(),
                status: 503,
                message: "not the leader: writes are stopped until the lease is held again".into(),
            })
        }
    }

    /// The newest copy of a node this process knows without a read: the server's answer to
    /// its own last write while the watch has not delivered it yet, else the watched copy.
    fn cached_node(&self, name: &str) -> Option<Node> {
        let watched = self.nodes.get(name)?;
        let mut written = self.written_nodes.lock().unwrap_or_else(|e| e.into_inner());
        match written.get(name) {
            Some(written) if written.supersedes(&watched) => Some((*written.answer).clone()),
            // The watch caught up (or someone wrote since): its copy is the newest.
            Some(_) => {
                written.remove(name);
                Some((*watched).clone())
            }
            None => Some((*watched).clone()),
        }
    }

    /// Remembers the server's answer to a write of a node made against `replaced`.
    fn wrote_node(&self, replaced: &Node, mut answer: Node) {
        trim_node(&mut answer);
        if let Some(name) = replaced.metadata.name.clone() {
            let mut written = self.written_nodes.lock().unwrap_or_else(|e| e.into_inner());
            // A write on top of our own undelivered answer replaced what the watch still holds.
            let replaced = match written.get(&name) {
                Some(earlier)
                    if earlier.answer.metadata.resource_version
                        == replaced.metadata.resource_version =>
                {
                    earlier.replaced.clone()
                }
                _ => replaced.metadata.resource_version.clone(),
            };
            written.insert(
                name,
                WrittenNode {
                    replaced,
                    answer: Arc::new(answer),
                },
            );
        }
    }

    /// Puts this process's own node writes the watch has not delivered yet in place of the
    /// watched copies: a pass must not act on a node as it was before the last pass wrote it
    /// (its cordon, its package states), however late the watch is. Answers the watch has
    /// delivered (or a later write replaced) are dropped, or a fleet's worth would stay until
    /// each node is written again. `nodes` is sorted by name.
    fn read_own_node_writes(&self, nodes: &mut [Arc<Node>]) {
        let mut written = self.written_nodes.lock().unwrap_or_else(|e| e.into_inner());
        written.retain(|name, w| {
            let Ok(at) =
                nodes.binary_search_by(|n| n.metadata.name.as_deref().cmp(&Some(name.as_str())))
            else {
                return false;
            };
            let undelivered = w.supersedes(&nodes[at]);
            if undelivered {
                nodes[at] = w.answer.clone();
            }
            undelivered
        });
    }

    /// Adds the Jobs this process created that the watch has not delivered yet (or that stand
    /// where the watch still shows an older Job of the same name): a pass that does not see
    /// the Job the last pass created creates it again, to be answered 409. `jobs` is sorted by
    /// name and stays so.
    fn read_own_job_creations(&self, jobs: &mut Vec<Arc<Job>>) {
        let mut created = self.created_jobs.lock().unwrap_or_else(|e| e.into_inner());
        if created.is_empty() {
            return;
        }
        created.retain(|name, job| {
            let delivered = self
                .jobs
                .get(name)
                .is_some_and(|watched| watched.metadata.uid == job.answer.metadata.uid);
            !delivered && job.at.elapsed() < CREATED_JOB_KEPT
        });
        for (name, job) in created.iter() {
            match jobs.binary_search_by(|j| j.metadata.name.as_deref().cmp(&Some(name.as_str()))) {
                Ok(at) => jobs[at] = job.answer.clone(),
                Err(at) => jobs.insert(at, job.answer.clone()),
            }
        }
    }

    /// A node to write against: the watched copy on the first attempt (its `resourceVersion`
    /// makes the write fail with 409 if it is stale), a fresh read after a conflict.
    async fn node_for_write(
        &self,
        api: &Api<Node>,
        name: &str,
        attempt: usize,
    ) -> Result<Option<Node>, ClusterError> {
        if attempt == 0
            && let Some(node) = self.cached_node(name)
        {
            return Ok(Some(node));
        }
        match api.get(name).await {
            Ok(node) => Ok(Some(node)),
            Err(e) if status_code(&e) == Some(404) => Ok(None),
            Err(e) => Err(api_error("get node", e)),
        }
    }

    /// Patches a NodeWright's status and leaves the answer undecoded: it is the whole
    /// NodeWright, megabytes for a status of ten thousand nodes, and its watch event brings
    /// the same object to the store.
    async fn patch_nodewright_status(&self, name: &str, body: &Value) -> Result<(), kube::Error> {
        let mut request = kube::core::Request::new(NodeWright::url_path(&(), None))
            .patch_subresource("status", name, &write_params(), &Patch::Merge(body))
            .map_err(kube::Error::BuildRequest)?;
        request.extensions_mut().insert("patch_status");
        self.client.request_text(request).await.map(drop)
    }

    async fn patch_node(&self, patch: &NodePatch) -> Result<Outcome, ClusterError> {
        let api = Api::<Node>::all(self.client.clone());
        for attempt in 0..CONFLICT_RETRIES {
            let Some(current) = self.node_for_write(&api, &patch.node, attempt).await? else {
                return Ok(Outcome::NotFound);
            };
            let mut desired = current.clone();
            apply_node_patch(&mut desired, patch).map_err(|source| {
                ClusterError::MalformedNodeState {
                    node: patch.node.clone(),
                    source,
                }
            })?;
            let mut body = merge_diff(&to_value(&current), &to_value(&desired));
            if body.as_object().is_some_and(|o| o.is_empty()) {
                return Ok(Outcome::Done);
            }
            body["metadata"]["resourceVersion"] = json!(current.resource_version());
            match api
                .patch(&patch.node, &write_params(), &Patch::Merge(&body))
                .await
            {
                Ok(answer) => {
                    self.wrote_node(&current, answer);
                    return Ok(Outcome::Done);
                }
                Err(e) if status_code(&e) == Some(409) => continue,
                // A node deleted after the watch saw it.
                Err(e) if status_code(&e) == Some(404) => return Ok(Outcome::NotFound),
                Err(e) => return Err(api_error("patch node", e)),
            }
        }
        Ok(Outcome::Conflict)
    }

    async fn patch_node_conditions(
        &self,
        node: &str,
        set: &[k8s_openapi::api::core::v1::NodeCondition],
        remove: &[String],
    ) -> Result<Outcome, ClusterError> {
        let api = Api::<Node>::all(self.client.clone());
        for attempt in 0..CONFLICT_RETRIES {
            let Some(current) = self.node_for_write(&api, node, attempt).await? else {
                return Ok(Outcome::NotFound);
            };
            let before = current
                .status
                .as_ref()
                .and_then(|s| s.conditions.clone())
                .unwrap_or_default();
            let mut conditions = current
                .status
                .as_ref()
                .and_then(|s| s.conditions.clone())
                .unwrap_or_default();
            conditions.retain(|c| !remove.contains(&c.type_));
            for condition in set {
                match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
                    Some(existing) => *existing = condition.clone(),
                    None => conditions.insert(0, condition.clone()),
                }
            }
            if conditions == before {
                return Ok(Outcome::Done);
            }
            let body = json!({
                "metadata": {"resourceVersion": current.resource_version()},
                "status": {"conditions": conditions},
            });
            match api
                .patch_status(node, &write_params(), &Patch::Merge(&body))
                .await
            {
                Ok(answer) => {
                    self.wrote_node(&current, answer);
                    return Ok(Outcome::Done);
                }
                Err(e) if status_code(&e) == Some(409) => continue,
                Err(e) if status_code(&e) == Some(404) => return Ok(Outcome::NotFound),
                Err(e) => return Err(api_error("patch node status", e)),
            }
        }
        Ok(Outcome::Conflict)
    }

    /// Whether the watched copy of a ConfigMap already holds what `desired` declares: its
    /// data, and its labels, annotations and owners (other writers' metadata may be there too).
    fn config_map_holds(&self, desired: &ConfigMap) -> bool {
        let reference = desired.name_any();
        let Some(current) = self
            .package_config_maps
            .get(&reference)
            .or_else(|| self.metadata_config_maps.get(&reference))
        else {
            return false;
        };
        let contains = |have: &Option<BTreeMap<String, String>>,
                        want: &Option<BTreeMap<String, String>>| {
            want.iter()
                .flatten()
                .all(|(k, v)| have.as_ref().and_then(|h| h.get(k)) == Some(v))
        };
        // No data and empty data read the same on the server.
        let no_data = BTreeMap::new();
        current.data.as_ref().unwrap_or(&no_data) == desired.data.as_ref().unwrap_or(&no_data)
            && contains(&current.metadata.labels, &desired.metadata.labels)
            && contains(&current.metadata.annotations, &desired.metadata.annotations)
            && desired
                .metadata
                .owner_references
                .as_ref()
                .is_none_or(|want| current.metadata.owner_references.as_ref() == Some(want))
    }

    async fn publish_event(&self, event: &crate::plan::Event) -> Result<Outcome, ClusterError> {
        let now = self.options.clock.now();
        let Some(write) = self
            .event_correlator
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .admit(event, now)
        else {
            return Ok(Outcome::Done);
        };
        // Events about cluster-scoped objects live in `default`, as client-go records them.
        let events = Api::<K8sEvent>::namespaced(self.client.clone(), "default");
        if let Some(series) = &write.series {
            let patch = json!({ "series": to_value(series) });
            match events
                .patch(&write.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                // The server let the event expire: the series goes on in a new object.
                Err(e) if status_code(&e) == Some(404) => {}
                other => {
                    return other
                        .map(|_| Outcome::Done)
                        .map_err(|e| api_error("record event", e));
                }
            }
        }
        match events
            .create(&PostParams::default(), &self.event_object(event, &write))
            .await
        {
            // Names are unique to this process, so the Event is ours: the events of one pass
            // run concurrently, and a series' patch that overtook its creation created it.
            Ok(_) => Ok(Outcome::Done),
            Err(e) if status_code(&e) == Some(409) => Ok(Outcome::Done),
            Err(e) => Err(api_error("record event", e)),
        }
    }

    /// The `events.k8s.io/v1` Event a write of `event` creates, as client-go's event
    /// broadcaster builds it.
    fn event_object(&self, event: &crate::plan::Event, write: &EventWrite) -> K8sEvent {
        let regarding = match &event.object {
            EventObject::Node(name) => ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(name.clone()),
                ..ObjectReference::default()
            },
            EventObject::NodeWright(name) => ObjectReference {
                api_version: Some(keys::API_VERSION.into()),
                kind: Some(keys::KIND_NODEWRIGHT.into()),
                name: Some(name.clone()),
                ..ObjectReference::default()
            },
        };
        K8sEvent {
            metadata: ObjectMeta {
                name: Some(write.name.clone()),
                namespace: Some("default".into()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(write.first)),
            series: write.series.clone(),
            type_: Some(match event.kind {
                EventType::Normal => "Normal".into(),
                EventType::Warning => "Warning".into(),
            }),
            reason: Some(event.reason.clone()),
            action: Some(event.reason.clone()),
            note: Some(event.message.chars().take(EVENT_NOTE_LIMIT).collect()),
            regarding: Some(regarding),
            reporting_controller: Some(FIELD_MANAGER.to_string()),
            reporting_instance: Some(self.options.instance.clone()),
            ..K8sEvent::default()
        }
    }
}

/// How much of a message an event's note keeps: the API server refuses notes over 1 KiB.
const EVENT_NOTE_LIMIT: usize = 1024;

/// How often a repeated event updates its series on the server (client-go's event
/// broadcaster refreshes isomorphic events every 30 minutes).
const EVENT_SERIES_REFRESH: jiff::SignedDuration = jiff::SignedDuration::from_secs(30 * 60);

/// Correlates events the way client-go's event broadcaster does: events about the same object
/// with the same type and reason are one series. The first is created, the second starts the
/// series on the server, and further ones are counted and written only when the series was
/// last written [`EVENT_SERIES_REFRESH`] ago. The server keeps the first note; the node's
/// annotations and the NodeWright's status carry every fact. A series is remembered by the
/// few fields its next write needs, not by the Event: a rollout of thousands of nodes keeps
/// one per node and reason.
#[derive(Debug, Default)]
struct EventCorrelator {
    /// Per series: its Event's name, when it began, how often it happened, when it was last
    /// written and whether its second event was written.
    series: std::collections::HashMap<(String, bool, String), Series>,
    /// The size at which series not written for an interval are next forgotten.
    prune_at: usize,
    /// The time in the last Event name made, so that names stay unique when two events of one
    /// object come within the clock's resolution.
    last_name_at: i128,
}

#[derive(Debug)]
struct Series {
    name: String,
    first: jiff::Timestamp,
    count: i32,
    written_at: jiff::Timestamp,
    started: bool,
}

/// What a correlated event writes: the Event `name`, created (no `series`) or patched with
/// its series.
#[derive(Debug, PartialEq)]
struct EventWrite {
    name: String,
    first: jiff::Timestamp,
    series: Option<EventSeries>,
}

impl EventCorrelator {
    /// What `event` writes now, if anything; records it either way.
    fn admit(&mut self, event: &crate::plan::Event, now: jiff::Timestamp) -> Option<EventWrite> {
        let (kind, object) = match &event.object {
            EventObject::Node(name) => ("Node", name),
            EventObject::NodeWright(name) => ("NodeWright", name),
        };
        let key = (
            format!("{kind}/{object}"),
            event.kind == EventType::Warning,
            event.reason.clone(),
        );
        let fresh = |at: &jiff::Timestamp| now.duration_since(*at) < EVENT_SERIES_REFRESH;
        if let Some(series) = self.series.get_mut(&key) {
            series.count = series.count.saturating_add(1);
            if series.started && fresh(&series.written_at) {
                return None;
            }
            series.written_at = now;
            series.started = true;
            return Some(EventWrite {
                name: series.name.clone(),
                first: series.first,
                series: Some(EventSeries {
                    count: series.count,
                    last_observed_time: MicroTime(now),
                }),
            });
        }
        // A series not written for an interval would be refreshed anyway: forgetting it keeps
        // the memory to the last half hour's series, not every series ever reported.
        if self.series.len() >= self.prune_at {
            self.series.retain(|_, series| fresh(&series.written_at));
            self.prune_at = (self.series.len() * 2).max(1024);
        }
        let at = now.as_nanosecond().max(self.last_name_at + 1);
        self.last_name_at = at;
        let name = format!("{object}.{at:x}");
        self.series.insert(
            key,
            Series {
                name: name.clone(),
                first: now,
                count: 1,
                written_at: now,
                started: false,
            },
        );
        Some(EventWrite {
            name,
            first: now,
            series: None,
        })
    }
}

fn to_value<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// The JSON merge patch (RFC 7386) turning `old` into `new`: changed members, `null` for
/// removed ones; arrays are replaced whole.
pub fn merge_diff(old: &Value, new: &Value) -> Value {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut patch = serde_json::Map::new();
            for (k, nv) in n {
                match o.get(k) {
                    Some(ov) if ov == nv => {}
                    Some(ov) if ov.is_object() && nv.is_object() => {
                        patch.insert(k.clone(), merge_diff(ov, nv));
                    }
                    _ => {
                        patch.insert(k.clone(), nv.clone());
                    }
                }
            }
            for k in o.keys() {
                if !n.contains_key(k) {
                    patch.insert(k.clone(), Value::Null);
                }
            }
            Value::Object(patch)
        }
        _ => new.clone(),
    }
}

/// The merge patch turning the live status `current` into `patch` applied to it, built from
/// the entries the patch touches: a write of a hundred nodes' entries does not serialize a
/// 10,000-node status twice. The same patch as [`merge_diff`] of the two whole statuses.
fn status_merge_patch(current: Option<&NodeWrightStatus>, patch: &StatusPatch) -> Value {
    let fields = current.map(status_fields).unwrap_or_default();
    let mut body = merge_diff(&to_value(&fields), &to_value(patch.fields()));
    let maps = [
        (
            "nodeStatus",
            map_merge_patch(
                current.and_then(|s| s.node_status.as_ref()),
                &patch.node_status,
            ),
        ),
        (
            "nodeState",
            map_merge_patch(
                current.and_then(|s| s.node_state.as_ref()),
                &patch.node_state,
            ),
        ),
        (
            "nodeBootIds",
            map_merge_patch(
                current.and_then(|s| s.node_boot_ids.as_ref()),
                &patch.node_boot_ids,
            ),
        ),
    ];
    if let Some(object) = body.as_object_mut() {
        for (field, change) in maps {
            if let Some(change) = change {
                object.insert(field.to_string(), change);
            }
        }
    }
    body
}

/// A status without its three per-node maps, which [`StatusPatch`] carries as changes. Every
/// field is named, so a field the status gains is a compile error here rather than unwritten.
fn status_fields(status: &NodeWrightStatus) -> NodeWrightStatus {
    let NodeWrightStatus {
        status,
        node_status: _,
        node_state: _,
        conditions,
        observed_generation,
        node_boot_ids: _,
        node_priority,
        node_order_offset,
        config_updates,
        compartment_statuses,
        nodes_in_progress,
        complete_nodes,
        package_list,
    } = status;
    NodeWrightStatus {
        status: *status,
        node_status: None,
        node_state: None,
        conditions: conditions.clone(),
        observed_generation: *observed_generation,
        node_boot_ids: None,
        node_priority: node_priority.clone(),
        node_order_offset: *node_order_offset,
        config_updates: config_updates.clone(),
        compartment_statuses: compartment_statuses.clone(),
        nodes_in_progress: *nodes_in_progress,
        complete_nodes: complete_nodes.clone(),
        package_list: package_list.clone(),
    }
}

/// The merge patch of one per-node map under `change`: `None` when the map stays as it is,
/// `null` when it empties (an empty map is written as no field), else its changed entries
/// (`null` for removed ones).
fn map_merge_patch<V: serde::Serialize + PartialEq>(
    current: Option<&BTreeMap<String, V>>,
    change: &MapPatch<V>,
) -> Option<Value> {
    let empty = BTreeMap::new();
    let current_map = current.unwrap_or(&empty);
    let mut entries = serde_json::Map::new();
    let mut set = |node: &str, old: Option<&V>, new: Option<&V>| match (old, new) {
        (None, None) => {}
        (Some(_), None) => {
            entries.insert(node.to_string(), Value::Null);
        }
        (old, Some(new)) if old != Some(new) => {
            let new = to_value(new);
            let entry = match old {
                Some(old) => merge_diff(&to_value(old), &new),
                None => new,
            };
            // An entry that differs from its old value only where JSON does not is no change,
            // while a new entry counts even when it is empty.
            if old.is_none() || entry.as_object().is_none_or(|o| !o.is_empty()) {
                entries.insert(node.to_string(), entry);
            }
        }
        _ => {}
    };
    if change.replace {
        for (node, old) in current_map {
            if !matches!(change.set.get(node), Some(Some(_))) {
                set(node, Some(old), None);
            }
        }
    }
    for (node, new) in &change.set {
        set(node, current_map.get(node), new.as_ref());
    }
    let empties = !change.set.values().any(Option::is_some)
        && (change.replace
            || current_map
                .keys()
                .all(|k| matches!(change.set.get(k), Some(None))));
    match (current.is_some(), empties) {
        (true, true) => Some(Value::Null),
        (false, true) => None,
        _ if entries.is_empty() => None,
        _ => Some(Value::Object(entries)),
    }
}

/// The message of a 429 eviction refusal caused by a disruption budget, or `None` for any
/// other failure (§7.7: only a DisruptionBudget cause is a PDB blocker).
fn disruption_budget_message(e: &kube::Error) -> Option<String> {
    let kube::Error::Api(status) = e else {
        return None;
    };
    if status.code != 429 {
        return None;
    }
    let cause = status
        .details
        .as_ref()
        .and_then(|d| d.causes.iter().find(|c| c.reason == "DisruptionBudget"))?;
    Some(if cause.message.is_empty() {
        status.message.clone()
    } else {
        cause.message.clone()
    })
}

impl Cluster for KubeCluster {
    async fn snapshot(&self) -> Result<Snapshot, ClusterError> {
        // A store replaces a node's `Arc` when it changes, so an unchanged node reaches the
        // engine as the same allocation as last pass (a relist keeps it too), and in name
        // order, as in the simulator, so the engine's cross-pass caches find it where they
        // left it.
        let mut nodes: Vec<Arc<Node>> = self.nodes.all();
        self.read_own_node_writes(&mut nodes);
        let mut jobs = self.jobs.all();
        self.read_own_job_creations(&mut jobs);
        let nodewrights: Vec<Arc<NodeWright>> = (self.nodewrights.all().iter())
            .map(|shared| shared.arc())
            .collect();
        let policies = self.policies.all();
        let under_drain: BTreeSet<String> = nodes
            .iter()
            .filter(|n| {
                n.spec
                    .as_ref()
                    .and_then(|s| s.unschedulable)
                    .unwrap_or(false)
                    || n.annotations().keys().any(|k| keys::is_cordon_key(k))
            })
            .map(|n| n.name_any())
            .collect();
        let api = Api::<Pod>::all(self.client.clone());
        let trim = self.options.pod_trim();
        let under_drain_pods = (self.drain_pods)
            .read(&under_drain, move |node| {
                super::drain_pods::list_node(api.clone(), node, trim.clone())
            })
            .await?;
        // The stores' own `Arc`s: an unchanged pod is the same allocation pass after pass,
        // which the engine's cache recognises. The drain view leaves package pods to their own
        // store; an incarnation it still holds stands beside its successor.
        let mut pods: BTreeMap<(String, String, String), Arc<Pod>> = BTreeMap::new();
        for pod in under_drain_pods.into_iter().chain(self.package_pods.all()) {
            let key = (
                pod.namespace().unwrap_or_default(),
                pod.name_any(),
                pod.uid().unwrap_or_default(),
            );
            pods.insert(key, pod);
        }
        // The stores' own `Arc`s: a thousand node-metadata ConfigMaps are not copied per pass.
        let mut config_maps: BTreeMap<String, Arc<ConfigMap>> = BTreeMap::new();
        for store in [&self.package_config_maps, &self.metadata_config_maps] {
            for cm in store.all() {
                config_maps.insert(cm.name_any(), cm);
            }
        }
        Ok(Snapshot {
            now: self.options.clock.now(),
            nodewrights,
            policies: policies.iter().map(|o| (**o).clone()).collect(),
            nodes,
            jobs,
            pods: pods.into_values().collect(),
            config_maps: config_maps.into_values().collect(),
            // Approvals come from Git, not the cluster: the controller adds them.
            approvals: Default::default(),
            memory: Default::default(),
        })
    }

    async fn pod_logs(&self, request: &LogRequest) -> Result<String, ClusterError> {
        use futures::AsyncReadExt;
        let api = Api::<Pod>::namespaced(self.client.clone(), &request.namespace);
        let what = format!("read log of pod {}/{}", request.namespace, request.pod);
        // The raw stream, not `Api::logs`: a log is bytes, and invalid UTF-8 in it must be
        // replaced, not fail the read.
        let mut stream = api
            .log_stream(&request.pod, &log_params(request, false))
            .await
            .map_err(|e| api_error(&what, e))?;
        let mut raw = Vec::new();
        stream
            .read_to_end(&mut raw)
            .await
            .map_err(|e| ClusterError::Transport(format!("{what}: {e}")))?;
        Ok(String::from_utf8_lossy(&raw).into_owned())
    }

    async fn follow_pod_logs(
        &self,
        request: &LogRequest,
        sink: &mut (dyn FnMut(&str) + Send),
    ) -> Result<(), ClusterError> {
        use futures::AsyncBufReadExt;
        let api = Api::<Pod>::namespaced(self.client.clone(), &request.namespace);
        let what = format!("follow log of pod {}/{}", request.namespace, request.pod);
        let mut stream = api
            .log_stream(&request.pod, &log_params(request, true))
            .await
            .map_err(|e| api_error(&what, e))?;
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = stream
                .read_until(b'\n', &mut line)
                .await
                .map_err(|e| ClusterError::Transport(format!("{what}: {e}")))?;
            if n == 0 {
                return Ok(());
            }
            sink(&String::from_utf8_lossy(&line));
        }
    }

    async fn execute(&self, action: &Action) -> Result<Outcome, ClusterError> {
        self.check_writes(action)?;
        let ns = self.options.namespace.as_str();
        let jobs = Api::<Job>::namespaced(self.client.clone(), ns);
        let nodewrights = Api::<NodeWright>::all(self.client.clone());
        match action {
            Action::PatchNode(patch) => self.patch_node(patch).await,
            Action::PatchNodeConditions { node, set, remove } => {
                self.patch_node_conditions(node, set, remove).await
            }
            Action::CreateJob(job) => match jobs.create(&PostParams::default(), &job.job()).await {
                Ok(mut answer) => {
                    trim_job(&mut answer);
                    self.created_jobs
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(
                            answer.name_any(),
                            CreatedJob {
                                answer: Arc::new(answer),
                                at: std::time::Instant::now(),
                            },
                        );
                    Ok(Outcome::Done)
                }
                Err(e) if status_code(&e) == Some(409) => Ok(Outcome::AlreadyExists),
                Err(e) => Err(api_error("create job", e)),
            },
            Action::DeleteJob { name, uid, .. } => {
                self.created_jobs
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(name);
                let mut params = DeleteParams::foreground();
                if let Some(uid) = uid {
                    params.preconditions = Some(Preconditions {
                        uid: Some(uid.clone()),
                        resource_version: None,
                    });
                }
                match jobs.delete(name, &params).await {
                    Ok(_) => Ok(Outcome::Done),
                    Err(e) if status_code(&e) == Some(404) => Ok(Outcome::NotFound),
                    Err(e) if status_code(&e) == Some(409) => Ok(Outcome::NotFound),
                    Err(e) => Err(api_error("delete job", e)),
                }
            }
            Action::SuspendJob { name, suspend } => {
                let body = json!({"spec": {"suspend": suspend}});
                match jobs
                    .patch(name, &write_params(), &Patch::Merge(&body))
                    .await
                {
                    Ok(_) => Ok(Outcome::Done),
                    Err(e) if status_code(&e) == Some(404) => Ok(Outcome::NotFound),
                    Err(e) => Err(api_error("suspend job", e)),
                }
            }
            Action::AnnotateJob {
                name,
                uid,
                annotations,
                ttl_seconds_after_finished,
            } => {
                annotate_job(
                    &jobs,
                    name,
                    uid.as_deref(),
                    annotations,
                    *ttl_seconds_after_finished,
                )
                .await
            }
            Action::SnapshotLastLogs {
                job,
                uid,
                namespace,
                pod,
                container,
                fallback,
            } => {
                let request = super::last_logs_request(namespace, pod, container);
                // Best effort (§8.12): a slow or failed read falls back, it never fails the pass.
                let read =
                    match tokio::time::timeout(super::LAST_LOGS_TIMEOUT, self.pod_logs(&request))
                        .await
                    {
                        Ok(read) => read,
                        Err(_) => Err(ClusterError::Transport(format!(
                            "reading the log of {namespace}/{pod} timed out after {}s",
                            super::LAST_LOGS_TIMEOUT.as_secs()
                        ))),
                    };
                let text = super::last_logs_value(read, container, fallback.as_deref());
                let annotations =
                    BTreeMap::from([(keys::JOB_ANNOTATION_LAST_LOGS.to_string(), text)]);
                annotate_job(&jobs, job, uid.as_deref(), &annotations, None).await
            }
            Action::FailJob { name, .. } => {
                // The Job controller fails a Job whose Job-level deadline has passed
                // (reason DeadlineExceeded), which §8.9 treats as genuine evidence.
                let body = json!({"spec": {"activeDeadlineSeconds": 1}});
                match jobs
                    .patch(name, &write_params(), &Patch::Merge(&body))
                    .await
                {
                    Ok(_) => Ok(Outcome::Done),
                    Err(e) if status_code(&e) == Some(404) => Ok(Outcome::NotFound),
                    Err(e) => Err(api_error("fail job", e)),
                }
            }
            Action::EvictPod(pod) => {
                let api = Api::<Pod>::namespaced(self.client.clone(), &pod.namespace);
                let params = EvictParams {
                    delete_options: pod.grace_period_seconds.map(|g| DeleteParams {
                        grace_period_seconds: Some(g.max(0) as u32),
                        ..DeleteParams::default()
                    }),
                    ..EvictParams::default()
                };
                match api.evict(&pod.name, &params).await {
                    Ok(_) => Ok(Outcome::Done),
                    Err(e) if status_code(&e) == Some(404) => Ok(Outcome::NotFound),
                    Err(e) => match disruption_budget_message(&e) {
                        Some(message) => Ok(Outcome::EvictionRefused { message }),
                        None => Err(api_error("evict pod", e)),
                    },
                }
            }
            Action::DeletePod(pod) => {
                let api = Api::<Pod>::namespaced(self.client.clone(), &pod.namespace);
                let params = DeleteParams {
                    grace_period_seconds: pod.grace_period_seconds.map(|g| g.max(0) as u32),
                    ..DeleteParams::default()
                };
                match api.delete(&pod.name, &params).await {
                    Ok(_) => Ok(Outcome::Done),
                    Err(e) if status_code(&e) == Some(404) => Ok(Outcome::NotFound),
                    Err(e) => Err(api_error("delete pod", e)),
                }
            }
            Action::UpsertConfigMap(cm) => {
                if self.config_map_holds(cm) {
                    return Ok(Outcome::Done);
                }
                let api = Api::<ConfigMap>::namespaced(self.client.clone(), ns);
                let mut body = (**cm).clone();
                body.metadata.managed_fields = None;
                body.metadata.resource_version = None;
                let value = json!({
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": to_value(&body.metadata),
                    "data": body.data,
                });
                api.patch(
                    &cm.name_any(),
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&value),
                )
                .await
                .map_err(|e| api_error("apply configmap", e))?;
                Ok(Outcome::Done)
            }
            Action::DeleteConfigMap { name } => {
                let api = Api::<ConfigMap>::namespaced(self.client.clone(), ns);
                match api.delete(name, &DeleteParams::default()).await {
                    Ok(_) => Ok(Outcome::Done),
                    Err(e) if status_code(&e) == Some(404) => Ok(Outcome::NotFound),
                    Err(e) => Err(api_error("delete configmap", e)),
                }
            }
            Action::PatchNodeWrightStatus { name, patch } => {
                for attempt in 0..CONFLICT_RETRIES {
                    let cached = (attempt == 0)
                        .then(|| self.nodewrights.get(name))
                        .flatten()
                        .map(|shared| shared.arc());
                    let current = match cached {
                        Some(nw) => nw,
                        None => match nodewrights.get_status(name).await {
                            Ok(nw) => Arc::new(nw),
                            Err(e) if status_code(&e) == Some(404) => {
                                return Ok(Outcome::NotFound);
                            }
                            Err(e) => return Err(api_error("get nodewright status", e)),
                        },
                    };
                    // The per-node maps travel as changes: apply them to the live status so
                    // entries another writer added since the snapshot stay (§5.15).
                    let diff = status_merge_patch(current.status.as_ref(), patch);
                    if diff.as_object().is_some_and(|o| o.is_empty()) {
                        return Ok(Outcome::Done);
                    }
                    let body = json!({"metadata": {"resourceVersion": current.resource_version()}, "status": diff});
                    match self.patch_nodewright_status(name, &body).await {
                        Ok(_) => return Ok(Outcome::Done),
                        Err(e) if status_code(&e) == Some(409) => continue,
                        Err(e) => return Err(api_error("patch nodewright status", e)),
                    }
                }
                Ok(Outcome::Conflict)
            }
            Action::PatchNodeWrightAnnotations { name, annotations } => {
                let body = json!({"metadata": {"annotations": annotations}});
                match nodewrights
                    .patch(name, &write_params(), &Patch::Merge(&body))
                    .await
                {
                    Ok(_) => Ok(Outcome::Done),
                    Err(e) if status_code(&e) == Some(404) => Ok(Outcome::NotFound),
                    Err(e) => Err(api_error("annotate nodewright", e)),
                }
            }
            Action::SetFinalizer { name, present } => {
                for _ in 0..CONFLICT_RETRIES {
                    let current = match nodewrights.get(name).await {
                        Ok(nw) => nw,
                        Err(e) if status_code(&e) == Some(404) => return Ok(Outcome::NotFound),
                        Err(e) => return Err(api_error("get nodewright", e)),
                    };
                    let mut finalizers = current.finalizers().to_vec();
                    let has = finalizers.iter().any(|f| f == keys::FINALIZER);
                    if has == *present {
                        return Ok(Outcome::Done);
                    }
                    if *present {
                        finalizers.push(keys::FINALIZER.to_string());
                    } else {
                        finalizers.retain(|f| f != keys::FINALIZER);
                    }
                    let body = json!({"metadata": {"resourceVersion": current.resource_version(), "finalizers": finalizers}});
                    match nodewrights
                        .patch(name, &write_params(), &Patch::Merge(&body))
                        .await
                    {
                        Ok(_) => return Ok(Outcome::Done),
                        Err(e) if status_code(&e) == Some(409) => continue,
                        Err(e) => return Err(api_error("patch nodewright finalizers", e)),
                    }
                }
                Ok(Outcome::Conflict)
            }
            Action::RecordEvent(event) => self.publish_event(event).await,
        }
    }

    async fn apply_desired(&self, desired: &Desired) -> Result<(), ClusterError> {
        if !self
            .writes_allowed
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            return Err(ClusterError::Api {
                action: "apply desired CRs".into(),
                status: 503,
                message: "not the leader: writes are stopped until the lease is held again".into(),
            });
        }
        let nodewrights = Api::<NodeWright>::all(self.client.clone());
        let policies = Api::<DeploymentPolicy>::all(self.client.clone());
        let params = PatchParams::apply(FIELD_MANAGER).force();
        // Policies first: a NodeWright may name one.
        for policy in &desired.policies {
            let body = declared(policy, &desired.commit);
            policies
                .patch(&policy.name_any(), &params, &Patch::Apply(&body))
                .await
                .map_err(|e| api_error("apply deploymentpolicy", e))?;
        }
        for nw in &desired.nodewrights {
            let body = declared(nw, &desired.commit);
            nodewrights
                .patch(&nw.name_any(), &params, &Patch::Apply(&body))
                .await
                .map_err(|e| api_error("apply nodewright", e))?;
        }
        // Objects we materialized earlier and Git no longer declares are deleted; their
        // finalizer runs the uninstall rules. Objects created by others are left alone.
        let declared_nw: BTreeSet<String> =
            desired.nodewrights.iter().map(|n| n.name_any()).collect();
        for nw in nodewrights
            .list(&ListParams::default())
            .await
            .map_err(|e| api_error("list nodewrights", e))?
        {
            if nw.annotations().contains_key(keys::SOURCE_COMMIT)
                && !declared_nw.contains(&nw.name_any())
            {
                match nodewrights
                    .delete(&nw.name_any(), &DeleteParams::default())
                    .await
                {
                    Ok(_) => {}
                    Err(e) if status_code(&e) == Some(404) => {}
                    Err(e) => return Err(api_error("delete nodewright", e)),
                }
            }
        }
        let declared_policies: BTreeSet<String> =
            desired.policies.iter().map(|p| p.name_any()).collect();
        for policy in policies
            .list(&ListParams::default())
            .await
            .map_err(|e| api_error("list deploymentpolicies", e))?
        {
            if policy.annotations().contains_key(keys::SOURCE_COMMIT)
                && !declared_policies.contains(&policy.name_any())
            {
                match policies
                    .delete(&policy.name_any(), &DeleteParams::default())
                    .await
                {
                    Ok(_) => {}
                    Err(e) if status_code(&e) == Some(404) => {}
                    Err(e) => return Err(api_error("delete deploymentpolicy", e)),
                }
            }
        }
        Ok(())
    }

    async fn changed(&self) {
        self.changed.notified().await;
    }

    fn may_write(&self) -> bool {
        self.writes_allowed
            .load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// The fields Git declares for a CR, for server-side apply: identity, labels, annotations
/// (plus the source commit) and spec — never status, finalizers or annotations set by verbs.
fn declared<K: Resource<DynamicType = ()> + serde::Serialize>(object: &K, commit: &str) -> Value {
    let value = to_value(object);
    let meta = object.meta();
    let mut annotations = meta.annotations.clone().unwrap_or_default();
    if !commit.is_empty() {
        annotations.insert(keys::SOURCE_COMMIT.to_string(), commit.to_string());
    }
    let mut metadata = json!({"name": meta.name, "annotations": annotations});
    if let Some(labels) = &meta.labels {
        metadata["labels"] = json!(labels);
    }
    json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": metadata,
        "spec": value.get("spec").cloned().unwrap_or(Value::Null),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stores' trims change no decision: through a rollout with a reboot, a config file,
    /// stage attempts that fail, a service restart the interrupt budget ends and an upgrade
    /// that clears the recorded Jobs of the old version, every pass plans over trimmed nodes,
    /// Jobs and pods, without succeeded package pods, what it plans over whole ones.
    #[test]
    fn the_stores_trims_change_no_decision() {
        use crate::cluster::Desired;
        use crate::engine::reconcile;
        use crate::settings::Settings;
        use crate::sim::{ModelRunner, NodeInput, PackageModels, SimCluster};
        use crate::snapshot::Memory;

        let models = PackageModels(
            serde_yaml::from_str(
                "example/driver: {default: {duration: 3s}, rebootTakes: 10s}\n\
                 example/tuning: {default: {duration: 1s}, stages: {apply: {failures: 1}}}\n\
                 example/daemon: {default: {duration: 1s}, stages: {interrupt: {fail: true}}}",
            )
            .expect("package models are valid YAML"),
        );
        let nodewright = r#"
apiVersion: nodewright.nvidia.com/v1alpha1
kind: NodeWright
metadata: {name: gpu, generation: 1}
spec:
  nodeSelectors: {matchLabels: {pool: gpu}}
  interruptionBudget: {percent: 50}
  packages:
    driver: {version: 1.0.0, image: example/driver, interrupt: {type: reboot}}
    tuning: {version: 1.0.0, image: example/tuning, configMap: {a.conf: "x=1"}}
"#;
        // Its service restart fails again and again, which the interrupt budget ends (§8.16).
        let restarting = r#"
apiVersion: nodewright.nvidia.com/v1alpha1
kind: NodeWright
metadata: {name: cpu, generation: 1}
spec:
  nodeSelectors: {matchLabels: {pool: cpu}}
  packages:
    daemon: {version: 1.0.0, image: example/daemon, interrupt: {type: service, services: [d]}}
"#;
        let mut sim = SimCluster::new("nodewright", Box::new(ModelRunner::new(models)), 3);
        for i in 0..5 {
            let pool = if i < 4 { "gpu" } else { "cpu" };
            sim.add_node(NodeInput {
                name: format!("n{i}"),
                labels: [("pool".to_string(), pool.to_string())].into(),
                ..NodeInput::default()
            });
        }
        sim.apply_desired(&Desired {
            nodewrights: vec![
                serde_yaml::from_str(nodewright).expect("valid NodeWright"),
                serde_yaml::from_str(restarting).expect("valid NodeWright"),
            ],
            commit: "c1".into(),
            ..Desired::default()
        });
        let settings = Settings::default();
        let has_succeeded =
            |p: &Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded");
        let mut snap = sim.snapshot(Memory::default());
        let (mut succeeded, mut failed) = (0, 0);
        for pass in 0..600 {
            if pass == 300 {
                // An upgrade once the first rollout is done: the rerun predicate removes the
                // recorded Jobs of the version the nodes no longer record (§8.14 rule 2).
                let upgraded = (nodewright.replace("generation: 1", "generation: 2"))
                    .replace("tuning: {version: 1.0.0", "tuning: {version: 1.1.0");
                sim.apply_desired(&Desired {
                    nodewrights: vec![
                        serde_yaml::from_str(&upgraded).expect("valid NodeWright"),
                        serde_yaml::from_str(restarting).expect("valid NodeWright"),
                    ],
                    commit: "c2".into(),
                    ..Desired::default()
                });
            }
            sim.refresh_snapshot(&mut snap);
            let mut trimmed = snap.clone();
            trimmed.nodes = (snap.nodes.iter())
                .map(|n| Arc::new(trimmed_copy(&**n, trim_node)))
                .collect();
            trimmed.jobs = (snap.jobs.iter())
                .map(|j| Arc::new(trimmed_copy(&**j, trim_job)))
                .collect();
            // The package pod watch of `run` leaves succeeded pods out.
            trimmed.pods = (snap.pods.iter())
                .filter(|p| !(p.labels().contains_key(keys::JOB_LABEL_NAME) && has_succeeded(p)))
                .map(|p| Arc::new(trimmed_copy(&**p, |p| trim_package_pod(p, false))))
                .collect();
            for pod in &snap.pods {
                match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
                    Some("Succeeded") => succeeded += 1,
                    Some("Failed") => failed += 1,
                    _ => {}
                }
            }
            let plan = reconcile(&snap, &settings);
            assert_eq!(reconcile(&trimmed, &settings), plan, "at {}", snap.now);
            for action in &plan.actions {
                let _ = sim.execute(action);
            }
            sim.advance(std::time::Duration::from_secs(2));
        }
        assert!(
            succeeded > 0 && failed > 0,
            "{succeeded} succeeded, {failed} failed"
        );
        let ended = (snap.jobs.iter()).any(|j| {
            crate::engine::jobs::annotation(j, keys::JOB_ANNOTATION_RESTART_LIMIT_EXCEEDED)
                .is_some()
        });
        assert!(
            ended,
            "the interrupt budget ends the failing service restart"
        );
        let gpu = (snap.nodewrights.iter()).find(|nw| nw.metadata.name.as_deref() == Some("gpu"));
        let status = gpu.and_then(|nw| nw.status.as_ref());
        assert_eq!(
            status.and_then(|s| s.status),
            Some(nodewright_schema::Status::Complete),
            "the rollout completes"
        );
    }

    #[test]
    fn a_crs_writers_are_kept_without_the_fields_each_wrote() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
        let entry = |manager: &str, subresource: Option<&str>| ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some("Update".into()),
            subresource: subresource.map(Into::into),
            fields_v1: Some(FieldsV1(json!({"f:status": {"f:nodeState": {"f:n1": {}}}}))),
            ..ManagedFieldsEntry::default()
        };
        let mut nw = NodeWright::default();
        nw.metadata.managed_fields = Some(vec![
            entry(FIELD_MANAGER, Some("status")),
            entry("skyhook-operator", Some("status")),
        ]);
        trim_field_sets(&mut nw);
        let kept: Vec<_> = (nw.metadata.managed_fields.iter().flatten())
            .map(|e| {
                (
                    e.manager.as_deref(),
                    e.subresource.as_deref(),
                    e.fields_v1.is_some(),
                )
            })
            .collect();
        assert_eq!(
            kept,
            [
                (Some(FIELD_MANAGER), Some("status"), false),
                (Some("skyhook-operator"), Some("status"), false)
            ]
        );
    }

    #[test]
    fn a_watch_error_reads_as_the_servers_code_reason_and_message() {
        let status = kube::core::Status {
            code: 410,
            reason: "Expired".into(),
            message: "The provided continue parameter is too old".into(),
            ..kube::core::Status::default()
        };
        let listing = watcher::Error::InitialListFailed(kube::Error::Api(Box::new(status.clone())));
        assert_eq!(
            watch_error_text(&listing),
            "listing failed: 410 Expired: The provided continue parameter is too old"
        );
        let ended = watcher::Error::WatchError(Box::new(status));
        assert_eq!(
            watch_error_text(&ended),
            "the API server ended the watch: 410 Expired: The provided continue parameter is too old"
        );
    }

    mod status_patches {
        use super::super::*;
        use nodewright_schema::{NodeState, PackageStatus, Stage, State, Status};
        use proptest::prelude::*;

        /// A node state by number; 3 is the empty state a selected node starts with.
        fn package_state(state: u8) -> NodeState {
            if state == 3 {
                return NodeState::default();
            }
            let state = [State::InProgress, State::Complete, State::Erroring][state as usize % 3];
            let mut entries = NodeState::new();
            entries.upsert(PackageStatus::new("a", "1", "img", Stage::Apply, state));
            entries
        }

        /// Per node n0..n3: absent, or a value picked by a small number.
        fn any_map() -> impl Strategy<Value = Option<BTreeMap<String, u8>>> {
            proptest::option::of(proptest::collection::btree_map("n[0-3]", 0u8..4, 0..4))
        }

        fn any_change() -> impl Strategy<Value = (bool, BTreeMap<String, Option<u8>>)> {
            (
                any::<bool>(),
                proptest::collection::btree_map("n[0-3]", proptest::option::of(0u8..4), 0..4),
            )
        }

        fn map_of<V>(
            map: &Option<BTreeMap<String, u8>>,
            f: impl Fn(u8) -> V,
        ) -> Option<BTreeMap<String, V>> {
            map.as_ref()
                .map(|m| m.iter().map(|(k, v)| (k.clone(), f(*v))).collect())
        }

        fn change_of<V>(
            change: &(bool, BTreeMap<String, Option<u8>>),
            f: impl Fn(u8) -> V,
        ) -> MapPatch<V> {
            MapPatch {
                replace: change.0,
                set: change
                    .1
                    .iter()
                    .map(|(k, v)| (k.clone(), v.map(&f)))
                    .collect(),
            }
        }

        fn node_status(v: u8) -> Status {
            [Status::Complete, Status::Waiting, Status::InProgress][v as usize % 3]
        }

        proptest! {
            /// The patch built from the touched entries is the one the whole statuses give.
            #[test]
            fn a_status_patch_from_its_entries_is_the_whole_statuses_merge_patch(
                current in proptest::option::of((any_map(), any_map(), any_map(), 0i64..3)),
                changes in (any_change(), any_change(), any_change(), 0i64..3),
            ) {
                let current = current.map(|(states, statuses, boots, generation)| NodeWrightStatus {
                    node_state: map_of(&states, package_state),
                    node_status: map_of(&statuses, node_status),
                    node_boot_ids: map_of(&boots, |v| format!("boot-{v}")),
                    observed_generation: Some(generation),
                    ..NodeWrightStatus::default()
                });
                let patch = StatusPatch::new(
                    NodeWrightStatus {
                        observed_generation: Some(changes.3),
                        ..NodeWrightStatus::default()
                    },
                    change_of(&changes.1, node_status),
                    change_of(&changes.0, package_state),
                    change_of(&changes.2, |v| format!("boot-{v}")),
                );
                let whole = merge_diff(
                    &to_value(&current.clone().unwrap_or_default()),
                    &to_value(&patch.applied_to(current.as_ref())),
                );
                prop_assert_eq!(status_merge_patch(current.as_ref(), &patch), whole);
            }
        }
    }

    fn trimmed_copy<K: Clone>(object: &K, trim: impl FnOnce(&mut K)) -> K {
        let mut copy = object.clone();
        trim(&mut copy);
        copy
    }

    #[test]
    fn a_repeated_event_is_written_once_per_refresh_interval() {
        let event = |node: &str, reason: &str, message: &str| crate::plan::Event {
            object: EventObject::Node(node.into()),
            kind: EventType::Normal,
            reason: reason.into(),
            message: message.into(),
        };
        let t0 = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        let at = |minutes: i64| t0 + jiff::SignedDuration::from_mins(minutes);
        let count = |write: Option<EventWrite>| write.map(|w| w.series.map(|s| s.count));
        let mut correlator = EventCorrelator::default();
        let created = correlator
            .admit(&event("n1", "Apply", "apply started"), at(0))
            .unwrap();
        assert_eq!(created.series, None, "the first is created");
        assert_eq!(created.name, format!("n1.{:x}", at(0).as_nanosecond()));
        let started = correlator
            .admit(&event("n1", "Apply", "config started"), at(1))
            .unwrap();
        assert_eq!(
            (
                started.name.as_str(),
                started.first,
                started.series.map(|s| s.count)
            ),
            (created.name.as_str(), at(0), Some(2)),
            "the second starts the series of the same Event"
        );
        assert_eq!(
            count(correlator.admit(&event("n1", "Apply", "interrupt started"), at(2))),
            None
        );
        assert_eq!(
            count(correlator.admit(&event("n1", "Apply", "apply started"), at(30))),
            None
        );
        let other = correlator
            .admit(&event("n1", "Drain", "drained"), at(30))
            .unwrap();
        assert_eq!(other.series, None, "another reason is another Event");
        assert_ne!(other.name, created.name);
        assert_eq!(
            count(correlator.admit(&event("n1", "Apply", "apply started"), at(31))),
            Some(Some(5)),
            "the refresh counts every occurrence"
        );
        assert_eq!(
            count(correlator.admit(&event("n1", "Apply", "apply started"), at(32))),
            None
        );
        let a = correlator
            .admit(&event("n2", "Apply", "x"), at(40))
            .unwrap();
        let b = correlator
            .admit(&event("n2", "Drain", "x"), at(40))
            .unwrap();
        assert_ne!(
            a.name, b.name,
            "names stay unique within the clock's resolution"
        );
    }

    #[test]
    fn merge_diff_sets_changed_and_nulls_removed_members() {
        let old = json!({"a": 1, "m": {"x": 1, "y": 2}, "l": [1, 2], "gone": true});
        let new = json!({"a": 1, "m": {"x": 1, "z": 3}, "l": [2]});
        assert_eq!(
            merge_diff(&old, &new),
            json!({"m": {"y": null, "z": 3}, "l": [2], "gone": null})
        );
    }
}
