//! `/metrics`: kube-apiserver's request counter, `apiserver_request_total`, so a harness can
//! measure what each client asked of the server (docs/sim-serve.md).
//!
//! The labels are the apiserver's (`verb`, `group`, `version`, `resource`, `subresource`,
//! `scope`, `code`) plus `client`, the product token of the request's User-Agent
//! (`manager`, `kubectl`, `nodewright`, …): a real apiserver attributes requests per client
//! only in its audit log, which sim serve does not write.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;

/// One series of `apiserver_request_total`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct RequestLabels {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`,
    /// or the HTTP method in lower case for a non-resource path.
    pub verb: String,
    /// API group (`""` for core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Plural resource name (`""` for a non-resource path).
    pub resource: String,
    /// Subresource (`status`, `eviction`, …) or `""`.
    pub subresource: String,
    /// `cluster`, `namespace`, `resource` (one named object), or `""` for non-resource paths.
    pub scope: String,
    /// The response's HTTP status code.
    pub code: u16,
    /// The User-Agent's product token (before the first `/`), or `unknown`.
    pub client: String,
}

/// The counters, shared by every request handler.
#[derive(Debug, Default)]
pub struct RequestCounter {
    counts: Mutex<BTreeMap<RequestLabels, u64>>,
}

impl RequestCounter {
    /// Counts one request.
    pub fn record(&self, labels: RequestLabels) {
        // A handler that panicked while counting left a valid map behind: counting goes on.
        let mut counts = self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *counts.entry(labels).or_default() += 1;
    }

    /// The Prometheus text exposition of every series.
    pub fn render(&self) -> String {
        let counts = self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = String::from(
            "# HELP apiserver_request_total Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.\n# TYPE apiserver_request_total counter\n",
        );
        for (l, count) in counts.iter() {
            // Writing to a String cannot fail.
            let _ = writeln!(
                out,
                "apiserver_request_total{{client=\"{}\",code=\"{}\",group=\"{}\",resource=\"{}\",scope=\"{}\",subresource=\"{}\",verb=\"{}\",version=\"{}\"}} {count}",
                escape(&l.client),
                l.code,
                escape(&l.group),
                escape(&l.resource),
                escape(&l.scope),
                escape(&l.subresource),
                escape(&l.verb),
                escape(&l.version),
            );
        }
        out
    }
}

/// The product token of a User-Agent header: `manager/v0.0.0 (linux/amd64)` → `manager`.
pub fn client_of(user_agent: Option<&str>) -> String {
    user_agent
        .and_then(|ua| ua.split(['/', ' ']).next())
        .filter(|token| !token.is_empty())
        .unwrap_or("unknown")
        .to_string()
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(verb: &str, client: &str) -> RequestLabels {
        RequestLabels {
            verb: verb.into(),
            group: String::new(),
            version: "v1".into(),
            resource: "nodes".into(),
            subresource: String::new(),
            scope: "cluster".into(),
            code: 200,
            client: client.into(),
        }
    }

    #[test]
    fn each_series_counts_its_requests() {
        let counter = RequestCounter::default();
        counter.record(labels("list", "kubectl"));
        counter.record(labels("list", "kubectl"));
        counter.record(labels("watch", "manager"));
        let text = counter.render();
        assert!(text.contains("apiserver_request_total{client=\"kubectl\",code=\"200\",group=\"\",resource=\"nodes\",scope=\"cluster\",subresource=\"\",verb=\"list\",version=\"v1\"} 2\n"), "{text}");
        assert!(text.contains("client=\"manager\""), "{text}");
        assert!(
            text.contains("verb=\"watch\",version=\"v1\"} 1\n"),
            "{text}"
        );
    }

    #[test]
    fn the_client_is_the_user_agent_product() {
        assert_eq!(
            client_of(Some("manager/v0.0.0 (linux/amd64) kubernetes/$Format")),
            "manager"
        );
        assert_eq!(client_of(Some("kubectl/v1.33.0 (linux/amd64)")), "kubectl");
        assert_eq!(client_of(Some("")), "unknown");
        assert_eq!(client_of(None), "unknown");
    }
}
