//! The "last changed" rule of approvals (issue 30, `source::approvals::from_git`) over real Git
//! histories made with the git CLI: an approval counts only when the commit that last changed
//! its value is the one that last changed the NodeWright's spec, or later.

mod common;

use std::path::Path;

use common::{TIERS_POLICY, WorkRepo, git};
use nodewright_reconciler::source::approvals::from_git;
use nodewright_reconciler::source::desired::{ReadOptions, load_commit};
use nodewright_reconciler::source::repo::GitRepo;

/// The driver manifest at `version`, with `approved` as its approved-batches value when given.
fn driver(version: &str, approved: Option<&str>) -> String {
    let approval = approved
        .map(|a| format!("    gitops.nodewright.nvidia.com/approved-batches: \"{a}\"\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: nodewright.nvidia.com/v1alpha1
kind: NodeWright
metadata:
  name: driver
  annotations:
    gitops.nodewright.nvidia.com/approval-required: production
{approval}spec:
  deploymentPolicy: tiers
  nodeSelectors: {{matchLabels: {{role: gpu}}}}
  packages:
    driver: {{version: {version}, image: example/driver}}
"
    )
}

fn repo_with(dir: &Path, history: &[String]) -> WorkRepo {
    let repo = WorkRepo::init(dir);
    repo.write("fleet/policy.yaml", TIERS_POLICY);
    for (i, content) in history.iter().enumerate() {
        repo.write("fleet/driver.yaml", content);
        repo.commit(&format!("step {i}"));
    }
    repo
}

/// The approvals in force at the head of the repository at `path` for `driver`, as
/// `compartment=N` pairs.
fn in_force(path: &Path) -> Option<String> {
    let git = GitRepo::open(path).unwrap();
    let head = git.resolve("HEAD").unwrap();
    let options = ReadOptions::default();
    let (loaded, _) = load_commit(&git, head, &options).unwrap();
    let nodewrights: Vec<_> = loaded.nodewrights.into_iter().map(|s| s.object).collect();
    from_git(&git, head, &options, &nodewrights)
        .unwrap()
        .remove("driver")
        .map(|a| nodewright_schema::approvals::render_approved(&a))
}

#[test]
fn an_approval_committed_after_the_change_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = repo_with(
        tmp.path(),
        &[
            driver("1.0.0", None),
            driver("2.0.0", None),
            driver("2.0.0", Some("production=2")),
        ],
    );
    assert_eq!(in_force(&repo.dir).as_deref(), Some("production=2"));
}

#[test]
fn an_approval_in_the_same_commit_as_the_change_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = repo_with(
        tmp.path(),
        &[driver("1.0.0", None), driver("2.0.0", Some("production=2"))],
    );
    assert_eq!(in_force(&repo.dir).as_deref(), Some("production=2"));
}

#[test]
fn a_stale_approval_approves_nothing_after_a_version_bump() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = repo_with(
        tmp.path(),
        &[
            driver("1.0.0", None),
            driver("1.0.0", Some("production=2")),
            driver("2.0.0", Some("production=2")),
        ],
    );
    assert_eq!(in_force(&repo.dir), None);
}

/// The driver at 2.0.0 with the spec written differently (same objects).
fn reformatted() -> String {
    driver("2.0.0", Some("production=2")).replace(
        "    driver: {version: 2.0.0, image: example/driver}\n",
        "    # the driver package, reformatted\n    driver:\n      image: example/driver\n      version: \"2.0.0\"\n",
    )
}

#[test]
fn a_reformatting_commit_neither_revives_nor_voids_an_approval() {
    let tmp = tempfile::tempdir().unwrap();
    let current = repo_with(
        &tmp.path().join("current"),
        &[
            driver("1.0.0", None),
            driver("2.0.0", Some("production=2")),
            reformatted(),
        ],
    );
    assert_eq!(in_force(&current.dir).as_deref(), Some("production=2"));
    let repo = repo_with(
        &tmp.path().join("stale"),
        &[
            driver("1.0.0", None),
            driver("1.0.0", Some("production=2")),
            driver("2.0.0", Some("production=2")),
            reformatted(),
        ],
    );
    assert_eq!(
        git(&repo.dir, &["diff", "--stat", "HEAD~1", "HEAD"])
            .lines()
            .count(),
        2,
        "the last commit changes the spec's text"
    );
    assert_eq!(in_force(&repo.dir), None);
}

#[test]
fn history_cut_by_a_shallow_clone_approves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let approved = driver("1.0.0", Some("production=2"));
    let repo = repo_with(
        &tmp.path().join("origin"),
        &[
            approved.clone(),
            format!("# reviewed\n{approved}"),
            format!("# reviewed twice\n{approved}"),
        ],
    );
    // Declared with its approval in the branch's first commit: the whole history shows it.
    assert_eq!(in_force(&repo.dir).as_deref(), Some("production=2"));
    let shallow = tmp.path().join("shallow");
    git(
        tmp.path(),
        &[
            "clone",
            "-q",
            "--depth",
            "2",
            &format!("file://{}", repo.dir.display()),
            shallow.to_str().unwrap(),
        ],
    );
    assert_eq!(git(&shallow, &["rev-list", "--count", "HEAD"]), "2");
    assert_eq!(in_force(&shallow), None);
}
