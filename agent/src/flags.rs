//! Step flags: the marker encoding (§9.3), skip rules (§9.4) and flag files.

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use crate::config::Step;
use crate::pyrepr::{py_bool, repr_int_list, repr_str_list};
use crate::timefmt::local_iso_now;

/// `base64("<repr(arguments)>_<repr(returncodes)>")`, padded, standard alphabet (so it may
/// contain `/`).
pub fn marker(arguments: &[String], returncodes: &[i64]) -> String {
    let text = format!(
        "{}_{}",
        repr_str_list(arguments),
        repr_int_list(returncodes)
    );
    STANDARD.encode(text.as_bytes())
}

/// The flag file name relative to `R/flags/<pkg>/<ver>/`: `<path>_<marker>`.
pub fn flag_name(step: &Step) -> String {
    format!(
        "{}_{}",
        step.path,
        marker(&step.arguments, &step.returncodes)
    )
}

/// Writes a flag after a successful step (content informational, §9.3), creating directories.
pub fn write_flag(path: &Path, idempotence: bool) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(
        path,
        format!(
            "last_run: {}\nstep_always_runs: {}",
            local_iso_now(),
            py_bool(idempotence)
        ),
    )
}

/// What to do with a step whose flag may exist, in an action mode (§9.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// No flag: run.
    Run,
    /// Flag exists but `OVERLAY_ALWAYS_RUN_STEP` is on: warn and run.
    RunAlwaysRun,
    /// Flag exists but the mode ignores flags (`config`, `uninstall`, `upgrade`): run.
    RunModeIgnoresFlags,
    /// Flag exists but the step has `idempotence: true`: run.
    RunIdempotenceDisabled,
    /// Flag exists: skip.
    Skip,
}

impl Decision {
    /// Whether the step runs.
    pub fn runs(&self) -> bool {
        !matches!(self, Self::Skip)
    }
}

/// Applies the skip rules, first match wins.
pub fn decide(mode: &str, step: &Step, flag_exists: bool, always_run: bool) -> Decision {
    if !flag_exists {
        Decision::Run
    } else if always_run {
        Decision::RunAlwaysRun
    } else if matches!(mode, "config" | "uninstall" | "upgrade") {
        Decision::RunModeIgnoresFlags
    } else if step.idempotence {
        Decision::RunIdempotenceDisabled
    } else {
        Decision::Skip
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn marker_matches_spec_examples() {
        assert_eq!(marker(&[], &[0]), "W11fWzBd");
        assert_eq!(marker(&[], &[0, 2]), "W11fWzAsIDJd");
        assert_eq!(
            marker(&s(&["env:DEMO_ARG", "literal"]), &[0]),
            "WydlbnY6REVNT19BUkcnLCAnbGl0ZXJhbCddX1swXQ=="
        );
    }

    #[test]
    fn flag_path_changes_with_arguments() {
        let a = Step::new("a.sh");
        let mut b = a.clone();
        b.arguments = s(&["x"]);
        assert_ne!(flag_name(&a), flag_name(&b));
    }

    #[test]
    fn flag_path_changes_with_return_codes() {
        let a = Step::new("a.sh");
        let mut b = a.clone();
        b.returncodes = vec![0, 1];
        assert_ne!(flag_name(&a), flag_name(&b));
    }

    #[test]
    fn setting_a_flag_creates_file_and_directories() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("flags/pkg/1.0.0/sub/a.sh_W11fWzBd");
        write_flag(&p, true).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.starts_with("last_run: "), "{text}");
        assert!(text.ends_with("\nstep_always_runs: True"), "{text}");
    }

    #[test]
    fn skip_decisions_follow_mode_idempotence_and_flag() {
        let auto = Step::new("a.sh");
        let mut disabled = auto.clone();
        disabled.idempotence = true;
        assert_eq!(decide("apply", &auto, true, false), Decision::Skip);
        assert!(decide("apply", &disabled, true, false).runs());
        assert!(decide("config", &auto, true, false).runs());
        assert!(decide("uninstall", &auto, true, false).runs());
        assert!(decide("upgrade", &auto, true, false).runs());
        assert_eq!(decide("post-interrupt", &auto, true, false), Decision::Skip);
        assert_eq!(decide("apply", &auto, false, false), Decision::Run);
        assert_eq!(decide("apply", &auto, true, true), Decision::RunAlwaysRun);
    }
}
