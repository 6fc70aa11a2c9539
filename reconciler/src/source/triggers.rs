//! Change triggers: what makes the controller fetch and look at the repository at once.
//! Filesystem events on a local repository's refs and forge webhooks send a [`Trigger`] into
//! one channel the controller consumes; the poll interval and its jitter ([`JitteredDelays`])
//! are the loop's fetch cadence (`source::cadence`). Triggers carry no
//! state the controller must trust: each one only means "fetch and re-read now" (the loop is
//! level-triggered), so dropping a trigger while another is queued loses nothing.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Which forge sent a webhook.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Forge {
    /// GitHub (`X-Hub-Signature-256`).
    GitHub,
    /// GitLab (`X-Gitlab-Token`).
    GitLab,
}

/// Why the controller should look at the repository now (the poll interval is the loop's own
/// cadence, `source::cadence`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// A ref of the tracked branch changed in the local repository.
    RefChanged {
        /// The file that changed (`refs/heads/<branch>` or `packed-refs`).
        path: PathBuf,
    },
    /// A verified push webhook arrived: fetch immediately.
    Webhook {
        /// Who sent it.
        forge: Forge,
        /// The pushed ref (`refs/heads/main`), when the payload says.
        reference: Option<String>,
        /// The new commit, when the payload says.
        after: Option<String>,
    },
}

/// Create the trigger channel. A small capacity is right: triggers coalesce (one queued
/// trigger already guarantees a fresh look).
pub fn channel(capacity: usize) -> (mpsc::Sender<Trigger>, mpsc::Receiver<Trigger>) {
    mpsc::channel(capacity.max(1))
}

/// Send without waiting: when the channel is full a look is already pending, which covers
/// this change too.
pub fn offer(tx: &mpsc::Sender<Trigger>, trigger: Trigger) -> bool {
    match tx.try_send(trigger) {
        Ok(()) | Err(mpsc::error::TrySendError::Full(_)) => true,
        Err(mpsc::error::TrySendError::Closed(_)) => false,
    }
}

/// Poll timing: a base interval spread by ± `jitter` so many reconcilers polling one forge do
/// not synchronize.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PollConfig {
    /// Base interval (default 30 s).
    pub interval: Duration,
    /// Relative spread, 0.0–1.0 (default 0.1 = ±10 %).
    pub jitter: f64,
}

impl Default for PollConfig {
    fn default() -> Self {
        PollConfig {
            interval: Duration::from_secs(30),
            jitter: 0.1,
        }
    }
}

/// Delays of a jittered poll, from a seeded generator (deterministic in tests).
#[derive(Clone, Debug)]
pub struct JitteredDelays {
    config: PollConfig,
    rng: SmallRng,
}

impl JitteredDelays {
    /// Delays for `config` from `seed`.
    pub fn new(config: PollConfig, seed: u64) -> Self {
        JitteredDelays {
            config,
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    /// The next delay, within `interval × (1 ± jitter)`.
    pub fn next_delay(&mut self) -> Duration {
        let jitter = self.config.jitter.clamp(0.0, 1.0);
        if jitter == 0.0 {
            return self.config.interval;
        }
        let factor = 1.0 + self.rng.random_range(-jitter..=jitter);
        self.config.interval.mul_f64(factor)
    }
}

/// A seed for production use: differs between processes and restarts (tests pass their own).
pub fn process_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos ^ (u64::from(std::process::id()) << 32)
}

/// Watches a local repository's refs and sends [`Trigger::RefChanged`] when the tracked
/// branch moves. Work-tree edits, index updates and object writes are ignored. Dropping the
/// watcher stops it.
pub struct RefWatcher {
    _watcher: notify::RecommendedWatcher,
    task: JoinHandle<()>,
}

impl Drop for RefWatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Why a ref watcher could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot watch {path} for ref changes: {source}")]
pub struct WatchError {
    /// The directory.
    pub path: PathBuf,
    /// notify's error.
    #[source]
    pub source: notify::Error,
}

/// Whether a changed file means the tracked branch may have moved: its loose ref (or the lock
/// file git renames onto it) or `packed-refs`.
pub fn is_branch_ref_change(git_dir: &Path, branch: &str, changed: &Path) -> bool {
    let loose = git_dir.join("refs").join("heads").join(branch);
    let packed = git_dir.join("packed-refs");
    let candidates = [
        loose.clone(),
        loose.with_file_name(format!(
            "{}.lock",
            loose
                .file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default()
        )),
        packed,
    ];
    candidates.iter().any(|c| c == changed)
}

/// Start watching `git_dir` (the `.git` directory or a bare repository) for moves of
/// `branch`; bursts of events within `debounce` become one trigger.
pub fn watch_refs(
    git_dir: &Path,
    branch: &str,
    debounce: Duration,
    tx: mpsc::Sender<Trigger>,
) -> Result<RefWatcher, WatchError> {
    use notify::{RecursiveMode, Watcher};

    // notify may report canonical paths; compare against the canonical directory.
    let git_dir = git_dir
        .canonicalize()
        .unwrap_or_else(|_| git_dir.to_path_buf());
    let (raw_tx, mut raw_rx) = mpsc::unbounded_channel::<PathBuf>();
    let filter_dir = git_dir.clone();
    let filter_branch = branch.to_owned();
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        let Ok(event) = res else { return };
        // Reads (git resolving the branch) are not changes.
        if matches!(event.kind, notify::EventKind::Access(_)) {
            return;
        }
        for path in event.paths {
            if is_branch_ref_change(&filter_dir, &filter_branch, &path) {
                // The receiver lives as long as the watcher; a send error means shutdown.
                let _ = raw_tx.send(path);
            }
        }
    })
    .map_err(|source| WatchError {
        path: git_dir.clone(),
        source,
    })?;
    let watch = |w: &mut notify::RecommendedWatcher, p: &Path, mode| {
        w.watch(p, mode).map_err(|source| WatchError {
            path: p.to_path_buf(),
            source,
        })
    };
    // packed-refs lives at the top; loose branch refs below refs/heads (branch names may
    // contain `/`, hence recursive). objects/ and the work tree are never watched.
    watch(&mut watcher, &git_dir, RecursiveMode::NonRecursive)?;
    let heads = git_dir.join("refs").join("heads");
    std::fs::create_dir_all(&heads).map_err(|e| WatchError {
        path: heads.clone(),
        source: notify::Error::io(e),
    })?;
    watch(&mut watcher, &heads, RecursiveMode::Recursive)?;

    let task = tokio::spawn(async move {
        while let Some(first) = raw_rx.recv().await {
            let mut last = first;
            // Absorb the rest of the burst (lock file, rename, packed-refs rewrite).
            loop {
                match tokio::time::timeout(debounce, raw_rx.recv()).await {
                    Ok(Some(p)) => last = p,
                    Ok(None) => return,
                    Err(_) => break,
                }
            }
            let path = if last.extension().is_some_and(|e| e == "lock") {
                last.with_extension("")
            } else {
                last
            };
            if !offer(&tx, Trigger::RefChanged { path }) {
                return;
            }
        }
    });
    Ok(RefWatcher {
        _watcher: watcher,
        task,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_bounds_and_is_reproducible() {
        let config = PollConfig::default();
        let mut a = JitteredDelays::new(config, 7);
        let mut b = JitteredDelays::new(config, 7);
        let da: Vec<Duration> = (0..200).map(|_| a.next_delay()).collect();
        let db: Vec<Duration> = (0..200).map(|_| b.next_delay()).collect();
        assert_eq!(da, db, "same seed, same delays");
        assert!(
            da.iter()
                .all(|d| *d >= Duration::from_secs(27) && *d <= Duration::from_secs(33))
        );
        assert!(da.iter().any(|d| *d != da[0]), "delays vary");
        let mut c = JitteredDelays::new(config, 8);
        assert_ne!(da, (0..200).map(|_| c.next_delay()).collect::<Vec<_>>());
        let mut none = JitteredDelays::new(
            PollConfig {
                jitter: 0.0,
                ..config
            },
            1,
        );
        assert_eq!(none.next_delay(), Duration::from_secs(30));
    }

    #[test]
    fn only_the_tracked_branch_and_packed_refs_count() {
        let g = Path::new("/repo/.git");
        assert!(is_branch_ref_change(
            g,
            "main",
            Path::new("/repo/.git/refs/heads/main")
        ));
        assert!(is_branch_ref_change(
            g,
            "main",
            Path::new("/repo/.git/refs/heads/main.lock")
        ));
        assert!(is_branch_ref_change(
            g,
            "main",
            Path::new("/repo/.git/packed-refs")
        ));
        assert!(is_branch_ref_change(
            g,
            "team/prod",
            Path::new("/repo/.git/refs/heads/team/prod")
        ));
        assert!(!is_branch_ref_change(
            g,
            "main",
            Path::new("/repo/.git/refs/heads/feature")
        ));
        assert!(!is_branch_ref_change(
            g,
            "main",
            Path::new("/repo/.git/index")
        ));
        assert!(!is_branch_ref_change(
            g,
            "main",
            Path::new("/repo/fleet/gpu.yaml")
        ));
    }
}
