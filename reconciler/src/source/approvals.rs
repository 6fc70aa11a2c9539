//! Which approvals are in force (docs/approvals.md). A value of a NodeWright's
//! `approved-batches` counts only for the rollout it was given in: when the commit that last
//! changed that value is the commit that last changed the NodeWright's `spec`, or a later one
//! on the tracked branch. A value left over from an earlier rollout approves nothing.
//!
//! Walking back from the commit in force, the first older commit that declares the NodeWright
//! differently decides: if the approval value differs there, it was set at or after the spec's
//! last change and counts; if only the spec differs, the value is older than the rollout. A
//! NodeWright unchanged since the branch's first commit was approved in the commit that made
//! it; a walk that stops short of that (its limit, a shallow clone) approves nothing.

use std::collections::BTreeMap;

use gix::ObjectId;
use nodewright_schema::NodeWright;
use nodewright_schema::approvals::{self, ApprovedBatches};

use super::desired::{ReadOptions, load_commit};
use super::repo::{GitRepo, HistoryEnd, RepoError};
use crate::settings::constants::APPROVAL_HISTORY_COMMITS;

/// One step back along the tracked branch.
#[derive(Clone, Debug)]
pub enum Older {
    /// The NodeWrights an older commit declares.
    Commit(Vec<NodeWright>),
    /// An older commit whose manifests do not all read: it was never in force and decides
    /// nothing.
    Unreadable,
    /// The branch's first commit has been passed: nothing older exists. A history that ends
    /// without it stopped short.
    Root,
}

/// The approvals in force for each NodeWright of `head` (the commit in force), given the
/// branch's older commits newest first. Only NodeWrights with a readable, non-empty
/// `approved-batches` appear.
pub fn in_force(
    head: &[NodeWright],
    older: impl IntoIterator<Item = Older>,
) -> BTreeMap<String, ApprovedBatches> {
    let mut open: Vec<(&NodeWright, ApprovedBatches)> = head
        .iter()
        .filter_map(|nw| {
            let approved = approvals::approved_value(nw.metadata.annotations.as_ref())?.ok()?;
            (!approved.is_empty()).then_some((nw, approved))
        })
        .collect();
    let mut out = BTreeMap::new();
    for step in older {
        if open.is_empty() {
            break;
        }
        let declared = match step {
            Older::Commit(declared) => declared,
            Older::Unreadable => continue,
            Older::Root => {
                for (nw, approved) in open.drain(..) {
                    out.insert(nw.name().to_string(), approved);
                }
                break;
            }
        };
        open.retain(|(nw, approved)| {
            let then = declared.iter().find(|d| d.name() == nw.name());
            let then_approved = then
                .and_then(|d| approvals::approved_value(d.metadata.annotations.as_ref()))
                .and_then(Result::ok);
            if then_approved.as_ref() != Some(approved) {
                out.insert(nw.name().to_string(), approved.clone());
                return false;
            }
            // Same approval: a different spec there means the approval is older than the
            // rollout; the same spec sends the walk further back.
            then.is_some_and(|d| d.spec == nw.spec)
        });
    }
    out
}

/// [`in_force`] over a Git repository: the first-parent history of `commit` (at most
/// [`APPROVAL_HISTORY_COMMITS`] commits back), each older commit read like the commit itself.
/// Nothing is read when no NodeWright carries an approval.
pub fn from_git(
    git: &GitRepo,
    commit: ObjectId,
    options: &ReadOptions,
    head: &[NodeWright],
) -> Result<BTreeMap<String, ApprovedBatches>, RepoError> {
    let approving = head.iter().any(|nw| {
        nw.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(nodewright_schema::keys::APPROVED_BATCHES))
    });
    if !approving {
        return Ok(BTreeMap::new());
    }
    let (ids, end) = git.first_parent_history(commit, APPROVAL_HISTORY_COMMITS + 1)?;
    let mut failure = None;
    let older = ids
        .into_iter()
        .skip(1)
        .map_while(|id| match load_commit(git, id, options) {
            Ok((loaded, violations)) => Some(
                if loaded.errors.is_empty()
                    && loaded.undecodable.is_empty()
                    && violations.is_empty()
                {
                    Older::Commit(loaded.nodewrights.into_iter().map(|s| s.object).collect())
                } else {
                    Older::Unreadable
                },
            ),
            Err(e) => {
                failure = Some(e);
                None
            }
        })
        .chain((end == HistoryEnd::Root).then_some(Older::Root));
    let approved = in_force(head, older);
    match failure {
        Some(e) => Err(e),
        None => Ok(approved),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nw(version: &str, approved: Option<&str>) -> NodeWright {
        let mut yaml = String::from(
            "apiVersion: nodewright.nvidia.com/v1alpha1\nkind: NodeWright\nmetadata:\n  name: driver\n",
        );
        if let Some(a) = approved {
            yaml.push_str(&format!(
                "  annotations:\n    gitops.nodewright.nvidia.com/approved-batches: \"{a}\"\n"
            ));
        }
        yaml.push_str(&format!(
            "spec:\n  packages:\n    driver: {{version: {version}, image: example/driver}}\n"
        ));
        serde_yaml::from_str(&yaml).unwrap()
    }

    fn verdict(head: NodeWright, older: Vec<Older>) -> Option<ApprovedBatches> {
        in_force(&[head], older).remove("driver")
    }

    #[test]
    fn an_approval_given_after_the_change_counts() {
        let got = verdict(
            nw("2.0.0", Some("production=2")),
            vec![
                Older::Commit(vec![nw("2.0.0", None)]),
                Older::Commit(vec![nw("1.0.0", None)]),
            ],
        );
        assert_eq!(got.unwrap().get("production"), Some(&2));
    }

    #[test]
    fn an_approval_given_in_the_same_commit_as_the_change_counts() {
        let got = verdict(
            nw("2.0.0", Some("production=2")),
            vec![Older::Commit(vec![nw("1.0.0", None)])],
        );
        assert!(got.is_some());
    }

    #[test]
    fn an_approval_left_over_from_an_earlier_rollout_approves_nothing() {
        let got = verdict(
            nw("2.0.0", Some("production=2")),
            vec![
                Older::Commit(vec![nw("1.0.0", Some("production=2"))]),
                Older::Commit(vec![nw("1.0.0", None)]),
            ],
        );
        assert_eq!(got, None);
    }

    #[test]
    fn a_changed_value_counts_again_and_unreadable_commits_decide_nothing() {
        let got = verdict(
            nw("2.0.0", Some("production=3")),
            vec![
                Older::Unreadable,
                Older::Commit(vec![nw("2.0.0", Some("production=2"))]),
                Older::Commit(vec![nw("1.0.0", Some("production=2"))]),
            ],
        );
        assert_eq!(got.unwrap().get("production"), Some(&3));
    }

    #[test]
    fn history_that_ends_at_the_first_commit_or_stops_short() {
        let head = || nw("1.0.0", Some("production=2"));
        let same = || Older::Commit(vec![head()]);
        assert!(verdict(head(), vec![same(), Older::Root]).is_some());
        assert!(verdict(head(), vec![Older::Root]).is_some());
        assert_eq!(verdict(head(), vec![same(), same()]), None);
    }

    #[test]
    fn a_nodewright_new_in_this_commit_counts_its_approval() {
        let got = verdict(nw("1.0.0", Some("canary=2")), vec![Older::Commit(vec![])]);
        assert!(got.is_some());
    }
}
