//! Reading the manifest files of one commit, straight from the object database (no work tree):
//! every `.yaml`/`.yml` blob under the configured root path, with path-safety and size limits
//! applied before a blob's bytes are loaded.

use std::collections::{BTreeSet, HashMap};

use gix::ObjectId;
use gix::bstr::ByteSlice;

use super::budget::Budget;
use super::repo::{GitRepo, RepoError};

/// Directory that is never desired state (reconciler bookkeeping in the repository).
pub const RESERVED_DIR: &str = ".nodewright";

/// Limits applied while reading a commit's files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeLimits {
    /// Largest manifest file, in bytes (default 1 MiB).
    pub max_file_bytes: u64,
    /// Most manifest files per commit.
    pub max_files: usize,
    /// Longest chain of symlinks followed for one file.
    pub max_symlink_hops: usize,
    /// Most bytes of manifest files per commit, summed over paths (a blob named by many paths
    /// counts each time); checked from object headers before any file is loaded.
    pub max_total_bytes: u64,
    /// Most tree entries looked at per commit, a subtree counted every time a path leads to
    /// it (a tree repeated under many names cannot multiply the work past this).
    pub max_entries: usize,
}

impl Default for TreeLimits {
    fn default() -> Self {
        TreeLimits {
            max_file_bytes: 1024 * 1024,
            max_files: 10_000,
            max_symlink_hops: 8,
            max_total_bytes: 64 * 1024 * 1024,
            max_entries: 200_000,
        }
    }
}

/// One manifest file of a commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceFile {
    /// Path relative to the repository root, `/`-separated (the name users see in reports).
    pub path: String,
    /// The blob's bytes (a symlink's target blob when the file is a symlink inside the root).
    pub bytes: Vec<u8>,
}

/// A file that cannot be read as desired state; the commit is invalid.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FileViolation {
    /// A symlink points outside the root path (or is absolute).
    #[error("{path}: symlink target {target:?} escapes the manifest root {root:?}")]
    SymlinkEscape {
        /// The symlink.
        path: String,
        /// Its target as stored.
        target: String,
        /// The configured root.
        root: String,
    },
    /// A symlink chain is too long, loops, or ends nowhere.
    #[error("{path}: symlink cannot be resolved: {reason}")]
    SymlinkUnresolved {
        /// The symlink.
        path: String,
        /// Why.
        reason: String,
    },
    /// The file is larger than the limit.
    #[error(
        "{path}: file is {size} bytes, larger than the limit of {limit} bytes ({})",
        Budget::FileBytes
    )]
    TooLarge {
        /// The file.
        path: String,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The commit is larger than a per-commit budget; it is refused without reading further.
    #[error(
        "more than {limit} {} under {}: the commit is refused without reading further ({budget})",
        budget.counts(),
        root_name(root)
    )]
    OverBudget {
        /// The budget.
        budget: Budget,
        /// Its value.
        limit: u64,
        /// The root path.
        root: String,
    },
    /// A file name is not valid UTF-8.
    #[error("a path under {parent:?} is not valid UTF-8")]
    NonUtf8Path {
        /// Its directory.
        parent: String,
    },
}

/// The manifest files of a commit and the file-level violations met while reading them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommitFiles {
    /// The commit read.
    pub commit: String,
    /// Readable manifest files, sorted by path.
    pub files: Vec<SourceFile>,
    /// Files refused (the commit is invalid when this is not empty).
    pub violations: Vec<FileViolation>,
}

/// How a root path reads in a message: `"clusters/prod"`, or the repository root.
pub fn root_name(root: &str) -> String {
    if root.is_empty() {
        "the repository root".to_owned()
    } else {
        format!("{root:?}")
    }
}

/// Normalize a `/`-separated root path: no leading/trailing `/`, no `.` components; `""` is
/// the repository root. `..` is refused.
pub fn normalize_root(root: &str) -> Result<String, String> {
    let mut parts = Vec::new();
    for part in root.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(format!("root path {root:?} must not contain '..'")),
            p => parts.push(p),
        }
    }
    Ok(parts.join("/"))
}

fn is_manifest_name(name: &str) -> bool {
    name.ends_with(".yaml") || name.ends_with(".yml")
}

fn under_root(path: &str, root: &str) -> bool {
    root.is_empty() || path == root || path.starts_with(&format!("{root}/"))
}

/// Resolve `target` relative to the directory of `link` (both repository-relative); `None`
/// when it climbs above the repository root or is absolute.
fn join_link(link: &str, target: &str) -> Option<String> {
    if target.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = link.split('/').collect();
    parts.pop();
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

enum Entry {
    Blob(ObjectId),
    Link(ObjectId),
    Tree(ObjectId),
    Other,
}

/// Read the manifest files of `commit` under `root` (see [`normalize_root`]).
pub fn read_commit_files(
    git: &GitRepo,
    commit: ObjectId,
    root: &str,
    limits: &TreeLimits,
) -> Result<CommitFiles, RepoError> {
    let root = normalize_root(root).map_err(|message| RepoError::Read {
        what: "root path".to_owned(),
        repo: git.path().to_path_buf(),
        message,
    })?;
    git.with_repo(|repo| {
        let err = |what: String, e: &dyn std::fmt::Display| RepoError::Read {
            what,
            repo: git.path().to_path_buf(),
            message: e.to_string(),
        };
        let commit_obj = repo
            .find_commit(commit)
            .map_err(|e| err(format!("commit {commit}"), &e))?;
        let top = commit_obj
            .tree_id()
            .map_err(|e| err(format!("tree of commit {commit}"), &e))?
            .detach();
        let mut out = CommitFiles {
            commit: commit.to_string(),
            ..CommitFiles::default()
        };

        // Locate the root tree; a missing root means "no manifests", which the loader and
        // validation then judge (an empty desired state is legitimate).
        let mut root_tree = Some(top);
        if !root.is_empty() {
            root_tree = match lookup(repo, top, &root)
                .map_err(|e| err(format!("{root} at {commit}"), &e))?
            {
                Some(Entry::Tree(id)) => Some(id),
                _ => None,
            };
        }
        let Some(root_tree) = root_tree else {
            return Ok(out);
        };

        // Depth-first walk collecting manifest blobs and links. Each tree object is decoded
        // once however many paths lead to it; the entry budget still counts every path.
        let mut found: Vec<(String, Entry)> = Vec::new();
        let mut manifest_count = 0usize;
        let mut entries_seen = 0usize;
        let mut decoded_trees: HashMap<ObjectId, std::rc::Rc<Vec<TreeItem>>> = HashMap::new();
        let mut stack = vec![(root.clone(), root_tree)];
        while let Some((dir, tree_id)) = stack.pop() {
            let items = match decoded_trees.get(&tree_id) {
                Some(items) => items.clone(),
                None => {
                    let items = std::rc::Rc::new(
                        decode_tree(repo, tree_id)
                            .map_err(|e| err(format!("tree {dir:?} at {commit}"), &e))?,
                    );
                    decoded_trees.insert(tree_id, items.clone());
                    items
                }
            };
            entries_seen = entries_seen.saturating_add(items.len());
            if entries_seen > limits.max_entries {
                out.violations.push(FileViolation::OverBudget {
                    budget: Budget::TreeEntries,
                    limit: limits.max_entries as u64,
                    root: root.clone(),
                });
                return Ok(out);
            }
            for item in items.iter() {
                let Some(name) = item.name.as_deref() else {
                    out.violations.push(FileViolation::NonUtf8Path {
                        parent: dir.clone(),
                    });
                    continue;
                };
                let path = if dir.is_empty() {
                    name.to_owned()
                } else {
                    format!("{dir}/{name}")
                };
                match item.kind {
                    ItemKind::Tree if name != RESERVED_DIR => stack.push((path, item.oid)),
                    ItemKind::Tree | ItemKind::Other => {}
                    ItemKind::Link => {
                        if is_manifest_name(name) {
                            manifest_count += 1;
                        }
                        found.push((path, Entry::Link(item.oid)));
                    }
                    ItemKind::Blob if is_manifest_name(name) => {
                        manifest_count += 1;
                        found.push((path, Entry::Blob(item.oid)));
                    }
                    ItemKind::Blob => {}
                }
                if manifest_count > limits.max_files {
                    out.violations.push(FileViolation::OverBudget {
                        budget: Budget::Files,
                        limit: limits.max_files as u64,
                        root: root.clone(),
                    });
                    return Ok(out);
                }
            }
        }
        found.sort_by(|a, b| a.0.cmp(&b.0));

        // Resolve links and size every file from its object header before loading any.
        let mut blobs: Vec<(String, ObjectId)> = Vec::new();
        let mut total_bytes: u64 = 0;
        for (path, entry) in found {
            let blob = match entry {
                Entry::Blob(id) => id,
                Entry::Link(id) => {
                    match resolve_link(repo, top, &root, &path, id, limits)
                        .map_err(|e| err(format!("symlink {path} at {commit}"), &e))?
                    {
                        LinkResolution::Blob(id) if is_manifest_name(&path) => id,
                        // A link to a directory inside the root adds nothing: the directory
                        // itself is walked. A non-manifest link inside the root is ignored.
                        LinkResolution::Blob(_) | LinkResolution::Ignored => continue,
                        LinkResolution::Violation(v) => {
                            out.violations.push(v);
                            continue;
                        }
                    }
                }
                Entry::Tree(_) | Entry::Other => continue,
            };
            let size = repo
                .find_header(blob)
                .map_err(|e| err(format!("blob {path} at {commit}"), &e))?
                .size();
            if size > limits.max_file_bytes {
                out.violations.push(FileViolation::TooLarge {
                    path,
                    size,
                    limit: limits.max_file_bytes,
                });
                continue;
            }
            total_bytes = total_bytes.saturating_add(size);
            if total_bytes > limits.max_total_bytes {
                out.violations.push(FileViolation::OverBudget {
                    budget: Budget::TotalBytes,
                    limit: limits.max_total_bytes,
                    root: root.clone(),
                });
                return Ok(out);
            }
            blobs.push((path, blob));
        }
        for (path, blob) in blobs {
            let bytes = repo
                .find_blob(blob)
                .map_err(|e| err(format!("blob {path} at {commit}"), &e))?
                .detach()
                .data;
            out.files.push(SourceFile { path, bytes });
        }
        Ok(out)
    })
}

/// What a tree entry is, as the walk needs it.
enum ItemKind {
    Tree,
    Blob,
    Link,
    Other,
}

/// One decoded tree entry (`name` is `None` when it is not UTF-8).
struct TreeItem {
    name: Option<String>,
    kind: ItemKind,
    oid: ObjectId,
}

fn decode_tree(repo: &gix::Repository, id: ObjectId) -> Result<Vec<TreeItem>, String> {
    let tree = repo.find_tree(id).map_err(|e| e.to_string())?;
    let decoded = tree.decode().map_err(|e| e.to_string())?;
    Ok(decoded
        .entries
        .iter()
        .map(|entry| TreeItem {
            name: entry.filename.to_str().ok().map(str::to_owned),
            kind: if entry.mode.is_tree() {
                ItemKind::Tree
            } else if entry.mode.is_link() {
                ItemKind::Link
            } else if entry.mode.is_blob() {
                ItemKind::Blob
            } else {
                ItemKind::Other
            },
            oid: entry.oid.to_owned(),
        })
        .collect())
}

enum LinkResolution {
    Blob(ObjectId),
    Ignored,
    Violation(FileViolation),
}

fn resolve_link(
    repo: &gix::Repository,
    top: ObjectId,
    root: &str,
    path: &str,
    first: ObjectId,
    limits: &TreeLimits,
) -> Result<LinkResolution, gix::Error> {
    let mut link_path = path.to_owned();
    let mut link_blob = first;
    let mut seen = BTreeSet::new();
    for _ in 0..=limits.max_symlink_hops {
        if !seen.insert(link_path.clone()) {
            return Ok(LinkResolution::Violation(
                FileViolation::SymlinkUnresolved {
                    path: path.to_owned(),
                    reason: "symlink loop".to_owned(),
                },
            ));
        }
        let target_bytes = repo.find_blob(link_blob)?.detach().data;
        let target = String::from_utf8_lossy(&target_bytes).into_owned();
        let resolved = match join_link(&link_path, &target) {
            Some(p) if under_root(&p, root) => p,
            _ => {
                return Ok(LinkResolution::Violation(FileViolation::SymlinkEscape {
                    path: path.to_owned(),
                    target,
                    root: if root.is_empty() {
                        "/".to_owned()
                    } else {
                        root.to_owned()
                    },
                }));
            }
        };
        match lookup(repo, top, &resolved)? {
            Some(Entry::Blob(id)) => return Ok(LinkResolution::Blob(id)),
            Some(Entry::Link(id)) => {
                link_path = resolved;
                link_blob = id;
            }
            Some(Entry::Tree(_)) | Some(Entry::Other) => return Ok(LinkResolution::Ignored),
            None => {
                return Ok(LinkResolution::Violation(
                    FileViolation::SymlinkUnresolved {
                        path: path.to_owned(),
                        reason: format!("target {resolved:?} does not exist in the commit"),
                    },
                ));
            }
        }
    }
    Ok(LinkResolution::Violation(
        FileViolation::SymlinkUnresolved {
            path: path.to_owned(),
            reason: format!("more than {} symlink hops", limits.max_symlink_hops),
        },
    ))
}

fn lookup(repo: &gix::Repository, top: ObjectId, path: &str) -> Result<Option<Entry>, gix::Error> {
    if path.is_empty() {
        return Ok(Some(Entry::Tree(top)));
    }
    let tree = repo.find_tree(top)?;
    let Some(entry) = tree.lookup_entry_by_path(path)? else {
        return Ok(None);
    };
    let mode = entry.mode();
    let id = entry.object_id();
    Ok(Some(if mode.is_tree() {
        Entry::Tree(id)
    } else if mode.is_link() {
        Entry::Link(id)
    } else if mode.is_blob() {
        Entry::Blob(id)
    } else {
        Entry::Other
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_normalization_refuses_parent_components() {
        assert_eq!(
            normalize_root("./fleet//prod/").as_deref(),
            Ok("fleet/prod")
        );
        assert_eq!(normalize_root("").as_deref(), Ok(""));
        assert!(normalize_root("fleet/../..").is_err());
    }

    #[test]
    fn link_targets_are_resolved_against_the_link_directory() {
        assert_eq!(
            join_link("fleet/a.yaml", "b.yaml").as_deref(),
            Some("fleet/b.yaml")
        );
        assert_eq!(
            join_link("fleet/x/a.yaml", "../b.yaml").as_deref(),
            Some("fleet/b.yaml")
        );
        assert_eq!(join_link("a.yaml", "../etc/passwd"), None);
        assert_eq!(join_link("fleet/a.yaml", "/etc/passwd"), None);
        assert!(!under_root("other/b.yaml", "fleet"));
        assert!(!under_root("fleetx/b.yaml", "fleet"));
        assert!(under_root("fleet/b.yaml", "fleet"));
    }
}
