//! Every annotation, label, taint, finalizer, condition and environment-variable name the
//! product reads or writes (spec/operator.md §4, §8.5, §12, §13; spec/agent.md §4).
//!
//! One home per key: nothing else in the workspace spells these strings. Per-NodeWright keys
//! are built by the functions below so the `<key>_<nodewright>` convention lives here too.

/// API group of the current resources.
pub const GROUP: &str = "nodewright.nvidia.com";
/// API group of the pre-rename resources (`Skyhook`), read for compatibility (§0.2).
pub const LEGACY_GROUP: &str = "skyhook.nvidia.com";
/// The only served version.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of current objects.
pub const API_VERSION: &str = "nodewright.nvidia.com/v1alpha1";
/// `apiVersion` of legacy objects.
pub const LEGACY_API_VERSION: &str = "skyhook.nvidia.com/v1alpha1";
/// Kind of the main resource.
pub const KIND_NODEWRIGHT: &str = "NodeWright";
/// Kind of the legacy main resource.
pub const KIND_LEGACY_SKYHOOK: &str = "Skyhook";
/// Kind of the rollout policy resource (same name in both groups).
pub const KIND_DEPLOYMENT_POLICY: &str = "DeploymentPolicy";

/// Prefix of every metadata key we own (`nodewright.nvidia.com/`).
pub const PREFIX: &str = "nodewright.nvidia.com/";
/// Legacy prefix (`skyhook.nvidia.com/`), read where the spec says so.
pub const LEGACY_PREFIX: &str = "skyhook.nvidia.com/";

/// Finalizer on every live NodeWright (§11).
pub const FINALIZER: &str = "nodewright.nvidia.com/nodewright";
/// Legacy finalizer on `Skyhook` objects.
pub const LEGACY_FINALIZER: &str = "skyhook.nvidia.com/skyhook";

// ---- Annotations on the NodeWright (§1.8) ----

/// `"true"` pauses the NodeWright and everything after it (§5.11).
pub const PAUSE: &str = "nodewright.nvidia.com/pause";
/// This project's maintenance windows, on a NodeWright or a DeploymentPolicy in Git: when a
/// rollout may admit new nodes (`schema::maintenance`, docs/maintenance-windows.md).
pub const MAINTENANCE_WINDOWS: &str = "gitops.nodewright.nvidia.com/maintenance-windows";
/// The IANA timezone of [`MAINTENANCE_WINDOWS`] (default UTC).
pub const MAINTENANCE_TIMEZONE: &str = "gitops.nodewright.nvidia.com/maintenance-timezone";
/// This project's approval gate, on a NodeWright in Git: the compartments (`*`: all) whose
/// batches after the first wait for an approval (`schema::approvals`, docs/approvals.md).
pub const APPROVAL_REQUIRED: &str = "gitops.nodewright.nvidia.com/approval-required";
/// The approvals of [`APPROVAL_REQUIRED`]: `compartment=N` entries, each approving batches up
/// to N of that compartment for the rollout it was given in.
pub const APPROVED_BATCHES: &str = "gitops.nodewright.nvidia.com/approved-batches";
/// `"true"` disables the NodeWright (§5.11).
pub const DISABLE: &str = "nodewright.nvidia.com/disable";
/// Operator version stamp on the NodeWright.
pub const VERSION_STAMP: &str = "nodewright.nvidia.com/version";
/// Written by the legacy migration mirror only.
pub const MIRRORED_FROM: &str = "nodewright.nvidia.com/mirrored-from";
/// This project's record of the Git commit a CR was materialized from.
pub const SOURCE_COMMIT: &str = "nodewright.nvidia.com/source-commit";
/// This project's record of the file (and line) a CR was declared in.
pub const SOURCE_PATH: &str = "nodewright.nvidia.com/source-path";

// ---- Node annotations (§4.1) and labels (§4.3) ----

/// Node label (exact value `"true"`) that makes every NodeWright leave the node alone (§5.9).
pub const IGNORE_LABEL: &str = "nodewright.nvidia.com/ignore";
/// Persistent cordon applied by `runtimeRequiredCordonAfter` (§10.5).
pub const RUNTIME_REQUIRED_CORDON: &str = "nodewright.nvidia.com/runtimeRequiredCordon";
/// Value written for [`RUNTIME_REQUIRED_CORDON`] (presence is what matters; decision recorded).
pub const RUNTIME_REQUIRED_CORDON_VALUE: &str = "true";

/// Node annotation prefix segments of the per-NodeWright keys.
pub mod node_key {
    /// `nodeState_<nw>`: the per-package JSON state (§4.2).
    pub const NODE_STATE: &str = "nodeState_";
    /// `status_<nw>`: the node's Status for a NodeWright (annotation and label).
    pub const STATUS: &str = "status_";
    /// `version_<nw>`: node-state schema stamp.
    pub const VERSION: &str = "version_";
    /// `cordon_<nw>`: this NodeWright owns (part of) the node's cordon.
    pub const CORDON: &str = "cordon_";
    /// `drainStart_<nw>`: when the current drain started.
    pub const DRAIN_START: &str = "drainStart_";
    /// `drainBlocked_<nw>`: pods blocking the drain.
    pub const DRAIN_BLOCKED: &str = "drainBlocked_";
    /// `configApplied_<nw>`: this project's applied-config record (§16.3).
    pub const CONFIG_APPLIED: &str = "configApplied_";
    /// `autoTaint_<taintKey>`: the operator applied the runtime-required taint.
    pub const AUTO_TAINT: &str = "autoTaint_";

    /// The per-NodeWright keys a reset or finalizer cleanup may remove (§11.1).
    pub const PER_NODEWRIGHT: [&str; 7] = [
        NODE_STATE,
        STATUS,
        VERSION,
        CORDON,
        DRAIN_START,
        DRAIN_BLOCKED,
        CONFIG_APPLIED,
    ];
}

fn prefixed(segment: &str, suffix: &str) -> String {
    let mut key = String::with_capacity(super::keys::PREFIX.len() + segment.len() + suffix.len());
    key.push_str(PREFIX);
    key.push_str(segment);
    key.push_str(suffix);
    key
}

/// `nodewright.nvidia.com/nodeState_<nw>`.
pub fn node_state(nw: &str) -> String {
    prefixed(node_key::NODE_STATE, nw)
}
/// `nodewright.nvidia.com/status_<nw>` (annotation and label).
pub fn status(nw: &str) -> String {
    prefixed(node_key::STATUS, nw)
}
/// `nodewright.nvidia.com/version_<nw>`.
pub fn node_version(nw: &str) -> String {
    prefixed(node_key::VERSION, nw)
}
/// `nodewright.nvidia.com/cordon_<nw>`.
pub fn cordon(nw: &str) -> String {
    prefixed(node_key::CORDON, nw)
}
/// `nodewright.nvidia.com/drainStart_<nw>`.
pub fn drain_start(nw: &str) -> String {
    prefixed(node_key::DRAIN_START, nw)
}
/// `nodewright.nvidia.com/drainBlocked_<nw>`.
pub fn drain_blocked(nw: &str) -> String {
    prefixed(node_key::DRAIN_BLOCKED, nw)
}
/// `nodewright.nvidia.com/configApplied_<nw>`.
pub fn config_applied(nw: &str) -> String {
    prefixed(node_key::CONFIG_APPLIED, nw)
}
/// `nodewright.nvidia.com/autoTaint_<taintKey>`.
pub fn auto_taint(taint_key: &str) -> String {
    prefixed(node_key::AUTO_TAINT, taint_key)
}
/// The legacy spelling of a current key: `skyhook.nvidia.com/…` for `nodewright.nvidia.com/…`.
pub fn legacy(key: &str) -> String {
    match key.strip_prefix(PREFIX) {
        Some(rest) => format!("{LEGACY_PREFIX}{rest}"),
        None => key.to_string(),
    }
}
/// Whether `key` is one of ours (current or legacy prefix).
pub fn is_prefixed(key: &str) -> bool {
    key.starts_with(PREFIX) || key.starts_with(LEGACY_PREFIX)
}
/// Whether `key` is a cordon-ownership annotation of any NodeWright (`cordon_*`) (§7.3).
pub fn is_cordon_key(key: &str) -> bool {
    key.strip_prefix(PREFIX)
        .is_some_and(|rest| rest.starts_with(node_key::CORDON))
}

// ---- Node conditions (§4.5) ----

/// `nodewright.nvidia.com/<nw>/NotReady`.
pub fn node_condition_not_ready(nw: &str) -> String {
    format!("{PREFIX}{nw}/NotReady")
}
/// `nodewright.nvidia.com/<nw>/Erroring`.
pub fn node_condition_erroring(nw: &str) -> String {
    format!("{PREFIX}{nw}/Erroring")
}
/// Prefix of every node condition type belonging to a NodeWright.
pub fn node_condition_prefix(nw: &str) -> String {
    format!("{PREFIX}{nw}/")
}

// ---- Taints (§4.4, §5.8, §8.3) ----

/// Default runtime-required taint, `key=value:Effect`.
pub const DEFAULT_RUNTIME_REQUIRED_TAINT: &str =
    "nodewright.nvidia.com=runtime-required:NoSchedule";
/// Legacy runtime-required taint, also tolerated and removed.
pub const LEGACY_RUNTIME_REQUIRED_TAINT: &str = "skyhook.nvidia.com=runtime-required:NoSchedule";
/// Taint the node lifecycle controller sets while a node is cordoned.
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
/// Well-known node label the kubelet sets to the node's host name (selectors often use it).
pub const NODE_LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
/// Well-known node label the kubelet sets to the operating system (`linux`).
pub const NODE_LABEL_OS: &str = "kubernetes.io/os";
/// Well-known node label the kubelet sets to the CPU architecture (`amd64`).
pub const NODE_LABEL_ARCH: &str = "kubernetes.io/arch";
/// Taint the node lifecycle controller sets while a node is NotReady.
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
/// Taint the node lifecycle controller sets while a node is unreachable.
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";

// ---- Job and pod metadata (§4.7) ----

/// Job/pod label: the NodeWright name.
pub const JOB_LABEL_NAME: &str = "nodewright.nvidia.com/name";
/// Job/pod label: `<pkg>-<ver>`.
pub const JOB_LABEL_PACKAGE: &str = "nodewright.nvidia.com/package";
/// Job/pod label: the stage.
pub const JOB_LABEL_STAGE: &str = "nodewright.nvidia.com/stage";
/// Job/pod label: the node (or its `safeName`).
pub const JOB_LABEL_NODE: &str = "nodewright.nvidia.com/node";
/// Job/pod label: the NodeWright generation the Job was built from.
pub const JOB_LABEL_GENERATION: &str = "nodewright.nvidia.com/generation";
/// Job/pod label: `"True"` on interrupt Jobs.
pub const JOB_LABEL_INTERRUPT: &str = "nodewright.nvidia.com/interrupt";
/// Job annotation: `<nw>-<uid>-<generation>`.
pub const JOB_ANNOTATION_RESOURCE_ID: &str = "nodewright.nvidia.com/resource-id";
/// Job/pod annotation: the package JSON (§4.7).
pub const JOB_ANNOTATION_PACKAGE: &str = "nodewright.nvidia.com/package";
/// Job annotation: `"true"` once the terminal outcome was recorded (§8.8).
pub const JOB_ANNOTATION_STATE_RECORDED: &str = "nodewright.nvidia.com/state-recorded";
/// Job annotation: best-effort log tail (§8.12).
pub const JOB_ANNOTATION_LAST_LOGS: &str = "nodewright.nvidia.com/last-logs";
/// Interrupt Job annotation: failed over its restart budget (§8.16).
pub const JOB_ANNOTATION_RESTART_LIMIT_EXCEEDED: &str =
    "nodewright.nvidia.com/restart-limit-exceeded";
/// Job annotation (this project): digest of the package spec the Job was built from, so a
/// parked Job is replaced when the package is edited (§16.3).
pub const JOB_ANNOTATION_PACKAGE_DIGEST: &str = "nodewright.nvidia.com/package-digest";
/// Job annotation (this project): the configMap record (key → sha256 hex, compact JSON) the
/// Job was built with, recorded into `configApplied_<nw>` when its config stage completes.
pub const JOB_ANNOTATION_CONFIG_DIGESTS: &str = "nodewright.nvidia.com/config-digests";
/// Label the Job controller puts on child pods.
pub const JOB_CONTROLLER_UID_LABEL: &str = "batch.kubernetes.io/controller-uid";
/// Label carrying the Job's name on its pod template and pods.
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
/// The unprefixed controller-uid label the apiserver still puts beside
/// [`JOB_CONTROLLER_UID_LABEL`] on a Job's pod template.
pub const LEGACY_JOB_CONTROLLER_UID_LABEL: &str = "controller-uid";
/// The unprefixed job-name label beside [`JOB_NAME_LABEL`].
pub const LEGACY_JOB_NAME_LABEL: &str = "job-name";
/// Pod annotation marking mirror (static) pods.
pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// Pod annotation the LimitRanger admission plugin sets.
pub const LIMIT_RANGER_ANNOTATION: &str = "kubernetes.io/limit-ranger";

// ---- ConfigMap metadata (§4.8) ----

/// Label on node-metadata ConfigMaps (value: NodeWright name). Kept the legacy word.
pub const CONFIGMAP_LABEL_NODE_META: &str = "nodewright.nvidia.com/skyhook-node-meta";
/// Label on package ConfigMaps (value: NodeWright name).
pub const CONFIGMAP_LABEL_NAME: &str = "nodewright.nvidia.com/name";
/// Annotation on both ConfigMap kinds (value: NodeWright name).
pub const CONFIGMAP_ANNOTATION_NAME: &str = "nodewright.nvidia.com/name";
/// Annotation on node-metadata ConfigMaps (value: node name).
pub const CONFIGMAP_ANNOTATION_NODE_NAME: &str = "nodewright.nvidia.com/Node.name";
/// Annotation on package ConfigMaps (value: package name).
pub const CONFIGMAP_ANNOTATION_PACKAGE_NAME: &str = "nodewright.nvidia.com/Package.Name";
/// Annotation on package ConfigMaps (value: package version).
pub const CONFIGMAP_ANNOTATION_PACKAGE_VERSION: &str = "nodewright.nvidia.com/Package.Version";

// ---- NodeWright condition types and reasons (§12) ----

/// Condition types on the NodeWright.
pub mod condition {
    /// `Ready`.
    pub const READY: &str = "Ready";
    /// `TaintNotTolerable`.
    pub const TAINT_NOT_TOLERABLE: &str = "TaintNotTolerable";
    /// `NodesIgnored`.
    pub const NODES_IGNORED: &str = "NodesIgnored";
    /// `ApplyPackage`.
    pub const APPLY_PACKAGE: &str = "ApplyPackage";
    /// `DeploymentPolicyNotFound`.
    pub const DEPLOYMENT_POLICY_NOT_FOUND: &str = "DeploymentPolicyNotFound";
    /// `Blocked`.
    pub const BLOCKED: &str = "Blocked";
    /// `DrainBlocked`.
    pub const DRAIN_BLOCKED: &str = "DrainBlocked";
    /// `UninstallInProgress`.
    pub const UNINSTALL_IN_PROGRESS: &str = "UninstallInProgress";
    /// `UninstallFailed`.
    pub const UNINSTALL_FAILED: &str = "UninstallFailed";
    /// `NodeStateMalformed`.
    pub const NODE_STATE_MALFORMED: &str = "NodeStateMalformed";
    /// `DeletionBlocked`.
    pub const DELETION_BLOCKED: &str = "DeletionBlocked";
    /// `OutsideMaintenanceWindow`: whether admission waits for a maintenance window.
    pub const OUTSIDE_MAINTENANCE_WINDOW: &str = "OutsideMaintenanceWindow";
    /// `AwaitingApproval`: whether a gated compartment's next batch waits for an approval.
    pub const AWAITING_APPROVAL: &str = "AwaitingApproval";
    /// Legacy mirror suffix `Transition` (§12.3).
    pub const TRANSITION: &str = "Transition";
    /// Types that get a legacy prefixed mirror (§12.3).
    pub const MIRRORED: [&str; 5] = [
        READY,
        TAINT_NOT_TOLERABLE,
        NODES_IGNORED,
        APPLY_PACKAGE,
        DEPLOYMENT_POLICY_NOT_FOUND,
    ];
}

/// Condition reasons on the NodeWright and nodes.
pub mod reason {
    /// Ready reasons by Status (§12.1).
    pub const NODES_CONVERGED: &str = "NodesConverged";
    /// Ready reason for `in_progress`.
    pub const PROGRESSING: &str = "Progressing";
    /// Ready reason for `blocked`; also the `Blocked` condition type name.
    pub const BLOCKED: &str = "Blocked";
    /// Ready reason for `erroring`.
    pub const ERRORING: &str = "Erroring";
    /// Ready reason for `paused`.
    pub const PAUSED: &str = "Paused";
    /// Ready reason for `waiting`.
    pub const WAITING: &str = "Waiting";
    /// Ready reason for `disabled`.
    pub const DISABLED: &str = "Disabled";
    /// Ready reason for anything else.
    pub const UNKNOWN: &str = "Unknown";
    /// `OutsideMaintenanceWindow` reason while no window is open.
    pub const WINDOW_CLOSED: &str = "WindowClosed";
    /// `OutsideMaintenanceWindow` reason while a window is open.
    pub const WINDOW_OPEN: &str = "WindowOpen";
    /// `OutsideMaintenanceWindow` reason when the windows cannot be read (nothing is admitted).
    pub const INVALID_MAINTENANCE_WINDOW: &str = "InvalidMaintenanceWindow";
    /// `AwaitingApproval` reason while a batch waits for its approval.
    pub const BATCH_NOT_APPROVED: &str = "BatchNotApproved";
    /// `AwaitingApproval` reason while no batch waits.
    pub const NOTHING_PENDING: &str = "NothingPending";
    /// `Blocked` reason: a dependency is being or has been uninstalled (§6.15).
    pub const DEPENDENCY_UNINSTALLED: &str = "DependencyUninstalled";
    /// `Blocked` reason: protected pods still run (§7.5).
    pub const NON_INTERRUPT_PODS_RUNNING: &str = "NonInterruptPodsRunning";
    /// `DrainBlocked` reason and drain-blocker reason.
    pub const POD_DISRUPTION_BUDGET: &str = "PodDisruptionBudget";
    /// `DrainBlocked` reason and drain-blocker reason.
    pub const UNMANAGED_POD: &str = "UnmanagedPod";
    /// `DrainBlocked` reason and drain-blocker reason.
    pub const EMPTY_DIR_DATA: &str = "EmptyDirData";
    /// `DrainBlocked` reason when several kinds of blocker are present.
    pub const MULTIPLE_CAUSES: &str = "MultipleCauses";
    /// `UninstallInProgress` reason.
    pub const UNINSTALL_IN_PROGRESS: &str = "UninstallInProgress";
    /// `UninstallFailed` reason.
    pub const UNINSTALL_POD_FAILING: &str = "UninstallPodFailing";
    /// `NodeStateMalformed` reason.
    pub const PARSE_ERROR: &str = "ParseError";
    /// `DeletionBlocked` reasons (§11.2).
    pub const MALFORMED_NODE_STATE: &str = "MalformedNodeState";
    /// `DeletionBlocked` reason.
    pub const PAUSED_WITH_PENDING_UNINSTALL: &str = "PausedWithPendingUninstall";
    /// `DeletionBlocked` reason.
    pub const DISABLED_WITH_PENDING_UNINSTALL: &str = "DisabledWithPendingUninstall";
    /// Node `<nw>/NotReady` reasons (§4.5).
    pub const INCOMPLETE: &str = "Incomplete";
    /// Node `<nw>/NotReady` reason when complete.
    pub const COMPLETE: &str = "Complete";
    /// Node `<nw>/Erroring` reason when erroring.
    pub const PACKAGES_ERRORING: &str = "Package(s) Erroring or Unknown";
    /// Node `<nw>/Erroring` reason when not erroring.
    pub const NOT_ERRORING: &str = "Not Erroring";
    /// Event / condition reason `RestartLimitExceeded` (§8.16).
    pub const RESTART_LIMIT_EXCEEDED: &str = "RestartLimitExceeded";
}

/// Event reasons (§4.10).
pub mod event {
    /// Stage Job created; state change recorded.
    pub const APPLY: &str = "Apply";
    /// Draining for a package; interrupt Job created; restart limit.
    pub const INTERRUPT: &str = "Interrupt";
    /// Held by the non-interrupt barrier.
    pub const DRAIN: &str = "Drain";
    /// Drain timed out.
    pub const DRAIN_TIMEOUT: &str = "DrainTimeout";
    /// Node complete; NodeWright Status transition.
    pub const STATE: &str = "State";
    /// Reboot detected.
    pub const REBOOT: &str = "Reboot";
    /// Deletion blocked.
    pub const DELETION_BLOCKED: &str = "DeletionBlocked";
    /// Auto-taint failed.
    pub const AUTO_TAINT: &str = "AutoTaint";
}

/// Environment variables the operator injects into stage containers (§8.5), in Job order.
pub mod env {
    /// Host copy directory of the package (init-copy container; the agent re-exports it).
    pub const SKYHOOK_DIR: &str = "SKYHOOK_DIR";
    /// Host log directory.
    pub const SKYHOOK_LOG_DIR: &str = "SKYHOOK_LOG_DIR";
    /// Host root for flags, markers and history.
    pub const SKYHOOK_ROOT_DIR: &str = "SKYHOOK_ROOT_DIR";
    /// Whether the agent copies resolv.conf into the chroot.
    pub const COPY_RESOLV: &str = "COPY_RESOLV";
    /// `<nw>-<uid>-<generation>_<pkg>_<ver>`.
    pub const SKYHOOK_RESOURCE_ID: &str = "SKYHOOK_RESOURCE_ID";
    /// Node order within the rollout (§5.14).
    pub const SKYHOOK_NODE_ORDER: &str = "SKYHOOK_NODE_ORDER";
    /// Exported by the agent to every step: `<copyDir>/skyhook_dir`.
    pub const STEP_ROOT: &str = "STEP_ROOT";
    /// Exported by the agent to upgrade steps.
    pub const PREVIOUS_VERSION: &str = "PREVIOUS_VERSION";
    /// Exported by the agent to upgrade steps.
    pub const CURRENT_VERSION: &str = "CURRENT_VERSION";
    /// Makes the agent ignore step flags.
    pub const OVERLAY_ALWAYS_RUN_STEP: &str = "OVERLAY_ALWAYS_RUN_STEP";
    /// Variables excluded from the Job staleness comparison (§8.14).
    pub const STALENESS_IGNORED: [&str; 5] = [
        SKYHOOK_LOG_DIR,
        SKYHOOK_ROOT_DIR,
        COPY_RESOLV,
        SKYHOOK_RESOURCE_ID,
        SKYHOOK_NODE_ORDER,
    ];
}

/// Names of the synthetic default compartment and the metrics policy label without a policy.
pub const DEFAULT_COMPARTMENT: &str = "__default__";
/// `policy_name` metric label for NodeWrights without a policy (§2.8).
pub const LEGACY_POLICY_LABEL: &str = "legacy";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_nodewright_keys_follow_the_catalog() {
        assert_eq!(
            node_state("tuning"),
            "nodewright.nvidia.com/nodeState_tuning"
        );
        assert_eq!(status("tuning"), "nodewright.nvidia.com/status_tuning");
        assert_eq!(cordon("gpu"), "nodewright.nvidia.com/cordon_gpu");
        assert_eq!(
            auto_taint("nodewright.nvidia.com"),
            "nodewright.nvidia.com/autoTaint_nodewright.nvidia.com"
        );
        assert_eq!(legacy(&node_state("x")), "skyhook.nvidia.com/nodeState_x");
        assert!(is_cordon_key("nodewright.nvidia.com/cordon_other"));
        assert!(!is_cordon_key(
            "nodewright.nvidia.com/runtimeRequiredCordon"
        ));
    }
}
