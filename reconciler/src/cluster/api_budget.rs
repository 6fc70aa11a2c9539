//! The reconciler's budget on the Kubernetes API: every request of the process — watches,
//! reads and writes of every writer — passes one token bucket, the way client-go's
//! `flowcontrol` limiter guards a controller-runtime manager (QPS 20, burst 30 upstream), and is
//! counted by verb, resource and response code with its latency, for the metrics endpoint and
//! the requests-per-node summary of `run --until-converged`.
//!
//! The limiter waits in `poll_ready`: kube-rs drives its service from one buffer worker, so
//! callers queue behind the bucket in order instead of each sleeping on its own.

use std::collections::BTreeMap;
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use http::{Method, Request, Response};
use tower::{Layer, Service};

use crate::metrics::Histogram;

/// Upstream's client defaults (controller-runtime over client-go).
pub const DEFAULT_QPS: f64 = 20.0;
/// Upstream's client burst.
pub const DEFAULT_BURST: u32 = 30;

/// Upper bounds (seconds) of the request-latency histogram buckets (client-go's
/// `rest_client_request_duration_seconds`).
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];

/// Why a budget cannot be built.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum BudgetError {
    /// QPS not positive or not finite.
    #[error("--kube-qps must be a positive number of requests per second, not {0}")]
    Qps(f64),
    /// Burst of zero.
    #[error("--kube-burst must be at least 1 request")]
    Burst,
}

/// One request's classification, as client-go labels it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestKey {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: &'static str,
    /// `nodes`, `nodes/status`, `jobs`, `pods/eviction`, … (`-` for non-resource paths).
    pub resource: String,
    /// The HTTP status, or `error` when no response came back.
    pub code: String,
}

/// Counts and latencies of the requests made through one client.
#[derive(Debug, Default)]
pub struct ApiStats {
    inner: Mutex<StatsInner>,
}

#[derive(Debug, Default)]
struct StatsInner {
    requests: BTreeMap<RequestKey, u64>,
    /// Per verb, over [`LATENCY_BUCKETS`].
    latency: BTreeMap<&'static str, Histogram>,
    /// Time spent waiting for a token.
    throttled: Duration,
}

/// A copy of the statistics at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatsSnapshot {
    /// Requests by verb, resource and code.
    pub requests: BTreeMap<RequestKey, u64>,
    /// Per verb: request latency in seconds, over [`LATENCY_BUCKETS`].
    pub latency: BTreeMap<&'static str, Histogram>,
    /// Total time requests waited for the rate limiter.
    pub throttled: Duration,
}

impl StatsSnapshot {
    /// Requests in total.
    pub fn total(&self) -> u64 {
        self.requests.values().sum()
    }

    /// Requests that change something (everything but get, list and watch).
    pub fn writes(&self) -> u64 {
        self.requests
            .iter()
            .filter(|(k, _)| !matches!(k.verb, "get" | "list" | "watch"))
            .map(|(_, n)| n)
            .sum()
    }

    /// Requests answered with this HTTP status (409: writes that lost a race and were
    /// retried from fresh state).
    pub fn with_code(&self, code: u16) -> u64 {
        let code = code.to_string();
        self.requests
            .iter()
            .filter(|(k, _)| k.code == code)
            .map(|(_, n)| n)
            .sum()
    }

    /// Requests per verb and resource, most frequent first, with the count of each answer
    /// that was not a success (`409` conflicts, `404`, …).
    pub fn by_verb_and_resource(&self) -> Vec<(String, u64, BTreeMap<String, u64>)> {
        let mut sums: BTreeMap<String, (u64, BTreeMap<String, u64>)> = BTreeMap::new();
        for (k, n) in &self.requests {
            let entry = sums
                .entry(format!("{} {}", k.verb, k.resource))
                .or_default();
            entry.0 += n;
            if !k.code.starts_with('2') {
                *entry.1.entry(k.code.clone()).or_default() += n;
            }
        }
        let mut out: Vec<(String, u64, BTreeMap<String, u64>)> = sums
            .into_iter()
            .map(|(what, (n, failed))| (what, n, failed))
            .collect();
        out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        out
    }
}

impl ApiStats {
    fn inner(&self) -> MutexGuard<'_, StatsInner> {
        // Plain counters stay valid after a panic elsewhere.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record(&self, key: RequestKey, elapsed: Duration) {
        let mut inner = self.inner();
        let verb = key.verb;
        *inner.requests.entry(key).or_default() += 1;
        inner
            .latency
            .entry(verb)
            .or_insert_with(|| Histogram::new(&LATENCY_BUCKETS))
            .observe(elapsed.as_secs_f64());
    }

    fn throttled(&self, waited: Duration) {
        self.inner().throttled += waited;
    }

    /// The statistics now.
    pub fn snapshot(&self) -> StatsSnapshot {
        let inner = self.inner();
        StatsSnapshot {
            requests: inner.requests.clone(),
            latency: inner.latency.clone(),
            throttled: inner.throttled,
        }
    }
}

/// The process's API budget: the token bucket and the statistics, shared by every client
/// built with it.
#[derive(Clone)]
pub struct ApiBudget {
    limiter: Arc<DefaultDirectRateLimiter>,
    stats: Arc<ApiStats>,
}

impl std::fmt::Debug for ApiBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiBudget").finish_non_exhaustive()
    }
}

impl ApiBudget {
    /// A bucket refilled at `qps` tokens per second holding at most `burst`.
    pub fn new(qps: f64, burst: u32) -> Result<ApiBudget, BudgetError> {
        if !(qps.is_finite() && qps > 0.0) {
            return Err(BudgetError::Qps(qps));
        }
        let burst = NonZeroU32::new(burst).ok_or(BudgetError::Burst)?;
        let period = Duration::from_secs_f64(1.0 / qps);
        // A period below a nanosecond is an unlimited budget in practice.
        let quota = Quota::with_period(period.max(Duration::from_nanos(1)))
            .ok_or(BudgetError::Qps(qps))?
            .allow_burst(burst);
        Ok(ApiBudget {
            limiter: Arc::new(RateLimiter::direct(quota)),
            stats: Arc::new(ApiStats::default()),
        })
    }

    /// The statistics of every request made under this budget.
    pub fn stats(&self) -> Arc<ApiStats> {
        self.stats.clone()
    }
}

impl<S> Layer<S> for ApiBudget {
    type Service = Budgeted<S>;

    fn layer(&self, inner: S) -> Budgeted<S> {
        Budgeted {
            inner,
            budget: self.clone(),
            waiting: None,
            admitted: false,
        }
    }
}

type Wait = Pin<Box<dyn Future<Output = Duration> + Send>>;

/// A service whose requests take a token first and are counted.
pub struct Budgeted<S> {
    inner: S,
    budget: ApiBudget,
    waiting: Option<Wait>,
    /// A token was taken for the next call.
    admitted: bool,
}

impl<S, B, RB> Service<Request<B>> for Budgeted<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = Response<RB>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if !self.admitted {
            let wait = self.waiting.get_or_insert_with(|| {
                let limiter = self.budget.limiter.clone();
                Box::pin(async move {
                    let started = Instant::now();
                    limiter.until_ready().await;
                    started.elapsed()
                })
            });
            match wait.as_mut().poll(cx) {
                Poll::Ready(waited) => {
                    self.waiting = None;
                    self.admitted = true;
                    if waited > Duration::from_millis(1) {
                        self.budget.stats.throttled(waited);
                    }
                }
                Poll::Pending => return Poll::Pending,
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        self.admitted = false;
        let (verb, resource) = classify(request.method(), request.uri());
        let stats = self.budget.stats.clone();
        let started = Instant::now();
        let response = self.inner.call(request);
        Box::pin(async move {
            let result = response.await;
            let code = match &result {
                Ok(r) => r.status().as_u16().to_string(),
                Err(_) => "error".to_string(),
            };
            stats.record(
                RequestKey {
                    verb,
                    resource,
                    code,
                },
                started.elapsed(),
            );
            result
        })
    }
}

/// The client-go verb and the resource (with subresource) of a request.
pub fn classify(method: &Method, uri: &http::Uri) -> (&'static str, String) {
    let query = uri.query().unwrap_or("");
    let watch = query
        .split('&')
        .any(|p| p == "watch=true" || p == "watch=1");
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    // /api/v1/… or /apis/GROUP/VERSION/…, then optionally namespaces/NS, then RESOURCE[/NAME[/SUB]].
    let rest: &[&str] = match segments.first() {
        Some(&"api") => segments.get(2..).unwrap_or(&[]),
        Some(&"apis") => segments.get(3..).unwrap_or(&[]),
        _ => return (verb_of(method, false, true), "-".to_string()),
    };
    let rest = match rest {
        ["namespaces", _ns, more @ ..] if !more.is_empty() => more,
        other => other,
    };
    let (resource, named) = match rest {
        [] => ("-".to_string(), false),
        [resource] => (resource.to_string(), false),
        [resource, _name] => (resource.to_string(), true),
        [resource, _name, sub, ..] => (format!("{resource}/{sub}"), true),
    };
    let verb = if watch {
        "watch"
    } else {
        verb_of(method, named, false)
    };
    (verb, resource)
}

fn verb_of(method: &Method, named: bool, non_resource: bool) -> &'static str {
    match *method {
        Method::GET if named || non_resource => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(method: Method, uri: &str) -> (&'static str, String) {
        classify(&method, &uri.parse().unwrap())
    }

    #[test]
    fn requests_are_named_as_client_go_names_them() {
        assert_eq!(
            class(Method::GET, "/api/v1/nodes/n1"),
            ("get", "nodes".into())
        );
        assert_eq!(
            class(Method::GET, "/api/v1/nodes?limit=500"),
            ("list", "nodes".into())
        );
        assert_eq!(
            class(Method::GET, "/api/v1/nodes?watch=true&resourceVersion=7"),
            ("watch", "nodes".into())
        );
        assert_eq!(
            class(Method::PATCH, "/api/v1/nodes/n1/status"),
            ("patch", "nodes/status".into())
        );
        assert_eq!(
            class(
                Method::POST,
                "/api/v1/namespaces/default/pods/train-0/eviction"
            ),
            ("create", "pods/eviction".into())
        );
        assert_eq!(
            class(Method::GET, "/apis/batch/v1/namespaces/nodewright/jobs"),
            ("list", "jobs".into())
        );
        assert_eq!(
            class(
                Method::DELETE,
                "/apis/batch/v1/namespaces/nodewright/jobs/j"
            ),
            ("delete", "jobs".into())
        );
        assert_eq!(
            class(Method::PATCH, "/api/v1/namespaces/nodewright"),
            ("patch", "namespaces".into())
        );
        assert_eq!(class(Method::GET, "/version"), ("get", "-".into()));
    }

    #[test]
    fn a_budget_needs_a_positive_rate_and_a_burst() {
        assert_eq!(ApiBudget::new(0.0, 30).err(), Some(BudgetError::Qps(0.0)));
        assert_eq!(
            ApiBudget::new(f64::NAN, 30).err().map(|e| e.to_string()),
            Some("--kube-qps must be a positive number of requests per second, not NaN".into())
        );
        assert_eq!(ApiBudget::new(20.0, 0).err(), Some(BudgetError::Burst));
    }

    /// Of a burst of requests, the bucket admits its burst and then only what its rate has
    /// refilled since: never more, however fast the requests come.
    #[test]
    fn the_bucket_holds_its_budget_under_a_burst() {
        let budget = ApiBudget::new(2.0, 5).unwrap();
        let started = Instant::now();
        let admitted = (0..1000).filter(|_| budget.limiter.check().is_ok()).count();
        let refilled = (started.elapsed().as_secs_f64() * 2.0).ceil() as usize;
        assert!(admitted >= 5, "the burst passes: {admitted}");
        assert!(admitted <= 5 + refilled, "{admitted} admitted");
    }

    /// Requests through the layer are counted by verb, resource and code.
    #[tokio::test]
    async fn requests_through_the_layer_are_counted() {
        use tower::ServiceExt;
        let budget = ApiBudget::new(1000.0, 100).unwrap();
        let inner = tower::service_fn(|req: Request<kube::client::Body>| async move {
            let status = if req.method() == Method::PATCH {
                409
            } else {
                200
            };
            Ok::<_, std::convert::Infallible>(
                Response::builder()
                    .status(status)
                    .body(kube::client::Body::empty())
                    .unwrap(),
            )
        });
        let mut service = budget.layer(inner);
        for (method, uri) in [
            (Method::GET, "/api/v1/nodes/n1"),
            (Method::PATCH, "/api/v1/nodes/n1"),
            (Method::PATCH, "/api/v1/nodes/n1"),
        ] {
            let request = Request::builder()
                .method(method)
                .uri(uri)
                .body(kube::client::Body::empty())
                .unwrap();
            service.ready().await.unwrap().call(request).await.unwrap();
        }
        let stats = budget.stats().snapshot();
        assert_eq!(stats.total(), 3);
        assert_eq!(stats.writes(), 2);
        let key = |verb, code: &str| RequestKey {
            verb,
            resource: "nodes".into(),
            code: code.into(),
        };
        assert_eq!(stats.requests.get(&key("patch", "409")), Some(&2));
        assert_eq!(stats.requests.get(&key("get", "200")), Some(&1));
        assert_eq!(stats.latency.get("patch").map(|l| l.count()), Some(2));
    }
}
