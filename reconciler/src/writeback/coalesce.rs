//! When to make a status commit (ARCHITECTURE §4): only when the rendered status changed
//! materially, at most once per interval, except that terminal transitions (a NodeWright
//! becoming complete or erroring) flush at once. Pure: the caller passes the time.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use super::render::{StatusDocument, StatusFile, digest};

/// What the coalescer decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Nothing material changed since the last commit.
    Unchanged,
    /// Changed, but the interval has not elapsed: try again at this time.
    WaitUntil(Timestamp),
    /// Commit now.
    Commit,
}

/// Remembers the last committed status.
#[derive(Clone, Debug)]
pub struct Coalescer {
    interval: Duration,
    last_digest: Option<String>,
    last_commit_at: Option<Timestamp>,
    last_statuses: BTreeMap<String, String>,
}

impl Coalescer {
    /// A coalescer committing at most once per `interval`.
    pub fn new(interval: Duration) -> Self {
        Coalescer {
            interval,
            last_digest: None,
            last_commit_at: None,
            last_statuses: BTreeMap::new(),
        }
    }

    /// Starts from what the status branch already holds (after a restart), so an unchanged
    /// status is not committed again.
    pub fn seeded(interval: Duration, files: &[StatusFile], docs: &[StatusDocument]) -> Self {
        let mut c = Coalescer::new(interval);
        c.last_digest = Some(digest(files));
        c.last_statuses = docs
            .iter()
            .map(|d| (d.nodewright.clone(), d.status.clone()))
            .collect();
        c
    }

    /// Decides for the freshly rendered files and documents.
    pub fn decide(
        &self,
        now: Timestamp,
        files: &[StatusFile],
        docs: &[StatusDocument],
    ) -> Decision {
        if self.last_digest.as_deref() == Some(digest(files).as_str()) {
            return Decision::Unchanged;
        }
        self.decide_changed(now, docs)
    }

    /// What to do with files known to differ from the last commit: commit now, or wait for
    /// the interval unless a NodeWright just became complete or erroring.
    pub fn decide_changed(&self, now: Timestamp, docs: &[StatusDocument]) -> Decision {
        let terminal_transition = docs.iter().any(|d| {
            matches!(d.status.as_str(), "complete" | "erroring")
                && self.last_statuses.get(&d.nodewright) != Some(&d.status)
        });
        match self.last_commit_at {
            Some(at) if !terminal_transition => {
                let due = at
                    + jiff::SignedDuration::try_from(self.interval)
                        .unwrap_or(jiff::SignedDuration::ZERO);
                if now < due {
                    Decision::WaitUntil(due)
                } else {
                    Decision::Commit
                }
            }
            _ => Decision::Commit,
        }
    }

    /// Records that these files were committed at `now`.
    pub fn committed(&mut self, now: Timestamp, files: &[StatusFile], docs: &[StatusDocument]) {
        self.last_digest = Some(digest(files));
        self.last_commit_at = Some(now);
        self.last_statuses = docs
            .iter()
            .map(|d| (d.nodewright.clone(), d.status.clone()))
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writeback::render::StatusFile;

    fn doc(status: &str) -> StatusDocument {
        StatusDocument {
            nodewright: "tuning".into(),
            source_commit: None,
            generation: None,
            observed_generation: None,
            status: status.into(),
            complete_nodes: "0/1".into(),
            nodes_in_progress: 0,
            packages: String::new(),
            node_counts: BTreeMap::new(),
            node_status: BTreeMap::new(),
            conditions: BTreeMap::new(),
            compartments: BTreeMap::new(),
            pending_approvals: Vec::new(),
            nodes: BTreeMap::new(),
            nodes_omitted: 0,
        }
    }

    fn file(content: &str) -> Vec<StatusFile> {
        vec![StatusFile {
            path: "status/tuning.yaml".into(),
            content: content.into(),
        }]
    }

    #[test]
    fn commits_changes_at_most_once_per_interval_but_flushes_terminal_transitions() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let mut c = Coalescer::new(Duration::from_secs(30));
        assert_eq!(
            c.decide(t0, &file("a"), &[doc("in_progress")]),
            Decision::Commit
        );
        c.committed(t0, &file("a"), &[doc("in_progress")]);
        assert_eq!(
            c.decide(t0, &file("a"), &[doc("in_progress")]),
            Decision::Unchanged
        );
        let t10 = t0 + jiff::SignedDuration::from_secs(10);
        assert_eq!(
            c.decide(t10, &file("b"), &[doc("in_progress")]),
            Decision::WaitUntil(t0 + jiff::SignedDuration::from_secs(30))
        );
        assert_eq!(
            c.decide(t10, &file("c"), &[doc("complete")]),
            Decision::Commit
        );
        let t31 = t0 + jiff::SignedDuration::from_secs(31);
        assert_eq!(
            c.decide(t31, &file("b"), &[doc("in_progress")]),
            Decision::Commit
        );
    }
}
