//! Strategic merge patch (`application/strategic-merge-patch+json`) for the built-in kinds,
//! as apimachinery's `strategicpatch` applies it: maps merge as in a JSON merge patch; lists
//! the built-in types declare with `patchStrategy: merge` merge element by element on their
//! merge key (node and pod `conditions` by `type`, `containers` by `name`, …) or, for lists
//! of strings (`finalizers`), as a union; every other list is replaced. The directives
//! `$patch` (`replace`, `delete`, `merge`), `$retainKeys`, `$deleteFromPrimitiveList/<f>`
//! and `$setElementOrder/<f>` are honoured.

use serde_json::{Map, Value};

/// The merge key of a list field with `patchStrategy: merge` in the built-in types served
/// here, by field name (the names do not clash across those types).
fn merge_key(field: &str) -> Option<&'static str> {
    Some(match field {
        "conditions" | "addresses" => "type",
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets" => "name",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "ports" => "containerPort",
        "ownerReferences" => "uid",
        _ => return None,
    })
}

/// Lists of strings merged as a union (`patchStrategy: merge` on a primitive list).
fn primitive_union(field: &str) -> bool {
    field == "finalizers"
}

/// Applies `patch` to `target`.
pub fn apply(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    match patch.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut replaced = patch.clone();
            replaced.remove("$patch");
            *target = Value::Object(strip_directives(replaced));
            return;
        }
        Some("delete") => {
            *target = Value::Object(Map::new());
            return;
        }
        _ => {}
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else {
        return;
    };
    for (key, value) in patch {
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Value::Array(gone)) = (t.get_mut(field), value) {
                list.retain(|v| !gone.contains(v));
            }
            continue;
        }
        if key.starts_with('$') {
            continue;
        }
        if value.is_null() {
            t.remove(key);
            continue;
        }
        match (t.get_mut(key), value) {
            (Some(Value::Array(current)), Value::Array(items)) => {
                if let Some(merge_on) = merge_key(key) {
                    merge_list(current, items, merge_on);
                } else if primitive_union(key) {
                    for item in items {
                        if !current.contains(item) {
                            current.push(item.clone());
                        }
                    }
                } else {
                    *current = items.clone();
                }
            }
            (Some(current), Value::Object(_)) if current.is_object() => apply(current, value),
            _ => {
                let mut fresh = Value::Null;
                apply_fresh(&mut fresh, value);
                t.insert(key.clone(), fresh);
            }
        }
    }
    if let Some(Value::Array(retain)) = patch.get("$retainKeys") {
        t.retain(|k, _| retain.iter().any(|r| r.as_str() == Some(k)));
    }
}

/// A value the target does not have yet: the patch without its directives.
fn apply_fresh(target: &mut Value, patch: &Value) {
    *target = match patch {
        Value::Object(map) => Value::Object(strip_directives(map.clone())),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .filter(|i| i.get("$patch").is_none())
                .cloned()
                .collect(),
        ),
        other => other.clone(),
    };
}

fn strip_directives(map: Map<String, Value>) -> Map<String, Value> {
    map.into_iter()
        .filter(|(k, _)| !k.starts_with('$'))
        .map(|(k, v)| match v {
            Value::Object(inner) => (k, Value::Object(strip_directives(inner))),
            other => (k, other),
        })
        .collect()
}

/// Merges `items` into `current` element by element on `key`.
fn merge_list(current: &mut Vec<Value>, items: &[Value], key: &str) {
    if items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        *current = items
            .iter()
            .filter(|i| i.get("$patch").is_none())
            .cloned()
            .collect();
        return;
    }
    for item in items {
        let id = item.get(key);
        let position = id.and_then(|id| current.iter().position(|c| c.get(key) == Some(id)));
        match (position, item.get("$patch").and_then(Value::as_str)) {
            (Some(i), Some("delete")) => {
                current.remove(i);
            }
            (None, Some("delete")) => {}
            (Some(i), _) => apply(&mut current[i], item),
            (None, _) => {
                let mut fresh = Value::Null;
                apply_fresh(&mut fresh, item);
                current.push(fresh);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn conditions_merge_by_type_and_other_lists_are_replaced() {
        let mut node = json!({
            "metadata": {"finalizers": ["a"]},
            "spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]},
            "status": {"conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "Custom", "status": "False"},
            ]},
        });
        apply(
            &mut node,
            &json!({
                "metadata": {"finalizers": ["b"]},
                "spec": {"taints": [{"key": "y", "effect": "NoExecute"}]},
                "status": {
                    "$setElementOrder/conditions": [{"type": "Ready"}, {"type": "Custom"}, {"type": "New"}],
                    "conditions": [{"type": "Custom", "status": "True"}, {"type": "New", "status": "True"}],
                },
            }),
        );
        assert_eq!(
            node["status"]["conditions"],
            json!([
                {"type": "Ready", "status": "True"},
                {"type": "Custom", "status": "True"},
                {"type": "New", "status": "True"},
            ])
        );
        assert_eq!(
            node["spec"]["taints"],
            json!([{"key": "y", "effect": "NoExecute"}])
        );
        assert_eq!(node["metadata"]["finalizers"], json!(["a", "b"]));
    }

    #[test]
    fn delete_and_replace_directives_apply() {
        let mut pod = json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b"}]},
                             "metadata": {"finalizers": ["f", "g"], "labels": {"k": "v"}}});
        apply(
            &mut pod,
            &json!({
                "spec": {"containers": [{"name": "b", "$patch": "delete"}, {"name": "a", "image": "y"}]},
                "metadata": {"$deleteFromPrimitiveList/finalizers": ["f"],
                             "labels": {"$patch": "replace", "only": "this"}},
            }),
        );
        assert_eq!(
            pod["spec"]["containers"],
            json!([{"name": "a", "image": "y"}])
        );
        assert_eq!(pod["metadata"]["finalizers"], json!(["g"]));
        assert_eq!(pod["metadata"]["labels"], json!({"only": "this"}));
    }
}
