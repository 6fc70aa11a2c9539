//! The pods bound to the nodes under drain, from one watch of the cluster's bound pods.
//!
//! A node entering drain is listed once (`spec.nodeName=<node>`); from then on the one watch
//! keeps its pods current. A watch per node would hold an HTTP/1 connection per node under
//! drain (a batch of a thousand nodes holds a thousand, each with its buffers), and kube's
//! client closes an abandoned watch's connection only when the server next writes to it.
//! The watch starts at the resourceVersion of a one-item list, so it never replays the
//! cluster's pods, and nothing is kept of pods on nodes outside the drain, of ended pods, or of
//! the reconciler's package pods, which their own watch keeps.
//!
//! Why the view never misses a pod bound to a listed node: the node is taken in before its
//! list is sent, so every event the watch delivers afterwards is either reflected in the list
//! (and replayed over it) or newer than it. A replayed event may be older than the list; a
//! stale pod it brings back is removed again by the deletion that follows it in the watch.
//! Pods are held by uid, so neither a stale incarnation nor its deletion displaces a pod
//! recreated under the same name. A server that no longer has the version the watch reached
//! (410) answers with nothing of what changed meanwhile, deletions included, so every node is
//! then listed again; any other break resumes from the last version seen.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::{Api, ResourceExt};
use tokio::sync::Notify;

use super::ClusterError;
use crate::source::cadence::Backoff;

/// Pods bound to a node: an unscheduled pod cannot hold up a drain.
const BOUND: &str = "spec.nodeName!=";

/// How long a snapshot waits for the lists of nodes that entered drain: a node read without
/// its pods would read as drained and let an interrupt start under running workloads.
const LIST_WAIT: Duration = Duration::from_secs(30);

/// Lists of nodes entering drain in flight at once: a batch of a thousand nodes is listed
/// through a few connections instead of opening one per node.
const LISTS_IN_FLIGHT: usize = 16;

/// A change the watch delivered for a pod.
#[derive(Clone, Debug)]
enum Change {
    Applied(Arc<Pod>),
    Deleted(Arc<Pod>),
}

impl Change {
    fn pod(&self) -> &Pod {
        match self {
            Change::Applied(pod) | Change::Deleted(pod) => pod,
        }
    }
}

/// What is known of one node under drain.
#[derive(Debug)]
struct NodePods {
    /// Its pods by (namespace, name, uid): an incarnation a replayed event brought back
    /// stands beside the pod recreated under its name until its deletion arrives.
    pods: BTreeMap<PodKey, Arc<Pod>>,
    listing: Listing,
}

/// Where a node's list stands. Until it lands, the changes delivered since the node was
/// taken in wait to be replayed over its answer.
#[derive(Debug)]
enum Listing {
    /// In flight as list `number` (a list sent before the node last left the drain does not
    /// count).
    Sent { number: u64, changes: Vec<Change> },
    /// Failed: the next snapshot lists the node again, not the one that saw it fail.
    Failed { changes: Vec<Change> },
    /// Landed: the node's pods are current.
    Landed,
}

impl NodePods {
    fn apply(&mut self, change: Change) {
        let key = pod_key(change.pod());
        match change {
            Change::Applied(pod) => {
                self.pods.insert(key, pod);
            }
            Change::Deleted(_) => {
                self.pods.remove(&key);
            }
        }
    }
}

type PodKey = (String, String, String);

fn pod_key(pod: &Pod) -> PodKey {
    (
        pod.namespace().unwrap_or_default(),
        pod.name_any(),
        pod.uid().unwrap_or_default(),
    )
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

#[derive(Debug, Default)]
struct State {
    /// Whether the watch runs, so that its events reach every node taken in.
    watching: bool,
    nodes: HashMap<String, NodePods>,
    /// Numbers the lists, so that only a node's latest list is believed.
    lists: u64,
}

/// The pods of the nodes under drain (see the module's documentation).
#[derive(Debug, Default)]
pub(super) struct DrainPods {
    state: Mutex<State>,
    /// The namespace whose package pods the package pod watch keeps, trimmed as the lifecycle
    /// reads them: a snapshot takes those, so the view leaves them out.
    package_namespace: Option<String>,
    /// Rung when the watch starts or a list lands.
    progressed: Notify,
}

/// A list to send: the node, and the number its answer must carry.
pub(super) struct ListTicket {
    node: String,
    number: u64,
}

impl DrainPods {
    /// A view that leaves out the package pods of `namespace`, which another watch keeps.
    pub(super) fn leaving_package_pods_of(namespace: &str) -> DrainPods {
        DrainPods {
            package_namespace: Some(namespace.to_string()),
            ..DrainPods::default()
        }
    }

    /// Whether the view keeps `pod`. Not an ended pod: the drain and the non-interrupt barrier
    /// pass ended pods by (§7.5, §7.6), and a batch of a thousand drained nodes would otherwise
    /// keep every finished package pod on them until its Job's TTL. Nor a package pod of the
    /// operator namespace, which the package pod watch keeps without its spec.
    fn keeps(&self, pod: &Pod) -> bool {
        let kept_elsewhere = self.package_namespace.is_some()
            && pod.metadata.namespace == self.package_namespace
            && pod
                .labels()
                .contains_key(nodewright_schema::keys::JOB_LABEL_NAME);
        !kept_elsewhere && !crate::snapshot::pod_has_ended(pod)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while the lock was held left a map of plain data, still whole.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Follows the drain: forgets nodes that left it, takes in those that entered it, and
    /// returns the lists to send: theirs, and with `retry` those of nodes whose list failed.
    /// `None` while the watch is not running.
    fn follow(&self, under_drain: &BTreeSet<String>, retry: bool) -> Option<Vec<ListTicket>> {
        let mut state = self.state();
        if !state.watching {
            return None;
        }
        let State { nodes, lists, .. } = &mut *state;
        nodes.retain(|node, _| under_drain.contains(node));
        let mut tickets = Vec::new();
        for node in under_drain {
            let changes = match nodes.get_mut(node) {
                None => Vec::new(),
                Some(NodePods {
                    listing: Listing::Failed { changes },
                    ..
                }) if retry => std::mem::take(changes),
                Some(_) => continue,
            };
            *lists += 1;
            let number = *lists;
            nodes.insert(
                node.clone(),
                NodePods {
                    pods: BTreeMap::new(),
                    listing: Listing::Sent { number, changes },
                },
            );
            tickets.push(ListTicket {
                node: node.clone(),
                number,
            });
        }
        Some(tickets)
    }

    /// A node's list landed: its pods are the list's, with the changes delivered since the
    /// node was taken in replayed over them. A list the node no longer waits for is dropped.
    fn listed(&self, ticket: &ListTicket, pods: Vec<Arc<Pod>>) {
        let mut state = self.state();
        let Some(node) = state.nodes.get_mut(&ticket.node) else {
            return;
        };
        let Listing::Sent { number, changes } = &mut node.listing else {
            return;
        };
        if *number != ticket.number {
            return;
        }
        let changes = std::mem::take(changes);
        node.listing = Listing::Landed;
        node.pods = (pods.into_iter())
            .filter(|pod| self.keeps(pod))
            .map(|pod| (pod_key(&pod), pod))
            .collect();
        for change in changes {
            node.apply(change);
        }
        drop(state);
        self.progressed.notify_waiters();
    }

    /// A list that failed: the next snapshot lists the node again (the changes delivered
    /// meanwhile are kept for the list that lands).
    fn list_failed(&self, ticket: &ListTicket) {
        let mut state = self.state();
        if let Some(node) = state.nodes.get_mut(&ticket.node)
            && let Listing::Sent { number, changes } = &mut node.listing
            && *number == ticket.number
        {
            node.listing = Listing::Failed {
                changes: std::mem::take(changes),
            };
        }
        drop(state);
        self.progressed.notify_waiters();
    }

    /// A change the watch delivered; whether it concerns a node under drain.
    fn observe(&self, change: Change) -> bool {
        // A pod the view does not keep leaves it, as one that ends does.
        let change = match change {
            Change::Applied(pod) if !self.keeps(&pod) => Change::Deleted(pod),
            change => change,
        };
        let mut state = self.state();
        let Some(node) = node_of(change.pod()).and_then(|n| state.nodes.get_mut(n)) else {
            return false;
        };
        match &mut node.listing {
            Listing::Sent { changes, .. } | Listing::Failed { changes } => changes.push(change),
            Listing::Landed => node.apply(change),
        }
        true
    }

    /// The watch (re)started from a list's version: every node is listed again, since
    /// whatever changed while no watch ran is lost to it.
    fn watch_started(&self) {
        let mut state = self.state();
        state.watching = true;
        state.nodes.clear();
        drop(state);
        self.progressed.notify_waiters();
    }

    /// The watch stopped: snapshots wait until it runs again.
    fn watch_stopped(&self) {
        self.state().watching = false;
    }

    /// The pods of the nodes in `under_drain`, once each has been listed; `None` while one
    /// has not.
    fn pods(&self, under_drain: &BTreeSet<String>) -> Option<Vec<Arc<Pod>>> {
        if under_drain.is_empty() {
            return Some(Vec::new());
        }
        let state = self.state();
        if !state.watching {
            return None;
        }
        let mut pods = Vec::new();
        for node in under_drain {
            let node = state.nodes.get(node)?;
            if !matches!(node.listing, Listing::Landed) {
                return None;
            }
            pods.extend(node.pods.values().cloned());
        }
        Some(pods)
    }

    /// The pods bound to the nodes under drain, listing those that entered it (through
    /// `list`) and waiting up to [`LIST_WAIT`] for the lists in flight.
    pub(super) async fn read<L, F>(
        self: &Arc<Self>,
        under_drain: &BTreeSet<String>,
        list: L,
    ) -> Result<Vec<Arc<Pod>>, ClusterError>
    where
        L: Fn(String) -> F + Clone + Send + Sync + 'static,
        F: std::future::Future<Output = Result<Vec<Arc<Pod>>, ClusterError>> + Send + 'static,
    {
        let deadline = tokio::time::Instant::now() + LIST_WAIT;
        let mut retry = true;
        loop {
            let progressed = self.progressed.notified();
            tokio::pin!(progressed);
            progressed.as_mut().enable();
            if let Some(tickets) = self.follow(under_drain, std::mem::take(&mut retry))
                && !tickets.is_empty()
            {
                self.send_lists(tickets, list.clone());
            }
            if let Some(pods) = self.pods(under_drain) {
                return Ok(pods);
            }
            if tokio::time::timeout_at(deadline, progressed).await.is_err() {
                let why = if self.state().watching {
                    "were not listed"
                } else {
                    "cannot be followed: the watch of bound pods is not running"
                };
                return Err(ClusterError::Transport(format!(
                    "the pods of {} nodes under drain {why} within {}s",
                    under_drain.len(),
                    LIST_WAIT.as_secs()
                )));
            }
        }
    }

    /// Sends the lists on their own task: a snapshot that stops waiting leaves them running,
    /// so the next one finds them landed instead of starting them over.
    fn send_lists<L, F>(self: &Arc<Self>, tickets: Vec<ListTicket>, list: L)
    where
        L: Fn(String) -> F + Send + Sync + 'static,
        F: std::future::Future<Output = Result<Vec<Arc<Pod>>, ClusterError>> + Send + 'static,
    {
        let this = self.clone();
        tokio::spawn(async move {
            let (list, this) = (&list, &this);
            let failures: Vec<ClusterError> = futures::stream::iter(tickets)
                .map(|ticket| async move {
                    match list(ticket.node.clone()).await {
                        Ok(pods) => {
                            this.listed(&ticket, pods);
                            None
                        }
                        Err(e) => {
                            this.list_failed(&ticket);
                            Some(e)
                        }
                    }
                })
                .buffer_unordered(LISTS_IN_FLIGHT)
                .filter_map(std::future::ready)
                .collect()
                .await;
            if let Some(error) = failures.first() {
                tracing::warn!(nodes = failures.len(), %error, "cannot list the pods of nodes under drain; the next pass lists them again");
            }
        });
    }
}

/// Lists the pods bound to `node`, trimmed as the stores keep them.
pub(super) async fn list_node(
    api: Api<Pod>,
    node: String,
    trim: impl Fn(&mut Pod),
) -> Result<Vec<Arc<Pod>>, ClusterError> {
    let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
    let list = api.list(&params).await.map_err(|e| {
        ClusterError::Transport(format!(
            "listing the pods of node {node}: {}",
            super::kube::client_error_text(&e)
        ))
    })?;
    Ok(list
        .items
        .into_iter()
        .map(|mut pod| {
            trim(&mut pod);
            Arc::new(pod)
        })
        .collect())
}

/// Keeps `pods` current from one watch of the cluster's bound pods, for as long as it runs:
/// started at the version of a one-item list, resumed from the last version it delivered
/// when the server ends it, and started over from a new list after a gap.
pub(super) async fn watch(
    api: Api<Pod>,
    pods: Arc<DrainPods>,
    changed: Arc<Notify>,
    trim: impl Fn(&mut Pod),
) {
    let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30), 0x9d);
    loop {
        let start = api
            .list(&ListParams::default().fields(BOUND).limit(1))
            .await
            .map(|list| list.metadata.resource_version.unwrap_or_default());
        let mut version = match start {
            Ok(version) => version,
            Err(e) => {
                let failure = backoff.failed();
                let error = super::kube::client_error_text(&e);
                if failure.opens_episode() {
                    tracing::warn!(%error, "cannot start the watch of pods on nodes under drain; retrying with backoff");
                } else {
                    tracing::debug!(%error, attempts = failure.attempts, "cannot start the watch of pods on nodes under drain");
                }
                tokio::time::sleep(failure.retry_after).await;
                continue;
            }
        };
        pods.watch_started();
        changed.notify_one();
        let gap = follow_from(&api, &pods, &changed, &trim, &mut version, &mut backoff).await;
        pods.watch_stopped();
        tracing::warn!(reason = %gap, "the watch of pods on nodes under drain lost track; listing those nodes again");
        tokio::time::sleep(backoff.failed().retry_after).await;
    }
}

/// The version a watch can no longer resume from.
const GONE: u16 = 410;

/// Watches from `version` until the server can no longer resume it (410: the version is
/// older than the server keeps); returns why. Other failures resume from the last version
/// delivered after a backoff, since the server still holds every change since then.
async fn follow_from(
    api: &Api<Pod>,
    pods: &DrainPods,
    changed: &Notify,
    trim: &impl Fn(&mut Pod),
    version: &mut String,
    backoff: &mut Backoff,
) -> String {
    let params = WatchParams::default().fields(BOUND);
    loop {
        let delivered = match api.watch(&params, version).await {
            Err(e) if super::kube::status_code(&e) == Some(GONE) => {
                return super::kube::client_error_text(&e);
            }
            Err(e) => {
                tracing::debug!(error = %super::kube::client_error_text(&e), "cannot resume the watch of pods on nodes under drain; retrying");
                false
            }
            Ok(stream) => match deliver(stream, pods, changed, trim, version).await {
                Ok(delivered) => delivered,
                Err(gone) => return gone,
            },
        };
        // A watch that ends having delivered nothing is not restarted at once.
        if delivered {
            backoff.succeeded();
        } else {
            tokio::time::sleep(backoff.failed().retry_after).await;
        }
    }
}

/// Hands one watch stream's changes to `pods` until it ends, keeping `version` at the last
/// one delivered. Whether it delivered anything, or why its version is gone.
async fn deliver(
    stream: impl futures::Stream<Item = kube::Result<WatchEvent<Pod>>>,
    pods: &DrainPods,
    changed: &Notify,
    trim: &impl Fn(&mut Pod),
    version: &mut String,
) -> Result<bool, String> {
    let mut stream = std::pin::pin!(stream);
    let mut delivered = false;
    while let Some(event) = stream.next().await {
        let (mut pod, change): (Pod, fn(Arc<Pod>) -> Change) = match event {
            Ok(WatchEvent::Added(pod) | WatchEvent::Modified(pod)) => (pod, Change::Applied),
            Ok(WatchEvent::Deleted(pod)) => (pod, Change::Deleted),
            Ok(WatchEvent::Bookmark(bookmark)) => {
                *version = bookmark.metadata.resource_version;
                delivered = true;
                continue;
            }
            Ok(WatchEvent::Error(status)) if status.code == GONE => {
                return Err(super::kube::status_text(&status));
            }
            Ok(WatchEvent::Error(status)) => {
                tracing::debug!(error = %super::kube::status_text(&status), "the pod watch ended with an error; resuming");
                break;
            }
            Err(e) => {
                tracing::debug!(error = %super::kube::client_error_text(&e), "the pod watch broke; resuming");
                break;
            }
        };
        if let Some(v) = pod.resource_version() {
            *version = v;
        }
        trim(&mut pod);
        delivered = true;
        if pods.observe(change(Arc::new(pod))) {
            changed.notify_one();
        }
    }
    Ok(delivered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use proptest::prelude::*;

    fn pod(name: &str, node: &str, uid: &str) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ml".into()),
                uid: Some(uid.into()),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some(node.into()),
                ..PodSpec::default()
            }),
            status: None,
        })
    }

    fn drain(nodes: &[&str]) -> BTreeSet<String> {
        nodes.iter().map(|n| n.to_string()).collect()
    }

    fn names(pods: &[Arc<Pod>]) -> Vec<String> {
        let mut names: Vec<String> = pods
            .iter()
            .map(|p| format!("{}@{}", p.name_any(), p.uid().unwrap_or_default()))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_node_is_not_read_until_its_list_has_landed_nor_before_the_watch_runs() {
        let view = DrainPods::default();
        assert!(view.follow(&drain(&["n1"]), true).is_none(), "no watch yet");
        view.watch_started();
        let tickets = view.follow(&drain(&["n1"]), true).unwrap();
        assert_eq!(tickets.len(), 1);
        assert!(view.pods(&drain(&["n1"])).is_none(), "listed nodes only");
        view.listed(&tickets[0], vec![pod("train", "n1", "u1")]);
        assert_eq!(names(&view.pods(&drain(&["n1"])).unwrap()), ["train@u1"]);
        assert!(
            view.follow(&drain(&["n1"]), true).unwrap().is_empty(),
            "listed once"
        );
    }

    #[test]
    fn a_pod_recreated_under_its_name_survives_the_deletion_of_its_predecessor() {
        let view = DrainPods::default();
        view.watch_started();
        let tickets = view.follow(&drain(&["n1"]), true).unwrap();
        // The watch lags the list: it delivers the old pod's deletion after the list showed
        // the new one.
        assert!(view.observe(Change::Deleted(pod("train", "n1", "old"))));
        view.listed(&tickets[0], vec![pod("train", "n1", "new")]);
        assert_eq!(names(&view.pods(&drain(&["n1"])).unwrap()), ["train@new"]);
        view.observe(Change::Deleted(pod("train", "n1", "old")));
        assert_eq!(names(&view.pods(&drain(&["n1"])).unwrap()), ["train@new"]);
    }

    #[test]
    fn a_list_sent_before_the_node_last_left_the_drain_is_not_believed() {
        let view = DrainPods::default();
        view.watch_started();
        let first = view.follow(&drain(&["n1"]), true).unwrap();
        view.follow(&drain(&[]), true).unwrap();
        let second = view.follow(&drain(&["n1"]), true).unwrap();
        view.listed(&first[0], vec![pod("gone", "n1", "u1")]);
        assert!(view.pods(&drain(&["n1"])).is_none());
        view.listed(&second[0], vec![pod("train", "n1", "u2")]);
        assert_eq!(names(&view.pods(&drain(&["n1"])).unwrap()), ["train@u2"]);
    }

    #[test]
    fn a_gap_in_the_watch_lists_every_node_again_and_a_failed_list_waits_for_the_next_snapshot() {
        let view = DrainPods::default();
        view.watch_started();
        let tickets = view.follow(&drain(&["n1", "n2"]), true).unwrap();
        view.listed(&tickets[0], vec![pod("train", "n1", "u1")]);
        view.list_failed(&tickets[1]);
        assert!(
            view.follow(&drain(&["n1", "n2"]), false)
                .unwrap()
                .is_empty(),
            "not again while the snapshot that saw it fail waits"
        );
        assert_eq!(
            view.follow(&drain(&["n1", "n2"]), true).unwrap().len(),
            1,
            "n2 again"
        );
        view.watch_stopped();
        assert!(view.pods(&drain(&["n1"])).is_none());
        view.watch_started();
        assert_eq!(view.follow(&drain(&["n1", "n2"]), true).unwrap().len(), 2);
    }

    #[test]
    fn pods_of_nodes_outside_the_drain_are_not_kept() {
        let view = DrainPods::default();
        view.watch_started();
        let tickets = view.follow(&drain(&["n1"]), true).unwrap();
        view.listed(&tickets[0], vec![]);
        assert!(!view.observe(Change::Applied(pod("web", "n2", "u1"))));
        assert!(view.observe(Change::Applied(pod("train", "n1", "u2"))));
        assert_eq!(names(&view.pods(&drain(&["n1"])).unwrap()), ["train@u2"]);
        assert!(!view.state().nodes.contains_key("n2"));
    }

    #[test]
    fn ended_pods_are_not_kept_and_a_pod_that_ends_leaves_the_view() {
        let ended = |name: &str, uid: &str, phase: &str| {
            let mut p = (*pod(name, "n1", uid)).clone();
            p.status = Some(k8s_openapi::api::core::v1::PodStatus {
                phase: Some(phase.into()),
                ..Default::default()
            });
            Arc::new(p)
        };
        let view = DrainPods::default();
        view.watch_started();
        let tickets = view.follow(&drain(&["n1"]), true).unwrap();
        view.listed(
            &tickets[0],
            vec![
                pod("train", "n1", "u1"),
                ended("done", "u2", "Succeeded"),
                ended("crashed", "u3", "Failed"),
            ],
        );
        assert_eq!(names(&view.pods(&drain(&["n1"])).unwrap()), ["train@u1"]);
        assert!(view.observe(Change::Applied(ended("train", "u1", "Succeeded"))));
        assert!(view.observe(Change::Applied(ended("batch", "u4", "Failed"))));
        assert!(view.pods(&drain(&["n1"])).unwrap().is_empty());
    }

    #[test]
    fn the_package_pods_of_the_operator_namespace_are_left_to_their_own_watch() {
        let labelled = |name: &str, ns: &str, uid: &str| {
            let mut p = (*pod(name, "n1", uid)).clone();
            p.metadata.namespace = Some(ns.into());
            p.metadata.labels = Some(BTreeMap::from([(
                nodewright_schema::keys::JOB_LABEL_NAME.to_string(),
                "gpu".to_string(),
            )]));
            Arc::new(p)
        };
        let view = DrainPods::leaving_package_pods_of("nodewright");
        view.watch_started();
        let tickets = view.follow(&drain(&["n1"]), true).unwrap();
        view.listed(
            &tickets[0],
            vec![
                labelled("stage", "nodewright", "u1"),
                labelled("lookalike", "ml", "u2"),
            ],
        );
        assert_eq!(
            names(&view.pods(&drain(&["n1"])).unwrap()),
            ["lookalike@u2"]
        );
        view.observe(Change::Applied(labelled("next", "nodewright", "u3")));
        view.observe(Change::Applied(pod("train", "n1", "u4")));
        assert_eq!(
            names(&view.pods(&drain(&["n1"])).unwrap()),
            ["lookalike@u2", "train@u4"]
        );
    }

    /// One pod name on one node, recreated and deleted at random; the list is taken at any
    /// point of that history and the watch delivers the history in order, lagging the list
    /// by any amount.
    #[derive(Clone, Debug)]
    enum Step {
        Create,
        Update,
        Delete,
    }

    proptest! {
        /// Whatever the watch has delivered when the list lands, a pod that exists at the
        /// latest point the list and the watch have reached is in the view: a drain never
        /// reads a running pod as gone. Once the watch has delivered everything, the view is
        /// the truth.
        #[test]
        fn the_view_never_misses_a_pod_that_exists(
            steps in proptest::collection::vec(
                prop_oneof![Just(Step::Create), Just(Step::Update), Just(Step::Delete)],
                1..12,
            ),
            taken_in in 0usize..12,
            list_at in 0usize..12,
            read_at in 0usize..12,
        ) {
            // The history as the watch delivers it, and the pod after each step.
            let mut history = Vec::new();
            let mut truth: Vec<Option<Arc<Pod>>> = vec![None];
            let mut live: Option<Arc<Pod>> = None;
            for (i, step) in steps.iter().enumerate() {
                match (step, &live) {
                    (Step::Create, None) => {
                        let p = pod("train", "n1", &format!("u{i}"));
                        history.push(Change::Applied(p.clone()));
                        live = Some(p);
                    }
                    (Step::Update, Some(p)) => {
                        let mut next = (**p).clone();
                        next.metadata.resource_version = Some(i.to_string());
                        let next = Arc::new(next);
                        history.push(Change::Applied(next.clone()));
                        live = Some(next);
                    }
                    (Step::Delete, Some(p)) => {
                        history.push(Change::Deleted(p.clone()));
                        live = None;
                    }
                    _ => continue,
                }
                truth.push(live.clone());
            }
            let n = history.len();
            // The node is taken in after `taken_in` events were delivered; the list is taken
            // no earlier; the node is read after `read_at` events were delivered.
            let taken_in = taken_in.min(n);
            let list_at = list_at.clamp(taken_in, n);
            let read_at = read_at.clamp(taken_in, n);
            let view = DrainPods::default();
            view.watch_started();
            for change in &history[..taken_in] {
                view.observe(change.clone());
            }
            let tickets = view.follow(&drain(&["n1"]), true).unwrap();
            let listed: Vec<Arc<Pod>> = truth[list_at].iter().cloned().collect();
            for change in &history[taken_in..read_at] {
                view.observe(change.clone());
            }
            view.listed(&tickets[0], listed);
            let seen = names(&view.pods(&drain(&["n1"])).unwrap());
            if let Some(p) = &truth[list_at.max(read_at)] {
                let uid = p.uid().unwrap_or_default();
                prop_assert!(seen.contains(&format!("train@{uid}")), "{uid} missing from {seen:?}");
            }
            for change in &history[read_at..] {
                view.observe(change.clone());
            }
            let end = names(&view.pods(&drain(&["n1"])).unwrap());
            let want = names(&truth[n].iter().cloned().collect::<Vec<_>>());
            prop_assert_eq!(end, want);
        }
    }
}
