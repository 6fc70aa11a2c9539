//! Kubernetes semantics of the simulated cluster, one behaviour per test.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::job::Job;
use base64::Engine;
use k8s_openapi::api::batch::v1::{
    JobSpec, PodFailurePolicy, PodFailurePolicyOnPodConditionsPattern, PodFailurePolicyRule,
};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodTemplateSpec, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use nodewright_schema::keys;

use super::jobs::{has_condition, is_finished};
use super::nodes::{is_ready, node_boot_id, taints};
use super::workload::phase;
use super::*;
use crate::plan::{Action, NewJob, NodePatch, NodeStateDelta, Outcome, PodRef};

const NS: &str = "nodewright";

fn sim(packages: &str) -> SimCluster {
    let models = PackageModels(serde_yaml::from_str(packages).unwrap());
    SimCluster::new(NS, Box::new(ModelRunner::new(models)), 7)
}

fn node(sim: &mut SimCluster, name: &str) {
    sim.add_node(NodeInput {
        name: name.into(),
        ..NodeInput::default()
    });
}

fn container(name: &str, args: &[&str]) -> Container {
    Container {
        name: name.into(),
        image: Some("agent:v1".into()),
        args: Some(args.iter().map(|s| s.to_string()).collect()),
        ..Container::default()
    }
}

/// A package stage Job in the §8 shape: copy, mode, mode-check, `done`.
fn stage_job(name: &str, node: &str, stage: &str, policy: &str, backoff: i32) -> Job {
    let labels: BTreeMap<String, String> = [
        (keys::JOB_LABEL_NAME.to_string(), "tuning".to_string()),
        (
            keys::JOB_LABEL_PACKAGE.to_string(),
            "tuning-1.0.0".to_string(),
        ),
        (keys::JOB_LABEL_STAGE.to_string(), stage.to_string()),
        (keys::JOB_LABEL_NODE.to_string(), node.to_string()),
    ]
    .into();
    let copy = Container {
        name: "tuning-init".into(),
        image: Some("example/tuning:1.0.0".into()),
        command: Some(vec!["/bin/sh".into(), "-c".into(), "cp".into()]),
        ..Container::default()
    };
    let (inits, failure_policy) = if stage == "interrupt" {
        let payload =
            base64::engine::general_purpose::STANDARD.encode(br#"{"type":"node_restart"}"#);
        (
            vec![container(
                "interrupt",
                &["interrupt", "/root", "/x", &payload],
            )],
            None,
        )
    } else {
        (
            vec![
                copy,
                container(&format!("tuning-{stage}"), &[stage, "/root", "/x"]),
                container(
                    &format!("tuning-{stage}check"),
                    &[&format!("{stage}-check"), "/root", "/x"],
                ),
            ],
            Some(PodFailurePolicy {
                rules: vec![PodFailurePolicyRule {
                    action: "Ignore".into(),
                    on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
                        type_: "DisruptionTarget".into(),
                        status: "True".into(),
                    }]),
                    on_exit_codes: None,
                }],
            }),
        )
    };
    let mut template_labels = labels.clone();
    if stage == "interrupt" {
        template_labels.insert(keys::JOB_LABEL_INTERRUPT.into(), "True".into());
    }
    Job {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            labels: Some(template_labels.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(Arc::new(JobSpec {
            backoff_limit: Some(backoff),
            pod_replacement_policy: Some("Failed".into()),
            pod_failure_policy: failure_policy,
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(template_labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    node_name: Some(node.into()),
                    restart_policy: Some(policy.into()),
                    init_containers: Some(inits),
                    containers: vec![Container {
                        name: "done".into(),
                        image: Some("example/tuning:1.0.0".into()),
                        ..Container::default()
                    }],
                    tolerations: Some(vec![Toleration {
                        key: Some(keys::TAINT_UNSCHEDULABLE.into()),
                        operator: Some("Exists".into()),
                        ..Toleration::default()
                    }]),
                    ..PodSpec::default()
                }),
            },
            ..JobSpec::default()
        })),
        status: None,
    }
}

fn pods_of(sim: &SimCluster, job: &str) -> Vec<Pod> {
    let uid = sim.jobs()[job].metadata.uid.clone().unwrap();
    sim.job_pods(&uid).cloned().collect()
}

fn web_pod(name: &str, node: &str) -> WorkloadPodInput {
    WorkloadPodInput {
        name: name.into(),
        namespace: "default".into(),
        node: Some(node.into()),
        labels: [("app".to_string(), "web".to_string())].into(),
        owner: OwnerKind::ReplicaSet,
        tolerations: vec![],
        empty_dir: false,
        run_for: None,
        grace_seconds: Some(10),
    }
}

#[test]
fn a_never_job_with_unbounded_backoff_keeps_making_pods_paced_by_backoff() {
    let mut sim = sim("example/tuning: {stages: {apply: {duration: 1s, fail: true}}}");
    node(&mut sim, "n1");
    sim.create_job(stage_job("j", "n1", "apply", "Never", i32::MAX));
    sim.advance(Duration::from_secs(1));
    assert_eq!(
        pods_of(&sim, "j").len(),
        1,
        "first attempt failed at 1s; retry waits 10s"
    );
    sim.advance(Duration::from_secs(10));
    assert_eq!(pods_of(&sim, "j").len(), 2);
    sim.advance(Duration::from_secs(400));
    let pods = pods_of(&sim, "j");
    assert!(pods.len() >= 5, "still retrying: {} pods", pods.len());
    assert!(pods.iter().filter(|p| phase(p) == "Failed").count() >= 4);
    let job = &sim.jobs()["j"];
    assert!(!is_finished(job));
    assert_eq!(
        job.status.as_ref().unwrap().failed,
        Some(pods.iter().filter(|p| phase(p) == "Failed").count() as i32)
    );
}

#[test]
fn a_finite_backoff_limit_fails_the_job_after_limit_plus_one_attempts() {
    let mut sim = sim("example/tuning: {stages: {apply: {duration: 1s, fail: true}}}");
    node(&mut sim, "n1");
    sim.create_job(stage_job("j", "n1", "apply", "Never", 3));
    sim.advance(Duration::from_secs(600));
    let job = &sim.jobs()["j"];
    assert!(has_condition(job, "FailureTarget"));
    assert!(has_condition(job, "Failed"));
    let failed = job
        .status
        .as_ref()
        .unwrap()
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == "Failed")
        .unwrap();
    assert_eq!(failed.reason.as_deref(), Some("BackoffLimitExceeded"));
    assert_eq!(job.status.as_ref().unwrap().failed, Some(4));
    assert_eq!(pods_of(&sim, "j").len(), 4);
    assert_eq!(sim.history().count("job-fail tuning/tuning/apply/n1"), 1);
}

#[test]
fn init_containers_run_in_order_and_stop_at_the_first_failure() {
    let mut sim = sim(
        "example/tuning: {stages: {apply: {duration: 3s, fail: true}, apply-check: {duration: 1s}}}",
    );
    node(&mut sim, "n1");
    sim.create_job(stage_job("j", "n1", "apply", "Never", 0));
    sim.advance(Duration::from_secs(2));
    let pod = &pods_of(&sim, "j")[0];
    let inits = pod
        .status
        .as_ref()
        .unwrap()
        .init_container_statuses
        .clone()
        .unwrap();
    assert!(
        inits[0].state.as_ref().unwrap().terminated.is_some(),
        "copy finished"
    );
    assert!(
        inits[1].state.as_ref().unwrap().running.is_some(),
        "apply running"
    );
    assert!(
        inits[2].state.as_ref().unwrap().waiting.is_some(),
        "check waits"
    );
    assert_eq!(
        phase(pod),
        "Pending",
        "init containers keep the pod Pending"
    );
    sim.advance(Duration::from_secs(5));
    let pod = &pods_of(&sim, "j")[0];
    let inits = pod
        .status
        .as_ref()
        .unwrap()
        .init_container_statuses
        .clone()
        .unwrap();
    assert_eq!(
        inits[1]
            .state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .exit_code,
        1
    );
    assert!(
        inits[2].state.as_ref().unwrap().waiting.is_some(),
        "the check never ran"
    );
    assert_eq!(phase(pod), "Failed");
}

#[test]
fn a_successful_stage_completes_the_job_after_the_durations_add_up() {
    let mut sim =
        sim("example/tuning: {stages: {apply: {duration: 20s}, apply-check: {duration: 5s}}}");
    node(&mut sim, "n1");
    sim.create_job(stage_job("j", "n1", "apply", "Never", 3));
    sim.advance(Duration::from_secs(24));
    assert!(!is_finished(&sim.jobs()["j"]));
    sim.advance(Duration::from_secs(1));
    let job = &sim.jobs()["j"];
    assert!(has_condition(job, "Complete"));
    assert_eq!(job.status.as_ref().unwrap().succeeded, Some(1));
    assert_eq!(sim.history().count("job-ok tuning/tuning/apply/n1"), 1);
}

#[test]
fn a_finished_job_and_its_ended_pod_keep_what_a_pass_reads_and_come_back_whole() {
    let mut sim = sim("example/tuning: {default: {duration: 1s}}");
    node(&mut sim, "n1");
    sim.create_job(stage_job("j", "n1", "apply", "Never", 3));
    sim.advance(Duration::from_secs(1));
    let template = sim.jobs()["j"].spec.as_ref().unwrap().template.clone();
    let running = pods_of(&sim, "j").remove(0);
    let key = (NS.to_string(), running.metadata.name.clone().unwrap());
    assert!(!is_finished(&sim.jobs()["j"]));
    assert!(
        running.spec.as_ref().unwrap().containers.len() == 1,
        "a running pod is whole: a drain reads its spec"
    );
    sim.advance(Duration::from_secs(10));
    assert!(has_condition(&sim.jobs()["j"], "Complete"));

    let seen = sim.snapshot(Memory::default());
    let job = seen
        .jobs
        .iter()
        .find(|j| j.metadata.name.as_deref() == Some("j"))
        .unwrap();
    assert_eq!(
        job.spec.as_ref().unwrap().template,
        PodTemplateSpec::default()
    );
    let pod = seen
        .pods
        .iter()
        .find(|p| p.metadata.name == running.metadata.name)
        .unwrap();
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(spec.node_name.as_deref(), Some("n1"));
    assert!(spec.containers.is_empty());
    assert_eq!(spec.init_containers, None);
    assert_eq!(pod.status, sim.pods()[&key].status, "the status is whole");

    let whole_job = sim.whole_job("j").unwrap().into_owned();
    assert_eq!(whole_job.spec.as_ref().unwrap().template, template);
    let whole_pod = sim.whole_pod(&key).unwrap().into_owned();
    assert_eq!(whole_pod.spec, running.spec);
    let read = sim.whole_snapshot(Memory::default());
    let read_pod = read
        .pods
        .iter()
        .find(|p| p.metadata.name == running.metadata.name);
    assert_eq!(
        read_pod.unwrap().spec,
        running.spec,
        "the verbs read whole objects"
    );
    let read_job = read
        .jobs
        .iter()
        .find(|j| j.metadata.name.as_deref() == Some("j"));
    assert_eq!(read_job.unwrap().spec, whole_job.spec);
    let main_log = sim.pod_logs(&crate::cluster::LogRequest {
        namespace: NS.into(),
        pod: key.1.clone(),
        container: None,
        tail_lines: None,
        limit_bytes: None,
        previous: false,
    });
    assert!(
        main_log.is_ok(),
        "an ended pod's only main container is found from its archived spec: {main_log:?}"
    );

    sim.track_changes();
    assert_eq!(
        sim.jobs()["j"].spec,
        whole_job.spec,
        "a served world answers whole objects"
    );
    assert_eq!(sim.pods()[&key].spec, running.spec);
}

#[test]
fn a_job_sync_that_changes_nothing_keeps_the_object_a_snapshot_holds() {
    let mut sim =
        sim("example/tuning: {stages: {apply: {duration: 20s}, apply-check: {duration: 5s}}}");
    node(&mut sim, "n1");
    sim.create_job(stage_job("j", "n1", "apply", "Never", 3));
    sim.advance(Duration::from_secs(5));
    let held = sim.jobs()["j"].arc();
    sim.dirty_jobs.insert("j".to_string());
    sim.settle();
    assert!(
        Arc::ptr_eq(&held, &sim.jobs()["j"].arc()),
        "an unchanged Job stays the object the snapshot holds, without a copy"
    );
    sim.advance(Duration::from_secs(20));
    let job = &sim.jobs()["j"];
    assert!(has_condition(job, "Complete"));
    assert!(
        !Arc::ptr_eq(&held, &job.arc()),
        "a changed Job is a new object"
    );
    assert_eq!(
        held.status.as_ref().and_then(|s| s.succeeded),
        None,
        "what the snapshot holds never changes under it"
    );
}

#[test]
fn suspend_terminates_the_pod_and_resets_start_time_and_resume_starts_a_fresh_pod() {
    let mut sim = sim("example/tuning: {stages: {apply: {duration: 10m}}}");
    node(&mut sim, "n1");
    sim.create_job(stage_job("j", "n1", "apply", "Never", 3));
    sim.advance(Duration::from_secs(60));
    let first_start = sim.jobs()["j"]
        .status
        .as_ref()
        .unwrap()
        .start_time
        .clone()
        .unwrap();
    assert_eq!(sim.suspend_job("j", true), Outcome::Done);
    assert!(
        sim.jobs()["j"]
            .status
            .as_ref()
            .unwrap()
            .start_time
            .is_none()
    );
    assert!(has_condition(&sim.jobs()["j"], "Suspended"));
    assert!(
        pods_of(&sim, "j")[0].metadata.deletion_timestamp.is_some(),
        "terminating with grace"
    );
    sim.advance(Duration::from_secs(31));
    assert!(pods_of(&sim, "j").is_empty());
    assert_eq!(
        sim.jobs()["j"].status.as_ref().unwrap().failed,
        None,
        "suspension spends no attempt"
    );
    sim.advance(Duration::from_secs(100));
    sim.suspend_job("j", false);
    let job = &sim.jobs()["j"];
    let new_start = job.status.as_ref().unwrap().start_time.clone().unwrap();
    assert!(new_start.0 > first_start.0);
    assert_eq!(pods_of(&sim, "j").len(), 1);
    assert_eq!(
        job.metadata.generation,
        Some(3),
        "suspend and resume are spec changes"
    );
}

#[test]
fn eviction_is_refused_without_pdb_headroom_and_allowed_after_a_pod_comes_back() {
    let mut sim = sim("{}");
    for n in ["n1", "n2"] {
        node(&mut sim, n);
        sim.update_node(n, |node| {
            node.spec.as_mut().unwrap().unschedulable = Some(true)
        });
    }
    sim.add_workload_pod(web_pod("web-a", "n1"));
    sim.add_workload_pod(web_pod("web-b", "n2"));
    sim.add_pdb(PdbInput {
        name: "web".into(),
        namespace: "default".into(),
        selector: [("app".to_string(), "web".to_string())].into(),
        min_available: Some(IntOrString::Int(1)),
        max_unavailable: None,
    });
    sim.evict("default", "web-a", None).unwrap();
    // The replacement exists but cannot be scheduled: both nodes are cordoned.
    let err = sim.evict("default", "web-b", None).unwrap_err();
    assert_eq!(
        err,
        EvictionError::Refused {
            message: "Cannot evict pod as it would violate the pod's disruption budget.".into(),
            cause: "The disruption budget web needs 1 healthy pods and has 1 currently".into(),
        }
    );
    let outcome = sim
        .execute(&Action::EvictPod(PodRef {
            namespace: "default".into(),
            name: "web-b".into(),
            node: "n2".into(),
            nodewright: None,
            grace_period_seconds: None,
        }))
        .unwrap();
    assert_eq!(
        outcome,
        Outcome::EvictionRefused {
            message: "The disruption budget web needs 1 healthy pods and has 1 currently".into()
        }
    );
    node(&mut sim, "n3");
    let replacement = sim
        .pods_on("n3")
        .next()
        .expect("replacement scheduled onto the new node");
    assert_eq!(phase(replacement), "Running");
    let outcome = sim
        .execute(&Action::EvictPod(PodRef {
            namespace: "default".into(),
            name: "web-b".into(),
            node: "n2".into(),
            nodewright: None,
            grace_period_seconds: None,
        }))
        .unwrap();
    assert_eq!(outcome, Outcome::Done);
    assert_eq!(
        sim.history().count("evict default/web-b"),
        1,
        "history records the reconciler's evictions"
    );
}

#[test]
fn terminating_pods_stay_until_their_grace_period_ends_and_unmanaged_pods_are_gone() {
    let mut sim = sim("{}");
    node(&mut sim, "n1");
    let mut pod = web_pod("solo", "n1");
    pod.owner = OwnerKind::None;
    pod.grace_seconds = Some(20);
    sim.add_workload_pod(pod);
    sim.evict("default", "solo", None).unwrap();
    let p = &sim.pods()[&("default".to_string(), "solo".to_string())];
    assert!(p.metadata.deletion_timestamp.is_some());
    assert!(
        p.status
            .as_ref()
            .unwrap()
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .any(|c| c.type_ == "DisruptionTarget")
    );
    sim.advance(Duration::from_secs(19));
    assert_eq!(sim.pods().len(), 1);
    sim.advance(Duration::from_secs(1));
    assert!(sim.pods().is_empty(), "unmanaged pods are not recreated");
}

#[test]
fn replacements_go_only_to_nodes_whose_taints_they_tolerate() {
    let mut sim = sim("{}");
    node(&mut sim, "n1");
    sim.add_node(NodeInput {
        name: "tainted".into(),
        taints: vec![Taint {
            key: "dedicated".into(),
            value: Some("gpu".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        }],
        ..NodeInput::default()
    });
    sim.add_workload_pod(web_pod("web-a", "n1"));
    sim.update_node("n1", |n| {
        n.spec.as_mut().unwrap().unschedulable = Some(true)
    });
    sim.evict("default", "web-a", None).unwrap();
    let pending: Vec<_> = sim
        .pods()
        .values()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    assert_eq!(pending.len(), 1);
    assert_eq!(phase(pending[0]), "Pending");
    assert!(pending[0].spec.as_ref().unwrap().node_name.is_none());
    sim.update_node("n1", |n| n.spec.as_mut().unwrap().unschedulable = None);
    let running: Vec<_> = sim
        .pods_on("n1")
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    assert_eq!(running.len(), 1, "scheduled once n1 is uncordoned");
    assert!(
        running[0]
            .metadata
            .name
            .as_deref()
            .unwrap()
            .starts_with("web-a-")
    );
}

#[test]
fn disruption_target_failures_do_not_count_toward_the_backoff_limit() {
    let mut sim = sim("example/tuning: {stages: {apply: {duration: 10m}}}");
    node(&mut sim, "n1");
    sim.create_job(stage_job("j", "n1", "apply", "Never", 0));
    sim.advance(Duration::from_secs(5));
    let pod = pods_of(&sim, "j")[0].metadata.name.clone().unwrap();
    sim.evict(NS, &pod, Some(1)).unwrap();
    sim.advance(Duration::from_secs(5));
    let job = &sim.jobs()["j"];
    assert!(
        !is_finished(job),
        "backoffLimit 0 is not spent by an eviction"
    );
    assert_eq!(job.status.as_ref().unwrap().failed, None);
    let pods = pods_of(&sim, "j");
    assert_eq!(
        pods.len(),
        1,
        "the evicted pod is gone and a replacement runs"
    );
    assert_ne!(pods[0].metadata.name.as_deref(), Some(pod.as_str()));
}

#[test]
fn a_per_attempt_deadline_fails_the_pod_with_deadline_exceeded_and_spends_an_attempt() {
    let mut sim = sim("example/tuning: {stages: {apply: {duration: 10m}}}");
    node(&mut sim, "n1");
    let mut job = stage_job("j", "n1", "apply", "Never", 3);
    Arc::make_mut(job.spec.as_mut().unwrap())
        .template
        .spec
        .as_mut()
        .unwrap()
        .active_deadline_seconds = Some(30);
    sim.create_job(job);
    sim.advance(Duration::from_secs(30));
    let pods = pods_of(&sim, "j");
    let status = pods[0].status.as_ref().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    assert_eq!(status.reason.as_deref(), Some("DeadlineExceeded"));
    assert_eq!(sim.jobs()["j"].status.as_ref().unwrap().failed, Some(1));
    sim.advance(Duration::from_secs(10));
    assert_eq!(
        pods_of(&sim, "j").len(),
        2,
        "replaced after the backoff, with a fresh clock"
    );
}

#[test]
fn a_job_level_deadline_sets_failure_target_then_failed() {
    let mut sim = sim("example/tuning: {stages: {interrupt: {duration: 10m}}}");
    node(&mut sim, "n1");
    let mut job = stage_job("j", "n1", "interrupt", "OnFailure", i32::MAX);
    Arc::make_mut(job.spec.as_mut().unwrap()).active_deadline_seconds = Some(60);
    sim.create_job(job);
    sim.advance(Duration::from_secs(60));
    let job = &sim.jobs()["j"];
    assert!(has_condition(job, "FailureTarget"));
    assert!(!has_condition(job, "Failed"), "pods are still terminating");
    sim.advance(Duration::from_secs(30));
    let job = &sim.jobs()["j"];
    let failed = job
        .status
        .as_ref()
        .unwrap()
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == "Failed")
        .unwrap();
    assert_eq!(failed.reason.as_deref(), Some("DeadlineExceeded"));
}

#[test]
fn on_failure_restarts_in_place_and_counts_restarts_toward_the_backoff_limit() {
    let mut sim = sim("example/tuning: {stages: {apply: {duration: 1s, fail: true}}}");
    node(&mut sim, "n1");
    sim.create_job(stage_job("j", "n1", "apply", "OnFailure", 2));
    sim.advance(Duration::from_secs(12));
    let pods = pods_of(&sim, "j");
    assert_eq!(pods.len(), 1, "one pod, restarted in place");
    let inits = pods[0]
        .status
        .as_ref()
        .unwrap()
        .init_container_statuses
        .clone()
        .unwrap();
    assert_eq!(inits[1].restart_count, 2);
    sim.advance(Duration::from_secs(100));
    let job = &sim.jobs()["j"];
    assert!(has_condition(job, "Failed"));
}

#[test]
fn a_reboot_interrupt_reboots_the_node_and_completes_after_it_returns() {
    let mut sim = sim(
        "example/tuning: {rebootTakes: 90s, stages: {interrupt: {duration: 3s}, apply: {duration: 1h}}}",
    );
    node(&mut sim, "n1");
    let boot = node_boot_id(&sim.nodes()["n1"]).to_string();
    sim.create_job(stage_job("other", "n1", "apply", "Never", 3));
    sim.create_job(stage_job("int", "n1", "interrupt", "OnFailure", i32::MAX));
    sim.advance(Duration::from_secs(3));
    let n1 = &sim.nodes()["n1"];
    assert!(!is_ready(n1));
    assert!(
        taints(n1)
            .iter()
            .any(|t| t.key == keys::TAINT_NOT_READY && t.effect == "NoExecute")
    );
    assert_eq!(sim.history().count("reboot n1"), 1);
    let killed = &pods_of(&sim, "other")[0];
    assert_eq!(phase(killed), "Failed");
    assert!(
        killed
            .status
            .as_ref()
            .unwrap()
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .any(|c| c.type_ == "DisruptionTarget")
    );
    sim.advance(Duration::from_secs(90));
    let n1 = &sim.nodes()["n1"];
    assert!(is_ready(n1));
    assert_ne!(node_boot_id(n1), boot, "a reboot changes the boot id");
    assert!(!taints(n1).iter().any(|t| t.key == keys::TAINT_NOT_READY));
    // The kubelet recreates the pod's sandbox before the interrupt container runs again.
    sim.advance(Duration::from_secs(1));
    let job = &sim.jobs()["int"];
    assert!(has_condition(job, "Complete"));
    let pod = &pods_of(&sim, "int")[0];
    assert_eq!(
        pod.status
            .as_ref()
            .unwrap()
            .init_container_statuses
            .as_ref()
            .unwrap()[0]
            .restart_count,
        1
    );
    assert_eq!(
        sim.jobs()["other"].status.as_ref().unwrap().failed,
        None,
        "the disrupted attempt is not counted"
    );
    assert_eq!(sim.history().count("reboot n1"), 1);
}

/// Upstream's interrupt pod: a bare `OnFailure` pod, the agent's `interrupt` init container,
/// a `pause` main container.
fn bare_interrupt_pod(name: &str, node: &str) -> Pod {
    let payload = base64::engine::general_purpose::STANDARD.encode(br#"{"type":"node_restart"}"#);
    let mut pod = Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            restart_policy: Some("OnFailure".into()),
            init_containers: Some(vec![Container {
                image: Some("example/tuning:1.0.0".into()),
                ..container("interrupt", &["interrupt", "/root", "/x", &payload])
            }]),
            containers: vec![Container {
                name: "pause".into(),
                image: Some("registry.k8s.io/pause:3.10".into()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: None,
    };
    super::pods::default_pod(&mut pod);
    pod
}

fn interrupt_state(sim: &SimCluster, name: &str) -> k8s_openapi::api::core::v1::ContainerStatus {
    sim.pods()[&(NS.to_string(), name.to_string())]
        .status
        .as_ref()
        .and_then(|s| s.init_container_statuses.as_ref())
        .and_then(|l| l.first())
        .cloned()
        .unwrap()
}

#[test]
fn a_pod_killed_by_a_reboot_reads_running_until_its_kubelet_returns_then_exited_255_unknown() {
    let mut sim = sim("example/tuning: {rebootTakes: 60s, stages: {interrupt: {duration: 3s}}}");
    node(&mut sim, "n1");
    sim.create_api_pod(bare_interrupt_pod("reboot", "n1"));
    sim.advance(Duration::from_secs(3));
    assert!(
        !is_ready(&sim.nodes()["n1"]),
        "the interrupt rebooted the node"
    );
    let down = interrupt_state(&sim, "reboot");
    assert!(
        down.state.as_ref().unwrap().running.is_some(),
        "nothing reports while the node is down: {down:?}"
    );
    assert_eq!(down.restart_count, 0);
    sim.advance(Duration::from_secs(60));
    assert!(is_ready(&sim.nodes()["n1"]));
    let back = interrupt_state(&sim, "reboot");
    let lost = back.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(
        (lost.exit_code, lost.reason.as_deref()),
        (255, Some("Unknown")),
        "the runtime's record of a container that died with its host"
    );
    assert_eq!(
        phase(&sim.pods()[&(NS.to_string(), "reboot".to_string())]),
        "Pending"
    );
    sim.advance(Duration::from_secs(1));
    let again = interrupt_state(&sim, "reboot");
    assert_eq!(again.restart_count, 1, "it ran again in a new sandbox");
    assert_eq!(
        again
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .map(|t| t.exit_code),
        Some(255)
    );
    let done = again.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(
        done.exit_code, 0,
        "the boot id changed: the interrupt is complete"
    );
    let pod = &sim.pods()[&(NS.to_string(), "reboot".to_string())];
    assert_eq!(phase(pod), "Running", "pause runs until the pod is deleted");
    assert_eq!(sim.history().count("reboot n1"), 1);
}

#[test]
fn an_interrupt_pod_running_the_agent_image_reboots_for_the_package_its_annotation_names() {
    // Upstream's interrupt pod runs the agent's image and names its package in the legacy
    // package annotation: the node reboots for as long as that package's model says.
    let mut sim = sim("example/tuning: {rebootTakes: 30s, stages: {interrupt: {duration: 3s}}}");
    node(&mut sim, "n1");
    let mut pod = bare_interrupt_pod("reboot", "n1");
    if let Some(spec) = pod.spec.as_mut() {
        for c in spec.init_containers.iter_mut().flatten() {
            c.image = Some("ghcr.io/nvidia/skyhook/agent:latest".into());
        }
    }
    pod.metadata.annotations = Some(
        [(
            keys::legacy(keys::JOB_ANNOTATION_PACKAGE),
            r#"{"name":"tuning","version":"1.0.0","skyhook":"gpu","stage":"interrupt","image":"example/tuning"}"#
                .to_string(),
        )]
        .into(),
    );
    sim.create_api_pod(pod);
    sim.advance(Duration::from_secs(2));
    assert!(is_ready(&sim.nodes()["n1"]), "the interrupt runs for 3 s");
    sim.advance(Duration::from_secs(2));
    assert!(!is_ready(&sim.nodes()["n1"]), "then the node reboots");
    sim.advance(Duration::from_secs(31));
    assert!(
        is_ready(&sim.nodes()["n1"]),
        "back after the package's 30 s, not the default 60 s"
    );
}

#[test]
fn ttl_deletes_a_finished_job_after_the_ttl() {
    let mut sim = sim("{}");
    node(&mut sim, "n1");
    sim.create_job(stage_job("j", "n1", "apply", "Never", 3));
    sim.advance(Duration::from_secs(10));
    assert!(has_condition(&sim.jobs()["j"], "Complete"));
    let uid = sim.jobs()["j"].metadata.uid.clone();
    sim.execute(&Action::AnnotateJob {
        name: "j".into(),
        uid,
        annotations: [(
            keys::JOB_ANNOTATION_STATE_RECORDED.to_string(),
            "true".to_string(),
        )]
        .into(),
        ttl_seconds_after_finished: Some(60),
    })
    .unwrap();
    sim.advance(Duration::from_secs(45));
    assert!(sim.jobs().contains_key("j"), "finished at ~6s, due at ~66s");
    sim.advance(Duration::from_secs(30));
    assert!(!sim.jobs().contains_key("j"));
    assert!(sim.pods().is_empty(), "its pods are collected too");
}

#[test]
fn foreground_deletion_keeps_the_job_until_its_pods_are_gone() {
    let mut sim = sim("example/tuning: {stages: {apply: {duration: 1h}}}");
    node(&mut sim, "n1");
    sim.create_job(stage_job("j", "n1", "apply", "Never", 3));
    sim.advance(Duration::from_secs(5));
    let uid = sim.jobs()["j"].metadata.uid.clone();
    assert_eq!(sim.delete_job("j", Some("wrong-uid")), Outcome::NotFound);
    assert_eq!(sim.delete_job("j", uid.as_deref()), Outcome::Done);
    assert!(sim.jobs()["j"].metadata.deletion_timestamp.is_some());
    assert!(pods_of(&sim, "j")[0].metadata.deletion_timestamp.is_some());
    sim.advance(Duration::from_secs(30));
    assert!(!sim.jobs().contains_key("j"));
    assert_eq!(
        sim.create_job(stage_job("j", "n1", "apply", "Never", 3)),
        Outcome::Done,
        "the name is free again"
    );
}

#[test]
fn creating_an_existing_job_reports_already_exists() {
    let mut sim = sim("{}");
    node(&mut sim, "n1");
    assert_eq!(
        sim.create_job(stage_job("j", "n1", "apply", "Never", 3)),
        Outcome::Done
    );
    assert_eq!(
        sim.execute(&Action::CreateJob(NewJob::from(stage_job(
            "j", "n1", "apply", "Never", 3
        ))))
        .unwrap(),
        Outcome::AlreadyExists
    );
    assert_eq!(sim.history().count("job tuning/tuning/apply/n1"), 1);
}

#[test]
fn node_patches_merge_deltas_and_refuse_malformed_state() {
    let mut sim = sim("{}");
    node(&mut sim, "n1");
    let key = keys::node_state("tuning");
    sim.update_node("n1", |n| {
        n.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(
            key.clone(),
            r#"{"other|1.0.0":{"name":"other","version":"1.0.0","image":"i","stage":"apply","state":"complete"}}"#.into(),
        );
    });
    let mut patch = NodePatch::new("n1");
    patch.unschedulable = Some(true);
    patch
        .annotations
        .insert(keys::cordon("tuning"), Some("true".into()));
    patch.node_state.push(NodeStateDelta::Entries {
        nodewright: "tuning".into(),
        upsert: [(
            "tuning|1.0.0".to_string(),
            nodewright_schema::PackageStatus::new(
                "tuning",
                "1.0.0",
                "example/tuning",
                nodewright_schema::Stage::Apply,
                nodewright_schema::State::InProgress,
            ),
        )]
        .into(),
        remove: vec![],
    });
    assert_eq!(
        sim.execute(&Action::PatchNode(patch)).unwrap(),
        Outcome::Done
    );
    let n1 = &sim.nodes()["n1"];
    let state =
        nodewright_schema::NodeState::parse(&n1.metadata.annotations.as_ref().unwrap()[&key])
            .unwrap();
    assert_eq!(state.0.len(), 2, "the other writer's entry is kept");
    assert!(
        taints(n1)
            .iter()
            .any(|t| t.key == keys::TAINT_UNSCHEDULABLE),
        "lifecycle taint while cordoned"
    );
    assert_eq!(sim.history().count("cordon n1"), 1);
    sim.update_node("n1", |n| {
        n.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(key.clone(), "{broken".into());
    });
    let mut patch = NodePatch::new("n1");
    patch.node_state.push(NodeStateDelta::Entries {
        nodewright: "tuning".into(),
        upsert: BTreeMap::new(),
        remove: vec!["x".into()],
    });
    patch.unschedulable = Some(false);
    let err = sim.execute(&Action::PatchNode(patch)).unwrap_err();
    assert!(matches!(
        err,
        crate::cluster::ClusterError::MalformedNodeState { .. }
    ));
    assert_eq!(
        sim.nodes()["n1"].spec.as_ref().unwrap().unschedulable,
        Some(true),
        "nothing was written"
    );
}

#[test]
fn uncordoning_a_foreign_cordon_is_a_violation() {
    let mut sim = sim("{}");
    node(&mut sim, "n1");
    sim.update_node("n1", |n| {
        n.spec.as_mut().unwrap().unschedulable = Some(true)
    });
    let mut patch = NodePatch::new("n1");
    patch.unschedulable = Some(false);
    sim.execute(&Action::PatchNode(patch)).unwrap();
    let v = sim.take_violations();
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].invariant, 4);
    assert_eq!(sim.history().count("uncordon n1"), 1);
}

#[test]
fn an_interrupt_job_on_an_undrained_node_is_a_violation() {
    let mut sim = sim("{}");
    node(&mut sim, "n1");
    sim.add_workload_pod(web_pod("web-a", "n1"));
    sim.update_node("n1", |n| {
        n.spec.as_mut().unwrap().unschedulable = Some(true)
    });
    sim.execute(&Action::CreateJob(NewJob::from(stage_job(
        "int",
        "n1",
        "interrupt",
        "OnFailure",
        i32::MAX,
    ))))
    .unwrap();
    let v = sim.take_violations();
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].message.contains("default/web-a"), "{}", v[0].message);
}

#[test]
fn injected_api_failures_are_deterministic_and_end_with_their_window() {
    let run = || {
        let mut sim = sim("{}");
        node(&mut sim, "n1");
        sim.fail_api(FaultWindow {
            rate: 0.5,
            until: util::add(sim.now(), Duration::from_secs(60)),
        });
        let mut results = Vec::new();
        for i in 0..20 {
            let mut patch = NodePatch::new("n1");
            patch.labels.insert(format!("k{i}"), Some("v".into()));
            results.push(format!(
                "{:?}",
                sim.execute(&Action::PatchNode(patch))
                    .map_err(|e| e.to_string())
            ));
        }
        sim.advance(Duration::from_secs(61));
        let ok_after = sim
            .execute(&Action::PatchNode(NodePatch::new("n1")))
            .is_ok();
        (results, ok_after)
    };
    let (a, ok) = run();
    assert_eq!(a, run().0);
    assert!(a.iter().any(|r| r.contains("Conflict")) && a.iter().any(|r| r.contains("500")));
    assert!(a.iter().any(|r| r.contains("Done")));
    assert!(ok);
}

#[test]
fn pdb_percentages_round_up_and_max_unavailable_counts_down_from_expected() {
    let mut sim = sim("{}");
    for n in ["n1", "n2", "n3", "n4"] {
        node(&mut sim, n);
        let mut pod = web_pod(&format!("web-{n}"), n);
        pod.grace_seconds = Some(60);
        sim.add_workload_pod(pod);
    }
    sim.add_pdb(PdbInput {
        name: "web".into(),
        namespace: "default".into(),
        selector: [("app".to_string(), "web".to_string())].into(),
        min_available: Some(IntOrString::String("60%".into())),
        max_unavailable: None,
    });
    let key = ("default".to_string(), "web".to_string());
    assert_eq!(sim.pdb_health(&key), (4, 3), "60% of 4 rounds up to 3");
    sim.delete_pdb("default", "web");
    sim.add_pdb(PdbInput {
        name: "web".into(),
        namespace: "default".into(),
        selector: [("app".to_string(), "web".to_string())].into(),
        min_available: None,
        max_unavailable: Some(IntOrString::Int(1)),
    });
    assert_eq!(sim.pdb_health(&key), (4, 3));
    for n in ["n1", "n2", "n3", "n4"] {
        sim.update_node(n, |node| {
            node.spec.as_mut().unwrap().unschedulable = Some(true)
        });
    }
    sim.evict("default", "web-n1", None).unwrap();
    let refused = sim.evict("default", "web-n2", None).unwrap_err();
    assert!(
        matches!(refused, EvictionError::Refused { ref cause, .. } if cause == "The disruption budget web needs 3 healthy pods and has 3 currently"),
        "{refused:?}"
    );
}

#[test]
fn a_pod_matching_two_pdbs_cannot_be_evicted() {
    let mut sim = sim("{}");
    node(&mut sim, "n1");
    sim.add_workload_pod(web_pod("web-a", "n1"));
    for name in ["a", "b"] {
        sim.add_pdb(PdbInput {
            name: name.into(),
            namespace: "default".into(),
            selector: [("app".to_string(), "web".to_string())].into(),
            min_available: Some(IntOrString::Int(0)),
            max_unavailable: None,
        });
    }
    assert!(matches!(
        sim.evict("default", "web-a", None),
        Err(EvictionError::MultiplePdbs(_))
    ));
}

#[test]
fn stateful_and_daemon_set_pods_come_back_once_the_old_pod_is_gone() {
    let mut sim = sim("{}");
    node(&mut sim, "n1");
    node(&mut sim, "n2");
    let mut db = web_pod("db-0", "n1");
    db.owner = OwnerKind::StatefulSet;
    sim.add_workload_pod(db);
    let mut ds = web_pod("agent-n1", "n1");
    ds.owner = OwnerKind::DaemonSet;
    sim.add_workload_pod(ds);
    sim.update_node("n1", |n| {
        n.spec.as_mut().unwrap().unschedulable = Some(true)
    });
    sim.delete_pod("default", "db-0", None);
    sim.delete_pod("default", "agent-n1", None);
    assert_eq!(
        sim.pods().len(),
        2,
        "nothing replaced while the old pods terminate"
    );
    sim.advance(Duration::from_secs(10));
    let db = &sim.pods()[&("default".to_string(), "db-0".to_string())];
    assert_eq!(
        db.spec.as_ref().unwrap().node_name.as_deref(),
        Some("n2"),
        "same name, scheduled where it fits"
    );
    let on_n1: Vec<_> = sim.pods_on("n1").collect();
    assert_eq!(
        on_n1.len(),
        1,
        "the DaemonSet pod returns to its cordoned node"
    );
    assert!(
        on_n1[0]
            .metadata
            .name
            .as_deref()
            .unwrap()
            .starts_with("agent-n1-")
    );
    assert_eq!(phase(on_n1[0]), "Running");
}

#[test]
fn deleting_a_node_garbage_collects_its_pods_as_disruptions() {
    let mut sim = sim("example/tuning: {stages: {apply: {duration: 1h}}}");
    node(&mut sim, "n1");
    sim.create_job(stage_job("j", "n1", "apply", "Never", 0));
    sim.advance(Duration::from_secs(5));
    assert!(sim.delete_node("n1"));
    sim.advance(Duration::from_secs(5));
    let job = &sim.jobs()["j"];
    assert!(
        !is_finished(job),
        "a PodGC casualty does not spend the only attempt"
    );
    let pods = pods_of(&sim, "j");
    assert_eq!(pods.len(), 1);
    assert_eq!(
        phase(&pods[0]),
        "Pending",
        "the replacement waits for a node that is gone"
    );
}

#[test]
fn generation_bumps_on_spec_changes_only() {
    let mut sim = sim("{}");
    node(&mut sim, "n1");
    sim.create_job(stage_job("j", "n1", "apply", "Never", 3));
    let rv = sim.jobs()["j"].metadata.resource_version.clone();
    sim.execute(&Action::AnnotateJob {
        name: "j".into(),
        uid: None,
        annotations: [("a".to_string(), "b".to_string())].into(),
        ttl_seconds_after_finished: None,
    })
    .unwrap();
    assert_eq!(sim.jobs()["j"].metadata.generation, Some(1));
    assert_ne!(
        sim.jobs()["j"].metadata.resource_version,
        rv,
        "every write moves the resourceVersion"
    );
    sim.suspend_job("j", true);
    assert_eq!(sim.jobs()["j"].metadata.generation, Some(2));
}

fn log_request(pod: &str, container: &str) -> crate::cluster::LogRequest {
    crate::cluster::LogRequest {
        namespace: NS.into(),
        pod: pod.into(),
        container: Some(container.into()),
        ..Default::default()
    }
}

#[test]
fn stage_containers_write_agent_like_logs_that_the_log_subresource_reads() {
    let mut sim = sim("example/tuning: {stages: {apply: {duration: 5s, failures: 1}}}");
    node(&mut sim, "n1");
    sim.create_job(stage_job("j", "n1", "apply", "Never", 3));
    sim.advance(Duration::from_secs(1));
    let pod = pods_of(&sim, "j")[0].metadata.name.clone().unwrap();
    let copy = sim.pod_logs(&log_request(&pod, "tuning-init")).unwrap();
    assert!(copy.contains("mode=copy"), "{copy}");
    // While it runs, only the first line is there.
    let running = sim.pod_logs(&log_request(&pod, "tuning-apply")).unwrap();
    assert_eq!(
        running,
        "nodewright-agent (behaviour model) mode=apply package=example/tuning:1.0.0 node=n1 attempt=1\n"
    );
    match sim.pod_logs(&log_request(&pod, "tuning-applycheck")) {
        Err(crate::cluster::ClusterError::Api {
            status: 400,
            message,
            ..
        }) => assert!(message.contains("is waiting to start"), "{message}"),
        other => panic!("a container that has not started has no log: {other:?}"),
    }
    sim.advance(Duration::from_secs(5));
    let failed = sim.pod_logs(&log_request(&pod, "tuning-apply")).unwrap();
    assert!(
        failed.contains("ERROR: apply exited 1 (behaviour model)\n")
            && failed.ends_with("apply failed: exit code 1\n"),
        "{failed}"
    );
    let mut tail = log_request(&pod, "tuning-apply");
    tail.tail_lines = Some(1);
    assert_eq!(sim.pod_logs(&tail).unwrap(), "apply failed: exit code 1\n");
    tail.limit_bytes = Some(5);
    assert_eq!(sim.pod_logs(&tail).unwrap(), "apply");

    // The replacement attempt succeeds and says so; the archive keeps its own log.
    sim.advance(Duration::from_secs(30));
    let pods = pods_of(&sim, "j");
    assert_eq!(pods.len(), 2);
    let second = pods
        .iter()
        .find(|p| p.metadata.name.as_deref() != Some(pod.as_str()))
        .unwrap();
    let ok = sim
        .pod_logs(&log_request(
            second.metadata.name.as_deref().unwrap(),
            "tuning-apply",
        ))
        .unwrap();
    assert!(
        ok.contains("attempt=2") && ok.ends_with("apply succeeded: exit code 0\n"),
        "{ok}"
    );
    assert!(
        sim.pod_logs(&log_request(&pod, "tuning-apply"))
            .unwrap()
            .contains("attempt=1")
    );
    // The only main container is the default (it ran in the succeeded attempt, printing
    // nothing; in the failed one it never started); an unknown container is a 400.
    let mut main = log_request(second.metadata.name.as_deref().unwrap(), "x");
    main.container = None;
    assert_eq!(sim.pod_logs(&main).unwrap(), "");
    main.pod = pod.clone();
    assert!(sim.pod_logs(&main).is_err());
    assert!(matches!(
        sim.pod_logs(&log_request(&pod, "nope")),
        Err(crate::cluster::ClusterError::Api { status: 400, .. })
    ));
    assert!(matches!(
        sim.pod_logs(&log_request("gone", "tuning-apply")),
        Err(crate::cluster::ClusterError::Api { status: 404, .. })
    ));
}

#[test]
fn a_crash_looping_container_keeps_its_previous_instance_and_last_logs_snapshot_reads_it() {
    let mut sim = sim("example/tuning: {stages: {interrupt: {duration: 1s, fail: true}}}");
    node(&mut sim, "n1");
    sim.create_job(stage_job("j", "n1", "interrupt", "OnFailure", i32::MAX));
    sim.advance(Duration::from_secs(1));
    let pod = pods_of(&sim, "j")[0].metadata.name.clone().unwrap();
    let mut previous = log_request(&pod, "interrupt");
    previous.previous = true;
    assert!(sim.pod_logs(&previous).is_err(), "no previous instance yet");
    // Crash-loop backoff 10 s, then the second instance fails too.
    sim.advance(Duration::from_secs(12));
    let current = sim.pod_logs(&log_request(&pod, "interrupt")).unwrap();
    assert!(
        current.contains("attempt=2") && current.contains("interrupt failed: exit code 1"),
        "{current}"
    );
    assert!(sim.pod_logs(&previous).unwrap().contains("attempt=1"));

    let uid = sim.jobs()["j"].metadata.uid.clone();
    let snapshot = |uid: Option<String>, pod: &str| Action::SnapshotLastLogs {
        job: "j".into(),
        uid,
        namespace: NS.into(),
        pod: pod.into(),
        container: "interrupt".into(),
        fallback: Some("interrupt: CrashLoopBackOff: back-off".into()),
    };
    assert_eq!(
        sim.execute(&snapshot(Some("other".into()), &pod)).unwrap(),
        Outcome::NotFound
    );
    assert_eq!(
        sim.execute(&snapshot(uid.clone(), &pod)).unwrap(),
        Outcome::Done
    );
    let annotations = sim.jobs()["j"].metadata.annotations.clone().unwrap();
    assert_eq!(annotations[keys::JOB_ANNOTATION_LAST_LOGS], current);
    // A pod that is gone leaves the waiting reason.
    sim.execute(&snapshot(uid, "gone")).unwrap();
    assert_eq!(
        sim.jobs()["j"].metadata.annotations.as_ref().unwrap()[keys::JOB_ANNOTATION_LAST_LOGS],
        "interrupt: CrashLoopBackOff: back-off"
    );
}
