//! `apps/v1` workload controllers as the owners of the simulator's workload pods: each
//! DaemonSet, ReplicaSet or StatefulSet a scenario pod's `ownerReferences` name is served
//! with that uid, so clients that follow a pod's controller reference find it — `kubectl
//! drain --ignore-daemonsets` skips DaemonSet pods only once it has read their DaemonSet,
//! and refuses pods without a controller unless `--force`. Objects created through the API
//! are stored and served (CRUD, list, watch, status); no controller acts on them.

use std::sync::Arc;

use serde_json::{Value, json};

use super::resources::{self, Rid};
use super::world::Inner;

/// The resource of an `apps/v1` owner kind.
fn owner_rid(kind: &str) -> Option<Rid> {
    match kind {
        "DaemonSet" => Some(resources::DAEMON_SETS),
        "ReplicaSet" => Some(resources::REPLICA_SETS),
        "StatefulSet" => Some(resources::STATEFUL_SETS),
        _ => None,
    }
}

impl Inner {
    /// Serves the owner of each newly added pod that names an `apps/v1` controller and has
    /// none yet: its name, uid, the pod's labels as selector and template labels.
    pub(super) fn publish_workload_owners(&mut self, added: &[Arc<Value>]) {
        for pod in added {
            let namespace = pod
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let labels = pod
                .pointer("/metadata/labels")
                .cloned()
                .unwrap_or_else(|| json!({}));
            let owners = pod
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for owner in owners {
                if owner.get("apiVersion").and_then(Value::as_str) != Some("apps/v1") {
                    continue;
                }
                let text = |k: &str| owner.get(k).and_then(Value::as_str).unwrap_or_default();
                let Some(rid) = owner_rid(text("kind")) else {
                    continue;
                };
                let key = (namespace.clone(), text("name").to_string());
                if self.get(rid, &key).is_some() {
                    continue;
                }
                let object = json!({
                    "metadata": {"name": key.1, "namespace": namespace, "generation": 1},
                    "spec": {
                        "selector": {"matchLabels": labels},
                        "template": {"metadata": {"labels": labels}, "spec": {"containers": [
                            {"name": "main", "image": "example/workload:latest"}]}},
                    },
                    "status": {"observedGeneration": 1},
                });
                self.put_generic_as(rid, object, None, Some(text("uid").to_string()));
            }
        }
    }
}
