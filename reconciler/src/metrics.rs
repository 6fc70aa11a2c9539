//! Prometheus metrics (spec/operator.md §13.3) in the text exposition format 0.0.4, and the
//! HTTP endpoint serving them with the health probes.
//!
//! Two sources feed one registry, [`Metrics`]:
//! - the lifecycle gauges of §13.3, which the engine computes from a snapshot as [`Sample`]s;
//!   the controller hands over each iteration's source of them with
//!   [`Metrics::set_lifecycle_source`] (computed only when scraped, at most once per source) or
//!   a computed set with [`Metrics::set_lifecycle`] (either replaces the previous set, so
//!   the series of a deleted NodeWright disappear, §16.3); when `publishLegacyMetrics` is on,
//!   each is also published under its deprecated `skyhook_*` name with the `skyhook_name` label;
//! - the controller's own counters: commits seen / applied / rejected, the last applied commit,
//!   pass duration and API writes by action kind.
//!
//! [`MetricsServer`] serves `/metrics`, `/healthz` (the process is alive) and `/readyz` (the
//! controller said it is ready, [`Metrics::set_ready`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::cluster::api_budget::{ApiStats, StatsSnapshot};
use crate::plan::Action;

/// The `Content-Type` of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Prefix of the current metric names.
pub const PREFIX: &str = "nodewright_";
/// Prefix of the deprecated twins.
pub const LEGACY_PREFIX: &str = "skyhook_";
/// The NodeWright label of current metrics.
pub const NODEWRIGHT_LABEL: &str = "nodewright_name";
/// The NodeWright label of the deprecated twins.
pub const LEGACY_NODEWRIGHT_LABEL: &str = "skyhook_name";

/// The lifecycle gauges of §13.3 (names without prefix) and their help text, in upstream order.
pub const LIFECYCLE_METRICS: &[(&str, &str)] = &[
    (
        "status",
        "Binary metric indicating the status of the NodeWright Custom Resource (1 if in that status, 0 otherwise)",
    ),
    (
        "node_status_count",
        "Number of nodes in the cluster by status for the NodeWright Custom Resource",
    ),
    (
        "node_target_count",
        "Total number of nodes targeted by this NodeWright Custom Resource",
    ),
    (
        "package_state_count",
        "Number of nodes in the cluster by state for this package",
    ),
    (
        "package_stage_count",
        "Number of nodes in the cluster by stage for this package",
    ),
    (
        "package_restarts_count",
        "Number of restarts for this package on this node",
    ),
    (
        "rollout_matched_nodes",
        "Number of nodes matched by this compartment's selector",
    ),
    (
        "rollout_ceiling",
        "Maximum number of nodes that can be in progress at once in this compartment",
    ),
    (
        "rollout_in_progress",
        "Number of nodes currently in progress in this compartment",
    ),
    (
        "rollout_completed",
        "Number of nodes completed in this compartment",
    ),
    (
        "rollout_progress_percent",
        "Percentage of nodes completed in this compartment (0-100)",
    ),
    (
        "rollout_current_batch",
        "Current batch number in the rollout strategy (0 if no batch processing)",
    ),
    (
        "rollout_consecutive_failures",
        "Number of consecutive batch failures in this compartment",
    ),
    (
        "rollout_should_stop",
        "Binary metric indicating if rollout should be stopped due to failures (1 = stopped, 0 = continuing)",
    ),
];

/// Upper bounds (seconds) of the pass-duration histogram buckets.
pub const PASS_DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// One series value: a full metric name (`nodewright_node_status_count`), its labels in
/// exposition order (the NodeWright label first, as upstream) and the value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Full metric name.
    pub name: String,
    /// Label pairs, in order.
    pub labels: Vec<(String, String)>,
    /// Value.
    pub value: f64,
}

impl Sample {
    /// A sample from borrowed parts.
    pub fn new(name: impl Into<String>, labels: &[(&str, &str)], value: f64) -> Self {
        Sample {
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            value,
        }
    }
}

/// The metric type line of a family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Gauge,
    Counter,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
            Kind::Histogram => "histogram",
        }
    }
}

/// Renders a family: `# HELP`, `# TYPE`, then its series lines.
fn write_family(out: &mut String, name: &str, help: Option<&str>, kind: Kind, series: &[Series]) {
    if let Some(help) = help {
        let _ = writeln!(out, "# HELP {name} {}", escape_help(help));
    }
    let _ = writeln!(out, "# TYPE {name} {}", kind.as_str());
    for s in series {
        out.push_str(&s.name);
        if !s.labels.is_empty() {
            out.push('{');
            for (i, (k, v)) in s.labels.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{k}=\"{}\"", escape_label_value(v));
            }
            out.push('}');
        }
        let _ = writeln!(out, " {}", format_value(s.value));
    }
}

/// One line of a family (histograms have several names in one family).
#[derive(Clone, Debug, PartialEq)]
struct Series {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

/// Escapes a label value: backslash, double quote and line feed (format 0.0.4).
pub fn escape_label_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Escapes a HELP text: backslash and line feed.
pub fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Formats a value: integers without a fraction, `NaN`, `+Inf`, `-Inf`.
pub fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_string()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        // Exact: |v| < 2^53, so the conversion loses nothing.
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// Whether `name` is a valid metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`).
pub fn valid_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Whether `name` is a valid label name (`[a-zA-Z_][a-zA-Z0-9_]*`, not starting with `__`).
pub fn valid_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    !name.starts_with("__")
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Renders lifecycle samples as gauge families: the §13.3 metrics in upstream order with their
/// help, then any other names in name order; with `publish_legacy`, the `skyhook_*` twin of
/// each §13.3 family follows it. Samples with invalid names are dropped (and logged); a series
/// given twice keeps its last value.
pub fn render_lifecycle(samples: &[Sample], publish_legacy: bool) -> String {
    let mut families: BTreeMap<&str, Vec<Series>> = BTreeMap::new();
    for s in samples {
        if !valid_metric_name(&s.name) || !s.labels.iter().all(|(k, _)| valid_label_name(k)) {
            tracing::warn!(metric = %s.name, "dropping a metric sample with an invalid name");
            continue;
        }
        let series = families.entry(s.name.as_str()).or_default();
        match series.iter_mut().find(|x| x.labels == s.labels) {
            Some(existing) => existing.value = s.value,
            None => series.push(Series {
                name: s.name.clone(),
                labels: s.labels.clone(),
                value: s.value,
            }),
        }
    }
    let mut out = String::new();
    for (base, help) in LIFECYCLE_METRICS {
        let name = format!("{PREFIX}{base}");
        let Some(series) = families.remove(name.as_str()) else {
            continue;
        };
        write_family(&mut out, &name, Some(help), Kind::Gauge, &series);
        if publish_legacy {
            let legacy_name = format!("{LEGACY_PREFIX}{base}");
            let legacy: Vec<Series> = series
                .iter()
                .map(|s| Series {
                    name: legacy_name.clone(),
                    labels: s
                        .labels
                        .iter()
                        .map(|(k, v)| {
                            let k = if k == NODEWRIGHT_LABEL {
                                LEGACY_NODEWRIGHT_LABEL.to_string()
                            } else {
                                k.clone()
                            };
                            (k, v.clone())
                        })
                        .collect(),
                    value: s.value,
                })
                .collect();
            let legacy_help =
                format!("{help} (DEPRECATED: use {name} with the {NODEWRIGHT_LABEL} label)");
            write_family(
                &mut out,
                &legacy_name,
                Some(&legacy_help),
                Kind::Gauge,
                &legacy,
            );
        }
    }
    for (name, series) in families {
        write_family(&mut out, name, None, Kind::Gauge, &series);
    }
    out
}

/// Cumulative histogram state over fixed bucket bounds.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Per bound: observations ≤ it.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    /// An empty histogram over these upper bounds.
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    /// Records one observation.
    pub fn observe(&mut self, value: f64) {
        for (bound, count) in self.bounds.iter().zip(self.counts.iter_mut()) {
            if value <= *bound {
                *count += 1;
            }
        }
        self.sum += value;
        self.count += 1;
    }

    /// Observations recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The `_bucket`, `_sum` and `_count` series of family `name`, each with `labels`.
    fn series(&self, name: &str, labels: &[(String, String)]) -> Vec<Series> {
        let labelled = |le: Option<String>| {
            let mut out = labels.to_vec();
            out.extend(le.map(|le| ("le".to_string(), le)));
            out
        };
        let mut out: Vec<Series> = self
            .bounds
            .iter()
            .zip(&self.counts)
            .map(|(bound, n)| Series {
                name: format!("{name}_bucket"),
                labels: labelled(Some(format_value(*bound))),
                value: *n as f64,
            })
            .collect();
        out.push(Series {
            name: format!("{name}_bucket"),
            labels: labelled(Some("+Inf".into())),
            value: self.count as f64,
        });
        out.push(Series {
            name: format!("{name}_sum"),
            labels: labelled(None),
            value: self.sum,
        });
        out.push(Series {
            name: format!("{name}_count"),
            labels: labelled(None),
            value: self.count as f64,
        });
        out
    }
}

/// Computes the lifecycle gauges of one iteration's snapshot.
pub type LifecycleSource = Box<dyn FnOnce() -> Vec<Sample> + Send>;

struct Inner {
    lifecycle: Vec<Sample>,
    /// The latest snapshot's gauges, still to be computed: most iterations are never scraped,
    /// and the gauges walk every node, so they wait for a scrape.
    lifecycle_pending: Option<LifecycleSource>,
    commits_seen: u64,
    commits_applied: u64,
    commits_rejected: u64,
    last_applied_commit: Option<String>,
    pass_duration: Histogram,
    api_writes: BTreeMap<String, u64>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("lifecycle", &self.lifecycle)
            .field("lifecycle_pending", &self.lifecycle_pending.is_some())
            .field("commits_seen", &self.commits_seen)
            .field("commits_applied", &self.commits_applied)
            .field("commits_rejected", &self.commits_rejected)
            .field("last_applied_commit", &self.last_applied_commit)
            .field("pass_duration", &self.pass_duration)
            .field("api_writes", &self.api_writes)
            .finish()
    }
}

/// The process's metrics and readiness; share it as `Arc<Metrics>` between the controller and
/// the [`MetricsServer`].
#[derive(Debug)]
pub struct Metrics {
    publish_legacy: bool,
    ready: AtomicBool,
    inner: Mutex<Inner>,
    /// The statistics of the process's API client, once it has one.
    api: std::sync::OnceLock<Arc<ApiStats>>,
}

impl Metrics {
    /// An empty registry; `publish_legacy` is the `publishLegacyMetrics` setting. Not ready.
    pub fn new(publish_legacy: bool) -> Self {
        Metrics {
            publish_legacy,
            ready: AtomicBool::new(false),
            inner: Mutex::new(Inner {
                lifecycle: Vec::new(),
                lifecycle_pending: None,
                commits_seen: 0,
                commits_applied: 0,
                commits_rejected: 0,
                last_applied_commit: None,
                pass_duration: Histogram::new(PASS_DURATION_BUCKETS),
                api_writes: BTreeMap::new(),
            }),
            api: std::sync::OnceLock::new(),
        }
    }

    /// Publishes the API client's request statistics (`nodewright_api_requests_total`, the
    /// request latency histogram and the time spent waiting for the rate limiter).
    pub fn attach_api(&self, stats: Arc<ApiStats>) {
        let _ = self.api.set(stats);
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain counters behind; they are still valid.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Replaces the lifecycle gauges with this pass's samples.
    pub fn set_lifecycle(&self, samples: Vec<Sample>) {
        let mut inner = self.inner();
        inner.lifecycle = samples;
        inner.lifecycle_pending = None;
    }

    /// Replaces the lifecycle gauges with the ones `source` computes, when a scrape first
    /// asks for them.
    pub fn set_lifecycle_source(&self, source: impl FnOnce() -> Vec<Sample> + Send + 'static) {
        self.inner().lifecycle_pending = Some(Box::new(source));
    }

    /// A new commit was seen on the tracked branch.
    pub fn commit_seen(&self) {
        self.inner().commits_seen += 1;
    }

    /// A commit validated and became the desired state.
    pub fn commit_applied(&self, commit: &str) {
        let mut inner = self.inner();
        inner.commits_applied += 1;
        inner.last_applied_commit = Some(commit.to_string());
    }

    /// A commit failed validation; the last good one stays applied.
    pub fn commit_rejected(&self) {
        self.inner().commits_rejected += 1;
    }

    /// One reconcile pass took this long.
    pub fn observe_pass(&self, duration: Duration) {
        self.inner().pass_duration.observe(duration.as_secs_f64());
    }

    /// One API write was executed for this action.
    pub fn api_write(&self, action: &Action) {
        self.api_write_kind(action.kind());
    }

    /// One API write of this kind (an [`Action::kind`], or `apply-desired` / `delete-desired`
    /// for CR materialization) was executed.
    pub fn api_write_kind(&self, kind: &str) {
        *self.inner().api_writes.entry(kind.to_string()).or_default() += 1;
    }

    /// Sets readiness (`/readyz`): true once the controller has a desired state and a cluster
    /// connection, false while it shuts down.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    /// Current readiness.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    /// The whole exposition: lifecycle gauges (and twins), then the controller's own metrics.
    pub fn render(&self) -> String {
        let mut inner = self.inner();
        if let Some(source) = inner.lifecycle_pending.take() {
            inner.lifecycle = source();
        }
        let mut out = render_lifecycle(&inner.lifecycle, self.publish_legacy);
        let counter = |out: &mut String, name: &str, help: &str, value: u64| {
            write_family(
                out,
                name,
                Some(help),
                Kind::Counter,
                &[Series {
                    name: name.to_string(),
                    labels: vec![],
                    value: value as f64,
                }],
            );
        };
        counter(
            &mut out,
            "nodewright_commits_seen_total",
            "Commits seen on the tracked branch",
            inner.commits_seen,
        );
        counter(
            &mut out,
            "nodewright_commits_applied_total",
            "Commits that validated and became the desired state",
            inner.commits_applied,
        );
        counter(
            &mut out,
            "nodewright_commits_rejected_total",
            "Commits rejected by validation (nothing from them was applied)",
            inner.commits_rejected,
        );
        if let Some(commit) = &inner.last_applied_commit {
            write_family(
                &mut out,
                "nodewright_last_applied_commit_info",
                Some("The commit whose desired state is applied (value is always 1)"),
                Kind::Gauge,
                &[Series {
                    name: "nodewright_last_applied_commit_info".into(),
                    labels: vec![("commit".into(), commit.clone())],
                    value: 1.0,
                }],
            );
        }
        write_family(
            &mut out,
            "nodewright_pass_duration_seconds",
            Some("Duration of one reconcile pass (snapshot, engine, execution)"),
            Kind::Histogram,
            &inner
                .pass_duration
                .series("nodewright_pass_duration_seconds", &[]),
        );
        let writes: Vec<Series> = inner
            .api_writes
            .iter()
            .map(|(kind, n)| Series {
                name: "nodewright_api_writes_total".into(),
                labels: vec![("kind".into(), kind.clone())],
                value: *n as f64,
            })
            .collect();
        write_family(
            &mut out,
            "nodewright_api_writes_total",
            Some("Kubernetes API writes executed, by action kind"),
            Kind::Counter,
            &writes,
        );
        if let Some(api) = self.api.get() {
            render_api(&mut out, &api.snapshot());
        }
        out
    }
}

/// The API client's families: requests by verb, resource and code, latency by verb, and the
/// time spent waiting for the rate limiter.
fn render_api(out: &mut String, stats: &StatsSnapshot) {
    let requests: Vec<Series> = stats
        .requests
        .iter()
        .map(|(k, n)| Series {
            name: "nodewright_api_requests_total".into(),
            labels: vec![
                ("verb".into(), k.verb.to_string()),
                ("resource".into(), k.resource.clone()),
                ("code".into(), k.code.clone()),
            ],
            value: *n as f64,
        })
        .collect();
    write_family(
        out,
        "nodewright_api_requests_total",
        Some("Kubernetes API requests sent, by verb, resource and response code"),
        Kind::Counter,
        &requests,
    );
    let name = "nodewright_api_request_duration_seconds";
    let latency: Vec<Series> = stats
        .latency
        .iter()
        .flat_map(|(verb, histogram)| {
            histogram.series(name, &[("verb".to_string(), verb.to_string())])
        })
        .collect();
    write_family(
        out,
        name,
        Some("Kubernetes API request latency, from sending to the response's headers, by verb"),
        Kind::Histogram,
        &latency,
    );
    write_family(
        out,
        "nodewright_api_rate_limiter_wait_seconds_total",
        Some(
            "Time API requests waited for the client-side rate limiter (--kube-qps, --kube-burst)",
        ),
        Kind::Counter,
        &[Series {
            name: "nodewright_api_rate_limiter_wait_seconds_total".into(),
            labels: vec![],
            value: stats.throttled.as_secs_f64(),
        }],
    );
}

/// Routes `/metrics`, `/healthz` and `/readyz` over a shared registry.
pub fn router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(serve_metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(serve_ready))
        .with_state(metrics)
}

async fn serve_metrics(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], metrics.render())
}

async fn serve_ready(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    if metrics.is_ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

/// A failure of the metrics endpoint.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The address could not be bound.
    #[error("metrics: cannot listen on {addr}: {source}")]
    Bind {
        /// The `--metrics-addr` value.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The server stopped with an error.
    #[error("metrics: server on {addr} failed: {source}")]
    Serve {
        /// The bound address.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// The HTTP endpoint on `--metrics-addr`, bound but not yet serving.
#[derive(Debug)]
pub struct MetricsServer {
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    metrics: Arc<Metrics>,
}

impl MetricsServer {
    /// Binds `addr` (port 0 picks a free port; see [`MetricsServer::local_addr`]).
    pub async fn bind(addr: SocketAddr, metrics: Arc<Metrics>) -> Result<Self, MetricsError> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| MetricsError::Bind { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| MetricsError::Bind { addr, source })?;
        Ok(MetricsServer {
            listener,
            addr,
            metrics,
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves until `shutdown` resolves, then finishes in-flight requests and returns.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), MetricsError> {
        let addr = self.addr;
        axum::serve(self.listener, router(self.metrics))
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(|source| MetricsError::Serve { addr, source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses one series line back (name, labels with unescaped values, value), so tests check
    /// what a Prometheus scraper would read rather than string fragments.
    type Parsed = (String, Vec<(String, String)>, String);

    fn parse_line(line: &str) -> Parsed {
        let (head, value) = line.rsplit_once(' ').unwrap();
        let Some((name, rest)) = head.split_once('{') else {
            return (head.to_string(), vec![], value.to_string());
        };
        let body = rest.strip_suffix('}').unwrap();
        let mut labels = Vec::new();
        let mut chars = body.chars().peekable();
        while chars.peek().is_some() {
            let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
            assert_eq!(chars.next(), Some('"'));
            let mut v = String::new();
            loop {
                match chars.next().unwrap() {
                    '\\' => match chars.next().unwrap() {
                        'n' => v.push('\n'),
                        c => v.push(c),
                    },
                    '"' => break,
                    c => v.push(c),
                }
            }
            labels.push((key, v));
            if chars.peek() == Some(&',') {
                chars.next();
            }
        }
        (name.to_string(), labels, value.to_string())
    }

    fn series(text: &str) -> Vec<Parsed> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .map(parse_line)
            .collect()
    }

    #[test]
    fn label_values_are_escaped_and_read_back_intact() {
        let nasty = "a\"quoted\" back\\slash\nnewline";
        let text = render_lifecycle(
            &[Sample::new(
                "nodewright_node_target_count",
                &[("nodewright_name", nasty)],
                3.0,
            )],
            false,
        );
        assert!(
            text.contains(r#"nodewright_node_target_count{nodewright_name="a\"quoted\" back\\slash\nnewline"} 3"#),
            "{text}"
        );
        assert_eq!(text.lines().count(), 3, "one HELP, one TYPE, one series");
        let parsed = series(&text);
        assert_eq!(parsed[0].1, vec![("nodewright_name".into(), nasty.into())]);
    }

    #[test]
    fn values_use_prometheus_spellings() {
        assert_eq!(format_value(12.0), "12");
        assert_eq!(format_value(-3.0), "-3");
        assert_eq!(format_value(0.25), "0.25");
        assert_eq!(format_value(f64::NAN), "NaN");
        assert_eq!(format_value(f64::INFINITY), "+Inf");
        assert_eq!(format_value(f64::NEG_INFINITY), "-Inf");
        assert_eq!(escape_help("a\\b\nc"), "a\\\\b\\nc");
    }

    #[test]
    fn names_are_validated() {
        assert!(valid_metric_name("nodewright_status"));
        assert!(valid_metric_name("a:b_c1"));
        assert!(!valid_metric_name("1abc"));
        assert!(!valid_metric_name("a-b"));
        assert!(valid_label_name("package_name"));
        assert!(!valid_label_name("__reserved"));
        assert!(!valid_label_name("with.dot"));
        let text = render_lifecycle(
            &[
                Sample::new("bad-name", &[], 1.0),
                Sample::new("nodewright_status", &[("bad.label", "x")], 1.0),
            ],
            true,
        );
        assert!(text.is_empty(), "{text}");
    }

    fn fleet_samples() -> Vec<Sample> {
        vec![
            Sample::new(
                "nodewright_node_status_count",
                &[("nodewright_name", "tuning"), ("status", "complete")],
                12.0,
            ),
            Sample::new(
                "nodewright_status",
                &[("nodewright_name", "tuning"), ("status", "in_progress")],
                1.0,
            ),
            Sample::new(
                "nodewright_node_status_count",
                &[("nodewright_name", "tuning"), ("status", "erroring")],
                1.0,
            ),
            Sample::new(
                "nodewright_rollout_current_batch",
                &[
                    ("nodewright_name", "tuning"),
                    ("policy_name", "legacy"),
                    ("compartment_name", "__default__"),
                    ("strategy", "fixed"),
                ],
                2.0,
            ),
        ]
    }

    #[test]
    fn families_are_grouped_in_upstream_order_with_legacy_twins() {
        let text = render_lifecycle(&fleet_samples(), true);
        let types: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .collect();
        assert_eq!(
            types,
            [
                "nodewright_status gauge",
                "skyhook_status gauge",
                "nodewright_node_status_count gauge",
                "skyhook_node_status_count gauge",
                "nodewright_rollout_current_batch gauge",
                "skyhook_rollout_current_batch gauge",
            ]
        );
        let parsed = series(&text);
        let legacy: Vec<_> = parsed
            .iter()
            .filter(|(n, _, _)| n == "skyhook_node_status_count")
            .collect();
        assert_eq!(legacy.len(), 2);
        assert_eq!(
            legacy[1].1,
            vec![
                ("skyhook_name".to_string(), "tuning".to_string()),
                ("status".to_string(), "erroring".to_string())
            ]
        );
        assert_eq!(legacy[1].2, "1");
        // Every series of a family sits between its TYPE line and the next family.
        let mut current = String::new();
        for line in text.lines() {
            if let Some(t) = line.strip_prefix("# TYPE ") {
                current = t.split(' ').next().unwrap().to_string();
            } else if !line.starts_with('#') {
                assert_eq!(parse_line(line).0, current, "{line}");
            }
        }
        assert!(text.contains(
            "# HELP skyhook_status Binary metric indicating the status of the NodeWright Custom Resource (1 if in that status, 0 otherwise) (DEPRECATED: use nodewright_status with the nodewright_name label)"
        ));
    }

    #[test]
    fn legacy_twins_are_off_when_not_published() {
        let text = render_lifecycle(&fleet_samples(), false);
        assert!(!text.contains("skyhook_"), "{text}");
        assert_eq!(series(&text).len(), 4);
    }

    #[test]
    fn a_repeated_series_keeps_its_last_value_and_unknown_names_follow() {
        let text = render_lifecycle(
            &[
                Sample::new("nodewright_extra", &[], 5.0),
                Sample::new(
                    "nodewright_node_target_count",
                    &[("nodewright_name", "a")],
                    1.0,
                ),
                Sample::new(
                    "nodewright_node_target_count",
                    &[("nodewright_name", "a")],
                    4.0,
                ),
            ],
            false,
        );
        let parsed = series(&text);
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[0].0, "nodewright_node_target_count");
        assert_eq!(parsed[0].2, "4");
        assert_eq!(parsed[1].0, "nodewright_extra");
        assert!(text.contains("# TYPE nodewright_extra gauge\n"));
    }

    #[test]
    fn controller_metrics_count_commits_passes_and_writes() {
        let m = Metrics::new(false);
        m.commit_seen();
        m.commit_seen();
        m.commit_rejected();
        m.commit_applied("abc123");
        m.commit_applied("def456");
        m.observe_pass(Duration::from_millis(30));
        m.observe_pass(Duration::from_secs(3));
        m.observe_pass(Duration::from_secs(120));
        m.api_write(&Action::DeleteConfigMap { name: "x".into() });
        m.api_write(&Action::DeleteConfigMap { name: "y".into() });
        m.api_write_kind("apply-desired");
        let parsed = series(&m.render());
        let value = |name: &str, labels: &[(&str, &str)]| -> String {
            let labels: Vec<(String, String)> = labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            parsed
                .iter()
                .find(|(n, l, _)| n == name && *l == labels)
                .unwrap_or_else(|| panic!("{name} {labels:?} missing"))
                .2
                .clone()
        };
        assert_eq!(value("nodewright_commits_seen_total", &[]), "2");
        assert_eq!(value("nodewright_commits_applied_total", &[]), "2");
        assert_eq!(value("nodewright_commits_rejected_total", &[]), "1");
        assert_eq!(
            value(
                "nodewright_last_applied_commit_info",
                &[("commit", "def456")]
            ),
            "1"
        );
        assert_eq!(
            parsed
                .iter()
                .filter(|(n, _, _)| n == "nodewright_last_applied_commit_info")
                .count(),
            1
        );
        assert_eq!(
            value(
                "nodewright_pass_duration_seconds_bucket",
                &[("le", "0.025")]
            ),
            "0"
        );
        assert_eq!(
            value("nodewright_pass_duration_seconds_bucket", &[("le", "0.05")]),
            "1"
        );
        assert_eq!(
            value("nodewright_pass_duration_seconds_bucket", &[("le", "5")]),
            "2"
        );
        assert_eq!(
            value("nodewright_pass_duration_seconds_bucket", &[("le", "60")]),
            "2"
        );
        assert_eq!(
            value("nodewright_pass_duration_seconds_bucket", &[("le", "+Inf")]),
            "3"
        );
        assert_eq!(value("nodewright_pass_duration_seconds_count", &[]), "3");
        assert_eq!(value("nodewright_pass_duration_seconds_sum", &[]), "123.03");
        assert_eq!(
            value(
                "nodewright_api_writes_total",
                &[("kind", "delete-configmap")]
            ),
            "2"
        );
        assert_eq!(
            value("nodewright_api_writes_total", &[("kind", "apply-desired")]),
            "1"
        );
    }

    #[test]
    fn replacing_lifecycle_samples_drops_series_of_deleted_nodewrights() {
        let m = Metrics::new(true);
        m.set_lifecycle(vec![
            Sample::new(
                "nodewright_node_target_count",
                &[("nodewright_name", "a")],
                1.0,
            ),
            Sample::new(
                "nodewright_node_target_count",
                &[("nodewright_name", "b")],
                2.0,
            ),
        ]);
        assert!(
            m.render()
                .contains("skyhook_node_target_count{skyhook_name=\"b\"} 2")
        );
        m.set_lifecycle(vec![Sample::new(
            "nodewright_node_target_count",
            &[("nodewright_name", "a")],
            1.0,
        )]);
        let text = m.render();
        assert!(!text.contains("\"b\""), "{text}");
    }

    #[test]
    fn deferred_lifecycle_gauges_are_the_latest_snapshots_computed_once_when_scraped() {
        let m = Metrics::new(false);
        let computed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        for (name, count) in [("a", 1.0), ("b", 2.0)] {
            let computed = computed.clone();
            m.set_lifecycle_source(move || {
                computed.fetch_add(1, Ordering::SeqCst);
                vec![Sample::new(
                    "nodewright_node_target_count",
                    &[("nodewright_name", name)],
                    count,
                )]
            });
        }
        assert_eq!(computed.load(Ordering::SeqCst), 0, "nothing scraped yet");
        let first = m.render();
        assert!(
            first.contains("nodewright_node_target_count{nodewright_name=\"b\"} 2"),
            "{first}"
        );
        assert!(!first.contains("\"a\""), "{first}");
        assert_eq!(m.render(), first);
        assert_eq!(computed.load(Ordering::SeqCst), 1);
        m.set_lifecycle(Vec::new());
        assert!(!m.render().contains("nodewright_node_target_count{"));
    }

    #[tokio::test]
    async fn the_endpoint_serves_metrics_and_probes() {
        let metrics = Arc::new(Metrics::new(true));
        metrics.set_lifecycle(fleet_samples());
        let server = MetricsServer::bind("127.0.0.1:0".parse().unwrap(), metrics.clone())
            .await
            .unwrap();
        let addr = server.local_addr();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(server.serve(async {
            let _ = stopped.await;
        }));
        // reqwest is built without a bundled crypto provider; building a client needs one.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::new();
        let get = |path: &'static str| {
            let client = client.clone();
            async move {
                let r = client
                    .get(format!("http://{addr}{path}"))
                    .send()
                    .await
                    .unwrap();
                let status = r.status().as_u16();
                let ct = r
                    .headers()
                    .get("content-type")
                    .map(|v| v.to_str().unwrap().to_string());
                (status, ct, r.text().await.unwrap())
            }
        };
        let (status, ct, body) = get("/metrics").await;
        assert_eq!(status, 200);
        assert_eq!(ct.as_deref(), Some(CONTENT_TYPE));
        assert_eq!(body, metrics.render());
        assert!(body.contains("skyhook_rollout_current_batch{skyhook_name=\"tuning\""));
        assert_eq!(get("/healthz").await.0, 200);
        assert_eq!(get("/readyz").await.0, 503);
        metrics.set_ready(true);
        assert_eq!(get("/readyz").await.0, 200);
        assert_eq!(get("/nothing").await.0, 404);
        stop.send(()).unwrap();
        task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn binding_a_taken_port_names_the_address() {
        let metrics = Arc::new(Metrics::new(false));
        let first = MetricsServer::bind("127.0.0.1:0".parse().unwrap(), metrics.clone())
            .await
            .unwrap();
        let err = MetricsServer::bind(first.local_addr(), metrics)
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with(&format!("metrics: cannot listen on {}", first.local_addr())),
            "{err}"
        );
    }
}
