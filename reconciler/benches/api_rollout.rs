//! Benchmark (not a test): a rollout through the Kubernetes API (issue 22). Starts `sim serve`
//! in this process with N GPU nodes, runs the `nodewright` binary against it as a user would
//! (`run --repo R --kubeconfig K --until-converged`), for one NodeWright with two packages —
//! one of them rebooting the node — at a 10 % interruption budget, and prints:
//! - wall time, and the virtual time to converge against the in-process simulator's for the
//!   same fleet;
//! - the reconciler's requests per node, by verb and resource (its own summary);
//! - its node writes per node-state transition: each change of a package's stage or state in a
//!   node's state annotation, of the node's Status, of its cordon or of the NodeWright's
//!   conditions on it, counted by a watch of this process (and, apart, per entry change);
//! - the writes `sim serve` accepted without a change (a write a controller could leave out),
//!   and the least time the request budget (`--kube-qps`, `--kube-burst`) allows for the
//!   requests the rollout made;
//! - its CPU seconds and peak resident memory;
//! - `sim serve`'s latency for one object (a GET of a node, a merge PATCH of a ConfigMap, as
//!   this process's client sees it on loopback), idle before the rollout and while it runs.
//!
//! Figures only, nothing is asserted.
//!
//! Run: `cargo bench -p nodewright-reconciler --bench api_rollout`. Environment:
//! `API_BENCH_NODES` (default 100), `API_BENCH_SPEED` (virtual seconds per wall second, default
//! 30), `API_BENCH_QPS` and `API_BENCH_BURST` (the reconciler's `--kube-qps`/`--kube-burst`,
//! default 20 and 30 as upstream's operator), `API_BENCH_LOG` (a file to keep the reconciler's
//! log in; `RUST_LOG` reaches it).

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use nodewright_reconciler::cli::fleet::Fleet;
use nodewright_reconciler::cluster::Desired;
use nodewright_reconciler::diff::RolloutSimulator;
use nodewright_reconciler::diff::projection::FleetProjection;
use nodewright_reconciler::settings::Settings;
use nodewright_reconciler::sim::http::{ServeOptions, SimServer};
use nodewright_schema::{NodeState, NodeWright, keys};

/// `sim serve` as the `nodewright` binary runs it, with the same allocator: the system's
/// would make every request of the server under test dearer than a user's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const FLEET: &str = "apiVersion: nodewright.nvidia.com/v1alpha1
kind: NodeWright
metadata:
  name: gpu
spec:
  nodeSelectors:
    matchLabels:
      nvidia.com/gpu.present: \"true\"
  interruptionBudget:
    percent: 10
  packages:
    tuning:
      version: 1.0.0
      image: example/tuning
    driver:
      version: 1.0.0
      image: example/driver
      interrupt:
        type: reboot
";

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn git(dir: &std::path::Path, args: &[&str]) {
    let status = Command::new("git")
        .args([
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@example.com",
        ])
        .args(args)
        .current_dir(dir)
        .status()
        .expect("git runs");
    assert!(status.success(), "git {args:?}");
}

/// Changes of the nodes' recorded state for the bench's NodeWright, as a watch of the nodes
/// sees them.
#[derive(Default)]
struct NodeChanges {
    /// A package's (stage, state) in the node-state annotation.
    entries: AtomicU64,
    /// The node's Status (`status_<nw>`: waiting, in_progress, blocked, complete, …).
    statuses: AtomicU64,
    /// The node's cordon (`spec.unschedulable`), set or released.
    cordons: AtomicU64,
    /// The NodeWright's conditions on the node (`<nw>/NotReady`, `<nw>/Erroring`).
    conditions: AtomicU64,
}

impl NodeChanges {
    fn total(&self) -> u64 {
        [
            &self.entries,
            &self.statuses,
            &self.cordons,
            &self.conditions,
        ]
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .sum()
    }
}

/// What one node last showed: entries, Status, cordon, conditions.
#[derive(Default)]
struct Seen {
    entries: BTreeMap<String, String>,
    status: Option<String>,
    cordoned: bool,
    conditions: BTreeMap<String, String>,
}

/// Counts every change of the recorded state of every node (see [`NodeChanges`]).
async fn count_transitions(api: Api<Node>, changes: Arc<NodeChanges>) {
    let key = keys::node_state("gpu");
    let status_key = keys::status("gpu");
    let condition_prefix = keys::node_condition_prefix("gpu");
    let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
    let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).applied_objects());
    let bump = |counter: &AtomicU64| counter.fetch_add(1, Ordering::Relaxed);
    while let Some(event) = events.next().await {
        let Ok(node) = event else { continue };
        let known = seen
            .entry(node.metadata.name.clone().unwrap_or_default())
            .or_default();
        let annotations = node.metadata.annotations.as_ref();
        let status = annotations.and_then(|a| a.get(&status_key)).cloned();
        if status.is_some() && known.status != status {
            bump(&changes.statuses);
            known.status = status;
        }
        let cordoned = node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
        if cordoned != known.cordoned {
            bump(&changes.cordons);
            known.cordoned = cordoned;
        }
        let conditions = node.status.as_ref().and_then(|s| s.conditions.as_ref());
        for condition in conditions.into_iter().flatten() {
            if condition.type_.starts_with(&condition_prefix)
                && known.conditions.get(&condition.type_) != Some(&condition.status)
            {
                bump(&changes.conditions);
                known
                    .conditions
                    .insert(condition.type_.clone(), condition.status.clone());
            }
        }
        let Some(value) = annotations.and_then(|a| a.get(&key)) else {
            continue;
        };
        let Ok(state) = NodeState::parse(value) else {
            continue;
        };
        for (package, entry) in state.0.iter() {
            let now = format!("{:?}/{:?}", entry.stage, entry.state);
            if known.entries.get(package) != Some(&now) {
                bump(&changes.entries);
                known.entries.insert(package.clone(), now);
            }
        }
    }
}

/// Latencies of one kind of request.
#[derive(Default)]
struct Latencies(Vec<Duration>);

impl Latencies {
    fn report(&mut self, what: &str) {
        self.0.sort();
        let at = |q: f64| {
            let i = ((self.0.len() as f64 * q) as usize).min(self.0.len().saturating_sub(1));
            self.0.get(i).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
        };
        println!(
            "  {what}: median {:.2} ms, p99 {:.2} ms ({} requests)",
            at(0.5),
            at(0.99),
            self.0.len()
        );
    }
}

/// One GET of a node and one merge PATCH of a ConfigMap, timed.
async fn probe(
    nodes: &Api<Node>,
    maps: &Api<ConfigMap>,
    node: &str,
    round: u64,
) -> (Duration, Duration) {
    let started = Instant::now();
    nodes.get(node).await.expect("GET node");
    let get = started.elapsed();
    let patch = serde_json::json!({"data": {"round": round.to_string()}});
    let started = Instant::now();
    maps.patch(
        "latency-probe",
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .expect("PATCH configmap");
    (get, started.elapsed())
}

/// Probes every 50 ms until `stop`, then hands back what it measured.
async fn probe_while(
    nodes: Api<Node>,
    maps: Api<ConfigMap>,
    node: String,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> (Latencies, Latencies) {
    let (mut gets, mut patches) = (Latencies::default(), Latencies::default());
    let mut stop = std::pin::pin!(stop);
    for round in 0.. {
        let (get, patch) = probe(&nodes, &maps, &node, round).await;
        gets.0.push(get);
        patches.0.push(patch);
        tokio::select! {
            _ = &mut stop => break,
            () = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
    }
    (gets, patches)
}

fn main() {
    let nodes: usize = env("API_BENCH_NODES", 100);
    let speed: f64 = env("API_BENCH_SPEED", 30.0);
    let qps: f64 = env("API_BENCH_QPS", 20.0);
    let burst: u32 = env("API_BENCH_BURST", 30);
    println!(
        "api_rollout: {nodes} nodes, sim serve at {speed}x, reconciler at --kube-qps {qps} --kube-burst {burst}"
    );

    // The same fleet in the in-process simulator: the virtual time to beat.
    let nodewright: NodeWright = serde_yaml::from_str(FLEET).expect("the fleet parses");
    let desired = Desired {
        nodewrights: vec![nodewright],
        commit: "bench".into(),
        ..Default::default()
    };
    let projection = FleetProjection {
        fleet: Fleet::gpu_nodes(nodes),
        settings: Settings::default(),
        limit: Duration::from_secs(24 * 3600),
        // The reference projection is the bench's own: no budget applies.
        max_pairs: usize::MAX,
        max_pairs_at_once: usize::MAX,
    };
    let started = Instant::now();
    let reference = projection
        .simulate(&Desired::default(), &desired)
        .expect("the in-process simulation runs");
    let reference_secs = reference.json["durationSeconds"].as_u64().unwrap_or(0);
    println!(
        "in-process simulator: converged={} in {reference_secs} s of virtual time ({:.1} s wall)",
        reference.json["converged"],
        started.elapsed().as_secs_f64()
    );

    let tmp = tempfile::tempdir().expect("a temporary directory");
    let repo = tmp.path().join("fleet");
    std::fs::create_dir_all(&repo).expect("the repository directory");
    std::fs::write(repo.join("gpu.yaml"), FLEET).expect("the manifest is written");
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "fleet"]);

    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let world = Fleet::gpu_nodes(nodes)
        .build("nodewright", 7)
        .expect("the fleet builds");
    let server = runtime
        .block_on(SimServer::start(
            world,
            ServeOptions {
                port: 0,
                speed,
                tick: Duration::from_millis(20),
                ..ServeOptions::default()
            },
        ))
        .expect("sim serve starts");
    let kubeconfig = tmp.path().join("kubeconfig.yaml");
    server
        .write_kubeconfig(&kubeconfig)
        .expect("the kubeconfig is written");
    let changes = Arc::new(NodeChanges::default());
    let client = runtime
        .block_on(server.client())
        .expect("a client of sim serve");
    runtime.spawn(count_transitions(Api::all(client.clone()), changes.clone()));

    let node_api: Api<Node> = Api::all(client.clone());
    let map_api: Api<ConfigMap> = Api::namespaced(client, "default");
    let probe_node = runtime
        .block_on(node_api.list(&Default::default()))
        .expect("the nodes list")
        .items
        .first()
        .and_then(|n| n.metadata.name.clone())
        .expect("a node");
    let mut map = ConfigMap::default();
    map.metadata.name = Some("latency-probe".into());
    runtime
        .block_on(map_api.create(&PostParams::default(), &map))
        .expect("the probe ConfigMap is created");
    let (mut gets, mut patches) = (Latencies::default(), Latencies::default());
    let mut lists = Latencies::default();
    runtime.block_on(async {
        for round in 0..200 {
            let (get, patch) = probe(&node_api, &map_api, &probe_node, round).await;
            gets.0.push(get);
            patches.0.push(patch);
        }
        for _ in 0..20 {
            let started = Instant::now();
            node_api
                .list(&Default::default())
                .await
                .expect("LIST nodes");
            lists.0.push(started.elapsed());
        }
    });
    println!("sim serve latency, idle ({nodes} nodes):");
    gets.report("GET node");
    patches.report("merge PATCH configmap");
    lists.report("LIST nodes");
    let (stop_probe, stopped) = tokio::sync::oneshot::channel();
    let probing = runtime.spawn(probe_while(node_api, map_api, probe_node, stopped));

    let virtual_start = server.clock().now();
    let unchanged_before = server.world().unchanged_updates();
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_nodewright"))
        .args(["run", "--repo"])
        .arg(&repo)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--until-converged", "12h", "--no-progress"])
        .args(["--kube-qps", &qps.to_string()])
        .args(["--kube-burst", &burst.to_string()])
        .output()
        .expect("the nodewright binary runs");
    let wall = started.elapsed();
    let _ = stop_probe.send(());
    let (mut gets, mut patches) = runtime.block_on(probing).expect("the probe ends");
    println!("sim serve latency while the rollout ran:");
    gets.report("GET node");
    patches.report("merge PATCH configmap");
    let virtual_secs = server.clock().now().duration_since(virtual_start).as_secs();
    let stderr = String::from_utf8_lossy(&output.stderr);
    // The reconciler's whole log, for a look at its passes (e.g. with `RUST_LOG=debug`).
    if let Some(path) = std::env::var_os("API_BENCH_LOG") {
        std::fs::write(&path, stderr.as_bytes()).expect("the reconciler's log is written");
    }
    println!(
        "through the API: exit {} after {:.1} s wall, {virtual_secs} s of virtual time ({:.2}× the in-process simulator's)",
        output.status.code().unwrap_or(-1),
        wall.as_secs_f64(),
        virtual_secs as f64 / reference_secs.max(1) as f64
    );
    let summary: Vec<&str> = stderr
        .lines()
        .skip_while(|l| !l.starts_with("API requests:"))
        .collect();
    for line in &summary {
        println!("{line}");
    }
    // The number a piece of the summary starts with (0 when the summary lacks it).
    let count = |text: Option<&str>| -> u64 {
        text.and_then(|t| t.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let first = summary.first().copied();
    let writes = count(first.and_then(|l| l.split("), ").nth(1)));
    let requests = count(first.and_then(|l| l.strip_prefix("API requests: ")));
    println!(
        "writes the server accepted without a change: {} of {writes}",
        server.world().unchanged_updates() - unchanged_before
    );
    // The budget admits `burst` requests at once and `qps` a second after that: the least
    // wall time the rollout's requests need, whatever the server and the engine do.
    let floor = requests.saturating_sub(u64::from(burst)) as f64 / qps;
    println!(
        "the request budget alone (--kube-qps {qps}, --kube-burst {burst}): {requests} requests need {floor:.1} s of wall time, {:.0} s of virtual time ({:.2}× the in-process simulator's)",
        floor * speed,
        floor * speed / reference_secs.max(1) as f64
    );
    // Node writes: the reconciler's `patch nodes` (annotations, labels, cordons) and `patch
    // nodes/status` (conditions) lines.
    let line = |what: &str| summary.iter().copied().find(|l| l.contains(what));
    let metadata_writes = count(line(" patch nodes ("));
    let status_writes = count(line(" patch nodes/status ("));
    let node_writes = metadata_writes + status_writes;
    let transitions = changes.total();
    let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    let entries = load(&changes.entries);
    println!(
        "node-state transitions: {transitions} ({:.1} per node: entries {entries}, Status {}, cordons {}, conditions {}); node writes {node_writes}, {:.2} per transition",
        transitions as f64 / nodes.max(1) as f64,
        load(&changes.statuses),
        load(&changes.cordons),
        load(&changes.conditions),
        node_writes as f64 / transitions.max(1) as f64,
    );
    // The spec writes some Status changes alone (waiting, blocked during a reboot, complete
    // after the last entry), so the annotation writes outnumber the entry changes.
    println!(
        "entries alone: node metadata writes per change of an entry: {:.2}; all writes per change of an entry: {:.2}",
        metadata_writes as f64 / entries.max(1) as f64,
        writes as f64 / entries.max(1) as f64
    );
    if !output.status.success() {
        println!("the reconciler's last lines:");
        for line in stderr
            .lines()
            .rev()
            .take(10)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
        {
            println!("  {line}");
        }
    }
}
