//! DeploymentPolicies in words (§2.1–§2.3): what changed inside a policy, and how fast a
//! NodeWright that uses one rolls out. Users read a compartment's budget as a ceiling; with a
//! strategy it is not one (§2.2), so the pace lines say which number sizes the batches.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use nodewright_schema::policy::{Budget, Strategy};
use nodewright_schema::{DeploymentPolicy, NodeWright};

/// What changed between two versions of a policy, one line per part
/// (`compartment production: budget 25 % → 50 %`).
pub fn policy_parts(b: &DeploymentPolicy, h: &DeploymentPolicy) -> Vec<String> {
    let mut parts = Vec::new();
    let (bd, hd) = (&b.spec.default, &h.spec.default);
    let default_changes = [
        change("budget", budget_text(&bd.budget), budget_text(&hd.budget)),
        change(
            "strategy",
            strategy_text(Some(&bd.strategy)),
            strategy_text(Some(&hd.strategy)),
        ),
    ];
    push_part(&mut parts, "default", default_changes);
    if b.spec.reset_batch_state_on_completion != h.spec.reset_batch_state_on_completion {
        parts.push(format!(
            "resetBatchStateOnCompletion: {} → {}",
            b.spec.reset_batch_state_on_completion.unwrap_or(true),
            h.spec.reset_batch_state_on_completion.unwrap_or(true)
        ));
    }
    let bc: BTreeMap<&str, _> = b
        .spec
        .compartments
        .iter()
        .map(|c| (c.name.as_str(), c))
        .collect();
    let hc: BTreeMap<&str, _> = h
        .spec
        .compartments
        .iter()
        .map(|c| (c.name.as_str(), c))
        .collect();
    for name in bc.keys().chain(hc.keys()).collect::<BTreeSet<_>>() {
        match (bc.get(name), hc.get(name)) {
            (None, Some(c)) => parts.push(format!(
                "compartment {name} added: nodes {}, budget {}, {}",
                selector_text(&c.selector),
                budget_text(&c.budget),
                strategy_text(c.strategy.as_ref())
            )),
            (Some(_), None) => parts.push(format!(
                "compartment {name} removed: its nodes fall to the other compartments or the default"
            )),
            (Some(x), Some(y)) => {
                let changes = [
                    change(
                        "selector",
                        selector_text(&x.selector),
                        selector_text(&y.selector),
                    ),
                    change("budget", budget_text(&x.budget), budget_text(&y.budget)),
                    change(
                        "strategy",
                        strategy_text(x.strategy.as_ref()),
                        strategy_text(y.strategy.as_ref()),
                    ),
                ];
                push_part(&mut parts, &format!("compartment {name}"), changes);
            }
            (None, None) => {}
        }
    }
    if parts.is_empty() {
        parts.push("compartment order".to_owned());
    }
    parts
}

fn change(what: &str, before: String, after: String) -> Option<String> {
    (before != after).then(|| format!("{what} {before} → {after}"))
}

fn push_part<const N: usize>(parts: &mut Vec<String>, part: &str, changes: [Option<String>; N]) {
    let changes: Vec<String> = changes.into_iter().flatten().collect();
    if !changes.is_empty() {
        parts.push(format!("{part}: {}", changes.join("; ")));
    }
}

/// `25 %` or `count 3` (exactly one is set on a valid policy).
pub fn budget_text(b: &Budget) -> String {
    match (b.percent, b.count) {
        (Some(p), None) => format!("{p} %"),
        (None, Some(c)) => format!("count {c}"),
        (Some(p), Some(c)) => format!("{p} % and count {c}"),
        (None, None) => "none".to_owned(),
    }
}

/// `exponential (initialBatch 2, growthFactor 2, batchThreshold 90)`: the kind and the
/// parameters as written (absent ones take their defaults, §2.1); `none` for a budget-only
/// compartment.
pub fn strategy_text(s: Option<&Strategy>) -> String {
    let Some(s) = s else {
        return "no strategy (budget-only)".to_owned();
    };
    let Some((kind, p)) = s.resolved() else {
        return "an invalid strategy".to_owned();
    };
    let written: Vec<String> = [
        ("initialBatch", p.initial_batch),
        ("delta", p.delta),
        ("growthFactor", p.growth_factor),
        ("batchThreshold", p.batch_threshold),
        ("failureThreshold", p.failure_threshold),
        ("safetyLimit", p.safety_limit),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.map(|v| format!("{k} {v}")))
    .collect();
    if written.is_empty() {
        kind.as_str().to_owned()
    } else {
        format!("{} ({})", kind.as_str(), written.join(", "))
    }
}

/// A label selector as kubectl writes one: `pool=canary,zone in (a,b)`; `every node` when
/// empty.
pub fn selector_text(s: &LabelSelector) -> String {
    let mut terms: Vec<String> = s
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for e in s.match_expressions.iter().flatten() {
        let values = e.values.as_deref().unwrap_or_default().join(",");
        terms.push(match e.operator.as_str() {
            "In" => format!("{} in ({values})", e.key),
            "NotIn" => format!("{} notin ({values})", e.key),
            "Exists" => e.key.clone(),
            "DoesNotExist" => format!("!{}", e.key),
            other => format!("{} {other} ({values})", e.key),
        });
    }
    if terms.is_empty() {
        "every node".to_owned()
    } else {
        terms.join(",")
    }
}

/// How fast `nw` rolls out under the head state's policies, one line per compartment. A
/// strategy sizes the batches and the budget does not cap them (§2.2), which is said where it
/// applies; a budget-only compartment works on at most its ceiling.
pub fn pace(nw: &NodeWright, policies: &[DeploymentPolicy]) -> Vec<String> {
    let Some(name) = nw.spec.deployment_policy.as_deref() else {
        return match &nw.spec.interruption_budget {
            Some(b) => vec![format!(
                "no DeploymentPolicy: at most {} of the selected nodes at a time (interruptionBudget)",
                match (b.percent, b.count) {
                    (Some(p), _) => format!("{p} % (at least 1)"),
                    (None, Some(c)) => format!("{c}"),
                    (None, None) => "1".to_owned(),
                }
            )],
            None => Vec::new(),
        };
    };
    let Some(policy) = policies
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(name))
    else {
        return Vec::new();
    };
    let line = |who: String, budget: &Budget, strategy: Option<&Strategy>| match strategy
        .and_then(Strategy::resolved)
    {
        None => format!(
            "{who}: budget {} — at most that many nodes at a time",
            budget_text(budget)
        ),
        Some((kind, p)) => {
            let first = p.initial_batch();
            let beyond = match budget.count {
                Some(c) if first > c => format!(
                    "; its first batch of {first} is larger than the budget count {c}, which is \
                     not a ceiling here"
                ),
                _ => String::new(),
            };
            format!(
                "{who}: batches set by the {} strategy, starting at {first} node{}; the budget \
                 ({}) does not cap a strategy's batch, it only breaks ties between overlapping \
                 compartments{beyond}",
                kind.as_str(),
                if first == 1 { "" } else { "s" },
                budget_text(budget),
            )
        }
    };
    let mut out = vec![format!("rolls out through DeploymentPolicy {name}:")];
    for c in &policy.spec.compartments {
        out.push(line(
            format!("compartment {} ({})", c.name, selector_text(&c.selector)),
            &c.budget,
            c.strategy.as_ref(),
        ));
    }
    out.push(line(
        "nodes in no compartment".to_owned(),
        &policy.spec.default.budget,
        Some(&policy.spec.default.strategy),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(yaml: &str) -> DeploymentPolicy {
        serde_yaml::from_str(yaml).expect("test policy parses")
    }

    const BASE: &str = "apiVersion: nodewright.nvidia.com/v1alpha1
kind: DeploymentPolicy
metadata: {name: gpu-rollout}
spec:
  default: {budget: {percent: 10}, strategy: {fixed: {initialBatch: 2}}}
  compartments:
    - name: production
      selector: {matchExpressions: [{key: pool, operator: In, values: [production]}]}
      budget: {percent: 25}
      strategy: {fixed: {initialBatch: 1}}
";

    #[test]
    fn a_changed_compartment_names_its_budget_strategy_and_selector_changes() {
        let head = BASE
            .replace("percent: 25", "percent: 50")
            .replace("values: [production]", "values: [production, batch]")
            .replace(
                "strategy: {fixed: {initialBatch: 1}}",
                "strategy: {linear: {delta: 2}}",
            );
        let parts = policy_parts(&policy(BASE), &policy(&head));
        assert_eq!(
            parts,
            [
                "compartment production: selector pool in (production) → pool in (production,batch); \
              budget 25 % → 50 %; strategy fixed (initialBatch 1) → linear (delta 2)"
            ]
        );
    }

    #[test]
    fn a_changed_default_names_what_changed_in_it() {
        let head = BASE.replace("percent: 10", "count: 3");
        assert_eq!(
            policy_parts(&policy(BASE), &policy(&head)),
            ["default: budget 10 % → count 3"]
        );
    }

    #[test]
    fn the_pace_says_a_strategy_batch_is_not_capped_by_the_budget() {
        let nw: NodeWright = serde_yaml::from_str(
            "apiVersion: nodewright.nvidia.com/v1alpha1
kind: NodeWright
metadata: {name: gpu-driver}
spec:
  deploymentPolicy: gpu-rollout
  packages: {driver: {version: 1.0.0, image: example/driver}}
",
        )
        .expect("test NodeWright parses");
        let head = BASE.replace("percent: 10", "count: 1");
        let lines = pace(&nw, &[policy(&head)]);
        let default = lines.last().expect("the default compartment has a line");
        assert!(
            default.contains("starting at 2 nodes")
                && default.contains("does not cap a strategy's batch")
                && default.contains("larger than the budget count 1"),
            "{lines:?}"
        );
    }
}
