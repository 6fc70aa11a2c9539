//! Status commits on the status branch, through gix (ARCHITECTURE §4), and the one place
//! product code runs the `git` CLI: `git push`, which gix cannot do yet (gitoxide issue 306).

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

use gix::ObjectId;

use super::render::{STATUS_DIR, StatusFile};
use crate::source::remote_call::{self, Answer, RemoteCall};
use crate::source::repo::{RemoteSpec, msg};

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

impl Author {
    /// This author at `time_seconds` (UTC), as commits record it.
    fn signature(&self, time_seconds: i64) -> gix::actor::Signature {
        gix::actor::Signature {
            name: self.name.as_str().into(),
            email: self.email.as_str().into(),
            time: gix::date::Time::new(time_seconds, 0),
        }
    }
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
    let tree = edited_tree(&repo, base_tree, files, remove).map_err(err)?;
    if parent.is_some() && tree == base_tree {
        return Ok(None);
    }
    let signature = author.signature(time_seconds);
    let mut buf = gix::date::parse::TimeBuf::default();
    let sig = signature.to_ref(&mut buf);
    let id = repo
        .commit_as(sig, sig, reference.as_str(), message, tree, parent)
        .map_err(|e| err(e.to_string()))?;
    Ok(Some(id.detach()))
}

/// Commits `files` (path, content) on top of commit `parent` and points `branch` at the new
/// commit whatever it pointed to before (an approval branch is remade from the tracked
/// branch's head each time, never built on its own history).
pub fn commit_branch_onto(
    repo_path: &Path,
    branch: &str,
    parent: ObjectId,
    files: &[(&str, &[u8])],
    message: &str,
    author: &Author,
    time_seconds: i64,
) -> Result<ObjectId, WritebackError> {
    let err = |message: String| WritebackError::Git {
        repo: repo_path.display().to_string(),
        branch: branch.to_string(),
        message,
    };
    let repo = gix::open(repo_path).map_err(|e| err(msg(e)))?;
    let base_tree = repo
        .find_commit(parent)
        .map_err(|e| err(msg(e)))?
        .tree_id()
        .map_err(|e| err(msg(e)))?
        .detach();
    let tree = edited_tree(&repo, base_tree, files, &[]).map_err(err)?;
    let signature = author.signature(time_seconds);
    let mut buf = gix::date::parse::TimeBuf::default();
    let sig = signature.to_ref(&mut buf);
    let commit = repo
        .new_commit_as(sig, sig, message, tree, [parent])
        .map_err(|e| err(msg(e)))?
        .id;
    repo.reference(
        format!("refs/heads/{branch}").as_str(),
        commit,
        gix::refs::transaction::PreviousValue::Any,
        message,
    )
    .map_err(|e| err(msg(e)))?;
    Ok(commit)
}

/// `base_tree` without the `remove` paths and with `files` (path, content) written; the new
/// tree's id (its objects are stored).
fn edited_tree(
    repo: &gix::Repository,
    base_tree: ObjectId,
    files: &[(&str, &[u8])],
    remove: &[&str],
) -> Result<ObjectId, String> {
    let mut editor = repo.edit_tree(base_tree).map_err(msg)?;
    for path in remove {
        editor.remove(*path).map_err(msg)?;
    }
    for (path, content) in files {
        let blob = repo.write_blob(content).map_err(msg)?;
        editor
            .upsert(*path, gix::object::tree::EntryKind::Blob, blob.detach())
            .map_err(msg)?;
    }
    Ok(editor.write().map_err(msg)?.detach())
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

/// Where the status branch is read from: the local branch, else its remote-tracking copy
/// (`refs/remotes/origin/<branch>` first, then any other remote's), as an ordinary clone has it.
/// Returns the full ref name and its commit.
pub fn status_tip(repo: &gix::Repository, branch: &str) -> Option<(String, ObjectId)> {
    let mut candidates = vec![
        format!("refs/heads/{branch}"),
        format!("refs/remotes/origin/{branch}"),
    ];
    if let Ok(references) = repo.references()
        && let Ok(remote_branches) = references.remote_branches()
    {
        let suffix = format!("/{branch}");
        let mut others: Vec<String> = remote_branches
            .filter_map(Result::ok)
            .map(|r| r.name().as_bstr().to_string())
            .filter(|name| {
                name.strip_prefix("refs/remotes/")
                    .and_then(|rest| rest.strip_suffix(suffix.as_str()))
                    .is_some_and(|remote| !remote.is_empty() && !remote.contains('/'))
            })
            .collect();
        others.sort();
        candidates.extend(others);
    }
    candidates.into_iter().find_map(|name| {
        let mut reference = repo.try_find_reference(name.as_str()).ok()??;
        let id = reference.peel_to_id().ok()?.detach();
        Some((name, id))
    })
}

/// The status documents of a repository's status branch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatusDocuments {
    /// The ref they were read from (`refs/heads/…` or `refs/remotes/<remote>/…`).
    pub reference: String,
    /// `(file name, content)` of every NodeWright's `status/*.yaml`, by name.
    pub files: Vec<(String, String)>,
    /// `status/_source.yaml`: the commit in force and a rejected newer one.
    pub source: Option<String>,
}

/// Every NodeWright's `status/*.yaml` document on the tip of `branch` ([`status_tip`]), and
/// the source record (`status/_source.yaml`) when present; `None` when the
/// repository has no such branch, an error when it cannot be opened or read.
pub fn read_status_documents(
    repo_path: &Path,
    branch: &str,
) -> Result<Option<StatusDocuments>, WritebackError> {
    let err = |message: String| WritebackError::Git {
        repo: repo_path.display().to_string(),
        branch: branch.to_string(),
        message,
    };
    let repo = gix::open(repo_path).map_err(|e| err(crate::source::repo::msg(e)))?;
    let Some((reference, tip)) = status_tip(&repo, branch) else {
        return Ok(None);
    };
    let tree = repo
        .find_commit(tip)
        .map_err(|e| err(crate::source::repo::msg(e)))?
        .tree()
        .map_err(|e| err(crate::source::repo::msg(e)))?;
    let mut files = Vec::new();
    let mut source = None;
    let dir = tree
        .lookup_entry_by_path(STATUS_DIR)
        .map_err(|e| err(crate::source::repo::msg(e)))?;
    if let Some(dir) = dir {
        let dir = dir
            .object()
            .map_err(|e| err(crate::source::repo::msg(e)))?
            .peel_to_tree()
            .map_err(|e| err(crate::source::repo::msg(e)))?;
        for entry in dir.iter().filter_map(Result::ok) {
            let name = entry.filename().to_string();
            if !name.ends_with(".yaml") {
                continue;
            }
            let blob = repo
                .find_object(entry.oid())
                .map_err(|e| err(crate::source::repo::msg(e)))?;
            if let Ok(text) = String::from_utf8(blob.data.clone()) {
                match name == super::source::SOURCE_FILE {
                    true => source = Some(text),
                    false => files.push((name, text)),
                }
            }
        }
    }
    files.sort();
    Ok(Some(StatusDocuments {
        reference,
        files,
        source,
    }))
}

/// Pushes `branch` from the repository at `repo_path` to `remote` with the remote's own
/// credentials and trust (the ones fetch uses). A rejected push (the remote moved) is reported
/// as `Ok(false)` so the caller can fetch, re-commit on top and try again; other failures are
/// errors.
///
/// Guarantees: the secret never appears on a command line or in git's environment. An https
/// token or password reaches git through its built-in `store` credential helper reading a
/// file in a private folder that lives only for this push; the host's git configuration
/// (credential helpers, url rewrites) is ignored as it is for fetch; `GIT_SSL_CAINFO` pins
/// the CA file; ssh runs the same command as fetch.
pub fn push(repo_path: &Path, remote: &RemoteSpec, branch: &str) -> Result<bool, WritebackError> {
    push_branch(repo_path, remote, branch, false)
}

/// [`push`], replacing the remote branch whatever it holds when `force` is set (an approval
/// branch is remade on the tracked branch's newest head). A remote that does not answer within
/// its timeout fails the push.
pub fn push_branch(
    repo_path: &Path,
    remote: &RemoteSpec,
    branch: &str,
    force: bool,
) -> Result<bool, WritebackError> {
    let (repo, pushed_to, name) = (repo_path.to_path_buf(), remote.clone(), branch.to_owned());
    let call = RemoteCall::start(move |give_up| {
        push_branch_unless(&repo, &pushed_to, &name, force, give_up)
    });
    let failed = |message: String| WritebackError::Push {
        remote: remote.url.clone(),
        branch: branch.to_owned(),
        message,
    };
    match call.look(remote.timeout, remote.timeout) {
        Answer::Ready(pushed) => pushed,
        Answer::Waiting(_) | Answer::TimedOut(_) => {
            Err(failed(remote_call::no_answer("push", remote.timeout)))
        }
        Answer::Vanished => Err(failed("the push ended without an answer".to_owned())),
    }
}

/// [`push_branch`], ending git (an error) once `give_up` is set: a remote that hangs is given
/// up by the caller's deadline.
pub fn push_branch_unless(
    repo_path: &Path,
    remote: &RemoteSpec,
    branch: &str,
    force: bool,
    give_up: &AtomicBool,
) -> Result<bool, WritebackError> {
    let url = remote.transport_url();
    let push_err = |message: String| WritebackError::Push {
        remote: remote.url.clone(),
        branch: branch.to_string(),
        message,
    };
    remote
        .refuse_clear_text_credentials()
        .map_err(|e| push_err(e.to_string()))?;
    let mut cmd = Command::new("git");
    cmd.arg("-C").arg(repo_path);
    cmd.env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env_remove("GIT_ASKPASS")
        .env_remove("SSH_ASKPASS");
    if let Some(var) = remote.credentials.secret_env_var() {
        cmd.env_remove(var);
    }
    // An empty `credential.helper` drops any helper configured before ours.
    let mut config = vec![
        ("credential.helper".to_owned(), String::new()),
        // An https remote that stops sending ends the push rather than holding it open.
        ("http.lowSpeedLimit".to_owned(), "1".to_owned()),
        ("http.lowSpeedTime".to_owned(), "60".to_owned()),
    ];
    let credential_folder = match remote
        .credentials
        .account()
        .map_err(|e| push_err(e.to_string()))?
    {
        Some(account) => {
            let folder = credential_store(&url, &account).map_err(|e| {
                push_err(format!("cannot prepare the credentials for git push: {e}"))
            })?;
            config.push((
                "credential.helper".to_owned(),
                format!(
                    "store --file={}",
                    folder.path().join("credentials").display()
                ),
            ));
            Some(folder)
        }
        None => None,
    };
    if let Some(ssh) = remote.ssh_command() {
        cmd.env("GIT_SSH_COMMAND", ssh);
    }
    if let Some(ca_file) = &remote.ca_file {
        // The environment variable wins over any `http.sslCAInfo`, and over a
        // `GIT_SSL_CAINFO` this process may have inherited.
        cmd.env("GIT_SSL_CAINFO", ca_file);
    }
    cmd.env("GIT_CONFIG_COUNT", config.len().to_string());
    for (i, (key, value)) in config.iter().enumerate() {
        cmd.env(format!("GIT_CONFIG_KEY_{i}"), key)
            .env(format!("GIT_CONFIG_VALUE_{i}"), value);
    }
    cmd.args([
        "push",
        "--porcelain",
        &url,
        &format!(
            "{}refs/heads/{branch}:refs/heads/{branch}",
            if force { "+" } else { "" }
        ),
    ]);
    let output = output_unless(cmd, give_up);
    drop(credential_folder);
    let (success, text) = match output {
        Ok(Some(output)) => output,
        Ok(None) => {
            return Err(push_err(
                "given up: the remote did not answer in time".into(),
            ));
        }
        Err(e) => {
            return Err(push_err(format!(
                "cannot run git (the reconciler image must contain it): {e}"
            )));
        }
    };
    if success {
        return Ok(true);
    }
    if text.contains("[rejected]")
        || text.contains("non-fast-forward")
        || text.contains("fetch first")
    {
        return Ok(false);
    }
    Err(push_err(explain_push_failure(text.trim())))
}

/// Runs `cmd` to its end, or kills it once `give_up` is set (`None`): whether it succeeded and
/// what it printed. The output goes to a file rather than a pipe, so a helper git started (ssh,
/// the https transport) that outlives a killed git holds nothing up.
fn output_unless(
    mut cmd: Command,
    give_up: &AtomicBool,
) -> std::io::Result<Option<(bool, String)>> {
    use std::io::{Read, Seek};
    let mut log = tempfile::tempfile()?;
    cmd.stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log.try_clone()?);
    let mut child = cmd.spawn()?;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if give_up.load(Ordering::Relaxed) {
            // Already ended is as good as killed.
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut text = Vec::new();
    log.rewind()?;
    log.read_to_end(&mut text)?;
    Ok(Some((
        status.success(),
        String::from_utf8_lossy(&text).into_owned(),
    )))
}

/// git's own words, one line, with what to do for the failures a configuration causes.
fn explain_push_failure(git_output: &str) -> String {
    let text = git_output
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    let hint = if git_output.contains("Host key verification failed") {
        Some(
            "the server's ssh host key is not in known_hosts: add it to known_hosts in --git-credentials-dir, or pass --git-ssh-accept-new to trust a host key on first use",
        )
    } else if git_output.contains("Authentication failed")
        || git_output.contains("could not read Username")
        // git's words for an HTTP 403; a bare "403" also matches a port or a commit id.
        || git_output.contains("returned error: 403")
    {
        Some(
            "the remote refused the credentials: check token/username in --git-credentials-dir and that they may push",
        )
    } else if git_output.contains("certificate") {
        Some(
            "the server's TLS certificate is not trusted: pass its CA certificate with --git-ca-file",
        )
    } else if git_output.contains("Permission denied (publickey") {
        Some(
            "the remote refused the ssh key: check ssh-privatekey in --git-credentials-dir and that the key may push",
        )
    } else {
        None
    };
    match hint {
        Some(hint) => format!("{text} ({hint})"),
        None => text,
    }
}

/// A private folder (mode 0700, removed on drop) holding `credentials` in the format of git's
/// `store` helper, with the identity for `url`'s scheme and host.
fn credential_store(
    url: &str,
    account: &gix::sec::identity::Account,
) -> std::io::Result<tempfile::TempDir> {
    use std::io::Write;
    let invalid = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, why.to_owned());
    let parsed = gix::url::parse(gix::bstr::BStr::new(url)).map_err(|_| invalid("not a URL"))?;
    let host = parsed
        .host()
        .ok_or_else(|| invalid("the URL names no host"))?;
    let authority = match parsed.port {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    };
    let folder = tempfile::Builder::new()
        .prefix("nodewright-push-")
        .tempdir()?;
    let mut file = std::fs::OpenOptions::new();
    file.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        file.mode(0o600);
    }
    let mut file = file.open(folder.path().join("credentials"))?;
    writeln!(
        file,
        "{}://{}:{}@{authority}",
        parsed.scheme.as_str(),
        percent_encode(&account.username),
        percent_encode(&account.password),
    )?;
    Ok(folder)
}

/// Percent-encodes everything but RFC 3986 unreserved characters (git's `store` helper
/// decodes `%XX` in user names and passwords).
fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_push_failure_is_explained_by_what_git_said_not_by_digits_in_the_url() {
        let untrusted = "fatal: unable to access 'https://127.0.0.1:40349/git/fleet.git/': server certificate verification failed. CAfile: /etc/ssl/certs/ca-certificates.crt CRLfile: none";
        assert!(
            explain_push_failure(untrusted).ends_with(
                "(the server's TLS certificate is not trusted: pass its CA certificate with --git-ca-file)"
            )
        );
        let forbidden = "fatal: unable to access 'https://127.0.0.1:8443/git/fleet.git/': The requested URL returned error: 403";
        assert!(explain_push_failure(forbidden).contains("the remote refused the credentials"),);
    }

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
        let url = RemoteSpec::anonymous(remote.path().to_str().unwrap());
        commit_status(
            a.path(),
            "s",
            &[file("status/x.yaml", "1")],
            "a1",
            &Author::default(),
            1,
        )
        .unwrap();
        assert!(push(a.path(), &url, "s").unwrap());
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
            !push(b.path(), &url, "s").unwrap(),
            "an unrelated history is rejected"
        );
    }
}
