//! Conditions (spec/operator.md §12): `Ready` with its message, `NodeStateMalformed`,
//! `DeploymentPolicyNotFound`, the legacy prefixed mirrors (§12.3), transition times (§12.4)
//! and the per-node conditions in `node.status.conditions` (§4.5).

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use nodewright_schema::Status;
use nodewright_schema::keys::{self, condition, reason};

use super::context::PassCtx;
use crate::plan::Action;
use crate::settings::constants::{CONDITION_NODE_LIST_CAP, MALFORMED_NODE_LIST_CAP};

fn cond(type_: &str, status: bool, reason: &str, message: String) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: if status { "True" } else { "False" }.to_string(),
        reason: reason.to_string(),
        message,
        last_transition_time: Time(Timestamp::UNIX_EPOCH),
        observed_generation: None,
    }
}

/// `Ready` reason for a Status (§12.1).
pub fn ready_reason(status: Option<Status>) -> &'static str {
    match status {
        Some(Status::Complete) => reason::NODES_CONVERGED,
        Some(Status::InProgress) => reason::PROGRESSING,
        Some(Status::Blocked) => reason::BLOCKED,
        Some(Status::Erroring) => reason::ERRORING,
        Some(Status::Paused) => reason::PAUSED,
        Some(Status::Waiting) => reason::WAITING,
        Some(Status::Disabled) => reason::DISABLED,
        _ => reason::UNKNOWN,
    }
}

/// The `Ready` message (§12.1): `<c>/<n> nodes complete (…)`, then one segment per non-empty
/// Status bucket; more than ten names become `(list truncated; see controller logs)`.
/// `nodes` are (node name, published Status) of the selected nodes.
pub fn ready_message(nodes: &[(&str, Status)]) -> String {
    // A bucket's names are listed (sorted) only when there are at most ten of them, so the
    // names are sorted only then; a 10,000-node fleet mostly has large buckets.
    let bucket = |s: Status| -> (usize, String) {
        let count = nodes.iter().filter(|(_, st)| *st == s).count();
        let suffix = if count == 0 {
            String::new()
        } else if count > CONDITION_NODE_LIST_CAP {
            " (list truncated; see controller logs)".to_string()
        } else {
            let mut names: Vec<&str> = nodes
                .iter()
                .filter(|(_, st)| *st == s)
                .map(|(n, _)| *n)
                .collect();
            names.sort_unstable();
            format!(" ({})", names.join(", "))
        };
        (count, suffix)
    };
    let (complete, suffix) = bucket(Status::Complete);
    let mut segments = vec![format!("{complete}/{} nodes complete{suffix}", nodes.len())];
    for s in [
        Status::InProgress,
        Status::Blocked,
        Status::Erroring,
        Status::Waiting,
        Status::Paused,
        Status::Disabled,
        Status::Unknown,
    ] {
        let (count, suffix) = bucket(s);
        if count == 0 {
            continue;
        }
        let label = if s == Status::InProgress {
            "in progress"
        } else {
            s.as_str()
        };
        segments.push(format!("{count} {label}{suffix}"));
    }
    segments.join(", ")
}

/// `NodeStateMalformed` message (§12.2): at most five names, sorted, each cut to ten
/// characters plus `...`, the rest as ` and <k> more`.
pub fn malformed_message(names: &[String]) -> String {
    let mut sorted = names.to_vec();
    sorted.sort();
    let shown: Vec<String> = sorted
        .iter()
        .take(MALFORMED_NODE_LIST_CAP)
        .map(|n| {
            if n.chars().count() > 10 {
                format!("{}...", n.chars().take(10).collect::<String>())
            } else {
                n.clone()
            }
        })
        .collect();
    let mut msg = format!(
        "nodeState annotation cannot be parsed on {} node(s): {}",
        sorted.len(),
        shown.join(", ")
    );
    if sorted.len() > MALFORMED_NODE_LIST_CAP {
        msg.push_str(&format!(
            " and {} more",
            sorted.len() - MALFORMED_NODE_LIST_CAP
        ));
    }
    msg
}

/// Preamble step 1: `NodeStateMalformed` (§12.2); the package lane's conditions are
/// [`super::packages::refresh_conditions`].
pub fn refresh_malformed(ctx: &mut PassCtx, nw: usize) {
    let view = &ctx.nws[nw];
    let names: Vec<String> = view
        .selected
        .iter()
        .filter(|&&n| ctx.node(n).malformed(view.state_key()))
        .map(|&n| ctx.node(n).name().to_string())
        .collect();
    let now = ctx.now;
    let view = &mut ctx.nws[nw];
    if names.is_empty() {
        view.remove_condition(condition::NODE_STATE_MALFORMED);
    } else {
        view.set_condition(
            cond(
                condition::NODE_STATE_MALFORMED,
                true,
                reason::PARSE_ERROR,
                malformed_message(&names),
            ),
            now,
        );
    }
}

/// `DeploymentPolicyNotFound` (§2.9).
pub fn refresh_policy_not_found(ctx: &mut PassCtx, nw: usize) {
    let now = ctx.now;
    let view = &mut ctx.nws[nw];
    if view.policy_missing {
        let name = view.nw.spec.deployment_policy.clone().unwrap_or_default();
        view.set_condition(
            cond(
                condition::DEPLOYMENT_POLICY_NOT_FOUND,
                true,
                condition::DEPLOYMENT_POLICY_NOT_FOUND,
                format!("DeploymentPolicy \"{name}\" not found"),
            ),
            now,
        );
    } else {
        view.remove_condition(condition::DEPLOYMENT_POLICY_NOT_FOUND);
    }
}

/// Recomputes `Ready` and the legacy mirrors (§12.1, §12.3) before the status is saved.
pub fn refresh_ready(ctx: &mut PassCtx, nw: usize) {
    let message = ctx.ready_message(nw, ready_message);
    let view = &ctx.nws[nw];
    let status = view.status.status;
    let complete = status == Some(Status::Complete);
    let generation = view.generation();
    let now = ctx.now;
    let transitioned = view.transitioned;
    let old = view.initial_status;
    let view = &mut ctx.nws[nw];
    let mut ready = cond(
        condition::READY,
        complete,
        ready_reason(status),
        message.clone(),
    );
    ready.observed_generation = Some(generation);
    view.set_condition(ready.clone(), now);
    // Legacy mirrors of the mirrored types (§12.3).
    for t in condition::MIRRORED {
        let mirror = format!("{}{t}", keys::PREFIX);
        match view.condition(t).cloned() {
            Some(mut c) => {
                c.type_ = mirror;
                view.set_condition(c, now);
            }
            None => view.remove_condition(&mirror),
        }
    }
    let transition_type = format!("{}{}", keys::PREFIX, condition::TRANSITION);
    let new_text = status.map_or("unknown", Status::as_str);
    let msg = if transitioned {
        format!(
            "Transitioned [{}] -> [{new_text}]",
            old.map_or("unknown", Status::as_str)
        )
    } else {
        message
    };
    let mut transition = cond(&transition_type, complete, new_text, msg);
    transition.observed_generation = Some(generation);
    // The Transition mirror refreshes its time whenever reason or message changes (§12.4).
    let refresh = view
        .condition(&transition_type)
        .is_none_or(|c| c.reason != transition.reason || c.message != transition.message);
    if refresh {
        view.remove_condition(&transition_type);
    }
    view.set_condition(transition, now);
}

/// Node conditions `<nw>/NotReady` and `<nw>/Erroring` (§4.5) for every selected node whose
/// state parses, as actions for the nodes where they differ from the snapshot.
pub fn node_conditions(ctx: &PassCtx) -> Vec<Action> {
    let mut per_node: std::collections::BTreeMap<usize, Vec<NodeCondition>> = Default::default();
    for (nw, view) in ctx.nws.iter().enumerate() {
        if view.deleting() && finalizer_released(ctx, view) {
            // Cleanup removed this NodeWright's node conditions (§11.1); do not re-add them.
            continue;
        }
        // The four ways a node's conditions can be wanted, by completion then erroring.
        let wanted_as = [false, true].map(|complete| {
            [false, true].map(|erroring| {
                WantedConditions::of(view.name, ConditionFacts { complete, erroring })
            })
        });
        for &n in &view.selected {
            let Some(erroring) = ctx.node_digest(nw, n, |d| d.map(|d| d.erroring)) else {
                continue;
            };
            let complete = view.is_complete(n);
            let wanted = &wanted_as[usize::from(complete)][usize::from(erroring)];
            let node = ctx.node(n).node();
            let current = view.node_conditions_current(n, node, wanted, conditions_current);
            for (i, wanted) in wanted.conditions.iter().enumerate() {
                if current & (1 << i) == 0 {
                    per_node.entry(n).or_default().push(NodeCondition {
                        type_: wanted.type_.clone(),
                        status: wanted.status.to_string(),
                        reason: Some(wanted.reason.to_string()),
                        message: Some(wanted.message.clone()),
                        last_transition_time: Some(Time(ctx.now)),
                        last_heartbeat_time: None,
                    });
                }
            }
        }
    }
    per_node
        .into_iter()
        .map(|(n, set)| Action::PatchNodeConditions {
            node: ctx.node(n).name().to_string(),
            set,
            remove: Vec::new(),
        })
        .collect()
}

/// What a node's two conditions say besides the NodeWright they are named for: whether the
/// node is complete and whether a package on it is erroring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConditionFacts {
    /// The node is complete for the NodeWright (§6.4).
    pub complete: bool,
    /// A package on the node is erroring or in an unknown state.
    pub erroring: bool,
}

/// A node's two conditions for one NodeWright as the pass wants them, `NotReady` then
/// `Erroring`: made only from the NodeWright's name and the node's [`ConditionFacts`], so
/// within one NodeWright the facts name them whole.
pub struct WantedConditions {
    facts: ConditionFacts,
    conditions: [WantedCondition; 2],
}

/// A node condition as the pass wants it.
struct WantedCondition {
    type_: String,
    status: &'static str,
    reason: &'static str,
    message: String,
}

impl WantedConditions {
    /// NodeWright `nw`'s conditions as wanted on a node of these facts.
    fn of(nw: &str, facts: ConditionFacts) -> WantedConditions {
        let ConditionFacts { complete, erroring } = facts;
        WantedConditions {
            facts,
            conditions: [
                WantedCondition {
                    type_: keys::node_condition_not_ready(nw),
                    status: if complete { "False" } else { "True" },
                    reason: if complete {
                        reason::COMPLETE
                    } else {
                        reason::INCOMPLETE
                    },
                    message: format!("NodeWright {nw} Ready"),
                },
                WantedCondition {
                    type_: keys::node_condition_erroring(nw),
                    status: if erroring { "True" } else { "False" },
                    reason: if erroring {
                        reason::PACKAGES_ERRORING
                    } else {
                        reason::NOT_ERRORING
                    },
                    message: format!("Package Erroring or Unknown for {nw}"),
                },
            ],
        }
    }

    /// The facts they were made from.
    pub fn facts(&self) -> ConditionFacts {
        self.facts
    }
}

/// Bit `i` is set when `node` already carries the `i`th wanted condition, with that status,
/// reason and message.
fn conditions_current(node: &Node, wanted: &WantedConditions) -> u8 {
    let existing = node.status.as_ref().and_then(|s| s.conditions.as_ref());
    let mut bits = 0;
    for (i, wanted) in wanted.conditions.iter().enumerate() {
        let same = existing
            .and_then(|l| l.iter().find(|c| c.type_ == wanted.type_))
            .is_some_and(|c| {
                c.reason.as_deref() == Some(wanted.reason)
                    && c.status == wanted.status
                    && c.message.as_deref() == Some(wanted.message.as_str())
            });
        bits |= u8::from(same) << i;
    }
    bits
}

/// Whether the NodeWright carries no finalizer or this pass removes it.
fn finalizer_released(ctx: &PassCtx, view: &super::context::NwView) -> bool {
    let has = view
        .nw
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == keys::FINALIZER));
    !has || ctx
        .emitted()
        .iter()
        .any(|a| matches!(a, Action::SetFinalizer { name, present: false } if name == view.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_message_examples() {
        assert_eq!(
            ready_message(&[
                ("node-b", Status::InProgress),
                ("node-a", Status::Complete),
                ("node-c", Status::Blocked)
            ]),
            "1/3 nodes complete (node-a), 1 in progress (node-b), 1 blocked (node-c)"
        );
        assert_eq!(
            ready_message(&[
                ("n3", Status::Complete),
                ("n1", Status::Complete),
                ("n2", Status::Complete)
            ]),
            "3/3 nodes complete (n1, n2, n3)"
        );
        let names: Vec<String> = (0..800).map(|i| format!("n{i}")).collect();
        let many: Vec<(&str, Status)> = (names.iter())
            .map(|n| (n.as_str(), Status::InProgress))
            .collect();
        assert_eq!(
            ready_message(&many),
            "0/800 nodes complete, 800 in progress (list truncated; see controller logs)"
        );
    }

    #[test]
    fn malformed_message_caps_and_cuts() {
        let names: Vec<String> = (0..7).map(|i| format!("a-very-long-node-{i}")).collect();
        assert_eq!(
            malformed_message(&names),
            "nodeState annotation cannot be parsed on 7 node(s): a-very-lon..., a-very-lon..., \
             a-very-lon..., a-very-lon..., a-very-lon... and 2 more"
        );
        assert_eq!(
            malformed_message(&["n1".to_string()]),
            "nodeState annotation cannot be parsed on 1 node(s): n1"
        );
    }
}
