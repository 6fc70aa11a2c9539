//! `nodewright-agent validate <package dir>`: config validation for package authors (§16 Q12).
//! Not a mode: the operator never sends it, and it touches no host state.

use std::path::Path;

use crate::config;

/// Validates a package directory (the image's `/skyhook-package` layout); returns the exit
/// code. Missing expected configmaps are warnings here: the CR provides them at run time.
pub fn run(args: &[String]) -> i32 {
    let [dir] = args else {
        eprintln!("usage: nodewright-agent validate <package dir>");
        return 1;
    };
    let dir = Path::new(dir);
    match config::load(dir) {
        Ok((cfg, warnings)) => {
            for w in &warnings {
                eprintln!("{w}");
            }
            if let Err(e) = config::check_config_files(&cfg, &dir.join("configmaps")) {
                println!("WARNING: {e} (must be provided by the package's configMap)");
            }
            println!(
                "OK: {} {} ({} modes)",
                cfg.package_name,
                cfg.package_version,
                cfg.modes.len()
            );
            0
        }
        Err(e) => {
            eprintln!("INVALID: {e}");
            1
        }
    }
}
