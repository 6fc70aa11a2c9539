//! Cordon, wait, drain (spec/operator.md §7): the two-pass durable cordon (§7.2), shared and
//! external cordons (§7.3–§7.4), the non-interrupt barrier (§7.5), pod classification
//! (§7.6), eviction vs deletion (§7.7), "drained = pods gone" (§7.8), the PDB throttle
//! (§7.9), the drain blockers record (§7.10) and the drain timeout (§7.11).

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use nodewright_schema::duration::parse_go_duration;
use nodewright_schema::toleration::tolerated;
use nodewright_schema::{DrainConfig, NodeWright, Status, keys};
use serde::{Deserialize, Serialize};

use super::context::PassCtx;
use crate::plan::{Action, EventObject, EventType, PodRef};
use crate::settings::constants::PDB_RETRY_THROTTLE;

/// Why a pod blocks a drain (§7.10 reasons; terminating pods block without a reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockReason {
    /// Already terminating: wait for it to disappear (§7.6 rule 6).
    Terminating,
    /// No controller and `force: false`.
    UnmanagedPod,
    /// An `emptyDir` volume and `deleteEmptyDirData: false`.
    EmptyDirData,
}

/// What the drain does with one pod of the node (§7.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodDecision {
    /// Not part of the drain.
    Ignore,
    /// Keeps the node from being drained.
    Block(BlockReason),
    /// Delete directly (`disableEviction`).
    Delete,
    /// Evict through the Eviction API.
    Evict,
}

/// Whether a pod carries the labels of a package stage pod (its NodeWright and package); in
/// the operator namespace, the drain passes it by.
pub fn is_package_pod(pod: &Pod) -> bool {
    let labels = pod.metadata.labels.as_ref();
    let has_label = |k: &str| labels.is_some_and(|l| l.contains_key(k));
    has_label(keys::JOB_LABEL_NAME) && has_label(keys::JOB_LABEL_PACKAGE)
}

/// Classifies one pod bound to the node; the first matching rule of §7.6 wins.
pub fn classify(pod: &Pod, drain: &DrainConfig, operator_namespace: &str) -> PodDecision {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if !matches!(phase, Some("Running") | Some("Pending")) {
        return PodDecision::Ignore;
    }
    if pod.metadata.namespace.as_deref() == Some(operator_namespace) && is_package_pod(pod) {
        return PodDecision::Ignore;
    }
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    let unschedulable = Taint {
        key: keys::TAINT_UNSCHEDULABLE.to_string(),
        effect: "NoSchedule".to_string(),
        ..Taint::default()
    };
    if tolerated(tolerations, &unschedulable) {
        return PodDecision::Ignore;
    }
    let controller = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    if drain.ignore_daemon_sets() && controller.is_some_and(|o| o.kind == "DaemonSet") {
        return PodDecision::Ignore;
    }
    if pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(keys::MIRROR_POD_ANNOTATION))
    {
        return PodDecision::Ignore;
    }
    if pod.metadata.deletion_timestamp.is_some() {
        return PodDecision::Block(BlockReason::Terminating);
    }
    if controller.is_none() && !drain.force() {
        return PodDecision::Block(BlockReason::UnmanagedPod);
    }
    let empty_dir = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .is_some_and(|vs| vs.iter().any(|v| v.empty_dir.is_some()));
    if empty_dir && !drain.delete_empty_dir_data() {
        return PodDecision::Block(BlockReason::EmptyDirData);
    }
    if drain.disable_eviction() {
        PodDecision::Delete
    } else {
        PodDecision::Evict
    }
}

/// One entry of `drainBlocked_<nw>` (§4.1), field order fixed.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct DrainBlocker {
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// `PodDisruptionBudget`, `UnmanagedPod` or `EmptyDirData`.
    pub reason: String,
    /// The apiserver's text (PDB refusals).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// Parses a `drainBlocked_<nw>` value (unreadable = none).
pub fn read_blockers(value: Option<&str>) -> Vec<DrainBlocker> {
    value
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_default()
}

/// What the cordon/wait/drain step decided for this pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrainGate {
    /// Cordoned and drained: package stages may run.
    Ready,
    /// Not yet (cordon being persisted, barrier held, pods still there, timed out).
    Wait,
}

fn pod_key(pod: &Pod) -> (String, String) {
    (
        pod.metadata.namespace.clone().unwrap_or_default(),
        pod.metadata.name.clone().unwrap_or_default(),
    )
}

static NO_LABELS: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();

/// The selector of the pods that hold a node's drain (`podNonInterruptLabels`, §7.5), when
/// it selects anything: an empty selector protects nothing (unlike nodeSelectors).
pub fn non_interrupt_selector(nw: &NodeWright) -> Option<&LabelSelector> {
    let selector = nw.spec.pod_non_interrupt_labels.as_ref()?;
    let empty = selector.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(|e| e.is_empty());
    (!empty).then_some(selector)
}

/// The protected pods (`selector`, [`non_interrupt_selector`]) `Running` or `Pending` on the
/// node (§7.5), as `namespace/name`, sorted. `pods_on_node` are the pods bound to the node
/// (`ctx.index.pods_on(node)`).
pub fn protected_pods(selector: &LabelSelector, pods_on_node: &[&Pod]) -> Vec<String> {
    let mut out: Vec<String> = pods_on_node
        .iter()
        .filter(|p| {
            matches!(
                p.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Running") | Some("Pending")
            )
        })
        .filter(|p| {
            let labels = p.metadata.labels.as_ref().unwrap_or(&NO_LABELS);
            nodewright_schema::selector::matches(Some(selector), labels)
        })
        .map(|p| {
            let (ns, name) = pod_key(p);
            format!("{ns}/{name}")
        })
        .collect();
    out.sort();
    out
}

fn drain_config(nw: &NodeWright) -> DrainConfig {
    nw.spec.drain_config.clone().unwrap_or_default()
}

/// Whether the node is still holding the cordon of someone else only (§7.4).
fn cordon_owned_by_anyone(ctx: &PassCtx<'_>, node: usize) -> bool {
    let n = ctx.node(node);
    n.annotations().keys().any(|k| keys::is_cordon_key(k))
        || n.annotation(keys::RUNTIME_REQUIRED_CORDON).is_some()
}

/// Cordon → wait → drain for one interrupt package on one node (§7.1–§7.11).
pub fn cordon_wait_drain(
    ctx: &mut PassCtx<'_>,
    nw: usize,
    node: usize,
    package: &str,
) -> DrainGate {
    let nw_name = ctx.nws[nw].name.to_string();
    let cordon_key = keys::cordon(&nw_name);

    // §7.2 / §7.4: the cordon must be in the API before the drain starts.
    if !ctx.node(node).api_unschedulable() || !ctx.node(node).unschedulable() {
        ctx.cordon(nw, node);
        ctx.requeue_active();
        return DrainGate::Wait;
    }
    if ctx.node(node).annotation(&cordon_key).is_none() && cordon_owned_by_anyone(ctx, node) {
        // Shared with another NodeWright: take a share (already persisted as unschedulable).
        ctx.cordon(nw, node);
    }

    // §7.5: the non-interrupt barrier.
    let node_name = ctx.node(node).name().to_string();
    let protected = non_interrupt_selector(ctx.nws[nw].nw)
        .map(|selector| protected_pods(selector, ctx.index.pods_on(&node_name)))
        .unwrap_or_default();
    if !protected.is_empty() {
        ctx.event(
            EventObject::Node(node_name.clone()),
            EventType::Warning,
            keys::event::DRAIN,
            format!(
                "[nodewright:{nw_name}] package {package} waits for non-interrupt pods before drain: {}",
                protected.join(", ")
            ),
        );
        ctx.requeue_active();
        return DrainGate::Wait;
    }

    drain(ctx, nw, node)
}

fn drain(ctx: &mut PassCtx<'_>, nw: usize, node: usize) -> DrainGate {
    let nw_name = ctx.nws[nw].name.to_string();
    let nw_obj = ctx.nws[nw].nw;
    let config = drain_config(nw_obj);
    let node_name = ctx.node(node).name().to_string();
    let now = ctx.now;
    let start_key = keys::drain_start(&nw_name);
    let blocked_key = ctx.nws[nw].keys.drain_blocked.clone();

    let decisions: Vec<(&Pod, PodDecision)> = ctx
        .index
        .pods_on(&node_name)
        .iter()
        .map(|&p| (p, classify(p, &config, &ctx.settings.namespace)))
        .filter(|(_, d)| *d != PodDecision::Ignore)
        .collect();

    // §7.8: drained when every selected pod has actually disappeared.
    if decisions.is_empty() {
        let n = ctx.node_mut(node);
        n.remove_annotation(&start_key);
        n.remove_annotation(&blocked_key);
        return DrainGate::Ready;
    }
    ctx.requeue_active();

    // §7.11: drain start, then the timeout (checked before the throttle).
    let start = match ctx
        .node(node)
        .annotation(&start_key)
        .and_then(|v| v.parse::<Timestamp>().ok())
    {
        Some(t) => t,
        None => {
            ctx.node_mut(node)
                .set_annotation(start_key.clone(), now.to_string());
            now
        }
    };
    let timeout = config
        .timeout
        .as_ref()
        .and_then(|d| parse_go_duration(&d.0).ok())
        .map(|d| d.non_negative())
        .filter(|d| !d.is_zero());
    if let Some(timeout) = timeout
        && let Ok(span) = jiff::SignedDuration::try_from(timeout)
        && let Ok(deadline) = start.checked_add(span)
        && now >= deadline
    {
        let already = ctx.node_status(nw, node) == Status::Erroring;
        if !already {
            ctx.event(
                EventObject::Node(node_name.clone()),
                EventType::Warning,
                keys::event::DRAIN_TIMEOUT,
                format!("[nodewright:{nw_name}] drain of node {node_name} timed out"),
            );
        }
        ctx.set_node_status(nw, node, Status::Erroring);
        record_blockers(ctx, nw, node, &decisions);
        return DrainGate::Wait;
    }

    // §7.9: after a refusal, no new attempt for 30 s while this NodeWright's refused pods
    // still block.
    let refusal = ctx
        .snap
        .memory
        .eviction_refusals
        .get(&node_name)
        .filter(|r| r.nodewright == nw_name);
    let still_refused = |refused: &[crate::snapshot::RefusedPod]| {
        refused.iter().any(|r| {
            decisions.iter().any(|(p, d)| {
                matches!(d, PodDecision::Evict)
                    && pod_key(p) == (r.namespace.clone(), r.name.clone())
            })
        })
    };
    let throttled = refusal.is_some_and(|r| {
        let until = r
            .at
            .checked_add(jiff::SignedDuration::try_from(PDB_RETRY_THROTTLE).unwrap_or_default())
            .unwrap_or(r.at);
        now < until && still_refused(&r.blockers)
    });
    if throttled {
        if let Some(r) = refusal {
            let until = r
                .at
                .checked_add(jiff::SignedDuration::try_from(PDB_RETRY_THROTTLE).unwrap_or_default())
                .unwrap_or(r.at);
            if let Ok(left) = std::time::Duration::try_from(until.duration_since(now)) {
                ctx.requeue_after(left);
            }
        }
    } else {
        // §16.3: evict what we can, even while another pod blocks.
        let grace = config
            .grace_period
            .as_ref()
            .and_then(|d| parse_go_duration(&d.0).ok())
            .map(|d| {
                let d = d.non_negative();
                d.as_secs() as i64 + i64::from(d.subsec_nanos() > 0)
            });
        let mut actions = Vec::new();
        for (pod, decision) in &decisions {
            let (namespace, name) = pod_key(pod);
            // §7.7: one drain per node, whichever package or NodeWright asked for it first.
            if ctx.pod_removed(&namespace, &name) {
                continue;
            }
            let pod_ref = PodRef {
                namespace,
                name,
                node: node_name.clone(),
                nodewright: Some(nw_name.clone()),
                grace_period_seconds: grace,
            };
            match decision {
                PodDecision::Evict => actions.push(Action::EvictPod(pod_ref)),
                PodDecision::Delete => actions.push(Action::DeletePod(pod_ref)),
                _ => {}
            }
        }
        for action in actions {
            ctx.emit(action);
        }
    }
    record_blockers(ctx, nw, node, &decisions);
    DrainGate::Wait
}

/// Writes `drainBlocked_<nw>`: unmanaged/emptyDir blockers plus this NodeWright's PDB
/// refusals whose pods still block (§7.9–§7.10). Removed when empty.
fn record_blockers(
    ctx: &mut PassCtx<'_>,
    nw: usize,
    node: usize,
    decisions: &[(&Pod, PodDecision)],
) {
    let nw_name = ctx.nws[nw].name.to_string();
    let node_name = ctx.node(node).name().to_string();
    let mut blockers: Vec<DrainBlocker> = Vec::new();
    for (pod, decision) in decisions {
        let (namespace, name) = pod_key(pod);
        let reason = match decision {
            PodDecision::Block(BlockReason::UnmanagedPod) => keys::reason::UNMANAGED_POD,
            PodDecision::Block(BlockReason::EmptyDirData) => keys::reason::EMPTY_DIR_DATA,
            _ => continue,
        };
        blockers.push(DrainBlocker {
            namespace,
            name,
            reason: reason.to_string(),
            detail: String::new(),
        });
    }
    if let Some(refusal) = ctx
        .snap
        .memory
        .eviction_refusals
        .get(&node_name)
        .filter(|r| r.nodewright == nw_name)
    {
        for refused in &refusal.blockers {
            let blocking = decisions.iter().any(|(p, d)| {
                matches!(d, PodDecision::Evict)
                    && pod_key(p) == (refused.namespace.clone(), refused.name.clone())
            });
            if blocking {
                blockers.push(DrainBlocker {
                    namespace: refused.namespace.clone(),
                    name: refused.name.clone(),
                    reason: keys::reason::POD_DISRUPTION_BUDGET.to_string(),
                    detail: refused.message.clone(),
                });
            }
        }
    }
    blockers.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let key = keys::drain_blocked(&nw_name);
    let n = ctx.node_mut(node);
    if blockers.is_empty() {
        n.remove_annotation(&key);
    } else {
        let value = serde_json::to_string(&blockers).unwrap_or_default();
        if n.annotation(&key) != Some(value.as_str()) {
            n.set_annotation(key, value);
        }
    }
}

/// The `DrainBlocked` condition of a NodeWright from its nodes' blocker records (§7.10):
/// `(reason, message)` or `None` when no selected node is blocked.
pub fn drain_blocked_condition(ctx: &PassCtx<'_>, nw: usize) -> Option<(String, String)> {
    let view = &ctx.nws[nw];
    let key = &view.keys.drain_blocked;
    let total = view.selected.len();
    let mut blocked_nodes = Vec::new();
    let mut reasons = std::collections::BTreeSet::new();
    let mut details = Vec::new();
    for &id in &view.selected {
        if !ctx.carries_drain_blockers(nw, id) {
            continue;
        }
        let n = ctx.node(id);
        let blockers = read_blockers(n.annotation(key));
        if blockers.is_empty() {
            continue;
        }
        blocked_nodes.push(n.name().to_string());
        for b in blockers {
            reasons.insert(b.reason.clone());
            let text = if b.detail.is_empty() {
                b.reason.clone()
            } else {
                b.detail.clone()
            };
            details.push(format!(
                "{}/{} on {}: {}",
                b.namespace,
                b.name,
                n.name(),
                text
            ));
        }
    }
    if blocked_nodes.is_empty() {
        return None;
    }
    let reason = if reasons.len() == 1 {
        reasons.into_iter().next().unwrap_or_default()
    } else {
        keys::reason::MULTIPLE_CAUSES.to_string()
    };
    let message = format!(
        "{}/{} nodes blocked draining ({}); {}",
        blocked_nodes.len(),
        total,
        blocked_nodes.join(", "),
        details.join("; ")
    );
    Some((reason, message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        EmptyDirVolumeSource, PodSpec, PodStatus, Toleration, Volume,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
    use std::collections::BTreeMap;

    fn pod(owner: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("default".into()),
                owner_references: owner.map(|kind| {
                    vec![OwnerReference {
                        kind: kind.into(),
                        controller: Some(true),
                        ..OwnerReference::default()
                    }]
                }),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some("n1".into()),
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                ..PodStatus::default()
            }),
        }
    }

    #[test]
    fn classification_follows_the_table_in_order() {
        let defaults = DrainConfig::default();
        assert_eq!(
            classify(&pod(Some("ReplicaSet")), &defaults, "nodewright"),
            PodDecision::Evict
        );
        assert_eq!(
            classify(&pod(Some("DaemonSet")), &defaults, "nodewright"),
            PodDecision::Ignore
        );
        let mut done = pod(Some("ReplicaSet"));
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());
        assert_eq!(
            classify(&done, &defaults, "nodewright"),
            PodDecision::Ignore
        );

        let mut package = pod(None);
        package.metadata.namespace = Some("nodewright".into());
        package.metadata.labels = Some(BTreeMap::from([
            (keys::JOB_LABEL_NAME.to_string(), "nw".to_string()),
            (keys::JOB_LABEL_PACKAGE.to_string(), "p-1".to_string()),
        ]));
        assert_eq!(
            classify(&package, &defaults, "nodewright"),
            PodDecision::Ignore
        );

        let mut tolerant = pod(None);
        tolerant.spec.as_mut().unwrap().tolerations = Some(vec![Toleration {
            key: Some(keys::TAINT_UNSCHEDULABLE.into()),
            operator: Some("Exists".into()),
            ..Toleration::default()
        }]);
        assert_eq!(
            classify(&tolerant, &defaults, "nodewright"),
            PodDecision::Ignore
        );

        let mut mirror = pod(None);
        mirror.metadata.annotations = Some(BTreeMap::from([(
            keys::MIRROR_POD_ANNOTATION.to_string(),
            "x".to_string(),
        )]));
        assert_eq!(
            classify(&mirror, &defaults, "nodewright"),
            PodDecision::Ignore
        );

        let mut terminating = pod(Some("ReplicaSet"));
        terminating.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert_eq!(
            classify(&terminating, &defaults, "nodewright"),
            PodDecision::Block(BlockReason::Terminating)
        );

        let strict = DrainConfig {
            force: Some(false),
            delete_empty_dir_data: Some(false),
            ignore_daemon_sets: Some(false),
            disable_eviction: Some(true),
            ..DrainConfig::default()
        };
        assert_eq!(
            classify(&pod(None), &strict, "nodewright"),
            PodDecision::Block(BlockReason::UnmanagedPod)
        );
        assert_eq!(
            classify(&pod(Some("DaemonSet")), &strict, "nodewright"),
            PodDecision::Delete
        );
        let mut scratch = pod(Some("ReplicaSet"));
        scratch.spec.as_mut().unwrap().volumes = Some(vec![Volume {
            name: "s".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        }]);
        assert_eq!(
            classify(&scratch, &strict, "nodewright"),
            PodDecision::Block(BlockReason::EmptyDirData)
        );
        assert_eq!(
            classify(&scratch, &defaults, "nodewright"),
            PodDecision::Evict
        );
    }

    #[test]
    fn kube_system_is_not_exempt() {
        let mut dns = pod(Some("ReplicaSet"));
        dns.metadata.namespace = Some("kube-system".into());
        assert_eq!(
            classify(&dns, &DrainConfig::default(), "nodewright"),
            PodDecision::Evict
        );
    }

    #[test]
    fn blockers_serialize_in_the_upstream_shape() {
        let b = vec![DrainBlocker {
            namespace: "default".into(),
            name: "web-0".into(),
            reason: "PodDisruptionBudget".into(),
            detail: "needs 3".into(),
        }];
        assert_eq!(
            serde_json::to_string(&b).unwrap(),
            r#"[{"namespace":"default","name":"web-0","reason":"PodDisruptionBudget","detail":"needs 3"}]"#
        );
        assert_eq!(read_blockers(Some("garbage")), vec![]);
    }

    use super::super::context::PassCtx;
    use super::super::testkit::{node, nw, settings, t0, world};
    use crate::snapshot::{EvictionRefusal, RefusedPod};

    fn evictions(ctx: &PassCtx<'_>) -> usize {
        ctx.emitted()
            .iter()
            .filter(|a| matches!(a, Action::EvictPod(_)))
            .count()
    }

    fn gate(snap: &crate::snapshot::Snapshot) -> (DrainGate, usize, Vec<Action>, String) {
        let s = settings();
        let mut ctx = PassCtx::new(snap, &s);
        let id = ctx.node_id("n1").unwrap();
        let g = cordon_wait_drain(&mut ctx, 0, id, "p");
        let status = ctx.node_status(0, id).as_str().to_string();
        let n = evictions(&ctx);
        let emitted = ctx.emitted().to_vec();
        (g, n, emitted, status)
    }

    #[test]
    fn the_cordon_is_persisted_before_the_drain_starts() {
        let snap = world()
            .node(node("n1"))
            .nw(nw("nw").reboot_package("p", "1.0.0"))
            .pod(pod(Some("ReplicaSet")))
            .build();
        let (g, evicted, _, _) = gate(&snap);
        assert_eq!((g, evicted), (DrainGate::Wait, 0));
        let snap = world()
            .node(
                node("n1")
                    .unschedulable()
                    .annotation(&keys::cordon("nw"), "true"),
            )
            .nw(nw("nw").reboot_package("p", "1.0.0"))
            .pod(pod(Some("ReplicaSet")))
            .build();
        let (g, evicted, _, _) = gate(&snap);
        assert_eq!((g, evicted), (DrainGate::Wait, 1));
        let snap = world()
            .node(
                node("n1")
                    .unschedulable()
                    .annotation(&keys::cordon("nw"), "true"),
            )
            .nw(nw("nw").reboot_package("p", "1.0.0"))
            .build();
        assert_eq!(gate(&snap).0, DrainGate::Ready);
    }

    #[test]
    fn a_refusal_throttles_this_nodewright_for_30_seconds() {
        let refused = |by: &str, secs: i64| {
            let mut snap = world()
                .node(
                    node("n1")
                        .unschedulable()
                        .annotation(&keys::cordon("nw"), "true"),
                )
                .nw(nw("nw").reboot_package("p", "1.0.0"))
                .pod(pod(Some("ReplicaSet")))
                .build();
            snap.memory.eviction_refusals.insert(
                "n1".into(),
                EvictionRefusal {
                    at: t0()
                        .checked_sub(jiff::SignedDuration::from_secs(secs))
                        .unwrap(),
                    nodewright: by.into(),
                    blockers: vec![RefusedPod {
                        namespace: "default".into(),
                        name: "p".into(),
                        message: "would violate the budget".into(),
                    }],
                },
            );
            snap
        };
        let (_, evicted, _, _) = gate(&refused("nw", 10));
        assert_eq!(evicted, 0, "throttled");
        let (_, evicted, _, _) = gate(&refused("nw", 31));
        assert_eq!(evicted, 1, "retried after 30 s");
        let (_, evicted, _, _) = gate(&refused("other", 10));
        assert_eq!(
            evicted, 1,
            "another NodeWright's refusal does not throttle this one"
        );
    }

    #[test]
    fn a_drain_past_its_timeout_errors_the_node_and_stops_evicting() {
        let start = t0()
            .checked_sub(jiff::SignedDuration::from_secs(120))
            .unwrap();
        let mut b = nw("nw").reboot_package("p", "1.0.0").build();
        b.spec.drain_config = Some(DrainConfig {
            timeout: Some(nodewright_schema::duration::GoDuration::new("1m")),
            ..DrainConfig::default()
        });
        let mut snap = world()
            .node(
                node("n1")
                    .unschedulable()
                    .annotation(&keys::cordon("nw"), "true")
                    .annotation(&keys::drain_start("nw"), &start.to_string()),
            )
            .pod(pod(Some("ReplicaSet")))
            .build();
        snap.nodewrights.push(std::sync::Arc::new(b));
        let (g, evicted, emitted, status) = gate(&snap);
        assert_eq!((g, evicted), (DrainGate::Wait, 0));
        assert_eq!(status, "erroring");
        assert!(emitted.is_empty());
    }
}
