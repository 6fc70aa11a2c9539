//! GitLab REST API v4: external commit statuses (`POST /projects/:id/statuses/:sha`),
//! merge-request notes (`/projects/:id/merge_requests/:iid/notes`, edited with `PUT`), and
//! approval merge requests (`/projects/:id/merge_requests`, found by `source_branch`, edited
//! and closed with `PUT /projects/:id/merge_requests/:iid`).
//!
//! GitLab refuses to post a status in the state it already has ("Cannot transition status via
//! :run from :running"); that answer means the commit already shows the state asked for, so it
//! is treated as success. The description therefore changes only when the state does.

use reqwest::Method;
use reqwest::header::HeaderName;
use serde::Deserialize;
use serde_json::json;

use super::approvals::OpenRequest;
use super::github::check_sha;
use super::http::Api;
use super::{
    CommentOutcome, CommitState, CommitStatus, DIFF_COMMENT_MARKER, Forge, ForgeConfig, ForgeError,
    ForgeKind, cut_body, cut_chars, marked_body,
};

/// GitLab's note limit is 1,000,000 characters; bytes are a safe bound.
const MAX_NOTE_BYTES: usize = 1_000_000;
/// Kept as short as GitHub's so both forges show the same text.
const MAX_DESCRIPTION_CHARS: usize = 140;
/// Notes fetched per page (GitLab's maximum).
const PER_PAGE: usize = 100;
/// Pages scanned at most.
const MAX_PAGES: usize = 100;

/// A GitLab project (gitlab.com or self-hosted).
#[derive(Clone, Debug)]
pub struct GitLab {
    api: Api,
    /// The project id or full path, percent-encoded for use as one path segment.
    project: String,
}

#[derive(Deserialize)]
struct MergeRequest {
    iid: u64,
    #[serde(default)]
    description: Option<String>,
    source_branch: String,
}

impl From<MergeRequest> for OpenRequest {
    fn from(m: MergeRequest) -> Self {
        OpenRequest {
            number: m.iid,
            branch: m.source_branch,
            body: m.description.unwrap_or_default(),
        }
    }
}

#[derive(Deserialize)]
struct Note {
    id: u64,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    system: bool,
}

impl GitLab {
    /// A client for `config.repository` (numeric project id or `group/sub/project`) at
    /// `config.base_url` (`https://gitlab.com/api/v4` or `https://<host>/api/v4`). The token is
    /// sent as `PRIVATE-TOKEN` (a personal, group or project access token with `api` scope).
    pub fn new(config: ForgeConfig) -> Result<Self, ForgeError> {
        if config.repository.is_empty()
            || config.repository.starts_with('/')
            || config.repository.ends_with('/')
        {
            return Err(ForgeError::Config(format!(
                "gitlab: project {:?} must be a numeric id or group/project",
                config.repository
            )));
        }
        let api = Api::new(
            ForgeKind::GitLab,
            &config.base_url,
            HeaderName::from_static("private-token"),
            None,
            &config.token,
        )?;
        Ok(GitLab {
            api,
            project: encode_segment(&config.repository),
        })
    }

    async fn find_marked_note(&self, iid: u64) -> Result<Option<u64>, ForgeError> {
        for page in 1..=MAX_PAGES {
            let path = format!(
                "/projects/{}/merge_requests/{iid}/notes?sort=asc&order_by=created_at&per_page={PER_PAGE}&page={page}",
                self.project
            );
            let reply = self.api.send::<Vec<Note>>(Method::GET, &path, None).await?;
            if let Some(n) = reply.body.iter().find(|n| {
                !n.system
                    && n.body
                        .as_deref()
                        .is_some_and(|b| b.contains(DIFF_COMMENT_MARKER))
            }) {
                return Ok(Some(n.id));
            }
            let next_page = reply
                .headers
                .get("x-next-page")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            if reply.body.len() < PER_PAGE
                || (reply.headers.contains_key("x-next-page") && next_page.is_empty())
            {
                break;
            }
        }
        Ok(None)
    }
}

/// Percent-encodes everything but RFC 3986 unreserved characters, so `group/project` becomes
/// the single path segment `group%2Fproject` GitLab expects.
pub(crate) fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Forge for GitLab {
    fn kind(&self) -> ForgeKind {
        ForgeKind::GitLab
    }

    async fn set_commit_status(&self, sha: &str, status: &CommitStatus) -> Result<(), ForgeError> {
        check_sha(ForgeKind::GitLab, sha)?;
        // GitLab's `pending` means "queued"; a rollout under way is `running`.
        let state = match status.state {
            CommitState::Pending => "running",
            CommitState::Success => "success",
            CommitState::Failure => "failed",
        };
        let mut body = json!({
            "state": state,
            "name": status.context,
            "description": cut_chars(&status.description, MAX_DESCRIPTION_CHARS),
        });
        if let Some(url) = &status.target_url {
            body["target_url"] = json!(url);
        }
        let path = format!("/projects/{}/statuses/{sha}", self.project);
        match self
            .api
            .send::<serde_json::Value>(Method::POST, &path, Some(&body))
            .await
        {
            Ok(_) => Ok(()),
            Err(ForgeError::Http {
                status: 400,
                message,
                ..
            }) if message.contains("Cannot transition status") => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn upsert_comment(&self, number: u64, body: &str) -> Result<CommentOutcome, ForgeError> {
        let payload = json!({ "body": marked_body(body, MAX_NOTE_BYTES) });
        match self.find_marked_note(number).await? {
            Some(id) => {
                let path = format!(
                    "/projects/{}/merge_requests/{number}/notes/{id}",
                    self.project
                );
                let reply = self
                    .api
                    .send::<Note>(Method::PUT, &path, Some(&payload))
                    .await?;
                Ok(CommentOutcome::Updated { id: reply.body.id })
            }
            None => {
                let path = format!("/projects/{}/merge_requests/{number}/notes", self.project);
                let reply = self
                    .api
                    .send::<Note>(Method::POST, &path, Some(&payload))
                    .await?;
                Ok(CommentOutcome::Created { id: reply.body.id })
            }
        }
    }

    async fn open_approval_requests(&self, prefix: &str) -> Result<Vec<OpenRequest>, ForgeError> {
        let mut out = Vec::new();
        for page in 1..=MAX_PAGES {
            let path = format!(
                "/projects/{}/merge_requests?state=opened&per_page={PER_PAGE}&page={page}",
                self.project
            );
            let reply = self
                .api
                .send::<Vec<MergeRequest>>(Method::GET, &path, None)
                .await?;
            let full = reply.body.len() >= PER_PAGE;
            out.extend(
                reply
                    .body
                    .into_iter()
                    .filter(|m| m.source_branch.starts_with(prefix))
                    .map(OpenRequest::from),
            );
            if !full {
                break;
            }
        }
        Ok(out)
    }

    async fn find_open_request(&self, branch: &str) -> Result<Option<OpenRequest>, ForgeError> {
        let path = format!(
            "/projects/{}/merge_requests?source_branch={}&state=opened",
            self.project,
            encode_segment(branch)
        );
        let reply = self
            .api
            .send::<Vec<MergeRequest>>(Method::GET, &path, None)
            .await?;
        Ok(reply.body.into_iter().next().map(OpenRequest::from))
    }

    async fn create_request(
        &self,
        branch: &str,
        base: &str,
        title: &str,
        body: &str,
    ) -> Result<u64, ForgeError> {
        let path = format!("/projects/{}/merge_requests", self.project);
        let payload = json!({
            "source_branch": branch,
            "target_branch": base,
            "title": title,
            "description": cut_body(body, MAX_NOTE_BYTES),
            "remove_source_branch": true,
        });
        let reply = self
            .api
            .send::<MergeRequest>(Method::POST, &path, Some(&payload))
            .await?;
        Ok(reply.body.iid)
    }

    async fn update_request(&self, number: u64, body: &str) -> Result<(), ForgeError> {
        let path = format!("/projects/{}/merge_requests/{number}", self.project);
        let payload = json!({ "description": cut_body(body, MAX_NOTE_BYTES) });
        self.api
            .send::<serde_json::Value>(Method::PUT, &path, Some(&payload))
            .await?;
        Ok(())
    }

    async fn close_request(&self, number: u64, comment: &str) -> Result<(), ForgeError> {
        let path = format!("/projects/{}/merge_requests/{number}/notes", self.project);
        self.api
            .send::<serde_json::Value>(Method::POST, &path, Some(&json!({ "body": comment })))
            .await?;
        let path = format!("/projects/{}/merge_requests/{number}", self.project);
        self.api
            .send::<serde_json::Value>(Method::PUT, &path, Some(&json!({ "state_event": "close" })))
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_paths_become_one_segment() {
        assert_eq!(encode_segment("group/sub/project"), "group%2Fsub%2Fproject");
        assert_eq!(encode_segment("42"), "42");
        assert_eq!(encode_segment("a b"), "a%20b");
    }
}
