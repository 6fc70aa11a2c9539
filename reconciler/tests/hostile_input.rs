//! The hostile repositories of issue 24, run through the binary as CI or an operator would:
//! each is refused (or answered) with a message that names the budget and the flag that
//! raises it. How long they take is measured, never asserted, here.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{WorkRepo, commit_tree, git, mktree};

fn nodewright(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nodewright"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the nodewright binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn short(commit: &gix::ObjectId) -> String {
    commit.to_string()[..12].to_owned()
}

/// `blob` named by `count` paths at the root of a new commit.
fn shared_blob_commit(work: &WorkRepo, blob_text: &str, count: usize) -> gix::ObjectId {
    let file = work.dir.join("blob.yaml");
    std::fs::write(&file, blob_text).unwrap();
    let blob = git(&work.dir, &["hash-object", "-w", "blob.yaml"]);
    std::fs::remove_file(&file).unwrap();
    let entries: Vec<String> = (0..count)
        .map(|i| format!("100644 blob {blob}\tf{i:05}.yaml"))
        .collect();
    commit_tree(&work.dir, &mktree(&work.dir, &entries))
}

#[test]
fn thousands_of_paths_to_one_large_blob_are_refused_by_the_total_size() {
    // See: issue 24 — 9,991 entries naming one 1 MB blob needed ~10 GB.
    let tmp = tempfile::tempdir().unwrap();
    let work = WorkRepo::init(&tmp.path().join("work"));
    let commit = shared_blob_commit(&work, &"a: 1\n".repeat(200_000), 9_991);
    let rev = commit.to_string();
    let out = nodewright(&work.dir, &["validate", "--repo", ".", "--rev", &rev]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!(
            "commit {}, the repository root: more than 67108864 bytes of manifest files: the rest was not read and rules across objects were not applied (--max-total-bytes raises this limit)\n",
            short(&commit)
        )
    );
}

#[test]
fn a_nested_tree_bomb_is_refused_by_the_file_count_then_the_entry_count() {
    // See: issue 24 — ten trees of ten, seven deep: 10^7 leaves from 8 objects ran for minutes.
    let tmp = tempfile::tempdir().unwrap();
    let work = WorkRepo::init(&tmp.path().join("work"));
    std::fs::write(work.dir.join("leaf.yaml"), "a: 1\n").unwrap();
    let blob = git(&work.dir, &["hash-object", "-w", "leaf.yaml"]);
    std::fs::remove_file(work.dir.join("leaf.yaml")).unwrap();
    let mut tree = mktree(&work.dir, &[format!("100644 blob {blob}\ta.yaml")]);
    for _ in 0..7 {
        let entries: Vec<String> = (0..10)
            .map(|i| format!("040000 tree {tree}\td{i}"))
            .collect();
        tree = mktree(&work.dir, &entries);
    }
    let commit = commit_tree(&work.dir, &tree);
    let rev = commit.to_string();
    let at = format!("commit {}, the repository root", short(&commit));

    let out = nodewright(&work.dir, &["validate", "--repo", ".", "--rev", &rev]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!(
            "{at}: more than 10000 manifest files: the rest was not read and rules across objects were not applied (--max-files raises this limit)\n"
        )
    );

    // Raising the file count meets the next budget, named by its own flag.
    let out = nodewright(
        &work.dir,
        &[
            "validate",
            "--repo",
            ".",
            "--rev",
            &rev,
            "--max-files",
            "100000000",
        ],
    );
    assert_eq!(
        text(&out.stdout),
        format!(
            "{at}: more than 200000 tree entries: the rest was not read and rules across objects were not applied (--max-tree-entries raises this limit)\n"
        )
    );

    // `diff` (a pull request's CI) refuses the head the same way.
    git(&work.dir, &["commit", "-q", "--allow-empty", "-m", "base"]);
    let out = nodewright(
        &work.dir,
        &["diff", "--repo", ".", "--base", "main", "--head", &rev],
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(
            "more than 10000 manifest files under the repository root: the commit is refused without reading further (--max-files raises this limit)"
        ),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn deep_flow_nesting_is_refused_at_its_line_whatever_the_file_size() {
    // See: issue 24 — 200 KB of `a: [[[[…]]]]` took 17 s, 800 KB more than 45 s.
    let tmp = tempfile::tempdir().unwrap();
    for (name, depth) in [("200k.yaml", 100_000), ("800k.yaml", 400_000)] {
        let deep = format!("a: {}{}\n", "[".repeat(depth), "]".repeat(depth));
        std::fs::write(tmp.path().join(name), deep).unwrap();
    }
    let out = nodewright(tmp.path(), &["validate", "."]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "./200k.yaml:1: document has more than 64 levels of flow nesting in one document, refused (--max-yaml-nesting raises this limit)\n\
         ./800k.yaml:1: document has more than 64 levels of flow nesting in one document, refused (--max-yaml-nesting raises this limit)\n"
    );

    // The flag lets a moderately deep document through to the parser, and no further than
    // the parser itself can go.
    std::fs::write(
        tmp.path().join("70.yaml"),
        format!("a: {}{}\n", "[".repeat(70), "]".repeat(70)),
    )
    .unwrap();
    let out = nodewright(
        tmp.path(),
        &["validate", "70.yaml", "--max-yaml-nesting", "80", "--quiet"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let out = nodewright(tmp.path(), &["validate", ".", "--max-yaml-nesting", "1000"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("1000 is not in 1..=100"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn eight_thousand_invalid_packages_are_each_reported_on_one_line() {
    // See: issue 24 — 8,000 invalid packages took 15 s (the line index per violation).
    let tmp = tempfile::tempdir().unwrap();
    let mut manifest = String::from(
        "apiVersion: nodewright.nvidia.com/v1alpha1\nkind: NodeWright\nmetadata:\n  name: big\nspec:\n  packages:\n",
    );
    for i in 0..8_000 {
        manifest.push_str(&format!(
            "    pkg{i:05}:\n      version: not a version\n      image: example/p\n"
        ));
    }
    std::fs::write(tmp.path().join("big.yaml"), manifest).unwrap();
    let out = nodewright(tmp.path(), &["validate", "big.yaml"]);
    assert_eq!(out.status.code(), Some(3));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 16_000, "a name and a version per package");
    assert_eq!(
        lines[15_999],
        "big.yaml:24005: NodeWright/big: spec.packages.pkg07999.version: error version string for pkg07999 is invalid: not a version"
    );
    assert!(
        text(&out.stderr).starts_with("invalid: 16000 error(s)"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_folder_over_its_total_size_stops_and_says_which_flag_raises_it() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["a.yaml", "b.yaml", "c.yaml"] {
        std::fs::write(tmp.path().join(name), "# padding\n".repeat(60)).unwrap();
    }
    let out = nodewright(tmp.path(), &["validate", ".", "--max-total-bytes", "1000"]);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(
        text(&out.stdout),
        "./b.yaml:1: more than 1000 bytes of manifest files: the rest was not read and rules across objects were not applied (--max-total-bytes raises this limit)\n"
    );
}

#[test]
fn a_file_or_object_name_cannot_forge_a_result_line() {
    // See: issue 24 — names with newlines and ESC forged result lines in text output.
    let tmp = tempfile::tempdir().unwrap();
    let file = "a\nfake.yaml:1: NodeWright-ok: all good\u{1b}[0m.yaml";
    std::fs::write(
        tmp.path().join(file),
        "apiVersion: nodewright.nvidia.com/v1alpha1\nkind: NodeWright\nmetadata:\n  name: \"bad\\e[2J\\nname\"\nspec:\n  packages:\n    tuning:\n      version: 1.0.0\n      image: example/tuning\n",
    )
    .unwrap();
    let out = nodewright(tmp.path(), &["validate", "."]);
    assert_eq!(out.status.code(), Some(3));
    let stdout = text(&out.stdout);
    assert!(!stdout.is_empty());
    assert!(
        !stdout.chars().any(|c| c.is_control() && c != '\n'),
        "{stdout:?}"
    );
    for line in stdout.lines() {
        assert!(
            line.starts_with(
                "./a\\nfake.yaml:1: NodeWright-ok: all good\\e[0m.yaml:4: NodeWright/bad\\e[2J\\nname: "
            ),
            "one line per finding, names escaped: {line:?}"
        );
    }
}

/// A repository whose two commits upgrade NodeWright `big`'s 1,000 packages from 1.0.0
/// (`main~1`) to 1.0.1 (`main`); `spec` is the rest of its spec, before `packages`.
fn thousand_package_upgrade(dir: &Path, spec: &str) -> WorkRepo {
    let work = WorkRepo::init(dir);
    for version in ["1.0.0", "1.0.1"] {
        let mut text = format!(
            "apiVersion: nodewright.nvidia.com/v1alpha1\nkind: NodeWright\nmetadata:\n  name: big\nspec:\n{spec}  packages:\n"
        );
        for i in 0..1_000 {
            text.push_str(&format!(
                "    pkg{i:04}x:\n      version: {version}\n      image: example/p{i}\n"
            ));
        }
        work.write("big.yaml", &text);
        work.commit(version);
    }
    work
}

/// The projection `diff --simulate` prints for the upgrade in `work` on `nodes` nodes.
fn projected(work: &WorkRepo, nodes: usize) -> String {
    let nodes = nodes.to_string();
    let out = nodewright(
        &work.dir,
        &[
            "diff",
            "--repo",
            ".",
            "--base",
            "main~1",
            "--head",
            "main",
            "--simulate",
            "--nodes",
            &nodes,
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    stdout
        .split("Simulated rollout:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no timeline: {stdout}"))
        .to_owned()
}

#[test]
fn a_thousand_packages_are_projected_on_a_simulated_fleet() {
    // See: issue 24 — `diff --simulate` on one NodeWright with 1,000 packages took 42 s and
    // 2.3 GB, about 290 KB per package and node.
    let tmp = tempfile::tempdir().unwrap();
    let work = thousand_package_upgrade(
        &tmp.path().join("work"),
        "  nodeSelectors:\n    matchLabels:\n      gpu: \"true\"\n  interruptionBudget:\n    count: 4\n",
    );
    let timeline = projected(&work, 1);
    let lines: Vec<&str> = timeline.lines().take(3).collect();
    assert_eq!(
        lines,
        [
            "The change converges in about 24s on a simulated fleet of 1 nodes.",
            "big: 1 node(s) in 1 batch(es), 0 interrupt Job(s), 0 reboot(s)",
            "  batch  1  +6s       → +18s       node-0",
        ]
    );
}

#[test]
fn a_budget_of_one_node_projects_a_thousand_packages_on_more_nodes_than_run_at_once() {
    // Three nodes of a thousand packages are 3,000 pairs, but one node at a time runs 1,000:
    // what the projection holds follows the pairs running, not the fleet.
    let tmp = tempfile::tempdir().unwrap();
    let work = thousand_package_upgrade(
        &tmp.path().join("work"),
        "  interruptionBudget:\n    count: 1\n",
    );
    let timeline = projected(&work, 3);
    assert!(
        timeline.contains("big: 3 node(s) in 3 batch(es)"),
        "{timeline}"
    );
}

#[test]
fn a_projection_beyond_its_limit_is_refused_at_once_and_the_diff_is_still_complete() {
    // See: issue 24 — `diff --simulate` of 1,000 packages on 8 nodes needed gigabytes; every
    // pair is a Job alive at once when packages run in parallel.
    let tmp = tempfile::tempdir().unwrap();
    let work = thousand_package_upgrade(&tmp.path().join("work"), "");
    let diff = |extra: &[&str]| {
        let mut args = vec![
            "diff",
            "--repo",
            ".",
            "--base",
            "main~1",
            "--head",
            "main",
            "--simulate",
        ];
        args.extend_from_slice(extra);
        nodewright(&work.dir, &args)
    };
    let out = diff(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let first = stdout.lines().next().unwrap_or_default();
    assert!(
        first.ends_with("is valid: changes 1 NodeWright (1000 upgrade); no interrupts"),
        "{stdout}"
    );
    assert_eq!(stdout.matches("[upgrade]").count(), 1_000, "{stdout}");
    assert!(
        stdout.contains(
            "Simulation failed: too large to project: the base rollout's budgets let 8000 package × node pairs run at once (most for NodeWright big: 1000 packages × 8 of its 8 node(s) at once), more than --max-simulated-pairs-at-once (2000); the diff itself is complete, and a smaller interruption budget or a larger limit projects it"
        ),
        "{stdout}"
    );
    // The limit is the flag's: one pair over it is refused the same way.
    let out = diff(&["--nodes", "1", "--max-simulated-pairs", "999"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(
            "the base rollout runs 1000 package × node pairs (most for NodeWright big: 1000 packages × 1 node(s)), more than --max-simulated-pairs (999)"
        ),
        "{}",
        text(&out.stdout)
    );
}
