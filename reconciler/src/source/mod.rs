//! The Git source of desired state (ARCHITECTURE §2.2): repository access with `gix`, the
//! manifest files of a commit, commit-atomic validation with a last-good tracker, change
//! triggers (poll, filesystem events, webhooks) and commit-signature verification.

pub mod manifests;
