//! Feedback on the forge (ARCHITECTURE §2.2 `writeback/`): a commit status on the applied commit
//! (pending while the fleet rolls out, success when complete, failure when erroring) and one
//! pull-request / merge-request comment carrying `nodewright diff`, updated in place on every
//! push instead of piling up.
//!
//! Two implementations of [`Forge`]: [`GitHub`] (github.com and GitHub Enterprise) and
//! [`GitLab`] (gitlab.com and self-hosted). [`ForgeClient`] picks one from a [`ForgeConfig`].
//! The token is read from a file or an environment variable and never appears in logs, errors
//! or `Debug` output.

pub mod approvals;
mod github;
mod gitlab;
mod http;

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::path::PathBuf;

use nodewright_schema::{NodeWright, Status, keys};

use crate::writeback::source::Rejection;

pub use github::GitHub;
pub use gitlab::GitLab;

/// The hidden marker that identifies the one comment `nodewright diff` owns on a pull request.
pub const DIFF_COMMENT_MARKER: &str = "<!-- nodewright-diff -->";

/// Prefix of the commit-status context; the NodeWright name follows (`nodewright/tuning`).
pub const STATUS_CONTEXT_PREFIX: &str = "nodewright/";

/// The commit-status context of a commit the reconciler refused. It has no `/`, so no
/// NodeWright's context can be the same.
pub const REJECTION_CONTEXT: &str = "nodewright";
/// After a failed commit-status post, the first retry comes this soon although nothing changed
/// (a forge outage must not leave a rejected commit without its failed status).
pub const RETRY_FIRST: std::time::Duration = std::time::Duration::from_secs(5);
/// Retries back off, doubling, up to this interval.
pub const RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(300);

/// Which forge API to talk to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ForgeKind {
    /// GitHub REST API v3 (github.com or GitHub Enterprise Server).
    GitHub,
    /// GitLab REST API v4 (gitlab.com or self-hosted).
    GitLab,
}

impl ForgeKind {
    /// The name used in flags and error messages (`github`, `gitlab`).
    pub fn as_str(self) -> &'static str {
        match self {
            ForgeKind::GitHub => "github",
            ForgeKind::GitLab => "gitlab",
        }
    }

    /// The public API root used when no base URL is configured.
    pub fn default_base_url(self) -> &'static str {
        match self {
            ForgeKind::GitHub => "https://api.github.com",
            ForgeKind::GitLab => "https://gitlab.com/api/v4",
        }
    }
}

impl fmt::Display for ForgeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ForgeKind {
    type Err = ForgeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "github" => Ok(ForgeKind::GitHub),
            "gitlab" => Ok(ForgeKind::GitLab),
            other => Err(ForgeError::Config(format!(
                "unknown forge {other:?}: expected github or gitlab"
            ))),
        }
    }
}

/// An API token. Its value is only ever written into an HTTP header: `Debug` redacts it and it
/// has no `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// Wraps a token value (surrounding whitespace, such as a file's trailing newline, is
    /// dropped because it is never part of a token).
    pub fn new(value: impl Into<String>) -> Self {
        Token(value.into().trim().to_string())
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// Where the token comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenSource {
    /// A file holding the token (e.g. a mounted Secret); surrounding whitespace is ignored.
    File(PathBuf),
    /// An environment variable holding the token.
    Env(String),
}

impl TokenSource {
    /// Reads the token now.
    pub fn load(&self) -> Result<Token, ForgeError> {
        self.load_with(|name| std::env::var(name).ok())
    }

    /// Reads the token, looking environment variables up through `env` (tests pass a map).
    pub fn load_with(&self, env: impl Fn(&str) -> Option<String>) -> Result<Token, ForgeError> {
        let token = match self {
            TokenSource::File(path) => {
                let text =
                    std::fs::read_to_string(path).map_err(|source| ForgeError::TokenFile {
                        path: path.clone(),
                        source,
                    })?;
                Token::new(text)
            }
            TokenSource::Env(var) => Token::new(env(var).unwrap_or_default()),
        };
        if token.expose().is_empty() {
            return Err(ForgeError::EmptyToken {
                source_desc: self.describe(),
            });
        }
        Ok(token)
    }

    fn describe(&self) -> String {
        match self {
            TokenSource::File(path) => format!("token file {}", path.display()),
            TokenSource::Env(var) => format!("environment variable {var}"),
        }
    }
}

/// How to reach one repository on one forge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForgeConfig {
    /// GitHub or GitLab.
    pub kind: ForgeKind,
    /// API root: `https://api.github.com`, `https://ghe.example.com/api/v3`,
    /// `https://gitlab.example.com/api/v4`. A trailing `/` is ignored.
    pub base_url: String,
    /// GitHub: `owner/name`. GitLab: the project's full path (`group/sub/project`) or its
    /// numeric id.
    pub repository: String,
    /// The API token.
    pub token: Token,
}

impl ForgeConfig {
    /// Builds the configuration from the environment a CI job runs in, with `NODEWRIGHT_FORGE_*`
    /// overrides:
    ///
    /// | what | override | GitHub Actions | GitLab CI |
    /// |---|---|---|---|
    /// | API root | `NODEWRIGHT_FORGE_URL` | `GITHUB_API_URL` | `CI_API_V4_URL` |
    /// | repository | `NODEWRIGHT_FORGE_REPOSITORY` | `GITHUB_REPOSITORY` | `CI_PROJECT_ID` |
    /// | token | `NODEWRIGHT_FORGE_TOKEN_FILE`, `NODEWRIGHT_FORGE_TOKEN` | `GITHUB_TOKEN` | `NODEWRIGHT_GITLAB_TOKEN` |
    ///
    /// GitLab's `CI_JOB_TOKEN` cannot write merge-request notes, hence a dedicated variable.
    pub fn from_env(kind: ForgeKind) -> Result<Self, ForgeError> {
        Self::from_env_with(kind, |name| std::env::var(name).ok())
    }

    /// [`ForgeConfig::from_env`] with an explicit variable lookup (for tests).
    pub fn from_env_with(
        kind: ForgeKind,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ForgeError> {
        let get = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let (url_var, repo_var, token_var) = match kind {
            ForgeKind::GitHub => ("GITHUB_API_URL", "GITHUB_REPOSITORY", "GITHUB_TOKEN"),
            ForgeKind::GitLab => ("CI_API_V4_URL", "CI_PROJECT_ID", "NODEWRIGHT_GITLAB_TOKEN"),
        };
        let base_url = get("NODEWRIGHT_FORGE_URL")
            .or_else(|| get(url_var))
            .unwrap_or_else(|| kind.default_base_url().to_string());
        let repository = get("NODEWRIGHT_FORGE_REPOSITORY")
            .or_else(|| get(repo_var))
            .ok_or_else(|| {
                ForgeError::Config(format!(
                    "{kind}: no repository: set NODEWRIGHT_FORGE_REPOSITORY or {repo_var}"
                ))
            })?;
        let source = if let Some(path) = get("NODEWRIGHT_FORGE_TOKEN_FILE") {
            TokenSource::File(PathBuf::from(path))
        } else if get("NODEWRIGHT_FORGE_TOKEN").is_some() {
            TokenSource::Env("NODEWRIGHT_FORGE_TOKEN".into())
        } else {
            TokenSource::Env(token_var.into())
        };
        let token = source.load_with(&env)?;
        Ok(ForgeConfig {
            kind,
            base_url,
            repository,
            token,
        })
    }
}

/// The state of a commit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CommitState {
    /// The rollout of this commit is under way.
    Pending,
    /// Every selected node is complete.
    Success,
    /// At least one node is erroring.
    Failure,
}

impl CommitState {
    /// The state for a NodeWright roll-up Status: complete → success, erroring → failure,
    /// everything else (in progress, waiting, blocked, paused, disabled, unknown) → pending.
    pub fn from_status(status: Status) -> Self {
        match status {
            Status::Complete => CommitState::Success,
            Status::Erroring => CommitState::Failure,
            _ => CommitState::Pending,
        }
    }
}

/// A commit status for one NodeWright.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitStatus {
    /// Pending, success or failure.
    pub state: CommitState,
    /// `nodewright/<nodewright>`: one status line per NodeWright on the commit.
    pub context: String,
    /// One line (`tuning: 12/40 nodes complete`); forges cut long ones, so it is kept short.
    pub description: String,
    /// A link shown with the status (e.g. the status branch's README), when known.
    pub target_url: Option<String>,
}

impl CommitStatus {
    /// The status of a NodeWright as its CR status reads now: state from the roll-up Status,
    /// description `<name>: <complete>/<selected> nodes complete[, N erroring]`. While the
    /// status still describes an older generation of the spec it is pending, whatever it says,
    /// so a new commit never inherits the previous commit's success.
    pub fn for_nodewright(nw: &NodeWright) -> Self {
        let name = nw.metadata.name.clone().unwrap_or_default();
        let status = nw.status.clone().unwrap_or_default();
        // A status from a pass over an older spec says nothing about this commit yet.
        if let Some(generation) = nw.metadata.generation
            && nw.worked_generation().is_none_or(|seen| seen < generation)
        {
            return CommitStatus {
                state: CommitState::Pending,
                context: format!("{STATUS_CONTEXT_PREFIX}{name}"),
                description: format!("{name}: waiting for generation {generation} to be observed"),
                target_url: None,
            };
        }
        let rollup = status.status.unwrap_or(Status::Unknown);
        let complete = status.complete_nodes.unwrap_or_else(|| "0/0".to_string());
        let erroring = status
            .node_status
            .iter()
            .flatten()
            .filter(|(_, s)| **s == Status::Erroring)
            .count();
        let mut description = format!("{name}: {complete} nodes complete");
        if erroring > 0 {
            description.push_str(&format!(", {erroring} erroring"));
        }
        if !matches!(
            rollup,
            Status::Complete | Status::Erroring | Status::InProgress
        ) {
            description.push_str(&format!(" ({rollup})"));
        }
        CommitStatus {
            state: CommitState::from_status(rollup),
            context: format!("{STATUS_CONTEXT_PREFIX}{name}"),
            description,
            target_url: None,
        }
    }
}

impl CommitStatus {
    /// The failed status of a commit refused as invalid: how many violations, and the first
    /// (`2 violations, not applied: fleet/gpu.yaml:12: …`). The count comes first because
    /// forges cut long descriptions.
    pub fn for_rejection(rejection: &Rejection) -> Self {
        let count = rejection.violations.len();
        let mut description = format!(
            "{count} violation{}, not applied",
            if count == 1 { "" } else { "s" }
        );
        if let Some(first) = rejection.violations.first() {
            description.push_str(&format!(": {}: {}", first.at, first.message));
        }
        CommitStatus {
            state: CommitState::Failure,
            context: REJECTION_CONTEXT.to_owned(),
            description: crate::text::terminal(&description).into_owned(),
            target_url: None,
        }
    }
}

/// What [`Forge::upsert_comment`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommentOutcome {
    /// No marked comment existed; this one was posted.
    Created {
        /// The forge's comment (note) id.
        id: u64,
    },
    /// The marked comment was edited in place.
    Updated {
        /// The forge's comment (note) id.
        id: u64,
    },
}

/// A forge failure, naming the forge, the request and what came back.
#[derive(Debug, thiserror::Error)]
pub enum ForgeError {
    /// The forge answered with a non-success HTTP status.
    #[error("{forge}: {method} {endpoint} returned HTTP {status}: {message}")]
    Http {
        /// `github` or `gitlab`.
        forge: ForgeKind,
        /// HTTP method.
        method: String,
        /// The URL requested (never contains the token).
        endpoint: String,
        /// HTTP status code.
        status: u16,
        /// The forge's error message (its `message` field when JSON, else the body, cut short).
        message: String,
    },
    /// The request did not complete (connection refused, TLS, timeout).
    #[error("{forge}: {method} {endpoint} failed: {source}")]
    Transport {
        /// `github` or `gitlab`.
        forge: ForgeKind,
        /// HTTP method.
        method: String,
        /// The URL requested.
        endpoint: String,
        /// The client's error.
        source: reqwest::Error,
    },
    /// The forge answered 2xx with a body this client cannot read.
    #[error("{forge}: {method} {endpoint}: unexpected response: {detail}")]
    Response {
        /// `github` or `gitlab`.
        forge: ForgeKind,
        /// HTTP method.
        method: String,
        /// The URL requested.
        endpoint: String,
        /// What was wrong with it.
        detail: String,
    },
    /// The token file could not be read.
    #[error("cannot read forge token file {}: {source}", path.display())]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The token source was empty.
    #[error("no forge token: {source_desc} is empty or unset")]
    EmptyToken {
        /// Which file or variable was read.
        source_desc: String,
    },
    /// The configuration cannot be used.
    #[error("forge configuration: {0}")]
    Config(String),
}

/// A forge the reconciler reports to.
pub trait Forge {
    /// Which API this is.
    fn kind(&self) -> ForgeKind;

    /// Sets (creates or replaces) the commit status with `status.context` on commit `sha`.
    fn set_commit_status(
        &self,
        sha: &str,
        status: &CommitStatus,
    ) -> impl Future<Output = Result<(), ForgeError>> + Send;

    /// Posts `body` as the one comment marked with [`DIFF_COMMENT_MARKER`] on pull request /
    /// merge request `number`: edits the existing marked comment, else creates it. The marker
    /// is added to `body` when missing.
    fn upsert_comment(
        &self,
        number: u64,
        body: &str,
    ) -> impl Future<Output = Result<CommentOutcome, ForgeError>> + Send;

    /// The open pull requests (merge requests) whose source branch starts with `prefix`.
    fn open_approval_requests(
        &self,
        prefix: &str,
    ) -> impl Future<Output = Result<Vec<approvals::OpenRequest>, ForgeError>> + Send;

    /// The open pull request (merge request) from `branch`, if any.
    fn find_open_request(
        &self,
        branch: &str,
    ) -> impl Future<Output = Result<Option<approvals::OpenRequest>, ForgeError>> + Send;

    /// Opens a pull request (merge request) from `branch` into `base`; returns its number
    /// (GitLab: iid).
    fn create_request(
        &self,
        branch: &str,
        base: &str,
        title: &str,
        body: &str,
    ) -> impl Future<Output = Result<u64, ForgeError>> + Send;

    /// Replaces the body (description) of request `number`.
    fn update_request(
        &self,
        number: u64,
        body: &str,
    ) -> impl Future<Output = Result<(), ForgeError>> + Send;

    /// Comments `comment` on request `number`, then closes it.
    fn close_request(
        &self,
        number: u64,
        comment: &str,
    ) -> impl Future<Output = Result<(), ForgeError>> + Send;
}

/// A GitHub or GitLab client chosen at run time.
#[derive(Clone, Debug)]
pub enum ForgeClient {
    /// GitHub.
    GitHub(GitHub),
    /// GitLab.
    GitLab(GitLab),
}

impl ForgeClient {
    /// A client for the configured forge.
    pub fn new(config: ForgeConfig) -> Result<Self, ForgeError> {
        Ok(match config.kind {
            ForgeKind::GitHub => ForgeClient::GitHub(GitHub::new(config)?),
            ForgeKind::GitLab => ForgeClient::GitLab(GitLab::new(config)?),
        })
    }
}

impl Forge for ForgeClient {
    fn kind(&self) -> ForgeKind {
        match self {
            ForgeClient::GitHub(f) => f.kind(),
            ForgeClient::GitLab(f) => f.kind(),
        }
    }

    async fn set_commit_status(&self, sha: &str, status: &CommitStatus) -> Result<(), ForgeError> {
        match self {
            ForgeClient::GitHub(f) => f.set_commit_status(sha, status).await,
            ForgeClient::GitLab(f) => f.set_commit_status(sha, status).await,
        }
    }

    async fn upsert_comment(&self, number: u64, body: &str) -> Result<CommentOutcome, ForgeError> {
        match self {
            ForgeClient::GitHub(f) => f.upsert_comment(number, body).await,
            ForgeClient::GitLab(f) => f.upsert_comment(number, body).await,
        }
    }

    async fn open_approval_requests(
        &self,
        prefix: &str,
    ) -> Result<Vec<approvals::OpenRequest>, ForgeError> {
        match self {
            ForgeClient::GitHub(f) => f.open_approval_requests(prefix).await,
            ForgeClient::GitLab(f) => f.open_approval_requests(prefix).await,
        }
    }

    async fn find_open_request(
        &self,
        branch: &str,
    ) -> Result<Option<approvals::OpenRequest>, ForgeError> {
        match self {
            ForgeClient::GitHub(f) => f.find_open_request(branch).await,
            ForgeClient::GitLab(f) => f.find_open_request(branch).await,
        }
    }

    async fn create_request(
        &self,
        branch: &str,
        base: &str,
        title: &str,
        body: &str,
    ) -> Result<u64, ForgeError> {
        match self {
            ForgeClient::GitHub(f) => f.create_request(branch, base, title, body).await,
            ForgeClient::GitLab(f) => f.create_request(branch, base, title, body).await,
        }
    }

    async fn update_request(&self, number: u64, body: &str) -> Result<(), ForgeError> {
        match self {
            ForgeClient::GitHub(f) => f.update_request(number, body).await,
            ForgeClient::GitLab(f) => f.update_request(number, body).await,
        }
    }

    async fn close_request(&self, number: u64, comment: &str) -> Result<(), ForgeError> {
        match self {
            ForgeClient::GitHub(f) => f.close_request(number, comment).await,
            ForgeClient::GitLab(f) => f.close_request(number, comment).await,
        }
    }
}

/// What one [`StatusReporter::report`] call did.
#[derive(Debug, Default)]
pub struct ReportOutcome {
    /// Commit statuses posted (changed since the last successful post).
    pub posted: usize,
    /// NodeWrights skipped because they carry no source-commit annotation (not from Git).
    pub skipped: usize,
    /// Failures, one per NodeWright; those statuses are retried on the next call.
    pub errors: Vec<ForgeError>,
}

/// Posts the commit status of each NodeWright on the commit it came from, only when it changed:
/// the controller calls [`StatusReporter::report`] after every pass, and the forge sees one
/// request per transition (pending → success, or a new `12/40` count), not one per pass.
#[derive(Debug)]
pub struct StatusReporter<F> {
    forge: F,
    /// Last status posted successfully, by (commit, context).
    posted: BTreeMap<(String, String), CommitStatus>,
    /// The last refused commit whose failed status was posted.
    rejected: Option<String>,
}

impl<F: Forge + Sync> StatusReporter<F> {
    /// A reporter that has posted nothing yet.
    pub fn new(forge: F) -> Self {
        StatusReporter {
            forge,
            posted: BTreeMap::new(),
            rejected: None,
        }
    }

    /// Posts the failed status of a refused commit, once per commit; `Ok(false)` when it was
    /// already posted. A failure is retried by the next call.
    pub async fn report_rejection(&mut self, rejection: &Rejection) -> Result<bool, ForgeError> {
        if self.rejected.as_deref() == Some(rejection.commit.as_str()) {
            return Ok(false);
        }
        self.forge
            .set_commit_status(&rejection.commit, &CommitStatus::for_rejection(rejection))
            .await?;
        self.rejected = Some(rejection.commit.clone());
        Ok(true)
    }

    /// Posts the changed statuses of `nodewrights`, each on the commit of its
    /// `nodewright.nvidia.com/source-commit` annotation. Memory of commits no NodeWright points
    /// at any more is dropped.
    pub async fn report<N: std::borrow::Borrow<NodeWright>>(
        &mut self,
        nodewrights: &[N],
    ) -> ReportOutcome {
        let mut outcome = ReportOutcome::default();
        let mut current = Vec::new();
        for nw in nodewrights.iter().map(N::borrow) {
            let Some(sha) = nw
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(keys::SOURCE_COMMIT))
                .filter(|s| !s.is_empty())
            else {
                outcome.skipped += 1;
                continue;
            };
            let status = CommitStatus::for_nodewright(nw);
            let key = (sha.clone(), status.context.clone());
            current.push(key.clone());
            if self.posted.get(&key) == Some(&status) {
                continue;
            }
            match self.forge.set_commit_status(sha, &status).await {
                Ok(()) => {
                    outcome.posted += 1;
                    self.posted.insert(key, status);
                }
                Err(e) => outcome.errors.push(e),
            }
        }
        self.posted.retain(|k, _| current.contains(k));
        outcome
    }
}

/// Posts or updates the `nodewright diff` comment on pull request (merge request) `pr`: the
/// one-call entry point behind `nodewright diff --post-comment github|gitlab`.
pub async fn post_diff_comment(
    config: &ForgeConfig,
    pr: u64,
    markdown: &str,
) -> Result<CommentOutcome, ForgeError> {
    ForgeClient::new(config.clone())?
        .upsert_comment(pr, markdown)
        .await
}

/// `body` with the marker on its first line (unless already present), cut to `limit` bytes on a
/// character boundary with a visible note when it is too long for the forge.
pub(crate) fn marked_body(body: &str, limit: usize) -> String {
    let out = if body.contains(DIFF_COMMENT_MARKER) {
        body.to_string()
    } else {
        format!("{DIFF_COMMENT_MARKER}\n{body}")
    };
    const NOTE: &str = "\n\n… (truncated: the diff is longer than the forge allows in one comment; run `nodewright diff` locally for all of it)\n";
    cut_with_note(out, limit, NOTE)
}

/// `body` cut to `limit` bytes on a character boundary with a visible note when it is too long
/// for the forge (a pull request's description).
pub(crate) fn cut_body(body: &str, limit: usize) -> String {
    cut_with_note(
        body.to_string(),
        limit,
        "\n\n… (truncated: longer than the forge allows)\n",
    )
}

fn cut_with_note(mut out: String, limit: usize, note: &str) -> String {
    if out.len() > limit {
        let mut cut = limit.saturating_sub(note.len());
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push_str(note);
    }
    out
}

/// `text` cut to at most `max` characters (commit-status descriptions have a short limit).
pub(crate) fn cut_chars(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_schema::{NodeWrightSpec, NodeWrightStatus};

    #[test]
    fn token_debug_is_redacted_and_whitespace_dropped() {
        let token = Token::new("  secret-value\n");
        assert_eq!(token.expose(), "secret-value");
        assert_eq!(format!("{token:?}"), "Token(<redacted>)");
        let config = ForgeConfig {
            kind: ForgeKind::GitHub,
            base_url: "https://api.github.com".into(),
            repository: "o/r".into(),
            token,
        };
        assert!(!format!("{config:?}").contains("secret-value"));
    }

    #[test]
    fn token_sources_read_files_and_variables_and_refuse_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "from-file\n").unwrap();
        let t = TokenSource::File(path.clone()).load().unwrap();
        assert_eq!(t.expose(), "from-file");
        let env = |name: &str| (name == "TOK").then(|| "from-env".to_string());
        assert_eq!(
            TokenSource::Env("TOK".into())
                .load_with(env)
                .unwrap()
                .expose(),
            "from-env"
        );
        let err = TokenSource::Env("MISSING".into())
            .load_with(env)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "no forge token: environment variable MISSING is empty or unset"
        );
        let err = TokenSource::File(dir.path().join("absent"))
            .load()
            .unwrap_err();
        assert!(err.to_string().contains("cannot read forge token file"));
    }

    #[test]
    fn config_from_ci_environment_prefers_overrides() {
        let vars = [
            ("GITHUB_API_URL", "https://ghe.example/api/v3"),
            ("GITHUB_REPOSITORY", "fleet/os"),
            ("GITHUB_TOKEN", "gh"),
        ];
        let env = |name: &str| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        };
        let c = ForgeConfig::from_env_with(ForgeKind::GitHub, env).unwrap();
        assert_eq!(c.base_url, "https://ghe.example/api/v3");
        assert_eq!(c.repository, "fleet/os");
        assert_eq!(c.token.expose(), "gh");

        let env2 = |name: &str| match name {
            "CI_API_V4_URL" => Some("https://gl.example/api/v4".to_string()),
            "CI_PROJECT_ID" => Some("42".to_string()),
            "NODEWRIGHT_FORGE_REPOSITORY" => Some("group/fleet".to_string()),
            "NODEWRIGHT_FORGE_TOKEN" => Some("override".to_string()),
            _ => None,
        };
        let c = ForgeConfig::from_env_with(ForgeKind::GitLab, env2).unwrap();
        assert_eq!(c.repository, "group/fleet");
        assert_eq!(c.token.expose(), "override");

        let err = ForgeConfig::from_env_with(ForgeKind::GitLab, |_| None).unwrap_err();
        assert!(err.to_string().contains("CI_PROJECT_ID"), "{err}");
    }

    #[test]
    fn forge_kind_parses_case_insensitively() {
        assert_eq!("GitHub".parse::<ForgeKind>().unwrap(), ForgeKind::GitHub);
        assert_eq!("gitlab".parse::<ForgeKind>().unwrap(), ForgeKind::GitLab);
        assert!("bitbucket".parse::<ForgeKind>().is_err());
    }

    fn nw(status: Status, complete: &str, statuses: &[Status]) -> NodeWright {
        let mut nw = NodeWright::new("tuning", NodeWrightSpec::default());
        nw.status = Some(NodeWrightStatus {
            status: Some(status),
            complete_nodes: Some(complete.into()),
            node_status: Some(
                statuses
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (format!("n{i}"), *s))
                    .collect(),
            ),
            ..NodeWrightStatus::default()
        });
        nw
    }

    #[test]
    fn commit_status_follows_the_rollup() {
        let s = CommitStatus::for_nodewright(&nw(
            Status::InProgress,
            "12/40",
            &[Status::Complete, Status::InProgress],
        ));
        assert_eq!(s.state, CommitState::Pending);
        assert_eq!(s.context, "nodewright/tuning");
        assert_eq!(s.description, "tuning: 12/40 nodes complete");

        let s = CommitStatus::for_nodewright(&nw(
            Status::Erroring,
            "3/4",
            &[Status::Complete, Status::Erroring],
        ));
        assert_eq!(s.state, CommitState::Failure);
        assert_eq!(s.description, "tuning: 3/4 nodes complete, 1 erroring");

        let s = CommitStatus::for_nodewright(&nw(Status::Complete, "4/4", &[]));
        assert_eq!(s.state, CommitState::Success);

        let s = CommitStatus::for_nodewright(&nw(Status::Blocked, "0/4", &[]));
        assert_eq!(s.state, CommitState::Pending);
        assert_eq!(s.description, "tuning: 0/4 nodes complete (blocked)");
    }

    #[test]
    fn a_status_about_an_older_generation_is_pending() {
        let mut n = nw(Status::Complete, "4/4", &[]);
        n.metadata.generation = Some(3);
        let worked = |n: &mut NodeWright, generation: i64| {
            n.status.as_mut().unwrap().conditions = Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                    type_: nodewright_schema::keys::condition::READY.into(),
                    status: "True".into(),
                    reason: "NodesConverged".into(),
                    message: String::new(),
                    last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        jiff::Timestamp::UNIX_EPOCH,
                    ),
                    observed_generation: Some(generation),
                },
            ]);
        };
        worked(&mut n, 2);
        let s = CommitStatus::for_nodewright(&n);
        assert_eq!(s.state, CommitState::Pending);
        assert_eq!(
            s.description,
            "tuning: waiting for generation 3 to be observed"
        );
        // A pass over generation 3 that has not completed the rollout: its progress shows,
        // although `status.observedGeneration` moves only on completion.
        worked(&mut n, 3);
        n.status.as_mut().unwrap().status = Some(Status::InProgress);
        n.status.as_mut().unwrap().complete_nodes = Some("1/4".into());
        let s = CommitStatus::for_nodewright(&n);
        assert_eq!(s.description, "tuning: 1/4 nodes complete");
    }

    #[test]
    fn marked_body_adds_marker_once_and_truncates_on_char_boundary() {
        assert_eq!(marked_body("hi", 100), format!("{DIFF_COMMENT_MARKER}\nhi"));
        let already = format!("x\n{DIFF_COMMENT_MARKER}\ny");
        assert_eq!(marked_body(&already, 100), already);
        let long = "é".repeat(500);
        let out = marked_body(&long, 400);
        assert!(out.len() <= 400, "{}", out.len());
        assert!(out.starts_with(DIFF_COMMENT_MARKER));
        assert!(out.contains("truncated"));
        assert_eq!(cut_chars("abcdef", 4), "abc…");
        assert_eq!(cut_chars("abc", 4), "abc");
    }
}
