//! Positional arguments (§3.1) and the mode list (§3.2).

/// Modes the agent accepts, in upstream's order (used in the unknown-mode warning).
pub const MODES: [&str; 11] = [
    "uninstall",
    "uninstall-check",
    "upgrade",
    "upgrade-check",
    "apply",
    "apply-check",
    "config",
    "config-check",
    "interrupt",
    "post-interrupt",
    "post-interrupt-check",
];

/// Root mount used by the legacy argument forms.
pub const DEFAULT_ROOT_MOUNT: &str = "/root";

/// The argument count matches no form.
#[derive(Debug, thiserror::Error)]
#[error(
    "expected `<mode> [<root mount>] <copy dir> [<payload>]` (2 to 4 arguments), got {0}; \
     or `validate <package dir>`"
)]
pub struct Error(pub usize);

/// Parsed positional arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    /// Mode.
    pub mode: String,
    /// Container path of the node's `/`.
    pub root_mount: String,
    /// Host path of the package copy.
    pub copy_dir: String,
    /// Base64 interrupt payload (interrupt mode only; ignored otherwise).
    pub payload: Option<String>,
}

/// Selects the form by argument count (program name excluded).
pub fn parse(args: &[String]) -> Result<Args, Error> {
    // Indexing is bounded by the argument count matched below.
    let a = |i: usize| args[i].clone();
    match args.len() {
        2 => Ok(Args {
            mode: a(0),
            root_mount: DEFAULT_ROOT_MOUNT.into(),
            copy_dir: a(1),
            payload: None,
        }),
        3 if args[0] == "interrupt" => Ok(Args {
            mode: a(0),
            root_mount: DEFAULT_ROOT_MOUNT.into(),
            copy_dir: a(1),
            payload: Some(a(2)),
        }),
        3 => Ok(Args {
            mode: a(0),
            root_mount: a(1),
            copy_dir: a(2),
            payload: None,
        }),
        4 => Ok(Args {
            mode: a(0),
            root_mount: a(1),
            copy_dir: a(2),
            payload: Some(a(3)),
        }),
        n => Err(Error(n)),
    }
}

/// Whether `mode` is one the agent knows.
pub fn is_known_mode(mode: &str) -> bool {
    MODES.contains(&mode)
}

/// The warning printed for an unknown mode (exit 0, §3.2).
pub fn unknown_mode_warning(mode: &str) -> String {
    format!(
        "WARNING: This version of the Agent doesn't support the {mode} mode. Options are: {}.",
        MODES.join(",")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn four_arg_interrupt_cli_passes_the_payload_through() {
        let a = parse(&v(&["interrupt", "/r", "/c", "PAYLOAD"])).unwrap();
        assert_eq!(
            (a.root_mount.as_str(), a.payload.as_deref()),
            ("/r", Some("PAYLOAD"))
        );
    }

    #[test]
    fn legacy_forms_use_root_mount_slash_root() {
        assert_eq!(parse(&v(&["apply", "/c"])).unwrap().root_mount, "/root");
        let i = parse(&v(&["interrupt", "/c", "P"])).unwrap();
        assert_eq!(
            (
                i.root_mount.as_str(),
                i.copy_dir.as_str(),
                i.payload.as_deref()
            ),
            ("/root", "/c", Some("P"))
        );
        assert_eq!(parse(&v(&["apply", "/r", "/c"])).unwrap().root_mount, "/r");
    }

    #[test]
    fn other_argument_counts_are_errors() {
        assert!(parse(&v(&["apply"])).is_err());
        assert!(parse(&v(&["a", "b", "c", "d", "e"])).is_err());
    }
}
