//! Flag removal after a successful `uninstall-check` (§9.7, §13).

use crate::config::Config;
use crate::flags::marker;
use crate::layout::Layout;

/// Deletes the step flag of every step of every mode of `config`; returns how many existed.
pub fn remove_flags(layout: &Layout, config: &Config) -> std::io::Result<usize> {
    let mut removed = 0;
    for (_, step) in config.all_steps() {
        let p = layout.step_flag(
            &config.package_name,
            &config.package_version,
            &step.path,
            &marker(&step.arguments, &step.returncodes),
        );
        match std::fs::remove_file(&p) {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}
