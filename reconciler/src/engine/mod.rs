//! The lifecycle engine: the functional core `reconcile(&Snapshot, &Settings) -> Plan`
//! (ARCHITECTURE §2.2, spec/operator.md §5). Pure and deterministic: no I/O, no clock (the
//! snapshot carries `now`), no randomness.

pub mod complete;
pub mod context;
pub mod select;

use crate::plan::{Plan, Requeue};
use crate::settings::Settings;
use crate::snapshot::Snapshot;

use context::PassCtx;

/// One heavy pass over a snapshot (§5.2).
pub fn reconcile(snapshot: &Snapshot, settings: &Settings) -> Plan {
    let ctx = PassCtx::new(snapshot, settings);
    let (actions, active, after, _errors) = ctx.into_actions(Vec::new());
    let requeue = match (active, after) {
        (true, _) => Requeue::Active,
        (false, Some(d)) => Requeue::After(d),
        (false, None) => Requeue::Idle,
    };
    Plan { actions, requeue }
}
