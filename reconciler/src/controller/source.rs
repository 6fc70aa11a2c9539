//! The Git side of the loop: fetch, resolve the tracked branch, evaluate a new head as a whole
//! and keep the last valid desired state in force (issue 6's tracker).

use std::path::{Path, PathBuf};
use std::time::Duration;

use gix::ObjectId;
use jiff::Timestamp;

use crate::cluster::Desired;
use crate::diff::Problem;
use crate::source::cadence::FetchCadence;
use crate::source::desired::{
    CommitEvaluation, DesiredStateTracker, ReadOptions, TrackerOutcome, evaluate_commit,
    rejection_report, violation_lines,
};
use crate::writeback::source::{Rejection, SourceRecord};

/// How many commits before an invalid head a fresh start looks at for a valid one.
pub const WALK_BACK_LIMIT: usize = 100;

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
use crate::source::remote_call::{self, Answer, RemoteCall};
use crate::source::repo::{self, FetchOutcome, GitRepo, RemoteSpec, RepoError};
use crate::source::triggers::{PollConfig, process_seed};

/// Where the desired state comes from.
#[derive(Clone, Debug)]
pub enum RepoLocation {
    /// A repository on this machine, read in place (no checkout needed).
    Local(PathBuf),
    /// A remote mirrored into a bare cache under `cache_root`.
    Remote {
        /// The remote.
        spec: RemoteSpec,
        /// Cache directory root.
        cache_root: PathBuf,
    },
}

/// What a refresh found.
#[derive(Clone, Debug, PartialEq)]
pub enum SourceChange {
    /// The branch did not move.
    None,
    /// A new valid desired state is in force.
    Applied {
        /// The commit.
        commit: String,
        /// Its digest.
        digest: String,
    },
    /// The branch moved to a commit desiring the same objects.
    Unchanged {
        /// The commit.
        commit: String,
    },
    /// A fresh start whose head is invalid: the newest valid commit before it is in force.
    AppliedAncestor {
        /// The commit applied.
        commit: String,
        /// Its digest.
        digest: String,
        /// The invalid head.
        rejected: String,
        /// The human report (both commits, file:line of each violation of the head).
        report: String,
        /// The invalid head and its violations, for the status branch and the forge.
        rejection: Rejection,
    },
    /// The new head is invalid; the last valid state stays (the report names every violation).
    Rejected {
        /// The commit.
        commit: String,
        /// The human report (commit, file:line of each violation).
        report: String,
        /// The commit and its violations, for the status branch and the forge.
        rejection: Rejection,
    },
}

/// Whether this iteration fetched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FetchAttempt {
    /// No fetch was due.
    NotDue,
    /// Fetched (a local repository has nothing to fetch and counts as fetched).
    Fetched,
    /// The fetch failed; the next one waits out the backoff.
    Failed,
    /// A fetch is out and the remote has not answered yet; the loop goes on meanwhile.
    Waiting,
}

/// A fetch of the remote, out on its own thread.
type Fetching = RemoteCall<Result<FetchOutcome, RepoError>>;

/// The Git source of the loop.
pub struct GitSource {
    cadence: FetchCadence,
    git: GitRepo,
    branch: String,
    status_branch: String,
    options: ReadOptions,
    tracker: DesiredStateTracker,
    seen: Option<ObjectId>,
    applied: Option<String>,
    remote: Option<RemoteSpec>,
    fetching: Option<Fetching>,
    /// A fetch was asked for while one was out: the commit that prompted it may have landed
    /// after the remote listed its refs.
    asked_while_fetching: bool,
    /// The fetch at start failed and said so: its failure episode is already logged.
    fetch_failed_at_start: bool,
}

impl GitSource {
    /// Opens (or mirrors) the repository.
    pub fn open(
        location: &RepoLocation,
        branch: &str,
        status_branch: &str,
        options: ReadOptions,
    ) -> Result<Self, RepoError> {
        let mut fetch_failed_at_start = false;
        let (git, remote) = match location {
            RepoLocation::Local(path) => (GitRepo::open(path)?, None),
            RepoLocation::Remote { spec, cache_root } => {
                let mirror = GitRepo::open_mirror(spec, cache_root)?;
                match mirror.fetch() {
                    Ok(_) => {}
                    // The mirror an earlier start left keeps the fleet reconciled to its
                    // branch while the remote is away; the loop fetches again with backoff.
                    Err(e) if mirror.resolve(&format!("refs/heads/{branch}")).is_ok() => {
                        tracing::warn!(error = %e, "cannot fetch at start; reconciling from the mirror an earlier start left until the remote answers (logged again when it does)");
                        fetch_failed_at_start = true;
                    }
                    Err(e) => return Err(e),
                }
                (mirror, Some(spec.clone()))
            }
        };
        Ok(GitSource {
            cadence: FetchCadence::new(PollConfig::default().interval, process_seed()),
            git,
            branch: branch.to_string(),
            status_branch: status_branch.to_string(),
            options,
            tracker: DesiredStateTracker::new(),
            seen: None,
            applied: None,
            remote,
            fetching: None,
            asked_while_fetching: false,
            fetch_failed_at_start,
        })
    }

    /// The repository the status branch is written to (the local repository or the cache).
    pub fn repo_path(&self) -> &Path {
        self.git.path()
    }

    /// The remote to push the status branch to (with its credentials and trust), when
    /// mirroring one.
    pub fn remote(&self) -> Option<&RemoteSpec> {
        self.remote.as_ref()
    }

    /// The repository handle (the mirror of a remote), for fetching the remote's status branch
    /// after a rejected push.
    pub fn repo(&self) -> &GitRepo {
        &self.git
    }

    /// The git directory (watched for ref changes by the filesystem trigger).
    pub fn git_dir(&self) -> PathBuf {
        self.git.git_dir()
    }

    /// Replaces the fetch schedule (the default polls every 30 s from a per-process seed).
    pub fn with_cadence(mut self, cadence: FetchCadence) -> Self {
        self.cadence = cadence;
        self
    }

    /// A webhook or a local ref change: fetch at the next look.
    pub fn request_fetch(&mut self) {
        if self.fetching.is_some() {
            self.asked_while_fetching = true;
        }
        self.cadence.request();
    }

    /// How long from `now` until the next fetch is due, or until the fetch out is looked at
    /// again, so an idle loop wakes for it.
    pub fn until_fetch(&self, now: Timestamp) -> Duration {
        match self.fetching {
            Some(_) => remote_call::CHECK_EVERY,
            None => self.cadence.until_due(now),
        }
    }

    /// Fetches when the cadence says so (logging one line when a failure episode opens and one
    /// when it ends), then evaluates the branch head when it moved. A remote that does not
    /// answer within [`remote_call::PATIENCE`] is left to answer later while the loop goes on,
    /// and counts as failed after its timeout (`--git-timeout`). A failed fetch leaves the mirror
    /// as it was, so the evaluation still runs on what is there.
    pub fn poll(&mut self, now: Timestamp) -> (FetchAttempt, Result<SourceChange, RepoError>) {
        let attempt = match self.fetching.take() {
            Some(out) => self.look_at(out, now, Duration::ZERO),
            None if self.cadence.due(now) => {
                self.asked_while_fetching = false;
                if self.remote.is_none() {
                    // A repository read in place has nothing to fetch.
                    return (
                        self.fetched(Answer::Ready(Ok(FetchOutcome::default())), now),
                        self.evaluate(),
                    );
                }
                let git = self.git.clone();
                let out = RemoteCall::start(move |give_up| git.fetch_unless(give_up));
                // A remote that failed last time is not waited for: the loop goes on at once.
                let patience = match self.cadence.failing() {
                    true => Duration::ZERO,
                    false => remote_call::PATIENCE,
                };
                self.look_at(out, now, patience)
            }
            None => FetchAttempt::NotDue,
        };
        (attempt, self.evaluate())
    }

    /// Takes the answer of the fetch out, if it came within `patience`.
    fn look_at(&mut self, out: Fetching, now: Timestamp, patience: Duration) -> FetchAttempt {
        let timeout = self
            .remote
            .as_ref()
            .map_or(repo::DEFAULT_TIMEOUT, |r| r.timeout);
        let answer = out.look(patience.min(timeout), timeout);
        self.fetched(answer, now)
    }

    fn fetched(
        &mut self,
        answer: Answer<Result<FetchOutcome, RepoError>>,
        now: Timestamp,
    ) -> FetchAttempt {
        let answer = match answer {
            Answer::Waiting(out) => {
                self.fetching = Some(out);
                return FetchAttempt::Waiting;
            }
            Answer::Ready(answer) => answer,
            Answer::TimedOut(after) => Err(self.git.no_answer(after)),
            Answer::Vanished => Err(self.git.fetch_vanished()),
        };
        let attempt = match answer {
            Ok(_) => {
                let failed = self.cadence.succeeded(now);
                let failed_at_start = std::mem::take(&mut self.fetch_failed_at_start);
                if failed.is_some() || failed_at_start {
                    tracing::info!(
                        remote = self.remote.as_ref().map(|r| r.url.as_str()),
                        failed_attempts = failed.unwrap_or(0) + u32::from(failed_at_start),
                        "fetching works again"
                    );
                }
                FetchAttempt::Fetched
            }
            Err(e) => {
                let failure = self.cadence.failed(now);
                let retry_in = format!("{:.0?}", failure.retry_after);
                if failure.opens_episode() && !self.fetch_failed_at_start {
                    tracing::warn!(error = %e, %retry_in, "fetch failed; the desired state in force stays, retrying with backoff (logged again when it works)");
                } else {
                    tracing::debug!(error = %e, attempts = failure.attempts, %retry_in, "fetch failed again");
                }
                FetchAttempt::Failed
            }
        };
        if std::mem::take(&mut self.asked_while_fetching) {
            self.cadence.request();
        }
        attempt
    }

    /// Fetches (for a remote) now and evaluates the branch head when it moved.
    pub fn refresh(&mut self) -> Result<SourceChange, RepoError> {
        self.git.fetch()?;
        self.evaluate()
    }

    /// Evaluates the branch head of the repository as it is, when it moved. When nothing is in
    /// force yet (a fresh start) and the head is invalid, the newest valid commit among the
    /// head's first parents (at most [`WALK_BACK_LIMIT`]) is applied instead, and the change
    /// says so.
    pub fn evaluate(&mut self) -> Result<SourceChange, RepoError> {
        let head = self
            .git
            .resolve_desired(&self.branch, &self.status_branch)?;
        if self.seen == Some(head) {
            return Ok(SourceChange::None);
        }
        let previous = self.tracker.previous();
        let evaluation = evaluate_commit(&self.git, head, &self.options, previous.as_ref())?;
        self.seen = Some(head);
        if !evaluation.is_valid() && self.tracker.current().is_none() {
            return self.walk_back(head, evaluation);
        }
        let commit = head.to_string();
        Ok(match self.tracker.offer(evaluation) {
            TrackerOutcome::Applied { digest } => {
                self.applied = Some(commit.clone());
                SourceChange::Applied { commit, digest }
            }
            TrackerOutcome::Unchanged => {
                self.applied = Some(commit.clone());
                SourceChange::Unchanged { commit }
            }
            TrackerOutcome::Rejected { commit, errors } => {
                let report = rejection_report(&commit, &errors);
                let rejection = Rejection::new(&commit, &errors);
                SourceChange::Rejected {
                    commit,
                    report,
                    rejection,
                }
            }
        })
    }

    /// Applies the newest valid first-parent ancestor of the invalid `head`, then records the
    /// head's rejection (so the status branch names both).
    fn walk_back(
        &mut self,
        head: ObjectId,
        head_evaluation: CommitEvaluation,
    ) -> Result<SourceChange, RepoError> {
        let ancestors = self.git.first_parents(head, WALK_BACK_LIMIT + 1)?;
        let mut found = None;
        for (behind, id) in ancestors.iter().enumerate().skip(1) {
            let evaluation = evaluate_commit(&self.git, *id, &self.options, None)?;
            if evaluation.is_valid() {
                found = Some((behind, evaluation));
                break;
            }
        }
        let errors: Vec<Problem> = head_evaluation.errors().cloned().collect();
        let rejected = head.to_string();
        let Some((behind, valid)) = found else {
            self.tracker.offer(head_evaluation);
            let report = format!(
                "commit {rejected} is invalid and was not applied ({} error{}), and none of the {} commit{} before it on {} is valid: nothing is applied\n{}",
                errors.len(),
                plural(errors.len()),
                ancestors.len().saturating_sub(1),
                plural(ancestors.len().saturating_sub(1)),
                self.branch,
                violation_lines(&errors)
            );
            return Ok(SourceChange::Rejected {
                rejection: Rejection::new(&rejected, &errors),
                commit: rejected,
                report,
            });
        };
        let commit = valid.commit.clone();
        let digest = valid
            .valid
            .as_ref()
            .map(|v| v.digest.clone())
            .unwrap_or_default();
        self.tracker.offer(valid);
        self.tracker.offer(head_evaluation);
        self.applied = Some(commit.clone());
        let report = format!(
            "commit {rejected} at the head of {} is invalid and was not applied ({} error{}); applied {commit}, the newest valid commit, {behind} commit{} back:\n{}",
            self.branch,
            errors.len(),
            plural(errors.len()),
            plural(behind),
            violation_lines(&errors)
        );
        Ok(SourceChange::AppliedAncestor {
            commit,
            digest,
            rejection: Rejection::new(&rejected, &errors),
            rejected,
            report,
        })
    }

    /// What the status branch records about the source: the commit in force and a newer
    /// rejected one.
    pub fn record(&self) -> SourceRecord {
        SourceRecord {
            branch: self.branch.clone(),
            applied_commit: self.applied.clone(),
            rejected: self
                .tracker
                .last_rejected()
                .map(|(commit, errors)| Rejection::new(commit, errors)),
        }
    }

    /// The desired state in force.
    pub fn desired(&self) -> Option<&Desired> {
        self.tracker.current().map(|v| &v.desired)
    }
}
