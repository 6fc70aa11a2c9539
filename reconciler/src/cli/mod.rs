//! The `nodewright` command line (ARCHITECTURE §4). One module per command: a command adds
//! its `Args` struct and a `run(args) -> ExitCode` function in its own file, plus one variant
//! here in [`Command`] and one arm in [`run`].

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub mod crds;
pub mod demo;
pub mod diff;
pub mod fleet;
pub mod progress;
pub mod reference;
pub mod run;
pub mod serve;
pub mod simulate;
pub mod status;
pub mod validate;
pub mod verbs;

/// Process exit codes shared by every command (ARCHITECTURE §4).
pub mod exit {
    /// Success.
    pub const OK: u8 = 0;
    /// A runtime failure (I/O, cluster, Git).
    pub const RUNTIME: u8 = 1;
    /// Bad arguments (clap exits with this code too).
    pub const USAGE: u8 = 2;
    /// Validation failed: the input is not acceptable (for CI gates).
    pub const INVALID: u8 = 3;
}

const ABOUT: &str =
    "GitOps for NodeWright: validate, simulate and roll out node packages from a Git repository";

const LONG_ABOUT: &str = "\
GitOps for NodeWright (formerly Skyhook).

A Git repository holds NodeWright and DeploymentPolicy manifests \
(apiVersion nodewright.nvidia.com/v1alpha1; legacy skyhook.nvidia.com manifests are read too). \
nodewright checks them, shows what a change will do, and rolls packages out to the nodes.

Exit codes: 0 ok, 1 runtime error, 2 usage error, 3 validation failed.";

const EXAMPLES: &str = "\
Examples:
  # Check an example fleet repository (every .yaml/.yml under the folder)
  nodewright validate examples/fleet

  # Gate a pull request in CI: exit code 3 when anything is invalid
  nodewright validate --format json clusters/prod > report.json

  # Install the CustomResourceDefinitions into a cluster
  nodewright crds | kubectl apply -f -";

/// The `nodewright` command line.
#[derive(Debug, Parser)]
#[command(
    name = "nodewright",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_long_help = EXAMPLES,
    propagate_version = true
)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
    /// Flags of the operational verbs and cluster targets.
    #[command(flatten)]
    pub common: verbs::Common,
}

/// Every command.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check manifests: schema, admission rules and cross-object rules, with file:line.
    #[command(long_about = validate::LONG_ABOUT, after_long_help = validate::EXAMPLES)]
    Validate(validate::Args),
    /// Show what a change between two commits will do to the fleet (for pull requests).
    #[command(long_about = diff::LONG_ABOUT, after_long_help = diff::EXAMPLES)]
    Diff(diff::Args),
    /// Print the CustomResourceDefinitions (NodeWright, DeploymentPolicy) as YAML.
    #[command(long_about = crds::LONG_ABOUT, after_long_help = crds::EXAMPLES)]
    Crds(crds::Args),
    /// The simulated cluster: `sim serve` speaks the Kubernetes API on loopback.
    #[command(subcommand)]
    Sim(serve::SimCommand),
    /// Watch a Git repository and converge the cluster to it (the reconciler).
    #[command(long_about = run::LONG_ABOUT, after_long_help = run::EXAMPLES)]
    Run(Box<run::Args>),
    /// A table of every NodeWright's rollout, from the cluster or a status branch.
    #[command(long_about = status::LONG_ABOUT, after_long_help = status::EXAMPLES)]
    Status(status::Args),
    /// Roll the example fleet out on an embedded simulated cluster, in accelerated time.
    #[command(long_about = demo::LONG_ABOUT, after_long_help = demo::EXAMPLES)]
    Demo(demo::Args),
    /// Operational verbs (kubectl-plugin equivalents).
    #[command(flatten)]
    Verb(verbs::VerbCommand),
    /// Run scenario files against the simulated cluster; exit 0 only when all pass.
    #[command(long_about = simulate::LONG_ABOUT, after_long_help = simulate::EXAMPLES)]
    Simulate(simulate::Args),
}

/// Parses a Go-style duration flag (`30s`, `1h30m`); negative values read as zero.
pub(crate) fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    nodewright_schema::duration::parse_go_duration(text)
        .map(|d| d.non_negative())
        .map_err(|e| e.to_string())
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Validate(args) => validate::run(args),
        Command::Crds(args) => crds::run(args),
        Command::Verb(verb) => verbs::run(verb, cli.common),
        Command::Diff(args) => diff::run(args),
        Command::Sim(command) => serve::run(command, cli.common),
        Command::Demo(args) => demo::run(args),
        Command::Status(args) => status::run(args, cli.common),
        Command::Run(args) => run::run(*args, cli.common),
        Command::Simulate(args) => simulate::run(args),
    }
}

/// Parses the process arguments (clap exits with code 2 on usage errors and 0 for
/// `--help`/`--version`) and runs the command.
pub fn main() -> ExitCode {
    run(Cli::parse())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_line_is_well_formed() {
        Cli::command().debug_assert();
    }
}
