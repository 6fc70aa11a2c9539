//! Files the agent copies onto the host: the agent-side package copy (§5.3), the `root_dir`
//! overlay (§5.4) and `resolv.conf` (§3.3).

use std::io;
use std::path::Path;

/// Recursively copies `src` into `dst`, merging: directories created, files overwritten,
/// nothing deleted. Symlinks in `src` are followed, as Python's `copytree` does by default.
pub fn copy_tree(src: &Path, dst: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dst)?;
    for entry in std::fs::read_dir(src)? {
        let entry = entry?;
        let from = entry.path();
        let to = dst.join(entry.file_name());
        if std::fs::metadata(&from)?.is_dir() {
            copy_tree(&from, &to)?;
        } else {
            std::fs::copy(&from, &to)?;
        }
    }
    Ok(())
}

/// Nvidia bootstrap files merged into a fresh agent-side copy.
pub const NODE_FILES_DIR: &str = "/etc/nvidia-bootstrap/node-files";

/// What [`ensure_copy_dir`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum CopyOutcome {
    /// The copy dir existed; nothing done.
    Existing,
    /// Copied from the data dir.
    Copied,
    /// No data dir: created the empty copy dir (§16 Q6).
    CreatedEmpty,
}

/// Creates the copy dir from the data dir when it is missing (§5.3, §16 Q6).
pub fn ensure_copy_dir(
    copy_dir: &Path,
    data_dir: &Path,
    node_files: &Path,
) -> io::Result<CopyOutcome> {
    if copy_dir.exists() {
        return Ok(CopyOutcome::Existing);
    }
    if data_dir.is_dir() {
        copy_tree(data_dir, copy_dir)?;
        if node_files.is_dir() {
            copy_tree(node_files, copy_dir)?;
        }
        Ok(CopyOutcome::Copied)
    } else {
        std::fs::create_dir_all(copy_dir)?;
        Ok(CopyOutcome::CreatedEmpty)
    }
}

/// Mirrors `<copy dir>/root_dir` onto the root mount when it exists.
pub fn overlay_root_dir(package_dir: &Path, root_mount: &Path) -> io::Result<bool> {
    let src = package_dir.join("root_dir");
    if src.is_dir() {
        copy_tree(&src, root_mount)?;
        Ok(true)
    } else {
        Ok(false)
    }
}

/// Copies the container's resolv.conf over the host's (following a symlink at the
/// destination, like `shutil.copy`).
pub fn copy_resolv(container_resolv: &Path, host_resolv: &Path) -> io::Result<()> {
    if let Some(d) = host_resolv.parent() {
        std::fs::create_dir_all(d)?;
    }
    std::fs::copy(container_resolv, host_resolv).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_copy_dir_is_copied_from_data_dir_existing_is_left_alone() {
        let d = tempfile::tempdir().unwrap();
        let data = d.path().join("data");
        std::fs::create_dir_all(data.join("skyhook_dir")).unwrap();
        std::fs::write(data.join("config.json"), "{}").unwrap();
        let copy = d.path().join("copy");
        let none = d.path().join("none");
        assert_eq!(
            ensure_copy_dir(&copy, &data, &none).unwrap(),
            CopyOutcome::Copied
        );
        assert!(copy.join("config.json").is_file() && copy.join("skyhook_dir").is_dir());
        std::fs::write(data.join("new.txt"), "x").unwrap();
        assert_eq!(
            ensure_copy_dir(&copy, &data, &none).unwrap(),
            CopyOutcome::Existing
        );
        assert!(!copy.join("new.txt").exists());
    }

    #[test]
    fn fresh_copy_merges_node_files_over_the_data_dir() {
        let d = tempfile::tempdir().unwrap();
        let (data, nodes, copy) = (
            d.path().join("data"),
            d.path().join("nodes"),
            d.path().join("copy"),
        );
        std::fs::create_dir_all(data.join("configmaps")).unwrap();
        std::fs::create_dir_all(nodes.join("configmaps")).unwrap();
        std::fs::write(data.join("configmaps/a"), "image").unwrap();
        std::fs::write(nodes.join("configmaps/a"), "node").unwrap();
        assert_eq!(
            ensure_copy_dir(&copy, &data, &nodes).unwrap(),
            CopyOutcome::Copied
        );
        assert_eq!(
            std::fs::read_to_string(copy.join("configmaps/a")).unwrap(),
            "node"
        );
    }

    #[test]
    fn missing_copy_dir_without_data_dir_is_created_empty() {
        let d = tempfile::tempdir().unwrap();
        let copy = d.path().join("copy");
        let out = ensure_copy_dir(&copy, &d.path().join("nope"), &d.path().join("nope2")).unwrap();
        assert_eq!(out, CopyOutcome::CreatedEmpty);
        assert!(copy.is_dir());
    }
}
