//! The push-webhook receiver: GitHub (`X-Hub-Signature-256`, HMAC-SHA256 of the body) and
//! GitLab (`X-Gitlab-Token`, a shared token). Both are compared in constant time. A verified
//! push to the tracked branch sends [`Trigger::Webhook`] (an immediate fetch); nothing from
//! the payload is trusted beyond that — the controller fetches and reads the repository itself.
//!
//! Routes: `POST /hooks/github`, `POST /hooks/gitlab`. A forge without a configured secret is
//! refused (`404`), so an unauthenticated endpoint is never exposed by accident.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::sync::mpsc;

use super::triggers::{Forge, Trigger, offer};

/// Secrets and filters of the receiver.
#[derive(Clone, Default)]
pub struct WebhookConfig {
    /// GitHub webhook secret (HMAC key); `None` disables `/hooks/github`.
    pub github_secret: Option<Vec<u8>>,
    /// GitLab secret token; `None` disables `/hooks/gitlab`.
    pub gitlab_token: Option<Vec<u8>>,
    /// Only pushes to this branch trigger (`None` = any push).
    pub branch: Option<String>,
}

impl std::fmt::Debug for WebhookConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Secrets are never printed.
        f.debug_struct("WebhookConfig")
            .field("github", &self.github_secret.is_some())
            .field("gitlab", &self.gitlab_token.is_some())
            .field("branch", &self.branch)
            .finish()
    }
}

struct Shared {
    config: WebhookConfig,
    tx: mpsc::Sender<Trigger>,
}

/// The axum router serving the webhook routes.
pub fn router(config: WebhookConfig, tx: mpsc::Sender<Trigger>) -> Router {
    let shared = Arc::new(Shared { config, tx });
    Router::new()
        .route("/hooks/github", post(github))
        .route("/hooks/gitlab", post(gitlab))
        .with_state(shared)
}

/// Serve the receiver on `listener` until the task is dropped or fails.
pub async fn serve(
    listener: tokio::net::TcpListener,
    config: WebhookConfig,
    tx: mpsc::Sender<Trigger>,
) -> std::io::Result<()> {
    axum::serve(listener, router(config, tx)).await
}

/// Whether `header` (`sha256=<hex>`) is the HMAC-SHA256 of `body` under `secret`; the
/// comparison is constant-time.
pub fn verify_github_signature(secret: &[u8], body: &[u8], header: &str) -> bool {
    let Some(hex) = header.trim().strip_prefix("sha256=") else {
        return false;
    };
    let Some(expected) = decode_hex(hex) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
        return false;
    };
    mac.update(body);
    mac.verify_slice(&expected).is_ok()
}

/// The `X-Hub-Signature-256` value for `body` (for tests and tooling that send webhooks).
pub fn github_signature(secret: &[u8], body: &[u8]) -> String {
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(m) => m,
        // HMAC accepts keys of any length; this arm is unreachable in practice.
        Err(_) => return String::new(),
    };
    mac.update(body);
    let tag = mac.finalize().into_bytes();
    let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

/// Constant-time token comparison (digests first, so the token length does not leak either).
pub fn verify_gitlab_token(expected: &[u8], given: &[u8]) -> bool {
    let a = Sha256::digest(expected);
    let b = Sha256::digest(given);
    a.as_slice().ct_eq(b.as_slice()).into()
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[derive(serde::Deserialize)]
struct PushPayload {
    #[serde(rename = "ref")]
    reference: Option<String>,
    after: Option<String>,
}

type Reply = (StatusCode, &'static str);

fn accept(shared: &Shared, forge: Forge, body: &[u8]) -> Reply {
    let payload: PushPayload = match serde_json::from_slice(body) {
        Ok(p) => p,
        Err(_) => return (StatusCode::BAD_REQUEST, "payload is not a push event\n"),
    };
    if let (Some(branch), Some(reference)) = (&shared.config.branch, &payload.reference)
        && reference != &format!("refs/heads/{branch}")
    {
        return (StatusCode::ACCEPTED, "push to another ref ignored\n");
    }
    let trigger = Trigger::Webhook {
        forge,
        reference: payload.reference,
        after: payload.after,
    };
    if offer(&shared.tx, trigger) {
        (StatusCode::ACCEPTED, "fetch triggered\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "reconciler is shutting down\n",
        )
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

async fn github(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Reply {
    let Some(secret) = &shared.config.github_secret else {
        return (StatusCode::NOT_FOUND, "GitHub webhook not configured\n");
    };
    let signature = header(&headers, "x-hub-signature-256").unwrap_or_default();
    if !verify_github_signature(secret, &body, signature) {
        tracing::warn!("refused GitHub webhook: missing or wrong X-Hub-Signature-256");
        return (StatusCode::UNAUTHORIZED, "signature mismatch\n");
    }
    match header(&headers, "x-github-event") {
        Some("push") => accept(&shared, Forge::GitHub, &body),
        Some("ping") => (StatusCode::OK, "pong\n"),
        _ => (StatusCode::ACCEPTED, "event ignored\n"),
    }
}

async fn gitlab(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Reply {
    let Some(token) = &shared.config.gitlab_token else {
        return (StatusCode::NOT_FOUND, "GitLab webhook not configured\n");
    };
    let given = header(&headers, "x-gitlab-token").unwrap_or_default();
    if !verify_gitlab_token(token, given.as_bytes()) {
        tracing::warn!("refused GitLab webhook: missing or wrong X-Gitlab-Token");
        return (StatusCode::UNAUTHORIZED, "token mismatch\n");
    }
    match header(&headers, "x-gitlab-event") {
        Some("Push Hook") | Some("System Hook") => accept(&shared, Forge::GitLab, &body),
        _ => (StatusCode::ACCEPTED, "event ignored\n"),
    }
}
