//! `nodewright approve NODEWRIGHT --compartment C [--batch N]`: the approval commit of a
//! gated batch (docs/approvals.md), made in a local clone as a minimal edit of the manifest
//! that declares the NodeWright, ready to push or to propose as a pull request.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::exit;
use crate::diff::Problem;
use crate::source::approval_commit::{self, Approval, Prepared};
use crate::source::desired::ReadOptions;
use crate::source::repo::{GitRepo, msg};
use crate::writeback::git::{Author, DEFAULT_STATUS_BRANCH, commit_files, read_status_documents};
use crate::writeback::render::StatusDocument;
use nodewright_schema::keys::APPROVED_BATCHES;

/// Long help.
pub const LONG_ABOUT: &str = "\
Approve the next batch of a gated compartment (the NodeWright's \
gitops.nodewright.nvidia.com/approval-required annotation): commit, on the checked-out branch \
of a local clone, the edit that sets gitops.nodewright.nvidia.com/approved-batches so that it \
approves batch N of compartment C (other compartments' approvals are kept).

The edit is minimal: only the annotation's line changes (or is added, to the existing \
annotations block or as a new one under metadata); comments, key order, quoting and line \
endings of the manifest stay as they are. The commit is validated as a whole first, like \
`nodewright validate`; an invalid result (an unknown compartment, for example) is not \
committed. The manifest file must have no uncommitted changes.

Without --batch, the batch waiting is read from the status branch the reconciler writes \
(its own branch or the remote-tracking origin/<branch>; fetch first). Nothing is pushed: push \
the branch yourself, or push the commit to a branch of its own and open a pull request, so \
that merging it is the approval.

Exit codes: 0 committed (or already approved), 1 runtime error, 2 usage error, \
3 the commit with the approval would be invalid.";

/// Examples.
pub const EXAMPLES: &str = "\
Examples:
  # Approve the batch that waits in compartment production (read from the status branch)
  git fetch origin nodewright/status
  nodewright approve gpu-driver --compartment production

  # Approve batch 3 explicitly, in another clone, and propose it as a pull request
  nodewright approve gpu-driver --compartment production --batch 3 --repo ~/src/fleet
  git -C ~/src/fleet push origin HEAD:nodewright/approve/gpu-driver/production-3";

/// Arguments of `nodewright approve`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The NodeWright whose batch is approved.
    #[arg(value_name = "NODEWRIGHT")]
    pub nodewright: String,
    /// The compartment of its DeploymentPolicy (`__default__` for the default compartment).
    #[arg(long, value_name = "C")]
    pub compartment: String,
    /// The batch to approve (and every earlier one). Default: the batch waiting, from the
    /// status branch.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub batch: Option<u32>,
    /// The local clone (default: the repository of the current directory).
    #[arg(long, value_name = "PATH")]
    pub repo: Option<PathBuf>,
    /// Folder inside the repository holding the manifests, as given to `run --path`.
    #[arg(long = "path", value_name = "P", default_value = "")]
    pub root: String,
    /// The status branch the batch waiting is read from.
    #[arg(long, default_value = DEFAULT_STATUS_BRANCH)]
    pub status_branch: String,
}

/// Why no approval commit was made, with the exit code it maps to.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The command line or the clone cannot be used as asked.
    #[error("{0}")]
    Usage(String),
    /// The commit with the approval would be invalid.
    #[error("{}", invalid_report(.0))]
    Invalid(Vec<Problem>),
    /// Reading, editing or committing failed.
    #[error("{0}")]
    Runtime(String),
}

impl Error {
    fn code(&self) -> u8 {
        match self {
            Error::Usage(_) => exit::USAGE,
            Error::Invalid(_) => exit::INVALID,
            Error::Runtime(_) => exit::RUNTIME,
        }
    }
}

fn invalid_report(problems: &[Problem]) -> String {
    let mut out = format!(
        "the commit with the approval would be invalid ({} error{}); nothing was committed:",
        problems.len(),
        if problems.len() == 1 { "" } else { "s" }
    );
    for p in problems {
        out.push_str(&format!("\n  {}: {}", p.location(), p.message));
    }
    out
}

/// What was committed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The approval.
    pub approval: Approval,
    /// The edit.
    pub prepared: Prepared,
    /// The branch committed to (short name).
    pub branch: String,
    /// The new commit; `None` when the branch already approved the batch.
    pub commit: Option<String>,
}

/// Runs the command.
pub fn run(args: Args) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match approve(&args, std::time::SystemTime::now()) {
        Ok(outcome) => {
            // A closed stdout cannot undo the commit; the exit code still says it was made.
            let _ = report(&outcome, &mut out);
            ExitCode::from(exit::OK)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.code())
        }
    }
}

/// Makes the approval commit `args` asks for, at time `now`.
pub fn approve(args: &Args, now: std::time::SystemTime) -> Result<Outcome, Error> {
    let start = args.repo.clone().unwrap_or_else(|| PathBuf::from("."));
    let repo = gix::discover(&start).map_err(|e| {
        Error::Usage(format!(
            "{} is not inside a Git repository: {}",
            start.display(),
            msg(e)
        ))
    })?;
    let workdir = repo
        .workdir()
        .ok_or_else(|| {
            Error::Usage(format!(
                "{} is a bare repository; approve in a clone with a work tree",
                start.display()
            ))
        })?
        .to_path_buf();
    let runtime = |what: &str, e: String| Error::Runtime(format!("{what}: {e}"));
    let head = repo
        .head_name()
        .map_err(|e| runtime("cannot read HEAD", msg(e)))?
        .ok_or_else(|| {
            Error::Usage(
                "HEAD is detached; check out the branch the reconciler tracks first".to_owned(),
            )
        })?;
    let branch = head.shorten().to_string();
    let head_commit = repo
        .head_id()
        .map_err(|e| runtime("cannot read HEAD", msg(e)))?
        .detach();
    let author = author_of(&repo)?;
    let batch = match args.batch {
        Some(batch) => batch,
        None => waiting_batch(
            &workdir,
            &args.status_branch,
            &args.nodewright,
            &args.compartment,
        )?,
    };
    let approval = Approval {
        nodewright: args.nodewright.clone(),
        compartment: args.compartment.clone(),
        batch,
    };
    let git = GitRepo::open(&workdir).map_err(|e| Error::Runtime(e.to_string()))?;
    let options = ReadOptions {
        root: args.root.clone(),
        ..ReadOptions::default()
    };
    let prepared =
        approval_commit::prepare(&git, head_commit, &options, &approval).map_err(|e| match e {
            approval_commit::Error::NotDeclared { .. } => Error::Usage(e.to_string()),
            approval_commit::Error::Invalid { problems } => Error::Invalid(problems),
            other => Error::Runtime(other.to_string()),
        })?;
    if prepared.is_noop() {
        return Ok(Outcome {
            approval,
            prepared,
            branch,
            commit: None,
        });
    }
    refuse_uncommitted(&repo, &workdir, head_commit, &prepared)?;
    let path = workdir.join(&prepared.file);
    std::fs::write(&path, &prepared.after)
        .map_err(|e| runtime(&format!("cannot write {}", path.display()), e.to_string()))?;
    let seconds = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let committed = commit_files(
        &workdir,
        &branch,
        &[(prepared.file.as_str(), &prepared.after)],
        &[],
        &approval.title(),
        &author,
        seconds,
    );
    let commit = match committed {
        Ok(Some(id)) => id,
        Ok(None) | Err(_) => {
            // The work tree goes back to the commit it matched.
            let _ = std::fs::write(&path, &prepared.before);
            return Err(match committed {
                Err(e) => Error::Runtime(e.to_string()),
                _ => Error::Runtime(format!("committing {} changed nothing", prepared.file)),
            });
        }
    };
    stage(&workdir, &prepared.file, &path)?;
    Ok(Outcome {
        approval,
        prepared,
        branch,
        commit: Some(commit.to_string()),
    })
}

/// The author from the repository's git configuration (`user.name`/`user.email`, the
/// `GIT_AUTHOR_*` variables), as `git commit` takes it.
fn author_of(repo: &gix::Repository) -> Result<Author, Error> {
    let missing = || {
        Error::Usage(
            "no author: set user.name and user.email (git config user.name …) first".to_owned(),
        )
    };
    let signature = repo
        .author()
        .ok_or_else(missing)?
        .map_err(|e| Error::Runtime(format!("cannot read the author: {}", msg(e))))?;
    Ok(Author {
        name: signature.name.to_string(),
        email: signature.email.to_string(),
    })
}

/// The batch of `compartment` waiting for approval, from the NodeWright's status document on
/// the status branch.
fn waiting_batch(
    workdir: &Path,
    status_branch: &str,
    nodewright: &str,
    compartment: &str,
) -> Result<u32, Error> {
    let need_batch = |why: String| Error::Usage(format!("{why}; pass --batch N"));
    let documents = read_status_documents(workdir, status_branch)
        .map_err(|e| Error::Runtime(e.to_string()))?
        .ok_or_else(|| {
            need_batch(format!(
                "no status branch {status_branch} here (refs/heads or refs/remotes; `git fetch origin {status_branch}` brings it) to read the batch waiting from"
            ))
        })?;
    let document = documents
        .files
        .iter()
        .filter_map(|(_, text)| serde_yaml::from_str::<StatusDocument>(text).ok())
        .find(|d| d.nodewright == nodewright)
        .ok_or_else(|| {
            need_batch(format!(
                "{} has no status of NodeWright {nodewright}",
                documents.reference
            ))
        })?;
    document
        .pending_approvals
        .iter()
        .filter_map(|part| approval_commit::parse_pending(part))
        .find_map(|(c, batch)| (c == compartment).then_some(batch))
        .ok_or_else(|| {
            let current = document
                .compartments
                .get(compartment)
                .and_then(|c| c.current_batch)
                .map(|b| format!(" (its current batch is {b})"))
                .unwrap_or_default();
            need_batch(format!(
                "{} shows no batch of compartment {compartment} of {nodewright} waiting for approval{current}",
                documents.reference
            ))
        })
}

/// Refuses when the manifest differs from the checked-out commit in the work tree or the
/// index: the commit would otherwise carry, or silently drop, someone's unfinished edit.
fn refuse_uncommitted(
    repo: &gix::Repository,
    workdir: &Path,
    head: gix::ObjectId,
    prepared: &Prepared,
) -> Result<(), Error> {
    let dirty = || {
        Error::Usage(format!(
            "{} has uncommitted changes; commit or stash them first",
            prepared.file
        ))
    };
    let on_disk = std::fs::read(workdir.join(&prepared.file)).map_err(|e| {
        Error::Runtime(format!(
            "cannot read {}: {e}",
            workdir.join(&prepared.file).display()
        ))
    })?;
    if on_disk != prepared.before {
        return Err(dirty());
    }
    let read_err = |e: String| Error::Runtime(format!("cannot read the index: {e}"));
    let in_head = repo
        .find_commit(head)
        .map_err(|e| read_err(msg(e)))?
        .tree()
        .map_err(|e| read_err(msg(e)))?
        .lookup_entry_by_path(&prepared.file)
        .map_err(|e| read_err(msg(e)))?
        .map(|entry| entry.object_id());
    let index = repo.index_or_empty().map_err(|e| read_err(msg(e)))?;
    let staged = index
        .entry_by_path(prepared.file.as_str().into())
        .map(|entry| entry.id);
    if staged != in_head {
        return Err(dirty());
    }
    Ok(())
}

/// Records the committed file in the index, so `git status` shows a clean work tree.
fn stage(workdir: &Path, file: &str, path: &Path) -> Result<(), Error> {
    let fail = |e: String| {
        Error::Runtime(format!(
            "the approval is committed, but the index could not be updated ({e}); run `git reset -q -- {file}`"
        ))
    };
    let repo = gix::open(workdir).map_err(|e| fail(msg(e)))?;
    let head_tree = repo
        .head_commit()
        .map_err(|e| fail(msg(e)))?
        .tree()
        .map_err(|e| fail(msg(e)))?;
    let id = head_tree
        .lookup_entry_by_path(file)
        .map_err(|e| fail(msg(e)))?
        .ok_or_else(|| fail(format!("{file} is not in the new commit")))?
        .object_id();
    let mut index = repo.open_index().map_err(|e| fail(msg(e)))?;
    let metadata =
        gix::index::fs::Metadata::from_path_no_follow(path).map_err(|e| fail(e.to_string()))?;
    let stat = gix::index::entry::Stat::from_fs(&metadata).map_err(|e| fail(e.to_string()))?;
    let entry = index
        .entry_mut_by_path_and_stage(file.into(), gix::index::entry::Stage::Unconflicted)
        .ok_or_else(|| fail(format!("{file} is not in the index")))?;
    entry.id = id;
    entry.stat = stat;
    index
        .write(gix::index::write::Options::default())
        .map_err(|e| fail(msg(e)))?;
    Ok(())
}

/// What was done, and how to hand it to the reconciler.
pub fn report(outcome: &Outcome, out: &mut impl Write) -> std::io::Result<()> {
    let Outcome {
        approval,
        prepared,
        branch,
        commit,
    } = outcome;
    let Some(commit) = commit else {
        return writeln!(
            out,
            "{}:{}: {APPROVED_BATCHES} already approves batch {} of compartment {} ({:?}); nothing to commit",
            prepared.file, prepared.line, approval.batch, approval.compartment, prepared.value
        );
    };
    let was = prepared
        .value_before
        .as_deref()
        .map_or("was not set".to_owned(), |v| format!("was {v:?}"));
    writeln!(
        out,
        "{}:{}: {APPROVED_BATCHES}: {:?} ({was})",
        prepared.file, prepared.line, prepared.value
    )?;
    writeln!(
        out,
        "committed {} on {branch}: {}",
        &commit[..commit.len().min(12)],
        approval.title()
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "The batch starts once the reconciler's branch has this commit:"
    )?;
    writeln!(out, "  git push origin {branch}")?;
    writeln!(
        out,
        "or propose it for review, and merging it is the approval:"
    )?;
    writeln!(out, "  git push origin HEAD:{}", approval.branch())?;
    writeln!(
        out,
        "  (then open a pull request from {} into {branch})",
        approval.branch()
    )
}
