//! `nodewright validate PATH...`: load every manifest under the paths and report every
//! problem as `file:line: kind/name: field.path: message`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::ValueEnum;
use serde::Serialize;

use super::exit;
use crate::source::budget::BudgetArgs;
use crate::source::desired::load_commit;
use crate::source::manifests::{self, Limits, LoadError, LoadErrorKind, Loaded, Located, Notice};
use crate::source::repo::{GitRepo, RepoError};
use crate::source::tree::{FileViolation, root_name};
use crate::text::terminal;
use nodewright_schema::validate::{Severity, Violation};

/// Long help.
pub const LONG_ABOUT: &str = "\
Check NodeWright and DeploymentPolicy manifests the way the cluster would, and more: \
the CRD schema, every admission rule of the NodeWright and DeploymentPolicy webhooks, \
and rules across the whole set (duplicate names, a deploymentPolicy that must exist, \
dependsOn cycles).

Every .yaml/.yml file under each PATH is read (directories recursively, hidden directories \
such as .git skipped); files may hold several documents separated by ---. Other kinds are \
ignored with a note; legacy skyhook.nvidia.com objects are read as NodeWright objects with a \
note. Every problem is printed, not only the first, as

  file:line: kind/name: field.path: message

Warnings (for example unknown fields) are printed but do not fail validation. \
Exit code 0 when everything is valid, 3 when anything is invalid, 2 on usage errors \
(including a PATH that does not exist).";

/// Examples shown after the long help.
pub const EXAMPLES: &str = "\
Examples:
  nodewright validate examples/fleet
  nodewright validate fleet/gpu.yaml fleet/policies/
  nodewright validate --format json . | jq '.violations[] | .message'";

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// `file:line: kind/name: field.path: message`, one per line.
    Text,
    /// One JSON document (for machines).
    Json,
}

/// Arguments of `nodewright validate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Files or directories to check.
    #[arg(required_unless_present = "repo", value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Validate a commit of this Git repository (a local path) instead of folders.
    #[arg(long, value_name = "REPO", requires = "rev", conflicts_with = "paths")]
    pub repo: Option<PathBuf>,
    /// The commit, branch or tag to validate (with --repo).
    #[arg(long, value_name = "REV", requires = "repo")]
    pub rev: Option<String>,
    /// Root path inside the repository; only manifests under it are read (with --repo).
    #[arg(long = "path", value_name = "P", default_value = "")]
    pub root: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// What reading may cost.
    #[command(flatten)]
    pub budgets: BudgetArgs,
    /// Do not print notes (ignored documents, legacy conversions).
    #[arg(long, short)]
    pub quiet: bool,
}

/// The outcome of validating a set of paths.
#[derive(Debug)]
pub struct Report {
    /// What was loaded.
    pub loaded: Loaded,
    /// Every violation found.
    pub violations: Vec<Located<Violation>>,
}

impl Report {
    /// Whether nothing rejects the set (warnings allowed).
    pub fn is_valid(&self) -> bool {
        self.loaded.errors.is_empty() && !self.violations.iter().any(|v| v.item.is_error())
    }
}

/// Loads and validates `paths`.
pub fn check(paths: &[PathBuf], limits: &Limits) -> std::io::Result<Report> {
    let loaded = manifests::read_paths(paths, limits)?;
    let violations = manifests::validate_set(&loaded, None);
    Ok(Report { loaded, violations })
}

/// Loads and validates the manifests of commit `rev` of the repository at `repo`, under
/// `root`. Files the tree walk refuses (symlinks escaping the root, oversized files) are
/// reported as load errors of those files.
pub fn check_commit(
    repo: &std::path::Path,
    rev: &str,
    root: &str,
    budgets: &BudgetArgs,
) -> Result<Report, RepoError> {
    let git = GitRepo::open(repo)?;
    let commit = git.resolve_desired(rev, crate::source::DEFAULT_STATUS_BRANCH)?;
    let options = budgets.read_options(root);
    let (mut loaded, refused) = load_commit(&git, commit, &options)?;
    // A budget of the whole walk, or a path that cannot be named, is the commit's tree's,
    // not a file's: it is reported at the commit and root (line 0 means no line).
    let tree = format!("commit {}, {}", &commit.to_string()[..12], root_name(root));
    for v in refused {
        let (file, line, reason) = match &v {
            FileViolation::TooLarge { path, size, limit } => (
                path.clone(),
                1,
                LoadErrorKind::TooLarge {
                    size: usize::try_from(*size).unwrap_or(usize::MAX),
                    limit: usize::try_from(*limit).unwrap_or(usize::MAX),
                },
            ),
            FileViolation::SymlinkEscape { path, .. }
            | FileViolation::SymlinkUnresolved { path, .. } => (
                path.clone(),
                1,
                LoadErrorKind::Io {
                    message: v.to_string(),
                },
            ),
            FileViolation::OverBudget { budget, limit, .. } => (
                tree.clone(),
                0,
                LoadErrorKind::OverBudget {
                    budget: *budget,
                    limit: *limit,
                },
            ),
            FileViolation::NonUtf8Path { .. } => (
                tree.clone(),
                0,
                LoadErrorKind::Io {
                    message: v.to_string(),
                },
            ),
        };
        loaded.errors.push(LoadError { file, line, reason });
    }
    let violations = manifests::validate_set(&loaded, None);
    Ok(Report { loaded, violations })
}

/// Runs the command.
pub fn run(args: Args) -> ExitCode {
    let report = match (&args.repo, &args.rev) {
        (Some(repo), Some(rev)) => match check_commit(repo, rev, &args.root, &args.budgets) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(match e {
                    RepoError::Open { .. }
                    | RepoError::Resolve { .. }
                    | RepoError::StatusBranch { .. } => exit::USAGE,
                    _ => exit::RUNTIME,
                });
            }
        },
        _ => match check(&args.paths, &args.budgets.load()) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(exit::USAGE);
            }
        },
    };
    let written = match args.format {
        Format::Text => print_text(&report, args.quiet),
        Format::Json => print_json(&report),
    };
    if let Err(e) = written {
        // A closed pipe (`| head`) is not worth a second message.
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("error: cannot write the report: {e}");
        }
        return ExitCode::from(exit::RUNTIME);
    }
    if report.is_valid() {
        ExitCode::from(exit::OK)
    } else {
        ExitCode::from(exit::INVALID)
    }
}

/// One line per finding, in file/line order; a summary on stderr.
fn print_text(report: &Report, quiet: bool) -> std::io::Result<()> {
    enum Line<'a> {
        Error(&'a LoadError),
        Violation(&'a Located<Violation>),
        Notice(&'a Notice),
    }
    let mut lines: Vec<(&str, usize, Line<'_>)> = Vec::new();
    for e in &report.loaded.errors {
        lines.push((&e.file, e.line, Line::Error(e)));
    }
    for v in &report.violations {
        lines.push((&v.file, v.line, Line::Violation(v)));
    }
    if !quiet {
        for n in &report.loaded.notices {
            lines.push((&n.source.file, n.source.line, Line::Notice(n)));
        }
    }
    lines.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    let mut out = std::io::stdout().lock();
    // One line per finding, whatever a file or object name holds.
    for (_, _, line) in &lines {
        let text = match line {
            Line::Error(e) => e.to_string(),
            Line::Violation(v) => v.to_string(),
            Line::Notice(n) => n.to_string(),
        };
        writeln!(out, "{}", terminal(&text))?;
    }
    out.flush()?;
    let errors = report.loaded.errors.len()
        + report
            .violations
            .iter()
            .filter(|v| v.item.severity == Severity::Error)
            .count();
    let warnings = report
        .violations
        .iter()
        .filter(|v| v.item.severity == Severity::Warning)
        .count();
    let l = &report.loaded;
    eprintln!(
        "{}: {errors} error(s), {warnings} warning(s) in {} file(s): {} NodeWright(s), {} DeploymentPolicy(s)",
        if report.is_valid() {
            "valid"
        } else {
            "invalid"
        },
        l.files,
        l.nodewrights.len(),
        l.policies.len()
    );
    Ok(())
}

#[derive(Serialize)]
struct JsonViolation<'a> {
    file: &'a str,
    line: usize,
    kind: &'a str,
    name: &'a str,
    path: String,
    message: &'a str,
    /// What upstream's admission webhook would answer.
    admission_message: String,
    rule: &'a str,
    section: &'a str,
    severity: Severity,
}

#[derive(Serialize)]
struct JsonReport<'a> {
    valid: bool,
    files: usize,
    nodewrights: Vec<&'a str>,
    policies: Vec<&'a str>,
    violations: Vec<JsonViolation<'a>>,
    errors: &'a [LoadError],
    notices: &'a [Notice],
}

fn print_json(report: &Report) -> std::io::Result<()> {
    let l = &report.loaded;
    let doc = JsonReport {
        valid: report.is_valid(),
        files: l.files,
        nodewrights: l.nodewrights.iter().map(|s| s.name()).collect(),
        policies: l.policies.iter().map(|s| s.name()).collect(),
        violations: report
            .violations
            .iter()
            .map(|v| JsonViolation {
                file: &v.file,
                line: v.line,
                kind: &v.kind,
                name: &v.name,
                path: v.item.path.to_string(),
                message: &v.item.message,
                admission_message: v.item.admission_message(&v.name),
                rule: v.item.rule.id,
                section: v.item.rule.section,
                severity: v.item.severity,
            })
            .collect(),
        errors: &l.errors,
        notices: &l.notices,
    };
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, &doc).map_err(std::io::Error::other)?;
    writeln!(out)?;
    out.flush()
}
