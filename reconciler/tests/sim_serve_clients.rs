//! `sim serve` seen by stock clients that do not forgive (issue 25): kubectl with its default
//! client-side checks (OpenAPI documents, server-side field validation, protobuf bodies of its
//! typed `create` subcommands, Table watches) and the official Python client. Each test prints
//! SKIP and passes when its client is not installed (`.ci/run` installs them).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node};
use kube::Api;
use kube::api::{Patch, PatchParams};
use nodewright_reconciler::job::Job;
use nodewright_reconciler::sim::http::{ServeOptions, SimServer};
use nodewright_reconciler::sim::{ModelRunner, NodeInput, PackageModels, SimCluster};
use serde_json::json;

const NS: &str = "nodewright";

/// Three nodes `n0`…`n2` and the reconciler's namespace, served at `speed`.
async fn serve(speed: f64) -> SimServer {
    let mut sim = SimCluster::new(NS, Box::new(ModelRunner::new(PackageModels::default())), 7);
    for i in 0..3 {
        sim.add_node(NodeInput {
            name: format!("n{i}"),
            ..NodeInput::default()
        });
    }
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

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_create_and_replace_validate_against_the_served_openapi() {
    if common::kubectl::skip_without_kubectl() {
        return;
    }
    let server = serve(1.0).await;
    let crds = nodewright_schema::crd::all_yaml();
    let (code, out, err) = common::kubectl::run(&server, &["apply", "-f", "-"], &crds).await;
    assert_eq!(code, 0, "nodewright crds | kubectl apply -f -: {out} {err}");
    let tuning = std::fs::read_to_string(repo().join("examples/fleet/gpu-tuning.yaml")).unwrap();
    let (code, out, err) = common::kubectl::run(&server, &["apply", "-f", "-"], &tuning).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("nodewright.nodewright.nvidia.com/gpu-tuning created"),
        "{out}"
    );
    // A second apply computes its patch from the served schema and the last-applied state.
    let raised = tuning.replace("priority: 100", "priority: 150");
    let (code, out, err) = common::kubectl::run(&server, &["apply", "-f", "-"], &raised).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("gpu-tuning configured"), "{out}");

    let config_map = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {NS}\ndata:\n  k: one\n"
    );
    let (code, out, err) = common::kubectl::run(&server, &["create", "-f", "-"], &config_map).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("configmap/settings created"), "{out}");
    let (code, out, err) = common::kubectl::run(
        &server,
        &["replace", "-f", "-"],
        &config_map.replace("k: one", "k: two"),
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("configmap/settings replaced"), "{out}");

    let client = server.client().await.unwrap();
    let nodewrights: Api<nodewright_schema::NodeWright> = Api::all(client.clone());
    assert_eq!(
        nodewrights.get("gpu-tuning").await.unwrap().spec.priority,
        150
    );
    let cms: Api<ConfigMap> = Api::namespaced(client, NS);
    assert_eq!(cms.get("settings").await.unwrap().data.unwrap()["k"], "two");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_strict_validation_refuses_an_unknown_field_and_writes_nothing() {
    if common::kubectl::skip_without_kubectl() {
        return;
    }
    let server = serve(1.0).await;
    let typo = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: typo\n  namespace: {NS}\ndatum:\n  k: v\n"
    );
    for args in [
        &["apply", "-f", "-"][..],
        &["apply", "--validate=strict", "-f", "-"],
        &["create", "-f", "-"],
    ] {
        let (code, out, err) = common::kubectl::run(&server, args, &typo).await;
        assert_ne!(code, 0, "kubectl {args:?} accepted an unknown field: {out}");
        assert!(
            err.contains(
                "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"datum\""
            ),
            "{err}"
        );
    }
    let (code, _, err) = common::kubectl::run(
        &server,
        &["apply", "-f", "-"],
        &nodewright_schema::crd::all_yaml(),
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let tuning = std::fs::read_to_string(repo().join("examples/fleet/gpu-tuning.yaml")).unwrap();
    let bogus = tuning.replace("  priority: 100", "  priority: 100\n  bogusField: 1");
    let (code, _, err) = common::kubectl::run(&server, &["apply", "-f", "-"], &bogus).await;
    assert_ne!(code, 0);
    assert!(
        err.contains("strict decoding error: unknown field \"spec.bogusField\""),
        "{err}"
    );
    // `--validate=warn` reports the field and writes the object without it, as a real
    // server drops what its schema does not declare.
    let (code, _, err) =
        common::kubectl::run(&server, &["apply", "--validate=warn", "-f", "-"], &typo).await;
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("unknown field \"datum\""), "{err}");
    let (code, out, err) = common::kubectl::run(
        &server,
        &["get", "configmap", "typo", "-n", NS, "-o", "json"],
        "",
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let stored: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(stored.get("datum").is_none(), "{out}");
    assert_eq!(stored["metadata"]["name"], "typo");
    let (code, out, _) =
        common::kubectl::run(&server, &["get", "nodewrights", "-o", "name"], "").await;
    assert_eq!((code, out.trim()), (0, ""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_explain_reads_built_in_and_custom_resource_schemas() {
    if common::kubectl::skip_without_kubectl() {
        return;
    }
    let server = serve(1.0).await;
    let (code, out, err) = common::kubectl::run(&server, &["explain", "nodes.spec"], "").await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("KIND:       Node"), "{out}");
    assert!(out.contains("FIELD: spec <NodeSpec>"), "{out}");
    assert!(out.contains("unschedulable\t<boolean>"), "{out}");
    let (code, out, err) =
        common::kubectl::run(&server, &["explain", "nodewrights.spec.packages"], "").await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("KIND:       NodeWright"), "{out}");
    assert!(out.contains("configInterrupts"), "{out}");
    assert!(out.contains("version\t<string> -required-"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_typed_create_subcommands_send_protobuf_and_are_stored() {
    if common::kubectl::skip_without_kubectl() {
        return;
    }
    let server = serve(1.0).await;
    let (code, _, err) =
        common::kubectl::run(&server, &["create", "namespace", "team", "-v=8"], "").await;
    assert_eq!(code, 0, "{err}");
    // What kubectl sent: the body is protobuf, as to any apiserver.
    assert!(
        err.contains("Content-Type: application/vnd.kubernetes.protobuf"),
        "{err}"
    );
    for args in [
        &[
            "create",
            "job",
            "hello",
            "--image=example/hello:1",
            "-n",
            "team",
        ][..],
        &[
            "create",
            "configmap",
            "settings",
            "--from-literal=a=b",
            "-n",
            "team",
        ],
    ] {
        let (code, out, err) = common::kubectl::run(&server, args, "").await;
        assert_eq!(code, 0, "kubectl {args:?}: {out} {err}");
    }
    let client = server.client().await.unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    assert!(namespaces.get_opt("team").await.unwrap().is_some());
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "team");
    assert_eq!(cms.get("settings").await.unwrap().data.unwrap()["a"], "b");
    let jobs: Api<Job> = Api::namespaced(client, "team");
    let job = serde_json::to_value(jobs.get("hello").await.unwrap()).unwrap();
    let pod = &job["spec"]["template"]["spec"];
    assert_eq!(pod["containers"][0]["image"], "example/hello:1");
    assert_eq!(pod["restartPolicy"], "Never");
    // The zero values Go writes for every field are absent fields, as in Go's JSON.
    let template = &job["spec"]["template"]["metadata"];
    assert!(template.get("name").is_none(), "{template}");
    assert!(pod["containers"][0].get("tty").is_none(), "{pod}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_watch_keeps_its_columns() {
    if common::kubectl::skip_without_kubectl() {
        return;
    }
    let server = serve(1.0).await;
    let config = common::kubectl::kubeconfig(&server);
    let watch = |args: &[&str]| {
        common::kubectl::command(&config, args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let node_watch = watch(&["get", "nodes", "-w"]);
    let pod_watch = watch(&["get", "pods", "-n", NS, "-w"]);
    // The lists come first; the cordon and the Job's pod after them arrive as watch events.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let client = server.client().await.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    let jobs: Api<Job> = Api::namespaced(client, NS);
    let job = json!({"metadata": {"name": "hello"}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "nodeName": "n0",
        "containers": [{"name": "hello", "image": "example/hello:1"}]}}}});
    jobs.create(&Default::default(), &serde_json::from_value(job).unwrap())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let output = |mut child: std::process::Child| {
        child.kill().unwrap();
        let out = child.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = output(node_watch);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("NAME"), "{text}");
    let event = lines
        .iter()
        .skip(4)
        .find(|l| l.starts_with("n1"))
        .unwrap_or_else(|| panic!("no watch event line for n1: {text}"));
    let cells: Vec<&str> = event.split_whitespace().collect();
    assert_eq!(cells[..2], ["n1", "Ready,SchedulingDisabled"], "{text}");
    // Every pod event line has the pod's status and node columns.
    let text = output(pod_watch);
    let events: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| l.starts_with("hello-"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(
        !events.is_empty(),
        "no watch event for the Job's pod: {text}"
    );
    for cells in events {
        assert_eq!(cells.len(), 4, "NAME STATUS NODE AGE: {text}");
        assert_eq!(cells[2], "n0", "{text}");
    }
}

/// The Python workflows (`tests/python/client_workflows.py`), or `None` when the official
/// client is not importable.
async fn python(server: &SimServer) -> Option<(i32, String, String)> {
    let importable = common::kubectl::which("python3").is_some_and(|python| {
        Command::new(python)
            .args(["-c", "import kubernetes"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if !importable {
        println!("SKIP: the Python kubernetes client is not importable");
        return None;
    }
    let config = common::kubectl::kubeconfig(server);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/client_workflows.py");
    Some(
        tokio::task::spawn_blocking(move || {
            let out = Command::new("python3")
                .arg(script)
                .arg(&config.1)
                .output()
                .unwrap();
            (
                out.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        })
        .await
        .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_runs_its_workflows() {
    let server = serve(10.0).await;
    let Some((code, out, err)) = python(&server).await else {
        return;
    };
    assert_eq!(code, 0, "{out}\n{err}");
    for step in [
        "ok list nodes n0 n1 n2",
        "ok strategic merge patch of node labels",
        "ok watch from a resourceVersion saw the label",
        "ok watch ended by its timeout",
        "ok namespace and configmap created",
        "ok missing configmap is a 404 NotFound",
        "ok strict field validation refused datum",
        "ok unknown field warned about and dropped",
        "ok dynamic client found NodeWright through discovery",
        "ok dry run stored nothing",
        "ok job succeeded",
    ] {
        assert!(out.contains(step), "missing {step:?} in:\n{out}\n{err}");
    }
    // What the script did is what the server holds.
    let client = server.client().await.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let labels = nodes.get("n0").await.unwrap().metadata.labels.unwrap();
    assert_eq!(labels.get("team").map(String::as_str), Some("python"));
    let cms: Api<ConfigMap> = Api::namespaced(client, "py-team");
    assert_eq!(cms.get("settings").await.unwrap().data.unwrap()["k"], "v");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_patch_merges_list_elements_by_their_merge_key() {
    if common::kubectl::skip_without_kubectl() {
        return;
    }
    let server = serve(1.0).await;
    // kubectl patch sends a strategic merge patch: the new condition joins the list by its
    // `type` and the node's Ready condition stays.
    let (code, out, err) = common::kubectl::run(
        &server,
        &[
            "patch",
            "node",
            "n2",
            "--subresource=status",
            "-p",
            r#"{"status":{"conditions":[{"type":"DiskPressure","status":"True","reason":"Full","message":"disk full"}]}}"#,
        ],
        "",
    )
    .await;
    assert_eq!(code, 0, "{out} {err}");
    let nodes: Api<Node> = Api::all(server.client().await.unwrap());
    let conditions = nodes
        .get("n2")
        .await
        .unwrap()
        .status
        .unwrap()
        .conditions
        .unwrap();
    let mut types: Vec<(String, String)> = conditions
        .into_iter()
        .map(|c| (c.type_, c.status))
        .collect();
    types.sort();
    assert_eq!(
        types,
        [
            ("DiskPressure".to_string(), "True".to_string()),
            ("Ready".to_string(), "True".to_string())
        ]
    );
}
