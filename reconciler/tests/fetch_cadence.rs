//! The fetch cadence of `nodewright run` in virtual time (issue 24): the remote is fetched every
//! poll interval whether the fleet is idle or mid-rollout, a pushed commit is applied within one
//! interval (at once after a verified push webhook), and an unreachable remote is retried with
//! exponential backoff, logged once when the failures start and once when fetching works again.

mod common;

use std::io::Write;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{EXAMPLE_FLEET_NODES, WorkRepo, git};
use jiff::Timestamp;
use nodewright_reconciler::cli::fleet::Fleet;
use nodewright_reconciler::cluster::sim::SimAdapter;
use nodewright_reconciler::controller::Controller;
use nodewright_reconciler::controller::daemon::{Iteration, LifecycleMode, SimClock, run_loop};
use nodewright_reconciler::controller::source::{
    FetchAttempt, GitSource, RepoLocation, SourceChange,
};
use nodewright_reconciler::settings::Settings;
use nodewright_reconciler::source::cadence::FetchCadence;
use nodewright_reconciler::source::desired::ReadOptions;
use nodewright_reconciler::source::repo::RemoteSpec;
use nodewright_reconciler::source::triggers::channel;
use nodewright_reconciler::source::webhook::{self, WebhookConfig, github_signature};

const POLL: Duration = Duration::from_secs(30);

/// A bare remote holding the example fleet, and the work tree it was pushed from.
fn remote(tmp: &Path) -> (WorkRepo, std::path::PathBuf) {
    let work = WorkRepo::init(&tmp.join("work"));
    work.copy_from(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/fleet"));
    work.commit("fleet");
    let bare = tmp.join("remote.git");
    work.clone_bare(&bare);
    (work, bare)
}

fn source(bare: &Path, cache: &Path) -> GitSource {
    let location = RepoLocation::Remote {
        spec: RemoteSpec::anonymous(bare.to_str().unwrap()),
        cache_root: cache.to_path_buf(),
    };
    GitSource::open(
        &location,
        "main",
        "nodewright/status",
        ReadOptions::default(),
    )
    .unwrap()
    .with_cadence(FetchCadence::new(POLL, 11))
}

/// What the loop did, by virtual time.
#[derive(Default)]
struct Record {
    start: Option<Timestamp>,
    fetches: Vec<(Duration, FetchAttempt)>,
    passes: usize,
    /// When the tracked branch was seen to move, and to which commit.
    moved: Vec<(Duration, String)>,
}

impl Record {
    fn observe(&mut self, it: &Iteration<'_>) -> Duration {
        let start = *self.start.get_or_insert(it.snapshot.now);
        let at = Duration::try_from(start.duration_until(it.snapshot.now)).unwrap();
        if it.fetch != FetchAttempt::NotDue {
            self.fetches.push((at, it.fetch));
        }
        if it.pass.is_some() {
            self.passes += 1;
        }
        if let SourceChange::Applied { commit, .. } | SourceChange::Unchanged { commit } = it.change
        {
            self.moved.push((at, commit.clone()));
        }
        at
    }

    fn gaps(&self, attempt: FetchAttempt) -> Vec<Duration> {
        let times: Vec<Duration> = self
            .fetches
            .iter()
            .filter(|(_, a)| *a == attempt)
            .map(|(t, _)| *t)
            .collect();
        times.windows(2).map(|w| w[1] - w[0]).collect()
    }
}

/// Runs the loop on the simulator at full speed until `observe` breaks.
async fn run(
    fleet: Fleet,
    source: &mut GitSource,
    observe: impl FnMut(&Iteration<'_>) -> ControlFlow<()>,
) {
    let (_stop, shutdown) = tokio::sync::watch::channel(false);
    let clock = SimClock {
        speed: 0.0,
        triggers: None,
        shutdown,
    };
    run_on(clock, fleet, source, observe).await;
}

async fn run_on(
    mut clock: SimClock,
    fleet: Fleet,
    source: &mut GitSource,
    mut observe: impl FnMut(&Iteration<'_>) -> ControlFlow<()>,
) {
    let settings = Settings::default();
    let world = fleet.build(&settings.namespace, 5).unwrap();
    let mut controller = Controller::new(
        SimAdapter::new(world),
        nodewright_reconciler::engine::reconcile_cached,
        settings,
    );
    run_loop(
        &mut controller,
        source,
        None,
        LifecycleMode::SelfManaged,
        &mut clock,
        |it| observe(it),
    )
    .await;
}

/// Posts a signed GitHub push webhook over plain HTTP/1.1; returns the status line.
async fn post_push_webhook(addr: std::net::SocketAddr, secret: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = r#"{"ref":"refs/heads/main","after":"0000000000000000000000000000000000000000"}"#;
    let signature = github_signature(secret, body.as_bytes());
    let request = format!(
        "POST /hooks/github HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nX-GitHub-Event: push\r\nX-GitHub-Delivery: 1\r\nX-Hub-Signature-256: {signature}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response.lines().next().unwrap_or_default().to_string()
}

#[tokio::test]
async fn a_verified_push_webhook_fetches_at_once_without_waiting_for_the_poll() {
    let tmp = tempfile::tempdir().unwrap();
    let (work, bare) = remote(tmp.path());
    let mut source = source(&bare, &tmp.path().join("cache"))
        .with_cadence(FetchCadence::new(Duration::from_secs(3600), 11));
    let (tx, triggers) = channel(4);
    let config = WebhookConfig {
        github_secret: Some(b"hook-secret".to_vec()),
        gitlab_token: None,
        branch: Some("main".into()),
    };
    let addr = webhook::spawn("127.0.0.1:0".parse().unwrap(), config, tx)
        .await
        .unwrap();
    let (_stop, shutdown) = tokio::sync::watch::channel(false);
    // So slow that no wait ever ends by itself: only the webhook can wake the loop.
    let clock = SimClock {
        speed: 1e-9,
        triggers: Some(triggers),
        shutdown,
    };
    let mut record = Record::default();
    let mut pushed: Option<String> = None;
    let mut reply = None;
    let mut iterations = 0;
    run_on(clock, Fleet::plain(2), &mut source, |it| {
        record.observe(it);
        iterations += 1;
        match &pushed {
            None => {
                work.write("notes.md", "pushed while the loop waits\n");
                pushed = Some(work.commit("notes"));
                git(&work.dir, &["push", "-q", bare.to_str().unwrap(), "main"]);
                reply = Some(tokio::spawn(post_push_webhook(addr, b"hook-secret")));
            }
            Some(commit) if record.moved.iter().any(|(_, c)| c == commit) => {
                return ControlFlow::Break(());
            }
            Some(_) if iterations > 20 => return ControlFlow::Break(()),
            Some(_) => {}
        }
        ControlFlow::Continue(())
    })
    .await;
    let reply = reply.unwrap().await.unwrap();
    assert!(reply.contains("202"), "{reply}");
    let commit = pushed.unwrap();
    let (seen_at, _) = record
        .moved
        .iter()
        .find(|(_, c)| *c == commit)
        .expect("the pushed commit is seen after the webhook");
    assert!(
        *seen_at < Duration::from_secs(1),
        "seen at {seen_at:?} of virtual time, long before the hourly poll"
    );
    assert_eq!(
        record.fetches.len(),
        2,
        "the start and the webhook: {:?}",
        record.fetches
    );
}

fn within_jitter(gap: Duration) -> bool {
    gap >= POLL.mul_f64(0.9) && gap <= POLL.mul_f64(1.1)
}

#[tokio::test]
async fn an_idle_fleet_is_fetched_every_poll_interval_and_a_pushed_commit_applies_within_one() {
    let tmp = tempfile::tempdir().unwrap();
    let (work, bare) = remote(tmp.path());
    let mut source = source(&bare, &tmp.path().join("cache"));
    let mut record = Record::default();
    let mut pushed: Option<(Duration, String)> = None;
    // Unlabelled nodes: the example fleet selects none of them, so the fleet is idle at once.
    run(Fleet::plain(3), &mut source, |it| {
        let at = record.observe(it);
        if pushed.is_none() && at >= Duration::from_secs(600) {
            work.write("notes.md", "a comment-only change\n");
            let commit = work.commit("notes");
            git(&work.dir, &["push", "-q", bare.to_str().unwrap(), "main"]);
            pushed = Some((at, commit));
        }
        if at >= Duration::from_secs(1800) {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    })
    .await;
    let gaps = record.gaps(FetchAttempt::Fetched);
    assert!(gaps.iter().copied().all(within_jitter), "{gaps:?}");
    assert!(
        (54..=67).contains(&record.fetches.len()),
        "{} fetches in 30 virtual minutes",
        record.fetches.len()
    );
    assert!(gaps.iter().any(|g| *g != POLL), "jittered: {gaps:?}");
    let (pushed_at, commit) = pushed.unwrap();
    let seen = record
        .moved
        .iter()
        .find(|(_, c)| *c == commit)
        .map(|(t, _)| *t)
        .unwrap();
    assert!(
        seen - pushed_at <= POLL.mul_f64(1.1),
        "the commit pushed at {pushed_at:?} was seen at {seen:?}"
    );
}

#[tokio::test]
async fn mid_rollout_passes_do_not_fetch_more_often_than_the_poll_interval() {
    let tmp = tempfile::tempdir().unwrap();
    let (_work, bare) = remote(tmp.path());
    let mut source = source(&bare, &tmp.path().join("cache"));
    let mut record = Record::default();
    run(
        Fleet::parse(EXAMPLE_FLEET_NODES).unwrap(),
        &mut source,
        |it| {
            let at = record.observe(it);
            if at >= Duration::from_secs(1200) {
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        },
    )
    .await;
    let gaps = record.gaps(FetchAttempt::Fetched);
    assert!(gaps.iter().copied().all(within_jitter), "{gaps:?}");
    assert!(
        record.passes > 3 * record.fetches.len(),
        "mid-rollout passes ({}) outnumber fetches ({})",
        record.passes,
        record.fetches.len()
    );
}

/// Collects what the loop logs.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    /// Collects what this thread logs at INFO and above while the guard lives.
    fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }
}

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn an_unreachable_remote_is_retried_with_backoff_and_logged_once_per_episode() {
    let tmp = tempfile::tempdir().unwrap();
    let (_work, bare) = remote(tmp.path());
    let away = tmp.path().join("away.git");
    let mut source = source(&bare, &tmp.path().join("cache"));
    let (logs, _guard) = Logs::capture();
    let mut record = Record::default();
    run(Fleet::plain(2), &mut source, |it| {
        let at = record.observe(it);
        if at >= Duration::from_secs(120) && bare.exists() && !away.exists() {
            std::fs::rename(&bare, &away).unwrap();
        }
        if at >= Duration::from_secs(900) && away.exists() {
            std::fs::rename(&away, &bare).unwrap();
        }
        if at >= Duration::from_secs(1500) {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    })
    .await;
    let failures: Vec<Duration> = record
        .fetches
        .iter()
        .filter(|(_, a)| *a == FetchAttempt::Failed)
        .map(|(t, _)| *t)
        .collect();
    assert!(
        (5..=9).contains(&failures.len()),
        "{} failed fetches in 13 virtual minutes: {failures:?}",
        failures.len()
    );
    let gaps = record.gaps(FetchAttempt::Failed);
    assert!(
        gaps.windows(2).take(4).all(|w| w[1] > w[0].mul_f64(1.3)),
        "each retry waits about twice as long: {gaps:?}"
    );
    assert!(
        gaps.iter().all(|g| *g <= Duration::from_secs(360)),
        "capped: {gaps:?}"
    );
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert_eq!(text.matches("fetch failed").count(), 1, "{text}");
    assert_eq!(text.matches("fetching works again").count(), 1, "{text}");
    assert!(
        !text.contains("Message {"),
        "errors are Display chains: {text}"
    );
    let last_failure = *failures.last().unwrap();
    let recovered = record
        .fetches
        .iter()
        .find(|(t, a)| *t > last_failure && *a == FetchAttempt::Fetched)
        .unwrap()
        .0;
    assert!(recovered > Duration::from_secs(900));
}

#[tokio::test]
async fn a_branch_that_cannot_be_read_is_logged_once_with_the_branches_there_are() {
    // See: issue 24 — `run --repo` on a repository without the tracked branch logged the same
    // warning on every pass and never said which branches exist.
    let tmp = tempfile::tempdir().unwrap();
    let (work, _bare) = remote(tmp.path());
    // The status branch is not desired state, so it is not offered as a branch to follow.
    git(&work.dir, &["branch", "nodewright/status"]);
    let location = RepoLocation::Local(work.dir.clone());
    let mut source = GitSource::open(
        &location,
        "main",
        "nodewright/status",
        ReadOptions::default(),
    )
    .unwrap()
    .with_cadence(FetchCadence::new(POLL, 11));
    let (logs, _guard) = Logs::capture();
    let mut record = Record::default();
    let mut renamed = false;
    let mut restored = false;
    run(Fleet::plain(2), &mut source, |it| {
        let at = record.observe(it);
        if at >= Duration::from_secs(60) && !renamed {
            git(&work.dir, &["branch", "-m", "main", "master"]);
            renamed = true;
        }
        if at >= Duration::from_secs(600) && !restored {
            git(&work.dir, &["branch", "-m", "master", "main"]);
            restored = true;
        }
        if at >= Duration::from_secs(900) {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    })
    .await;
    assert!(
        record.passes > 10,
        "the loop kept passing: {}",
        record.passes
    );
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert_eq!(
        text.matches("cannot read the repository").count(),
        1,
        "{text}"
    );
    assert!(
        text.contains("revision \"main\" does not name a commit")
            && text.contains("the branches here are: master\n"),
        "{text}"
    );
    assert_eq!(
        text.matches("the repository reads again").count(),
        1,
        "{text}"
    );
}
