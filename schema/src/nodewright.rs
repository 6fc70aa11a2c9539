//! The `NodeWright` custom resource (spec/operator.md §1), wire-compatible with upstream.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::node_state::{NodeState, Status};

/// Desired state of a NodeWright: which nodes, which packages, how fast (§1.2).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "nodewright.nvidia.com",
    version = "v1alpha1",
    kind = "NodeWright",
    plural = "nodewrights",
    singular = "nodewright",
    status = "NodeWrightStatus",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.status"}"#,
    printcolumn = r#"{"name":"Priority","type":"integer","jsonPath":".spec.priority"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Nodes In-Progress","type":"integer","jsonPath":".status.nodesInProgress"}"#,
    printcolumn = r#"{"name":"Complete Nodes","type":"string","jsonPath":".status.completeNodes"}"#,
    printcolumn = r#"{"name":"Packages","type":"string","jsonPath":".status.packageList"}"#,
    printcolumn = r#"{"name":"Policy","type":"string","jsonPath":".spec.deploymentPolicy"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodeWrightSpec {
    /// Which nodes this resource targets; empty selects every node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selectors: Option<LabelSelector>,
    /// Concurrency of the built-in default compartment; exclusive with `deploymentPolicy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruption_budget: Option<InterruptionBudget>,
    /// Name of a cluster-scoped DeploymentPolicy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_policy: Option<String>,
    /// Per-NodeWright policy overrides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_policy_options: Option<DeploymentPolicyOptions>,
    /// Ordering across NodeWrights; lower first (default 200).
    #[serde(default = "default_priority")]
    #[schemars(range(min = 1))]
    pub priority: i32,
    /// Whether this NodeWright gates later priorities per node or cluster-wide.
    #[serde(default)]
    pub sequencing: Sequencing,
    /// At most one package dispatched per node per pass.
    #[serde(default)]
    pub serial: bool,
    /// Pods that must finish before a drain starts; empty protects nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_non_interrupt_labels: Option<LabelSelector>,
    /// Tunes the drain before interrupt work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_config: Option<DrainConfig>,
    /// Appended to package pod tolerations and to the taint check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_tolerations: Option<Vec<Toleration>>,
    /// Nodes must complete this resource before workloads may run.
    #[serde(default)]
    pub runtime_required: bool,
    /// With `runtimeRequired`: cordon persistently when the taint is removed.
    #[serde(default)]
    pub runtime_required_cordon_after: bool,
    /// With `runtimeRequired`: taint new matching nodes.
    #[serde(default)]
    pub auto_taint_new_nodes: bool,
    /// The work; the map key is the package name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packages: Option<BTreeMap<String, Package>>,
}

/// Default `spec.priority`.
pub fn default_priority() -> i32 {
    200
}

impl NodeWrightSpec {
    /// The packages map, empty when absent.
    pub fn packages(&self) -> &BTreeMap<String, Package> {
        static EMPTY: BTreeMap<String, Package> = BTreeMap::new();
        self.packages.as_ref().unwrap_or(&EMPTY)
    }
}

/// `sequencing` (§5.10).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Sequencing {
    /// Gate later priorities per node (default).
    #[default]
    Node,
    /// Gate later priorities until this NodeWright completes everywhere.
    All,
}

/// `interruptionBudget` (§1.3): at most one of the two fields.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InterruptionBudget {
    /// Percent of selected nodes, 0..=100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub percent: Option<i32>,
    /// Number of nodes, ≥ 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub count: Option<i32>,
}

/// `deploymentPolicyOptions`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentPolicyOptions {
    /// Overrides the policy's `resetBatchStateOnCompletion` (schema default `true`).
    #[serde(default = "some_true", skip_serializing_if = "Option::is_none")]
    pub reset_batch_state_on_completion: Option<bool>,
}

pub(crate) fn some_true() -> Option<bool> {
    Some(true)
}

/// `drainConfig` (§1.4).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrainConfig {
    /// Delete pods instead of evicting them (bypasses PDBs). Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_eviction: Option<bool>,
    /// `false`: a pod with an emptyDir volume blocks the drain. Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_empty_dir_data: Option<bool>,
    /// `false`: a pod without a controller blocks the drain. Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
    /// Skip DaemonSet pods. Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_daemon_sets: Option<bool>,
    /// Bound from drain start to drained; unset or 0 = unbounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<crate::duration::GoDuration>,
    /// Grace period for eviction/delete, rounded up to seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_period: Option<crate::duration::GoDuration>,
}

impl DrainConfig {
    /// `disableEviction` with its default.
    pub fn disable_eviction(&self) -> bool {
        self.disable_eviction.unwrap_or(false)
    }
    /// `deleteEmptyDirData` with its default.
    pub fn delete_empty_dir_data(&self) -> bool {
        self.delete_empty_dir_data.unwrap_or(true)
    }
    /// `force` with its default.
    pub fn force(&self) -> bool {
        self.force.unwrap_or(true)
    }
    /// `ignoreDaemonSets` with its default.
    pub fn ignore_daemon_sets(&self) -> bool {
        self.ignore_daemon_sets.unwrap_or(true)
    }
}

/// One package of `spec.packages` (§1.5).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Package {
    /// Comes from the map key; setting it to anything else is rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 43), regex(pattern = r"^[a-z][-a-z0-9]{0,41}[a-z]$"))]
    pub name: Option<String>,
    /// Semver; the image tag and the ordering key.
    pub version: String,
    /// Bare `registry/repository`, no tag, no digest.
    #[schemars(regex(pattern = r"^\S+$"))]
    pub image: String,
    /// `sha256:<64 hex>` pin of the pulled bytes.
    #[serde(
        rename = "containerSHA",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(regex(pattern = r"^sha256:[0-9a-f]{64}$"))]
    pub container_sha: Option<String>,
    /// Full agent image with tag for this package's containers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_image_override: Option<String>,
    /// Declares an interrupt: cordon/drain, interrupt, post-interrupt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupt: Option<Interrupt>,
    /// Dependencies: package name → exact spec version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depends_on: Option<BTreeMap<String, String>>,
    /// Package configuration, copied into a ConfigMap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<BTreeMap<String, String>>,
    /// Interrupt to run when a matching configMap key changes (literal key or glob).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_interrupts: Option<BTreeMap<String, Interrupt>>,
    /// Env entries for the work and check containers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<EnvVar>>,
    /// Resource overrides for the init containers: all four or none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Pod `terminationGracePeriodSeconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graceful_shutdown: Option<crate::duration::GoDuration>,
    /// Per-attempt (package) or whole-stage (interrupt) bound; `0` removes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage_timeout: Option<crate::duration::GoDuration>,
    /// Uninstall support and request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uninstall: Option<Uninstall>,
}

impl Package {
    /// `HasInterrupt` ignoring pending config updates (§1.5).
    pub fn has_spec_interrupt(&self) -> bool {
        self.interrupt.is_some()
    }
    /// `uninstall.enabled`.
    pub fn uninstall_enabled(&self) -> bool {
        self.uninstall.as_ref().is_some_and(|u| u.enabled)
    }
    /// `IsUninstalling` = `enabled && apply`.
    pub fn is_uninstalling(&self) -> bool {
        self.uninstall
            .as_ref()
            .is_some_and(|u| u.enabled && u.apply)
    }
    /// The configMap, empty when absent.
    pub fn config_map(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.config_map.as_ref().unwrap_or(&EMPTY)
    }
    /// The configInterrupts, empty when absent.
    pub fn config_interrupts(&self) -> &BTreeMap<String, Interrupt> {
        static EMPTY: BTreeMap<String, Interrupt> = BTreeMap::new();
        self.config_interrupts.as_ref().unwrap_or(&EMPTY)
    }
    /// The dependsOn map, empty when absent.
    pub fn depends_on(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.depends_on.as_ref().unwrap_or(&EMPTY)
    }
    /// The image reference a pod pulls: `<image>@<containerSHA>` or `<image>:<version>`.
    pub fn pull_image(&self) -> String {
        match self.container_sha.as_deref().filter(|s| !s.is_empty()) {
            Some(sha) => format!("{}@{}", self.image, sha),
            None => format!("{}:{}", self.image, self.version),
        }
    }
}

/// The interrupt object (§1.6).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Interrupt {
    /// What the agent does on the host.
    #[serde(rename = "type")]
    pub kind: InterruptType,
    /// Services restarted by a `service` interrupt.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<String>,
}

/// `interrupt.type` (§1.6), ranked for coalescing (§6.13).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum InterruptType {
    /// Reboot the node (rank 0).
    #[serde(rename = "reboot")]
    Reboot,
    /// `service procps force-reload` (rank 1).
    #[serde(rename = "restartAllServices")]
    RestartAllServices,
    /// `systemctl daemon-reload` then restart each service (rank 2).
    #[serde(rename = "service")]
    Service,
    /// Nothing (rank 3).
    #[serde(rename = "noop")]
    Noop,
}

impl InterruptType {
    /// Coalescing rank: lower wins (§6.13).
    pub fn rank(self) -> u8 {
        match self {
            InterruptType::Reboot => 0,
            InterruptType::RestartAllServices => 1,
            InterruptType::Service => 2,
            InterruptType::Noop => 3,
        }
    }
    /// The CR spelling (`reboot`, `service`, …), used in interrupt Job names.
    pub fn as_str(self) -> &'static str {
        match self {
            InterruptType::Reboot => "reboot",
            InterruptType::RestartAllServices => "restartAllServices",
            InterruptType::Service => "service",
            InterruptType::Noop => "noop",
        }
    }
    /// The agent's wire spelling (§1.6).
    pub fn agent_wire_name(self) -> &'static str {
        match self {
            InterruptType::Reboot => "node_restart",
            InterruptType::RestartAllServices => "restart_all_services",
            InterruptType::Service => "service_restart",
            InterruptType::Noop => "no_op",
        }
    }
}

/// `resources` override (§1.5).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRequirements {
    /// CPU request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_request: Option<Quantity>,
    /// CPU limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_limit: Option<Quantity>,
    /// Memory request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_request: Option<Quantity>,
    /// Memory limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<Quantity>,
}

/// `uninstall` (§1.7).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Uninstall {
    /// The image ships uninstall scripts.
    #[serde(default)]
    pub enabled: bool,
    /// Request uninstall on every selected node.
    #[serde(default)]
    pub apply: bool,
}

/// Observed state of a NodeWright (§1.9). A re-derived publication of the node annotations.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeWrightStatus {
    /// Roll-up Status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    /// Per-node Status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_status: Option<BTreeMap<String, Status>>,
    /// Mirror of each node's node-state annotation. Never authoritative.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_state: Option<BTreeMap<String, NodeState>>,
    /// Conditions keyed by type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// Generation last seen complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Last seen boot id per node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_boot_ids: Option<BTreeMap<String, String>>,
    /// Nodes picked into the current batch, with pick time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_priority: Option<BTreeMap<String, Time>>,
    /// Nodes ever removed from `nodePriority` since the last reset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_order_offset: Option<i32>,
    /// configMap keys changed in the pending/last config cycle, per package.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_updates: Option<BTreeMap<String, Vec<String>>>,
    /// Per-compartment counters and batch state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compartment_statuses: Option<BTreeMap<String, CompartmentStatus>>,
    /// Nodes `in_progress` plus `erroring`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes_in_progress: Option<i32>,
    /// `"<complete>/<selected>"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub complete_nodes: Option<String>,
    /// Spec packages as `name:version`, sorted, comma-joined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package_list: Option<String>,
}

/// One entry of `status.compartmentStatuses` (§1.9, §16.3).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompartmentStatus {
    /// Nodes in the compartment.
    #[serde(default)]
    pub matched: i32,
    /// Budget ceiling over `matched`.
    #[serde(default)]
    pub ceiling: i32,
    /// Nodes `in_progress`.
    #[serde(default)]
    pub in_progress: i32,
    /// Nodes complete by package state.
    #[serde(default)]
    pub completed: i32,
    /// `completed × 100 / matched`.
    #[serde(default)]
    pub progress_percent: i32,
    /// Only for compartments with a strategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_state: Option<BatchState>,
}

/// Batch progress of one compartment (§2.3–§2.4). Zero values are omitted in JSON.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchState {
    /// 1-based batch number.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub current_batch: i32,
    /// Failing batches in a row.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub consecutive_failures: i32,
    /// Checkpoint of complete nodes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub completed_nodes: i32,
    /// Checkpoint of erroring nodes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed_nodes: i32,
    /// The compartment admits nothing until reset.
    #[serde(default, skip_serializing_if = "is_false")]
    pub should_stop: bool,
    /// Evaluated size of the last batch.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub last_batch_size: i32,
    /// Whether the last batch failed its threshold.
    #[serde(default, skip_serializing_if = "is_false")]
    pub last_batch_failed: bool,
}

impl BatchState {
    /// The state a reset writes (§2.7).
    pub fn reset() -> Self {
        BatchState {
            current_batch: 1,
            ..BatchState::default()
        }
    }
}

fn is_zero(v: &i32) -> bool {
    *v == 0
}
fn is_false(v: &bool) -> bool {
    !*v
}

impl NodeWright {
    /// Whether the rollout of the current spec is done: Status `complete` at the current
    /// generation (`observedGeneration` = `metadata.generation`, §1.9). A `complete` left from
    /// an earlier generation is not convergence.
    pub fn is_converged(&self) -> bool {
        self.status.as_ref().is_some_and(|s| {
            s.status == Some(crate::Status::Complete)
                && s.observed_generation == self.metadata.generation
        })
    }
    /// The generation the last pass worked on: the `Ready` condition's `observedGeneration`,
    /// written every pass. (`status.observedGeneration` moves only when a rollout completes,
    /// §1.9, so it lags throughout a rollout.)
    pub fn worked_generation(&self) -> Option<i64> {
        self.status
            .as_ref()?
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == crate::keys::condition::READY)?
            .observed_generation
    }

    /// Whether the pause annotation is exactly `"true"`.
    pub fn is_paused(&self) -> bool {
        annotation_is_true(self, crate::keys::PAUSE)
    }
    /// Whether the disable annotation is exactly `"true"`.
    pub fn is_disabled(&self) -> bool {
        annotation_is_true(self, crate::keys::DISABLE)
    }
    /// Whether the object is being deleted.
    pub fn is_deleting(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }
    /// The object's name (empty when unset, which admission prevents).
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }
}

fn annotation_is_true(nw: &NodeWright, key: &str) -> bool {
    nw.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .is_some_and(|v| v == "true")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complete_counts_as_converged_only_at_the_current_generation() {
        let mut nw = NodeWright::new("gpu", NodeWrightSpec::default());
        nw.metadata.generation = Some(2);
        assert!(!nw.is_converged(), "no status yet");
        nw.status = Some(NodeWrightStatus {
            status: Some(crate::Status::Complete),
            observed_generation: Some(1),
            ..NodeWrightStatus::default()
        });
        assert!(!nw.is_converged(), "complete for the previous spec");
        if let Some(s) = nw.status.as_mut() {
            s.observed_generation = Some(2);
        }
        assert!(nw.is_converged());
    }
}
