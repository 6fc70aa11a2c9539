//! The port between the engine and a cluster (ARCHITECTURE §2.2): build a [`Snapshot`],
//! execute [`Action`]s, apply the desired CRs from Git, and wait for changes.
//!
//! Adapters: the simulated cluster (`sim`) and kube-rs (`kube`), with leader election on a
//! Lease (`lease`) for the latter.

pub mod api_budget;
mod drain_pods;
pub mod kube;
pub mod lease;
pub mod sim;
mod watched;

use std::collections::BTreeMap;
use std::future::Future;

use nodewright_schema::approvals::ApprovedBatches;
use nodewright_schema::{DeploymentPolicy, NodeWright};

use crate::plan::{Action, Outcome};
use crate::snapshot::Snapshot;

/// A failure talking to the cluster that is not an expected outcome.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The API refused or failed (HTTP status and message).
    #[error("{action} failed: {status} {message}")]
    Api {
        /// What was attempted.
        action: String,
        /// HTTP status code (500, 422, …).
        status: u16,
        /// The server's message.
        message: String,
    },
    /// The node-state annotation on the node does not parse, so a delta cannot be merged.
    #[error("node {node}: {source}")]
    MalformedNodeState {
        /// Node name.
        node: String,
        /// Parse error.
        source: nodewright_schema::node_state::MalformedNodeState,
    },
    /// Transport-level failure.
    #[error("cluster unreachable: {0}")]
    Transport(String),
}

/// The CRs Git declares, to be materialized in the cluster.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Desired {
    /// NodeWrights to create or update (server-side apply of the declared fields).
    pub nodewrights: Vec<NodeWright>,
    /// Policies to create or update.
    pub policies: Vec<DeploymentPolicy>,
    /// The commit they come from (recorded on each CR).
    pub commit: String,
    /// Per NodeWright, the batches its `approved-batches` approves for the rollout in force:
    /// only values given for this rollout count (source/approvals.rs).
    pub approvals: BTreeMap<String, ApprovedBatches>,
}

/// A read of one container's log (the `pods/log` subresource).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogRequest {
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub pod: String,
    /// Container name (`None`: the pod's only main container).
    pub container: Option<String>,
    /// Lines from the end (`None` or negative: all).
    pub tail_lines: Option<i64>,
    /// At most this many bytes (from the start of what `tail_lines` selected).
    pub limit_bytes: Option<i64>,
    /// The previous (terminated) instance of the container.
    pub previous: bool,
}

/// Lines the §8.12 snapshot asks the server for (the tail is cut to the byte cap after).
pub const LAST_LOGS_TAIL_LINES: i64 = 200;
/// Transfer guard of the §8.12 read: a log with huge lines is cut by the server first.
pub const LAST_LOGS_READ_LIMIT_BYTES: i64 = 1 << 20;
/// How long the §8.12 log read may take before the snapshot falls back.
pub const LAST_LOGS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The server-side tail the §8.12 snapshot reads.
pub fn last_logs_request(namespace: &str, pod: &str, container: &str) -> LogRequest {
    LogRequest {
        namespace: namespace.to_string(),
        pod: pod.to_string(),
        container: Some(container.to_string()),
        tail_lines: Some(LAST_LOGS_TAIL_LINES),
        limit_bytes: Some(LAST_LOGS_READ_LIMIT_BYTES),
        previous: false,
    }
}

/// The `last-logs` value from the outcome of the log read: the log tail when there is
/// output, else the waiting reason and message, else a line saying why there is no log. Always
/// some text, so the snapshot is taken once per Job.
pub fn last_logs_value(
    read: Result<String, ClusterError>,
    container: &str,
    fallback: Option<&str>,
) -> String {
    match read {
        Ok(text) if !text.trim().is_empty() => crate::plan::last_logs_text(text.as_bytes()),
        Ok(_) => fallback
            .map(str::to_string)
            .unwrap_or_else(|| format!("{container}: no log output")),
        Err(e) => fallback.map(str::to_string).unwrap_or_else(|| {
            crate::plan::last_logs_text(format!("{container}: log unavailable: {e}").as_bytes())
        }),
    }
}

/// A cluster the reconciler can drive.
pub trait Cluster {
    /// The current world. `memory` is carried over by the caller.
    fn snapshot(&self) -> impl Future<Output = Result<Snapshot, ClusterError>> + Send;
    /// Execute one action; expected non-success results are [`Outcome`]s, not errors.
    fn execute(
        &self,
        action: &Action,
    ) -> impl Future<Output = Result<Outcome, ClusterError>> + Send;
    /// Make the cluster's NodeWrights and policies match `desired`: apply declared fields,
    /// delete CRs Git no longer declares (their finalizer runs the uninstall rules).
    fn apply_desired(
        &self,
        desired: &Desired,
    ) -> impl Future<Output = Result<(), ClusterError>> + Send;
    /// Resolves when something changed since the last snapshot (or a timeout elapsed).
    fn changed(&self) -> impl Future<Output = ()> + Send;
    /// Reads a container's log once (`kubectl logs` without `-f`). Invalid UTF-8 is replaced.
    fn pod_logs(
        &self,
        request: &LogRequest,
    ) -> impl Future<Output = Result<String, ClusterError>> + Send;
    /// Follows a container's current instance (`kubectl logs -f`): hands each piece of output
    /// to `sink` as it is written and returns when the container stops. The in-process
    /// simulator does not move its clock while a caller waits, so there it hands over what
    /// is written so far and returns.
    fn follow_pod_logs(
        &self,
        request: &LogRequest,
        sink: &mut (dyn FnMut(&str) + Send),
    ) -> impl Future<Output = Result<(), ClusterError>> + Send;
    /// Whether this replica may write now. False on a follower while another replica holds
    /// the leader Lease: the loop then materializes nothing, runs no pass and commits no
    /// status, so only the leader speaks for the fleet (cluster::lease).
    fn may_write(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_logs_value_prefers_output_then_the_waiting_reason_then_says_why() {
        let gone = || {
            Err(ClusterError::Api {
                action: "read log".into(),
                status: 404,
                message: "pods \"p\" not found".into(),
            })
        };
        assert_eq!(
            last_logs_value(Ok("boom\n".into()), "c", Some("c: CrashLoopBackOff: x")),
            "boom\n"
        );
        assert_eq!(
            last_logs_value(Ok(" \n".into()), "c", Some("c: CrashLoopBackOff: x")),
            "c: CrashLoopBackOff: x"
        );
        assert_eq!(
            last_logs_value(Ok(String::new()), "c", None),
            "c: no log output"
        );
        assert_eq!(
            last_logs_value(gone(), "c", None),
            "c: log unavailable: read log failed: 404 pods \"p\" not found"
        );
    }
}
