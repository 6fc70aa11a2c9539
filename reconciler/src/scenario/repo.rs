//! The scenario's repository: an in-memory commit history on the tracked branch, and the
//! desired state each commit declares (through the same manifest loader and whole-set
//! validation as a real Git source; an invalid commit keeps the last valid desired state).

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use nodewright_schema::NodeWright;
use nodewright_schema::approvals::ApprovedBatches;

use crate::cluster::Desired;
use crate::source::approvals::{self, Older};
use crate::source::manifests::{self, Limits, Loaded, Previous};

/// One commit: its id, message and complete file map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Commit {
    /// A 40-hex id derived from the parent, message and content.
    pub id: String,
    /// Message.
    pub message: String,
    /// Path → content.
    pub files: BTreeMap<String, String>,
}

/// The commit history, oldest first.
#[derive(Clone, Debug)]
pub struct Repo {
    commits: Vec<Commit>,
}

impl Repo {
    /// A repository whose first commit holds `files`.
    pub fn new(files: BTreeMap<String, String>) -> Self {
        let mut repo = Repo {
            commits: Vec::new(),
        };
        repo.commit("initial commit", files);
        repo
    }

    /// Adds a commit with the complete new file map.
    pub fn commit(&mut self, message: &str, files: BTreeMap<String, String>) -> &Commit {
        let mut hash = Sha256::new();
        if let Some(parent) = self.commits.last() {
            hash.update(parent.id.as_bytes());
        }
        hash.update(message.as_bytes());
        for (path, content) in &files {
            hash.update(path.as_bytes());
            hash.update([0]);
            hash.update(content.as_bytes());
            hash.update([0]);
        }
        let id = hex::encode(&hash.finalize()[..20]);
        self.commits.push(Commit {
            id,
            message: message.to_string(),
            files,
        });
        self.head()
    }

    /// The tip of the branch.
    pub fn head(&self) -> &Commit {
        // `new` always creates the first commit and commits are never removed.
        self.commits
            .last()
            .expect("a scenario repository always has its first commit")
    }

    /// Every commit, oldest first.
    pub fn commits(&self) -> &[Commit] {
        &self.commits
    }

    /// The approvals in force at `head` for its NodeWrights, from the commits before it
    /// (source/approvals.rs: the same rule as over a Git repository).
    pub fn approvals_in_force(
        &self,
        head: &Commit,
        nodewrights: &[NodeWright],
    ) -> BTreeMap<String, ApprovedBatches> {
        let at = self
            .commits
            .iter()
            .position(|c| c.id == head.id)
            .unwrap_or(self.commits.len());
        let older = self.commits[..at].iter().rev().map(|commit| {
            let loaded = load(commit);
            if loaded.errors.is_empty() && loaded.undecodable.is_empty() {
                Older::Commit(loaded.nodewrights.into_iter().map(|s| s.object).collect())
            } else {
                Older::Unreadable
            }
        });
        approvals::in_force(nodewrights, older.chain([Older::Root]))
    }
}

/// The manifests of a commit, read as a Git source reads them.
fn load(commit: &Commit) -> Loaded {
    let files = commit
        .files
        .iter()
        .filter(|(path, _)| manifests::is_manifest_path(path))
        .map(|(path, content)| (path.clone(), content.as_bytes().to_vec()));
    manifests::load(files, &Limits::default())
}

/// The desired state of a commit, or every reason it is invalid (`file:line: …`).
pub fn desired_of(
    commit: &Commit,
    previous: Option<&Previous>,
) -> Result<(Desired, Previous), Vec<String>> {
    let loaded = load(commit);
    // The same verdict as the Git source: errors refuse the commit, warnings (e.g. the §3.2
    // uninstall-cancel warning) do not.
    let evaluation = crate::source::desired::judge(commit.id.clone(), loaded, Vec::new(), previous);
    match evaluation.valid {
        Some(valid) => {
            let previous = Previous::from_objects(
                valid.desired.nodewrights.iter().cloned(),
                valid
                    .desired
                    .policies
                    .iter()
                    .filter_map(|p| p.metadata.name.clone()),
            );
            Ok((valid.desired, previous))
        }
        None => Err(evaluation
            .errors()
            .map(|p| format!("{}: {}", p.location(), p.message))
            .collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NW: &str = "apiVersion: nodewright.nvidia.com/v1alpha1\nkind: NodeWright\nmetadata: {name: tuning}\nspec:\n  packages:\n    tuning: {version: 1.0.0, image: example/tuning}\n";

    #[test]
    fn commits_chain_ids_and_load_desired_state() {
        let mut repo = Repo::new([("fleet/tuning.yaml".to_string(), NW.to_string())].into());
        let first = repo.head().id.clone();
        let (desired, previous) = desired_of(repo.head(), None).unwrap();
        assert_eq!(desired.nodewrights.len(), 1);
        assert_eq!(desired.commit, first);
        repo.commit(
            "break it",
            [("fleet/tuning.yaml".to_string(), "kind: [".to_string())].into(),
        );
        assert_ne!(repo.head().id, first);
        let problems = desired_of(repo.head(), Some(&previous)).unwrap_err();
        assert!(problems[0].contains("fleet/tuning.yaml"), "{problems:?}");
    }
}
