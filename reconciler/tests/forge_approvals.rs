//! Approval pull requests (issue 30) against a local HTTP stub that records every request,
//! with the approval branch pushed to a local bare repository: the exact REST calls to
//! create, update and close on GitHub and GitLab, and adoption after a restart.

mod common;

use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use nodewright_reconciler::forge::approvals::{ApprovalRequests, BranchTarget};
use nodewright_reconciler::forge::{ForgeClient, ForgeConfig, ForgeKind, Token};
use nodewright_reconciler::source::desired::ReadOptions;
use nodewright_reconciler::source::repo::{GitRepo, RemoteSpec};
use nodewright_reconciler::writeback::git::Author;
use nodewright_schema::approvals::Pending;
use nodewright_schema::keys::condition::{AWAITING_APPROVAL, READY};
use nodewright_schema::{NodeWright, NodeWrightSpec, NodeWrightStatus};
use serde_json::{Value, json};

use common::forge_stub::{self, Seen};
use common::{TIERS_POLICY, WorkRepo, git};

/// A stub answering 200 with the JSON `script` gives.
async fn stub(
    script: impl Fn(&Seen) -> Value + Send + Sync + 'static,
) -> (String, Arc<Mutex<Vec<Seen>>>) {
    forge_stub::stub(move |seen| (StatusCode::OK, vec![], script(seen))).await
}

/// The calls seen since the last look, as `METHOD uri` with their bodies.
fn take(seen: &Mutex<Vec<Seen>>) -> Vec<(String, Option<Value>)> {
    seen.lock()
        .unwrap()
        .drain(..)
        .map(|s| (format!("{} {}", s.method, s.uri), s.body))
        .collect()
}

const DRIVER: &str = "apiVersion: nodewright.nvidia.com/v1alpha1
kind: NodeWright
metadata:
  name: driver
  annotations:
    # production waits for reviews
    gitops.nodewright.nvidia.com/approval-required: production
spec:
  deploymentPolicy: tiers
  nodeSelectors: {matchLabels: {role: gpu}}
  packages:
    driver: {version: 1.0.0, image: example/driver}
";

/// A fleet repository, its bare remote, and the reconciler's mirror of that remote.
fn remote_and_mirror(dir: &Path) -> (std::path::PathBuf, BranchTarget) {
    remote_and_mirror_with(dir, DRIVER)
}

fn remote_and_mirror_with(dir: &Path, driver: &str) -> (std::path::PathBuf, BranchTarget) {
    let work = WorkRepo::init(&dir.join("work"));
    work.write("fleet/policy.yaml", TIERS_POLICY);
    work.write("fleet/driver.yaml", driver);
    work.commit("fleet");
    let bare = dir.join("origin.git");
    work.clone_bare(&bare);
    let remote = RemoteSpec::anonymous(format!("file://{}", bare.display()));
    let (mirror, _) = GitRepo::sync_remote(&remote, &dir.join("cache")).unwrap();
    let target = BranchTarget {
        repo: mirror,
        tracked: "main".into(),
        options: ReadOptions::default(),
        remote,
        author: Author::default(),
    };
    (bare, target)
}

fn condition(type_: &str, status: &str, message: String) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: "Test".into(),
        message,
        last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::UNIX_EPOCH,
        ),
        observed_generation: None,
    }
}

/// The driver NodeWright at generation 1 with production's `batch` waiting, `complete`
/// nodes done; `None` waits for nothing.
fn driver(waiting: Option<(u32, u32)>) -> NodeWright {
    let mut nw = NodeWright::new("driver", NodeWrightSpec::default());
    nw.metadata.generation = Some(1);
    let awaiting = match waiting {
        Some((batch, complete)) => condition(
            AWAITING_APPROVAL,
            "True",
            Pending {
                compartment: "production".into(),
                batch,
                complete,
                failed: 0,
            }
            .to_string(),
        ),
        None => condition(AWAITING_APPROVAL, "False", String::new()),
    };
    let mut ready = condition(READY, "False", "2/6 nodes complete".into());
    ready.observed_generation = Some(1);
    nw.status = Some(NodeWrightStatus {
        conditions: Some(vec![ready, awaiting]),
        ..NodeWrightStatus::default()
    });
    nw
}

fn client(kind: ForgeKind, url: &str, repository: &str) -> ForgeClient {
    ForgeClient::new(ForgeConfig {
        kind,
        base_url: url.to_string(),
        repository: repository.to_string(),
        token: Token::new("t0ken"),
    })
    .unwrap()
}

const BRANCH: &str = "nodewright/approve/driver/production-2";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_approval_pull_request_is_opened_updated_and_closed() {
    let dir = tempfile::tempdir().unwrap();
    let (bare, target) = remote_and_mirror(dir.path());
    // The forge's open pull requests: the one created, until it is closed.
    let pulls = Arc::new(Mutex::new(json!([])));
    let forge_pulls = pulls.clone();
    let (url, seen) = stub(move |s| match (s.method.as_str(), s.uri.as_str()) {
        ("GET", uri) if uri.contains("state=open&per_page") => forge_pulls.lock().unwrap().clone(),
        ("GET", _) => json!([]),
        ("POST", "/repos/fleet/os/pulls") => {
            let pull = json!({"number": 12, "body": s.body.as_ref().unwrap()["body"], "head": {"ref": BRANCH}});
            *forge_pulls.lock().unwrap() = json!([pull.clone()]);
            pull
        }
        ("PATCH", "/repos/fleet/os/pulls/12") if s.body.as_ref().unwrap()["state"] == "closed" => {
            *forge_pulls.lock().unwrap() = json!([]);
            json!({})
        }
        _ => json!({"id": 1}),
    })
    .await;
    let mut requests = ApprovalRequests::new(client(ForgeKind::GitHub, &url, "fleet/os"), target);

    let outcome = requests.sync(&[driver(Some((2, 2)))], 1_700_000_000).await;
    assert!(outcome.errors.is_empty(), "{:?}", outcome.errors);
    assert_eq!(outcome.opened, [12]);
    let calls = take(&seen);
    let lines: Vec<&str> = calls.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(
        lines,
        [
            "GET /repos/fleet/os/pulls?state=open&per_page=100&page=1",
            "GET /repos/fleet/os/pulls?head=fleet%3Anodewright%2Fapprove%2Fdriver%2Fproduction-2&state=open",
            "POST /repos/fleet/os/pulls",
        ]
    );
    let created = calls[2].1.as_ref().unwrap();
    assert_eq!(created["title"], "Approve driver production batch 2");
    assert_eq!(created["head"], BRANCH);
    assert_eq!(created["base"], "main");
    let body = created["body"].as_str().unwrap();
    assert!(body.contains("**Batch results:** compartment production: batch 2 waits for approval (2 nodes complete, 0 failed)"), "{body}");
    assert!(body.contains("**Ready:** 2/6 nodes complete"), "{body}");

    // The branch on the remote is the approval edit on top of main: one line of one file.
    assert_eq!(
        git(&bare, &["log", "-1", "--format=%s|%P", BRANCH]),
        format!(
            "Approve driver production batch 2|{}",
            git(&bare, &["rev-parse", "main"])
        )
    );
    assert_eq!(
        git(&bare, &["diff", "--numstat", "main", BRANCH]),
        "1\t0\tfleet/driver.yaml"
    );
    let edited = git(&bare, &["show", &format!("{BRANCH}:fleet/driver.yaml")]);
    assert!(edited.contains("    # production waits for reviews\n    gitops.nodewright.nvidia.com/approval-required: production\n    gitops.nodewright.nvidia.com/approved-batches: \"production=2\"\n"), "{edited}");

    // Same results: nothing is sent.
    let outcome = requests.sync(&[driver(Some((2, 2)))], 1_700_000_100).await;
    assert!(outcome.errors.is_empty() && outcome.updated.is_empty());
    assert!(take(&seen).is_empty());

    // New results: the body is rewritten.
    let outcome = requests.sync(&[driver(Some((2, 3)))], 1_700_000_200).await;
    assert_eq!(outcome.updated, [12], "{:?}", outcome.errors);
    let calls = take(&seen);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].0, "PATCH /repos/fleet/os/pulls/12");
    let body = calls[0].1.as_ref().unwrap();
    assert_eq!(
        body.as_object().unwrap().len(),
        1,
        "only the body changes: {body}"
    );
    assert!(
        body["body"]
            .as_str()
            .unwrap()
            .contains("(3 nodes complete, 0 failed)")
    );

    // The batch was approved and started: a comment, then closed.
    let outcome = requests.sync(&[driver(None)], 1_700_000_300).await;
    assert_eq!(outcome.closed, [12], "{:?}", outcome.errors);
    let calls = take(&seen);
    let lines: Vec<&str> = calls.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(
        lines,
        [
            "GET /repos/fleet/os/pulls?state=open&per_page=100&page=1",
            "POST /repos/fleet/os/issues/12/comments",
            "PATCH /repos/fleet/os/pulls/12"
        ]
    );
    assert!(
        calls[1].1.as_ref().unwrap()["body"]
            .as_str()
            .unwrap()
            .contains("no longer waits")
    );
    assert_eq!(calls[2].1.as_ref().unwrap(), &json!({"state": "closed"}));
    assert_eq!(*pulls.lock().unwrap(), json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merged_pull_request_is_neither_commented_on_nor_closed() {
    let dir = tempfile::tempdir().unwrap();
    let (_bare, target) = remote_and_mirror(dir.path());
    // Open when the reconciler starts, merged by a reviewer before the batch starts.
    let body = nodewright_reconciler::forge::approvals::wanted(&[driver(Some((2, 2)))])
        .remove(0)
        .body;
    let pulls = Arc::new(Mutex::new(
        json!([{"number": 12, "body": body, "head": {"ref": BRANCH}}]),
    ));
    let forge_pulls = pulls.clone();
    let (url, seen) = stub(move |_| forge_pulls.lock().unwrap().clone()).await;
    let mut requests = ApprovalRequests::new(client(ForgeKind::GitHub, &url, "fleet/os"), target);
    let outcome = requests.sync(&[driver(Some((2, 2)))], 1_700_000_000).await;
    assert!(
        outcome.errors.is_empty() && outcome.opened.is_empty(),
        "{outcome:?}"
    );
    take(&seen);
    *pulls.lock().unwrap() = json!([]);
    let outcome = requests.sync(&[driver(None)], 1_700_000_100).await;
    assert!(
        outcome.errors.is_empty() && outcome.closed.is_empty(),
        "{outcome:?}"
    );
    let calls = take(&seen);
    let lines: Vec<&str> = calls.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(
        lines,
        ["GET /repos/fleet/os/pulls?state=open&per_page=100&page=1"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_reconciler_adopts_its_open_pull_request() {
    let dir = tempfile::tempdir().unwrap();
    let (_bare, target) = remote_and_mirror(dir.path());
    // What the request should say, as the first reconciler wrote it.
    let body = nodewright_reconciler::forge::approvals::wanted(&[driver(Some((2, 2)))])
        .remove(0)
        .body;
    let (url, seen) = stub(move |s| match s.method.as_str() {
        "GET" => json!([
            {"number": 3, "body": "hand-made", "head": {"ref": "feature/driver-2"}},
            {"number": 12, "body": body, "head": {"ref": BRANCH}},
        ]),
        _ => json!({}),
    })
    .await;
    let mut requests = ApprovalRequests::new(client(ForgeKind::GitHub, &url, "fleet/os"), target);
    let outcome = requests.sync(&[driver(Some((2, 2)))], 1_700_000_000).await;
    assert!(
        outcome.errors.is_empty() && outcome.opened.is_empty(),
        "{outcome:?}"
    );
    let calls = take(&seen);
    let lines: Vec<&str> = calls.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(
        lines,
        ["GET /repos/fleet/os/pulls?state=open&per_page=100&page=1"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitlab_approval_merge_request_is_opened_updated_and_closed() {
    let dir = tempfile::tempdir().unwrap();
    let (bare, target) = remote_and_mirror(dir.path());
    // The project's open merge requests: the one created.
    let opened = Arc::new(Mutex::new(json!([])));
    let forge_opened = opened.clone();
    let (url, seen) = stub(move |s| match (s.method.as_str(), s.uri.as_str()) {
        ("GET", uri) if uri.contains("state=opened&per_page") => {
            forge_opened.lock().unwrap().clone()
        }
        ("GET", _) => json!([]),
        ("POST", "/projects/group%2Ffleet/merge_requests") => {
            let request = json!({
                "iid": 5,
                "description": s.body.as_ref().unwrap()["description"],
                "source_branch": BRANCH,
            });
            *forge_opened.lock().unwrap() = json!([request.clone()]);
            request
        }
        _ => json!({"id": 1}),
    })
    .await;
    let mut requests =
        ApprovalRequests::new(client(ForgeKind::GitLab, &url, "group/fleet"), target);

    let outcome = requests.sync(&[driver(Some((2, 2)))], 1_700_000_000).await;
    assert_eq!(outcome.opened, [5], "{:?}", outcome.errors);
    let calls = take(&seen);
    let lines: Vec<&str> = calls.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(
        lines,
        [
            "GET /projects/group%2Ffleet/merge_requests?state=opened&per_page=100&page=1",
            "GET /projects/group%2Ffleet/merge_requests?source_branch=nodewright%2Fapprove%2Fdriver%2Fproduction-2&state=opened",
            "POST /projects/group%2Ffleet/merge_requests",
        ]
    );
    let created = calls[2].1.as_ref().unwrap();
    assert_eq!(created["title"], "Approve driver production batch 2");
    assert_eq!(created["source_branch"], BRANCH);
    assert_eq!(created["target_branch"], "main");
    assert!(
        created["description"]
            .as_str()
            .unwrap()
            .contains("batch 2 waits for approval")
    );
    assert_eq!(
        git(&bare, &["diff", "--numstat", "main", BRANCH]),
        "1\t0\tfleet/driver.yaml"
    );

    let outcome = requests.sync(&[driver(Some((2, 3)))], 1_700_000_100).await;
    assert_eq!(outcome.updated, [5], "{:?}", outcome.errors);
    let calls = take(&seen);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].0, "PUT /projects/group%2Ffleet/merge_requests/5");
    assert!(
        calls[0].1.as_ref().unwrap()["description"]
            .as_str()
            .unwrap()
            .contains("(3 nodes complete")
    );

    let outcome = requests.sync::<NodeWright>(&[], 1_700_000_200).await;
    assert_eq!(outcome.closed, [5], "{:?}", outcome.errors);
    let calls = take(&seen);
    let lines: Vec<&str> = calls.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(
        lines,
        [
            "GET /projects/group%2Ffleet/merge_requests?state=opened&per_page=100&page=1",
            "POST /projects/group%2Ffleet/merge_requests/5/notes",
            "PUT /projects/group%2Ffleet/merge_requests/5",
        ]
    );
    assert_eq!(
        calls[2].1.as_ref().unwrap(),
        &json!({"state_event": "close"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_already_on_the_tracked_branch_is_not_proposed_again() {
    let dir = tempfile::tempdir().unwrap();
    // Merged, not yet applied: the batch still waits in the cluster.
    let approved = DRIVER.replace(
        "approval-required: production\n",
        "approval-required: production\n    gitops.nodewright.nvidia.com/approved-batches: production=2\n",
    );
    let (bare, target) = remote_and_mirror_with(dir.path(), &approved);
    let (url, seen) = stub(|_| json!([])).await;
    let mut requests = ApprovalRequests::new(client(ForgeKind::GitHub, &url, "fleet/os"), target);
    let outcome = requests.sync(&[driver(Some((2, 2)))], 1_700_000_000).await;
    assert!(
        outcome.errors.is_empty() && outcome.opened.is_empty(),
        "{outcome:?}"
    );
    assert!(
        take(&seen).iter().all(|(line, _)| line.starts_with("GET ")),
        "nothing is created"
    );
    assert_eq!(git(&bare, &["branch", "--list", "nodewright/*"]), "");
}

#[test]
fn approval_prs_without_a_forge_is_a_usage_error() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nodewright"))
        .args(["run", "--repo", ".", "--approval-prs"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--forge"));
}

/// `run` end to end: a gated batch of the simulated rollout starts waiting, and the forge
/// receives the approval pull request while the branch lands on the remote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_approval_prs_opens_the_request_when_a_batch_waits() {
    let dir = tempfile::tempdir().unwrap();
    let (url, seen) = stub(|s| match (s.method.as_str(), s.uri.as_str()) {
        ("GET", _) => json!([]),
        ("POST", "/repos/fleet/os/pulls") => {
            json!({"number": 12, "body": s.body.as_ref().unwrap()["body"], "head": {"ref": BRANCH}})
        }
        _ => json!({"id": 1}),
    })
    .await;
    let work = WorkRepo::init(&dir.path().join("work"));
    work.write("fleet/policy.yaml", TIERS_POLICY);
    work.write("fleet/driver.yaml", DRIVER);
    work.commit("fleet");
    let bare = dir.path().join("origin.git");
    work.clone_bare(&bare);
    let fleet = dir.path().join("fleet-sim.yaml");
    std::fs::write(
        &fleet,
        "cluster:\n  nodes:\n    - generate: {count: 4, namePrefix: p-, labels: {role: gpu, tier: production}}\npackages:\n  example/driver: {default: {duration: 5s}}\n",
    )
    .unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_nodewright"))
        .arg("run")
        .arg("--repo")
        .arg(format!("file://{}", bare.display()))
        .arg("--cache-dir")
        .arg(dir.path().join("cache"))
        .arg("--sim-fleet")
        .arg(&fleet)
        .args(["--speed", "0", "--no-progress", "--no-status"])
        .args(["--until-converged", "30m"])
        .args(["--forge", "github", "--approval-prs"])
        .env("NODEWRIGHT_FORGE_URL", &url)
        .env("NODEWRIGHT_FORGE_REPOSITORY", "fleet/os")
        .env("NODEWRIGHT_FORGE_TOKEN", "t0ken")
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("GITHUB_TOKEN")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The gated batch never starts, so the rollout cannot converge.
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let created: Vec<Value> = take(&seen)
        .into_iter()
        .filter(|(line, _)| line == "POST /repos/fleet/os/pulls")
        .filter_map(|(_, body)| body)
        .collect();
    assert_eq!(
        created.len(),
        1,
        "one request for the waiting batch:\n{stderr}"
    );
    assert_eq!(created[0]["title"], "Approve driver production batch 2");
    assert_eq!(created[0]["base"], "main");
    assert_eq!(
        git(&bare, &["log", "-1", "--format=%s", BRANCH]),
        "Approve driver production batch 2"
    );
}
