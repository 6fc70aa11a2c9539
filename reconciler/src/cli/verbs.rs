//! The operational verbs on the command line (spec/operator.md §14): `reset`, `node …`,
//! `package …`, `pause|resume|disable|enable`, `deployment-policy reset` (alias `dp`),
//! `version`.
//!
//! Planning is pure ([`crate::verbs`]); this module parses arguments, asks for confirmation,
//! renders the account of changes and executes the actions through the [`Cluster`] port. The
//! same [`prepare`] serves the real CLI and the scenario runner's `cli:` steps.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args as ClapArgs, Subcommand};

use super::exit;
use crate::cluster::Cluster;
use crate::plan::{Action, Outcome};
use crate::snapshot::Snapshot;
use crate::verbs::lifecycle::Lifecycle;
use crate::verbs::{self, NodePatterns, OutputFormat, VerbError, VerbPlan, render};

/// Flags every verb accepts (§14.1).
#[derive(Debug, Clone, ClapArgs)]
pub struct Common {
    /// Apply the change without asking (`Continue? [y/N]`). Without it, and when no terminal
    /// can answer, the verb prints what it would change and changes nothing (exit 0).
    #[arg(long, short = 'y', global = true)]
    pub confirm: bool,
    /// Print what would change and write nothing.
    #[arg(long, global = true)]
    pub dry_run: bool,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = OutputFormat::Table, global = true)]
    pub output: OutputFormat,
    /// Kubeconfig to use (default: in-cluster, then $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Target the cluster served by `nodewright sim serve` (its kubeconfig in the cache dir).
    #[arg(long, global = true, conflicts_with = "kubeconfig")]
    pub sim: bool,
    /// The reconciler's namespace (Jobs, pods, ConfigMaps).
    #[arg(long, short = 'n', global = true, default_value = "nodewright")]
    pub namespace: String,
}

/// The verbs.
#[derive(Debug, Clone, Subcommand)]
pub enum VerbCommand {
    /// Clear a NodeWright's state on every node it touched so it re-runs from scratch.
    ///
    /// Removes nodeState_, status_ (annotation and label), version_, drainStart_,
    /// drainBlocked_ and configApplied_ of the NodeWright on every node that carries any of
    /// them, and resets its batch state and node order. cordon_<nw> is kept on nodes the
    /// NodeWright still selects (the re-run releases the cordon) and removed where no re-run
    /// will come. spec.unschedulable is never touched.
    Reset {
        /// NodeWright name.
        nodewright: String,
        /// Keep batch state, nodePriority and the node order.
        #[arg(long)]
        skip_batch_reset: bool,
        /// Remove only this package's entry: NAME or NAME:VERSION.
        #[arg(long, value_name = "NAME[:VERSION]")]
        package: Option<String>,
    },
    /// Inspect and recover nodes.
    #[command(subcommand)]
    Node(NodeCommand),
    /// Inspect and re-run packages.
    #[command(subcommand)]
    Package(PackageCommand),
    /// Pause a NodeWright (and everything after it in priority order on its nodes).
    Pause {
        /// NodeWright name.
        nodewright: String,
    },
    /// Resume a paused NodeWright.
    Resume {
        /// NodeWright name.
        nodewright: String,
    },
    /// Disable a NodeWright: later priorities proceed as if it were not there.
    Disable {
        /// NodeWright name.
        nodewright: String,
    },
    /// Enable a disabled NodeWright.
    Enable {
        /// NodeWright name.
        nodewright: String,
    },
    /// Reset DeploymentPolicy batch state of a NodeWright.
    #[command(subcommand, visible_alias = "dp")]
    DeploymentPolicy(PolicyCommand),
    /// `lifecycle pause|resume|disable|enable <nw>`: the same verbs as the top-level ones,
    /// under the grouping some upstream documentation uses (spec §14.5).
    #[command(subcommand)]
    Lifecycle(LifecycleCommand),
    /// Print the client version (and the version stamped on NodeWrights in the cluster).
    Version {
        /// Do not contact the cluster.
        #[arg(long)]
        client_only: bool,
    },
}

/// `lifecycle …`: pause, resume, disable and enable under one group.
#[derive(Debug, Clone, Subcommand)]
pub enum LifecycleCommand {
    /// Pause a NodeWright (same as `nodewright pause`).
    Pause {
        /// NodeWright name.
        nodewright: String,
    },
    /// Resume a paused NodeWright (same as `nodewright resume`).
    Resume {
        /// NodeWright name.
        nodewright: String,
    },
    /// Disable a NodeWright (same as `nodewright disable`).
    Disable {
        /// NodeWright name.
        nodewright: String,
    },
    /// Enable a disabled NodeWright (same as `nodewright enable`).
    Enable {
        /// NodeWright name.
        nodewright: String,
    },
}

impl LifecycleCommand {
    /// The top-level verb this grouped spelling stands for.
    pub fn as_verb(&self) -> VerbCommand {
        match self.clone() {
            LifecycleCommand::Pause { nodewright } => VerbCommand::Pause { nodewright },
            LifecycleCommand::Resume { nodewright } => VerbCommand::Resume { nodewright },
            LifecycleCommand::Disable { nodewright } => VerbCommand::Disable { nodewright },
            LifecycleCommand::Enable { nodewright } => VerbCommand::Enable { nodewright },
        }
    }
}

/// `node …`.
#[derive(Debug, Clone, Subcommand)]
pub enum NodeCommand {
    /// Nodes a NodeWright targets.
    List {
        /// NodeWright name.
        #[arg(long)]
        nodewright: String,
    },
    /// Rollout state per node and NodeWright, with CORDONED and RUNTIME-REQUIRED-CORDON.
    Status {
        /// Node names or regular expressions (all nodes when omitted).
        patterns: Vec<String>,
        /// Only this NodeWright.
        #[arg(long)]
        nodewright: Option<String>,
    },
    /// Clear a NodeWright's state on matching nodes (cordon annotation as in `reset`).
    Reset {
        /// Node names or regular expressions.
        #[arg(required = true)]
        patterns: Vec<String>,
        /// NodeWright name.
        #[arg(long)]
        nodewright: String,
    },
    /// Set nodewright.nvidia.com/ignore=true: every NodeWright leaves the node alone.
    Ignore {
        /// Node names or regular expressions.
        #[arg(required = true)]
        patterns: Vec<String>,
    },
    /// Remove the ignore label.
    Unignore {
        /// Node names or regular expressions.
        #[arg(required = true)]
        patterns: Vec<String>,
    },
}

/// `package …`.
#[derive(Debug, Clone, Subcommand)]
pub enum PackageCommand {
    /// Per-node stage, state and restarts of a package.
    Status {
        /// Package name.
        package: String,
        /// NodeWright name.
        #[arg(long)]
        nodewright: String,
        /// Node names or regular expressions.
        #[arg(long = "node")]
        nodes: Vec<String>,
    },
    /// Re-run a package on nodes: from apply, or from --stage.
    Rerun {
        /// Package name (must be in the spec).
        package: String,
        /// NodeWright name.
        #[arg(long)]
        nodewright: String,
        /// Node names or regular expressions.
        #[arg(long = "node", required = true)]
        nodes: Vec<String>,
        /// Stage to re-run: apply, config, interrupt or post-interrupt.
        #[arg(long)]
        stage: Option<String>,
    },
    /// Rewrite one node-state entry in place (UP+ `update-state`; no validation of the pair).
    ///
    /// Sets `<PACKAGE>|<VERSION>` of NODEWRIGHT's node state to STAGE/STATE on the nodes that
    /// have the entry (restricted by --node and -l); --add also creates it where missing and
    /// needs --node or -l. The reconciler writes the same annotation, so pause the NodeWright
    /// first. Stages: apply, config, interrupt, post-interrupt, upgrade, uninstall,
    /// uninstall-interrupt. States: complete, in_progress, skipped, erroring, unknown.
    UpdateState {
        /// NodeWright name.
        nodewright: String,
        /// Package name.
        package: String,
        /// Package version of the entry.
        #[arg(value_name = "VERSION")]
        package_version: String,
        /// The stage to record.
        stage: String,
        /// The state to record.
        state: String,
        /// Node names or regular expressions.
        #[arg(long = "node")]
        nodes: Vec<String>,
        /// Label selector of the nodes (`k=v,k2 in (a,b)`).
        #[arg(short = 'l', long = "selector")]
        selector: Option<String>,
        /// Create the entry on the selected nodes where it is missing.
        #[arg(long)]
        add: bool,
    },
    /// Logs of a package's stage pods (running attempts, retained Jobs and archives).
    Logs {
        /// Package name.
        package: String,
        /// NodeWright name.
        #[arg(long)]
        nodewright: String,
        /// Only this node.
        #[arg(long)]
        node: Option<String>,
        /// Only this stage.
        #[arg(long)]
        stage: Option<String>,
        /// Lines from the end (-1 = all).
        #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
        tail: i64,
    },
}

/// `deployment-policy …`.
#[derive(Debug, Clone, Subcommand)]
pub enum PolicyCommand {
    /// Reset every compartment's batch state and the node order of a NodeWright.
    Reset {
        /// NodeWright name.
        nodewright: String,
    },
}

/// A verb with its common flags, as parsed from `nodewright <verb> …`.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "nodewright", no_binary_name = false)]
pub struct VerbCli {
    /// The verb.
    #[command(subcommand)]
    pub verb: VerbCommand,
    /// Common flags.
    #[command(flatten)]
    pub common: Common,
}

/// What a verb will print and write.
#[derive(Debug, Clone, Default)]
pub struct Prepared {
    /// Text for the user (table, JSON/YAML, or the account of changes).
    pub output: String,
    /// Writes to execute (empty for read verbs, dry runs and unconfirmed verbs).
    pub actions: Vec<Action>,
    /// Exit code.
    pub exit: u8,
    /// A destructive verb described its changes and waits for confirmation.
    pub awaiting_confirmation: bool,
}

fn update_state_targets(
    nodes: &[String],
    selector: Option<&str>,
    add: bool,
) -> Result<verbs::package::UpdateTargets, VerbError> {
    let selector = selector
        .map(|text| {
            nodewright_schema::selector::Selector::parse_text(text)
                .map_err(|e| VerbError::InvalidArgument(format!("-l {text:?}: {e}")))
        })
        .transpose()?;
    Ok(verbs::package::UpdateTargets {
        nodes: NodePatterns::new(nodes)?,
        selector,
        add,
    })
}

fn failed(e: VerbError) -> Prepared {
    Prepared {
        output: format!("error: {e}\n"),
        exit: exit::RUNTIME,
        ..Prepared::default()
    }
}

/// Plans a verb against a snapshot. `confirmed` says whether the user agreed (or passed
/// `--confirm`); destructive verbs without it only describe their changes.
pub fn prepare(
    verb: &VerbCommand,
    common: &Common,
    snapshot: &Snapshot,
    confirmed: bool,
) -> Prepared {
    let format = common.output;
    let patterns = |p: &[String]| NodePatterns::new(p);
    let planned: Result<(VerbPlan, bool), VerbError> = match verb {
        VerbCommand::Reset {
            nodewright,
            skip_batch_reset,
            package,
        } => verbs::reset::plan_reset(
            snapshot,
            nodewright,
            &verbs::reset::ResetOptions {
                skip_batch_reset: *skip_batch_reset,
                package: package.clone(),
            },
        )
        .map(|p| (p, true)),
        VerbCommand::Node(NodeCommand::Reset {
            patterns: p,
            nodewright,
        }) => patterns(p)
            .and_then(|p| verbs::reset::plan_node_reset(snapshot, nodewright, &p))
            .map(|p| (p, true)),
        VerbCommand::Node(NodeCommand::Ignore { patterns: p }) => patterns(p)
            .and_then(|p| verbs::node::plan_ignore(snapshot, &p, true))
            .map(|p| (p, false)),
        VerbCommand::Node(NodeCommand::Unignore { patterns: p }) => patterns(p)
            .and_then(|p| verbs::node::plan_ignore(snapshot, &p, false))
            .map(|p| (p, false)),
        VerbCommand::Node(NodeCommand::List { nodewright }) => {
            return match verbs::node::list(snapshot, nodewright) {
                Ok(rows) => read(render(&rows, format, |wide| {
                    verbs::node::table(&rows, wide)
                })),
                Err(e) => failed(e),
            };
        }
        VerbCommand::Node(NodeCommand::Status {
            patterns: p,
            nodewright,
        }) => {
            return match patterns(p)
                .and_then(|p| verbs::node::status(snapshot, &p, nodewright.as_deref()))
            {
                Ok(rows) => read(render(&rows, format, |wide| {
                    verbs::node::table(&rows, wide)
                })),
                Err(e) => failed(e),
            };
        }
        VerbCommand::Package(PackageCommand::Status {
            package,
            nodewright,
            nodes,
        }) => {
            return match patterns(nodes)
                .and_then(|p| verbs::package::status(snapshot, nodewright, package, &p))
            {
                Ok(rows) => read(render(&rows, format, |wide| {
                    verbs::package::table(&rows, wide)
                })),
                Err(e) => failed(e),
            };
        }
        VerbCommand::Package(PackageCommand::Rerun {
            package,
            nodewright,
            nodes,
            stage,
        }) => stage
            .as_deref()
            .map(verbs::package::parse_rerun_stage)
            .transpose()
            .and_then(|stage| {
                patterns(nodes).and_then(|p| {
                    verbs::package::plan_rerun(snapshot, nodewright, package, &p, stage)
                })
            })
            .map(|p| (p, true)),
        VerbCommand::Package(PackageCommand::UpdateState {
            nodewright,
            package,
            package_version: version,
            stage,
            state,
            nodes,
            selector,
            add,
        }) => update_state_targets(nodes, selector.as_deref(), *add)
            .and_then(|targets| {
                let stage = stage.parse::<nodewright_schema::Stage>().map_err(|_| {
                    VerbError::InvalidArgument(format!(
                        "invalid stage {stage:?}: must be one of {}",
                        nodewright_schema::Stage::ALL.map(|s| s.as_str()).join(", ")
                    ))
                })?;
                let state = state.parse::<nodewright_schema::State>().map_err(|_| {
                    VerbError::InvalidArgument(format!(
                        "invalid state {state:?}: must be one of {}",
                        nodewright_schema::State::ALL.map(|s| s.as_str()).join(", ")
                    ))
                })?;
                verbs::package::plan_update_state(
                    snapshot, nodewright, package, version, stage, state, &targets,
                )
            })
            .map(|p| (p, true)),
        VerbCommand::Package(PackageCommand::Logs {
            package,
            nodewright,
            node,
            stage,
            tail,
        }) => {
            return package_logs(
                snapshot,
                nodewright,
                package,
                node.as_deref(),
                stage.as_deref(),
                *tail,
            );
        }
        VerbCommand::Pause { nodewright } => {
            verbs::lifecycle::plan(snapshot, nodewright, Lifecycle::Pause).map(|p| (p, true))
        }
        VerbCommand::Resume { nodewright } => {
            verbs::lifecycle::plan(snapshot, nodewright, Lifecycle::Resume).map(|p| (p, true))
        }
        VerbCommand::Disable { nodewright } => {
            verbs::lifecycle::plan(snapshot, nodewright, Lifecycle::Disable).map(|p| (p, true))
        }
        VerbCommand::Enable { nodewright } => {
            verbs::lifecycle::plan(snapshot, nodewright, Lifecycle::Enable).map(|p| (p, true))
        }
        VerbCommand::DeploymentPolicy(PolicyCommand::Reset { nodewright }) => {
            verbs::policy::plan_reset(snapshot, nodewright).map(|p| (p, true))
        }
        VerbCommand::Version { .. } => return read(version_text(Some(snapshot))),
        VerbCommand::Lifecycle(grouped) => {
            return prepare(&grouped.as_verb(), common, snapshot, confirmed);
        }
    };
    let (plan, needs_confirmation) = match planned {
        Ok(p) => p,
        Err(e) => return failed(e),
    };
    let apply = !common.dry_run && (confirmed || !needs_confirmation);
    let mut prepared = describe(&plan, format, apply);
    prepared.awaiting_confirmation = !apply && !common.dry_run && !plan.is_noop();
    prepared
}

fn read(output: String) -> Prepared {
    Prepared {
        output,
        ..Prepared::default()
    }
}

/// The account of a plan: what changes (or would), warnings and notes.
fn describe(plan: &VerbPlan, format: OutputFormat, apply: bool) -> Prepared {
    #[derive(serde::Serialize)]
    struct Account<'a> {
        applied: bool,
        changes: &'a [String],
        warnings: &'a [String],
        notes: &'a [String],
    }
    let account = Account {
        applied: apply && !plan.is_noop(),
        changes: &plan.changes,
        warnings: &plan.warnings,
        notes: &plan.notes,
    };
    let output = match format {
        OutputFormat::Json => serde_json::to_string_pretty(&account).unwrap_or_default() + "\n",
        OutputFormat::Yaml => serde_yaml::to_string(&account).unwrap_or_default(),
        OutputFormat::Table | OutputFormat::Wide => {
            let mut out = String::new();
            for w in &plan.warnings {
                out.push_str(&format!("warning: {w}\n"));
            }
            for c in &plan.changes {
                out.push_str(&format!("{}{c}\n", if apply { "" } else { "would " }));
            }
            for n in &plan.notes {
                out.push_str(&format!("{n}\n"));
            }
            if !plan.is_noop() && !apply {
                out.push_str("nothing changed: pass --confirm to apply\n");
            }
            out
        }
    };
    Prepared {
        output,
        actions: if apply {
            plan.actions.clone()
        } else {
            Vec::new()
        },
        ..Prepared::default()
    }
}

fn package_logs(
    snapshot: &Snapshot,
    nw: &str,
    package: &str,
    node: Option<&str>,
    stage: Option<&str>,
    tail: i64,
) -> Prepared {
    let nodewright = match verbs::find_nodewright(snapshot, nw) {
        Ok(n) => n,
        Err(e) => return failed(e),
    };
    let Some(spec) = nodewright.spec.packages().get(package) else {
        return failed(VerbError::PackageNotInSpec {
            nodewright: nw.into(),
            package: package.into(),
        });
    };
    let pods = verbs::package::log_pods(snapshot, nw, package, &spec.version, node, stage);
    if pods.is_empty() {
        return read(format!(
            "no stage pods of package {package} (nodewright {nw}) are retained\n"
        ));
    }
    let mut out = String::new();
    for pod in pods {
        out.push_str(&format!(
            "==> pod {} <==\n",
            pod.metadata.name.as_deref().unwrap_or_default()
        ));
        let statuses = pod
            .status
            .as_ref()
            .and_then(|s| s.init_container_statuses.as_ref());
        for status in statuses.into_iter().flatten() {
            let state = status.state.as_ref();
            let line = if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
                format!(
                    "exit {} {}",
                    t.exit_code,
                    t.reason.clone().unwrap_or_default()
                )
            } else if state.and_then(|s| s.running.as_ref()).is_some() {
                "running".to_string()
            } else {
                "waiting".to_string()
            };
            let mut text = format!("[{}] {line}", status.name);
            if let Some(message) = state
                .and_then(|s| s.terminated.as_ref())
                .and_then(|t| t.message.clone())
            {
                let lines: Vec<&str> = message.lines().collect();
                let keep = if tail < 0 {
                    lines.len()
                } else {
                    (tail as usize).min(lines.len())
                };
                text.push('\n');
                text.push_str(&lines[lines.len() - keep..].join("\n"));
            }
            out.push_str(&text);
            out.push('\n');
        }
    }
    read(out)
}

fn version_text(snapshot: Option<&Snapshot>) -> String {
    let mut out = format!("nodewright {}\n", env!("CARGO_PKG_VERSION"));
    if let Some(snapshot) = snapshot {
        let stamps: std::collections::BTreeSet<&str> = snapshot
            .nodewrights
            .iter()
            .filter_map(|nw| {
                nw.metadata
                    .annotations
                    .as_ref()?
                    .get(nodewright_schema::keys::VERSION_STAMP)
            })
            .map(String::as_str)
            .collect();
        if stamps.is_empty() {
            out.push_str("operator: no version stamp found on NodeWrights\n");
        } else {
            out.push_str(&format!(
                "operator: {}\n",
                stamps.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    out
}

/// Executes prepared actions through a cluster; returns what to add to the output and
/// whether every action succeeded.
pub async fn execute<C: Cluster>(cluster: &C, actions: &[Action]) -> (String, bool) {
    let mut out = String::new();
    let mut ok = true;
    for action in actions {
        match cluster.execute(action).await {
            Ok(Outcome::Done) => {}
            Ok(Outcome::NotFound) => out.push_str(&format!(
                "warning: {}: object no longer exists\n",
                action.kind()
            )),
            Ok(other) => {
                ok = false;
                out.push_str(&format!(
                    "error: {}: {other:?}; run the command again\n",
                    action.kind()
                ));
            }
            Err(e) => {
                ok = false;
                out.push_str(&format!("error: {e}\n"));
            }
        }
    }
    (out, ok)
}

/// Runs a verb against the simulated cluster of a scenario (`cli:` steps): stdin is empty,
/// so a verb that would prompt acts as without `--confirm`.
pub fn run_on_sim(world: &mut crate::sim::SimCluster, args: &[String]) -> (u8, String) {
    use clap::Parser;
    let argv = std::iter::once("nodewright".to_string()).chain(args.iter().cloned());
    let cli = match VerbCli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(e) => return (exit::USAGE, e.to_string()),
    };
    let snapshot = world.snapshot(crate::snapshot::Memory::default());
    let prepared = prepare(&cli.verb, &cli.common, &snapshot, cli.common.confirm);
    let mut output = prepared.output;
    let mut code = prepared.exit;
    for action in &prepared.actions {
        match world.execute(action) {
            Ok(Outcome::Done) | Ok(Outcome::NotFound) => {}
            Ok(other) => {
                code = exit::RUNTIME;
                output.push_str(&format!("error: {}: {other:?}\n", action.kind()));
            }
            Err(e) => {
                code = exit::RUNTIME;
                output.push_str(&format!("error: {e}\n"));
            }
        }
    }
    (code, output)
}

fn ask_confirmation() -> bool {
    eprint!("Continue? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).is_ok() && matches!(line.trim(), "y" | "Y" | "yes")
}

/// Runs a verb from the command line against a real cluster (or `sim serve`).
pub fn run(verb: VerbCommand, common: Common) -> ExitCode {
    if let VerbCommand::Version { client_only: true } = verb {
        print!("{}", version_text(None));
        return ExitCode::from(exit::OK);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(exit::RUNTIME);
        }
    };
    runtime.block_on(async move {
        let cluster = match connect(&common).await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(exit::RUNTIME);
            }
        };
        let snapshot = match cluster.snapshot().await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(exit::RUNTIME);
            }
        };
        let preview = prepare(&verb, &common, &snapshot, common.confirm);
        let prepared = if preview.awaiting_confirmation && std::io::stdin().is_terminal() {
            print!("{}", preview.output);
            if ask_confirmation() {
                prepare(&verb, &common, &snapshot, true)
            } else {
                return ExitCode::from(exit::OK);
            }
        } else {
            preview
        };
        print!("{}", prepared.output);
        let (extra, ok) = execute(&cluster, &prepared.actions).await;
        eprint!("{extra}");
        ExitCode::from(if ok { prepared.exit } else { exit::RUNTIME })
    })
}

/// Connects to the target cluster of the common flags.
pub async fn connect(common: &Common) -> Result<crate::cluster::kube::KubeCluster, String> {
    let kubeconfig = if common.sim {
        Some(crate::cluster::kube::sim_kubeconfig_path())
    } else {
        common.kubeconfig.clone()
    };
    let (client, clock) = crate::cluster::kube::client(kubeconfig.as_deref())
        .await
        .map_err(|e| e.to_string())?;
    crate::cluster::kube::KubeCluster::connect(
        client,
        crate::cluster::kube::KubeOptions {
            namespace: common.namespace.clone(),
            instance: "nodewright-cli".into(),
            clock,
        },
    )
    .await
    .map_err(|e| e.to_string())
}

/// The first words of every verb (and alias), as the scenario runner looks them up.
pub const VERB_NAMES: [&str; 11] = [
    "reset",
    "node",
    "package",
    "pause",
    "resume",
    "disable",
    "enable",
    "deployment-policy",
    "dp",
    "lifecycle",
    "version",
];

/// The scenario runner's `cli:` hook (spec/scenarios.md §4).
pub fn scenario_hook(
    world: &mut crate::sim::SimCluster,
    args: &[String],
    _settings: &crate::settings::Settings,
) -> crate::scenario::VerbResult {
    let (exit, output) = run_on_sim(world, args);
    crate::scenario::VerbResult {
        exit: i32::from(exit),
        output,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn snapshot() -> Snapshot {
        use crate::verbs::testkit::{cordoned, node, nodewright};
        let state = r#"{"pkg|1.0.0":{"name":"pkg","version":"1.0.0","image":"example/pkg","stage":"config","state":"erroring","restarts":2}}"#;
        Snapshot {
            nodes: vec![
                cordoned(node(
                    "n1",
                    &[("pool", "gpu")],
                    &[
                        ("nodewright.nvidia.com/nodeState_gpu", state),
                        ("nodewright.nvidia.com/status_gpu", "erroring"),
                    ],
                )),
                node(
                    "n2",
                    &[("pool", "gpu")],
                    &[("nodewright.nvidia.com/status_gpu", "complete")],
                ),
            ],
            nodewrights: vec![nodewright("gpu", &[("pool", "gpu")], &[("pkg", "1.0.0")])],
            ..Snapshot::default()
        }
    }

    fn output(args: &[&str]) -> Prepared {
        let cli =
            VerbCli::try_parse_from(std::iter::once("nodewright").chain(args.iter().copied()))
                .unwrap();
        prepare(&cli.verb, &cli.common, &snapshot(), cli.common.confirm)
    }

    #[test]
    fn json_output_parses_and_carries_the_facts_of_the_table() {
        for verb in [
            &["node", "status"][..],
            &["node", "list", "--nodewright", "gpu"],
            &["package", "status", "pkg", "--nodewright", "gpu"],
        ] {
            let table = output(verb).output;
            let json_args: Vec<&str> = verb.iter().copied().chain(["-o", "json"]).collect();
            let json: serde_json::Value = serde_json::from_str(&output(&json_args).output).unwrap();
            let rows = json.as_array().unwrap();
            assert!(!rows.is_empty(), "{verb:?}");
            for row in rows {
                let node = row["node"].as_str().unwrap();
                let line = table
                    .lines()
                    .find(|l| l.starts_with(node))
                    .unwrap_or_else(|| panic!("{node} missing from:\n{table}"));
                for key in ["status", "stage", "state"] {
                    if let Some(value) = row.get(key).and_then(|v| v.as_str()) {
                        assert!(line.contains(value), "{key}={value} not in {line:?}");
                    }
                }
            }
            let yaml_args: Vec<&str> = verb.iter().copied().chain(["-o", "yaml"]).collect();
            let yaml: serde_yaml::Value = serde_yaml::from_str(&output(&yaml_args).output).unwrap();
            assert_eq!(serde_json::to_value(&yaml).unwrap(), json);
        }
    }

    #[test]
    fn destructive_verbs_without_confirm_only_describe_and_change_nothing() {
        let p = output(&["reset", "gpu"]);
        assert!(p.actions.is_empty() && p.awaiting_confirmation, "{p:?}");
        assert!(
            p.output.contains("would ") && p.output.contains("--confirm"),
            "{}",
            p.output
        );
        assert_eq!(p.exit, exit::OK);
        let confirmed = output(&["reset", "gpu", "--confirm"]);
        assert!(!confirmed.actions.is_empty());
        let dry = output(&["reset", "gpu", "--confirm", "--dry-run"]);
        assert!(dry.actions.is_empty());
        // node ignore needs no confirmation.
        assert!(!output(&["node", "ignore", "n2"]).actions.is_empty());
        assert_eq!(output(&["pause", "nope"]).exit, exit::RUNTIME);
    }
}
