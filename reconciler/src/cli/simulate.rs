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
  nodewright simulate tests/scenarios/pdb-refusal.yaml --quiet";

/// Arguments of `nodewright simulate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Scenario files, or directories holding them (.yaml/.yml, walked recursively).
    #[arg(required = true, value_name = "FILE|DIR")]
    pub paths: Vec<PathBuf>,
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
