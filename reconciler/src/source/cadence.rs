//! When the remote is fetched, independent of how often passes run (issue 24): every poll
//! interval (jittered, so many reconcilers do not fetch from one forge in step) in every state
//! of the rollout, at once when a webhook or a local ref change asks for it, and after a failure
//! only once an exponential, jittered backoff has passed. Time is an input (the cluster's
//! clock), so the simulator runs the same cadence in virtual time.

use std::time::Duration;

use jiff::Timestamp;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

use super::triggers::{JitteredDelays, PollConfig};

/// The first retry after a failure waits this long (or the poll interval, when shorter).
pub const BACKOFF_BASE: Duration = Duration::from_secs(10);
/// Retries never wait longer than this (or the poll interval, when longer).
pub const BACKOFF_CAP: Duration = Duration::from_secs(300);
/// Relative spread of a backoff delay (±).
const BACKOFF_JITTER: f64 = 0.2;

/// A failed attempt, as the backoff saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Wait this long before the next attempt.
    pub retry_after: Duration,
    /// Failed attempts in this episode, this one included.
    pub attempts: u32,
}

impl Failure {
    /// Whether this failure starts an episode (the one that deserves a log line).
    pub fn opens_episode(&self) -> bool {
        self.attempts == 1
    }
}

/// Exponential backoff with jitter over one failure episode: `base × 2^(n-1)`, capped, spread
/// by ±20 %; a success ends the episode.
#[derive(Clone, Debug)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    rng: SmallRng,
    failures: u32,
}

impl Backoff {
    /// A backoff from `base` up to `cap`, jittered from `seed`.
    pub fn new(base: Duration, cap: Duration, seed: u64) -> Self {
        Backoff {
            base,
            cap: cap.max(base),
            rng: SmallRng::seed_from_u64(seed),
            failures: 0,
        }
    }

    /// Records a failed attempt.
    pub fn failed(&mut self) -> Failure {
        self.failures = self.failures.saturating_add(1);
        let doublings = (self.failures - 1).min(20);
        let delay = self.base.saturating_mul(1 << doublings).min(self.cap);
        let factor = 1.0 + self.rng.random_range(-BACKOFF_JITTER..=BACKOFF_JITTER);
        Failure {
            retry_after: delay.mul_f64(factor),
            attempts: self.failures,
        }
    }

    /// Records a success; returns the number of failed attempts of the episode it ends, if
    /// one was open.
    pub fn succeeded(&mut self) -> Option<u32> {
        let failures = std::mem::take(&mut self.failures);
        (failures > 0).then_some(failures)
    }

    /// Whether a failure episode is open.
    pub fn failing(&self) -> bool {
        self.failures > 0
    }
}

/// The fetch schedule of one remote.
#[derive(Clone, Debug)]
pub struct FetchCadence {
    poll: JitteredDelays,
    backoff: Backoff,
    next: Option<Timestamp>,
}

impl FetchCadence {
    /// Fetch every `interval` (±10 %), backing off from failures; the first fetch is due at once.
    pub fn new(interval: Duration, seed: u64) -> Self {
        FetchCadence {
            poll: JitteredDelays::new(
                PollConfig {
                    interval,
                    ..PollConfig::default()
                },
                seed,
            ),
            backoff: Backoff::new(
                BACKOFF_BASE.min(interval),
                BACKOFF_CAP.max(interval),
                seed.rotate_left(17),
            ),
            next: None,
        }
    }

    /// Whether a fetch is due at `now`.
    pub fn due(&self, now: Timestamp) -> bool {
        self.next.is_none_or(|next| now >= next)
    }

    /// A webhook or a ref change asks for a fetch now.
    pub fn request(&mut self) {
        self.next = None;
    }

    /// How long from `now` until the next fetch is due (zero when due).
    pub fn until_due(&self, now: Timestamp) -> Duration {
        self.next
            .and_then(|next| Duration::try_from(now.duration_until(next)).ok())
            .unwrap_or(Duration::ZERO)
    }

    /// The fetch at `now` succeeded: the next one is a poll interval away. Returns the failed
    /// attempts of the episode this success ends, if any.
    pub fn succeeded(&mut self, now: Timestamp) -> Option<u32> {
        self.next = Some(after(now, self.poll.next_delay()));
        self.backoff.succeeded()
    }

    /// Whether the last fetch failed (a failure episode is open).
    pub fn failing(&self) -> bool {
        self.backoff.failing()
    }

    /// The fetch at `now` failed: the next one waits out the backoff.
    pub fn failed(&mut self, now: Timestamp) -> Failure {
        let failure = self.backoff.failed();
        self.next = Some(after(now, failure.retry_after));
        failure
    }
}

/// `now + delay`, saturating at the end of representable time.
pub fn after(now: Timestamp, delay: Duration) -> Timestamp {
    now.checked_add(delay).unwrap_or(Timestamp::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + seconds).expect("a 2026 timestamp")
    }

    #[test]
    fn backoff_doubles_within_its_jitter_up_to_the_cap_and_a_success_ends_the_episode() {
        let mut backoff = Backoff::new(Duration::from_secs(10), Duration::from_secs(300), 3);
        let failures: Vec<Failure> = (0..8).map(|_| backoff.failed()).collect();
        let nominal = [10, 20, 40, 80, 160, 300, 300, 300];
        for (failure, nominal) in failures.iter().zip(nominal) {
            let nominal = Duration::from_secs(nominal);
            assert!(
                failure.retry_after >= nominal.mul_f64(0.8)
                    && failure.retry_after <= nominal.mul_f64(1.2),
                "{failure:?} is within ±20 % of {nominal:?}"
            );
        }
        let opening: Vec<bool> = failures.iter().map(Failure::opens_episode).collect();
        assert_eq!(
            opening,
            [true, false, false, false, false, false, false, false]
        );
        assert_eq!(backoff.succeeded(), Some(8));
        assert_eq!(backoff.succeeded(), None, "recovery is reported once");
        assert!(backoff.failed().opens_episode(), "a new episode opens");
    }

    #[test]
    fn a_fetch_is_due_at_once_then_every_interval_and_at_once_on_request() {
        let mut cadence = FetchCadence::new(Duration::from_secs(30), 9);
        assert!(cadence.due(at(0)));
        assert_eq!(cadence.succeeded(at(0)), None);
        assert!(!cadence.due(at(26)));
        let wait = cadence.until_due(at(0));
        assert!(wait >= Duration::from_secs(27) && wait <= Duration::from_secs(33));
        assert!(cadence.due(at(34)));
        cadence.request();
        assert!(cadence.due(at(1)), "a webhook does not wait for the poll");
        let failure = cadence.failed(at(1));
        assert!(failure.opens_episode());
        assert!(!cadence.due(at(7)), "a failure backs off");
        assert_eq!(cadence.succeeded(at(20)), Some(1));
    }
}
