//! Property tests over random fleets, labels, policies and outcomes (issue 4).

use std::collections::BTreeSet;

use nodewright_schema::{BatchState, Status, StrategyParams};
use proptest::prelude::*;

use super::context::PassCtx;
use super::policy::{self, CompartmentDef};
use super::status::roll_up;
use super::testkit::*;
use super::{Hooks, reconcile, reconcile_with};
use crate::snapshot::Snapshot;

fn any_status() -> impl Strategy<Value = Status> {
    prop::sample::select(Status::ALL.to_vec())
}

#[derive(Clone, Debug)]
enum Rollout {
    Count(i32),
    Percent(i32),
    Fixed(i32),
    Linear(i32, i32),
    Exponential(i32, i32),
}

fn any_rollout() -> impl Strategy<Value = Rollout> {
    prop_oneof![
        (0..8i32).prop_map(Rollout::Count),
        (0..=100i32).prop_map(Rollout::Percent),
        (1..5i32).prop_map(Rollout::Fixed),
        (1..4i32, 1..3i32).prop_map(|(i, d)| Rollout::Linear(i, d)),
        (1..4i32, 2..4i32).prop_map(|(i, g)| Rollout::Exponential(i, g)),
    ]
}

#[derive(Clone, Debug)]
struct Fleet {
    pools: Vec<bool>,
    ignored: Vec<bool>,
    rollout: Rollout,
    threshold: i32,
    failing: BTreeSet<usize>,
}

fn any_fleet() -> impl Strategy<Value = Fleet> {
    (1..16usize)
        .prop_flat_map(|n| {
            (
                prop::collection::vec(any::<bool>(), n),
                prop::collection::vec(prop::bool::weighted(0.1), n),
                any_rollout(),
                1..=100i32,
                prop::collection::btree_set(0..n, 0..=n / 3),
            )
        })
        .prop_map(|(pools, ignored, rollout, threshold, failing)| Fleet {
            pools,
            ignored,
            rollout,
            threshold,
            failing,
        })
}

fn build(f: &Fleet) -> Snapshot {
    let mut w = world();
    for (i, (&pool, &ign)) in f.pools.iter().zip(&f.ignored).enumerate() {
        let mut b = node(&format!("n{i:02}"))
            .created(i as i64)
            .label("pool", if pool { "a" } else { "b" });
        if ign {
            b = b.label(nodewright_schema::keys::IGNORE_LABEL, "true");
        }
        w = w.node(b);
    }
    let base = nw("x").package("p", "1.0.0");
    let p = |init: i32, delta: Option<i32>, growth: Option<i32>| StrategyParams {
        initial_batch: Some(init),
        delta,
        growth_factor: growth,
        batch_threshold: Some(f.threshold),
        failure_threshold: None,
        safety_limit: Some(50),
    };
    let w = match f.rollout {
        Rollout::Count(c) => w.nw(base.budget_count(c)),
        Rollout::Percent(pc) => w.nw(base.budget_percent(pc)),
        Rollout::Fixed(i) => w
            .policy(policy("pol", count(1), fixed(p(i, None, None)), vec![]))
            .nw(base.policy("pol")),
        Rollout::Linear(i, d) => w
            .policy(policy("pol", count(1), linear(p(i, Some(d), None)), vec![]))
            .nw(base.policy("pol")),
        Rollout::Exponential(i, g) => w
            .policy(policy(
                "pol",
                count(1),
                exponential(p(i, None, Some(g))),
                vec![],
            ))
            .nw(base.policy("pol")),
    };
    w.build()
}

fn hooks() -> Hooks {
    Hooks {
        work_node: fake_work,
        ..Hooks::inert()
    }
}

/// The single compartment of NodeWright `x` and its batch state as published.
fn compartment(snap: &Snapshot) -> (CompartmentDef, BatchState, i32) {
    let settings = settings();
    let ctx = PassCtx::new(snap, &settings);
    let view = &ctx.nws[0];
    let defs = policy::compartments(
        view.nw,
        view.policy,
        view.policy_missing,
        view.selected.len() as i32,
    );
    let def = defs.last().cloned().expect("a default compartment");
    let state = view
        .status
        .compartment_statuses
        .as_ref()
        .and_then(|m| m.get(&def.name))
        .and_then(|c| c.batch_state.clone())
        .unwrap_or_else(BatchState::reset);
    (def, state, view.selected.len() as i32)
}

fn carried(snap: &Snapshot) -> usize {
    let st = nw_status(snap, "x");
    let prio: BTreeSet<String> = st
        .node_priority
        .iter()
        .flatten()
        .map(|(k, _)| k.clone())
        .collect();
    let mut set: BTreeSet<String> = nodes_reading(snap, "x", Status::InProgress)
        .into_iter()
        .collect();
    for n in prio {
        if !nodes_reading(snap, "x", Status::Complete).contains(&n) {
            set.insert(n);
        }
    }
    set.len()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    /// Never more nodes in progress than the batch allows: a new batch is at most the
    /// compartment's batch size (§2.3), and nodes carried from earlier batches (in progress
    /// or sticky) are never topped up beyond it.
    #[test]
    fn admission_never_exceeds_the_batch(f in any_fleet()) {
        let mut snap = build(&f);
        let fail_names: BTreeSet<String> = f.failing.iter().map(|i| format!("n{i:02}")).collect();
        for _ in 0..40 {
            let before = carried(&snap);
            let plan = reconcile_with(&snap, &settings(), &hooks());
            apply(&mut snap, &plan);
            let (def, state, n) = compartment(&snap);
            let size = policy::batch_size(&def, n, &state).max(0) as usize;
            let now_in = nodes_reading(&snap, "x", Status::InProgress).len();
            prop_assert!(now_in <= size.max(before),
                "{now_in} in progress, batch {size}, carried {before}, {:?}", f.rollout);
            snap.now += jiff::SignedDuration::from_secs(2);
            finish_jobs(&mut snap, "x", |n| fail_names.contains(n));
        }
    }

    /// A picked node keeps its `nodePriority` entry until it completes (§2.6 stickiness).
    #[test]
    fn picked_nodes_stay_sticky_until_complete(f in any_fleet()) {
        let mut snap = build(&f);
        let fail_names: BTreeSet<String> = f.failing.iter().map(|i| format!("n{i:02}")).collect();
        for _ in 0..30 {
            let prio_before: BTreeSet<String> =
                nw_status(&snap, "x").node_priority.iter().flatten().map(|(k, _)| k.clone()).collect();
            let plan = reconcile_with(&snap, &settings(), &hooks());
            apply(&mut snap, &plan);
            let prio_after: BTreeSet<String> =
                nw_status(&snap, "x").node_priority.iter().flatten().map(|(k, _)| k.clone()).collect();
            let complete: BTreeSet<String> = nodes_reading(&snap, "x", Status::Complete).into_iter().collect();
            for n in prio_before.difference(&prio_after) {
                prop_assert!(complete.contains(n), "{n} left nodePriority without completing");
            }
            snap.now += jiff::SignedDuration::from_secs(2);
            finish_jobs(&mut snap, "x", |n| fail_names.contains(n));
        }
    }

    /// The roll-up is a total function of the multiset of node readings: any order gives the
    /// same Status, and its precedence holds.
    #[test]
    fn roll_up_is_total_and_order_free(nodes in prop::collection::vec((any::<bool>(), any_status()), 0..12), seed in any::<u64>()) {
        let s = roll_up(nodes.clone());
        let mut shuffled = nodes.clone();
        let len = shuffled.len();
        if len > 1 {
            let mut x = seed;
            for i in (1..len).rev() {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                shuffled.swap(i, (x >> 33) as usize % (i + 1));
            }
        }
        prop_assert_eq!(roll_up(shuffled), s);
        let remaining: Vec<Status> = nodes.iter().filter(|(c, _)| !c).map(|(_, s)| *s).collect();
        if remaining.is_empty() {
            prop_assert_eq!(s, Status::Complete);
        } else if remaining.contains(&Status::InProgress) {
            prop_assert_eq!(s, Status::InProgress);
        } else {
            prop_assert!(s != Status::Complete);
        }
    }

    /// Same snapshot, same plan — with the product's hooks, at random points of a rollout.
    #[test]
    fn reconcile_is_deterministic(f in any_fleet(), passes in 0..12usize) {
        let mut snap = build(&f);
        for _ in 0..passes {
            let plan = reconcile_with(&snap, &settings(), &hooks());
            apply(&mut snap, &plan);
            snap.now += jiff::SignedDuration::from_secs(2);
            finish_jobs(&mut snap, "x", |_| false);
        }
        let a = reconcile(&snap, &settings());
        let b = reconcile(&snap, &settings());
        prop_assert_eq!(a, b);
    }
}
