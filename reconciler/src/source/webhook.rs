//! The push-webhook receiver: GitHub (`X-Hub-Signature-256`, HMAC-SHA256 of the body) and
//! GitLab (`X-Gitlab-Token`, a shared token). Both are compared in constant time. A verified
//! push to the tracked branch sends [`Trigger::Webhook`] (an immediate fetch); nothing from
//! the payload is trusted beyond that — the controller fetches and reads the repository itself.
//!
//! Routes: `POST /hooks/github`, `POST /hooks/gitlab`. A forge without a configured secret is
//! refused (`404`), so an unauthenticated endpoint is never exposed by accident. Bodies above
//! [`MAX_BODY`] are refused (`413`) before anything is verified; a verified delivery whose id
//! (`X-GitHub-Delivery`, `X-Gitlab-Event-UUID`) was already received within
//! [`REPLAY_WINDOW`] is refused (`409`) and triggers nothing.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::sync::mpsc;

use super::triggers::{Forge, Trigger, offer};

/// The largest webhook body accepted (GitHub caps push payloads at 25 MB, but a push event of
/// a manifest repository is a few KB; the signature can only be checked over the whole body).
pub const MAX_BODY: usize = 1024 * 1024;
/// How long a delivery id is remembered to refuse its replay.
pub const REPLAY_WINDOW: Duration = Duration::from_secs(24 * 3600);
/// At most this many delivery ids are remembered (the oldest are forgotten first).
const REMEMBERED_DELIVERIES: usize = 10_000;

/// Why the receiver cannot start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A secret file is missing, unreadable or empty.
    #[error("cannot use {path} as the {forge} webhook secret: {message}")]
    Secret {
        /// The file.
        path: PathBuf,
        /// `GitHub` or `GitLab`.
        forge: &'static str,
        /// Why.
        message: String,
    },
    /// `--webhook-addr` without any secret would serve only refusals.
    #[error(
        "--webhook-addr needs --webhook-github-secret-file or --webhook-gitlab-token-file: webhooks are only accepted when they prove they come from the forge"
    )]
    NoSecret,
    /// A secret file without `--webhook-addr` would be read for nothing.
    #[error("{flag} needs --webhook-addr (the address to receive webhooks on)")]
    NoAddress {
        /// The flag given.
        flag: &'static str,
    },
    /// The address cannot be listened on.
    #[error("cannot listen for webhooks on {addr}: {source}")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// The socket error.
        #[source]
        source: std::io::Error,
    },
}

fn read_secret(path: &Path, forge: &'static str) -> Result<Vec<u8>, Error> {
    let err = |message: String| Error::Secret {
        path: path.to_path_buf(),
        forge,
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let secret = text.trim();
    if secret.is_empty() {
        return Err(err("the file is empty".to_owned()));
    }
    Ok(secret.as_bytes().to_vec())
}

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

impl WebhookConfig {
    /// Reads the secrets now, so a missing or unreadable file stops the start instead of
    /// leaving an endpoint that refuses every delivery; only pushes to `branch` trigger.
    pub fn from_files(
        github_secret: Option<&Path>,
        gitlab_token: Option<&Path>,
        branch: &str,
    ) -> Result<Self, Error> {
        if github_secret.is_none() && gitlab_token.is_none() {
            return Err(Error::NoSecret);
        }
        Ok(WebhookConfig {
            github_secret: github_secret
                .map(|p| read_secret(p, "GitHub"))
                .transpose()?,
            gitlab_token: gitlab_token.map(|p| read_secret(p, "GitLab")).transpose()?,
            branch: Some(branch.to_owned()),
        })
    }
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
    deliveries: Mutex<Deliveries>,
}

/// Delivery ids received within the replay window, oldest first.
#[derive(Default)]
struct Deliveries {
    seen: HashMap<String, tokio::time::Instant>,
    order: VecDeque<(tokio::time::Instant, String)>,
}

impl Deliveries {
    /// Records `id`; false when it was already received within the window.
    fn first_time(&mut self, id: &str, now: tokio::time::Instant) -> bool {
        while let Some((at, old)) = self.order.front() {
            let expired = now.duration_since(*at) >= REPLAY_WINDOW;
            if !expired && self.order.len() < REMEMBERED_DELIVERIES {
                break;
            }
            self.seen.remove(old);
            self.order.pop_front();
        }
        if self.seen.contains_key(id) {
            return false;
        }
        self.seen.insert(id.to_owned(), now);
        self.order.push_back((now, id.to_owned()));
        true
    }
}

/// The axum router serving the webhook routes.
pub fn router(config: WebhookConfig, tx: mpsc::Sender<Trigger>) -> Router {
    let shared = Arc::new(Shared {
        config,
        tx,
        deliveries: Mutex::default(),
    });
    Router::new()
        .route("/hooks/github", post(github))
        .route("/hooks/gitlab", post(gitlab))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(shared)
}

/// Listens on `addr` (a bind failure is a start-up error) and serves the receiver in a task
/// until the trigger channel closes or the process ends; returns the bound address.
pub async fn spawn(
    addr: std::net::SocketAddr,
    config: WebhookConfig,
    tx: mpsc::Sender<Trigger>,
) -> Result<std::net::SocketAddr, Error> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| Error::Bind { addr, source })?;
    tokio::spawn(async move {
        if let Err(e) = serve(listener, config, tx).await {
            tracing::warn!(error = %e, "the webhook receiver stopped; polling continues");
        }
    });
    Ok(bound)
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
    format!("sha256={}", hex::encode(tag))
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

/// Refuses a delivery id seen before (checked only after the signature, so unauthenticated
/// requests cannot fill the memory of ids).
fn replayed(shared: &Shared, forge: Forge, headers: &HeaderMap) -> Option<Reply> {
    let name = match forge {
        Forge::GitHub => "x-github-delivery",
        Forge::GitLab => "x-gitlab-event-uuid",
    };
    let Some(id) = header(headers, name).filter(|id| !id.trim().is_empty()) else {
        return Some((StatusCode::BAD_REQUEST, "missing delivery id header\n"));
    };
    let first = match shared.deliveries.lock() {
        Ok(mut deliveries) => deliveries.first_time(id, tokio::time::Instant::now()),
        // A panic while holding the lock left the memory of ids unusable: refuse rather than
        // accept replays.
        Err(_) => false,
    };
    if first {
        None
    } else {
        tracing::info!(%id, "refused a replayed {forge:?} webhook delivery");
        Some((StatusCode::CONFLICT, "delivery already received\n"))
    }
}

fn accept(shared: &Shared, forge: Forge, body: &[u8]) -> Reply {
    let payload: PushPayload = match serde_json::from_slice(body) {
        Ok(p) => p,
        Err(_) => return (StatusCode::BAD_REQUEST, "payload is not a push event\n"),
    };
    if let Some(branch) = &shared.config.branch
        && payload.reference.as_deref() != Some(format!("refs/heads/{branch}").as_str())
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
    if let Some(refusal) = replayed(&shared, Forge::GitHub, &headers) {
        return refusal;
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
    if let Some(refusal) = replayed(&shared, Forge::GitLab, &headers) {
        return refusal;
    }
    match header(&headers, "x-gitlab-event") {
        Some("Push Hook") | Some("System Hook") => accept(&shared, Forge::GitLab, &body),
        _ => (StatusCode::ACCEPTED, "event ignored\n"),
    }
}
