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

/// Which cluster a command talks to: the flags of the commands that read or change a cluster
/// (the operational verbs, `status`, `run`).
#[derive(Debug, Clone, ClapArgs)]
pub struct Target {
    /// Kubeconfig to use (default: in-cluster, then $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Target the cluster served by `nodewright sim serve` (the kubeconfig it writes in the
    /// user's cache directory).
    #[arg(long, global = true, conflicts_with = "kubeconfig")]
    pub sim: bool,
    /// The reconciler's namespace (Jobs, pods, ConfigMaps).
    #[arg(long, short = 'n', global = true, default_value = "nodewright")]
    pub namespace: String,
    /// Requests per second this process may send to the API server, watches, reads and
    /// writes together (a token bucket, as client-go's; default: the settings file's
    /// `kubeQps`, else 20, client-go's usual rate; upstream's operator sets no client-side
    /// limit and relies on API Priority and Fairness).
    #[arg(long, global = true, value_name = "QPS")]
    pub kube_qps: Option<f64>,
    /// Requests the bucket lets through at once before the rate applies (default: the
    /// settings file's `kubeBurst`, else 30).
    #[arg(long, global = true, value_name = "REQUESTS")]
    pub kube_burst: Option<u32>,
}

impl Target {
    /// The API budget these flags give, over the settings' (`None`: the defaults).
    pub fn api_budget(
        &self,
        settings: Option<&crate::settings::Settings>,
    ) -> Result<crate::cluster::api_budget::ApiBudget, String> {
        use crate::cluster::api_budget::{ApiBudget, DEFAULT_BURST, DEFAULT_QPS};
        let qps = self
            .kube_qps
            .or(settings.map(|s| s.kube_qps))
            .unwrap_or(DEFAULT_QPS);
        let burst = self
            .kube_burst
            .or(settings.map(|s| s.kube_burst))
            .unwrap_or(DEFAULT_BURST);
        ApiBudget::new(qps, burst).map_err(|e| e.to_string())
    }

    /// The kubeconfig these flags name (`--sim`: the one `sim serve` writes by default), if
    /// any.
    pub fn kubeconfig_path(&self) -> Option<PathBuf> {
        if self.sim {
            Some(crate::cluster::kube::sim_kubeconfig_path())
        } else {
            self.kubeconfig.clone()
        }
    }
}

/// Flags every verb accepts (§14.1). They are attached to the verbs only (see
/// [`super::command`]): `validate --confirm` is a usage error, not a flag that does nothing.
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
    /// The cluster.
    #[command(flatten)]
    pub target: Target,
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
    /// grouped under one word as some upstream documentation spells them.
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
        /// Lines from the end of each container's log (-1 = all).
        #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
        tail: i64,
        /// Follow the running attempt until its pod finishes (table output only).
        #[arg(long, short = 'f')]
        follow: bool,
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
        VerbCommand::Package(PackageCommand::Logs { .. }) => {
            // Logs are read through the cluster, not planned: see [`package_logs`].
            return failed(VerbError::InvalidArgument(
                "package logs reads container logs through the cluster; use package_logs".into(),
            ));
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

/// One container log as `package logs` prints it (`-o json|yaml` carries the same facts as
/// the text: the target, then the log or why it could not be read).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerLogOutput {
    /// Which Job, pod, attempt and container.
    #[serde(flatten)]
    pub target: verbs::package::LogTarget,
    /// The log (after `--tail`), when it could be read.
    pub log: Option<String>,
    /// Why it could not be read (e.g. the container is waiting to start).
    pub error: Option<String>,
}

/// `==> node n1 | job … | pod … | attempt 2/3 (running) | container … [running] <==`.
fn log_header(t: &verbs::package::LogTarget) -> String {
    let restarts = if t.restarts > 0 {
        format!(", {} restarts", t.restarts)
    } else {
        String::new()
    };
    format!(
        "==> node {} | job {} | pod {} | attempt {}/{} ({}) | container {} [{}{restarts}] <==\n",
        t.node,
        t.job,
        t.pod,
        t.attempt,
        t.attempts,
        t.attempt_state,
        t.container,
        t.container_state
    )
}

fn error_text(e: &crate::cluster::ClusterError) -> String {
    match e {
        crate::cluster::ClusterError::Api { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

fn log_request(t: &verbs::package::LogTarget, tail: i64) -> crate::cluster::LogRequest {
    crate::cluster::LogRequest {
        namespace: t.namespace.clone(),
        pod: t.pod.clone(),
        container: Some(t.container.clone()),
        tail_lines: (tail >= 0).then_some(tail),
        limit_bytes: None,
        previous: false,
    }
}

/// Reads each target's log through `read` (a [`Cluster::pod_logs`] or the in-process
/// simulator).
pub async fn read_logs<F, Fut>(
    targets: &[verbs::package::LogTarget],
    tail: i64,
    mut read: F,
) -> Vec<ContainerLogOutput>
where
    F: FnMut(crate::cluster::LogRequest) -> Fut,
    Fut: std::future::Future<Output = Result<String, crate::cluster::ClusterError>>,
{
    let mut out = Vec::with_capacity(targets.len());
    for t in targets {
        let (log, error) = match read(log_request(t, tail)).await {
            Ok(text) => (Some(text), None),
            Err(e) => (None, Some(error_text(&e))),
        };
        out.push(ContainerLogOutput {
            target: t.clone(),
            log,
            error,
        });
    }
    out
}

/// The text (or JSON/YAML) of `package logs`.
pub fn render_logs(entries: &[ContainerLogOutput], format: OutputFormat) -> String {
    match format {
        OutputFormat::Json => serde_json::to_string_pretty(entries).unwrap_or_default() + "\n",
        OutputFormat::Yaml => serde_yaml::to_string(entries).unwrap_or_default(),
        OutputFormat::Table | OutputFormat::Wide => {
            let mut out = String::new();
            for e in entries {
                out.push_str(&log_header(&e.target));
                match (&e.log, &e.error) {
                    (Some(log), _) => {
                        out.push_str(log);
                        if !log.is_empty() && !log.ends_with('\n') {
                            out.push('\n');
                        }
                    }
                    (None, Some(error)) => out.push_str(&format!("({error})\n")),
                    (None, None) => {}
                }
            }
            out
        }
    }
}

/// Arguments of `package logs`.
#[derive(Clone, Debug)]
pub struct LogsArgs {
    /// NodeWright name.
    pub nodewright: String,
    /// Package name.
    pub package: String,
    /// Only this node.
    pub node: Option<String>,
    /// Only this stage.
    pub stage: Option<String>,
    /// Lines from the end (-1 = all).
    pub tail: i64,
    /// Follow the running attempt.
    pub follow: bool,
}

impl LogsArgs {
    /// The arguments of a `package logs` verb, if it is one.
    pub fn of(verb: &VerbCommand) -> Option<LogsArgs> {
        match verb {
            VerbCommand::Package(PackageCommand::Logs {
                package,
                nodewright,
                node,
                stage,
                tail,
                follow,
            }) => Some(LogsArgs {
                nodewright: nodewright.clone(),
                package: package.clone(),
                node: node.clone(),
                stage: stage.clone(),
                tail: *tail,
                follow: *follow,
            }),
            _ => None,
        }
    }

    fn targets(&self, snapshot: &Snapshot) -> Result<Vec<verbs::package::LogTarget>, VerbError> {
        verbs::package::log_targets(
            snapshot,
            &self.nodewright,
            &self.package,
            self.node.as_deref(),
            self.stage.as_deref(),
        )
    }
}

fn no_pods(args: &LogsArgs, format: OutputFormat) -> String {
    match format {
        OutputFormat::Json => "[]\n".into(),
        OutputFormat::Yaml => "[]\n".into(),
        _ => format!(
            "no stage pods of package {} (nodewright {}) are retained\n",
            args.package, args.nodewright
        ),
    }
}

/// `package logs` against the in-process simulator (scenario `cli:` steps). The simulated
/// clock does not move while a verb runs, so `-f` prints what the containers wrote so far.
pub fn package_logs_on_sim(
    world: &crate::sim::SimCluster,
    snapshot: &Snapshot,
    args: &LogsArgs,
    format: OutputFormat,
) -> (u8, String) {
    let targets = match args.targets(snapshot) {
        Ok(t) => t,
        Err(e) => return (exit::RUNTIME, format!("error: {e}\n")),
    };
    if targets.is_empty() {
        return (exit::OK, no_pods(args, format));
    }
    let entries = crate::cluster::sim::block_on(read_logs(&targets, args.tail, |req| {
        std::future::ready(world.pod_logs(&req))
    }));
    (exit::OK, render_logs(&entries, format))
}

/// `package logs` through a [`Cluster`]: prints every retained attempt's containers; with
/// `-f`, the containers of the running attempt are followed in run order until the pod
/// finishes (a container that has not started yet is waited for, polling once a second).
/// Following needs a cluster whose clock runs on its own (a real cluster, `sim serve`); the
/// in-process simulator is read with [`package_logs_on_sim`].
pub async fn package_logs<C: Cluster>(
    cluster: &C,
    snapshot: &Snapshot,
    args: &LogsArgs,
    format: OutputFormat,
    out: &mut (dyn FnMut(&str) + Send),
) -> u8 {
    if args.follow && matches!(format, OutputFormat::Json | OutputFormat::Yaml) {
        out("error: -f/--follow prints text; it cannot be combined with -o json|yaml\n");
        return exit::USAGE;
    }
    let targets = match args.targets(snapshot) {
        Ok(t) => t,
        Err(e) => {
            out(&format!("error: {e}\n"));
            return exit::RUNTIME;
        }
    };
    if targets.is_empty() {
        out(&no_pods(args, format));
        return exit::OK;
    }
    let (live, done): (Vec<_>, Vec<_>) = targets.into_iter().partition(|t| args.follow && t.live());
    let entries = read_logs(&done, args.tail, |req| async move {
        cluster.pod_logs(&req).await
    })
    .await;
    out(&render_logs(&entries, format));
    // Several nodes' running attempts are followed one after the other (each from its start,
    // so nothing is lost); a pod that finished skips its remaining containers.
    let mut finished: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
    for t in &live {
        if finished.contains(t.pod.as_str()) {
            continue;
        }
        out(&log_header(t));
        loop {
            match cluster
                .follow_pod_logs(&log_request(t, args.tail), &mut *out)
                .await
            {
                Ok(()) => break,
                // Not started yet (400 "… is waiting to start: …"): wait for it while the
                // pod runs.
                Err(crate::cluster::ClusterError::Api {
                    status: 400,
                    message,
                    ..
                }) if message.contains("waiting to start") && pod_running(cluster, t).await => {
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
                Err(e) => {
                    out(&format!("({})\n", error_text(&e)));
                    break;
                }
            }
        }
        if !pod_running(cluster, t).await {
            // The pod finished (or is gone): its remaining containers will not run.
            finished.insert(t.pod.as_str());
        }
    }
    exit::OK
}

/// Whether the target's pod still exists and has not finished.
async fn pod_running<C: Cluster>(cluster: &C, t: &verbs::package::LogTarget) -> bool {
    let Ok(snapshot) = cluster.snapshot().await else {
        return false;
    };
    snapshot.pods.iter().any(|p| {
        p.metadata.name.as_deref() == Some(t.pod.as_str())
            && p.metadata.namespace.as_deref() == Some(t.namespace.as_str())
            && p.metadata.deletion_timestamp.is_none()
            && !crate::snapshot::pod_has_ended(p)
    })
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
    let snapshot = world.whole_snapshot(crate::snapshot::Memory::default());
    if let Some(args) = LogsArgs::of(&cli.verb) {
        return package_logs_on_sim(world, &snapshot, &args, cli.common.output);
    }
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
        let cluster =
            match async { connect(&common.target, &common.target.api_budget(None)?, true).await }
                .await
            {
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
        if let Some(args) = LogsArgs::of(&verb) {
            let mut print = |text: &str| {
                print!("{text}");
                let _ = std::io::stdout().flush();
            };
            let code = package_logs(&cluster, &snapshot, &args, common.output, &mut print).await;
            return ExitCode::from(code);
        }
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

/// Connects to the cluster the flags name, every request under `budget`; ended pods keep
/// their init containers' names and statuses when `keep_ended_pods_for_logs` (for `package
/// logs`).
pub async fn connect(
    target: &Target,
    budget: &crate::cluster::api_budget::ApiBudget,
    keep_ended_pods_for_logs: bool,
) -> Result<crate::cluster::kube::KubeCluster, String> {
    let kubeconfig = target.kubeconfig_path();
    let (client, clock) = crate::cluster::kube::client(kubeconfig.as_deref(), budget)
        .await
        .map_err(|e| e.to_string())?;
    crate::cluster::kube::KubeCluster::connect(
        client,
        crate::cluster::kube::KubeOptions {
            namespace: target.namespace.clone(),
            instance: "nodewright-cli".into(),
            clock,
            keep_ended_pods_for_logs,
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
            ]
            .into_iter()
            .map(std::sync::Arc::new)
            .collect(),
            nodewrights: vec![std::sync::Arc::new(nodewright(
                "gpu",
                &[("pool", "gpu")],
                &[("pkg", "1.0.0")],
            ))],
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

    /// A world where package `tuning` failed its first apply attempt and succeeded on the
    /// second, driven by the real engine.
    fn world_after_a_retry() -> crate::sim::SimCluster {
        world_running(
            "example/tuning: {stages: {apply: {duration: 3s, failures: 1}}}",
            "example/tuning",
        )
    }

    /// Two minutes of rollout of package `tuning` (image `image`) on one node.
    fn world_running(models: &str, image: &str) -> crate::sim::SimCluster {
        use crate::sim::{ModelRunner, NodeInput, PackageModels, SimCluster};
        let models = PackageModels(serde_yaml::from_str(models).unwrap());
        let mut runner = ModelRunner::new(models.clone());
        if models.has_real_packages() {
            runner = runner.with_real_agent(crate::sim::agent::scenario_real_agent(&models));
        }
        let mut world = SimCluster::new("nodewright", Box::new(runner), 3);
        world.add_node(NodeInput {
            name: "n1".into(),
            ..NodeInput::default()
        });
        world.apply_desired(&crate::cluster::Desired {
            nodewrights: vec![
                crate::engine::testkit::nw("tuning")
                    .with_package(
                        "tuning",
                        nodewright_schema::Package {
                            image: image.into(),
                            ..crate::engine::testkit::package("tuning", "1.0.0")
                        },
                    )
                    .build(),
            ],
            policies: vec![],
            commit: "c1".into(),
            ..Default::default()
        });
        let settings = crate::settings::Settings::default();
        for _ in 0..60 {
            let snap = world.snapshot(crate::snapshot::Memory::default());
            for action in crate::engine::reconcile(&snap, &settings).actions {
                world.execute(&action).unwrap();
            }
            world.advance(std::time::Duration::from_secs(2));
        }
        world
    }

    fn logs(world: &mut crate::sim::SimCluster, extra: &[&str]) -> String {
        let args: Vec<String> = [
            "package",
            "logs",
            "tuning",
            "--nodewright",
            "tuning",
            "--stage",
            "apply",
        ]
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect();
        let (code, out) = run_on_sim(world, &args);
        assert_eq!(code, exit::OK, "{out}");
        out
    }

    #[test]
    fn package_logs_prints_every_retained_attempt_with_its_container_logs() {
        let mut world = world_after_a_retry();
        let text = logs(&mut world, &[]);
        let headers: Vec<&str> = text.lines().filter(|l| l.starts_with("==> ")).collect();
        // Two attempts (the failed archive, then the success) x three containers.
        assert_eq!(headers.len(), 6, "{text}");
        assert!(
            headers[1].contains("attempt 1/2 (failed) | container tuning-apply [exit 1 (Error)]"),
            "{text}"
        );
        assert!(
            headers[4]
                .contains("attempt 2/2 (succeeded) | container tuning-apply [exit 0 (Completed)]"),
            "{text}"
        );
        assert!(
            headers[2].contains("container tuning-applycheck [waiting (PodInitializing)]"),
            "{text}"
        );
        let section = |h: &str| {
            let start = text.find(h).unwrap() + h.len() + 1;
            let rest = &text[start..];
            rest[..rest.find("==> ").unwrap_or(rest.len())].to_string()
        };
        let failed = section(headers[1]);
        assert!(
            failed.contains("attempt=1")
                && failed.ends_with(
                    "ERROR: apply exited 1 (behaviour model)\napply failed: exit code 1\n"
                ),
            "{failed}"
        );
        assert!(section(headers[2]).contains("is waiting to start"));
        assert!(section(headers[4]).ends_with("apply succeeded: exit code 0\n"));

        let tail = logs(&mut world, &["--tail", "1"]);
        assert!(
            tail.contains(&format!("{}\napply failed: exit code 1\n==> ", headers[1])),
            "{tail}"
        );

        // -o json carries the same facts: one entry per header, with the log under it.
        let json: serde_json::Value =
            serde_json::from_str(&logs(&mut world, &["-o", "json"])).unwrap();
        let entries = json.as_array().unwrap();
        assert_eq!(entries.len(), headers.len());
        for (entry, header) in entries.iter().zip(&headers) {
            for key in [
                "node",
                "job",
                "pod",
                "container",
                "attemptState",
                "containerState",
            ] {
                let value = entry[key].as_str().unwrap();
                assert!(header.contains(value), "{key}={value} not in {header}");
            }
            let attempt = format!("attempt {}/{}", entry["attempt"], entry["attempts"]);
            assert!(header.contains(&attempt), "{attempt} not in {header}");
            match entry["log"].as_str() {
                Some(log) => assert_eq!(section(header), log),
                None => assert!(section(header).contains(entry["error"].as_str().unwrap())),
            }
        }
        // Unknown package: an error naming it.
        let (code, out) = run_on_sim(
            &mut world,
            &["package", "logs", "nope", "--nodewright", "tuning"].map(String::from),
        );
        assert_eq!(code, exit::RUNTIME);
        assert!(out.contains("\"nope\""), "{out}");
    }

    #[test]
    fn package_logs_of_a_real_package_carry_the_agents_own_output() {
        let mut world = world_running(
            "example/tuning-real: {path: examples/packages/tuning}",
            "example/tuning-real",
        );
        let text = logs(&mut world, &[]);
        let apply = text
            .split("==> ")
            .find(|s| s.contains("container tuning-apply ["))
            .unwrap_or_else(|| panic!("{text}"));
        // The agent prints its configuration banner first (agent/src/lib.rs).
        assert!(
            apply.contains("-CLI CONFIGURATION--\nmode: apply\n"),
            "{apply}"
        );
    }

    #[test]
    fn package_logs_through_the_port_matches_the_in_process_read_and_refuses_follow_as_json() {
        use crate::cluster::sim::{SimAdapter, block_on};
        let mut world = world_after_a_retry();
        let direct = logs(&mut world, &[]);
        let cluster = SimAdapter::new(world);
        // The verbs read the cluster as a client does, with every object whole.
        let snapshot = cluster
            .world()
            .whole_snapshot(crate::snapshot::Memory::default());
        let mut args = LogsArgs {
            nodewright: "tuning".into(),
            package: "tuning".into(),
            node: Some("n1".into()),
            stage: Some("apply".into()),
            tail: -1,
            follow: false,
        };
        let mut out = String::new();
        let code = block_on(package_logs(
            &cluster,
            &snapshot,
            &args,
            OutputFormat::Table,
            &mut |t: &str| out.push_str(t),
        ));
        assert_eq!((code, out.as_str()), (exit::OK, direct.as_str()));
        args.follow = true;
        let mut out = String::new();
        let code = block_on(package_logs(
            &cluster,
            &snapshot,
            &args,
            OutputFormat::Json,
            &mut |t: &str| out.push_str(t),
        ));
        assert_eq!(code, exit::USAGE, "{out}");
    }
}
