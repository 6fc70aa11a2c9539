//! The Git source as the controller uses it: on each trigger, fetch (remotes), resolve the
//! tracked branch, and when it moved, evaluate the new head commit as a whole and offer it to
//! the [`DesiredStateTracker`]. Blocking (gix is synchronous); run it on a blocking thread.

use std::path::PathBuf;

use gix::ObjectId;

use super::desired::{
    DesiredStateTracker, ReadOptions, TrackerOutcome, ValidDesired, evaluate_commit,
    rejection_report,
};
use super::repo::{GitRepo, RemoteSpec, RepoError};
use crate::diff::Problem;

/// Where the repository is.
#[derive(Clone, Debug)]
pub enum Location {
    /// A local repository (work tree or bare), read in place.
    Local(PathBuf),
    /// A remote, mirrored into a bare cache repository under the directory.
    Remote(RemoteSpec, PathBuf),
}

/// What to track.
#[derive(Clone, Debug)]
pub struct SourceConfig {
    /// The repository.
    pub location: Location,
    /// The branch holding desired state.
    pub branch: String,
    /// Root path, limits, signature policy.
    pub read: ReadOptions,
    /// The write-back branch, never read as desired state.
    pub status_branch: String,
}

/// What a refresh found.
#[derive(Clone, Debug, PartialEq)]
pub enum SourceUpdate {
    /// The branch still points at the commit last evaluated.
    NoNewCommit {
        /// That commit.
        commit: String,
    },
    /// A new valid commit with a different desired state is now in force.
    Applied {
        /// The commit.
        commit: String,
        /// Its digest.
        digest: String,
    },
    /// A new valid commit desiring exactly what is in force (comments, formatting, other
    /// paths).
    SameDesired {
        /// The commit.
        commit: String,
    },
    /// A new commit was refused; the previous desired state stays in force.
    Rejected {
        /// The commit.
        commit: String,
        /// Its errors, with file:line.
        errors: Vec<Problem>,
        /// A human report (commit and every error).
        report: String,
    },
}

/// The tracked repository and the last valid desired state.
pub struct GitSource {
    config: SourceConfig,
    git: Option<GitRepo>,
    tracker: DesiredStateTracker,
    last_seen: Option<ObjectId>,
}

impl GitSource {
    /// A source that has not looked at the repository yet.
    pub fn new(config: SourceConfig) -> Self {
        GitSource {
            config,
            git: None,
            tracker: DesiredStateTracker::new(),
            last_seen: None,
        }
    }

    /// The desired state in force, if any commit was valid yet.
    pub fn current(&self) -> Option<&ValidDesired> {
        self.tracker.current()
    }

    /// The tracker (last rejected commit, previous objects).
    pub fn tracker(&self) -> &DesiredStateTracker {
        &self.tracker
    }

    /// The opened repository (after the first refresh), e.g. for [`super::triggers::watch_refs`].
    pub fn repo(&self) -> Option<&GitRepo> {
        self.git.as_ref()
    }

    fn open(&mut self) -> Result<&GitRepo, RepoError> {
        match (&mut self.git, &self.config.location) {
            (Some(git), _) => {
                git.fetch()?;
            }
            (slot @ None, Location::Local(path)) => *slot = Some(GitRepo::open(path)?),
            (slot @ None, Location::Remote(spec, cache)) => {
                *slot = Some(GitRepo::sync_remote(spec, cache)?.0)
            }
        }
        // Just set or already present.
        self.git.as_ref().ok_or_else(|| RepoError::Open {
            path: PathBuf::new(),
            message: "repository not opened".to_owned(),
        })
    }

    /// Fetch if remote, resolve the branch, and evaluate its head when it moved.
    pub fn refresh(&mut self) -> Result<SourceUpdate, RepoError> {
        let branch = self.config.branch.clone();
        let status_branch = self.config.status_branch.clone();
        let git = self.open()?.clone();
        let head = git.resolve_desired(&branch, &status_branch)?;
        if self.last_seen == Some(head) {
            return Ok(SourceUpdate::NoNewCommit {
                commit: head.to_string(),
            });
        }
        let previous = self.tracker.previous();
        let evaluation = evaluate_commit(&git, head, &self.config.read, previous.as_ref())?;
        self.last_seen = Some(head);
        let commit = head.to_string();
        Ok(match self.tracker.offer(evaluation) {
            TrackerOutcome::Applied { digest } => {
                tracing::info!(%commit, %digest, "new desired state");
                SourceUpdate::Applied { commit, digest }
            }
            TrackerOutcome::Unchanged => SourceUpdate::SameDesired { commit },
            TrackerOutcome::Rejected { commit, errors } => {
                let report = rejection_report(&commit, &errors);
                tracing::warn!("{report}");
                SourceUpdate::Rejected {
                    commit,
                    errors,
                    report,
                }
            }
        })
    }
}
