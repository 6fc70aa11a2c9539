//! Package versions with Go (Masterminds `semver/v3` `NewVersion`) rules, as upstream parses them.
//!
//! Differences from the strict SemVer 2.0 grammar of the `semver` crate, all deliberate:
//! an optional leading `v`; shorthands (`1`, `1.2`) mean `1.0.0`, `1.2.0`; leading zeros in the
//! numeric core are accepted (`01.2.3` reads as `1.2.3`); numeric pre-release identifiers with a
//! leading zero are rejected. Build metadata is kept but ignored by ordering.

use std::cmp::Ordering;
use std::fmt;

/// A parsed package version.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GoVersion {
    /// Major number.
    pub major: u64,
    /// Minor number (0 when omitted).
    pub minor: u64,
    /// Patch number (0 when omitted).
    pub patch: u64,
    /// Pre-release identifiers joined with `.`, empty when none.
    pub pre: String,
    /// Build metadata, empty when none.
    pub metadata: String,
    /// The text as written.
    pub original: String,
}

/// Why a version string is not a valid Go semver.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    /// The text does not have the `v?MAJOR[.MINOR[.PATCH]][-PRE][+META]` shape.
    #[error("invalid semantic version")]
    Invalid,
    /// A numeric field does not fit in 64 bits.
    #[error("version segment out of range")]
    OutOfRange,
    /// A numeric pre-release identifier starts with `0`.
    #[error("version segment starts with 0")]
    SegmentStartsZero,
}

fn is_ident_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-'
}

/// Dot-separated non-empty identifiers of `[0-9A-Za-z-]`.
fn valid_identifiers(s: &str) -> bool {
    !s.is_empty()
        && s.split('.')
            .all(|p| !p.is_empty() && p.bytes().all(is_ident_char))
}

fn parse_num(s: &str) -> Result<u64, VersionError> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(VersionError::Invalid);
    }
    s.parse::<u64>().map_err(|_| VersionError::OutOfRange)
}

impl GoVersion {
    /// Parses a version the way upstream's `semver.NewVersion` does.
    pub fn parse(text: &str) -> Result<GoVersion, VersionError> {
        let body = text.strip_prefix('v').unwrap_or(text);
        // The core is digits and dots; pre-release starts at the first `-`, metadata at the
        // first `+` (identifiers may contain `-`, never `+`).
        let (rest, metadata) = match body.split_once('+') {
            Some((r, m)) => {
                if !valid_identifiers(m) {
                    return Err(VersionError::Invalid);
                }
                (r, m)
            }
            None => (body, ""),
        };
        let (core, pre) = match rest.split_once('-') {
            Some((c, p)) => {
                if !valid_identifiers(p) {
                    return Err(VersionError::Invalid);
                }
                (c, p)
            }
            None => (rest, ""),
        };
        let mut parts = core.split('.');
        let major = parse_num(parts.next().unwrap_or_default())?;
        let minor = parts.next().map(parse_num).transpose()?.unwrap_or(0);
        let patch = parts.next().map(parse_num).transpose()?.unwrap_or(0);
        if parts.next().is_some() {
            return Err(VersionError::Invalid);
        }
        for ident in pre.split('.').filter(|_| !pre.is_empty()) {
            if ident.len() > 1
                && ident.starts_with('0')
                && ident.bytes().all(|b| b.is_ascii_digit())
            {
                return Err(VersionError::SegmentStartsZero);
            }
        }
        Ok(GoVersion {
            major,
            minor,
            patch,
            pre: pre.to_string(),
            metadata: metadata.to_string(),
            original: text.to_string(),
        })
    }

    /// Whether `text` is a valid version.
    pub fn is_valid(text: &str) -> bool {
        GoVersion::parse(text).is_ok()
    }

    /// Precedence order (build metadata ignored), as upstream's `Compare`.
    pub fn compare(&self, other: &GoVersion) -> Ordering {
        self.major
            .cmp(&other.major)
            .then(self.minor.cmp(&other.minor))
            .then(self.patch.cmp(&other.patch))
            .then_with(|| compare_pre(&self.pre, &other.pre))
    }
}

/// Compares two version strings; `None` when either is invalid.
pub fn compare(a: &str, b: &str) -> Option<Ordering> {
    Some(
        GoVersion::parse(a)
            .ok()?
            .compare(&GoVersion::parse(b).ok()?),
    )
}

fn compare_pre(a: &str, b: &str) -> Ordering {
    match (a.is_empty(), b.is_empty()) {
        (true, true) => return Ordering::Equal,
        (true, false) => return Ordering::Greater,
        (false, true) => return Ordering::Less,
        _ => {}
    }
    let (pa, pb): (Vec<&str>, Vec<&str>) = (a.split('.').collect(), b.split('.').collect());
    for i in 0..pa.len().max(pb.len()) {
        let ord = compare_pre_part(pa.get(i).copied(), pb.get(i).copied());
        if ord != Ordering::Equal {
            return ord;
        }
    }
    Ordering::Equal
}

fn compare_pre_part(a: Option<&str>, b: Option<&str>) -> Ordering {
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(a), Some(b)) if a == b => Ordering::Equal,
        (Some(a), Some(b)) => match (a.parse::<u64>(), b.parse::<u64>()) {
            (Ok(x), Ok(y)) => x.cmp(&y),
            // Numeric identifiers sort before alphanumeric ones.
            (Ok(_), Err(_)) => Ordering::Less,
            (Err(_), Ok(_)) => Ordering::Greater,
            (Err(_), Err(_)) => a.cmp(b),
        },
    }
}

impl PartialOrd for GoVersion {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for GoVersion {
    /// Precedence, then the original text so the order is total and consistent with `Eq`.
    fn cmp(&self, other: &Self) -> Ordering {
        self.compare(other)
            .then_with(|| self.original.cmp(&other.original))
    }
}

impl fmt::Display for GoVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.original)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_go_shapes() {
        for ok in [
            "1.2.3",
            "v1.2.3",
            "1.2",
            "1",
            "v2",
            "1.2.3-alpha.1",
            "1.2-beta",
            "1.2.3+build.5",
            "1.2.3-rc.1+sha.abc",
            "1.2.3-alpha-1",
            "01.2.3",
            "1.2.3-0",
            "1.2.3-x.0a",
        ] {
            assert!(GoVersion::is_valid(ok), "{ok} should be valid");
        }
    }

    #[test]
    fn rejects_non_versions() {
        for bad in [
            "",
            "v",
            "V1.2.3",
            "1.2.3.4",
            "1..2",
            "1.2.3-",
            "1.2.3+",
            "1.2.3-01",
            "1.2.3-a..b",
            "latest",
            "1.2.x",
            "1.2.3_4",
            " 1.2.3",
            "99999999999999999999.0.0",
        ] {
            assert!(!GoVersion::is_valid(bad), "{bad} should be invalid");
        }
    }

    #[test]
    fn shorthands_fill_zeros() {
        let v = GoVersion::parse("v1.2").unwrap();
        assert_eq!((v.major, v.minor, v.patch), (1, 2, 0));
        assert_eq!(compare("1.2", "1.2.0"), Some(Ordering::Equal));
        assert_eq!(compare("v1", "1.0.0"), Some(Ordering::Equal));
    }

    proptest::proptest! {
        #[test]
        fn ordering_is_a_total_preorder(
            a in "v?[0-9]{1,2}(\\.[0-9]{1,2}){0,2}(-(alpha|beta|rc|[1-9]|x-y)(\\.[0-9a-z]{1,2}){0,2})?(\\+b[0-9])?",
            b in "v?[0-9]{1,2}(\\.[0-9]{1,2}){0,2}(-(alpha|beta|rc|[1-9]|x-y)(\\.[0-9a-z]{1,2}){0,2})?(\\+b[0-9])?",
            c in "v?[0-9]{1,2}(\\.[0-9]{1,2}){0,2}(-(alpha|beta|rc|[1-9]|x-y)(\\.[0-9a-z]{1,2}){0,2})?",
        ) {
            // Pre-release identifiers with leading zeros are invalid; skip those draws.
            let (Ok(x), Ok(y), Ok(z)) = (GoVersion::parse(&a), GoVersion::parse(&b), GoVersion::parse(&c)) else {
                return Ok(());
            };
            proptest::prop_assert_eq!(x.compare(&y), y.compare(&x).reverse());
            if x.compare(&y).is_le() && y.compare(&z).is_le() {
                proptest::prop_assert!(x.compare(&z).is_le());
            }
            // The `v` prefix and build metadata never change precedence.
            let plain = GoVersion::parse(a.trim_start_matches('v').split('+').next().unwrap_or_default()).unwrap();
            proptest::prop_assert!(x.compare(&plain).is_eq());
        }
    }

    #[test]
    fn ordering_follows_precedence() {
        use Ordering::*;
        assert_eq!(compare("1.2.3-alpha", "1.2.3"), Some(Less));
        assert_eq!(compare("1.2.3-alpha.2", "1.2.3-alpha.10"), Some(Less));
        assert_eq!(compare("1.2.3-alpha.1", "1.2.3-alpha.beta"), Some(Less));
        assert_eq!(compare("1.2.3-alpha", "1.2.3-alpha.1"), Some(Less));
        assert_eq!(compare("1.2.3-beta", "1.2.3-alpha"), Some(Greater));
        assert_eq!(compare("1.2.3+a", "1.2.3+b"), Some(Equal));
        assert_eq!(compare("1.10.0", "1.9.9"), Some(Greater));
        assert_eq!(compare("v2.0.0", "1.99.99"), Some(Greater));
        assert_eq!(compare("1.2.3", "nope"), None);
    }
}
