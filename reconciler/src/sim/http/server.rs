//! HTTP routing: the Kubernetes URL layout, verbs, content types and watch streams.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{Method, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::error::{ApiError, json_response};
use super::resources::{self, Rid};
use super::select::{FieldSelector, LabelSelector, Selectors};
use super::world::{DeleteOpts, LogEntry, ObjKey, World};

/// Largest request body accepted.
const BODY_LIMIT: usize = 16 << 20;
/// How often an idle watch sends a bookmark (when the client allows them).
const BOOKMARK_EVERY: Duration = Duration::from_secs(5);
/// Watch length when the client names none.
const DEFAULT_WATCH: Duration = Duration::from_secs(1800);

/// What the handlers share.
pub struct Shared {
    /// The world.
    pub world: Arc<World>,
    /// `127.0.0.1:PORT`, for `/api`'s server address.
    pub address: String,
    /// `apiserver_request_total`, served on `/metrics`.
    pub requests: super::metrics::RequestCounter,
    /// How long a change waits before its watch events are sent.
    pub watch_delay: Duration,
}

enum Route {
    Root,
    Version,
    Api,
    Apis,
    Group(String),
    ResourceList(String, String),
    /// `/healthz`, `/readyz`, `/livez`, optionally naming one check.
    Health(&'static str, Option<String>),
    /// `/metrics`.
    Metrics,
    Resource {
        rid: Rid,
        namespace: Option<String>,
        name: Option<String>,
        sub: Option<String>,
    },
    Unknown,
}

/// The route of `path`; resources are the built-ins and the CRDs `crds` serves.
fn route(path: &str, crds: &super::crds::CrdRegistry) -> Route {
    let find = |group: &str, version: &str, plural: &str| {
        resources::find(group, version, plural).or_else(|| crds.find(group, version, plural))
    };
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest) = match segments.as_slice() {
        [] => return Route::Root,
        ["version"] => return Route::Version,
        ["metrics"] => return Route::Metrics,
        [endpoint @ ("healthz" | "readyz" | "livez"), check @ ..] if check.len() <= 1 => {
            let endpoint = match *endpoint {
                "healthz" => "healthz",
                "readyz" => "readyz",
                _ => "livez",
            };
            return Route::Health(endpoint, check.first().map(|c| c.to_string()));
        }
        ["api"] => return Route::Api,
        ["apis"] => return Route::Apis,
        ["apis", g] => return Route::Group(g.to_string()),
        ["api", v] => return Route::ResourceList(String::new(), v.to_string()),
        ["apis", g, v] => return Route::ResourceList(g.to_string(), v.to_string()),
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Route::Unknown,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, plural, tail @ ..]
            if find(group, version, plural).is_some_and(|r| resources::def(r).namespaced) =>
        {
            (Some(ns.to_string()), [&[*plural][..], tail].concat())
        }
        _ => (None, rest.to_vec()),
    };
    let Some(rid) = rest.first().and_then(|plural| find(group, version, plural)) else {
        return Route::Unknown;
    };
    if rest.len() > 3 {
        return Route::Unknown;
    }
    Route::Resource {
        rid,
        namespace,
        name: rest.get(1).map(|s| s.to_string()),
        sub: rest.get(2).map(|s| s.to_string()),
    }
}

fn query_map(query: Option<&str>) -> HashMap<String, String> {
    form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

fn flag(query: &HashMap<String, String>, key: &str) -> bool {
    matches!(query.get(key).map(String::as_str), Some("true" | "1"))
}

/// An integer query parameter. A value that is not an int64 is a 400 with the message of the
/// apiserver's parameter decoding (Go's `strconv.ParseInt`).
fn integer(query: &HashMap<String, String>, key: &str) -> Result<Option<i64>, ApiError> {
    let Some(text) = query.get(key) else {
        return Ok(None);
    };
    text.parse::<i64>().map(Some).map_err(|e| {
        let why = match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                "value out of range"
            }
            _ => "invalid syntax",
        };
        ApiError::bad_request(format!("strconv.ParseInt: parsing {text:?}: {why}"))
    })
}

/// Whether a write is a dry run: `dryRun` in the query or, for DELETE and eviction bodies,
/// in the DeleteOptions. `All` is the only value; any other is refused as the apiserver
/// validates its `<Verb>Options`: 422 Invalid on `options` of group meta.k8s.io.
fn dry_run(
    query: &HashMap<String, String>,
    in_body: Option<&Value>,
    options: &str,
) -> Result<bool, ApiError> {
    let mut values: Vec<String> = query.get("dryRun").cloned().into_iter().collect();
    match in_body {
        None | Some(Value::Null) => {}
        Some(Value::Array(list)) => values.extend(list.iter().map(|v| match v {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        })),
        Some(other) => values.push(other.to_string()),
    }
    if values.iter().all(|v| v == "All") {
        return Ok(!values.is_empty());
    }
    let why = format!(
        "dryRun: Unsupported value: []string{{{}}}: supported values: \"All\"",
        values
            .iter()
            .map(|v| format!("{v:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Err(ApiError::new(
        422,
        "Invalid",
        format!("{options}.meta.k8s.io \"\" is invalid: {why}"),
    )
    .with_details(json!({
        "group": "meta.k8s.io", "kind": options,
        "causes": [{"reason": "FieldValueNotSupported", "message": why, "field": "dryRun"}],
    })))
}

/// `timeoutSeconds` of a list or watch: an int64 that is not negative.
fn timeout_seconds(query: &HashMap<String, String>) -> Result<Option<Duration>, ApiError> {
    match integer(query, "timeoutSeconds")? {
        Some(seconds) if seconds < 0 => Err(ApiError::bad_request(format!(
            "timeoutSeconds: Invalid value: {seconds}: must be greater than or equal to 0"
        ))),
        Some(seconds) => Ok(Some(Duration::from_secs(seconds.unsigned_abs()))),
        None => Ok(None),
    }
}

fn selectors(rid: Rid, query: &HashMap<String, String>) -> Result<Selectors, ApiError> {
    let labels = match query.get("labelSelector") {
        Some(text) => LabelSelector::parse(text).map_err(ApiError::bad_request)?,
        None => LabelSelector::default(),
    };
    let fields = match query.get("fieldSelector") {
        Some(text) => FieldSelector::parse(text).map_err(ApiError::bad_request)?,
        None => FieldSelector::default(),
    };
    fields.check(rid).map_err(ApiError::bad_request)?;
    Ok(Selectors { labels, fields })
}

fn parse_body(content_type: &str, body: &Bytes) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Ok(json!({}));
    }
    if content_type.contains("yaml") {
        // Clients send apply patches as JSON, which is YAML too and reads faster as JSON.
        if let Ok(value) = serde_json::from_slice(body) {
            return Ok(value);
        }
        serde_yaml::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("the body is not valid YAML: {e}")))
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}")))
    }
}

/// A request's body with its media type, read as JSON at most once: field validation reads
/// a write's body before the handler does.
struct RequestBody {
    content_type: String,
    bytes: Bytes,
    /// The body as field validation left it, until the handler takes it.
    read: std::cell::Cell<Option<Value>>,
}

impl RequestBody {
    /// The body as JSON ([`parse_body`]).
    fn value(&self) -> Result<Value, ApiError> {
        match self.read.take() {
            Some(value) => Ok(value),
            None => parse_body(&self.content_type, &self.bytes),
        }
    }
}

/// The one handler: every request goes through here.
pub async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let query = query_map(request.uri().query());
    let client = super::metrics::client_of(
        request
            .headers()
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok()),
    );
    let accept = request
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_string();
    let body = match axum::body::to_bytes(request.into_body(), BODY_LIMIT).await {
        Ok(b) => b,
        Err(e) => {
            return ApiError::bad_request(format!("cannot read the body: {e}")).into_response();
        }
    };
    tracing::trace!(%method, %path, %content_type, body = %String::from_utf8_lossy(&body), "request body");
    let table = super::table::wanted(&accept);
    let prepared = super::protobuf::json_body(&content_type, body).and_then(|(ct, body)| {
        super::protobuf::negotiate(&accept)?;
        let mut body = RequestBody {
            content_type: ct,
            bytes: body,
            read: std::cell::Cell::new(None),
        };
        let warnings = check_fields(&shared, &method, &path, &query, &mut body)?;
        Ok((body, warnings))
    });
    let (body, warnings) = match prepared {
        Ok(prepared) => prepared,
        Err(e) => return e.into_response(),
    };
    let mut response = match dispatch(&shared, &method, &path, &query, &body, table) {
        Ok(response) => response,
        Err(e) => {
            tracing::debug!(%method, %path, code = e.code, message = %e.message, "refused");
            e.into_response()
        }
    };
    tracing::debug!(%method, %path, ?query, code = response.status().as_u16(), "sim serve request");
    shared.requests.record(request_labels(
        &shared,
        &method,
        &path,
        &query,
        response.status().as_u16(),
        client,
    ));
    for warning in warnings {
        if let Ok(value) = header::HeaderValue::from_str(&warning) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}

/// The `apiserver_request_total` series of one request, with kube-apiserver's verbs: a GET
/// of a collection is `list` (`watch` with `watch=true` or `1`), a DELETE of one is
/// `deletecollection`.
fn request_labels(
    shared: &Shared,
    method: &Method,
    path: &str,
    query: &HashMap<String, String>,
    code: u16,
    client: String,
) -> super::metrics::RequestLabels {
    let mut labels = super::metrics::RequestLabels {
        verb: method.as_str().to_ascii_lowercase(),
        group: String::new(),
        version: String::new(),
        resource: String::new(),
        subresource: String::new(),
        scope: String::new(),
        code,
        client,
    };
    let Route::Resource {
        rid,
        namespace,
        name,
        sub,
    } = route(path, &shared.world.crds())
    else {
        return labels;
    };
    let def = resources::def(rid);
    labels.verb = match (method, name.is_some()) {
        (&Method::GET, false) if flag(query, "watch") => "watch",
        (&Method::GET, false) => "list",
        (&Method::GET, true) => "get",
        (&Method::POST, _) => "create",
        (&Method::PUT, _) => "update",
        (&Method::PATCH, _) => "patch",
        (&Method::DELETE, false) => "deletecollection",
        (&Method::DELETE, true) => "delete",
        _ => return labels,
    }
    .to_string();
    labels.group = def.group.to_string();
    labels.version = def.version.to_string();
    labels.resource = def.plural.to_string();
    labels.subresource = sub.unwrap_or_default();
    labels.scope = if name.is_some() {
        "resource"
    } else if namespace.is_some() {
        "namespace"
    } else {
        "cluster"
    }
    .to_string();
    labels
}

/// Field validation of a create, update or patch body against the kind's OpenAPI schema
/// (`fieldValidation`: `Strict` refuses unknown fields, `Warn`, the default, answers them as
/// `Warning` headers, `Ignore`): the warnings, with unknown fields dropped from the body the
/// handler reads when they are to be. JSON patches name no fields; their result is not
/// checked.
fn check_fields(
    shared: &Shared,
    method: &Method,
    path: &str,
    query: &HashMap<String, String>,
    body: &mut RequestBody,
) -> Result<Vec<String>, ApiError> {
    let options = match *method {
        Method::POST => "CreateOptions",
        Method::PUT => "UpdateOptions",
        Method::PATCH => "PatchOptions",
        _ => return Ok(Vec::new()),
    };
    let Route::Resource { rid, sub, .. } = route(path, &shared.world.crds()) else {
        return Ok(Vec::new());
    };
    if !matches!(sub.as_deref(), None | Some("status"))
        || body.bytes.is_empty()
        || body.content_type.starts_with("application/json-patch")
    {
        return Ok(Vec::new());
    }
    // A body that does not parse is refused by the handler with its own message.
    let Ok(mut value) = body.value() else {
        return Ok(Vec::new());
    };
    let (warnings, pruned) = super::openapi::check_fields(
        &shared.world,
        resources::def(rid),
        query.get("fieldValidation").map(String::as_str),
        options,
        &mut value,
    )?;
    if pruned {
        // JSON is YAML too, so an apply patch's YAML body may go on as JSON.
        body.bytes = Bytes::from(value.to_string());
    }
    body.read.set(Some(value));
    Ok(warnings)
}

fn dispatch(
    shared: &Shared,
    method: &Method,
    path: &str,
    query: &HashMap<String, String>,
    body: &RequestBody,
    table: bool,
) -> Result<Response, ApiError> {
    let content_type = body.content_type.as_str();
    let not_found = || {
        ApiError::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    };
    if let Some(response) = super::openapi::serve(&shared.world, path, query) {
        return response;
    }
    match route(path, &shared.world.crds()) {
        Route::Root => Ok(json_response(
            200,
            &json!({"paths": ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/metrics", "/openapi/v2", "/openapi/v3", "/readyz", "/version"]}),
        )),
        Route::Version => Ok(json_response(
            200,
            &json!({
                "major": "1", "minor": "33", "gitVersion": "v1.33.0-nodewright-sim",
                "gitCommit": "", "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                "goVersion": "", "compiler": "rustc", "platform": "linux/amd64",
            }),
        )),
        Route::Api => Ok(json_response(
            200,
            &resources::api_versions(&shared.address),
        )),
        Route::Apis => Ok(json_response(
            200,
            &shared
                .world
                .read(|inner| resources::api_group_list(&inner.crds)),
        )),
        Route::Group(g) => shared
            .world
            .read(|inner| resources::api_group(&inner.crds, &g))
            .map(|doc| json_response(200, &doc))
            .ok_or_else(not_found),
        Route::ResourceList(g, v) => shared
            .world
            .read(|inner| resources::resource_list(&inner.crds, &g, &v))
            .map(|doc| json_response(200, &doc))
            .ok_or_else(not_found),
        Route::Health(endpoint, check) => health(shared, endpoint, check.as_deref(), query),
        Route::Metrics => Response::builder()
            .status(200)
            .header(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )
            .body(Body::from(shared.requests.render()))
            .map_err(|e| ApiError::new(500, "InternalError", format!("metrics: {e}"))),
        Route::Unknown => Err(not_found()),
        Route::Resource {
            rid,
            namespace,
            name,
            sub,
        } => {
            let def = resources::def(rid);
            if def.namespaced && name.is_some() && namespace.is_none() {
                return Err(not_found());
            }
            let ns = namespace.clone().unwrap_or_default();
            let key: Option<ObjKey> = name.clone().map(|n| {
                (
                    if def.namespaced {
                        ns.clone()
                    } else {
                        String::new()
                    },
                    n,
                )
            });
            let sub = sub.as_deref();
            match (method, key, sub) {
                (&Method::GET, None, None) => {
                    let sel = selectors(rid, query)?;
                    let scope = namespace.as_deref().filter(|_| def.namespaced);
                    timeout_seconds(query)?;
                    if flag(query, "watch") {
                        watch(shared, rid, scope.map(str::to_string), sel, query, table)
                    } else {
                        list(shared, rid, scope, &sel, query, table)
                    }
                }
                (&Method::GET, Some(key), None | Some("status")) => {
                    let object = if table {
                        shared.world.read(|inner| {
                            let object = inner.get(rid, &key)?;
                            Some(Arc::new(super::table::table(
                                rid,
                                &[&object],
                                inner.resource_version(),
                                inner.sim.now(),
                            )))
                        })
                    } else {
                        shared.world.get(rid, &key)
                    };
                    object
                        .map(|v| json_response(200, &v))
                        .ok_or_else(|| ApiError::not_found(rid, &key.1))
                }
                (&Method::POST, None, None) => {
                    let dry_run = dry_run(query, None, "CreateOptions")?;
                    let value = body.value()?;
                    check_kind(rid, &value)?;
                    if dry_run {
                        return shared
                            .world
                            .read(|inner| inner.create_dry_run(rid, &ns, value))
                            .map(|v| json_response(201, &v));
                    }
                    shared.world.with(|inner| {
                        let key = inner.create(rid, &ns, value)?;
                        inner.publish();
                        inner
                            .get(rid, &key)
                            .map(|v| json_response(201, &v))
                            .ok_or_else(|| ApiError::not_found(rid, &key.1))
                    })
                }
                (&Method::GET, Some(key), Some("scale")) => shared.world.read(|inner| {
                    let object = inner.require(rid, &key)?;
                    inner
                        .crds
                        .scale_of(rid, &object)
                        .map(|scale| json_response(200, &scale))
                        .ok_or_else(not_found)
                }),
                (&Method::PUT | &Method::PATCH, Some(key), Some("scale")) => {
                    let dry_run = dry_run(query, None, "UpdateOptions")?;
                    let body = body.value()?;
                    let write = |inner: &super::world::Inner| {
                        let object = inner.require(rid, &key)?;
                        let mut scale = inner.crds.scale_of(rid, &object).ok_or_else(not_found)?;
                        if method == Method::PATCH {
                            super::patch::merge(&mut scale, &body);
                        } else {
                            scale = body.clone();
                        }
                        let new = inner
                            .crds
                            .with_scale(rid, &object, &scale)
                            .ok_or_else(not_found)?;
                        Ok::<_, ApiError>(new)
                    };
                    if dry_run {
                        return shared.world.read(|inner| {
                            let new = write(inner)?;
                            let stored = inner.update_dry_run(rid, &key, false, new)?;
                            let scale = inner.crds.scale_of(rid, &stored).ok_or_else(not_found)?;
                            Ok(json_response(200, &scale))
                        });
                    }
                    shared.world.with(|inner| {
                        let new = write(inner)?;
                        inner.update(rid, &key, false, new)?;
                        inner.publish();
                        let object = inner.require(rid, &key)?;
                        let scale = inner.crds.scale_of(rid, &object).ok_or_else(not_found)?;
                        Ok(json_response(200, &scale))
                    })
                }
                (&Method::GET, Some(key), Some("log")) if rid == resources::PODS => {
                    pod_log(shared, &key, query)
                }
                (&Method::POST, Some(key), Some("eviction")) if rid == resources::PODS => {
                    let value = body.value()?;
                    let dry_run = dry_run(
                        query,
                        value.pointer("/deleteOptions/dryRun"),
                        "DeleteOptions",
                    )?;
                    let grace = value
                        .pointer("/deleteOptions/gracePeriodSeconds")
                        .and_then(Value::as_i64);
                    if dry_run {
                        shared
                            .world
                            .read(|inner| inner.evict_dry_run(&key.0, &key.1))?;
                    } else {
                        shared
                            .world
                            .with(|inner| inner.evict(&key.0, &key.1, grace))?;
                    }
                    Ok(json_response(
                        201,
                        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                                "status": "Success", "code": 201}),
                    ))
                }
                (&Method::PUT, Some(key), sub @ (None | Some("status"))) => {
                    let dry_run = dry_run(query, None, "UpdateOptions")?;
                    let value = body.value()?;
                    check_kind(rid, &value)?;
                    let status = sub.is_some();
                    let replaced = |old: &Value| {
                        if !status {
                            return value.clone();
                        }
                        // Through the status subresource only the status is written.
                        let mut merged = old.clone();
                        merged["status"] = value.get("status").cloned().unwrap_or(Value::Null);
                        if let Some(rv) = value.pointer("/metadata/resourceVersion") {
                            merged["metadata"]["resourceVersion"] = rv.clone();
                        }
                        merged
                    };
                    if dry_run {
                        return shared.world.read(|inner| {
                            let new = replaced(&*inner.require(rid, &key)?);
                            let stored = inner.update_dry_run(rid, &key, status, new)?;
                            Ok(json_response(200, &stored))
                        });
                    }
                    shared.world.with(|inner| {
                        let old = inner.require(rid, &key)?;
                        let new = replaced(&old);
                        update_and_respond(inner, rid, &key, status, &old, new)
                    })
                }
                (&Method::PATCH, Some(key), sub @ (None | Some("status"))) => {
                    let dry_run = dry_run(query, None, "PatchOptions")?;
                    let patch = body.value()?;
                    let status = sub.is_some();
                    let apply = content_type.starts_with("application/apply-patch") && !status;
                    let strategic = content_type.starts_with("application/strategic-merge-patch");
                    if strategic && shared.world.read(|inner| inner.crds.by_rid(rid).is_some()) {
                        // Custom resources declare no patch strategies: the apiserver
                        // refuses the format.
                        return Err(ApiError::new(
                            415,
                            "UnsupportedMediaType",
                            format!(
                                "the body of the request was in an unknown format - accepted \
                                 media types include: application/json-patch+json, \
                                 application/merge-patch+json, application/apply-patch+yaml \
                                 ({content_type})"
                            ),
                        ));
                    }
                    let patched = |old: &Value| -> Result<Value, ApiError> {
                        let mut new = old.clone();
                        if content_type.starts_with("application/json-patch") {
                            super::patch::json_patch(&mut new, &patch)
                                .map_err(|e| ApiError::invalid(rid, &key.1, e.to_string()))?;
                        } else if strategic
                            && let Some((lookup, schema)) =
                                super::openapi::builtin_schema_of(resources::def(rid))
                        {
                            super::strategic::apply(&lookup, Some(schema), &mut new, &patch);
                        } else {
                            super::patch::merge(&mut new, &patch);
                        }
                        Ok(new)
                    };
                    if dry_run {
                        return shared.world.read(|inner| {
                            let stored = if apply {
                                inner.apply_dry_run(rid, &key, patch.clone())?
                            } else {
                                let new = patched(&*inner.require(rid, &key)?)?;
                                inner.update_dry_run(rid, &key, status, new)?
                            };
                            Ok(json_response(200, &stored))
                        });
                    }
                    shared.world.with(|inner| {
                        if apply {
                            inner.apply(rid, &key, patch.clone())?;
                            return respond_with(inner, rid, &key, 200);
                        }
                        let old = inner.require(rid, &key)?;
                        let new = patched(&old)?;
                        update_and_respond(inner, rid, &key, status, &old, new)
                    })
                }
                (&Method::DELETE, Some(key), None) => {
                    let opts = delete_opts(body, query)?;
                    if opts.dry_run {
                        return shared.world.read(|inner| {
                            let before = inner.require(rid, &key)?;
                            Ok(match inner.delete_dry_run(rid, &key, &opts)? {
                                Some(terminating) => json_response(200, &terminating),
                                None => deleted_status(rid, &key, Some(&before)),
                            })
                        });
                    }
                    shared.world.with(|inner| {
                        let before = inner.get(rid, &key);
                        if inner.delete(rid, &key, &opts)? {
                            respond_with(inner, rid, &key, 200)
                        } else {
                            Ok(deleted_status(rid, &key, before.as_deref()))
                        }
                    })
                }
                (&Method::DELETE, None, None) => {
                    let sel = selectors(rid, query)?;
                    let opts = delete_opts(body, query)?;
                    let scope = namespace.as_deref().filter(|_| def.namespaced);
                    if opts.dry_run {
                        return shared.world.read(|inner| {
                            for object in inner.list(rid, scope, &sel) {
                                inner.delete_dry_run(rid, &super::world::key_of(&object), &opts)?;
                            }
                            Ok(success_status())
                        });
                    }
                    shared.world.with(|inner| {
                        let keys: Vec<ObjKey> = inner
                            .list(rid, scope, &sel)
                            .iter()
                            .map(|v| super::world::key_of(v))
                            .collect();
                        for key in keys {
                            inner.delete(rid, &key, &opts)?;
                        }
                        Ok(success_status())
                    })
                }
                _ => Err(ApiError::new(
                    405,
                    "MethodNotAllowed",
                    format!("{method} is not supported on {path}"),
                )),
            }
        }
    }
}

/// The checks behind the health endpoints: `ping` answers while the server serves, `world`
/// while the simulated world's lock can be taken (a wedged clock task would hold it).
const HEALTH_CHECKS: [&str; 2] = ["ping", "world"];

/// `/healthz`, `/readyz` and `/livez` as kube-apiserver answers them: `ok`, or with `verbose`
/// one `[+]check ok` line per check and `<endpoint> check passed`; `/<endpoint>/<check>`
/// answers one check, and an unknown check is a 404.
fn health(
    shared: &Shared,
    endpoint: &str,
    check: Option<&str>,
    query: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let text = |body: String| {
        Response::builder()
            .status(200)
            .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
            .header("x-content-type-options", "nosniff")
            .body(Body::from(body))
            .unwrap_or_else(|_| {
                ApiError::new(500, "InternalError", "health".into()).into_response()
            })
    };
    if let Some(check) = check {
        if !HEALTH_CHECKS.contains(&check) {
            return Err(ApiError::new(
                404,
                "NotFound",
                format!("the server could not find the requested resource (/{endpoint}/{check})"),
            ));
        }
        shared.world.read(|_| ());
        return Ok(text("ok".into()));
    }
    shared.world.read(|_| ());
    if !query.contains_key("verbose") {
        return Ok(text("ok".into()));
    }
    let mut body = String::new();
    for check in HEALTH_CHECKS {
        body.push_str(&format!("[+]{check} ok\n"));
    }
    body.push_str(&format!("{endpoint} check passed\n"));
    Ok(text(body))
}

/// A body of the wrong kind is a 400, as on the apiserver.
fn check_kind(rid: Rid, value: &Value) -> Result<(), ApiError> {
    match value.get("kind").and_then(Value::as_str) {
        Some(kind) if kind != resources::def(rid).kind => Err(ApiError::bad_request(format!(
            "the body is a {kind}, expected a {}",
            resources::def(rid).kind
        ))),
        _ => Ok(()),
    }
}

fn respond_with(
    inner: &mut super::world::Inner,
    rid: Rid,
    key: &ObjKey,
    code: u16,
) -> Result<Response, ApiError> {
    inner.publish();
    inner
        .get(rid, key)
        .map(|v| stored_object_response(code, v))
        .ok_or_else(|| ApiError::not_found(rid, &key.1))
}

/// Writes `new` over `old` and answers as the apiserver does: with the stored object, or with
/// the object as written when the write removed it.
fn update_and_respond(
    inner: &mut super::world::Inner,
    rid: Rid,
    key: &ObjKey,
    status: bool,
    old: &Value,
    new: Value,
) -> Result<Response, ApiError> {
    // Only a terminating object can go (its last finalizer removed): only then is a copy of
    // what was written kept for the answer.
    let terminating = |v: &Value| {
        v.pointer("/metadata/deletionTimestamp")
            .is_some_and(|t| !t.is_null())
    };
    let written = (terminating(old) || terminating(&new)).then(|| new.clone());
    let version = inner.resource_version();
    inner.update(rid, key, status, new)?;
    inner.publish();
    if inner.resource_version() == version {
        inner.unchanged_updates += 1;
    }
    Ok(match (inner.get(rid, key), written) {
        (Some(v), _) => stored_object_response(200, v),
        (None, Some(written)) => json_response(200, &written),
        (None, None) => success_status(),
    })
}

/// The apiserver's bare `Status` for a request that succeeded with no object to return.
fn success_status() -> Response {
    json_response(
        200,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
    )
}

/// The answer to a write: the stored object, encoded as the connection sends it, after the
/// world's lock is released, so one write's answer does not hold up every other request.
fn stored_object_response(code: u16, object: Arc<Value>) -> Response {
    let encoded =
        futures::stream::once(async move { Ok::<_, Infallible>(Bytes::from(object.to_string())) });
    let code = axum::http::StatusCode::from_u16(code)
        .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR);
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(encoded),
    )
        .into_response()
}

fn deleted_status(rid: Rid, key: &ObjKey, before: Option<&Value>) -> Response {
    let def = resources::def(rid);
    let uid = before
        .and_then(|b| b.pointer("/metadata/uid"))
        .cloned()
        .unwrap_or(Value::Null);
    json_response(
        200,
        &json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": {"name": key.1, "group": def.group, "kind": def.plural, "uid": uid},
        }),
    )
}

fn delete_opts(
    body: &RequestBody,
    query: &HashMap<String, String>,
) -> Result<DeleteOpts, ApiError> {
    let value = body.value()?;
    let text = |p: &str| value.pointer(p).and_then(Value::as_str).map(str::to_string);
    Ok(DeleteOpts {
        dry_run: dry_run(query, value.get("dryRun"), "DeleteOptions")?,
        grace: value
            .get("gracePeriodSeconds")
            .and_then(Value::as_i64)
            .map(Ok)
            .or_else(|| integer(query, "gracePeriodSeconds").transpose())
            .transpose()?,
        uid: text("/preconditions/uid"),
        resource_version: text("/preconditions/resourceVersion"),
    })
}

/// A list: the snapshot and page the request asks for ([`super::paging`]), as a `…List` or,
/// for kubectl, a Table; `metadata.continue` when more objects follow.
fn list(
    shared: &Shared,
    rid: Rid,
    namespace: Option<&str>,
    sel: &Selectors,
    query: &HashMap<String, String>,
    table: bool,
) -> Result<Response, ApiError> {
    let def = resources::def(rid);
    let request = super::paging::list_request(query, integer(query, "limit")?)?;
    let (page, now) = shared.world.read(|inner| {
        let at = request.snapshot(inner.resource_version(), inner.floor(rid))?;
        let after = request.resume.as_ref().map(|(_, key)| key);
        let page = inner
            .list_page(rid, namespace, sel, at, after, request.limit)
            .ok_or_else(|| {
                // The log was compacted between the check and the read: impossible under
                // one lock, answered as the compaction would be.
                ApiError::new(410, "Expired", "too old resource version".into())
            })?;
        Ok::<_, ApiError>((page, inner.sim.now()))
    })?;
    let rv = page.resource_version;
    let token = page
        .continue_after
        .as_ref()
        .map(|last| super::paging::encode(rv, last));
    let mut body = if table {
        let objects: Vec<&Value> = page.items.iter().map(|v| &**v).collect();
        super::table::table(rid, &objects, rv, now)
    } else {
        json!({
            "kind": format!("{}List", def.kind),
            "apiVersion": def.api_version(),
            "metadata": {"resourceVersion": rv.to_string()},
            "items": page.items.iter().map(|v| (**v).clone()).collect::<Vec<_>>(),
        })
    };
    if let Some(token) = token {
        body["metadata"]["continue"] = json!(token);
    }
    Ok(json_response(200, &body))
}

fn event_line(type_: &str, object: &Value) -> Bytes {
    event_line_of(type_, &Bytes::from(object.to_string()))
}

/// A watch event around an object already encoded as JSON.
fn event_line_of(type_: &str, object_json: &Bytes) -> Bytes {
    const OPEN: &str = r#"{"type":""#;
    const MIDDLE: &str = r#"","object":"#;
    let mut line =
        Vec::with_capacity(OPEN.len() + type_.len() + MIDDLE.len() + object_json.len() + 2);
    line.extend_from_slice(OPEN.as_bytes());
    line.extend_from_slice(type_.as_bytes());
    line.extend_from_slice(MIDDLE.as_bytes());
    line.extend_from_slice(object_json);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

fn bookmark(rid: Rid, rv: u64, initial_end: bool) -> Bytes {
    let def = resources::def(rid);
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    event_line(
        "BOOKMARK",
        &json!({"kind": def.kind, "apiVersion": def.api_version(), "metadata": metadata}),
    )
}

/// What a watch over `(namespace, selectors)` reports for one log entry, if anything: a
/// MODIFIED that moves an object into or out of the selection is reported as ADDED or
/// DELETED, as the apiserver does.
fn filtered(
    entry: &LogEntry,
    namespace: Option<&str>,
    sel: &Selectors,
    shown: Option<&dyn Fn(&Value) -> Value>,
) -> Option<Bytes> {
    if let Some(ns) = namespace {
        let object_ns = entry
            .object
            .get("metadata")
            .and_then(|m| m.get("namespace"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        if object_ns != ns {
            return None;
        }
    }
    let now = sel.matches(&entry.object);
    let type_ = match entry.type_ {
        "MODIFIED" => {
            let before = entry.prev.as_ref().is_none_or(|p| sel.matches(p));
            match (before, now) {
                (true, true) => "MODIFIED",
                (false, true) => "ADDED",
                (true, false) => "DELETED",
                (false, false) => return None,
            }
        }
        other if now => other,
        _ => return None,
    };
    Some(match shown {
        Some(shown) => event_line(type_, &shown(&entry.object)),
        None => event_line_of(type_, entry.object_json()),
    })
}

struct WatchState {
    world: Arc<World>,
    rx: tokio::sync::watch::Receiver<u64>,
    rid: Rid,
    namespace: Option<String>,
    sel: Selectors,
    cursor: u64,
    queue: VecDeque<Bytes>,
    deadline: tokio::time::Instant,
    bookmarks: bool,
    /// Whether events carry a one-row Table instead of the object (`kubectl get -w`).
    table: bool,
    delay: Duration,
    done: bool,
}

fn watch(
    shared: &Shared,
    rid: Rid,
    namespace: Option<String>,
    sel: Selectors,
    query: &HashMap<String, String>,
    table: bool,
) -> Result<Response, ApiError> {
    let timeout = timeout_seconds(query)?.unwrap_or(DEFAULT_WATCH);
    let bookmarks = flag(query, "allowWatchBookmarks");
    let send_initial = flag(query, "sendInitialEvents");
    let from: Option<u64> = query
        .get("resourceVersion")
        .filter(|rv| !rv.is_empty() && rv.as_str() != "0")
        .map(|rv| {
            rv.parse().map_err(|_| {
                ApiError::bad_request(format!(
                    "resourceVersion: Invalid value: {rv:?}: invalid resource version"
                ))
            })
        })
        .transpose()?;
    let mut queue = VecDeque::new();
    let mut rx = shared.world.subscribe_kind(rid);
    rx.borrow_and_update();
    let cursor = shared.world.read(|inner| {
        if from.is_none() || send_initial {
            let view = table.then(|| table_row(rid, inner));
            for object in inner.list(rid, namespace.as_deref(), &sel) {
                queue.push_back(match &view {
                    Some(view) => event_line("ADDED", &view(&object)),
                    None => event_line("ADDED", &object),
                });
            }
            let rv = inner.resource_version();
            if send_initial {
                queue.push_back(bookmark(rid, rv, true));
            }
            rv
        } else {
            from.unwrap_or(0)
        }
    });
    let state = WatchState {
        world: shared.world.clone(),
        rx,
        rid,
        namespace,
        sel,
        cursor,
        queue,
        deadline: watch_deadline(timeout),
        bookmarks,
        table,
        delay: shared.watch_delay,
        done: false,
    };
    let stream = futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(line) = st.queue.pop_front() {
                return Some((Ok::<Bytes, Infallible>(line), st));
            }
            if st.done {
                return None;
            }
            st.rx.borrow_and_update();
            // The log's lock is held only to collect the new changes; selecting and encoding
            // them happen outside it, so a busy watch never stalls the writers.
            let mut fresh = Vec::new();
            let gone = st.world.read_log(|log| {
                if st.cursor < log.floor(st.rid) {
                    return true;
                }
                fresh.extend(log.entries_after(st.rid, st.cursor).cloned());
                st.cursor = st.cursor.max(log.published());
                false
            });
            let view = st
                .table
                .then(|| st.world.read(|inner| table_row(st.rid, inner)));
            for entry in &fresh {
                if !st.delay.is_zero() {
                    tokio::time::sleep_until((entry.at + st.delay).into()).await;
                }
                let shown = view.as_ref().map(|v| v as &dyn Fn(&Value) -> Value);
                if let Some(line) = filtered(entry, st.namespace.as_deref(), &st.sel, shown) {
                    st.queue.push_back(line);
                }
            }
            if gone {
                let status = ApiError::new(
                    410,
                    "Expired",
                    format!("too old resource version: {}", st.cursor),
                )
                .status();
                st.queue.push_back(event_line("ERROR", &status));
                st.done = true;
                continue;
            }
            if !st.queue.is_empty() {
                continue;
            }
            let now = tokio::time::Instant::now();
            if now >= st.deadline {
                return None;
            }
            let wait = (st.deadline - now).min(BOOKMARK_EVERY);
            tokio::select! {
                changed = st.rx.changed() => {
                    if changed.is_err() {
                        st.done = true;
                    }
                }
                _ = tokio::time::sleep(wait) => {
                    if st.bookmarks && tokio::time::Instant::now() < st.deadline {
                        st.queue.push_back(bookmark(st.rid, st.cursor, false));
                    }
                }
            }
        }
    });
    Ok(Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| ApiError::new(500, "InternalError", "watch".into()).into_response()))
}

/// How a Table watch shows an object: a Table of its one row, as the apiserver converts
/// each event's object.
fn table_row(rid: Rid, inner: &super::world::Inner) -> impl Fn(&Value) -> Value + use<> {
    let (rv, now) = (inner.resource_version(), inner.sim.now());
    move |object: &Value| {
        let rv = object
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .and_then(|v| v.parse().ok())
            .unwrap_or(rv);
        super::table::table(rid, &[object], rv, now)
    }
}

/// When a watch of `timeout` ends. Any int64 of seconds is a valid timeout; one beyond what
/// the clock can represent means the watch runs until the client leaves.
fn watch_deadline(timeout: Duration) -> tokio::time::Instant {
    const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    let now = tokio::time::Instant::now();
    now.checked_add(timeout.min(FOREVER))
        .or_else(|| now.checked_add(DEFAULT_WATCH))
        .unwrap_or(now)
}

/// A [`ClusterError`](crate::cluster::ClusterError) of the simulator's log read as an API error.
fn log_error(e: crate::cluster::ClusterError) -> ApiError {
    match e {
        crate::cluster::ClusterError::Api {
            status, message, ..
        } => ApiError::new(
            status,
            match status {
                404 => "NotFound",
                _ => "BadRequest",
            },
            message,
        ),
        other => ApiError::new(500, "InternalError", other.to_string()),
    }
}

/// `GET …/pods/{name}/log` with `container`, `tailLines`, `limitBytes`, `previous` and
/// `follow`, as the kubelet answers through the apiserver: plain text; with `follow=true` the
/// body streams what the container writes until that container instance stops.
fn pod_log(
    shared: &Shared,
    key: &ObjKey,
    query: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let request = crate::cluster::LogRequest {
        namespace: key.0.clone(),
        pod: key.1.clone(),
        container: query.get("container").filter(|c| !c.is_empty()).cloned(),
        tail_lines: integer(query, "tailLines")?,
        limit_bytes: integer(query, "limitBytes")?,
        previous: flag(query, "previous"),
    };
    let text_response = |body: Body| {
        Response::builder()
            .status(200)
            .header(header::CONTENT_TYPE, "text/plain")
            .body(body)
            .unwrap_or_else(|_| ApiError::new(500, "InternalError", "log".into()).into_response())
    };
    if !flag(query, "follow") || request.previous {
        let text = shared
            .world
            .read(|inner| inner.sim.pod_logs(&request))
            .map_err(log_error)?;
        return Ok(text_response(Body::from(text)));
    }
    let (first, offset, running) = shared
        .world
        .read(|inner| {
            let text = inner.sim.pod_logs(&request)?;
            let (_, offset, running) = inner.sim.pod_logs_since(&request, u64::MAX)?;
            Ok((text, offset, running))
        })
        .map_err(log_error)?;
    struct Follow {
        world: Arc<World>,
        rx: tokio::sync::watch::Receiver<u64>,
        request: crate::cluster::LogRequest,
        offset: u64,
        pending: Option<String>,
        running: bool,
    }
    let mut rx = shared.world.subscribe();
    rx.borrow_and_update();
    let state = Follow {
        world: shared.world.clone(),
        rx,
        request,
        offset,
        pending: Some(first),
        running,
    };
    let stream = futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(text) = st.pending.take()
                && !text.is_empty()
            {
                return Some((Ok::<Bytes, Infallible>(Bytes::from(text)), st));
            }
            if !st.running {
                return None;
            }
            tokio::select! {
                changed = st.rx.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                }
                _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            }
            match st
                .world
                .read(|inner| inner.sim.pod_logs_since(&st.request, st.offset))
            {
                Ok((text, offset, running)) => {
                    st.offset = offset;
                    st.running = running;
                    st.pending = Some(text);
                }
                // The pod is gone: the stream ends, as the kubelet's does.
                Err(_) => return None,
            }
        }
    });
    Ok(text_response(Body::from_stream(stream)))
}
