//! Reboot tracking and `REAPPLY_ON_REBOOT` (spec/operator.md §10.6).

use nodewright_schema::keys::{self, event};
use nodewright_schema::{Status, names};

use super::context::PassCtx;
use super::runtime;
use super::write_order::After;
use crate::plan::{Action, EventObject, EventType};

/// Compares every selected node's boot id with `status.nodeBootIds`. Returns whether anything
/// was written (which ends the pass, §5.2 step 5).
pub fn track(ctx: &mut PassCtx) -> bool {
    let mut wrote = false;
    for nw in 0..ctx.nws.len() {
        wrote |= ctx.track_boot_ids(nw, track_node);
    }
    wrote
}

/// What tracking found on one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootTracked {
    /// The node reports no boot id.
    Unreported,
    /// `status.nodeBootIds` holds the node's boot id.
    Recorded,
    /// The boot id was recorded now, after a reset when the node rebooted.
    Written,
}

/// Records node `n`'s boot id for NodeWright `nw` (§10.6). A node that rebooted since its
/// last record is reset first under `REAPPLY_ON_REBOOT`.
fn track_node(ctx: &mut PassCtx, nw: usize, n: usize) -> BootTracked {
    let node_name = ctx.node(n).name();
    let Some(boot) = ctx.node(n).boot_id() else {
        return BootTracked::Unreported;
    };
    let recorded = ctx.nws[nw].node_boot_ids.get(node_name);
    if recorded.map(String::as_str) == Some(boot) {
        return BootTracked::Recorded;
    }
    if recorded.is_some() && ctx.settings.reapply_on_reboot {
        reset_node(ctx, nw, n);
    }
    ctx.nws[nw].publish_boot_id(node_name, boot);
    BootTracked::Written
}

/// The reboot reset of one node for one NodeWright (§10.6): the node's records of this
/// NodeWright go (its cordon stays so the re-run releases it) and its Jobs are deleted.
fn reset_node(ctx: &mut PassCtx, nw: usize, n: usize) {
    let name = ctx.nws[nw].name;
    let key = ctx.nws[nw].state_key();
    let node_name = ctx.node(n).name().to_string();
    let spec = &ctx.nws[nw].nw.spec;
    if spec.runtime_required && spec.auto_taint_new_nodes {
        // The rebooted node counts as new: the taint goes back on first (same patch).
        runtime::taint_node(ctx, n);
    }
    for ev in [
        EventObject::NodeWright(name.to_string()),
        EventObject::Node(node_name.clone()),
    ] {
        ctx.event(
            ev,
            EventType::Normal,
            event::REBOOT,
            format!("[nodewright:{name}] node {node_name} rebooted; re-applying packages"),
        );
    }
    let node = ctx.node_mut(n);
    node.delete_state(key);
    for key in [
        keys::status(name),
        keys::node_version(name),
        keys::drain_start(name),
        keys::drain_blocked(name),
    ] {
        node.remove_annotation(&key);
    }
    node.remove_label(&keys::status(name));
    let view = &mut ctx.nws[nw];
    view.retain_nodes(|k| k != node_name);
    super::status::set_nodewright_status(ctx, nw, Status::Unknown);
    let label = names::node_label_value(&node_name);
    let doomed: Vec<(String, Option<String>)> = ctx
        .index
        .jobs_of(name, &label)
        .iter()
        .map(|j| {
            (
                j.metadata.name.clone().unwrap_or_default(),
                j.metadata.uid.clone(),
            )
        })
        .collect();
    // The Jobs go after the reset they belong to, so a failed reset leaves both to the next pass.
    for (job, uid) in doomed {
        ctx.emit_after(
            Action::DeleteJob {
                name: job,
                uid,
                reason: format!("node {node_name} rebooted (REAPPLY_ON_REBOOT)"),
            },
            [After::Node(node_name.clone())],
        );
    }
}
