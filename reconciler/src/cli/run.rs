//! `nodewright run`: the product — watch a Git repository and converge a cluster to it.

use std::io::IsTerminal;
use std::num::NonZeroU32;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use super::exit;
use super::fleet::Fleet;
use super::progress::Progress;
use super::verbs::Target;
use crate::cluster::Cluster;
use crate::cluster::sim::SimAdapter;
use crate::controller::Controller;
use crate::controller::daemon::{LifecycleMode, Pacer, SimClock, WallClock, run_loop};
use crate::controller::source::{GitSource, RepoLocation, SourceChange};
use crate::controller::status::{StatusTarget, StatusWrite, StatusWriter};
use crate::forge::approvals::{ApprovalRequests, BranchTarget};
use crate::metrics::{Metrics, MetricsServer};
use crate::settings::Settings;
use crate::source::cadence::FetchCadence;
use crate::source::desired::ReadOptions;
use crate::source::repo::{Credentials, RemoteSpec, SecretSource};
use crate::source::triggers::{channel, process_seed, watch_refs};
use crate::source::webhook;
use crate::writeback::git::{Author, DEFAULT_STATUS_BRANCH};

/// Long help.
pub const LONG_ABOUT: &str = "\
Watch a Git repository of NodeWright and DeploymentPolicy manifests and converge the cluster \
to its newest valid commit: materialize the CRs, run the node lifecycle (cordon, drain, stage \
Jobs, interrupts, reboots, uncordon), and write progress back as node annotations, CR status \
and commits on the status branch.

The cluster is the one --kubeconfig names, or the in-cluster configuration when running in a \
pod, or $KUBECONFIG. With none of these, an embedded simulated cluster is used (and said so), \
so `run` is safe to try on a laptop. A commit with any invalid manifest applies nothing; the \
last valid commit stays in force.";

/// Examples.
pub const EXAMPLES: &str = "\
Examples:
  # Try it: a local repository against the embedded simulator (16 nodes, 10x time)
  nodewright run --repo ./fleet --sim-nodes 16 --speed 10

  # Production: a remote, a cluster, status pushed back to the remote
  nodewright run --repo https://git.example.com/infra/fleet.git --branch main --path clusters/prod \\
      --kubeconfig ~/.kube/prod --git-credentials-dir /etc/nodewright/git

  # Only mirror CRs and status; an in-cluster upstream operator runs the lifecycle
  nodewright run --repo ./fleet --lifecycle upstream --kubeconfig ~/.kube/config";

/// How to reach a remote repository (shared by `run` and `status --repo`).
#[derive(Debug, Clone, clap::Args)]
pub struct GitAccess {
    /// Git credentials for fetch and the status push: a folder with `token` (and optional
    /// `username`), or `ssh-privatekey` (and optional `known_hosts`). Missing or empty =
    /// anonymous. Credentials are never sent over plain http://.
    #[arg(long, value_name = "DIR")]
    pub git_credentials_dir: Option<PathBuf>,
    /// Trust only the CA certificates in this PEM file for https remotes (fetch and push), for
    /// a Git server whose certificate comes from a private CA.
    #[arg(long, value_name = "FILE")]
    pub git_ca_file: Option<PathBuf>,
    /// Trust an ssh remote's host key the first time it is seen and record it in known_hosts
    /// (a changed key is still refused). Without it, the host key must already be in
    /// known_hosts.
    #[arg(long)]
    pub git_ssh_accept_new: bool,
    /// How long a fetch or a status push may wait for the remote. One that gets no answer in
    /// time has failed and is retried with backoff; meanwhile the rollout goes on with the
    /// desired state in force, so a remote that hangs never holds up the cluster.
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = super::parse_duration)]
    pub git_timeout: Duration,
    /// Where remotes are mirrored.
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
}

impl GitAccess {
    /// Where `repo` is: a local path read in place, or a remote (a URL, or a path that does
    /// not exist here) mirrored under the cache directory with these credentials and trust.
    pub fn location(&self, repo: &str) -> RepoLocation {
        let is_url = repo.contains("://") || (repo.contains('@') && repo.contains(':'));
        if !is_url && std::path::Path::new(repo).exists() {
            return RepoLocation::Local(PathBuf::from(repo));
        }
        let cache_root = self.cache_dir.clone().unwrap_or_else(|| {
            crate::cluster::kube::sim_kubeconfig_path()
                .parent()
                .map(|p| p.join("repos"))
                .unwrap_or_else(|| std::env::temp_dir().join("nodewright-repos"))
        });
        RepoLocation::Remote {
            spec: RemoteSpec {
                url: repo.to_owned(),
                credentials: credentials(
                    self.git_credentials_dir.as_ref(),
                    self.git_ssh_accept_new,
                ),
                depth: NonZeroU32::new(0),
                ca_file: self.git_ca_file.clone(),
                timeout: self.git_timeout,
            },
            cache_root,
        }
    }
}

/// Arguments of `nodewright run`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Repository: a local path, file://, https:// or ssh URL.
    #[arg(long)]
    pub repo: String,
    /// The cluster to converge (none: an embedded simulated cluster).
    #[command(flatten)]
    pub target: Target,
    /// Branch holding the desired state.
    #[arg(long, default_value = "main")]
    pub branch: String,
    /// Folder inside the repository holding the manifests (default: the whole repository).
    #[arg(long, default_value = "")]
    pub path: String,
    /// Branch the status documents are committed to.
    #[arg(long, default_value = DEFAULT_STATUS_BRANCH)]
    pub status_branch: String,
    /// Do not write status commits.
    #[arg(long)]
    pub no_status: bool,
    /// Who runs the lifecycle: this reconciler, or an in-cluster upstream operator.
    #[arg(long, value_enum, default_value_t = LifecycleMode::SelfManaged)]
    pub lifecycle: LifecycleMode,
    /// Operator settings: a YAML file of camelCase setting names, as in manifests/settings.yaml,
    /// which lists every setting at its default.
    #[arg(long, value_name = "FILE")]
    pub settings: Option<PathBuf>,
    /// How to reach a remote repository.
    #[command(flatten)]
    pub git: GitAccess,
    /// What reading each commit may cost.
    #[command(flatten)]
    pub budgets: crate::source::budget::BudgetArgs,
    /// How often remotes are fetched (jittered).
    #[arg(long, default_value = "30s", value_parser = super::parse_duration)]
    pub poll_interval: Duration,
    /// Receive GitHub/GitLab push webhooks on this address (POST /hooks/github,
    /// /hooks/gitlab): a verified push to --branch fetches at once. Needs a secret file below.
    #[arg(long, value_name = "ADDR")]
    pub webhook_addr: Option<std::net::SocketAddr>,
    /// GitHub webhook secret (HMAC-SHA256 key) file; enables /hooks/github. Read at start: a
    /// missing or empty file stops the start.
    #[arg(long, value_name = "FILE")]
    pub webhook_github_secret_file: Option<PathBuf>,
    /// GitLab webhook secret token file; enables /hooks/gitlab. Read at start.
    #[arg(long, value_name = "FILE")]
    pub webhook_gitlab_token_file: Option<PathBuf>,
    /// Refuse head commits not signed by one of these SSH public keys (one per line, as in
    /// authorized_keys).
    #[arg(long, value_name = "FILE")]
    pub allowed_ssh_signers: Option<PathBuf>,
    /// Refuse head commits not signed by one of these OpenPGP public keys (armored).
    #[arg(long, value_name = "FILE")]
    pub allowed_pgp_keys: Option<PathBuf>,
    /// Post a commit status per NodeWright on the applied commit (pending while rolling out,
    /// success when complete, failure when erroring). The token and repository come from the
    /// forge's CI environment or NODEWRIGHT_FORGE_TOKEN(_FILE)/_REPOSITORY/_URL.
    #[arg(long, value_name = "FORGE")]
    pub forge: Option<crate::forge::ForgeKind>,
    /// With --forge: when a batch of a gated compartment starts waiting for approval, push
    /// the approval commit (as `nodewright approve` makes it) to the branch
    /// nodewright/approve/<nodewright>/<compartment>-<batch> of the remote --repo and open one
    /// pull/merge request into --branch, titled `Approve <nodewright> <compartment> batch
    /// <N>`, with the batch's results; it is updated as results change and closed when the
    /// batch no longer waits. Merging it is the approval.
    #[arg(long, requires = "forge")]
    pub approval_prs: bool,
    /// Serve Prometheus metrics and health probes on this address (e.g. 0.0.0.0:8080).
    #[arg(long)]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Log as JSON lines.
    #[arg(long, value_parser = ["text", "json"], default_value = "text")]
    pub log_format: String,
    /// Embedded simulator: number of GPU nodes, `node-1 …` labelled
    /// nvidia.com/gpu.present=true as `sim serve` makes them (when no cluster is configured).
    #[arg(long, default_value_t = 8)]
    pub sim_nodes: usize,
    /// Embedded simulator: a fleet description (a scenario file's cluster: and packages:).
    #[arg(long, value_name = "FILE")]
    pub sim_fleet: Option<PathBuf>,
    /// Embedded simulator: virtual seconds per wall second.
    #[arg(long, default_value_t = 1.0)]
    pub speed: f64,
    /// Plain log lines instead of progress bars.
    #[arg(long)]
    pub no_progress: bool,
    /// Exit 0 once every NodeWright is complete and its status is committed (for CI and
    /// scripted rollouts); exit 1 if that has not happened after this much time of the
    /// cluster's clock.
    #[arg(long, value_name = "DURATION", value_parser = super::parse_duration)]
    pub until_converged: Option<Duration>,
}

fn signature_policy(
    args: &Args,
) -> Result<Option<crate::source::signature::SignaturePolicy>, String> {
    use crate::source::signature::SignaturePolicy;
    if args.allowed_ssh_signers.is_none() && args.allowed_pgp_keys.is_none() {
        return Ok(None);
    }
    let read = |p: &PathBuf| {
        std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
    };
    let ssh = match &args.allowed_ssh_signers {
        Some(p) => read(p)?,
        None => String::new(),
    };
    let mut policy = SignaturePolicy::from_openssh_keys(ssh.lines()).map_err(|e| e.to_string())?;
    if let Some(p) = &args.allowed_pgp_keys {
        policy = policy
            .with_openpgp_keys(&read(p)?)
            .map_err(|e| e.to_string())?;
    }
    Ok(Some(policy))
}

/// Where to receive webhooks and with which secrets, read now (an unreadable secret stops the
/// start), or none when no webhook flag is given.
fn webhook_config(
    args: &Args,
) -> Result<Option<(std::net::SocketAddr, webhook::WebhookConfig)>, String> {
    let github = args.webhook_github_secret_file.as_deref();
    let gitlab = args.webhook_gitlab_token_file.as_deref();
    let Some(addr) = args.webhook_addr else {
        let flag = match (github, gitlab) {
            (Some(_), _) => "--webhook-github-secret-file",
            (None, Some(_)) => "--webhook-gitlab-token-file",
            (None, None) => return Ok(None),
        };
        return Err(webhook::Error::NoAddress { flag }.to_string());
    };
    webhook::WebhookConfig::from_files(github, gitlab, &args.branch)
        .map(|config| Some((addr, config)))
        .map_err(|e| e.to_string())
}

fn load_settings(path: Option<&PathBuf>) -> Result<Settings, String> {
    let settings = match path {
        None => Settings::default(),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            serde_yaml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?
        }
    };
    settings.validate().map_err(|e| e.to_string())?;
    Ok(settings)
}

fn credentials(dir: Option<&PathBuf>, accept_new_host_keys: bool) -> Credentials {
    let Some(dir) = dir else {
        return Credentials::None;
    };
    let token = dir.join("token");
    let key = dir.join("ssh-privatekey");
    if token.is_file() {
        let username = std::fs::read_to_string(dir.join("username"))
            .ok()
            .map(|u| u.trim().to_string());
        Credentials::Token {
            username,
            token: SecretSource::File(token),
        }
    } else if key.is_file() {
        let known_hosts = Some(dir.join("known_hosts")).filter(|p| p.is_file());
        Credentials::SshKey {
            key_file: key,
            known_hosts,
            accept_new_host_keys,
        }
    } else {
        Credentials::None
    }
}

/// This host's name, for the leader-election identity.
fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "nodewright".to_string())
}

/// Whether a real cluster is configured (flag, in-cluster environment, or $KUBECONFIG).
fn cluster_configured(target: &Target) -> bool {
    target.kubeconfig.is_some()
        || target.sim
        || std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
        || std::env::var_os("KUBECONFIG").is_some()
}

fn init_logging(format: &str) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let ansi = super::colour_wanted(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let _ = if format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

/// Runs the reconciler.
pub fn run(args: Args) -> ExitCode {
    init_logging(&args.log_format);
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
    match runtime.block_on(serve(args)) {
        Ok(()) => ExitCode::from(exit::OK),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(exit::RUNTIME)
        }
    }
}

/// What the forge is told: each NodeWright's rollout on its commit, and the newest refused
/// commit.
#[derive(Clone, Debug, Default, PartialEq)]
struct ForgeFeedback {
    nodewrights: Vec<std::sync::Arc<nodewright_schema::NodeWright>>,
    rejected: Option<crate::writeback::source::Rejection>,
}

async fn serve(args: Args) -> Result<(), String> {
    let settings = load_settings(args.settings.as_ref())?;
    let location = args.git.location(&args.repo);
    let options = ReadOptions {
        signatures: signature_policy(&args)?,
        ..args.budgets.read_options(&args.path)
    };
    let until = args.until_converged;
    let mut source = GitSource::open(&location, &args.branch, &args.status_branch, options)
        .map_err(|e| e.to_string())?
        .with_cadence(FetchCadence::new(args.poll_interval, process_seed()));
    // Everything that asks for a fetch at once: a commit on the tracked branch of a local
    // repository, a verified push webhook.
    let (trigger_tx, triggers) = channel(16);
    let _ref_watcher = match &location {
        RepoLocation::Local(_) => Some(
            watch_refs(
                &source.git_dir(),
                &args.branch,
                Duration::from_millis(300),
                trigger_tx.clone(),
            )
            .map_err(|e| e.to_string())?,
        ),
        RepoLocation::Remote { .. } => None,
    };
    if let Some((addr, config)) = webhook_config(&args)? {
        let bound = webhook::spawn(addr, config, trigger_tx.clone())
            .await
            .map_err(|e| e.to_string())?;
        tracing::info!(addr = %bound, branch = %args.branch, "receiving push webhooks on /hooks/github and /hooks/gitlab");
    }
    drop(trigger_tx);
    let mut writer = (!args.no_status).then(|| {
        StatusWriter::new(StatusTarget {
            repo: source.repo_path().to_path_buf(),
            branch: args.status_branch.clone(),
            remote: source.remote().cloned(),
            author: Author::default(),
            mirror: source.remote().map(|_| source.repo().clone()),
            interval: Duration::from_secs(30),
        })
    });
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutting down after the current pass");
        let _ = stop_tx.send(true);
    });
    // The engine already emits the `skyhook_*` twins when `publishLegacyMetrics` is set.
    let metrics = std::sync::Arc::new(Metrics::new(false));
    if let Some(addr) = args.metrics_addr {
        let server = MetricsServer::bind(addr, metrics.clone())
            .await
            .map_err(|e| e.to_string())?;
        tracing::info!(addr = %server.local_addr(), "serving /metrics, /healthz and /readyz");
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            let _ = server
                .serve(async move {
                    let _ = stop.changed().await;
                })
                .await;
        });
    }
    let (statuses_tx, statuses_rx) = tokio::sync::watch::channel(ForgeFeedback::default());
    let mut reporter_task = None;
    if let Some(kind) = args.forge {
        let config = crate::forge::ForgeConfig::from_env(kind)
            .map_err(|e| format!("--forge {kind}: {e}"))?;
        let client =
            crate::forge::ForgeClient::new(config).map_err(|e| format!("--forge {kind}: {e}"))?;
        let mut approval_requests = if args.approval_prs {
            let remote = source.remote().cloned().ok_or_else(|| {
                format!(
                    "--approval-prs: --repo {} is a local path; approval branches are pushed to a remote the forge serves, so give --repo as its URL (https, ssh or file://)",
                    args.repo
                )
            })?;
            Some(ApprovalRequests::new(
                client.clone(),
                BranchTarget {
                    repo: source.repo().clone(),
                    tracked: args.branch.clone(),
                    options: ReadOptions {
                        root: args.path.clone(),
                        ..ReadOptions::default()
                    },
                    remote,
                    author: Author::default(),
                },
            ))
        } else {
            None
        };
        let mut reporter = crate::forge::StatusReporter::new(client);
        let mut rx = statuses_rx;
        reporter_task = Some(tokio::spawn(async move {
            // After a failed post: when to try again although nothing changed.
            let mut retry: Option<Duration> = None;
            loop {
                // When the loop ends the sender is dropped: post the last state, then stop.
                let closed = match retry {
                    Some(after) => tokio::select! {
                        changed = rx.changed() => changed.is_err(),
                        () = tokio::time::sleep(after) => false,
                    },
                    None => rx.changed().await.is_err(),
                };
                let feedback = rx.borrow_and_update().clone();
                let next_retry = retry.map_or(crate::forge::RETRY_FIRST, |d| {
                    (d * 2).min(crate::forge::RETRY_MAX)
                });
                let mut failed = false;
                if let Some(rejection) = &feedback.rejected
                    && let Err(e) = reporter.report_rejection(rejection).await
                {
                    failed = true;
                    tracing::warn!(
                        "posting the failed status of commit {} failed ({e}); retrying in {}s",
                        rejection.commit,
                        next_retry.as_secs()
                    );
                }
                let outcome = reporter.report(&feedback.nodewrights).await;
                for e in &outcome.errors {
                    failed = true;
                    tracing::warn!(
                        "posting a commit status failed ({e}); retrying in {}s",
                        next_retry.as_secs()
                    );
                }
                retry = failed.then_some(next_retry);
                if let Some(requests) = approval_requests.as_mut() {
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
                    let synced = requests.sync(&feedback.nodewrights, now).await;
                    for number in &synced.opened {
                        tracing::info!(number, "opened an approval request");
                    }
                    for e in &synced.errors {
                        tracing::warn!(error = %e, "approval request not in step; retrying on the next change");
                    }
                }
                if closed {
                    break;
                }
                // At most one round of status posts every few seconds.
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        }));
    }
    let mut progress = Progress::new(!args.no_progress);
    // Shared with each iteration's deferred metrics gauges.
    let metrics_settings = std::sync::Arc::new(settings.clone());
    let mut started_at = None;
    let converged = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let converged_flag = converged.clone();
    let lifecycle = args.lifecycle;
    let mut warned_foreign: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    let mut leading_said = true;
    // The commit this run put in force, once it has.
    let mut in_force: Option<String> = None;
    let fleet_nodes = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let fleet_nodes_seen = fleet_nodes.clone();
    let pass_times = std::sync::Arc::new(std::sync::Mutex::new(PassTimes::default()));
    let pass_times_seen = pass_times.clone();
    let api_metrics = metrics.clone();
    // The newest commit refused, for its failed status on the forge.
    let mut rejected: Option<crate::writeback::source::Rejection> = None;
    let observe = move |it: &crate::controller::daemon::Iteration<'_>| {
        fleet_nodes_seen.store(
            it.snapshot.nodes.len(),
            std::sync::atomic::Ordering::Relaxed,
        );
        if let Some(pass) = it.pass {
            pass_times_seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .observe(pass);
        }
        if lifecycle == LifecycleMode::SelfManaged {
            for (nw, manager) in foreign_status_writers(&it.snapshot.nodewrights) {
                if warned_foreign.insert(format!("{nw}/{manager}")) {
                    let message = format!(
                        "WARNING: NodeWright {nw} has status written by another controller ({manager}). Two controllers running the lifecycle of the same nodes is unsafe: stop the in-cluster operator, or run with --lifecycle upstream."
                    );
                    tracing::warn!("{message}");
                    progress.println(&message);
                }
            }
        } else {
            for nw in windowed_nodewrights(&it.snapshot.nodewrights, &it.snapshot.policies) {
                if warned_foreign.insert(format!("windows/{nw}")) {
                    let message = format!(
                        "WARNING: NodeWright {nw} declares maintenance windows, but with --lifecycle upstream the in-cluster operator runs its rollout and does not know them: nodes are taken out of service whenever their batch comes up."
                    );
                    tracing::warn!("{message}");
                    progress.println(&message);
                }
            }
            for nw in gated_nodewrights(&it.snapshot.nodewrights) {
                if warned_foreign.insert(format!("approvals/{nw}")) {
                    let message = format!(
                        "WARNING: NodeWright {nw} declares an approval gate ({}), but with --lifecycle upstream the in-cluster operator runs its rollout and does not know it: every batch follows the last without waiting for an approval.",
                        nodewright_schema::keys::APPROVAL_REQUIRED
                    );
                    tracing::warn!("{message}");
                    progress.println(&message);
                }
            }
        }
        match it.change {
            // The report itself is logged once by the loop (controller::daemon).
            SourceChange::Rejected { rejection, .. } => {
                metrics.commit_seen();
                metrics.commit_rejected();
                rejected = Some(rejection.clone());
            }
            SourceChange::Applied { commit, .. } => {
                metrics.commit_seen();
                metrics.commit_applied(commit);
                in_force = Some(commit.clone());
            }
            SourceChange::AppliedAncestor {
                commit,
                report,
                rejection,
                ..
            } => {
                metrics.commit_seen();
                metrics.commit_rejected();
                rejected = Some(rejection.clone());
                metrics.commit_applied(commit);
                progress.println(report);
                in_force = Some(commit.clone());
            }
            SourceChange::Unchanged { .. } => metrics.commit_seen(),
            SourceChange::None => {}
        }
        if let Some(pass) = it.pass {
            metrics.observe_pass(pass.duration);
            for (kind, _) in &pass.writes {
                metrics.api_write_kind(kind);
            }
        }
        let (snapshot, settings) = (it.snapshot.clone(), metrics_settings.clone());
        metrics.set_lifecycle_source(move || lifecycle_samples(&snapshot, &settings));
        metrics.set_ready(true);
        if it.leading != leading_said {
            leading_said = it.leading;
            progress.println(if it.leading {
                "leading: this replica reconciles and writes status"
            } else {
                "standby: another replica holds the leader Lease; watching, writing nothing"
            });
        }
        // Only the leader speaks for the fleet on the forge.
        statuses_tx.send_if_modified(|current| {
            let changed = it.leading
                && (!same_nodewrights(&current.nodewrights, &it.snapshot.nodewrights)
                    || current.rejected != rejected);
            if changed {
                current.nodewrights.clone_from(&it.snapshot.nodewrights);
                current.rejected.clone_from(&rejected);
            }
            changed
        });
        progress.update(
            &it.snapshot.nodewrights,
            &it.snapshot.now.strftime("%H:%M:%S").to_string(),
        );
        if let Some(limit) = until {
            let start = *started_at.get_or_insert(it.snapshot.now);
            // Converged means this run's commit is what the cluster holds (the CRs may lag the
            // apply by a watch event) and every NodeWright is complete at that generation.
            let done = !it.snapshot.nodewrights.is_empty()
                && in_force.as_deref().is_some_and(|commit| {
                    it.snapshot.nodewrights.iter().all(|nw| {
                        nw.is_converged()
                            && nw
                                .metadata
                                .annotations
                                .as_ref()
                                .and_then(|a| a.get(nodewright_schema::keys::SOURCE_COMMIT))
                                .is_some_and(|c| c == commit)
                    })
                })
                && !matches!(it.status, Some(StatusWrite::Deferred));
            if done {
                converged_flag.store(true, std::sync::atomic::Ordering::SeqCst);
                progress
                    .println("converged: every NodeWright is complete at its current generation");
                return ControlFlow::Break(());
            }
            if crate::sim::util::since(start, it.snapshot.now) >= limit {
                progress.println("gave up: not converged within --until-converged");
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    };
    if cluster_configured(&args.target) {
        let budget = args.target.api_budget(Some(&settings))?;
        api_metrics.attach_api(budget.stats());
        // The daemon never lists logs: ended pods keep no container names.
        let cluster = super::verbs::connect(&args.target, &budget, false).await?;
        // With leader election on, nothing is written until this replica holds the Lease,
        // and writes stop the moment it is lost (cluster::lease).
        let leader = if settings.leader_election {
            let (client, _) =
                crate::cluster::kube::client(args.target.kubeconfig_path().as_deref(), &budget)
                    .await
                    .map_err(|e| e.to_string())?;
            let identity = std::env::var("POD_NAME")
                .unwrap_or_else(|_| format!("{}-{}", hostname(), std::process::id()));
            let config = crate::cluster::lease::LeaseConfig::new(
                &settings.namespace,
                crate::cluster::lease::LEASE_NAME,
                &identity,
            );
            eprintln!(
                "leader election: waiting for the Lease {}/{} as {identity}",
                settings.namespace, config.name
            );
            Some(
                crate::cluster::lease::LeaderElector::new(client, config)
                    .spawn(cluster.writes_allowed()),
            )
        } else {
            None
        };
        let mut pacer = WallClock {
            triggers: Some(triggers),
            shutdown: stop_rx,
        };
        run_with(
            cluster,
            settings,
            &mut source,
            writer.as_mut(),
            args.lifecycle,
            &mut pacer,
            observe,
        )
        .await;
        if let Some(leader) = leader {
            leader.step_down().await;
        }
        if until.is_some() {
            eprintln!(
                "{}",
                api_summary(
                    &budget.stats().snapshot(),
                    fleet_nodes.load(std::sync::atomic::Ordering::Relaxed),
                    &pass_times
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                )
            );
        }
    } else {
        let fleet = match &args.sim_fleet {
            Some(path) => Fleet::parse(
                &std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))?,
            )
            .map_err(|e| format!("{}: {e}", path.display()))?,
            None => Fleet::gpu_nodes(args.sim_nodes),
        };
        let world = fleet.build(&settings.namespace, process_seed())?;
        eprintln!(
            "No cluster configured (no --kubeconfig, no in-cluster environment, no $KUBECONFIG): using an embedded simulated cluster of {} nodes at {}x time.",
            world.nodes().len(),
            args.speed
        );
        let mut pacer = SimClock {
            speed: args.speed,
            triggers: Some(triggers),
            shutdown: stop_rx,
        };
        run_with(
            SimAdapter::new(world),
            settings,
            &mut source,
            writer.as_mut(),
            args.lifecycle,
            &mut pacer,
            observe,
        )
        .await;
    }
    if let Some(task) = reporter_task {
        let _ = tokio::time::timeout(Duration::from_secs(30), task).await;
    }
    if until.is_some() && !converged.load(std::sync::atomic::Ordering::SeqCst) {
        return Err("the rollout did not converge".into());
    }
    Ok(())
}

/// The passes of a run and what the engine's planning cost in them.
#[derive(Debug, Default)]
struct PassTimes {
    passes: u64,
    total: Duration,
    planning: Duration,
    longest_planning: Duration,
}

impl PassTimes {
    fn observe(&mut self, pass: &crate::controller::PassReport) {
        self.passes += 1;
        self.total += pass.duration;
        self.planning += pass.planning;
        self.longest_planning = self.longest_planning.max(pass.planning);
    }

    fn mean_ms(&self, of: Duration) -> f64 {
        of.as_secs_f64() * 1000.0 / self.passes.max(1) as f64
    }
}

/// What a run cost the API server, for `--until-converged`: requests per node, writes, the
/// most frequent requests and the time spent under the rate limit; then the reconciler's own
/// cost: CPU, memory and its passes.
fn api_summary(
    stats: &crate::cluster::api_budget::StatsSnapshot,
    nodes: usize,
    passes: &PassTimes,
) -> String {
    let per_node = |n: u64| {
        if nodes == 0 {
            "-".to_string()
        } else {
            format!("{:.1}", n as f64 / nodes as f64)
        }
    };
    let mut out = format!(
        "API requests: {} ({} per node over {nodes} nodes), {} writes ({} per node), {} conflicts retried; waited {:.1}s for the rate limit",
        stats.total(),
        per_node(stats.total()),
        stats.writes(),
        per_node(stats.writes()),
        stats.with_code(409),
        stats.throttled.as_secs_f64()
    );
    if let Some((cpu, peak)) = process_usage() {
        out.push_str(&format!(
            "\nreconciler: {cpu:.1}s of CPU, peak resident memory {} MiB",
            peak / 1024
        ));
    }
    out.push_str(&format!(
        "\npasses: {}, {:.1} ms each on average (the engine's planning {:.1} ms, longest {:.1} ms)",
        passes.passes,
        passes.mean_ms(passes.total),
        passes.mean_ms(passes.planning),
        passes.longest_planning.as_secs_f64() * 1000.0
    ));
    for (what, n, failed) in stats.by_verb_and_resource().iter().take(12) {
        out.push_str(&format!("\n  {n:>8}  {what} ({} per node)", per_node(*n)));
        for (code, count) in failed {
            out.push_str(&format!(" {count}×{code}"));
        }
    }
    out
}

/// This process's CPU seconds (user and system) and peak resident set in KiB, where the
/// kernel tells (Linux `/proc`; clock ticks at the usual 100 per second).
fn process_usage() -> Option<(f64, u64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let peak = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some((ticks as f64 / 100.0, peak))
}

/// Whether two lists hold equal NodeWrights; one the cluster did not change since is the same
/// allocation, and a status of thousands of nodes is not compared field by field per pass.
fn same_nodewrights(
    a: &[std::sync::Arc<nodewright_schema::NodeWright>],
    b: &[std::sync::Arc<nodewright_schema::NodeWright>],
) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| std::sync::Arc::ptr_eq(x, y) || x == y)
}

/// NodeWrights whose status subresource was written by a field manager other than ours.
fn foreign_status_writers(
    nodewrights: &[std::sync::Arc<nodewright_schema::NodeWright>],
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for nw in nodewrights {
        for entry in nw.metadata.managed_fields.iter().flatten() {
            let manager = entry.manager.clone().unwrap_or_default();
            if entry.subresource.as_deref() == Some("status")
                && manager != crate::cluster::kube::FIELD_MANAGER
            {
                out.push((nw.name().to_string(), manager));
            }
        }
    }
    out
}

/// The §13.3 gauges of the engine, in the metrics module's sample type.
fn lifecycle_samples(
    snapshot: &crate::snapshot::Snapshot,
    settings: &Settings,
) -> Vec<crate::metrics::Sample> {
    crate::engine::metrics::samples(snapshot, settings)
        .into_iter()
        .map(|s| crate::metrics::Sample {
            name: s.name,
            labels: s.labels.into_iter().collect(),
            value: s.value,
        })
        .collect()
}

async fn run_with<C: Cluster, P: Pacer<C>>(
    cluster: C,
    settings: Settings,
    source: &mut GitSource,
    writer: Option<&mut StatusWriter>,
    lifecycle: LifecycleMode,
    pacer: &mut P,
    observe: impl FnMut(&crate::controller::daemon::Iteration<'_>) -> ControlFlow<()>,
) {
    let mut controller = Controller::new(cluster, crate::engine::reconcile_cached, settings);
    run_loop(&mut controller, source, writer, lifecycle, pacer, observe).await;
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// NodeWrights whose maintenance windows (their own or their DeploymentPolicy's) only this
/// reconciler honours.
fn windowed_nodewrights<'a>(
    nodewrights: &'a [std::sync::Arc<nodewright_schema::NodeWright>],
    policies: &[nodewright_schema::DeploymentPolicy],
) -> Vec<&'a str> {
    nodewrights
        .iter()
        .filter(|nw| {
            let policy = nw.spec.deployment_policy.as_ref().and_then(|p| {
                policies
                    .iter()
                    .find(|d| d.metadata.name.as_ref() == Some(p))
            });
            nodewright_schema::maintenance::declared(
                nw.metadata.annotations.as_ref(),
                policy.and_then(|d| d.metadata.annotations.as_ref()),
            )
            .is_some()
        })
        .filter_map(|nw| nw.metadata.name.as_deref())
        .collect()
}

/// NodeWrights with an approval gate, which only this reconciler honours.
fn gated_nodewrights(nodewrights: &[std::sync::Arc<nodewright_schema::NodeWright>]) -> Vec<&str> {
    nodewrights
        .iter()
        .filter(|nw| {
            nodewright_schema::approvals::declared(nw.metadata.annotations.as_ref()).is_some()
        })
        .filter_map(|nw| nw.metadata.name.as_deref())
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn nodewrights_with_an_approval_gate_are_named_for_the_upstream_warning() {
        let nw = |name: &str, gated: bool| {
            let mut nw = nodewright_schema::NodeWright::new(name, Default::default());
            if gated {
                nw.metadata.annotations = Some(
                    [(
                        nodewright_schema::keys::APPROVAL_REQUIRED.to_string(),
                        "production".to_string(),
                    )]
                    .into(),
                );
            }
            nw
        };
        assert_eq!(
            super::gated_nodewrights(&[
                std::sync::Arc::new(nw("gated", true)),
                std::sync::Arc::new(nw("free", false))
            ]),
            ["gated"]
        );
    }

    #[test]
    fn nodewrights_with_windows_of_their_own_or_of_their_policy_are_named_for_the_upstream_warning()
    {
        let nw = |name: &str, policy: Option<&str>, windows: bool| {
            let mut nw = nodewright_schema::NodeWright::new(name, Default::default());
            nw.spec.deployment_policy = policy.map(str::to_string);
            if windows {
                nw.metadata.annotations = Some(
                    [(
                        nodewright_schema::keys::MAINTENANCE_WINDOWS.to_string(),
                        "* 01:00-02:00".to_string(),
                    )]
                    .into(),
                );
            }
            nw
        };
        let mut policy = nodewright_schema::DeploymentPolicy::new("night", Default::default());
        policy.metadata.annotations = Some(
            [(
                nodewright_schema::keys::MAINTENANCE_WINDOWS.to_string(),
                "Sat 02:00-06:00".to_string(),
            )]
            .into(),
        );
        let nodewrights = [
            nw("own", None, true),
            nw("inherited", Some("night"), false),
            nw("none", None, false),
        ]
        .map(std::sync::Arc::new);
        assert_eq!(
            super::windowed_nodewrights(&nodewrights, &[policy]),
            ["own", "inherited"]
        );
    }

    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
    use nodewright_schema::{NodeWright, NodeWrightSpec};

    #[test]
    fn a_status_written_by_another_manager_is_reported() {
        let mut nw = NodeWright::new("gpu", NodeWrightSpec::default());
        let entry = |manager: &str, sub: Option<&str>| ManagedFieldsEntry {
            manager: Some(manager.into()),
            subresource: sub.map(str::to_string),
            ..ManagedFieldsEntry::default()
        };
        nw.metadata.managed_fields = Some(vec![
            entry(crate::cluster::kube::FIELD_MANAGER, Some("status")),
            entry("kubectl", None),
        ]);
        assert!(foreign_status_writers(&[std::sync::Arc::new(nw.clone())]).is_empty());
        nw.metadata
            .managed_fields
            .as_mut()
            .unwrap()
            .push(entry("manager", Some("status")));
        assert_eq!(
            foreign_status_writers(&[std::sync::Arc::new(nw)]),
            vec![("gpu".to_string(), "manager".to_string())]
        );
    }
}
