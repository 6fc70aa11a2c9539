//! GitHub REST API v3: commit statuses (`POST /repos/{owner}/{repo}/statuses/{sha}`), issue
//! comments on pull requests (`/repos/{owner}/{repo}/issues/{number}/comments`, edited through
//! `PATCH /repos/{owner}/{repo}/issues/comments/{id}`), and approval pull requests
//! (`/repos/{owner}/{repo}/pulls`, found by `head=owner:branch`, edited and closed with
//! `PATCH /repos/{owner}/{repo}/pulls/{number}`).

use reqwest::Method;
use reqwest::header::AUTHORIZATION;
use serde::Deserialize;
use serde_json::json;

use super::approvals::OpenRequest;
use super::gitlab::encode_segment;
use super::http::Api;
use super::{
    CommentOutcome, CommitState, CommitStatus, DIFF_COMMENT_MARKER, Forge, ForgeConfig, ForgeError,
    ForgeKind, cut_body, cut_chars, marked_body,
};

/// GitHub's limit on a comment body (characters; bytes are a safe bound).
const MAX_COMMENT_BYTES: usize = 65_536;
/// GitHub's limit on a commit-status description.
const MAX_DESCRIPTION_CHARS: usize = 140;
/// Comments fetched per page while looking for the marked one.
const PER_PAGE: usize = 100;
/// Pages scanned at most (10,000 comments): bounds the search on a pathological thread.
const MAX_PAGES: usize = 100;

/// A GitHub (or GitHub Enterprise Server) repository.
#[derive(Clone, Debug)]
pub struct GitHub {
    api: Api,
    /// `owner/name`.
    repository: String,
}

#[derive(Deserialize)]
struct Pull {
    number: u64,
    #[serde(default)]
    body: Option<String>,
    head: PullHead,
}

#[derive(Deserialize)]
struct PullHead {
    #[serde(rename = "ref")]
    branch: String,
}

impl From<Pull> for OpenRequest {
    fn from(p: Pull) -> Self {
        OpenRequest {
            number: p.number,
            branch: p.head.branch,
            body: p.body.unwrap_or_default(),
        }
    }
}

#[derive(Deserialize)]
struct Comment {
    id: u64,
    #[serde(default)]
    body: Option<String>,
}

impl GitHub {
    /// A client for `config.repository` (`owner/name`) at `config.base_url`
    /// (`https://api.github.com`, or `https://<host>/api/v3` for GitHub Enterprise Server).
    pub fn new(config: ForgeConfig) -> Result<Self, ForgeError> {
        let parts: Vec<&str> = config.repository.split('/').collect();
        if parts.len() != 2 || parts.iter().any(|p| !valid_segment(p)) {
            return Err(ForgeError::Config(format!(
                "github: repository {:?} must be owner/name",
                config.repository
            )));
        }
        let api = Api::new(
            ForgeKind::GitHub,
            &config.base_url,
            AUTHORIZATION,
            Some("Bearer"),
            &config.token,
        )?;
        Ok(GitHub {
            api,
            repository: config.repository,
        })
    }

    async fn find_marked_comment(&self, number: u64) -> Result<Option<u64>, ForgeError> {
        for page in 1..=MAX_PAGES {
            let path = format!(
                "/repos/{}/issues/{number}/comments?per_page={PER_PAGE}&page={page}",
                self.repository
            );
            let reply = self
                .api
                .send::<Vec<Comment>>(Method::GET, &path, None)
                .await?;
            if let Some(c) = reply.body.iter().find(|c| {
                c.body
                    .as_deref()
                    .is_some_and(|b| b.contains(DIFF_COMMENT_MARKER))
            }) {
                return Ok(Some(c.id));
            }
            if reply.body.len() < PER_PAGE {
                break;
            }
        }
        Ok(None)
    }
}

fn valid_segment(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// A commit id as the APIs accept it in a path: hex only, so it cannot alter the URL.
pub(crate) fn check_sha(forge: ForgeKind, sha: &str) -> Result<(), ForgeError> {
    if (7..=64).contains(&sha.len()) && sha.chars().all(|c| c.is_ascii_hexdigit()) {
        Ok(())
    } else {
        Err(ForgeError::Config(format!(
            "{forge}: {sha:?} is not a commit id (7 to 64 hex digits)"
        )))
    }
}

impl Forge for GitHub {
    fn kind(&self) -> ForgeKind {
        ForgeKind::GitHub
    }

    async fn set_commit_status(&self, sha: &str, status: &CommitStatus) -> Result<(), ForgeError> {
        check_sha(ForgeKind::GitHub, sha)?;
        let state = match status.state {
            CommitState::Pending => "pending",
            CommitState::Success => "success",
            CommitState::Failure => "failure",
        };
        let mut body = json!({
            "state": state,
            "context": status.context,
            "description": cut_chars(&status.description, MAX_DESCRIPTION_CHARS),
        });
        if let Some(url) = &status.target_url {
            body["target_url"] = json!(url);
        }
        let path = format!("/repos/{}/statuses/{sha}", self.repository);
        self.api
            .send::<serde_json::Value>(Method::POST, &path, Some(&body))
            .await?;
        Ok(())
    }

    async fn upsert_comment(&self, number: u64, body: &str) -> Result<CommentOutcome, ForgeError> {
        let payload = json!({ "body": marked_body(body, MAX_COMMENT_BYTES) });
        match self.find_marked_comment(number).await? {
            Some(id) => {
                let path = format!("/repos/{}/issues/comments/{id}", self.repository);
                let reply = self
                    .api
                    .send::<Comment>(Method::PATCH, &path, Some(&payload))
                    .await?;
                Ok(CommentOutcome::Updated { id: reply.body.id })
            }
            None => {
                let path = format!("/repos/{}/issues/{number}/comments", self.repository);
                let reply = self
                    .api
                    .send::<Comment>(Method::POST, &path, Some(&payload))
                    .await?;
                Ok(CommentOutcome::Created { id: reply.body.id })
            }
        }
    }

    async fn open_approval_requests(&self, prefix: &str) -> Result<Vec<OpenRequest>, ForgeError> {
        let mut out = Vec::new();
        for page in 1..=MAX_PAGES {
            let path = format!(
                "/repos/{}/pulls?state=open&per_page={PER_PAGE}&page={page}",
                self.repository
            );
            let reply = self.api.send::<Vec<Pull>>(Method::GET, &path, None).await?;
            let full = reply.body.len() >= PER_PAGE;
            out.extend(
                reply
                    .body
                    .into_iter()
                    .filter(|p| p.head.branch.starts_with(prefix))
                    .map(OpenRequest::from),
            );
            if !full {
                break;
            }
        }
        Ok(out)
    }

    async fn find_open_request(&self, branch: &str) -> Result<Option<OpenRequest>, ForgeError> {
        let owner = self.repository.split('/').next().unwrap_or_default();
        let path = format!(
            "/repos/{}/pulls?head={}&state=open",
            self.repository,
            encode_segment(&format!("{owner}:{branch}"))
        );
        let reply = self.api.send::<Vec<Pull>>(Method::GET, &path, None).await?;
        Ok(reply.body.into_iter().next().map(OpenRequest::from))
    }

    async fn create_request(
        &self,
        branch: &str,
        base: &str,
        title: &str,
        body: &str,
    ) -> Result<u64, ForgeError> {
        let path = format!("/repos/{}/pulls", self.repository);
        let payload = json!({
            "title": title,
            "head": branch,
            "base": base,
            "body": cut_body(body, MAX_COMMENT_BYTES),
        });
        let reply = self
            .api
            .send::<Pull>(Method::POST, &path, Some(&payload))
            .await?;
        Ok(reply.body.number)
    }

    async fn update_request(&self, number: u64, body: &str) -> Result<(), ForgeError> {
        let path = format!("/repos/{}/pulls/{number}", self.repository);
        let payload = json!({ "body": cut_body(body, MAX_COMMENT_BYTES) });
        self.api
            .send::<serde_json::Value>(Method::PATCH, &path, Some(&payload))
            .await?;
        Ok(())
    }

    async fn close_request(&self, number: u64, comment: &str) -> Result<(), ForgeError> {
        let path = format!("/repos/{}/issues/{number}/comments", self.repository);
        self.api
            .send::<serde_json::Value>(Method::POST, &path, Some(&json!({ "body": comment })))
            .await?;
        let path = format!("/repos/{}/pulls/{number}", self.repository);
        self.api
            .send::<serde_json::Value>(Method::PATCH, &path, Some(&json!({ "state": "closed" })))
            .await?;
        Ok(())
    }
}
