//! Test fixtures: real repositories in temp dirs, set up with the git CLI (tests only).
#![allow(dead_code)]

pub mod forge_stub;
pub mod kubectl;

use std::path::{Path, PathBuf};
use std::process::Command;

/// Nodes the example fleet (`examples/fleet`) selects, and packages slow enough that its
/// rollout lasts a while.
pub const EXAMPLE_FLEET_NODES: &str = r#"
cluster:
  nodes:
    - generate: {count: 2, namePrefix: canary-, labels: {nvidia.com/gpu.present: "true", rollout.example.com/pool: canary}}
    - generate: {count: 4, namePrefix: gpu-, labels: {nvidia.com/gpu.present: "true", rollout.example.com/pool: production}}
packages:
  example/driver: {default: {duration: 2m}, rebootTakes: 3m}
"#;

/// Run git in `dir` with a fixed identity and no host configuration.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.invalid")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.invalid")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A work-tree repository on branch `main`.
pub struct WorkRepo {
    pub dir: PathBuf,
}

impl WorkRepo {
    pub fn init(dir: &Path) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        git(dir, &["init", "-q", "-b", "main"]);
        WorkRepo {
            dir: dir.to_path_buf(),
        }
    }

    pub fn write(&self, path: &str, content: &str) {
        let p = self.dir.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    pub fn remove(&self, path: &str) {
        std::fs::remove_file(self.dir.join(path)).unwrap();
    }

    #[cfg(unix)]
    pub fn symlink(&self, path: &str, target: &str) {
        let p = self.dir.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, p).unwrap();
    }

    /// Copies a directory tree (e.g. `examples/fleet`) into the work tree.
    pub fn copy_from(&self, from: &Path) {
        fn copy(from: &Path, to: &Path) {
            std::fs::create_dir_all(to).unwrap();
            for entry in std::fs::read_dir(from).unwrap() {
                let entry = entry.unwrap();
                let target = to.join(entry.file_name());
                if entry.file_type().unwrap().is_dir() {
                    copy(&entry.path(), &target);
                } else {
                    std::fs::copy(entry.path(), target).unwrap();
                }
            }
        }
        copy(from, &self.dir);
    }

    /// Stage everything and commit; returns the commit id.
    /// A bare clone of this repository at `to`, as a remote to fetch from and push to.
    pub fn clone_bare(&self, to: &Path) {
        let parent = to.parent().unwrap_or(to);
        git(
            parent,
            &[
                "clone",
                "-q",
                "--bare",
                self.dir.to_str().unwrap(),
                to.to_str().unwrap(),
            ],
        );
    }

    pub fn commit(&self, message: &str) -> String {
        git(&self.dir, &["add", "-A"]);
        git(&self.dir, &["commit", "-q", "--allow-empty", "-m", message]);
        git(&self.dir, &["rev-parse", "HEAD"])
    }
}

/// A NodeWright manifest with the given packages block (already indented by 4 spaces).
pub fn nodewright(name: &str, packages: &str) -> String {
    format!(
        "apiVersion: nodewright.nvidia.com/v1alpha1\nkind: NodeWright\nmetadata:\n  name: {name}\nspec:\n  nodeSelectors:\n    matchLabels:\n      role: gpu\n  packages:\n{packages}"
    )
}

/// A DeploymentPolicy `tiers` with compartments `canary` (batches of 1) and `production`
/// (first batch 2), for approval gates.
pub const TIERS_POLICY: &str = "apiVersion: nodewright.nvidia.com/v1alpha1
kind: DeploymentPolicy
metadata: {name: tiers}
spec:
  default: {budget: {count: 1}, strategy: {fixed: {initialBatch: 1}}}
  compartments:
    - {name: canary, selector: {matchLabels: {tier: canary}}, budget: {count: 1}, strategy: {fixed: {initialBatch: 1}}}
    - {name: production, selector: {matchLabels: {tier: production}}, budget: {count: 2}, strategy: {fixed: {initialBatch: 2}}}
";

/// `git mktree` from `entries` (`mode type id\tname` lines); returns the tree id.
pub fn mktree(dir: &Path, entries: &[String]) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("git")
        .args(["mktree", "--missing"])
        .current_dir(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(entries.join("\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A commit of `tree` (made with the git CLI, as an author of a hostile commit would).
pub fn commit_tree(dir: &Path, tree: &str) -> gix::ObjectId {
    let id = git(dir, &["commit-tree", tree, "-m", "hostile"]);
    id.parse().unwrap()
}
