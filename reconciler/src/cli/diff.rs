//! `nodewright diff --repo R --base REV --head REV`: what merging head will do to the fleet,
//! for a terminal, a pull-request comment (Markdown) or a machine (JSON). Needs no cluster.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use super::exit;
use crate::diff::{Format, diff_desired, render};
use crate::source::budget::BudgetArgs;
use crate::source::desired::evaluate_commit;
use crate::source::manifests::Previous;
use crate::source::repo::{Credentials, GitRepo, RemoteSpec, RepoError, SecretSource};

/// Long help.
pub const LONG_ABOUT: &str = "\
Show what a change to the fleet repository will do before it merges: NodeWrights and \
DeploymentPolicies added, removed and changed, and for every package the change the node \
lifecycle will apply — first install, upgrade, downgrade (refused for uninstall-enabled \
packages that were not uninstalled first), config with the interrupt it costs, image-only, \
interrupt and dependsOn changes, uninstall and cancel, removal from the spec (not an \
uninstall), and selector, budget, policy, priority, sequencing, pause and disable changes.

Both commits are read straight from the repository (no checkout). The head commit is \
validated as the reconciler would (every file, every object, the whole set, and the update \
rules against base); its problems are part of the output with file:line.

Exit code 0 when head is valid, 3 when the reconciler would refuse it, 1 on runtime errors, \
2 on usage errors (unknown revision, missing repository).";

/// Examples shown after the long help.
pub const EXAMPLES: &str = "\
Examples:
  # In a pull-request job: comment the Markdown, fail the check on exit code 3
  nodewright diff --repo . --base origin/main --head HEAD --format markdown > comment.md

  # Only manifests under clusters/prod
  nodewright diff --repo . --base main --head feature --path clusters/prod

  # For machines
  nodewright diff --repo . --base v1.4 --head main --format json | jq .summary";

/// Arguments of `nodewright diff`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The repository: a local path (work tree or bare), or a remote URL (file://, https://,
    /// ssh://) mirrored into --cache-dir.
    #[arg(long, value_name = "R")]
    pub repo: String,
    /// The commit, branch or tag the fleet runs now.
    #[arg(long, value_name = "REV")]
    pub base: String,
    /// The commit, branch or tag to review.
    #[arg(long, value_name = "REV")]
    pub head: String,
    /// Root path inside the repository; only manifests under it are read.
    #[arg(long = "path", value_name = "P", default_value = "")]
    pub root: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Where remote repositories are mirrored (default: the system temp directory).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// For an https remote: read an access token from this file.
    #[arg(long, value_name = "FILE", conflicts_with = "token_env")]
    pub token_file: Option<PathBuf>,
    /// For an https remote: read an access token from this environment variable.
    #[arg(long, value_name = "VAR")]
    pub token_env: Option<String>,
    /// What reading each commit may cost.
    #[command(flatten)]
    pub budgets: BudgetArgs,
    /// Project the rollout on a simulated fleet: batches, interrupts, reboots, duration (a
    /// Mermaid gantt in Markdown).
    #[arg(long)]
    pub simulate: bool,
    /// The fleet to simulate: a scenario file's `cluster:` and `packages:` blocks.
    #[arg(long, value_name = "FILE", requires = "simulate")]
    pub fleet: Option<PathBuf>,
    /// Without --fleet: this many nodes, labelled so every NodeWright selects them.
    #[arg(long, default_value_t = 8, requires = "simulate")]
    pub nodes: usize,
    /// Most package × node pairs --simulate projects in each rollout (base, then head): each
    /// NodeWright's packages times the nodes it selects. This bounds the projection's time
    /// (about 40 s at the default); a larger change is diffed but not projected.
    #[arg(
        long,
        value_name = "N",
        default_value_t = crate::diff::projection::DEFAULT_MAX_PAIRS,
        requires = "simulate"
    )]
    pub max_simulated_pairs: usize,
    /// Most package × node pairs the budgets of each rollout may let run at once: each
    /// NodeWright's packages times the nodes its interruption budget or policy lets be worked on
    /// together. A running pair is a Job and its pod, so this bounds the projection's memory
    /// (about 320 MiB at the default); a larger change is diffed but not projected.
    #[arg(
        long,
        value_name = "N",
        default_value_t = crate::diff::projection::DEFAULT_MAX_PAIRS_AT_ONCE,
        requires = "simulate"
    )]
    pub max_simulated_pairs_at_once: usize,
    /// Post the Markdown rendering as the pull/merge-request comment (updated in place).
    #[arg(long, value_name = "FORGE", requires = "pr")]
    pub post_comment: Option<crate::forge::ForgeKind>,
    /// Pull/merge request number for --post-comment.
    #[arg(long, value_name = "N")]
    pub pr: Option<u64>,
}

fn open(args: &Args) -> Result<GitRepo, RepoError> {
    let path = std::path::Path::new(&args.repo);
    if path.exists() {
        return GitRepo::open(path);
    }
    let cache = args
        .cache_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("nodewright-cache"));
    let credentials = match (&args.token_file, &args.token_env) {
        (Some(file), _) => Credentials::Token {
            username: None,
            token: SecretSource::File(file.clone()),
        },
        (None, Some(var)) => Credentials::Token {
            username: None,
            token: SecretSource::Env(var.clone()),
        },
        (None, None) => Credentials::None,
    };
    let spec = RemoteSpec {
        url: args.repo.clone(),
        credentials,
        ..RemoteSpec::anonymous(args.repo.clone())
    };
    GitRepo::sync_remote(&spec, &cache).map(|(g, _)| g)
}

/// Computes the diff the command prints (exposed for tests and the CI integration).
pub fn compute(args: &Args) -> Result<crate::diff::DesiredDiff, RepoError> {
    let git = open(args)?;
    let status_branch = crate::source::DEFAULT_STATUS_BRANCH;
    let base = git.resolve_desired(&args.base, status_branch)?;
    let head = git.resolve_desired(&args.head, status_branch)?;
    let options = args.budgets.read_options(&args.root);
    let base_eval = evaluate_commit(&git, base, &options, None)?;
    let previous = Previous::from_objects(
        base_eval.objects.nodewrights.iter().cloned(),
        base_eval
            .objects
            .policies
            .iter()
            .filter_map(|p| p.metadata.name.clone()),
    );
    let head_eval = evaluate_commit(&git, head, &options, Some(&previous))?;
    let diff = diff_desired(
        &base_eval.objects,
        &head_eval.objects,
        head_eval.problems,
        base_eval.problems,
    );
    if !args.simulate {
        return Ok(diff);
    }
    let fleet = match &args.fleet {
        Some(path) => match std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|text| crate::cli::fleet::Fleet::parse(&text))
        {
            Ok(fleet) => fleet,
            Err(e) => {
                let mut diff = diff;
                diff.timeline_error = Some(format!("fleet {}: {e}", path.display()));
                return Ok(diff);
            }
        },
        None => {
            crate::diff::projection::FleetProjection::matching_nodes(args.nodes, &head_eval.objects)
        }
    };
    let projection = crate::diff::projection::FleetProjection {
        fleet,
        settings: crate::settings::Settings::default(),
        limit: crate::diff::projection::FleetProjection::limit_for(&head_eval.objects),
        max_pairs: args.max_simulated_pairs,
        max_pairs_at_once: args.max_simulated_pairs_at_once,
    };
    Ok(diff.with_simulation(&projection, &base_eval.objects, &head_eval.objects))
}

/// Runs the command.
pub fn run(args: Args) -> ExitCode {
    let diff = match compute(&args) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(match e {
                RepoError::Open { .. }
                | RepoError::Resolve { .. }
                | RepoError::StatusBranch { .. } => exit::USAGE,
                _ => exit::RUNTIME,
            });
        }
    };
    let text = render(&diff, args.format);
    if let (Some(kind), Some(pr)) = (args.post_comment, args.pr) {
        let markdown = render(&diff, Format::Markdown);
        let posted = crate::forge::ForgeConfig::from_env(kind)
            .map_err(|e| e.to_string())
            .and_then(|config| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?
                    .block_on(crate::forge::post_diff_comment(&config, pr, &markdown))
                    .map_err(|e| e.to_string())
            });
        match posted {
            Ok(outcome) => eprintln!("posted the diff on {kind} #{pr}: {outcome:?}"),
            Err(e) => {
                eprintln!("error: posting the comment failed: {e}");
                return ExitCode::from(exit::RUNTIME);
            }
        }
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|_| {
        if text.ends_with('\n') {
            Ok(())
        } else {
            writeln!(out)
        }
    }) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("error: cannot write the diff: {e}");
        }
        return ExitCode::from(exit::RUNTIME);
    }
    if diff.has_errors() {
        ExitCode::from(exit::INVALID)
    } else {
        ExitCode::from(exit::OK)
    }
}
