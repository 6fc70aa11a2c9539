//! Python `repr` of the values that appear in flag names and console lines (§9.3, §16 Q11).
//!
//! Flag file names embed the Python list representation of a step's arguments and return
//! codes; nodes upgraded from the Python agent keep their flags only if we produce the same
//! bytes.

/// Code points Python's `str.isprintable()` rejects, generated from the Python the upstream
/// agent runs (`agent/scripts/gen_printable_table.py`).
#[path = "pyrepr_table.rs"]
#[rustfmt::skip]
pub mod table;

/// Python's `str.isprintable()` for one character, exactly as the Python version of
/// [`table::PYTHON_VERSION`] (the upstream agent's runtime) decides it: categories Cc, Cf, Cs,
/// Co, Cn, Zl, Zp and Zs (except the space) are not printable.
pub fn is_printable(c: char) -> bool {
    let u = c as u32;
    if (0x20..0x7f).contains(&u) {
        return true;
    }
    table::NON_PRINTABLE
        .binary_search_by(|&(lo, hi)| {
            if hi < u {
                std::cmp::Ordering::Less
            } else if lo > u {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_err()
}

/// Python `repr(str)`.
pub fn repr_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if is_printable(c) => out.push(c),
            c => {
                let u = c as u32;
                if u < 0x100 {
                    out.push_str(&format!("\\x{u:02x}"));
                } else if u < 0x10000 {
                    out.push_str(&format!("\\u{u:04x}"));
                } else {
                    out.push_str(&format!("\\U{u:08x}"));
                }
            }
        }
    }
    out.push(quote);
    out
}

/// Python `repr(list_of_str)`: `['a', 'b']`, `[]`.
pub fn repr_str_list(items: &[String]) -> String {
    let parts: Vec<String> = items.iter().map(|s| repr_str(s)).collect();
    format!("[{}]", parts.join(", "))
}

/// Python `repr(list_of_int)`: `[0, 2]`.
pub fn repr_int_list(items: &[i64]) -> String {
    let parts: Vec<String> = items.iter().map(i64::to_string).collect();
    format!("[{}]", parts.join(", "))
}

/// Python `str(bool)`.
pub fn py_bool(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repr_prefers_single_quotes() {
        assert_eq!(repr_str("abc"), "'abc'");
    }

    #[test]
    fn repr_switches_to_double_quotes_for_lone_single_quote() {
        assert_eq!(repr_str("it's"), "\"it's\"");
    }

    #[test]
    fn repr_escapes_single_quote_when_both_present() {
        assert_eq!(repr_str("a'b\"c"), "'a\\'b\"c'");
    }

    #[test]
    fn printability_follows_the_unicode_version_of_upstreams_python() {
        // Assigned in Unicode 15.0 (CJK Extension H): printable for Python 3.13.
        assert!(is_printable('\u{31350}'));
        // Unassigned, private use, format and separators: escaped.
        for c in [
            '\u{378}',
            '\u{e000}',
            '\u{200b}',
            '\u{2028}',
            '\u{3000}',
            '\u{10ffff}',
        ] {
            assert!(!is_printable(c), "{c:?}");
        }
        assert_eq!(repr_str("\u{378}"), "'\\u0378'");
    }

    #[test]
    fn repr_escapes_controls_and_keeps_printable_non_ascii() {
        assert_eq!(
            repr_str("\u{1}\u{7f}é\u{a0}\u{200b}日"),
            "'\\x01\\x7fé\\xa0\\u200b日'"
        );
    }
}
