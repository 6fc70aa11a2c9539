//! The [`Cluster`] port over the simulated cluster.
//!
//! Every call completes immediately (the simulator is in-process and synchronous), so the
//! futures are always ready; [`block_on`] drives them without an async runtime.

use std::future::Future;
use std::sync::{Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use crate::cluster::{Cluster, ClusterError, Desired, LogRequest};
use crate::plan::{Action, Outcome};
use crate::sim::SimCluster;
use crate::snapshot::Snapshot;

/// A [`SimCluster`] behind the [`Cluster`] port.
pub struct SimAdapter {
    world: Mutex<SimCluster>,
    /// The last snapshot handed out, refreshed for the next one: an unchanged node keeps its
    /// `Arc`, as the kube adapter's stores do, so the engine's cache recognises it.
    last: Mutex<Snapshot>,
}

impl SimAdapter {
    /// Wraps a simulated cluster.
    pub fn new(world: SimCluster) -> Self {
        SimAdapter {
            world: Mutex::new(world),
            last: Mutex::new(Snapshot::default()),
        }
    }

    /// Direct access to the world (scenario steps, expectations).
    pub fn world(&self) -> MutexGuard<'_, SimCluster> {
        // A panic while holding the lock leaves the world as it was at that point, which is
        // still the best description of it; recover instead of propagating the poison.
        self.world.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Brings a previous snapshot up to date, reusing unchanged objects (see
    /// [`SimCluster::refresh_snapshot`]); the fast path of [`Cluster::snapshot`].
    pub fn refresh_snapshot(&self, snapshot: &mut Snapshot) {
        self.world().refresh_snapshot(snapshot);
    }

    /// Gives the world back.
    pub fn into_inner(self) -> SimCluster {
        self.world.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

impl Cluster for SimAdapter {
    fn snapshot(&self) -> impl Future<Output = Result<Snapshot, ClusterError>> + Send {
        // As for the world: a panic while refreshing leaves a snapshot the next refresh mends.
        // A refresh leaves `memory` alone, so it stays the empty default the port hands out.
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        self.world().refresh_snapshot(&mut last);
        std::future::ready(Ok(last.clone()))
    }

    fn execute(
        &self,
        action: &Action,
    ) -> impl Future<Output = Result<Outcome, ClusterError>> + Send {
        std::future::ready(self.world().execute(action))
    }

    fn apply_desired(
        &self,
        desired: &Desired,
    ) -> impl Future<Output = Result<(), ClusterError>> + Send {
        self.world().apply_desired(desired);
        std::future::ready(Ok(()))
    }

    fn changed(&self) -> impl Future<Output = ()> + Send {
        // Virtual time: the caller decides when the next pass runs.
        std::future::ready(())
    }

    fn pod_logs(
        &self,
        request: &LogRequest,
    ) -> impl Future<Output = Result<String, ClusterError>> + Send {
        std::future::ready(self.world().pod_logs(request))
    }

    fn follow_pod_logs(
        &self,
        request: &LogRequest,
        sink: &mut (dyn FnMut(&str) + Send),
    ) -> impl Future<Output = Result<(), ClusterError>> + Send {
        // The world's clock only moves when its owner advances it, so waiting here would
        // wait forever: hand over what the container wrote so far.
        let result = self.world().pod_logs(request).map(|text| sink(&text));
        std::future::ready(result)
    }
}

/// Drives a future that completes without waiting (every [`SimAdapter`] future).
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{ModelRunner, NodeInput, PackageModels};
    use nodewright_schema::{NodeWright, NodeWrightSpec};

    fn adapter() -> SimAdapter {
        let mut world = SimCluster::new(
            "nodewright",
            Box::new(ModelRunner::new(PackageModels::default())),
            1,
        );
        world.add_node(NodeInput {
            name: "n1".into(),
            ..NodeInput::default()
        });
        SimAdapter::new(world)
    }

    fn nodewright(name: &str, priority: i32) -> NodeWright {
        let mut nw = NodeWright::new(
            name,
            NodeWrightSpec {
                priority,
                ..NodeWrightSpec::default()
            },
        );
        nw.metadata.annotations = Some([("team".to_string(), "gpu".to_string())].into());
        nw
    }

    #[test]
    fn desired_crs_are_created_updated_and_deleted_through_the_port() {
        let cluster = adapter();
        let desired = Desired {
            nodewrights: vec![nodewright("tuning", 100)],
            policies: vec![],
            commit: "c1".into(),
            ..Default::default()
        };
        block_on(cluster.apply_desired(&desired)).unwrap();
        let snap = block_on(cluster.snapshot()).unwrap();
        assert_eq!(snap.nodewrights.len(), 1);
        assert_eq!(snap.nodewrights[0].metadata.generation, Some(1));
        assert_eq!(snap.nodes.len(), 1);

        // Others' annotations and status survive; an annotation-only change does not bump
        // the generation; a spec change does.
        cluster.world().annotate_nodewright(
            "tuning",
            &[(
                nodewright_schema::keys::PAUSE.to_string(),
                "true".to_string(),
            )]
            .into(),
            &[],
        );
        block_on(cluster.execute(&Action::SetFinalizer {
            name: "tuning".into(),
            present: true,
        }))
        .unwrap();
        block_on(cluster.apply_desired(&desired)).unwrap();
        let live = cluster.world().nodewrights()["tuning"].clone();
        assert_eq!(live.metadata.generation, Some(1));
        assert_eq!(
            live.metadata.annotations.as_ref().unwrap()[nodewright_schema::keys::PAUSE],
            "true"
        );
        let mut changed = desired.clone();
        changed.nodewrights[0].spec.priority = 5;
        block_on(cluster.apply_desired(&changed)).unwrap();
        assert_eq!(
            cluster.world().nodewrights()["tuning"].metadata.generation,
            Some(2)
        );

        // Removed from Git: the finalizer keeps it, with a deletionTimestamp, until released.
        block_on(cluster.apply_desired(&Desired::default())).unwrap();
        assert!(
            cluster.world().nodewrights()["tuning"]
                .metadata
                .deletion_timestamp
                .is_some()
        );
        block_on(cluster.execute(&Action::SetFinalizer {
            name: "tuning".into(),
            present: false,
        }))
        .unwrap();
        assert!(cluster.world().nodewrights().is_empty());
    }

    #[test]
    fn an_unchanged_node_reaches_the_next_snapshot_as_the_same_object() {
        use crate::plan::NodePatch;
        let cluster = adapter();
        cluster.world().add_node(NodeInput {
            name: "n2".into(),
            ..NodeInput::default()
        });
        let first = block_on(cluster.snapshot()).unwrap();
        let mut patch = NodePatch::new("n2");
        patch.labels.insert("pool".into(), Some("gpu".into()));
        block_on(cluster.execute(&Action::PatchNode(patch))).unwrap();
        let second = block_on(cluster.snapshot()).unwrap();
        let node = |s: &Snapshot, name: &str| {
            s.nodes
                .iter()
                .find(|n| n.metadata.name.as_deref() == Some(name))
                .cloned()
                .unwrap()
        };
        assert!(std::sync::Arc::ptr_eq(
            &node(&first, "n1"),
            &node(&second, "n1")
        ));
        assert!(!std::sync::Arc::ptr_eq(
            &node(&first, "n2"),
            &node(&second, "n2")
        ));
        assert_eq!(
            node(&second, "n2").metadata.labels.as_ref().unwrap()["pool"],
            "gpu"
        );
    }
}
