//! `nodewright simulate FILE|DIR...`: run scenario files against the simulated cluster.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use super::exit;
use crate::scenario::{Hooks, run_file, scenario_files};

/// Long help.
pub const LONG_ABOUT: &str = "\
Run scenario files (the acceptance language, spec/scenarios.md) against the embedded \
simulated cluster in virtual time: each file sets up nodes, pods, PDBs, package behaviour \
and a Git repository, drives them through steps and checks what a user would observe, plus \
the safety invariants after every step. Prints each step's result, the first mismatch with \
expected and actual values, and a summary line. Exit code 0 only when every scenario passed.";

/// Examples shown after the long help.
pub const EXAMPLES: &str = "\
Examples:
  nodewright simulate tests/scenarios/
  nodewright simulate tests/scenarios/pdb-refusal.yaml --quiet

  # Project the rollout of a commit on a simulated fleet (text, markdown or json)
  nodewright simulate --repo . --rev HEAD --fleet fleet-sim.yaml
  nodewright simulate --repo . --rev main --nodes 40 --format markdown";

/// Arguments of `nodewright simulate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Scenario files, or directories holding them (.yaml/.yml, walked recursively).
    #[arg(required_unless_present = "repo", value_name = "FILE|DIR")]
    pub paths: Vec<PathBuf>,
    /// Instead of scenarios: project the rollout of a commit of this repository (local path)
    /// onto a simulated fleet that starts with nothing applied.
    #[arg(long, value_name = "R", conflicts_with = "paths")]
    pub repo: Option<PathBuf>,
    /// The commit, branch or tag to project (with --repo).
    #[arg(long, value_name = "REV", default_value = "HEAD")]
    pub rev: String,
    /// Root path inside the repository (with --repo).
    #[arg(long = "path", value_name = "P", default_value = "")]
    pub root: String,
    /// What reading the commit may cost (with --repo).
    #[command(flatten)]
    pub budgets: crate::source::budget::BudgetArgs,
    /// The fleet: a scenario file's `cluster:` and `packages:` blocks (with --repo).
    #[arg(long, value_name = "FILE")]
    pub fleet: Option<PathBuf>,
    /// Without --fleet: this many nodes, labelled so every NodeWright selects them.
    #[arg(long, default_value_t = 8)]
    pub nodes: usize,
    /// Most package × node pairs the projection runs (with --repo): each NodeWright's
    /// packages times the nodes it selects. This bounds its time.
    #[arg(
        long,
        value_name = "N",
        default_value_t = crate::diff::projection::DEFAULT_MAX_PAIRS,
        requires = "repo"
    )]
    pub max_simulated_pairs: usize,
    /// Most package × node pairs the budgets let run at once in the projection (with --repo):
    /// each NodeWright's packages times the nodes its interruption budget or policy lets be
    /// worked on together. A running pair is a Job and its pod, so this bounds its memory.
    #[arg(
        long,
        value_name = "N",
        default_value_t = crate::diff::projection::DEFAULT_MAX_PAIRS_AT_ONCE,
        requires = "repo"
    )]
    pub max_simulated_pairs_at_once: usize,
    /// Output of the projection (with --repo).
    #[arg(long, value_parser = ["text", "markdown", "json"], default_value = "text")]
    pub format: String,
    /// Print only failing scenarios and the summary.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Runs the command.
pub fn run(args: Args) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    let mut stderr = std::io::stderr().lock();
    ExitCode::from(run_to(&args, &Hooks::product(), &mut stdout, &mut stderr))
}

/// Runs the scenarios with `hooks`, writing reports to `out` and usage problems to `err`;
/// returns the exit code.
pub fn run_to(args: &Args, hooks: &Hooks, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    if let Some(repo) = &args.repo {
        return project(args, repo, out, err);
    }
    if args.budgets != crate::source::budget::BudgetArgs::default() {
        // Scenario files are the project's own acceptance corpus, read within the defaults;
        // a budget flag would change nothing there, so it is refused rather than ignored.
        let _ = writeln!(
            err,
            "error: the --max-… budget flags apply to reading a repository: use them with --repo"
        );
        return exit::USAGE;
    }
    let files = match scenario_files(&args.paths) {
        Ok(files) => files,
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            return exit::USAGE;
        }
    };
    if files.is_empty() {
        let _ = writeln!(
            err,
            "error: no scenario files (.yaml/.yml) under the given paths"
        );
        return exit::USAGE;
    }
    let (mut passed, mut failed) = (0, 0);
    let started = Instant::now();
    for file in &files {
        let report = run_file(file, hooks);
        if report.passed() {
            passed += 1;
        } else {
            failed += 1;
        }
        if !args.quiet || !report.passed() {
            let _ = write!(out, "{}", report.render());
        }
    }
    let _ = writeln!(
        out,
        "{passed} passed, {failed} failed ({:.2}s wall time)",
        started.elapsed().as_secs_f64()
    );
    if failed == 0 { exit::OK } else { exit::RUNTIME }
}

/// `simulate --repo R --rev REV`: the projected rollout of one commit.
fn project(args: &Args, repo: &std::path::Path, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    use crate::diff::RolloutSimulator;
    use crate::diff::projection::FleetProjection;
    use crate::source::desired::evaluate_commit;
    use crate::source::repo::GitRepo;

    let evaluation = GitRepo::open(repo).and_then(|git| {
        let commit = git.resolve_desired(&args.rev, crate::source::DEFAULT_STATUS_BRANCH)?;
        evaluate_commit(&git, commit, &args.budgets.read_options(&args.root), None)
    });
    let evaluation = match evaluation {
        Ok(e) => e,
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            return exit::USAGE;
        }
    };
    let Some(valid) = &evaluation.valid else {
        let errors: Vec<_> = evaluation.errors().cloned().collect();
        let _ = write!(
            err,
            "{}",
            crate::source::desired::rejection_report(&evaluation.commit, &errors)
        );
        return exit::INVALID;
    };
    let fleet = match &args.fleet {
        Some(path) => match std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|text| super::fleet::Fleet::parse(&text))
        {
            Ok(f) => f,
            Err(e) => {
                let _ = writeln!(err, "error: fleet {}: {e}", path.display());
                return exit::USAGE;
            }
        },
        None => FleetProjection::matching_nodes(args.nodes, &valid.desired),
    };
    let projection = FleetProjection {
        fleet,
        settings: crate::settings::Settings::default(),
        limit: crate::diff::projection::FleetProjection::limit_for(&valid.desired),
        max_pairs: args.max_simulated_pairs,
        max_pairs_at_once: args.max_simulated_pairs_at_once,
    };
    match projection.simulate(&crate::cluster::Desired::default(), &valid.desired) {
        Ok(timeline) => {
            let text = match args.format.as_str() {
                "markdown" => timeline.markdown,
                "json" => serde_json::to_string_pretty(&timeline.json).unwrap_or_default() + "\n",
                _ => timeline.text,
            };
            let _ = write!(out, "{text}");
            // A gated rollout that reaches its approval stop did what it was told.
            let awaits = timeline.json["awaitingApproval"]
                .as_array()
                .is_some_and(|w| !w.is_empty());
            if timeline.json["converged"] == true || awaits {
                exit::OK
            } else {
                exit::RUNTIME
            }
        }
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            exit::RUNTIME
        }
    }
}
