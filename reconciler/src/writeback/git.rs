//! Status commits on the status branch, through gix (ARCHITECTURE §4), and the one place
//! product code runs the `git` CLI: `git push`, which gix cannot do yet (gitoxide issue 306).

use std::path::Path;
use std::process::Command;

use gix::ObjectId;

use super::render::{STATUS_DIR, StatusFile};

/// Default status branch.
pub const DEFAULT_STATUS_BRANCH: &str = "nodewright/status";

/// A status-branch write that failed, with the repository and branch named.
#[derive(Debug, thiserror::Error)]
pub enum WritebackError {
    /// A gix operation failed.
    #[error("status branch {branch} in {repo}: {message}")]
    Git {
        /// Repository path.
        repo: String,
        /// Branch.
        branch: String,
        /// What failed.
        message: String,
    },
    /// `git push` failed (after retries).
    #[error("pushing {branch} to {remote} failed: {message}")]
    Push {
        /// Remote URL (credentials never included).
        remote: String,
        /// Branch.
        branch: String,
        /// git's stderr.
        message: String,
    },
}

/// Who status commits are made by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Author {
    /// Name.
    pub name: String,
    /// Email.
    pub email: String,
}

impl Default for Author {
    fn default() -> Self {
        Author {
            name: "nodewright".into(),
            email: "nodewright@localhost".into(),
        }
    }
}

/// Writes `files` under `status/` of `branch` (replacing the folder, so files of removed
/// NodeWrights go away) and commits when the tree changed. Returns the new commit, or `None`
/// when the branch already holds exactly these files.
pub fn commit_status(
    repo_path: &Path,
    branch: &str,
    files: &[StatusFile],
    message: &str,
    author: &Author,
    time_seconds: i64,
) -> Result<Option<ObjectId>, WritebackError> {
    let files: Vec<(&str, &[u8])> = files
        .iter()
        .map(|f| (f.path.as_str(), f.content.as_bytes()))
        .collect();
    commit_files(
        repo_path,
        branch,
        &files,
        &[STATUS_DIR],
        message,
        author,
        time_seconds,
    )
}

/// Commits `files` (path, content) onto `branch` through gix, after removing the `remove`
/// paths from the branch's tree; creates the branch when missing. Returns `None` when the
/// resulting tree equals the branch's current one.
pub fn commit_files(
    repo_path: &Path,
    branch: &str,
    files: &[(&str, &[u8])],
    remove: &[&str],
    message: &str,
    author: &Author,
    time_seconds: i64,
) -> Result<Option<ObjectId>, WritebackError> {
    let err = |message: String| WritebackError::Git {
        repo: repo_path.display().to_string(),
        branch: branch.to_string(),
        message,
    };
    let repo = gix::open(repo_path).map_err(|e| err(e.to_string()))?;
    let reference = format!("refs/heads/{branch}");
    let parent: Option<ObjectId> = repo
        .try_find_reference(reference.as_str())
        .map_err(|e| err(e.to_string()))?
        .map(|mut r| r.peel_to_id().map(|id| id.detach()))
        .transpose()
        .map_err(|e| err(e.to_string()))?;
    let base_tree: ObjectId = match parent {
        Some(commit) => repo
            .find_commit(commit)
            .map_err(|e| err(e.to_string()))?
            .tree_id()
            .map_err(|e| err(e.to_string()))?
            .detach(),
        None => repo.empty_tree().id,
    };
    let mut editor = repo.edit_tree(base_tree).map_err(|e| err(e.to_string()))?;
    for path in remove {
        editor.remove(*path).map_err(|e| err(e.to_string()))?;
    }
    for (path, content) in files {
        let blob = repo.write_blob(content).map_err(|e| err(e.to_string()))?;
        editor
            .upsert(*path, gix::object::tree::EntryKind::Blob, blob.detach())
            .map_err(|e| err(e.to_string()))?;
    }
    let tree = editor.write().map_err(|e| err(e.to_string()))?.detach();
    if parent.is_some() && tree == base_tree {
        return Ok(None);
    }
    let signature = gix::actor::Signature {
        name: author.name.as_str().into(),
        email: author.email.as_str().into(),
        time: gix::date::Time::new(time_seconds, 0),
    };
    let mut buf = gix::date::parse::TimeBuf::default();
    let sig = signature.to_ref(&mut buf);
    let id = repo
        .commit_as(sig, sig, reference.as_str(), message, tree, parent)
        .map_err(|e| err(e.to_string()))?;
    Ok(Some(id.detach()))
}

/// The subjects of the last `limit` commits of `branch`, newest first, with short ids
/// (`git log --oneline`).
pub fn log_oneline(repo_path: &Path, branch: &str, limit: usize) -> Vec<String> {
    let Ok(repo) = gix::open(repo_path) else {
        return Vec::new();
    };
    let Ok(Some(mut reference)) = repo.try_find_reference(format!("refs/heads/{branch}").as_str())
    else {
        return Vec::new();
    };
    let Ok(tip) = reference.peel_to_id() else {
        return Vec::new();
    };
    let Ok(walk) = repo.rev_walk([tip.detach()]).all() else {
        return Vec::new();
    };
    walk.filter_map(Result::ok)
        .take(limit)
        .filter_map(|info| {
            let commit = repo.find_commit(info.id).ok()?;
            let subject = commit.message().ok()?.summary().to_string();
            Some(format!("{} {subject}", &info.id.to_string()[..7]))
        })
        .collect()
}

/// Reads `status/<file>` from the tip of `branch`, if present.
pub fn read_status_file(repo_path: &Path, branch: &str, file: &str) -> Option<String> {
    let repo = gix::open(repo_path).ok()?;
    let mut reference = repo
        .try_find_reference(format!("refs/heads/{branch}").as_str())
        .ok()??;
    let commit = repo.find_commit(reference.peel_to_id().ok()?).ok()?;
    let tree = commit.tree().ok()?;
    let entry = tree
        .lookup_entry_by_path(format!("{STATUS_DIR}/{file}"))
        .ok()??;
    let blob = entry.object().ok()?;
    String::from_utf8(blob.data.clone()).ok()
}

/// Every `status/*.yaml` document on the tip of `branch`: (file name, content), by name.
pub fn read_status_documents(repo_path: &Path, branch: &str) -> Vec<(String, String)> {
    let Ok(repo) = gix::open(repo_path) else {
        return Vec::new();
    };
    let Ok(Some(mut reference)) = repo.try_find_reference(format!("refs/heads/{branch}").as_str())
    else {
        return Vec::new();
    };
    let Some(tree) = reference
        .peel_to_id()
        .ok()
        .and_then(|id| repo.find_commit(id).ok())
        .and_then(|c| c.tree().ok())
    else {
        return Vec::new();
    };
    let Ok(Some(dir)) = tree.lookup_entry_by_path(STATUS_DIR) else {
        return Vec::new();
    };
    let Ok(dir) = dir.object().and_then(|o| o.peel_to_tree()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in dir.iter().filter_map(Result::ok) {
        let name = entry.filename().to_string();
        if !name.ends_with(".yaml") {
            continue;
        }
        if let Some(text) = repo
            .find_object(entry.oid())
            .ok()
            .and_then(|blob| String::from_utf8(blob.data.clone()).ok())
        {
            out.push((name, text));
        }
    }
    out.sort();
    out
}

/// How `git push` authenticates (kept out of argv where it is a secret).
#[derive(Clone, Debug, Default)]
pub struct PushAuth {
    /// `Authorization` header for https remotes (e.g. `Basic …` built from a token).
    pub http_authorization: Option<String>,
    /// `core.sshCommand` for ssh remotes.
    pub ssh_command: Option<String>,
}

/// Pushes `branch` from the repository at `repo_path` to `remote_url`. A rejected push (the
/// remote moved) is reported as `Ok(false)` so the caller can fetch, re-commit on top and try
/// again; other failures are errors.
pub fn push(
    repo_path: &Path,
    remote_url: &str,
    branch: &str,
    auth: &PushAuth,
) -> Result<bool, WritebackError> {
    let mut cmd = Command::new("git");
    cmd.arg("-C").arg(repo_path);
    if let Some(header) = &auth.http_authorization {
        // Passed through the environment, not argv, so it does not show in process listings.
        cmd.env("GIT_CONFIG_COUNT", "1")
            .env("GIT_CONFIG_KEY_0", "http.extraHeader")
            .env("GIT_CONFIG_VALUE_0", format!("Authorization: {header}"));
    }
    if let Some(ssh) = &auth.ssh_command {
        cmd.env("GIT_SSH_COMMAND", ssh);
    }
    cmd.env("GIT_TERMINAL_PROMPT", "0");
    cmd.args([
        "push",
        "--porcelain",
        remote_url,
        &format!("refs/heads/{branch}:refs/heads/{branch}"),
    ]);
    let output = cmd.output().map_err(|e| WritebackError::Push {
        remote: remote_url.to_string(),
        branch: branch.to_string(),
        message: format!("cannot run git (the reconciler image must contain it): {e}"),
    })?;
    if output.status.success() {
        return Ok(true);
    }
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if text.contains("[rejected]")
        || text.contains("non-fast-forward")
        || text.contains("fetch first")
    {
        return Ok(false);
    }
    Err(WritebackError::Push {
        remote: remote_url.to_string(),
        branch: branch.to_string(),
        message: text.trim().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn file(path: &str, content: &str) -> StatusFile {
        StatusFile {
            path: path.into(),
            content: content.into(),
        }
    }

    #[test]
    fn commits_status_files_only_when_they_change_and_drops_removed_ones() {
        let dir = tempfile::tempdir().unwrap();
        git(dir.path(), &["init", "-q", "-b", "main"]);
        let files = vec![
            file("status/a.yaml", "status: in_progress\n"),
            file("status/README.md", "# s\n"),
        ];
        let first = commit_status(
            dir.path(),
            DEFAULT_STATUS_BRANCH,
            &files,
            "status: a: 0/1 complete",
            &Author::default(),
            1_767_225_600,
        )
        .unwrap()
        .unwrap();
        assert!(
            commit_status(
                dir.path(),
                DEFAULT_STATUS_BRANCH,
                &files,
                "again",
                &Author::default(),
                1_767_225_601
            )
            .unwrap()
            .is_none()
        );
        let next = vec![
            file("status/b.yaml", "status: complete\n"),
            file("status/README.md", "# s\n"),
        ];
        let second = commit_status(
            dir.path(),
            DEFAULT_STATUS_BRANCH,
            &next,
            "status: b: complete",
            &Author::default(),
            1_767_225_602,
        )
        .unwrap()
        .unwrap();
        assert_ne!(first, second);
        let listing = git(
            dir.path(),
            &["ls-tree", "-r", "--name-only", "nodewright/status"],
        );
        assert_eq!(listing, "status/README.md\nstatus/b.yaml\n");
        let log = git(dir.path(), &["log", "--format=%s|%an", "nodewright/status"]);
        assert_eq!(
            log,
            "status: b: complete|nodewright\nstatus: a: 0/1 complete|nodewright\n"
        );
        assert_eq!(
            read_status_file(dir.path(), DEFAULT_STATUS_BRANCH, "b.yaml").as_deref(),
            Some("status: complete\n")
        );
        let oneline = log_oneline(dir.path(), DEFAULT_STATUS_BRANCH, 10);
        assert_eq!(oneline.len(), 2);
        assert!(oneline[0].ends_with(" status: b: complete"));
        // The tracked branch is untouched.
        assert!(
            Command::new("git")
                .arg("-C")
                .arg(dir.path())
                .args(["rev-parse", "--verify", "-q", "main"])
                .output()
                .unwrap()
                .stdout
                .is_empty()
        );
    }

    #[test]
    fn push_reports_rejection_so_the_caller_can_rebase() {
        let remote = tempfile::tempdir().unwrap();
        git(remote.path(), &["init", "-q", "--bare"]);
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        for d in [a.path(), b.path()] {
            git(d, &["init", "-q"]);
        }
        let url = remote.path().to_str().unwrap();
        commit_status(
            a.path(),
            "s",
            &[file("status/x.yaml", "1")],
            "a1",
            &Author::default(),
            1,
        )
        .unwrap();
        assert!(push(a.path(), url, "s", &PushAuth::default()).unwrap());
        commit_status(
            b.path(),
            "s",
            &[file("status/x.yaml", "2")],
            "b1",
            &Author::default(),
            2,
        )
        .unwrap();
        assert!(
            !push(b.path(), url, "s", &PushAuth::default()).unwrap(),
            "an unrelated history is rejected"
        );
    }
}
