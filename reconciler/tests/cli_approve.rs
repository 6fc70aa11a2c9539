//! `nodewright approve` on real clones (issue 30): the approval commit is the one annotation
//! line, made on the checked-out branch with the configured author; invalid results, dirty
//! files and unknown batches are refused without a commit.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{TIERS_POLICY, WorkRepo, git};

/// A commented, oddly spaced two-document file; the NodeWright is the second document.
const DRIVER: &str = "# GPU driver rollout (platform team)
apiVersion: v1
kind: ConfigMap
metadata: {name: notes}
---
apiVersion: nodewright.nvidia.com/v1alpha1
kind: NodeWright
metadata:
  name: driver   # the driver
  annotations:
    # Production's later batches wait for a reviewed approval.
    gitops.nodewright.nvidia.com/approval-required: \"production\"
    gitops.nodewright.nvidia.com/approved-batches: 'canary=2'   # earlier approval
spec:
  deploymentPolicy: tiers
  nodeSelectors: {matchExpressions: [{key: tier, operator: Exists}]}
  packages:
    driver:    {version: 1.0.0, image: example/driver}
";

fn fleet(dir: &Path) -> WorkRepo {
    let repo = WorkRepo::init(dir);
    repo.write("fleet/policy.yaml", TIERS_POLICY);
    repo.write("fleet/driver.yaml", DRIVER);
    repo.commit("fleet");
    git(dir, &["config", "user.name", "Ada Approver"]);
    git(dir, &["config", "user.email", "ada@example.invalid"]);
    repo
}

fn approve(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nodewright"))
        .arg("approve")
        .args(args)
        .arg("--repo")
        .arg(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env_remove("GIT_AUTHOR_NAME")
        .env_remove("GIT_AUTHOR_EMAIL")
        .output()
        .expect("nodewright runs")
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

#[test]
fn approve_commits_exactly_the_annotation_line_with_the_configured_author() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fleet(&tmp.path().join("fleet"));
    let before = git(&repo.dir, &["rev-parse", "HEAD"]);
    let out = approve(
        &repo.dir,
        &["driver", "--compartment", "production", "--batch", "2"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("fleet/driver.yaml:13: gitops.nodewright.nvidia.com/approved-batches: \"canary=2,production=2\" (was \"canary=2\")"),
        "{stdout}"
    );
    assert!(
        stdout.contains("git push origin HEAD:nodewright/approve/driver/production-2"),
        "{stdout}"
    );
    assert_eq!(
        git(&repo.dir, &["log", "-1", "--format=%s|%an <%ae>|%P"]),
        format!("Approve driver production batch 2|Ada Approver <ada@example.invalid>|{before}")
    );
    let diff = git(
        &repo.dir,
        &["diff", "-U0", "HEAD~1", "HEAD", "--", "fleet/driver.yaml"],
    );
    let changed: Vec<&str> = diff
        .lines()
        .filter(|l| {
            (l.starts_with('+') || l.starts_with('-'))
                && !l.starts_with("+++")
                && !l.starts_with("---")
        })
        .collect();
    assert_eq!(
        changed,
        [
            "-    gitops.nodewright.nvidia.com/approved-batches: 'canary=2'   # earlier approval",
            "+    gitops.nodewright.nvidia.com/approved-batches: 'canary=2,production=2'   # earlier approval",
        ]
    );
    assert_eq!(
        git(&repo.dir, &["diff", "--stat", "HEAD~1", "HEAD"])
            .lines()
            .count(),
        2,
        "only the manifest changed"
    );
    assert_eq!(
        git(&repo.dir, &["status", "--porcelain"]),
        "",
        "work tree and index are clean"
    );

    // Approving what is approved already commits nothing.
    let again = approve(
        &repo.dir,
        &["driver", "--compartment", "production", "--batch", "2"],
    );
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert!(text(&again.stdout).contains("nothing to commit"));
    assert_eq!(git(&repo.dir, &["rev-list", "--count", "HEAD"]), "2");
}

#[test]
fn an_approval_that_would_make_the_commit_invalid_is_refused_with_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fleet(&tmp.path().join("fleet"));
    let out = approve(
        &repo.dir,
        &["driver", "--compartment", "staging", "--batch", "2"],
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("nothing was committed"), "{stderr}");
    assert!(stderr.contains("fleet/driver.yaml:"), "{stderr}");
    assert!(stderr.contains("staging"), "{stderr}");
    assert_eq!(git(&repo.dir, &["rev-list", "--count", "HEAD"]), "1");
    assert_eq!(git(&repo.dir, &["status", "--porcelain"]), "");
}

#[test]
fn a_manifest_with_uncommitted_changes_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fleet(&tmp.path().join("fleet"));
    repo.write("fleet/driver.yaml", &format!("{DRIVER}# unfinished\n"));
    let out = approve(
        &repo.dir,
        &["driver", "--compartment", "production", "--batch", "2"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("fleet/driver.yaml has uncommitted changes"));
    assert_eq!(git(&repo.dir, &["rev-list", "--count", "HEAD"]), "1");
}

#[test]
fn the_batch_waiting_is_read_from_the_status_branch_else_batch_is_required() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fleet(&tmp.path().join("fleet"));
    let out = approve(&repo.dir, &["driver", "--compartment", "production"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("no status branch nodewright/status"),
        "{stderr}"
    );
    assert!(stderr.contains("pass --batch N"), "{stderr}");

    git(
        &repo.dir,
        &["checkout", "-q", "--orphan", "nodewright/status"],
    );
    git(&repo.dir, &["rm", "-rq", "--cached", "."]);
    std::fs::remove_dir_all(repo.dir.join("fleet")).unwrap();
    repo.write(
        "status/driver.yaml",
        "nodewright: driver\nstatus: in_progress\ncompartments:\n  production: {currentBatch: 3}\npendingApprovals:\n  - \"compartment production: batch 3 waits for approval (2 nodes complete, 0 failed); approve with gitops.nodewright.nvidia.com/approved-batches: production=3\"\n",
    );
    repo.commit("status");
    git(&repo.dir, &["checkout", "-q", "-f", "main"]);

    let out = approve(&repo.dir, &["driver", "--compartment", "canary"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("shows no batch of compartment canary of driver waiting"),
        "{}",
        text(&out.stderr)
    );
    let out = approve(&repo.dir, &["driver", "--compartment", "production"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        git(&repo.dir, &["log", "-1", "--format=%s"]),
        "Approve driver production batch 3"
    );
}

#[cfg(unix)]
#[test]
fn a_manifest_that_is_a_symbolic_link_is_not_replaced_by_a_file() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = WorkRepo::init(&tmp.path().join("fleet"));
    repo.write("fleet/policy.yaml", TIERS_POLICY);
    repo.write("shared/driver.yaml", DRIVER);
    repo.symlink("fleet/driver.yaml", "../shared/driver.yaml");
    repo.commit("fleet");
    git(&repo.dir, &["config", "user.name", "Ada Approver"]);
    git(&repo.dir, &["config", "user.email", "ada@example.invalid"]);
    let out = approve(
        &repo.dir,
        &["driver", "--compartment", "production", "--batch", "2"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("fleet/driver.yaml is a symbolic link"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(git(&repo.dir, &["rev-list", "--count", "HEAD"]), "1");
}
