//! The `nodewright` command line (ARCHITECTURE §4). One module per command: a command adds
//! its `Args` struct and a `run(args) -> ExitCode` function in its own file, plus one variant
//! here in [`Command`] and one arm in [`run()`].

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub mod approve;
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
    /// Commit the approval of a gated batch (a minimal edit of the NodeWright's manifest).
    #[command(long_about = approve::LONG_ABOUT, after_long_help = approve::EXAMPLES)]
    Approve(approve::Args),
    /// Run scenario files against the simulated cluster; exit 0 only when all pass.
    #[command(long_about = simulate::LONG_ABOUT, after_long_help = simulate::EXAMPLES)]
    Simulate(simulate::Args),
}

impl Command {
    /// Whether the command is the reconciler, which runs until stopped under a pod's memory
    /// limit: its freed memory should go back promptly. A command that ends (a simulation, a
    /// diff) and `sim serve`, a test cluster that churns far more memory per second, are
    /// faster keeping it a while.
    pub fn lives_under_a_memory_limit(&self) -> bool {
        matches!(self, Command::Run(_))
    }
}

/// Whether output to a stream may carry ANSI colour codes: only on a terminal, and not when
/// the user set `NO_COLOR` to a non-empty value (no-color.org). Logs sent to a file or a pipe
/// stay plain text.
pub(crate) fn colour_wanted(is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Parses a Go-style duration flag (`30s`, `1h30m`); negative values read as zero.
pub(crate) fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    nodewright_schema::duration::parse_go_duration(text)
        .map(|d| d.non_negative())
        .map_err(|e| e.to_string())
}

/// The command line as clap sees it: [`Cli`], with the verbs' flags ([`verbs::Common`])
/// attached to each operational verb and nowhere else. They cannot be global flags of
/// `nodewright`: on `validate` or `sim serve` they would be accepted and do nothing.
pub fn command() -> clap::Command {
    use clap::{Args as _, CommandFactory as _, Subcommand as _};
    let verbs = verbs::VerbCommand::augment_subcommands(clap::Command::new("verbs"));
    let is_verb = |name: &str| verbs.get_subcommands().any(|v| v.get_name() == name);
    Cli::command().mut_subcommands(|sub| {
        if !is_verb(sub.get_name()) {
            return sub;
        }
        // Augmenting would give the verb the flag struct's description; keep the verb's own.
        let keep = |text: Option<&clap::builder::StyledStr>| {
            text.cloned().map_or(
                clap::builder::Resettable::Reset,
                clap::builder::Resettable::Value,
            )
        };
        let (about, long_about) = (keep(sub.get_about()), keep(sub.get_long_about()));
        verbs::Common::augment_args(sub)
            .about(about)
            .long_about(long_about)
    })
}

/// A parsed command line.
#[derive(Debug)]
pub struct Invocation {
    /// The command.
    pub command: Command,
    /// The flags of an operational verb; `None` for the other commands.
    pub verb_flags: Option<verbs::Common>,
}

/// Parses a command line (program name first) as [`command`] defines it.
pub fn parse_from<I, T>(args: I) -> Result<Invocation, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::FromArgMatches as _;
    let matches = command().try_get_matches_from(args)?;
    let cli = Cli::from_arg_matches(&matches)?;
    let verb_flags = match (&cli.command, matches.subcommand()) {
        (Command::Verb(_), Some((_, verb))) => Some(verbs::Common::from_arg_matches(verb)?),
        _ => None,
    };
    Ok(Invocation {
        command: cli.command,
        verb_flags,
    })
}

/// Runs a parsed command line.
pub fn run(invocation: Invocation) -> ExitCode {
    match invocation.command {
        Command::Validate(args) => validate::run(args),
        Command::Crds(args) => crds::run(args),
        Command::Verb(verb) => match invocation.verb_flags {
            Some(common) => verbs::run(verb, common),
            None => {
                eprintln!("error: the verb's flags were not parsed; use cli::parse_from");
                ExitCode::from(exit::USAGE)
            }
        },
        Command::Diff(args) => diff::run(args),
        Command::Sim(command) => serve::run(command),
        Command::Demo(args) => demo::run(args),
        Command::Status(args) => status::run(args),
        Command::Run(args) => run::run(*args),
        Command::Simulate(args) => simulate::run(args),
        Command::Approve(args) => approve::run(args),
    }
}

/// Parses the process arguments (exit code 2 on usage errors, 0 for `--help`/`--version`) and
/// runs the command, after `prepare` has seen it (the binary tunes its allocator to it).
pub fn main(prepare: impl FnOnce(&Command)) -> ExitCode {
    match parse_from(std::env::args_os()) {
        Ok(invocation) => {
            prepare(&invocation.command);
            run(invocation)
        }
        Err(e) => e.exit(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_is_well_formed() {
        command().debug_assert();
    }

    #[test]
    fn only_the_reconciler_lives_under_a_memory_limit() {
        let runs = |line: &[&str]| {
            let args = std::iter::once("nodewright").chain(line.iter().copied());
            parse_from(args)
                .expect("a valid command line")
                .command
                .lives_under_a_memory_limit()
        };
        assert!(runs(&["run", "--repo", "."]));
        assert!(!runs(&["sim", "serve"]));
        assert!(!runs(&["simulate", "examples/scale/rollout-1000.yaml"]));
        assert!(!runs(&[
            "diff", "--repo", ".", "--base", "a", "--head", "b"
        ]));
        assert!(!runs(&["demo"]));
    }

    /// Issue 28 item 13: the verbs' flags exist on the verbs (also after a nested verb's
    /// name) and nowhere else.
    #[test]
    fn verb_flags_belong_to_the_verbs_only() {
        let parsed = parse_from(["nodewright", "node", "status", "-o", "json", "--sim"]).unwrap();
        let flags = parsed.verb_flags.expect("a verb has flags");
        assert_eq!(flags.output, crate::verbs::OutputFormat::Json);
        assert!(flags.target.sim);
        let parsed = parse_from(["nodewright", "-n", "ops", "pause", "gpu", "--confirm"]);
        assert!(parsed.is_err(), "the verbs' flags are not global flags");
        let parsed = parse_from(["nodewright", "pause", "gpu", "--confirm", "-n", "ops"]).unwrap();
        let flags = parsed.verb_flags.expect("a verb has flags");
        assert!(flags.confirm);
        assert_eq!(flags.target.namespace, "ops");
        for line in [
            &["validate", "examples/fleet", "--confirm"][..],
            &["sim", "serve", "--dry-run"],
            &["sim", "serve", "-o", "json"],
            &["crds", "--sim"],
            &["run", "--repo", ".", "--confirm"],
        ] {
            let args = std::iter::once("nodewright").chain(line.iter().copied());
            let err = parse_from(args).expect_err("not a flag of this command");
            assert_eq!(
                err.kind(),
                clap::error::ErrorKind::UnknownArgument,
                "{line:?}"
            );
        }
        let serve = parse_from([
            "nodewright",
            "sim",
            "serve",
            "--kubeconfig",
            "/tmp/k",
            "-n",
            "x",
        ]);
        assert!(serve.is_ok());
        let status = parse_from(["nodewright", "status", "-o", "json", "--sim"]).unwrap();
        assert!(status.verb_flags.is_none());
    }

    #[test]
    fn colour_is_for_terminals_without_no_color() {
        use std::ffi::OsStr;
        assert!(colour_wanted(true, None));
        assert!(colour_wanted(true, Some(OsStr::new(""))));
        assert!(!colour_wanted(true, Some(OsStr::new("1"))));
        assert!(!colour_wanted(false, None));
    }
}
