//! Names that become host paths (§9.1): a package name is one component of the flag, log and
//! history paths, so a name that is not a valid package name is refused before any of them is
//! touched. `..`, `/` and the like can then never leave the state directories or land on
//! another package's files.

/// Longest package name the NodeWright CRD accepts (§3.3).
pub const MAX_PACKAGE_NAME: usize = 43;

/// A package key as the NodeWright CRD accepts it: `^[a-z][-a-z0-9]{0,41}[a-z]$`. This is the
/// package part of `SKYHOOK_RESOURCE_ID`, which names interrupt flags and logs.
pub fn is_package_key(name: &str) -> bool {
    shaped(name, |b| b == b'-', |b| b.is_ascii_lowercase())
}

/// A `config.json` `package_name`: the CRD's pattern, with `_` allowed inside, a digit
/// allowed last and a single letter allowed, because upstream packages spell their config
/// names that way (`nvidia_setup`, `nvidia_tuning_gke`; spec/agent.md §2.6) and its schema
/// accepts any string: existing packages must run unchanged.
pub fn is_config_package_name(name: &str) -> bool {
    name.len() == 1 && name.as_bytes()[0].is_ascii_lowercase()
        || shaped(
            name,
            |b| b == b'-' || b == b'_',
            |b| b.is_ascii_lowercase() || b.is_ascii_digit(),
        )
}

/// Lower-case letter first; then letters, digits and the `inner` punctuation; `last` decides
/// the final byte; 2 to [`MAX_PACKAGE_NAME`] bytes.
fn shaped(name: &str, inner: impl Fn(u8) -> bool, last: impl Fn(u8) -> bool) -> bool {
    let b = name.as_bytes();
    let (Some(&first), Some(&end)) = (b.first(), b.last()) else {
        return false;
    };
    (2..=MAX_PACKAGE_NAME).contains(&b.len())
        && first.is_ascii_lowercase()
        && last(end)
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || inner(c))
}

/// A version that is safe as one path component: non-empty, semver's characters only
/// (`0-9A-Za-z.+-`), and not `.` or `..`.
pub fn is_version_component(version: &str) -> bool {
    !version.is_empty()
        && version != "."
        && version != ".."
        && version
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'-'))
}

/// The `<nodewright>-<uid>-<generation>` part of a resource id: DNS-subdomain characters,
/// starting with a letter or digit (so never `.` or `..`).
pub fn is_owner_component(owner: &str) -> bool {
    owner
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && owner
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_keys_follow_the_crd_pattern() {
        for ok in ["tuning", "nvidia-setup", "ab"] {
            assert!(is_package_key(ok), "{ok}");
        }
        for bad in [
            "",
            "a",
            "../x",
            "a/../../b",
            "Tuning",
            "tuning-",
            "-x",
            "nvidia_setup",
            "x1",
            ".",
        ] {
            assert!(!is_package_key(bad), "{bad:?}");
        }
        assert!(!is_package_key(&"a".repeat(44)));
    }

    #[test]
    fn config_names_also_take_underscores_and_a_final_digit() {
        for ok in [
            "nvidia_setup",
            "nvidia_tuning_gke",
            "checks-fail",
            "cuda12",
            "p",
        ] {
            assert!(is_config_package_name(ok), "{ok}");
        }
        for bad in [
            "..",
            "../../etc",
            "a/../../b",
            "a/b",
            "_x",
            "x_",
            " x",
            "x\n",
            "",
        ] {
            assert!(!is_config_package_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn versions_and_owners_are_single_path_components() {
        assert!(is_version_component("1.2.0-rc.1+build5"));
        for bad in ["", ".", "..", "1/2", "../1.0.0"] {
            assert!(!is_version_component(bad), "{bad:?}");
        }
        assert!(is_owner_component("gpu-tuning-0f3c-2"));
        for bad in ["", ".", "..", "../x", "a/b", ".hidden"] {
            assert!(!is_owner_component(bad), "{bad:?}");
        }
    }
}
