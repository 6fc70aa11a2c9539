//! Approval gates: a rollout's further batches wait for an approval recorded in Git (this
//! project's annotations `gitops.nodewright.nvidia.com/approval-required` and
//! `…/approved-batches` on a NodeWright, docs/approvals.md).
//!
//! `approval-required` names the gated compartments (`canary,production`, or `*` for all).
//! In a gated compartment batch 1 needs no approval — merging the change approved it — and
//! batch k ≥ 2 starts only once `approved-batches` gives that compartment N ≥ k
//! (`production=3,canary=2`). Whether a value of `approved-batches` counts for the rollout in
//! force is decided from Git history by the source; this module only reads values.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::keys::{APPROVAL_REQUIRED, APPROVED_BATCHES};

/// Compartment name → the highest batch approved.
pub type ApprovedBatches = BTreeMap<String, u32>;

/// The form `approval-required` must have, shown in its errors.
pub const REQUIRED_FORM: &str =
    "approval-required is `*` or compartment names separated by `,`, e.g. \"canary,production\"";
/// The form `approved-batches` must have, shown in its errors.
pub const APPROVED_FORM: &str = "approved-batches is `COMPARTMENT=N` entries separated by `,` with N ≥ 1, e.g. \"production=3,canary=2\"";

/// Why an approval annotation cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApprovalError {
    /// `approval-required` is malformed.
    #[error("{value:?}: {problem}; {REQUIRED_FORM}")]
    Required {
        /// The whole value.
        value: String,
        /// What is wrong with it.
        problem: String,
    },
    /// `approved-batches` is malformed.
    #[error("{value:?}: {problem}; {APPROVED_FORM}")]
    Approved {
        /// The whole value.
        value: String,
        /// What is wrong with it.
        problem: String,
    },
}

/// The compartments whose batches after the first need an approval.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gated {
    /// `*`: every compartment, `__default__` included.
    All,
    /// The named compartments.
    Only(BTreeSet<String>),
}

impl Gated {
    /// Reads an `approval-required` value.
    pub fn parse(value: &str) -> Result<Gated, ApprovalError> {
        let fail = |problem: String| ApprovalError::Required {
            value: value.to_string(),
            problem,
        };
        if value.trim() == "*" {
            return Ok(Gated::All);
        }
        let mut names = BTreeSet::new();
        for part in value.split(',') {
            let name = part.trim();
            if name.is_empty() {
                return Err(fail("an empty compartment name".into()));
            }
            if name == "*" {
                return Err(fail(
                    "`*` stands alone, it cannot be listed with names".into(),
                ));
            }
            if name.contains('=') {
                return Err(fail(format!(
                    "{name:?} looks like an approval; approvals go in {APPROVED_BATCHES}"
                )));
            }
            if !names.insert(name.to_string()) {
                return Err(fail(format!("{name:?} is listed twice")));
            }
        }
        Ok(Gated::Only(names))
    }

    /// Whether a compartment is gated.
    pub fn covers(&self, compartment: &str) -> bool {
        match self {
            Gated::All => true,
            Gated::Only(names) => names.contains(compartment),
        }
    }

    /// The compartments named explicitly (none for `*`).
    pub fn named(&self) -> impl Iterator<Item = &str> {
        let names = match self {
            Gated::All => None,
            Gated::Only(names) => Some(names),
        };
        names.into_iter().flatten().map(String::as_str)
    }
}

/// Reads an `approved-batches` value. An empty value approves nothing.
pub fn parse_approved(value: &str) -> Result<ApprovedBatches, ApprovalError> {
    let fail = |problem: String| ApprovalError::Approved {
        value: value.to_string(),
        problem,
    };
    let mut out = ApprovedBatches::new();
    if value.trim().is_empty() {
        return Ok(out);
    }
    for part in value.split(',') {
        let part = part.trim();
        let Some((name, n)) = part.split_once('=') else {
            return Err(fail(format!("{part:?} has no `=N`")));
        };
        let (name, n) = (name.trim(), n.trim());
        if name.is_empty() {
            return Err(fail(format!("{part:?} names no compartment")));
        }
        let batch: u32 = n
            .parse()
            .map_err(|_| fail(format!("{n:?} (for {name:?}) is not a batch number")))?;
        if batch < 1 {
            return Err(fail(format!("{name}={batch}: batches are numbered from 1")));
        }
        if out.insert(name.to_string(), batch).is_some() {
            return Err(fail(format!("{name:?} is approved twice")));
        }
    }
    Ok(out)
}

/// Renders approvals as an `approved-batches` value (compartments in name order).
pub fn render_approved(approved: &ApprovedBatches) -> String {
    approved
        .iter()
        .map(|(c, n)| format!("{c}={n}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The `approved-batches` value that approves `batch` of `compartment` on top of `current`
/// (a value that cannot be read is replaced).
pub fn approving(current: Option<&str>, compartment: &str, batch: u32) -> String {
    let mut approved = current
        .and_then(|v| parse_approved(v).ok())
        .unwrap_or_default();
    approved.insert(compartment.to_string(), batch);
    render_approved(&approved)
}

/// The gate declared on a NodeWright: `None` without `approval-required`.
pub fn declared(
    annotations: Option<&BTreeMap<String, String>>,
) -> Option<Result<Gated, ApprovalError>> {
    annotations?.get(APPROVAL_REQUIRED).map(|v| Gated::parse(v))
}

/// The `approved-batches` value of a NodeWright, read (`None` when absent).
pub fn approved_value(
    annotations: Option<&BTreeMap<String, String>>,
) -> Option<Result<ApprovedBatches, ApprovalError>> {
    annotations?
        .get(APPROVED_BATCHES)
        .map(|v| parse_approved(v))
}

/// One batch waiting for its approval, with the results so far. Its Display is the
/// `AwaitingApproval` message part for the compartment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    /// The compartment.
    pub compartment: String,
    /// The batch that waits.
    pub batch: u32,
    /// Nodes of the compartment complete so far.
    pub complete: u32,
    /// Nodes of the compartment failed so far (`erroring`).
    pub failed: u32,
}

impl Pending {
    /// The `approved-batches` entry that approves this batch.
    pub fn approval(&self) -> String {
        format!("{}={}", self.compartment, self.batch)
    }
}

impl fmt::Display for Pending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "compartment {}: batch {} waits for approval ({} nodes complete, {} failed); approve with {APPROVED_BATCHES}: {}",
            self.compartment,
            self.batch,
            self.complete,
            self.failed,
            self.approval()
        )
    }
}

/// Separates the compartments in the `AwaitingApproval` message.
pub const PENDING_SEPARATOR: &str = "; ";

/// The per-compartment parts of an `AwaitingApproval` message (each a [`Pending`]'s text).
/// Every part starts with `compartment `, so a separator inside a part never splits it.
pub fn pending_parts(message: &str) -> impl Iterator<Item = &str> {
    let mut starts: Vec<usize> = message
        .match_indices(PENDING_SEPARATOR)
        .map(|(i, _)| i)
        .filter(|&i| message[i + PENDING_SEPARATOR.len()..].starts_with("compartment "))
        .collect();
    starts.push(message.len());
    let mut from = 0;
    starts
        .into_iter()
        .map(move |end| {
            let part = &message[from..end];
            from = (end + PENDING_SEPARATOR.len()).min(message.len());
            part
        })
        .filter(|part| !part.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn required_names_or_star() {
        assert_eq!(Gated::parse("*").unwrap(), Gated::All);
        let g = Gated::parse(" canary , production").unwrap();
        assert!(g.covers("canary") && g.covers("production") && !g.covers("__default__"));
        assert!(Gated::All.covers("__default__"));
        for bad in ["", "a,,b", "a,*", "a=2", "a,a"] {
            let e = Gated::parse(bad).unwrap_err().to_string();
            assert!(e.contains("approval-required is"), "{bad}: {e}");
        }
    }

    #[test]
    fn approved_entries() {
        let a = parse_approved("production=3, canary = 2").unwrap();
        assert_eq!(a.get("production"), Some(&3));
        assert_eq!(a.get("canary"), Some(&2));
        assert!(parse_approved("").unwrap().is_empty());
        for (bad, says) in [
            ("production", "no `=N`"),
            ("=3", "names no compartment"),
            ("production=0", "numbered from 1"),
            ("production=-1", "not a batch number"),
            ("production=x", "not a batch number"),
            ("a=1,a=2", "approved twice"),
            ("a=1,", "no `=N`"),
        ] {
            let e = parse_approved(bad).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("e.g."), "{bad}: {e}");
        }
    }

    #[test]
    fn approving_keeps_the_other_compartments() {
        assert_eq!(approving(None, "production", 2), "production=2");
        assert_eq!(
            approving(Some("canary=2,production=2"), "production", 3),
            "canary=2,production=3"
        );
        assert_eq!(approving(Some("garbage"), "canary", 2), "canary=2");
    }

    #[test]
    fn a_message_splits_into_its_compartments() {
        let a = Pending {
            compartment: "canary".into(),
            batch: 2,
            complete: 1,
            failed: 0,
        };
        let b = Pending {
            compartment: "production".into(),
            batch: 3,
            complete: 4,
            failed: 1,
        };
        let message = format!("{a}{PENDING_SEPARATOR}{b}");
        let parts: Vec<&str> = pending_parts(&message).collect();
        assert_eq!(parts, [a.to_string(), b.to_string()]);
    }

    #[test]
    fn a_pending_batch_says_how_to_approve_it() {
        let p = Pending {
            compartment: "production".into(),
            batch: 3,
            complete: 4,
            failed: 0,
        };
        assert_eq!(
            p.to_string(),
            "compartment production: batch 3 waits for approval (4 nodes complete, 0 failed); approve with gitops.nodewright.nvidia.com/approved-batches: production=3"
        );
    }
}
