//! The served world: the [`SimCluster`] plus the objects only the API server keeps (Leases,
//! Events, Namespaces, CRDs), a published JSON view of every object, and the watch log.
//!
//! Every write through HTTP becomes a simulator operation (the same `execute`, `apply_*`,
//! `evict`, `delete_*` the in-process adapter uses), so there is one world and one set of
//! rules. After each operation, and after each clock tick, [`Inner::publish`] compares the
//! simulator's objects with what was last published and appends ADDED/MODIFIED/DELETED
//! entries to the log watches read from. An object the simulator changed without bumping its
//! resourceVersion (the kubelet writing pod status) gets a fresh one here, so every change a
//! client can observe carries a new resourceVersion.
//!
//! Each write has a dry-run twin (`create_dry_run`, `update_dry_run`, …) that takes the world
//! read-only and shares every check with it, so the file is long by keeping each write and
//! its twin side by side: one concept, the mapping of API writes onto the simulator.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use axum::body::Bytes;

use crate::job::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Node, NodeCondition, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Resource;
use nodewright_schema::validate::{validate_nodewright_value, validate_policy_value};
use nodewright_schema::{DeploymentPolicy, NodeWright, NodeWrightStatus, keys};
use serde::Serialize;
use serde_json::{Value, json};

use super::error::ApiError;
use super::resources::{self, RESOURCES, Rid};
use super::select::Selectors;
use crate::cluster::ClusterError;
use crate::plan::{Action, NodePatch, Outcome, StatusPatch};
use crate::sim::tracked::Tracked;
use crate::sim::{EvictionError, Key, NodeInput, PdbInput, SimCluster, util};

/// `(namespace or "", name)`.
pub type ObjKey = (String, String);

/// How far back each resource's changes reach, for resuming watches and listing as of an
/// earlier resourceVersion (older ones get 410 Gone). Each resource keeps its own window, as
/// the apiserver's watch cache does, so a kind that changes often (every kubelet's lease)
/// never pushes another kind's history out. The apiserver keeps 75 s of changes; at the
/// simulator's usual 30× that is about 2 s of wall time, and each second kept costs about
/// half a gigabyte at 10,000 nodes during a rollout.
const LOG_WINDOW: Duration = Duration::from_secs(2);
/// The changes a resource keeps however old they are, while they hold less than
/// [`LOG_KEPT_BYTES`] of JSON.
const LOG_KEPT_AT_LEAST: usize = 1_000;
/// The JSON a resource's changes past the window hold at most: a NodeWright whose status
/// mirrors a fleet is megabytes per version, and a rollout writes it every pass, so a
/// thousand versions of it held about 3 GB of `sim serve`'s 12.7 GB peak at 10,000 nodes.
const LOG_KEPT_BYTES: usize = 16 << 20;
/// The changes a resource keeps at most, however recent.
const LOG_CAPACITY: usize = 50_000;

/// One change, as a watch reports it.
#[derive(Clone, Debug)]
pub struct LogEntry {
    /// The resourceVersion of the change.
    pub rv: u64,
    /// Which resource.
    pub rid: Rid,
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub type_: &'static str,
    /// The object after the change (before it, for DELETED).
    pub object: Arc<Value>,
    /// The object before a MODIFIED or DELETED change (for selector transitions, and to
    /// list as of an earlier resourceVersion).
    pub prev: Option<Arc<Value>>,
    /// When the change was made (wall time), for watches that lag on purpose.
    pub at: std::time::Instant,
    /// About the size of `object` as JSON, in bytes.
    size: usize,
    /// `object` as JSON, encoded once for every watch that reports the change.
    json: OnceLock<Bytes>,
}

impl LogEntry {
    fn new(
        rv: u64,
        rid: Rid,
        type_: &'static str,
        object: Arc<Value>,
        prev: Option<Arc<Value>>,
    ) -> Self {
        LogEntry {
            rv,
            rid,
            type_,
            size: json_size(&object),
            object,
            prev,
            at: std::time::Instant::now(),
            json: OnceLock::new(),
        }
    }

    /// The changed object as JSON.
    pub fn object_json(&self) -> &Bytes {
        self.json
            .get_or_init(|| Bytes::from(serde_json::to_vec(&*self.object).unwrap_or_default()))
    }
}

/// About the size of `value` as JSON, in bytes, without encoding it.
fn json_size(value: &Value) -> usize {
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) => 8,
        Value::String(s) => s.len() + 2,
        Value::Array(items) => 2 + items.iter().map(|v| json_size(v) + 1).sum::<usize>(),
        Value::Object(map) => {
            2 + (map.iter())
                .map(|(k, v)| k.len() + 4 + json_size(v))
                .sum::<usize>()
        }
    }
}

/// The published objects, one map per resource; custom resources' maps appear on first write.
#[derive(Default)]
struct Store {
    by_rid: Vec<BTreeMap<ObjKey, Arc<Value>>>,
    /// Pods by `spec.nodeName`, as the apiserver's watch cache indexes them: a list of one
    /// node's pods (each reconciler's drain watch starts with one) reads that node's pods,
    /// not every pod of the cluster.
    pods_by_node: HashMap<String, BTreeSet<ObjKey>>,
}

/// What a resource without objects reads as.
static NO_OBJECTS: BTreeMap<ObjKey, Arc<Value>> = BTreeMap::new();

impl std::ops::Index<Rid> for Store {
    type Output = BTreeMap<ObjKey, Arc<Value>>;
    fn index(&self, rid: Rid) -> &Self::Output {
        self.by_rid.get(rid).unwrap_or(&NO_OBJECTS)
    }
}

/// The node a pod is bound to, if any (an empty `spec.nodeName` binds it to none).
fn pod_node(pod: &Value) -> Option<&str> {
    pod.pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|node| !node.is_empty())
}

impl Store {
    /// One object.
    fn get(&self, rid: Rid, key: &ObjKey) -> Option<Arc<Value>> {
        self[rid].get(key).cloned()
    }

    /// Stores an object under its key; the object it replaces.
    fn insert(&mut self, rid: Rid, key: ObjKey, value: Arc<Value>) -> Option<Arc<Value>> {
        if self.by_rid.len() <= rid {
            self.by_rid.resize_with(rid + 1, BTreeMap::new);
        }
        if rid == resources::PODS {
            let node = pod_node(&value).map(str::to_string);
            let prev = self.by_rid[rid].insert(key.clone(), value);
            self.unindex_pod(&key, prev.as_deref());
            if let Some(node) = node {
                self.pods_by_node.entry(node).or_default().insert(key);
            }
            return prev;
        }
        self.by_rid[rid].insert(key, value)
    }

    /// Removes an object; the object removed.
    fn remove(&mut self, rid: Rid, key: &ObjKey) -> Option<Arc<Value>> {
        let removed = self.by_rid.get_mut(rid)?.remove(key);
        if rid == resources::PODS {
            self.unindex_pod(key, removed.as_deref());
        }
        removed
    }

    fn unindex_pod(&mut self, key: &ObjKey, pod: Option<&Value>) {
        if let Some(node) = pod.and_then(pod_node)
            && let Some(keys) = self.pods_by_node.get_mut(node)
        {
            keys.remove(key);
            if keys.is_empty() {
                self.pods_by_node.remove(node);
            }
        }
    }

    /// `rid`'s objects from `start` on, in key order: of pods bound to `node` only, when
    /// the request selects one node's pods.
    fn range<'a>(
        &'a self,
        rid: Rid,
        start: Bound<ObjKey>,
        node: Option<&str>,
    ) -> Box<dyn Iterator<Item = (&'a ObjKey, &'a Arc<Value>)> + 'a> {
        let objects = &self[rid];
        match node {
            Some(node) if rid == resources::PODS => Box::new(
                self.pods_by_node
                    .get(node)
                    .into_iter()
                    .flat_map(move |keys| keys.range((start.clone(), Bound::Unbounded)))
                    .filter_map(move |key| objects.get_key_value(key)),
            ),
            _ => Box::new(objects.range((start, Bound::Unbounded))),
        }
    }
}

/// What is published of the simulator: where each object is served, and how much of the
/// event record.
#[derive(Default)]
struct Seen {
    nodes: BTreeMap<String, ObjKey>,
    pods: BTreeMap<Key, ObjKey>,
    jobs: BTreeMap<String, ObjKey>,
    config_maps: BTreeMap<Key, ObjKey>,
    pdbs: BTreeMap<Key, ObjKey>,
    nodewrights: BTreeMap<String, ObjKey>,
    policies: BTreeMap<String, ObjKey>,
    events: usize,
}

/// The published objects behind a lock of their own: a read of one object waits at most for
/// one object to be stored, never for a whole write of the world (as kube-apiserver serves
/// reads from its watch cache beside the writes to etcd). Only the world's writer changes them.
type SharedStore = Arc<RwLock<Store>>;

fn read_store(store: &RwLock<Store>) -> RwLockReadGuard<'_, Store> {
    // Every change of the store completes under its lock, so a panic elsewhere leaves it whole.
    store.read().unwrap_or_else(|e| e.into_inner())
}

fn write_store(store: &RwLock<Store>) -> RwLockWriteGuard<'_, Store> {
    store.write().unwrap_or_else(|e| e.into_inner())
}

/// The state behind the lock.
pub struct Inner {
    /// The simulated cluster.
    pub sim: SimCluster,
    objects: SharedStore,
    seen: Seen,
    /// The CustomResourceDefinitions served (see [`super::crds`]).
    pub crds: super::crds::CrdRegistry,
    /// The simulated kubelets' lease renewals (see [`super::leases`]).
    pub(super) node_leases: super::leases::NodeLeases,
    log: Arc<Mutex<WatchLog>>,
    fail_updates: u32,
    conflicts: u64,
    /// Updates (PUT/PATCH) accepted that changed nothing, so stored nothing.
    pub(super) unchanged_updates: u64,
    /// Namespaces being deleted: each goes once nothing is left in it.
    terminating: BTreeSet<String>,
}

/// The changes watches report and lists at an older resourceVersion read, behind a lock of
/// their own: a watch collecting what is new never waits for a write in progress.
pub struct WatchLog {
    /// Each resource's changes, in resourceVersion order.
    by_rid: Vec<Retained>,
    /// The resourceVersion the log was last compacted to: no resource reaches further back.
    compacted: u64,
    /// The world's resourceVersion when its last write was published: entries above it
    /// belong to a write still in progress.
    published: u64,
    /// The resources the write in progress changed: only their watches wake.
    touched: Vec<Rid>,
    /// Entries the window let go during the write in progress, freed once the world's lock is
    /// released: a request does not wait while a fleet's old lease renewals are freed.
    forgotten: Vec<Arc<LogEntry>>,
}

/// One resource's window of changes.
#[derive(Default)]
struct Retained {
    entries: VecDeque<Arc<LogEntry>>,
    /// The JSON size of `entries`.
    bytes: usize,
    /// The oldest resourceVersion a watch of this resource can resume from.
    floor: u64,
}

impl WatchLog {
    /// The oldest resourceVersion a watch of `rid` can resume from.
    pub fn floor(&self, rid: Rid) -> u64 {
        self.by_rid
            .get(rid)
            .map_or(self.compacted, |r| r.floor.max(self.compacted))
    }

    /// The resourceVersion every published change is at or below.
    pub fn published(&self) -> u64 {
        self.published
    }

    /// Published changes of `rid` after `rv`, in order.
    pub fn entries_after(&self, rid: Rid, rv: u64) -> impl Iterator<Item = &Arc<LogEntry>> {
        self.retained_after(rid, rv)
            .take_while(|e| e.rv <= self.published)
    }

    /// Changes of `rid` after `rv`, in order, those of a write in progress included.
    fn retained_after(&self, rid: Rid, rv: u64) -> impl Iterator<Item = &Arc<LogEntry>> {
        let entries = self.by_rid.get(rid).map(|r| &r.entries);
        let start = entries.map_or(0, |e| e.partition_point(|e| e.rv <= rv));
        entries.into_iter().flat_map(move |e| e.range(start..))
    }

    fn append(&mut self, entry: LogEntry) {
        if self.by_rid.len() <= entry.rid {
            self.by_rid.resize_with(entry.rid + 1, Retained::default);
        }
        if !self.touched.contains(&entry.rid) {
            self.touched.push(entry.rid);
        }
        let retained = &mut self.by_rid[entry.rid];
        let now = entry.at;
        retained.bytes += entry.size;
        retained.entries.push_back(Arc::new(entry));
        while let Some(oldest) = retained.entries.front() {
            let len = retained.entries.len();
            let expired = now.duration_since(oldest.at) > LOG_WINDOW;
            let kept_anyway = len <= LOG_KEPT_AT_LEAST && retained.bytes <= LOG_KEPT_BYTES;
            if kept_anyway || (len <= LOG_CAPACITY && !expired) {
                break;
            }
            retained.floor = oldest.rv;
            retained.bytes -= oldest.size;
            self.forgotten.extend(retained.entries.pop_front());
        }
    }

    /// Forgets every entry: watches and continue tokens from before `rv` get 410 Gone.
    fn compact_to(&mut self, rv: u64) {
        self.by_rid.clear();
        self.compacted = rv;
        self.published = rv;
    }
}

/// The served world: its objects behind one lock, the watch log and the CRDs that route
/// requests behind their own (taken after the world's, never before), plus channels that
/// wake what waits for the world's changes or for one resource's.
pub struct World {
    inner: Mutex<Inner>,
    /// The objects `inner` publishes, for reads of one object.
    objects: SharedStore,
    /// The log `inner` appends to, for watches.
    log: Arc<Mutex<WatchLog>>,
    /// The CRDs served as of the last write: what routes a request, read without the world.
    crds: Mutex<Arc<super::crds::CrdRegistry>>,
    changed: tokio::sync::watch::Sender<u64>,
    /// Per resource, the resourceVersion of its last change: a watch wakes for its own
    /// resource, not for every lease a kubelet renews.
    kinds: Mutex<Vec<tokio::sync::watch::Sender<u64>>>,
}

fn lock_log(log: &Mutex<WatchLog>) -> MutexGuard<'_, WatchLog> {
    // Every change of the log completes under the lock, so a panic elsewhere leaves it whole.
    log.lock().unwrap_or_else(|e| e.into_inner())
}

fn to_value<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// The `(namespace, name)` of an object.
pub fn key_of(value: &Value) -> ObjKey {
    let meta = value.get("metadata");
    let text = |k: &str| {
        meta.and_then(|m| m.get(k))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    (text("namespace"), text("name"))
}

/// The object's resourceVersion as a number (0 when absent or not numeric).
pub fn rv_of(value: &Value) -> u64 {
    value
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn sim_error(e: ClusterError) -> ApiError {
    match e {
        ClusterError::Api {
            status, message, ..
        } => ApiError::new(status, "InternalError", message),
        other => ApiError::new(500, "InternalError", other.to_string()),
    }
}

fn outcome_error(outcome: Outcome, rid: Rid, name: &str) -> Result<(), ApiError> {
    match outcome {
        Outcome::Done => Ok(()),
        Outcome::NotFound => Err(ApiError::not_found(rid, name)),
        Outcome::AlreadyExists => Err(ApiError::already_exists(rid, name)),
        Outcome::Conflict => Err(ApiError::conflict(
            rid,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )),
        Outcome::EvictionRefused { message } => Err(ApiError::new(429, "TooManyRequests", message)),
    }
}

fn decode<T: serde::de::DeserializeOwned>(value: &Value, rid: Rid) -> Result<T, ApiError> {
    decode_part(value, rid, &key_of(value).1)
}

/// `value`, a part of the object `name` of kind `rid`, decoded as `T` (422 otherwise).
fn decode_part<T: serde::de::DeserializeOwned>(
    value: &Value,
    rid: Rid,
    name: &str,
) -> Result<T, ApiError> {
    T::deserialize(value).map_err(|e| {
        ApiError::invalid(
            rid,
            name,
            format!("cannot decode {}: {e}", resources::def(rid).kind),
        )
    })
}

/// Publishes the objects of one kind the simulator wrote since the last call: work per change,
/// whatever the size of the fleet. An object written with an unchanged resourceVersion (a
/// change made in place) gets a new one, as every change does on a real server.
fn sync_kind<K: Ord + Clone, T>(
    rid: Rid,
    current: &mut Tracked<K, T>,
    served: &mut BTreeMap<K, ObjKey>,
    counter: &mut u64,
    objects: &RwLock<Store>,
    out: &mut Vec<LogEntry>,
) where
    T: Resource + Serialize,
{
    for k in current.take_changed() {
        let Some(obj) = current.get_mut_unrecorded(&k) else {
            let removed = served
                .remove(&k)
                .and_then(|key| write_store(objects).remove(rid, &key));
            if let Some(prev) = removed {
                *counter += 1;
                let mut value = (*prev).clone();
                value["metadata"]["resourceVersion"] = json!(counter.to_string());
                out.push(LogEntry::new(
                    *counter,
                    rid,
                    "DELETED",
                    Arc::new(value),
                    Some(prev),
                ));
            }
            continue;
        };
        let mut value = to_value(obj);
        // The served key comes from the object: a simulator key may leave out its namespace.
        let key = key_of(&value);
        let prev = read_store(objects).get(rid, &key);
        let type_ = match prev.as_deref() {
            Some(p) if *p == value => continue,
            Some(p) => {
                if rv_of(p) == rv_of(&value) {
                    *counter += 1;
                    obj.meta_mut().resource_version = Some(counter.to_string());
                    value["metadata"]["resourceVersion"] = json!(counter.to_string());
                }
                "MODIFIED"
            }
            None => {
                if obj.meta().resource_version.is_none() {
                    *counter += 1;
                    obj.meta_mut().resource_version = Some(counter.to_string());
                    value["metadata"]["resourceVersion"] = json!(counter.to_string());
                }
                "ADDED"
            }
        };
        let value = Arc::new(value);
        served.insert(k, key.clone());
        let prev = write_store(objects).insert(rid, key, value.clone());
        out.push(LogEntry::new(rv_of(&value), rid, type_, value, prev));
    }
}

/// The NodePatch turning `old` into `new` (annotations, labels, taints, unschedulable): how
/// an HTTP write to a Node reaches the simulator's node-patch semantics.
fn node_patch(old: &Node, new: &Node) -> NodePatch {
    let mut patch = NodePatch::new(old.metadata.name.clone().unwrap_or_default());
    let empty = BTreeMap::new();
    let diff = |a: Option<&BTreeMap<String, String>>, b: Option<&BTreeMap<String, String>>| {
        let (a, b) = (a.unwrap_or(&empty), b.unwrap_or(&empty));
        let mut out = BTreeMap::new();
        for (k, v) in b {
            if a.get(k) != Some(v) {
                out.insert(k.clone(), Some(v.clone()));
            }
        }
        for k in a.keys() {
            if !b.contains_key(k) {
                out.insert(k.clone(), None);
            }
        }
        out
    };
    patch.annotations = diff(
        old.metadata.annotations.as_ref(),
        new.metadata.annotations.as_ref(),
    );
    patch.labels = diff(old.metadata.labels.as_ref(), new.metadata.labels.as_ref());
    let taints = |n: &Node| {
        n.spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default()
    };
    let (before, after) = (taints(old), taints(new));
    if before != after {
        patch.remove_taints = before.iter().map(|t| t.key.clone()).collect();
        patch.add_taints = after;
    }
    let unschedulable = |n: &Node| {
        n.spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false)
    };
    if unschedulable(old) != unschedulable(new) {
        patch.unschedulable = Some(unschedulable(new));
    }
    patch
}

fn conditions(node: &Node) -> Vec<NodeCondition> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default()
}

fn first_error(violations: &[nodewright_schema::validate::Violation]) -> Option<String> {
    let errors: Vec<String> = violations
        .iter()
        .filter(|v| v.is_error())
        .map(|v| v.to_string())
        .collect();
    (!errors.is_empty()).then(|| errors.join("; "))
}

/// A NodeWright as admission would accept it (422 otherwise).
fn admit_nodewright(value: &Value, old: Option<&NodeWright>) -> Result<NodeWright, ApiError> {
    let (typed, violations) = validate_nodewright_value(value, old, None);
    if let Some(message) = first_error(&violations) {
        return Err(ApiError::invalid(
            resources::NODEWRIGHTS,
            &key_of(value).1,
            message,
        ));
    }
    typed.ok_or_else(|| {
        ApiError::invalid(
            resources::NODEWRIGHTS,
            &key_of(value).1,
            "the object does not decode as a NodeWright".into(),
        )
    })
}

/// A DeploymentPolicy as admission would store it, defaulted (422 otherwise).
fn admit_policy(value: &Value) -> Result<DeploymentPolicy, ApiError> {
    let (typed, violations) = validate_policy_value(value);
    if let Some(message) = first_error(&violations) {
        return Err(ApiError::invalid(
            resources::POLICIES,
            &key_of(value).1,
            message,
        ));
    }
    typed.ok_or_else(|| {
        ApiError::invalid(
            resources::POLICIES,
            &key_of(value).1,
            "the object does not decode as a DeploymentPolicy".into(),
        )
    })
}

/// The JSON type name Go's decoder reports for `value`.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A request body that is not a JSON object cannot be an object of any kind: 400, in the
/// words of the apiserver's create handler.
fn require_object(rid: Rid, value: &Value) -> Result<(), ApiError> {
    if value.is_object() {
        return Ok(());
    }
    Err(ApiError::bad_request(format!(
        "the object provided is unrecognized (must be of type {}): couldn't get version/kind; \
         json parse error: json: cannot unmarshal {} into Go value of type struct {{ APIVersion \
         string; Kind string }}",
        resources::def(rid).kind,
        json_type(value)
    )))
}

/// Where the identity fields of a written object come from.
enum Identity<'a> {
    /// An update: uid, creation and deletion timestamps stay those of the stored object.
    Kept(&'a Value),
    /// A create: a fresh uid and the creation time.
    New {
        /// The uid.
        uid: String,
        /// `creationTimestamp`.
        created: Value,
    },
}

/// Whether two versions of an object differ in nothing but their resourceVersion.
fn same_but_version(a: &Value, b: &Value) -> bool {
    type Map = serde_json::Map<String, Value>;
    // Equal maps, `ignored` aside; the order of keys does not count.
    fn same(a: &Map, b: &Map, ignored: &str) -> bool {
        let counted = |m: &Map| m.keys().filter(|k| *k != ignored).count();
        counted(a) == counted(b)
            && a.iter()
                .filter(|(k, _)| *k != ignored)
                .all(|(k, v)| b.get(k) == Some(v))
    }
    fn meta(v: &Value) -> Option<&Map> {
        v.get("metadata").and_then(Value::as_object)
    }
    match (a.as_object(), b.as_object(), meta(a), meta(b)) {
        (Some(a), Some(b), Some(ma), Some(mb)) => {
            same(ma, mb, "resourceVersion") && same(a, b, "metadata")
        }
        _ => a == b,
    }
}

/// Puts the fields the server owns on an object being written: identity, `apiVersion` and
/// `kind` of the resource. The resourceVersion is the caller's: a dry run assigns none.
fn stamp(rid: Rid, value: &mut Value, identity: Identity<'_>) {
    if !value["metadata"].is_object() {
        value["metadata"] = json!({});
    }
    let meta = &mut value["metadata"];
    match identity {
        Identity::Kept(old) => {
            for k in ["uid", "creationTimestamp", "deletionTimestamp"] {
                if let Some(v) = old.pointer(&format!("/metadata/{k}")) {
                    meta[k] = v.clone();
                }
            }
        }
        Identity::New { uid, created } => {
            meta["uid"] = json!(uid);
            meta["creationTimestamp"] = created;
        }
    }
    let def = resources::def(rid);
    value["apiVersion"] = json!(def.api_version());
    value["kind"] = json!(def.kind);
}

/// `value` as decoding, admission and defaulting of its kind leave it: what a write would
/// store (422 when the kind refuses it). Kinds the server keeps untyped are stored as sent.
fn admitted(rid: Rid, value: &Value, old: Option<&Value>, status: bool) -> Result<Value, ApiError> {
    Ok(match rid {
        resources::NODES => to_value(&decode::<Node>(value, rid)?),
        resources::PODS if old.is_none() => {
            let mut pod = decode::<Pod>(value, rid)?;
            crate::sim::pods::default_pod(&mut pod);
            to_value(&pod)
        }
        resources::PODS => to_value(&decode::<Pod>(value, rid)?),
        resources::JOBS => to_value(&decode::<Job>(value, rid)?),
        resources::CONFIG_MAPS => to_value(&decode::<ConfigMap>(value, rid)?),
        resources::PDBS => to_value(&decode::<PodDisruptionBudget>(value, rid)?),
        resources::NODEWRIGHTS if status => to_value(&decode::<NodeWright>(value, rid)?),
        resources::NODEWRIGHTS => {
            let before = old.map(|o| decode::<NodeWright>(o, rid)).transpose()?;
            to_value(&admit_nodewright(value, before.as_ref())?)
        }
        resources::POLICIES => to_value(&admit_policy(value)?),
        _ => value.clone(),
    })
}

/// The apiserver's validation of the modelled fields (422 with every field error).
fn admit_fields(rid: Rid, name: &str, value: &Value) -> Result<(), ApiError> {
    let errors = super::admission::validate(rid, value);
    if errors.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid_fields(rid, name, &errors))
}

/// An update names the object of its URL: a body naming another (or, after a JSON patch
/// removing `/metadata`, none) is a 400, in the words of the apiserver's name check.
fn same_name(key: &ObjKey, new: &Value) -> Result<(), ApiError> {
    let name = new
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if name != key.1 {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({name}) does not match the name on the URL ({})",
            key.1
        )));
    }
    Ok(())
}

/// Kinds whose objects (or status) only the simulated controllers write: 405 through the API.
fn writable(rid: Rid, status: bool) -> Result<(), ApiError> {
    match (rid, status) {
        (resources::JOBS | resources::PODS, false) => Ok(()),
        (resources::PODS | resources::JOBS | resources::PDBS, _) => Err(ApiError::new(
            405,
            "MethodNotAllowed",
            format!(
                "{} of {} are written by the simulated controllers, not through the API",
                if status { "status" } else { "objects" },
                resources::def(rid).plural
            ),
        )),
        _ => Ok(()),
    }
}

/// The 409 of an update whose body names another resourceVersion or uid than the stored one.
fn update_preconditions(rid: Rid, name: &str, old: &Value, new: &Value) -> Result<(), ApiError> {
    let wanted_rv = new
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str);
    let current_rv = old
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str);
    if wanted_rv.is_some() && wanted_rv != current_rv {
        return Err(ApiError::conflict(
            rid,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        ));
    }
    let wanted_uid = new.pointer("/metadata/uid").and_then(Value::as_str);
    let current_uid = old.pointer("/metadata/uid").and_then(Value::as_str);
    if wanted_uid.is_some() && wanted_uid != current_uid {
        return Err(ApiError::conflict(
            rid,
            name,
            &format!(
                "Precondition failed: UID in precondition: {}, UID in object meta: {}",
                wanted_uid.unwrap_or_default(),
                current_uid.unwrap_or_default()
            ),
        ));
    }
    Ok(())
}

/// The 409 of a DELETE whose preconditions name another uid or resourceVersion.
fn delete_preconditions(
    rid: Rid,
    name: &str,
    old: &Value,
    opts: &DeleteOpts,
) -> Result<(), ApiError> {
    let uid = old.pointer("/metadata/uid").and_then(Value::as_str);
    if opts.uid.is_some() && opts.uid.as_deref() != uid {
        return Err(ApiError::conflict(
            rid,
            name,
            &format!(
                "Precondition failed: UID in precondition: {}, UID in object meta: {}",
                opts.uid.clone().unwrap_or_default(),
                uid.unwrap_or_default()
            ),
        ));
    }
    let rv = old
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str);
    if opts.resource_version.is_some() && opts.resource_version.as_deref() != rv {
        return Err(ApiError::conflict(
            rid,
            name,
            "Precondition failed: the resourceVersion in the precondition does not match",
        ));
    }
    Ok(())
}

fn has_finalizers(value: &Value) -> bool {
    value
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

/// Whether the simulator owns the objects of `rid` (the server only publishes them).
fn sim_kind(rid: Rid) -> bool {
    matches!(
        rid,
        resources::NODES
            | resources::PODS
            | resources::JOBS
            | resources::CONFIG_MAPS
            | resources::PDBS
            | resources::NODEWRIGHTS
            | resources::POLICIES
    )
}

/// A refused eviction as the apiserver answers it.
fn eviction_error(e: EvictionError) -> ApiError {
    match e {
        EvictionError::NotFound(name) => ApiError::not_found(resources::PODS, &name),
        EvictionError::Refused { message, cause } => ApiError::new(429, "TooManyRequests", message)
            .with_details(json!({
                "causes": [{"reason": "DisruptionBudget", "message": cause}],
            })),
        e @ EvictionError::MultiplePdbs(_) => ApiError::new(500, "InternalError", e.to_string()),
    }
}

/// A server-side apply body as an object named by the URL (400 when it is no object).
fn applied_object(rid: Rid, key: &ObjKey, mut applied: Value) -> Result<Value, ApiError> {
    if !applied.is_object() {
        return Err(ApiError::bad_request(format!(
            "error decoding YAML: json: cannot unmarshal {} into Go value of type \
             map[string]interface {{}}",
            json_type(&applied)
        )));
    }
    if !applied["metadata"].is_object() {
        applied["metadata"] = json!({});
    }
    applied["metadata"]["name"] = json!(key.1);
    if resources::def(rid).namespaced {
        applied["metadata"]["namespace"] = json!(key.0);
    }
    Ok(applied)
}

/// The applier of a ConfigMap owns its whole `data` map: keys it no longer declares go away.
fn own_config_map_data(candidate: &mut Value, applied: &Value) {
    candidate["data"] = applied.get("data").cloned().unwrap_or(Value::Null);
}

/// One page of a list.
#[derive(Debug)]
pub struct Page {
    /// The objects, in key order.
    pub items: Vec<Arc<Value>>,
    /// The resourceVersion the page shows the objects at.
    pub resource_version: u64,
    /// The last key of this page when more objects follow.
    pub continue_after: Option<ObjKey>,
}

/// Options of a DELETE.
#[derive(Clone, Debug, Default)]
pub struct DeleteOpts {
    /// `dryRun=All`: check and answer, delete nothing.
    pub dry_run: bool,
    /// `gracePeriodSeconds`.
    pub grace: Option<i64>,
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
}

impl World {
    /// Wraps a simulated cluster and publishes its objects.
    pub fn new(sim: SimCluster) -> Self {
        let mut inner = Inner {
            sim,
            objects: SharedStore::default(),
            crds: Default::default(),
            node_leases: Default::default(),
            seen: Seen::default(),
            log: Arc::new(Mutex::new(WatchLog {
                by_rid: Vec::new(),
                compacted: 0,
                published: 0,
                touched: Vec::new(),
                forgotten: Vec::new(),
            })),
            fail_updates: 0,
            conflicts: 0,
            unchanged_updates: 0,
            terminating: BTreeSet::new(),
        };
        inner.sim.track_changes();
        inner.seed();
        inner.publish();
        inner.renew_node_leases(usize::MAX);
        inner.compact();
        let (changed, _) = tokio::sync::watch::channel(inner.sim.resource_version);
        World {
            objects: inner.objects.clone(),
            log: inner.log.clone(),
            crds: Mutex::new(Arc::new(inner.crds.clone())),
            inner: Mutex::new(inner),
            changed,
            kinds: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A handler that panicked mid-write left the world as it was at that point; the
        // simulator keeps its own invariants per operation, so serving on is the best choice.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the world, then publishes its changes and wakes the watches.
    pub fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        let mut inner = self.lock();
        let out = f(&mut inner);
        inner.publish();
        let rv = inner.sim.resource_version;
        let (touched, forgotten) = {
            let mut log = lock_log(&self.log);
            log.published = rv;
            (
                std::mem::take(&mut log.touched),
                std::mem::take(&mut log.forgotten),
            )
        };
        {
            let mut crds = self.crds.lock().unwrap_or_else(|e| e.into_inner());
            if crds.changes() != inner.crds.changes() {
                *crds = Arc::new(inner.crds.clone());
            }
        }
        drop(inner);
        drop(forgotten);
        self.changed.send_if_modified(|seen| {
            let moved = *seen != rv;
            *seen = rv;
            moved
        });
        let kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        for rid in touched {
            if let Some(kind) = kinds.get(rid) {
                kind.send_replace(rv);
            }
        }
        out
    }

    /// Lets the kubelets renew a batch of the leases due; whether more are due. Renewals are
    /// writes of their own, never part of a client's: a request waits for one batch at most
    /// and pays for none.
    pub fn renew_node_leases(&self) -> bool {
        self.with(|inner| {
            inner.renew_node_leases(super::leases::RENEWALS_PER_WRITE);
            inner.leases_due()
        })
    }

    /// One object as published, without waiting for a write in progress.
    pub fn get(&self, rid: Rid, key: &ObjKey) -> Option<Arc<Value>> {
        read_store(&self.objects).get(rid, key)
    }

    /// Reads the world without changing it.
    pub fn read<R>(&self, f: impl FnOnce(&Inner) -> R) -> R {
        f(&self.lock())
    }

    /// The CRDs served, without waiting for a write in progress.
    pub fn crds(&self) -> Arc<super::crds::CrdRegistry> {
        self.crds.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Reads the watch log alone, without waiting for a write in progress.
    pub fn read_log<R>(&self, f: impl FnOnce(&WatchLog) -> R) -> R {
        f(&lock_log(&self.log))
    }

    /// Runs `f` on the simulated cluster (tests, scenario steps), then publishes.
    pub fn with_sim<R>(&self, f: impl FnOnce(&mut SimCluster) -> R) -> R {
        self.with(|inner| f(&mut inner.sim))
    }

    /// Makes the next `n` updates (PUT/PATCH) answer 409 Conflict, as a concurrent writer
    /// would cause: a fault to test optimistic-concurrency retries against.
    pub fn fail_next_updates(&self, n: u32) {
        self.lock().fail_updates = n;
    }

    /// How many updates were refused with 409 Conflict so far (stale resourceVersion or
    /// UID precondition, or injected).
    pub fn conflicts(&self) -> u64 {
        self.lock().conflicts
    }

    /// How many updates (PUT/PATCH) were accepted without changing anything: writes a
    /// controller could have left out.
    pub fn unchanged_updates(&self) -> u64 {
        self.lock().unchanged_updates
    }

    /// A receiver that changes whenever the world does.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// A receiver that changes whenever a change of `rid` is published.
    pub fn subscribe_kind(&self, rid: Rid) -> tokio::sync::watch::Receiver<u64> {
        let mut kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        if kinds.len() <= rid {
            kinds.resize_with(rid + 1, || tokio::sync::watch::channel(0).0);
        }
        kinds[rid].subscribe()
    }
}

impl Inner {
    /// The current resourceVersion (of the whole world, as lists report it).
    pub fn resource_version(&self) -> u64 {
        self.sim.resource_version
    }

    /// The oldest resourceVersion a watch of `rid` can resume from.
    pub fn floor(&self, rid: Rid) -> u64 {
        lock_log(&self.log).floor(rid)
    }

    /// One object.
    pub fn get(&self, rid: Rid, key: &ObjKey) -> Option<Arc<Value>> {
        read_store(&self.objects).get(rid, key)
    }

    /// Objects of a resource in a namespace (or all), selected.
    pub fn list(&self, rid: Rid, namespace: Option<&str>, sel: &Selectors) -> Vec<Arc<Value>> {
        read_store(&self.objects)[rid]
            .iter()
            .filter(|((ns, _), _)| namespace.is_none_or(|n| n == ns))
            .filter(|(_, v)| sel.matches(v))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// One page of `rid`'s objects as they were at resourceVersion `at` (the current one
    /// when `None`): in key order after `after`, in `namespace` (or all), selected, at most
    /// `limit`. A page as of an earlier resourceVersion is the current objects with the
    /// changes logged since undone, so the work is the page plus those changes. `None` when
    /// `at` is older than the log reaches (compacted).
    pub fn list_page(
        &self,
        rid: Rid,
        namespace: Option<&str>,
        sel: &Selectors,
        at: Option<u64>,
        after: Option<&ObjKey>,
        limit: Option<usize>,
    ) -> Option<Page> {
        let at = at.unwrap_or_else(|| self.resource_version());
        // The state of every key changed since `at`, as it was at `at` (the first change
        // after `at` says what came before it).
        let mut then: BTreeMap<ObjKey, Option<Arc<Value>>> = BTreeMap::new();
        {
            let log = lock_log(&self.log);
            if at < log.floor(rid) {
                return None;
            }
            // Under the world's lock no write is in progress: every entry counts.
            for entry in log.retained_after(rid, at) {
                let before = match entry.type_ {
                    "ADDED" => None,
                    _ => entry.prev.clone(),
                };
                then.entry(key_of(&entry.object)).or_insert(before);
            }
        }
        let start = match (after, namespace) {
            (Some(key), _) => Bound::Excluded(key.clone()),
            (None, Some(ns)) => Bound::Included((ns.to_string(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        // The index holds bound pods only: `spec.nodeName=` reads every pod.
        let node = sel
            .fields
            .required("spec.nodeName")
            .filter(|node| !node.is_empty());
        let objects = read_store(&self.objects);
        let mut now = objects.range(rid, start.clone(), node).peekable();
        let mut past = then.range((start, Bound::Unbounded)).peekable();
        let mut items = Vec::new();
        let mut last: Option<ObjKey> = None;
        loop {
            // Merge the two key-ordered sources; a key changed since `at` reads from `then`.
            let (key, object) = match (now.peek(), past.peek()) {
                (None, None) => break,
                (Some((k, _)), Some((p, _))) if k < p => now.next().map(|(k, v)| (k, Some(v)))?,
                (Some(_), None) => now.next().map(|(k, v)| (k, Some(v)))?,
                (Some((k, _)), Some((p, _))) if k == p => {
                    now.next();
                    past.next().map(|(k, v)| (k, v.as_ref()))?
                }
                _ => past.next().map(|(k, v)| (k, v.as_ref()))?,
            };
            if namespace.is_some_and(|ns| key.0 != ns) {
                break;
            }
            let Some(object) = object else { continue };
            if !sel.matches(object) {
                continue;
            }
            if limit.is_some_and(|l| items.len() >= l) {
                return Some(Page {
                    items,
                    resource_version: at,
                    continue_after: last,
                });
            }
            items.push(object.clone());
            last = Some(key.clone());
        }
        Some(Page {
            items,
            resource_version: at,
            continue_after: None,
        })
    }

    /// Compacts the watch log as the apiserver's periodic etcd compaction does: watches
    /// and continue tokens from before now get 410 Gone.
    pub fn compact(&mut self) {
        lock_log(&self.log).compact_to(self.resource_version());
    }

    fn next_rv(&mut self) -> u64 {
        self.sim.resource_version += 1;
        self.sim.resource_version
    }

    fn append(&mut self, entry: LogEntry) {
        lock_log(&self.log).append(entry);
    }

    /// Namespaces and CRDs a fresh server has.
    fn seed(&mut self) {
        let mut namespaces: Vec<String> = vec![
            "default".into(),
            "kube-system".into(),
            super::leases::NODE_LEASE_NAMESPACE.into(),
            self.sim.namespace().to_string(),
        ];
        for (ns, _) in self.sim.pods.keys() {
            namespaces.push(ns.clone());
        }
        namespaces.sort();
        namespaces.dedup();
        for ns in namespaces {
            let value = json!({
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            });
            self.put_generic(resources::NAMESPACES, value, None);
        }
        for (_, crd) in nodewright_schema::crd::all() {
            let mut value = to_value(&crd);
            value["status"] = json!({
                "acceptedNames": value["spec"]["names"].clone(),
                "conditions": [{"type": "Established", "status": "True"}],
                "storedVersions": ["v1alpha1"],
            });
            self.put_generic(resources::CRDS, value, None);
        }
    }

    /// Stores an object the server itself keeps, with a new resourceVersion; `old` is the
    /// previous value (identity fields are kept from it).
    pub(super) fn put_generic(
        &mut self,
        rid: Rid,
        value: Value,
        old: Option<&Value>,
    ) -> Arc<Value> {
        self.put_generic_as(rid, value, old, None)
    }

    /// [`Self::put_generic`], with the uid of a new object given (an owner other objects
    /// already reference).
    pub(super) fn put_generic_as(
        &mut self,
        rid: Rid,
        mut value: Value,
        old: Option<&Value>,
        uid: Option<String>,
    ) -> Arc<Value> {
        if rid == resources::CRDS {
            super::crds::establish(&mut value, &to_value(&util::time(self.sim.now())));
        }
        let identity = match old {
            Some(old) => Identity::Kept(old),
            None => Identity::New {
                uid: uid.unwrap_or_else(|| self.sim.rng.uid()),
                created: to_value(&util::time(self.sim.now())),
            },
        };
        stamp(rid, &mut value, identity);
        // A write that changes nothing is not stored, as the apiserver skips it: no new
        // resourceVersion, no watch event.
        if let Some(old) = old
            && same_but_version(old, &value)
            && let Some(stored) = self.get(rid, &key_of(&value))
        {
            return stored;
        }
        let key = key_of(&value);
        let stored = self.store(rid, key, value);
        if rid == resources::CRDS && stored.pointer("/metadata/deletionTimestamp").is_none() {
            self.crds.register(&stored);
        }
        stored
    }

    /// Stores `value`, stamped and admitted, under `key` at a fresh resourceVersion, and logs
    /// the change for watches.
    pub(super) fn store(&mut self, rid: Rid, key: ObjKey, mut value: Value) -> Arc<Value> {
        let rv = self.next_rv();
        value["metadata"]["resourceVersion"] = Value::String(rv.to_string());
        let value = Arc::new(value);
        let prev = write_store(&self.objects).insert(rid, key, value.clone());
        self.append(LogEntry::new(
            rv,
            rid,
            if prev.is_some() { "MODIFIED" } else { "ADDED" },
            value.clone(),
            prev,
        ));
        value
    }

    pub(super) fn remove_generic(&mut self, rid: Rid, key: &ObjKey) {
        if rid == resources::CRDS
            && let Some(served) = self.crds.unregister(&key.1)
        {
            // The CRD's custom resources go with it, as the apiextensions finalizer does.
            let keys: Vec<ObjKey> = read_store(&self.objects)[served].keys().cloned().collect();
            for key in keys {
                self.remove_generic(served, &key);
            }
        }
        let removed = write_store(&self.objects).remove(rid, key);
        if let Some(old) = removed {
            let rv = self.next_rv();
            let mut value = (*old).clone();
            value["metadata"]["resourceVersion"] = json!(rv.to_string());
            self.append(LogEntry::new(
                rv,
                rid,
                "DELETED",
                Arc::new(value),
                Some(old),
            ));
        }
    }

    /// Publishes every change of the simulator's objects since the last call.
    pub fn publish(&mut self) {
        let mut out = Vec::new();
        let Inner {
            sim, objects, seen, ..
        } = self;
        let counter = &mut sim.resource_version;
        sync_kind(
            resources::NODES,
            &mut sim.nodes,
            &mut seen.nodes,
            counter,
            objects,
            &mut out,
        );
        sync_kind(
            resources::PODS,
            &mut sim.pods,
            &mut seen.pods,
            counter,
            objects,
            &mut out,
        );
        sync_kind(
            resources::JOBS,
            &mut sim.jobs,
            &mut seen.jobs,
            counter,
            objects,
            &mut out,
        );
        sync_kind(
            resources::CONFIG_MAPS,
            &mut sim.config_maps,
            &mut seen.config_maps,
            counter,
            objects,
            &mut out,
        );
        sync_kind(
            resources::PDBS,
            &mut sim.pdbs,
            &mut seen.pdbs,
            counter,
            objects,
            &mut out,
        );
        sync_kind(
            resources::NODEWRIGHTS,
            &mut sim.nodewrights,
            &mut seen.nodewrights,
            counter,
            objects,
            &mut out,
        );
        sync_kind(
            resources::POLICIES,
            &mut sim.policies,
            &mut seen.policies,
            counter,
            objects,
            &mut out,
        );
        out.sort_by_key(|e| e.rv);
        let nodes: Vec<(String, bool)> = out
            .iter()
            .filter(|e| e.rid == resources::NODES)
            .map(|e| (key_of(&e.object).1, e.type_ == "DELETED"))
            .collect();
        let added_pods: Vec<Arc<Value>> = out
            .iter()
            .filter(|e| e.rid == resources::PODS && e.type_ == "ADDED")
            .map(|e| e.object.clone())
            .collect();
        for entry in out {
            self.append(entry);
        }
        self.publish_workload_owners(&added_pods);
        // Events the simulator recorded (in-process, or through events.k8s.io) appear as core
        // v1 Events, the way the apiserver serves one store under both groups.
        let fresh: Vec<_> = self.sim.events[self.seen.events..].to_vec();
        self.seen.events = self.sim.events.len();
        for (i, ev) in fresh.into_iter().enumerate() {
            let (api_version, kind) = if ev.object_kind == "Node" {
                ("v1".to_string(), "Node".to_string())
            } else {
                (keys::API_VERSION.to_string(), ev.object_kind.clone())
            };
            let at = to_value(&util::time(ev.at));
            let value = json!({
                "metadata": {
                    "name": format!("{}.{:x}", ev.object, self.seen.events - i),
                    "namespace": "default",
                },
                "involvedObject": {"apiVersion": api_version, "kind": kind, "name": ev.object},
                "type": ev.type_,
                "reason": ev.reason,
                "message": ev.message,
                "firstTimestamp": at,
                "lastTimestamp": at,
                "count": 1,
                "source": {"component": "nodewright-gitops"},
            });
            self.put_generic(resources::CORE_EVENTS, value, None);
        }
        for (node, deleted) in nodes {
            self.node_changed(&node, deleted);
        }
        if !self.terminating.is_empty() {
            self.finish_namespaces();
        }
    }

    /// One object, or 404.
    pub fn require(&self, rid: Rid, key: &ObjKey) -> Result<Arc<Value>, ApiError> {
        self.get(rid, key)
            .ok_or_else(|| ApiError::not_found(rid, &key.1))
    }

    /// What every create checks before its kind's rules: a JSON object, a name (or
    /// `generateName`, drawn with `rng`), and no object of that name yet. Returns the key and
    /// the object with its name and namespace set.
    fn prepare_create(
        &self,
        rid: Rid,
        namespace: &str,
        mut value: Value,
        rng: &mut util::Rng,
    ) -> Result<(ObjKey, Value), ApiError> {
        require_object(rid, &value)?;
        if !value["metadata"].is_object() {
            value["metadata"] = json!({});
        }
        if resources::def(rid).namespaced {
            value["metadata"]["namespace"] = json!(namespace);
        }
        let name = match value.pointer("/metadata/name").and_then(Value::as_str) {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => match value
                .pointer("/metadata/generateName")
                .and_then(Value::as_str)
            {
                Some(prefix) => format!("{prefix}{}", rng.suffix()),
                None => {
                    return Err(ApiError::invalid(
                        rid,
                        "",
                        "metadata.name: Required value: name or generateName is required".into(),
                    ));
                }
            },
        };
        value["metadata"]["name"] = json!(name);
        if resources::def(rid).namespaced {
            self.namespace_lifecycle(rid, namespace, &name)?;
        }
        admit_fields(rid, &name, &value)?;
        let key: ObjKey = (
            if resources::def(rid).namespaced {
                namespace.to_string()
            } else {
                String::new()
            },
            name.clone(),
        );
        if self.get(rid, &key).is_some() {
            return Err(ApiError::already_exists(rid, &name));
        }
        Ok((key, value))
    }

    /// The NamespaceLifecycle admission plugin: nothing is created in a namespace that does
    /// not exist (404 for the namespace) or is being deleted (403).
    fn namespace_lifecycle(&self, rid: Rid, namespace: &str, name: &str) -> Result<(), ApiError> {
        let Some(ns) = self.get(
            resources::NAMESPACES,
            &(String::new(), namespace.to_string()),
        ) else {
            return Err(ApiError::not_found(resources::NAMESPACES, namespace));
        };
        if ns.pointer("/metadata/deletionTimestamp").is_some() {
            return Err(ApiError::forbidden(
                rid,
                name,
                &format!(
                    "unable to create new content in namespace {namespace} because it is being terminated"
                ),
            ));
        }
        Ok(())
    }

    /// A namespace as its deletion leaves it: `Terminating`, with a deletionTimestamp.
    fn terminating_namespace(&self, old: &Value) -> Value {
        let mut value = old.clone();
        if value.pointer("/metadata/deletionTimestamp").is_none() {
            value["metadata"]["deletionTimestamp"] = to_value(&util::time(self.sim.now()));
        }
        value["status"] = json!({"phase": "Terminating"});
        value
    }

    /// Deleting a namespace: it turns `Terminating` and its contents are deleted; it goes
    /// itself once they are gone (see [`Self::finish_namespaces`]).
    fn terminate_namespace(&mut self, key: &ObjKey, old: &Arc<Value>) {
        let namespace = key.1.clone();
        if old.pointer("/metadata/deletionTimestamp").is_none() {
            let value = self.terminating_namespace(old);
            self.put_generic(resources::NAMESPACES, value, Some(old));
        }
        self.terminating.insert(namespace.clone());
        self.sim.delete_namespace_contents(&namespace);
        let rids: Vec<Rid> = self.all_rids().collect();
        for rid in rids {
            if !resources::def(rid).namespaced || sim_kind(rid) {
                continue;
            }
            for key in self.keys_in(rid, &namespace) {
                self.remove_generic(rid, &key);
            }
        }
        self.finish_namespaces();
    }

    /// Every resource this server serves: the built-ins and the registry's custom ones.
    fn all_rids(&self) -> impl Iterator<Item = Rid> + '_ {
        (0..RESOURCES.len()).chain(self.crds.rids())
    }

    /// The keys of `rid`'s objects in `namespace`.
    fn keys_in(&self, rid: Rid, namespace: &str) -> Vec<ObjKey> {
        read_store(&self.objects)[rid]
            .range((namespace.to_string(), String::new())..)
            .map(|(key, _)| key)
            .take_while(|(ns, _)| ns == namespace)
            .cloned()
            .collect()
    }

    /// Removes each terminating namespace that has nothing left in it.
    fn finish_namespaces(&mut self) {
        let empty: Vec<String> = self
            .terminating
            .iter()
            .filter(|ns| {
                self.all_rids()
                    .filter(|rid| resources::def(*rid).namespaced)
                    .all(|rid| self.keys_in(rid, ns).is_empty())
            })
            .cloned()
            .collect();
        for ns in empty {
            self.terminating.remove(&ns);
            self.remove_generic(resources::NAMESPACES, &(String::new(), ns));
        }
    }

    /// What a write of an object the server keeps itself stores: a CRD validated as
    /// apiextensions validates it, a custom resource admitted by its CRD's schema and
    /// strategy ([`super::crds::CrdRegistry::admit`]); other kinds as sent.
    fn admit_generic(
        &self,
        rid: Rid,
        old: Option<&Value>,
        new: Value,
        status: bool,
    ) -> Result<Value, ApiError> {
        let name = key_of(&new).1;
        if rid == resources::CRDS {
            let errors = super::crds::validate_crd(&new);
            if !errors.is_empty() {
                return Err(ApiError::invalid_fields(rid, &name, &errors));
            }
            return Ok(new);
        }
        if self.crds.by_rid(rid).is_none() {
            return Ok(new);
        }
        self.crds
            .admit(rid, old, &new, status)
            .map_err(|errors| ApiError::invalid_fields(rid, &name, &errors))
    }

    /// POST with `dryRun=All`: every check of [`Self::create`] and the object as it would be
    /// stored — without a resourceVersion, since none was assigned — and nothing written.
    pub fn create_dry_run(
        &self,
        rid: Rid,
        namespace: &str,
        value: Value,
    ) -> Result<Value, ApiError> {
        // A copy of the generator: the uid and name are those a create now would give, and
        // the simulator's sequence of names is left as it was.
        let mut rng = self.sim.rng.clone();
        let (_, value) = self.prepare_create(rid, namespace, value, &mut rng)?;
        let value = self.admit_generic(rid, None, value, false)?;
        let mut stored = admitted(rid, &value, None, false)?;
        stamp(
            rid,
            &mut stored,
            Identity::New {
                uid: rng.uid(),
                created: to_value(&util::time(self.sim.now())),
            },
        );
        if let Some(meta) = stored["metadata"].as_object_mut() {
            meta.remove("resourceVersion");
        }
        Ok(stored)
    }

    /// POST: creates an object.
    pub fn create(&mut self, rid: Rid, namespace: &str, value: Value) -> Result<ObjKey, ApiError> {
        let mut rng = self.sim.rng.clone();
        let prepared = self.prepare_create(rid, namespace, value, &mut rng);
        self.sim.rng = rng;
        let (key, value) = prepared?;
        let name = key.1.clone();
        match rid {
            resources::NODES => {
                let node: Node = decode(&value, rid)?;
                let spec = node.spec.clone().unwrap_or_default();
                self.sim.add_node(NodeInput {
                    name: name.clone(),
                    labels: node.metadata.labels.clone().unwrap_or_default(),
                    annotations: node.metadata.annotations.clone().unwrap_or_default(),
                    taints: spec.taints.unwrap_or_default(),
                    unschedulable: spec.unschedulable.unwrap_or(false),
                });
            }
            resources::JOBS => {
                let job: Job = decode(&value, rid)?;
                let outcome = self
                    .sim
                    .execute(&Action::CreateJob(job.into()))
                    .map_err(sim_error)?;
                outcome_error(outcome, rid, &name)?;
            }
            resources::PODS => {
                let mut pod: Pod = decode(&value, rid)?;
                crate::sim::pods::default_pod(&mut pod);
                let outcome = self.sim.create_api_pod(pod);
                outcome_error(outcome, rid, &name)?;
            }
            resources::CONFIG_MAPS => {
                let cm: ConfigMap = decode(&value, rid)?;
                let outcome = self
                    .sim
                    .execute(&Action::UpsertConfigMap(Box::new(cm)))
                    .map_err(sim_error)?;
                outcome_error(outcome, rid, &name)?;
            }
            resources::PDBS => {
                let pdb: PodDisruptionBudget = decode(&value, rid)?;
                let spec = pdb.spec.unwrap_or_default();
                self.sim.add_pdb(PdbInput {
                    name: name.clone(),
                    namespace: namespace.to_string(),
                    selector: spec
                        .selector
                        .and_then(|s| s.match_labels)
                        .unwrap_or_default(),
                    min_available: spec.min_available,
                    max_unavailable: spec.max_unavailable,
                });
            }
            resources::NODEWRIGHTS => {
                let nw = admit_nodewright(&value, None)?;
                self.sim.apply_nodewright(&nw, None);
            }
            resources::POLICIES => {
                let policy = admit_policy(&value)?;
                self.sim.apply_policy(&policy);
            }
            resources::EVENTS => {
                let regarding = value.get("regarding").cloned().unwrap_or(Value::Null);
                let text = |v: &Value, k: &str| {
                    v.get(k)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string()
                };
                let kind = text(&regarding, "kind");
                let object = text(&regarding, "name");
                let type_ = text(&value, "type");
                let reason = text(&value, "reason");
                let note = text(&value, "note");
                self.sim
                    .record_event(&kind, &object, &type_, &reason, &note);
                self.put_generic(rid, value, None);
            }
            _ => {
                let value = self.admit_generic(rid, None, value, false)?;
                self.put_generic(rid, value, None);
            }
        }
        Ok(key)
    }

    /// PUT or PATCH after the new value was computed: checks the preconditions the body
    /// carries (resourceVersion, uid) and commits through the simulator.
    pub fn update(
        &mut self,
        rid: Rid,
        key: &ObjKey,
        status: bool,
        new: Value,
    ) -> Result<(), ApiError> {
        let result = self.update_checked(rid, key, status, new);
        if matches!(&result, Err(e) if e.code == 409) {
            self.conflicts += 1;
        }
        result
    }

    /// The node as served: the simulator's own object (the served copy is its encoding), so
    /// a node write decodes only the object written.
    fn served_node(&self, served: &Value, name: &str) -> Result<Cow<'_, Node>, ApiError> {
        match self.sim.nodes().get(name) {
            Some(node) => Ok(Cow::Borrowed(&**node)),
            None => decode(served, resources::NODES).map(Cow::Owned),
        }
    }

    fn update_checked(
        &mut self,
        rid: Rid,
        key: &ObjKey,
        status: bool,
        new: Value,
    ) -> Result<(), ApiError> {
        let old = self.require(rid, key)?;
        require_object(rid, &new)?;
        writable(rid, status)?;
        same_name(key, &new)?;
        let name = key.1.as_str();
        if self.fail_updates > 0 {
            self.fail_updates -= 1;
            return Err(ApiError::conflict(rid, name, "injected conflict"));
        }
        update_preconditions(rid, name, &old, &new)?;
        admit_fields(rid, name, &new)?;
        match (rid, status) {
            (resources::NODES, false) => {
                let after: Node = decode(&new, rid)?;
                let patch = node_patch(&*self.served_node(&old, name)?, &after);
                if patch.is_empty() {
                    return Ok(());
                }
                let outcome = self
                    .sim
                    .execute(&Action::PatchNode(patch))
                    .map_err(sim_error)?;
                outcome_error(outcome, rid, name)
            }
            (resources::NODES, true) => {
                let after: Node = decode(&new, rid)?;
                let before = self.served_node(&old, name)?;
                // The node status strategy resets only the spec: labels and annotations
                // written through `nodes/status` are kept (controllers rely on it).
                let mut meta = node_patch(&before, &after);
                let was = conditions(&before);
                drop(before);
                meta.add_taints.clear();
                meta.remove_taints.clear();
                meta.unschedulable = None;
                if !meta.is_empty() {
                    let outcome = self
                        .sim
                        .execute(&Action::PatchNode(meta))
                        .map_err(sim_error)?;
                    outcome_error(outcome, rid, name)?;
                }
                let now = conditions(&after);
                let set: Vec<NodeCondition> =
                    now.iter().filter(|c| !was.contains(c)).cloned().collect();
                let remove: Vec<String> = was
                    .iter()
                    .filter(|c| !now.iter().any(|n| n.type_ == c.type_))
                    .map(|c| c.type_.clone())
                    .collect();
                if set.is_empty() && remove.is_empty() {
                    return Ok(());
                }
                let outcome = self
                    .sim
                    .execute(&Action::PatchNodeConditions {
                        node: name.to_string(),
                        set,
                        remove,
                    })
                    .map_err(sim_error)?;
                outcome_error(outcome, rid, name)
            }
            (resources::JOBS, false) => {
                let after: Job = decode(&new, rid)?;
                self.update_job(name, &after);
                Ok(())
            }
            (resources::PODS, false) => {
                let after: Pod = decode(&new, rid)?;
                let unchanged = self.sim.pods.get(key).is_none_or(|pod| {
                    pod.metadata.labels == after.metadata.labels
                        && pod.metadata.annotations == after.metadata.annotations
                });
                if unchanged {
                    return Ok(());
                }
                let rv = self.next_rv();
                if let Some(pod) = self.sim.pods.get_mut(key) {
                    pod.metadata.labels = after.metadata.labels;
                    pod.metadata.annotations = after.metadata.annotations;
                    pod.metadata.resource_version = Some(rv.to_string());
                }
                Ok(())
            }
            (resources::CONFIG_MAPS, _) => {
                let cm: ConfigMap = decode(&new, rid)?;
                let outcome = self
                    .sim
                    .execute(&Action::UpsertConfigMap(Box::new(cm)))
                    .map_err(sim_error)?;
                outcome_error(outcome, rid, name)
            }
            (resources::NODEWRIGHTS, false) => {
                let before: NodeWright = decode(&old, rid)?;
                let after = admit_nodewright(&new, Some(&before))?;
                self.update_nodewright(name, after);
                Ok(())
            }
            (resources::NODEWRIGHTS, true) => {
                // Through the status subresource only the status is written: only it is read.
                let status: Option<NodeWrightStatus> =
                    decode_part(new.get("status").unwrap_or(&Value::Null), rid, name)?;
                let outcome = self
                    .sim
                    .execute(&Action::PatchNodeWrightStatus {
                        name: name.to_string(),
                        patch: Box::new(StatusPatch::whole(status.unwrap_or_default())),
                    })
                    .map_err(sim_error)?;
                outcome_error(outcome, rid, name)
            }
            (resources::POLICIES, _) => {
                let after = admit_policy(&new)?;
                let unchanged = self.sim.policies.get(name).is_none_or(|live| {
                    live.spec == after.spec
                        && live.metadata.labels == after.metadata.labels
                        && live.metadata.annotations == after.metadata.annotations
                });
                if unchanged {
                    return Ok(());
                }
                let rv = self.next_rv();
                if let Some(live) = self.sim.policies.get_mut(name) {
                    if live.spec != after.spec {
                        live.spec = after.spec;
                        live.metadata.generation = Some(live.metadata.generation.unwrap_or(1) + 1);
                    }
                    live.metadata.labels = after.metadata.labels;
                    live.metadata.annotations = after.metadata.annotations;
                    live.metadata.resource_version = Some(rv.to_string());
                }
                Ok(())
            }
            (resources::PODS | resources::JOBS | resources::PDBS, _) => writable(rid, status),
            _ => {
                let finished = new.pointer("/metadata/deletionTimestamp").is_some()
                    && new
                        .pointer("/metadata/finalizers")
                        .and_then(Value::as_array)
                        .is_none_or(|f| f.is_empty());
                if finished {
                    self.remove_generic(rid, key);
                } else {
                    let new = self.admit_generic(rid, Some(&old), new, status)?;
                    self.put_generic(rid, new, Some(&old));
                }
                Ok(())
            }
        }
    }

    /// PUT or PATCH with `dryRun=All`: every check of [`Self::update`] (preconditions,
    /// decoding, admission) and the object as it would be stored; nothing is written, so the
    /// resourceVersion stays the stored one.
    pub fn update_dry_run(
        &self,
        rid: Rid,
        key: &ObjKey,
        status: bool,
        new: Value,
    ) -> Result<Value, ApiError> {
        let old = self.require(rid, key)?;
        require_object(rid, &new)?;
        writable(rid, status)?;
        same_name(key, &new)?;
        update_preconditions(rid, &key.1, &old, &new)?;
        admit_fields(rid, &key.1, &new)?;
        let new = self.admit_generic(rid, Some(&old), new, status)?;
        let mut stored = admitted(rid, &new, Some(&old), status)?;
        stamp(rid, &mut stored, Identity::Kept(&old));
        stored["metadata"]["resourceVersion"] = old
            .pointer("/metadata/resourceVersion")
            .cloned()
            .unwrap_or(Value::Null);
        Ok(stored)
    }

    /// Server-side apply with `dryRun=All`: the object [`Self::apply`] would store, as a
    /// dry-run update of the live object or a dry-run create.
    pub fn apply_dry_run(&self, rid: Rid, key: &ObjKey, applied: Value) -> Result<Value, ApiError> {
        let applied = applied_object(rid, key, applied)?;
        let (old, candidate) = self.apply_candidate(rid, key, &applied);
        match old {
            Some(_) => self.update_dry_run(rid, key, false, candidate),
            None => self.create_dry_run(rid, &key.0, candidate),
        }
    }

    /// DELETE with `dryRun=All`: the preconditions checked, and the object as the deletion
    /// would leave it while it terminates (finalizers, graceful pods, foreground Jobs), or
    /// `None` when it would be gone at once.
    pub fn delete_dry_run(
        &self,
        rid: Rid,
        key: &ObjKey,
        opts: &DeleteOpts,
    ) -> Result<Option<Value>, ApiError> {
        let old = self.require(rid, key)?;
        delete_preconditions(rid, &key.1, &old, opts)?;
        let now = to_value(&util::time(self.sim.now()));
        let terminating = |mut value: Value| {
            if value.pointer("/metadata/deletionTimestamp").is_none() {
                value["metadata"]["deletionTimestamp"] = now.clone();
            }
            value
        };
        Ok(match rid {
            resources::PODS => self
                .sim
                .pod_after_deletion(key, opts.grace)
                .map(|pod| to_value(&pod)),
            // The simulator deletes Jobs in the foreground: they stay until their pods are gone.
            resources::JOBS => {
                let mut job = terminating((*old).clone());
                let finalizers = &mut job["metadata"]["finalizers"];
                if !finalizers.is_array() {
                    *finalizers = json!([]);
                }
                if let Some(list) = finalizers.as_array_mut()
                    && !list.iter().any(|f| f == "foregroundDeletion")
                {
                    list.push(json!("foregroundDeletion"));
                }
                Some(job)
            }
            resources::NAMESPACES => Some(self.terminating_namespace(&old)),
            resources::NODES | resources::CONFIG_MAPS | resources::PDBS | resources::POLICIES => {
                None
            }
            _ => has_finalizers(&old).then(|| terminating((*old).clone())),
        })
    }

    /// The Eviction subresource with `dryRun=All`: the answer an eviction would get now.
    pub fn evict_dry_run(&self, namespace: &str, name: &str) -> Result<(), ApiError> {
        self.sim
            .check_eviction(namespace, name)
            .map_err(eviction_error)
    }

    /// A Job write: suspend through the simulator's suspend, the other mutable fields set
    /// with a generation bump, then the Job controller looks at it again.
    fn update_job(&mut self, name: &str, after: &Job) {
        let Some(before) = self.sim.jobs.get(name).cloned() else {
            return;
        };
        let spec_of = |j: &Job| j.spec.clone().unwrap_or_default();
        let (old_spec, new_spec) = (spec_of(&before), spec_of(after));
        let suspended = old_spec.suspend.unwrap_or(false) != new_spec.suspend.unwrap_or(false);
        if suspended {
            self.sim
                .suspend_job(name, new_spec.suspend.unwrap_or(false));
        }
        let mut deadline = None;
        let mut changed = suspended;
        if let Some(job) = self.sim.jobs.get_mut(name) {
            let spec = job.spec.get_or_insert_with(Default::default);
            let mut spec_changed = false;
            if spec.ttl_seconds_after_finished != new_spec.ttl_seconds_after_finished {
                Arc::make_mut(spec).ttl_seconds_after_finished =
                    new_spec.ttl_seconds_after_finished;
                spec_changed = true;
            }
            if spec.active_deadline_seconds != new_spec.active_deadline_seconds {
                Arc::make_mut(spec).active_deadline_seconds = new_spec.active_deadline_seconds;
                spec_changed = true;
                // The Job controller requeues a Job at its new deadline.
                let start = job.status.as_ref().and_then(|s| s.start_time.clone());
                let uid = job.metadata.uid.clone().unwrap_or_default();
                if let (Some(start), Some(ads)) = (start, new_spec.active_deadline_seconds) {
                    deadline = Some((
                        uid,
                        util::add(start.0, Duration::from_secs(ads.max(0) as u64)),
                    ));
                }
            }
            if spec_changed {
                job.metadata.generation = Some(job.metadata.generation.unwrap_or(1) + 1);
            }
            if job.metadata.labels != after.metadata.labels
                || job.metadata.annotations != after.metadata.annotations
            {
                job.metadata.labels = after.metadata.labels.clone();
                job.metadata.annotations = after.metadata.annotations.clone();
                changed = true;
            }
            changed |= spec_changed;
        }
        if !changed {
            return;
        }
        let rv = self.next_rv();
        if let Some(job) = self.sim.jobs.get_mut(name) {
            job.metadata.resource_version = Some(rv.to_string());
        }
        if let Some((uid, at)) = deadline {
            self.sim.job_sync_at(name, &uid, at);
        }
        self.sim.dirty_jobs.insert(name.to_string());
        self.sim.settle();
    }

    /// A NodeWright write: labels, annotations, finalizers and spec (generation bump); a
    /// NodeWright being deleted goes away once its last finalizer does.
    fn update_nodewright(&mut self, name: &str, after: NodeWright) {
        let Some(live) = self.sim.nodewrights.get(name) else {
            return;
        };
        let (was, now) = (&live.metadata, &after.metadata);
        if live.spec == after.spec
            && was.labels == now.labels
            && was.annotations == now.annotations
            && was.finalizers == now.finalizers
        {
            return;
        }
        let rv = self.next_rv();
        let Some(live) = self.sim.nodewrights.get_mut(name) else {
            return;
        };
        if live.spec != after.spec {
            live.spec = after.spec;
            live.metadata.generation = Some(live.metadata.generation.unwrap_or(1) + 1);
        }
        live.metadata.labels = after.metadata.labels;
        live.metadata.annotations = after.metadata.annotations;
        live.metadata.finalizers = after.metadata.finalizers;
        live.metadata.resource_version = Some(rv.to_string());
        if live.metadata.deletion_timestamp.is_some()
            && live
                .metadata
                .finalizers
                .as_ref()
                .is_none_or(|f| f.is_empty())
        {
            self.sim.nodewrights.remove(name);
        }
    }

    /// Server-side apply (`application/apply-patch+yaml`): NodeWrights, policies and
    /// ConfigMaps through the simulator's apply; other kinds as a merge onto the live object.
    /// Creates the object when absent.
    pub fn apply(&mut self, rid: Rid, key: &ObjKey, applied: Value) -> Result<(), ApiError> {
        let applied = applied_object(rid, key, applied)?;
        let (old, candidate) = self.apply_candidate(rid, key, &applied);
        match rid {
            resources::NODEWRIGHTS => {
                let before = match &old {
                    Some(o) => Some(decode::<NodeWright>(o, rid)?),
                    None => None,
                };
                admit_nodewright(&candidate, before.as_ref())?;
                let declared: NodeWright = decode(&applied, rid)?;
                self.sim.apply_nodewright(&declared, None);
                Ok(())
            }
            resources::POLICIES => {
                admit_policy(&candidate)?;
                let declared = admit_policy(&applied)?;
                self.sim.apply_policy(&declared);
                Ok(())
            }
            resources::CONFIG_MAPS => {
                let cm: ConfigMap = decode(&candidate, rid)?;
                let outcome = self
                    .sim
                    .execute(&Action::UpsertConfigMap(Box::new(cm)))
                    .map_err(sim_error)?;
                outcome_error(outcome, rid, &key.1)
            }
            _ => match old {
                Some(_) => self.update(rid, key, false, candidate),
                None => self.create(rid, &key.0, candidate).map(|_| ()),
            },
        }
    }

    /// The live object (if any) and the object an apply of `applied` would write, before
    /// the kind's admission.
    fn apply_candidate(
        &self,
        rid: Rid,
        key: &ObjKey,
        applied: &Value,
    ) -> (Option<Arc<Value>>, Value) {
        let old = self.get(rid, key);
        let mut candidate = old.as_deref().cloned().unwrap_or_else(|| json!({}));
        super::patch::merge(&mut candidate, applied);
        if rid == resources::CONFIG_MAPS {
            own_config_map_data(&mut candidate, applied);
        }
        // An apply is not guarded by the resourceVersion the live object carries.
        if let Some(meta) = candidate["metadata"].as_object_mut() {
            meta.remove("resourceVersion");
        }
        (old, candidate)
    }

    /// DELETE. Returns whether the object still exists (finalizers, foreground deletion).
    pub fn delete(&mut self, rid: Rid, key: &ObjKey, opts: &DeleteOpts) -> Result<bool, ApiError> {
        let old = self.require(rid, key)?;
        let name = key.1.as_str();
        delete_preconditions(rid, name, &old, opts)?;
        let uid = old.pointer("/metadata/uid").and_then(Value::as_str);
        match rid {
            resources::NODES => {
                self.sim.delete_node(name);
            }
            resources::PODS => {
                self.sim.delete_pod(&key.0, name, opts.grace);
            }
            resources::JOBS => {
                self.sim.delete_job(name, uid);
            }
            resources::CONFIG_MAPS => {
                if key.0 == self.sim.namespace() {
                    self.sim
                        .execute(&Action::DeleteConfigMap {
                            name: name.to_string(),
                        })
                        .map_err(sim_error)?;
                } else {
                    self.sim.config_maps.remove(key);
                }
            }
            resources::PDBS => {
                self.sim.delete_pdb(&key.0, name);
            }
            resources::NODEWRIGHTS => {
                self.sim.delete_nodewright(name);
            }
            resources::POLICIES => {
                self.sim.policies.remove(name);
            }
            resources::NAMESPACES => self.terminate_namespace(key, &old),
            _ => {
                if has_finalizers(&old) {
                    if old.pointer("/metadata/deletionTimestamp").is_none() {
                        let mut value = (*old).clone();
                        value["metadata"]["deletionTimestamp"] =
                            to_value(&util::time(self.sim.now()));
                        self.put_generic(rid, value, Some(&old));
                    }
                } else {
                    self.remove_generic(rid, key);
                }
            }
        }
        self.publish();
        Ok(self.get(rid, key).is_some())
    }

    /// The Eviction subresource: 201, 404, or 429 with the DisruptionBudget cause.
    pub fn evict(
        &mut self,
        namespace: &str,
        name: &str,
        grace: Option<i64>,
    ) -> Result<(), ApiError> {
        self.sim
            .evict(namespace, name, grace)
            .map_err(eviction_error)?;
        self.sim.record_history(format!("evict {namespace}/{name}"));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{ModelRunner, PackageModels};

    /// A served world of no nodes.
    fn empty_world() -> World {
        World::new(SimCluster::new(
            "nodewright",
            Box::new(ModelRunner::new(PackageModels::default())),
            7,
        ))
    }

    fn selecting(fields: &str) -> Selectors {
        Selectors {
            fields: super::super::select::FieldSelector::parse(fields).unwrap(),
            ..Selectors::default()
        }
    }

    /// A kind that changes often (a fleet's leases) fills its own window of changes: a watch
    /// of pods resumes from before all of them, and lists the pods as they were then.
    #[test]
    fn each_resource_keeps_its_own_window_of_changes() {
        let world = empty_world();
        let before = world.read(|inner| inner.resource_version());
        world.with(|inner| {
            inner.put_generic(
                resources::PODS,
                json!({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": "early", "namespace": "apps"}, "spec": {}}),
                None,
            );
            let mut old: Option<Arc<Value>> = None;
            for renewal in 0..=LOG_CAPACITY {
                let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": "n0", "namespace": "kube-node-lease"},
                    "spec": {"renewTime": renewal.to_string()}});
                old = Some(inner.put_generic(resources::LEASES, lease, old.as_deref()));
            }
        });
        let (pods, pod_floor, lease_floor) = world.read_log(|log| {
            let pods: Vec<String> = log
                .entries_after(resources::PODS, before)
                .map(|e| key_of(&e.object).1)
                .collect();
            (
                pods,
                log.floor(resources::PODS),
                log.floor(resources::LEASES),
            )
        });
        assert_eq!(pods, ["early"]);
        assert!(pod_floor <= before, "pods resume from {before}");
        assert!(lease_floor > before, "the oldest renewals are gone");
        let then = world.read(|inner| {
            inner
                .list_page(
                    resources::PODS,
                    None,
                    &Selectors::default(),
                    Some(before),
                    None,
                    None,
                )
                .map(|page| page.items.len())
        });
        assert_eq!(then, Some(0), "no pod as of before the first");
    }

    /// Past the window, a resource keeps at least a thousand changes, but not megabytes of
    /// them: a watch of a fleet-sized object cannot resume from long ago, one of pods can.
    #[test]
    fn changes_past_the_window_are_kept_by_number_and_size() {
        let world = empty_world();
        let before = world.read(|inner| inner.resource_version());
        let big = "x".repeat(1 << 20);
        let lease = |renewal: usize| {
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "n0", "namespace": "kube-node-lease"},
                "spec": {"holderIdentity": big, "renewTime": renewal.to_string()}})
        };
        let renew = |old: Option<Arc<Value>>, renewals: std::ops::Range<usize>| {
            world.with(|inner| {
                let mut old = old;
                for renewal in renewals {
                    old =
                        Some(inner.put_generic(resources::LEASES, lease(renewal), old.as_deref()));
                }
                old
            })
        };
        world.with(|inner| inner.put_generic(resources::PODS, pod("early"), None));
        let old = renew(None, 0..24);
        std::thread::sleep(LOG_WINDOW + Duration::from_millis(100));
        renew(old, 24..25);
        world.with(|inner| inner.put_generic(resources::PODS, pod("late"), None));

        let (pods, pod_floor, leases_kept) = world.read_log(|log| {
            let pods: Vec<String> = (log.entries_after(resources::PODS, before))
                .map(|e| key_of(&e.object).1)
                .collect();
            let leases = log.entries_after(resources::LEASES, before).count();
            (pods, log.floor(resources::PODS), leases)
        });
        assert_eq!(pods, ["early", "late"]);
        assert!(pod_floor <= before, "pods resume from {before}");
        assert!(
            (1..=17).contains(&leases_kept),
            "16 MiB of a 1 MiB lease's versions past the window, and the new one: {leases_kept}"
        );
    }

    /// A pod in `apps` named `name`.
    fn pod(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": "apps"}, "spec": {}})
    }

    /// What `during` returns when run while another thread's write holds the world, having
    /// stored the pod `in-progress` and not yet published it.
    fn while_a_write_holds_the_world<R>(world: &Arc<World>, during: impl FnOnce() -> R) -> R {
        let (holding, release) = (
            Arc::new(std::sync::Barrier::new(2)),
            Arc::new(std::sync::Barrier::new(2)),
        );
        let writer = {
            let (world, holding, release) = (world.clone(), holding.clone(), release.clone());
            std::thread::spawn(move || {
                world.with(|inner| {
                    inner.put_generic(resources::PODS, pod("in-progress"), None);
                    holding.wait();
                    release.wait();
                })
            })
        };
        holding.wait();
        let out = during();
        release.wait();
        writer.join().unwrap();
        out
    }

    /// A watch collects the changes published so far while a write holds the world, and
    /// none of that write's until it is published.
    #[test]
    fn a_watch_reads_the_log_while_a_write_is_in_progress() {
        let world = Arc::new(empty_world());
        let start = world.read(|inner| inner.resource_version());
        world.with(|inner| {
            inner.put_generic(resources::PODS, pod("published"), None);
        });
        let names = |world: &World| {
            world.read_log(|log| {
                log.entries_after(resources::PODS, start)
                    .map(|e| key_of(&e.object).1)
                    .collect::<Vec<_>>()
            })
        };
        let during = while_a_write_holds_the_world(&world, || names(&world));
        assert_eq!(during, ["published"]);
        assert_eq!(names(&world), ["published", "in-progress"]);
    }

    /// A read of one object is answered while a write holds the world, as kube-apiserver
    /// answers reads from its watch cache while etcd writes.
    #[test]
    fn a_read_of_one_object_does_not_wait_for_a_write_in_progress() {
        let world = Arc::new(empty_world());
        world.with(|inner| {
            inner.put_generic(resources::PODS, pod("published"), None);
        });
        let (sent, read) = std::sync::mpsc::channel();
        let reader = {
            let world = world.clone();
            move || {
                let key = ("apps".to_string(), "published".to_string());
                let _ = sent.send(world.get(resources::PODS, &key));
            }
        };
        // A read that waits for the world would wait for the write's end: it never comes
        // while the read is awaited.
        let (answer, reader) = while_a_write_holds_the_world(&world, || {
            let reader = std::thread::spawn(reader);
            (read.recv_timeout(Duration::from_secs(30)), reader)
        });
        reader.join().unwrap();
        let object = answer.expect("the read was answered while the write held the world");
        assert_eq!(
            object.and_then(|o| o.pointer("/metadata/name").cloned()),
            Some(json!("published"))
        );
    }

    /// A watch wakes for changes of its own resource, not for every write of the world (a
    /// fleet's lease renewals are thousands a second).
    #[test]
    fn a_watch_wakes_for_its_own_resource_only() {
        let world = empty_world();
        let mut pods = world.subscribe_kind(resources::PODS);
        pods.borrow_and_update();
        world.with(|inner| {
            let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "n0", "namespace": "kube-node-lease"}, "spec": {}});
            inner.put_generic(resources::LEASES, lease, None);
        });
        assert!(
            !pods.has_changed().unwrap(),
            "a lease write woke a pod watch"
        );
        world.with(|inner| {
            inner.put_generic(resources::PODS, pod("p"), None);
        });
        assert!(pods.has_changed().unwrap(), "a pod write wakes a pod watch");
    }

    /// A pod without `spec.nodeName` is in no node's index, yet `spec.nodeName=` selects
    /// it, as the field reads empty on the apiserver.
    #[test]
    fn a_pod_bound_to_no_node_is_listed_by_an_empty_node_name() {
        let world = empty_world();
        world.with(|inner| {
            for (name, spec) in [("unbound", json!({})), ("bound", json!({"nodeName": "n1"}))] {
                inner.put_generic(
                    resources::PODS,
                    json!({"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": name, "namespace": "apps"}, "spec": spec}),
                    None,
                );
            }
        });
        let names = |fields: &str| -> Vec<String> {
            world.read(|inner| {
                let page = inner
                    .list_page(resources::PODS, None, &selecting(fields), None, None, None)
                    .unwrap();
                page.items
                    .iter()
                    .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
                    .collect()
            })
        };
        assert_eq!(names("spec.nodeName="), ["unbound"]);
        assert_eq!(names("spec.nodeName=n1"), ["bound"]);
        assert_eq!(names("spec.nodeName!=n1"), ["unbound"]);
    }
}
