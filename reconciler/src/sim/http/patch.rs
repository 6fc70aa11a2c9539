//! Patch formats: JSON merge patch (RFC 7386) and JSON patch (RFC 6902); strategic merge
//! patch of built-in kinds is [`super::strategic`] (custom resources refuse it, as on a real
//! server).

use serde_json::Value;

/// Applies a JSON merge patch to `target`.
pub fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(members) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(t) = target {
        for (key, value) in members {
            // Strategic-merge directives are not modelled; drop them rather than store them.
            if key.starts_with("$") {
                continue;
            }
            if value.is_null() {
                t.remove(key);
            } else {
                merge(t.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

/// Why a JSON patch could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum JsonPatchError {
    /// The document is not a list of operations.
    #[error("the JSON patch is not a list of operations: {0}")]
    Malformed(String),
    /// A `test` operation failed.
    #[error("test operation at {path} failed")]
    TestFailed {
        /// JSON pointer.
        path: String,
    },
    /// A path does not exist.
    #[error("path {0} does not exist")]
    Missing(String),
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn split_pointer(path: &str) -> Result<(String, String), JsonPatchError> {
    let (parent, last) = path
        .rsplit_once('/')
        .ok_or_else(|| JsonPatchError::Malformed(format!("bad pointer {path:?}")))?;
    Ok((parent.to_string(), unescape(last)))
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), JsonPatchError> {
    if path.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (parent, last) = split_pointer(path)?;
    let target = doc
        .pointer_mut(&parent)
        .ok_or_else(|| JsonPatchError::Missing(parent.clone()))?;
    match target {
        Value::Object(map) => {
            map.insert(last, value);
            Ok(())
        }
        Value::Array(list) => {
            if last == "-" {
                list.push(value);
                return Ok(());
            }
            let index: usize = last
                .parse()
                .map_err(|_| JsonPatchError::Missing(path.to_string()))?;
            if index > list.len() {
                return Err(JsonPatchError::Missing(path.to_string()));
            }
            list.insert(index, value);
            Ok(())
        }
        _ => Err(JsonPatchError::Missing(path.to_string())),
    }
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, JsonPatchError> {
    let (parent, last) = split_pointer(path)?;
    let target = doc
        .pointer_mut(&parent)
        .ok_or_else(|| JsonPatchError::Missing(parent.clone()))?;
    match target {
        Value::Object(map) => map
            .remove(&last)
            .ok_or_else(|| JsonPatchError::Missing(path.to_string())),
        Value::Array(list) => {
            let index: usize = last
                .parse()
                .map_err(|_| JsonPatchError::Missing(path.to_string()))?;
            if index >= list.len() {
                return Err(JsonPatchError::Missing(path.to_string()));
            }
            Ok(list.remove(index))
        }
        _ => Err(JsonPatchError::Missing(path.to_string())),
    }
}

/// Applies a JSON patch (a list of operations) to `doc`, all or nothing.
pub fn json_patch(doc: &mut Value, patch: &Value) -> Result<(), JsonPatchError> {
    let ops = patch
        .as_array()
        .ok_or_else(|| JsonPatchError::Malformed("expected a list".into()))?;
    let mut work = doc.clone();
    for op in ops {
        let kind = op.get("op").and_then(Value::as_str).unwrap_or_default();
        let path = op
            .get("path")
            .and_then(Value::as_str)
            .ok_or_else(|| JsonPatchError::Malformed(format!("operation without a path: {op}")))?;
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| JsonPatchError::Malformed(format!("{kind} without a value")))
        };
        let from = || {
            op.get("from")
                .and_then(Value::as_str)
                .ok_or_else(|| JsonPatchError::Malformed(format!("{kind} without from")))
        };
        match kind {
            "add" => add(&mut work, path, value()?)?,
            "remove" => {
                remove(&mut work, path)?;
            }
            "replace" => {
                if work.pointer(path).is_none() {
                    return Err(JsonPatchError::Missing(path.to_string()));
                }
                if let Some(slot) = work.pointer_mut(path) {
                    *slot = value()?;
                }
            }
            "test" => {
                if work.pointer(path) != Some(&value()?) {
                    return Err(JsonPatchError::TestFailed {
                        path: path.to_string(),
                    });
                }
            }
            "move" => {
                let moved = remove(&mut work, from()?)?;
                add(&mut work, path, moved)?;
            }
            "copy" => {
                let copied = work
                    .pointer(from()?)
                    .cloned()
                    .ok_or_else(|| JsonPatchError::Missing(path.to_string()))?;
                add(&mut work, path, copied)?;
            }
            other => return Err(JsonPatchError::Malformed(format!("unknown op {other:?}"))),
        }
    }
    *doc = work;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_sets_nested_members_and_removes_nulls() {
        let mut doc = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"x": [1, 2]}});
        merge(
            &mut doc,
            &json!({"metadata": {"labels": {"a": null, "c": "3"}}, "spec": {"x": [3]}}),
        );
        assert_eq!(
            doc,
            json!({"metadata": {"labels": {"b": "2", "c": "3"}}, "spec": {"x": [3]}})
        );
    }

    #[test]
    fn json_patch_is_all_or_nothing() {
        let mut doc =
            json!({"spec": {"taints": [{"key": "a"}]}, "metadata": {"labels": {"x/y": "1"}}});
        json_patch(
            &mut doc,
            &json!([
                {"op": "add", "path": "/spec/taints/-", "value": {"key": "b"}},
                {"op": "remove", "path": "/metadata/labels/x~1y"},
                {"op": "test", "path": "/spec/taints/0/key", "value": "a"}
            ]),
        )
        .unwrap();
        assert_eq!(
            doc,
            json!({"spec": {"taints": [{"key": "a"}, {"key": "b"}]}, "metadata": {"labels": {}}})
        );
        let before = doc.clone();
        let failed = json_patch(
            &mut doc,
            &json!([
                {"op": "replace", "path": "/spec/taints", "value": []},
                {"op": "test", "path": "/spec/taints/0/key", "value": "zzz"}
            ]),
        );
        assert!(matches!(
            failed,
            Err(JsonPatchError::Missing(_)) | Err(JsonPatchError::TestFailed { .. })
        ));
        assert_eq!(doc, before);
    }
}
