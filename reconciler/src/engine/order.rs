//! Priority and sequencing across NodeWrights (spec/operator.md §5.10) and the node order
//! handed to stage Jobs as `SKYHOOK_NODE_ORDER` (§5.14).

use nodewright_schema::Sequencing;

use super::context::PassCtx;

/// Whether node `node` is ready for NodeWright `nw` (§5.10): every non-disabled predecessor
/// with `sequencing: node` is complete on it (or does not select it), and every one with
/// `sequencing: all` is complete everywhere. Pause is not consulted.
pub fn node_ready(ctx: &PassCtx, nw: usize, node: usize) -> bool {
    ctx.nws[..nw]
        .iter()
        .filter(|p| !p.disabled())
        .all(|p| match p.nw.spec.sequencing {
            Sequencing::Node => !p.selects(node) || p.is_complete(node),
            Sequencing::All => p.all_complete(),
        })
}

/// Whether some non-disabled `sequencing: all` predecessor is incomplete somewhere (§5.10).
pub fn blocked_by_all_predecessor(ctx: &PassCtx, nw: usize) -> bool {
    ctx.nws[..nw]
        .iter()
        .filter(|p| !p.disabled())
        .any(|p| p.nw.spec.sequencing == Sequencing::All && !p.all_complete())
}

/// `SKYHOOK_NODE_ORDER` of a node (§5.14): `nodeOrderOffset` + its index in `nodePriority`
/// sorted by second-truncated pick time then name; `0` when not in `nodePriority`.
pub fn node_order(ctx: &PassCtx, nw: usize, node: usize) -> i64 {
    let status = &ctx.nws[nw].status;
    let name = ctx.node(node).name();
    let Some(prio) = ctx.nws[nw].node_priority() else {
        return 0;
    };
    let Some(mine) = prio.get(name) else {
        return 0;
    };
    let before = ctx.nws[nw].picked_before(mine.0.as_second(), name);
    i64::from(status.node_order_offset.unwrap_or(0)) + before as i64
}
