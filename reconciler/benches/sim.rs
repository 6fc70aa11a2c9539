//! Simulator throughput: a rolling reboot over 1,000 and 10,000 nodes in virtual time, and
//! the engine's pass over an idle 1,000-node fleet. Prints figures; asserts nothing.
//!
//! Run with `cargo bench -p nodewright-reconciler --bench sim`.
//!
//! The rollout is driven by a stand-in reconciler defined here (cordon → apply Job → reboot
//! interrupt Job → uncordon, 10% of the fleet at a time), not by the lifecycle engine, whose
//! package lane is still being wired; the output says so.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use base64::Engine;
use k8s_openapi::api::batch::v1::JobSpec;
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use nodewright_reconciler::engine::StateCache;
use nodewright_reconciler::job::Job;
use nodewright_reconciler::plan::{Action, NewJob, NodePatch, Plan};
use nodewright_reconciler::scenario::runner::{Hooks, Run};
use nodewright_reconciler::settings::Settings;
use nodewright_reconciler::sim::{job_has_condition, jobs_is_finished};
use nodewright_reconciler::snapshot::Snapshot;
use nodewright_schema::keys;

const PHASE: &str = "bench.example/phase";

fn job(name: &str, node: &str, stage: &str) -> Job {
    let labels: BTreeMap<String, String> = [
        (keys::JOB_LABEL_NAME.to_string(), "bench".to_string()),
        (
            keys::JOB_LABEL_PACKAGE.to_string(),
            "tuning-1.0.0".to_string(),
        ),
        (keys::JOB_LABEL_STAGE.to_string(), stage.to_string()),
    ]
    .into();
    let init = if stage == "interrupt" {
        let payload =
            base64::engine::general_purpose::STANDARD.encode(br#"{"type":"node_restart"}"#);
        vec![Container {
            name: "interrupt".into(),
            args: Some(vec![
                "interrupt".into(),
                "/root".into(),
                "/x".into(),
                payload,
            ]),
            ..Container::default()
        }]
    } else {
        vec![
            Container {
                name: "tuning-init".into(),
                command: Some(vec!["/bin/sh".into()]),
                ..Container::default()
            },
            Container {
                name: "tuning-apply".into(),
                args: Some(vec!["apply".into()]),
                ..Container::default()
            },
            Container {
                name: "tuning-applycheck".into(),
                args: Some(vec!["apply-check".into()]),
                ..Container::default()
            },
        ]
    };
    Job {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(std::sync::Arc::new(JobSpec {
            backoff_limit: Some(if stage == "interrupt" { i32::MAX } else { 3 }),
            pod_replacement_policy: Some("Failed".into()),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    node_name: Some(node.into()),
                    restart_policy: Some(
                        if stage == "interrupt" {
                            "OnFailure"
                        } else {
                            "Never"
                        }
                        .into(),
                    ),
                    init_containers: Some(init),
                    containers: vec![Container {
                        name: "done".into(),
                        image: Some("example/tuning:1.0.0".into()),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..JobSpec::default()
        })),
        status: None,
    }
}

/// Stand-in rollout: at most 10% of nodes in flight.
fn stand_in(snapshot: &Snapshot, _: &Settings, _: &mut StateCache) -> Plan {
    let jobs: HashMap<&str, &Job> = snapshot
        .jobs
        .iter()
        .filter_map(|j| Some((j.metadata.name.as_deref()?, &**j)))
        .collect();
    let budget = (snapshot.nodes.len() / 10).max(1);
    let phase = |n: &k8s_openapi::api::core::v1::Node| {
        n.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PHASE))
            .cloned()
    };
    let mut inflight = snapshot
        .nodes
        .iter()
        .filter(|n| {
            matches!(
                phase(n).as_deref(),
                Some("cordoned" | "applying" | "rebooting")
            )
        })
        .count();
    let mut plan = Plan::default();
    let set_phase = |node: &str, value: &str| {
        let mut p = NodePatch::new(node);
        p.annotations.insert(PHASE.into(), Some(value.into()));
        p
    };
    for node in &snapshot.nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        let (apply, interrupt) = (format!("apply-{name}"), format!("interrupt-{name}"));
        match phase(node).as_deref() {
            None if inflight < budget => {
                inflight += 1;
                let mut p = set_phase(&name, "cordoned");
                p.unschedulable = Some(true);
                p.annotations
                    .insert(keys::cordon("bench"), Some("true".into()));
                plan.actions.push(Action::PatchNode(p));
            }
            Some("cordoned") => {
                plan.actions
                    .push(Action::CreateJob(NewJob::from(job(&apply, &name, "apply"))));
                plan.actions
                    .push(Action::PatchNode(set_phase(&name, "applying")));
            }
            Some("applying")
                if jobs
                    .get(apply.as_str())
                    .is_some_and(|j| job_has_condition(j, "Complete")) =>
            {
                plan.actions.push(Action::CreateJob(NewJob::from(job(
                    &interrupt,
                    &name,
                    "interrupt",
                ))));
                plan.actions
                    .push(Action::PatchNode(set_phase(&name, "rebooting")));
            }
            Some("rebooting")
                if jobs
                    .get(interrupt.as_str())
                    .is_some_and(|j| jobs_is_finished(j)) =>
            {
                let mut p = set_phase(&name, "done");
                p.unschedulable = Some(false);
                p.annotations.insert(keys::cordon("bench"), None);
                plan.actions.push(Action::PatchNode(p));
                for j in [apply, interrupt] {
                    plan.actions.push(Action::DeleteJob {
                        name: j,
                        uid: None,
                        reason: "done".into(),
                    });
                }
            }
            _ => {}
        }
    }
    plan
}

fn fleet(nodes: usize) -> nodewright_reconciler::scenario::Scenario {
    let yaml = format!(
        "name: bench {nodes}\nsettings: {{reconcileInterval: 2s}}\ncluster:\n  nodes:\n    - generate: {{count: {nodes}, namePrefix: node-}}\npackages:\n  example/tuning:\n    rebootTakes: 60s\n    stages: {{apply: {{duration: 20s}}, apply-check: {{duration: 2s}}, interrupt: {{duration: 3s}}}}\n"
    );
    nodewright_reconciler::scenario::parse("bench", &yaml).expect("bench scenario parses")
}

fn rollout(nodes: usize) {
    let hooks = Hooks::with_reconciler(stand_in, "stand-in");
    let scenario = fleet(nodes);
    let started = Instant::now();
    let mut run = Run::new(&scenario, &hooks).expect("bench scenario sets up");
    let setup = started.elapsed();
    let mut virtual_time = Duration::ZERO;
    loop {
        run.run_for(Duration::from_secs(60));
        virtual_time += Duration::from_secs(60);
        let world = run.world();
        let done = world
            .nodes()
            .values()
            .filter(|n| {
                n.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(PHASE))
                    .map(String::as_str)
                    == Some("done")
            })
            .count();
        if done == nodes || virtual_time > Duration::from_secs(48 * 3600) {
            let reboots = world
                .history()
                .entries()
                .iter()
                .filter(|e| e.line.starts_with("reboot "))
                .count();
            drop(world);
            let wall = started.elapsed();
            println!(
                "rolling reboot, {nodes:>6} nodes (stand-in reconciler, not the engine): {done} nodes done, {reboots} reboots, {} virtual in {:.2}s wall (set-up {:.2}s); {} passes, {:.0} passes/s, {:.0}x real time",
                nodewright_reconciler::scenario::runner::fmt_duration(virtual_time),
                wall.as_secs_f64(),
                setup.as_secs_f64(),
                run.passes(),
                run.passes() as f64 / wall.as_secs_f64(),
                virtual_time.as_secs_f64() / wall.as_secs_f64(),
            );
            return;
        }
    }
}

fn engine_idle(nodes: usize) {
    let hooks = Hooks::product();
    let yaml = format!(
        "name: engine {nodes}\ncluster:\n  nodes:\n    - generate: {{count: {nodes}, namePrefix: node-}}\nrepo:\n  files:\n    t.yaml: |\n      apiVersion: nodewright.nvidia.com/v1alpha1\n      kind: NodeWright\n      metadata: {{name: tuning}}\n      spec:\n        packages:\n          tuning: {{version: 1.0.0, image: example/tuning}}\n"
    );
    let scenario = nodewright_reconciler::scenario::parse("bench", &yaml).expect("parses");
    let mut run = Run::new(&scenario, &hooks).expect("sets up");
    let started = Instant::now();
    run.run_for(Duration::from_secs(120));
    let wall = started.elapsed();
    println!(
        "engine passes (engine as currently merged), {nodes:>6} nodes, one NodeWright: {} passes in {:.2}s wall, {:.0} passes/s",
        run.passes(),
        wall.as_secs_f64(),
        run.passes() as f64 / wall.as_secs_f64()
    );
}

/// The lifecycle engine rolling a reboot package over the fleet, 10% at a time.
fn engine_rollout(nodes: usize) {
    let hooks = Hooks::product();
    let yaml = format!(
        "name: engine rollout {nodes}\nsettings: {{reconcileInterval: 2s}}\ncluster:\n  nodes:\n    - generate: {{count: {nodes}, namePrefix: node-}}\npackages:\n  example/driver: {{default: {{duration: 5s}}, rebootTakes: 60s}}\nrepo:\n  files:\n    gpu.yaml: |\n      apiVersion: nodewright.nvidia.com/v1alpha1\n      kind: NodeWright\n      metadata: {{name: gpu}}\n      spec:\n        interruptionBudget: {{percent: 10}}\n        packages:\n          driver: {{version: 1.0.0, image: example/driver, interrupt: {{type: reboot}}}}\n"
    );
    let scenario = nodewright_reconciler::scenario::parse("bench", &yaml).expect("parses");
    let mut run = Run::new(&scenario, &hooks).expect("sets up");
    let started = Instant::now();
    let mut virtual_time = Duration::ZERO;
    loop {
        run.run_for(Duration::from_secs(60));
        virtual_time += Duration::from_secs(60);
        let world = run.world();
        let complete = world
            .nodewrights()
            .get("gpu")
            .and_then(|n| n.status.as_ref())
            .and_then(|s| s.status)
            == Some(nodewright_schema::Status::Complete);
        if complete || virtual_time >= Duration::from_secs(6 * 3600) {
            let reboots = world
                .history()
                .entries()
                .iter()
                .filter(|e| e.line.starts_with("reboot "))
                .count();
            drop(world);
            let wall = started.elapsed();
            println!(
                "engine rollout, {nodes:>6} nodes, reboot package, budget 10%: {} after {} virtual, {reboots} reboots, {:.2}s wall; {} passes, {:.0} passes/s, {:.0}x real time",
                if complete { "complete" } else { "NOT complete" },
                nodewright_reconciler::scenario::runner::fmt_duration(virtual_time),
                wall.as_secs_f64(),
                run.passes(),
                run.passes() as f64 / wall.as_secs_f64(),
                virtual_time.as_secs_f64() / wall.as_secs_f64(),
            );
            return;
        }
    }
}

fn main() {
    // `cargo bench --bench sim -- engine` runs only the cases whose name contains "engine".
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let wanted =
        |name: &str| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()));
    for nodes in [1_000, 10_000] {
        if wanted(&format!("stand-in-{nodes}")) {
            rollout(nodes);
        }
    }
    if wanted("engine-idle-1000") {
        engine_idle(1_000);
    }
    for nodes in [100, 1_000] {
        if wanted(&format!("engine-rollout-{nodes}")) {
            engine_rollout(nodes);
        }
    }
}
