//! Where the agent's host state lives (§9.1), as container paths under the root mount.

use std::path::PathBuf;

/// Joins a host path onto the root mount by concatenation (§3.1), so `/root` + `/etc/x` is
/// `/root/etc/x` and a root mount of `/` leaves host paths unchanged.
pub fn under(root_mount: &str, host_path: &str) -> PathBuf {
    let root = root_mount.trim_end_matches('/');
    PathBuf::from(format!("{root}/{}", host_path.trim_start_matches('/')))
}

/// Host-state layout for one invocation.
#[derive(Debug, Clone)]
pub struct Layout {
    /// Container path where the node's `/` is mounted.
    pub root_mount: String,
    /// `SKYHOOK_ROOT_DIR` (host path).
    pub root_dir: String,
    /// `SKYHOOK_LOG_DIR` (host path).
    pub log_dir: String,
}

impl Layout {
    /// A host path as seen from the agent.
    pub fn host(&self, host_path: &str) -> PathBuf {
        under(&self.root_mount, host_path)
    }

    /// `R/flags`.
    pub fn flags_dir(&self) -> PathBuf {
        self.host(&format!("{}/flags", self.root_dir))
    }

    /// `R/flags/START`.
    pub fn start_flag(&self) -> PathBuf {
        self.flags_dir().join("START")
    }

    /// `R/flags/check_results`.
    pub fn check_results(&self) -> PathBuf {
        self.flags_dir().join("check_results")
    }

    /// `R/flags/<mode>_ALL_CHECKED`.
    pub fn all_checked(&self, mode: &str) -> PathBuf {
        self.flags_dir().join(format!("{mode}_ALL_CHECKED"))
    }

    /// `R/flags/<package>/<version>/<path>_<marker>` (§9.3). Built by string concatenation
    /// because both `path` and the base64 marker may contain `/`.
    pub fn step_flag(&self, package: &str, version: &str, path: &str, marker: &str) -> PathBuf {
        self.host(&format!(
            "{}/flags/{package}/{version}/{path}_{marker}",
            self.root_dir
        ))
    }

    /// `R/history/<package>.json`.
    pub fn history(&self, package: &str) -> PathBuf {
        self.host(&format!("{}/history/{package}.json", self.root_dir))
    }

    /// `R/interrupts/flags/<resource id>`.
    pub fn interrupt_flags(&self, resource_id: &str) -> PathBuf {
        self.host(&format!("{}/interrupts/flags/{resource_id}", self.root_dir))
    }

    /// Prefix of a step's log files: `L/<package>/<version>/<path>` (append `-<ts>.log`).
    pub fn step_log_prefix(&self, package: &str, version: &str, path: &str) -> PathBuf {
        self.host(&format!("{}/{package}/{version}/{path}", self.log_dir))
    }

    /// Prefix of an interrupt command's log files: `L/<pkg>/<ver>/interrupts/<name>`.
    pub fn interrupt_log_prefix(&self, package: &str, version: &str, name: &str) -> PathBuf {
        self.host(&format!(
            "{}/{package}/{version}/interrupts/{name}",
            self.log_dir
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout {
            root_mount: "/root".into(),
            root_dir: "/etc/skyhook".into(),
            log_dir: "/var/log/skyhook".into(),
        }
    }

    #[test]
    fn default_history_dir_is_under_etc_skyhook() {
        assert_eq!(
            layout().history("pkg"),
            PathBuf::from("/root/etc/skyhook/history/pkg.json")
        );
    }

    #[test]
    fn flag_path_starts_with_flags_package_version() {
        let p = layout().step_flag("pkg", "1.0.0", "a.sh", "W11fWzBd");
        assert!(
            p.starts_with("/root/etc/skyhook/flags/pkg/1.0.0"),
            "{}",
            p.display()
        );
    }

    #[test]
    fn root_mount_slash_keeps_host_paths() {
        assert_eq!(under("/", "/etc/x"), PathBuf::from("/etc/x"));
        assert_eq!(under("/root/", "etc/x"), PathBuf::from("/root/etc/x"));
    }
}
