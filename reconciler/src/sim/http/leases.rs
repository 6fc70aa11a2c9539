//! Node leases: the heartbeat every kubelet keeps in `kube-node-lease` (a
//! coordination.k8s.io/v1 Lease named after its node, owned by the Node, renewed every 10 s
//! while the node is up, 40 s lease duration), which `kubectl describe node` and the node
//! lifecycle controller read.

use std::collections::BTreeMap;
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
/// How often the simulated kubelets look at their leases. Each look walks every node, so it
/// is rare; a lease renewed up to 5 s late is still well inside its 40 s duration.
const CHECK_EVERY: Duration = Duration::from_secs(5);

/// When each node's lease was last renewed.
#[derive(Debug, Default)]
pub struct NodeLeases {
    renewed: BTreeMap<String, Timestamp>,
    /// When the kubelets last looked at their leases.
    checked: Option<Timestamp>,
}

/// A `MicroTime` as the apiserver writes it.
fn micro_time(at: Timestamp) -> String {
    at.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

impl Inner {
    /// The simulated kubelets' lease renewals due by now: every Ready node's lease is
    /// created or renewed every 10 s; a deleted node's lease is garbage-collected with it.
    pub(super) fn renew_node_leases(&mut self) {
        let now = self.sim.now();
        if self
            .node_leases
            .checked
            .is_some_and(|at| util::since(at, now) < CHECK_EVERY)
        {
            return;
        }
        self.node_leases.checked = Some(now);
        let mut due = Vec::new();
        for (name, node) in self.sim.nodes() {
            let fresh = self
                .node_leases
                .renewed
                .get(name)
                .is_some_and(|at| util::since(*at, now) < RENEW_EVERY);
            if !fresh && crate::sim::nodes::is_ready(node) {
                due.push((name.clone(), node.metadata.uid.clone().unwrap_or_default()));
            }
        }
        let gone: Vec<String> = self
            .node_leases
            .renewed
            .keys()
            .filter(|n| !self.sim.nodes().contains_key(*n))
            .cloned()
            .collect();
        for name in gone {
            self.node_leases.renewed.remove(&name);
            self.remove_generic(resources::LEASES, &(NODE_LEASE_NAMESPACE.to_string(), name));
        }
        for (name, uid) in due {
            let key = (NODE_LEASE_NAMESPACE.to_string(), name.clone());
            let old = self.get(resources::LEASES, &key);
            let mut lease = old.as_deref().cloned().unwrap_or_else(|| {
                json!({
                    "metadata": {
                        "name": name, "namespace": NODE_LEASE_NAMESPACE,
                        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}],
                    },
                    "spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_DURATION_SECONDS},
                })
            });
            lease["spec"]["renewTime"] = Value::String(micro_time(now));
            self.put_generic(resources::LEASES, lease, old.as_deref());
            self.node_leases.renewed.insert(name, now);
        }
    }
}
