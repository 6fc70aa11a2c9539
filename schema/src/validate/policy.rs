//! The DeploymentPolicy webhook: defaulting (§2.1), create/update rules and the delete check
//! (§3.4).

use serde_json::Value;

use super::nodewright::metadata_name;
use super::rules;
use super::{FieldPath, Violation, structural};
use crate::policy::{Budget, DeploymentPolicy, DeploymentPolicySpec, Strategy, StrategyKind};
use crate::selector::Selector;

/// The mutating webhook's defaulting (§2.1): every strategy object (default and compartments)
/// gets `initialBatch 1`, `batchThreshold 100`, `safetyLimit 50`, plus `delta 1` (linear) or
/// `growthFactor 2` (exponential) where absent. `failureThreshold` stays unset.
pub fn default_policy(policy: &DeploymentPolicy) -> DeploymentPolicy {
    let mut out = policy.clone();
    default_strategy(&mut out.spec.default.strategy);
    for c in &mut out.spec.compartments {
        if let Some(s) = &mut c.strategy {
            default_strategy(s);
        }
    }
    out
}

fn default_strategy(s: &mut Strategy) {
    if let Some(p) = &mut s.fixed {
        *p = p.with_defaults(StrategyKind::Fixed);
    }
    if let Some(p) = &mut s.linear {
        *p = p.with_defaults(StrategyKind::Linear);
    }
    if let Some(p) = &mut s.exponential {
        *p = p.with_defaults(StrategyKind::Exponential);
    }
}

fn budget_rules(
    budget: &Budget,
    path: FieldPath,
    neither: (rules::Rule, String),
    both: (rules::Rule, String),
    out: &mut Vec<Violation>,
) {
    match (budget.percent, budget.count) {
        (None, None) => out.push(Violation::error(neither.0, path, neither.1)),
        (Some(_), Some(_)) => out.push(Violation::error(both.0, path, both.1)),
        _ => {}
    }
}

/// §3.4 create/update rules over a policy spec, in order.
pub fn policy_spec(spec: &DeploymentPolicySpec) -> Vec<Violation> {
    let mut out = Vec::new();
    let default = FieldPath::of(&["spec", "default"]);
    budget_rules(
        &spec.default.budget,
        default.key("budget"),
        (
            rules::POLICY_DEFAULT_BUDGET_NEITHER,
            "default budget: exactly one of percent or count must be set".into(),
        ),
        (
            rules::POLICY_DEFAULT_BUDGET_BOTH,
            "default budget: percent and count are mutually exclusive".into(),
        ),
        &mut out,
    );
    if spec.default.strategy.kinds().len() != 1 {
        out.push(Violation::error(
            rules::POLICY_DEFAULT_STRATEGY,
            default.key("strategy"),
            "default strategy: exactly one of fixed, linear, or exponential must be set",
        ));
    }
    let mut seen: Vec<&str> = Vec::new();
    for (i, c) in spec.compartments.iter().enumerate() {
        let path = FieldPath::of(&["spec", "compartments"]).index(i);
        let n = c.name.as_str();
        if n == crate::keys::DEFAULT_COMPARTMENT {
            out.push(Violation::error(
                rules::POLICY_COMPARTMENT_RESERVED,
                path.key("name"),
                format!("compartment name {n:?} is reserved and cannot be used"),
            ));
        }
        if seen.contains(&n) {
            out.push(Violation::error(
                rules::POLICY_COMPARTMENT_DUPLICATE,
                path.key("name"),
                format!("compartment name {n:?} is not unique"),
            ));
        }
        seen.push(n);
        budget_rules(
            &c.budget,
            path.key("budget"),
            (
                rules::POLICY_COMPARTMENT_BUDGET_NEITHER,
                format!("compartment {n:?} budget: exactly one of percent or count must be set"),
            ),
            (
                rules::POLICY_COMPARTMENT_BUDGET_BOTH,
                format!("compartment {n:?} budget: percent and count are mutually exclusive"),
            ),
            &mut out,
        );
        if let Some(s) = &c.strategy
            && s.kinds().len() != 1
        {
            out.push(Violation::error(
                rules::POLICY_COMPARTMENT_STRATEGY,
                path.key("strategy"),
                format!("compartment {n:?} strategy: exactly one of fixed, linear, or exponential must be set"),
            ));
        }
        if let Err(errs) = Selector::parse(&c.selector) {
            for e in errs {
                let mut p = path.key("selector");
                for seg in &e.location {
                    p = match seg.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
                        Some(idx) => p.index(idx.parse().unwrap_or(0)),
                        None => p.key(seg.as_str()),
                    };
                }
                out.push(Violation::error(
                    rules::POLICY_COMPARTMENT_SELECTOR,
                    p,
                    format!("compartment {n:?} has invalid selector: {}", e.message),
                ));
            }
        }
        if let Some(prev) = spec.compartments[..i]
            .iter()
            .find(|p| p.selector == c.selector)
        {
            out.push(Violation::error(
                rules::POLICY_COMPARTMENT_SELECTOR_IDENTICAL,
                path.key("selector"),
                format!(
                    "compartment {n:?} has identical selector to compartment {:?}",
                    prev.name
                ),
            ));
        }
    }
    out
}

/// The full pipeline over a raw DeploymentPolicy: schema (§3.3), typed decoding, metadata,
/// webhook rules (§3.4). Returns the **defaulted** typed object (as the mutating webhook would
/// store it) when it decodes, and every violation.
pub fn validate_policy_value(raw: &Value) -> (Option<DeploymentPolicy>, Vec<Violation>) {
    let mut out = structural::policy(raw);
    let typed = match serde_json::from_value::<DeploymentPolicy>(raw.clone()) {
        Ok(p) => p,
        Err(e) => {
            if !super::has_errors(&out) {
                out.push(Violation::error(
                    rules::DECODE,
                    FieldPath::root(),
                    format!("cannot read the object as a DeploymentPolicy: {e}"),
                ));
            }
            return (None, out);
        }
    };
    metadata_name(typed.metadata.name.as_deref(), &mut out);
    out.extend(super::maintenance_annotations(
        typed.metadata.annotations.as_ref(),
    ));
    out.extend(policy_spec(&typed.spec));
    (Some(default_policy(&typed)), out)
}

/// §3.4 delete: rejected while any NodeWright references the policy. `referencing` are the
/// names of NodeWrights whose `spec.deploymentPolicy` is `name`.
pub fn policy_delete(name: &str, referencing: &[&str]) -> Option<Violation> {
    if referencing.is_empty() {
        return None;
    }
    let mut names: Vec<&str> = referencing.to_vec();
    names.sort_unstable();
    Some(Violation::error(
        rules::POLICY_STILL_REFERENCED,
        FieldPath::root(),
        format!(
            "cannot delete DeploymentPolicy {name:?}: still referenced by {} NodeWright(s): [{}]",
            names.len(),
            names.join(" ")
        ),
    ))
}
