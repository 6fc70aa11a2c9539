//! `nodewright status`: a readable table of every NodeWright — its nodes by status, current
//! batches, blocked reasons — from the cluster or from a repository's status branch.

use std::process::ExitCode;
use std::time::Duration;

use super::exit;
use super::verbs::Target;
use crate::cluster::Cluster;
use crate::controller::source::RepoLocation;
use crate::source::repo::GitRepo;
use crate::verbs::OutputFormat;
use crate::verbs::format_table;
use crate::writeback::git::{DEFAULT_STATUS_BRANCH, read_status_documents};
use crate::writeback::render::{DEFAULT_NODE_DETAIL_LIMIT, StatusDocument, document};

/// Long help.
pub const LONG_ABOUT: &str = "\
Show every NodeWright: its Status, nodes complete out of selected, nodes in progress, erroring, \
blocked or waiting, the current batch of each compartment, and why it is blocked (the Blocked, \
DrainBlocked, TaintNotTolerable and NodesIgnored conditions). With --repo the table is read \
from the repository's status branch (what the reconciler last committed); otherwise from the \
cluster (--kubeconfig, in-cluster, $KUBECONFIG, or --sim for `nodewright sim serve`).";

/// Examples.
pub const EXAMPLES: &str = "\
Examples:
  nodewright status --repo ./fleet
  nodewright status --repo https://git.example.com/infra/fleet.git --git-credentials-dir ./creds
  nodewright status --kubeconfig ~/.kube/prod --watch
  nodewright status --sim -o json";

/// Arguments of `nodewright status`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Read the status branch of this repository instead of a cluster: a local path (its
    /// branch, or the remote-tracking copy `origin/<branch>` of a clone) or a remote URL
    /// (mirrored first, with the --git-* flags).
    #[arg(long, value_name = "R")]
    pub repo: Option<String>,
    /// How to reach a remote --repo.
    #[command(flatten)]
    pub git: super::run::GitAccess,
    /// The status branch (with --repo).
    #[arg(long, default_value = DEFAULT_STATUS_BRANCH)]
    pub status_branch: String,
    /// Refresh every 2 seconds (cluster only).
    #[arg(long, conflicts_with = "repo")]
    pub watch: bool,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
    /// The cluster to read (without --repo).
    #[command(flatten)]
    pub target: Target,
}

fn table(docs: &[StatusDocument]) -> String {
    let mut rows = vec![
        [
            "NODEWRIGHT",
            "STATUS",
            "COMPLETE",
            "IN-PROGRESS",
            "ERRORING",
            "BLOCKED",
            "WAITING",
            "BATCHES",
            "REASONS",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for d in docs {
        let count = |s: &str| d.node_counts.get(s).copied().unwrap_or(0).to_string();
        let batches: Vec<String> = d
            .compartments
            .iter()
            .filter_map(|(name, c)| {
                c.current_batch.map(|b| {
                    format!(
                        "{name}:{b}{}",
                        if c.stopped == Some(true) {
                            "(stopped)"
                        } else {
                            ""
                        }
                    )
                })
            })
            .collect();
        let reasons: Vec<String> = [
            "Blocked",
            "DrainBlocked",
            "TaintNotTolerable",
            "NodesIgnored",
            "DeploymentPolicyNotFound",
        ]
        .iter()
        .filter_map(|t| {
            d.conditions
                .get(*t)
                .filter(|c| c.status == "True")
                .map(|c| format!("{t}: {}", c.message))
        })
        .collect();
        let mut reasons = reasons;
        if let Some(waiting) = window_wait(d) {
            reasons.insert(0, waiting);
        }
        // Each waiting batch, with the value that approves it.
        reasons.splice(0..0, d.pending_approvals.iter().cloned());
        rows.push(vec![
            d.nodewright.clone(),
            d.status.clone(),
            d.complete_nodes.clone(),
            count("in_progress"),
            count("erroring"),
            count("blocked"),
            count("waiting"),
            if batches.is_empty() {
                "-".into()
            } else {
                batches.join(" ")
            },
            if reasons.is_empty() {
                "-".into()
            } else {
                reasons.join("; ")
            },
        ]);
    }
    format_table(&rows)
}

/// "waiting for maintenance window (opens …)" while an unfinished rollout waits for one.
fn window_wait(d: &StatusDocument) -> Option<String> {
    use nodewright_schema::keys::{condition, reason};
    let c = d
        .conditions
        .get(condition::OUTSIDE_MAINTENANCE_WINDOW)
        .filter(|c| c.status == "True" && d.status != "complete")?;
    Some(if c.reason == reason::WINDOW_CLOSED {
        let opens = c.message.rsplit("opens at ").next().unwrap_or(&c.message);
        format!("waiting for maintenance window (opens {opens})")
    } else {
        c.message.clone()
    })
}

fn print(docs: &[StatusDocument], output: OutputFormat) {
    match output {
        crate::verbs::OutputFormat::Json => {
            println!("{}", serde_json::to_string_pretty(docs).unwrap_or_default())
        }
        crate::verbs::OutputFormat::Yaml => {
            print!("{}", serde_yaml::to_string(docs).unwrap_or_default())
        }
        _ => print!("{}", table(docs)),
    }
}

/// The table from a repository's status branch: a local repository (its own branch, or the
/// remote-tracking copy a clone has), or a remote URL mirrored first.
fn from_repository(repo: &str, args: &Args) -> ExitCode {
    let path = match args.git.location(repo) {
        RepoLocation::Local(path) => path,
        RepoLocation::Remote { spec, cache_root } => {
            match GitRepo::sync_remote(&spec, &cache_root) {
                Ok((mirror, _)) => mirror.path().to_path_buf(),
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(exit::RUNTIME);
                }
            }
        }
    };
    let read = match read_status_documents(&path, &args.status_branch) {
        Ok(Some(read)) => read,
        Ok(None) => {
            eprintln!(
                "error: {repo} has no branch {branch} (looked for refs/heads/{branch} and refs/remotes/<remote>/{branch}; has `nodewright run` written status yet, and was it fetched?)",
                branch = args.status_branch
            );
            return ExitCode::from(exit::RUNTIME);
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(exit::RUNTIME);
        }
    };
    let docs: Vec<StatusDocument> = read
        .files
        .iter()
        .filter_map(
            |(name, text)| match serde_yaml::from_str::<StatusDocument>(text) {
                Ok(doc) => Some(doc),
                Err(e) => {
                    eprintln!(
                        "warning: {}:status/{name} does not parse: {e}",
                        read.reference
                    );
                    None
                }
            },
        )
        .collect();
    if docs.is_empty() {
        eprintln!(
            "error: no status documents on {} of {repo} (has `nodewright run` written status yet?)",
            read.reference
        );
        return ExitCode::from(exit::RUNTIME);
    }
    print(&docs, args.output);
    if let Some(source) = read
        .source
        .as_deref()
        .and_then(|text| serde_yaml::from_str::<SourceSummary>(text).ok())
    {
        eprintln!("{}", source.line(&read.reference));
    }
    ExitCode::from(exit::OK)
}

/// What `status/_source.yaml` says, as much as the table's footer needs.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct SourceSummary {
    applied_commit: Option<String>,
    rejected: Option<RejectedSummary>,
}

#[derive(serde::Deserialize)]
struct RejectedSummary {
    commit: String,
    #[serde(default)]
    violations: Vec<serde_yaml::Value>,
}

impl SourceSummary {
    fn line(&self, reference: &str) -> String {
        let applied = match &self.applied_commit {
            Some(commit) => format!("commit {commit} in force"),
            None => "no valid commit in force".to_owned(),
        };
        match &self.rejected {
            Some(r) => format!(
                "{reference}: {applied}; commit {} rejected ({} violation{}, see status/_source.yaml)",
                r.commit,
                r.violations.len(),
                if r.violations.len() == 1 { "" } else { "s" }
            ),
            None => format!("{reference}: {applied}"),
        }
    }
}

/// Runs the command.
pub fn run(args: Args) -> ExitCode {
    if let Some(repo) = &args.repo {
        return from_repository(repo, &args);
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
    runtime.block_on(async {
        let cluster = match async {
            super::verbs::connect(&args.target, &args.target.api_budget(None)?, true).await
        }
        .await
        {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(exit::RUNTIME);
            }
        };
        loop {
            match cluster.snapshot().await {
                Ok(snapshot) => {
                    let mut docs: Vec<StatusDocument> = snapshot
                        .nodewrights
                        .iter()
                        .map(|nw| document(nw, DEFAULT_NODE_DETAIL_LIMIT))
                        .collect();
                    docs.sort_by(|a, b| a.nodewright.cmp(&b.nodewright));
                    // Clear the screen between refreshes on a terminal; a file or pipe gets
                    // the tables one after the other, without control codes.
                    if args.watch {
                        if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
                            print!("\x1b[2J\x1b[H");
                        } else {
                            println!();
                        }
                    }
                    print(&docs, args.output);
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(exit::RUNTIME);
                }
            }
            if !args.watch {
                return ExitCode::from(exit::OK);
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    })
}

#[cfg(test)]
mod window_tests {
    use super::*;
    use crate::writeback::render::ConditionSummary;

    #[test]
    fn an_unfinished_rollout_outside_its_windows_says_when_the_next_opens() {
        let mut doc = StatusDocument {
            nodewright: "gpu".into(),
            status: "waiting".into(),
            ..StatusDocument::default()
        };
        doc.conditions.insert(
            "OutsideMaintenanceWindow".into(),
            ConditionSummary {
                status: "True".into(),
                reason: "WindowClosed".into(),
                message: "no maintenance window is open; the next opens at 2026-01-02T01:00:00Z"
                    .into(),
            },
        );
        let text = table(std::slice::from_ref(&doc));
        assert!(
            text.contains("waiting for maintenance window (opens 2026-01-02T01:00:00Z)"),
            "{text}"
        );
        doc.status = "complete".into();
        assert!(!table(&[doc]).contains("maintenance window"));
    }

    #[test]
    fn a_batch_waiting_for_approval_says_how_to_approve_it() {
        let doc = StatusDocument {
            nodewright: "driver".into(),
            status: "in_progress".into(),
            pending_approvals: vec!["compartment production: batch 3 waits for approval (4 nodes complete, 0 failed); approve with gitops.nodewright.nvidia.com/approved-batches: production=3".into()],
            ..StatusDocument::default()
        };
        let text = table(&[doc]);
        assert!(
            text.contains("batch 3 waits for approval")
                && text.contains("approved-batches: production=3"),
            "{text}"
        );
    }
}
