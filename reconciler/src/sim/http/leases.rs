//! Node leases: the heartbeat every kubelet keeps in `kube-node-lease` (a
//! coordination.k8s.io/v1 Lease named after its node, owned by the Node, renewed every 10 s
//! while the node is up, 40 s lease duration), which `kubectl describe node` and the node
//! lifecycle controller read.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Value, json};

use super::resources;
use super::world::Inner;
use crate::sim::util;

/// The namespace node leases live in.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// How often a kubelet renews its lease (a quarter of the lease duration).
const RENEW_EVERY: Duration = Duration::from_secs(10);
/// The lease duration a kubelet sets.
const LEASE_DURATION_SECONDS: i64 = 40;
/// The renewals one write of the world makes at most: each kubelet renews on its own, so a
/// fleet's renewals are many small writes, and a client's request waits for one batch at most.
pub(super) const RENEWALS_PER_WRITE: usize = 8;

/// When each node's lease was last renewed, and when each is due next.
#[derive(Debug, Default)]
pub struct NodeLeases {
    renewed: HashMap<String, Timestamp>,
    /// Renewals by the time they are due; a node may be listed twice (due on schedule, and
    /// again when it comes back), and the later look finds its lease fresh. The kubelets
    /// renewed in one batch are due together.
    due: BTreeMap<Timestamp, Vec<String>>,
}

/// A `MicroTime` as the apiserver writes it.
fn micro_time(at: Timestamp) -> String {
    at.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

impl NodeLeases {
    fn due_at(&mut self, at: Timestamp, node: String) {
        self.due.entry(at).or_default().push(node);
    }

    /// A node whose renewal is due by `now`, taken from the queue.
    fn next_due(&mut self, now: Timestamp) -> Option<String> {
        let mut first = self.due.first_entry().filter(|due| *due.key() <= now)?;
        let node = first.get_mut().pop();
        if first.get().is_empty() {
            first.remove();
        }
        node
    }

    /// Whether `node`'s lease is older than a renewal period (or missing).
    fn stale(&self, node: &str, now: Timestamp) -> bool {
        self.renewed
            .get(node)
            .is_none_or(|at| util::since(*at, now) >= RENEW_EVERY)
    }
}

impl Inner {
    /// What the kubelets do when their node changes: a new or returning node is due to renew
    /// its lease now (a kubelet renews as it starts); a deleted node's lease is
    /// garbage-collected with it.
    pub(super) fn node_changed(&mut self, name: &str, deleted: bool) {
        if deleted {
            if self.node_leases.renewed.remove(name).is_some() {
                let key = (NODE_LEASE_NAMESPACE.to_string(), name.to_string());
                self.remove_generic(resources::LEASES, &key);
            }
            return;
        }
        let now = self.sim.now();
        if self.node_leases.stale(name, now) {
            self.node_leases.due_at(now, name.to_string());
        }
    }

    /// Whether a kubelet's lease renewal is due by now.
    pub(super) fn leases_due(&self) -> bool {
        let now = self.sim.now();
        self.node_leases
            .due
            .first_key_value()
            .is_some_and(|(at, _)| *at <= now)
    }

    /// The simulated kubelets' lease renewals due by now, at most `limit` of them: every Ready
    /// node's lease is created or renewed every 10 s.
    pub(super) fn renew_node_leases(&mut self, limit: usize) {
        let now = self.sim.now();
        let mut renew_time: Option<Value> = None;
        let mut renewed = 0;
        while renewed < limit {
            let Some(name) = self.node_leases.next_due(now) else {
                return;
            };
            let Some(node) = self.sim.nodes().get(&name) else {
                continue;
            };
            // A node that is down renews nothing; its return renews (see `node_changed`).
            if !crate::sim::nodes::is_ready(node) || !self.node_leases.stale(&name, now) {
                continue;
            }
            let uid = node.metadata.uid.clone().unwrap_or_default();
            let renew_time = renew_time
                .get_or_insert_with(|| Value::String(micro_time(now)))
                .clone();
            let key = (NODE_LEASE_NAMESPACE.to_string(), name.clone());
            match self.get(resources::LEASES, &key) {
                // A renewal changes the renew time alone: the lease keeps its identity.
                Some(old) => {
                    let mut lease = (*old).clone();
                    lease["spec"]["renewTime"] = renew_time;
                    self.store(resources::LEASES, key, lease);
                }
                None => {
                    let lease = json!({
                        "metadata": {
                            "name": name, "namespace": NODE_LEASE_NAMESPACE,
                            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}],
                        },
                        "spec": {
                            "holderIdentity": name,
                            "leaseDurationSeconds": LEASE_DURATION_SECONDS,
                            "renewTime": renew_time,
                        },
                    });
                    self.put_generic(resources::LEASES, lease, None);
                }
            }
            self.node_leases.renewed.insert(name.clone(), now);
            self.node_leases.due_at(util::add(now, RENEW_EVERY), name);
            renewed += 1;
        }
    }
}
