//! Node selection (spec/operator.md §5.6–§5.9) and compartment assignment/admission
//! (§2.5–§2.6), plus the Kubernetes label-selector and toleration matching they rely on.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether a label selector matches a label set (Kubernetes semantics; an empty selector
/// matches everything, an unknown operator matches nothing).
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    if let Some(ml) = &selector.match_labels
        && ml.iter().any(|(k, v)| labels.get(k) != Some(v))
    {
        return false;
    }
    for req in selector.match_expressions.iter().flatten() {
        let value = labels.get(&req.key);
        let values = req.values.as_deref().unwrap_or_default();
        let ok = match req.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

/// Whether one toleration tolerates a taint (Kubernetes matching rules).
pub fn toleration_matches(tol: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = tol.effect.as_deref().filter(|e| !e.is_empty())
        && effect != taint.effect
    {
        return false;
    }
    let key = tol.key.as_deref().unwrap_or_default();
    match tol.operator.as_deref().unwrap_or("Equal") {
        "Exists" => key.is_empty() || key == taint.key,
        "Equal" | "" => {
            key == taint.key
                && tol.value.as_deref().unwrap_or_default()
                    == taint.value.as_deref().unwrap_or_default()
        }
        _ => false,
    }
}

/// Whether some toleration of the set tolerates the taint.
pub fn tolerates(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| toleration_matches(t, taint))
}
