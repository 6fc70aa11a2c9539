//! Stock kubectl against a `sim serve` instance (tests only).

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use nodewright_reconciler::sim::http::SimServer;

/// The program's path on PATH, if any.
pub fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())
    })
}

/// True (after saying SKIP) when kubectl is not installed.
pub fn skip_without_kubectl() -> bool {
    if which("kubectl").is_none() {
        println!("SKIP: kubectl is not on PATH");
        return true;
    }
    false
}

/// A kubeconfig for `server` in a fresh directory (kept alive by the returned guard). Each
/// kubectl run gets its own cache directory, so no discovery or OpenAPI document is reused
/// from another server.
pub fn kubeconfig(server: &SimServer) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    server.write_kubeconfig(&path).unwrap();
    (dir, path)
}

/// kubectl with `args` against the server of `config`.
pub fn command(config: &(tempfile::TempDir, PathBuf), args: &[&str]) -> Command {
    let mut command = Command::new("kubectl");
    command
        .arg("--kubeconfig")
        .arg(&config.1)
        .arg("--cache-dir")
        .arg(config.0.path().join("cache"))
        .args(args);
    command
}

/// Runs kubectl against `server` with `stdin`; returns (exit code, stdout, stderr).
pub async fn run(server: &SimServer, args: &[&str], stdin: &str) -> (i32, String, String) {
    let config = kubeconfig(server);
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let stdin = stdin.to_string();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut child = command(&config, &args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}
