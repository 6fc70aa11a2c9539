//! The engine's output: a [`Plan`] of [`Action`]s, each idempotent and carrying what it
//! expects to find, so a replay after a crash is safe (ARCHITECTURE §2.2).
//!
//! Node writes are *deltas* applied by the executor onto the node's current value under
//! optimistic concurrency (spec/operator.md §5.15): a pass never re-asserts a field it did not
//! change, and node-state entries it did not touch keep whatever another writer put there.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Duration;

use crate::engine::jobs::{self, PackageJob};
use crate::job::Job;
use k8s_openapi::api::core::v1::{ConfigMap, NodeCondition, Taint};
use nodewright_schema::{NodeState, NodeWrightStatus, PackageStatus, Status, keys, names};

/// Everything one pass decided.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Writes, in the order they must be executed.
    pub actions: Vec<Action>,
    /// Which actions need an earlier one to have taken effect in the same pass, sorted by
    /// action (engine/write_order.rs decides them).
    pub requires: Vec<Requirement>,
    /// When the next pass should run.
    pub requeue: Requeue,
}

/// Action `action` of a plan runs only if action `needs`, an earlier one, took effect in the
/// same pass: the record an effect relies on is durable before the effect, so a failed write
/// leaves a state the next pass re-serves instead of one it misreads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Requirement {
    /// The dependent action's index.
    pub action: usize,
    /// The index of the action it needs (always smaller).
    pub needs: usize,
}

impl Plan {
    /// A plan without requirements between its actions (each write stands alone).
    pub fn independent(actions: Vec<Action>, requeue: Requeue) -> Plan {
        Plan {
            actions,
            requires: Vec::new(),
            requeue,
        }
    }
}

/// The actions that action `action` needs, of a plan's `requires`.
fn prerequisites(requires: &[Requirement], action: usize) -> impl Iterator<Item = usize> + '_ {
    let start = requires.partition_point(|r| r.action < action);
    requires[start..]
        .iter()
        .take_while(move |r| r.action == action)
        .map(|r| r.needs)
}

/// What became of one action of a plan.
#[derive(Debug)]
pub enum Executed {
    /// It was sent; the cluster's answer.
    Ran(Result<Outcome, crate::cluster::ClusterError>),
    /// Not sent: the earlier action it needs did not take effect in this pass.
    Held {
        /// The index of that action.
        needs: usize,
    },
}

impl Executed {
    /// Whether the write took effect, so the actions that need it may run.
    pub fn took_effect(&self) -> bool {
        matches!(self, Executed::Ran(Ok(Outcome::Done)))
    }
}

/// The object an action writes: writes to one object keep the plan's order, whatever else
/// runs beside them.
fn object_of(action: &Action) -> (u8, &str, &str) {
    match action {
        Action::PatchNode(p) => (0, &p.node, ""),
        Action::PatchNodeConditions { node, .. } => (0, node, ""),
        Action::CreateJob(job) => (1, job.name(), ""),
        Action::DeleteJob { name, .. }
        | Action::SuspendJob { name, .. }
        | Action::AnnotateJob { name, .. }
        | Action::FailJob { name, .. } => (1, name, ""),
        Action::SnapshotLastLogs { job, .. } => (1, job, ""),
        Action::EvictPod(pod) | Action::DeletePod(pod) => (2, &pod.namespace, &pod.name),
        Action::UpsertConfigMap(cm) => (3, cm.metadata.name.as_deref().unwrap_or(""), ""),
        Action::DeleteConfigMap { name } => (3, name, ""),
        Action::PatchNodeWrightStatus { name, .. }
        | Action::PatchNodeWrightAnnotations { name, .. }
        | Action::SetFinalizer { name, .. } => (4, name, ""),
        Action::RecordEvent(_) => (5, "", ""),
    }
}

/// Executes a plan with up to `in_flight` writes outstanding at once (at least one), keeping
/// the order that matters: an action starts only after every action it needs took effect
/// (and is held, never sent, when one did not), and after every earlier action on the same
/// object finished. `send` executes one action and hands it back with the answer; `each`
/// hears every outcome as it arrives, after which the action is dropped: a pass that starts
/// a batch of thousands of nodes does not hold every Job it created until the last answer.
/// The one executor of plans, so every caller keeps the write order the engine decided; with
/// `in_flight` 1 it walks the plan in order.
pub async fn execute<F, Fut>(
    plan: Plan,
    in_flight: usize,
    mut send: F,
    mut each: impl FnMut(usize, &Action, &Executed),
) where
    F: FnMut(Action) -> Fut,
    Fut: std::future::Future<Output = (Action, Result<Outcome, crate::cluster::ClusterError>)>,
{
    use futures::StreamExt;
    use futures::stream::FuturesUnordered;

    let n = plan.actions.len();
    let in_flight = in_flight.max(1);
    // Some(took effect) once an action finished (held counts as not taking effect).
    let mut finished: Vec<Option<bool>> = vec![None; n];
    let Plan {
        actions, requires, ..
    } = plan;
    let mut same_object_before: Vec<Option<usize>> = vec![None; n];
    let mut last_on: std::collections::HashMap<(u8, &str, &str), usize> =
        std::collections::HashMap::new();
    for (i, action) in actions.iter().enumerate() {
        if let Action::RecordEvent(_) = action {
            continue;
        }
        same_object_before[i] = last_on.insert(object_of(action), i);
    }
    // An action not yet started; taken when it starts or is held.
    let mut unstarted: Vec<Option<Action>> = actions.into_iter().map(Some).collect();
    let mut running = FuturesUnordered::new();
    let mut first_unstarted = 0;
    loop {
        let mut i = first_unstarted;
        while i < n && running.len() < in_flight {
            if unstarted[i].is_none() {
                i += 1;
                continue;
            }
            let mut waiting = same_object_before[i].is_some_and(|j| finished[j].is_none());
            let mut failed = None;
            for needs in prerequisites(&requires, i) {
                match finished.get(needs).copied().flatten() {
                    Some(true) => {}
                    Some(false) => failed = failed.or(Some(needs)),
                    None if needs < i => waiting = true,
                    // A requirement that does not point back can never be met.
                    None => failed = failed.or(Some(needs)),
                }
            }
            if let Some(needs) = failed {
                if let Some(action) = unstarted[i].take() {
                    finished[i] = Some(false);
                    each(i, &action, &Executed::Held { needs });
                }
            } else if !waiting && let Some(action) = unstarted[i].take() {
                let fut = send(action);
                running.push(async move { (i, fut.await) });
            }
            i += 1;
        }
        while first_unstarted < n && unstarted[first_unstarted].is_none() {
            first_unstarted += 1;
        }
        match running.next().await {
            Some((i, (action, result))) => {
                let executed = Executed::Ran(result);
                finished[i] = Some(executed.took_effect());
                each(i, &action, &executed);
            }
            None if first_unstarted >= n => break,
            // Nothing runs and nothing could start: only possible if an action waits on a
            // later one, which the engine never plans; the rest is held.
            None => {
                for j in first_unstarted..n {
                    if let Some(action) = unstarted[j].take() {
                        finished[j] = Some(false);
                        each(j, &action, &Executed::Held { needs: j });
                    }
                }
                break;
            }
        }
    }
}

/// When the next pass should run (§5.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Requeue {
    /// After `reconcileInterval` (a pass that wrote or still has work).
    #[default]
    Active,
    /// After `defaultInterval` (idle).
    Idle,
    /// After this long (a timer such as the PDB throttle or a FailureTarget grace).
    After(Duration),
}

/// A Job a plan creates.
#[derive(Clone, Debug)]
pub enum NewJob {
    /// A package's stage or interrupt Job, built when it is sent.
    Package(Box<PackageJob>),
    /// A Job as given (a client's create, a fixture).
    Given(Box<Job>),
}

impl NewJob {
    /// The Job's name, its claim.
    pub fn name(&self) -> &str {
        match self {
            NewJob::Package(job) => job.name(),
            NewJob::Given(job) => job.metadata.name.as_deref().unwrap_or(""),
        }
    }

    /// The Job to send.
    pub fn job(&self) -> Cow<'_, Job> {
        match self {
            NewJob::Package(job) => Cow::Owned(job.build()),
            NewJob::Given(job) => Cow::Borrowed(job),
        }
    }

    /// Whether this is an interrupt Job (§8.16).
    pub fn is_interrupt(&self) -> bool {
        match self {
            NewJob::Package(job) => job.is_interrupt(),
            NewJob::Given(job) => jobs::is_interrupt_job(job),
        }
    }

    /// The Job's `node` label (§4.7).
    pub fn node_label(&self) -> Option<Cow<'_, str>> {
        match self {
            NewJob::Package(job) => Some(Cow::Owned(names::node_label_value(job.node()))),
            NewJob::Given(job) => jobs::label(job, keys::JOB_LABEL_NODE).map(Cow::Borrowed),
        }
    }
}

impl From<Job> for NewJob {
    fn from(job: Job) -> NewJob {
        NewJob::Given(Box::new(job))
    }
}

impl From<PackageJob> for NewJob {
    fn from(job: PackageJob) -> NewJob {
        NewJob::Package(Box::new(job))
    }
}

/// Two creates are the same when they would send the same Job.
impl PartialEq for NewJob {
    fn eq(&self, other: &NewJob) -> bool {
        self.job() == other.job()
    }
}

/// One write to the cluster.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Change a node's metadata and spec by delta (annotations, labels, node-state entries,
    /// taints, unschedulable).
    PatchNode(NodePatch),
    /// Set or remove conditions in `node.status.conditions` (status subresource), by type.
    PatchNodeConditions {
        /// Node name.
        node: String,
        /// Conditions to insert or replace (inserted at the front when missing, §4.5).
        set: Vec<NodeCondition>,
        /// Condition types to remove.
        remove: Vec<String>,
    },
    /// Create a Job (the name is the claim; `AlreadyExists` is reported, not an error).
    CreateJob(NewJob),
    /// Foreground-delete a Job.
    DeleteJob {
        /// Job name (operator namespace).
        name: String,
        /// Only delete the Job with this UID (precondition), when known.
        uid: Option<String>,
        /// Why, for logs and history.
        reason: String,
    },
    /// Set `spec.suspend` on a Job (pause/resume, §8.15).
    SuspendJob {
        /// Job name.
        name: String,
        /// New value.
        suspend: bool,
    },
    /// Merge annotations into a Job and optionally set its TTL (processing marker, last-logs,
    /// restart-limit, invalid).
    AnnotateJob {
        /// Job name.
        name: String,
        /// Only if the Job still has this UID.
        uid: Option<String>,
        /// Annotations to set.
        annotations: BTreeMap<String, String>,
        /// `spec.ttlSecondsAfterFinished`, when set.
        ttl_seconds_after_finished: Option<i32>,
    },
    /// §8.12: snapshot the stuck container's log into the Job's `last-logs` annotation. The
    /// executor tails the log server-side (≤ `LAST_LOGS_CAP_BYTES`, sanitized to valid UTF-8,
    /// 10 s timeout) and annotates the Job; when the read fails or is empty it writes
    /// `fallback` instead (the container's waiting reason and message), when there is one.
    /// Best effort: a failed read is not an error of the pass.
    SnapshotLastLogs {
        /// Job name (operator namespace).
        job: String,
        /// Only if the Job still has this UID.
        uid: Option<String>,
        /// The pod's namespace.
        namespace: String,
        /// The stuck attempt's pod.
        pod: String,
        /// The stuck container.
        container: String,
        /// Text to record when no log can be read (`<container>: <reason>: <message>`).
        fallback: Option<String>,
    },
    /// Mark an interrupt Job failed over its restart budget (§8.16): the executor ends it so the
    /// Job controller reports `Failed`.
    FailJob {
        /// Job name.
        name: String,
        /// Why (recorded on the Job).
        reason: String,
    },
    /// Evict a pod through the Eviction API (429 with a DisruptionBudget cause is an outcome).
    EvictPod(PodRef),
    /// Delete a pod directly (`drainConfig.disableEviction`, archive pruning).
    DeletePod(PodRef),
    /// Create or update a ConfigMap (operator namespace) to exactly this content.
    UpsertConfigMap(Box<ConfigMap>),
    /// Delete a ConfigMap.
    DeleteConfigMap {
        /// ConfigMap name (operator namespace).
        name: String,
    },
    /// Merge-patch the NodeWright status subresource (§5.15): the status fields whole, the
    /// per-node maps as changes against the snapshot.
    PatchNodeWrightStatus {
        /// NodeWright name.
        name: String,
        /// What to write (the executor sends the difference from the live value).
        patch: Box<StatusPatch>,
    },
    /// Set or remove annotations on a NodeWright (metadata-only merge patch: the spec and
    /// `metadata.generation` are untouched), e.g. pause/disable (§1.8, §14.5).
    PatchNodeWrightAnnotations {
        /// NodeWright name.
        name: String,
        /// `Some(v)` sets, `None` removes.
        annotations: BTreeMap<String, Option<String>>,
    },
    /// Add or remove the NodeWright finalizer (metadata-only merge patch, §1.1).
    SetFinalizer {
        /// NodeWright name.
        name: String,
        /// `true` adds it, `false` removes it.
        present: bool,
    },
    /// Record a Kubernetes Event.
    RecordEvent(Event),
}

impl Action {
    /// Short description for logs and history (`cordon n1`, `job tuning/…`, …).
    pub fn kind(&self) -> &'static str {
        match self {
            Action::PatchNode(_) => "patch-node",
            Action::PatchNodeConditions { .. } => "patch-node-conditions",
            Action::CreateJob(_) => "create-job",
            Action::DeleteJob { .. } => "delete-job",
            Action::SuspendJob { .. } => "suspend-job",
            Action::AnnotateJob { .. } => "annotate-job",
            Action::SnapshotLastLogs { .. } => "snapshot-last-logs",
            Action::FailJob { .. } => "fail-job",
            Action::EvictPod(_) => "evict-pod",
            Action::DeletePod(_) => "delete-pod",
            Action::UpsertConfigMap(_) => "upsert-configmap",
            Action::DeleteConfigMap { .. } => "delete-configmap",
            Action::PatchNodeWrightStatus { .. } => "patch-nodewright-status",
            Action::PatchNodeWrightAnnotations { .. } => "patch-nodewright-annotations",
            Action::SetFinalizer { .. } => "set-finalizer",
            Action::RecordEvent(_) => "record-event",
        }
    }
}

/// A pod to evict or delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The node it runs on (for the PDB throttle bookkeeping).
    pub node: String,
    /// The NodeWright whose drain this is, when it is a drain.
    pub nodewright: Option<String>,
    /// `gracePeriodSeconds` to pass, when set.
    pub grace_period_seconds: Option<i64>,
}

/// A delta on one node. Empty fields change nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodePatch {
    /// Node name.
    pub node: String,
    /// Annotations: `Some(v)` sets, `None` removes.
    pub annotations: BTreeMap<String, Option<String>>,
    /// Labels: `Some(v)` sets, `None` removes.
    pub labels: BTreeMap<String, Option<String>>,
    /// Per-NodeWright node-state changes, merged onto the current annotation value.
    pub node_state: Vec<NodeStateDelta>,
    /// Taints to add (replacing a taint with the same key and effect).
    pub add_taints: Vec<Taint>,
    /// Taints to remove, by key (any effect).
    pub remove_taints: Vec<String>,
    /// New `spec.unschedulable`, only when this pass changed it.
    pub unschedulable: Option<bool>,
}

impl NodePatch {
    /// An empty patch for a node.
    pub fn new(node: impl Into<String>) -> Self {
        NodePatch {
            node: node.into(),
            ..NodePatch::default()
        }
    }
    /// Whether the patch changes nothing.
    pub fn is_empty(&self) -> bool {
        self.annotations.is_empty()
            && self.labels.is_empty()
            && self.node_state.is_empty()
            && self.add_taints.is_empty()
            && self.remove_taints.is_empty()
            && self.unschedulable.is_none()
    }
}

/// Changes to one NodeWright's node-state annotation on a node (§5.15).
#[derive(Clone, Debug, PartialEq)]
pub enum NodeStateDelta {
    /// Upsert and remove entries on the current value (creating `{}` first when absent).
    Entries {
        /// NodeWright name.
        nodewright: String,
        /// Entries to insert or replace, keyed `<pkg>|<ver>`.
        upsert: BTreeMap<String, PackageStatus>,
        /// Entry keys to remove.
        remove: Vec<String>,
    },
    /// Remove the whole annotation (a reset). A later delta in the same pass must not
    /// re-create it.
    Delete {
        /// NodeWright name.
        nodewright: String,
    },
}

/// Event type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// `Normal`.
    Normal,
    /// `Warning`.
    Warning,
}

impl EventType {
    /// The API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// What an event is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventObject {
    /// A Node.
    Node(String),
    /// A NodeWright.
    NodeWright(String),
}

/// A Kubernetes Event (§4.10).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The object it is about.
    pub object: EventObject,
    /// Normal or Warning.
    pub kind: EventType,
    /// Reason from `schema::keys::event`.
    pub reason: String,
    /// Informational text (`[nodewright:<nw>] …`).
    pub message: String,
}

/// What executing one action found (fed back to the engine's [`crate::snapshot::Memory`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Done (or already true: idempotent).
    Done,
    /// The object to change does not exist (e.g. a Job already gone).
    NotFound,
    /// `CreateJob` found a Job with that name; the next pass applies §8.14 rule 3.
    AlreadyExists,
    /// `EvictPod` refused with 429 DisruptionBudget: the apiserver's message.
    EvictionRefused {
        /// Verbatim message, e.g. `Cannot evict pod as it would violate the pod's disruption budget.`
        message: String,
    },
    /// Optimistic-concurrency conflicts exhausted the retries; try again next pass.
    Conflict,
}

/// The `last-logs` text of §8.12 from raw log bytes: sanitized to valid UTF-8, and only the
/// last [`crate::settings::constants::LAST_LOGS_CAP_BYTES`] kept (cut at a line start when
/// one is near, never inside a character).
pub fn last_logs_text(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    let cap = crate::settings::constants::LAST_LOGS_CAP_BYTES;
    if text.len() <= cap {
        return text.into_owned();
    }
    let mut cut = text.len() - cap;
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    let rest = &text[cut..];
    match rest.find('\n') {
        Some(nl) if nl + 1 < rest.len() && nl < 1024 => rest[nl + 1..].to_string(),
        _ => rest.to_string(),
    }
}

/// Applies a [`NodePatch`] onto a Node object: the one place both adapters merge node deltas
/// (§5.15). Node-state deltas are merged entry by entry onto the current annotation value; a
/// value that does not parse is never overwritten (the node is malformed, §4.2).
pub fn apply_node_patch(
    node: &mut k8s_openapi::api::core::v1::Node,
    patch: &NodePatch,
) -> Result<(), nodewright_schema::node_state::MalformedNodeState> {
    use nodewright_schema::{NodeState, keys};
    let annotations = node.metadata.annotations.get_or_insert_with(BTreeMap::new);
    for delta in &patch.node_state {
        match delta {
            NodeStateDelta::Delete { nodewright } => {
                annotations.remove(&keys::node_state(nodewright));
            }
            NodeStateDelta::Entries {
                nodewright,
                upsert,
                remove,
            } => {
                let key = keys::node_state(nodewright);
                let mut state = match annotations.get(&key) {
                    Some(raw) => NodeState::parse(raw)?,
                    None => NodeState::default(),
                };
                for k in remove {
                    state.0.remove(k);
                }
                for (k, entry) in upsert {
                    state.0.insert(k.clone(), entry.clone());
                }
                annotations.insert(key, state.to_annotation());
            }
        }
    }
    for (key, value) in &patch.annotations {
        match value {
            Some(v) => {
                annotations.insert(key.clone(), v.clone());
            }
            None => {
                annotations.remove(key);
            }
        }
    }
    let labels = node.metadata.labels.get_or_insert_with(BTreeMap::new);
    for (key, value) in &patch.labels {
        match value {
            Some(v) => {
                labels.insert(key.clone(), v.clone());
            }
            None => {
                labels.remove(key);
            }
        }
    }
    if !patch.add_taints.is_empty()
        || !patch.remove_taints.is_empty()
        || patch.unschedulable.is_some()
    {
        let spec = node.spec.get_or_insert_with(Default::default);
        if !patch.add_taints.is_empty() || !patch.remove_taints.is_empty() {
            let taints = spec.taints.get_or_insert_with(Vec::new);
            taints.retain(|t| !patch.remove_taints.contains(&t.key));
            for taint in &patch.add_taints {
                taints.retain(|t| !(t.key == taint.key && t.effect == taint.effect));
                taints.push(taint.clone());
            }
            if taints.is_empty() {
                spec.taints = None;
            }
        }
        if let Some(unschedulable) = patch.unschedulable {
            spec.unschedulable = unschedulable.then_some(true);
        }
    }
    Ok(())
}

/// A NodeWright status write (§5.15: "merge-patched against the snapshot").
///
/// The per-node maps (`nodeStatus`, `nodeState`, `nodeBootIds`) hold an entry per selected
/// node, thousands on a large fleet, while a pass changes a few; they travel as changes, so a
/// pass neither copies them whole nor overwrites entries another writer added since the
/// snapshot. Every other field is small and travels whole.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatusPatch {
    /// The status without its per-node maps (those three fields are always `None` here).
    fields: NodeWrightStatus,
    /// Changes to `nodeStatus`.
    pub node_status: MapPatch<Status>,
    /// Changes to `nodeState`.
    pub node_state: MapPatch<NodeState>,
    /// Changes to `nodeBootIds`.
    pub node_boot_ids: MapPatch<String>,
}

/// Changes to one per-node map of the status.
#[derive(Clone, Debug, PartialEq)]
pub struct MapPatch<V> {
    /// Drop every entry first (a cleared map, or a whole-value write).
    pub replace: bool,
    /// Node name → new value, `None` removes.
    pub set: BTreeMap<String, Option<V>>,
}

impl<V> Default for MapPatch<V> {
    fn default() -> Self {
        MapPatch {
            replace: false,
            set: BTreeMap::new(),
        }
    }
}

impl<V: PartialEq> MapPatch<V> {
    /// A patch that makes the map exactly `map` (absent = empty).
    pub fn whole(map: Option<BTreeMap<String, V>>) -> MapPatch<V> {
        MapPatch {
            replace: true,
            set: map
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, Some(v)))
                .collect(),
        }
    }

    /// Whether applying changes nothing, whatever the map holds.
    pub fn is_empty(&self) -> bool {
        !self.replace && self.set.is_empty()
    }

    /// `map` with the changes applied; an empty result is absent, as upstream omits it.
    /// `changed` is set when the result differs from `map`.
    pub fn apply(
        &self,
        map: Option<BTreeMap<String, V>>,
        changed: &mut bool,
    ) -> Option<BTreeMap<String, V>>
    where
        V: Clone,
    {
        let had = map.is_some();
        let mut map = map.unwrap_or_default();
        if self.replace {
            // In place: a whole-map write of a large fleet usually changes a few entries.
            let before = map.len();
            map.retain(|k, _| matches!(self.set.get(k), Some(Some(_))));
            *changed |= map.len() != before;
            for (k, v) in &self.set {
                if let Some(v) = v
                    && map.get(k) != Some(v)
                {
                    map.insert(k.clone(), v.clone());
                    *changed = true;
                }
            }
        } else {
            for (node, value) in &self.set {
                match value {
                    Some(v) => {
                        if map.get(node) != Some(v) {
                            map.insert(node.clone(), v.clone());
                            *changed = true;
                        }
                    }
                    None => *changed |= map.remove(node).is_some(),
                }
            }
        }
        if map.is_empty() {
            *changed |= had;
            None
        } else {
            *changed |= !had;
            Some(map)
        }
    }
}

impl StatusPatch {
    /// A patch of `fields` (their per-node maps are ignored) and the given map changes.
    pub fn new(
        mut fields: NodeWrightStatus,
        node_status: MapPatch<Status>,
        node_state: MapPatch<NodeState>,
        node_boot_ids: MapPatch<String>,
    ) -> StatusPatch {
        fields.node_status = None;
        fields.node_state = None;
        fields.node_boot_ids = None;
        StatusPatch {
            fields,
            node_status,
            node_state,
            node_boot_ids,
        }
    }

    /// A patch that makes the status exactly `status` (a verb's whole-status write, a `PUT`
    /// of the status subresource).
    pub fn whole(mut status: NodeWrightStatus) -> StatusPatch {
        let node_status = MapPatch::whole(status.node_status.take());
        let node_state = MapPatch::whole(status.node_state.take());
        let node_boot_ids = MapPatch::whole(status.node_boot_ids.take());
        StatusPatch::new(status, node_status, node_state, node_boot_ids)
    }

    /// The status fields written whole (per-node maps are `None`).
    pub fn fields(&self) -> &NodeWrightStatus {
        &self.fields
    }

    /// Applies the patch in place; returns whether the status changed.
    pub fn apply(&self, status: &mut NodeWrightStatus) -> bool {
        let node_status = status.node_status.take();
        let node_state = status.node_state.take();
        let node_boot_ids = status.node_boot_ids.take();
        let mut changed = *status != self.fields;
        if changed {
            *status = self.fields.clone();
        }
        status.node_status = self.node_status.apply(node_status, &mut changed);
        status.node_state = self.node_state.apply(node_state, &mut changed);
        status.node_boot_ids = self.node_boot_ids.apply(node_boot_ids, &mut changed);
        changed
    }

    /// `status` (absent = empty) with the patch applied.
    pub fn applied_to(&self, status: Option<&NodeWrightStatus>) -> NodeWrightStatus {
        let mut out = status.cloned().unwrap_or_default();
        self.apply(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use nodewright_schema::{Stage, State, keys};

    fn node_with(annotations: &[(&str, &str)]) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            ..Node::default()
        }
    }

    #[test]
    fn node_state_deltas_merge_onto_entries_written_by_others() {
        let other =
            r#"{"b|1":{"name":"b","version":"1","image":"i","stage":"apply","state":"complete"}}"#;
        let mut node = node_with(&[("nodewright.nvidia.com/nodeState_nw", other)]);
        let mut patch = NodePatch::new("n1");
        patch.node_state.push(NodeStateDelta::Entries {
            nodewright: "nw".into(),
            upsert: BTreeMap::from([(
                "a|1".into(),
                PackageStatus::new("a", "1", "i", Stage::Apply, State::InProgress),
            )]),
            remove: vec![],
        });
        patch.unschedulable = Some(true);
        apply_node_patch(&mut node, &patch).unwrap();
        let raw = &node.metadata.annotations.as_ref().unwrap()[&keys::node_state("nw")];
        assert!(raw.starts_with(r#"{"a|1":"#) && raw.contains(r#""b|1""#));
        assert_eq!(node.spec.unwrap().unschedulable, Some(true));
    }

    #[test]
    fn malformed_state_is_not_overwritten() {
        let mut node = node_with(&[("nodewright.nvidia.com/nodeState_nw", "{bad")]);
        let mut patch = NodePatch::new("n1");
        patch.node_state.push(NodeStateDelta::Entries {
            nodewright: "nw".into(),
            upsert: BTreeMap::new(),
            remove: vec![],
        });
        assert!(apply_node_patch(&mut node, &patch).is_err());
    }

    #[test]
    fn taints_are_added_replaced_and_removed_by_key() {
        let mut node = node_with(&[]);
        let taint = |k: &str, v: &str| Taint {
            key: k.into(),
            value: Some(v.into()),
            effect: "NoSchedule".into(),
            time_added: None,
        };
        let mut patch = NodePatch::new("n1");
        patch.add_taints = vec![taint("a", "1"), taint("b", "1")];
        apply_node_patch(&mut node, &patch).unwrap();
        let mut patch = NodePatch::new("n1");
        patch.add_taints = vec![taint("a", "2")];
        patch.remove_taints = vec!["b".into()];
        apply_node_patch(&mut node, &patch).unwrap();
        let taints = node.spec.unwrap().taints.unwrap();
        assert_eq!(taints, vec![taint("a", "2")]);
    }

    #[test]
    fn last_logs_text_is_valid_utf8_and_keeps_the_tail_within_the_cap() {
        assert_eq!(last_logs_text(b"ok \xff\n"), "ok \u{fffd}\n");
        let cap = crate::settings::constants::LAST_LOGS_CAP_BYTES;
        let mut raw = Vec::new();
        for i in 0..2000 {
            raw.extend_from_slice(format!("line {i} é\n").as_bytes());
        }
        let text = last_logs_text(&raw);
        assert!(text.len() <= cap);
        assert!(
            text.starts_with("line ") && text.ends_with("line 1999 é\n"),
            "{}",
            &text[..20]
        );
    }

    fn status_with_nodes(nodes: &[(&str, Status)]) -> NodeWrightStatus {
        NodeWrightStatus {
            status: Some(Status::InProgress),
            node_status: Some(nodes.iter().map(|(n, s)| (n.to_string(), *s)).collect()),
            ..NodeWrightStatus::default()
        }
    }

    #[test]
    fn a_status_patch_keeps_node_entries_it_does_not_name() {
        // Another writer added n3 after the snapshot; the pass changed n1 and dropped n2.
        let mut live = status_with_nodes(&[
            ("n1", Status::InProgress),
            ("n2", Status::Complete),
            ("n3", Status::Waiting),
        ]);
        let mut changes = MapPatch::default();
        changes.set.insert("n1".into(), Some(Status::Complete));
        changes.set.insert("n2".into(), None);
        let fields = NodeWrightStatus {
            status: Some(Status::Complete),
            ..NodeWrightStatus::default()
        };
        let patch = StatusPatch::new(fields, changes, MapPatch::default(), MapPatch::default());
        assert!(patch.apply(&mut live));
        assert_eq!(live.status, Some(Status::Complete));
        assert_eq!(
            live.node_status,
            Some(BTreeMap::from([
                ("n1".to_string(), Status::Complete),
                ("n3".to_string(), Status::Waiting),
            ]))
        );
        assert!(
            !patch.apply(&mut live),
            "a second application changes nothing"
        );
    }

    #[test]
    fn a_whole_status_patch_replaces_the_maps_and_writes_an_empty_map_as_absent() {
        let live = status_with_nodes(&[("n1", Status::InProgress), ("n2", Status::Complete)]);
        let wanted = status_with_nodes(&[("n2", Status::Complete)]);
        let patch = StatusPatch::whole(wanted.clone());
        assert_eq!(patch.fields().node_status, None);
        assert_eq!(patch.applied_to(Some(&live)), wanted);

        let emptied = StatusPatch::whole(NodeWrightStatus {
            node_status: Some(BTreeMap::new()),
            ..wanted.clone()
        });
        let mut out = live.clone();
        assert!(emptied.apply(&mut out));
        assert_eq!(out.node_status, None);
        assert!(!emptied.apply(&mut out));

        // One entry changed, one added: the rest of the map is kept as it was.
        let changed = status_with_nodes(&[
            ("n1", Status::Complete),
            ("n2", Status::Complete),
            ("n3", Status::Waiting),
        ]);
        let mut out = live.clone();
        assert!(StatusPatch::whole(changed.clone()).apply(&mut out));
        assert_eq!(out, changed);
        assert!(!StatusPatch::whole(changed.clone()).apply(&mut out));
    }
}
