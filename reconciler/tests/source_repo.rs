//! Repository access through gix against real repositories built with the git CLI.

mod common;

use common::{WorkRepo, commit_tree, git, mktree};
use nodewright_reconciler::source::budget::Budget;
use nodewright_reconciler::source::repo::{GitRepo, RemoteSpec, RepoError};
use nodewright_reconciler::source::tree::{FileViolation, TreeLimits, read_commit_files};

fn file_names(files: &nodewright_reconciler::source::tree::CommitFiles) -> Vec<&str> {
    files.files.iter().map(|f| f.path.as_str()).collect()
}

#[test]
fn clones_a_bare_remote_and_fetches_new_commits() {
    let tmp = tempfile::tempdir().unwrap();
    let work = WorkRepo::init(&tmp.path().join("work"));
    work.write("fleet/a.yaml", "a: 1\n");
    let first = work.commit("first");
    let bare = tmp.path().join("remote.git");
    work.clone_bare(&bare);

    let spec = RemoteSpec::anonymous(format!("file://{}", bare.display()));
    let cache = tmp.path().join("cache");
    let (mirror, outcome) = GitRepo::sync_remote(&spec, &cache).unwrap();
    assert!(
        outcome
            .updated
            .iter()
            .any(|(name, id)| name == "refs/heads/main" && *id == oid(&first))
    );
    assert_eq!(mirror.resolve("main").unwrap().to_string(), first);

    // A new commit on the remote is visible after the next fetch, not before.
    work.write("fleet/b.yaml", "b: 2\n");
    let second = work.commit("second");
    git(&work.dir, &["push", "-q", bare.to_str().unwrap(), "main"]);
    assert_eq!(mirror.resolve("main").unwrap().to_string(), first);
    let outcome = mirror.fetch().unwrap();
    assert!(
        outcome
            .updated
            .iter()
            .any(|(name, id)| name == "refs/heads/main" && *id == oid(&second))
    );
    assert_eq!(mirror.resolve("main").unwrap().to_string(), second);

    // Re-opening the cache (a restarted reconciler) fetches incrementally.
    let (again, outcome) = GitRepo::sync_remote(&spec, &cache).unwrap();
    assert!(
        outcome.updated.is_empty(),
        "nothing new: {:?}",
        outcome.updated
    );
    let files = read_commit_files(
        &again,
        again.resolve("main").unwrap(),
        "fleet",
        &TreeLimits::default(),
    )
    .unwrap();
    assert_eq!(file_names(&files), ["fleet/a.yaml", "fleet/b.yaml"]);
}

#[test]
fn a_local_path_remote_and_a_shallow_fetch_work() {
    let tmp = tempfile::tempdir().unwrap();
    let work = WorkRepo::init(&tmp.path().join("work"));
    work.write("a.yaml", "a: 1\n");
    let first = work.commit("first");
    work.write("a.yaml", "a: 2\n");
    let second = work.commit("second");
    let bare = tmp.path().join("remote.git");
    work.clone_bare(&bare);

    let mut spec = RemoteSpec::anonymous(bare.to_str().unwrap());
    spec.depth = std::num::NonZeroU32::new(1);
    let (mirror, _) = GitRepo::sync_remote(&spec, &tmp.path().join("cache")).unwrap();
    assert_eq!(mirror.resolve("main").unwrap().to_string(), second);
    // Only the tip was fetched: its parent is not in the cache.
    assert!(
        mirror.resolve(&first).is_err(),
        "shallow fetch brought the parent commit"
    );
}

#[test]
fn a_branch_that_does_not_exist_is_refused_with_the_branches_there_are() {
    // See: issue 24 — `run --repo` on a repository whose branch is `master` said only that
    // "main" does not name a commit.
    let tmp = tempfile::tempdir().unwrap();
    let work = WorkRepo::init(&tmp.path().join("work"));
    work.write("a.yaml", "a: 1\n");
    work.commit("first");
    git(&work.dir, &["branch", "-m", "main", "master"]);
    git(&work.dir, &["branch", "release"]);

    let repo = GitRepo::open(&work.dir).unwrap();
    let refused = repo.resolve("main").unwrap_err().to_string();
    assert!(
        refused.starts_with("revision \"main\" does not name a commit in "),
        "{refused}"
    );
    assert!(
        refused.ends_with("; the branches here are: master, release"),
        "{refused}"
    );
}

#[test]
fn reads_a_commit_that_is_not_checked_out_and_resolves_tags() {
    let tmp = tempfile::tempdir().unwrap();
    let work = WorkRepo::init(&tmp.path().join("work"));
    work.write("fleet/a.yaml", "version: old\n");
    work.write("fleet/notes.txt", "not a manifest\n");
    work.write(".nodewright/state.yaml", "never: read\n");
    let old = work.commit("old");
    git(&work.dir, &["tag", "-a", "v1", "-m", "release 1"]);
    work.write("fleet/a.yaml", "version: new\n");
    work.write("fleet/sub/b.yml", "b: 1\n");
    work.write("fleet/.nodewright/x.yaml", "never: read\n");
    work.commit("new");

    let repo = GitRepo::open(&work.dir).unwrap();
    let tag = repo.resolve("v1").unwrap();
    assert_eq!(tag.to_string(), old, "annotated tag peels to its commit");
    assert_eq!(repo.resolve(&old[..10]).unwrap().to_string(), old);

    let files = read_commit_files(&repo, tag, "", &TreeLimits::default()).unwrap();
    assert_eq!(file_names(&files), ["fleet/a.yaml"]);
    assert_eq!(files.files[0].bytes, b"version: old\n");

    let head = repo.resolve("HEAD").unwrap();
    let files = read_commit_files(&repo, head, "fleet", &TreeLimits::default()).unwrap();
    assert_eq!(file_names(&files), ["fleet/a.yaml", "fleet/sub/b.yml"]);
    assert!(files.violations.is_empty());

    // A root path that does not exist yields no files (an empty desired state).
    let files = read_commit_files(&repo, head, "nowhere", &TreeLimits::default()).unwrap();
    assert!(files.files.is_empty());
}

#[test]
fn the_status_branch_is_never_desired_state() {
    let tmp = tempfile::tempdir().unwrap();
    let work = WorkRepo::init(&tmp.path().join("work"));
    work.write("a.yaml", "a: 1\n");
    work.commit("first");
    git(&work.dir, &["branch", "nodewright/status"]);
    let repo = GitRepo::open(&work.dir).unwrap();
    let err = repo
        .resolve_desired("nodewright/status", "nodewright/status")
        .unwrap_err();
    assert!(matches!(err, RepoError::StatusBranch { .. }), "{err}");
    assert!(repo.resolve_desired("main", "nodewright/status").is_ok());
}

#[test]
fn unknown_revisions_are_reported_with_the_revision() {
    let tmp = tempfile::tempdir().unwrap();
    let work = WorkRepo::init(&tmp.path().join("work"));
    work.commit("first");
    let repo = GitRepo::open(&work.dir).unwrap();
    let err = repo.resolve("no-such-branch").unwrap_err();
    assert!(err.to_string().contains("no-such-branch"), "{err}");
}

#[cfg(unix)]
#[test]
fn symlinks_escaping_the_root_and_oversized_files_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let work = WorkRepo::init(&tmp.path().join("work"));
    work.write("fleet/real.yaml", "a: 1\n");
    work.write("secrets/token.yaml", "token: hunter2\n");
    work.symlink("fleet/inside.yaml", "real.yaml");
    work.symlink("fleet/escape.yaml", "../secrets/token.yaml");
    work.symlink("fleet/absolute.yaml", "/etc/passwd");
    work.write("fleet/big.yaml", &"x: 1\n".repeat(1000));
    let head = work.commit("links");

    let repo = GitRepo::open(&work.dir).unwrap();
    let limits = TreeLimits {
        max_file_bytes: 1000,
        ..TreeLimits::default()
    };
    let files = read_commit_files(&repo, head.parse().unwrap(), "fleet", &limits).unwrap();
    assert_eq!(file_names(&files), ["fleet/inside.yaml", "fleet/real.yaml"]);
    assert_eq!(
        files.files[0].bytes, b"a: 1\n",
        "link inside the root resolves to its target"
    );
    let mut escaped: Vec<&str> = files
        .violations
        .iter()
        .filter_map(|v| match v {
            FileViolation::SymlinkEscape { path, .. } => Some(path.as_str()),
            _ => None,
        })
        .collect();
    escaped.sort();
    assert_eq!(escaped, ["fleet/absolute.yaml", "fleet/escape.yaml"]);
    assert!(files.violations.iter().any(|v| matches!(
        v,
        FileViolation::TooLarge { path, size: 5000, limit: 1000 } if path == "fleet/big.yaml"
    )));
    assert!(
        files
            .violations
            .iter()
            .all(|v| !v.to_string().contains("hunter2"))
    );
}

fn oid(hex: &str) -> gix::ObjectId {
    gix::ObjectId::from_hex(hex.as_bytes()).unwrap()
}

#[test]
fn ancestry_is_answered_from_history() {
    let tmp = tempfile::tempdir().unwrap();
    let work = WorkRepo::init(&tmp.path().join("work"));
    let first = work.commit("first");
    let second = work.commit("second");
    git(&work.dir, &["checkout", "-q", "-b", "side", &first]);
    let side = work.commit("side");
    let repo = GitRepo::open(&work.dir).unwrap();
    let (a, b, s) = (oid(&first), oid(&second), oid(&side));
    assert!(repo.is_ancestor(a, b).unwrap());
    assert!(
        !repo.is_ancestor(b, a).unwrap(),
        "a rewind is not a fast-forward"
    );
    assert!(!repo.is_ancestor(b, s).unwrap());
    assert!(repo.is_ancestor(a, a).unwrap());
}

#[test]
fn a_linked_work_tree_reports_the_shared_git_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let work = WorkRepo::init(&tmp.path().join("work"));
    work.write("a.yaml", "a: 1\n");
    let first = work.commit("first");
    let linked = tmp.path().join("linked");
    git(
        &work.dir,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "review",
            linked.to_str().unwrap(),
        ],
    );
    let repo = GitRepo::open(&linked).unwrap();
    assert_eq!(
        repo.git_dir().canonicalize().unwrap(),
        work.dir.join(".git").canonicalize().unwrap()
    );
    assert_eq!(repo.resolve("main").unwrap(), oid(&first));
}

#[test]
fn one_blob_named_by_thousands_of_paths_is_refused_from_object_headers() {
    // See: issue 24 — 9,991 entries naming one 1 MB blob needed ~10 GB.
    let tmp = tempfile::tempdir().unwrap();
    let work = WorkRepo::init(&tmp.path().join("work"));
    let blob_file = tmp.path().join("big.yaml");
    std::fs::write(&blob_file, "a: 1\n".repeat(200_000)).unwrap();
    let blob = git(
        &work.dir,
        &["hash-object", "-w", blob_file.to_str().unwrap()],
    );
    let entries: Vec<String> = (0..9_991)
        .map(|i| format!("100644 blob {blob}\tf{i:05}.yaml"))
        .collect();
    let tree = mktree(&work.dir, &entries);
    let commit = commit_tree(&work.dir, &tree);
    let repo = GitRepo::open(&work.dir).unwrap();
    let files = read_commit_files(&repo, commit, "", &TreeLimits::default()).unwrap();
    assert!(files.files.is_empty(), "nothing was loaded");
    let message = files.violations[0].to_string();
    assert!(
        matches!(files.violations[..], [FileViolation::OverBudget { .. }]),
        "{:?}",
        files.violations
    );
    assert!(
        message.contains("bytes of manifest files") && message.contains("--max-total-bytes"),
        "names the budget: {message}"
    );
}

#[test]
fn a_nested_tree_bomb_stops_at_the_entry_budget() {
    // See: issue 24 — ten trees of ten, eight deep: 10^8 leaves from 9 objects.
    let tmp = tempfile::tempdir().unwrap();
    let work = WorkRepo::init(&tmp.path().join("work"));
    let leaf = tmp.path().join("leaf.yaml");
    std::fs::write(&leaf, "a: 1\n").unwrap();
    let blob = git(&work.dir, &["hash-object", "-w", leaf.to_str().unwrap()]);
    let mut tree = mktree(&work.dir, &[format!("100644 blob {blob}\ta.yaml")]);
    for _ in 0..8 {
        let entries: Vec<String> = (0..10)
            .map(|i| format!("040000 tree {tree}\td{i}"))
            .collect();
        tree = mktree(&work.dir, &entries);
    }
    let commit = commit_tree(&work.dir, &tree);
    let repo = GitRepo::open(&work.dir).unwrap();
    let files = read_commit_files(&repo, commit, "", &TreeLimits::default()).unwrap();
    assert!(files.files.is_empty());
    assert!(
        matches!(
            files.violations[..],
            [FileViolation::OverBudget {
                budget: Budget::Files,
                ..
            }]
        ),
        "{:?}",
        files.violations
    );
    let no_manifests = TreeLimits {
        max_files: usize::MAX,
        ..TreeLimits::default()
    };
    let files = read_commit_files(&repo, commit, "", &no_manifests).unwrap();
    let message = files.violations[0].to_string();
    assert!(
        message.contains("tree entries") && message.contains("--max-tree-entries"),
        "{message}"
    );
}
