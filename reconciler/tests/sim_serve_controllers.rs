//! `sim serve` hosting other controllers (issue 25 items 7–9): CustomResourceDefinitions
//! created through the API are served, pods created through the API run on the simulated
//! kubelet, and every node keeps a lease in `kube-node-lease`. Seen through kube-rs and,
//! where it is installed, kubectl.

mod common;

use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
    WatchEvent, WatchParams,
};
use kube::core::ApiResource;
use kube::{Api, ResourceExt};
use nodewright_reconciler::sim::http::{ServeOptions, SimServer};
use nodewright_reconciler::sim::{ModelRunner, NodeInput, PackageModels, SimCluster};
use serde_json::{Value, json};

const NS: &str = "nodewright";

/// Three Ready nodes, n0 … n2.
fn world() -> SimCluster {
    let mut sim = SimCluster::new(NS, Box::new(ModelRunner::new(PackageModels::default())), 11);
    for i in 0..3 {
        sim.add_node(NodeInput {
            name: format!("n{i}"),
            ..NodeInput::default()
        });
    }
    sim
}

async fn serve() -> SimServer {
    SimServer::start(
        world(),
        ServeOptions {
            port: 0,
            speed: 20.0,
            tick: Duration::from_millis(20),
            ..ServeOptions::default()
        },
    )
    .await
    .unwrap()
}

/// Polls `check` every 50 ms for up to 30 s of wall time.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + Duration::from_secs(30);
    while tokio::time::Instant::now() < end {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for: {what}");
}

/// The `(code, message)` of an API error.
fn refusal(e: kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(status) => (status.code, status.message),
        other => panic!("not an API error: {other:?}"),
    }
}

/// A namespaced `Widget` (example.com/v1) with a schema that defaults, prunes and validates,
/// and the status and scale subresources.
fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wg"]},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {
                    "status": {},
                    "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"},
                },
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "required": ["image"],
                            "properties": {
                                "image": {"type": "string", "minLength": 1},
                                "replicas": {"type": "integer", "minimum": 0, "default": 1},
                                "mode": {"type": "string", "enum": ["fast", "safe"], "default": "safe"},
                            },
                        },
                        "status": {
                            "type": "object",
                            "properties": {"replicas": {"type": "integer"}, "phase": {"type": "string"}},
                        },
                    },
                }},
            }],
        },
    })
}

fn widgets(client: kube::Client) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    );
    Api::namespaced_with(client, NS, &resource)
}

fn widget(name: &str, body: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": name}, "spec": body,
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_created_through_the_api_is_served_with_its_schema_and_subresources() {
    let server = serve().await;
    let client = server.client().await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(
        &PostParams::default(),
        &serde_json::from_value(widget_crd()).unwrap(),
    )
    .await
    .unwrap();
    let established = crds.get("widgets.example.com").await.unwrap();
    let conditions = established.status.unwrap().conditions.unwrap();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
    );

    // Discovery lists the resource and its subresources.
    let discovery = kube::Discovery::new(client.clone()).run().await.unwrap();
    let (resource, caps) = discovery
        .groups()
        .flat_map(|g| g.recommended_resources())
        .find(|(r, _)| r.plural == "widgets")
        .expect("widgets discovered");
    assert_eq!(resource.kind, "Widget");
    assert!(caps.subresources.iter().any(|(s, _)| s.plural == "scale"));

    // A create is pruned and defaulted, starts at generation 1 and drops the status.
    let api = widgets(client.clone());
    let mut sent = widget("w1", json!({"image": "x", "unknown": true}));
    sent.data["status"] = json!({"phase": "Invented"});
    let created = api.create(&PostParams::default(), &sent).await.unwrap();
    assert_eq!(created.data["spec"]["replicas"], 1);
    assert_eq!(created.data["spec"]["mode"], "safe");
    assert!(created.data["spec"].get("unknown").is_none());
    assert!(created.data.get("status").is_none());
    assert_eq!(created.metadata.generation, Some(1));

    // The status subresource writes only the status; a spec write keeps it and bumps the
    // generation.
    let patched = api
        .patch_status(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"image": "ignored"}, "status": {"phase": "Ready"}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.data["status"]["phase"], "Ready");
    assert_eq!(patched.data["spec"]["image"], "x");
    assert_eq!(patched.metadata.generation, Some(1));
    let patched = api
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"image": "y"}, "status": {"phase": "Lost"}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.data["spec"]["image"], "y");
    assert_eq!(patched.data["status"]["phase"], "Ready");
    assert_eq!(patched.metadata.generation, Some(2));

    // The scale subresource reads and writes the replicas path.
    let scale = api.get_scale("w1").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(1));
    api.patch_scale(
        "w1",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 4}})),
    )
    .await
    .unwrap();
    assert_eq!(api.get("w1").await.unwrap().data["spec"]["replicas"], 4);

    // Schema validation: 422 with every field error.
    let (code, message) = refusal(
        api.create(
            &PostParams::default(),
            &widget("w2", json!({"replicas": -1, "mode": "reckless"})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(code, 422);
    for field in ["spec.image", "spec.replicas", "spec.mode"] {
        assert!(message.contains(field), "{message}");
    }

    // Watches report changes; deleting the CRD takes its objects and its endpoint with it.
    let mut events = std::pin::pin!(api.watch(&WatchParams::default(), "0").await.unwrap());
    use futures::StreamExt;
    let first = events.next().await.unwrap().unwrap();
    assert!(
        matches!(&first, WatchEvent::Added(o) if o.name_any() == "w1"),
        "{first:?}"
    );
    crds.delete("widgets.example.com", &DeleteParams::default())
        .await
        .unwrap();
    let gone = events.next().await.unwrap().unwrap();
    assert!(
        matches!(&gone, WatchEvent::Deleted(o) if o.name_any() == "w1"),
        "{gone:?}"
    );
    let (code, _) = refusal(api.list(&ListParams::default()).await.unwrap_err());
    assert_eq!(code, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_a_crd_and_its_objects_and_scales_them() {
    if common::kubectl::which("kubectl").is_none() {
        println!("SKIP: kubectl is not on PATH");
        return;
    }
    let server = serve().await;
    let crd = serde_yaml::to_string(&widget_crd()).unwrap();
    let (code, _, err) =
        common::kubectl::run(&server, &["apply", "--validate=false", "-f", "-"], &crd).await;
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = common::kubectl::run(
        &server,
        &[
            "wait",
            "--for",
            "condition=established",
            "crd/widgets.example.com",
        ],
        "",
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let manifest = format!(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\n  namespace: {NS}\nspec:\n  image: x\n"
    );
    let (code, out, err) = common::kubectl::run(
        &server,
        &["apply", "--validate=false", "-f", "-"],
        &manifest,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("widget.example.com/w1 created"), "{out}");
    let (code, out, err) = common::kubectl::run(&server, &["get", "wg", "-n", NS], "").await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("w1"), "{out}");
    let (code, _, err) = common::kubectl::run(
        &server,
        &["scale", "widget/w1", "-n", NS, "--replicas=3"],
        "",
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let (_, out, _) = common::kubectl::run(
        &server,
        &[
            "get",
            "widget",
            "w1",
            "-n",
            NS,
            "-o",
            "jsonpath={.spec.replicas} {.spec.mode}",
        ],
        "",
    )
    .await;
    assert_eq!(out, "3 safe");
}

/// A stage pod as the upstream operator builds one: the package's copy container, the
/// agent's step and its check, then `pause`.
fn stage_pod(name: &str, node: Option<&str>, interrupt: bool) -> Pod {
    let agent = "ghcr.io/nvidia/skyhook/agent:6.1.0";
    let mut inits = vec![json!({
        "name": "pkg-init", "image": "example.com/pkg:1.0.0",
        "command": ["/bin/sh"], "args": ["-c", "mkdir -p /root/x && cp -r /skyhook-package/* /root/x"],
    })];
    if interrupt {
        let payload =
            base64::engine::general_purpose::STANDARD.encode(r#"{"type":"node_restart"}"#);
        inits = vec![json!({"name": "interrupt", "image": agent,
                            "args": ["interrupt", "/root", "/var/lib/skyhook/x", payload]})];
    } else {
        inits.push(json!({"name": "pkg-apply", "image": agent, "args": ["apply", "/root", "/var/lib/skyhook/x"]}));
        inits.push(json!({"name": "pkg-applycheck", "image": agent, "args": ["apply-check", "/root", "/var/lib/skyhook/x"]}));
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "stage"}},
        "spec": {
            "nodeName": node,
            "restartPolicy": "OnFailure",
            "initContainers": inits,
            "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}],
            "tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}],
        },
    }))
    .unwrap()
}

fn init_states(pod: &Pod) -> Vec<(String, Option<i32>)> {
    pod.status
        .as_ref()
        .and_then(|s| s.init_container_statuses.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|c| {
            (
                c.name,
                c.state.and_then(|s| s.terminated).map(|t| t.exit_code),
            )
        })
        .collect()
}

fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_created_through_the_api_runs_its_init_containers_in_order_then_keeps_running() {
    let server = serve().await;
    let client = server.client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client, NS);
    let created = pods
        .create(
            &PostParams::default(),
            &stage_pod("stage", Some("n1"), false),
        )
        .await
        .unwrap();
    // The apiserver's defaulting.
    let spec = created.spec.clone().unwrap();
    assert_eq!(spec.termination_grace_period_seconds, Some(30));
    assert!(
        spec.tolerations
            .unwrap()
            .iter()
            .any(|t| t.key.as_deref() == Some("node.kubernetes.io/not-ready")
                && t.toleration_seconds == Some(300))
    );
    eventually("the stage pod is Running and Ready", || async {
        let pod = pods.get("stage").await.unwrap();
        pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") && ready(&pod)
    })
    .await;
    let pod = pods.get("stage").await.unwrap();
    assert_eq!(
        init_states(&pod),
        vec![
            ("pkg-init".to_string(), Some(0)),
            ("pkg-apply".to_string(), Some(0)),
            ("pkg-applycheck".to_string(), Some(0)),
        ]
    );
    let log = pods
        .logs(
            "stage",
            &kube::api::LogParams {
                container: Some("pkg-apply".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(
        log.contains("mode=apply package=example.com/pkg:1.0.0"),
        "{log}"
    );

    // Deletion is graceful: the pod terminates, then it is gone.
    pods.delete("stage", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the stage pod is gone", || async {
        pods.get_opt("stage").await.unwrap().is_none()
    })
    .await;

    // A pod without containers is refused as the apiserver refuses it.
    let mut empty = stage_pod("empty", Some("n1"), false);
    empty.spec.as_mut().unwrap().containers.clear();
    let (code, message) = refusal(
        pods.create(&PostParams::default(), &empty)
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 422);
    assert!(
        message.contains("spec.containers: Required value"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unbound_pod_is_scheduled_onto_a_node_whose_taints_it_tolerates() {
    let server = serve().await;
    let client = server.client().await.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    for node in ["n0", "n1"] {
        nodes
            .patch(
                node,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"taints": [
                    {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}})),
            )
            .await
            .unwrap();
    }
    nodes
        .patch(
            "n2",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client, NS);
    pods.create(&PostParams::default(), &stage_pod("floating", None, false))
        .await
        .unwrap();
    let pod = pods.get("floating").await.unwrap();
    assert_eq!(
        pod.spec.unwrap().node_name,
        None,
        "no node is schedulable and untainted"
    );
    let mut tolerant = stage_pod("tolerant", None, false);
    tolerant
        .spec
        .as_mut()
        .unwrap()
        .tolerations
        .get_or_insert_with(Vec::new)
        .push(serde_json::from_value(json!({"key": "dedicated", "operator": "Exists"})).unwrap());
    pods.create(&PostParams::default(), &tolerant)
        .await
        .unwrap();
    let bound = pods.get("tolerant").await.unwrap().spec.unwrap().node_name;
    assert!(matches!(bound.as_deref(), Some("n0" | "n1")), "{bound:?}");
    eventually("the scheduled pod runs", || async {
        ready(&pods.get("tolerant").await.unwrap())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_pods_reboot_interrupt_reboots_its_node_and_then_completes() {
    let server = serve().await;
    let client = server.client().await.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let boot = |n: Node| n.status.unwrap().node_info.unwrap().boot_id;
    let before = boot(nodes.get("n2").await.unwrap());
    let pods: Api<Pod> = Api::namespaced(client, NS);
    pods.create(
        &PostParams::default(),
        &stage_pod("reboot", Some("n2"), true),
    )
    .await
    .unwrap();
    eventually("the interrupt completes after the reboot", || async {
        let pod = pods.get("reboot").await.unwrap();
        init_states(&pod) == vec![("interrupt".to_string(), Some(0))] && ready(&pod)
    })
    .await;
    let pod = pods.get("reboot").await.unwrap();
    let restarts = pod.status.unwrap().init_container_statuses.unwrap()[0].restart_count;
    assert_eq!(
        restarts, 1,
        "the interrupt container ran again after the boot"
    );
    assert_ne!(boot(nodes.get("n2").await.unwrap()), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_has_a_lease_its_kubelet_renews_and_a_full_status() {
    let server = serve().await;
    let client = server.client().await.unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let listed = leases.list(&ListParams::default()).await.unwrap();
    let names: Vec<String> = listed.items.iter().map(|l| l.name_any()).collect();
    assert_eq!(names, ["n0", "n1", "n2"]);
    let first = listed.items[0].spec.clone().unwrap();
    assert_eq!(first.holder_identity.as_deref(), Some("n0"));
    assert_eq!(first.lease_duration_seconds, Some(40));
    let renewed = first.renew_time.unwrap().0;
    server
        .world()
        .with_sim(|sim| sim.advance(Duration::from_secs(30)));
    // The kubelets renew on the server's clock, in batches of their own.
    while server.world().renew_node_leases() {}
    let later = leases.get("n0").await.unwrap().spec.unwrap();
    assert!(later.renew_time.unwrap().0 > renewed);

    // A node's lease comes with it (at its kubelet's first renewal) and goes with it.
    server.world().with_sim(|sim| {
        sim.delete_node("n1");
        sim.add_node(NodeInput {
            name: "n9".into(),
            ..Default::default()
        });
    });
    while server.world().renew_node_leases() {}
    let listed = leases.list(&ListParams::default()).await.unwrap();
    let names: Vec<String> = listed.items.iter().map(|l| l.name_any()).collect();
    assert_eq!(names, ["n0", "n2", "n9"]);

    let node = Api::<Node>::all(client).get("n0").await.unwrap();
    let status = node.status.unwrap();
    assert!(status.capacity.unwrap().contains_key("cpu"));
    assert!(status.allocatable.unwrap().contains_key("memory"));
    assert!(
        status
            .addresses
            .unwrap()
            .iter()
            .any(|a| a.type_ == "InternalIP")
    );
    assert!(!status.node_info.unwrap().kernel_version.is_empty());

    if common::kubectl::which("kubectl").is_none() {
        println!("SKIP: kubectl is not on PATH (describe node)");
        return;
    }
    let (code, out, err) = common::kubectl::run(&server, &["describe", "node", "n0"], "").await;
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("Failed to get lease"), "{out}");
    assert!(out.contains("HolderIdentity:  n0"), "{out}");
    assert!(out.contains("InternalIP:"), "{out}");
}

/// n0 runs a DaemonSet pod, a ReplicaSet pod under a PodDisruptionBudget that allows one
/// disruption, and an unmanaged pod.
fn drain_world() -> SimCluster {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use nodewright_reconciler::sim::{OwnerKind, PdbInput, WorkloadPodInput};
    let mut sim = world();
    for (name, app, owner) in [
        ("agent", "agent", OwnerKind::DaemonSet),
        ("web", "web", OwnerKind::ReplicaSet),
        ("solo", "solo", OwnerKind::None),
    ] {
        sim.add_workload_pod(WorkloadPodInput {
            name: name.into(),
            namespace: "apps".into(),
            node: Some("n0".into()),
            labels: [("app".to_string(), app.to_string())].into(),
            owner,
            tolerations: vec![],
            empty_dir: false,
            run_for: None,
            grace_seconds: Some(2),
        });
    }
    sim.add_pdb(PdbInput {
        name: "web".into(),
        namespace: "apps".into(),
        selector: [("app".to_string(), "web".to_string())].into(),
        min_available: None,
        max_unavailable: Some(IntOrString::Int(1)),
    });
    sim
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_drain_classifies_pods_by_their_apps_v1_owners() {
    let server = SimServer::start(
        drain_world(),
        ServeOptions {
            port: 0,
            speed: 20.0,
            tick: Duration::from_millis(20),
            ..ServeOptions::default()
        },
    )
    .await
    .unwrap();
    let client = server.client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "apps");
    let agent = pods.get("agent").await.unwrap();
    let owner = &agent.metadata.owner_references.unwrap()[0];
    let daemon_sets: Api<DynamicObject> = Api::namespaced_with(
        client,
        "apps",
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apps", "v1", "DaemonSet"),
            "daemonsets",
        ),
    );
    let daemon_set = daemon_sets.get(&owner.name).await.unwrap();
    assert_eq!(daemon_set.metadata.uid.as_deref(), Some(owner.uid.as_str()));

    if common::kubectl::which("kubectl").is_none() {
        println!("SKIP: kubectl is not on PATH (drain)");
        return;
    }
    let (code, _, err) =
        common::kubectl::run(&server, &["drain", "n0", "--ignore-daemonsets"], "").await;
    assert_ne!(code, 0);
    assert!(err.contains("declare no controller"), "{err}");
    assert!(err.contains("apps/solo"), "{err}");
    let (code, out, err) = common::kubectl::run(
        &server,
        &[
            "drain",
            "n0",
            "--ignore-daemonsets",
            "--force",
            "--timeout=60s",
        ],
        "",
    )
    .await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        err.contains("ignoring DaemonSet-managed Pods: apps/agent"),
        "{err}"
    );
    assert!(out.contains("node/n0 drained"), "{out}");
    let on_n0: Vec<String> = pods
        .list(&ListParams::default().fields("spec.nodeName=n0"))
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| p.name_any())
        .collect();
    assert_eq!(on_n0, ["agent"], "only the DaemonSet pod stays");
}
