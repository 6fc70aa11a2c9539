//! Strategic merge patch of built-in kinds, driven by the `x-kubernetes-patch-strategy` and
//! `x-kubernetes-patch-merge-key` of their served OpenAPI schemas ([`super::openapi`]): lists
//! with a merge key merge element by element (a node's conditions by type, a pod's containers
//! by name), primitive lists with the `merge` strategy are unions, other lists are replaced;
//! the directives `$patch` (`replace`, `delete`), `$retainKeys`, `$setElementOrder/<list>` and
//! `$deleteFromPrimitiveList/<list>` act as in apimachinery's `strategicpatch`.

use serde_json::{Map, Value};

use super::openapi::SchemaLookup;

/// Applies `patch` to `target`, whose schema is `schema`.
pub fn apply(lookup: &SchemaLookup<'_>, schema: Option<&Value>, target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if patch.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut replaced = patch.clone();
        replaced.remove("$patch");
        *target = Value::Object(replaced);
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(object) = target else {
        return;
    };
    let schema = schema.map(|s| lookup.resolve(s));
    for (key, value) in patch {
        if key.starts_with('$') {
            continue;
        }
        if value.is_null() {
            object.remove(key);
            continue;
        }
        let field = schema.and_then(|s| lookup.field(s, key));
        let slot = object.entry(key.clone()).or_insert(Value::Null);
        match value {
            Value::Array(items) => merge_list(lookup, field, slot, items),
            Value::Object(_) => apply(lookup, field, slot, value),
            _ => *slot = value.clone(),
        }
    }
    for (key, value) in patch {
        if let (Some(list), Value::Array(order)) = (key.strip_prefix("$setElementOrder/"), value) {
            let merge_key = schema
                .and_then(|s| lookup.field(s, list))
                .and_then(|f| f.get("x-kubernetes-patch-merge-key"))
                .and_then(Value::as_str);
            if let Some(Value::Array(items)) = object.get_mut(list) {
                reorder(items, order, merge_key);
            }
        } else if let (Some(list), Value::Array(removed)) =
            (key.strip_prefix("$deleteFromPrimitiveList/"), value)
            && let Some(Value::Array(items)) = object.get_mut(list)
        {
            items.retain(|item| !removed.contains(item));
        }
    }
    if let Some(Value::Array(retained)) = patch.get("$retainKeys") {
        object.retain(|key, _| retained.iter().any(|r| r.as_str() == Some(key)));
    }
}

fn merge_list(lookup: &SchemaLookup<'_>, field: Option<&Value>, slot: &mut Value, items: &[Value]) {
    let field = field.map(|f| lookup.resolve(f));
    let strategy = field
        .and_then(|f| f.get("x-kubernetes-patch-strategy"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !strategy.split(',').any(|s| s == "merge") {
        *slot = Value::Array(items.iter().filter(|i| !is_directive(i)).cloned().collect());
        return;
    }
    if !slot.is_array() {
        *slot = Value::Array(Vec::new());
    }
    let Value::Array(existing) = slot else {
        return;
    };
    let merge_key = field
        .and_then(|f| f.get("x-kubernetes-patch-merge-key"))
        .and_then(Value::as_str);
    let item_schema = field.and_then(|f| f.get("items"));
    for item in items {
        match (merge_key, item) {
            (Some(key), Value::Object(element)) => {
                let id = element.get(key);
                let position = existing.iter().position(|e| e.get(key) == id);
                match (element.get("$patch").and_then(Value::as_str), position) {
                    (Some("delete"), Some(i)) => {
                        existing.remove(i);
                    }
                    (Some("delete"), None) => {}
                    (Some("replace"), _) => {
                        *existing = items.iter().filter(|i| !is_directive(i)).cloned().collect();
                        return;
                    }
                    (_, Some(i)) => apply(lookup, item_schema, &mut existing[i], item),
                    (_, None) => {
                        let mut added = Value::Null;
                        apply(lookup, item_schema, &mut added, item);
                        existing.push(added);
                    }
                }
            }
            _ if !existing.contains(item) => existing.push(item.clone()),
            _ => {}
        }
    }
}

fn is_directive(item: &Value) -> bool {
    item.get("$patch").is_some()
}

/// Puts the elements named in `order` first, in that order; the others keep their places after.
fn reorder(items: &mut Vec<Value>, order: &[Value], merge_key: Option<&str>) {
    let id = |v: &Value| match merge_key {
        Some(key) => v.get(key).cloned().unwrap_or(Value::Null),
        None => v.clone(),
    };
    let mut ordered: Vec<Value> = Vec::with_capacity(items.len());
    for wanted in order {
        let wanted = id(wanted);
        if let Some(i) = items.iter().position(|v| id(v) == wanted) {
            ordered.push(items.remove(i));
        }
    }
    ordered.append(items);
    *items = ordered;
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::sim::http::openapi::builtin_schema_of;
    use crate::sim::http::resources::{JOBS, NODES, RESOURCES};

    fn patched(rid: usize, mut target: Value, patch: Value) -> Value {
        let (lookup, schema) = builtin_schema_of(&RESOURCES[rid]).unwrap();
        apply(&lookup, Some(schema), &mut target, &patch);
        target
    }

    #[test]
    fn node_conditions_merge_by_type_and_atomic_taints_are_replaced() {
        let node = json!({"metadata": {"name": "n0", "labels": {"a": "1", "b": "2"}},
                          "spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]},
                          "status": {"conditions": [{"type": "Ready", "status": "True"},
                                                    {"type": "DiskPressure", "status": "False"}]}});
        // A condition written by type, as a node agent patches its own; taints are an
        // atomic list in Kubernetes, so kubectl sends them whole.
        let patch = json!({"metadata": {"labels": {"a": null, "c": "3"}},
                           "spec": {"taints": [{"key": "y", "effect": "NoExecute"}]},
                           "status": {"$setElementOrder/conditions": [{"type": "DiskPressure"}, {"type": "Ready"}],
                                      "conditions": [{"type": "Ready", "status": "False"}]}});
        let node = patched(NODES, node, patch);
        assert_eq!(node["metadata"]["labels"], json!({"b": "2", "c": "3"}));
        assert_eq!(
            node["spec"]["taints"],
            json!([{"key": "y", "effect": "NoExecute"}])
        );
        assert_eq!(
            node["status"]["conditions"],
            json!([{"type": "DiskPressure", "status": "False"}, {"type": "Ready", "status": "False"}])
        );
        let node = patched(
            NODES,
            node,
            json!({"status": {"conditions": [{"type": "DiskPressure", "$patch": "delete"}]}}),
        );
        assert_eq!(
            node["status"]["conditions"],
            json!([{"type": "Ready", "status": "False"}])
        );
    }

    #[test]
    fn containers_merge_by_name_and_primitive_merge_lists_are_unions() {
        let job = json!({"metadata": {"finalizers": ["a"]},
                         "spec": {"template": {"spec": {"containers": [
                             {"name": "main", "image": "i:1", "args": ["x"]},
                             {"name": "side", "image": "s:1"}]}}}});
        let patch = json!({"metadata": {"finalizers": ["b"], "$deleteFromPrimitiveList/finalizers": ["a"]},
                           "spec": {"template": {"spec": {"containers": [
                               {"name": "main", "image": "i:2", "args": ["y"]}]}}}});
        let job = patched(JOBS, job, patch);
        assert_eq!(job["metadata"]["finalizers"], json!(["b"]));
        assert_eq!(
            job["spec"]["template"]["spec"]["containers"],
            json!([{"name": "main", "image": "i:2", "args": ["y"]}, {"name": "side", "image": "s:1"}])
        );
        let replaced = patched(
            JOBS,
            job,
            json!({"spec": {"template": {"spec": {"$patch": "replace", "containers": [{"name": "only"}]}}}}),
        );
        assert_eq!(
            replaced["spec"]["template"]["spec"],
            json!({"containers": [{"name": "only"}]})
        );
    }
}
