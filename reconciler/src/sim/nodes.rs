//! Nodes: Ready/NotReady, boot ids, reboots, taints and the node lifecycle controller's taints.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec, NodeStatus,
    NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use nodewright_schema::keys;
use nodewright_schema::toleration;

use super::util;
use super::{Shared, SimCluster, Timer};

/// A node as a scenario or an outside party declares it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeInput {
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// Taints (the lifecycle taints are added by the simulator).
    pub taints: Vec<Taint>,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
}

/// Simulator-side node state.
#[derive(Clone, Debug, Default)]
pub(super) struct NodeRt {
    /// Bumped on every reboot (stale NodeBack timers are ignored).
    pub epoch: u64,
    /// Boots so far (the boot id is derived from it).
    pub boots: u64,
    /// Whether the node is down for a reboot.
    pub rebooting: bool,
}

/// How long a pod without its own `not-ready:NoExecute` toleration survives a NotReady node
/// (the DefaultTolerationSeconds admission plugin's 300 s).
const DEFAULT_NOT_READY_TOLERATION: Duration = Duration::from_secs(300);

fn boot_id(node: &str, boots: u64) -> String {
    let h = util::seed_from(&format!("{node}/{boots}"));
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        h >> 32,
        (h >> 16) & 0xffff,
        h & 0xffff,
        boots & 0xffff,
        h & 0xffff_ffff_ffff
    )
}

/// Whether a node is Ready.
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

/// The node's boot id.
pub fn node_boot_id(node: &Node) -> &str {
    node.status
        .as_ref()
        .and_then(|s| s.node_info.as_ref())
        .map(|i| i.boot_id.as_str())
        .unwrap_or("")
}

/// Whether a node accepts new pods from the scheduler.
pub fn is_schedulable(node: &Node) -> bool {
    is_ready(node)
        && !node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false)
}

/// The node's taints.
pub fn taints(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
}

/// A node's capacity or allocatable: CPU, memory, pods.
fn node_resources(cpu: &str, memory: &str, pods: &str) -> BTreeMap<String, Quantity> {
    [("cpu", cpu), ("memory", memory), ("pods", pods)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
        .collect()
}

/// A stable private address for a node, from its name (10.x.y.z).
fn node_ip(name: &str) -> String {
    let seed = util::seed_from(name);
    format!(
        "10.{}.{}.{}",
        (seed >> 16) & 0xff,
        (seed >> 8) & 0xff,
        (seed & 0xfe) + 1
    )
}

impl SimCluster {
    /// Adds a node (Ready, with a boot id). Replaces a node with the same name.
    pub fn add_node(&mut self, input: NodeInput) {
        let mut meta = self.new_meta(&input.name, None);
        // The labels every kubelet registers its node with; the scenario's own labels win.
        let mut labels = input.labels;
        for (key, value) in [
            (keys::NODE_LABEL_HOSTNAME, input.name.as_str()),
            (keys::NODE_LABEL_OS, "linux"),
            (keys::NODE_LABEL_ARCH, "amd64"),
        ] {
            labels
                .entry(key.to_string())
                .or_insert_with(|| value.to_string());
        }
        meta.labels = Some(labels);
        meta.annotations = Some(input.annotations);
        let rt = NodeRt {
            boots: 1,
            ..NodeRt::default()
        };
        let node = Node {
            metadata: meta,
            spec: Some(NodeSpec {
                taints: Some(input.taints),
                unschedulable: input.unschedulable.then_some(true),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    reason: Some("KubeletReady".into()),
                    message: Some("kubelet is posting ready status".into()),
                    last_transition_time: Some(util::time(self.now)),
                    last_heartbeat_time: Some(util::time(self.now)),
                }]),
                node_info: Some(NodeSystemInfo {
                    boot_id: boot_id(&input.name, 1),
                    machine_id: format!("{:032x}", util::seed_from(&input.name)),
                    system_uuid: format!("{:032x}", util::seed_from(&input.name) ^ 1),
                    kubelet_version: "v1.33.0".into(),
                    kube_proxy_version: "v1.33.0".into(),
                    kernel_version: "6.8.0-sim".into(),
                    os_image: "NodeWright simulated node".into(),
                    container_runtime_version: "containerd://2.0.0".into(),
                    operating_system: "linux".into(),
                    architecture: "amd64".into(),
                    ..NodeSystemInfo::default()
                }),
                capacity: Some(node_resources("8", "32Gi", "110")),
                allocatable: Some(node_resources("7800m", "31Gi", "110")),
                addresses: Some(vec![
                    NodeAddress {
                        type_: "InternalIP".into(),
                        address: node_ip(&input.name),
                    },
                    NodeAddress {
                        type_: "Hostname".into(),
                        address: input.name.clone(),
                    },
                ]),
                daemon_endpoints: Some(NodeDaemonEndpoints {
                    kubelet_endpoint: Some(DaemonEndpoint { port: 10250 }),
                }),
                ..NodeStatus::default()
            }),
        };
        self.node_rt.insert(input.name.clone(), rt);
        self.nodes.insert(input.name.clone(), Shared::new(node));
        self.sync_lifecycle_taints(&input.name);
        self.taint_manager(&input.name);
        self.settle();
    }

    /// Deletes a node; the pod garbage collector removes its pods (DisruptionTarget).
    pub fn delete_node(&mut self, name: &str) -> bool {
        if self.nodes.remove(name).is_none() {
            return false;
        }
        self.node_rt.remove(name);
        let keys = self.pod_keys_on(name);
        for key in keys {
            self.kill_pod_now(
                &key,
                Some(("DeletionByPodGC", "PodGC: node no longer exists")),
            );
        }
        self.settle();
        true
    }

    /// Applies a change to a node through `f` as an outside party would (kubectl, an
    /// autoscaler), then lets the lifecycle controller and taint manager react.
    pub fn update_node(&mut self, name: &str, f: impl FnOnce(&mut Node)) -> bool {
        let Some(mut node) = self.nodes.remove(name) else {
            return false;
        };
        f(&mut node);
        self.touch(&mut node.metadata);
        self.nodes.insert(name.to_string(), node);
        self.sync_lifecycle_taints(name);
        self.taint_manager(name);
        self.settle();
        true
    }

    /// Reboots a node: NotReady for `takes`, running pods killed, a new boot id on return.
    pub fn reboot(&mut self, name: &str, takes: Duration) {
        let Some(rt) = self.node_rt.get_mut(name) else {
            return;
        };
        rt.epoch += 1;
        rt.rebooting = true;
        let epoch = rt.epoch;
        self.history.record(self.now, format!("reboot {name}"));
        let now = util::time(self.now);
        if let Some(node) = self.nodes.get_mut(name) {
            set_ready(node, false, now);
        }
        self.bump_node(name);
        self.sync_lifecycle_taints(name);
        let keys = self.pod_keys_on(name);
        for key in keys {
            self.kubelet_node_down(&key);
        }
        self.schedule(
            util::add(self.now, takes),
            Timer::NodeBack {
                node: name.to_string(),
                epoch,
            },
        );
        self.schedule(
            util::add(self.now, DEFAULT_NOT_READY_TOLERATION),
            Timer::NotReadyEviction {
                node: name.to_string(),
                epoch,
            },
        );
    }

    /// The taint manager after a node stayed NotReady past the default toleration: the
    /// DefaultTolerationSeconds admission plugin gives every pod without its own
    /// `not-ready:NoExecute` toleration one of 300 s, so those pods (and pods whose own
    /// toleration is at most that long) are deleted with a DisruptionTarget condition. Pods
    /// tolerating it without `tolerationSeconds` (package pods, §8.3; DaemonSet pods) stay.
    pub(super) fn not_ready_eviction(&mut self, name: &str, epoch: u64) {
        if self
            .node_rt
            .get(name)
            .is_none_or(|rt| rt.epoch != epoch || !rt.rebooting)
        {
            return;
        }
        let taint = Taint {
            key: keys::TAINT_NOT_READY.to_string(),
            value: None,
            effect: "NoExecute".to_string(),
            time_added: None,
        };
        let limit = i64::try_from(DEFAULT_NOT_READY_TOLERATION.as_secs()).unwrap_or(i64::MAX);
        let keys_on = self.pod_keys_on(name);
        for key in keys_on {
            let Some(pod) = self.pods.get(&key) else {
                continue;
            };
            if crate::snapshot::pod_has_ended(pod) || pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let tolerations = pod
                .spec
                .as_ref()
                .and_then(|s| s.tolerations.as_deref())
                .unwrap_or_default();
            let matching: Vec<_> = tolerations
                .iter()
                .filter(|t| toleration::tolerates(t, &taint))
                .collect();
            let stays = matching
                .iter()
                .any(|t| t.toleration_seconds.is_none_or(|s| s > limit));
            if !stays {
                self.evict_by_taint_manager(&key);
            }
        }
        self.settle();
    }

    pub(super) fn node_back(&mut self, name: &str, epoch: u64) {
        let Some(rt) = self.node_rt.get_mut(name) else {
            return;
        };
        if rt.epoch != epoch {
            return;
        }
        rt.rebooting = false;
        rt.boots += 1;
        let id = boot_id(name, rt.boots);
        let now = util::time(self.now);
        if let Some(node) = self.nodes.get_mut(name) {
            set_ready(node, true, now);
            if let Some(info) = node.status.as_mut().and_then(|s| s.node_info.as_mut()) {
                info.boot_id = id;
            }
        }
        self.bump_node(name);
        self.sync_lifecycle_taints(name);
        let keys = self.pod_keys_on(name);
        for key in keys {
            self.kubelet_node_up(&key);
        }
    }

    pub(super) fn bump_node(&mut self, name: &str) {
        let rv = self.next_rv();
        if let Some(node) = self.nodes.get_mut(name) {
            node.metadata.resource_version = Some(rv);
        }
    }

    /// The node lifecycle controller: `unschedulable:NoSchedule` while cordoned,
    /// `not-ready:NoSchedule` and `not-ready:NoExecute` while NotReady.
    pub(super) fn sync_lifecycle_taints(&mut self, name: &str) {
        let now = util::time(self.now);
        let Some(node) = self.nodes.get_mut(name) else {
            return;
        };
        let cordoned = node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        let ready = is_ready(node);
        let spec = node.spec.get_or_insert_with(NodeSpec::default);
        let taints = spec.taints.get_or_insert_with(Vec::new);
        let before = taints.clone();
        let want = |taints: &mut Vec<Taint>, key: &str, effect: &str, present: bool| {
            let pos = taints
                .iter()
                .position(|t| t.key == key && t.effect == effect);
            match (pos, present) {
                (None, true) => taints.push(Taint {
                    key: key.to_string(),
                    value: None,
                    effect: effect.to_string(),
                    time_added: Some(now.clone()),
                }),
                (Some(i), false) => {
                    taints.remove(i);
                }
                _ => {}
            }
        };
        want(taints, keys::TAINT_UNSCHEDULABLE, "NoSchedule", cordoned);
        want(taints, keys::TAINT_NOT_READY, "NoSchedule", !ready);
        want(taints, keys::TAINT_NOT_READY, "NoExecute", !ready);
        if *taints != before {
            self.bump_node(name);
        }
    }
}

fn set_ready(
    node: &mut Node,
    ready: bool,
    now: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) {
    let status = node.status.get_or_insert_with(NodeStatus::default);
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let (status_text, reason, message) = if ready {
        ("True", "KubeletReady", "kubelet is posting ready status")
    } else {
        (
            "False",
            "KubeletNotReady",
            "container runtime network not ready: node is rebooting",
        )
    };
    match conditions.iter_mut().find(|c| c.type_ == "Ready") {
        Some(c) => {
            c.status = status_text.into();
            c.reason = Some(reason.into());
            c.message = Some(message.into());
            c.last_transition_time = Some(now.clone());
            c.last_heartbeat_time = Some(now);
        }
        None => conditions.insert(
            0,
            NodeCondition {
                type_: "Ready".into(),
                status: status_text.into(),
                reason: Some(reason.into()),
                message: Some(message.into()),
                last_transition_time: Some(now.clone()),
                last_heartbeat_time: Some(now),
            },
        ),
    }
}
