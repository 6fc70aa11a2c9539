//! The status side of the loop: render status documents from CR status, coalesce, commit to
//! the status branch, push (retrying on top of the remote's tip when it moved). Nothing is
//! lost when the remote is down: the newest status is pushed once it is reachable again.

use std::path::PathBuf;
use std::time::Duration;

use jiff::Timestamp;
use nodewright_schema::NodeWright;

use crate::source::cadence::{BACKOFF_BASE, BACKOFF_CAP, Backoff, after};
use crate::source::triggers::process_seed;
use crate::writeback::coalesce::{Coalescer, Decision};
use crate::writeback::git::{Author, WritebackError, commit_status, push};
use crate::writeback::render::{
    DEFAULT_NODE_DETAIL_LIMIT, StatusDocument, StatusFile, commit_message, documents,
    render_documents,
};
use crate::writeback::source::SourceRecord;

/// Where the status branch goes.
#[derive(Clone, Debug)]
pub struct StatusTarget {
    /// Repository the branch is committed in.
    pub repo: PathBuf,
    /// Branch name.
    pub branch: String,
    /// Remote to push to, with the credentials and trust fetch uses (none for a local
    /// repository).
    pub remote: Option<crate::source::repo::RemoteSpec>,
    /// Commit author.
    pub author: Author,
    /// The mirror of the remote (fetched through gix before re-committing after a rejection).
    pub mirror: Option<crate::source::repo::GitRepo>,
    /// At most one commit per interval (terminal transitions flush at once).
    pub interval: Duration,
}

/// What a write attempt did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatusWrite {
    /// Nothing material changed.
    Unchanged,
    /// Changed; waiting for the interval.
    Deferred,
    /// Committed (and pushed when a remote is set) with this message.
    Committed(String),
    /// Committed locally; the push failed and will be retried.
    PushPending(String),
}

/// Status writer state.
pub struct StatusWriter {
    target: StatusTarget,
    coalescer: Coalescer,
    last_docs: Vec<StatusDocument>,
    last_files: Vec<StatusFile>,
    push_pending: bool,
    push_backoff: Backoff,
    push_retry_at: Option<Timestamp>,
    source: Option<SourceRecord>,
    last_source: Option<SourceRecord>,
}

impl StatusWriter {
    /// A writer for a target.
    pub fn new(target: StatusTarget) -> Self {
        let coalescer = Coalescer::new(target.interval);
        StatusWriter {
            target,
            coalescer,
            last_docs: Vec::new(),
            last_files: Vec::new(),
            push_pending: false,
            push_backoff: Backoff::new(BACKOFF_BASE, BACKOFF_CAP, process_seed()),
            push_retry_at: None,
            source: None,
            last_source: None,
        }
    }

    /// The target.
    pub fn target(&self) -> &StatusTarget {
        &self.target
    }

    /// What the next status commits say about the source (the commit in force, a rejected
    /// newer one); none writes no `_source.yaml`.
    pub fn set_source(&mut self, record: SourceRecord) {
        self.source = Some(record);
    }

    /// Renders the NodeWrights' status and commits it when due.
    pub fn write(
        &mut self,
        now: Timestamp,
        nodewrights: &[std::sync::Arc<NodeWright>],
    ) -> Result<StatusWrite, WritebackError> {
        let docs = documents(nodewrights, DEFAULT_NODE_DETAIL_LIMIT);
        // Changed documents mean changed files: within the coalescing interval there is
        // nothing to commit yet, and the files need not be rendered.
        if docs != self.last_docs
            && !self.push_pending
            && let Decision::WaitUntil(_) = self.coalescer.decide_changed(now, &docs)
        {
            return Ok(StatusWrite::Deferred);
        }
        let mut files = render_documents(&docs);
        if let Some(source) = &self.source {
            source.add_to(&mut files);
        }
        match self.coalescer.decide(now, &files, &docs) {
            Decision::Unchanged if !self.push_pending => return Ok(StatusWrite::Unchanged),
            Decision::Unchanged => {
                return Ok(match self.push(now)? {
                    true => StatusWrite::Committed("status: pushed pending commit".into()),
                    false => StatusWrite::PushPending("status: push still pending".into()),
                });
            }
            Decision::WaitUntil(_) => return Ok(StatusWrite::Deferred),
            Decision::Commit => {}
        }
        let message = match &self.source {
            // Only the source moved (a rejection, or a new commit in force before any pass).
            Some(source) if self.last_source.as_ref() != Some(source) && self.last_docs == docs => {
                source.commit_subject()
            }
            _ => commit_message(&self.last_docs, &docs),
        };
        commit_status(
            &self.target.repo,
            &self.target.branch,
            &files,
            &message,
            &self.target.author,
            now.as_second(),
        )?;
        self.coalescer.committed(now, &files, &docs);
        self.last_docs = docs;
        self.last_files = files;
        self.last_source.clone_from(&self.source);
        self.push_pending = self.target.remote.is_some();
        Ok(if self.push(now)? {
            StatusWrite::Committed(message)
        } else {
            StatusWrite::PushPending(message)
        })
    }

    /// Pushes when a push is pending and no backoff is running; on rejection the remote's tip
    /// is fetched and the current status is committed on top of it before one more attempt.
    /// A failure logs one line when its episode opens, and one when a push works again.
    fn push(&mut self, now: Timestamp) -> Result<bool, WritebackError> {
        let Some(remote) = self.target.remote.clone() else {
            self.push_pending = false;
            return Ok(true);
        };
        if !self.push_pending {
            return Ok(true);
        }
        if self.push_retry_at.is_some_and(|at| now < at) {
            return Ok(false);
        }
        // Fetching the mirror moves the local status branch to the remote's tip, which may not
        // hold the newest status yet: commit it again on top (nothing when it is there).
        if !self.last_files.is_empty() {
            commit_status(
                &self.target.repo,
                &self.target.branch,
                &self.last_files,
                &commit_message(&[], &self.last_docs),
                &self.target.author,
                now.as_second(),
            )?;
        }
        for _ in 0..3 {
            match push(&self.target.repo, &remote, &self.target.branch) {
                Ok(true) => {
                    self.push_pending = false;
                    self.push_retry_at = None;
                    if let Some(attempts) = self.push_backoff.succeeded() {
                        tracing::info!(remote = %remote.url, failed_attempts = attempts, "status push works again");
                    }
                    return Ok(true);
                }
                Ok(false) => self.rebase_onto_remote(&remote, now)?,
                Err(e) => {
                    let failure = self.push_backoff.failed();
                    self.push_retry_at = Some(after(now, failure.retry_after));
                    let retry_in = format!("{:.0?}", failure.retry_after);
                    if failure.opens_episode() {
                        tracing::warn!(error = %e, %retry_in, "status push failed; the commit stays local and is pushed with backoff (logged again when it works)");
                    } else {
                        tracing::debug!(error = %e, attempts = failure.attempts, %retry_in, "status push failed again");
                    }
                    return Ok(false);
                }
            }
        }
        Ok(false)
    }

    fn rebase_onto_remote(
        &mut self,
        remote: &crate::source::repo::RemoteSpec,
        now: Timestamp,
    ) -> Result<(), WritebackError> {
        let branch = self.target.branch.clone();
        let fetch_error = |message: String| WritebackError::Push {
            remote: remote.url.clone(),
            branch: branch.clone(),
            message: format!(
                "the push was rejected and fetching the remote's status branch failed: {message}"
            ),
        };
        let Some(mirror) = &self.target.mirror else {
            return Err(fetch_error("no mirror repository to fetch into".into()));
        };
        // The mirror's fetch refspec brings the remote's status branch over ours.
        mirror.fetch().map_err(|e| fetch_error(e.to_string()))?;
        let message = format!(
            "{} (after the remote moved)",
            commit_message(&[], &self.last_docs)
        );
        commit_status(
            &self.target.repo,
            &branch,
            &self.last_files,
            &message,
            &self.target.author,
            now.as_second(),
        )?;
        Ok(())
    }
}
