//! `/openapi/v2` and `/openapi/v3` as kube-apiserver publishes them, for every served kind:
//! built-ins from k8s-openapi's schemas with the `x-kubernetes-*` extensions of the Kubernetes
//! 1.33 document (`data/openapi-extensions.json`), custom resources from their CRD's
//! `openAPIV3Schema`. kubectl reads them to validate (it sends `fieldValidation` when a kind's
//! PATCH operation declares it, and the server checks, [`Catalog::unknown_fields`]), to compute strategic
//! merge patches in `apply`, and for `explain`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};

use k8s_openapi::schemars::{JsonSchema, SchemaGenerator, generate::SchemaSettings};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha512};

use std::collections::HashMap;

use axum::response::Response;

use super::error::{ApiError, json_response};
use super::resources::{CRDS, RESOURCES, ResourceDef};
use super::select::Selectors;
use super::world::World;

const REF_V3: &str = "#/components/schemas/";
const REF_V2: &str = "#/definitions/";
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";
const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";
const EVICTION: &str = "io.k8s.api.policy.v1.Eviction";

/// One kind in the documents: where it is served and the component schema of its objects.
#[derive(Clone, Debug)]
pub struct KindSchema {
    /// API group (`""` for core).
    pub group: String,
    /// Version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Plural (the URL segment).
    pub plural: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Whether a `status` subresource exists.
    pub status: bool,
    /// The component schema name (`io.k8s.api.core.v1.Node`, `com.nvidia.nodewright.v1alpha1.NodeWright`).
    pub schema: String,
    /// Built-in (strategic merge patch accepted) or a custom resource.
    pub builtin: bool,
}

impl KindSchema {
    fn path_prefix(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }

    /// `api/v1` or `apis/<group>/<version>`: the key of the group-version's v3 document.
    fn group_version_key(&self) -> String {
        group_version_key(&self.group, &self.version)
    }
}

fn group_version_key(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The served kinds and every component schema they need.
pub struct Catalog {
    kinds: Vec<KindSchema>,
    schemas: BTreeMap<String, Arc<Value>>,
}

/// The built-in kind's schema name and, through `generator`, its definitions.
fn builtin_schema(def: &ResourceDef, generator: &mut SchemaGenerator) -> Option<String> {
    use k8s_openapi::api;
    fn add<T: JsonSchema>(generator: &mut SchemaGenerator) -> Option<String> {
        generator.subschema_for::<T>();
        Some(T::schema_name().into_owned())
    }
    match (def.group, def.version, def.kind) {
        ("", "v1", "Node") => add::<api::core::v1::Node>(generator),
        ("", "v1", "Pod") => add::<api::core::v1::Pod>(generator),
        ("", "v1", "ConfigMap") => add::<api::core::v1::ConfigMap>(generator),
        ("", "v1", "Namespace") => add::<api::core::v1::Namespace>(generator),
        ("", "v1", "Event") => add::<api::core::v1::Event>(generator),
        ("batch", "v1", "Job") => add::<api::batch::v1::Job>(generator),
        ("policy", "v1", "PodDisruptionBudget") => {
            add::<api::policy::v1::PodDisruptionBudget>(generator)
        }
        ("coordination.k8s.io", "v1", "Lease") => add::<api::coordination::v1::Lease>(generator),
        ("events.k8s.io", "v1", "Event") => add::<api::events::v1::Event>(generator),
        ("apps", "v1", "Deployment") => add::<api::apps::v1::Deployment>(generator),
        ("apps", "v1", "ReplicaSet") => add::<api::apps::v1::ReplicaSet>(generator),
        ("apps", "v1", "DaemonSet") => add::<api::apps::v1::DaemonSet>(generator),
        ("apps", "v1", "StatefulSet") => add::<api::apps::v1::StatefulSet>(generator),
        ("apiextensions.k8s.io", "v1", "CustomResourceDefinition") => add::<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        >(generator),
        _ => None,
    }
}

/// The built-in kinds and the component schemas by name.
type Builtins = (Vec<KindSchema>, BTreeMap<String, Arc<Value>>);

/// The built-in kinds and their definitions, with the extensions of the Kubernetes document.
/// Built once: they depend only on the binary.
fn builtins() -> &'static Builtins {
    static BUILTINS: OnceLock<Builtins> = OnceLock::new();
    BUILTINS.get_or_init(|| {
        let mut generator = SchemaSettings::openapi3().into_generator();
        let mut kinds = Vec::new();
        for def in RESOURCES {
            if let Some(schema) = builtin_schema(def, &mut generator) {
                kinds.push(KindSchema {
                    group: def.group.into(),
                    version: def.version.into(),
                    kind: def.kind.into(),
                    plural: def.plural.into(),
                    namespaced: def.namespaced,
                    status: def.status,
                    schema,
                    builtin: true,
                });
            }
        }
        generator.subschema_for::<k8s_openapi::api::policy::v1::Eviction>();
        generator.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::Status>();
        generator.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions>();
        let mut definitions = generator.take_definitions(true);
        definitions.insert(
            PATCH.into(),
            json!({"description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body.", "type": "object"}),
        );
        let extensions: Map<String, Value> =
            serde_json::from_str(include_str!("data/openapi-extensions.json")).unwrap_or_default();
        let schemas = definitions
            .into_iter()
            .map(|(name, mut schema)| {
                if let Some(Value::Object(entry)) = extensions.get(&name) {
                    add_extensions(&mut schema, entry);
                }
                (name, Arc::new(schema))
            })
            .collect();
        (kinds, schemas)
    })
}

fn add_extensions(schema: &mut Value, entry: &Map<String, Value>) {
    for (property, extensions) in entry {
        let target = if property.is_empty() {
            Some(&mut *schema)
        } else {
            schema.pointer_mut(&format!("/properties/{property}"))
        };
        if let (Some(Value::Object(target)), Value::Object(extensions)) = (target, extensions) {
            for (k, v) in extensions {
                target.insert(k.clone(), v.clone());
            }
        }
    }
}

/// `nodewright.nvidia.com` → `com.nvidia.nodewright`, as the apiserver names CRD schemas.
fn reversed(group: &str) -> String {
    group.split('.').rev().collect::<Vec<_>>().join(".")
}

/// The kinds and schemas of served CRDs: each served version of each CRD object in `crds` for
/// which `served(group, version, plural)` holds.
fn crd_kinds(
    crds: &[Arc<Value>],
    served: &dyn Fn(&str, &str, &str) -> bool,
) -> Vec<(KindSchema, Value)> {
    let mut out = Vec::new();
    for crd in crds {
        let text = |p: &str| crd.pointer(p).and_then(Value::as_str).unwrap_or_default();
        let (group, kind, plural) = (
            text("/spec/group"),
            text("/spec/names/kind"),
            text("/spec/names/plural"),
        );
        let namespaced = text("/spec/scope") == "Namespaced";
        for version in crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = version
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if version.get("served") == Some(&Value::Bool(false)) || !served(group, name, plural) {
                continue;
            }
            let mut schema = version
                .pointer("/schema/openAPIV3Schema")
                .cloned()
                .unwrap_or_else(
                    || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
                );
            let properties = &mut schema["properties"];
            if !properties.is_object() {
                *properties = json!({});
            }
            properties["apiVersion"] = json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"});
            properties["kind"] = json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"});
            properties["metadata"] = json!({"allOf": [{"$ref": format!("{REF_V3}{OBJECT_META}")}], "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"});
            schema["x-kubernetes-group-version-kind"] =
                json!([{"group": group, "kind": kind, "version": name}]);
            let status = version.pointer("/subresources/status").is_some();
            out.push((
                KindSchema {
                    group: group.into(),
                    version: name.into(),
                    kind: kind.into(),
                    plural: plural.into(),
                    namespaced,
                    status,
                    schema: format!("{}.{name}.{kind}", reversed(group)),
                    builtin: false,
                },
                schema,
            ));
        }
    }
    out
}

impl Catalog {
    /// The built-ins and the CRDs in `crds` that the server serves (`served(group, version,
    /// plural)`).
    pub fn new(crds: &[Arc<Value>], served: &dyn Fn(&str, &str, &str) -> bool) -> Self {
        let (builtin_kinds, builtin_schemas) = builtins();
        let mut kinds = builtin_kinds.clone();
        let mut schemas = builtin_schemas.clone();
        for (kind, schema) in crd_kinds(crds, served) {
            schemas.insert(kind.schema.clone(), Arc::new(schema));
            kinds.push(kind);
        }
        Catalog { kinds, schemas }
    }

    /// The kind served at `group`/`version`/`plural`.
    pub fn kind(&self, group: &str, version: &str, plural: &str) -> Option<&KindSchema> {
        self.kinds
            .iter()
            .find(|k| k.group == group && k.version == version && k.plural == plural)
    }

    /// The group-versions served, as `api/v1`, `apis/batch/v1`, ….
    fn group_versions(&self) -> BTreeSet<String> {
        self.kinds
            .iter()
            .map(KindSchema::group_version_key)
            .collect()
    }

    /// The names of `roots` and every schema they reference.
    fn closure(&self, roots: impl IntoIterator<Item = String>) -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo: Vec<String> = roots.into_iter().collect();
        while let Some(name) = todo.pop() {
            if !seen.insert(name.clone()) {
                continue;
            }
            if let Some(schema) = self.schemas.get(&name) {
                collect_refs(schema, &mut todo);
            }
        }
        seen
    }

    /// The component schemas of `kinds` (and of the bodies every document names).
    fn components(&self, kinds: &[&KindSchema]) -> Map<String, Value> {
        let mut roots: Vec<String> = kinds.iter().map(|k| k.schema.clone()).collect();
        roots.extend([PATCH, STATUS, DELETE_OPTIONS].map(String::from));
        if kinds.iter().any(|k| k.group.is_empty() && k.kind == "Pod") {
            roots.push(EVICTION.into());
        }
        self.closure(roots)
            .into_iter()
            .filter_map(|name| {
                let schema = self.schemas.get(&name)?;
                Some((name, (**schema).clone()))
            })
            .collect()
    }

    /// `GET /openapi/v3/<key>`: the document of one group-version (`api/v1`, `apis/batch/v1`).
    pub fn v3_document(&self, key: &str) -> Option<Value> {
        let kinds: Vec<&KindSchema> = self
            .kinds
            .iter()
            .filter(|k| k.group_version_key() == key)
            .collect();
        if kinds.is_empty() {
            return None;
        }
        let mut paths = Map::new();
        for kind in &kinds {
            add_paths(&mut paths, kind, Spec::V3);
        }
        Some(json!({
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": "v1.33.0"},
            "paths": paths,
            "components": {"schemas": self.components(&kinds)},
        }))
    }

    /// `GET /openapi/v3`: each group-version's document with the hash of its content, which
    /// clients put in the URL they fetch and cache it under.
    pub fn v3_root(&self) -> Value {
        let mut paths = Map::new();
        for key in self.group_versions() {
            let hash = self
                .v3_document(&key)
                .map(|doc| {
                    let digest = Sha512::digest(doc.to_string().as_bytes());
                    digest
                        .iter()
                        .map(|b| format!("{b:02X}"))
                        .collect::<String>()
                })
                .unwrap_or_default();
            paths.insert(
                key.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={hash}")}),
            );
        }
        json!({"paths": paths})
    }

    /// `GET /openapi/v2`: one Swagger 2.0 document of every served kind.
    pub fn v2_document(&self) -> Value {
        let kinds: Vec<&KindSchema> = self.kinds.iter().collect();
        let mut paths = Map::new();
        for kind in &kinds {
            add_paths(&mut paths, kind, Spec::V2);
        }
        let mut definitions = Value::Object(self.components(&kinds));
        rewrite_refs(&mut definitions);
        json!({
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": "v1.33.0"},
            "paths": paths,
            "definitions": definitions,
        })
    }

    fn lookup(&self) -> SchemaLookup<'_> {
        SchemaLookup {
            schemas: &self.schemas,
        }
    }

    /// The fields of `object` that the schema of `kind` does not declare, as kube-apiserver
    /// names them in strict field validation (`spec.foo`, `spec.containers[0].bar`). Keys of a
    /// strategic merge patch's directives (`$patch`, `$setElementOrder/…`, …) are not fields.
    pub fn unknown_fields(
        &self,
        kind: &KindSchema,
        object: &mut Value,
        prune: bool,
    ) -> Vec<String> {
        match self.schemas.get(&kind.schema) {
            Some(schema) => self.lookup().unknown_fields(schema, object, prune),
            None => Vec::new(),
        }
    }
}

/// Reads schemas of one document: follows `$ref`s and finds fields.
pub struct SchemaLookup<'a> {
    schemas: &'a BTreeMap<String, Arc<Value>>,
}

impl<'a> SchemaLookup<'a> {
    /// `schema` itself, or what its `$ref` (or a single-element `allOf` around one) names.
    pub fn resolve(&self, mut schema: &'a Value) -> &'a Value {
        for _ in 0..16 {
            if let Some(target) = schema.get("$ref").and_then(Value::as_str) {
                match target
                    .strip_prefix(REF_V3)
                    .and_then(|name| self.schemas.get(name))
                {
                    Some(next) => schema = next,
                    None => return schema,
                }
            } else if let Some([only]) = schema
                .get("allOf")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                && schema.get("properties").is_none()
            {
                schema = only;
            } else {
                return schema;
            }
        }
        schema
    }

    /// The fields of `object` that `schema` does not declare (see
    /// [`Catalog::unknown_fields`]); with `prune`, they are removed from `object`, as the
    /// apiserver drops them when it does not refuse them.
    pub fn unknown_fields(
        &self,
        schema: &'a Value,
        object: &mut Value,
        prune: bool,
    ) -> Vec<String> {
        let mut out = Vec::new();
        self.walk(schema, object, String::new(), prune, &mut out);
        out
    }

    fn walk(
        &self,
        schema: &'a Value,
        value: &mut Value,
        path: String,
        prune: bool,
        out: &mut Vec<String>,
    ) {
        let schema = self.resolve(schema);
        if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
            || schema.get("x-kubernetes-int-or-string").is_some()
            || schema.get("x-kubernetes-embedded-resource").is_some()
        {
            return;
        }
        match value {
            Value::Object(map) => {
                let properties = schema.get("properties").and_then(Value::as_object);
                let additional = schema.get("additionalProperties").filter(|a| a.is_object());
                if properties.is_none() && additional.is_none() {
                    return;
                }
                let mut unknown = Vec::new();
                for (key, child) in map.iter_mut() {
                    if key.starts_with('$') {
                        continue;
                    }
                    let child_path = if path.is_empty() {
                        key.clone()
                    } else {
                        format!("{path}.{key}")
                    };
                    match properties.and_then(|p| p.get(key)).or(additional) {
                        Some(child_schema) => {
                            self.walk(child_schema, child, child_path, prune, out)
                        }
                        None => {
                            out.push(child_path);
                            unknown.push(key.clone());
                        }
                    }
                }
                if prune {
                    for key in unknown {
                        map.remove(&key);
                    }
                }
            }
            Value::Array(items) => {
                if let Some(item_schema) = schema.get("items") {
                    for (i, item) in items.iter_mut().enumerate() {
                        self.walk(item_schema, item, format!("{path}[{i}]"), prune, out);
                    }
                }
            }
            _ => {}
        }
    }

    /// The schema of the member `key` of an object of (resolved) `schema`: its property or,
    /// for a map, its values' schema. The property's own extensions stay on what is returned.
    pub fn field(&self, schema: &'a Value, key: &str) -> Option<&'a Value> {
        schema
            .get("properties")
            .and_then(|p| p.get(key))
            .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()))
    }
}

/// The schema lookup of the built-in kinds and the schema of `def`'s objects, when `def` is a
/// built-in kind (strategic merge patch applies to those only).
pub fn builtin_schema_of(def: &ResourceDef) -> Option<(SchemaLookup<'static>, &'static Value)> {
    let (kinds, schemas) = builtins();
    let kind = kinds
        .iter()
        .find(|k| k.group == def.group && k.version == def.version && k.plural == def.plural)?;
    let schema = schemas.get(&kind.schema)?;
    Some((SchemaLookup { schemas }, &**schema))
}

fn collect_refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("$ref", Value::String(target)) => {
                        if let Some(name) = target.strip_prefix(REF_V3) {
                            out.push(name.to_string());
                        }
                    }
                    _ => collect_refs(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}

/// Swagger 2.0 names its schemas under `#/definitions/`.
fn rewrite_refs(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                match (k.as_str(), v) {
                    ("$ref", Value::String(target)) => {
                        if let Some(name) = target.strip_prefix(REF_V3) {
                            *target = format!("{REF_V2}{name}");
                        }
                    }
                    (_, v) => rewrite_refs(v),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(rewrite_refs),
        _ => {}
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Spec {
    V2,
    V3,
}

fn query_parameter(name: &str, description: &str, type_: &str, spec: Spec) -> Value {
    match spec {
        Spec::V3 => json!({"name": name, "in": "query", "description": description,
                           "schema": {"type": type_, "uniqueItems": true}}),
        Spec::V2 => json!({"name": name, "in": "query", "description": description,
                           "type": type_, "uniqueItems": true}),
    }
}

/// The write options every create, update and patch takes; kubectl looks for
/// `fieldValidation` on a kind's PATCH to know the server validates fields.
fn write_parameters(spec: Spec, patch: bool) -> Vec<Value> {
    let mut out = vec![
        query_parameter(
            "dryRun",
            "When present, indicates that modifications should not be persisted. Valid values are: - All: all dry run stages will be processed",
            "string",
            spec,
        ),
        query_parameter(
            "fieldManager",
            "fieldManager is a name associated with the actor or entity that is making these changes.",
            "string",
            spec,
        ),
        query_parameter(
            "fieldValidation",
            "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore - Warn (the default) - Strict",
            "string",
            spec,
        ),
    ];
    if patch {
        out.push(query_parameter(
            "force",
            "Force is going to \"force\" Apply requests.",
            "boolean",
            spec,
        ));
    }
    out
}

fn schema_ref(name: &str, spec: Spec) -> Value {
    match spec {
        Spec::V3 => json!({"$ref": format!("{REF_V3}{name}")}),
        Spec::V2 => json!({"$ref": format!("{REF_V2}{name}")}),
    }
}

/// One operation of `kind`: `action` is the apiserver's `x-kubernetes-action`.
fn operation(
    kind: &KindSchema,
    action: &str,
    id: &str,
    body: Option<(&[&str], &str)>,
    response: &str,
    spec: Spec,
) -> Value {
    let mut op = json!({
        "description": format!("{action} {}", kind.kind),
        "operationId": id,
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": kind.group, "version": kind.version, "kind": kind.kind},
    });
    let mut parameters = match action {
        "post" | "put" => write_parameters(spec, false),
        "patch" => write_parameters(spec, true),
        _ => Vec::new(),
    };
    match spec {
        Spec::V3 => {
            op["responses"] = json!({"200": {"description": "OK", "content": {
                "application/json": {"schema": schema_ref(response, spec)},
                "application/yaml": {"schema": schema_ref(response, spec)},
            }}});
            if let Some((types, schema)) = body {
                let content: Map<String, Value> = types
                    .iter()
                    .map(|t| (t.to_string(), json!({"schema": schema_ref(schema, spec)})))
                    .collect();
                op["requestBody"] = json!({"content": content, "required": true});
            }
        }
        Spec::V2 => {
            op["responses"] =
                json!({"200": {"description": "OK", "schema": schema_ref(response, spec)}});
            op["produces"] = json!(["application/json", "application/yaml"]);
            if let Some((types, schema)) = body {
                op["consumes"] = json!(types);
                parameters.push(json!({"name": "body", "in": "body", "required": true,
                                       "schema": schema_ref(schema, spec)}));
            }
        }
    }
    op["parameters"] = json!(parameters);
    op
}

fn add_paths(paths: &mut Map<String, Value>, kind: &KindSchema, spec: Spec) {
    let prefix = kind.path_prefix();
    let collection = if kind.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}", kind.plural)
    } else {
        format!("{prefix}/{}", kind.plural)
    };
    let item = format!("{collection}/{{name}}");
    let id = |verb: &str, suffix: &str| {
        let group: String = kind
            .group
            .split('.')
            .next()
            .unwrap_or_default()
            .chars()
            .enumerate()
            .map(|(i, c)| if i == 0 { c.to_ascii_uppercase() } else { c })
            .collect();
        let group = if group.is_empty() {
            "Core".into()
        } else {
            group
        };
        let version: String = kind
            .version
            .chars()
            .enumerate()
            .map(|(i, c)| if i == 0 { c.to_ascii_uppercase() } else { c })
            .collect();
        let scope = if kind.namespaced { "Namespaced" } else { "" };
        format!("{verb}{group}{version}{scope}{}{suffix}", kind.kind)
    };
    let json_types: &[&str] = &["application/json", "application/yaml"];
    let patch_types: &[&str] = if kind.builtin {
        &[
            "application/apply-patch+yaml",
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",
        ]
    } else {
        &[
            "application/apply-patch+yaml",
            "application/json-patch+json",
            "application/merge-patch+json",
        ]
    };
    let mut path_parameters = vec![];
    if kind.namespaced {
        path_parameters.push(match spec {
            Spec::V3 => json!({"name": "namespace", "in": "path", "required": true, "description": "object name and auth scope, such as for teams and projects", "schema": {"type": "string", "uniqueItems": true}}),
            Spec::V2 => json!({"name": "namespace", "in": "path", "required": true, "description": "object name and auth scope, such as for teams and projects", "type": "string", "uniqueItems": true}),
        });
    }
    paths.insert(
        collection.clone(),
        json!({
            "get": operation(kind, "list", &id("list", ""), None, &kind.schema, spec),
            "post": operation(kind, "post", &id("create", ""), Some((json_types, &kind.schema)), &kind.schema, spec),
            "delete": operation(kind, "deletecollection", &id("deleteCollection", ""), Some((json_types, DELETE_OPTIONS)), STATUS, spec),
            "parameters": path_parameters,
        }),
    );
    let mut item_parameters = path_parameters.clone();
    item_parameters.push(match spec {
        Spec::V3 => json!({"name": "name", "in": "path", "required": true, "description": format!("name of the {}", kind.kind), "schema": {"type": "string", "uniqueItems": true}}),
        Spec::V2 => json!({"name": "name", "in": "path", "required": true, "description": format!("name of the {}", kind.kind), "type": "string", "uniqueItems": true}),
    });
    paths.insert(
        item.clone(),
        json!({
            "get": operation(kind, "get", &id("read", ""), None, &kind.schema, spec),
            "put": operation(kind, "put", &id("replace", ""), Some((json_types, &kind.schema)), &kind.schema, spec),
            "patch": operation(kind, "patch", &id("patch", ""), Some((patch_types, PATCH)), &kind.schema, spec),
            "delete": operation(kind, "delete", &id("delete", ""), Some((json_types, DELETE_OPTIONS)), STATUS, spec),
            "parameters": item_parameters,
        }),
    );
    if kind.status {
        paths.insert(
            format!("{item}/status"),
            json!({
                "get": operation(kind, "get", &id("read", "Status"), None, &kind.schema, spec),
                "put": operation(kind, "put", &id("replace", "Status"), Some((json_types, &kind.schema)), &kind.schema, spec),
                "patch": operation(kind, "patch", &id("patch", "Status"), Some((patch_types, PATCH)), &kind.schema, spec),
                "parameters": item_parameters,
            }),
        );
    }
    if kind.builtin && kind.group.is_empty() && kind.kind == "Pod" {
        let mut eviction = operation(
            kind,
            "post",
            "createCoreV1NamespacedPodEviction",
            Some((json_types, EVICTION)),
            EVICTION,
            spec,
        );
        eviction["x-kubernetes-group-version-kind"] =
            json!({"group": "policy", "version": "v1", "kind": "Eviction"});
        paths.insert(
            format!("{item}/eviction"),
            json!({"post": eviction, "parameters": item_parameters}),
        );
    }
}

/// The `served(group, version, plural)` test of [`Catalog::new`] for the static resource table.
pub fn served_by_table(group: &str, version: &str, plural: &str) -> bool {
    super::resources::find(group, version, plural).is_some()
}

/// The catalog of what `world` serves now: the built-ins and its served CRDs.
pub fn catalog(world: &World) -> Catalog {
    world.read(|inner| {
        let crds = inner.list(CRDS, None, &Selectors::default());
        let served = |g: &str, v: &str, p: &str| {
            served_by_table(g, v, p) || inner.crds.find(g, v, p).is_some()
        };
        Catalog::new(&crds, &served)
    })
}

/// `/openapi/v2`, `/openapi/v3` and `/openapi/v3/<group-version>`; `None` for other paths.
pub fn serve(
    world: &World,
    path: &str,
    query: &HashMap<String, String>,
) -> Option<Result<Response, ApiError>> {
    let path = path.trim_end_matches('/');
    let rest = path.strip_prefix("/openapi/")?;
    let not_found = || {
        ApiError::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    };
    let catalog = catalog(world);
    Some(match rest {
        "v2" => Ok(json_response(200, &catalog.v2_document())),
        "v3" => Ok(json_response(200, &catalog.v3_root())),
        _ => match rest.strip_prefix("v3/") {
            Some(key) => catalog
                .v3_document(key)
                .map(|doc| {
                    let mut response = json_response(200, &doc);
                    // A URL with the document's hash names that content for good, as the
                    // apiserver tells caches.
                    if query.contains_key("hash") {
                        response.headers_mut().insert(
                            axum::http::header::CACHE_CONTROL,
                            axum::http::HeaderValue::from_static("public, immutable"),
                        );
                    }
                    response
                })
                .ok_or_else(not_found),
            None => Err(not_found()),
        },
    })
}

/// Field validation of a write's body for the resource `def` (see
/// [`Catalog::unknown_fields`]): the warnings to answer with, or the refusal of `Strict`.
/// Unknown fields that are not refused are removed from `body` (the `bool`: whether any
/// was). `options` names the write's options kind for the refusal of an unknown directive.
pub fn check_fields(
    world: &World,
    def: &ResourceDef,
    directive: Option<&str>,
    options: &str,
    body: &mut Value,
) -> Result<(Vec<String>, bool), ApiError> {
    let directive = directive.filter(|d| !d.is_empty()).unwrap_or("Warn");
    if !matches!(directive, "Strict" | "Warn" | "Ignore") {
        let why = format!(
            "fieldValidation: Unsupported value: {directive:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""
        );
        return Err(ApiError::new(
            422,
            "Invalid",
            format!("{options}.meta.k8s.io \"\" is invalid: {why}"),
        )
        .with_details(json!({
            "group": "meta.k8s.io", "kind": options,
            "causes": [{"reason": "FieldValueNotSupported", "message": why, "field": "fieldValidation"}],
        })));
    }
    let prune = directive != "Strict";
    // Built-in kinds need no look at the served CRDs.
    let fields = match builtin_schema_of(def) {
        Some((lookup, schema)) => lookup.unknown_fields(schema, body, prune),
        None => {
            let catalog = catalog(world);
            match catalog.kind(def.group, def.version, def.plural) {
                Some(kind) => catalog.unknown_fields(kind, body, prune),
                None => return Ok((Vec::new(), false)),
            }
        }
    };
    let unknown: Vec<String> = fields
        .into_iter()
        .map(|field| format!("unknown field {field:?}"))
        .collect();
    if unknown.is_empty() || directive == "Ignore" {
        return Ok((Vec::new(), prune && !unknown.is_empty()));
    }
    if directive == "Strict" {
        return Err(ApiError::bad_request(format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: strict decoding error: {}",
            unknown.join(", "),
            kind = def.kind,
            version = def.version,
        )));
    }
    let warnings = unknown
        .iter()
        .map(|w| format!("299 - {}", serde_json::to_string(w).unwrap_or_default()))
        .collect();
    Ok((warnings, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> Catalog {
        let crds: Vec<Arc<Value>> = nodewright_schema::crd::all()
            .into_iter()
            .map(|(_, crd)| Arc::new(serde_json::to_value(crd).unwrap()))
            .collect();
        Catalog::new(&crds, &served_by_table)
    }

    #[test]
    fn built_in_schemas_carry_the_kubernetes_extensions() {
        let catalog = catalog();
        let core = catalog.v3_document("api/v1").unwrap();
        let schemas = &core["components"]["schemas"];
        assert_eq!(
            schemas["io.k8s.api.core.v1.Node"]["x-kubernetes-group-version-kind"],
            json!([{"group": "", "kind": "Node", "version": "v1"}])
        );
        let containers = &schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
        assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
        assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
        assert_eq!(containers["x-kubernetes-list-map-keys"], json!(["name"]));
        let patch = &core["paths"]["/api/v1/nodes/{name}"]["patch"];
        assert!(
            patch["requestBody"]["content"]
                .get("application/strategic-merge-patch+json")
                .is_some()
        );
        assert!(
            patch["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation")
        );
    }

    #[test]
    fn crd_schemas_come_from_their_open_api_v3_schema() {
        let catalog = catalog();
        let doc = catalog
            .v3_document("apis/nodewright.nvidia.com/v1alpha1")
            .unwrap();
        let schema = &doc["components"]["schemas"]["com.nvidia.nodewright.v1alpha1.NodeWright"];
        assert_eq!(
            schema["x-kubernetes-group-version-kind"][0]["kind"],
            "NodeWright"
        );
        assert!(
            schema
                .pointer("/properties/spec/properties/packages")
                .is_some()
        );
        assert!(doc["components"]["schemas"].get(OBJECT_META).is_some());
        let patch =
            &doc["paths"]["/apis/nodewright.nvidia.com/v1alpha1/nodewrights/{name}"]["patch"];
        assert!(
            patch["requestBody"]["content"]
                .get("application/strategic-merge-patch+json")
                .is_none()
        );
    }

    #[test]
    fn the_v3_root_names_each_document_by_its_content_and_v2_refers_to_definitions() {
        let builtins_only = Catalog::new(&[], &served_by_table);
        let with_crds = catalog();
        let url = |c: &Catalog, key: &str| c.v3_root()["paths"][key]["serverRelativeURL"].clone();
        assert_eq!(url(&with_crds, "api/v1"), url(&builtins_only, "api/v1"));
        let key = "apis/nodewright.nvidia.com/v1alpha1";
        assert!(url(&builtins_only, key).is_null());
        assert!(
            url(&with_crds, key)
                .as_str()
                .unwrap()
                .starts_with("/openapi/v3/apis/nodewright.nvidia.com/v1alpha1?hash=")
        );
        let v2 = with_crds.v2_document().to_string();
        assert!(!v2.contains("#/components/"));
        assert!(v2.contains(
            "\"$ref\":\"#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta\""
        ));
    }

    #[test]
    fn unknown_fields_are_named_by_their_path() {
        let catalog = catalog();
        let pods = catalog.kind("", "v1", "pods").unwrap().clone();
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "b"}, "colour": "red"},
            "spec": {"containers": [{"name": "c", "image": "i", "imagePullPolicyy": "x",
                                     "resources": {"limits": {"cpu": 1}}}],
                     "$setElementOrder/containers": [{"name": "c"}]},
        });
        assert_eq!(
            catalog.unknown_fields(&pods, &mut pod, true),
            vec!["metadata.colour", "spec.containers[0].imagePullPolicyy"]
        );
        assert_eq!(pod["metadata"], json!({"name": "p", "labels": {"a": "b"}}));
        assert!(catalog.unknown_fields(&pods, &mut pod, false).is_empty());
        let nodewrights = catalog
            .kind("nodewright.nvidia.com", "v1alpha1", "nodewrights")
            .unwrap()
            .clone();
        let unknown = catalog.unknown_fields(
            &nodewrights,
            &mut json!({"spec": {"packages": {}, "bogus": 1}}),
            false,
        );
        assert_eq!(unknown, vec!["spec.bogus"]);
    }
}
