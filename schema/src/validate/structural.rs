//! Schema-level rules (§3.3): the generated CRD's OpenAPI schema applied to a raw object the
//! way the apiserver does before any webhook runs — types, required fields, enums, patterns,
//! ranges and lengths — with apiserver-style messages (`spec.priority in body should be greater
//! than or equal to 1`). Unknown fields, which the apiserver silently prunes, are warnings so
//! typos do not go unnoticed.

use std::sync::OnceLock;

use serde_json::{Map, Value};

use super::rules;
use super::{FieldPath, Segment, Violation};

/// Schema violations of a raw NodeWright (its `spec`, plus unknown top-level fields).
pub fn nodewright(raw: &Value) -> Vec<Violation> {
    check(raw, schema_of(0))
}

/// Schema violations of a raw DeploymentPolicy.
pub fn policy(raw: &Value) -> Vec<Violation> {
    check(raw, schema_of(1))
}

/// The `openAPIV3Schema` of each generated CRD, as JSON, in [`crate::crd::all`] order
/// (NodeWright, DeploymentPolicy).
fn schema_of(i: usize) -> &'static Value {
    static SCHEMAS: OnceLock<Vec<Value>> = OnceLock::new();
    let schemas = SCHEMAS.get_or_init(|| {
        crate::crd::all()
            .into_iter()
            .map(|(_, crd)| {
                serde_json::to_value(&crd)
                    .ok()
                    .and_then(|v| {
                        v.pointer("/spec/versions/0/schema/openAPIV3Schema")
                            .cloned()
                    })
                    .unwrap_or(Value::Null)
            })
            .collect()
    });
    schemas.get(i).unwrap_or(&Value::Null)
}

/// Every `pattern` the CRDs use, with its matcher (the schema crate has no regex engine; a
/// test checks that this table covers the generated CRDs).
pub(crate) fn pattern_matches(pattern: &str, s: &str) -> Option<bool> {
    match pattern {
        r"^[a-z][-a-z0-9]{0,41}[a-z]$" => Some(super::nodewright::valid_package_name(s)),
        r"^\S+$" => Some(!s.is_empty() && !s.chars().any(char::is_whitespace)),
        r"^sha256:[0-9a-f]{64}$" => Some(s.strip_prefix("sha256:").is_some_and(|h| {
            h.len() == 64
                && h.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })),
        _ => None,
    }
}

fn check(raw: &Value, schema: &Value) -> Vec<Violation> {
    let mut out = Vec::new();
    let Some(obj) = raw.as_object() else {
        out.push(Violation::error(
            rules::SCHEMA_TYPE,
            FieldPath::root(),
            "the object must be a mapping",
        ));
        return out;
    };
    let props = schema.get("properties").and_then(Value::as_object);
    for (key, value) in obj {
        let path = FieldPath::of(&[key]);
        match key.as_str() {
            // apiVersion/kind are checked by the loader; metadata by the apiserver's object
            // meta rules; status is ignored on create (status subresource).
            "apiVersion" | "kind" | "metadata" | "status" => {}
            _ => match props.and_then(|p| p.get(key)) {
                Some(s) => walk(value, s, &path, &mut out),
                None => out.push(unknown(&path)),
            },
        }
    }
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for r in required.iter().filter_map(Value::as_str) {
            if !obj.contains_key(r) {
                out.push(Violation::error(
                    rules::SCHEMA_REQUIRED,
                    FieldPath::of(&[r]),
                    "Required value",
                ));
            }
        }
    }
    out
}

fn unknown(path: &FieldPath) -> Violation {
    Violation::warning(
        rules::SCHEMA_UNKNOWN_FIELD,
        path.clone(),
        format!(
            "unknown field {:?} (ignored by the apiserver; check its spelling)",
            path.to_string()
        ),
    )
}

/// The type name kube-openapi's validation reports for a value.
pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn number_text(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

fn type_ok(want: &str, v: &Value) -> bool {
    match want {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
        "number" => v.is_number(),
        _ => true,
    }
}

fn walk(v: &Value, schema: &Value, path: &FieldPath, out: &mut Vec<Violation>) {
    let s = |k: &str| schema.get(k);
    let flag = |k: &str| s(k).and_then(Value::as_bool).unwrap_or(false);
    if v.is_null() {
        if !flag("nullable")
            && let Some(t) = s("type").and_then(Value::as_str)
        {
            out.push(Violation::error(
                rules::SCHEMA_TYPE,
                path.clone(),
                format!("{path} in body must be of type {t}: \"null\""),
            ));
        }
        return;
    }
    if flag("x-kubernetes-int-or-string") {
        if !(v.is_string() || type_ok("integer", v)) {
            out.push(Violation::error(
                rules::SCHEMA_TYPE,
                path.clone(),
                format!(
                    "{path} in body must be of type integer-or-string: {:?}",
                    json_type(v)
                ),
            ));
        }
        return;
    }
    if let Some(t) = s("type").and_then(Value::as_str)
        && !type_ok(t, v)
    {
        out.push(Violation::error(
            rules::SCHEMA_TYPE,
            path.clone(),
            format!("{path} in body must be of type {t}: {:?}", json_type(v)),
        ));
        return;
    }
    if let Some(allowed) = s("enum").and_then(Value::as_array)
        && !allowed.contains(v)
    {
        let list: Vec<String> = allowed.iter().map(|a| a.to_string()).collect();
        out.push(Violation::error(
            rules::SCHEMA_ENUM,
            path.clone(),
            format!(
                "Unsupported value: {v}: supported values: {}",
                list.join(", ")
            ),
        ));
    }
    match v {
        Value::String(text) => {
            let len = text.chars().count() as u64;
            if let Some(max) = s("maxLength").and_then(Value::as_u64)
                && len > max
            {
                out.push(Violation::error(
                    rules::SCHEMA_MAX_LENGTH,
                    path.clone(),
                    format!("{path} in body should be at most {max} chars long"),
                ));
            }
            if let Some(min) = s("minLength").and_then(Value::as_u64)
                && len < min
            {
                out.push(Violation::error(
                    rules::SCHEMA_MIN_LENGTH,
                    path.clone(),
                    format!("{path} in body should be at least {min} chars long"),
                ));
            }
            if let Some(p) = s("pattern").and_then(Value::as_str)
                && pattern_matches(p, text) == Some(false)
            {
                out.push(Violation::error(
                    rules::SCHEMA_PATTERN,
                    path.clone(),
                    format!("{path} in body should match '{p}'"),
                ));
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(0.0);
            if let Some(min) = s("minimum").and_then(Value::as_f64)
                && x < min
            {
                out.push(Violation::error(
                    rules::SCHEMA_MINIMUM,
                    path.clone(),
                    format!(
                        "{path} in body should be greater than or equal to {}",
                        number_text(min)
                    ),
                ));
            }
            if let Some(max) = s("maximum").and_then(Value::as_f64)
                && x > max
            {
                out.push(Violation::error(
                    rules::SCHEMA_MAXIMUM,
                    path.clone(),
                    format!(
                        "{path} in body should be less than or equal to {}",
                        number_text(max)
                    ),
                ));
            }
        }
        Value::Object(map) => walk_object(map, schema, path, out),
        Value::Array(items) => {
            if let Some(item_schema) = s("items") {
                for (i, item) in items.iter().enumerate() {
                    walk(item, item_schema, &path.index(i), out);
                }
            }
        }
        _ => {}
    }
}

fn walk_object(
    map: &Map<String, Value>,
    schema: &Value,
    path: &FieldPath,
    out: &mut Vec<Violation>,
) {
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties");
    let preserve = schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for r in required.iter().filter_map(Value::as_str) {
            if map.get(r).is_none() {
                out.push(Violation::error(
                    rules::SCHEMA_REQUIRED,
                    path.key(r),
                    "Required value",
                ));
            }
        }
    }
    for (key, value) in map {
        let child = path.key(key.as_str());
        if let Some(ps) = props.and_then(|p| p.get(key)) {
            walk(value, ps, &child, out);
        } else if let Some(a) = additional.filter(|a| a.is_object()) {
            walk(value, a, &child, out);
        } else if !(preserve || additional.and_then(Value::as_bool) == Some(true)) {
            out.push(unknown(&child));
        }
    }
}

/// Every pattern in a schema tree (for the coverage test).
#[cfg(test)]
fn patterns(v: &Value, acc: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(p) = m.get("pattern").and_then(Value::as_str) {
                acc.push(p.to_string());
            }
            m.values().for_each(|x| patterns(x, acc));
        }
        Value::Array(a) => a.iter().for_each(|x| patterns(x, acc)),
        _ => {}
    }
}

impl FieldPath {
    /// The path as plain keys when it has no indices (used by tests and tools).
    pub fn keys(&self) -> Vec<&str> {
        self.0
            .iter()
            .filter_map(|s| match s {
                Segment::Key(k) => Some(k.as_str()),
                Segment::Index(_) => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_crd_pattern_has_a_matcher() {
        for i in 0..2 {
            let mut acc = Vec::new();
            patterns(schema_of(i), &mut acc);
            for p in acc {
                assert!(
                    pattern_matches(&p, "x").is_some(),
                    "no matcher for pattern {p}"
                );
            }
        }
        assert!(schema_of(0).is_object() && schema_of(1).is_object());
    }
}
