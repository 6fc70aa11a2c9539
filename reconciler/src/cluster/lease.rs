//! Leader election on a `coordination.k8s.io/v1` Lease, so two replicas never both write.
//!
//! The algorithm is client-go's: a candidate takes the Lease when it is free (no holder) or
//! when the holder's record has not changed for a whole `leaseDuration` *as observed locally*
//! (remote timestamps are not trusted, so clock skew between replicas does not matter); the
//! holder renews every `retryPeriod`, each write guarded by the Lease's resourceVersion. The
//! leader stops writing — the `writes_allowed` flag of the kube adapter goes false — the moment
//! a renewal finds another holder, or when no renewal has succeeded for `renewDeadline`
//! (shorter than `leaseDuration`, so the old leader has stopped before anyone else may start).
//! A leader that shuts down cleanly releases the Lease so a successor need not wait.
//!
//! Why not a crate: `kube-leader-election` and `kube-lease-manager` track older kube-rs major
//! versions; the algorithm is small enough to own (docs/decisions.md).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// The Lease `nodewright run` replicas compete for (in the reconciler's namespace).
pub const LEASE_NAME: &str = "nodewright-gitops-leader";

/// Timing and identity of a candidate.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Lease name.
    pub name: String,
    /// This replica's identity (pod name, or host and pid).
    pub identity: String,
    /// How long a silent holder keeps the Lease before others may take it.
    pub lease_duration: Duration,
    /// How long the leader keeps writing without a successful renewal.
    pub renew_deadline: Duration,
    /// How often to try to acquire or renew.
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// client-go's defaults: 15 s lease, 10 s renew deadline, 2 s retry period.
    pub fn new(namespace: &str, name: &str, identity: &str) -> Self {
        LeaseConfig {
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity: identity.to_string(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// The last record seen and when it was first seen locally.
struct Observed {
    holder: Option<String>,
    renew_time: Option<MicroTime>,
    at: Instant,
}

/// One candidate for the Lease.
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaseConfig,
    observed: Option<Observed>,
}

fn now() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

fn conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

impl LeaderElector {
    /// A candidate using `client`.
    pub fn new(client: Client, config: LeaseConfig) -> Self {
        LeaderElector {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: None,
        }
    }

    fn spec(&self, previous: Option<&LeaseSpec>) -> LeaseSpec {
        let me = Some(self.config.identity.clone());
        let ours = previous.is_some_and(|p| p.holder_identity == me);
        let transitions = previous.and_then(|p| p.lease_transitions).unwrap_or(0);
        LeaseSpec {
            holder_identity: me,
            lease_duration_seconds: Some(self.config.lease_duration.as_secs().max(1) as i32),
            acquire_time: if ours {
                previous.and_then(|p| p.acquire_time.clone())
            } else {
                Some(now())
            },
            renew_time: Some(now()),
            lease_transitions: Some(if ours || previous.is_none() {
                transitions
            } else {
                transitions + 1
            }),
            ..LeaseSpec::default()
        }
    }

    /// One attempt to acquire or renew. `Ok(true)` when this candidate holds the Lease
    /// afterwards; `Ok(false)` when someone else does (or won a race).
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let Some(current) = self.api.get_opt(&self.config.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(None)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => {
                    self.observed = None;
                    Ok(true)
                }
                Err(e) if conflict(&e) => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let changed = self
            .observed
            .as_ref()
            .is_none_or(|o| o.holder != spec.holder_identity || o.renew_time != spec.renew_time);
        if changed {
            self.observed = Some(Observed {
                holder: spec.holder_identity.clone(),
                renew_time: spec.renew_time.clone(),
                at: Instant::now(),
            });
        }
        let mine = holder.as_deref() == Some(self.config.identity.as_str());
        if let Some(other) = holder.as_deref()
            && !mine
        {
            let duration = spec
                .lease_duration_seconds
                .map(|s| Duration::from_secs(s.max(0) as u64))
                .unwrap_or(self.config.lease_duration);
            let seen = self
                .observed
                .as_ref()
                .map(|o| o.at)
                .unwrap_or_else(Instant::now);
            if seen.elapsed() < duration {
                tracing::debug!(holder = other, "the lease is held by another replica");
                return Ok(false);
            }
        }
        let mut lease = current.clone();
        lease.spec = Some(self.spec(Some(&spec)));
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if conflict(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease up if this candidate holds it (a successor can take it at once).
    pub async fn release(&mut self) -> Result<(), kube::Error> {
        let Some(current) = self.api.get_opt(&self.config.name).await? else {
            return Ok(());
        };
        let spec = current.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        let mut lease = current;
        lease.spec = Some(LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            renew_time: Some(now()),
            ..spec
        });
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if conflict(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Runs the election in the background, keeping `writes_allowed` true exactly while this
    /// candidate leads. The flag is cleared first, so nothing is written before the Lease is
    /// held.
    pub fn spawn(mut self, writes_allowed: Arc<AtomicBool>) -> LeaderHandle {
        writes_allowed.store(false, Ordering::SeqCst);
        let stop = Arc::new(Notify::new());
        let flag = writes_allowed.clone();
        let stopping = stop.clone();
        let task = tokio::spawn(async move {
            let mut last_renewal: Option<Instant> = None;
            loop {
                let leading = flag.load(Ordering::SeqCst);
                // A leader's attempt may not outlive its renew deadline: a hanging request
                // must not keep writes enabled.
                let budget = match (leading, last_renewal) {
                    (true, Some(at)) => self.config.renew_deadline.saturating_sub(at.elapsed()),
                    _ => self.config.renew_deadline,
                };
                let attempt = tokio::time::timeout(budget, self.try_acquire_or_renew()).await;
                match attempt {
                    Ok(Ok(true)) => {
                        if !leading {
                            tracing::info!(identity = %self.config.identity, lease = %self.config.name, "became the leader");
                        }
                        last_renewal = Some(Instant::now());
                        flag.store(true, Ordering::SeqCst);
                    }
                    Ok(Ok(false)) => {
                        if leading {
                            tracing::warn!(identity = %self.config.identity, "lost the lease; writes stop now");
                        }
                        flag.store(false, Ordering::SeqCst);
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(error = %super::kube::client_error_text(&e), "lease renewal failed");
                        if last_renewal.is_none_or(|at| at.elapsed() >= self.config.renew_deadline)
                        {
                            flag.store(false, Ordering::SeqCst);
                        }
                    }
                    Err(_) => {
                        tracing::warn!("lease renewal timed out; writes stop now");
                        flag.store(false, Ordering::SeqCst);
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(self.config.retry_period) => {}
                    _ = stopping.notified() => {
                        flag.store(false, Ordering::SeqCst);
                        if let Err(e) = self.release().await {
                            tracing::warn!(error = %super::kube::client_error_text(&e), "could not release the lease");
                        }
                        return;
                    }
                }
            }
        });
        LeaderHandle {
            task,
            stop,
            writes_allowed,
        }
    }
}

/// A running election.
pub struct LeaderHandle {
    task: JoinHandle<()>,
    stop: Arc<Notify>,
    writes_allowed: Arc<AtomicBool>,
}

impl LeaderHandle {
    /// Whether this replica leads now.
    pub fn is_leader(&self) -> bool {
        self.writes_allowed.load(Ordering::SeqCst)
    }

    /// Stops writing, releases the Lease and ends the election.
    pub async fn step_down(self) {
        self.stop.notify_one();
        let _ = self.task.await;
    }

    /// Ends the election without releasing the Lease (as a crash would); writes stop.
    pub fn abandon(self) {
        self.task.abort();
        self.writes_allowed.store(false, Ordering::SeqCst);
    }
}
