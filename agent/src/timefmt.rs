//! Timestamps in the exact textual forms upstream's Python agent writes.
//!
//! Python's `datetime.isoformat()` omits the fractional part when the microsecond is zero; we
//! reproduce that so files written by either agent look alike.

use jiff::Timestamp;
use jiff::Zoned;
use jiff::tz::TimeZone;

/// Formats a zoned time like Python's `isoformat()` without the offset.
fn iso_naive(z: &Zoned) -> String {
    let micros = z.subsec_nanosecond() / 1000;
    let base = z.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    if micros == 0 {
        base
    } else {
        format!("{base}.{micros:06}")
    }
}

/// Local time as `datetime.now().isoformat()`: `2026-11-29T06:39:44.336166`.
pub fn local_iso_now() -> String {
    iso_naive(&Zoned::now())
}

/// UTC time as `datetime.now(timezone.utc).isoformat()`: `…336166+00:00`.
pub fn utc_iso_now() -> String {
    let z = Timestamp::now().to_zoned(TimeZone::UTC);
    format!("{}+00:00", iso_naive(&z))
}

/// UTC time for log file names: `strftime("%Y-%m-%d-%H%M%S")`.
pub fn utc_log_stamp() -> String {
    Timestamp::now()
        .to_zoned(TimeZone::UTC)
        .strftime("%Y-%m-%d-%H%M%S")
        .to_string()
}

/// Seconds since the epoch with fraction, as Python's `str(time.time())`.
pub fn epoch_seconds() -> String {
    let ts = Timestamp::now();
    let secs = ts.as_second() as f64 + f64::from(ts.subsec_nanosecond()) / 1e9;
    // Rust's `Display` for f64 is the shortest round-trip form, as Python's `repr`; Python
    // always shows a fraction, Rust omits `.0`, so add it back.
    let s = secs.to_string();
    if s.contains('.') { s } else { format!("{s}.0") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_iso_has_date_time_and_optional_micros() {
        let s = local_iso_now();
        assert_eq!(&s[4..5], "-");
        assert_eq!(&s[10..11], "T");
        assert!(s.len() == 19 || s.len() == 26, "{s}");
    }

    #[test]
    fn utc_iso_ends_with_utc_offset() {
        assert!(utc_iso_now().ends_with("+00:00"));
    }

    #[test]
    fn log_stamp_has_strftime_shape() {
        let s = utc_log_stamp();
        assert_eq!(s.len(), 17, "{s}");
        assert!(s.chars().filter(|c| *c == '-').count() == 3);
    }

    #[test]
    fn epoch_seconds_parses_as_float() {
        let v: f64 = epoch_seconds().parse().unwrap();
        assert!(v > 1.0e9);
    }
}
