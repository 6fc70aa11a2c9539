//! Change triggers: webhook verification, filesystem events on refs, the jittered poller.

mod common;

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::WorkRepo;
use nodewright_reconciler::source::triggers::{self, Forge, Trigger};
use nodewright_reconciler::source::webhook::{WebhookConfig, github_signature, router};
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

async fn post(
    cfg: WebhookConfig,
    uri: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (StatusCode, Option<Trigger>) {
    let (tx, mut rx) = triggers::channel(4);
    let mut req = Request::post(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = router(cfg, tx)
        .oneshot(req.body(Body::from(body.to_owned())).unwrap())
        .await
        .unwrap();
    (resp.status(), rx.try_recv().ok())
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
