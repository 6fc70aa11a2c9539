//! Maintenance windows: when a rollout may take new nodes out of service (this project's
//! annotations `gitops.nodewright.nvidia.com/maintenance-windows` and `…/maintenance-timezone`,
//! docs/maintenance-windows.md).
//!
//! A value is one or more windows separated by `;`, each `DAYS HH:MM-HH:MM`: DAYS is a day
//! (`Mon` … `Sun`), a range (`Mon-Fri`, wrapping `Fri-Mon`), a comma list of those, or `*`.
//! Times are wall-clock times in the timezone (IANA name, default UTC); `24:00` may end a
//! window; an end at or before the start crosses midnight and the window belongs to the day
//! it starts. Evaluation is pure: an instant in, whether a window is open and when that
//! changes out. Wall-clock times map to instants through the bundled timezone database, so
//! every machine evaluates a schedule the same way; a time skipped by a daylight-saving change
//! moves forward with the clocks, a repeated one means its first occurrence.

use std::collections::BTreeMap;
use std::fmt;

use jiff::civil::{Date, DateTime, Time};
use jiff::tz::{TimeZone, TimeZoneDatabase};
use jiff::{Timestamp, ToSpan};

/// The form a value must have, shown in every error.
pub const EXPECTED_FORM: &str = "windows are `DAYS HH:MM-HH:MM` separated by `;`, e.g. \"Sat,Sun 02:00-06:00; Mon-Fri 22:00-23:30\" (DAYS: Mon Tue Wed Thu Fri Sat Sun, a range such as Mon-Fri, a comma list of those, or *)";

/// Why a maintenance-window annotation cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    /// The windows value is malformed.
    #[error("{value:?}: {problem}; {EXPECTED_FORM}")]
    Malformed {
        /// The offending window (or the whole value when empty).
        value: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The timezone is not in the timezone database.
    #[error(
        "unknown timezone {0:?}: use an IANA name such as \"Europe/Berlin\", \"America/New_York\" or \"UTC\""
    )]
    UnknownTimezone(String),
}

/// One window: the days it starts on and its wall-clock span in minutes after midnight.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Window {
    /// Monday first.
    days: [bool; 7],
    start: u16,
    /// 1..=1440; at or before `start` means the next day.
    end: u16,
}

/// A parsed schedule of maintenance windows in a timezone.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    windows: Vec<Window>,
    tz: TimeZone,
    tz_name: String,
}

/// Whether a window is open at an instant, and when that changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowState {
    /// A window is open; it closes then (`None`: the windows never all close, e.g. `*
    /// 00:00-24:00`).
    Open {
        /// When the open period ends.
        closes: Option<Timestamp>,
    },
    /// No window is open; the next one opens then.
    Closed {
        /// When the next window opens.
        opens: Timestamp,
    },
}

impl WindowState {
    /// Whether new nodes may be admitted.
    pub fn is_open(self) -> bool {
        matches!(self, WindowState::Open { .. })
    }

    /// The next instant at which the state changes, if any.
    pub fn next_change(self) -> Option<Timestamp> {
        match self {
            WindowState::Open { closes } => closes,
            WindowState::Closed { opens } => Some(opens),
        }
    }
}

/// The windows value and timezone a NodeWright runs under: its own annotations, each key
/// over its DeploymentPolicy's. `None` without windows.
pub fn declared<'a>(
    own: Option<&'a BTreeMap<String, String>>,
    policy: Option<&'a BTreeMap<String, String>>,
) -> Option<(&'a str, Option<&'a str>)> {
    let value = |key: &str| {
        own.and_then(|a| a.get(key))
            .or_else(|| policy.and_then(|a| a.get(key)))
            .map(String::as_str)
    };
    Some((
        value(crate::keys::MAINTENANCE_WINDOWS)?,
        value(crate::keys::MAINTENANCE_TIMEZONE),
    ))
}

const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

fn malformed(value: &str, problem: impl Into<String>) -> WindowError {
    WindowError::Malformed {
        value: value.to_string(),
        problem: problem.into(),
    }
}

fn day(word: &str, window: &str) -> Result<usize, WindowError> {
    DAYS.iter().position(|d| *d == word).ok_or_else(|| {
        malformed(
            window,
            format!("{word:?} is not a day (Mon Tue Wed Thu Fri Sat Sun)"),
        )
    })
}

fn days(spec: &str, window: &str) -> Result<[bool; 7], WindowError> {
    if spec == "*" {
        return Ok([true; 7]);
    }
    let mut out = [false; 7];
    for part in spec.split(',') {
        match part.split_once('-') {
            Some((from, to)) => {
                let (from, to) = (day(from, window)?, day(to, window)?);
                let mut d = from;
                loop {
                    out[d] = true;
                    if d == to {
                        break;
                    }
                    d = (d + 1) % 7;
                }
            }
            None => out[day(part, window)?] = true,
        }
    }
    Ok(out)
}

/// `HH:MM` as minutes after midnight; `24:00` only where `end` allows it.
fn clock(text: &str, window: &str, end: bool) -> Result<u16, WindowError> {
    let bad = || {
        malformed(
            window,
            format!("{text:?} is not a time HH:MM (00:00 to 23:59, or 24:00 as an end)"),
        )
    };
    let (h, m) = text.split_once(':').ok_or_else(bad)?;
    if h.len() != 2 || m.len() != 2 || !h.bytes().chain(m.bytes()).all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let (h, m): (u16, u16) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    match (h, m) {
        (24, 0) if end => Ok(1440),
        (0..=23, 0..=59) => Ok(h * 60 + m),
        _ => Err(bad()),
    }
}

fn window(text: &str) -> Result<Window, WindowError> {
    let mut parts = text.split_whitespace();
    let (Some(day_spec), Some(span), None) = (parts.next(), parts.next(), parts.next()) else {
        return Err(malformed(
            text,
            "a window is DAYS, one space, then HH:MM-HH:MM",
        ));
    };
    let (start, end) = span
        .split_once('-')
        .ok_or_else(|| malformed(text, format!("{span:?} is not a span HH:MM-HH:MM")))?;
    let start = clock(start, text, false)?;
    let mut end = clock(end, text, true)?;
    if end <= start {
        // Crosses midnight: it ends on the next day.
        end += 1440;
    }
    Ok(Window {
        days: days(day_spec, text)?,
        start,
        end,
    })
}

/// Checks a `maintenance-windows` value on its own (no timezone needed).
pub fn check_windows(value: &str) -> Result<(), WindowError> {
    parse_windows(value).map(|_| ())
}

/// Checks a `maintenance-timezone` value against the bundled timezone database.
pub fn check_timezone(name: &str) -> Result<(), WindowError> {
    zone(name.trim()).map(|_| ())
}

fn parse_windows(value: &str) -> Result<Vec<Window>, WindowError> {
    let parsed: Vec<Window> = value
        .split(';')
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .map(window)
        .collect::<Result<_, _>>()?;
    if parsed.is_empty() {
        return Err(malformed(value, "no window is given"));
    }
    Ok(parsed)
}

fn zone(name: &str) -> Result<TimeZone, WindowError> {
    if name == "UTC" {
        return Ok(TimeZone::UTC);
    }
    tz_database()
        .get(name)
        .map_err(|_| WindowError::UnknownTimezone(name.to_string()))
}

impl Schedule {
    /// Parses the annotations' values (`timezone` absent means UTC).
    pub fn parse(windows: &str, timezone: Option<&str>) -> Result<Schedule, WindowError> {
        let tz_name = timezone.map(str::trim).unwrap_or("UTC");
        Ok(Schedule {
            windows: parse_windows(windows)?,
            tz: zone(tz_name)?,
            tz_name: tz_name.to_string(),
        })
    }

    /// The open intervals that start on the civil days around `at` (from the day before to a
    /// week after), in start order.
    fn intervals(&self, at: Timestamp) -> Vec<(Timestamp, Timestamp)> {
        let today = at.to_zoned(self.tz.clone()).date();
        let mut out = Vec::new();
        for offset in -1i32..=8 {
            let Ok(date) = today.checked_add(offset.days()) else {
                continue;
            };
            let weekday = date.weekday().to_monday_zero_offset() as usize;
            for w in &self.windows {
                if !w.days[weekday] {
                    continue;
                }
                let (Some(start), Some(end)) =
                    (self.instant(date, w.start), self.instant(date, w.end))
                else {
                    continue;
                };
                // A span the clocks skip entirely (02:00-03:00 on a spring-forward night) is
                // empty and does not open.
                if start < end {
                    out.push((start, end));
                }
            }
        }
        out.sort();
        out
    }

    /// The instant of `minutes` after midnight of `date` (past 1440 runs into later days).
    fn instant(&self, date: Date, minutes: u16) -> Option<Timestamp> {
        let date = date.checked_add(i32::from(minutes / 1440).days()).ok()?;
        let minutes = minutes % 1440;
        let time = Time::new((minutes / 60) as i8, (minutes % 60) as i8, 0, 0).ok()?;
        let civil = DateTime::from_parts(date, time);
        self.tz
            .to_ambiguous_zoned(civil)
            .compatible()
            .ok()
            .map(|z| z.timestamp())
    }

    /// Whether a window is open at `at`, and when that changes.
    pub fn at(&self, at: Timestamp) -> WindowState {
        let intervals = self.intervals(at);
        let horizon = intervals.last().map(|(_, end)| *end);
        let mut closes: Option<Timestamp> = None;
        for &(start, end) in &intervals {
            if start <= at && at < end {
                closes = Some(closes.map_or(end, |c| c.max(end)));
            }
        }
        if let Some(mut close) = closes {
            // Windows that touch or overlap the open one keep it open.
            loop {
                let extended = intervals
                    .iter()
                    .filter(|(start, end)| *start <= close && *end > close)
                    .map(|(_, end)| *end)
                    .max();
                match extended {
                    Some(end) => close = end,
                    None => break,
                }
            }
            return WindowState::Open {
                closes: (Some(close) != horizon).then_some(close),
            };
        }
        let opens = intervals
            .iter()
            .map(|(start, _)| *start)
            .find(|start| *start > at);
        match opens {
            Some(opens) => WindowState::Closed { opens },
            // Every parsed window names at least one day, so one starts within a week; this
            // arm only guards against a timezone database without the coming week.
            None => WindowState::Open { closes: None },
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, w) in self.windows.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            let days: Vec<&str> = DAYS
                .iter()
                .zip(w.days)
                .filter(|(_, on)| *on)
                .map(|(d, _)| *d)
                .collect();
            let end = w.end % 1440;
            let end = if w.end == 1440 { 1440 } else { end };
            write!(
                f,
                "{} {:02}:{:02}-{:02}:{:02}",
                if days.len() == 7 {
                    "*".to_string()
                } else {
                    days.join(",")
                },
                w.start / 60,
                w.start % 60,
                end / 60,
                end % 60
            )?;
        }
        write!(f, " ({})", self.tz_name)
    }
}

/// The timezone database windows are evaluated with: the bundled one, so validation in CI and
/// evaluation in the cluster agree whatever the host has installed.
fn tz_database() -> &'static TimeZoneDatabase {
    static DB: std::sync::OnceLock<TimeZoneDatabase> = std::sync::OnceLock::new();
    DB.get_or_init(TimeZoneDatabase::bundled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn parses_the_documented_forms_and_refuses_others_with_the_expected_form() {
        for ok in [
            "Sat,Sun 02:00-06:00; Mon-Fri 22:00-23:30",
            "* 00:00-24:00",
            "Fri-Mon 23:00-01:00",
            "Mon 22:00-22:00;",
            "Tue,Thu-Fri,Sun 08:15-09:45",
        ] {
            Schedule::parse(ok, None).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for (bad, says) in [
            ("", "no window"),
            ("Sat 2:00-6:00", "not a time"),
            ("Sat 02:00-24:01", "not a time"),
            ("Sat 24:00-02:00", "not a time"),
            ("Saturday 02:00-06:00", "not a day"),
            ("sat 02:00-06:00", "not a day"),
            ("Sat 02:00", "not a span"),
            ("Sat02:00-06:00", "a window is DAYS"),
            ("Sat 02:00-06:00 extra", "a window is DAYS"),
        ] {
            let e = Schedule::parse(bad, None).unwrap_err().to_string();
            assert!(
                e.contains(says) && e.contains("DAYS HH:MM-HH:MM"),
                "{bad}: {e}"
            );
        }
        let e = Schedule::parse("* 00:00-01:00", Some("Europe/Berln")).unwrap_err();
        assert!(
            e.to_string().contains("unknown timezone \"Europe/Berln\""),
            "{e}"
        );
    }

    #[test]
    fn open_and_closed_with_the_next_change() {
        // 2026-01-01 is a Thursday.
        let s = Schedule::parse("Sat,Sun 02:00-06:00; Mon-Fri 22:00-23:30", None).unwrap();
        assert_eq!(
            s.at(ts("2026-01-01T12:00:00Z")),
            WindowState::Closed {
                opens: ts("2026-01-01T22:00:00Z")
            }
        );
        assert_eq!(
            s.at(ts("2026-01-01T22:00:00Z")),
            WindowState::Open {
                closes: Some(ts("2026-01-01T23:30:00Z"))
            }
        );
        assert_eq!(
            s.at(ts("2026-01-02T23:30:00Z")),
            WindowState::Closed {
                opens: ts("2026-01-03T02:00:00Z")
            }
        );
    }

    #[test]
    fn a_window_across_midnight_belongs_to_the_day_it_starts_and_wraps_the_week() {
        let s = Schedule::parse("Sun 23:00-01:00", None).unwrap();
        // Sunday 2026-01-04 23:30 is open until Monday 01:00.
        assert_eq!(
            s.at(ts("2026-01-04T23:30:00Z")),
            WindowState::Open {
                closes: Some(ts("2026-01-05T01:00:00Z"))
            }
        );
        // Monday 00:30 is still inside Sunday's window.
        assert!(s.at(ts("2026-01-05T00:30:00Z")).is_open());
        // Monday 23:30 is not (no Monday window).
        assert_eq!(
            s.at(ts("2026-01-05T23:30:00Z")),
            WindowState::Closed {
                opens: ts("2026-01-11T23:00:00Z")
            }
        );
        let wrap = Schedule::parse("Fri-Mon 10:00-11:00", None).unwrap();
        assert!(wrap.at(ts("2026-01-05T10:30:00Z")).is_open(), "Monday");
        assert!(!wrap.at(ts("2026-01-06T10:30:00Z")).is_open(), "Tuesday");
    }

    #[test]
    fn adjacent_windows_close_together_and_always_open_never_closes() {
        let s = Schedule::parse("Thu 22:00-24:00; Fri 00:00-02:00", None).unwrap();
        assert_eq!(
            s.at(ts("2026-01-01T23:00:00Z")),
            WindowState::Open {
                closes: Some(ts("2026-01-02T02:00:00Z"))
            }
        );
        let always = Schedule::parse("* 00:00-24:00", None).unwrap();
        assert_eq!(
            always.at(ts("2026-01-01T12:00:00Z")),
            WindowState::Open { closes: None }
        );
    }

    #[test]
    fn daylight_saving_changes_follow_the_timezone_database() {
        // Europe/Berlin: 2026-03-29 02:00 CET jumps to 03:00 CEST; 2026-10-25 03:00 CEST back to 02:00 CET.
        let s = Schedule::parse("Sun 01:00-04:00", Some("Europe/Berlin")).unwrap();
        // Spring: 01:00 CET = 00:00Z, 04:00 CEST = 02:00Z (two real hours).
        assert_eq!(
            s.at(ts("2026-03-29T00:30:00Z")),
            WindowState::Open {
                closes: Some(ts("2026-03-29T02:00:00Z"))
            }
        );
        // Autumn: 01:00 CEST = 23:00Z Saturday, 04:00 CET = 03:00Z (four real hours).
        assert_eq!(
            s.at(ts("2026-10-24T22:30:00Z")),
            WindowState::Closed {
                opens: ts("2026-10-24T23:00:00Z")
            }
        );
        assert_eq!(
            s.at(ts("2026-10-24T23:00:00Z")),
            WindowState::Open {
                closes: Some(ts("2026-10-25T03:00:00Z"))
            }
        );
        // Times inside the skipped hour move forward with the clocks (02:15 → 03:15 CEST)...
        let gap = Schedule::parse("Sun 02:15-02:45", Some("Europe/Berlin")).unwrap();
        assert_eq!(
            gap.at(ts("2026-03-28T12:00:00Z")),
            WindowState::Closed {
                opens: ts("2026-03-29T01:15:00Z")
            }
        );
        // ...and a window that is exactly the skipped hour does not open that night.
        let skipped = Schedule::parse("Sun 02:00-03:00", Some("Europe/Berlin")).unwrap();
        assert_eq!(
            skipped.at(ts("2026-03-28T12:00:00Z")),
            WindowState::Closed {
                opens: ts("2026-04-05T00:00:00Z")
            }
        );
        // America/New_York: 2026-03-08 02:00 EST jumps to 03:00 EDT.
        let ny = Schedule::parse("Sun 03:00-05:00", Some("America/New_York")).unwrap();
        assert_eq!(
            ny.at(ts("2026-03-08T06:00:00Z")),
            WindowState::Closed {
                opens: ts("2026-03-08T07:00:00Z")
            }
        );
    }

    fn any_window() -> impl Strategy<Value = String> {
        (
            prop::collection::btree_set(0usize..7, 1..=7),
            0u16..1440,
            1u16..=1440,
        )
            .prop_map(|(days, start, end)| {
                let days: Vec<&str> = days.into_iter().map(|d| DAYS[d]).collect();
                format!(
                    "{} {:02}:{:02}-{:02}:{:02}",
                    days.join(","),
                    start / 60,
                    start % 60,
                    end / 60,
                    end % 60
                )
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

        /// The state holds until the change it names, and flips there.
        #[test]
        fn the_state_holds_until_its_next_change(
            windows in prop::collection::vec(any_window(), 1..4),
            tz in prop::sample::select(vec!["UTC", "Europe/Berlin", "America/New_York"]),
            seconds in 1_767_225_600i64..1_830_297_600,
            probe in 0.0f64..1.0,
        ) {
            let s = Schedule::parse(&windows.join("; "), Some(tz)).unwrap();
            let at = Timestamp::from_second(seconds).unwrap();
            let state = s.at(at);
            if let Some(change) = state.next_change() {
                prop_assert!(change > at);
                let span = change.as_second() - at.as_second();
                let mid = Timestamp::from_second(at.as_second() + (span as f64 * probe) as i64).unwrap();
                prop_assert_eq!(s.at(mid).is_open(), state.is_open(), "{} at {} and {}", s, at, mid);
                prop_assert_ne!(s.at(change).is_open(), state.is_open(), "{} flips at {}", s, change);
                prop_assert!(span <= 9 * 24 * 3600, "a change within a week or so");
            } else {
                prop_assert!(state.is_open());
            }
        }
    }
}
