//! Property test (issue 27): a warm pass plans what a cold pass plans, over random sequences
//! of snapshot changes. A simulated rollout gives a snapshot with Jobs and pods in every
//! state; then nodes, Jobs and pods join, leave, move and are rewritten, and relists renew
//! every object, and after each change the pass with the cache the previous passes left must
//! equal the pass without one.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use proptest::prelude::*;

use super::{StateCache, reconcile, reconcile_cached};
use crate::cluster::Desired;
use crate::settings::Settings;
use crate::sim::{ModelRunner, NodeInput, PackageModels, SimCluster};
use crate::snapshot::{Memory, Snapshot};

/// Which objects a change touches.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Node,
    Job,
    Pod,
}

/// One change of the snapshot between two passes; positions wrap around the list.
#[derive(Clone, Debug)]
enum Change {
    /// A copy of the object at `at` joins under a new name and uid, at `to`.
    Join { kind: Kind, at: usize, to: usize },
    /// The object at `at` leaves.
    Leave { kind: Kind, at: usize },
    /// The objects at `at` and `to` swap positions.
    Move { kind: Kind, at: usize, to: usize },
    /// The object at `at` is rewritten: a new allocation with its resourceVersion moved, and
    /// with `annotate` one annotation or label changed.
    Rewrite {
        kind: Kind,
        at: usize,
        annotate: bool,
    },
    /// A relist: every object a new allocation with the same content.
    Relist,
    /// The world's next pass, executed on the snapshot by the test kit.
    Pass,
}

fn any_kind() -> impl Strategy<Value = Kind> {
    prop_oneof![Just(Kind::Node), Just(Kind::Job), Just(Kind::Pod)]
}

fn any_change() -> impl Strategy<Value = Change> {
    prop_oneof![
        (any_kind(), 0..64usize, 0..64usize).prop_map(|(kind, at, to)| Change::Join {
            kind,
            at,
            to
        }),
        (any_kind(), 0..64usize).prop_map(|(kind, at)| Change::Leave { kind, at }),
        (any_kind(), 0..64usize, 0..64usize).prop_map(|(kind, at, to)| Change::Move {
            kind,
            at,
            to
        }),
        (any_kind(), 0..64usize, any::<bool>())
            .prop_map(|(kind, at, annotate)| { Change::Rewrite { kind, at, annotate } }),
        Just(Change::Relist),
        Just(Change::Pass),
    ]
}

const NODEWRIGHT: &str = r#"
apiVersion: nodewright.nvidia.com/v1alpha1
kind: NodeWright
metadata: {name: gpu, generation: 1}
spec:
  nodeSelectors: {matchLabels: {pool: gpu}}
  interruptionBudget: {percent: 50}
  packages:
    driver:
      version: 1.0.0
      image: example/driver
      interrupt: {type: reboot}
    tuning:
      version: 1.0.0
      image: example/tuning
      configMap: {a.conf: "x=1"}
"#;

/// A snapshot `passes` passes into a rollout over six nodes, and the cache those passes left.
fn rolled_out(passes: usize) -> (Snapshot, StateCache) {
    let models = PackageModels(
        serde_yaml::from_str(
            "example/driver: {default: {duration: 3s}, rebootTakes: 10s}\n\
             example/tuning: {default: {duration: 1s}}",
        )
        .expect("package models are valid YAML"),
    );
    let mut sim = SimCluster::new("nodewright", Box::new(ModelRunner::new(models)), 3);
    for i in 0..6 {
        sim.add_node(NodeInput {
            name: format!("n{i}"),
            labels: [("pool".to_string(), "gpu".to_string())].into(),
            ..NodeInput::default()
        });
    }
    sim.apply_desired(&Desired {
        nodewrights: vec![serde_yaml::from_str(NODEWRIGHT).expect("valid NodeWright")],
        commit: "c1".into(),
        ..Desired::default()
    });
    let settings = Settings::default();
    let mut cache = StateCache::new();
    let mut snap = sim.snapshot(Memory::default());
    for _ in 0..passes {
        sim.refresh_snapshot(&mut snap);
        let plan = reconcile_cached(&snap, &settings, &mut cache);
        for action in &plan.actions {
            let _ = sim.execute(action);
        }
        sim.advance(std::time::Duration::from_secs(2));
    }
    sim.refresh_snapshot(&mut snap);
    (snap, cache)
}

fn moved(meta: &mut ObjectMeta) {
    let version = meta.resource_version.as_deref().unwrap_or("0");
    meta.resource_version = Some(format!("{version}1"));
}

fn renamed(meta: &mut ObjectMeta, n: usize) {
    let name = meta.name.clone().unwrap_or_default();
    meta.name = Some(format!("{name}-j{n}"));
    meta.uid = Some(format!("joined-{n}"));
    moved(meta);
}

fn annotated(meta: &mut ObjectMeta, n: usize) {
    meta.annotations
        .get_or_insert_with(Default::default)
        .insert("example.com/touched".into(), n.to_string());
}

/// Applies `change` to the list of one kind of object; `meta` reaches an object's metadata.
fn change_list<T: Clone>(
    list: &mut Vec<Arc<T>>,
    change: &Change,
    n: usize,
    meta: fn(&mut T) -> &mut ObjectMeta,
) {
    if list.is_empty() {
        return;
    }
    let len = list.len();
    match *change {
        Change::Join { at, to, .. } => {
            let mut object = (*list[at % len]).clone();
            renamed(meta(&mut object), n);
            list.insert(to % (len + 1), Arc::new(object));
        }
        Change::Leave { at, .. } => {
            list.remove(at % len);
        }
        Change::Move { at, to, .. } => list.swap(at % len, to % len),
        Change::Rewrite { at, annotate, .. } => {
            let mut object = (*list[at % len]).clone();
            moved(meta(&mut object));
            if annotate {
                annotated(meta(&mut object), n);
            }
            list[at % len] = Arc::new(object);
        }
        Change::Relist | Change::Pass => {
            for object in list.iter_mut() {
                *object = Arc::new((**object).clone());
            }
        }
    }
}

/// Moves the resourceVersion of every object of `list` that is not an object of `before`.
fn renew_written<T: Clone>(
    list: &mut [Arc<T>],
    before: &[Arc<T>],
    meta: fn(&mut T) -> &mut ObjectMeta,
) {
    let held: std::collections::HashSet<*const T> = before.iter().map(Arc::as_ptr).collect();
    for object in list.iter_mut() {
        if !held.contains(&Arc::as_ptr(object)) {
            moved(meta(Arc::make_mut(object)));
        }
    }
}

fn apply_change(snap: &mut Snapshot, change: &Change, n: usize, settings: &Settings) {
    let kind = match change {
        Change::Join { kind, .. }
        | Change::Leave { kind, .. }
        | Change::Move { kind, .. }
        | Change::Rewrite { kind, .. } => Some(*kind),
        Change::Relist => None,
        Change::Pass => {
            let plan = reconcile(snap, settings);
            let before = snap.clone();
            super::testkit::apply(snap, &plan);
            // The test kit writes in place; an API server moves the resourceVersion of every
            // object it writes.
            renew_written(&mut snap.nodes, &before.nodes, |o| &mut o.metadata);
            renew_written(&mut snap.jobs, &before.jobs, |o| &mut o.metadata);
            renew_written(&mut snap.pods, &before.pods, |o| &mut o.metadata);
            for nw in &mut snap.nodewrights {
                if !before.nodewrights.contains(nw) {
                    moved(&mut Arc::make_mut(nw).metadata);
                }
            }
            snap.now += jiff::SignedDuration::from_secs(2);
            return;
        }
    };
    if kind.is_none_or(|k| matches!(k, Kind::Node)) {
        change_list(&mut snap.nodes, change, n, |o| &mut o.metadata);
    }
    if kind.is_none_or(|k| matches!(k, Kind::Job)) {
        change_list(&mut snap.jobs, change, n, |o| &mut o.metadata);
    }
    if kind.is_none_or(|k| matches!(k, Kind::Pod)) {
        change_list(&mut snap.pods, change, n, |o| &mut o.metadata);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]

    /// After every change, the pass with the carried cache plans exactly what a pass without
    /// one plans.
    #[test]
    fn a_warm_pass_plans_what_a_cold_pass_plans(
        passes in 0..24usize,
        changes in prop::collection::vec(any_change(), 1..16),
    ) {
        let settings = Settings::default();
        let (mut snap, mut cache) = rolled_out(passes);
        for (n, change) in changes.iter().enumerate() {
            apply_change(&mut snap, change, n, &settings);
            let warm = reconcile_cached(&snap, &settings, &mut cache);
            let cold = reconcile(&snap, &settings);
            prop_assert_eq!(warm, cold, "after change {} ({:?})", n, change);
        }
    }
}
