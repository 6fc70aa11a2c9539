//! Change triggers: webhook verification (signatures, tokens, replays, body size, branch
//! filter, start-up checks of secret files) and filesystem events on refs.

mod common;

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::WorkRepo;
use nodewright_reconciler::source::triggers::{self, Forge, Trigger};
use nodewright_reconciler::source::webhook::{self, WebhookConfig, github_signature, router};
use tower::ServiceExt;

const PUSH: &str =
    r#"{"ref":"refs/heads/main","after":"0123456789abcdef0123456789abcdef01234567","commits":[]}"#;

fn config() -> WebhookConfig {
    WebhookConfig {
        github_secret: Some(b"s3cret".to_vec()),
        gitlab_token: Some(b"gl-token".to_vec()),
        branch: Some("main".to_owned()),
    }
}

/// A fresh delivery id per request, as the forges send.
fn delivery_id() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    format!(
        "delivery-{}",
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

/// One receiver, kept across requests (its memory of delivery ids is what refuses replays).
struct Receiver {
    app: axum::Router,
    rx: tokio::sync::mpsc::Receiver<Trigger>,
}

impl Receiver {
    fn new(cfg: WebhookConfig) -> Self {
        let (tx, rx) = triggers::channel(4);
        Receiver {
            app: router(cfg, tx),
            rx,
        }
    }

    /// Posts `body` with `headers`, adding a fresh delivery id unless one is given.
    async fn post(
        &mut self,
        uri: &str,
        headers: &[(&str, &str)],
        body: impl Into<Body>,
    ) -> (StatusCode, Option<Trigger>) {
        let mut req = Request::post(uri);
        let has_id = headers
            .iter()
            .any(|(k, _)| *k == "x-github-delivery" || *k == "x-gitlab-event-uuid");
        if !has_id {
            let id = delivery_id();
            req = req
                .header("x-github-delivery", &id)
                .header("x-gitlab-event-uuid", &id);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = self
            .app
            .clone()
            .oneshot(req.body(body.into()).unwrap())
            .await
            .unwrap();
        (resp.status(), self.rx.try_recv().ok())
    }
}

async fn post(
    cfg: WebhookConfig,
    uri: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (StatusCode, Option<Trigger>) {
    Receiver::new(cfg).post(uri, headers, body.to_owned()).await
}

#[tokio::test]
async fn a_signed_github_push_triggers_a_fetch() {
    let sig = github_signature(b"s3cret", PUSH.as_bytes());
    let (status, trigger) = post(
        config(),
        "/hooks/github",
        &[("x-github-event", "push"), ("x-hub-signature-256", &sig)],
        PUSH,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(
        trigger,
        Some(Trigger::Webhook {
            forge: Forge::GitHub,
            reference: Some("refs/heads/main".to_owned()),
            after: Some("0123456789abcdef0123456789abcdef01234567".to_owned()),
        })
    );
}

#[tokio::test]
async fn forged_or_unsigned_github_pushes_are_refused() {
    let wrong_key = github_signature(b"guess", PUSH.as_bytes());
    let tampered = github_signature(b"s3cret", b"{\"ref\":\"refs/heads/other\"}");
    for sig in [
        wrong_key.as_str(),
        tampered.as_str(),
        "sha256=zz",
        "sha1=abc",
        "",
    ] {
        let (status, trigger) = post(
            config(),
            "/hooks/github",
            &[("x-github-event", "push"), ("x-hub-signature-256", sig)],
            PUSH,
        )
        .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "signature {sig:?}");
        assert_eq!(trigger, None, "signature {sig:?} triggered a fetch");
    }
    let (status, trigger) = post(
        config(),
        "/hooks/github",
        &[("x-github-event", "push")],
        PUSH,
    )
    .await;
    assert_eq!((status, trigger), (StatusCode::UNAUTHORIZED, None));
}

#[tokio::test]
async fn gitlab_tokens_are_checked() {
    let (status, trigger) = post(
        config(),
        "/hooks/gitlab",
        &[
            ("x-gitlab-event", "Push Hook"),
            ("x-gitlab-token", "gl-token"),
        ],
        PUSH,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert!(matches!(
        trigger,
        Some(Trigger::Webhook {
            forge: Forge::GitLab,
            ..
        })
    ));
    for token in ["gl-toke", "gl-token-", ""] {
        let (status, trigger) = post(
            config(),
            "/hooks/gitlab",
            &[("x-gitlab-event", "Push Hook"), ("x-gitlab-token", token)],
            PUSH,
        )
        .await;
        assert_eq!(
            (status, trigger),
            (StatusCode::UNAUTHORIZED, None),
            "token {token:?}"
        );
    }
}

#[tokio::test]
async fn pushes_to_other_branches_pings_and_unconfigured_forges_do_not_trigger() {
    let other = r#"{"ref":"refs/heads/feature","after":"abc"}"#;
    let sig = github_signature(b"s3cret", other.as_bytes());
    let (status, trigger) = post(
        config(),
        "/hooks/github",
        &[("x-github-event", "push"), ("x-hub-signature-256", &sig)],
        other,
    )
    .await;
    assert_eq!((status, trigger), (StatusCode::ACCEPTED, None));

    let ping = r#"{"zen":"hi"}"#;
    let sig = github_signature(b"s3cret", ping.as_bytes());
    let (status, trigger) = post(
        config(),
        "/hooks/github",
        &[("x-github-event", "ping"), ("x-hub-signature-256", &sig)],
        ping,
    )
    .await;
    assert_eq!((status, trigger), (StatusCode::OK, None));

    let no_gitlab = WebhookConfig {
        gitlab_token: None,
        ..config()
    };
    let (status, trigger) = post(
        no_gitlab,
        "/hooks/gitlab",
        &[("x-gitlab-event", "Push Hook"), ("x-gitlab-token", "")],
        PUSH,
    )
    .await;
    assert_eq!((status, trigger), (StatusCode::NOT_FOUND, None));
}

#[tokio::test]
async fn a_replayed_delivery_is_refused_and_triggers_nothing() {
    let mut receiver = Receiver::new(config());
    let sig = github_signature(b"s3cret", PUSH.as_bytes());
    let github = [
        ("x-github-event", "push"),
        ("x-hub-signature-256", sig.as_str()),
        ("x-github-delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"),
    ];
    let (status, trigger) = receiver.post("/hooks/github", &github, PUSH).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert!(trigger.is_some());
    let (status, trigger) = receiver.post("/hooks/github", &github, PUSH).await;
    assert_eq!((status, trigger), (StatusCode::CONFLICT, None), "replayed");

    // A forged request cannot use up or probe delivery ids: the signature is checked first.
    let forged = [
        ("x-github-event", "push"),
        ("x-hub-signature-256", "sha256=00"),
        ("x-github-delivery", "fresh-id"),
    ];
    let (status, _) = receiver.post("/hooks/github", &forged, PUSH).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let fresh = [
        ("x-github-event", "push"),
        ("x-hub-signature-256", sig.as_str()),
        ("x-github-delivery", "fresh-id"),
    ];
    let (status, trigger) = receiver.post("/hooks/github", &fresh, PUSH).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert!(trigger.is_some());

    let gitlab = [
        ("x-gitlab-event", "Push Hook"),
        ("x-gitlab-token", "gl-token"),
        (
            "x-gitlab-event-uuid",
            "13792a34-cac6-4fda-95a8-c58e00a3954e",
        ),
    ];
    let (status, _) = receiver.post("/hooks/gitlab", &gitlab, PUSH).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (status, trigger) = receiver.post("/hooks/gitlab", &gitlab, PUSH).await;
    assert_eq!((status, trigger), (StatusCode::CONFLICT, None));

    let no_id = [
        ("x-gitlab-event", "Push Hook"),
        ("x-gitlab-token", "gl-token"),
        ("x-gitlab-event-uuid", ""),
    ];
    let (status, trigger) = receiver.post("/hooks/gitlab", &no_id, PUSH).await;
    assert_eq!((status, trigger), (StatusCode::BAD_REQUEST, None));
}

#[tokio::test]
async fn an_oversized_body_or_a_push_without_a_ref_triggers_nothing() {
    let mut receiver = Receiver::new(config());
    let huge = format!(
        r#"{{"ref":"refs/heads/main","pad":"{}"}}"#,
        "x".repeat(webhook::MAX_BODY)
    );
    let sig = github_signature(b"s3cret", huge.as_bytes());
    let (status, trigger) = receiver
        .post(
            "/hooks/github",
            &[("x-github-event", "push"), ("x-hub-signature-256", &sig)],
            huge,
        )
        .await;
    assert_eq!((status, trigger), (StatusCode::PAYLOAD_TOO_LARGE, None));

    let no_ref = r#"{"after":"abc"}"#;
    let sig = github_signature(b"s3cret", no_ref.as_bytes());
    let (status, trigger) = receiver
        .post(
            "/hooks/github",
            &[("x-github-event", "push"), ("x-hub-signature-256", &sig)],
            no_ref,
        )
        .await;
    assert_eq!((status, trigger), (StatusCode::ACCEPTED, None));
}

#[test]
fn unreadable_or_empty_secret_files_stop_the_start() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing");
    let err = WebhookConfig::from_files(Some(&missing), None, "main").unwrap_err();
    assert!(
        err.to_string().contains(missing.to_str().unwrap()),
        "names the file: {err}"
    );
    let empty = tmp.path().join("empty");
    std::fs::write(&empty, "\n").unwrap();
    let err = WebhookConfig::from_files(None, Some(&empty), "main").unwrap_err();
    assert!(err.to_string().contains("empty"), "{err}");
    assert!(WebhookConfig::from_files(None, None, "main").is_err());

    let work = WorkRepo::init(&tmp.path().join("fleet"));
    work.write("README.md", "fleet\n");
    work.commit("first");
    let run = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_nodewright"))
            .args(["run", "--repo"])
            .arg(&work.dir)
            .args(["--no-progress", "--speed", "0"])
            .args(extra)
            .env_remove("KUBECONFIG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .output()
            .unwrap()
    };
    let out = run(&[
        "--webhook-addr",
        "127.0.0.1:0",
        "--webhook-github-secret-file",
        missing.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains(missing.to_str().unwrap()), "{stderr}");
    let out = run(&["--webhook-gitlab-token-file", empty.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("needs --webhook-addr"), "{stderr}");
}

async fn next_trigger(
    rx: &mut tokio::sync::mpsc::Receiver<Trigger>,
    within: Duration,
) -> Option<Trigger> {
    tokio::time::timeout(within, rx.recv()).await.ok().flatten()
}

#[tokio::test]
async fn a_local_commit_on_the_tracked_branch_triggers_and_work_tree_edits_do_not() {
    let tmp = tempfile::tempdir().unwrap();
    let work = WorkRepo::init(&tmp.path().join("fleet"));
    work.write("gpu.yaml", "a: 1\n");
    work.commit("first");
    common::git(&work.dir, &["branch", "feature"]);

    let (tx, mut rx) = triggers::channel(4);
    let _watcher = triggers::watch_refs(
        &work.dir.join(".git"),
        "main",
        Duration::from_millis(200),
        tx,
    )
    .unwrap();

    // Editing and staging files in the work tree moves no ref.
    work.write("gpu.yaml", "a: 2\n");
    common::git(&work.dir, &["add", "-A"]);
    assert_eq!(
        next_trigger(&mut rx, Duration::from_millis(800)).await,
        None
    );

    // A commit on another branch is not ours.
    common::git(&work.dir, &["checkout", "-q", "feature"]);
    common::git(&work.dir, &["commit", "-q", "-m", "on feature"]);
    assert_eq!(
        next_trigger(&mut rx, Duration::from_millis(800)).await,
        None
    );

    // A commit on main is — once, however many file events git makes.
    common::git(&work.dir, &["checkout", "-q", "main"]);
    work.write("gpu.yaml", "a: 3\n");
    work.commit("second");
    match next_trigger(&mut rx, Duration::from_secs(5)).await {
        Some(Trigger::RefChanged { path }) => {
            assert!(path.ends_with("refs/heads/main"), "{path:?}")
        }
        other => panic!("expected a ref trigger, got {other:?}"),
    }
    assert_eq!(
        next_trigger(&mut rx, Duration::from_millis(600)).await,
        None,
        "burst not debounced"
    );

    // Packing refs (git gc) rewrites packed-refs: a (harmless) trigger, the loop re-reads.
    common::git(&work.dir, &["pack-refs", "--all"]);
    assert!(
        next_trigger(&mut rx, Duration::from_secs(5))
            .await
            .is_some()
    );
}
