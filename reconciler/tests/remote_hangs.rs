//! A Git remote that stops answering (issue 24): `git daemon` behind a gate that, once shut,
//! accepts connections and never says a word. Fetch and status push run on their own threads,
//! so the rollout goes on with the desired state in force; each is given up after
//! `--git-timeout`, backs off, and works again once the remote answers, when the newest
//! status reaches it.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{EXAMPLE_FLEET_NODES, WorkRepo, git};
use nodewright_reconciler::cli::fleet::Fleet;
use nodewright_reconciler::cluster::sim::SimAdapter;
use nodewright_reconciler::controller::Controller;
use nodewright_reconciler::controller::daemon::{LifecycleMode, SimClock, run_loop};
use nodewright_reconciler::controller::source::{
    FetchAttempt, GitSource, RepoLocation, SourceChange,
};
use nodewright_reconciler::controller::status::{StatusTarget, StatusWrite, StatusWriter};
use nodewright_reconciler::settings::Settings;
use nodewright_reconciler::source::desired::ReadOptions;
use nodewright_reconciler::source::remote_call::PATIENCE;
use nodewright_reconciler::source::repo::{GitRepo, RemoteSpec};
use nodewright_reconciler::writeback::git::{Author, commit_status, push};
use nodewright_reconciler::writeback::render::StatusFile;

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `git daemon` serving `base` for fetch and push on loopback.
fn git_daemon(base: &Path) -> (Daemon, u16) {
    let port = free_port();
    // git-daemon itself rather than `git daemon`, which runs it as a child a kill would miss.
    let exec_path = Command::new("git").arg("--exec-path").output().unwrap();
    let exec_path = String::from_utf8_lossy(&exec_path.stdout).trim().to_owned();
    let child = Command::new(Path::new(&exec_path).join("git-daemon"))
        .args([
            "--reuseaddr",
            "--listen=127.0.0.1",
            &format!("--port={port}"),
            &format!("--base-path={}", base.display()),
            "--export-all",
            "--enable=receive-pack",
        ])
        .arg(base)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("git daemon runs");
    let daemon = Daemon(child);
    let started = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "git daemon does not listen"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (daemon, port)
}

/// A gate in front of `port`: open, it relays each connection; shut, it accepts connections
/// and holds them without a byte, as a hung server does.
struct Gate {
    port: u16,
    shut: Arc<AtomicBool>,
}

impl Gate {
    fn new(to: u16) -> Gate {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let shut = Arc::new(AtomicBool::new(false));
        let gate_shut = Arc::clone(&shut);
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for client in listener.incoming().flatten() {
                if gate_shut.load(Ordering::SeqCst) {
                    held.push(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", to)) else {
                    continue;
                };
                relay(client.try_clone().unwrap(), server.try_clone().unwrap());
                relay(server, client);
            }
        });
        Gate { port, shut }
    }

    fn shut(&self) {
        self.shut.store(true, Ordering::SeqCst);
    }

    /// Relays new connections again; those held stay silent, as a remote that drops packets
    /// never closes them.
    fn open(&self) {
        self.shut.store(false, Ordering::SeqCst);
    }
}

fn relay(mut from: TcpStream, mut to: TcpStream) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 || to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Write);
    });
}

/// The example fleet committed in a work tree and served from a bare copy by `git daemon`,
/// behind an open gate.
fn served_fleet(tmp: &Path) -> (WorkRepo, PathBuf, Daemon, Gate) {
    let served = tmp.join("served");
    std::fs::create_dir_all(&served).unwrap();
    let work = WorkRepo::init(&tmp.join("work"));
    work.copy_from(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/fleet"));
    work.commit("fleet");
    let bare = served.join("fleet.git");
    work.clone_bare(&bare);
    let (daemon, port) = git_daemon(&served);
    (work, bare, daemon, Gate::new(port))
}

fn status_on_server(bare: &Path) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(bare)
        .args(["show", "nodewright/status:status/gpu-tuning.yaml"])
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// What the loop saw while the gate was shut, and after.
#[derive(Default)]
struct Seen {
    passes_while_fetch_out: usize,
    passes_while_push_out: usize,
    fetches_given_up: usize,
    pushes_waited_out: usize,
    converged_while_shut: bool,
    reopened: bool,
    applied_after_reopening: Option<String>,
    status_after_reopening: Option<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_that_stops_answering_holds_up_neither_the_rollout_nor_the_status_that_follows() {
    let tmp = tempfile::tempdir().unwrap();
    let (work, bare, _daemon, gate) = served_fleet(tmp.path());

    // Longer than the loop's patience, so a call is seen out before it is given up.
    let timeout = PATIENCE + Duration::from_secs(3);
    let spec = RemoteSpec {
        timeout,
        ..RemoteSpec::anonymous(format!("git://127.0.0.1:{}/fleet.git", gate.port))
    };
    let mut source = GitSource::open(
        &RepoLocation::Remote {
            spec: spec.clone(),
            cache_root: tmp.path().join("cache"),
        },
        "main",
        "nodewright/status",
        ReadOptions::default(),
    )
    .unwrap();
    let mut writer = StatusWriter::new(StatusTarget {
        repo: source.repo_path().to_path_buf(),
        branch: "nodewright/status".into(),
        remote: Some(spec),
        author: Author::default(),
        mirror: Some(source.repo().clone()),
        interval: Duration::ZERO,
    });
    gate.shut();

    let settings = Settings::default();
    let world = Fleet::parse(EXAMPLE_FLEET_NODES)
        .unwrap()
        .build(&settings.namespace, 5)
        .unwrap();
    let mut controller = Controller::new(
        SimAdapter::new(world),
        nodewright_reconciler::engine::reconcile_cached,
        settings,
    );
    let (_stop, shutdown) = tokio::sync::watch::channel(false);
    let mut clock = SimClock {
        speed: 0.0,
        triggers: None,
        shutdown,
    };
    let started = Instant::now();
    let mut seen = Seen::default();
    let mut pushed: Option<String> = None;
    run_loop(
        &mut controller,
        &mut source,
        Some(&mut writer),
        LifecycleMode::SelfManaged,
        &mut clock,
        |it| {
            let converged = !it.snapshot.nodewrights.is_empty()
                && it.snapshot.nodewrights.iter().all(|nw| nw.is_converged());
            if !seen.reopened {
                if it.pass.is_some() && it.fetch == FetchAttempt::Waiting {
                    seen.passes_while_fetch_out += 1;
                }
                if it.pass.is_some()
                    && matches!(it.status, Some(StatusWrite::PushPending(m)) if m == "status: push under way")
                {
                    seen.passes_while_push_out += 1;
                }
                if it.fetch == FetchAttempt::Failed {
                    seen.fetches_given_up += 1;
                }
                if matches!(it.status, Some(StatusWrite::PushPending(m)) if m == "status: push still pending")
                {
                    seen.pushes_waited_out += 1;
                }
                seen.converged_while_shut |= converged;
                if seen.converged_while_shut
                    && seen.fetches_given_up > 0
                    && seen.pushes_waited_out > 0
                {
                    gate.open();
                    seen.reopened = true;
                    work.write("notes.md", "pushed once the remote answers again\n");
                    let commit = work.commit("notes");
                    git(&work.dir, &["push", "-q", bare.to_str().unwrap(), "main"]);
                    pushed = Some(commit);
                }
            } else {
                if let SourceChange::Applied { commit, .. } | SourceChange::Unchanged { commit } =
                    it.change
                    && Some(commit) == pushed.as_ref()
                {
                    seen.applied_after_reopening = Some(commit.clone());
                }
                let status = status_on_server(&bare);
                if seen.applied_after_reopening.is_some()
                    && status.as_deref().is_some_and(|s| s.contains("status: complete"))
                {
                    seen.status_after_reopening = status;
                    return ControlFlow::Break(());
                }
            }
            if started.elapsed() > Duration::from_secs(120) {
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        },
    )
    .await;

    assert!(
        seen.passes_while_fetch_out > 0,
        "passes ran while a fetch was out"
    );
    assert!(
        seen.passes_while_push_out > 0,
        "passes ran while a status push was out"
    );
    assert!(
        seen.converged_while_shut,
        "the fleet converged while the remote hung"
    );
    assert!(
        seen.reopened,
        "fetch and push were given up: {} fetches, {} pushes",
        seen.fetches_given_up, seen.pushes_waited_out
    );
    assert_eq!(
        seen.applied_after_reopening, pushed,
        "the commit pushed after the remote answered again is applied"
    );
    assert!(
        seen.status_after_reopening.is_some(),
        "the newest status reached the remote: {:?}",
        status_on_server(&bare)
    );
}

#[test]
fn a_fetch_or_a_push_against_a_silent_remote_fails_after_its_timeout_and_a_restart_reads_the_mirror()
 {
    let tmp = tempfile::tempdir().unwrap();
    let (_work, _bare, _daemon, gate) = served_fleet(tmp.path());
    let spec = RemoteSpec {
        timeout: Duration::from_secs(2),
        ..RemoteSpec::anonymous(format!("git://127.0.0.1:{}/fleet.git", gate.port))
    };
    let (mirror, _) = GitRepo::sync_remote(&spec, &tmp.path().join("cache")).unwrap();
    commit_status(
        mirror.path(),
        "nodewright/status",
        &[StatusFile {
            path: "status/probe.yaml".into(),
            content: "probe\n".into(),
        }],
        "status: probe",
        &Author::default(),
        1_767_225_600,
    )
    .unwrap();
    gate.shut();

    let Err(fetch) = GitRepo::sync_remote(&spec, &tmp.path().join("cache")) else {
        panic!("a silent remote fails the fetch");
    };
    let fetch = fetch.to_string();
    assert!(
        fetch.contains("the remote did not answer within 2s; the fetch was given up (--git-timeout sets how long to wait)"),
        "{fetch}"
    );
    let push = push(mirror.path(), &spec, "nodewright/status")
        .expect_err("a silent remote fails the push")
        .to_string();
    assert!(
        push.contains("the remote did not answer within 2s; the push was given up (--git-timeout sets how long to wait)"),
        "{push}"
    );

    // A restart while the remote is away reconciles from the mirror an earlier start left; a
    // first start has nothing to reconcile from.
    let open = |cache: &str| {
        GitSource::open(
            &RepoLocation::Remote {
                spec: spec.clone(),
                cache_root: tmp.path().join(cache),
            },
            "main",
            "nodewright/status",
            ReadOptions::default(),
        )
    };
    let mut restarted = open("cache").expect("a restart reads the mirror");
    assert!(
        matches!(restarted.evaluate(), Ok(SourceChange::Applied { .. })),
        "the mirror's branch is in force"
    );
    let Err(first) = open("cache-first") else {
        panic!("a first start against a silent remote has nothing to reconcile from");
    };
    assert!(
        first
            .to_string()
            .contains("the remote did not answer within 2s"),
        "{first}"
    );

    gate.open();
    assert_eq!(
        push_ok(&mirror, &spec),
        Ok(true),
        "the remote answers again"
    );
}

fn push_ok(mirror: &GitRepo, spec: &RemoteSpec) -> Result<bool, String> {
    push(mirror.path(), spec, "nodewright/status").map_err(|e| e.to_string())
}
