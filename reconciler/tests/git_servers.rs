//! Fetch and status push against real Git servers that each test starts on loopback:
//! lighttpd serving `git http-backend` over HTTPS with basic authentication and a private CA,
//! and OpenSSH's sshd with a throwaway host key. A test prints SKIP and passes when a server
//! binary is missing (`.ci/run` installs them), so a clean machine stays green.

mod common;

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{WorkRepo, git};
use nodewright_reconciler::source::repo::{Credentials, GitRepo, RemoteSpec, SecretSource};
use nodewright_reconciler::writeback::git::{Author, commit_files, push};

const USER: &str = "fleet-bot";
const TOKEN: &str = "tok-3f9a";
const HTTP_BACKEND: &str = "/usr/lib/git-core/git-http-backend";

const FLEET: &str = r#"
cluster:
  nodes:
    - generate: {count: 2, namePrefix: canary-, labels: {nvidia.com/gpu.present: "true", rollout.example.com/pool: canary}}
    - generate: {count: 2, namePrefix: gpu-, labels: {nvidia.com/gpu.present: "true", rollout.example.com/pool: production}}
packages:
  example/driver: {default: {duration: 5s}, rebootTakes: 30s}
"#;

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .chain(["/usr/sbin", "/sbin"])
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
}

fn skip(what: &str) {
    eprintln!("SKIP: {what}");
}

/// A server process, stopped (by its pid) when the test ends.
struct Server {
    child: Child,
    log: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits until the server accepts connections (it binds shortly after starting).
fn await_listening(server: &mut Server, port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = server.child.try_wait() {
            panic!("server exited with {status}:\n{}", server.log());
        }
        assert!(
            Instant::now() < deadline,
            "server never listened:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run_tool(program: &str, args: &[&str], dir: &Path) {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{program} runs: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A bare repository `served/fleet.git` holding the example fleet on `main`.
fn served_fleet(tmp: &Path) -> (PathBuf, String) {
    let work = WorkRepo::init(&tmp.join("work"));
    work.copy_from(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/fleet"));
    let head = work.commit("fleet");
    let served = tmp.join("served");
    std::fs::create_dir_all(&served).unwrap();
    let bare = served.join("fleet.git");
    work.clone_bare(&bare);
    git(&bare, &["config", "http.receivepack", "true"]);
    (bare, head)
}

/// lighttpd on `https://127.0.0.1:PORT/git/`, certificate from a private CA (`ca.pem`), basic
/// authentication for `USER`/`TOKEN`, CGI `git http-backend` for fetch and push.
struct Https {
    _server: Server,
    port: u16,
    ca: PathBuf,
}

fn start_https(tmp: &Path, served: &Path) -> Option<Https> {
    let Some(lighttpd) = which("lighttpd") else {
        skip("lighttpd is not installed");
        return None;
    };
    if which("openssl").is_none() || !Path::new(HTTP_BACKEND).is_file() {
        skip("openssl or git http-backend is not installed");
        return None;
    }
    let modules = Path::new("/usr/lib/lighttpd");
    if !modules.join("mod_openssl.so").is_file() {
        skip("lighttpd's mod_openssl is not installed");
        return None;
    }
    let dir = tmp.join("https");
    std::fs::create_dir_all(&dir).unwrap();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca_args = vec!["req", "-x509"];
    ca_args.extend(ec);
    ca_args.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=test CA",
    ]);
    run_tool("openssl", &ca_args, &dir);
    let mut csr_args = vec!["req"];
    csr_args.extend(ec);
    csr_args.extend([
        "-keyout",
        "srv.key",
        "-out",
        "srv.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    run_tool("openssl", &csr_args, &dir);
    std::fs::write(
        dir.join("ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    run_tool(
        "openssl",
        &[
            "x509",
            "-req",
            "-in",
            "srv.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "srv.pem",
            "-days",
            "2",
            "-extfile",
            "ext",
        ],
        &dir,
    );
    let bundle = [
        std::fs::read_to_string(dir.join("srv.pem")).unwrap(),
        std::fs::read_to_string(dir.join("srv.key")).unwrap(),
    ]
    .concat();
    std::fs::write(dir.join("server.pem"), bundle).unwrap();
    std::fs::write(dir.join("users"), format!("{USER}:{TOKEN}\n")).unwrap();
    let port = free_port();
    let config = format!(
        r#"server.document-root = "{served}"
server.bind = "127.0.0.1"
server.port = {port}
server.modules = ("mod_auth", "mod_authn_file", "mod_alias", "mod_setenv", "mod_cgi", "mod_openssl")
server.errorlog = "{dir}/error.log"
ssl.engine = "enable"
ssl.pemfile = "{dir}/server.pem"
auth.backend = "plain"
auth.backend.plain.userfile = "{dir}/users"
auth.require = ( "/" => ( "method" => "basic", "realm" => "git", "require" => "valid-user" ) )
alias.url = ( "/git/" => "{HTTP_BACKEND}/" )
cgi.assign = ( "" => "" )
setenv.set-environment = ( "GIT_PROJECT_ROOT" => "{served}", "GIT_HTTP_EXPORT_ALL" => "1" )
"#,
        served = served.display(),
        dir = dir.display(),
    );
    std::fs::write(dir.join("lighttpd.conf"), config).unwrap();
    let child = Command::new(lighttpd)
        .args(["-D", "-m"])
        .arg(modules)
        .arg("-f")
        .arg(dir.join("lighttpd.conf"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut server = Server {
        child,
        log: dir.join("error.log"),
    };
    await_listening(&mut server, port);
    Some(Https {
        _server: server,
        port,
        ca: dir.join("ca.pem"),
    })
}

/// sshd on `127.0.0.1:PORT` accepting one throwaway client key for the current user.
struct Ssh {
    _server: Server,
    port: u16,
    user: String,
    client_key: PathBuf,
    known_hosts: PathBuf,
}

fn start_sshd(tmp: &Path) -> Option<Ssh> {
    let Some(sshd) = which("sshd") else {
        skip("sshd is not installed");
        return None;
    };
    if which("ssh").is_none() || which("ssh-keygen").is_none() {
        skip("ssh or ssh-keygen is not installed");
        return None;
    }
    let dir = tmp.join("ssh");
    std::fs::create_dir_all(&dir).unwrap();
    for key in ["host_key", "client_key"] {
        run_tool(
            "ssh-keygen",
            &["-q", "-t", "ed25519", "-N", "", "-f", key],
            &dir,
        );
    }
    std::fs::copy(dir.join("client_key.pub"), dir.join("authorized_keys")).unwrap();
    let user = String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_string();
    // sshd running as root separates privileges into this directory.
    let privsep = Path::new("/run/sshd");
    if !privsep.exists() && std::fs::create_dir_all(privsep).is_err() {
        skip("sshd needs /run/sshd, which cannot be created here");
        return None;
    }
    let port = free_port();
    let config = format!(
        "Port {port}\nListenAddress 127.0.0.1\nHostKey {dir}/host_key\nAuthorizedKeysFile {dir}/authorized_keys\nPidFile none\nStrictModes no\nUsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nAllowUsers {user}\n",
        dir = dir.display()
    );
    std::fs::write(dir.join("sshd_config"), config).unwrap();
    let log = dir.join("sshd.log");
    let child = Command::new(sshd)
        .args(["-D", "-e", "-f"])
        .arg(dir.join("sshd_config"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut server = Server { child, log };
    await_listening(&mut server, port);
    let host_key = std::fs::read_to_string(dir.join("host_key.pub")).unwrap();
    let host_key: Vec<&str> = host_key.split_whitespace().take(2).collect();
    let known_hosts = dir.join("known_hosts");
    std::fs::write(
        &known_hosts,
        format!("[127.0.0.1]:{port} {}\n", host_key.join(" ")),
    )
    .unwrap();
    Some(Ssh {
        _server: server,
        port,
        user,
        client_key: dir.join("client_key"),
        known_hosts,
    })
}

fn ssh_url(ssh: &Ssh, bare: &Path) -> String {
    format!(
        "ssh://{}@127.0.0.1:{}{}",
        ssh.user,
        ssh.port,
        bare.display()
    )
}

/// `nodewright run` against the remote, on the embedded simulator, until the fleet converges.
fn run_until_converged(url: &str, credentials: &Path, extra: &[&str], cache: &Path) -> String {
    let fleet = cache.with_extension("fleet.yaml");
    std::fs::write(&fleet, FLEET).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nodewright"))
        .args(["run", "--repo", url, "--git-credentials-dir"])
        .arg(credentials)
        .arg("--cache-dir")
        .arg(cache)
        .arg("--sim-fleet")
        .arg(&fleet)
        .args(extra)
        .args(["--speed", "0", "--no-progress", "--until-converged", "6h"])
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("nodewright runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "run failed:\n{stderr}");
    stderr
}

fn status_on_server(bare: &Path) -> String {
    let files = git(bare, &["ls-tree", "-r", "--name-only", "nodewright/status"]);
    let tuning = git(bare, &["show", "nodewright/status:status/gpu-tuning.yaml"]);
    format!("{files}\n{tuning}")
}

/// Commits one status file on the mirror's status branch and pushes it.
fn commit_and_push(mirror: &GitRepo, remote: &RemoteSpec, content: &str) -> Result<bool, String> {
    commit_files(
        mirror.path(),
        "nodewright/status",
        &[("status/probe.yaml", content.as_bytes())],
        &[],
        "status: probe",
        &Author::default(),
        1_767_225_600,
    )
    .unwrap();
    push(mirror.path(), remote, "nodewright/status").map_err(|e| e.to_string())
}

#[test]
fn a_rollout_against_an_https_remote_with_basic_auth_pushes_status_to_the_server() {
    let tmp = tempfile::tempdir().unwrap();
    let (bare, _) = served_fleet(tmp.path());
    let Some(https) = start_https(tmp.path(), bare.parent().unwrap()) else {
        return;
    };
    let credentials = tmp.path().join("creds");
    std::fs::create_dir_all(&credentials).unwrap();
    std::fs::write(credentials.join("token"), format!("{TOKEN}\n")).unwrap();
    std::fs::write(credentials.join("username"), USER).unwrap();
    let url = format!("https://127.0.0.1:{}/git/fleet.git", https.port);
    let ca = https.ca.to_str().unwrap();
    run_until_converged(
        &url,
        &credentials,
        &["--git-ca-file", ca],
        &tmp.path().join("cache"),
    );
    let status = status_on_server(&bare);
    assert!(status.contains("status/gpu-tuning.yaml"), "{status}");
    assert!(status.contains("status: complete"), "{status}");
}

#[test]
fn an_https_remote_refuses_a_wrong_token_and_an_untrusted_certificate_with_reasons() {
    let tmp = tempfile::tempdir().unwrap();
    let (bare, head) = served_fleet(tmp.path());
    let Some(https) = start_https(tmp.path(), bare.parent().unwrap()) else {
        return;
    };
    let token_file = tmp.path().join("token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let good = RemoteSpec {
        credentials: Credentials::Basic {
            username: USER.into(),
            password: SecretSource::File(token_file),
        },
        ca_file: Some(https.ca.clone()),
        ..RemoteSpec::anonymous(format!("https://127.0.0.1:{}/git/fleet.git", https.port))
    };

    let (mirror, _) = GitRepo::sync_remote(&good, &tmp.path().join("cache")).unwrap();
    assert_eq!(mirror.resolve("main").unwrap().to_string(), head);
    assert_eq!(commit_and_push(&mirror, &good, "one\n"), Ok(true));
    assert_eq!(
        git(&bare, &["show", "nodewright/status:status/probe.yaml"]),
        "one"
    );

    let wrong_file = tmp.path().join("wrong");
    std::fs::write(&wrong_file, "not-the-token").unwrap();
    let wrong = RemoteSpec {
        credentials: Credentials::Basic {
            username: USER.into(),
            password: SecretSource::File(wrong_file),
        },
        ..good.clone()
    };
    let refused = commit_and_push(&mirror, &wrong, "two\n").unwrap_err();
    assert!(
        refused.contains("refused the credentials") && refused.contains("--git-credentials-dir"),
        "{refused}"
    );
    assert!(!refused.contains("not-the-token"), "{refused}");

    let untrusted = RemoteSpec {
        ca_file: None,
        ..good.clone()
    };
    let fetch = GitRepo::sync_remote(&untrusted, &tmp.path().join("cache-untrusted"))
        .unwrap_err()
        .to_string();
    assert!(fetch.contains(&untrusted.url), "{fetch}");
    assert!(
        !fetch.contains("Message {"),
        "a Display chain, not a Debug dump: {fetch}"
    );
    let push = commit_and_push(&mirror, &untrusted, "three\n").unwrap_err();
    assert!(push.contains("--git-ca-file"), "{push}");
}

#[test]
fn a_rollout_against_an_ssh_remote_pushes_status_to_the_server() {
    let tmp = tempfile::tempdir().unwrap();
    let (bare, _) = served_fleet(tmp.path());
    let Some(ssh) = start_sshd(tmp.path()) else {
        return;
    };
    let credentials = tmp.path().join("creds");
    std::fs::create_dir_all(&credentials).unwrap();
    std::fs::copy(&ssh.client_key, credentials.join("ssh-privatekey")).unwrap();
    std::fs::copy(&ssh.known_hosts, credentials.join("known_hosts")).unwrap();
    run_until_converged(
        &ssh_url(&ssh, &bare),
        &credentials,
        &[],
        &tmp.path().join("cache"),
    );
    let status = status_on_server(&bare);
    assert!(status.contains("status/gpu-tuning.yaml"), "{status}");
    assert!(status.contains("status: complete"), "{status}");
}

#[test]
fn an_unknown_ssh_host_key_is_refused_unless_first_use_trust_is_asked_for() {
    let tmp = tempfile::tempdir().unwrap();
    let (bare, head) = served_fleet(tmp.path());
    let Some(ssh) = start_sshd(tmp.path()) else {
        return;
    };
    let empty_known_hosts = tmp.path().join("known_hosts");
    std::fs::write(&empty_known_hosts, "").unwrap();
    let strict = RemoteSpec {
        credentials: Credentials::SshKey {
            key_file: ssh.client_key.clone(),
            known_hosts: Some(empty_known_hosts.clone()),
            accept_new_host_keys: false,
        },
        ..RemoteSpec::anonymous(ssh_url(&ssh, &bare))
    };
    let fetch = GitRepo::sync_remote(&strict, &tmp.path().join("cache-strict"))
        .unwrap_err()
        .to_string();
    assert!(fetch.contains(&strict.url), "{fetch}");

    let accept_new = RemoteSpec {
        credentials: Credentials::SshKey {
            key_file: ssh.client_key.clone(),
            known_hosts: Some(empty_known_hosts.clone()),
            accept_new_host_keys: true,
        },
        ..strict.clone()
    };
    let (mirror, _) = GitRepo::sync_remote(&accept_new, &tmp.path().join("cache")).unwrap();
    assert_eq!(mirror.resolve("main").unwrap().to_string(), head);
    let recorded = Command::new("ssh-keygen")
        .arg("-F")
        .arg(format!("[127.0.0.1]:{}", ssh.port))
        .arg("-f")
        .arg(&empty_known_hosts)
        .output()
        .unwrap();
    assert!(
        recorded.status.success(),
        "the host key is recorded on first use"
    );

    let unknown = tmp.path().join("still-empty");
    std::fs::write(&unknown, "").unwrap();
    let strict_push = RemoteSpec {
        credentials: Credentials::SshKey {
            key_file: ssh.client_key.clone(),
            known_hosts: Some(unknown),
            accept_new_host_keys: false,
        },
        ..strict.clone()
    };
    let refused = commit_and_push(&mirror, &strict_push, "one\n").unwrap_err();
    assert!(refused.contains("--git-ssh-accept-new"), "{refused}");
    assert_eq!(commit_and_push(&mirror, &accept_new, "one\n"), Ok(true));
    assert_eq!(
        git(&bare, &["show", "nodewright/status:status/probe.yaml"]),
        "one"
    );
}
