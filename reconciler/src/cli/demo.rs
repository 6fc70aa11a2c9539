//! `nodewright demo`: the whole product on a laptop in under two minutes.
//!
//! Makes a Git repository from the example fleet, starts an embedded simulated fleet (24 GPU
//! nodes in two pools, training pods, a PDB), runs the reconciler in accelerated virtual time
//! with live progress, pushes a follow-up commit (a version bump) half-way so an upgrade rolls,
//! and ends with the status branch's log and the repository's path.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use super::exit;
use super::fleet::{DEMO_FLEET, Fleet};
use super::progress::Progress;
use crate::cluster::sim::SimAdapter;
use crate::controller::Controller;
use crate::controller::daemon::{LifecycleMode, SimClock, run_loop};
use crate::controller::source::{GitSource, RepoLocation};
use crate::controller::status::{StatusTarget, StatusWriter};
use crate::settings::Settings;
use crate::source::desired::ReadOptions;
use crate::writeback::git::{Author, DEFAULT_STATUS_BRANCH, commit_files, log_oneline};

/// Long help.
pub const LONG_ABOUT: &str = "\
Run the whole product against an embedded simulated fleet, in accelerated time.

The demo creates a Git repository from the example fleet (examples/fleet: a GPU tuning \
NodeWright, a driver NodeWright with a reboot, a DeploymentPolicy with canary and production \
compartments), starts a simulated cluster of 24 GPU nodes with training pods and a PDB, and \
runs the reconciler: cordon, drain, stage Jobs, reboots, uncordon — the full lifecycle. Half-way \
it commits a version bump of the tuning package, so you see an upgrade roll too. Progress is \
written to the status branch (nodewright/status) as commits; the demo ends by printing that \
branch's log and the repository's path so you can explore it with git.";

/// Examples.
pub const EXAMPLES: &str = "\
Examples:
  nodewright demo
  nodewright demo --speed 200 --no-progress
  nodewright demo --keep-repo /tmp/fleet-demo";

/// Arguments of `nodewright demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Virtual seconds per wall second.
    #[arg(long, default_value_t = 90.0)]
    pub speed: f64,
    /// Plain progress lines instead of bars (also when stderr is not a terminal).
    #[arg(long)]
    pub no_progress: bool,
    /// Create the demo repository here instead of a fresh temporary directory.
    #[arg(long, value_name = "DIR")]
    pub keep_repo: Option<PathBuf>,
    /// Give up after this much virtual time.
    #[arg(long, default_value = "4h", value_parser = super::parse_duration)]
    pub max_virtual_time: Duration,
}

/// The example fleet, compiled in so the demo runs from any directory.
const FLEET_FILES: [(&str, &str); 4] = [
    (
        "gpu-tuning.yaml",
        include_str!("../../../examples/fleet/gpu-tuning.yaml"),
    ),
    (
        "gpu-driver.yaml",
        include_str!("../../../examples/fleet/gpu-driver.yaml"),
    ),
    (
        "policies/gpu-rollout.yaml",
        include_str!("../../../examples/fleet/policies/gpu-rollout.yaml"),
    ),
    (
        "README.md",
        include_str!("../../../examples/fleet/README.md"),
    ),
];

/// The follow-up commit: the tuning package's version bump.
const BUMP_FROM: &str = "version: 1.4.0";
const BUMP_TO: &str = "version: 1.5.0";

fn demo_dir(args: &Args) -> PathBuf {
    args.keep_repo.clone().unwrap_or_else(|| {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default();
        std::env::temp_dir().join(format!("nodewright-demo-{}-{stamp}", std::process::id()))
    })
}

/// Writes the fleet into a new repository (work tree and a commit on `main`, through gix).
fn make_repository(dir: &Path, epoch: i64) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let repo = gix::init(dir)
        .map_err(|e| format!("cannot create a repository in {}: {e}", dir.display()))?;
    // Point HEAD at main so `git log` in the demo repository shows the fleet branch.
    std::fs::write(repo.git_dir().join("HEAD"), "ref: refs/heads/main\n")
        .map_err(|e| e.to_string())?;
    for (path, content) in FLEET_FILES {
        let file = dir.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        }
        std::fs::write(&file, content).map_err(|e| e.to_string())?;
    }
    let files: Vec<(&str, &[u8])> = FLEET_FILES
        .iter()
        .map(|(p, c)| (*p, c.as_bytes()))
        .collect();
    commit_files(
        dir,
        "main",
        &files,
        &[],
        "Add the GPU fleet: tuning, driver, rollout policy",
        &demo_author(),
        epoch,
    )
    .map_err(|e| e.to_string())?;
    Ok(())
}

fn demo_author() -> Author {
    Author {
        name: "Demo User".into(),
        email: "demo@example.com".into(),
    }
}

fn bump_tuning(dir: &Path, epoch: i64) -> Result<(), String> {
    let content = FLEET_FILES[0].1.replacen(BUMP_FROM, BUMP_TO, 1);
    std::fs::write(dir.join(FLEET_FILES[0].0), &content).map_err(|e| e.to_string())?;
    commit_files(
        dir,
        "main",
        &[(FLEET_FILES[0].0, content.as_bytes())],
        &[],
        "tuning: 1.4.0 -> 1.5.0",
        &demo_author(),
        epoch,
    )
    .map_err(|e| e.to_string())?;
    Ok(())
}

fn all_complete(nodewrights: &[std::sync::Arc<nodewright_schema::NodeWright>]) -> bool {
    !nodewrights.is_empty() && nodewrights.iter().all(|nw| nw.is_converged())
}

/// Runs the demo.
pub fn run(args: Args) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(exit::RUNTIME);
        }
    };
    runtime.block_on(demo(args))
}

async fn demo(args: Args) -> ExitCode {
    let dir = demo_dir(&args);
    let settings = Settings::default();
    let fleet = match Fleet::parse(DEMO_FLEET) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: the built-in demo fleet does not parse: {e}");
            return ExitCode::from(exit::RUNTIME);
        }
    };
    let world = match fleet.build(&settings.namespace, 2026) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("error: cannot build the demo fleet: {e}");
            return ExitCode::from(exit::RUNTIME);
        }
    };
    let start = world.now();
    if let Err(e) = make_repository(&dir, start.as_second()) {
        eprintln!("error: {e}");
        return ExitCode::from(exit::RUNTIME);
    }
    eprintln!("nodewright demo");
    eprintln!(
        "  repository:  {} (branch main; status commits on {DEFAULT_STATUS_BRANCH})",
        dir.display()
    );
    eprintln!(
        "  cluster:     embedded simulator, 24 GPU nodes (4 canary, 20 production), {}× virtual time",
        args.speed
    );
    eprintln!(
        "  watch:       cordon → drain → apply → config → reboot → post-interrupt → uncordon, batch by batch\n"
    );

    let mut source = match GitSource::open(
        &RepoLocation::Local(dir.clone()),
        "main",
        DEFAULT_STATUS_BRANCH,
        ReadOptions::default(),
    ) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(exit::RUNTIME);
        }
    };
    let mut writer = StatusWriter::new(StatusTarget {
        repo: dir.clone(),
        branch: DEFAULT_STATUS_BRANCH.into(),
        remote: None,
        author: Author::default(),
        mirror: None,
        interval: Duration::from_secs(30),
    });
    let mut controller = Controller::new(
        SimAdapter::new(world),
        crate::engine::reconcile_cached,
        settings,
    );
    let (_stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut clock = SimClock {
        speed: args.speed,
        triggers: None,
        shutdown: stop_rx,
    };
    let mut progress = Progress::new(!args.no_progress);
    let mut bumped = false;
    let mut finished = false;
    let wall = std::time::Instant::now();
    let max_virtual = args.max_virtual_time;
    run_loop(&mut controller, &mut source, Some(&mut writer), LifecycleMode::SelfManaged, &mut clock, |it| {
        let elapsed = crate::sim::util::since(start, it.snapshot.now);
        let clock_text = format!("t+{}", nodewright_schema::duration::format_go_duration(Duration::from_secs(elapsed.as_secs())));
        progress.update(&it.snapshot.nodewrights, &clock_text);
        if let crate::controller::source::SourceChange::Rejected { report, .. } = it.change {
            progress.println(report);
        }
        let tuning_done = it
            .snapshot
            .nodewrights
            .iter()
            .find(|nw| nw.name() == "gpu-tuning")
            .is_some_and(|nw| nw.is_converged());
        if !bumped && tuning_done {
            bumped = true;
            match bump_tuning(&dir, it.snapshot.now.as_second()) {
                Ok(()) => progress.println(&format!("[{clock_text}] pushed a follow-up commit: tuning 1.4.0 -> 1.5.0 (an upgrade rolls next)")),
                Err(e) => progress.println(&format!("could not make the follow-up commit: {e}")),
            }
            return ControlFlow::Continue(());
        }
        if bumped && all_complete(&it.snapshot.nodewrights) && matches!(it.status, Some(crate::controller::status::StatusWrite::Unchanged)) {
            finished = true;
            return ControlFlow::Break(());
        }
        if elapsed >= max_virtual {
            progress.println(&format!("stopping: {clock_text} of virtual time passed without convergence"));
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    })
    .await;
    progress.finish();
    eprintln!(
        "\n{} in {:.0?} of wall time.",
        if finished {
            "Converged: every NodeWright is complete at its new version"
        } else {
            "Stopped before convergence"
        },
        wall.elapsed()
    );
    println!("\nStatus branch ({DEFAULT_STATUS_BRANCH}), newest first:");
    for line in log_oneline(&dir, DEFAULT_STATUS_BRANCH, 15) {
        println!("  {line}");
    }
    println!("\nRepository: {}", dir.display());
    println!(
        "  git -C {} log --oneline {DEFAULT_STATUS_BRANCH}",
        dir.display()
    );
    println!(
        "  git -C {} show {DEFAULT_STATUS_BRANCH}:status/README.md",
        dir.display()
    );
    ExitCode::from(if finished { exit::OK } else { exit::RUNTIME })
}
