//! `nodewright sim serve`: the simulated cluster over HTTP on loopback, as a Kubernetes API
//! subset (ARCHITECTURE §2.2), with a kubeconfig for kube-rs clients and kubectl.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args as ClapArgs, Subcommand};

use super::exit;
use crate::sim::http::{ServeOptions, SimServer};
use crate::sim::{ModelRunner, NodeInput, PackageModels, SimCluster};

/// Help text of `sim serve`.
pub const LONG_ABOUT: &str = "\
Serve a simulated cluster over HTTP on 127.0.0.1 as a subset of the Kubernetes API.

The simulator's Job controller, kubelet, eviction API and reboots keep running in real time \
(scaled by --speed). A kubeconfig for the served cluster is written (--kubeconfig; by default \
in the user's cache directory, where the other commands' --sim flag looks) so kubectl, \
`nodewright run` and the operational verbs can target it. Images the scenario does not describe \
succeed after a couple of seconds.";

/// Examples of `sim serve`.
pub const EXAMPLES: &str = "\
Examples:
  # Five GPU nodes (labelled nvidia.com/gpu.present=true), ten times faster than real time
  nodewright sim serve --nodes 5 --speed 10

  # The cluster of a scenario file (nodes, workload pods, PDBs, package models)
  nodewright sim serve --scenario tests/scenarios/pkg-pdb-drain-blocked.yaml --port 6443

  # A cluster whose watches lag 200 ms behind its writes, as a loaded API server's do
  nodewright sim serve --nodes 20 --watch-delay 200ms

  # Then, in another terminal
  kubectl --kubeconfig ~/.cache/nodewright/sim-kubeconfig.yaml get nodes
  nodewright node status --sim";

/// `nodewright sim …`.
#[derive(Debug, Clone, Subcommand)]
pub enum SimCommand {
    /// Serve a simulated cluster as a Kubernetes API on loopback.
    #[command(long_about = LONG_ABOUT, after_long_help = EXAMPLES)]
    Serve(Args),
}

/// Arguments of `sim serve`.
#[derive(Debug, Clone, ClapArgs)]
pub struct Args {
    /// Where to write the kubeconfig of the served cluster (default: the file in the user's
    /// cache directory that `--sim` reads).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The namespace the reconciler will use in the served cluster (created with it).
    #[arg(long, short = 'n', default_value = "nodewright")]
    pub namespace: String,
    /// Number of generated nodes (node-1 … node-N, labelled nvidia.com/gpu.present=true).
    #[arg(long, conflicts_with = "scenario", default_value_t = 3)]
    pub nodes: usize,
    /// Start from the `cluster:` and `packages:` of a scenario (or fleet) file instead.
    #[arg(long, value_name = "FILE")]
    pub scenario: Option<PathBuf>,
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Virtual seconds per wall second.
    #[arg(long, default_value_t = 1.0)]
    pub speed: f64,
    /// Send watch events this long (wall time) after each change, as a loaded API server's
    /// watch cache lags behind its writes: a controller under test must not act on the older
    /// state its caches still show (e.g. `200ms`).
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = super::parse_duration)]
    pub watch_delay: Duration,
}

/// The world `args` describe.
pub fn build_world(args: &Args, namespace: &str) -> Result<SimCluster, String> {
    if let Some(path) = &args.scenario {
        // A scenario file's (or a fleet file's) `cluster:` and `packages:`.
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let fleet =
            super::fleet::Fleet::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        return fleet.build(namespace, 1);
    }
    let mut world = SimCluster::new(
        namespace,
        Box::new(ModelRunner::new(PackageModels::default())),
        1,
    );
    // Nodes are created "now" rather than at the simulator's epoch, so their age reads right.
    let now = jiff::Timestamp::now();
    if world.now() < now {
        world.advance_to(now);
    }
    for i in 1..=args.nodes {
        let name = format!("node-{i}");
        world.add_node(NodeInput {
            labels: super::fleet::generated_node_labels(&name),
            name,
            ..NodeInput::default()
        });
    }
    Ok(world)
}

/// Runs `sim serve` until interrupted.
pub fn run(command: SimCommand) -> ExitCode {
    let SimCommand::Serve(args) = command;
    let world = match build_world(&args, &args.namespace) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(exit::USAGE);
        }
    };
    // Requests are logged at debug (`RUST_LOG=nodewright_reconciler=debug`): what a client
    // sent and what it was answered, to see why another controller does what it does.
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
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
        let options = ServeOptions {
            port: args.port,
            speed: args.speed,
            tick: Duration::from_millis(50),
            watch_delay: args.watch_delay,
        };
        let server = match SimServer::start(world, options).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(exit::RUNTIME);
            }
        };
        let default_path = crate::cluster::kube::sim_kubeconfig_path();
        let path = args
            .kubeconfig
            .clone()
            .unwrap_or_else(|| default_path.clone());
        if let Err(e) = server.write_kubeconfig(&path) {
            eprintln!("error: {e}");
            return ExitCode::from(exit::RUNTIME);
        }
        let nodes = server.world().read(|w| w.sim.nodes().len());
        println!(
            "Serving a simulated cluster ({nodes} nodes, speed x{}) at {}",
            args.speed,
            server.url()
        );
        println!("Kubeconfig: {}", path.display());
        println!();
        println!("Try:");
        println!("  kubectl --kubeconfig {} get nodes", path.display());
        // `--sim` reads the default path only; a kubeconfig written elsewhere is named.
        if path == default_path {
            println!("  nodewright node status --sim");
        } else {
            println!("  nodewright node status --kubeconfig {}", path.display());
        }
        println!(
            "  nodewright run --kubeconfig {} --repo <fleet repository>",
            path.display()
        );
        println!();
        println!("Press Ctrl-C to stop.");
        if let Err(e) = tokio::signal::ctrl_c().await {
            eprintln!("error: cannot wait for Ctrl-C: {e}");
            return ExitCode::from(exit::RUNTIME);
        }
        ExitCode::from(exit::OK)
    })
}
