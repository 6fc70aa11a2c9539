//! Forge feedback against a local HTTP stub that records every request and answers from a
//! script: what a GitHub or GitLab server would receive from the reconciler and `diff`.

mod common;

use std::sync::{Arc, Mutex};

use axum::http::{Method, StatusCode};
use common::forge_stub::{Seen, stub};
use nodewright_reconciler::forge::{
    CommentOutcome, CommitState, CommitStatus, DIFF_COMMENT_MARKER, Forge, ForgeClient,
    ForgeConfig, ForgeError, ForgeKind, GitHub, GitLab, StatusReporter, Token, post_diff_comment,
};
use nodewright_reconciler::writeback::source::{Rejection, Violation};
use nodewright_schema::{NodeWright, NodeWrightSpec, NodeWrightStatus, Status, keys};
use serde_json::{Value, json};

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
const TOKEN: &str = "s3cr3t-token";

fn config(kind: ForgeKind, base_url: &str, repository: &str) -> ForgeConfig {
    ForgeConfig {
        kind,
        base_url: base_url.to_string(),
        repository: repository.to_string(),
        token: Token::new(TOKEN),
    }
}

fn header<'a>(seen: &'a Seen, name: &str) -> &'a str {
    seen.headers
        .get(name)
        .unwrap_or_else(|| panic!("header {name} missing"))
        .to_str()
        .unwrap()
}

fn status(state: CommitState) -> CommitStatus {
    CommitStatus {
        state,
        context: "nodewright/tuning".into(),
        description: "tuning: 12/40 nodes complete".into(),
        target_url: Some("https://example.invalid/status".into()),
    }
}

#[tokio::test]
async fn github_commit_status_is_posted_with_bearer_auth() {
    let (url, seen) = stub(|_| (StatusCode::CREATED, vec![], json!({"id": 1}))).await;
    let gh = GitHub::new(config(ForgeKind::GitHub, &format!("{url}/"), "fleet/os")).unwrap();
    gh.set_commit_status(SHA, &status(CommitState::Pending))
        .await
        .unwrap();
    gh.set_commit_status(SHA, &status(CommitState::Failure))
        .await
        .unwrap();

    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    let first = &seen[0];
    assert_eq!(first.method, Method::POST);
    assert_eq!(first.uri, format!("/repos/fleet/os/statuses/{SHA}"));
    assert_eq!(header(first, "authorization"), format!("Bearer {TOKEN}"));
    assert_eq!(header(first, "accept"), "application/vnd.github+json");
    assert_eq!(header(first, "x-github-api-version"), "2022-11-28");
    assert!(header(first, "user-agent").starts_with("nodewright/"));
    assert_eq!(
        first.body.as_ref().unwrap(),
        &json!({
            "state": "pending",
            "context": "nodewright/tuning",
            "description": "tuning: 12/40 nodes complete",
            "target_url": "https://example.invalid/status",
        })
    );
    assert_eq!(seen[1].body.as_ref().unwrap()["state"], "failure");
}

#[tokio::test]
async fn github_comment_is_created_when_no_marked_comment_exists() {
    let (url, seen) = stub(|req| match req.method {
        Method::GET => (
            StatusCode::OK,
            vec![],
            json!([{"id": 5, "body": "looks good to me"}]),
        ),
        _ => (StatusCode::CREATED, vec![], json!({"id": 99, "body": "x"})),
    })
    .await;
    let gh = GitHub::new(config(ForgeKind::GitHub, &url, "fleet/os")).unwrap();
    let outcome = gh.upsert_comment(7, "## NodeWright diff").await.unwrap();
    assert_eq!(outcome, CommentOutcome::Created { id: 99 });

    let seen = seen.lock().unwrap();
    assert_eq!(
        seen.iter()
            .map(|s| (s.method.clone(), s.uri.clone()))
            .collect::<Vec<_>>(),
        [
            (
                Method::GET,
                "/repos/fleet/os/issues/7/comments?per_page=100&page=1".to_string()
            ),
            (
                Method::POST,
                "/repos/fleet/os/issues/7/comments".to_string()
            ),
        ]
    );
    assert_eq!(header(&seen[1], "authorization"), format!("Bearer {TOKEN}"));
    assert_eq!(
        seen[1].body.as_ref().unwrap(),
        &json!({"body": format!("{DIFF_COMMENT_MARKER}\n## NodeWright diff")})
    );
}

#[tokio::test]
async fn github_marked_comment_on_a_later_page_is_edited_in_place() {
    let (url, seen) = stub(|req| {
        if req.method == Method::GET && req.uri.ends_with("page=1") {
            let page: Vec<Value> = (0..100)
                .map(|i| json!({"id": i, "body": format!("comment {i}")}))
                .collect();
            (StatusCode::OK, vec![], Value::Array(page))
        } else if req.method == Method::GET {
            (
                StatusCode::OK,
                vec![],
                json!([{"id": 777, "body": format!("{DIFF_COMMENT_MARKER}\nold diff")},
                       {"id": 778, "body": null}]),
            )
        } else {
            (StatusCode::OK, vec![], json!({"id": 777}))
        }
    })
    .await;
    let outcome = post_diff_comment(&config(ForgeKind::GitHub, &url, "fleet/os"), 12, "new diff")
        .await
        .unwrap();
    assert_eq!(outcome, CommentOutcome::Updated { id: 777 });

    let seen = seen.lock().unwrap();
    let calls: Vec<_> = seen
        .iter()
        .map(|s| format!("{} {}", s.method, s.uri))
        .collect();
    assert_eq!(
        calls,
        [
            "GET /repos/fleet/os/issues/12/comments?per_page=100&page=1",
            "GET /repos/fleet/os/issues/12/comments?per_page=100&page=2",
            "PATCH /repos/fleet/os/issues/comments/777",
        ]
    );
    assert_eq!(
        seen[2].body.as_ref().unwrap()["body"],
        format!("{DIFF_COMMENT_MARKER}\nnew diff")
    );
}

#[tokio::test]
async fn github_error_names_forge_endpoint_and_status_but_not_the_token() {
    let (url, _seen) = stub(|_| {
        (
            StatusCode::UNAUTHORIZED,
            vec![],
            json!({"message": "Bad credentials", "documentation_url": "https://docs"}),
        )
    })
    .await;
    let gh = GitHub::new(config(ForgeKind::GitHub, &url, "fleet/os")).unwrap();
    let err = gh
        .set_commit_status(SHA, &status(CommitState::Success))
        .await
        .unwrap_err();
    assert!(matches!(err, ForgeError::Http { status: 401, .. }));
    let text = err.to_string();
    assert_eq!(
        text,
        format!(
            "github: POST {url}/repos/fleet/os/statuses/{SHA} returned HTTP 401: Bad credentials"
        )
    );
    assert!(!format!("{err:?}").contains(TOKEN));
}

#[tokio::test]
async fn gitlab_status_uses_private_token_and_encoded_project_path() {
    let (url, seen) = stub(|req| {
        let state = req.body.as_ref().unwrap()["state"]
            .as_str()
            .unwrap()
            .to_string();
        if state == "success" {
            // What GitLab answers when the commit already shows that state.
            (
                StatusCode::BAD_REQUEST,
                vec![],
                json!({"message": "Cannot transition status via :success from :success"}),
            )
        } else {
            (StatusCode::CREATED, vec![], json!({"id": 3}))
        }
    })
    .await;
    let gl = GitLab::new(config(ForgeKind::GitLab, &url, "platform/fleet")).unwrap();
    gl.set_commit_status(SHA, &status(CommitState::Pending))
        .await
        .unwrap();
    gl.set_commit_status(SHA, &status(CommitState::Success))
        .await
        .unwrap();

    let seen = seen.lock().unwrap();
    let first = &seen[0];
    assert_eq!(first.method, Method::POST);
    assert_eq!(
        first.uri,
        format!("/projects/platform%2Ffleet/statuses/{SHA}")
    );
    assert_eq!(header(first, "private-token"), TOKEN);
    assert!(first.headers.get("authorization").is_none());
    assert_eq!(
        first.body.as_ref().unwrap(),
        &json!({
            "state": "running",
            "name": "nodewright/tuning",
            "description": "tuning: 12/40 nodes complete",
            "target_url": "https://example.invalid/status",
        })
    );
}

#[tokio::test]
async fn gitlab_note_is_updated_with_put_and_system_notes_are_ignored() {
    let (url, seen) = stub(|req| match req.method {
        Method::GET => (
            StatusCode::OK,
            vec![("x-next-page", String::new())],
            json!([
                {"id": 1, "body": format!("mentioned {DIFF_COMMENT_MARKER}"), "system": true},
                {"id": 2, "body": format!("{DIFF_COMMENT_MARKER}\nold"), "system": false},
            ]),
        ),
        _ => (StatusCode::OK, vec![], json!({"id": 2, "body": "x"})),
    })
    .await;
    let client = ForgeClient::new(config(ForgeKind::GitLab, &url, "42")).unwrap();
    assert_eq!(client.kind(), ForgeKind::GitLab);
    let outcome = client.upsert_comment(3, "fresh").await.unwrap();
    assert_eq!(outcome, CommentOutcome::Updated { id: 2 });

    let seen = seen.lock().unwrap();
    let calls: Vec<_> = seen
        .iter()
        .map(|s| format!("{} {}", s.method, s.uri))
        .collect();
    assert_eq!(
        calls,
        [
            "GET /projects/42/merge_requests/3/notes?sort=asc&order_by=created_at&per_page=100&page=1",
            "PUT /projects/42/merge_requests/3/notes/2",
        ]
    );
    assert_eq!(header(&seen[1], "private-token"), TOKEN);
    assert_eq!(
        seen[1].body.as_ref().unwrap()["body"],
        format!("{DIFF_COMMENT_MARKER}\nfresh")
    );
}

#[tokio::test]
async fn gitlab_note_is_created_and_errors_name_gitlab() {
    let (url, seen) = stub(|req| match req.method {
        Method::GET => (StatusCode::OK, vec![], json!([])),
        _ => (StatusCode::CREATED, vec![], json!({"id": 11})),
    })
    .await;
    let gl = GitLab::new(config(ForgeKind::GitLab, &url, "group/sub/fleet")).unwrap();
    assert_eq!(
        gl.upsert_comment(4, "diff").await.unwrap(),
        CommentOutcome::Created { id: 11 }
    );
    assert_eq!(
        seen.lock().unwrap()[1].uri,
        "/projects/group%2Fsub%2Ffleet/merge_requests/4/notes"
    );

    let (url, _) = stub(|_| {
        (
            StatusCode::NOT_FOUND,
            vec![],
            json!({"message": "404 Project Not Found"}),
        )
    })
    .await;
    let gl = GitLab::new(config(ForgeKind::GitLab, &url, "nope")).unwrap();
    let err = gl.upsert_comment(4, "diff").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "gitlab: GET {url}/projects/nope/merge_requests/4/notes?sort=asc&order_by=created_at&per_page=100&page=1 returned HTTP 404: 404 Project Not Found"
        )
    );
}

#[tokio::test]
async fn unreachable_forge_is_a_transport_error_naming_the_endpoint() {
    // Bind then drop a listener so the port is closed.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let gh = GitHub::new(config(ForgeKind::GitHub, &format!("http://{addr}"), "o/r")).unwrap();
    let err = gh
        .set_commit_status(SHA, &status(CommitState::Pending))
        .await
        .unwrap_err();
    assert!(matches!(err, ForgeError::Transport { .. }), "{err:?}");
    assert!(
        err.to_string().starts_with(&format!(
            "github: POST http://{addr}/repos/o/r/statuses/{SHA} failed"
        )),
        "{err}"
    );
}

#[tokio::test]
async fn invalid_configuration_and_commit_ids_are_refused_before_any_request() {
    let (url, seen) = stub(|_| (StatusCode::OK, vec![], json!({}))).await;
    assert!(GitHub::new(config(ForgeKind::GitHub, &url, "just-a-name")).is_err());
    assert!(GitHub::new(config(ForgeKind::GitHub, "ftp://x", "o/r")).is_err());
    let gh = GitHub::new(config(ForgeKind::GitHub, &url, "o/r")).unwrap();
    let err = gh
        .set_commit_status("../../etc", &status(CommitState::Pending))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("is not a commit id"), "{err}");
    assert!(seen.lock().unwrap().is_empty());
}

fn applied(name: &str, commit: Option<&str>, status: Status, complete: &str) -> NodeWright {
    let mut nw = NodeWright::new(name, NodeWrightSpec::default());
    if let Some(c) = commit {
        nw.metadata.annotations = Some([(keys::SOURCE_COMMIT.to_string(), c.to_string())].into());
    }
    nw.status = Some(NodeWrightStatus {
        status: Some(status),
        complete_nodes: Some(complete.into()),
        ..NodeWrightStatus::default()
    });
    nw
}

#[tokio::test]
async fn status_reporter_posts_each_change_once_and_retries_failures() {
    let fail = Arc::new(Mutex::new(true));
    let fail_flag = fail.clone();
    let (url, seen) = stub(move |req| {
        let driver = req.body.as_ref().unwrap()["context"] == "nodewright/driver";
        if driver && *fail_flag.lock().unwrap() {
            (
                StatusCode::BAD_GATEWAY,
                vec![],
                json!({"message": "upstream hiccup"}),
            )
        } else {
            (StatusCode::CREATED, vec![], json!({"id": 1}))
        }
    })
    .await;
    let other = "89abcdef0123456789abcdef0123456789abcdef";
    let mut reporter =
        StatusReporter::new(ForgeClient::new(config(ForgeKind::GitHub, &url, "fleet/os")).unwrap());
    let fleet = |tuning_complete: &str| {
        vec![
            applied("tuning", Some(SHA), Status::InProgress, tuning_complete),
            applied("driver", Some(other), Status::Complete, "4/4"),
            applied("by-hand", None, Status::Complete, "1/1"),
        ]
    };

    let first = reporter.report(&fleet("1/4")).await;
    assert_eq!((first.posted, first.skipped, first.errors.len()), (1, 1, 1));
    assert!(first.errors[0].to_string().contains("HTTP 502"));

    // The failed status is retried; the unchanged one is not re-posted.
    *fail.lock().unwrap() = false;
    let second = reporter.report(&fleet("1/4")).await;
    assert_eq!((second.posted, second.errors.len()), (1, 0));
    let third = reporter.report(&fleet("1/4")).await;
    assert_eq!(third.posted, 0);
    let fourth = reporter.report(&fleet("2/4")).await;
    assert_eq!(fourth.posted, 1);

    let seen = seen.lock().unwrap();
    let posts: Vec<(String, String, String)> = seen
        .iter()
        .map(|s| {
            let b = s.body.as_ref().unwrap();
            (
                s.uri.clone(),
                b["state"].as_str().unwrap().to_string(),
                b["description"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        posts,
        [
            (
                format!("/repos/fleet/os/statuses/{SHA}"),
                "pending".into(),
                "tuning: 1/4 nodes complete".into()
            ),
            (
                format!("/repos/fleet/os/statuses/{other}"),
                "success".into(),
                "driver: 4/4 nodes complete".into()
            ),
            (
                format!("/repos/fleet/os/statuses/{other}"),
                "success".into(),
                "driver: 4/4 nodes complete".into()
            ),
            (
                format!("/repos/fleet/os/statuses/{SHA}"),
                "pending".into(),
                "tuning: 2/4 nodes complete".into()
            ),
        ]
    );
}

/// `nodewright run --until-converged` of `repo` on the simulated `fleet`, reporting to the
/// GitHub forge at `url` as repository `fleet/os`.
async fn run_with_github_forge(
    repo: &std::path::Path,
    fleet: &std::path::Path,
    url: &str,
) -> std::process::Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_nodewright"))
        .args(["run", "--repo"])
        .arg(repo)
        .arg("--sim-fleet")
        .arg(fleet)
        .args(["--speed", "0", "--no-progress", "--until-converged", "6h"])
        .args(["--forge", "github"])
        .env("NODEWRIGHT_FORGE_URL", url)
        .env("NODEWRIGHT_FORGE_REPOSITORY", "fleet/os")
        .env("NODEWRIGHT_FORGE_TOKEN", TOKEN)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("GITHUB_TOKEN")
        .output()
        .await
        .unwrap()
}

/// End to end: `nodewright run --forge github` on examples/fleet with the embedded simulator
/// posts commit statuses for each NodeWright on the commit it applied, pending while the
/// rollout runs and success once complete, authenticated with the configured token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_forge_reports_the_rollout_on_the_applied_commit() {
    let (url, seen) = stub(|_| (StatusCode::CREATED, vec![], json!({"id": 1}))).await;
    let dir = tempfile::tempdir().unwrap();
    let repo = common::WorkRepo::init(&dir.path().join("repo"));
    repo.copy_from(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/fleet"));
    let sha = repo.commit("fleet");
    let fleet = dir.path().join("fleet-sim.yaml");
    std::fs::write(
        &fleet,
        r#"
cluster:
  nodes:
    - generate: {count: 2, namePrefix: canary-, labels: {nvidia.com/gpu.present: "true", rollout.example.com/pool: canary}}
    - generate: {count: 2, namePrefix: gpu-, labels: {nvidia.com/gpu.present: "true", rollout.example.com/pool: production}}
packages:
  example/driver: {default: {duration: 5s}, rebootTakes: 30s}
"#,
    )
    .unwrap();
    let out = run_with_github_forge(&repo.dir, &fleet, &url).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "run failed:\n{stderr}");

    let seen = seen.lock().unwrap();
    assert!(!seen.is_empty(), "the forge received nothing:\n{stderr}");
    let mut per_context: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for request in seen.iter() {
        assert_eq!(request.method, Method::POST);
        assert_eq!(request.uri, format!("/repos/fleet/os/statuses/{sha}"));
        assert_eq!(header(request, "authorization"), format!("Bearer {TOKEN}"));
        let body = request.body.as_ref().unwrap();
        per_context
            .entry(body["context"].as_str().unwrap().to_string())
            .or_default()
            .push(body["state"].as_str().unwrap().to_string());
    }
    assert_eq!(
        per_context.keys().collect::<Vec<_>>(),
        ["nodewright/gpu-driver", "nodewright/gpu-tuning"],
        "one status line per NodeWright of the commit"
    );
    for (context, states) in &per_context {
        assert_eq!(
            states.last().map(String::as_str),
            Some("success"),
            "{context}: {states:?}"
        );
        // Pending while rolling out (the first pass leaves every NodeWright in progress).
        assert_eq!(
            states.first().map(String::as_str),
            Some("pending"),
            "{context}: {states:?}"
        );
        assert!(
            states.iter().all(|s| s == "pending" || s == "success"),
            "{context}: {states:?}"
        );
    }
}

/// End to end: a pushed commit that fails validation gets a failed `nodewright` status on its
/// own commit naming the violation, while the rollout of the newest valid commit goes on and
/// reports on that commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_forge_marks_a_rejected_head_failed_and_rolls_out_its_valid_parent() {
    // See: issue 24 — a rejected commit was invisible on the forge.
    let (url, seen) = stub(|_| (StatusCode::CREATED, vec![], json!({"id": 1}))).await;
    let dir = tempfile::tempdir().unwrap();
    let repo = common::WorkRepo::init(&dir.path().join("repo"));
    repo.copy_from(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/fleet"));
    let valid = repo.commit("fleet");
    let tuning = std::fs::read_to_string(repo.dir.join("gpu-tuning.yaml")).unwrap();
    let broken = tuning.replacen("version: ", "version: not-a-version-", 1);
    assert_ne!(broken, tuning, "the example names a package version");
    repo.write("gpu-tuning.yaml", &broken);
    let head = repo.commit("a typo");
    let fleet = dir.path().join("fleet-sim.yaml");
    std::fs::write(
        &fleet,
        r#"
cluster:
  nodes:
    - generate: {count: 2, namePrefix: gpu-, labels: {nvidia.com/gpu.present: "true", rollout.example.com/pool: canary}}
packages:
  example/driver: {default: {duration: 5s}, rebootTakes: 30s}
"#,
    )
    .unwrap();
    let out = run_with_github_forge(&repo.dir, &fleet, &url).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "run failed:\n{stderr}");

    let seen = seen.lock().unwrap();
    let on = |sha: &str| -> Vec<Value> {
        seen.iter()
            .filter(|r| r.uri == format!("/repos/fleet/os/statuses/{sha}"))
            .map(|r| r.body.clone().unwrap())
            .collect()
    };
    let refused = on(&head);
    assert_eq!(
        refused.len(),
        1,
        "one failed status on the refused head: {refused:?}"
    );
    assert_eq!(refused[0]["state"], "failure");
    assert_eq!(refused[0]["context"], "nodewright");
    let description = refused[0]["description"].as_str().unwrap();
    assert!(
        description.contains("not applied") && description.contains("gpu-tuning.yaml:"),
        "{description}"
    );
    let applied = on(&valid);
    assert!(
        applied
            .iter()
            .any(|b| b["context"] == "nodewright/gpu-tuning" && b["state"] == "success"),
        "the valid parent's rollout is reported on the parent: {applied:?}"
    );
    assert!(
        applied.iter().all(|b| b["state"] != "failure"),
        "{applied:?}"
    );
}

fn rejection() -> Rejection {
    let violation = |at: &str, message: &str| Violation {
        at: at.to_owned(),
        rule: "package-name".to_owned(),
        message: message.to_owned(),
    };
    Rejection {
        commit: SHA.to_owned(),
        violations: vec![
            violation(
                "fleet/gpu.yaml:12",
                "package name [Driver] is not valid\n# forged line",
            ),
            violation("fleet/gpu.yaml:20", "version string is invalid"),
        ],
    }
}

#[tokio::test]
async fn a_rejected_commit_gets_one_failed_github_status_naming_its_first_violation() {
    // See: issue 24 — a rejected commit was invisible on the forge.
    let (url, seen) = stub(|_| (StatusCode::CREATED, vec![], json!({"id": 1}))).await;
    let gh = ForgeClient::new(config(ForgeKind::GitHub, &url, "fleet/os")).unwrap();
    let mut reporter = StatusReporter::new(gh);
    assert!(reporter.report_rejection(&rejection()).await.unwrap());
    assert!(
        !reporter.report_rejection(&rejection()).await.unwrap(),
        "posted once per commit"
    );

    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, Method::POST);
    assert_eq!(seen[0].uri, format!("/repos/fleet/os/statuses/{SHA}"));
    assert_eq!(
        seen[0].body.as_ref().unwrap(),
        &json!({
            "state": "failure",
            "context": "nodewright",
            "description": "2 violations, not applied: fleet/gpu.yaml:12: package name [Driver] is not valid\\n# forged line",
        })
    );
}

#[tokio::test]
async fn a_rejected_commit_gets_a_failed_gitlab_status_and_a_failed_post_is_retried() {
    let calls = Arc::new(Mutex::new(0));
    let counter = calls.clone();
    let (url, seen) = stub(move |_| {
        let mut n = counter.lock().unwrap();
        *n += 1;
        if *n == 1 {
            (
                StatusCode::BAD_GATEWAY,
                vec![],
                json!({"message": "try later"}),
            )
        } else {
            (StatusCode::CREATED, vec![], json!({"id": 3}))
        }
    })
    .await;
    let gl = ForgeClient::new(config(ForgeKind::GitLab, &url, "42")).unwrap();
    let mut reporter = StatusReporter::new(gl);
    let err = reporter.report_rejection(&rejection()).await.unwrap_err();
    assert!(err.to_string().contains("HTTP 502: try later"), "{err}");
    assert!(reporter.report_rejection(&rejection()).await.unwrap());

    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].method, Method::POST);
    assert_eq!(seen[1].uri, format!("/projects/42/statuses/{SHA}"));
    assert_eq!(
        seen[1].body.as_ref().unwrap(),
        &json!({
            "state": "failed",
            "name": "nodewright",
            "description": "2 violations, not applied: fleet/gpu.yaml:12: package name [Driver] is not valid\\n# forged line",
        })
    );
}
