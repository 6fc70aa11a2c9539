//! Commit-atomic desired state, the last-good tracker and commit signatures, on real
//! repositories.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{WorkRepo, git, nodewright};
use nodewright_reconciler::controller::source::{GitSource, RepoLocation, SourceChange};
use nodewright_reconciler::source::desired::{
    DesiredStateTracker, ReadOptions, TrackerOutcome, evaluate_commit,
};
use nodewright_reconciler::source::repo::{GitRepo, RemoteSpec};
use nodewright_reconciler::source::signature::{SignatureError, SignaturePolicy};

const DRIVER: &str = "    driver:\n      version: 1.0.0\n      image: nvcr.io/nvidia/driver\n";

fn remote_fixture(tmp: &Path) -> (WorkRepo, PathBuf) {
    let work = WorkRepo::init(&tmp.join("work"));
    work.write("fleet/gpu.yaml", &nodewright("gpu", DRIVER));
    work.commit("valid");
    let bare = tmp.join("remote.git");
    work.clone_bare(&bare);
    (work, bare)
}

fn push(work: &WorkRepo, bare: &Path) {
    git(
        &work.dir,
        &["push", "-q", "-f", bare.to_str().unwrap(), "main"],
    );
}

/// The loop's Git source (controller::source) over this crate's tracker and evaluation.
fn source(tmp: &Path, bare: &Path) -> GitSource {
    let location = RepoLocation::Remote {
        spec: RemoteSpec::anonymous(format!("file://{}", bare.display())),
        cache_root: tmp.join("cache"),
    };
    let options = ReadOptions {
        root: "fleet".to_owned(),
        ..ReadOptions::default()
    };
    GitSource::open(&location, "main", "nodewright/status", options).unwrap()
}

#[test]
fn an_invalid_commit_is_rejected_and_the_last_good_state_stays() {
    let tmp = tempfile::tempdir().unwrap();
    let (work, bare) = remote_fixture(tmp.path());
    let mut src = source(tmp.path(), &bare);

    let (first, good_digest) = match src.refresh().unwrap() {
        SourceChange::Applied { commit, digest } => {
            assert!(digest.starts_with("sha256:"));
            (commit, digest)
        }
        other => panic!("{other:?}"),
    };
    let good = src.desired().unwrap().clone();
    assert_eq!(good.commit, first);
    assert_eq!(
        good.nodewrights[0].spec.packages()["driver"].version,
        "1.0.0"
    );
    assert_eq!(src.refresh().unwrap(), SourceChange::None);

    // One good change and two bad files in the same commit: nothing of it applies.
    work.write(
        "fleet/gpu.yaml",
        &nodewright(
            "gpu",
            "    driver:\n      version: 2.0.0\n      image: nvcr.io/nvidia/driver\n",
        ),
    );
    work.write(
        "fleet/bad.yaml",
        &nodewright(
            "bad",
            "    tool:\n      version: 1.0.0\n      image: nvcr.io/nvidia/tool:latest\n",
        ),
    );
    work.write("fleet/broken.yaml", "kind: [unclosed\n");
    let bad = work.commit("half valid");
    push(&work, &bare);
    match src.refresh().unwrap() {
        SourceChange::Rejected { commit, report, .. } => {
            assert_eq!(commit, bad);
            assert!(report.contains("  fleet/bad.yaml:"), "{report}");
            assert!(report.contains("  fleet/broken.yaml:"), "{report}");
            assert!(
                report.contains(&bad) && report.contains("inline tag"),
                "{report}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        src.desired().unwrap(),
        &good,
        "last good desired state stays in force"
    );

    // Reformatting the manifest is the same desired state.
    work.remove("fleet/bad.yaml");
    work.remove("fleet/broken.yaml");
    work.write(
        "fleet/gpu.yaml",
        &format!(
            "# owned by the GPU team\n{}",
            nodewright("gpu", DRIVER).replace("  nodeSelectors:", "  nodeSelectors:  ")
        ),
    );
    let reformatted = work.commit("reformat");
    push(&work, &bare);
    assert_eq!(
        src.refresh().unwrap(),
        SourceChange::Unchanged {
            commit: reformatted
        }
    );

    // The fix applies.
    work.write(
        "fleet/gpu.yaml",
        &nodewright(
            "gpu",
            "    driver:\n      version: 2.0.0\n      image: nvcr.io/nvidia/driver\n",
        ),
    );
    let fixed = work.commit("fix");
    push(&work, &bare);
    match src.refresh().unwrap() {
        SourceChange::Applied { commit, digest } => {
            assert_eq!(commit, fixed);
            assert_ne!(digest, good_digest);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_downgrade_against_the_last_good_state_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (work, bare) = remote_fixture(tmp.path());
    let agent = |v: &str| {
        nodewright(
            "gpu",
            &format!(
                "    agent:\n      version: {v}\n      image: nvcr.io/nvidia/agent\n      uninstall:\n        enabled: true\n"
            ),
        )
    };
    work.write("fleet/gpu.yaml", &agent("3.0.0"));
    work.commit("agent");
    push(&work, &bare);
    let mut src = source(tmp.path(), &bare);
    assert!(matches!(
        src.refresh().unwrap(),
        SourceChange::Applied { .. }
    ));
    work.write("fleet/gpu.yaml", &agent("2.0.0"));
    work.commit("downgrade");
    push(&work, &bare);
    match src.refresh().unwrap() {
        SourceChange::Rejected { report, .. } => {
            assert!(report.contains("downgrade not allowed"), "{report}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_yaml_alias_bomb_in_a_commit_is_refused_with_its_file() {
    let tmp = tempfile::tempdir().unwrap();
    let work = WorkRepo::init(&tmp.path().join("work"));
    let mut bomb = String::from(
        "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
    );
    let mut prev = 'a';
    for name in ['b', 'c', 'd', 'e', 'f', 'g', 'h', 'i'] {
        bomb.push_str(&format!("{name}: &{name} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n"));
        prev = name;
    }
    work.write("bomb.yaml", &bomb);
    work.write("gpu.yaml", &nodewright("gpu", DRIVER));
    let head = work.commit("bomb");
    let repo = GitRepo::open(&work.dir).unwrap();
    let eval = evaluate_commit(
        &repo,
        repo.resolve(&head).unwrap(),
        &ReadOptions::default(),
        None,
    )
    .unwrap();
    assert!(!eval.is_valid());
    let bomb_error = eval
        .errors()
        .find(|p| p.file.as_deref() == Some("bomb.yaml"))
        .expect("bomb reported");
    assert_eq!(bomb_error.rule, "yaml-too-complex", "{bomb_error:?}");
}

// ---- signatures ---------------------------------------------------------------------------

fn ssh_keygen(dir: &Path, name: &str) -> Option<PathBuf> {
    let key = dir.join(name);
    let ok = Command::new("ssh-keygen")
        .args([
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            &format!("{name}@example.invalid"),
            "-f",
        ])
        .arg(&key)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    ok.then_some(key)
}

#[test]
fn signed_commits_verify_and_unsigned_or_foreign_ones_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(key) = ssh_keygen(tmp.path(), "alice") else {
        eprintln!("SKIPPED: ssh-keygen is not available");
        return;
    };
    let other = ssh_keygen(tmp.path(), "mallory").unwrap();
    let work = WorkRepo::init(&tmp.path().join("work"));
    work.write("gpu.yaml", &nodewright("gpu", DRIVER));
    let unsigned = work.commit("unsigned");
    work.write(
        "gpu.yaml",
        &nodewright(
            "gpu",
            "    driver:\n      version: 1.1.0\n      image: nvcr.io/nvidia/driver\n",
        ),
    );
    git(&work.dir, &["add", "-A"]);
    let pubkey = format!("{}.pub", key.display());
    let sign = Command::new("git")
        .current_dir(&work.dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args([
            "-c",
            "gpg.format=ssh",
            "-c",
            &format!("user.signingkey={pubkey}"),
            "-c",
            "user.name=Alice",
            "-c",
            "user.email=alice@example.invalid",
        ])
        .args(["commit", "-q", "-S", "-m", "signed"])
        .output()
        .unwrap();
    if !sign.status.success() {
        eprintln!(
            "SKIPPED: git cannot make SSH signatures here: {}",
            String::from_utf8_lossy(&sign.stderr)
        );
        return;
    }
    let signed = git(&work.dir, &["rev-parse", "HEAD"]);

    let alice = std::fs::read_to_string(&pubkey).unwrap();
    let mallory = std::fs::read_to_string(format!("{}.pub", other.display())).unwrap();
    let repo = GitRepo::open(&work.dir).unwrap();
    let allow_alice = SignaturePolicy::from_openssh_keys(alice.lines()).unwrap();
    let ok = allow_alice
        .verify_commit(&repo, repo.resolve(&signed).unwrap())
        .unwrap();
    assert_eq!(ok.comment, "alice@example.invalid");
    assert!(ok.fingerprint.starts_with("SHA256:"));

    let err = allow_alice
        .verify_commit(&repo, repo.resolve(&unsigned).unwrap())
        .unwrap_err();
    assert!(matches!(err, SignatureError::Unsigned { .. }), "{err}");
    assert!(err.to_string().contains(&unsigned));

    let allow_mallory = SignaturePolicy::from_openssh_keys(mallory.lines()).unwrap();
    let err = allow_mallory
        .verify_commit(&repo, repo.resolve(&signed).unwrap())
        .unwrap_err();
    assert!(matches!(err, SignatureError::Invalid { .. }), "{err}");
    assert!(
        err.to_string().contains("not an allowed signing key"),
        "{err}"
    );

    // A signature over other bytes (same key, tampered payload) does not verify.
    let sig = repo
        .commit_signature(repo.resolve(&signed).unwrap())
        .unwrap()
        .unwrap();
    let mut payload = sig.payload.clone();
    payload.extend_from_slice(b"tampered");
    let err = allow_alice
        .verify_bytes(&signed, &sig.signature, &payload)
        .unwrap_err();
    assert!(err.to_string().contains("does not match"), "{err}");

    // A required signature gates desired state: the unsigned head is refused.
    let options = ReadOptions {
        signatures: Some(allow_alice),
        ..ReadOptions::default()
    };
    let eval = evaluate_commit(&repo, repo.resolve(&unsigned).unwrap(), &options, None).unwrap();
    assert!(!eval.is_valid());
    assert!(eval.errors().any(|p| p.rule == "commit-signature"));
    let eval = evaluate_commit(&repo, repo.resolve(&signed).unwrap(), &options, None).unwrap();
    assert!(eval.is_valid(), "{:?}", eval.problems);
}

#[test]
fn x509_signatures_are_unsupported_and_garbage_pgp_is_invalid() {
    let policy = SignaturePolicy::from_openssh_keys([
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPbtsYXgsArcp6jeFr0SKOKuLDEaMBw8idWbgE0QzN1O test",
    ])
    .unwrap();
    let err = policy
        .verify_bytes(
            "abc",
            b"-----BEGIN SIGNED MESSAGE-----\nxx\n-----END SIGNED MESSAGE-----\n",
            b"tree x\n",
        )
        .unwrap_err();
    assert!(matches!(err, SignatureError::Unsupported { .. }), "{err}");
    let err = policy
        .verify_bytes(
            "abc",
            b"-----BEGIN PGP SIGNATURE-----\n\nxx\n-----END PGP SIGNATURE-----\n",
            b"tree x\n",
        )
        .unwrap_err();
    assert!(matches!(err, SignatureError::Invalid { .. }), "{err}");
}

fn gpg(home: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("gpg")
        .env("GNUPGHOME", home)
        .args([
            "--batch",
            "--no-tty",
            "--pinentry-mode",
            "loopback",
            "--passphrase",
            "",
        ])
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

struct AgentGuard(PathBuf);

impl Drop for AgentGuard {
    fn drop(&mut self) {
        let _ = Command::new("gpgconf")
            .env("GNUPGHOME", &self.0)
            .args(["--kill", "gpg-agent"])
            .status();
    }
}

#[test]
fn openpgp_signed_commits_verify_against_allowed_keys() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("gnupg");
    std::fs::create_dir_all(&home).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let _agent = AgentGuard(home.clone());
    if gpg(
        &home,
        &[
            "--quick-gen-key",
            "Alice <alice@example.invalid>",
            "ed25519",
            "sign",
            "never",
        ],
    )
    .is_none()
        || gpg(
            &home,
            &[
                "--quick-gen-key",
                "Mallory <mallory@example.invalid>",
                "ed25519",
                "sign",
                "never",
            ],
        )
        .is_none()
    {
        eprintln!("SKIPPED: gpg cannot generate keys here");
        return;
    }
    let alice_pub = gpg(&home, &["--armor", "--export", "alice@example.invalid"]).unwrap();
    let mallory_pub = gpg(&home, &["--armor", "--export", "mallory@example.invalid"]).unwrap();

    let work = WorkRepo::init(&tmp.path().join("work"));
    work.write("gpu.yaml", &nodewright("gpu", DRIVER));
    git(&work.dir, &["add", "-A"]);
    let sign = Command::new("git")
        .current_dir(&work.dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GNUPGHOME", &home)
        .args([
            "-c",
            "user.signingkey=alice@example.invalid",
            "-c",
            "user.name=Alice",
            "-c",
            "user.email=alice@example.invalid",
        ])
        .args(["commit", "-q", "-S", "-m", "pgp signed"])
        .output()
        .unwrap();
    if !sign.status.success() {
        eprintln!(
            "SKIPPED: git cannot make OpenPGP signatures here: {}",
            String::from_utf8_lossy(&sign.stderr)
        );
        return;
    }
    let signed = git(&work.dir, &["rev-parse", "HEAD"]);
    let repo = GitRepo::open(&work.dir).unwrap();
    let id = repo.resolve(&signed).unwrap();

    let alice = SignaturePolicy::default()
        .with_openpgp_keys(&alice_pub)
        .unwrap();
    let ok = alice.verify_commit(&repo, id).unwrap();
    assert!(ok.fingerprint.starts_with("OpenPGP:"), "{ok:?}");
    assert!(ok.comment.contains("alice@example.invalid"), "{ok:?}");

    // See: issue 24 — an allow-list of concatenated exports silently dropped all but the first.
    let both = SignaturePolicy::default()
        .with_openpgp_keys(&format!("# team keys\n{mallory_pub}\n{alice_pub}"))
        .unwrap();
    assert_eq!(both.len(), 2);
    assert!(
        both.verify_commit(&repo, id).is_ok(),
        "the second block counts"
    );

    let mallory = SignaturePolicy::default()
        .with_openpgp_keys(&mallory_pub)
        .unwrap();
    let err = mallory.verify_commit(&repo, id).unwrap_err();
    assert!(matches!(err, SignatureError::Invalid { .. }), "{err}");

    let sig = repo.commit_signature(id).unwrap().unwrap();
    let mut payload = sig.payload.clone();
    payload.extend_from_slice(b"x");
    assert!(
        alice
            .verify_bytes(&signed, &sig.signature, &payload)
            .is_err(),
        "tampered payload verified"
    );

    assert!(
        SignaturePolicy::default()
            .with_openpgp_keys("not a key")
            .is_err()
    );
}

#[test]
fn a_local_repository_is_read_in_place() {
    let tmp = tempfile::tempdir().unwrap();
    let work = WorkRepo::init(&tmp.path().join("work"));
    work.write("fleet/gpu.yaml", &nodewright("gpu", DRIVER));
    let first = work.commit("first");
    let options = ReadOptions {
        root: "fleet".to_owned(),
        ..ReadOptions::default()
    };
    let mut src = GitSource::open(
        &RepoLocation::Local(work.dir.clone()),
        "main",
        "nodewright/status",
        options,
    )
    .unwrap();
    assert!(
        matches!(src.refresh().unwrap(), SourceChange::Applied { commit, .. } if commit == first)
    );
    // An uncommitted edit is not desired state.
    work.write("fleet/gpu.yaml", "garbage: [\n");
    assert_eq!(src.refresh().unwrap(), SourceChange::None);
    assert_eq!(src.desired().unwrap().commit, first);
    assert!(src.git_dir().ends_with(".git"));
}

#[test]
fn the_tracker_keeps_the_last_good_state_and_remembers_the_rejection() {
    let tmp = tempfile::tempdir().unwrap();
    let work = WorkRepo::init(&tmp.path().join("work"));
    work.write("gpu.yaml", &nodewright("gpu", DRIVER));
    let good = work.commit("good");
    work.write(
        "gpu.yaml",
        &nodewright(
            "gpu",
            "    driver:\n      version: not-semver\n      image: nvcr.io/nvidia/driver\n",
        ),
    );
    let bad = work.commit("bad");
    let repo = GitRepo::open(&work.dir).unwrap();
    let options = ReadOptions::default();
    let mut tracker = DesiredStateTracker::new();
    let outcome = tracker
        .offer(evaluate_commit(&repo, repo.resolve(&good).unwrap(), &options, None).unwrap());
    let digest = match outcome {
        TrackerOutcome::Applied { digest } => digest,
        other => panic!("{other:?}"),
    };
    let previous = tracker.previous();
    let outcome = tracker.offer(
        evaluate_commit(
            &repo,
            repo.resolve(&bad).unwrap(),
            &options,
            previous.as_ref(),
        )
        .unwrap(),
    );
    match outcome {
        TrackerOutcome::Rejected { commit, errors } => {
            assert_eq!(commit, bad);
            assert!(
                errors.iter().all(|e| e.location().starts_with("gpu.yaml:")),
                "{errors:?}"
            );
            assert!(
                errors.iter().any(|e| e.message.contains("not-semver")),
                "{errors:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(tracker.current().unwrap().digest, digest);
    assert_eq!(tracker.current().unwrap().desired.commit, good);
    assert_eq!(tracker.last_rejected().map(|(c, _)| c), Some(bad.as_str()));
    // The same good commit again is no change, and clears the rejection.
    let again = evaluate_commit(&repo, repo.resolve(&good).unwrap(), &options, None).unwrap();
    assert_eq!(tracker.offer(again), TrackerOutcome::Unchanged);
    assert!(tracker.last_rejected().is_none());
}

#[test]
fn a_fresh_start_with_an_invalid_head_applies_the_newest_valid_commit_before_it_and_says_so() {
    // See: issue 24 — the docs promise the newest *valid* commit, a fresh start applied nothing.
    let tmp = tempfile::tempdir().unwrap();
    let (work, bare) = remote_fixture(tmp.path());
    work.write(
        "fleet/gpu.yaml",
        &nodewright(
            "gpu",
            "    driver:\n      version: 1.1.0\n      image: nvcr.io/nvidia/driver\n",
        ),
    );
    let newest_valid = work.commit("valid upgrade");
    work.write("fleet/broken.yaml", "kind: [unclosed\n");
    work.commit("broken");
    work.write(
        "fleet/tag.yaml",
        &nodewright(
            "tag",
            "    tool:\n      version: 1.0.0\n      image: nvcr.io/nvidia/tool:latest\n",
        ),
    );
    let head = work.commit("broken again");
    push(&work, &bare);

    let mut src = source(tmp.path(), &bare);
    match src.refresh().unwrap() {
        SourceChange::AppliedAncestor {
            commit,
            rejected,
            report,
            ..
        } => {
            assert_eq!(commit, newest_valid);
            assert_eq!(rejected, head);
            assert!(report.contains("2 commits back"), "{report}");
            assert!(report.contains("  fleet/tag.yaml:"), "{report}");
        }
        other => panic!("{other:?}"),
    }
    let desired = src.desired().expect("the older valid commit is in force");
    assert_eq!(desired.nodewrights.len(), 1);
    let record = src.record();
    assert_eq!(
        record.applied_commit.as_deref(),
        Some(newest_valid.as_str())
    );
    let rejected = record.rejected.expect("the head's rejection is recorded");
    assert_eq!(rejected.commit, head);
    assert!(
        rejected
            .violations
            .iter()
            .any(|v| v.at.starts_with("fleet/tag.yaml:")),
        "{rejected:?}"
    );

    // A valid commit on top clears the rejection.
    work.remove("fleet/broken.yaml");
    work.remove("fleet/tag.yaml");
    let fixed = work.commit("fixed");
    push(&work, &bare);
    assert!(matches!(
        src.refresh().unwrap(),
        SourceChange::Applied { .. } | SourceChange::Unchanged { .. }
    ));
    let record = src.record();
    assert_eq!(record.applied_commit.as_deref(), Some(fixed.as_str()));
    assert_eq!(record.rejected, None);
}

#[test]
fn a_fresh_start_with_no_valid_commit_in_reach_applies_nothing_and_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let work = WorkRepo::init(&tmp.path().join("work"));
    work.write("fleet/broken.yaml", "kind: [unclosed\n");
    let head = work.commit("only broken");
    let location = RepoLocation::Local(work.dir.clone());
    let options = ReadOptions {
        root: "fleet".to_owned(),
        ..ReadOptions::default()
    };
    let mut src = GitSource::open(&location, "main", "nodewright/status", options).unwrap();
    match src.refresh().unwrap() {
        SourceChange::Rejected { commit, report, .. } => {
            assert_eq!(commit, head);
            assert!(report.contains("nothing is applied"), "{report}");
        }
        other => panic!("{other:?}"),
    }
    assert!(src.desired().is_none());
    assert_eq!(src.record().applied_commit, None);
}
