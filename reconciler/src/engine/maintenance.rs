//! Maintenance windows (docs/maintenance-windows.md): while none of a NodeWright's windows is
//! open, it admits no new node; nodes admitted earlier finish what they started. The windows
//! come from the NodeWright's annotations, or its DeploymentPolicy's for a key the NodeWright
//! does not set, and are evaluated at the snapshot's `now`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use nodewright_schema::keys::{condition, reason};
use nodewright_schema::maintenance::{self, Schedule, WindowError, WindowState};

use super::context::PassCtx;

/// The window state of a NodeWright now: `None` without windows.
pub fn state(ctx: &PassCtx<'_>, nw: usize) -> Option<Result<WindowState, WindowError>> {
    let view = &ctx.nws[nw];
    let (windows, timezone) = maintenance::declared(
        view.nw.metadata.annotations.as_ref(),
        view.policy.and_then(|p| p.metadata.annotations.as_ref()),
    )?;
    Some(Schedule::parse(windows, timezone).map(|s| s.at(ctx.now)))
}

/// Whether the NodeWright may admit new nodes now. Windows that cannot be read admit nothing:
/// a rollout that was meant to wait must not start by accident.
pub fn admits(ctx: &PassCtx<'_>, nw: usize) -> bool {
    state(ctx, nw).is_none_or(|s| s.is_ok_and(WindowState::is_open))
}

/// The `OutsideMaintenanceWindow` condition, present whenever windows are configured, and a
/// requeue at the next opening or closing so the pass after it comes no later.
pub fn refresh(ctx: &mut PassCtx<'_>, nw: usize) {
    let now = ctx.now;
    let Some(state) = state(ctx, nw) else {
        ctx.nws[nw].remove_condition(condition::OUTSIDE_MAINTENANCE_WINDOW);
        return;
    };
    let (outside, why, message) = match &state {
        Ok(WindowState::Closed { opens }) => (
            true,
            reason::WINDOW_CLOSED,
            format!("no maintenance window is open; the next opens at {opens}"),
        ),
        Ok(WindowState::Open {
            closes: Some(closes),
        }) => (
            false,
            reason::WINDOW_OPEN,
            format!("a maintenance window is open until {closes}"),
        ),
        Ok(WindowState::Open { closes: None }) => (
            false,
            reason::WINDOW_OPEN,
            "a maintenance window is open and never closes".to_string(),
        ),
        Err(e) => (
            true,
            reason::INVALID_MAINTENANCE_WINDOW,
            format!("maintenance windows cannot be read, so no node is admitted: {e}"),
        ),
    };
    if let Ok(change) = &state
        && let Some(at) = change.next_change()
        && let Ok(left) = std::time::Duration::try_from(at.duration_since(now))
    {
        ctx.requeue_after(left);
    }
    ctx.nws[nw].set_condition(
        Condition {
            type_: condition::OUTSIDE_MAINTENANCE_WINDOW.to_string(),
            status: if outside { "True" } else { "False" }.to_string(),
            reason: why.to_string(),
            message,
            last_transition_time: Time(now),
            observed_generation: None,
        },
        now,
    );
}
