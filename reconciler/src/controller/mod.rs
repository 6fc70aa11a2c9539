//! The reconcile loop (ARCHITECTURE §3): desired state of the newest valid commit →
//! materialize CRs → snapshot → engine → execute the plan → write back.
//!
//! Level-triggered: every pass works from the current cluster state; the only thing carried
//! between passes is the engine's [`Memory`] (timers the spec allows to be lost on restart).
//! The same [`Controller::pass`] runs in production, in `demo`, and under the scenario runner,
//! so what the scenarios prove is what ships.

pub mod daemon;
pub mod source;
pub mod status;

use std::time::Duration;

use jiff::Timestamp;

use crate::cluster::{Cluster, ClusterError, Desired};
use crate::engine::StateCache;
use crate::plan::{Action, Executed, Outcome, Plan, Requeue};
use crate::settings::Settings;
use std::collections::BTreeMap;

use crate::snapshot::{EvictionRefusal, Memory, RefusedPod, Snapshot};

/// The engine as the controller sees it (a pure function).
/// The engine as the loop calls it: the pass plus the parse cache it carries between passes
/// (an empty cache plans the same; it only saves work, engine/incremental/state_cache.rs).
pub type Engine = fn(&Snapshot, &Settings, &mut StateCache) -> Plan;

/// What one pass did, for logs, metrics and progress display.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PassReport {
    /// The pass's time.
    pub now: Timestamp,
    /// Actions executed, by [`Action::kind`].
    pub writes: Vec<(&'static str, Outcome)>,
    /// Actions that failed with an error (the pass goes on; the next pass retries).
    pub errors: Vec<String>,
    /// Actions not sent because a write they rely on failed in this pass (the next pass
    /// plans them again).
    pub held: usize,
    /// When the engine wants the next pass.
    pub requeue: Requeue,
    /// Wall time the pass took (snapshot, engine and writes).
    pub duration: Duration,
    /// Of that, the engine's planning.
    pub planning: Duration,
}

impl PassReport {
    /// Whether the pass wrote anything.
    pub fn wrote(&self) -> bool {
        !self.writes.is_empty()
    }
}

/// Drives one cluster with one engine.
pub struct Controller<C: Cluster> {
    cluster: C,
    engine: Engine,
    settings: Settings,
    memory: Memory,
    cache: StateCache,
    applied: Option<Desired>,
}

impl<C: Cluster> Controller<C> {
    /// A controller with empty memory.
    pub fn new(cluster: C, engine: Engine, settings: Settings) -> Self {
        Controller {
            cluster,
            engine,
            settings,
            memory: Memory::default(),
            cache: StateCache::new(),
            applied: None,
        }
    }

    /// The cluster adapter.
    pub fn cluster(&self) -> &C {
        &self.cluster
    }

    /// The settings in force.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The engine's in-memory state.
    pub fn memory(&self) -> &Memory {
        &self.memory
    }

    /// Forgets everything held in memory, as a crash and restart would.
    pub fn restart(&mut self) {
        self.memory = Memory::default();
        self.cache = StateCache::new();
        self.applied = None;
    }

    /// Materializes `desired` when it differs from what this controller last applied.
    pub async fn apply_desired(&mut self, desired: &Desired) -> Result<bool, ClusterError> {
        if self.applied.as_ref() == Some(desired) {
            return Ok(false);
        }
        self.cluster.apply_desired(desired).await?;
        self.applied = Some(desired.clone());
        Ok(true)
    }

    /// One pass: snapshot, engine, execute. Errors of single actions are collected, not fatal.
    pub async fn pass(&mut self) -> Result<PassReport, ClusterError> {
        let started = std::time::Instant::now();
        let mut snapshot = self.cluster.snapshot().await?;
        track_failure_targets(&mut self.memory, &snapshot);
        snapshot.memory = self.memory.clone();
        if let Some(desired) = &self.applied {
            snapshot.approvals = desired.approvals.clone();
        }
        let planning = std::time::Instant::now();
        let plan = (self.engine)(&snapshot, &self.settings, &mut self.cache);
        // Replaced nodes, Jobs and pods the cache held are freed once the plan's writes are
        // out, not before them.
        let released = self.cache.take_released();
        let mut report = PassReport {
            now: snapshot.now,
            requeue: plan.requeue,
            planning: planning.elapsed(),
            ..PassReport::default()
        };
        let mut evictions = EvictionAttempts::default();
        let cluster = &self.cluster;
        let kinds: Vec<&'static str> = plan.actions.iter().map(Action::kind).collect();
        crate::plan::execute(
            plan,
            crate::settings::constants::WRITES_IN_FLIGHT,
            |action| async move {
                let result = cluster.execute(&action).await;
                (action, result)
            },
            |_, action, executed| {
                evictions.observe(action, executed);
                match executed {
                    Executed::Ran(Ok(outcome)) => report.writes.push((action.kind(), outcome.clone())),
                    Executed::Ran(Err(e)) => {
                        tracing::warn!(action = action.kind(), error = %e, "action failed; the next pass retries");
                        report.errors.push(e.to_string());
                    }
                    Executed::Held { needs } => {
                        tracing::debug!(
                            action = action.kind(),
                            needs = kinds[*needs],
                            "action held: the write it relies on did not take effect; the next pass retries"
                        );
                        report.held += 1;
                    }
                }
            },
        )
        .await;
        drop(released);
        evictions.record(&mut self.memory, snapshot.now);
        prune_memory(&mut self.memory, &snapshot);
        report.duration = started.elapsed();
        Ok(report)
    }

    /// How long to wait after a pass.
    pub fn delay_after(&self, report: &PassReport) -> Duration {
        match report.requeue {
            Requeue::Active => self.settings.reconcile_interval(),
            Requeue::Idle if report.wrote() || !report.errors.is_empty() || report.held > 0 => {
                self.settings.reconcile_interval()
            }
            Requeue::Idle => self.settings.default_interval(),
            Requeue::After(d) => d.min(self.settings.default_interval()),
        }
    }
}

/// The eviction attempts of one pass, per node (§7.9): a node whose attempts were all accepted
/// forgets its last refusal; a refused attempt records the refused pods with the apiserver's
/// message and the pass time (several refusals of one pass accumulate).
#[derive(Debug, Default)]
pub struct EvictionAttempts {
    per_node: BTreeMap<String, (Option<String>, Vec<RefusedPod>)>,
}

impl EvictionAttempts {
    /// Notes one executed action.
    pub fn observe(&mut self, action: &Action, executed: &Executed) {
        let Action::EvictPod(pod) = action else {
            return;
        };
        let Executed::Ran(result) = executed else {
            return;
        };
        let entry = self
            .per_node
            .entry(pod.node.clone())
            .or_insert_with(|| (pod.nodewright.clone(), Vec::new()));
        if let Ok(Outcome::EvictionRefused { message }) = result {
            entry.1.push(RefusedPod {
                namespace: pod.namespace.clone(),
                name: pod.name.clone(),
                message: message.clone(),
            });
        }
    }

    /// Writes the pass's attempts into the engine's memory.
    pub fn record(self, memory: &mut Memory, now: Timestamp) {
        for (node, (nodewright, blockers)) in self.per_node {
            if blockers.is_empty() {
                memory.eviction_refusals.remove(&node);
            } else {
                memory.eviction_refusals.insert(
                    node,
                    EvictionRefusal {
                        at: now,
                        nodewright: nodewright.unwrap_or_default(),
                        blockers,
                    },
                );
            }
        }
    }
}

/// Keeps `failure_target_seen` (§8.9): when each Job was first seen at `FailureTarget` without a
/// terminal condition; Jobs that left that state are forgotten.
pub fn track_failure_targets(memory: &mut Memory, snapshot: &Snapshot) {
    let mut stuck = std::collections::BTreeSet::new();
    for job in &snapshot.jobs {
        if crate::sim::job_has_condition(job, "FailureTarget") && !crate::sim::jobs_is_finished(job)
        {
            let name = job.metadata.name.clone().unwrap_or_default();
            memory
                .failure_target_seen
                .entry(name.clone())
                .or_insert(snapshot.now);
            stuck.insert(name);
        }
    }
    memory
        .failure_target_seen
        .retain(|name, _| stuck.contains(name));
}

/// Drops memory about objects that no longer exist, so it cannot grow without bound.
fn prune_memory(memory: &mut Memory, snapshot: &Snapshot) {
    memory.eviction_refusals.retain(|node, _| {
        snapshot
            .nodes
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some(node))
    });
    memory.failure_target_seen.retain(|job, _| {
        snapshot
            .jobs
            .iter()
            .any(|j| j.metadata.name.as_deref() == Some(job))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::PodRef;

    fn evict(name: &str) -> Action {
        Action::EvictPod(PodRef {
            namespace: "default".into(),
            name: name.into(),
            node: "n1".into(),
            nodewright: Some("tuning".into()),
            grace_period_seconds: None,
        })
    }

    #[test]
    fn refusals_of_one_pass_accumulate_and_an_accepted_pass_clears_them() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let refused = Executed::Ran(Ok(Outcome::EvictionRefused {
            message: "needs 1".into(),
        }));
        let mut memory = Memory::default();
        let mut pass = EvictionAttempts::default();
        pass.observe(&evict("a"), &refused);
        pass.observe(&evict("b"), &refused);
        pass.observe(&evict("c"), &Executed::Ran(Ok(Outcome::Done)));
        pass.record(&mut memory, t0);
        let r = &memory.eviction_refusals["n1"];
        assert_eq!(
            (r.at, r.blockers.len(), r.nodewright.as_str()),
            (t0, 2, "tuning")
        );
        let mut pass = EvictionAttempts::default();
        pass.observe(&evict("a"), &Executed::Ran(Ok(Outcome::Done)));
        pass.record(&mut memory, t0);
        assert!(memory.eviction_refusals.is_empty());
    }
}
