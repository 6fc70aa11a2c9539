//! End to end: the `nodewright` binary against a real Git repository and the embedded
//! simulated cluster (`run --until-converged`), and the README's first command (`demo`).

use std::path::Path;
use std::process::Command;

const FLEET: &str = r#"
cluster:
  nodes:
    - generate: {count: 2, namePrefix: canary-, labels: {nvidia.com/gpu.present: "true", rollout.example.com/pool: canary}}
    - generate: {count: 3, namePrefix: gpu-, labels: {nvidia.com/gpu.present: "true", rollout.example.com/pool: production}}
packages:
  example/driver: {default: {duration: 5s}, rebootTakes: 30s}
"#;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn fleet_repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/fleet");
    copy_dir(&examples, dir.path());
    git(dir.path(), &["init", "-q", "-b", "main"]);
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["commit", "-q", "-m", "fleet"]);
    dir
}

fn run(repo: &Path, fleet: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_nodewright"))
        .args(["run", "--repo"])
        .arg(repo)
        .arg("--sim-fleet")
        .arg(fleet)
        .args(["--speed", "0", "--no-progress", "--until-converged", "6h"])
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("nodewright runs")
}

#[test]
fn run_converges_the_example_fleet_and_commits_status() {
    let repo = fleet_repo();
    let fleet_file = repo.path().join("../fleet-sim.yaml");
    std::fs::write(&fleet_file, FLEET).unwrap();
    let out = run(repo.path(), &fleet_file);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "run failed:\n{stderr}");
    assert!(
        stderr.contains("embedded simulated cluster of 5 nodes"),
        "{stderr}"
    );
    // Issue 28 item 12: logs written to a pipe carry no colour codes.
    assert!(!stderr.contains('\x1b'), "{stderr}");
    let tuning = git(
        repo.path(),
        &["show", "nodewright/status:status/gpu-tuning.yaml"],
    );
    let doc: serde_yaml::Value = serde_yaml::from_str(&tuning).unwrap();
    assert_eq!(doc["status"], "complete");
    assert_eq!(doc["completeNodes"], "5/5");
    let driver = git(
        repo.path(),
        &["show", "nodewright/status:status/gpu-driver.yaml"],
    );
    assert!(driver.contains("status: complete"), "{driver}");
    let log = git(repo.path(), &["log", "--format=%s", "nodewright/status"]);
    assert!(log.lines().count() >= 2, "status commits: {log}");
    // `status --repo` reads the same documents back as a table.
    let status = Command::new(env!("CARGO_BIN_EXE_nodewright"))
        .args(["status", "--repo"])
        .arg(repo.path())
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert!(table.starts_with("NODEWRIGHT"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("gpu-tuning") && l.contains("complete") && l.contains("5/5")),
        "{table}"
    );
    assert!(
        String::from_utf8_lossy(&status.stderr).contains("refs/heads/nodewright/status: commit "),
        "the source record follows the table"
    );
    // See: issue 24 — an ordinary clone has the branch as origin/nodewright/status, and a URL
    // is a repository too.
    let elsewhere = tempfile::tempdir().unwrap();
    let clone = elsewhere.path().join("clone");
    git(
        elsewhere.path(),
        &[
            "clone",
            "-q",
            repo.path().to_str().unwrap(),
            clone.to_str().unwrap(),
        ],
    );
    let url = format!("file://{}", repo.path().display());
    let cache = elsewhere.path().join("cache");
    for (target, extra) in [
        (clone.to_str().unwrap(), vec![]),
        (url.as_str(), vec!["--cache-dir", cache.to_str().unwrap()]),
    ] {
        let status = Command::new(env!("CARGO_BIN_EXE_nodewright"))
            .args(["status", "--repo", target])
            .args(extra)
            .output()
            .unwrap();
        let table = String::from_utf8_lossy(&status.stdout);
        let stderr = String::from_utf8_lossy(&status.stderr);
        assert!(status.status.success(), "{target}: {stderr}");
        assert!(
            table
                .lines()
                .any(|l| l.starts_with("gpu-tuning") && l.contains("5/5")),
            "{target}: {table}"
        );
        if target == clone.to_str().unwrap() {
            assert!(
                stderr.contains("refs/remotes/origin/nodewright/status"),
                "{stderr}"
            );
        }
    }
    // The desired-state branch is untouched by write-back.
    assert_eq!(
        git(repo.path(), &["log", "--format=%s", "main"]).trim(),
        "fleet"
    );
    let _ = std::fs::remove_file(fleet_file);
}

#[test]
fn an_invalid_head_at_start_is_rejected_on_the_status_branch_and_the_last_valid_commit_applies() {
    // See: issue 24 — a rejected commit must be visible in Git, and a fresh start follows the
    // newest valid commit.
    let repo = fleet_repo();
    let first = git(repo.path(), &["rev-parse", "HEAD"]).trim().to_string();
    let broken = std::fs::read_to_string(repo.path().join("gpu-tuning.yaml"))
        .unwrap()
        .replace("image: example/tuning", "image: example/tuning:1.4.0");
    std::fs::write(repo.path().join("gpu-tuning.yaml"), broken).unwrap();
    git(repo.path(), &["commit", "-q", "-am", "broken: inline tag"]);
    let head = git(repo.path(), &["rev-parse", "HEAD"]).trim().to_string();
    let fleet_file = repo.path().join("../fleet-sim-2.yaml");
    std::fs::write(&fleet_file, FLEET).unwrap();
    let out = run(repo.path(), &fleet_file);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("commit {head} at the head of main is invalid")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "applied {first}, the newest valid commit, 1 commit back"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("gpu-tuning.yaml:"),
        "the report names the file and line: {stderr}"
    );
    let source = git(
        repo.path(),
        &["show", "nodewright/status:status/_source.yaml"],
    );
    assert!(
        source.contains(&format!("appliedCommit: {first}")),
        "{source}"
    );
    assert!(source.contains(&format!("commit: {head}")), "{source}");
    assert!(source.contains("at: gpu-tuning.yaml:"), "{source}");
    let readme = git(repo.path(), &["show", "nodewright/status:status/README.md"]);
    assert!(
        readme.contains(&format!("**Rejected:** commit `{head}` is invalid")),
        "{readme}"
    );
    assert!(readme.contains("inline tag"), "{readme}");
    let _ = std::fs::remove_file(fleet_file);
}

#[test]
fn the_readme_laptop_command_rolls_the_example_fleet_out_on_sim_nodes() {
    // See: issue 24 — `--sim-nodes` nodes were unlabelled and the example fleet selected none.
    let repo = fleet_repo();
    let out = Command::new(env!("CARGO_BIN_EXE_nodewright"))
        .args(["run", "--repo"])
        .arg(repo.path())
        .args(["--sim-nodes", "16", "--speed", "0", "--no-progress"])
        .args(["--until-converged", "6h"])
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("nodewright runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "run failed:\n{stderr}");
    for nodewright in ["gpu-tuning", "gpu-driver"] {
        let status = git(
            repo.path(),
            &[
                "show",
                &format!("nodewright/status:status/{nodewright}.yaml"),
            ],
        );
        assert!(status.contains("completeNodes: 16/16"), "{status}");
        assert!(status.contains("node-16:"), "{status}");
    }
}

#[test]
fn the_demo_converges_and_leaves_a_status_branch() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("demo");
    let out = Command::new(env!("CARGO_BIN_EXE_nodewright"))
        .args(["demo", "--speed", "0", "--no-progress", "--keep-repo"])
        .arg(&repo)
        .output()
        .expect("demo runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stderr}\n{stdout}");
    assert!(
        stderr.contains("pushed a follow-up commit: tuning 1.4.0 -> 1.5.0"),
        "{stderr}"
    );
    assert!(
        stdout.contains("Status branch (nodewright/status)"),
        "{stdout}"
    );
    let tuning = git(&repo, &["show", "nodewright/status:status/gpu-tuning.yaml"]);
    assert!(
        tuning.contains("tuning:1.5.0"),
        "the upgrade is what converged: {tuning}"
    );
    assert!(tuning.contains("status: complete"), "{tuning}");
}
