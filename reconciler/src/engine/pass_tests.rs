//! Multi-pass tests of the pass orchestration with the package lane replaced by a stand-in that
//! dispatches every package of a node at once ([`testkit::fake_work`]).

use nodewright_schema::keys::{self, condition};
use nodewright_schema::{Status, StrategyParams};

use super::testkit::*;
use super::{Hooks, reconcile_with};
use crate::plan::{Action, Plan};
use crate::snapshot::Snapshot;

fn hooks() -> Hooks {
    Hooks {
        work_node: fake_work,
        ..Hooks::inert()
    }
}

fn pass(snap: &mut Snapshot) -> Plan {
    let plan = reconcile_with(snap, &settings(), &hooks());
    apply(snap, &plan);
    snap.now += jiff::SignedDuration::from_secs(2);
    plan
}

/// Runs passes; after each, Jobs of `nw` finish (failing on nodes `fail` names). Returns the
/// largest number of nodes seen `in_progress` at once.
fn run(snap: &mut Snapshot, nw: &str, passes: usize, fail: &dyn Fn(&str) -> bool) -> usize {
    let mut max = 0;
    for _ in 0..passes {
        pass(snap);
        max = max.max(nodes_reading(snap, nw, Status::InProgress).len());
        finish_jobs(snap, nw, fail);
    }
    max
}

fn cond<'a>(
    snap: &'a Snapshot,
    nw: &str,
    t: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    nw_status(snap, nw)
        .conditions
        .as_ref()
        .and_then(|l| l.iter().find(|c| c.type_ == t))
}

#[test]
fn count_budget_bounds_concurrency_and_rollout_completes() {
    let mut snap = world()
        .nodes(5, None)
        .nw(nw("a").package("p", "1.0.0").budget_count(2))
        .build();
    let max = run(&mut snap, "a", 40, &|_| false);
    assert_eq!(max, 2);
    let st = nw_status(&snap, "a");
    assert_eq!(st.status, Some(Status::Complete));
    assert_eq!(st.complete_nodes.as_deref(), Some("5/5"));
    let ready = cond(&snap, "a", condition::READY).expect("Ready");
    assert_eq!(ready.status, "True");
    assert_eq!(ready.reason, "NodesConverged");
    assert_eq!(
        ready.message,
        "5/5 nodes complete (n00, n01, n02, n03, n04)"
    );
    assert_eq!(st.observed_generation, Some(1));
    assert!(
        st.node_priority.is_none(),
        "completed nodes leave nodePriority"
    );
    assert_eq!(st.node_order_offset, Some(5));
}

#[test]
fn no_budget_means_all_nodes_at_once() {
    let mut snap = world()
        .nodes(6, None)
        .nw(nw("a").package("p", "1.0.0"))
        .build();
    assert_eq!(run(&mut snap, "a", 20, &|_| false), 6);
}

#[test]
fn percent_budget_uses_float_truncation() {
    let mut snap = world()
        .nodes(10, None)
        .nw(nw("a").package("p", "1.0.0").budget_percent(25))
        .build();
    assert_eq!(run(&mut snap, "a", 60, &|_| false), 2);
    assert_eq!(nw_status(&snap, "a").status, Some(Status::Complete));
}

#[test]
fn ignored_node_is_blocked_and_consumes_a_slot() {
    let mut snap = world()
        .node(node("n0").created(0).label(keys::IGNORE_LABEL, "true"))
        .node(node("n1").created(1))
        .node(node("n2").created(2))
        .nw(nw("a").package("p", "1.0.0").budget_count(1))
        .build();
    // The pass that admits n0 blocks it and dispatches nothing: n0 consumed the slot.
    let mut blocked_pass_dispatched = None;
    for _ in 0..30 {
        let was_blocked = !nodes_reading(&snap, "a", Status::Blocked).is_empty();
        pass(&mut snap);
        if !was_blocked && !nodes_reading(&snap, "a", Status::Blocked).is_empty() {
            blocked_pass_dispatched = Some(nodes_reading(&snap, "a", Status::InProgress).len());
        }
        finish_jobs(&mut snap, "a", |_| false);
    }
    assert_eq!(blocked_pass_dispatched, Some(0));
    assert_eq!(nodes_reading(&snap, "a", Status::Blocked), vec!["n0"]);
    assert_eq!(
        nodes_reading(&snap, "a", Status::Complete),
        vec!["n1", "n2"]
    );
    assert_eq!(nw_status(&snap, "a").status, Some(Status::Blocked));
    let c = cond(&snap, "a", condition::NODES_IGNORED).expect("NodesIgnored");
    assert_eq!(c.status, "True");
    assert_eq!(c.message, "Node [n0] has ignore label set. Skipping.");
    let mirror = cond(&snap, "a", &format!("{}NodesIgnored", keys::PREFIX)).expect("mirror");
    assert_eq!(mirror.message, c.message);
}

#[test]
fn untolerated_taint_blocks_and_runtime_required_tolerates_its_taint() {
    let mut snap = world()
        .node(node("n0").taint("nodewright.nvidia.com", "runtime-required", "NoSchedule"))
        .nw(nw("plain").package("p", "1.0.0"))
        .nw(nw("rr")
            .priority(1)
            .package("q", "1.0.0")
            .runtime_required(false))
        .build();
    // rr (priority 1) goes first and tolerates the taint; plain waits, then reads blocked.
    run(&mut snap, "rr", 10, &|_| false);
    assert_eq!(nw_status(&snap, "rr").status, Some(Status::Complete));
    let taints = snap.nodes[0]
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    assert!(
        taints.is_empty(),
        "runtime-required taint removed once rr completed: {taints:?}"
    );
}

#[test]
fn taint_not_tolerable_condition() {
    let mut snap = world()
        .node(node("n0").taint("dedicated", "gpu", "NoExecute"))
        .nw(nw("a").package("p", "1.0.0"))
        .build();
    for _ in 0..5 {
        pass(&mut snap);
    }
    assert_eq!(nodes_reading(&snap, "a", Status::Blocked), vec!["n0"]);
    let c = cond(&snap, "a", condition::TAINT_NOT_TOLERABLE).expect("condition");
    assert_eq!(c.status, "True");
    assert_eq!(
        c.message,
        "Node [n0] has taints that are not tolerable. Skipping."
    );
    assert_eq!(nw_status(&snap, "a").status, Some(Status::Blocked));
}

#[test]
fn sequencing_all_predecessor_makes_successor_wait() {
    let mut snap = world()
        .nodes(2, None)
        .nw(nw("first")
            .priority(1)
            .sequencing_all()
            .package("p", "1.0.0"))
        .nw(nw("second").priority(2).package("q", "1.0.0"))
        .build();
    for _ in 0..6 {
        pass(&mut snap);
    }
    assert_eq!(nw_status(&snap, "second").status, Some(Status::Waiting));
    let ready = cond(&snap, "second", condition::READY).expect("Ready");
    assert_eq!(ready.reason, "Waiting");
    finish_jobs(&mut snap, "first", |_| false);
    for _ in 0..12 {
        pass(&mut snap);
        finish_jobs(&mut snap, "first", |_| false);
        finish_jobs(&mut snap, "second", |_| false);
    }
    assert_eq!(nw_status(&snap, "first").status, Some(Status::Complete));
    assert_eq!(nw_status(&snap, "second").status, Some(Status::Complete));
}

#[test]
fn paused_marks_everything_paused_and_disabled_wins() {
    let mut snap = world()
        .nodes(2, None)
        .nw(nw("a").package("p", "1.0.0").paused())
        .nw(nw("b").package("p", "1.0.0").paused().disabled())
        .build();
    for _ in 0..4 {
        pass(&mut snap);
    }
    assert_eq!(nw_status(&snap, "a").status, Some(Status::Paused));
    assert_eq!(nodes_reading(&snap, "a", Status::Paused).len(), 2);
    assert_eq!(nw_status(&snap, "b").status, Some(Status::Disabled));
    assert_eq!(nodes_reading(&snap, "b", Status::Disabled).len(), 2);
    assert_eq!(
        cond(&snap, "a", condition::READY).map(|c| c.reason.as_str()),
        Some("Paused")
    );
}

#[test]
fn missing_policy_blocks_with_condition() {
    let mut snap = world()
        .nodes(2, None)
        .nw(nw("a").package("p", "1.0.0").policy("nope"))
        .build();
    for _ in 0..4 {
        pass(&mut snap);
    }
    assert_eq!(nw_status(&snap, "a").status, Some(Status::Blocked));
    let c = cond(&snap, "a", condition::DEPLOYMENT_POLICY_NOT_FOUND).expect("condition");
    assert_eq!(c.message, "DeploymentPolicy \"nope\" not found");
    assert_eq!(nodes_reading(&snap, "a", Status::Unknown).len(), 2);
    assert!(nodes_reading(&snap, "a", Status::InProgress).is_empty());
}

#[test]
fn linear_strategy_grows_batches() {
    let pol = policy("lin", count(1), linear(params(1, 100, None, 50)), vec![]);
    let mut snap = world()
        .nodes(10, None)
        .policy(pol)
        .nw(nw("a").package("p", "1.0.0").policy("lin"))
        .build();
    let mut sizes = Vec::new();
    for _ in 0..60 {
        pass(&mut snap);
        let n = nodes_reading(&snap, "a", Status::InProgress).len();
        if n > 0 && sizes.last() != Some(&n) {
            sizes.push(n);
        }
        finish_jobs(&mut snap, "a", |_| false);
    }
    assert_eq!(sizes, vec![1, 2, 3, 4]);
    assert_eq!(nw_status(&snap, "a").status, Some(Status::Complete));
}

#[test]
fn failure_threshold_stops_the_compartment() {
    let pol = policy("p", count(1), fixed(params(1, 100, Some(1), 100)), vec![]);
    let mut snap = world()
        .nodes(4, None)
        .policy(pol)
        .nw(nw("a").package("p", "1.0.0").policy("p"))
        .build();
    run(&mut snap, "a", 20, &|n| n == "n00");
    let cs = nw_status(&snap, "a")
        .compartment_statuses
        .clone()
        .expect("compartment statuses");
    let bs = cs["__default__"].batch_state.clone().expect("batch state");
    assert!(bs.should_stop);
    assert_eq!(nodes_reading(&snap, "a", Status::Erroring), vec!["n00"]);
    assert!(nodes_reading(&snap, "a", Status::InProgress).is_empty());
    assert!(
        nodes_reading(&snap, "a", Status::Complete).is_empty(),
        "nothing else admitted"
    );
}

#[test]
fn compartments_take_overlapping_nodes_by_safety_then_ceiling() {
    let pol = policy(
        "p",
        count(1),
        fixed(StrategyParams::default()),
        vec![
            (
                "exp",
                ("gpu", "a100"),
                count(5),
                Some(exponential(StrategyParams::default())),
            ),
            (
                "fix",
                ("zone", "z1"),
                count(5),
                Some(fixed(StrategyParams::default())),
            ),
        ],
    );
    let mut snap = world()
        .node(node("both").label("gpu", "a100").label("zone", "z1"))
        .node(node("gpu").label("gpu", "a100"))
        .node(node("none"))
        .policy(pol)
        .nw(nw("a").package("p", "1.0.0").policy("p"))
        .build();
    pass(&mut snap);
    let cs = nw_status(&snap, "a")
        .compartment_statuses
        .clone()
        .expect("statuses");
    assert_eq!(
        cs["fix"].matched, 1,
        "the fixed compartment wins the overlap"
    );
    assert_eq!(cs["exp"].matched, 1);
    assert_eq!(cs["__default__"].matched, 1);
    assert_eq!(cs["fix"].ceiling, 5);
}

#[test]
fn same_snapshot_same_plan() {
    let snap = world()
        .nodes(7, Some(("pool", "a")))
        .nw(nw("a").package("p", "1.0.0").budget_count(3))
        .nw(nw("b")
            .priority(5)
            .package("q", "2.0.0")
            .selects("pool", "a"))
        .build();
    let a = reconcile_with(&snap, &settings(), &hooks());
    let b = reconcile_with(&snap, &settings(), &hooks());
    assert_eq!(a, b);
}

#[test]
fn reboot_with_reapply_resets_the_node_and_keeps_the_cordon() {
    let mut s = settings();
    s.reapply_on_reboot = true;
    let mut snap = world()
        .node(
            node("n0")
                .boot("new")
                .state(
                    "a",
                    &[(
                        "p",
                        "1.0.0",
                        nodewright_schema::Stage::Config,
                        nodewright_schema::State::Complete,
                    )],
                )
                .status("a", Status::Complete)
                .annotation(&keys::cordon("a"), "true"),
        )
        .nw(nw("a").package("p", "1.0.0").with_status(|st| {
            st.node_boot_ids = Some([("n0".to_string(), "old".to_string())].into());
        }))
        .build();
    let plan = reconcile_with(&snap, &s, &hooks());
    apply(&mut snap, &plan);
    let ann = snap.nodes[0]
        .metadata
        .annotations
        .clone()
        .unwrap_or_default();
    assert!(!ann.contains_key(&keys::node_state("a")));
    assert!(!ann.contains_key(&keys::status("a")));
    assert_eq!(
        ann.get(&keys::cordon("a")).map(String::as_str),
        Some("true")
    );
    let st = nw_status(&snap, "a");
    assert_eq!(st.status, Some(Status::Unknown));
    assert_eq!(
        st.node_boot_ids
            .as_ref()
            .and_then(|m| m.get("n0"))
            .map(String::as_str),
        Some("new")
    );
    assert!(
        plan.actions
            .iter()
            .any(|a| matches!(a, Action::RecordEvent(e) if e.reason == "Reboot"))
    );
}

#[test]
fn auto_taint_marks_new_nodes_only() {
    let mut snap = world()
        .node(node("fresh"))
        .node(node("old").annotation(&keys::status("x"), "complete"))
        .nw(nw("a").package("p", "1.0.0").runtime_required(true))
        .build();
    let plan = pass(&mut snap);
    let patched: Vec<&str> = plan
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::PatchNode(p) if !p.add_taints.is_empty() => Some(p.node.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(patched, vec!["fresh"]);
}

#[test]
fn idle_when_converged() {
    let mut snap = world()
        .nodes(2, None)
        .nw(nw("a").package("p", "1.0.0"))
        .build();
    run(&mut snap, "a", 15, &|_| false);
    let plan = pass(&mut snap);
    assert!(
        plan.actions.is_empty(),
        "converged pass writes nothing: {:?}",
        plan.actions
    );
    assert_eq!(plan.requeue, crate::plan::Requeue::Idle);
}
