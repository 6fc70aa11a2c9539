//! The long-running loop (ARCHITECTURE §3): trigger → desired state of the newest valid
//! commit → materialize CRs → pass → status write-back → wait for the next trigger.

use std::future::Future;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::mpsc::Receiver;

use super::source::{FetchAttempt, GitSource, SourceChange};
use super::status::{StatusWrite, StatusWriter};
use super::{Controller, PassReport};
use crate::cluster::Cluster;
use crate::cluster::sim::SimAdapter;
use crate::snapshot::Snapshot;
use crate::source::triggers::Trigger;

/// Who runs the node lifecycle (issue 9).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LifecycleMode {
    /// This reconciler runs the lifecycle (Jobs, cordons, drains).
    #[default]
    #[value(name = "self")]
    SelfManaged,
    /// An in-cluster upstream NodeWright operator runs it; we only materialize CRs from Git
    /// and write their status back.
    Upstream,
}

/// Why a wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// The delay passed, or the cluster changed.
    Elapsed,
    /// A webhook or a local ref change asked for a fetch.
    Triggered,
    /// Shut down.
    Stop,
}

/// How the loop waits between passes, and whose clock it runs on.
pub trait Pacer<C: Cluster> {
    /// The clock the loop runs on (the cluster's: wall time, or the simulator's virtual time).
    fn now(&self, cluster: &C) -> Timestamp;
    /// Waits up to `delay` (less when something changed).
    fn wait(&mut self, cluster: &C, delay: Duration) -> impl Future<Output = Wake>;
}

/// The next Git trigger; a closed channel (no webhook, no watcher) never yields one.
async fn next_trigger(triggers: &mut Option<Receiver<Trigger>>) -> Trigger {
    if let Some(rx) = triggers {
        if let Some(trigger) = rx.recv().await {
            return trigger;
        }
        *triggers = None;
    }
    std::future::pending().await
}

/// Wall-clock pacing for a real cluster: wakes on the delay, a cluster change, a Git trigger
/// or shutdown.
pub struct WallClock {
    /// Git triggers (webhook, local ref changes), if any.
    pub triggers: Option<Receiver<Trigger>>,
    /// Resolves on SIGTERM/ctrl-c.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
}

impl<C: Cluster + Sync> Pacer<C> for WallClock {
    fn now(&self, _cluster: &C) -> Timestamp {
        Timestamp::now()
    }

    async fn wait(&mut self, cluster: &C, delay: Duration) -> Wake {
        if *self.shutdown.borrow() {
            return Wake::Stop;
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => Wake::Elapsed,
            _ = cluster.changed() => {
                settle(|| cluster.changed()).await;
                Wake::Elapsed
            }
            _ = next_trigger(&mut self.triggers) => Wake::Triggered,
            _ = self.shutdown.changed() => Wake::Stop,
        }
    }
}

/// Waits for the burst of watch events a change belongs to: until `CHANGE_QUIET` passes
/// without another event, and no longer than `CHANGE_SETTLE`.
async fn settle<F: Future<Output = ()>>(mut changed: impl FnMut() -> F) {
    use crate::settings::constants::{CHANGE_QUIET, CHANGE_SETTLE};
    let deadline = tokio::time::Instant::now() + CHANGE_SETTLE;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(CHANGE_QUIET) => return,
            _ = tokio::time::sleep_until(deadline) => return,
            _ = changed() => {}
        }
    }
}

/// Accelerated virtual time for the embedded simulator: the wall clock sleeps `delay / speed`
/// and the world then advances by `delay`, or, when a Git trigger cuts the sleep short, by the
/// virtual time that really passed.
pub struct SimClock {
    /// Virtual seconds per wall second (0: as fast as possible).
    pub speed: f64,
    /// Git triggers (webhook, local ref changes), if any.
    pub triggers: Option<Receiver<Trigger>>,
    /// Resolves on ctrl-c.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
}

impl Pacer<SimAdapter> for SimClock {
    fn now(&self, cluster: &SimAdapter) -> Timestamp {
        cluster.world().now()
    }

    async fn wait(&mut self, cluster: &SimAdapter, delay: Duration) -> Wake {
        if *self.shutdown.borrow() {
            return Wake::Stop;
        }
        let wall = if self.speed > 0.0 {
            delay.div_f64(self.speed)
        } else {
            Duration::ZERO
        };
        let started = tokio::time::Instant::now();
        let wake = tokio::select! {
            biased;
            _ = self.shutdown.changed() => Wake::Stop,
            _ = tokio::time::sleep(wall) => Wake::Elapsed,
            _ = next_trigger(&mut self.triggers) => Wake::Triggered,
        };
        let advanced = match wake {
            Wake::Elapsed => delay,
            Wake::Triggered | Wake::Stop => started.elapsed().mul_f64(self.speed).min(delay),
        };
        cluster.world().advance(advanced);
        wake
    }
}

/// One iteration's observations, for progress display and the caller's stop condition.
pub struct Iteration<'a> {
    /// Whether the remote was fetched this iteration.
    pub fetch: FetchAttempt,
    /// The source change seen this iteration.
    pub change: &'a SourceChange,
    /// The pass (none in `upstream` lifecycle mode).
    pub pass: Option<&'a PassReport>,
    /// The world after the pass; shared, so a consumer can keep it past the iteration
    /// (the metrics endpoint computes its gauges from it when scraped).
    pub snapshot: &'a Arc<Snapshot>,
    /// What the status writer did.
    pub status: Option<&'a StatusWrite>,
    /// Whether this replica led this iteration (false: a standby follower that only watched).
    pub leading: bool,
}

/// Runs until the pacer or `observe` says stop. Errors of one iteration (the repository, the
/// cluster, a write) are logged and retried (level-triggered: the next pass starts from the
/// cluster as it is), so nothing an iteration meets stops the loop.
pub async fn run_loop<C: Cluster, P: Pacer<C>>(
    controller: &mut Controller<C>,
    source: &mut GitSource,
    mut status: Option<&mut StatusWriter>,
    lifecycle: LifecycleMode,
    pacer: &mut P,
    mut observe: impl FnMut(&Iteration<'_>) -> ControlFlow<()>,
) {
    let mut was_leading = true;
    // The repository's read error while it lasts: said once, and once when it reads again.
    let mut unreadable: Option<String> = None;
    loop {
        let iteration_started = std::time::Instant::now();
        let (fetch, change) = source.poll(pacer.now(controller.cluster()));
        let change = match change {
            Ok(change) => {
                if unreadable.take().is_some() {
                    tracing::info!("the repository reads again");
                }
                change
            }
            Err(e) => {
                let error = e.to_string();
                if unreadable.as_ref() != Some(&error) {
                    tracing::warn!(%error, "cannot read the repository; keeping the desired state in force");
                }
                unreadable = Some(error);
                SourceChange::None
            }
        };
        match &change {
            SourceChange::Applied { commit, digest } => {
                tracing::info!(%commit, %digest, "applying commit")
            }
            SourceChange::Rejected { report, .. } => tracing::warn!("{report}"),
            SourceChange::AppliedAncestor { report, .. } => tracing::warn!("{report}"),
            SourceChange::Unchanged { commit } => {
                tracing::info!(%commit, "new commit, same desired state")
            }
            SourceChange::None => {}
        }
        // A follower keeps reading Git and the cluster (so it can take over at once) but
        // writes nothing: no CRs, no pass, no status commits.
        let leading = controller.cluster().may_write();
        if !leading && was_leading {
            tracing::warn!("lost the leader Lease: standing by, writing nothing");
            // The next term starts like a restart: in-memory timers are not trusted across it.
            controller.restart();
        } else if leading && !was_leading {
            tracing::info!("leading: materializing, reconciling and writing status");
        }
        was_leading = leading;
        let desired = source.desired().cloned();
        if let Some(Err(e)) = match &desired {
            Some(d) if leading => Some(controller.apply_desired(d).await),
            _ => None,
        } {
            tracing::warn!(error = %e, "materializing the desired CRs failed; retrying next pass");
        }
        let pass_started = std::time::Instant::now();
        let report = match lifecycle {
            _ if !leading => None,
            LifecycleMode::SelfManaged => match controller.pass().await {
                Ok(r) => Some(r),
                Err(e) => {
                    tracing::warn!(error = %e, "pass failed; retrying");
                    None
                }
            },
            LifecycleMode::Upstream => None,
        };
        let after_pass = std::time::Instant::now();
        // A cluster that cannot be read now (a watch that does not sync under load, an API
        // server restarting) is read again next iteration, as a failed pass is retried: the
        // status branch and the observer wait for a world to report.
        let snapshot = match controller.cluster().snapshot().await {
            Ok(snapshot) => Some(Arc::new(snapshot)),
            Err(e) => {
                tracing::warn!(error = %e, "reading the cluster after the pass failed; retrying");
                None
            }
        };
        let after_snapshot = std::time::Instant::now();
        let mut after_status = after_snapshot;
        if let Some(snapshot) = &snapshot {
            if let Some(writer) = status.as_deref_mut() {
                writer.set_source(source.record());
            }
            let written = match status.as_deref_mut() {
                Some(writer) if leading => (writer.write(snapshot.now, &snapshot.nodewrights))
                    .inspect_err(
                        |e| tracing::warn!(error = %e, "status write-back failed; retrying later"),
                    )
                    .ok(),
                _ => None,
            };
            let iteration = Iteration {
                fetch,
                change: &change,
                pass: report.as_ref(),
                snapshot,
                status: written.as_ref(),
                leading,
            };
            after_status = std::time::Instant::now();
            if observe(&iteration).is_break() {
                break;
            }
        }
        tracing::debug!(
            before_pass_ms = ms(pass_started.duration_since(iteration_started)),
            snapshot_ms = ms(after_snapshot.duration_since(after_pass)),
            status_ms = ms(after_status.duration_since(after_snapshot)),
            observe_ms = ms(after_status.elapsed()),
            pass_ms = report.as_ref().map(|r| ms(r.duration)),
            planning_ms = report.as_ref().map(|r| ms(r.planning)),
            writes = report.as_ref().map(|r| r.writes.len()),
            "iteration"
        );
        let pass_delay = match &report {
            Some(r) => controller.delay_after(r),
            None => controller.settings().reconcile_interval(),
        };
        // The fetch cadence is the loop's own: an idle fleet still wakes to fetch, and to
        // collect what a remote answered.
        let delay = pass_delay
            .min(source.until_fetch(pacer.now(controller.cluster())))
            .min(
                status
                    .as_deref()
                    .and_then(StatusWriter::until_look)
                    .unwrap_or(Duration::MAX),
            );
        let waiting = std::time::Instant::now();
        let wake = pacer.wait(controller.cluster(), delay).await;
        tracing::debug!(
            delay_ms = ms(delay),
            waited_ms = ms(waiting.elapsed()),
            "waited"
        );
        match wake {
            Wake::Stop => break,
            Wake::Triggered => source.request_fetch(),
            Wake::Elapsed => {}
        }
    }
    if let Some(writer) = status {
        writer.finish(pacer.now(controller.cluster()), FINISH_PATIENCE);
    }
}

/// How long a stopping loop waits for a status push still out: within a pod's default grace
/// period after SIGTERM.
const FINISH_PATIENCE: Duration = Duration::from_secs(20);

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::sync::Notify;
    use tokio::time::{Duration, Instant};

    use super::settle;
    use crate::settings::constants::{CHANGE_QUIET, CHANGE_SETTLE};

    /// Watch events `every` apart from now on, `count` of them.
    fn events(changed: &Arc<Notify>, every: Duration, count: usize) {
        let changed = changed.clone();
        tokio::spawn(async move {
            for _ in 0..count {
                tokio::time::sleep(every).await;
                changed.notify_one();
            }
        });
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_change_is_acted_on_once_the_quiet_period_passes() {
        let changed = Arc::new(Notify::new());
        let started = Instant::now();
        settle(|| changed.notified()).await;
        assert_eq!(started.elapsed(), CHANGE_QUIET);
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_is_waited_out_as_one() {
        let changed = Arc::new(Notify::new());
        events(&changed, CHANGE_QUIET / 2, 4);
        let started = Instant::now();
        settle(|| changed.notified()).await;
        // The last event comes at twice the quiet period; the quiet period follows it.
        assert_eq!(started.elapsed(), CHANGE_QUIET * 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_stream_of_events_delays_the_pass_no_longer_than_the_settle() {
        let changed = Arc::new(Notify::new());
        events(&changed, CHANGE_QUIET / 4, 1000);
        let started = Instant::now();
        settle(|| changed.notified()).await;
        assert_eq!(started.elapsed(), CHANGE_SETTLE);
    }
}
