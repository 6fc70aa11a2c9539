//! Commit-atomic desired state, the last-good tracker and commit signatures, on real
//! repositories.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{WorkRepo, git, nodewright};
use nodewright_reconciler::source::desired::{ReadOptions, evaluate_commit};
use nodewright_reconciler::source::git_source::{GitSource, Location, SourceConfig, SourceUpdate};
use nodewright_reconciler::source::repo::{GitRepo, RemoteSpec};
use nodewright_reconciler::source::signature::{SignatureError, SignaturePolicy};

const DRIVER: &str = "    driver:\n      version: 1.0.0\n      image: nvcr.io/nvidia/driver\n";

fn remote_fixture(tmp: &Path) -> (WorkRepo, PathBuf) {
    let work = WorkRepo::init(&tmp.join("work"));
    work.write("fleet/gpu.yaml", &nodewright("gpu", DRIVER));
    work.commit("valid");
    let bare = tmp.join("remote.git");
    git(
        tmp,
        &[
            "clone",
            "-q",
            "--bare",
            work.dir.to_str().unwrap(),
            bare.to_str().unwrap(),
        ],
    );
    (work, bare)
}

fn push(work: &WorkRepo, bare: &Path) {
    git(
        &work.dir,
        &["push", "-q", "-f", bare.to_str().unwrap(), "main"],
    );
}

fn source(tmp: &Path, bare: &Path) -> GitSource {
    GitSource::new(SourceConfig {
        location: Location::Remote(
            RemoteSpec::anonymous(format!("file://{}", bare.display())),
            tmp.join("cache"),
        ),
        branch: "main".to_owned(),
        read: ReadOptions {
            root: "fleet".to_owned(),
            ..ReadOptions::default()
        },
        status_branch: "nodewright/status".to_owned(),
    })
}

#[test]
fn an_invalid_commit_is_rejected_and_the_last_good_state_stays() {
    let tmp = tempfile::tempdir().unwrap();
    let (work, bare) = remote_fixture(tmp.path());
    let mut src = source(tmp.path(), &bare);

    let first = match src.refresh().unwrap() {
        SourceUpdate::Applied { commit, digest } => {
            assert!(digest.starts_with("sha256:"));
            commit
        }
        other => panic!("{other:?}"),
    };
    let good = src.current().unwrap().clone();
    assert_eq!(good.desired.commit, first);
    assert_eq!(
        good.desired.nodewrights[0].spec.packages()["driver"].version,
        "1.0.0"
    );
    assert!(matches!(
        src.refresh().unwrap(),
        SourceUpdate::NoNewCommit { .. }
    ));

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
        SourceUpdate::Rejected {
            commit,
            errors,
            report,
        } => {
            assert_eq!(commit, bad);
            let files: Vec<String> = errors.iter().map(|e| e.location()).collect();
            assert!(
                files.iter().any(|f| f.starts_with("fleet/bad.yaml:")),
                "{files:?}"
            );
            assert!(
                files.iter().any(|f| f.starts_with("fleet/broken.yaml:")),
                "{files:?}"
            );
            assert!(
                report.contains(&bad) && report.contains("inline tag"),
                "{report}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        src.current().unwrap(),
        &good,
        "last good desired state stays in force"
    );
    assert_eq!(
        src.tracker().last_rejected().map(|(c, _)| c),
        Some(bad.as_str())
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
        SourceUpdate::SameDesired {
            commit: reformatted.clone()
        }
    );
    assert_eq!(src.current().unwrap().digest, good.digest);
    assert!(src.tracker().last_rejected().is_none());

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
        SourceUpdate::Applied { commit, digest } => {
            assert_eq!(commit, fixed);
            assert_ne!(digest, good.digest);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_downgrade_against_the_last_good_state_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (work, bare) = remote_fixture(tmp.path());
    work.write("fleet/gpu.yaml", &nodewright("gpu", "    agent:\n      version: 3.0.0\n      image: nvcr.io/nvidia/agent\n      uninstall:\n        enabled: true\n"));
    work.commit("agent");
    push(&work, &bare);
    let mut src = source(tmp.path(), &bare);
    assert!(matches!(
        src.refresh().unwrap(),
        SourceUpdate::Applied { .. }
    ));
    work.write("fleet/gpu.yaml", &nodewright("gpu", "    agent:\n      version: 2.0.0\n      image: nvcr.io/nvidia/agent\n      uninstall:\n        enabled: true\n"));
    work.commit("downgrade");
    push(&work, &bare);
    match src.refresh().unwrap() {
        SourceUpdate::Rejected { errors, .. } => {
            assert!(
                errors
                    .iter()
                    .any(|e| e.message.contains("downgrade not allowed")),
                "{errors:?}"
            );
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
    let mut src = GitSource::new(SourceConfig {
        location: Location::Local(work.dir.clone()),
        branch: "main".to_owned(),
        read: ReadOptions {
            root: "fleet".to_owned(),
            ..ReadOptions::default()
        },
        status_branch: "nodewright/status".to_owned(),
    });
    assert!(
        matches!(src.refresh().unwrap(), SourceUpdate::Applied { commit, .. } if commit == first)
    );
    // An uncommitted edit is not desired state.
    work.write("fleet/gpu.yaml", "garbage: [\n");
    assert!(matches!(
        src.refresh().unwrap(),
        SourceUpdate::NoNewCommit { .. }
    ));
    assert_eq!(src.current().unwrap().desired.commit, first);
    assert!(src.repo().unwrap().git_dir().ends_with(".git"));
}
