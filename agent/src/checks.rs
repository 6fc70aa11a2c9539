//! Check evaluation (§8): every check must pass and every check must have run.

use crate::layout::Layout;
use crate::pyrepr::py_bool;

/// Result of one check step: its path and whether it **failed**.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckResult {
    /// Step path.
    pub path: String,
    /// `true` = failed (upstream's convention in `check_results`).
    pub failed: bool,
}

/// Verdict of a check mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Fewer or more results than steps: nothing written.
    NotAllRan {
        /// Steps in the mode.
        expected: usize,
        /// Results recorded.
        got: usize,
    },
    /// At least one check failed; `check_results` written.
    Failed,
    /// All passed; `check_results` and `<mode>_ALL_CHECKED` written.
    Passed,
}

/// Evaluates the results of a check mode with ≥1 step and writes the host records.
pub fn evaluate(
    layout: &Layout,
    mode: &str,
    step_count: usize,
    results: &[CheckResult],
) -> std::io::Result<Verdict> {
    if results.len() != step_count {
        return Ok(Verdict::NotAllRan {
            expected: step_count,
            got: results.len(),
        });
    }
    std::fs::create_dir_all(layout.flags_dir())?;
    let lines: Vec<String> = results
        .iter()
        .map(|r| format!("{} {}", r.path, py_bool(r.failed)))
        .collect();
    std::fs::write(layout.check_results(), lines.join("\n"))?;
    if results.iter().any(|r| r.failed) {
        return Ok(Verdict::Failed);
    }
    std::fs::write(layout.all_checked(mode), "")?;
    Ok(Verdict::Passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(root: &std::path::Path) -> Layout {
        Layout {
            root_mount: root.display().to_string(),
            root_dir: "/etc/skyhook".into(),
            log_dir: "/var/log/skyhook".into(),
        }
    }

    fn r(p: &str, failed: bool) -> CheckResult {
        CheckResult {
            path: p.into(),
            failed,
        }
    }

    #[test]
    fn summary_failure_writes_results_and_all_pass_writes_all_checked() {
        let d = tempfile::tempdir().unwrap();
        let l = layout(d.path());
        let v = evaluate(
            &l,
            "apply",
            3,
            &[r("foo", false), r("bar", false), r("baz", true)],
        )
        .unwrap();
        assert_eq!(v, Verdict::Failed);
        assert_eq!(
            std::fs::read_to_string(l.check_results()).unwrap(),
            "foo False\nbar False\nbaz True"
        );
        assert!(!l.all_checked("apply").exists());
        let v = evaluate(&l, "apply", 2, &[r("foo", false), r("bar", false)]).unwrap();
        assert_eq!(v, Verdict::Passed);
        assert!(l.all_checked("apply").exists());
    }

    #[test]
    fn zero_results_for_a_mode_with_steps_fails_and_writes_nothing() {
        let d = tempfile::tempdir().unwrap();
        let l = layout(d.path());
        assert_eq!(
            evaluate(&l, "apply-check", 2, &[]).unwrap(),
            Verdict::NotAllRan {
                expected: 2,
                got: 0
            }
        );
        assert!(!l.check_results().exists());
    }
}
