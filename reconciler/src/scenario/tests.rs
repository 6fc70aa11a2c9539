//! The runner itself: steps, expectations, invariants and failure reports.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::job::Job;
use k8s_openapi::api::batch::v1::JobSpec;
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use nodewright_schema::keys;

use super::runner::{Hooks, VerbResult, run_scenario};
use super::*;
use crate::engine::StateCache;
use crate::plan::{Action, NewJob, NodePatch, Plan, PodRef};
use crate::settings::Settings;
use crate::sim::SimCluster;
use crate::snapshot::Snapshot;

fn run(yaml: &str, hooks: &Hooks) -> Report {
    let scenario = parse("test.yaml", yaml).unwrap();
    run_scenario(&scenario, "test.yaml", hooks)
}

fn idle() -> Hooks {
    Hooks::with_reconciler(idle_reconcile, "idle")
}

/// A deliberately tiny reconciler for runner tests: cordons nodes labelled `drain=true`
/// (owning the cordon), evicts their pods on later passes (PDB refusals are remembered and
/// retried after 30 s), and creates one apply Job per package of every NodeWright on
/// drained nodes.
fn toy(snapshot: &Snapshot, _settings: &Settings, _: &mut StateCache) -> Plan {
    let mut plan = Plan::default();
    for node in &snapshot.nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        let wants = node
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.get("drain").map(String::as_str) == Some("true"));
        let cordoned = node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        if !wants {
            continue;
        }
        if !cordoned {
            let mut patch = NodePatch::new(&name);
            patch.unschedulable = Some(true);
            patch
                .annotations
                .insert(keys::cordon("toy"), Some("true".into()));
            plan.actions.push(Action::PatchNode(patch));
            continue;
        }
        let throttled = snapshot
            .memory
            .eviction_refusals
            .get(&name)
            .is_some_and(|r| {
                crate::sim::util::since(r.at, snapshot.now) < std::time::Duration::from_secs(30)
            });
        let pods: Vec<_> = snapshot
            .pods
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name.as_str()))
            .filter(|p| p.metadata.namespace.as_deref() == Some("default"))
            .collect();
        if !pods.is_empty() {
            if !throttled {
                for p in pods
                    .iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                {
                    plan.actions.push(Action::EvictPod(PodRef {
                        namespace: "default".into(),
                        name: p.metadata.name.clone().unwrap_or_default(),
                        node: name.clone(),
                        nodewright: Some("toy".into()),
                        grace_period_seconds: None,
                    }));
                }
            }
            continue;
        }
        for nw in &snapshot.nodewrights {
            let nw_name = nw.metadata.name.clone().unwrap_or_default();
            for (pkg, p) in nw.spec.packages() {
                let job_name = format!("{nw_name}-{pkg}-{name}");
                if snapshot
                    .jobs
                    .iter()
                    .any(|j| j.metadata.name.as_deref() == Some(job_name.as_str()))
                {
                    continue;
                }
                let labels: BTreeMap<String, String> = [
                    (keys::JOB_LABEL_NAME.to_string(), nw_name.clone()),
                    (
                        keys::JOB_LABEL_PACKAGE.to_string(),
                        format!("{pkg}-{}", p.version),
                    ),
                    (keys::JOB_LABEL_STAGE.to_string(), "apply".to_string()),
                ]
                .into();
                let image = format!("{}:{}", p.image, p.version);
                plan.actions.push(Action::CreateJob(NewJob::from(Job {
                    metadata: ObjectMeta {
                        name: Some(job_name),
                        labels: Some(labels.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(Arc::new(JobSpec {
                        backoff_limit: Some(0),
                        template: PodTemplateSpec {
                            metadata: Some(ObjectMeta {
                                labels: Some(labels),
                                ..ObjectMeta::default()
                            }),
                            spec: Some(PodSpec {
                                node_name: Some(name.clone()),
                                restart_policy: Some("Never".into()),
                                init_containers: Some(vec![Container {
                                    name: "apply".into(),
                                    args: Some(vec!["apply".into()]),
                                    ..Container::default()
                                }]),
                                containers: vec![Container {
                                    name: "done".into(),
                                    image: Some(image),
                                    ..Container::default()
                                }],
                                ..PodSpec::default()
                            }),
                        },
                        ..JobSpec::default()
                    })),
                    status: None,
                })));
            }
        }
    }
    plan
}

fn toy_hooks() -> Hooks {
    let mut hooks = Hooks::with_reconciler(toy, "toy");
    hooks.verbs.insert(
        "uncordon",
        |world: &mut SimCluster, args: &[String], _settings: &Settings| {
            let Some(node) = args.get(1) else {
                return VerbResult {
                    exit: 2,
                    output: "usage: uncordon NODE".into(),
                };
            };
            world.update_node(node, |n| n.spec.as_mut().unwrap().unschedulable = None);
            VerbResult {
                exit: 0,
                output: String::new(),
            }
        },
    );
    hooks
}

const FLEET: &str = r#"
name: toy rollout
settings: {reconcileInterval: 2s}
cluster:
  nodes:
    - {name: n1, labels: {drain: "true"}}
    - {name: n2}
    - generate: {count: 2, namePrefix: spare-}
  pods:
    - {name: web-0, node: n1, labels: {app: web}, terminationGracePeriod: 5s}
    - {name: web-1, node: n2, labels: {app: web}}
  pdbs:
    - {name: web, selector: {app: web}, minAvailable: 2}
packages:
  example/tuning:
    stages: {apply: {duration: 20s}}
repo:
  files:
    fleet/tuning.yaml: |
      apiVersion: nodewright.nvidia.com/v1alpha1
      kind: NodeWright
      metadata: {name: tuning}
      spec:
        packages:
          tuning: {version: 1.0.0, image: example/tuning}
"#;

#[test]
fn a_rollout_driven_by_a_reconciler_passes_its_expectations() {
    let yaml = format!(
        "{FLEET}steps:\n{}",
        r#"
  - delete: {pdbs: [default/web]}
  - advance: 4s
  - expect:
      nodes: {n1: {unschedulable: true, taints: {present: [node.kubernetes.io/unschedulable]}, annotations: {nodewright.nvidia.com/cordon_toy: "true"}}}
      nodewrights: {tuning: {annotationsAbsent: [nodewright.nvidia.com/pause]}}
  - until:
      expect: {jobs: {count: 1, items: {"tuning/tuning/apply/n1": {spec: {template: {spec: {restartPolicy: Never}}}}}}}
      within: 2m
  - until: {expect: {jobs: {active: 0}}, within: 1m}
  - expect:
      pods: {"default/web-0": absent}
      history:
        order: ["cordon n1", "evict default/web-0", "job tuning/tuning/apply/n1", "job-ok tuning/tuning/apply/n1"]
        never: ["uncordon n1"]
        count: {"evict default/web-0": 1}
  - cli: [uncordon, n1]
  - expect: {nodes: {n1: {unschedulable: false, taints: {absent: [node.kubernetes.io/unschedulable]}}}}
"#
    );
    let report = run(&yaml, &toy_hooks());
    assert!(report.passed(), "{}", report.render());
    assert_eq!(report.steps.len(), 8);
}

#[test]
fn a_pdb_refusal_is_fed_back_and_retried_after_the_throttle() {
    // minAvailable 2 with both web pods healthy: web-0 cannot go until web-1's replacement…
    // here, until a PDB with headroom replaces the strict one.
    let yaml = format!(
        "{FLEET}steps:\n{}",
        r#"
  - advance: 10s
  - expect: {pods: {"default/web-0": {phase: Running, node: n1}}, history: {never: ["evict default/web-0"]}}
  - delete: {pdbs: [default/web]}
  - add: {pdbs: [{name: web, selector: {app: web}, minAvailable: 1}]}
  - until: {expect: {history: {count: {"evict default/web-0": 1}}}, within: 40s}
"#
    );
    let report = run(&yaml, &toy_hooks());
    assert!(report.passed(), "{}", report.render());
    let until = report.steps.last().unwrap();
    assert!(
        until.at.as_secs() >= 30,
        "the retry waited for the 30 s throttle: {}",
        report.render()
    );
}

#[test]
fn a_broken_expectation_fails_with_expected_and_actual() {
    let yaml = r#"
name: broken
cluster: {nodes: [{name: n1}]}
steps:
  - advance: 10s
  - expect: {nodes: {n1: {ready: false}}}
  - advance: 10s
"#;
    let report = run(yaml, &idle());
    assert!(!report.passed());
    assert_eq!(report.steps.len(), 2, "stops at the first failure");
    let failed = &report.steps[1];
    assert!(!failed.passed);
    assert!(
        failed.detail.contains("mismatch at nodes.n1.ready"),
        "{}",
        failed.detail
    );
    assert!(
        failed.detail.contains("expected: false"),
        "{}",
        failed.detail
    );
    assert!(failed.detail.contains("actual: true"), "{}", failed.detail);
    let text = report.render();
    assert!(text.contains("FAIL step 2 expect at +10s"), "{text}");
    assert!(text.contains("FAILED"), "{text}");
}

#[test]
fn an_until_that_never_holds_fails_after_within_with_the_last_mismatch() {
    let yaml = r#"
name: never ready
cluster: {nodes: [{name: n1}]}
steps:
  - node: {name: n1, reboot: true}
  - until: {expect: {nodes: {n1: {ready: true}}}, within: 30s}
"#;
    let report = run(yaml, &idle());
    let failed = report.steps.last().unwrap();
    assert!(!failed.passed);
    assert!(
        failed.detail.contains("did not hold within 30s"),
        "{}",
        failed.detail
    );
    assert!(failed.detail.contains("actual: false"), "{}", failed.detail);
    let ok = run(
        "name: ready later\ncluster: {nodes: [{name: n1}]}\nsteps:\n  - node: {name: n1, reboot: true}\n  - until: {expect: {nodes: {n1: {ready: true}}}, within: 2m}\n  - expect: {history: {count: {\"reboot n1\": 1}}}\n",
        &idle(),
    );
    assert!(ok.passed(), "{}", ok.render());
}

#[test]
fn invariant_violations_fail_the_step_whatever_it_says() {
    fn rogue(snapshot: &Snapshot, _: &Settings, _: &mut StateCache) -> Plan {
        let mut plan = Plan::default();
        for node in &snapshot.nodes {
            if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
                let mut patch = NodePatch::new(node.metadata.name.clone().unwrap_or_default());
                patch.unschedulable = Some(false);
                plan.actions.push(Action::PatchNode(patch));
            }
        }
        plan
    }
    let yaml = r#"
name: foreign cordon
cluster: {nodes: [{name: n1, unschedulable: true}]}
steps:
  - advance: 10s
"#;
    let report = run(yaml, &Hooks::with_reconciler(rogue, "rogue"));
    assert!(!report.passed());
    let detail = &report.steps[0].detail;
    assert!(detail.contains("invariant 4"), "{detail}");
    assert!(detail.contains("n1"), "{detail}");
}

#[test]
fn unknown_verbs_and_missing_seams_fail_with_clear_messages() {
    let report = run("name: v\nsteps:\n  - cli: [node, reset, n1]\n", &idle());
    assert!(
        report.steps[0]
            .detail
            .contains("unknown operational verb `node`"),
        "{}",
        report.render()
    );
    let report = run(
        "name: m\nsteps:\n  - expect: {metrics: {'nodewright_node_status_count{nodewright_name=\"t\",status=\"complete\"}': 0}}\n",
        &idle(),
    );
    assert!(
        report.steps[0].detail.contains("no metrics source"),
        "{}",
        report.render()
    );
    let report = run(
        "name: r\npackages: {example/real: {path: examples/packages/tuning}}\n",
        &idle(),
    );
    assert!(
        report
            .setup_error
            .as_deref()
            .unwrap_or_default()
            .contains("real-agent"),
        "{}",
        report.render()
    );
}

#[test]
fn an_invalid_commit_keeps_the_last_valid_desired_state() {
    let yaml = format!(
        "{FLEET}steps:\n{}",
        r#"
  - advance: 2s
  - commit: {message: "break the manifest\nbody", files: {fleet/tuning.yaml: "kind: ["}}
  - advance: 4s
  - expect:
      nodewrights: {tuning: {spec: {packages: {tuning: {version: 1.0.0}}}}}
      history: {count: {"commit break the manifest": 1}}
  - commit: {message: remove it, delete: [fleet/tuning.yaml]}
  - advance: 2s
  - expect: {nodewrights: {tuning: {deleted: true}}}
"#
    );
    let report = run(&yaml, &idle());
    assert!(report.passed(), "{}", report.render());
    assert!(
        report.steps[2].detail.contains("invalid"),
        "{}",
        report.render()
    );
}

#[test]
fn fail_api_makes_writes_fail_for_a_while_and_restart_drops_memory() {
    let yaml = format!(
        "{FLEET}steps:\n{}",
        r#"
  - delete: {pdbs: [default/web]}
  - failApi: {rate: 1.0, for: 30s}
  - advance: 20s
  - expect: {nodes: {n1: {unschedulable: false}}, history: {never: ["cordon n1"]}}
  - restartReconciler: {}
  - until: {expect: {history: {count: {"cordon n1": 1}}}, within: 30s}
"#
    );
    let report = run(&yaml, &toy_hooks());
    assert!(report.passed(), "{}", report.render());
    assert!(
        report.steps[2].detail.contains("500") || report.steps[2].detail.contains("notes"),
        "{}",
        report.render()
    );
    assert!(
        report.steps[5].at.as_secs() >= 30,
        "writes succeed only once the window ends: {}",
        report.render()
    );
}

/// One exported series, `nodewright_up{pool="gpu"} 0`, for the metrics expectations below.
fn one_zero_series(_snapshot: &Snapshot, _settings: &Settings) -> Vec<expect::Sample> {
    vec![expect::Sample {
        name: "nodewright_up".into(),
        labels: BTreeMap::from([("pool".to_string(), "gpu".to_string())]),
        value: 0.0,
    }]
}

#[test]
fn metrics_expectations_accept_absent_and_an_absent_series_also_matches_zero() {
    let mut hooks = idle();
    hooks.metrics = Some(one_zero_series);
    let step = |series: &str, value: &str| {
        let yaml = format!("name: m\nsteps:\n  - expect: {{metrics: {{'{series}': {value}}}}}\n");
        run(&yaml, &hooks)
    };
    let exported = r#"nodewright_up{pool="gpu"}"#;
    let missing = r#"nodewright_up{pool="cpu"}"#;
    assert!(step(missing, "absent").passed());
    assert!(step(missing, "0").passed());
    assert!(step(exported, "0").passed());
    assert!(step(exported, "'0'").passed());
    let report = step(exported, "absent");
    assert!(!report.passed());
    assert!(
        report.steps[0].detail.contains("the series is exported"),
        "{}",
        report.render()
    );
    assert!(!step(missing, "1").passed());
    let err = parse(
        "m.yaml",
        "name: m\nsteps:\n  - expect: {metrics: {x: gone}}\n",
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("number or the word `absent`"),
        "{err}"
    );
}
