//! The runtime-required taint (spec/operator.md §10.3–§10.5): auto-taint of new nodes,
//! removal once every runtime-required NodeWright is complete on a node, and the persistent
//! cordon of `runtimeRequiredCordonAfter`.

use k8s_openapi::api::core::v1::Taint;
use nodewright_schema::keys;

use super::complete;
use super::context::PassCtx;
use crate::settings::parse_taint;

/// Keys of the runtime-required taint this pass recognises: configured, then legacy (UP+).
fn taint_keys(ctx: &PassCtx) -> Vec<String> {
    let mut out = vec![ctx.runtime_taint.key.clone()];
    if let Ok(legacy) = parse_taint(keys::LEGACY_RUNTIME_REQUIRED_TAINT)
        && legacy.key != ctx.runtime_taint.key
    {
        out.push(legacy.key);
    }
    out
}

fn has_runtime_taint(taints: &[Taint], keys: &[String]) -> bool {
    taints.iter().any(|t| keys.contains(&t.key))
}

/// Whether a node counts as new (§10.4): no annotation with our prefix (or the legacy one).
pub fn is_new(ctx: &PassCtx, node: usize) -> bool {
    !ctx.node(node)
        .annotations()
        .keys()
        .any(|k| keys::is_prefixed(k))
}

/// Applies the runtime-required taint and the `autoTaint_<key>` marker to a node.
pub fn taint_node(ctx: &mut PassCtx, node: usize) {
    let taint = ctx.runtime_taint.clone();
    let marker = keys::auto_taint(&taint.key);
    let n = ctx.node_mut(node);
    n.add_taint(taint);
    n.set_annotation(marker, "true");
}

/// §10.4: taints every new node selected by a `runtimeRequired` + `autoTaintNewNodes`
/// NodeWright. Returns whether any node was patched (which ends the pass, §5.2 step 3).
pub fn auto_taint(ctx: &mut PassCtx) -> bool {
    let keys = taint_keys(ctx);
    let mut targets = Vec::new();
    for view in &ctx.nws {
        let spec = &view.nw.spec;
        if !(spec.runtime_required && spec.auto_taint_new_nodes) {
            continue;
        }
        for &n in &view.selected {
            if !targets.contains(&n)
                && !has_runtime_taint(ctx.node(n).taints(), &keys)
                && is_new(ctx, n)
            {
                targets.push(n);
            }
        }
    }
    targets.sort_unstable();
    for &n in &targets {
        taint_node(ctx, n);
    }
    !targets.is_empty()
}

/// §10.3 and §10.5, after dispatch: per node selected by a runtime-required NodeWright, remove
/// the taint once the node is complete for all of them, cordoning persistently when asked.
/// Also drops a `runtimeRequiredCordon` marker left on a node someone uncordoned.
pub fn remove_runtime_taint(ctx: &mut PassCtx) {
    let keys = taint_keys(ctx);
    for n in 0..ctx.nodes.len() {
        let node = ctx.node(n);
        if node.annotation(keys::RUNTIME_REQUIRED_CORDON).is_some()
            && !node.unschedulable()
            && !node.api_unschedulable()
        {
            ctx.node_mut(n)
                .remove_annotation(keys::RUNTIME_REQUIRED_CORDON);
        }
        let owners: Vec<usize> = (0..ctx.nws.len())
            .filter(|&w| ctx.nws[w].nw.spec.runtime_required && ctx.nws[w].selects(n))
            .collect();
        if owners.is_empty() || !has_runtime_taint(ctx.node(n).taints(), &keys) {
            continue;
        }
        if !owners.iter().all(|&w| complete::node_complete(ctx, w, n)) {
            continue;
        }
        let cordon_after = owners
            .iter()
            .any(|&w| ctx.nws[w].nw.spec.runtime_required_cordon_after);
        let node = ctx.node_mut(n);
        for k in &keys {
            node.remove_taint(k);
        }
        if cordon_after {
            node.set_unschedulable(true);
            node.set_annotation(
                keys::RUNTIME_REQUIRED_CORDON,
                keys::RUNTIME_REQUIRED_CORDON_VALUE,
            );
        }
    }
}
