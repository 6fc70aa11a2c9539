//! Everything a pass carries to the next, behind one boundary. The engine is a pure function
//! of the snapshot; what lives here only saves work, and a lost cache costs one cold pass,
//! never a different plan (docs/engine-performance.md).
//!
//! - [`StateCache`] (`state_cache.rs`): the caller-owned cache, with the node entries (each
//!   node object, its memo and its parsed node states), the node order and selections, and
//!   what a pass derived per NodeWright and selected node.
//! - [`job_table`]: the pass's table of snapshot Jobs (facts, `package` annotation, pods,
//!   pruning and sweep verdicts), handed from pass to pass for the same Job object.
//! - `job_pods.rs`: the snapshot's pods by their Job controller uid, brought up to date from
//!   what changed.
//!
//! The pass starts from these in `engine/context/start.rs` (tables in node order, selections,
//! parsed states, Job rows), answers the rule modules' questions from them in
//! `engine/context/memos.rs` and `NwView`, and hands back what it learned when it turns into
//! the plan. The lifecycle modules never see this module: they read the snapshot and the
//! pass's tables, and ask the pass for derived facts.

mod job_pods;
pub mod job_table;
pub mod state_cache;

pub use state_cache::StateCache;
