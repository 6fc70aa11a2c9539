//! Status write-back to Git (ARCHITECTURE §4): status documents rendered from CR status,
//! coalesced, committed to the status branch.

pub mod coalesce;
pub mod git;
pub mod render;
pub mod source;
