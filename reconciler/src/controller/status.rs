//! The status side of the loop: render status documents from CR status, coalesce, commit to
//! the status branch, push (retrying on top of the remote's tip when it moved). Nothing is
//! lost when the remote is down: the newest status is pushed once it is reachable again.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use jiff::Timestamp;
use nodewright_schema::NodeWright;

use crate::source::cadence::{BACKOFF_BASE, BACKOFF_CAP, Backoff, after};
use crate::source::remote_call::{self, Answer, RemoteCall};
use crate::source::repo::{self, RemoteSpec};
use crate::source::triggers::process_seed;
use crate::writeback::coalesce::{Coalescer, Decision};
use crate::writeback::git::{Author, WritebackError, commit_status, push_branch_unless};
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

/// A status push, out on its own thread.
type Pushing = RemoteCall<Result<bool, WritebackError>>;

/// Status writer state.
pub struct StatusWriter {
    target: StatusTarget,
    coalescer: Coalescer,
    last_docs: Vec<StatusDocument>,
    last_files: Vec<StatusFile>,
    push_pending: bool,
    push_backoff: Backoff,
    push_retry_at: Option<Timestamp>,
    pushing: Option<Pushing>,
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
            pushing: None,
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
        // Nothing is committed while a push is out: its thread may recommit the branch.
        if self.settle_push(now, Duration::ZERO)?.is_none() {
            return Ok(StatusWrite::PushPending("status: push under way".into()));
        }
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
    /// The push runs on its own thread: a remote that has not answered within
    /// [`remote_call::PATIENCE`] is left to answer while the loop goes on (nothing is committed
    /// meanwhile), and one that has not answered within its timeout has failed.
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
        let push = StatusPush {
            target: self.target.clone(),
            remote,
            files: self.last_files.clone(),
            message: format!(
                "{} (after the remote moved)",
                commit_message(&[], &self.last_docs)
            ),
            at: now.as_second(),
        };
        self.pushing = Some(RemoteCall::start(move |give_up| push.run(give_up)));
        // A remote that failed last time is not waited for: the loop goes on at once.
        let patience = match self.push_backoff.failing() {
            true => Duration::ZERO,
            false => remote_call::PATIENCE,
        };
        Ok(self.settle_push(now, patience)? == Some(true))
    }

    /// Takes the answer of the push out when it comes within `patience`: `None` while it is
    /// still out, otherwise whether the remote holds the newest status.
    fn settle_push(
        &mut self,
        now: Timestamp,
        patience: Duration,
    ) -> Result<Option<bool>, WritebackError> {
        let Some(out) = self.pushing.take() else {
            return Ok(Some(!self.push_pending));
        };
        let given_up = |message: &str| WritebackError::Push {
            remote: self
                .target
                .remote
                .as_ref()
                .map_or_else(String::new, |r| r.url.clone()),
            branch: self.target.branch.clone(),
            message: message.to_owned(),
        };
        let timeout = self
            .target
            .remote
            .as_ref()
            .map_or(repo::DEFAULT_TIMEOUT, |r| r.timeout);
        let answer = match out.look(patience.min(timeout), timeout) {
            Answer::Waiting(out) => {
                self.pushing = Some(out);
                return Ok(None);
            }
            Answer::Ready(answer) => answer,
            Answer::TimedOut(after) => Err(given_up(&remote_call::no_answer("push", after))),
            Answer::Vanished => Err(given_up("the push ended without an answer")),
        };
        match answer {
            Ok(true) => {
                self.push_pending = false;
                self.push_retry_at = None;
                if let Some(attempts) = self.push_backoff.succeeded() {
                    tracing::info!(remote = %self.remote_url(), failed_attempts = attempts, "status push works again");
                }
                Ok(Some(true))
            }
            // Rejected every time: the remote keeps moving; the next write tries again.
            Ok(false) => Ok(Some(false)),
            Err(e @ WritebackError::Push { .. }) => {
                let failure = self.push_backoff.failed();
                self.push_retry_at = Some(after(now, failure.retry_after));
                let retry_in = format!("{:.0?}", failure.retry_after);
                if failure.opens_episode() {
                    tracing::warn!(error = %e, %retry_in, "status push failed; the commit stays local and is pushed with backoff (logged again when it works)");
                } else {
                    tracing::debug!(error = %e, attempts = failure.attempts, %retry_in, "status push failed again");
                }
                Ok(Some(false))
            }
            Err(e) => Err(e),
        }
    }

    fn remote_url(&self) -> &str {
        self.target.remote.as_ref().map_or("", |r| r.url.as_str())
    }

    /// How long the loop may sleep before it looks at the push out again (none when no push
    /// is out).
    pub fn until_look(&self) -> Option<Duration> {
        self.pushing.as_ref().map(|_| remote_call::CHECK_EVERY)
    }

    /// Before the process ends: waits up to `patience` for the push out, so the last status
    /// committed reaches the remote when the remote answers, and ends it otherwise (the commit
    /// stays in the local mirror).
    pub fn finish(&mut self, now: Timestamp, patience: Duration) {
        match self.settle_push(now, patience) {
            Ok(Some(_)) => {}
            Ok(None) => {
                if let Some(out) = self.pushing.take() {
                    out.give_up(Duration::from_secs(2));
                }
                tracing::warn!(remote = %self.remote_url(), "stopping with the status push still out; the newest status stays in the local mirror");
            }
            Err(e) => tracing::warn!(error = %e, "status write-back failed while stopping"),
        }
    }
}

/// One push of the status branch with what it needs to recommit on top of a remote that moved:
/// it runs on its own thread, away from the writer.
struct StatusPush {
    target: StatusTarget,
    remote: RemoteSpec,
    files: Vec<StatusFile>,
    message: String,
    at: i64,
}

impl StatusPush {
    /// Pushes; a rejection (the remote moved) fetches the remote's tip, commits the status on
    /// top and pushes again, three times at most.
    fn run(self, give_up: &AtomicBool) -> Result<bool, WritebackError> {
        let branch = &self.target.branch;
        for _ in 0..3 {
            if push_branch_unless(&self.target.repo, &self.remote, branch, false, give_up)? {
                return Ok(true);
            }
            let fetch_error = |message: String| WritebackError::Push {
                remote: self.remote.url.clone(),
                branch: branch.clone(),
                message: format!(
                    "the push was rejected and fetching the remote's status branch failed: {message}"
                ),
            };
            let Some(mirror) = &self.target.mirror else {
                return Err(fetch_error("no mirror repository to fetch into".into()));
            };
            // The mirror's fetch refspec brings the remote's status branch over ours.
            mirror
                .fetch_unless(give_up)
                .map_err(|e| fetch_error(e.to_string()))?;
            commit_status(
                &self.target.repo,
                branch,
                &self.files,
                &self.message,
                &self.target.author,
                self.at,
            )?;
        }
        Ok(false)
    }
}
