//! Issue 8's "done when": the real `nodewright run` binary against `sim serve` over loopback
//! with a bare Git remote holding examples/fleet — the rollout completes with the expected
//! node annotations (read back with kube-rs and kubectl); kill -9 mid-rollout and restart
//! converges with no duplicate Jobs; two replicas with leader election: only the leader writes.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::ListParams;
use nodewright_reconciler::cli::fleet::Fleet;
use nodewright_reconciler::scenario::invariants::duplicate_jobs;
use nodewright_reconciler::sim::http::{ServeOptions, SimServer};
use nodewright_schema::{NodeState, State, Status, keys};

const NS: &str = "nodewright";

const FLEET: &str = r#"
cluster:
  nodes:
    - generate: {count: 1, namePrefix: canary-, labels: {nvidia.com/gpu.present: "true", rollout.example.com/pool: canary}}
    - generate: {count: 2, namePrefix: gpu-, labels: {nvidia.com/gpu.present: "true", rollout.example.com/pool: production}}
packages:
  example/tuning: {default: {duration: 3s}, rebootTakes: 20s}
  example/driver: {default: {duration: 4s}, rebootTakes: 30s}
  example/toolkit: {default: {duration: 3s}}
"#;

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// A bare remote whose `main` holds examples/fleet; returns its file:// URL.
fn remote(dir: &Path) -> String {
    let bare = dir.join("fleet.git");
    std::fs::create_dir_all(&bare).unwrap();
    git(&bare, &["init", "--bare", "-q", "-b", "main"]);
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q", "-b", "main"]);
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/fleet");
    copy_dir(&examples, &work);
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-q", "-m", "fleet"]);
    git(&work, &["push", "-q", bare.to_str().unwrap(), "main"]);
    format!("file://{}", bare.display())
}

struct Setup {
    _dir: tempfile::TempDir,
    root: PathBuf,
    server: SimServer,
    kubeconfig: PathBuf,
    repo: String,
}

async fn setup(speed: f64) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let repo = remote(&root);
    let world = Fleet::parse(FLEET).unwrap().build(NS, 1).unwrap();
    let server = SimServer::start(
        world,
        ServeOptions {
            speed,
            ..ServeOptions::default()
        },
    )
    .await
    .unwrap();
    let kubeconfig = root.join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    Setup {
        _dir: dir,
        root,
        server,
        kubeconfig,
        repo,
    }
}

/// A `nodewright run` that is killed when the test ends, passed or failed, so a failing test
/// leaves no reconciler behind.
struct Running(Child);

impl std::ops::Deref for Running {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

impl Setup {
    /// Starts `nodewright run`; its stderr goes to `<name>.log`.
    fn run(&self, name: &str, extra: &[&str]) -> Running {
        let log = std::fs::File::create(self.root.join(format!("{name}.log"))).unwrap();
        Command::new(env!("CARGO_BIN_EXE_nodewright"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["--repo", &self.repo, "--no-status", "--no-progress"])
            .args(["--poll-interval", "1s"])
            .arg("--cache-dir")
            .arg(self.root.join(format!("cache-{name}")))
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map(Running)
            .unwrap()
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.root.join(format!("{name}.log"))).unwrap_or_default()
    }

    /// Checks "never two Jobs for one node/package/stage" every 20 ms until dropped.
    fn watch_duplicates(&self) -> (Arc<Mutex<Vec<String>>>, tokio::task::JoinHandle<()>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let world = self.server.world().clone();
        let record = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let found = world.read(|w| duplicate_jobs(&w.sim));
                record.lock().unwrap().extend(found);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        (seen, task)
    }
}

async fn wait_exit(child: &mut Child, limit: Duration, setup: &Setup, name: &str) {
    let end = tokio::time::Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(
                status.success(),
                "{name} exited with {status}:\n{}",
                setup.log(name)
            );
            return;
        }
        if tokio::time::Instant::now() > end {
            let _ = child.kill();
            panic!("{name} did not converge in time:\n{}", setup.log(name));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn wait_for(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let end = tokio::time::Instant::now() + limit;
    while !check() {
        assert!(
            tokio::time::Instant::now() < end,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every node carries complete state for both NodeWrights of examples/fleet, read with
/// kube-rs, and is schedulable again.
async fn assert_converged(setup: &Setup) {
    let client = setup.server.client().await.unwrap();
    let nodes = Api::<Node>::all(client)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(nodes.items.len(), 3);
    for node in &nodes.items {
        let name = node.metadata.name.clone().unwrap();
        let ann = node.metadata.annotations.clone().unwrap_or_default();
        for (nw, packages) in [
            ("gpu-tuning", &["tuning|1.4.0"][..]),
            ("gpu-driver", &["driver|570.124.6", "toolkit|1.17.4"][..]),
        ] {
            assert_eq!(
                ann.get(&keys::status(nw)).map(|s| s.parse::<Status>()),
                Some(Ok(Status::Complete)),
                "{name}: status of {nw}"
            );
            let state = NodeState::parse(&ann[&keys::node_state(nw)]).unwrap();
            for package in packages {
                assert_eq!(
                    state.0.get(*package).and_then(|p| p.state),
                    Some(State::Complete),
                    "{name}: {nw} {package} in {state:?}"
                );
            }
        }
        assert_ne!(
            node.spec.as_ref().and_then(|s| s.unschedulable),
            Some(true),
            "{name} uncordoned"
        );
    }
}

fn kubectl_annotation(kubeconfig: &Path, node: &str, key: &str) -> Option<String> {
    let jsonpath = format!(
        "{{.metadata.annotations.{}}}",
        key.replace('.', "\\.").replace('/', "\\/")
    );
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["get", "node", node, "-o", &format!("jsonpath={jsonpath}")])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodewright_run_rolls_examples_fleet_out_through_sim_serve() {
    let setup = setup(30.0).await;
    let (duplicates, watcher) = setup.watch_duplicates();
    let mut run = setup.run("run", &["--until-converged", "6h"]);
    wait_exit(&mut run, Duration::from_secs(300), &setup, "run").await;
    watcher.abort();
    assert_converged(&setup).await;
    assert!(duplicates.lock().unwrap().is_empty(), "{duplicates:?}");
    let kubeconfig = setup.kubeconfig.clone();
    let read = tokio::task::spawn_blocking(move || {
        kubectl_annotation(&kubeconfig, "canary-0", &keys::status("gpu-driver"))
    })
    .await
    .unwrap();
    match read {
        Some(value) => assert_eq!(value, "complete"),
        None => println!("kubectl is not available; read back with kube-rs only"),
    }

    // `nodewright package logs` reads the retained stage pods' container logs through the
    // same API; -o json carries one entry per header of the text.
    let logs = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_nodewright"))
            .args(["package", "logs", "tuning", "--nodewright", "gpu-tuning"])
            .arg("--kubeconfig")
            .arg(&setup.kubeconfig)
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "package logs: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let text = tokio::task::block_in_place(|| logs(&["--tail", "1"]));
    let headers: Vec<&str> = text.lines().filter(|l| l.starts_with("==> ")).collect();
    assert!(!headers.is_empty(), "{text}");
    let applied: Vec<&str> = text
        .split("==> ")
        .filter(|s| s.contains("container tuning-apply [exit 0"))
        .collect();
    assert!(!applied.is_empty(), "{text}");
    for section in applied {
        assert!(
            section.ends_with("apply succeeded: exit code 0\n"),
            "--tail 1 keeps the last line: {section}"
        );
    }
    let json: serde_json::Value =
        serde_json::from_str(&tokio::task::block_in_place(|| logs(&["-o", "json"]))).unwrap();
    assert_eq!(json.as_array().unwrap().len(), headers.len(), "{json}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodewright_run_killed_mid_rollout_converges_after_restart() {
    let setup = setup(30.0).await;
    let (duplicates, watcher) = setup.watch_duplicates();
    let world = setup.server.world().clone();
    // Kill -9 once the first stage Job exists, then again once a node is cordoned for the
    // driver's reboot, then let a third run converge.
    let mut first = setup.run("first", &[]);
    wait_for(Duration::from_secs(120), "a first Job", || {
        world.read(|w| !w.sim.jobs().is_empty())
    })
    .await;
    first.kill().unwrap();
    first.wait().unwrap();
    let mut second = setup.run("second", &[]);
    wait_for(Duration::from_secs(180), "a cordon for gpu-driver", || {
        world.read(|w| {
            w.sim.nodes().values().any(|n| {
                n.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(&keys::cordon("gpu-driver")))
            })
        })
    })
    .await;
    second.kill().unwrap();
    second.wait().unwrap();
    let mut third = setup.run("third", &["--until-converged", "6h"]);
    wait_exit(&mut third, Duration::from_secs(300), &setup, "third").await;
    watcher.abort();
    assert_converged(&setup).await;
    assert!(duplicates.lock().unwrap().is_empty(), "{duplicates:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_nodewright_run_replicas_only_the_leader_writes() {
    let setup = setup(30.0).await;
    let settings = setup.root.join("settings.yaml");
    std::fs::write(&settings, "leaderElection: true\n").unwrap();
    let settings_arg = settings.to_str().unwrap().to_string();
    let leases: Api<Lease> = Api::namespaced(setup.server.client().await.unwrap(), NS);
    let holder = || async {
        leases
            .get_opt(nodewright_reconciler::cluster::lease::LEASE_NAME)
            .await
            .unwrap()
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
    };
    let mut a = setup.run("a", &["--settings", &settings_arg]);
    let a_suffix = format!("-{}", a.id());
    let end = tokio::time::Instant::now() + Duration::from_secs(60);
    while !holder().await.is_some_and(|h| h.ends_with(&a_suffix)) {
        assert!(tokio::time::Instant::now() < end, "a never led");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut b = setup.run(
        "b",
        &["--settings", &settings_arg, "--until-converged", "6h"],
    );
    // While a lives, it holds the Lease and b writes nothing (its writes are refused locally).
    let world = setup.server.world().clone();
    wait_for(Duration::from_secs(120), "the rollout to start", || {
        world.read(|w| !w.sim.jobs().is_empty())
    })
    .await;
    for _ in 0..20 {
        assert!(holder().await.is_some_and(|h| h.ends_with(&a_suffix)));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        !setup.log("b").contains("became the leader"),
        "b led while a held the lease:\n{}",
        setup.log("b")
    );
    // The follower stands by: it says so and never even attempts a write (no refused writes,
    // no status commits from it).
    assert!(
        setup.log("b").contains("standby:"),
        "b did not say it stands by:\n{}",
        setup.log("b")
    );
    assert!(
        !setup.log("b").contains("not the leader"),
        "b attempted writes as a follower:\n{}",
        setup.log("b")
    );
    a.kill().unwrap();
    a.wait().unwrap();
    // After the lease duration b takes over and finishes the rollout.
    wait_exit(&mut b, Duration::from_secs(300), &setup, "b").await;
    assert!(setup.log("b").contains("became the leader"));
    assert!(holder().await.is_none(), "b released the lease on exit");
    assert_converged(&setup).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sim_serve_command_writes_a_working_kubeconfig() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("nested").join("kubeconfig.yaml");
    let mut serve = Command::new(env!("CARGO_BIN_EXE_nodewright"))
        .args(["sim", "serve", "--nodes", "4", "--speed", "5"])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let path = kubeconfig.clone();
    wait_for(Duration::from_secs(30), "the kubeconfig", move || {
        path.is_file()
    })
    .await;
    let budget = nodewright_reconciler::cluster::api_budget::ApiBudget::new(20.0, 30).unwrap();
    let (client, clock) = nodewright_reconciler::cluster::kube::client(Some(&kubeconfig), &budget)
        .await
        .unwrap();
    assert!(matches!(
        clock,
        nodewright_reconciler::cluster::kube::Clock::Scaled { speed, .. } if speed == 5.0
    ));
    let nodes = Api::<Node>::all(client)
        .list(&ListParams::default())
        .await
        .unwrap();
    let mut names: Vec<String> = nodes
        .items
        .iter()
        .map(|n| n.metadata.name.clone().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["node-1", "node-2", "node-3", "node-4"]);
    assert!(
        nodes
            .items
            .iter()
            .all(|n| { n.metadata.labels.as_ref().unwrap()["nvidia.com/gpu.present"] == "true" })
    );
    serve.kill().unwrap();
    let mut out = String::new();
    std::io::Read::read_to_string(serve.stdout.as_mut().unwrap(), &mut out).unwrap();
    serve.wait().unwrap();
    assert!(out.contains("kubectl --kubeconfig"), "{out}");
    // Issue 28 item 13: `--sim` reads the default kubeconfig only, so the hint names the file
    // that was written.
    assert!(
        out.contains(&format!(
            "nodewright node status --kubeconfig {}",
            kubeconfig.display()
        )),
        "{out}"
    );
    assert!(!out.contains("--sim"), "{out}");
}

/// `--until-converged` after a new commit waits for the new generation: a NodeWright still
/// reading `complete` for the previous spec is not converged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn until_converged_after_a_new_commit_waits_for_the_new_generation() {
    let setup = setup(30.0).await;
    let mut first = setup.run("first", &["--until-converged", "6h"]);
    wait_exit(&mut first, Duration::from_secs(300), &setup, "first").await;

    // Bump gpu-tuning on the remote.
    let work = setup.root.join("work");
    let manifest = work.join("gpu-tuning.yaml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, text.replace("version: 1.4.0", "version: 1.5.0")).unwrap();
    git(&work, &["commit", "-q", "-am", "tuning 1.5.0"]);
    let bare = setup.root.join("fleet.git");
    git(&work, &["push", "-q", bare.to_str().unwrap(), "main"]);

    let mut second = setup.run("second", &["--until-converged", "6h"]);
    wait_exit(&mut second, Duration::from_secs(300), &setup, "second").await;
    let client = setup.server.client().await.unwrap();
    let nw = Api::<nodewright_schema::NodeWright>::all(client.clone())
        .get("gpu-tuning")
        .await
        .unwrap();
    assert!(nw.is_converged(), "{:?}", nw.status);
    let nodes = Api::<Node>::all(client)
        .list(&ListParams::default())
        .await
        .unwrap();
    for node in &nodes.items {
        let ann = node.metadata.annotations.clone().unwrap_or_default();
        let state = NodeState::parse(&ann[&keys::node_state("gpu-tuning")]).unwrap();
        assert_eq!(
            state.0.get("tuning|1.5.0").and_then(|p| p.state),
            Some(State::Complete),
            "{:?}: {state:?}",
            node.metadata.name
        );
    }
}
