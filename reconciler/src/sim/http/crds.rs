//! CustomResourceDefinitions created through the API, served as apiextensions-apiserver
//! serves them: the CRD is established (its `status.acceptedNames` and `Established`
//! condition), its storage version is served under `/apis/<group>/<version>/…` with
//! discovery, CRUD, list/watch, the `status` and `scale` subresources, and every write is
//! pruned, defaulted and validated against the version's structural schema.
//!
//! The registry is the one place that says which CRDs a server serves: discovery, routing
//! and the OpenAPI documents read it.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::admission::FieldError;
use super::resources::{self, CustomDef, Rid};

/// The `scale` subresource's JSON paths (`.spec.replicas` as the CRD spells them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalePaths {
    /// `specReplicasPath`.
    pub spec_replicas: String,
    /// `statusReplicasPath`.
    pub status_replicas: String,
    /// `labelSelectorPath`, when set.
    pub label_selector: Option<String>,
}

/// One served CRD.
#[derive(Clone, Debug)]
pub struct ServedCrd {
    /// The CRD's name (`<plural>.<group>`).
    pub name: String,
    /// The resource its served version is.
    pub rid: Rid,
    /// Whether a built-in resource serves it (the NodeWright CRDs): the registry knows it
    /// for documents, the built-in handles its requests.
    pub builtin: bool,
    /// The CRD as stored.
    pub crd: Arc<Value>,
    /// The served version's name.
    pub version: String,
    /// The served version's `openAPIV3Schema`.
    pub schema: Option<Value>,
    /// The `scale` subresource, when enabled.
    pub scale: Option<ScalePaths>,
}

/// The CRDs a server serves, by CRD name.
#[derive(Clone, Debug, Default)]
pub struct CrdRegistry {
    crds: BTreeMap<String, ServedCrd>,
    /// How many times what is served changed: a copy that counts as many serves the same.
    changes: u64,
}

fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The version a CRD serves: its storage version when served, else its first served one.
/// Further served versions are not served (they would need conversion).
fn served_version(crd: &Value) -> Option<&Value> {
    let versions = crd.pointer("/spec/versions")?.as_array()?;
    let served = |v: &&Value| v.get("served").and_then(Value::as_bool).unwrap_or(false);
    versions
        .iter()
        .filter(served)
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .or_else(|| versions.iter().find(served))
}

/// `.spec.replicas` as a JSON pointer.
fn pointer_of(path: &str) -> String {
    path.split('.')
        .filter(|s| !s.is_empty())
        .fold(String::new(), |acc, s| format!("{acc}/{s}"))
}

/// The CRD's own validation (the parts a client can get wrong and that serving relies on),
/// with apiextensions' field paths.
pub fn validate_crd(crd: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let group = text(crd, "/spec/group");
    let plural = text(crd, "/spec/names/plural");
    let kind = text(crd, "/spec/names/kind");
    let name = text(crd, "/metadata/name");
    for (field, value) in [
        ("spec.group", group),
        ("spec.names.plural", plural),
        ("spec.names.kind", kind),
    ] {
        if value.is_empty() {
            errors.push(FieldError {
                field: field.into(),
                reason: "FieldValueRequired",
                message: "Required value".into(),
            });
        }
    }
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        errors.push(FieldError {
            field: "metadata.name".into(),
            reason: "FieldValueInvalid",
            message: format!("Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group"),
        });
    }
    let scope = text(crd, "/spec/scope");
    if scope != "Namespaced" && scope != "Cluster" {
        errors.push(FieldError {
            field: "spec.scope".into(),
            reason: "FieldValueNotSupported",
            message: format!(
                "Unsupported value: {scope:?}: supported values: \"Cluster\", \"Namespaced\""
            ),
        });
    }
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let storage = versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .count();
    if storage != 1 {
        errors.push(FieldError {
            field: "spec.versions".into(),
            reason: "FieldValueInvalid",
            message: format!(
                "Invalid value: {}: must have exactly one version marked as storage version",
                json!(versions)
            ),
        });
    }
    errors
}

/// The CRD as the apiextensions controllers leave it: names defaulted (`singular`,
/// `listKind`), `acceptedNames`, `NamesAccepted` and `Established`, the stored version.
pub fn establish(crd: &mut Value, now: &Value) {
    let kind = text(crd, "/spec/names/kind").to_string();
    let names = &mut crd["spec"]["names"];
    if names.get("singular").is_none() {
        names["singular"] = json!(kind.to_lowercase());
    }
    if names.get("listKind").is_none() {
        names["listKind"] = json!(format!("{kind}List"));
    }
    let accepted = crd["spec"]["names"].clone();
    let stored = served_version(crd)
        .and_then(|v| v.get("name"))
        .cloned()
        .unwrap_or(Value::Null);
    let condition = |type_: &str, reason: &str, message: &str| {
        json!({"type": type_, "status": "True", "lastTransitionTime": now,
               "reason": reason, "message": message})
    };
    crd["status"] = json!({
        "acceptedNames": accepted,
        "conditions": [
            condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "storedVersions": [stored],
    });
}

impl CrdRegistry {
    /// Serves `crd` (a stored, valid CRD): returns the resource it is served as.
    pub fn register(&mut self, crd: &Arc<Value>) -> Option<Rid> {
        let version = served_version(crd)?;
        let version_name = text(version, "/name").to_string();
        let group = text(crd, "/spec/group").to_string();
        let plural = text(crd, "/spec/names/plural").to_string();
        let kind = text(crd, "/spec/names/kind").to_string();
        let builtin = resources::find(&group, &version_name, &plural);
        let subresources = version.get("subresources");
        let scale = subresources
            .and_then(|s| s.get("scale"))
            .map(|s| ScalePaths {
                spec_replicas: text(s, "/specReplicasPath").to_string(),
                status_replicas: text(s, "/statusReplicasPath").to_string(),
                label_selector: s
                    .get("labelSelectorPath")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            });
        let rid = builtin.unwrap_or_else(|| {
            resources::intern(&CustomDef {
                singular: crd
                    .pointer("/spec/names/singular")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| kind.to_lowercase()),
                group,
                version: version_name.clone(),
                plural,
                kind,
                namespaced: text(crd, "/spec/scope") == "Namespaced",
                short_names: crd
                    .pointer("/spec/names/shortNames")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect(),
                status: subresources.and_then(|s| s.get("status")).is_some(),
            })
        });
        let name = text(crd, "/metadata/name").to_string();
        self.changes += 1;
        self.crds.insert(
            name.clone(),
            ServedCrd {
                name,
                rid,
                builtin: builtin.is_some(),
                crd: crd.clone(),
                version: version_name,
                schema: version.pointer("/schema/openAPIV3Schema").cloned(),
                scale,
            },
        );
        Some(rid)
    }

    /// Stops serving the CRD `name`; returns the custom resource it served.
    pub fn unregister(&mut self, name: &str) -> Option<Rid> {
        self.changes += 1;
        self.crds
            .remove(name)
            .filter(|served| !served.builtin)
            .map(|served| served.rid)
    }

    /// How many times what is served changed.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// The custom resource served for a group, version and plural.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<Rid> {
        self.rids().find(|rid| {
            let def = resources::def(*rid);
            def.group == group && def.version == version && def.plural == plural
        })
    }

    /// The served CRD of a custom resource.
    pub fn by_rid(&self, rid: Rid) -> Option<&ServedCrd> {
        self.crds.values().find(|c| c.rid == rid && !c.builtin)
    }

    /// Whether the resource `def` has a `scale` subresource.
    pub fn has_scale(&self, def: &resources::ResourceDef) -> bool {
        self.crds
            .values()
            .any(|c| !c.builtin && c.scale.is_some() && std::ptr::eq(resources::def(c.rid), def))
    }

    /// The custom resources served (those no built-in serves).
    pub fn rids(&self) -> impl Iterator<Item = Rid> + '_ {
        self.crds.values().filter(|c| !c.builtin).map(|c| c.rid)
    }

    /// Every CRD the server knows, built-in or created through the API.
    pub fn served(&self) -> impl Iterator<Item = &ServedCrd> {
        self.crds.values()
    }

    /// What a write of a custom resource stores, as the customresource strategy and codec
    /// make it: a status write changes only `status`; any other write keeps the stored
    /// status when the status subresource is enabled (and a create starts without one);
    /// `metadata.generation` starts at 1 and grows when anything but metadata (and status,
    /// with the subresource) changes; the result is pruned, defaulted and validated against
    /// the schema.
    pub fn admit(
        &self,
        rid: Rid,
        old: Option<&Value>,
        new: &Value,
        status_write: bool,
    ) -> Result<Value, Vec<FieldError>> {
        let Some(served) = self.by_rid(rid) else {
            return Ok(new.clone());
        };
        let has_status = resources::def(rid).status;
        let mut out = match (old, status_write) {
            (Some(old), true) => {
                let mut out = old.clone();
                match new.get("status") {
                    Some(status) => out["status"] = status.clone(),
                    None => {
                        if let Some(map) = out.as_object_mut() {
                            map.remove("status");
                        }
                    }
                }
                out
            }
            _ => {
                let mut out = new.clone();
                if has_status && let Some(map) = out.as_object_mut() {
                    match old.and_then(|o| o.get("status")) {
                        Some(status) => {
                            map.insert("status".into(), status.clone());
                        }
                        None => {
                            map.remove("status");
                        }
                    }
                }
                out
            }
        };
        if let Some(schema) = &served.schema {
            prune_root(&mut out, schema);
            default(&mut out, schema);
            let mut errors = Vec::new();
            validate(&out, schema, "", &mut errors);
            if !errors.is_empty() {
                return Err(errors);
            }
        }
        let generation = match old {
            None => 1,
            Some(old) => {
                let current = old
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64)
                    .unwrap_or(1);
                let content = |v: &Value| {
                    let mut v = v.clone();
                    if let Some(map) = v.as_object_mut() {
                        map.remove("metadata");
                        if has_status {
                            map.remove("status");
                        }
                    }
                    v
                };
                if content(old) != content(&out) {
                    current + 1
                } else {
                    current
                }
            }
        };
        out["metadata"]["generation"] = json!(generation);
        Ok(out)
    }

    /// `GET …/scale`: the autoscaling/v1 Scale of a custom resource with the subresource.
    pub fn scale_of(&self, rid: Rid, object: &Value) -> Option<Value> {
        let paths = self.by_rid(rid)?.scale.as_ref()?;
        let meta = object.get("metadata").cloned().unwrap_or_default();
        let pick = |k: &str| meta.get(k).cloned().unwrap_or(Value::Null);
        let mut scale = json!({
            "kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {"name": pick("name"), "namespace": pick("namespace"), "uid": pick("uid"),
                         "resourceVersion": pick("resourceVersion"),
                         "creationTimestamp": pick("creationTimestamp")},
            "spec": {"replicas": object.pointer(&pointer_of(&paths.spec_replicas)).cloned().unwrap_or(json!(0))},
            "status": {"replicas": object.pointer(&pointer_of(&paths.status_replicas)).cloned().unwrap_or(json!(0))},
        });
        if let Some(selector) = &paths.label_selector
            && let Some(value) = object.pointer(&pointer_of(selector))
        {
            scale["status"]["selector"] = value.clone();
        }
        if meta.get("namespace").is_none()
            && let Some(m) = scale["metadata"].as_object_mut()
        {
            m.remove("namespace");
        }
        Some(scale)
    }

    /// The object a write of `scale` (a Scale) through the subresource leaves: its
    /// `spec.replicas` at the CRD's `specReplicasPath`.
    pub fn with_scale(&self, rid: Rid, object: &Value, scale: &Value) -> Option<Value> {
        let paths = self.by_rid(rid)?.scale.as_ref()?;
        let replicas = scale.pointer("/spec/replicas").cloned().unwrap_or(json!(0));
        let mut out = object.clone();
        let pointer = pointer_of(&paths.spec_replicas);
        let mut at = &mut out;
        for segment in pointer.split('/').filter(|s| !s.is_empty()) {
            if !at.is_object() {
                *at = json!({});
            }
            at = at
                .as_object_mut()?
                .entry(segment.to_string())
                .or_insert(Value::Null);
        }
        *at = replicas;
        if let Some(rv) = scale.pointer("/metadata/resourceVersion") {
            out["metadata"]["resourceVersion"] = rv.clone();
        }
        Some(out)
    }
}

fn flag(schema: &Value, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// Pruning at the root: `apiVersion`, `kind` and `metadata` always stay.
fn prune_root(value: &mut Value, schema: &Value) {
    let Some(map) = value.as_object_mut() else {
        return;
    };
    let kept: Vec<(String, Value)> = ["apiVersion", "kind", "metadata"]
        .into_iter()
        .filter_map(|k| map.remove(k).map(|v| (k.to_string(), v)))
        .collect();
    prune(value, schema);
    if let Some(map) = value.as_object_mut() {
        map.extend(kept);
    }
}

/// Drops the fields the schema does not specify (unless it preserves unknown fields there),
/// and `null` where the schema does not allow it.
fn prune(value: &mut Value, schema: &Value) {
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
            let embedded = flag(schema, "x-kubernetes-embedded-resource");
            map.retain(|key, field| {
                let field_schema = properties
                    .and_then(|p| p.get(key))
                    .or(additional.filter(|a| a.is_object()));
                match field_schema {
                    Some(s) => {
                        if field.is_null() && !flag(s, "nullable") {
                            return false;
                        }
                        prune(field, s);
                        true
                    }
                    None if additional == Some(&Value::Bool(true)) => true,
                    None if embedded && ["apiVersion", "kind", "metadata"].contains(&&**key) => {
                        true
                    }
                    None => preserve,
                }
            });
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    prune(item, item_schema);
                }
            }
        }
        _ => {}
    }
}

/// Sets each missing field that has a `default` (recursively, as structural defaulting).
fn default(value: &mut Value, schema: &Value) {
    match value {
        Value::Object(map) => {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (key, field_schema) in properties {
                    if let Some(default) = field_schema.get("default")
                        && map
                            .get(key)
                            .is_none_or(|v| v.is_null() && !flag(field_schema, "nullable"))
                    {
                        map.insert(key.clone(), default.clone());
                    }
                }
                for (key, field) in map.iter_mut() {
                    if let Some(field_schema) = properties.get(key) {
                        default(field, field_schema);
                    }
                }
            } else if let Some(additional) =
                schema.get("additionalProperties").filter(|a| a.is_object())
            {
                for field in map.values_mut() {
                    default(field, additional);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    default(item, item_schema);
                }
            }
        }
        _ => {}
    }
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn invalid(path: &str, value: &Value, why: String) -> FieldError {
    FieldError {
        field: path.to_string(),
        reason: "FieldValueInvalid",
        message: format!("Invalid value: {value}: {why}"),
    }
}

/// The schema's value validation (types, `required`, `enum`, bounds, lengths, `pattern`,
/// item counts), with kube-openapi's messages.
fn validate(value: &Value, schema: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let shown = if path.is_empty() { "body" } else { path };
    if value.is_null() {
        if !flag(schema, "nullable") && schema.get("type").is_some() {
            errors.push(invalid(
                path,
                &json!("null"),
                format!(
                    "{shown} in body must be of type {}: \"null\"",
                    text(schema, "/type")
                ),
            ));
        }
        return;
    }
    let actual = nodewright_schema::validate::structural::json_type(value);
    let int_or_string = flag(schema, "x-kubernetes-int-or-string");
    if int_or_string {
        if actual != "integer" && actual != "string" {
            errors.push(invalid(
                path,
                &json!(actual),
                format!("{shown} in body must be of type integer,string: {actual:?}"),
            ));
            return;
        }
    } else if let Some(wanted) = schema.get("type").and_then(Value::as_str) {
        let fits = wanted == actual || (wanted == "number" && actual == "integer");
        if !fits {
            errors.push(invalid(
                path,
                &json!(actual),
                format!("{shown} in body must be of type {wanted}: {actual:?}"),
            ));
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let supported: Vec<String> = allowed.iter().map(Value::to_string).collect();
        errors.push(FieldError {
            field: path.to_string(),
            reason: "FieldValueNotSupported",
            message: format!(
                "Unsupported value: {value}: supported values: {}",
                supported.join(", ")
            ),
        });
    }
    match value {
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or_default();
            if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
                && x < min
            {
                errors.push(invalid(
                    path,
                    value,
                    format!("{shown} in body should be greater than or equal to {min}"),
                ));
            }
            if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
                && x > max
            {
                errors.push(invalid(
                    path,
                    value,
                    format!("{shown} in body should be less than or equal to {max}"),
                ));
            }
        }
        Value::String(s) => {
            let chars = s.chars().count() as u64;
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
                && chars < min
            {
                errors.push(invalid(
                    path,
                    value,
                    format!("{shown} in body should be at least {min} chars long"),
                ));
            }
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
                && chars > max
            {
                errors.push(FieldError {
                    field: path.to_string(),
                    reason: "FieldValueTooLong",
                    message: format!("Too long: may not be more than {max} bytes"),
                });
            }
            if let Some(pattern) = schema.get("pattern").and_then(Value::as_str)
                && let Ok(re) = regex::Regex::new(pattern)
                && !re.is_match(s)
            {
                errors.push(invalid(
                    path,
                    value,
                    format!("{shown} in body should match '{pattern}'"),
                ));
            }
        }
        Value::Array(items) => {
            let n = items.len() as u64;
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                && n < min
            {
                errors.push(invalid(
                    path,
                    &json!(n),
                    format!("{shown} in body should have at least {min} items"),
                ));
            }
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && n > max
            {
                errors.push(FieldError {
                    field: path.to_string(),
                    reason: "FieldValueTooMany",
                    message: format!("Too many: {n}: must have at most {max} items"),
                });
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    validate(item, item_schema, &format!("{path}[{i}]"), errors);
                }
            }
        }
        Value::Object(map) => {
            for required in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                if !map.contains_key(required) {
                    errors.push(FieldError {
                        field: child(path, required),
                        reason: "FieldValueRequired",
                        message: "Required value".into(),
                    });
                }
            }
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (key, field) in map {
                if path.is_empty() && ["apiVersion", "kind", "metadata"].contains(&key.as_str()) {
                    continue;
                }
                if let Some(field_schema) = properties.and_then(|p| p.get(key)).or(additional) {
                    validate(field, field_schema, &child(path, key), errors);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["image"],
                    "properties": {
                        "image": {"type": "string", "minLength": 1},
                        "replicas": {"type": "integer", "default": 1, "minimum": 0},
                        "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
                        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "budget": {"x-kubernetes-int-or-string": true},
                    },
                },
                "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
            },
        })
    }

    fn crd() -> Arc<Value> {
        Arc::new(json!({
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                              "schema": {"openAPIV3Schema": schema()},
                              "subresources": {"status": {},
                                               "scale": {"specReplicasPath": ".spec.replicas",
                                                         "statusReplicasPath": ".status.replicas"}}}],
            },
        }))
    }

    #[test]
    fn a_create_is_pruned_defaulted_and_starts_at_generation_one_without_status() {
        let mut registry = CrdRegistry::default();
        let rid = registry.register(&crd()).expect("served");
        let stored = registry
            .admit(
                rid,
                None,
                &json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
                        "spec": {"image": "x", "unknown": 1, "extra": {"kept": true}},
                        "status": {"ready": true}}),
                false,
            )
            .expect("valid");
        assert_eq!(stored["spec"]["replicas"], 1);
        assert_eq!(stored["spec"]["mode"], "a");
        assert!(stored["spec"].get("unknown").is_none());
        assert_eq!(stored["spec"]["extra"]["kept"], true);
        assert!(stored.get("status").is_none());
        assert_eq!(stored["metadata"]["generation"], 1);
    }

    #[test]
    fn invalid_fields_are_named_with_their_paths() {
        let mut registry = CrdRegistry::default();
        let rid = registry.register(&crd()).expect("served");
        let errors = registry
            .admit(
                rid,
                None,
                &json!({"metadata": {"name": "w"},
                        "spec": {"replicas": "two", "mode": "c", "budget": true}}),
                false,
            )
            .expect_err("invalid");
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert!(fields.contains(&"spec.image"), "{errors:?}");
        assert!(fields.contains(&"spec.replicas"), "{errors:?}");
        assert!(fields.contains(&"spec.mode"), "{errors:?}");
        assert!(fields.contains(&"spec.budget"), "{errors:?}");
    }

    #[test]
    fn status_and_spec_writes_stay_on_their_side() {
        let mut registry = CrdRegistry::default();
        let rid = registry.register(&crd()).expect("served");
        let old = json!({"metadata": {"name": "w", "generation": 1},
                         "spec": {"image": "x", "replicas": 1, "mode": "a"},
                         "status": {"ready": false}});
        let status_write = registry
            .admit(
                rid,
                Some(&old),
                &json!({"metadata": {"name": "w"}, "spec": {"image": "changed"},
                        "status": {"ready": true}}),
                true,
            )
            .expect("valid");
        assert_eq!(status_write["spec"]["image"], "x");
        assert_eq!(status_write["status"]["ready"], true);
        assert_eq!(status_write["metadata"]["generation"], 1);
        let spec_write = registry
            .admit(
                rid,
                Some(&old),
                &json!({"metadata": {"name": "w"}, "spec": {"image": "y"},
                        "status": {"ready": true}}),
                false,
            )
            .expect("valid");
        assert_eq!(spec_write["spec"]["image"], "y");
        assert_eq!(spec_write["status"]["ready"], false);
        assert_eq!(spec_write["metadata"]["generation"], 2);
    }

    #[test]
    fn a_crd_named_otherwise_than_plural_dot_group_is_refused() {
        let mut bad = (*crd()).clone();
        bad["metadata"]["name"] = json!("widgets");
        let errors = validate_crd(&bad);
        assert_eq!(errors[0].field, "metadata.name");
    }
}
