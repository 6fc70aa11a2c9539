//! `sim serve` as a Kubernetes API server (issue 25), seen from its clients: raw HTTP (what
//! any client library sends), kube-rs and kubectl. No request may panic a handler, every
//! refusal is a `Status` with the code kube-apiserver gives, and the health endpoints answer
//! as kube-apiserver's do.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, EvictParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use nodewright_reconciler::sim::http::{ServeOptions, SimServer};
use nodewright_reconciler::sim::{
    ModelRunner, NodeInput, OwnerKind, PackageModels, PdbInput, SimCluster, WorkloadPodInput,
};
use proptest::prelude::*;
use serde_json::{Value, json};

const NS: &str = "nodewright";

/// Three nodes, the reconciler's namespace, and in namespace `apps` two running pods on n0:
/// `batch-0` protected by a PodDisruptionBudget that allows no disruption, and `web-0`.
fn world() -> SimCluster {
    let mut sim = SimCluster::new(NS, Box::new(ModelRunner::new(PackageModels::default())), 7);
    for i in 0..3 {
        sim.add_node(NodeInput {
            name: format!("n{i}"),
            ..NodeInput::default()
        });
    }
    for (name, app) in [("batch-0", "batch"), ("web-0", "web")] {
        sim.add_workload_pod(WorkloadPodInput {
            name: name.into(),
            namespace: "apps".into(),
            node: Some("n0".into()),
            labels: [("app".to_string(), app.to_string())].into(),
            owner: OwnerKind::ReplicaSet,
            tolerations: vec![],
            empty_dir: false,
            run_for: None,
            grace_seconds: Some(5),
        });
    }
    sim.add_pdb(PdbInput {
        name: "batch".into(),
        namespace: "apps".into(),
        selector: [("app".to_string(), "batch".to_string())].into(),
        min_available: Some(IntOrString::Int(1)),
        max_unavailable: None,
    });
    sim
}

async fn serve() -> SimServer {
    serve_at(1.0).await
}

/// Serves [`world`] with `speed` virtual seconds per wall second.
async fn serve_at(speed: f64) -> SimServer {
    SimServer::start(
        world(),
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

/// What came back for one request: the status code, the headers (lower-case names) and,
/// unless the response is a stream, its body.
#[derive(Debug)]
struct Reply {
    code: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "a {} body that is not JSON ({e}): {:?}",
                self.code,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One HTTP/1.1 request on its own connection, written by hand so that any method, path and
/// body bytes can be sent. A connection closed before a status line is an `Err`: that is what
/// a client sees when a handler panics. The body of a chunked response (a watch, a followed
/// log) is not read.
fn raw(
    address: SocketAddr,
    method: &str,
    target: &str,
    content_type: &str,
    body: &[u8],
) -> Result<Reply, String> {
    let mut stream = TcpStream::connect(address).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .map_err(|e| e.to_string())?;
    let head = format!(
        "{method} {target} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\
         Accept: application/json\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body))
        .map_err(|e| e.to_string())?;
    let mut received = Vec::new();
    let mut buf = [0u8; 8192];
    let header_end = loop {
        if let Some(i) = received.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err(format!(
                "connection closed without a reply to {method} {target} (got {:?})",
                String::from_utf8_lossy(&received)
            ));
        }
        received.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&received[..header_end]).into_owned();
    let mut lines = head.split("\r\n");
    let code: u16 = lines
        .next()
        .and_then(|status| status.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no status line in {head:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut reply = Reply {
        code,
        headers,
        body: received[header_end..].to_vec(),
    };
    let length = reply
        .header("content-length")
        .and_then(|l| l.parse::<usize>().ok());
    match length {
        Some(length) if method != "HEAD" => {
            while reply.body.len() < length {
                let n = stream.read(&mut buf).map_err(|e| e.to_string())?;
                if n == 0 {
                    return Err(format!("body cut short after {} bytes", reply.body.len()));
                }
                reply.body.extend_from_slice(&buf[..n]);
            }
        }
        _ => reply.body.clear(),
    }
    Ok(reply)
}

/// Asserts `reply` is a failure `Status` whose `code` is the HTTP code; returns it.
fn status(reply: &Reply) -> Value {
    let status = reply.json();
    assert_eq!(status["kind"], "Status", "{status}");
    assert_eq!(status["apiVersion"], "v1", "{status}");
    assert_eq!(status["status"], "Failure", "{status}");
    assert_eq!(status["code"], json!(reply.code), "{status}");
    assert!(
        status["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "{status}"
    );
    assert!(status["message"].is_string(), "{status}");
    status
}

/// Runs the blocking `f` off the async runtime that drives the server.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_is_not_an_object_is_a_400_on_create_update_and_apply() {
    let server = serve().await;
    let address = server.address();
    blocking(move || {
        let writes = [
            (
                "POST",
                "/api/v1/namespaces/nodewright/configmaps",
                "application/json",
            ),
            ("POST", "/api/v1/nodes", "application/json"),
            ("POST", "/api/v1/namespaces", "application/json"),
            (
                "POST",
                "/apis/nodewright.nvidia.com/v1alpha1/nodewrights",
                "application/json",
            ),
            ("PUT", "/api/v1/nodes/n0", "application/json"),
            ("PUT", "/api/v1/namespaces/default", "application/json"),
            ("PATCH", "/api/v1/nodes/n0", "application/apply-patch+yaml"),
            (
                "PATCH",
                "/api/v1/namespaces/nodewright/configmaps/c",
                "application/apply-patch+yaml",
            ),
            (
                "PATCH",
                "/api/v1/namespaces/default",
                "application/merge-patch+json",
            ),
            ("PATCH", "/api/v1/nodes/n0", "application/merge-patch+json"),
        ];
        for (method, path, content_type) in writes {
            for body in ["[1, 2]", "42", "\"text\"", "null", "true"] {
                let reply = raw(address, method, path, content_type, body.as_bytes()).unwrap();
                let status = status(&reply);
                assert_eq!(reply.code, 400, "{method} {path} {body}: {status}");
                assert_eq!(status["reason"], "BadRequest");
            }
        }
        let create = raw(
            address,
            "POST",
            "/api/v1/namespaces/nodewright/configmaps",
            "application/json",
            b"[1]",
        )
        .unwrap();
        assert!(
            status(&create)["message"]
                .as_str()
                .unwrap()
                .starts_with("the object provided is unrecognized (must be of type ConfigMap)"),
            "{}",
            create.text()
        );
        // A JSON patch replacing the whole object with a non-object is refused the same way.
        let replace_root = raw(
            address,
            "PATCH",
            "/api/v1/namespaces/default",
            "application/json-patch+json",
            br#"[{"op": "replace", "path": "", "value": [1]}]"#,
        )
        .unwrap();
        assert_eq!(replace_root.code, 400, "{}", replace_root.text());
        // The server still serves, and nothing was written.
        let nodes = raw(address, "GET", "/api/v1/nodes", "application/json", b"").unwrap();
        assert_eq!(nodes.code, 200);
        assert_eq!(nodes.json()["items"].as_array().unwrap().len(), 3);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_and_list_timeouts_must_be_non_negative_int64s() {
    let server = serve().await;
    let address = server.address();
    blocking(move || {
        let get = |query: &str| {
            raw(
                address,
                "GET",
                &format!("/api/v1/nodes?{query}"),
                "application/json",
                b"",
            )
            .unwrap()
        };
        let too_big = get("watch=true&timeoutSeconds=18446744073709551615");
        assert_eq!(too_big.code, 400);
        assert_eq!(
            status(&too_big)["message"],
            "strconv.ParseInt: parsing \"18446744073709551615\": value out of range"
        );
        for query in ["watch=true&timeoutSeconds=-1", "timeoutSeconds=-1"] {
            let negative = get(query);
            assert_eq!(negative.code, 400, "{query}");
            assert_eq!(status(&negative)["reason"], "BadRequest");
        }
        let garbage = get("watch=1&timeoutSeconds=soon");
        assert_eq!(garbage.code, 400);
        assert_eq!(
            status(&garbage)["message"],
            "strconv.ParseInt: parsing \"soon\": invalid syntax"
        );
        // The largest int64 is a valid timeout: the watch starts.
        let longest = get("watch=true&timeoutSeconds=9223372036854775807");
        assert_eq!(longest.code, 200);
        let grace = raw(
            address,
            "DELETE",
            "/api/v1/nodes/n2?gracePeriodSeconds=later",
            "application/json",
            b"",
        )
        .unwrap();
        assert_eq!(grace.code, 400, "{}", grace.text());
        assert_eq!(get("").json()["items"].as_array().unwrap().len(), 3);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_endpoints_answer_as_kube_apiserver_does() {
    let server = serve().await;
    let address = server.address();
    let client = server.client().await.unwrap();
    for endpoint in ["healthz", "readyz", "livez"] {
        let request = http::Request::get(format!("/{endpoint}"))
            .body(Vec::new())
            .unwrap();
        assert_eq!(client.request_text(request).await.unwrap(), "ok");
        let verbose = http::Request::get(format!("/{endpoint}?verbose"))
            .body(Vec::new())
            .unwrap();
        let text = client.request_text(verbose).await.unwrap();
        assert!(text.starts_with("[+]ping ok\n"), "{text}");
        assert!(
            text.ends_with(&format!("{endpoint} check passed\n")),
            "{text}"
        );
    }
    blocking(move || {
        let ok = raw(address, "GET", "/readyz", "application/json", b"").unwrap();
        assert_eq!(ok.code, 200);
        assert_eq!(ok.header("content-type"), Some("text/plain; charset=utf-8"));
        assert_eq!(ok.text(), "ok");
        let one = raw(address, "GET", "/livez/ping", "application/json", b"").unwrap();
        assert_eq!((one.code, one.text().as_str()), (200, "ok"));
        let unknown = raw(address, "GET", "/healthz/etcd-x", "application/json", b"").unwrap();
        assert_eq!(unknown.code, 404);
        status(&unknown);
    })
    .await;
    if let Some(kubectl) = common::kubectl::which("kubectl") {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        server.write_kubeconfig(&kubeconfig).unwrap();
        let out = blocking(move || {
            std::process::Command::new(kubectl)
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(["get", "--raw", "/readyz?verbose"])
                .output()
                .unwrap()
        })
        .await;
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("readyz check passed"), "{text}");
    }
}

fn config_map(name: &str, value: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": value}})).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_changes_nothing_stores_nothing_and_sends_no_watch_event() {
    use futures::{StreamExt, TryStreamExt};
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::api::WatchParams;
    let server = serve().await;
    let client = server.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "apps");
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let merge = |v: Value| Patch::Merge(v);
    let pp = PatchParams::default();
    let cm = cms
        .create(&PostParams::default(), &config_map("same", "v"))
        .await
        .unwrap();
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "same"}, "spec": {"holderIdentity": "a"}
    }))
    .unwrap();
    let lease = leases.create(&PostParams::default(), &lease).await.unwrap();
    let node = nodes
        .patch(
            "n1",
            &pp,
            &merge(json!({"metadata": {"labels": {"team": "a"}}})),
        )
        .await
        .unwrap();
    let pod = pods.get("web-0").await.unwrap();
    let mut events = cms
        .watch(&WatchParams::default(), &cm.resource_version().unwrap())
        .await
        .unwrap()
        .boxed();
    let before = server.world().unchanged_updates();

    // The same content again, by kind: a ConfigMap, a node's label, a pod's label (the
    // simulator's objects) and a Lease (kept as sent): each answers the stored object.
    let again = cms
        .patch("same", &pp, &merge(json!({"data": {"k": "v"}})))
        .await
        .unwrap();
    assert_eq!(again.resource_version(), cm.resource_version());
    let again = nodes
        .patch(
            "n1",
            &pp,
            &merge(json!({"metadata": {"labels": {"team": "a"}}})),
        )
        .await
        .unwrap();
    assert_eq!(again.resource_version(), node.resource_version());
    let labels = json!({"metadata": {"labels": pod.labels()}});
    let again = pods.patch("web-0", &pp, &merge(labels)).await.unwrap();
    assert_eq!(again.resource_version(), pod.resource_version());
    let again = leases
        .patch(
            "same",
            &pp,
            &merge(json!({"spec": {"holderIdentity": "a"}})),
        )
        .await
        .unwrap();
    assert_eq!(again.resource_version(), lease.resource_version());
    assert_eq!(server.world().unchanged_updates() - before, 4);

    // A change is stored with a new version, and it is the first thing the watch reports.
    let changed = cms
        .patch("same", &pp, &merge(json!({"data": {"k": "w"}})))
        .await
        .unwrap();
    assert_ne!(changed.resource_version(), cm.resource_version());
    let first = tokio::time::timeout(Duration::from_secs(10), events.try_next())
        .await
        .expect("the watch reports the change")
        .unwrap();
    match first {
        Some(kube::core::WatchEvent::Modified(seen)) => {
            assert_eq!(seen.resource_version(), changed.resource_version());
            assert_eq!(seen.data.unwrap()["k"], "w");
        }
        other => panic!("expected the change first, got {other:?}"),
    }
    assert_eq!(server.world().unchanged_updates() - before, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_write_answers_what_would_be_stored_and_stores_nothing() {
    let server = serve().await;
    let client = server.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let nodes: Api<Node> = Api::all(client.clone());
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };

    // Create: the object as it would be stored, with a uid and no resourceVersion.
    let created = cms.create(&dry, &config_map("probe", "v")).await.unwrap();
    assert_eq!(created.metadata.name.as_deref(), Some("probe"));
    assert!(created.metadata.uid.is_some());
    assert_eq!(created.metadata.resource_version, None);
    assert_eq!(created.data.unwrap()["k"], "v");
    assert!(cms.get_opt("probe").await.unwrap().is_none());
    // Validation and admission still run: a duplicate is refused, an invalid CR too.
    cms.create(&PostParams::default(), &config_map("live", "1"))
        .await
        .unwrap();
    let duplicate = cms
        .create(&dry, &config_map("live", "2"))
        .await
        .unwrap_err();
    assert_eq!(refusal(duplicate).0, 409);

    // Patch, update and status writes answer the new object and leave the stored one.
    let patched = nodes
        .patch(
            "n1",
            &PatchParams {
                dry_run: true,
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"metadata": {"labels": {"tier": "gold"}}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.labels.unwrap()["tier"], "gold");
    let stored = nodes.get("n1").await.unwrap();
    assert!(stored.labels().get("tier").is_none());
    let mut replacement = cms.get("live").await.unwrap();
    replacement.data = Some([("k".to_string(), "2".to_string())].into());
    let replaced = cms.replace("live", &dry, &replacement).await.unwrap();
    assert_eq!(replaced.data.unwrap()["k"], "2");
    assert_eq!(cms.get("live").await.unwrap().data.unwrap()["k"], "1");
    let stale = cms
        .replace("live", &dry, &{
            let mut stale = replacement.clone();
            stale.metadata.resource_version = Some("1".into());
            stale
        })
        .await
        .unwrap_err();
    assert_eq!(refusal(stale).0, 409);
    let applied = cms
        .patch(
            "live",
            &PatchParams::apply("test").dry_run(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"x": "y"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        applied.data.unwrap(),
        [("x".to_string(), "y".to_string())].into()
    );
    assert_eq!(cms.get("live").await.unwrap().data.unwrap()["k"], "1");

    // Delete: a dry run deletes nothing; a graceful pod is answered as terminating.
    let delete = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    nodes.delete("n2", &delete).await.unwrap();
    assert!(nodes.get_opt("n2").await.unwrap().is_some());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "apps");
    let terminating = pods.delete("web-0", &delete).await.unwrap();
    let pod = terminating
        .left()
        .expect("a running pod terminates gracefully");
    assert!(pod.metadata.deletion_timestamp.is_some());
    assert_eq!(pod.metadata.deletion_grace_period_seconds, Some(5));
    assert!(
        pods.get("web-0")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_none()
    );

    // Eviction: the PodDisruptionBudget is consulted, nothing is evicted. kube-rs sends
    // `dryRun` in the query (its body spells `delete_options`, which a server ignores);
    // kubectl drain sends it in `deleteOptions`.
    let evict = EvictParams {
        post_options: dry.clone(),
        delete_options: None,
    };
    let refused = pods.evict("batch-0", &evict).await.unwrap_err();
    assert_eq!(refusal(refused).0, 429);
    pods.evict("web-0", &evict).await.unwrap();
    let address = server.address();
    let evicted = blocking(move || {
        raw(
            address,
            "POST",
            "/api/v1/namespaces/apps/pods/web-0/eviction",
            "application/json",
            br#"{"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-0"},
                 "deleteOptions": {"dryRun": ["All"]}}"#,
        )
        .unwrap()
    })
    .await;
    assert_eq!(evicted.code, 201, "{}", evicted.text());
    assert!(
        pods.get("web-0")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_none()
    );
    let names: Vec<String> = cms
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|cm| cm.metadata.name)
        .collect();
    assert_eq!(names, ["live"], "dry runs created nothing");

    // The status subresource and a collection delete take a dry run too.
    let condition = json!({"status": {"conditions": [{"type": "Probe", "status": "True"}]}});
    let (status_write, collection) = blocking(move || {
        let status_write = raw(
            address,
            "PATCH",
            "/api/v1/nodes/n1/status?dryRun=All",
            "application/merge-patch+json",
            condition.to_string().as_bytes(),
        )
        .unwrap();
        let collection = raw(
            address,
            "DELETE",
            "/api/v1/namespaces/nodewright/configmaps?dryRun=All",
            "application/json",
            b"",
        )
        .unwrap();
        (status_write, collection)
    })
    .await;
    assert_eq!(status_write.code, 200, "{}", status_write.text());
    assert_eq!(
        status_write.json()["status"]["conditions"][0]["type"],
        "Probe"
    );
    let conditions = nodes.get("n1").await.unwrap().status.unwrap().conditions;
    assert!(
        conditions
            .unwrap_or_default()
            .iter()
            .all(|c| c.type_ != "Probe")
    );
    assert_eq!(collection.code, 200, "{}", collection.text());
    assert!(cms.get_opt("live").await.unwrap().is_some());

    // Any other dryRun value is refused as the apiserver validates its options.
    let reply = blocking(move || {
        raw(
            address,
            "POST",
            "/api/v1/namespaces/nodewright/configmaps?dryRun=Yes",
            "application/json",
            br#"{"metadata": {"name": "x"}}"#,
        )
        .unwrap()
    })
    .await;
    assert_eq!(reply.code, 422);
    assert_eq!(
        status(&reply)["message"],
        "CreateOptions.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: []string{\"Yes\"}: supported values: \"All\""
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_server_dry_run_and_diff_leave_the_cluster_unchanged() {
    if common::kubectl::which("kubectl").is_none() {
        println!("kubectl is not on PATH; skipping the kubectl test");
        return;
    }
    let server = serve().await;
    let cms: Api<ConfigMap> = Api::namespaced(server.client().await.unwrap(), NS);
    cms.create(&PostParams::default(), &config_map("settings", "old"))
        .await
        .unwrap();
    let manifest = |name: &str, value: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {NS}\ndata:\n  k: {value}\n"
        )
    };
    let (code, out, err) = common::kubectl::run(
        &server,
        &["apply", "--validate=false", "--dry-run=server", "-f", "-"],
        &(manifest("fresh", "one") + "---\n" + &manifest("settings", "new")),
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("configmap/fresh created (server dry run)"),
        "{out}"
    );
    assert!(
        out.contains("configmap/settings configured (server dry run)"),
        "{out}"
    );
    let (code, out, err) =
        common::kubectl::run(&server, &["diff", "-f", "-"], &manifest("settings", "new")).await;
    assert_eq!(
        code, 1,
        "kubectl diff exits 1 when there are differences: {out} {err}"
    );
    assert!(
        out.contains("-  k: old") && out.contains("+  k: new"),
        "{out}"
    );
    assert!(cms.get_opt("fresh").await.unwrap().is_none());
    assert_eq!(cms.get("settings").await.unwrap().data.unwrap()["k"], "old");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_admit_content_only_while_they_exist_and_take_it_with_them() {
    use k8s_openapi::api::core::v1::Namespace;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;

    let server = serve_at(10.0).await;
    let client = server.client().await.unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());

    // NamespaceLifecycle: no content in a namespace that does not exist, dry run or not.
    let nowhere: Api<ConfigMap> = Api::namespaced(client.clone(), "nowhere");
    for params in [
        PostParams::default(),
        PostParams {
            dry_run: true,
            ..PostParams::default()
        },
    ] {
        let missing = nowhere
            .create(&params, &config_map("c", "v"))
            .await
            .unwrap_err();
        let kube::Error::Api(status) = missing else {
            panic!("{missing:?}")
        };
        assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));
        assert_eq!(status.message, "namespaces \"nowhere\" not found");
    }

    // Deleting `apps` turns it Terminating and deletes its pods and PodDisruptionBudget.
    let apps_cms: Api<ConfigMap> = Api::namespaced(client.clone(), "apps");
    apps_cms
        .create(&PostParams::default(), &config_map("settings", "v"))
        .await
        .unwrap();
    let deleted = namespaces
        .delete("apps", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("the namespace stays while its pods terminate");
    assert_eq!(
        deleted.status.and_then(|s| s.phase).as_deref(),
        Some("Terminating")
    );
    assert!(deleted.metadata.deletion_timestamp.is_some());
    let refused = apps_cms
        .create(&PostParams::default(), &config_map("late", "v"))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = refused else {
        panic!("{refused:?}")
    };
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        status.message,
        "configmaps \"late\" is forbidden: unable to create new content in namespace apps \
         because it is being terminated"
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "apps");
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "apps");
    eventually("namespace apps is gone", || async {
        namespaces.get_opt("apps").await.unwrap().is_none()
    })
    .await;
    assert!(
        pods.list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert!(
        pdbs.list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert!(
        apps_cms
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // kubectl waits for a namespace deletion to finish.
    if common::kubectl::which("kubectl").is_some() {
        let team: Namespace =
            serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap();
        namespaces
            .create(&PostParams::default(), &team)
            .await
            .unwrap();
        Api::<ConfigMap>::namespaced(client.clone(), "team")
            .create(&PostParams::default(), &config_map("c", "v"))
            .await
            .unwrap();
        let (code, out, err) =
            common::kubectl::run(&server, &["delete", "namespace", "team"], "").await;
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("namespace \"team\" deleted"), "{out}");
        assert!(namespaces.get_opt("team").await.unwrap().is_none());
    }
}

/// The `(code, reason, message)` of an API error.
fn refusal(e: kube::Error) -> (u16, String, String) {
    match e {
        kube::Error::Api(status) => (status.code, status.reason, status.message),
        other => panic!("not an API error: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_labels_taints_and_jobs_are_validated_and_defaulted_as_the_apiserver_does() {
    use k8s_openapi::api::core::v1::Namespace;
    use nodewright_reconciler::job::Job;

    let server = serve().await;
    let client = server.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);

    // Object names: RFC 1123 subdomains; namespace names: RFC 1123 labels.
    let subdomain = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric \
                     characters, '-' or '.', and must start and end with an alphanumeric character";
    for name in ["A_b", "a/b", "..", "a\u{0}b"] {
        let (code, reason, message) = refusal(
            cms.create(&PostParams::default(), &config_map(name, "v"))
                .await
                .unwrap_err(),
        );
        assert_eq!((code, reason.as_str()), (422, "Invalid"), "{name:?}");
        assert!(
            message.starts_with(&format!(
                "ConfigMap {name:?} is invalid: metadata.name: Invalid value: {name:?}: {subdomain}"
            )),
            "{message}"
        );
    }
    let long = "a".repeat(300);
    let (_, _, message) = refusal(
        cms.create(&PostParams::default(), &config_map(&long, "v"))
            .await
            .unwrap_err(),
    );
    assert!(
        message.contains("must be no more than 253 characters"),
        "{message}"
    );
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let dotted: Namespace = serde_json::from_value(json!({"metadata": {"name": "a.b"}})).unwrap();
    let (code, _, message) = refusal(
        namespaces
            .create(&PostParams::default(), &dotted)
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 422);
    assert!(
        message.contains("a lowercase RFC 1123 label must consist of"),
        "{message}"
    );

    // Label keys and values, on create and on update.
    let mut labelled = config_map("labelled", "v");
    labelled.metadata.labels = Some([("bad key".to_string(), "v".to_string())].into());
    let (code, _, message) = refusal(
        cms.create(&PostParams::default(), &labelled)
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 422);
    assert!(
        message.starts_with("ConfigMap \"labelled\" is invalid: metadata.labels: Invalid value: \"bad key\": name part must consist of"),
        "{message}"
    );
    let nodes: Api<Node> = Api::all(client.clone());
    let (code, _, message) = refusal(
        nodes
            .patch(
                "n0",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"tier": "-gold-"}}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 422);
    assert!(
        message.contains("Invalid value: \"-gold-\": a valid label must be"),
        "{message}"
    );

    // Taint effects: the three the scheduler knows.
    let (code, _, message) = refusal(
        nodes
            .patch(
                "n0",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"taints": [{"key": "k", "effect": "Sometimes"}]}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 422);
    assert_eq!(
        message,
        "Node \"n0\" is invalid: spec.taints[0].effect: Unsupported value: \"Sometimes\": \
         supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\""
    );
    let taints = nodes.get("n0").await.unwrap().spec.unwrap().taints;
    assert!(taints.unwrap_or_default().is_empty(), "nothing was written");

    // A JSON patch cannot remove an object's metadata.
    let remove_metadata = http::Request::patch("/api/v1/nodes/n0")
        .header("content-type", "application/json-patch+json")
        .body(br#"[{"op": "remove", "path": "/metadata"}]"#.to_vec())
        .unwrap();
    let (code, _, message) = refusal(client.request::<Node>(remove_metadata).await.unwrap_err());
    assert_eq!(code, 400);
    assert_eq!(
        message,
        "the name of the object () does not match the name on the URL (n0)"
    );
    assert_eq!(
        nodes.get("n0").await.unwrap().metadata.name.as_deref(),
        Some("n0")
    );

    // Jobs: restartPolicy Never or OnFailure; the selector is generated from the uid.
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let job = |name: &str, policy: &str| -> Job {
        serde_json::from_value(
            json!({"metadata": {"name": name}, "spec": {"template": {"spec": {
            "restartPolicy": policy, "nodeName": "n1",
            "containers": [{"name": "main", "image": "example/none:1"}]}}}}),
        )
        .unwrap()
    };
    let (code, _, message) = refusal(
        jobs.create(&PostParams::default(), &job("always", "Always"))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 422);
    assert_eq!(
        message,
        "Job \"always\" is invalid: spec.template.spec.restartPolicy: Unsupported value: \
         \"Always\": supported values: \"OnFailure\", \"Never\""
    );
    let created = jobs
        .create(&PostParams::default(), &job("a", "Never"))
        .await
        .unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    let spec = std::sync::Arc::unwrap_or_clone(created.spec.unwrap());
    assert_eq!(
        spec.selector.unwrap().match_labels.unwrap(),
        [(
            "batch.kubernetes.io/controller-uid".to_string(),
            uid.clone()
        )]
        .into()
    );
    let template_labels = spec.template.metadata.unwrap().labels.unwrap();
    for (key, value) in [
        ("batch.kubernetes.io/controller-uid", uid.as_str()),
        ("controller-uid", uid.as_str()),
        ("batch.kubernetes.io/job-name", "a"),
        ("job-name", "a"),
    ] {
        assert_eq!(
            template_labels.get(key).map(String::as_str),
            Some(value),
            "{key}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_page_through_one_snapshot_and_old_versions_expire() {
    use futures::{StreamExt, TryStreamExt};
    use kube::api::{ListParams, WatchEvent, WatchParams};

    let server = serve().await;
    let client = server.client().await.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let names = |list: &kube::core::ObjectList<Node>| -> Vec<String> {
        list.items
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect()
    };

    // Page one, then changes, then page two: the second page shows the first one's snapshot.
    let first = nodes.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(names(&first), ["n0", "n1"]);
    let token = first.metadata.continue_.clone().expect("more nodes follow");
    let extra: Node = serde_json::from_value(json!({"metadata": {"name": "n3"}})).unwrap();
    nodes.create(&PostParams::default(), &extra).await.unwrap();
    nodes
        .patch(
            "n2",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"tier": "gold"}}})),
        )
        .await
        .unwrap();
    let second = nodes
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(names(&second), ["n2"]);
    assert!(
        second.items[0].labels().get("tier").is_none(),
        "as of page one"
    );
    assert_eq!(
        second.metadata.continue_, None,
        "the last page has no token"
    );
    assert_eq!(
        second.metadata.resource_version,
        first.metadata.resource_version
    );
    let now = nodes.list(&ListParams::default()).await.unwrap();
    assert_eq!(names(&now), ["n0", "n1", "n2", "n3"]);

    // An exact resourceVersion lists that snapshot; a future one is a 504.
    let exact = exact_list(&nodes, first.metadata.resource_version.clone())
        .await
        .unwrap();
    assert_eq!(names(&exact), ["n0", "n1", "n2"]);
    let future = nodes
        .list(&ListParams {
            resource_version: Some("999999999".into()),
            ..ListParams::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refusal(future).0, 504);

    // After a compaction, the token and the old resourceVersion are gone: 410 Expired.
    server.world().with(|inner| inner.compact());
    let (code, reason, message) = refusal(
        nodes
            .list(&ListParams::default().limit(2).continue_token(&token))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (410, "Expired"));
    assert!(
        message.starts_with("The provided continue parameter is too old"),
        "{message}"
    );
    let (code, reason, _) = refusal(
        exact_list(&nodes, first.metadata.resource_version.clone())
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (410, "Expired"));
    let old_rv = first.metadata.resource_version.clone().unwrap();
    let mut stream = nodes
        .watch(&WatchParams::default().timeout(5), &old_rv)
        .await
        .unwrap()
        .boxed();
    match stream.try_next().await.unwrap() {
        Some(WatchEvent::Error(status)) => assert_eq!(status.code, 410),
        other => panic!("expected a 410 watch error, got {other:?}"),
    }

    // kubectl pages with --chunk-size and shows every node.
    if common::kubectl::which("kubectl").is_some() {
        let (code, out, err) =
            common::kubectl::run(&server, &["get", "nodes", "--chunk-size=2", "-v=6"], "").await;
        assert_eq!(code, 0, "{err}");
        for name in ["n0", "n1", "n2", "n3"] {
            assert!(out.contains(name), "{name} in {out}");
        }
        assert!(
            err.contains("limit=2") && err.contains("continue="),
            "{err}"
        );
    }
}

/// A list of the nodes exactly as of `rv`.
async fn exact_list(
    nodes: &Api<Node>,
    rv: Option<String>,
) -> kube::Result<kube::core::ObjectList<Node>> {
    nodes
        .list(&kube::api::ListParams {
            resource_version: rv,
            version_match: Some(kube::api::VersionMatch::Exact),
            ..kube::api::ListParams::default()
        })
        .await
}

/// A pod of one container, bound to `node`.
fn bound_pod(name: &str, node: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "example/app:1"}]}
    }))
    .unwrap()
}

/// Pods by node, as a drain watch lists them: a pod bound, moved away by deletion and
/// re-creation on another node, paged one at a time, and listed as of before the move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodes_pods_are_listed_by_field_selector_now_paged_and_as_of_before() {
    let server = serve().await;
    let client = server.client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "apps");
    let all: Api<Pod> = Api::all(client);
    for (name, node) in [("a-0", "n1"), ("b-0", "n1"), ("c-0", "n2")] {
        pods.create(&PostParams::default(), &bound_pod(name, node))
            .await
            .unwrap();
    }
    let on = |node: &str| kube::api::ListParams::default().fields(&format!("spec.nodeName={node}"));
    let names = |list: kube::core::ObjectList<Pod>| -> Vec<String> {
        list.items.into_iter().map(|p| p.name_any()).collect()
    };
    let before = all.list(&on("n1")).await.unwrap();
    assert_eq!(names(before.clone()), ["a-0", "b-0"]);
    let before_rv = before.metadata.resource_version.clone();

    pods.delete("a-0", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &bound_pod("a-0", "n2"))
        .await
        .unwrap();
    assert_eq!(names(all.list(&on("n1")).await.unwrap()), ["b-0"]);
    assert_eq!(names(all.list(&on("n2")).await.unwrap()), ["a-0", "c-0"]);
    assert!(all.list(&on("n9")).await.unwrap().items.is_empty());

    // One pod per page: the continue token resumes within the node's pods.
    let first = all.list(&on("n2").limit(1)).await.unwrap();
    let token = first.metadata.continue_.clone().expect("a second page");
    assert_eq!(names(first), ["a-0"]);
    let second = all
        .list(&on("n2").limit(1).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(names(second), ["c-0"]);

    // As of before the move, a-0 was on n1 and not on n2.
    let then = |node: &str| kube::api::ListParams {
        resource_version: before_rv.clone(),
        version_match: Some(kube::api::VersionMatch::Exact),
        ..on(node)
    };
    assert_eq!(names(all.list(&then("n1")).await.unwrap()), ["a-0", "b-0"]);
    assert_eq!(names(all.list(&then("n2")).await.unwrap()), ["c-0"]);
}

/// The next event of a watch of pods, as `TYPE name`, or what came instead.
async fn next_event(
    events: &mut futures::stream::BoxStream<'static, kube::Result<kube::core::WatchEvent<Pod>>>,
) -> String {
    use futures::TryStreamExt;
    use kube::core::WatchEvent;
    match tokio::time::timeout(Duration::from_secs(10), events.try_next()).await {
        Ok(Ok(Some(WatchEvent::Added(p)))) => format!("ADDED {}", p.name_any()),
        Ok(Ok(Some(WatchEvent::Deleted(p)))) => format!("DELETED {}", p.name_any()),
        Ok(Ok(Some(WatchEvent::Modified(p)))) => format!("MODIFIED {}", p.name_any()),
        other => format!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_of_a_nodes_pods_reports_that_nodes_pods_and_no_others() {
    use futures::StreamExt;
    use kube::api::WatchParams;
    let server = serve().await;
    let client = server.client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "apps");
    let all: Api<Pod> = Api::all(client);
    let rv = all.list(&Default::default()).await.unwrap().metadata;
    let rv = rv.resource_version.unwrap();
    let on_n1 = WatchParams::default().fields("spec.nodeName=n1");
    let mut on_n1 = all.watch(&on_n1, &rv).await.unwrap().boxed();

    // Pods on other nodes are not reported, whatever happens to them; n1's are.
    pods.create(&PostParams::default(), &bound_pod("x-0", "n2"))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &bound_pod("a-0", "n1"))
        .await
        .unwrap();
    pods.patch(
        "x-0",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"seen": "no"}}})),
    )
    .await
    .unwrap();
    pods.delete("a-0", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let mut seen = Vec::new();
    while seen.last().is_none_or(|e| e != "DELETED a-0") {
        seen.push(next_event(&mut on_n1).await);
        assert!(seen.len() < 5, "n1's watch reported {seen:?}");
    }
    assert!(seen.contains(&"ADDED a-0".to_string()), "{seen:?}");
    assert!(!seen.iter().any(|e| e.ends_with(" x-0")), "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_logs_of_a_job_reads_that_jobs_pod() {
    use nodewright_reconciler::job::Job;

    if common::kubectl::which("kubectl").is_none() {
        println!("kubectl is not on PATH; skipping the kubectl test");
        return;
    }
    let server = serve().await;
    let client = server.client().await.unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    // Two Jobs whose templates carry the same labels: only the generated selector tells
    // their pods apart.
    for (name, node) in [("first", "n0"), ("second", "n1")] {
        let job: Job = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"template": {
                "metadata": {"labels": {"app": "same"}},
                "spec": {"restartPolicy": "Never", "nodeName": node,
                         "containers": [{"name": "main", "image": "example/none:1"}]}}}}))
        .unwrap();
        jobs.create(&PostParams::default(), &job).await.unwrap();
    }
    eventually("both Jobs have a pod", || async {
        pods.list(&Default::default()).await.unwrap().items.len() >= 2
    })
    .await;
    let (code, out, err) = common::kubectl::run(
        &server,
        &["logs", "job/second", "--all-containers", "--prefix", "-v=6"],
        "",
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    // kubectl finds the Job's pods by its selector (`-v=6` logs each request it makes).
    let uid = jobs.get("second").await.unwrap().metadata.uid.unwrap();
    assert!(
        err.contains(&format!(
            "pods?labelSelector=batch.kubernetes.io%2Fcontroller-uid%3D{uid}"
        )),
        "{err}"
    );
    assert!(err.contains("/pods/second-"), "{err}");
    assert!(!err.contains("/pods/first-"), "{err}");
}

/// The paths the server serves, each a prefix the fuzzer extends with garbage.
const PATHS: &[&str] = &[
    "/",
    "/api",
    "/api/v1",
    "/apis",
    "/apis/batch",
    "/apis/batch/v1",
    "/version",
    "/healthz",
    "/readyz",
    "/livez",
    "/openapi/v2",
    "/openapi/v3",
    "/openapi/v3/api/v1",
    "/openapi/v3/apis/nodewright.nvidia.com/v1alpha1",
    "/api/v1/nodes",
    "/api/v1/nodes/n0",
    "/api/v1/nodes/n1/status",
    "/api/v1/namespaces",
    "/api/v1/namespaces/default",
    "/api/v1/namespaces/nodewright/configmaps",
    "/api/v1/namespaces/nodewright/configmaps/c",
    "/api/v1/namespaces/nodewright/pods",
    "/api/v1/namespaces/nodewright/pods/p/log",
    "/api/v1/namespaces/nodewright/pods/p/eviction",
    "/api/v1/pods",
    "/api/v1/events",
    "/apis/batch/v1/namespaces/nodewright/jobs",
    "/apis/batch/v1/namespaces/nodewright/jobs/j",
    "/apis/policy/v1/namespaces/apps/poddisruptionbudgets",
    "/apis/coordination.k8s.io/v1/namespaces/nodewright/leases/l",
    "/apis/events.k8s.io/v1/namespaces/default/events",
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
    "/apis/nodewright.nvidia.com/v1alpha1/nodewrights",
    "/apis/nodewright.nvidia.com/v1alpha1/nodewrights/rollout/status",
    "/apis/nodewright.nvidia.com/v1alpha1/deploymentpolicies/p",
    "/apis/apps/v1/namespaces/apps/daemonsets",
    "/apis/apps/v1/namespaces/apps/deployments/d/scale",
    "/apis/apps/v1/replicasets",
    "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n0",
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com",
    "/apis/example.com/v1/namespaces/default/widgets",
    "/apis/example.com/v1/namespaces/default/widgets/w/scale",
    "/api/v1/namespaces/default/pods/p/status",
];

/// Methods, writes weighted up: they are where bodies are read.
fn method() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        3 => Just("POST"),
        3 => Just("PUT"),
        3 => Just("PATCH"),
        2 => Just("GET"),
        2 => Just("DELETE"),
        1 => prop::sample::select(&["HEAD", "OPTIONS", "BREW"][..]),
    ]
}

const CONTENT_TYPES: &[&str] = &[
    "application/json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/json-patch+json",
    "application/apply-patch+yaml",
    "application/yaml",
    "application/vnd.kubernetes.protobuf",
    "text/plain",
];

/// Query parameter names: the ones the server reads and some it does not.
const PARAMS: &[&str] = &[
    "watch",
    "timeoutSeconds",
    "resourceVersion",
    "resourceVersionMatch",
    "limit",
    "continue",
    "labelSelector",
    "fieldSelector",
    "gracePeriodSeconds",
    "allowWatchBookmarks",
    "sendInitialEvents",
    "dryRun",
    "fieldManager",
    "fieldValidation",
    "force",
    "tailLines",
    "limitBytes",
    "follow",
    "previous",
    "container",
    "verbose",
    "pretty",
    "frobnicate",
];

/// Query values: huge, negative and malformed numbers, booleans, selectors, garbage.
fn query_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("18446744073709551615".to_string()),
        Just("9223372036854775807".to_string()),
        Just("-9223372036854775808".to_string()),
        Just("-1".to_string()),
        Just("0".to_string()),
        Just("1".to_string()),
        Just("true".to_string()),
        Just("All".to_string()),
        Just("a=b,c!=d".to_string()),
        Just("metadata.name=n0".to_string()),
        Just("spec.bogus=1".to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        "[a-z0-9=!,()]{0,12}",
        any::<String>(),
    ]
}

/// A JSON value of some depth, objects keyed by field names the handlers read.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        "[a-z0-9./-]{0,10}".prop_map(Value::from),
    ];
    let key = prop_oneof![
        Just("metadata".to_string()),
        Just("name".to_string()),
        Just("namespace".to_string()),
        Just("labels".to_string()),
        Just("kind".to_string()),
        Just("apiVersion".to_string()),
        Just("spec".to_string()),
        Just("status".to_string()),
        Just("op".to_string()),
        Just("path".to_string()),
        Just("value".to_string()),
        Just("gracePeriodSeconds".to_string()),
        "[a-z]{1,6}",
    ];
    leaf.prop_recursive(4, 24, 5, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(key.clone(), inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Bodies: JSON values (objects shaped like Kubernetes objects, and values of every other
/// type at the top), truncated JSON, bytes that are not UTF-8, nothing.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let object = (
        "[a-z0-9.-]{0,8}",
        json_value(),
        prop::collection::btree_map("[a-z./]{1,8}", "[a-zA-Z0-9 ._-]{0,8}", 0..3),
    )
        .prop_map(|(name, spec, labels)| {
            json!({"metadata": {"name": name, "labels": labels}, "spec": spec, "data": spec})
        });
    prop_oneof![
        3 => object.prop_map(|v| v.to_string().into_bytes()),
        3 => json_value().prop_map(|v| v.to_string().into_bytes()),
        1 => (json_value(), any::<prop::sample::Index>()).prop_map(|(v, cut)| {
            let text = v.to_string().into_bytes();
            let at = cut.index(text.len().max(1));
            text[..at.min(text.len())].to_vec()
        }),
        1 => prop::collection::vec(any::<u8>(), 0..64),
        1 => Just(Vec::new()),
        1 => Just(b"\xff\xfe{\"metadata\":".to_vec()),
        // A protobuf envelope around garbage.
        1 => prop::collection::vec(any::<u8>(), 0..64).prop_map(|b| [&b"k8s\0"[..], &b].concat()),
    ]
}

/// A path: a served prefix, then up to two segments that may be garbage (percent-encoded).
fn path() -> impl Strategy<Value = String> {
    let segment = prop_oneof![
        Just("status".to_string()),
        Just("log".to_string()),
        Just("eviction".to_string()),
        Just("scale".to_string()),
        Just("namespaces".to_string()),
        Just("..".to_string()),
        Just("%00".to_string()),
        "[a-z0-9.-]{1,8}",
        any::<String>()
            .prop_map(|s| { s.bytes().map(|b| format!("%{b:02X}")).collect::<String>() }),
    ];
    let extra = prop_oneof![
        3 => Just(Vec::new()),
        2 => prop::collection::vec(segment, 1..3),
    ];
    (prop::sample::select(PATHS), extra).prop_map(|(prefix, extra)| {
        let mut path = prefix.trim_end_matches('/').to_string();
        for s in extra {
            path.push('/');
            path.push_str(&s);
        }
        if path.is_empty() { "/".into() } else { path }
    })
}

fn query() -> impl Strategy<Value = String> {
    prop::collection::vec((prop::sample::select(PARAMS), query_value()), 0..4).prop_map(|pairs| {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (k, v) in pairs {
            query.append_pair(k, &v);
        }
        query.finish()
    })
}

#[test]
fn no_request_shape_makes_a_handler_panic_and_every_refusal_is_a_status() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = runtime.block_on(serve());
    let address = server.address();
    // A CRD created through the API, so its resources are fuzzed too.
    let crd = serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {
                    "status": {},
                    "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}
                },
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "replicas": {"type": "integer", "minimum": 0, "default": 1},
                        "size": {"type": "string", "enum": ["s", "m"]}
                    }},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                }}}
            }]
        }
    });
    let created = raw(
        address,
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        "application/json",
        crd.to_string().as_bytes(),
    )
    .unwrap();
    assert_eq!(created.code, 201, "{}", created.text());
    let config = ProptestConfig {
        cases: 2048,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(
        method in method(),
        path in path(),
        query in query(),
        content_type in prop::sample::select(CONTENT_TYPES),
        body in body(),
    )| {
        let target = if query.is_empty() { path.clone() } else { format!("{path}?{query}") };
        let reply = raw(address, method, &target, content_type, &body);
        let reply = match reply {
            Ok(reply) => reply,
            Err(e) => return Err(TestCaseError::fail(e)),
        };
        // A resourceVersion the server has not reached is the one 5xx a real server gives
        // to a well-formed request (504 Too large resource version).
        prop_assert!(
            reply.code < 500 || reply.code == 504,
            "{method} {target}: {} {}",
            reply.code,
            reply.text()
        );
        if reply.code >= 400 && method != "HEAD" {
            status(&reply);
        }
    });
    // The server outlived every case.
    let nodes = raw(address, "GET", "/api/v1/nodes", "application/json", b"").unwrap();
    assert_eq!(nodes.code, 200);
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_body_in_yaml_or_json_is_stored_without_its_unknown_fields_and_warned_about() {
    let server = serve().await;
    let address = server.address();
    blocking(move || {
        let path = "/apis/coordination.k8s.io/v1/namespaces/nodewright/leases/applied?fieldManager=probe";
        let yaml = "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: applied\nspec:\n  holderIdentity: v\ndatum: x\n";
        let json = r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"applied"},"spec":{"holderIdentity":"w"},"datum":"y"}"#;
        for (body, value) in [(yaml, "v"), (json, "w")] {
            let reply = raw(
                address,
                "PATCH",
                path,
                "application/apply-patch+yaml",
                body.as_bytes(),
            )
            .unwrap();
            assert!(reply.code == 200 || reply.code == 201, "{}", reply.text());
            assert_eq!(
                reply.header("warning"),
                Some(r#"299 - "unknown field \"datum\"""#),
                "{body}"
            );
            let stored = raw(
                address,
                "GET",
                "/apis/coordination.k8s.io/v1/namespaces/nodewright/leases/applied",
                "application/json",
                b"",
            )
            .unwrap()
            .json();
            assert_eq!(stored["spec"], json!({"holderIdentity": value}), "{body}");
            assert!(stored.get("datum").is_none(), "{stored}");
        }
    })
    .await;
}
