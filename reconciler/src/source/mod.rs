//! The Git source of desired state (ARCHITECTURE §2.2): repository access with `gix`, the
//! manifest files of a commit, commit-atomic validation with a last-good tracker, change
//! triggers (poll, filesystem events, webhooks) and commit-signature verification.

pub mod annotation_edit;
pub mod approval_commit;
pub mod approvals;
pub mod budget;
pub mod cadence;
pub mod desired;
pub mod manifests;
pub mod remote_call;
pub mod repo;
pub mod signature;
pub mod tree;
pub mod triggers;
pub mod webhook;

/// The branch status write-back commits to by default (ARCHITECTURE §4). It is never read as
/// desired state.
pub const DEFAULT_STATUS_BRANCH: &str = "nodewright/status";
