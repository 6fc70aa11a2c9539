//! Benchmark (not a test): one `reconcile` pass over 10,000 nodes and 5 NodeWrights × 10
//! packages in mixed states (issue 4). Prints the per-pass time; target ≤ 10 ms on one core.
//!
//! Run: `cargo bench -p nodewright-reconciler --bench engine_pass`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use nodewright_reconciler::cluster::Desired;
use nodewright_reconciler::engine::{Hooks, reconcile, reconcile_with};
use nodewright_reconciler::settings::Settings;
use nodewright_reconciler::sim::{ModelRunner, NodeInput, PackageModels, SimCluster};
use nodewright_reconciler::snapshot::{Memory, Snapshot};
use nodewright_schema::{
    InterruptionBudget, NodeState, NodeWright, NodeWrightSpec, Package, PackageStatus, Stage,
    State, Status, keys,
};

const NODES: usize = 10_000;
const NODEWRIGHTS: usize = 5;
const PACKAGES: usize = 10;

fn nodewrights() -> Vec<NodeWright> {
    let mut nodewrights = Vec::new();
    for w in 0..NODEWRIGHTS {
        let name = format!("nw{w}");
        let packages: BTreeMap<String, Package> = (0..PACKAGES)
            .map(|p| {
                (
                    format!("pkg{p}"),
                    Package {
                        version: "1.0.0".into(),
                        image: format!("example/pkg{p}"),
                        ..Package::default()
                    },
                )
            })
            .collect();
        let mut nw = NodeWright::new(
            &name,
            NodeWrightSpec {
                priority: 100 + w as i32,
                node_selectors: Some(LabelSelector {
                    match_labels: Some([("pool".to_string(), format!("p{}", w % 2))].into()),
                    match_expressions: None,
                }),
                interruption_budget: Some(InterruptionBudget {
                    percent: Some(10),
                    count: None,
                }),
                packages: Some(packages),
                ..NodeWrightSpec::default()
            },
        );
        nw.metadata.generation = Some(1);
        nodewrights.push(nw);
    }
    nodewrights
}

/// Node annotations in mixed states: most nodes complete, some part-way, some untouched.
fn node_annotations(i: usize) -> BTreeMap<String, String> {
    let mut annotations = BTreeMap::new();
    for w in 0..NODEWRIGHTS {
        if w % 2 != i % 2 {
            continue;
        }
        let name = format!("nw{w}");
        let done = match i % 10 {
            0 => 0,
            1..=2 => 5,
            _ => PACKAGES,
        };
        if done == 0 {
            continue;
        }
        let mut state = NodeState::default();
        for p in 0..done {
            state.upsert(PackageStatus::new(
                &format!("pkg{p}"),
                "1.0.0",
                &format!("example/pkg{p}"),
                Stage::Config,
                State::Complete,
            ));
        }
        let status = if done == PACKAGES {
            Status::Complete
        } else {
            Status::Waiting
        };
        annotations.insert(keys::node_state(&name), state.to_annotation());
        annotations.insert(keys::status(&name), status.as_str().to_string());
        annotations.insert(keys::node_version(&name), "v0.1.0".to_string());
    }
    annotations
}

/// A simulated cluster a few passes into the rollout (Jobs running, batches admitted).
fn world(settings: &Settings) -> Snapshot {
    let models =
        PackageModels(serde_yaml::from_str("{}").expect("empty package models are valid YAML"));
    let mut sim = SimCluster::new("nodewright", Box::new(ModelRunner::new(models)), 1);
    for i in 0..NODES {
        sim.add_node(NodeInput {
            name: format!("node-{i:05}"),
            labels: BTreeMap::from([("pool".to_string(), format!("p{}", i % 2))]),
            annotations: node_annotations(i),
            ..NodeInput::default()
        });
    }
    sim.apply_desired(&Desired {
        nodewrights: nodewrights(),
        policies: Vec::new(),
        commit: "bench".into(),
    });
    for _ in 0..12 {
        let snap = sim.snapshot(Memory::default());
        let plan = reconcile(&snap, settings);
        for a in &plan.actions {
            let _ = sim.execute(a);
        }
        sim.advance(Duration::from_secs(2));
    }
    sim.snapshot(Memory::default())
}

fn main() {
    let settings = Settings::default();
    let build = Instant::now();
    let snap = world(&settings);
    eprintln!(
        "built a mid-rollout world in {:.1} s",
        build.elapsed().as_secs_f64()
    );
    let runs = 10;
    if std::env::var_os("ENGINE_BENCH_CORE_ONLY").is_some() {
        // For profiling the part-1 pass alone.
        for _ in 0..runs {
            let _ = reconcile_with(&snap, &settings, &Hooks::inert());
        }
        return;
    }
    let mut times = Vec::with_capacity(runs);
    let mut actions = 0;
    for _ in 0..runs {
        let start = Instant::now();
        let plan = reconcile(&snap, &settings);
        times.push(start.elapsed());
        actions = plan.actions.len();
    }
    times.sort();
    let median = times[runs / 2];
    let start = Instant::now();
    let mut entries = 0;
    for n in &snap.nodes {
        for (k, v) in n.metadata.annotations.iter().flatten() {
            if k.starts_with(&keys::node_state("")) {
                entries += NodeState::parse(v).map(|s| s.0.len()).unwrap_or(0);
            }
        }
    }
    println!(
        "  parsing every node-state annotation once ({entries} entries): {:.2} ms",
        start.elapsed().as_secs_f64() * 1e3
    );
    let start = Instant::now();
    let ctx_snap = snap.clone();
    println!(
        "  cloning the snapshot: {:.2} ms",
        start.elapsed().as_secs_f64() * 1e3
    );
    drop(ctx_snap);
    let mut core = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        let _ = reconcile_with(&snap, &settings, &Hooks::inert());
        core.push(start.elapsed());
    }
    core.sort();
    println!(
        "  of which selection/policy/status/conditions alone (inert package hooks): median {:.2} ms",
        core[runs / 2].as_secs_f64() * 1e3
    );
    println!(
        "engine pass: {NODES} nodes, {NODEWRIGHTS} NodeWrights x {PACKAGES} packages, {} Jobs: \
         median {:.2} ms, min {:.2} ms, max {:.2} ms per pass ({actions} actions; target <= 10 ms)",
        snap.jobs.len(),
        median.as_secs_f64() * 1e3,
        times[0].as_secs_f64() * 1e3,
        times[runs - 1].as_secs_f64() * 1e3,
    );
}
