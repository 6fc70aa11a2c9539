//! The whole engine driving the simulated cluster: what a user would see
//! after a rollout, and the budget bound while it runs.

use std::time::Duration;

use nodewright_schema::{Status, keys};

use super::reconcile;
use super::testkit::{nw, t0};
use crate::cluster::Desired;
use crate::settings::Settings;
use crate::sim::{ModelRunner, NodeInput, PackageModels, SimCluster};
use crate::snapshot::Memory;

fn cluster(nodes: usize) -> SimCluster {
    let models = PackageModels(
        serde_yaml::from_str("example/p: {default: {duration: 3s}}\nexample/r: {default: {duration: 2s}, rebootTakes: 20s}\n")
            .expect("models"),
    );
    let mut sim = SimCluster::new("nodewright", Box::new(ModelRunner::new(models)), 1);
    for i in 0..nodes {
        sim.add_node(NodeInput {
            name: format!("n{i}"),
            ..NodeInput::default()
        });
    }
    sim
}

/// Runs passes every 2 s until `done` or `limit`; returns the most nodes seen being worked
/// on at once (unfinished Job of the NodeWright, or carrying its cordon while incomplete).
fn drive(
    sim: &mut SimCluster,
    nw_name: &str,
    limit: Duration,
    done: impl Fn(&SimCluster) -> bool,
) -> usize {
    let settings = Settings::default();
    let end = sim.now() + limit;
    let mut most = 0;
    while sim.now() < end && !done(sim) {
        let snap = sim.snapshot(Memory::default());
        let plan = reconcile(&snap, &settings);
        for a in &plan.actions {
            let _ = sim.execute(a);
        }
        let working: std::collections::BTreeSet<String> = sim
            .jobs()
            .values()
            .filter(|j| {
                j.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(keys::JOB_LABEL_NAME))
                    .map(String::as_str)
                    == Some(nw_name)
                    && !super::jobs::is_complete(j)
                    && !super::jobs::is_failed(j)
            })
            .filter_map(|j| {
                j.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(keys::JOB_LABEL_NODE))
                    .cloned()
            })
            .collect();
        most = most.max(working.len());
        sim.advance(Duration::from_secs(2));
    }
    most
}

fn status_of(sim: &SimCluster, name: &str) -> Option<Status> {
    sim.nodewrights()
        .get(name)
        .and_then(|n| n.status.as_ref())
        .and_then(|s| s.status)
}

#[test]
fn rollout_with_reboot_package_completes_within_budget() {
    let mut sim = cluster(5);
    assert_eq!(sim.now(), t0());
    let desired = Desired {
        nodewrights: vec![
            nw("gpu")
                .package("p", "1.0.0")
                .reboot_package("r", "2.0.0")
                .budget_count(2)
                .build(),
        ],
        policies: vec![],
        commit: "c1".into(),
        ..Default::default()
    };
    sim.apply_desired(&desired);
    let most = drive(&mut sim, "gpu", Duration::from_secs(3600), |s| {
        status_of(s, "gpu") == Some(Status::Complete)
    });
    let history: Vec<String> = sim
        .history()
        .entries()
        .iter()
        .map(|e| format!("{e:?}"))
        .collect();
    assert_eq!(
        status_of(&sim, "gpu"),
        Some(Status::Complete),
        "history:\n{}",
        history.join("\n")
    );
    assert!(most <= 2, "at most 2 nodes worked on at once, saw {most}");
    for node in sim.nodes().values() {
        let unsched = node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        assert!(!unsched, "every node uncordoned after completion");
    }
    let st = sim.nodewrights()["gpu"].status.clone().expect("status");
    assert_eq!(st.complete_nodes.as_deref(), Some("5/5"));
    let violations = sim.take_violations();
    assert!(
        violations.is_empty(),
        "simulator invariants: {violations:?}"
    );
}
