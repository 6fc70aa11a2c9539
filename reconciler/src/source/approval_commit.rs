//! The approval edit of a commit (docs/approvals.md): the manifest file declaring a
//! NodeWright, with its `approved-batches` annotation set to approve one batch of one
//! compartment, as a minimal textual edit ([`super::annotation_edit`]), and the whole commit
//! validated with that file in its place. `nodewright approve` commits it in a local clone;
//! the reconciler's approval pull requests commit it on a branch of the remote.

use gix::ObjectId;
use nodewright_schema::approvals;
use nodewright_schema::keys::APPROVED_BATCHES;

use super::annotation_edit;
use super::desired::{ReadOptions, file_problem, judge};
use super::manifests;
use super::repo::{GitRepo, RepoError};
use super::tree::read_commit_files;
use crate::diff::Problem;

/// One batch to approve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Approval {
    /// The NodeWright's name.
    pub nodewright: String,
    /// The compartment (`__default__` for a policy's default compartment).
    pub compartment: String,
    /// The batch approved (and every earlier one).
    pub batch: u32,
}

impl Approval {
    /// The commit message (and pull-request title) of this approval.
    pub fn title(&self) -> String {
        format!(
            "Approve {} {} batch {}",
            self.nodewright, self.compartment, self.batch
        )
    }

    /// The branch an approval pull request comes from:
    /// `nodewright/approve/<nodewright>/<compartment>-<batch>`.
    pub fn branch(&self) -> String {
        format!(
            "{BRANCH_PREFIX}{}/{}-{}",
            self.nodewright, self.compartment, self.batch
        )
    }
}

/// Where approval branches live: one per NodeWright, compartment and batch.
pub const BRANCH_PREFIX: &str = "nodewright/approve/";

/// The compartment and batch of a pending-approval line (`compartment C: batch N waits for
/// approval …`, the Display of [`approvals::Pending`], as the `AwaitingApproval` message and
/// the status files' `pendingApprovals` carry it).
pub fn parse_pending(part: &str) -> Option<(String, u32)> {
    let (compartment, rest) = part.strip_prefix("compartment ")?.split_once(": batch ")?;
    let (batch, _) = rest.split_once(' ')?;
    Some((compartment.to_owned(), batch.parse().ok()?))
}

/// Why the approval edit cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the commit failed.
    #[error(transparent)]
    Repo(#[from] RepoError),
    /// No manifest under the root declares the NodeWright.
    #[error(
        "no manifest {} of commit {commit} declares NodeWright {name:?}",
        if root.is_empty() { "in the repository".to_owned() } else { format!("under {root:?}") }
    )]
    NotDeclared {
        /// The NodeWright asked for.
        name: String,
        /// The commit read.
        commit: String,
        /// The root path read.
        root: String,
    },
    /// The file cannot be edited minimally.
    #[error("{file}: {source}")]
    Edit {
        /// The manifest file.
        file: String,
        /// What stands in the way.
        source: annotation_edit::Error,
    },
    /// The manifest is a symbolic link in the commit: committing the edit under its name would
    /// replace the link with a file.
    #[error("{file} is a symbolic link; set the annotation in the file it points to")]
    Symlink {
        /// The link.
        file: String,
    },
    /// The commit would be invalid with the edit (or already is).
    #[error("the commit with the approval would be invalid ({} error(s))", problems.len())]
    Invalid {
        /// Every error, with file:line.
        problems: Vec<Problem>,
    },
    /// The edited file reads differently in more than the annotation: the edit is not
    /// committed rather than risk changing the rollout.
    #[error(
        "{file}: setting {APPROVED_BATCHES} would change more than that annotation; set it by hand"
    )]
    Unfaithful {
        /// The manifest file.
        file: String,
    },
}

/// The approval edit, ready to commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prepared {
    /// The manifest file, relative to the repository root.
    pub file: String,
    /// Its content in the commit read.
    pub before: Vec<u8>,
    /// Its content with the approval.
    pub after: Vec<u8>,
    /// The 1-based line carrying the annotation after the edit.
    pub line: usize,
    /// The `approved-batches` value before (absent: `None`) and after.
    pub value_before: Option<String>,
    /// The new `approved-batches` value.
    pub value: String,
}

impl Prepared {
    /// Whether the commit already approves the batch (the edit changes nothing).
    pub fn is_noop(&self) -> bool {
        self.before == self.after
    }
}

/// Prepares the approval edit on `commit`: finds the file declaring the NodeWright under
/// `options.root`, sets `approved-batches` to [`approvals::approving`] the batch on top of its
/// current value, and validates the commit as a whole with the edited file (the rules of
/// `nodewright validate`, so an unknown compartment is refused with file:line).
pub fn prepare(
    git: &GitRepo,
    commit: ObjectId,
    options: &ReadOptions,
    approval: &Approval,
) -> Result<Prepared, Error> {
    let files = read_commit_files(git, commit, &options.root, &options.tree)?;
    let loaded = manifests::load(
        files
            .files
            .iter()
            .map(|f| (f.path.clone(), f.bytes.clone())),
        &options.load,
    );
    let declared = loaded
        .nodewright(&approval.nodewright)
        .ok_or_else(|| Error::NotDeclared {
            name: approval.nodewright.clone(),
            commit: commit.to_string(),
            root: options.root.clone(),
        })?;
    let file = declared.source.file.clone();
    let is_link = git.with_repo(|repo| {
        let entry = repo
            .find_commit(commit)
            .ok()?
            .tree()
            .ok()?
            .lookup_entry_by_path(&file)
            .ok()??;
        Some(entry.mode().is_link())
    });
    if is_link == Some(true) {
        return Err(Error::Symlink { file });
    }
    let value_before = declared
        .object
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(APPROVED_BATCHES))
        .cloned();
    let value = approvals::approving(
        value_before.as_deref(),
        &approval.compartment,
        approval.batch,
    );
    let before = files
        .files
        .iter()
        .find(|f| f.path == file)
        .map(|f| f.bytes.clone())
        .unwrap_or_default();
    let mut expected = declared.object.clone();
    expected
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(APPROVED_BATCHES.to_owned(), value.clone());
    let text = String::from_utf8_lossy(&before);
    let edited = if value_before.as_deref() == Some(value.as_str()) {
        annotation_edit::Edited {
            text: text.to_string(),
            line: declared.source.line,
        }
    } else {
        annotation_edit::set_annotation(&text, declared.source.line, APPROVED_BATCHES, &value)
            .map_err(|source| Error::Edit {
                file: file.clone(),
                source,
            })?
    };
    let after = edited.text.into_bytes();
    let reloaded = manifests::load(
        files.files.iter().map(|f| {
            let bytes = if f.path == file {
                after.clone()
            } else {
                f.bytes.clone()
            };
            (f.path.clone(), bytes)
        }),
        &options.load,
    );
    let faithful = reloaded
        .nodewright(&approval.nodewright)
        .is_some_and(|nw| nw.object == expected && nw.source.file == file)
        && reloaded.nodewrights.len() == loaded.nodewrights.len()
        && reloaded.policies.len() == loaded.policies.len();
    if !faithful {
        return Err(Error::Unfaithful { file });
    }
    let refused = files.violations.iter().map(file_problem).collect();
    let evaluation = judge(commit.to_string(), reloaded, refused, None);
    let problems: Vec<Problem> = evaluation.errors().cloned().collect();
    if !problems.is_empty() {
        return Err(Error::Invalid { problems });
    }
    Ok(Prepared {
        file,
        before,
        after,
        line: edited.line,
        value_before,
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_line_names_its_compartment_and_batch() {
        let pending = approvals::Pending {
            compartment: "production".into(),
            batch: 3,
            complete: 4,
            failed: 0,
        };
        assert_eq!(
            parse_pending(&pending.to_string()),
            Some(("production".to_owned(), 3))
        );
        assert_eq!(parse_pending("compartment production: batch x waits"), None);
        assert_eq!(parse_pending("nothing pending"), None);
        let approval = Approval {
            nodewright: "driver".into(),
            compartment: "__default__".into(),
            batch: 2,
        };
        assert_eq!(approval.title(), "Approve driver __default__ batch 2");
        assert_eq!(approval.branch(), "nodewright/approve/driver/__default__-2");
    }
}
