//! The port between the engine and a cluster (ARCHITECTURE §2.2): build a [`Snapshot`],
//! execute [`Action`]s, apply the desired CRs from Git, and wait for changes.
//!
//! Adapters: the simulated cluster (`sim`) and kube-rs (`kube`), with leader election on a
//! Lease (`lease`) for the latter.

pub mod kube;
pub mod lease;
pub mod sim;

use std::future::Future;

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
    /// Whether this replica may write now. False on a follower while another replica holds
    /// the leader Lease: the loop then materializes nothing, runs no pass and commits no
    /// status, so only the leader speaks for the fleet (cluster::lease).
    fn may_write(&self) -> bool {
        true
    }
}
