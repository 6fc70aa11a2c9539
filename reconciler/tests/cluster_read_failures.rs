//! `nodewright run` keeps going when the cluster cannot be read for a while: a watch that does
//! not sync under load, or an API server that restarts, fails a snapshot, and the loop reads
//! the cluster again next iteration instead of ending the run (it ended with "cluster
//! unreachable: pod watch did not sync within 30s" on a 10,000-node rollout).

mod common;

use std::ops::ControlFlow;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::WorkRepo;
use jiff::Timestamp;
use nodewright_reconciler::cli::fleet::Fleet;
use nodewright_reconciler::cluster::sim::SimAdapter;
use nodewright_reconciler::cluster::{Cluster, ClusterError, Desired, LogRequest};
use nodewright_reconciler::controller::Controller;
use nodewright_reconciler::controller::daemon::{LifecycleMode, Pacer, Wake, run_loop};
use nodewright_reconciler::controller::source::{GitSource, RepoLocation};
use nodewright_reconciler::plan::{Action, Outcome};
use nodewright_reconciler::settings::Settings;
use nodewright_reconciler::snapshot::Snapshot;
use nodewright_reconciler::source::desired::ReadOptions;

/// The simulated cluster, but every third read of it fails as an unsynced watch does.
struct Flaky {
    inner: SimAdapter,
    reads: AtomicUsize,
    failed: AtomicUsize,
}

impl Cluster for Flaky {
    async fn snapshot(&self) -> Result<Snapshot, ClusterError> {
        if self.reads.fetch_add(1, Ordering::SeqCst) % 3 == 2 {
            self.failed.fetch_add(1, Ordering::SeqCst);
            return Err(ClusterError::Transport(
                "pod watch did not sync within 30s".into(),
            ));
        }
        self.inner.snapshot().await
    }

    async fn execute(&self, action: &Action) -> Result<Outcome, ClusterError> {
        self.inner.execute(action).await
    }

    async fn apply_desired(&self, desired: &Desired) -> Result<(), ClusterError> {
        self.inner.apply_desired(desired).await
    }

    async fn changed(&self) {
        self.inner.changed().await
    }

    async fn pod_logs(&self, request: &LogRequest) -> Result<String, ClusterError> {
        self.inner.pod_logs(request).await
    }

    async fn follow_pod_logs(
        &self,
        request: &LogRequest,
        sink: &mut (dyn FnMut(&str) + Send),
    ) -> Result<(), ClusterError> {
        self.inner.follow_pod_logs(request, sink).await
    }
}

/// Virtual time as fast as possible: each wait advances the simulated world by its delay.
struct Instant;

impl Pacer<Flaky> for Instant {
    fn now(&self, cluster: &Flaky) -> Timestamp {
        cluster.inner.world().now()
    }

    async fn wait(&mut self, cluster: &Flaky, delay: Duration) -> Wake {
        cluster.inner.world().advance(delay);
        Wake::Elapsed
    }
}

/// Nodes the example fleet selects.
const LABELLED: &str = r#"
cluster:
  nodes:
    - generate: {count: 2, namePrefix: canary-, labels: {nvidia.com/gpu.present: "true", rollout.example.com/pool: canary}}
    - generate: {count: 2, namePrefix: gpu-, labels: {nvidia.com/gpu.present: "true", rollout.example.com/pool: production}}
"#;

#[tokio::test]
async fn a_rollout_converges_through_failed_reads_of_the_cluster() {
    let tmp = tempfile::tempdir().unwrap();
    let work = WorkRepo::init(&tmp.path().join("fleet"));
    work.copy_from(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/fleet"));
    work.commit("fleet");
    let mut source = GitSource::open(
        &RepoLocation::Local(tmp.path().join("fleet")),
        "main",
        "nodewright/status",
        ReadOptions::default(),
    )
    .unwrap();
    let settings = Settings::default();
    let world = Fleet::parse(LABELLED)
        .unwrap()
        .build(&settings.namespace, 5)
        .unwrap();
    let mut controller = Controller::new(
        Flaky {
            inner: SimAdapter::new(world),
            reads: AtomicUsize::new(0),
            failed: AtomicUsize::new(0),
        },
        nodewright_reconciler::engine::reconcile_cached,
        settings,
    );
    let mut observed = 0;
    let mut converged = false;
    run_loop(
        &mut controller,
        &mut source,
        None,
        LifecycleMode::SelfManaged,
        &mut Instant,
        |it| {
            observed += 1;
            let nws = &it.snapshot.nodewrights;
            converged = !nws.is_empty() && nws.iter().all(|nw| nw.is_converged());
            if converged || observed > 2_000 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        },
    )
    .await;
    let failed = controller.cluster().failed.load(Ordering::SeqCst);
    assert!(failed > 10, "the cluster failed {failed} reads");
    assert!(
        converged,
        "the rollout converged through {failed} failed reads ({observed} iterations observed)"
    );
}
