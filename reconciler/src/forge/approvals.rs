//! Approval pull requests (`run --forge … --approval-prs`, docs/approvals.md): when a batch
//! of a gated compartment starts waiting, one pull/merge request against the tracked branch
//! carries the approval edit (`nodewright approve`'s commit, on the branch
//! `nodewright/approve/<nodewright>/<compartment>-<batch>`), so that merging it is the
//! approval. Its body follows the batch's results; it is closed with a comment once the batch
//! no longer waits (approved, started, or the rollout changed).
//!
//! [`plan`] decides, from the batches waiting and the requests open, what to open, update and
//! close; [`ApprovalRequests`] carries it out against the forge and the remote.

use std::collections::BTreeMap;

use nodewright_schema::NodeWright;
use nodewright_schema::approvals::pending_parts;
use nodewright_schema::keys::condition::{AWAITING_APPROVAL, READY};

use super::{Forge, ForgeError};
use crate::source::approval_commit::{self, Approval, BRANCH_PREFIX};
use crate::source::desired::ReadOptions;
use crate::source::repo::{GitRepo, RemoteSpec};
use crate::writeback::git::{Author, commit_branch_onto, push_branch};

/// The hidden first line of an approval request's body: which batch of which rollout (the
/// NodeWright's generation) it approves. A request whose rollout changed is replaced, not
/// edited, because its commit was reviewed for another spec.
const MARKER_PREFIX: &str = "<!-- nodewright-approval ";

/// A batch waiting for approval, as its request should read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    /// The batch.
    pub approval: Approval,
    /// The request's body (marker line first).
    pub body: String,
}

/// An open approval request on the forge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenRequest {
    /// Pull-request number (GitHub) or merge-request iid (GitLab).
    pub number: u64,
    /// Its source branch.
    pub branch: String,
    /// Its body as last written.
    pub body: String,
}

/// One thing to do on the forge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Push the approval branch and open a request from it.
    Open(Wanted),
    /// Rewrite an open request's body (the results changed).
    Update {
        /// The request.
        number: u64,
        /// Its branch.
        branch: String,
        /// The new body.
        body: String,
    },
    /// Comment why, then close.
    Close {
        /// The request.
        number: u64,
        /// Its branch.
        branch: String,
        /// The comment.
        comment: String,
    },
}

/// The batches waiting for approval in `nodewrights` (their `AwaitingApproval` condition),
/// each with the body its request should have: the batch's results and the Ready message.
/// Conditions written by a pass over an older generation (the Ready condition's
/// `observedGeneration`, written in the same pass) wait for nothing yet: they may be about the
/// previous rollout. (`status.observedGeneration` is no guide: like upstream's it moves only
/// when a rollout completes.)
pub fn wanted<N: std::borrow::Borrow<NodeWright>>(nodewrights: &[N]) -> Vec<Wanted> {
    let mut out = Vec::new();
    for nw in nodewrights.iter().map(N::borrow) {
        let Some(status) = &nw.status else { continue };
        let generation = nw.metadata.generation.unwrap_or(0);
        let conditions = status.conditions.iter().flatten();
        let ready = conditions.clone().find(|c| c.type_ == READY);
        if nw.worked_generation().is_some_and(|seen| seen < generation) {
            continue;
        }
        let Some(waiting) = conditions
            .clone()
            .find(|c| c.type_ == AWAITING_APPROVAL && c.status == "True")
        else {
            continue;
        };
        let ready = ready.map(|c| c.message.as_str()).unwrap_or("");
        for part in pending_parts(&waiting.message) {
            let Some((compartment, batch)) = approval_commit::parse_pending(part) else {
                continue;
            };
            let approval = Approval {
                nodewright: nw.name().to_string(),
                compartment,
                batch,
            };
            let body = body(&approval, generation, part, ready);
            out.push(Wanted { approval, body });
        }
    }
    out
}

/// The body of an approval request.
pub fn body(approval: &Approval, generation: i64, results: &str, ready: &str) -> String {
    let mut out = format!(
        "{MARKER_PREFIX}{} generation={generation} -->\nMerging this approves batch {} of compartment {} of NodeWright {}: it sets `{}` in the manifest that declares it.\n\n**Batch results:** {results}\n",
        approval.branch(),
        approval.batch,
        approval.compartment,
        approval.nodewright,
        nodewright_schema::keys::APPROVED_BATCHES,
    );
    if !ready.is_empty() {
        out.push_str(&format!("\n**Ready:** {ready}\n"));
    }
    out
}

fn marker(body: &str) -> &str {
    body.lines().next().unwrap_or("")
}

/// What to do so that exactly the waiting batches have an open request with the body they
/// should have: closes first (so a replaced request's branch is free), then updates, then
/// opens. Requests from branches outside `nodewright/approve/` are not this reconciler's.
pub fn plan(wanted: &[Wanted], open: &[OpenRequest]) -> Vec<Step> {
    let mut closes = Vec::new();
    let mut updates = Vec::new();
    let mut opens = Vec::new();
    let by_branch: BTreeMap<String, &Wanted> =
        wanted.iter().map(|w| (w.approval.branch(), w)).collect();
    for request in open.iter().filter(|r| r.branch.starts_with(BRANCH_PREFIX)) {
        match by_branch.get(&request.branch) {
            Some(w) if marker(&w.body) == marker(&request.body) => {
                if w.body != request.body {
                    updates.push(Step::Update {
                        number: request.number,
                        branch: request.branch.clone(),
                        body: w.body.clone(),
                    });
                }
            }
            Some(w) => closes.push(Step::Close {
                number: request.number,
                branch: request.branch.clone(),
                comment: format!(
                    "The rollout of NodeWright {} changed (a new spec) since this was opened; a new request replaces it.",
                    w.approval.nodewright
                ),
            }),
            None => closes.push(Step::Close {
                number: request.number,
                branch: request.branch.clone(),
                comment: "This batch no longer waits for approval: it was approved or has started, or the rollout changed.".to_string(),
            }),
        }
    }
    for w in wanted {
        let branch = w.approval.branch();
        let kept = open
            .iter()
            .any(|r| r.branch == branch && marker(&r.body) == marker(&w.body));
        if !kept {
            opens.push(Step::Open(w.clone()));
        }
    }
    closes.into_iter().chain(updates).chain(opens).collect()
}

/// A failure of one step; the step is tried again on the next change.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The forge refused or could not be reached.
    #[error(transparent)]
    Forge(#[from] ForgeError),
    /// The approval branch could not be made or pushed.
    #[error("approval branch {branch}: {message}")]
    Branch {
        /// The branch.
        branch: String,
        /// What failed.
        message: String,
    },
}

/// Where approval branches are made and pushed: the reconciler's repository (the mirror of the
/// remote), the tracked branch they start from, and the remote with its credentials and trust
/// (the status push's).
#[derive(Clone, Debug)]
pub struct BranchTarget {
    /// The repository the reconciler reads (the bare mirror of the remote).
    pub repo: GitRepo,
    /// The tracked branch: the base of every approval branch and request.
    pub tracked: String,
    /// How manifests are read (root path, limits), as for desired state.
    pub options: ReadOptions,
    /// The remote approval branches are pushed to.
    pub remote: RemoteSpec,
    /// Who approval commits are made by.
    pub author: Author,
}

impl BranchTarget {
    /// Commits the approval edit on top of the tracked branch's head as `approval`'s branch
    /// (replacing an older one) and force-pushes it. `false`: the tracked branch approves the
    /// batch already, nothing was pushed.
    pub fn publish(&self, approval: &Approval, time_seconds: i64) -> Result<bool, Error> {
        let branch = approval.branch();
        let fail = |message: String| Error::Branch {
            branch: branch.clone(),
            message,
        };
        let head = self
            .repo
            .resolve(&format!("refs/heads/{}", self.tracked))
            .map_err(|e| fail(e.to_string()))?;
        let prepared = approval_commit::prepare(&self.repo, head, &self.options, approval)
            .map_err(|e| match e {
                approval_commit::Error::Invalid { problems } => fail(format!(
                    "the tracked branch with the approval would be invalid: {}",
                    problems
                        .iter()
                        .map(|p| format!("{}: {}", p.location(), p.message))
                        .collect::<Vec<_>>()
                        .join("; ")
                )),
                other => fail(other.to_string()),
            })?;
        if prepared.is_noop() {
            return Ok(false);
        }
        commit_branch_onto(
            self.repo.path(),
            &branch,
            head,
            &[(prepared.file.as_str(), &prepared.after)],
            &approval.title(),
            &self.author,
            time_seconds,
        )
        .map_err(|e| fail(e.to_string()))?;
        push_branch(self.repo.path(), &self.remote, &branch, true)
            .map_err(|e| fail(e.to_string()))?;
        Ok(true)
    }
}

/// What one [`ApprovalRequests::sync`] did.
#[derive(Debug, Default)]
pub struct SyncOutcome {
    /// Requests opened.
    pub opened: Vec<u64>,
    /// Requests whose body was rewritten.
    pub updated: Vec<u64>,
    /// Requests closed.
    pub closed: Vec<u64>,
    /// Failures; their steps are tried again on the next call.
    pub errors: Vec<Error>,
}

/// Keeps one approval request open per waiting batch: the controller's forge task calls
/// [`ApprovalRequests::sync`] with the NodeWrights after a pass changed them.
#[derive(Debug)]
pub struct ApprovalRequests<F> {
    forge: F,
    branches: BranchTarget,
    /// The open requests, by branch; read from the forge on the first sync (so a restarted
    /// reconciler adopts its requests), then kept from the replies.
    open: Option<BTreeMap<String, OpenRequest>>,
}

impl<F: Forge + Sync> ApprovalRequests<F> {
    /// Requests on `forge` from branches made in `branches`.
    pub fn new(forge: F, branches: BranchTarget) -> Self {
        ApprovalRequests {
            forge,
            branches,
            open: None,
        }
    }

    /// Opens, updates and closes requests so that each batch waiting in `nodewrights` has
    /// one, with its current results, and nothing else is open. `now` stamps new commits.
    pub async fn sync<N: std::borrow::Borrow<NodeWright>>(
        &mut self,
        nodewrights: &[N],
        now: i64,
    ) -> SyncOutcome {
        let mut outcome = SyncOutcome::default();
        if self.open.is_none() {
            match self.forge.open_approval_requests(BRANCH_PREFIX).await {
                Ok(found) => {
                    self.open = Some(found.into_iter().map(|r| (r.branch.clone(), r)).collect());
                }
                Err(e) => {
                    outcome.errors.push(e.into());
                    return outcome;
                }
            }
        }
        let Some(open) = self.open.as_mut() else {
            return outcome;
        };
        let current: Vec<OpenRequest> = open.values().cloned().collect();
        // Requests still open on the forge, read once before the first close: one merged (the
        // approval) or closed by a reviewer since is not ours to comment on and close.
        let mut still_open: Option<Vec<u64>> = None;
        for step in plan(&wanted(nodewrights), &current) {
            match step {
                Step::Close {
                    number,
                    branch,
                    comment,
                } => {
                    if still_open.is_none() {
                        match self.forge.open_approval_requests(BRANCH_PREFIX).await {
                            Ok(found) => {
                                still_open = Some(found.iter().map(|r| r.number).collect());
                            }
                            Err(e) => {
                                outcome.errors.push(e.into());
                                continue;
                            }
                        }
                    }
                    if still_open.as_ref().is_some_and(|n| !n.contains(&number)) {
                        open.remove(&branch);
                        continue;
                    }
                    match self.forge.close_request(number, &comment).await {
                        Ok(()) => {
                            open.remove(&branch);
                            outcome.closed.push(number);
                        }
                        Err(e) => outcome.errors.push(e.into()),
                    }
                }
                Step::Update {
                    number,
                    branch,
                    body,
                } => match self.forge.update_request(number, &body).await {
                    Ok(()) => {
                        if let Some(r) = open.get_mut(&branch) {
                            r.body = body;
                        }
                        outcome.updated.push(number);
                    }
                    Err(e) => outcome.errors.push(e.into()),
                },
                Step::Open(w) => {
                    let branch = w.approval.branch();
                    // One opened meanwhile (a reply lost, another replica before a handover)
                    // is adopted; the next sync updates or replaces it.
                    match self.forge.find_open_request(&branch).await {
                        Ok(Some(found)) => {
                            open.insert(branch, found);
                            continue;
                        }
                        Ok(None) => {}
                        Err(e) => {
                            outcome.errors.push(e.into());
                            continue;
                        }
                    }
                    let target = self.branches.clone();
                    let approval = w.approval.clone();
                    let published =
                        tokio::task::spawn_blocking(move || target.publish(&approval, now))
                            .await
                            .unwrap_or_else(|e| {
                                Err(Error::Branch {
                                    branch: branch.clone(),
                                    message: format!("the push task failed: {e}"),
                                })
                            });
                    match published {
                        Ok(true) => {}
                        // The tracked branch approves the batch already (an approval merged,
                        // not yet applied): nothing to propose.
                        Ok(false) => continue,
                        Err(e) => {
                            outcome.errors.push(e);
                            continue;
                        }
                    }
                    match self
                        .forge
                        .create_request(
                            &branch,
                            &self.branches.tracked,
                            &w.approval.title(),
                            &w.body,
                        )
                        .await
                    {
                        Ok(number) => {
                            open.insert(
                                branch.clone(),
                                OpenRequest {
                                    number,
                                    branch,
                                    body: w.body,
                                },
                            );
                            outcome.opened.push(number);
                        }
                        Err(e) => outcome.errors.push(e.into()),
                    }
                }
            }
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approval(batch: u32) -> Approval {
        Approval {
            nodewright: "driver".into(),
            compartment: "production".into(),
            batch,
        }
    }

    fn want(batch: u32, generation: i64, results: &str) -> Wanted {
        let a = approval(batch);
        Wanted {
            body: body(&a, generation, results, "1/4 nodes complete"),
            approval: a,
        }
    }

    fn open(number: u64, w: &Wanted) -> OpenRequest {
        OpenRequest {
            number,
            branch: w.approval.branch(),
            body: w.body.clone(),
        }
    }

    #[test]
    fn a_batch_that_starts_waiting_gets_a_request() {
        let w = want(2, 1, "2 complete");
        assert_eq!(plan(std::slice::from_ref(&w), &[]), [Step::Open(w)]);
    }

    #[test]
    fn a_request_is_updated_only_when_its_body_changes() {
        let before = want(2, 1, "2 complete");
        let after = want(2, 1, "3 complete");
        assert_eq!(plan(std::slice::from_ref(&before), &[open(7, &before)]), []);
        assert_eq!(
            plan(std::slice::from_ref(&after), &[open(7, &before)]),
            [Step::Update {
                number: 7,
                branch: "nodewright/approve/driver/production-2".into(),
                body: after.body,
            }]
        );
    }

    #[test]
    fn a_request_is_closed_when_its_batch_no_longer_waits_or_the_rollout_changed() {
        let w2 = want(2, 1, "2 complete");
        let steps = plan(&[], &[open(7, &w2)]);
        assert!(
            matches!(&steps[..], [Step::Close { number: 7, comment, .. }] if comment.contains("no longer waits")),
            "{steps:?}"
        );
        let w3 = want(3, 1, "4 complete");
        let steps = plan(std::slice::from_ref(&w3), &[open(7, &w2)]);
        assert!(
            matches!(&steps[0], Step::Close { number: 7, .. }),
            "{steps:?}"
        );
        assert_eq!(steps[1], Step::Open(w3));
        // The same batch of a new spec: the reviewed commit is another rollout's.
        let renewed = want(2, 2, "2 complete");
        let steps = plan(std::slice::from_ref(&renewed), &[open(7, &w2)]);
        assert!(
            matches!(&steps[0], Step::Close { number: 7, comment, .. } if comment.contains("changed")),
            "{steps:?}"
        );
        assert_eq!(steps[1], Step::Open(renewed));
    }

    #[test]
    fn requests_from_other_branches_are_left_alone() {
        let other = OpenRequest {
            number: 3,
            branch: "feature/new-driver".into(),
            body: "hand-made".into(),
        };
        assert_eq!(plan(&[], &[other]), []);
    }

    #[test]
    fn waiting_batches_come_from_conditions_written_at_the_current_generation() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
        use nodewright_schema::{NodeWrightSpec, NodeWrightStatus};
        let condition = |type_: &str, status: &str, message: &str| Condition {
            type_: type_.into(),
            status: status.into(),
            reason: "R".into(),
            message: message.into(),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::UNIX_EPOCH,
            ),
            observed_generation: None,
        };
        let mut nw = NodeWright::new("driver", NodeWrightSpec::default());
        nw.metadata.generation = Some(4);
        let mut ready = condition(READY, "False", "2/6 nodes complete");
        ready.observed_generation = Some(4);
        nw.status = Some(NodeWrightStatus {
            conditions: Some(vec![
                ready,
                condition(
                    AWAITING_APPROVAL,
                    "True",
                    "compartment canary: batch 2 waits for approval (1 nodes complete, 0 failed); approve with gitops.nodewright.nvidia.com/approved-batches: canary=2; compartment production: batch 3 waits for approval (4 nodes complete, 1 failed); approve with gitops.nodewright.nvidia.com/approved-batches: production=3",
                ),
            ]),
            ..NodeWrightStatus::default()
        });
        let got = wanted(std::slice::from_ref(&nw));
        let branches: Vec<String> = got.iter().map(|w| w.approval.branch()).collect();
        assert_eq!(
            branches,
            [
                "nodewright/approve/driver/canary-2",
                "nodewright/approve/driver/production-3"
            ]
        );
        assert!(got[1].body.starts_with(
            "<!-- nodewright-approval nodewright/approve/driver/production-3 generation=4 -->\n"
        ));
        assert!(got[1].body.contains("**Batch results:** compartment production: batch 3 waits for approval (4 nodes complete, 1 failed)"));
        assert!(got[1].body.contains("**Ready:** 2/6 nodes complete"));
        nw.metadata.generation = Some(5);
        assert_eq!(wanted(&[nw]), []);
    }
}
