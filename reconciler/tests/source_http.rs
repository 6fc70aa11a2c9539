//! Plain http:// against `git http-backend` behind a tiny loopback server that demands basic
//! authentication: credentials are refused before anything is sent (fetch and push), and an
//! anonymous fetch fails naming the remote. Credentials over HTTPS are exercised against
//! lighttpd in `git_servers.rs`.

mod common;

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use common::{WorkRepo, git};
use nodewright_reconciler::source::repo::{Credentials, GitRepo, RemoteSpec, SecretSource};

const USER: &str = "x-access-token";
const TOKEN: &str = "tok-123";

fn basic(user: &str, pass: &str) -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
    )
}

async fn cgi(State(root): State<PathBuf>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let headers: &HeaderMap = &parts.headers;
    if headers.get("authorization").and_then(|v| v.to_str().ok())
        != Some(basic(USER, TOKEN).as_str())
    {
        return Response::builder()
            .status(StatusCode::UNAUTHORIZED)
            .header("WWW-Authenticate", "Basic realm=\"git\"")
            .body(Body::empty())
            .unwrap();
    }
    let body: Bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    let mut child = Command::new("git")
        .arg("http-backend")
        .env("GIT_PROJECT_ROOT", &root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("PATH_INFO", parts.uri.path())
        .env("QUERY_STRING", parts.uri.query().unwrap_or(""))
        .env("REQUEST_METHOD", parts.method.as_str())
        .env("REMOTE_USER", USER)
        .env(
            "CONTENT_TYPE",
            headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or(""),
        )
        .env(
            "GIT_PROTOCOL",
            headers
                .get("git-protocol")
                .and_then(|v| v.to_str().ok())
                .unwrap_or(""),
        )
        .env(
            "HTTP_CONTENT_ENCODING",
            headers
                .get("content-encoding")
                .and_then(|v| v.to_str().ok())
                .unwrap_or(""),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&body).unwrap();
    let out = child.wait_with_output().unwrap();
    let split = out
        .stdout
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4))
        .or_else(|| {
            out.stdout
                .windows(2)
                .position(|w| w == b"\n\n")
                .map(|i| (i, 2))
        })
        .unwrap();
    let head = String::from_utf8_lossy(&out.stdout[..split.0]).into_owned();
    let mut resp = Response::builder();
    for line in head.lines() {
        let (k, v) = line.split_once(':').unwrap();
        if k.eq_ignore_ascii_case("status") {
            resp = resp.status(v.trim()[..3].parse::<u16>().unwrap());
        } else {
            resp = resp.header(k.trim(), v.trim());
        }
    }
    resp.body(Body::from(out.stdout[split.0 + split.1..].to_vec()))
        .unwrap()
}

fn serve(root: &Path) -> SocketAddr {
    let root = root.to_path_buf();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let app = axum::Router::new().fallback(cgi).with_state(root);
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    addr
}

#[test]
fn plain_http_is_refused_credentials_before_anything_is_sent() {
    let tmp = tempfile::tempdir().unwrap();
    let work = WorkRepo::init(&tmp.path().join("work"));
    work.write("fleet/a.yaml", "a: 1\n");
    let first = work.commit("first");
    let served = tmp.path().join("served");
    std::fs::create_dir_all(&served).unwrap();
    git(
        tmp.path(),
        &[
            "clone",
            "-q",
            "--bare",
            work.dir.to_str().unwrap(),
            served.join("fleet.git").to_str().unwrap(),
        ],
    );
    let addr = serve(&served);
    let url = format!("http://{addr}/fleet.git");

    let anonymous = RemoteSpec::anonymous(url.clone());
    let err = GitRepo::sync_remote(&anonymous, &tmp.path().join("cache-anon")).unwrap_err();
    assert!(
        err.to_string().contains(&url),
        "error names the remote: {err}"
    );

    let token_file = tmp.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let spec = RemoteSpec {
        credentials: Credentials::Token {
            username: None,
            token: SecretSource::File(token_file),
        },
        ..RemoteSpec::anonymous(url.clone())
    };
    let err = GitRepo::sync_remote(&spec, &tmp.path().join("cache"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("over plain http://") && err.contains("https://"),
        "says why and what to do: {err}"
    );
    let mirror = GitRepo::open(&work.dir).unwrap();
    let pushed = nodewright_reconciler::writeback::git::push(mirror.path(), &spec, "main")
        .unwrap_err()
        .to_string();
    assert!(pushed.contains("over plain http://"), "{pushed}");
    assert_eq!(
        git(&served.join("fleet.git"), &["rev-parse", "main"]),
        first,
        "nothing was pushed"
    );
}
