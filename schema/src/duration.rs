//! Kubernetes/Go duration strings (`30s`, `1h30m`, `500ms`, `-5s`), kept verbatim on the wire.

use std::fmt;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A `metav1.Duration` as written by the user. The text is kept so objects round-trip
/// unchanged; [`GoDuration::parse`] interprets it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(transparent)]
pub struct GoDuration(pub String);

/// A duration string that does not follow Go's `time.ParseDuration` syntax.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {text:?}: {reason} (use Go syntax such as 30s, 5m, 1h30m, 500ms)")]
pub struct DurationError {
    /// The text that was read.
    pub text: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// A parsed duration with its sign (Go durations may be negative).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SignedDuration {
    /// True for a negative duration.
    pub negative: bool,
    /// Magnitude.
    pub magnitude: Duration,
}

impl SignedDuration {
    /// Whether the duration is strictly below zero.
    pub fn is_negative(&self) -> bool {
        self.negative && !self.magnitude.is_zero()
    }
    /// The duration clamped at zero.
    pub fn non_negative(&self) -> Duration {
        if self.negative {
            Duration::ZERO
        } else {
            self.magnitude
        }
    }
}

impl GoDuration {
    /// Wraps a duration string.
    pub fn new(text: impl Into<String>) -> Self {
        GoDuration(text.into())
    }
    /// Parses the text with Go's rules.
    pub fn parse(&self) -> Result<SignedDuration, DurationError> {
        parse_go_duration(&self.0)
    }
}

impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Parses a Go duration: an optional sign, then one or more `<number><unit>` parts with units
/// `ns`, `us`, `µs`, `ms`, `s`, `m`, `h`; `0` alone is allowed.
pub fn parse_go_duration(text: &str) -> Result<SignedDuration, DurationError> {
    let err = |reason| DurationError {
        text: text.to_string(),
        reason,
    };
    let mut rest = text;
    let mut negative = false;
    if let Some(r) = rest.strip_prefix('-') {
        negative = true;
        rest = r;
    } else if let Some(r) = rest.strip_prefix('+') {
        rest = r;
    }
    if rest == "0" {
        return Ok(SignedDuration {
            negative,
            magnitude: Duration::ZERO,
        });
    }
    if rest.is_empty() {
        return Err(err("empty duration"));
    }
    let mut total_nanos: u128 = 0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if number_len == 0 {
            return Err(err("expected a number"));
        }
        let number = &rest[..number_len];
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(err("missing unit")),
            _ => return Err(err("unknown unit")),
        };
        let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && frac.is_empty() {
            return Err(err("expected a number"));
        }
        if frac.contains('.') {
            return Err(err("too many decimal points"));
        }
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| err("number too large"))?
        };
        let mut nanos = whole
            .checked_mul(unit_nanos)
            .ok_or_else(|| err("duration too large"))?;
        let mut scale = unit_nanos;
        for digit in frac.bytes() {
            scale /= 10;
            if scale == 0 {
                break;
            }
            nanos += u128::from(digit - b'0') * scale;
        }
        total_nanos = total_nanos
            .checked_add(nanos)
            .ok_or_else(|| err("duration too large"))?;
    }
    if total_nanos > i64::MAX as u128 {
        return Err(err("duration too large"));
    }
    let magnitude = Duration::new(
        (total_nanos / 1_000_000_000) as u64,
        (total_nanos % 1_000_000_000) as u32,
    );
    Ok(SignedDuration {
        negative,
        magnitude,
    })
}

/// Formats a duration the way Go prints it (`1h30m0s`, `2s`, `500ms`), for messages and status.
pub fn format_go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    if nanos < 1_000_000_000 {
        return if nanos.is_multiple_of(1_000_000) {
            format!("{}ms", nanos / 1_000_000)
        } else if nanos.is_multiple_of(1_000) {
            format!("{}µs", nanos / 1_000)
        } else {
            format!("{nanos}ns")
        };
    }
    let secs = d.as_secs();
    let sub = d.subsec_nanos();
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if h > 0 || m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if sub == 0 {
        out.push_str(&format!("{s}s"));
    } else {
        let frac = format!("{sub:09}");
        out.push_str(&format!("{s}.{}s", frac.trim_end_matches('0')));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(text: &str) -> f64 {
        parse_go_duration(text).unwrap().magnitude.as_secs_f64()
    }

    #[test]
    fn parses_go_syntax() {
        assert_eq!(secs("30s"), 30.0);
        assert_eq!(secs("1h30m"), 5400.0);
        assert_eq!(secs("500ms"), 0.5);
        assert_eq!(secs("1.5h"), 5400.0);
        assert_eq!(secs("0"), 0.0);
        assert!(parse_go_duration("-5s").unwrap().is_negative());
        assert!(!parse_go_duration("-0s").unwrap().is_negative());
    }

    #[test]
    fn rejects_non_go_syntax() {
        for bad in ["", "5", "1d", "s", "1..5s", "abc", "-"] {
            assert!(parse_go_duration(bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format_go_duration(Duration::from_secs(5400)), "1h30m0s");
        assert_eq!(format_go_duration(Duration::from_secs(2)), "2s");
        assert_eq!(format_go_duration(Duration::from_millis(500)), "500ms");
        assert_eq!(format_go_duration(Duration::from_millis(1500)), "1.5s");
    }
}
