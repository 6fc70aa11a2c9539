//! Upgrade handling (§12): version environment and upgrade-step arguments.

use crate::config::Step;

/// Whether `mode` reads history for versions.
pub fn is_upgrade_mode(mode: &str) -> bool {
    mode == "upgrade" || mode == "upgrade-check"
}

/// Environment added to every step of an upgrade mode.
pub fn version_env(previous: &str, current: &str) -> Vec<(String, String)> {
    vec![
        ("PREVIOUS_VERSION".into(), previous.into()),
        ("CURRENT_VERSION".into(), current.into()),
    ]
}

/// Arguments to run: the step's own, plus previous and current version for upgrade steps. The
/// flag name keeps using the step's own arguments.
pub fn arguments(step: &Step, mode: &str, previous: &str, current: &str) -> Vec<String> {
    let mut args = step.arguments.clone();
    if is_upgrade_mode(mode) && step.upgrade_step {
        args.push(previous.into());
        args.push(current.into());
    }
    args
}
