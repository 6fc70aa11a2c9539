//! A local HTTP stub standing in for a forge: it records every request and answers from a
//! script (status, headers, JSON body), so tests check the exact REST calls.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use serde_json::Value;

/// One request as the stub saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: Method,
    /// Path and query, exactly as sent.
    pub uri: String,
    pub headers: HeaderMap,
    pub body: Option<Value>,
}

pub type Script = dyn Fn(&Seen) -> (StatusCode, Vec<(&'static str, String)>, Value) + Send + Sync;

#[derive(Clone)]
struct Stub {
    seen: Arc<Mutex<Vec<Seen>>>,
    script: Arc<Script>,
}

async fn record(State(stub): State<Stub>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = to_bytes(body, 10 << 20).await.unwrap();
    let seen = Seen {
        method: parts.method,
        uri: parts.uri.to_string(),
        headers: parts.headers,
        body: (!bytes.is_empty()).then(|| serde_json::from_slice(&bytes).unwrap()),
    };
    let (status, headers, reply) = (stub.script)(&seen);
    stub.seen.lock().unwrap().push(seen);
    let mut response = Response::builder()
        .status(status)
        .header("content-type", "application/json");
    for (k, v) in headers {
        response = response.header(k, v);
    }
    response.body(Body::from(reply.to_string())).unwrap()
}

/// Starts a stub on 127.0.0.1:0; returns its base URL and the request log.
pub async fn stub(
    script: impl Fn(&Seen) -> (StatusCode, Vec<(&'static str, String)>, Value) + Send + Sync + 'static,
) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let state = Stub {
        seen: seen.clone(),
        script: Arc::new(script),
    };
    let app = Router::new().fallback(record).with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), seen)
}
