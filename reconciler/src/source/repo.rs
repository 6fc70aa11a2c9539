//! Repository access through `gix` only (ARCHITECTURE §2.2): open a local repository, mirror a
//! remote into a bare cache repository (clone = init + first fetch), resolve revisions, read
//! commits without a work tree.
//!
//! Remotes are mirrored with `+refs/heads/*:refs/heads/*` and `+refs/tags/*:refs/tags/*`, so
//! a branch, tag or commit id resolves the same way in the cache as on the remote.

use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use gix::ObjectId;
use sha2::{Digest, Sha256};

use super::remote_call::{Answer, RemoteCall};

/// A failure reaching or reading a repository, with the repository and operation it concerns.
#[derive(Debug, thiserror::Error)]
pub enum RepoError {
    /// The repository could not be opened.
    #[error("cannot open repository {path}: {message}")]
    Open {
        /// Where we looked.
        path: PathBuf,
        /// gix's explanation.
        message: String,
    },
    /// Creating or fetching into the cache repository failed.
    #[error("cannot fetch {url} into {cache}: {message}")]
    Fetch {
        /// The remote (credentials never included).
        url: String,
        /// The cache repository.
        cache: PathBuf,
        /// gix's explanation.
        message: String,
    },
    /// A revision does not name a commit.
    #[error("revision {rev:?} does not name a commit in {repo}: {message}")]
    Resolve {
        /// The revision as given.
        rev: String,
        /// The repository.
        repo: PathBuf,
        /// Why.
        message: String,
    },
    /// The status branch holds write-back documents, never desired state.
    #[error(
        "revision {rev:?} is the status branch {branch:?}; it holds rollout status, not desired state"
    )]
    StatusBranch {
        /// The revision as given.
        rev: String,
        /// The configured status branch.
        branch: String,
    },
    /// Reading an object failed.
    #[error("cannot read {what} in {repo}: {message}")]
    Read {
        /// Which object.
        what: String,
        /// The repository.
        repo: PathBuf,
        /// Why.
        message: String,
    },
    /// Credentials would travel in clear text.
    #[error(
        "refusing to send credentials to {url} over plain http://: anyone on the network path could read them; use the https:// URL of the repository (with --git-ca-file when its certificate comes from a private CA) or an ssh:// URL with a key"
    )]
    ClearTextCredentials {
        /// The remote.
        url: String,
    },
    /// The CA file for https remotes could not be read.
    #[error("cannot use {path} as the CA certificates for https remotes: {message}")]
    CaFile {
        /// The file given with `--git-ca-file`.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// A credential source could not be read.
    #[error("cannot read credential from {source_desc}: {message}")]
    Credential {
        /// `file <path>` or `env <VAR>`.
        source_desc: String,
        /// Why.
        message: String,
    },
}

/// Where a secret comes from; secrets are never written in configuration or command lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretSource {
    /// Read a file; surrounding whitespace is trimmed.
    File(PathBuf),
    /// Read an environment variable.
    Env(String),
}

impl SecretSource {
    /// Read the secret now (every fetch re-reads, so rotated secrets are picked up).
    pub fn read(&self) -> Result<String, RepoError> {
        match self {
            SecretSource::File(path) => std::fs::read_to_string(path)
                .map(|s| s.trim().to_owned())
                .map_err(|e| RepoError::Credential {
                    source_desc: format!("file {}", path.display()),
                    message: e.to_string(),
                }),
            SecretSource::Env(var) => {
                std::env::var(var)
                    .map(|s| s.trim().to_owned())
                    .map_err(|e| RepoError::Credential {
                        source_desc: format!("env {var}"),
                        message: e.to_string(),
                    })
            }
        }
    }
}

/// How to authenticate to a remote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Credentials {
    /// Anonymous (local paths, `file://`, public https).
    #[default]
    None,
    /// https with a token as password; `username` defaults to `x-access-token` (GitHub's
    /// convention, also accepted by GitLab for project/personal access tokens as `oauth2`).
    Token {
        /// User name sent with the token.
        username: Option<String>,
        /// The token.
        token: SecretSource,
    },
    /// https basic authentication.
    Basic {
        /// User name.
        username: String,
        /// Password.
        password: SecretSource,
    },
    /// ssh with a private key file; the server's host key must already be known unless
    /// `accept_new_host_keys` is set.
    SshKey {
        /// Private key file passed to `ssh -i`.
        key_file: PathBuf,
        /// known_hosts file to check host keys against (else ssh's default files).
        known_hosts: Option<PathBuf>,
        /// Trust a host key seen for the first time (`StrictHostKeyChecking=accept-new`) and
        /// record it; a changed key is still refused.
        accept_new_host_keys: bool,
    },
}

impl Credentials {
    /// The https identity to offer (user name and secret, read now), if any.
    pub fn account(&self) -> Result<Option<gix::sec::identity::Account>, RepoError> {
        Ok(match self {
            Credentials::Token { username, token } => Some(gix::sec::identity::Account {
                username: username
                    .clone()
                    .unwrap_or_else(|| "x-access-token".to_owned()),
                password: token.read()?,
                oauth_refresh_token: None,
            }),
            Credentials::Basic { username, password } => Some(gix::sec::identity::Account {
                username: username.clone(),
                password: password.read()?,
                oauth_refresh_token: None,
            }),
            Credentials::None | Credentials::SshKey { .. } => None,
        })
    }

    /// The environment variable holding the secret, which child processes must not inherit.
    pub fn secret_env_var(&self) -> Option<&str> {
        match self {
            Credentials::Token {
                token: SecretSource::Env(var),
                ..
            }
            | Credentials::Basic {
                password: SecretSource::Env(var),
                ..
            } => Some(var),
            _ => None,
        }
    }
}

/// A remote to mirror.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteSpec {
    /// URL (`file://`, `https://`, `ssh://`, scp-like `git@host:path`, or a local path).
    pub url: String,
    /// Authentication.
    pub credentials: Credentials,
    /// Fetch only this many commits of each ref's history (`None` = full history).
    pub depth: Option<NonZeroU32>,
    /// PEM certificates to trust for https remotes instead of the system roots (a private CA);
    /// fetch and push both use it.
    pub ca_file: Option<PathBuf>,
    /// How long a fetch or a push may wait for the remote before it has failed
    /// (`--git-timeout`).
    pub timeout: Duration,
}

/// How long a remote may take to answer a fetch or a push by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

impl RemoteSpec {
    /// An anonymous, full-history remote.
    pub fn anonymous(url: impl Into<String>) -> Self {
        RemoteSpec {
            url: url.into(),
            credentials: Credentials::None,
            depth: None,
            ca_file: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// The URL handed to the transport: local paths become `file://` URLs.
    pub fn transport_url(&self) -> String {
        remote_url(&self.url)
    }

    /// Refuses credentials for a plain `http://` remote before anything is sent.
    pub fn refuse_clear_text_credentials(&self) -> Result<(), RepoError> {
        let sends_secret = matches!(
            self.credentials,
            Credentials::Token { .. } | Credentials::Basic { .. }
        );
        if sends_secret && self.transport_url().starts_with("http://") {
            return Err(RepoError::ClearTextCredentials {
                url: self.url.clone(),
            });
        }
        Ok(())
    }

    /// The `ssh` invocation for an ssh key: only that key, never a prompt, and host keys
    /// checked strictly (against the given known_hosts file, else ssh's default ones) unless
    /// first-use trust was asked for. Fetch (gix's ssh transport) and push (`git push`) both
    /// run exactly this.
    pub fn ssh_command(&self) -> Option<String> {
        let Credentials::SshKey {
            key_file,
            known_hosts,
            accept_new_host_keys,
        } = &self.credentials
        else {
            return None;
        };
        let mut cmd = format!(
            // A server that stops answering ends the connection within about a minute.
            "ssh -i {} -o IdentitiesOnly=yes -o BatchMode=yes -o ConnectTimeout=30 -o ServerAliveInterval=15 -o ServerAliveCountMax=4",
            shell_quote(&key_file.to_string_lossy())
        );
        cmd.push_str(if *accept_new_host_keys {
            " -o StrictHostKeyChecking=accept-new"
        } else {
            " -o StrictHostKeyChecking=yes"
        });
        if let Some(kh) = known_hosts {
            cmd.push_str(&format!(
                " -o UserKnownHostsFile={}",
                shell_quote(&kh.to_string_lossy())
            ));
        }
        Some(cmd)
    }

    /// The cache directory for this remote under `cache_root`: one bare repository per URL,
    /// named by a digest so any URL maps to a safe directory name.
    pub fn cache_dir(&self, cache_root: &Path) -> PathBuf {
        let digest = Sha256::digest(self.url.as_bytes());
        cache_root.join(format!("{}.git", hex::encode(&digest[..12])))
    }

    /// In-memory git configuration that wires the ssh key into gix's ssh transport.
    fn config_overrides(&self) -> Vec<String> {
        let mut out = vec![
            // A bare mirror never records reflogs, but gix wants a committer for ref edits.
            "user.name=nodewright".to_owned(),
            "user.email=nodewright@localhost".to_owned(),
        ];
        if let Some(cmd) = self.ssh_command() {
            out.push(format!("core.sshCommand={cmd}"));
        }
        out
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The outcome of a fetch: which refs moved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FetchOutcome {
    /// `(ref name, new commit)` for every ref created or updated by this fetch.
    pub updated: Vec<(String, ObjectId)>,
}

/// A commit's signature header value and the exact bytes it signs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitSignature {
    /// The `gpgsig` header value (armored SSH or OpenPGP signature).
    pub signature: Vec<u8>,
    /// The commit object without the signature header: what the signer signed.
    pub payload: Vec<u8>,
}

/// An opened repository (local, or the bare cache of a remote). Cheap to clone and `Send +
/// Sync`; each operation works on a thread-local handle.
#[derive(Clone)]
pub struct GitRepo {
    repo: gix::ThreadSafeRepository,
    path: PathBuf,
    remote: Option<RemoteSpec>,
}

impl std::fmt::Debug for GitRepo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitRepo")
            .field("path", &self.path)
            .field("remote", &self.remote.as_ref().map(|r| &r.url))
            .finish()
    }
}

/// The repository's local branches by short name but `unlike` (at most a dozen, then `…`):
/// what a revision that names none of them could have meant.
fn local_branches(repo: &gix::Repository, unlike: Option<&str>) -> Vec<String> {
    const SHOWN: usize = 12;
    let Ok(references) = repo.references() else {
        return Vec::new();
    };
    let Ok(branches) = references.local_branches() else {
        return Vec::new();
    };
    let mut names: Vec<String> = branches
        .filter_map(Result::ok)
        .map(|r| r.name().shorten().to_string())
        .filter(|name| Some(name.as_str()) != unlike)
        .collect();
    names.sort();
    if names.len() > SHOWN {
        names.truncate(SHOWN);
        names.push("…".to_string());
    }
    names
}

/// The whole cause chain on one line, each cause's Display once, e.g. "Transport handshake
/// failed: … invalid peer certificate: UnknownIssuer".
pub(crate) fn msg(e: impl std::error::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current: Option<&dyn std::error::Error> = Some(&e);
    while let Some(err) = current {
        let text = err.to_string();
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        current = err.source();
    }
    parts.join(": ")
}

impl GitRepo {
    /// Open an existing repository (with or without work tree) at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, RepoError> {
        let path = path.as_ref().to_path_buf();
        let repo = gix::open_opts(&path, open_options(&[])).map_err(|e| RepoError::Open {
            path: path.clone(),
            message: msg(e),
        })?;
        Ok(GitRepo {
            repo: repo.into_sync(),
            path,
            remote: None,
        })
    }

    /// Mirror `remote` into its cache directory under `cache_root` — creating the bare cache
    /// repository on first use (a clone), fetching into it afterwards — and open it.
    pub fn sync_remote(
        remote: &RemoteSpec,
        cache_root: &Path,
    ) -> Result<(Self, FetchOutcome), RepoError> {
        let git = Self::open_mirror(remote, cache_root)?;
        let outcome = git.fetch()?;
        Ok((git, outcome))
    }

    /// Opens the mirror of `remote` under `cache_root` as an earlier start left it (an empty
    /// one on first use), without fetching.
    pub fn open_mirror(remote: &RemoteSpec, cache_root: &Path) -> Result<Self, RepoError> {
        let cache = remote.cache_dir(cache_root);
        let fetch_err = |message: String| RepoError::Fetch {
            url: remote.url.clone(),
            cache: cache.clone(),
            message,
        };
        if !cache.join("HEAD").exists() {
            std::fs::create_dir_all(cache_root).map_err(|e| fetch_err(msg(e)))?;
            gix::init_bare(&cache).map_err(|e| fetch_err(msg(e)))?;
        }
        let overrides = remote.config_overrides();
        let repo =
            gix::open_opts(&cache, open_options(&overrides)).map_err(|e| fetch_err(msg(e)))?;
        Ok(GitRepo {
            repo: repo.into_sync(),
            path: cache.clone(),
            remote: Some(remote.clone()),
        })
    }

    /// Fetch the configured remote again (a no-op error for a local repository opened with
    /// [`GitRepo::open`], which has nothing to fetch).
    pub fn fetch(&self) -> Result<FetchOutcome, RepoError> {
        let Some(remote) = &self.remote else {
            return Ok(FetchOutcome::default());
        };
        let git = self.clone();
        let call = RemoteCall::start(move |give_up| git.fetch_unless(give_up));
        match call.look(remote.timeout, remote.timeout) {
            Answer::Ready(outcome) => outcome,
            Answer::Waiting(_) | Answer::TimedOut(_) => Err(self.no_answer(remote.timeout)),
            Answer::Vanished => Err(self.fetch_vanished()),
        }
    }

    /// The error of a fetch the remote did not answer within `after`.
    pub fn no_answer(&self, after: Duration) -> RepoError {
        self.fetch_failed(super::remote_call::no_answer("fetch", after))
    }

    /// The error of a fetch whose thread ended without an answer.
    pub fn fetch_vanished(&self) -> RepoError {
        self.fetch_failed("the fetch ended without an answer".to_owned())
    }

    fn fetch_failed(&self, message: String) -> RepoError {
        RepoError::Fetch {
            url: self
                .remote
                .as_ref()
                .map_or_else(String::new, |r| r.url.clone()),
            cache: self.path.clone(),
            message,
        }
    }

    /// [`GitRepo::fetch`], stopping between the transfer's steps once `give_up` is set.
    pub fn fetch_unless(&self, give_up: &AtomicBool) -> Result<FetchOutcome, RepoError> {
        let Some(remote) = &self.remote else {
            return Ok(FetchOutcome::default());
        };
        let fetch_err = |message: String| RepoError::Fetch {
            url: remote.url.clone(),
            cache: self.path.clone(),
            message,
        };
        remote.refuse_clear_text_credentials()?;
        let repo = self.repo.to_thread_local();
        let url = remote.transport_url();
        if url.starts_with("http://") || url.starts_with("https://") {
            install_tls_provider();
        }
        let transport_options = match (&remote.ca_file, url.starts_with("https://")) {
            (Some(ca_file), true) => Some(trust_only(ca_file)?),
            _ => None,
        };
        let handle = repo
            .remote_at(url.as_str())
            .map_err(|e| fetch_err(msg(e)))?
            .with_refspecs(
                ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"],
                gix::remote::Direction::Fetch,
            )
            .map_err(|e| fetch_err(msg(e)))?;
        let mut connection = handle
            .connect(gix::remote::Direction::Fetch)
            .map_err(|e| fetch_err(msg(e)))?;
        if let Some(options) = transport_options {
            connection.set_transport_options(options);
        }
        let account = remote.credentials.account()?;
        // Only our configured identity is ever offered: no credential helpers, no prompts.
        let connection = connection.with_credentials(move |action| match (&action, &account) {
            (gix::credentials::helper::Action::Get(ctx), Some(account)) => {
                Ok(Some(gix::credentials::protocol::Outcome {
                    identity: account.clone(),
                    next: ctx.clone().into(),
                }))
            }
            _ => Ok(None),
        });
        let mut prepare = connection
            .prepare_fetch(gix::progress::Discard, Default::default())
            .map_err(|e| fetch_err(msg(e)))?;
        if let Some(depth) = remote.depth {
            prepare = prepare.with_shallow(gix::remote::fetch::Shallow::DepthAtRemote(depth));
        }
        let outcome = prepare
            .receive(gix::progress::Discard, give_up)
            .map_err(|e| fetch_err(msg(e)))?;
        let update_refs = match &outcome.status {
            gix::remote::fetch::Status::NoPackReceived { update_refs, .. }
            | gix::remote::fetch::Status::Change { update_refs, .. } => update_refs,
        };
        use gix::remote::fetch::refs::update::Mode;
        let updated = update_refs
            .updates
            .iter()
            .filter(|u| matches!(u.mode, Mode::FastForward | Mode::Forced | Mode::New))
            .filter_map(|u| u.edit_index.and_then(|i| update_refs.edits.get(i)))
            .filter_map(|edit| match &edit.change {
                gix::refs::transaction::Change::Update {
                    new: gix::refs::Target::Object(id),
                    ..
                } => Some((edit.name.as_bstr().to_string(), *id)),
                _ => None,
            })
            .collect();
        Ok(FetchOutcome { updated })
    }

    /// Where the repository lives (the cache directory for a remote).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The git directory holding the branch refs, which change when a commit lands (watched by
    /// the fs trigger). For a linked work tree this is the shared (common) directory, where
    /// `refs/heads` and `packed-refs` live.
    pub fn git_dir(&self) -> PathBuf {
        self.repo.to_thread_local().common_dir().to_path_buf()
    }

    /// Resolve a branch, tag, `HEAD`, full or abbreviated commit id (any `rev-parse` spec) to
    /// a commit id, peeling annotated tags.
    pub fn resolve(&self, rev: &str) -> Result<ObjectId, RepoError> {
        self.resolve_among(rev, None)
    }

    /// [`GitRepo::resolve`]; a revision that names nothing is refused with the branches it
    /// could have meant, `unlike` left out.
    fn resolve_among(&self, rev: &str, unlike: Option<&str>) -> Result<ObjectId, RepoError> {
        let repo = self.repo.to_thread_local();
        let err = |message: String| RepoError::Resolve {
            rev: rev.to_owned(),
            repo: self.path.clone(),
            message,
        };
        let id = repo.rev_parse_single(rev).map_err(|e| {
            let branches = local_branches(&repo, unlike);
            err(if branches.is_empty() {
                msg(e)
            } else {
                format!("{}; the branches here are: {}", msg(e), branches.join(", "))
            })
        })?;
        let commit = id
            .object()
            .map_err(|e| err(msg(e)))?
            .peel_to_commit()
            .map_err(|e| err(msg(e)))?;
        Ok(commit.id)
    }

    /// Resolve `rev` for use as desired state: like [`GitRepo::resolve`], but the status
    /// branch (write-back documents) is refused.
    pub fn resolve_desired(&self, rev: &str, status_branch: &str) -> Result<ObjectId, RepoError> {
        let short = rev.strip_prefix("refs/heads/").unwrap_or(rev);
        if short == status_branch {
            return Err(RepoError::StatusBranch {
                rev: rev.to_owned(),
                branch: status_branch.to_owned(),
            });
        }
        self.resolve_among(rev, Some(status_branch))
    }

    /// Run `f` with a thread-local gix handle (for tree walks and signature checks).
    pub(crate) fn with_repo<T>(&self, f: impl FnOnce(&gix::Repository) -> T) -> T {
        f(&self.repo.to_thread_local())
    }

    /// The raw signature header and the signed payload of `commit`, if it is signed.
    pub fn commit_signature(&self, commit: ObjectId) -> Result<Option<CommitSignature>, RepoError> {
        let repo = self.repo.to_thread_local();
        let err = |message: String| RepoError::Read {
            what: format!("commit {commit}"),
            repo: self.path.clone(),
            message,
        };
        let c = repo.find_commit(commit).map_err(|e| err(msg(e)))?;
        let sig = c.signature().map_err(|e| err(msg(e)))?;
        Ok(sig.map(|(sig, data)| CommitSignature {
            signature: sig.to_vec(),
            payload: data.to_bstring().to_vec(),
        }))
    }

    /// `from` and up to `limit - 1` of its first-parent ancestors, newest first: the commits the
    /// tracked branch pointed to, in a merge-based workflow. The walk ends early where history
    /// does (a root commit, or the boundary of a shallow fetch).
    pub fn first_parents(&self, from: ObjectId, limit: usize) -> Result<Vec<ObjectId>, RepoError> {
        Ok(self.first_parent_history(from, limit)?.0)
    }

    /// [`GitRepo::first_parents`], and whether the walk reached the branch's first commit
    /// ([`HistoryEnd::Root`]) or stopped short of it (the limit, or a shallow boundary).
    pub fn first_parent_history(
        &self,
        from: ObjectId,
        limit: usize,
    ) -> Result<(Vec<ObjectId>, HistoryEnd), RepoError> {
        let repo = self.repo.to_thread_local();
        let mut out = Vec::new();
        let mut next = Some(from);
        while let Some(id) = next {
            if out.len() >= limit {
                return Ok((out, HistoryEnd::Truncated));
            }
            let commit = match repo.find_commit(id) {
                Ok(commit) => commit,
                // A parent beyond a shallow boundary is named but absent: history ends here.
                Err(_) if !out.is_empty() => return Ok((out, HistoryEnd::Truncated)),
                Err(e) => {
                    return Err(RepoError::Read {
                        what: format!("commit {id}"),
                        repo: self.path.clone(),
                        message: msg(e),
                    });
                }
            };
            out.push(id);
            next = commit.parent_ids().next().map(|p| p.detach());
        }
        Ok((out, HistoryEnd::Root))
    }

    /// Whether the ancestor relation holds (`ancestor` is reachable from `descendant`).
    pub fn is_ancestor(&self, ancestor: ObjectId, descendant: ObjectId) -> Result<bool, RepoError> {
        if ancestor == descendant {
            return Ok(true);
        }
        let repo = self.repo.to_thread_local();
        let err = |message: String| RepoError::Read {
            what: format!("history of {descendant}"),
            repo: self.path.clone(),
            message,
        };
        let walk = repo.rev_walk([descendant]).all().map_err(|e| err(msg(e)))?;
        for info in walk {
            let info = info.map_err(|e| err(msg(e)))?;
            if info.id == ancestor {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// Where a walk along the branch's history stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HistoryEnd {
    /// At the branch's first commit: nothing older exists.
    Root,
    /// Short of it: the walk's limit, or the boundary of a shallow fetch.
    Truncated,
}

/// Local paths become `file://` URLs so gix's file transport (not a `git` subprocess) serves
/// them; everything else is passed through.
fn remote_url(url: &str) -> String {
    let looks_like_url = url.contains("://") || (url.contains('@') && url.contains(':'));
    if looks_like_url {
        return url.to_owned();
    }
    let path = Path::new(url);
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    };
    format!("file://{}", abs.display())
}

/// http transport options whose TLS roots are exactly the certificates of `ca_file`, the same
/// trust `git push` gets through `GIT_SSL_CAINFO`.
fn trust_only(ca_file: &Path) -> Result<Box<dyn std::any::Any>, RepoError> {
    use gix::protocol::transport::client::blocking_io::http;
    let ca_err = |message: String| RepoError::CaFile {
        path: ca_file.to_path_buf(),
        message,
    };
    let pem = std::fs::read(ca_file).map_err(|e| ca_err(msg(e)))?;
    let certificates = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| ca_err(msg(e)))?;
    if certificates.is_empty() {
        return Err(ca_err("no PEM certificate in the file".to_owned()));
    }
    // The repository is opened isolated and sets no `http.*` keys, so gix's defaults are
    // exactly what it would derive from the configuration.
    let mut options = http::Options::default();
    let backend = http::reqwest::Options {
        configure_client: Some(Box::new(move |builder| {
            Ok(builder.tls_certs_only(certificates.clone()))
        })),
        configure_request: None,
    };
    options.backend = Some(std::sync::Arc::new(std::sync::Mutex::new(backend)));
    Ok(Box::new(options))
}

/// reqwest is built without a bundled crypto provider (no aws-lc/OpenSSL build); install
/// rustls' ring provider once per process before the first http(s) transport is created.
fn install_tls_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // An error means another part of the process installed a provider first: fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

fn open_options(overrides: &[String]) -> gix::open::Options {
    // Isolated: the host's global/system git configuration (credential helpers, url rewrites,
    // hooks) must not change what the reconciler reads.
    gix::open::Options::isolated().config_overrides(overrides.iter().map(String::as_str))
}
