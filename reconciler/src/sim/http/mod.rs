//! `nodewright sim serve`: the simulated world served over HTTP on loopback as a subset of
//! the Kubernetes API (ARCHITECTURE §2.2), so the kube adapter, the binary and `kubectl` are
//! exercised over real HTTP.
//!
//! Served: discovery (`/api`, `/apis`, group/version resource lists), list and watch (with
//! resourceVersion, bookmarks, `sendInitialEvents`, label and field selectors), get, create,
//! update, JSON merge patch, JSON patch, strategic merge patch ([`strategic`]), server-side
//! apply, delete (finalizers, deletionTimestamp,
//! foreground Jobs, preconditions), `status` and `eviction` subresources, Leases and Events;
//! `dryRun=All` on every write, `limit`/`continue` pages of one snapshot, the
//! NamespaceLifecycle rules and namespace deletion through `Terminating`, validation of the
//! modelled fields ([`admission`]), OpenAPI documents and field validation ([`openapi`]),
//! protobuf request bodies ([`protobuf`]), strategic merge patch of built-ins ([`strategic`]),
//! and `/healthz`, `/readyz`, `/livez`. Other controllers run on it: CRDs created through the
//! API are served ([`crds`]), pods created through the API run on the simulated kubelet
//! ([`crate::sim::pods`]), workload pods' `apps/v1` owners are served ([`apps`]), and every
//! node keeps a lease ([`leases`]). Every refusal is a
//! `Status` with kube-apiserver's code. docs/sim-serve.md lists what differs from a real
//! API server. Every write is a simulator operation (see [`world`]); the simulator's clock
//! runs in a background task at wall time × speed.

pub mod admission;
pub mod apps;
pub mod crds;
pub mod error;
pub mod leases;
pub mod metrics;
pub mod openapi;
pub mod paging;
pub mod patch;
pub mod protobuf;
pub mod resources;
pub mod select;
pub mod server;
pub mod strategic;
pub mod table;
pub mod world;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use tokio::task::JoinHandle;

use crate::cluster::kube::{Clock, SIM_CLOCK_EXTENSION};
use crate::sim::SimCluster;
pub use world::World;

/// The timers (a container finishing, a Job's sync, a node coming back) the clock fires in
/// one write of the world.
const STEPS_PER_WRITE: usize = 4;

/// How to serve.
#[derive(Clone, Copy, Debug)]
pub struct ServeOptions {
    /// Port on 127.0.0.1 (0 picks a free one).
    pub port: u16,
    /// Virtual seconds per wall second.
    pub speed: f64,
    /// How often the clock task advances the simulator.
    pub tick: Duration,
    /// How long after a change its watch events are sent, as a loaded API server's watch
    /// cache lags behind its writes; a controller must not act on the older state it sees.
    pub watch_delay: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            port: 0,
            speed: 1.0,
            tick: Duration::from_millis(50),
            watch_delay: Duration::ZERO,
        }
    }
}

/// A running `sim serve`. Dropping it stops the server and the clock.
pub struct SimServer {
    address: SocketAddr,
    world: Arc<World>,
    clock: Clock,
    namespace: String,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for SimServer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The port could not be bound.
    #[error("cannot listen on 127.0.0.1:{port}: {source}")]
    Bind {
        /// The port asked for.
        port: u16,
        /// The cause.
        source: std::io::Error,
    },
    /// The speed is not a positive number.
    #[error("--speed must be a positive number, got {0}")]
    Speed(f64),
    /// No client could be built from the kubeconfig.
    #[error("cannot build a client for sim serve: {0}")]
    Client(String),
    /// The kubeconfig could not be written.
    #[error("cannot write the kubeconfig {path}: {source}")]
    Kubeconfig {
        /// Where.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
}

impl SimServer {
    /// Starts serving `sim` on 127.0.0.1. The virtual clock continues from the simulator's
    /// time at `options.speed`.
    pub async fn start(sim: SimCluster, options: ServeOptions) -> Result<Self, ServeError> {
        if !(options.speed.is_finite() && options.speed > 0.0) {
            return Err(ServeError::Speed(options.speed));
        }
        // The virtual clock continues from the simulator's own time: jumping it to the wall
        // clock would fire every timer of the scenario (pods that run for a while) at once.
        let wall_origin = Timestamp::now();
        let clock = Clock::Scaled {
            wall_origin,
            virtual_origin: sim.now(),
            speed: options.speed,
        };
        let namespace = sim.namespace().to_string();
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", options.port))
            .await
            .map_err(|source| ServeError::Bind {
                port: options.port,
                source,
            })?;
        let address = listener.local_addr().map_err(|source| ServeError::Bind {
            port: options.port,
            source,
        })?;
        let world = Arc::new(World::new(sim));
        let shared = Arc::new(server::Shared {
            world: world.clone(),
            address: address.to_string(),
            requests: metrics::RequestCounter::default(),
            watch_delay: options.watch_delay,
        });
        let router = axum::Router::new()
            .fallback(server::handle)
            .with_state(shared);
        let serve = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, router).await {
                tracing::error!(error = %e, "sim serve stopped");
            }
        });
        let ticking = world.clone();
        let tick = tokio::spawn(async move {
            let mut interval = tokio::time::interval(options.tick);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                interval.tick().await;
                let now = clock.now();
                let world = ticking.clone();
                // Off the request workers, in steps: a request waits for one step at most.
                let stepped = tokio::task::spawn_blocking(move || {
                    while world.with_sim(|sim| sim.advance_toward(now, STEPS_PER_WRITE)) {
                        std::thread::yield_now();
                    }
                    while world.renew_node_leases() {
                        std::thread::yield_now();
                    }
                });
                if stepped.await.is_err() {
                    tracing::error!("the simulated cluster's clock stopped");
                    return;
                }
            }
        });
        Ok(SimServer {
            address,
            world,
            clock,
            namespace,
            tasks: vec![serve, tick],
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The bound address.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The served world (tests and scenario steps act on the simulator through it).
    pub fn world(&self) -> &Arc<World> {
        &self.world
    }

    /// The virtual clock.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// A kubeconfig for this server: no auth, plain HTTP, the reconciler's namespace as the
    /// context namespace, and the virtual clock as a cluster extension.
    pub fn kubeconfig_yaml(&self) -> String {
        let clock = serde_json::to_value(self.clock).unwrap_or_default();
        let doc = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{
                "name": "nodewright-sim",
                "cluster": {
                    "server": self.url(),
                    "extensions": [{"name": SIM_CLOCK_EXTENSION, "extension": clock}],
                },
            }],
            "users": [{"name": "nodewright-sim", "user": {}}],
            "contexts": [{
                "name": "nodewright-sim",
                "context": {"cluster": "nodewright-sim", "user": "nodewright-sim", "namespace": self.namespace},
            }],
            "current-context": "nodewright-sim",
            "preferences": {},
        });
        serde_yaml::to_string(&doc).unwrap_or_default()
    }

    /// Writes [`Self::kubeconfig_yaml`] to `path` (creating its directory).
    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), ServeError> {
        let error = |source| ServeError::Kubeconfig {
            path: path.display().to_string(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(error)?;
        }
        // Written aside and renamed, so a reader polling for the file never sees half of it.
        let partial = path.with_extension("partial");
        std::fs::write(&partial, self.kubeconfig_yaml()).map_err(error)?;
        std::fs::rename(&partial, path).map_err(error)
    }

    /// A kube-rs client for this server, built as the adapter builds its clients
    /// ([`crate::cluster::kube::client`]) from [`Self::kubeconfig_yaml`].
    pub async fn client(&self) -> Result<kube::Client, ServeError> {
        let error = |e: String| ServeError::Client(e);
        let raw = kube::config::Kubeconfig::from_yaml(&self.kubeconfig_yaml())
            .map_err(|e| error(e.to_string()))?;
        let mut config =
            kube::Config::from_custom_kubeconfig(raw, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| error(e.to_string()))?;
        config.default_retry = false;
        kube::Client::try_from(config).map_err(|e| error(e.to_string()))
    }
}
