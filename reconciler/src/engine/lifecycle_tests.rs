//! Packages on a node, end to end: the engine with every package-lane step, driven pass by
//! pass against the simulated cluster (Job controller, kubelet, reboots, evictions, PDBs).
//! Each test asserts what a user would observe: node annotations, Jobs, conditions, history.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use nodewright_schema::{
    Interrupt, InterruptType, NodeState, NodeWright, Package, Stage, State, Uninstall, keys,
};
use proptest::prelude::*;

use super::{Hooks, reconcile_with};
use crate::cluster::Desired;
use crate::plan::{Action, Outcome};
use crate::settings::Settings;
use crate::sim::{
    ModelRunner, NodeInput, OwnerKind, PackageModels, PdbInput, SimCluster, WorkloadPodInput,
};
use crate::snapshot::{EvictionRefusal, Memory, RefusedPod};

const NS: &str = "nodewright";

/// The product's steps.
fn hooks() -> Hooks {
    Hooks::STANDARD
}

struct Harness {
    sim: SimCluster,
    memory: Memory,
    settings: Settings,
    hooks: Hooks,
    violations: Vec<String>,
}

impl Harness {
    fn new(models: &str, nodes: &[&str]) -> Harness {
        let models = PackageModels(serde_yaml::from_str(models).unwrap());
        let mut sim = SimCluster::new(NS, Box::new(ModelRunner::new(models)), 11);
        for n in nodes {
            sim.add_node(NodeInput {
                name: n.to_string(),
                labels: BTreeMap::from([("pool".to_string(), "gpu".to_string())]),
                ..NodeInput::default()
            });
        }
        Harness {
            sim,
            memory: Memory::default(),
            settings: Settings::default(),
            hooks: hooks(),
            violations: Vec::new(),
        }
    }

    fn declare(&mut self, nws: Vec<NodeWright>) {
        self.sim.apply_desired(&Desired {
            nodewrights: nws,
            policies: Vec::new(),
            commit: "c1".into(),
            ..Default::default()
        });
    }

    /// One reconcile pass: snapshot, plan, execute, remember what the spec lets us remember.
    fn pass(&mut self) {
        let snap = self.sim.snapshot(self.memory.clone());
        let plan = reconcile_with(&snap, &self.settings, &self.hooks);
        let now = self.sim.now();
        let mut refused: BTreeMap<String, EvictionRefusal> = BTreeMap::new();
        for action in &plan.actions {
            let outcome = self.sim.execute(action);
            if let (Action::EvictPod(pod), Ok(Outcome::EvictionRefused { message })) =
                (action, &outcome)
            {
                let entry = refused
                    .entry(pod.node.clone())
                    .or_insert_with(|| EvictionRefusal {
                        at: now,
                        nodewright: pod.nodewright.clone().unwrap_or_default(),
                        blockers: Vec::new(),
                    });
                entry.blockers.push(RefusedPod {
                    namespace: pod.namespace.clone(),
                    name: pod.name.clone(),
                    message: message.clone(),
                });
            }
        }
        self.memory.eviction_refusals.extend(refused);
        for job in &snap.jobs {
            let name = super::jobs::job_name(job).to_string();
            if super::jobs::has_condition(job, "FailureTarget") && super::jobs::is_unfinished(job) {
                self.memory.failure_target_seen.entry(name).or_insert(now);
            } else {
                self.memory.failure_target_seen.remove(&name);
            }
        }
        for v in self.sim.take_violations() {
            self.violations
                .push(format!("invariant {}: {}", v.invariant, v.message));
        }
        self.check_annotations_parse();
    }

    fn check_annotations_parse(&mut self) {
        for (name, node) in self.sim.nodes() {
            for (k, v) in node.metadata.annotations.iter().flatten() {
                if k.starts_with(&format!("{}{}", keys::PREFIX, keys::node_key::NODE_STATE))
                    && NodeState::parse(v).is_err()
                {
                    self.violations.push(format!("{name}: {k} does not parse"));
                }
            }
        }
    }

    /// Passes every 2 s of virtual time until `pred` holds; panics after `within`.
    fn until(&mut self, within: Duration, what: &str, pred: impl Fn(&Harness) -> bool) {
        let deadline = crate::sim::util::add(self.sim.now(), within);
        loop {
            self.pass();
            if pred(self) {
                return;
            }
            assert!(
                self.sim.now() < deadline,
                "timed out waiting for {what}: {:#?}",
                self.debug()
            );
            self.sim.advance(Duration::from_secs(2));
        }
    }

    fn run_for(&mut self, d: Duration) {
        let deadline = crate::sim::util::add(self.sim.now(), d);
        while self.sim.now() < deadline {
            self.pass();
            self.sim.advance(Duration::from_secs(2));
        }
    }

    fn state(&self, nw: &str, node: &str) -> NodeState {
        self.annotation(node, &keys::node_state(nw))
            .and_then(|v| NodeState::parse(&v).ok())
            .unwrap_or_default()
    }

    fn annotation(&self, node: &str, key: &str) -> Option<String> {
        self.sim.nodes()[node]
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .cloned()
    }

    fn unschedulable(&self, node: &str) -> bool {
        self.sim.nodes()[node]
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false)
    }

    fn entry_is(&self, nw: &str, node: &str, key: &str, stage: Stage, state: State) -> bool {
        self.state(nw, node)
            .0
            .get(key)
            .is_some_and(|e| e.is(stage, state))
    }

    fn complete(&self, nw: &str, node: &str) -> bool {
        self.annotation(node, &keys::status(nw)).as_deref() == Some("complete")
    }

    fn condition(&self, nw: &str, type_: &str) -> Option<(String, String)> {
        self.sim.nodewrights()[nw]
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == type_))
            .map(|c| (c.reason.clone(), c.message.clone()))
    }

    fn history(&self) -> Vec<String> {
        self.sim
            .history()
            .entries()
            .iter()
            .map(|e| e.line.clone())
            .collect()
    }

    fn count(&self, line: &str) -> usize {
        self.history().iter().filter(|l| l.as_str() == line).count()
    }

    fn first(&self, line: &str) -> Option<usize> {
        self.history().iter().position(|l| l.as_str() == line)
    }

    fn debug(&self) -> String {
        let nodes: Vec<String> = self
            .sim
            .nodes()
            .iter()
            .map(|(n, node)| {
                format!(
                    "{n}: {:?} unschedulable={}",
                    node.metadata.annotations,
                    self.unschedulable(n)
                )
            })
            .collect();
        format!(
            "{}\n{}\n{:?}",
            nodes.join("\n"),
            self.history().join("\n"),
            self.violations
        )
    }

    /// Nodes being worked on for a NodeWright (spec/scenarios.md §6 invariant 1): an unfinished
    /// package Job there, or its cordon annotation on a node that is not complete.
    fn worked_on(&self, nw: &str) -> Vec<String> {
        self.sim
            .nodes()
            .keys()
            .filter(|n| {
                let job = self
                    .sim
                    .jobs()
                    .values()
                    .any(|j| super::jobs::is_on(j, nw, n) && super::jobs::is_unfinished(j));
                let cordoned =
                    self.annotation(n, &keys::cordon(nw)).is_some() && !self.complete(nw, n);
                job || cordoned
            })
            .cloned()
            .collect()
    }

    fn assert_clean(&self) {
        assert!(self.violations.is_empty(), "{:#?}", self.violations);
    }
}

fn nodewright(name: &str, packages: &[(&str, Package)]) -> NodeWright {
    let mut nw = NodeWright::new(name, Default::default());
    nw.spec.priority = 200;
    nw.spec.packages = Some(
        packages
            .iter()
            .map(|(n, p)| (n.to_string(), p.clone()))
            .collect(),
    );
    nw
}

fn pkg(image: &str, version: &str) -> Package {
    Package {
        version: version.into(),
        image: image.into(),
        ..Package::default()
    }
}

fn with_interrupt(mut p: Package, kind: InterruptType, services: &[&str]) -> Package {
    p.interrupt = Some(Interrupt {
        kind,
        services: services.iter().map(|s| s.to_string()).collect(),
    });
    p
}

fn workload() -> WorkloadPodInput {
    WorkloadPodInput {
        name: String::new(),
        namespace: "default".into(),
        node: None,
        labels: BTreeMap::new(),
        owner: OwnerKind::ReplicaSet,
        tolerations: Vec::new(),
        empty_dir: false,
        run_for: None,
        grace_seconds: Some(1),
    }
}

fn boot_id(node: &k8s_openapi::api::core::v1::Node) -> String {
    node.status
        .as_ref()
        .and_then(|s| s.node_info.as_ref())
        .map(|i| i.boot_id.clone())
        .unwrap_or_default()
}

const MIN: Duration = Duration::from_secs(60);

#[test]
fn a_plain_package_runs_apply_then_config_and_completes_with_the_upstream_annotation() {
    let mut h = Harness::new("{}", &["n1", "n2"]);
    h.declare(vec![nodewright(
        "tuning",
        &[("tuning", pkg("example/tuning", "1.0.0"))],
    )]);
    h.until(5 * MIN, "both nodes complete", |h| {
        h.complete("tuning", "n1") && h.complete("tuning", "n2")
    });
    assert_eq!(
        h.annotation("n1", &keys::node_state("tuning")).unwrap(),
        r#"{"tuning|1.0.0":{"name":"tuning","version":"1.0.0","image":"example/tuning","stage":"config","state":"complete"}}"#
    );
    let hist = h.history();
    let apply = h.first("job tuning/tuning/apply/n1").expect("apply job");
    let config = h.first("job tuning/tuning/config/n1").expect("config job");
    assert!(apply < config, "{hist:?}");
    assert_eq!(h.count("cordon n1"), 0, "no interrupt, no cordon");
    assert_eq!(
        h.sim.nodewrights()["tuning"]
            .status
            .as_ref()
            .unwrap()
            .status,
        Some(nodewright_schema::Status::Complete)
    );
    // Completion was recorded exactly once on every Job, with the success TTL.
    for job in h.sim.jobs().values() {
        assert_eq!(
            super::jobs::annotation(job, keys::JOB_ANNOTATION_STATE_RECORDED),
            Some("true")
        );
        assert_eq!(
            job.spec.as_ref().unwrap().ttl_seconds_after_finished,
            Some(3600)
        );
    }
    h.assert_clean();
}

/// The path the engine's module docs trace ("One package on one node, from apply to config"):
/// the pass that records `apply`'s success starts `config`; the pass that records `config`'s
/// success finds the node complete, and the very next one sets its Status `complete`.
#[test]
fn the_pass_that_records_a_stage_s_success_starts_the_next_and_completion_follows_a_pass_later() {
    let mut h = Harness::new("{}", &["n1"]);
    h.declare(vec![nodewright(
        "tuning",
        &[("tuning", pkg("example/tuning", "1.0.0"))],
    )]);
    let key = "tuning|1.0.0";
    let config_job = "job tuning/tuning/config/n1";
    let mut config_started_while_apply_ran = None;
    let mut config_recorded_at = None;
    let mut complete_at = None;
    for pass in 0..100 {
        let apply_running = h.entry_is("tuning", "n1", key, Stage::Apply, State::InProgress);
        let config_running = h.entry_is("tuning", "n1", key, Stage::Config, State::InProgress);
        let had_config_job = h.count(config_job) > 0;
        h.pass();
        if !had_config_job && h.count(config_job) > 0 {
            config_started_while_apply_ran = Some(apply_running);
        }
        if config_running && h.entry_is("tuning", "n1", key, Stage::Config, State::Complete) {
            config_recorded_at = Some(pass);
        }
        if h.complete("tuning", "n1") {
            complete_at = Some(pass);
            break;
        }
        h.sim.advance(Duration::from_secs(2));
    }
    assert_eq!(config_started_while_apply_ran, Some(true), "{}", h.debug());
    let recorded = config_recorded_at.expect("config's success recorded");
    assert_eq!(complete_at, Some(recorded + 1), "{}", h.debug());
    h.assert_clean();
}

#[test]
fn a_reboot_package_drains_first_and_runs_post_interrupt_after_the_boot_id_changes() {
    let models = "example/driver: {default: {duration: 1s}, rebootTakes: 30s}";
    let mut h = Harness::new(models, &["n1"]);
    h.sim.add_workload_pod(WorkloadPodInput {
        name: "train-0".into(),
        namespace: "default".into(),
        node: Some("n1".into()),
        owner: OwnerKind::ReplicaSet,
        ..workload()
    });
    let driver = with_interrupt(pkg("example/driver", "1.0.0"), InterruptType::Reboot, &[]);
    h.declare(vec![nodewright("gpu", &[("driver", driver)])]);
    let boot_before = boot_id(&h.sim.nodes()["n1"]).to_string();
    h.until(10 * MIN, "node complete", |h| h.complete("gpu", "n1"));
    let order = [
        "cordon n1",
        "evict default/train-0",
        "job gpu/driver/apply/n1",
        "job gpu/driver/config/n1",
        "job gpu/driver/interrupt/n1",
        "reboot n1",
        "job gpu/driver/post-interrupt/n1",
        "uncordon n1",
    ];
    let positions: Vec<usize> = order
        .iter()
        .map(|l| {
            h.first(l)
                .unwrap_or_else(|| panic!("{l} missing: {}", h.debug()))
        })
        .collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "{:?}\n{}",
        positions,
        h.debug()
    );
    assert_ne!(boot_id(&h.sim.nodes()["n1"]), boot_before);
    assert!(h.entry_is(
        "gpu",
        "n1",
        "driver|1.0.0",
        Stage::PostInterrupt,
        State::Complete
    ));
    assert!(!h.unschedulable("n1"));
    assert_eq!(h.annotation("n1", &keys::cordon("gpu")), None);
    h.assert_clean();
}

#[test]
fn two_reboot_packages_on_one_node_cause_one_reboot() {
    let mut h = Harness::new("{}", &["n1"]);
    let a = with_interrupt(pkg("example/a", "1.0.0"), InterruptType::Reboot, &[]);
    let b = with_interrupt(pkg("example/b", "1.0.0"), InterruptType::Reboot, &[]);
    h.declare(vec![nodewright("gpu", &[("a", a), ("b", b)])]);
    h.until(15 * MIN, "node complete", |h| h.complete("gpu", "n1"));
    assert_eq!(h.count("reboot n1"), 1, "{}", h.debug());
    assert_eq!(
        h.count("job gpu/a/interrupt/n1"),
        1,
        "owner is the first by name"
    );
    assert_eq!(h.count("job gpu/b/interrupt/n1"), 0);
    assert!(h.entry_is(
        "gpu",
        "n1",
        "b|1.0.0",
        Stage::PostInterrupt,
        State::Complete
    ));
    h.assert_clean();
}

#[test]
fn a_pdb_blocks_the_drain_and_drain_blocked_names_it() {
    let mut h = Harness::new("{}", &["n1"]);
    h.sim.add_workload_pod(WorkloadPodInput {
        name: "web-0".into(),
        namespace: "default".into(),
        node: Some("n1".into()),
        labels: BTreeMap::from([("app".to_string(), "web".to_string())]),
        owner: OwnerKind::StatefulSet,
        ..workload()
    });
    h.sim.add_pdb(PdbInput {
        name: "web".into(),
        namespace: "default".into(),
        selector: BTreeMap::from([("app".to_string(), "web".to_string())]),
        min_available: Some(IntOrString::Int(1)),
        max_unavailable: None,
    });
    let p = with_interrupt(pkg("example/p", "1.0.0"), InterruptType::Reboot, &[]);
    h.declare(vec![nodewright("gpu", &[("p", p)])]);
    h.until(2 * MIN, "DrainBlocked", |h| {
        h.condition("gpu", keys::condition::DRAIN_BLOCKED).is_some()
    });
    let (reason, message) = h.condition("gpu", keys::condition::DRAIN_BLOCKED).unwrap();
    assert_eq!(reason, "PodDisruptionBudget");
    assert!(
        message.starts_with("1/1 nodes blocked draining (n1); default/web-0 on n1: "),
        "{message}"
    );
    let blockers = h.annotation("n1", &keys::drain_blocked("gpu")).unwrap();
    assert!(
        blockers.starts_with(
            r#"[{"namespace":"default","name":"web-0","reason":"PodDisruptionBudget","detail":"#
        ),
        "{blockers}"
    );
    // The throttle: at most one eviction attempt per 30 s.
    h.run_for(MIN);
    let attempts = h
        .history()
        .iter()
        .filter(|l| l.as_str() == "evict default/web-0")
        .count();
    assert!(attempts <= 4, "{attempts} attempts in ~80s");
    assert_eq!(
        h.count("job gpu/p/apply/n1"),
        0,
        "no stage before the drain completes"
    );
    // The PDB goes away: the drain completes and the condition clears.
    h.sim.delete_pdb("default", "web");
    h.until(10 * MIN, "complete", |h| h.complete("gpu", "n1"));
    assert_eq!(h.condition("gpu", keys::condition::DRAIN_BLOCKED), None);
    assert_eq!(h.annotation("n1", &keys::drain_blocked("gpu")), None);
    h.assert_clean();
}

#[test]
fn pause_suspends_the_running_job_and_resume_continues() {
    let mut h = Harness::new("example/slow: {default: {duration: 60s}}", &["n1"]);
    h.declare(vec![nodewright(
        "slow",
        &[("slow", pkg("example/slow", "1.0.0"))],
    )]);
    h.until(MIN, "apply running", |h| {
        h.first("job slow/slow/apply/n1").is_some()
    });
    let mut set = BTreeMap::new();
    set.insert(keys::PAUSE.to_string(), "true".to_string());
    h.sim.annotate_nodewright("slow", &set, &[]);
    h.until(MIN, "suspended", |h| {
        h.sim.jobs().values().any(|j| super::jobs::is_suspended(j))
    });
    h.run_for(3 * MIN);
    assert!(!h.complete("slow", "n1"), "paused: nothing completes");
    assert!(h.entry_is("slow", "n1", "slow|1.0.0", Stage::Apply, State::InProgress));
    h.sim
        .annotate_nodewright("slow", &BTreeMap::new(), &[keys::PAUSE.to_string()]);
    h.until(10 * MIN, "complete after resume", |h| {
        h.complete("slow", "n1")
    });
    assert_eq!(h.count("job slow/slow/apply/n1"), 1, "the same Job resumed");
    h.assert_clean();
}

#[test]
fn a_version_bump_upgrades_and_removes_the_old_entry() {
    let mut h = Harness::new("{}", &["n1"]);
    h.declare(vec![nodewright(
        "t",
        &[("tuning", pkg("example/tuning", "1.0.0"))],
    )]);
    h.until(5 * MIN, "v1 complete", |h| h.complete("t", "n1"));
    h.declare(vec![nodewright(
        "t",
        &[("tuning", pkg("example/tuning", "1.1.0"))],
    )]);
    h.until(5 * MIN, "v2 complete", |h| {
        h.entry_is("t", "n1", "tuning|1.1.0", Stage::Config, State::Complete)
            && h.complete("t", "n1")
    });
    assert!(
        h.first("job t/tuning/upgrade/n1").is_some(),
        "{}",
        h.debug()
    );
    assert!(!h.state("t", "n1").0.contains_key("tuning|1.0.0"));
    h.assert_clean();
}

#[test]
fn a_downgrade_without_uninstall_keeps_both_entries() {
    let mut h = Harness::new("{}", &["n1"]);
    h.declare(vec![nodewright(
        "t",
        &[("tuning", pkg("example/tuning", "2.0.0"))],
    )]);
    h.until(5 * MIN, "v2 complete", |h| h.complete("t", "n1"));
    h.declare(vec![nodewright(
        "t",
        &[("tuning", pkg("example/tuning", "1.0.0"))],
    )]);
    h.until(5 * MIN, "v1 complete", |h| {
        h.entry_is("t", "n1", "tuning|1.0.0", Stage::Config, State::Complete)
    });
    assert!(h.first("job t/tuning/apply/n1").is_some());
    assert!(h.state("t", "n1").0.contains_key("tuning|2.0.0"));
    h.assert_clean();
}

#[test]
fn a_config_change_with_a_matching_config_interrupt_runs_config_then_the_interrupt() {
    let mut h = Harness::new("{}", &["n1"]);
    let mut p = pkg("example/tuning", "1.0.0");
    p.config_map = Some(BTreeMap::from([("a.conf".to_string(), "1".to_string())]));
    p.config_interrupts = Some(BTreeMap::from([(
        "*.conf".to_string(),
        Interrupt {
            kind: InterruptType::Service,
            services: vec!["kubelet".into()],
        },
    )]));
    h.declare(vec![nodewright("t", &[("tuning", p.clone())])]);
    h.until(5 * MIN, "installed", |h| h.complete("t", "n1"));
    assert_eq!(
        h.count("job t/tuning/interrupt/n1"),
        0,
        "first install: no spec interrupt"
    );
    assert!(h.annotation("n1", &keys::config_applied("t")).is_some());
    p.config_map = Some(BTreeMap::from([("a.conf".to_string(), "2".to_string())]));
    h.declare(vec![nodewright("t", &[("tuning", p)])]);
    h.until(5 * MIN, "reconfigured", |h| {
        h.count("job t/tuning/config/n1") == 2 && h.complete("t", "n1")
    });
    let cm = h
        .sim
        .config_maps()
        .values()
        .find(|c| c.metadata.name.as_deref() == Some("t-tuning-1.0.0"))
        .unwrap();
    assert_eq!(cm.data.as_ref().unwrap()["a.conf"], "2");
    assert_eq!(
        h.sim.nodewrights()["t"]
            .status
            .as_ref()
            .unwrap()
            .config_updates,
        Some(BTreeMap::from([(
            "tuning".to_string(),
            vec!["a.conf".to_string()]
        )]))
    );
    assert!(
        h.first("job t/tuning/interrupt/n1").is_some(),
        "{}",
        h.debug()
    );
    assert!(h.first("cordon n1") < h.first("job t/tuning/interrupt/n1"));
    assert!(h.entry_is(
        "t",
        "n1",
        "tuning|1.0.0",
        Stage::PostInterrupt,
        State::Complete
    ));
    h.assert_clean();
}

#[test]
fn uninstall_runs_and_leaves_an_empty_state_then_cancel_reinstalls() {
    let mut h = Harness::new("{}", &["n1"]);
    let mut p = pkg("example/u", "1.0.0");
    p.uninstall = Some(Uninstall {
        enabled: true,
        apply: false,
    });
    h.declare(vec![nodewright("u", &[("u", p.clone())])]);
    h.until(5 * MIN, "installed", |h| h.complete("u", "n1"));
    p.uninstall = Some(Uninstall {
        enabled: true,
        apply: true,
    });
    h.declare(vec![nodewright("u", &[("u", p.clone())])]);
    h.until(5 * MIN, "uninstalled", |h| {
        h.annotation("n1", &keys::node_state("u")).as_deref() == Some("{}")
    });
    assert!(h.first("job u/u/uninstall/n1").is_some());
    h.run_for(20 * Duration::from_secs(1));
    assert_eq!(
        h.count("job u/u/apply/n1"),
        1,
        "absent and requested = uninstalled"
    );
    p.uninstall = Some(Uninstall {
        enabled: true,
        apply: false,
    });
    h.declare(vec![nodewright("u", &[("u", p)])]);
    h.until(5 * MIN, "reinstalled", |h| {
        h.count("job u/u/apply/n1") == 2 && h.complete("u", "n1")
    });
    h.assert_clean();
}

#[test]
fn cancelling_a_running_uninstall_restarts_the_install_at_apply() {
    let mut h = Harness::new(
        "example/u: {default: {duration: 2s}, stages: {uninstall: {duration: 120s}}}",
        &["n1"],
    );
    let mut p = pkg("example/u", "1.0.0");
    p.uninstall = Some(Uninstall {
        enabled: true,
        apply: false,
    });
    h.declare(vec![nodewright("u", &[("u", p.clone())])]);
    h.until(5 * MIN, "installed", |h| h.complete("u", "n1"));
    p.uninstall = Some(Uninstall {
        enabled: true,
        apply: true,
    });
    h.declare(vec![nodewright("u", &[("u", p.clone())])]);
    h.until(MIN, "uninstalling", |h| {
        h.entry_is("u", "n1", "u|1.0.0", Stage::Uninstall, State::InProgress)
            && h.first("job u/u/uninstall/n1").is_some()
            && h.condition("u", keys::condition::UNINSTALL_IN_PROGRESS)
                .is_some()
    });
    p.uninstall = Some(Uninstall {
        enabled: true,
        apply: false,
    });
    h.declare(vec![nodewright("u", &[("u", p)])]);
    h.until(5 * MIN, "reinstalled", |h| {
        h.entry_is("u", "n1", "u|1.0.0", Stage::Config, State::Complete)
            && h.condition("u", keys::condition::UNINSTALL_IN_PROGRESS)
                .is_none()
    });
    assert_eq!(h.count("job u/u/apply/n1"), 2);
    assert_eq!(
        h.count("job-ok u/u/uninstall/n1"),
        0,
        "the uninstall Job was invalidated"
    );
    assert_eq!(
        h.condition("u", keys::condition::UNINSTALL_IN_PROGRESS),
        None
    );
    h.assert_clean();
}

#[test]
fn a_downgrade_of_an_uninstall_enabled_package_installs_only_after_the_uninstall() {
    let mut h = Harness::new("{}", &["n1"]);
    let mut p = pkg("example/u", "2.0.0");
    p.uninstall = Some(Uninstall {
        enabled: true,
        apply: false,
    });
    h.declare(vec![nodewright("u", &[("u", p.clone())])]);
    h.until(5 * MIN, "installed", |h| h.complete("u", "n1"));
    p.uninstall = Some(Uninstall {
        enabled: true,
        apply: true,
    });
    h.declare(vec![nodewright("u", &[("u", p.clone())])]);
    h.until(5 * MIN, "uninstalled", |h| h.state("u", "n1").is_empty());
    h.run_for(Duration::from_secs(10));
    // Admission (§3.2) reads the old object's status.nodeState: it must show the uninstall.
    let published = h.sim.nodewrights()["u"]
        .status
        .clone()
        .unwrap_or_default()
        .node_state;
    assert!(
        published
            .iter()
            .flatten()
            .all(|(_, s)| !s.0.contains_key("u|2.0.0")),
        "{published:?}"
    );
    // Now the version may go down (admission §3.2): a fresh install.
    let mut low = pkg("example/u", "1.0.0");
    low.uninstall = Some(Uninstall {
        enabled: true,
        apply: false,
    });
    h.declare(vec![nodewright("u", &[("u", low)])]);
    h.until(5 * MIN, "v1 installed", |h| {
        h.entry_is("u", "n1", "u|1.0.0", Stage::Config, State::Complete)
    });
    let uninstall = h.first("job u/u/uninstall/n1").unwrap();
    let apply_v1 = h
        .history()
        .iter()
        .rposition(|l| l == "job u/u/apply/n1")
        .unwrap();
    assert!(uninstall < apply_v1);
    assert_eq!(
        h.state("u", "n1").0.keys().cloned().collect::<Vec<_>>(),
        ["u|1.0.0"]
    );
    h.assert_clean();
}

#[test]
fn deleting_the_nodewright_uninstalls_only_uninstall_enabled_packages() {
    let mut h = Harness::new("{}", &["n1"]);
    let mut undo = pkg("example/undo", "1.0.0");
    undo.uninstall = Some(Uninstall {
        enabled: true,
        apply: false,
    });
    let keep = pkg("example/keep", "1.0.0");
    h.declare(vec![nodewright("d", &[("undo", undo), ("keep", keep)])]);
    h.until(5 * MIN, "installed", |h| h.complete("d", "n1"));
    h.declare(vec![]);
    h.until(5 * MIN, "deleted", |h| {
        !h.sim.nodewrights().contains_key("d")
    });
    assert!(h.first("job d/undo/uninstall/n1").is_some());
    assert!(h.first("job d/keep/uninstall/n1").is_none());
    let state = h.state("d", "n1");
    assert_eq!(
        state.0.keys().cloned().collect::<Vec<_>>(),
        ["keep|1.0.0"],
        "kept as a marker"
    );
    assert_eq!(h.annotation("n1", &keys::status("d")), None);
    h.assert_clean();
}

#[test]
fn a_failing_stage_gives_up_erroring_and_stays_parked() {
    let mut h = Harness::new(
        "example/bad: {stages: {apply: {fail: true, duration: 1s}}}",
        &["n1"],
    );
    h.declare(vec![nodewright(
        "b",
        &[("bad", pkg("example/bad", "1.0.0"))],
    )]);
    h.until(10 * MIN, "erroring", |h| {
        h.annotation("n1", &keys::status("b")).as_deref() == Some("erroring")
    });
    assert!(h.entry_is("b", "n1", "bad|1.0.0", Stage::Apply, State::Erroring));
    h.run_for(3 * MIN);
    assert_eq!(h.count("job b/bad/apply/n1"), 1, "parked: not recreated");
    h.assert_clean();
}

#[test]
fn protected_pods_hold_the_drain_and_set_blocked() {
    let mut h = Harness::new("{}", &["n1"]);
    h.sim.add_workload_pod(WorkloadPodInput {
        name: "train".into(),
        namespace: "default".into(),
        node: Some("n1".into()),
        labels: BTreeMap::from([("workload".to_string(), "training".to_string())]),
        owner: OwnerKind::Job,
        run_for: Some(3 * MIN),
        ..workload()
    });
    let p = with_interrupt(pkg("example/p", "1.0.0"), InterruptType::Reboot, &[]);
    let mut nw = nodewright("gpu", &[("p", p)]);
    nw.spec.pod_non_interrupt_labels = Some(LabelSelector {
        match_labels: Some(BTreeMap::from([(
            "workload".to_string(),
            "training".to_string(),
        )])),
        ..LabelSelector::default()
    });
    h.declare(vec![nw]);
    h.until(MIN, "Blocked and cordoned", |h| {
        h.condition("gpu", keys::condition::BLOCKED).is_some() && h.unschedulable("n1")
    });
    h.run_for(MIN);
    let (reason, message) = h.condition("gpu", keys::condition::BLOCKED).unwrap();
    assert_eq!(reason, "NonInterruptPodsRunning");
    assert_eq!(h.count("job gpu/p/apply/n1"), 0, "held before the drain");
    assert_eq!(
        message,
        "1 node blocked by non-interrupt pods (n1). Waiting."
    );
    assert!(h.unschedulable("n1"), "the node stays cordoned while held");
    assert_eq!(
        h.count("evict default/train"),
        0,
        "protected pods are never evicted"
    );
    h.until(10 * MIN, "complete after the pod finished", |h| {
        h.complete("gpu", "n1")
    });
    assert_eq!(h.condition("gpu", keys::condition::BLOCKED), None);
    h.assert_clean();
}

#[test]
fn an_external_cordon_is_used_and_left_in_place() {
    let mut h = Harness::new("{}", &["n1"]);
    h.sim.update_node("n1", |n| {
        n.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
    });
    let p = with_interrupt(pkg("example/p", "1.0.0"), InterruptType::Noop, &[]);
    h.declare(vec![nodewright("gpu", &[("p", p)])]);
    h.until(10 * MIN, "complete", |h| h.complete("gpu", "n1"));
    assert!(h.unschedulable("n1"), "someone else's cordon stays");
    assert_eq!(h.count("cordon n1"), 0);
    assert_eq!(h.count("uncordon n1"), 0);
    h.assert_clean();
}

#[test]
fn serial_works_one_package_at_a_time() {
    let mut h = Harness::new("{}", &["n1"]);
    let mut nw = nodewright(
        "s",
        &[
            ("a", pkg("example/a", "1.0.0")),
            ("b", pkg("example/b", "1.0.0")),
        ],
    );
    nw.spec.serial = true;
    h.declare(vec![nw]);
    h.until(10 * MIN, "complete", |h| h.complete("s", "n1"));
    let a_config = h.first("job s/a/config/n1").unwrap();
    let b_apply = h.first("job s/b/apply/n1").unwrap();
    assert!(a_config < b_apply, "{}", h.debug());
    h.assert_clean();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, .. ProptestConfig::default() })]

    /// Random Job outcomes, reboots, evictions, PDB refusals and reconciler restarts never
    /// break the invariants of spec/scenarios.md §6 (2–5 checked by the simulator, 5 here).
    #[test]
    fn random_interleavings_keep_the_invariants(
        seed in 0u64..1000,
        failures in 0u32..3,
        restarts in proptest::collection::vec(0u32..40, 0..3),
        reboots in proptest::collection::vec(0u32..40, 0..2),
        pdb in any::<bool>(),
    ) {
        let models = format!("example/a: {{stages: {{apply: {{duration: 3s, failures: {failures}}}}}}}\nexample/b: {{default: {{duration: 2s}}, rebootTakes: 20s}}");
        let mut h = Harness::new(&models, &["n1", "n2"]);
        h.sim = {
            let models = PackageModels(serde_yaml::from_str(&models).unwrap());
            let mut sim = SimCluster::new(NS, Box::new(ModelRunner::new(models)), seed);
            for n in ["n1", "n2"] {
                sim.add_node(NodeInput { name: n.into(), ..NodeInput::default() });
            }
            sim
        };
        h.sim.add_workload_pod(WorkloadPodInput {
            name: "web-0".into(),
            namespace: "default".into(),
            node: Some("n1".into()),
            labels: BTreeMap::from([("app".to_string(), "web".to_string())]),
            owner: OwnerKind::ReplicaSet,
            ..workload()
        });
        if pdb {
            h.sim.add_pdb(PdbInput {
                name: "web".into(),
                namespace: "default".into(),
                selector: BTreeMap::from([("app".to_string(), "web".to_string())]),
                min_available: Some(IntOrString::Int(1)),
                max_unavailable: None,
            });
        }
        let a = pkg("example/a", "1.0.0");
        let b = with_interrupt(pkg("example/b", "1.0.0"), InterruptType::Reboot, &[]);
        let mut nw = nodewright("p", &[("a", a), ("b", b)]);
        nw.spec.interruption_budget = Some(nodewright_schema::InterruptionBudget { count: Some(1), percent: None });
        h.declare(vec![nw]);
        for step in 0..80u32 {
            if restarts.contains(&step) {
                h.memory = Memory::default();
            }
            if reboots.contains(&step) {
                h.sim.reboot("n2", Duration::from_secs(10));
            }
            if pdb && step == 45 {
                h.sim.delete_pdb("default", "web");
            }
            h.pass();
            // Invariant 1 (§16.3): with a budget of one, one node at a time is worked on.
            let worked = h.worked_on("p");
            prop_assert!(worked.len() <= 1, "step {step}: {worked:?}");
            h.sim.advance(Duration::from_secs(5));
        }
        prop_assert!(h.violations.is_empty(), "{:#?}", h.violations);
    }
}

/// The engine with every package-lane step, as a scenario-runner reconciler.
fn full_reconcile(
    snapshot: &crate::snapshot::Snapshot,
    settings: &Settings,
    cache: &mut crate::engine::StateCache,
) -> crate::plan::Plan {
    crate::engine::reconcile_with_cache(snapshot, settings, &hooks(), Some(cache))
}

/// Runs the package-lifecycle scenario files (`tests/scenarios/pkg-*.yaml`) through the
/// scenario runner with the engine.
#[test]
fn package_lifecycle_scenarios_pass() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/scenarios");
    let files = crate::scenario::scenario_files(&[dir]).unwrap_or_default();
    let runner_hooks = crate::scenario::Hooks::with_reconciler(full_reconcile, "engine");
    let mut failures = Vec::new();
    let mut ran = 0;
    for file in files {
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if !name.starts_with("pkg-") {
            continue;
        }
        ran += 1;
        let report = crate::scenario::run_file(&file, &runner_hooks);
        if !report.passed() {
            failures.push(report.render());
        }
    }
    assert!(ran > 0, "no pkg-*.yaml scenario found");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
