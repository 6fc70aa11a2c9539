//! The kube adapter against `sim serve` over loopback (issue 8): every action observed through
//! the API, 409 handling, PDB refusals, a full rollout compared with the in-process simulator,
//! leader election between two replicas, and kubectl when it is installed.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use nodewright_reconciler::cluster::kube::{KubeCluster, KubeOptions};
use nodewright_reconciler::cluster::lease::{LeaderElector, LeaseConfig};
use nodewright_reconciler::cluster::sim::{SimAdapter, block_on};
use nodewright_reconciler::cluster::{Cluster, Desired};
use nodewright_reconciler::controller::Controller;
use nodewright_reconciler::job::Job;
use nodewright_reconciler::plan::{
    Action, Event, EventObject, EventType, NewJob, NodePatch, NodeStateDelta, Outcome, PodRef,
    StatusPatch,
};
use nodewright_reconciler::settings::Settings;
use nodewright_reconciler::sim::http::{ServeOptions, SimServer};
use nodewright_reconciler::sim::{
    ModelRunner, NodeInput, OwnerKind, PackageModels, PdbInput, SimCluster, WorkloadPodInput,
};
use nodewright_schema::{
    DeploymentPolicy, NodeWright, NodeWrightStatus, PackageStatus, Stage, State, Status, keys,
};
use serde_json::json;

const NS: &str = "nodewright";

fn models() -> PackageModels {
    PackageModels(
        serde_yaml::from_str(
            "example/r: {default: {duration: 2s}, rebootTakes: 20s}\nexample/slow: {default: {duration: 1h}}\nexample/step: {default: {duration: 10s}}\n",
        )
        .unwrap(),
    )
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Two GPU nodes; on n0 a batch pod protected by a PDB (finishes after 90 s) and a web pod.
fn world() -> SimCluster {
    let mut sim = SimCluster::new(NS, Box::new(ModelRunner::new(models())), 7);
    for i in 0..2 {
        sim.add_node(NodeInput {
            name: format!("n{i}"),
            labels: labels(&[("gpu", "true")]),
            ..NodeInput::default()
        });
    }
    let pod = |name: &str, app: &str, run_for: Option<Duration>| WorkloadPodInput {
        name: name.into(),
        namespace: "apps".into(),
        node: Some("n0".into()),
        labels: labels(&[("app", app)]),
        owner: OwnerKind::ReplicaSet,
        tolerations: vec![],
        empty_dir: false,
        run_for,
        grace_seconds: Some(5),
    };
    sim.add_workload_pod(pod("batch-0", "batch", Some(Duration::from_secs(90))));
    sim.add_workload_pod(pod("web-0", "web", None));
    sim.add_pdb(PdbInput {
        name: "batch".into(),
        namespace: "apps".into(),
        selector: labels(&[("app", "batch")]),
        min_available: Some(IntOrString::Int(1)),
        max_unavailable: None,
    });
    sim
}

fn rollout_nodewright() -> NodeWright {
    serde_yaml::from_str(
        r#"
apiVersion: nodewright.nvidia.com/v1alpha1
kind: NodeWright
metadata:
  name: rollout
spec:
  nodeSelectors:
    matchLabels:
      gpu: "true"
  interruptionBudget:
    count: 1
  packages:
    driver:
      version: 1.0.0
      image: example/r
      interrupt:
        type: reboot
      configMap:
        a.conf: "x=1"
"#,
    )
    .unwrap()
}

fn policy() -> DeploymentPolicy {
    serde_yaml::from_str(
        r#"
apiVersion: nodewright.nvidia.com/v1alpha1
kind: DeploymentPolicy
metadata:
  name: canary
spec:
  default:
    budget:
      count: 1
    strategy:
      fixed:
        initialBatch: 1
"#,
    )
    .unwrap()
}

async fn serve(sim: SimCluster, speed: f64) -> SimServer {
    SimServer::start(
        sim,
        ServeOptions {
            port: 0,
            speed,
            tick: Duration::from_millis(20),
            ..ServeOptions::default()
        },
    )
    .await
    .unwrap()
}

async fn connect(server: &SimServer, instance: &str) -> KubeCluster {
    connect_keeping_ended_pods(server, instance, true).await
}

/// Connects as `nodewright run` does: ended pods are not kept for `package logs`.
async fn connect_as_run(server: &SimServer, instance: &str) -> KubeCluster {
    connect_keeping_ended_pods(server, instance, false).await
}

async fn connect_keeping_ended_pods(
    server: &SimServer,
    instance: &str,
    keep_ended_pods_for_logs: bool,
) -> KubeCluster {
    KubeCluster::connect(
        server.client().await.unwrap(),
        KubeOptions {
            namespace: NS.into(),
            instance: instance.into(),
            clock: server.clock(),
            keep_ended_pods_for_logs,
        },
    )
    .await
    .unwrap()
}

/// Polls `check` every 50 ms for up to `limit` of wall time.
async fn eventually<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < end {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for: {what}");
}

fn job(name: &str, node: &str) -> Job {
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "labels": {
            keys::JOB_LABEL_NAME: "tuning", keys::JOB_LABEL_NODE: node}},
        "spec": {
            "backoffLimit": 0,
            "template": {"spec": {
                "nodeName": node, "restartPolicy": "Never",
                "initContainers": [{"name": "apply", "image": "example/slow:1.0.0", "args": ["apply"]}],
                "containers": [{"name": "done", "image": "busybox"}]
            }}
        }
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_adapter_connects_and_snapshots_through_the_api() {
    let server = serve(world(), 1.0).await;
    let cluster = connect(&server, "a").await;
    let snap = cluster.snapshot().await.unwrap();
    let mut names: Vec<_> = snap
        .nodes
        .iter()
        .map(|n| n.metadata.name.clone().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["n0", "n1"]);
    // Workload pods are only watched on nodes under drain.
    assert!(snap.pods.is_empty());
    cluster
        .execute(&Action::PatchNode(NodePatch {
            unschedulable: Some(true),
            ..NodePatch::new("n0")
        }))
        .await
        .unwrap();
    eventually(
        Duration::from_secs(10),
        "n0's pods in the snapshot",
        || async {
            let snap = cluster.snapshot().await.unwrap();
            snap.pods.len() == 2
                && snap
                    .nodes
                    .iter()
                    .any(|n| n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true))
        },
    )
    .await;
    // Once listed, a node under drain is kept current by the watch of bound pods: a pod bound
    // to it later appears, a deleted one leaves, and a pod on another node never shows.
    let pods: Api<Pod> = Api::namespaced(server.client().await.unwrap(), "apps");
    for (name, node) in [("late-0", "n0"), ("elsewhere-0", "n1")] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "apps"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    pods.delete("web-0", &Default::default()).await.unwrap();
    let names = |snap: &nodewright_reconciler::snapshot::Snapshot| {
        let mut names: Vec<String> = snap
            .pods
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        names.sort();
        names
    };
    eventually(
        Duration::from_secs(10),
        "a pod bound later in, a deleted one out",
        || async { names(&cluster.snapshot().await.unwrap()) == ["batch-0", "late-0"] },
    )
    .await;
    cluster
        .execute(&Action::PatchNode(NodePatch {
            unschedulable: Some(false),
            ..NodePatch::new("n0")
        }))
        .await
        .unwrap();
    eventually(
        Duration::from_secs(10),
        "no workload pods once n0 left the drain",
        || async { cluster.snapshot().await.unwrap().pods.is_empty() },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_action_kind_has_its_effect_through_the_api() {
    let server = serve(world(), 5.0).await;
    let cluster = connect(&server, "a").await;
    let client = server.client().await.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), "apps");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let nws: Api<NodeWright> = Api::all(client.clone());

    // Node delta: annotation, label, node state, taint, cordon.
    let mut patch = NodePatch::new("n1");
    patch
        .annotations
        .insert("example.com/a".into(), Some("1".into()));
    patch
        .labels
        .insert("example.com/l".into(), Some("x".into()));
    patch.node_state.push(NodeStateDelta::Entries {
        nodewright: "tuning".into(),
        upsert: BTreeMap::from([(
            "p|1.0.0".into(),
            PackageStatus::new("p", "1.0.0", "example/p", Stage::Apply, State::InProgress),
        )]),
        remove: vec![],
    });
    patch.add_taints.push(k8s_openapi::api::core::v1::Taint {
        key: "example.com/t".into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    });
    patch.unschedulable = Some(true);
    assert_eq!(
        cluster.execute(&Action::PatchNode(patch)).await.unwrap(),
        Outcome::Done
    );
    let n1 = nodes.get("n1").await.unwrap();
    let ann = n1.metadata.annotations.clone().unwrap();
    assert_eq!(ann["example.com/a"], "1");
    assert!(ann[&keys::node_state("tuning")].contains("\"p|1.0.0\""));
    assert_eq!(n1.metadata.labels.clone().unwrap()["example.com/l"], "x");
    let spec = n1.spec.clone().unwrap();
    assert_eq!(spec.unschedulable, Some(true));
    assert!(
        spec.taints
            .unwrap()
            .iter()
            .any(|t| t.key == "example.com/t")
    );
    assert_eq!(
        cluster
            .execute(&Action::PatchNode(NodePatch::new("ghost")))
            .await
            .unwrap(),
        Outcome::NotFound
    );

    // Node conditions through the status subresource.
    let condition = k8s_openapi::api::core::v1::NodeCondition {
        type_: "nodewright.nvidia.com/tuning/Erroring".into(),
        status: "True".into(),
        reason: Some("Erroring".into()),
        ..Default::default()
    };
    cluster
        .execute(&Action::PatchNodeConditions {
            node: "n1".into(),
            set: vec![condition.clone()],
            remove: vec![],
        })
        .await
        .unwrap();
    let types: Vec<String> = nodes
        .get_status("n1")
        .await
        .unwrap()
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| c.type_)
        .collect();
    assert_eq!(types[0], condition.type_);
    assert!(types.contains(&"Ready".to_string()));

    // Eviction: refused by the PDB with its message; allowed for the unprotected pod.
    let evict = |name: &str| {
        Action::EvictPod(PodRef {
            namespace: "apps".into(),
            name: name.into(),
            node: "n0".into(),
            nodewright: Some("tuning".into()),
            grace_period_seconds: Some(0),
        })
    };
    match cluster.execute(&evict("batch-0")).await.unwrap() {
        Outcome::EvictionRefused { message } => {
            assert!(message.contains("batch"), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(
        cluster.execute(&evict("web-0")).await.unwrap(),
        Outcome::Done
    );
    eventually(Duration::from_secs(20), "web-0 gone", || async {
        pods.get_opt("web-0").await.unwrap().is_none()
    })
    .await;
    assert_eq!(
        cluster.execute(&evict("web-0")).await.unwrap(),
        Outcome::NotFound
    );
    assert_eq!(
        cluster
            .execute(&Action::DeletePod(PodRef {
                namespace: "apps".into(),
                name: "batch-0".into(),
                node: "n0".into(),
                nodewright: None,
                grace_period_seconds: Some(0),
            }))
            .await
            .unwrap(),
        Outcome::Done
    );

    // Jobs: create (then AlreadyExists), suspend, annotate with a UID precondition, fail,
    // foreground delete.
    let create = Action::CreateJob(NewJob::from(job("j1", "n1")));
    assert_eq!(cluster.execute(&create).await.unwrap(), Outcome::Done);
    assert_eq!(
        cluster.execute(&create).await.unwrap(),
        Outcome::AlreadyExists
    );
    let uid = jobs.get("j1").await.unwrap().metadata.uid.unwrap();
    cluster
        .execute(&Action::SuspendJob {
            name: "j1".into(),
            suspend: true,
        })
        .await
        .unwrap();
    assert_eq!(
        jobs.get("j1").await.unwrap().spec.unwrap().suspend,
        Some(true)
    );
    let annotate = |uid: &str| Action::AnnotateJob {
        name: "j1".into(),
        uid: Some(uid.into()),
        annotations: BTreeMap::from([("example.com/seen".into(), "yes".into())]),
        ttl_seconds_after_finished: Some(600),
    };
    assert_eq!(
        cluster.execute(&annotate("not-the-uid")).await.unwrap(),
        Outcome::NotFound
    );
    assert_eq!(
        cluster.execute(&annotate(&uid)).await.unwrap(),
        Outcome::Done
    );
    let j1 = jobs.get("j1").await.unwrap();
    assert_eq!(j1.metadata.annotations.unwrap()["example.com/seen"], "yes");
    assert_eq!(j1.spec.unwrap().ttl_seconds_after_finished, Some(600));
    cluster
        .execute(&Action::SuspendJob {
            name: "j1".into(),
            suspend: false,
        })
        .await
        .unwrap();
    assert_eq!(
        cluster
            .execute(&Action::FailJob {
                name: "j1".into(),
                reason: "over the restart budget".into(),
            })
            .await
            .unwrap(),
        Outcome::Done
    );
    eventually(Duration::from_secs(20), "j1 failed", || async {
        jobs.get("j1")
            .await
            .unwrap()
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Failed" && c.status == "True")
    })
    .await;
    assert_eq!(
        cluster
            .execute(&Action::DeleteJob {
                name: "j1".into(),
                uid: Some("someone-else".into()),
                reason: "test".into(),
            })
            .await
            .unwrap(),
        Outcome::NotFound
    );
    assert!(jobs.get_opt("j1").await.unwrap().is_some());
    cluster
        .execute(&Action::DeleteJob {
            name: "j1".into(),
            uid: Some(uid),
            reason: "test".into(),
        })
        .await
        .unwrap();
    eventually(Duration::from_secs(20), "j1 deleted", || async {
        jobs.get_opt("j1").await.unwrap().is_none()
    })
    .await;

    // ConfigMaps: server-side apply owns the whole data map.
    let cm = |data: &[(&str, &str)]| -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": "tuning-p-1.0.0", "namespace": NS,
                         "labels": {keys::JOB_LABEL_NAME: "tuning"}},
            "data": labels(data),
        }))
        .unwrap()
    };
    cluster
        .execute(&Action::UpsertConfigMap(Box::new(cm(&[
            ("a", "1"),
            ("b", "2"),
        ]))))
        .await
        .unwrap();
    cluster
        .execute(&Action::UpsertConfigMap(Box::new(cm(&[("a", "3")]))))
        .await
        .unwrap();
    assert_eq!(
        cms.get("tuning-p-1.0.0").await.unwrap().data.unwrap(),
        labels(&[("a", "3")])
    );
    // A ConfigMap the watch already shows as wanted is not written again.
    eventually(Duration::from_secs(10), "the ConfigMap watched", || async {
        let snap = cluster.snapshot().await.unwrap();
        snap.config_maps.iter().any(|c| {
            c.metadata.name.as_deref() == Some("tuning-p-1.0.0")
                && c.data.as_ref() == Some(&labels(&[("a", "3")]))
        })
    })
    .await;
    // The server's own count of ConfigMap writes (`apiserver_request_total`).
    let configmap_writes = || async {
        let metrics = reqwest::get(format!("{}/metrics", server.url()))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        metrics
            .lines()
            .filter(|l| {
                l.starts_with("apiserver_request_total{")
                    && l.contains(r#"resource="configmaps""#)
                    && l.contains(r#"verb="patch""#)
            })
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum::<u64>()
    };
    let before = configmap_writes().await;
    assert!(before >= 2, "the two writes above are counted");
    cluster
        .execute(&Action::UpsertConfigMap(Box::new(cm(&[("a", "3")]))))
        .await
        .unwrap();
    assert_eq!(configmap_writes().await, before);
    cluster
        .execute(&Action::DeleteConfigMap {
            name: "tuning-p-1.0.0".into(),
        })
        .await
        .unwrap();
    assert!(cms.get_opt("tuning-p-1.0.0").await.unwrap().is_none());

    // CRs: server-side apply, status, annotations, finalizer, deletion.
    let mut nw = rollout_nodewright();
    nw.metadata.annotations = Some(labels(&[("team", "gpu")]));
    let desired = Desired {
        nodewrights: vec![nw],
        policies: vec![policy()],
        commit: "c0ffee".into(),
        ..Default::default()
    };
    cluster.apply_desired(&desired).await.unwrap();
    let live = nws.get("rollout").await.unwrap();
    assert_eq!(
        live.metadata.annotations.as_ref().unwrap()[keys::SOURCE_COMMIT],
        "c0ffee"
    );
    assert_eq!(live.metadata.generation, Some(1));
    let policies: Api<DeploymentPolicy> = Api::all(client.clone());
    assert!(policies.get_opt("canary").await.unwrap().is_some());
    let status = NodeWrightStatus {
        status: Some(Status::InProgress),
        ..NodeWrightStatus::default()
    };
    cluster
        .execute(&Action::PatchNodeWrightStatus {
            name: "rollout".into(),
            patch: Box::new(StatusPatch::whole(status.clone())),
        })
        .await
        .unwrap();
    assert_eq!(
        nws.get_status("rollout")
            .await
            .unwrap()
            .status
            .unwrap()
            .status,
        Some(Status::InProgress)
    );
    cluster
        .execute(&Action::PatchNodeWrightAnnotations {
            name: "rollout".into(),
            annotations: BTreeMap::from([(keys::PAUSE.to_string(), Some("true".to_string()))]),
        })
        .await
        .unwrap();
    cluster
        .execute(&Action::SetFinalizer {
            name: "rollout".into(),
            present: true,
        })
        .await
        .unwrap();
    // Re-applying keeps others' annotations, status and the finalizer; no generation bump.
    cluster.apply_desired(&desired).await.unwrap();
    let live = nws.get("rollout").await.unwrap();
    assert_eq!(
        live.metadata.annotations.as_ref().unwrap()[keys::PAUSE],
        "true"
    );
    assert_eq!(live.metadata.finalizers.clone().unwrap(), [keys::FINALIZER]);
    assert_eq!(live.metadata.generation, Some(1));
    assert_eq!(live.status.unwrap().status, Some(Status::InProgress));
    // Removed from Git: the finalizer holds it until released.
    cluster.apply_desired(&Desired::default()).await.unwrap();
    assert!(
        nws.get("rollout")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    cluster
        .execute(&Action::SetFinalizer {
            name: "rollout".into(),
            present: false,
        })
        .await
        .unwrap();
    assert!(nws.get_opt("rollout").await.unwrap().is_none());

    // Events reach both the API and the simulator's record.
    cluster
        .execute(&Action::RecordEvent(Event {
            object: EventObject::Node("n1".into()),
            kind: EventType::Warning,
            reason: "Erroring".into(),
            message: "[nodewright:tuning] p failed".into(),
        }))
        .await
        .unwrap();
    assert!(server.world().read(|w| {
        w.sim
            .events()
            .iter()
            .any(|e| e.object == "n1" && e.reason == "Erroring")
    }));
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(client.clone());
    assert!(
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|e| e.note.as_deref() == Some("[nodewright:tuning] p failed"))
    );

    // The same fact again is one Event with a series, as client-go's recorder writes it; a
    // third within the refresh interval writes nothing.
    for message in [
        "[nodewright:tuning] p failed again",
        "[nodewright:tuning] once more",
    ] {
        cluster
            .execute(&Action::RecordEvent(Event {
                object: EventObject::Node("n1".into()),
                kind: EventType::Warning,
                reason: "Erroring".into(),
                message: message.into(),
            }))
            .await
            .unwrap();
    }
    let erroring: Vec<_> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some("Erroring")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("n1")
        })
        .collect();
    assert_eq!(erroring.len(), 1, "{erroring:?}");
    let event = &erroring[0];
    assert_eq!(event.series.as_ref().map(|s| s.count), Some(2));
    assert_eq!(event.note.as_deref(), Some("[nodewright:tuning] p failed"));
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(event.reporting_instance.as_deref(), Some("a"));
    assert_eq!(
        event.regarding.as_ref().and_then(|r| r.kind.as_deref()),
        Some("Node")
    );
    assert!(event.event_time.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_crs_are_rejected_with_422() {
    let server = serve(world(), 1.0).await;
    let cluster = connect(&server, "a").await;
    let mut nw = rollout_nodewright();
    nw.spec.interruption_budget =
        Some(serde_json::from_value(json!({"percent": 10, "count": 1})).unwrap());
    let err = cluster
        .apply_desired(&Desired {
            nodewrights: vec![nw],
            policies: vec![],
            commit: "c1".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("422"), "{err}");
    assert!(server.world().read(|w| w.sim.nodewrights().is_empty()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_resource_version_is_a_409_and_the_adapter_retries_from_fresh_state() {
    let server = serve(world(), 1.0).await;
    let cluster = connect(&server, "a").await;
    let client = server.client().await.unwrap();
    let nodes: Api<Node> = Api::all(client);
    let stale = nodes.get("n0").await.unwrap().metadata.resource_version;
    nodes
        .patch(
            "n0",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"other/writer": "1"}}})),
        )
        .await
        .unwrap();
    let err = nodes
        .patch(
            "n0",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"resourceVersion": stale, "annotations": {"x": "y"}}}),
            ),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409 && s.reason == "Conflict"),
        "{err}"
    );

    // Another writer keeps changing the node while the adapter writes node-state deltas: every
    // write of both survives (a conflict is retried from a fresh read, never overwritten).
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let nodes = nodes.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                let body = json!({"metadata": {"annotations": {format!("other/w{i}"): "1"}}});
                nodes
                    .patch("n0", &PatchParams::default(), &Patch::Merge(body))
                    .await
                    .unwrap();
                i += 1;
                // A busy writer, not one that wins every race: on a loaded machine a writer
                // in a tight loop took the node from under all fifteen of the adapter's writes.
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            i
        })
    };
    let mut done = BTreeSet::new();
    for k in 0..15 {
        let mut patch = NodePatch::new("n0");
        patch.node_state.push(NodeStateDelta::Entries {
            nodewright: "tuning".into(),
            upsert: BTreeMap::from([(
                format!("p{k}|1.0.0"),
                PackageStatus::new(
                    &format!("p{k}"),
                    "1.0.0",
                    "example/p",
                    Stage::Apply,
                    State::Complete,
                ),
            )]),
            remove: vec![],
        });
        match cluster.execute(&Action::PatchNode(patch)).await.unwrap() {
            Outcome::Done => {
                done.insert(format!("p{k}|1.0.0"));
            }
            Outcome::Conflict => {}
            other => panic!("unexpected outcome {other:?}"),
        }
    }
    stop.store(true, Ordering::SeqCst);
    let written = writer.await.unwrap();
    let ann = nodes.get("n0").await.unwrap().metadata.annotations.unwrap();
    for i in 0..written {
        assert!(ann.contains_key(&format!("other/w{i}")), "lost other/w{i}");
    }
    // Conflicts exhausted are reported, never silently dropped: exactly the writes reported
    // Done are there. How many lose the race depends on scheduling, so the count is not fixed.
    assert!(!done.is_empty(), "every write conflicted");
    let state = nodewright_schema::NodeState::parse(&ann[&keys::node_state("tuning")]).unwrap();
    let entries: BTreeSet<String> = state.0.keys().cloned().collect();
    assert_eq!(entries, done);

    // Conflicts injected by the server: retried until they stop, reported when they do not.
    let before = server.world().conflicts();
    server.world().fail_next_updates(2);
    let mut patch = NodePatch::new("n1");
    patch.annotations.insert("a/b".into(), Some("c".into()));
    assert_eq!(
        cluster
            .execute(&Action::PatchNode(patch.clone()))
            .await
            .unwrap(),
        Outcome::Done
    );
    assert_eq!(server.world().conflicts() - before, 2);
    server.world().fail_next_updates(50);
    patch.annotations.insert("a/b".into(), Some("d".into()));
    assert_eq!(
        cluster.execute(&Action::PatchNode(patch)).await.unwrap(),
        Outcome::Conflict
    );
    server.world().fail_next_updates(0);
    assert_eq!(
        nodes.get("n1").await.unwrap().metadata.annotations.unwrap()["a/b"],
        "c"
    );
}

/// A loaded API server's watch lags behind its writes. A pass must still see what the last
/// pass wrote to a node (its cordon, its package states): acting on the older node would
/// start a stage again, sweep the Job just created for it, or reboot it twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_shows_the_adapters_writes_before_the_lagging_watch_does() {
    let lag = Duration::from_secs(2);
    let server = SimServer::start(
        world(),
        ServeOptions {
            watch_delay: lag,
            ..ServeOptions::default()
        },
    )
    .await
    .unwrap();
    let cluster = connect(&server, "a").await;
    let in_progress = |stage| {
        let mut patch = NodePatch::new("n1");
        patch.node_state.push(NodeStateDelta::Entries {
            nodewright: "tuning".into(),
            upsert: BTreeMap::from([(
                "p|1.0.0".into(),
                PackageStatus::new("p", "1.0.0", "example/p", stage, State::InProgress),
            )]),
            remove: vec![],
        });
        patch
    };
    let mut cordon = in_progress(Stage::Apply);
    cordon.unschedulable = Some(true);
    let erroring = k8s_openapi::api::core::v1::NodeCondition {
        type_: "nodewright.nvidia.com/tuning/Erroring".into(),
        status: "True".into(),
        ..Default::default()
    };
    // Three writes on top of each other, none delivered by the watch yet.
    let started = tokio::time::Instant::now();
    for action in [
        Action::PatchNode(cordon),
        Action::PatchNodeConditions {
            node: "n1".into(),
            set: vec![erroring.clone()],
            remove: vec![],
        },
        Action::PatchNode(in_progress(Stage::Config)),
    ] {
        assert_eq!(cluster.execute(&action).await.unwrap(), Outcome::Done);
    }
    let shows_the_writes = |snap: &nodewright_reconciler::snapshot::Snapshot| {
        let n1 = snap
            .nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some("n1"))
            .unwrap();
        let stage = n1
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(&keys::node_state("tuning")))
            .map(|text| nodewright_schema::NodeState::parse(text).unwrap())
            .and_then(|state| state.0.get("p|1.0.0").and_then(|e| e.stage));
        let conditions = n1.status.as_ref().and_then(|s| s.conditions.as_ref());
        n1.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
            && stage == Some(Stage::Config)
            && conditions.is_some_and(|c| c.iter().any(|c| c.type_ == erroring.type_))
    };
    // A Job created and not yet delivered is not created again by the next pass.
    assert_eq!(
        cluster
            .execute(&Action::CreateJob(NewJob::from(job(
                "tuning-p-apply-n1",
                "n1"
            ))))
            .await
            .unwrap(),
        Outcome::Done
    );
    let early = cluster.snapshot().await.unwrap();
    assert!(
        started.elapsed() < lag,
        "the snapshot was taken after the watch could deliver the writes"
    );
    assert!(
        shows_the_writes(&early),
        "the pass would act on the node as it was"
    );
    let job_names = |snap: &nodewright_reconciler::snapshot::Snapshot| {
        snap.jobs
            .iter()
            .filter_map(|j| j.metadata.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(job_names(&early), ["tuning-p-apply-n1"]);

    // Once the watch delivers them, its copies are the node, and a writer's change shows.
    tokio::time::sleep(lag + Duration::from_millis(500)).await;
    let nodes: Api<Node> = Api::all(server.client().await.unwrap());
    nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"other/writer": "1"}}})),
        )
        .await
        .unwrap();
    tokio::time::sleep(lag + Duration::from_millis(500)).await;
    let late = cluster.snapshot().await.unwrap();
    assert!(shows_the_writes(&late));
    assert_eq!(job_names(&late), ["tuning-p-apply-n1"]);
    let n1 = late
        .nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some("n1"))
        .unwrap();
    assert_eq!(
        n1.metadata
            .annotations
            .as_ref()
            .unwrap()
            .get("other/writer"),
        Some(&"1".to_string())
    );
}

/// The prefixed node annotations, for comparing two runs.
fn node_annotations(nodes: &[Node]) -> BTreeMap<String, BTreeMap<String, String>> {
    nodes
        .iter()
        .map(|n| {
            let ann = n
                .metadata
                .annotations
                .clone()
                .unwrap_or_default()
                .into_iter()
                .filter(|(k, _)| k.starts_with(keys::PREFIX))
                .collect();
            (n.metadata.name.clone().unwrap_or_default(), ann)
        })
        .collect()
}

fn complete(nw: Option<&NodeWright>) -> bool {
    nw.and_then(|n| n.status.as_ref()).and_then(|s| s.status) == Some(Status::Complete)
}

/// The simulator's record of stage Jobs started and nodes rebooted, counted per line.
fn jobs_and_reboots(sim: &SimCluster) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for entry in sim.history().entries() {
        if entry.line.starts_with("job ") || entry.line.starts_with("reboot ") {
            *counts.entry(entry.line.clone()).or_default() += 1;
        }
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_rollout_over_http_ends_like_the_in_process_simulator() {
    rollout_over_http_ends_like_in_process(Duration::ZERO).await;
}

/// With watches 300 ms behind the writes, every pass still acts on what the last one wrote:
/// no stage Job is started twice and no node is rebooted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_with_a_lagging_watch_runs_each_job_and_reboot_once() {
    rollout_over_http_ends_like_in_process(Duration::from_millis(300)).await;
}

async fn rollout_over_http_ends_like_in_process(watch_delay: Duration) {
    let desired = Desired {
        nodewrights: vec![rollout_nodewright()],
        policies: vec![],
        commit: "c1".into(),
        ..Default::default()
    };
    let engine = nodewright_reconciler::engine::reconcile_cached;

    // In process, virtual time.
    let mut local = Controller::new(SimAdapter::new(world()), engine, Settings::default());
    let mut passes = 0;
    loop {
        block_on(local.apply_desired(&desired)).unwrap();
        block_on(local.pass()).unwrap();
        passes += 1;
        let done = complete(local.cluster().world().nodewrights().get("rollout"));
        if done || passes > 2000 {
            break;
        }
        local.cluster().world().advance(Duration::from_secs(2));
    }
    let expected = node_annotations(
        &local
            .cluster()
            .world()
            .nodes()
            .values()
            .map(|n| (**n).clone())
            .collect::<Vec<_>>(),
    );
    assert!(complete(
        local.cluster().world().nodewrights().get("rollout")
    ));
    let expected_runs = jobs_and_reboots(&local.cluster().world());

    // Over HTTP, real time x40.
    let server = SimServer::start(
        world(),
        ServeOptions {
            speed: 40.0,
            tick: Duration::from_millis(20),
            watch_delay,
            ..ServeOptions::default()
        },
    )
    .await
    .unwrap();
    let cluster = connect_as_run(&server, "a").await;
    let mut remote = Controller::new(cluster, engine, Settings::default());
    let mut refused = false;
    let end = tokio::time::Instant::now() + Duration::from_secs(150);
    loop {
        remote.apply_desired(&desired).await.unwrap();
        let report = remote.pass().await.unwrap();
        refused |= report
            .writes
            .iter()
            .any(|(_, o)| matches!(o, Outcome::EvictionRefused { .. }));
        let snap = remote.cluster().snapshot().await.unwrap();
        if complete(snap.nodewrights.first().map(|nw| &**nw)) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "the rollout did not complete"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A lagging watch delays the drain past the protected pod's end.
    assert!(
        refused || !watch_delay.is_zero(),
        "the PDB refused an eviction during the drain"
    );
    let client = server.client().await.unwrap();
    let nodes = Api::<Node>::all(client)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(node_annotations(&nodes.items), expected);
    for node in &nodes.items {
        assert_ne!(
            node.spec.as_ref().and_then(|s| s.unschedulable),
            Some(true),
            "uncordoned"
        );
    }
    let history = server.world().read(|w| {
        w.sim
            .history()
            .entries()
            .iter()
            .map(|e| e.line.clone())
            .collect::<Vec<_>>()
    });
    for step in ["cordon n0", "evict apps/web-0", "uncordon n0", "cordon n1"] {
        assert!(
            history.iter().any(|l| l == step),
            "{step} missing from {history:?}"
        );
    }
    assert!(
        server
            .world()
            .read(|w| nodewright_reconciler::scenario::invariants::duplicate_jobs(&w.sim))
            .is_empty()
    );
    assert_eq!(
        server.world().read(|w| jobs_and_reboots(&w.sim)),
        expected_runs
    );
    // The stage pods succeeded and are still on the server; `run` does not hold them, the
    // watch of unsucceeded pods having reported each leaving its selection.
    let succeeded =
        |p: &Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded");
    let pods = Api::<Pod>::namespaced(server.client().await.unwrap(), NS)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(pods.items.iter().any(succeeded), "stage pods succeeded");
    let held = remote.cluster().snapshot().await.unwrap().pods;
    assert!(
        !held
            .iter()
            .any(|p| p.metadata.namespace.as_deref() == Some(NS) && succeeded(p)),
        "no succeeded stage pod is held"
    );
}

fn short_lease(identity: &str) -> LeaseConfig {
    LeaseConfig {
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(200),
        ..LeaseConfig::new(NS, "nodewright-leader", identity)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_replicas_only_the_leader_writes() {
    let server = serve(world(), 10.0).await;
    let desired = Desired {
        nodewrights: vec![rollout_nodewright()],
        policies: vec![],
        commit: "c1".into(),
        ..Default::default()
    };
    let engine = nodewright_reconciler::engine::reconcile_cached;
    let a = connect(&server, "a").await;
    let b = connect(&server, "b").await;
    let lead_a = LeaderElector::new(server.client().await.unwrap(), short_lease("a"))
        .spawn(a.writes_allowed());
    eventually(Duration::from_secs(10), "a leads", || async {
        lead_a.is_leader()
    })
    .await;
    let lead_b = LeaderElector::new(server.client().await.unwrap(), short_lease("b"))
        .spawn(b.writes_allowed());
    let mut ca = Controller::new(a, engine, Settings::default());
    let mut cb = Controller::new(b, engine, Settings::default());
    let (mut wrote_a, mut wrote_b) = (0, 0);
    for _ in 0..40 {
        if ca.apply_desired(&desired).await.is_ok() {
            wrote_a += ca.pass().await.unwrap().writes.len();
        }
        assert!(cb.apply_desired(&desired).await.is_err());
        let report = cb.pass().await.unwrap();
        assert!(report.writes.is_empty());
        wrote_b += report.writes.len();
        assert!(!lead_b.is_leader());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(wrote_a > 0);
    assert_eq!(wrote_b, 0);

    // The lease is taken by someone else: a stops writing at its next renewal. The intruder
    // retries when a's renewal comes first, as every writer of a lease does.
    let leases: Api<Lease> = Api::namespaced(server.client().await.unwrap(), NS);
    let mut attempts = 0;
    loop {
        let mut lease = leases.get("nodewright-leader").await.unwrap();
        lease.spec.as_mut().unwrap().holder_identity = Some("intruder".into());
        match leases
            .replace("nodewright-leader", &PostParams::default(), &lease)
            .await
        {
            Ok(_) => break,
            Err(kube::Error::Api(e)) if e.code == 409 && attempts < 20 => attempts += 1,
            Err(e) => panic!("taking the lease: {e}"),
        }
    }
    eventually(Duration::from_secs(2), "a stops leading", || async {
        !lead_a.is_leader()
    })
    .await;
    assert!(ca.apply_desired(&Desired::default()).await.is_err());
    // The intruder never renews: after a lease duration one replica takes over.
    eventually(Duration::from_secs(10), "a new leader", || async {
        lead_a.is_leader() || lead_b.is_leader()
    })
    .await;
    assert!(!(lead_a.is_leader() && lead_b.is_leader()));

    // A crashed leader (no release) is replaced after the lease duration.
    let (crashed, survivor) = if lead_a.is_leader() {
        (lead_a, lead_b)
    } else {
        (lead_b, lead_a)
    };
    crashed.abandon();
    eventually(Duration::from_secs(10), "the survivor leads", || async {
        survivor.is_leader()
    })
    .await;
    survivor.step_down().await;
    let lease = leases.get("nodewright-leader").await.unwrap();
    assert_eq!(lease.spec.unwrap().holder_identity, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reads_and_cordons_through_sim_serve() {
    if common::kubectl::which("kubectl").is_none() {
        println!("kubectl is not on PATH; skipping the kubectl test");
        return;
    }
    let server = serve(world(), 1.0).await;
    let cluster = connect(&server, "a").await;
    cluster
        .apply_desired(&Desired {
            nodewrights: vec![rollout_nodewright()],
            policies: vec![],
            commit: "c1".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    cluster
        .execute(&Action::CreateJob(NewJob::from(job("j1", "n1"))))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let kubectl = move |args: &[&str]| {
        let out = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let listing = tokio::task::spawn_blocking({
        let kubectl = kubectl.clone();
        move || kubectl(&["get", "nodes,nodewrights,jobs", "-A"])
    })
    .await
    .unwrap();
    for name in ["n0", "n1", "rollout", "j1"] {
        assert!(listing.contains(name), "{name} missing from:\n{listing}");
    }
    let out = tokio::task::spawn_blocking(move || kubectl(&["cordon", "n1"]))
        .await
        .unwrap();
    assert!(out.contains("cordoned"), "{out}");
    eventually(
        Duration::from_secs(10),
        "the adapter sees the cordon",
        || async {
            cluster.snapshot().await.unwrap().nodes.iter().any(|n| {
                n.metadata.name.as_deref() == Some("n1")
                    && n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
            })
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_subset_behaves_like_an_apiserver() {
    use futures::{StreamExt, TryStreamExt};
    use kube::api::{DeleteParams, WatchEvent, WatchParams};

    let server = serve(world(), 1.0).await;
    let client = server.client().await.unwrap();

    // Discovery finds our CRDs and the built-in groups the adapter uses.
    let discovery = kube::discovery::Discovery::new(client.clone())
        .run()
        .await
        .unwrap();
    let groups: Vec<String> = discovery.groups().map(|g| g.name().to_string()).collect();
    for group in [
        "",
        "batch",
        "policy",
        "coordination.k8s.io",
        "events.k8s.io",
        "nodewright.nvidia.com",
    ] {
        assert!(groups.iter().any(|g| g == group), "{group} in {groups:?}");
    }
    let nw_group = discovery.get("nodewright.nvidia.com").unwrap();
    let kinds: Vec<String> = nw_group
        .recommended_resources()
        .into_iter()
        .map(|(r, _)| r.kind)
        .collect();
    assert!(
        kinds.contains(&"NodeWright".to_string())
            && kinds.contains(&"DeploymentPolicy".to_string())
    );

    // Errors are Status objects with the apiserver's reasons.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let missing = cms.get("nope").await.unwrap_err();
    assert!(matches!(missing, kube::Error::Api(ref s) if s.code == 404 && s.reason == "NotFound"));
    let cm = |name: &str, app: &str| -> ConfigMap {
        serde_json::from_value(
            json!({"metadata": {"name": name, "labels": {"app": app}}, "data": {"k": "v"}}),
        )
        .unwrap()
    };

    // A watch from a resourceVersion reports what happened after it, through the selector:
    // an object leaving the selection is reported as DELETED.
    let rv = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let stream = cms
        .watch(&WatchParams::default().labels("app=a").timeout(5), &rv)
        .await
        .unwrap();
    cms.create(&PostParams::default(), &cm("one", "a"))
        .await
        .unwrap();
    cms.create(&PostParams::default(), &cm("two", "b"))
        .await
        .unwrap();
    let again = cms
        .create(&PostParams::default(), &cm("one", "a"))
        .await
        .unwrap_err();
    assert!(
        matches!(again, kube::Error::Api(ref s) if s.code == 409 && s.reason == "AlreadyExists")
    );
    cms.patch(
        "one",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "c"}}})),
    )
    .await
    .unwrap();
    let events: Vec<String> = stream
        .take(2)
        .map_ok(|e| match e {
            WatchEvent::Added(o) => format!("ADDED {}", o.metadata.name.unwrap()),
            WatchEvent::Modified(o) => format!("MODIFIED {}", o.metadata.name.unwrap()),
            WatchEvent::Deleted(o) => format!("DELETED {}", o.metadata.name.unwrap()),
            WatchEvent::Bookmark(_) => "BOOKMARK".into(),
            WatchEvent::Error(e) => format!("ERROR {e:?}"),
        })
        .try_collect()
        .await
        .unwrap();
    assert_eq!(events, ["ADDED one", "DELETED one"]);

    // Field selectors: pods by node.
    let pods: Api<Pod> = Api::all(client.clone());
    let on_n0 = pods
        .list(&ListParams::default().fields("spec.nodeName=n0"))
        .await
        .unwrap();
    assert_eq!(on_n0.items.len(), 2);
    assert!(
        pods.list(&ListParams::default().fields("spec.nodeName=n1"))
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // JSON patch and strategic merge patch (kubectl's label/cordon) on nodes.
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "add", "path": "/metadata/labels/zone", "value": "a"}
                ]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    let n1 = nodes.get("n1").await.unwrap();
    assert_eq!(n1.metadata.labels.unwrap()["zone"], "a");
    assert_eq!(n1.spec.unwrap().unschedulable, Some(true));
    assert!(server.world().read(|w| w.sim.history().count("cordon n1")) == 1);

    // Finalizers hold a deleted object with a deletionTimestamp until they are removed.
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "held", "finalizers": ["example.com/keep"]},
        "spec": {"holderIdentity": "x"}
    }))
    .unwrap();
    leases.create(&PostParams::default(), &lease).await.unwrap();
    leases
        .delete("held", &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        leases
            .get("held")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    // The write that removes the last finalizer answers with the object as written.
    let released = leases
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    assert_eq!(released.metadata.name.as_deref(), Some("held"));
    assert!(released.metadata.deletion_timestamp.is_some());
    assert!(leases.get_opt("held").await.unwrap().is_none());
}

/// A stage-shaped Job of package `tuning` 1.0.0 whose two steps run 10 s each (virtual).
fn step_job(name: &str, node: &str) -> Job {
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "labels": {
            keys::JOB_LABEL_NAME: "tuning", keys::JOB_LABEL_NODE: node}},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {
                    keys::JOB_LABEL_NAME: "tuning", keys::JOB_LABEL_NODE: node,
                    keys::JOB_LABEL_PACKAGE: "tuning-1.0.0", keys::JOB_LABEL_STAGE: "apply"}},
                "spec": {
                    "nodeName": node, "restartPolicy": "Never",
                    "initContainers": [
                        {"name": "tuning-apply", "image": "agent", "args": ["apply", "/root", "/x"]},
                        {"name": "tuning-applycheck", "image": "agent", "args": ["apply-check", "/root", "/x"]}
                    ],
                    "containers": [{"name": "done", "image": "example/step:1.0.0"}]
                }
            }
        }
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_logs_are_read_followed_and_snapshotted_over_http() {
    use kube::api::LogParams;
    use nodewright_reconciler::cli::verbs::{LogsArgs, package_logs};
    use nodewright_reconciler::cluster::LogRequest;
    use nodewright_reconciler::verbs::OutputFormat;

    let server = serve(world(), 5.0).await;
    let cluster = connect(&server, "a").await;
    let client = server.client().await.unwrap();
    let mut nw = rollout_nodewright();
    nw.metadata.name = Some("tuning".into());
    nw.spec.packages =
        serde_json::from_value(json!({"tuning": {"version": "1.0.0", "image": "example/step"}}))
            .unwrap();
    cluster
        .apply_desired(&Desired {
            nodewrights: vec![nw],
            policies: vec![],
            commit: "c1".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    cluster
        .execute(&Action::CreateJob(NewJob::from(step_job("j1", "n1"))))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let running = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.init_container_statuses.as_ref())
            .and_then(|l| l.first())
            .and_then(|c| c.state.as_ref())
            .is_some_and(|s| s.running.is_some())
    };
    let mut pod_name = None;
    for _ in 0..200 {
        let list = pods.list(&ListParams::default()).await.unwrap();
        if let Some(p) = list.items.iter().find(|p| running(p)) {
            pod_name = p.metadata.name.clone();
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pod_name = pod_name.expect("the step runs");

    // GET …/log while the step runs: its first line.
    let params = LogParams {
        container: Some("tuning-apply".into()),
        ..LogParams::default()
    };
    let first = pods.logs(&pod_name, &params).await.unwrap();
    assert_eq!(
        first,
        "nodewright-agent (behaviour model) mode=apply package=example/step:1.0.0 node=n1 attempt=1\n"
    );

    // `package logs -f` through the adapter: the header, then the step's lines as they come,
    // until the pod finishes.
    let mut snapshot = cluster.snapshot().await.unwrap();
    for _ in 0..200 {
        if !snapshot.nodewrights.is_empty()
            && snapshot
                .pods
                .iter()
                .any(|p| p.metadata.name.as_deref() == Some(pod_name.as_str()) && running(p))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        snapshot = cluster.snapshot().await.unwrap();
    }
    let args = LogsArgs {
        nodewright: "tuning".into(),
        package: "tuning".into(),
        node: None,
        stage: None,
        tail: -1,
        follow: true,
    };
    let mut followed = String::new();
    let code = tokio::time::timeout(
        Duration::from_secs(20),
        package_logs(
            &cluster,
            &snapshot,
            &args,
            OutputFormat::Table,
            &mut |t: &str| followed.push_str(t),
        ),
    )
    .await
    .expect("follow ends when the pod finishes");
    assert_eq!(code, 0, "{followed}");
    assert!(
        followed.starts_with(&format!(
            "==> node n1 | job j1 | pod {pod_name} | attempt 1/1 (running) | container tuning-apply [running] <==\n{first}"
        )),
        "{followed}"
    );
    // Then the check step, followed once it starts, until the pod is done.
    let check = followed
        .split("==> ")
        .nth(2)
        .unwrap_or_else(|| panic!("{followed}"));
    assert!(
        check.starts_with(&format!(
            "node n1 | job j1 | pod {pod_name} | attempt 1/1 (running) | container tuning-applycheck [waiting (PodInitializing)] <==\nnodewright-agent (behaviour model) mode=apply-check"
        )) && check.ends_with("apply-check succeeded: exit code 0\n"),
        "{followed}"
    );
    assert!(
        followed
            .split("==> ")
            .nth(1)
            .is_some_and(|a| a.ends_with("apply succeeded: exit code 0\n")),
        "{followed}"
    );

    // tailLines, limitBytes, the adapter's read, and errors as the apiserver answers them.
    let tail = pods
        .logs(
            &pod_name,
            &LogParams {
                tail_lines: Some(1),
                ..params.clone()
            },
        )
        .await
        .unwrap();
    assert_eq!(tail, "apply succeeded: exit code 0\n");
    let limited = pods
        .logs(
            &pod_name,
            &LogParams {
                limit_bytes: Some(16),
                ..params.clone()
            },
        )
        .await
        .unwrap();
    assert_eq!(limited, "nodewright-agent");
    let request = LogRequest {
        namespace: NS.into(),
        pod: pod_name.clone(),
        container: Some("tuning-apply".into()),
        ..LogRequest::default()
    };
    let whole = cluster.pod_logs(&request).await.unwrap();
    assert!(
        whole.starts_with(&first) && whole.ends_with(&tail),
        "{whole}"
    );
    let unknown = pods
        .logs(
            &pod_name,
            &LogParams {
                container: Some("nope".into()),
                ..LogParams::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(unknown, kube::Error::Api(ref s) if s.code == 400),
        "{unknown:?}"
    );
    let gone = pods.logs("gone", &params).await.unwrap_err();
    assert!(
        matches!(gone, kube::Error::Api(ref s) if s.code == 404),
        "{gone:?}"
    );

    // §8.12 through the API: the executor tails the log into the Job's last-logs.
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let uid = jobs.get("j1").await.unwrap().metadata.uid;
    assert_eq!(
        cluster
            .execute(&Action::SnapshotLastLogs {
                job: "j1".into(),
                uid,
                namespace: NS.into(),
                pod: pod_name.clone(),
                container: "tuning-apply".into(),
                fallback: None,
            })
            .await
            .unwrap(),
        Outcome::Done
    );
    let annotations = jobs.get("j1").await.unwrap().metadata.annotations.unwrap();
    assert_eq!(annotations[keys::JOB_ANNOTATION_LAST_LOGS], whole);

    // kubectl logs reads the same text.
    if common::kubectl::which("kubectl").is_some() {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        server.write_kubeconfig(&kubeconfig).unwrap();
        let pod = pod_name.clone();
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(["logs", "-n", NS, &pod, "-c", "tuning-apply"])
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        assert!(
            out.status.success(),
            "kubectl logs: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), whole);
    }
}

/// Merge patches without a resourceVersion, sent at once to one node while the clock ticks,
/// all take effect: none is built on a copy another write has replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_merge_patches_of_one_object_all_take_effect() {
    let server = serve(world(), 10.0).await;
    let client = server.client().await.unwrap();
    let nodes: Api<Node> = Api::all(client);
    let writers: Vec<_> = (0..32)
        .map(|i| {
            let nodes = nodes.clone();
            tokio::spawn(async move {
                let patch =
                    json!({"metadata": {"annotations": {format!("example.com/w{i}"): "x"}}});
                nodes
                    .patch("n0", &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .unwrap();
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    let annotations = nodes.get("n0").await.unwrap().metadata.annotations.unwrap();
    let written = (0..32)
        .filter(|i| {
            annotations
                .get(&format!("example.com/w{i}"))
                .map(String::as_str)
                == Some("x")
        })
        .count();
    assert_eq!(written, 32);
}
