//! The Git side of the loop: fetch, resolve the tracked branch, evaluate a new head as a whole
//! and keep the last valid desired state in force (issue 6's tracker).

use std::path::{Path, PathBuf};

use gix::ObjectId;

use crate::cluster::Desired;
use crate::source::desired::{
    DesiredStateTracker, ReadOptions, TrackerOutcome, evaluate_commit, rejection_report,
};
use crate::source::repo::{GitRepo, RemoteSpec, RepoError};

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
    /// The new head is invalid; the last valid state stays (the report names every violation).
    Rejected {
        /// The commit.
        commit: String,
        /// The human report (commit, file:line of each violation).
        report: String,
    },
}

/// The Git source of the loop.
pub struct GitSource {
    git: GitRepo,
    branch: String,
    status_branch: String,
    options: ReadOptions,
    tracker: DesiredStateTracker,
    seen: Option<ObjectId>,
    remote: Option<RemoteSpec>,
}

impl GitSource {
    /// Opens (or mirrors) the repository.
    pub fn open(
        location: &RepoLocation,
        branch: &str,
        status_branch: &str,
        options: ReadOptions,
    ) -> Result<Self, RepoError> {
        let (git, remote) = match location {
            RepoLocation::Local(path) => (GitRepo::open(path)?, None),
            RepoLocation::Remote { spec, cache_root } => (
                GitRepo::sync_remote(spec, cache_root)?.0,
                Some(spec.clone()),
            ),
        };
        Ok(GitSource {
            git,
            branch: branch.to_string(),
            status_branch: status_branch.to_string(),
            options,
            tracker: DesiredStateTracker::new(),
            seen: None,
            remote,
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

    /// Fetches (for a remote) and evaluates the branch head when it moved.
    pub fn refresh(&mut self) -> Result<SourceChange, RepoError> {
        self.git.fetch()?;
        let head = self
            .git
            .resolve_desired(&self.branch, &self.status_branch)?;
        if self.seen == Some(head) {
            return Ok(SourceChange::None);
        }
        let previous = self.tracker.previous();
        let evaluation = evaluate_commit(&self.git, head, &self.options, previous.as_ref())?;
        self.seen = Some(head);
        let commit = head.to_string();
        Ok(match self.tracker.offer(evaluation) {
            TrackerOutcome::Applied { digest } => SourceChange::Applied { commit, digest },
            TrackerOutcome::Unchanged => SourceChange::Unchanged { commit },
            TrackerOutcome::Rejected { commit, errors } => {
                let report = rejection_report(&commit, &errors);
                SourceChange::Rejected { commit, report }
            }
        })
    }

    /// The desired state in force.
    pub fn desired(&self) -> Option<&Desired> {
        self.tracker.current().map(|v| &v.desired)
    }
}
