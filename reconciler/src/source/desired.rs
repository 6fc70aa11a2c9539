//! Commit-atomic desired state: a commit is valid only when every file reads, every object and
//! the whole set pass validation (and, when configured, its signature verifies). An invalid
//! commit is reported — its id and every violation with file:line — and the last valid desired
//! state stays in force ([`DesiredStateTracker`]). A sha256 digest of the normalized desired
//! state identifies it, so two commits that differ only in comments or formatting are the
//! same desired state.

use gix::ObjectId;
use nodewright_schema::validate::Severity;
use nodewright_schema::{DeploymentPolicy, NodeWright};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::budget::Budget;
use super::manifests::{self, Limits, LoadError, LoadErrorKind, Loaded, Previous};
use super::repo::{GitRepo, RepoError};
use super::signature::{SignatureError, SignaturePolicy};
use super::tree::{FileViolation, TreeLimits, read_commit_files};
use crate::cluster::Desired;
use crate::diff::Problem;
use crate::text::terminal;

/// A validated desired state.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidDesired {
    /// The objects, sorted by name, with the commit they come from.
    pub desired: Desired,
    /// `sha256:<hex>` of the normalized objects (see [`digest`]).
    pub digest: String,
    /// Warnings of the commit (accepted, but worth showing).
    pub warnings: Vec<Problem>,
}

/// The verdict on one commit.
#[derive(Clone, Debug)]
pub struct CommitEvaluation {
    /// The commit.
    pub commit: String,
    /// Every problem found (errors and warnings), in file/line order.
    pub problems: Vec<Problem>,
    /// The desired state when the commit is valid.
    pub valid: Option<ValidDesired>,
    /// The loaded objects (also for invalid commits, so a diff can still show them).
    pub objects: Desired,
}

impl CommitEvaluation {
    /// Whether the commit may be applied.
    pub fn is_valid(&self) -> bool {
        self.valid.is_some()
    }

    /// Error-level problems.
    pub fn errors(&self) -> impl Iterator<Item = &Problem> {
        self.problems.iter().filter(|p| p.is_error())
    }
}

/// Where and how to read desired state from a repository.
#[derive(Clone, Debug, Default)]
pub struct ReadOptions {
    /// Root path inside the repository (`""` = whole repository).
    pub root: String,
    /// Tree-walk limits (file size is checked before a blob is loaded).
    pub tree: TreeLimits,
    /// Loader limits (documents, alias expansion, …).
    pub load: Limits,
    /// Required signers of the commit, if any.
    pub signatures: Option<SignaturePolicy>,
}

/// Read and validate `commit` as a whole. `previous` (the objects in force: the cluster's, or
/// the last good commit's) enables the update-only rules (§3.2). Only I/O failures are `Err`;
/// everything wrong with the commit's content is a problem in the evaluation.
pub fn evaluate_commit(
    git: &GitRepo,
    commit: ObjectId,
    options: &ReadOptions,
    previous: Option<&Previous>,
) -> Result<CommitEvaluation, RepoError> {
    let mut problems = Vec::new();
    if let Some(policy) = &options.signatures {
        match policy.verify_commit(git, commit) {
            Ok(_) => {}
            Err(SignatureError::Repo(e)) => return Err(e),
            Err(e) => problems.push(Problem {
                file: None,
                line: None,
                object: None,
                rule: "commit-signature".to_owned(),
                message: e.to_string(),
                severity: Severity::Error,
            }),
        }
    }
    let (loaded, file_violations) = load_commit(git, commit, options)?;
    problems.extend(file_violations.iter().map(file_problem));
    let mut evaluation = judge(commit.to_string(), loaded, problems, previous);
    if let Some(valid) = &mut evaluation.valid {
        let approvals =
            super::approvals::from_git(git, commit, options, &valid.desired.nodewrights)?;
        evaluation.objects.approvals = approvals.clone();
        valid.desired.approvals = approvals;
    }
    Ok(evaluation)
}

/// Read `commit`'s manifest files under the root and load them (no validation): the loaded
/// objects and the files refused by the tree walk (symlink escapes, oversized files).
pub fn load_commit(
    git: &GitRepo,
    commit: ObjectId,
    options: &ReadOptions,
) -> Result<(Loaded, Vec<FileViolation>), RepoError> {
    let files = read_commit_files(git, commit, &options.root, &options.tree)?;
    let mut loaded = manifests::load(
        files.files.into_iter().map(|f| (f.path, f.bytes)),
        &options.load,
    );
    // Files the walk refused by a budget are missing from the set.
    loaded.incomplete = loaded
        .incomplete
        .or(files.violations.iter().find_map(|v| match v {
            FileViolation::OverBudget { budget, .. } => Some(*budget),
            FileViolation::TooLarge { .. } => Some(Budget::FileBytes),
            _ => None,
        }));
    Ok((loaded, files.violations))
}

/// Validate an already loaded set (the part of [`evaluate_commit`] after reading files).
pub fn judge(
    commit: String,
    loaded: Loaded,
    mut problems: Vec<Problem>,
    previous: Option<&Previous>,
) -> CommitEvaluation {
    problems.extend(loaded.errors.iter().map(load_problem));
    problems.extend(
        manifests::validate_set(&loaded, previous)
            .into_iter()
            .map(|v| Problem {
                file: Some(v.file.clone()),
                line: Some(v.line),
                object: Some(format!("{}/{}", v.kind, v.name)),
                rule: v.item.rule.id.to_owned(),
                message: v.item.to_string(),
                severity: v.item.severity,
            }),
    );
    problems.sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
    let objects = objects_of(&commit, &loaded);
    let valid = (!problems.iter().any(Problem::is_error)).then(|| ValidDesired {
        digest: digest(&objects),
        desired: objects.clone(),
        warnings: problems.clone(),
    });
    CommitEvaluation {
        commit,
        problems,
        valid,
        objects,
    }
}

fn objects_of(commit: &str, loaded: &Loaded) -> Desired {
    let mut nodewrights: Vec<NodeWright> = loaded
        .nodewrights
        .iter()
        .map(|s| s.object.clone())
        .collect();
    nodewrights.sort_by(|a, b| a.name().cmp(b.name()));
    let mut policies: Vec<DeploymentPolicy> =
        loaded.policies.iter().map(|s| s.object.clone()).collect();
    policies.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    Desired {
        nodewrights,
        policies,
        commit: commit.to_owned(),
        approvals: Default::default(),
    }
}

/// `sha256:<hex>` over the canonical JSON of the objects sorted by kind and name. The commit
/// id is not part of it: the digest identifies *what* is desired, not where it was written.
pub fn digest(desired: &Desired) -> String {
    #[derive(Serialize)]
    struct Canonical<'a> {
        nodewrights: Vec<&'a NodeWright>,
        policies: Vec<&'a DeploymentPolicy>,
    }
    let mut nodewrights: Vec<&NodeWright> = desired.nodewrights.iter().collect();
    nodewrights.sort_by(|a, b| a.name().cmp(b.name()));
    let mut policies: Vec<&DeploymentPolicy> = desired.policies.iter().collect();
    policies.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    // Typed values with string keys always serialize; struct fields have a fixed order and
    // maps are BTreeMaps, so the bytes are canonical.
    let bytes = serde_json::to_vec(&Canonical {
        nodewrights,
        policies,
    })
    .unwrap_or_default();
    format!("sha256:{}", hex::encode(Sha256::digest(&bytes)))
}

pub(crate) fn file_problem(v: &FileViolation) -> Problem {
    let (file, rule) = match v {
        FileViolation::SymlinkEscape { path, .. } => (Some(path.clone()), "symlink-escape"),
        FileViolation::SymlinkUnresolved { path, .. } => (Some(path.clone()), "symlink-unresolved"),
        FileViolation::TooLarge { path, .. } => (Some(path.clone()), "file-too-large"),
        FileViolation::OverBudget { .. } => (None, "commit-over-budget"),
        FileViolation::NonUtf8Path { .. } => (None, "non-utf8-path"),
    };
    Problem {
        file,
        line: None,
        object: None,
        rule: rule.to_owned(),
        message: v.to_string(),
        severity: Severity::Error,
    }
}

fn load_problem(e: &LoadError) -> Problem {
    let rule = match &e.reason {
        LoadErrorKind::TooLarge { .. } => "file-too-large",
        LoadErrorKind::NotUtf8 { .. } => "not-utf8",
        LoadErrorKind::Io { .. } => "io",
        LoadErrorKind::Yaml { .. } => "yaml",
        LoadErrorKind::TooComplex { .. } | LoadErrorKind::TooManyRepetitions => "yaml-too-complex",
        LoadErrorKind::OverBudget { .. } => "over-budget",
        LoadErrorKind::Unsupported { .. } => "unsupported-kind",
    };
    Problem {
        file: Some(e.file.clone()),
        line: Some(e.line),
        object: None,
        rule: rule.to_owned(),
        message: e.reason.to_string(),
        severity: Severity::Error,
    }
}

/// What offering a commit to the tracker did.
#[derive(Clone, Debug, PartialEq)]
pub enum TrackerOutcome {
    /// The commit is valid and its desired state differs from the one in force.
    Applied {
        /// The new digest.
        digest: String,
    },
    /// The commit is valid and desires exactly what is already in force (only the commit
    /// id moved).
    Unchanged,
    /// The commit is invalid; the previous desired state (if any) stays in force.
    Rejected {
        /// The refused commit.
        commit: String,
        /// Its error-level problems.
        errors: Vec<Problem>,
    },
}

/// Holds the last valid desired state; invalid commits never replace it.
#[derive(Clone, Debug, Default)]
pub struct DesiredStateTracker {
    current: Option<ValidDesired>,
    last_rejected: Option<(String, Vec<Problem>)>,
}

impl DesiredStateTracker {
    /// An empty tracker (nothing in force yet).
    pub fn new() -> Self {
        Self::default()
    }

    /// The desired state in force.
    pub fn current(&self) -> Option<&ValidDesired> {
        self.current.as_ref()
    }

    /// The last refused commit and its errors (cleared when a valid commit arrives).
    pub fn last_rejected(&self) -> Option<(&str, &[Problem])> {
        self.last_rejected
            .as_ref()
            .map(|(c, p)| (c.as_str(), p.as_slice()))
    }

    /// The objects in force, for §3.2 update rules on the next commit.
    pub fn previous(&self) -> Option<Previous> {
        self.current.as_ref().map(|v| {
            Previous::from_objects(
                v.desired.nodewrights.iter().cloned(),
                v.desired
                    .policies
                    .iter()
                    .filter_map(|p| p.metadata.name.clone()),
            )
        })
    }

    /// Offer an evaluated commit.
    pub fn offer(&mut self, evaluation: CommitEvaluation) -> TrackerOutcome {
        match evaluation.valid {
            Some(valid) => {
                self.last_rejected = None;
                let same = self
                    .current
                    .as_ref()
                    .is_some_and(|c| c.digest == valid.digest);
                let digest = valid.digest.clone();
                self.current = Some(valid);
                if same {
                    TrackerOutcome::Unchanged
                } else {
                    TrackerOutcome::Applied { digest }
                }
            }
            None => {
                let errors: Vec<Problem> = evaluation.errors().cloned().collect();
                self.last_rejected = Some((evaluation.commit.clone(), errors.clone()));
                TrackerOutcome::Rejected {
                    commit: evaluation.commit,
                    errors,
                }
            }
        }
    }
}

/// A human report of a refused commit: the commit, then every error with file:line.
pub fn rejection_report(commit: &str, errors: &[Problem]) -> String {
    let mut out = format!(
        "commit {commit} is invalid and was not applied ({} error{}); the last valid desired state stays in force:\n",
        errors.len(),
        if errors.len() == 1 { "" } else { "s" }
    );
    out.push_str(&violation_lines(errors));
    out
}

/// One indented `file:line: message` line per error, for reports: one line each, whatever a
/// path or message from the commit holds.
pub fn violation_lines(errors: &[Problem]) -> String {
    errors
        .iter()
        .map(|p| {
            format!(
                "  {}\n",
                terminal(&format!("{}: {}", p.location(), p.message))
            )
        })
        .collect()
}
