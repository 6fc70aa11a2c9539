//! Python `repr` of the values that appear in flag names and console lines (§9.3, §16 Q11).
//!
//! Flag file names embed the Python list representation of a step's arguments and return
//! codes; nodes upgraded from the Python agent keep their flags only if we produce the same
//! bytes.

/// Python's `str.isprintable()` for one character.
///
/// Python treats categories Cc, Cf, Cs, Co, Cn, Zl, Zp and Zs (except the space) as
/// non-printable. We carry no Unicode tables, so this lists every control, format, separator,
/// private-use and noncharacter code point, plus the large unassigned planes. Code points
/// unassigned in Python's Unicode database but lying inside assigned blocks are treated as
/// printable: a known, documented gap that no real package argument hits.
pub fn is_printable(c: char) -> bool {
    let u = c as u32;
    if u == 0x20 {
        return true;
    }
    if u < 0x20 || (0x7f..=0xa0).contains(&u) || u == 0xad {
        return false;
    }
    if u < 0x100 {
        return true;
    }
    // Noncharacters (Cn in every Unicode version).
    if (u & 0xfffe) == 0xfffe || (0xfdd0..=0xfdef).contains(&u) {
        return false;
    }
    const NON_PRINTABLE: &[(u32, u32)] = &[
        (0x0600, 0x0605),
        (0x061c, 0x061c),
        (0x06dd, 0x06dd),
        (0x070f, 0x070f),
        (0x0890, 0x0891),
        (0x08e2, 0x08e2),
        (0x1680, 0x1680),
        (0x180e, 0x180e),
        (0x2000, 0x200f),
        (0x2028, 0x202f),
        (0x205f, 0x206f),
        (0x3000, 0x3000),
        (0xd800, 0xf8ff),
        (0xfeff, 0xfeff),
        (0xfff0, 0xfffb),
        (0x110bd, 0x110bd),
        (0x110cd, 0x110cd),
        (0x13430, 0x1343f),
        (0x1bca0, 0x1bca3),
        (0x1d173, 0x1d17a),
        (0x40000, 0xdffff),
        (0xe0000, 0xeffff),
        (0xf0000, 0x10ffff),
    ];
    !NON_PRINTABLE.iter().any(|&(lo, hi)| (lo..=hi).contains(&u))
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
    fn repr_escapes_controls_and_keeps_printable_non_ascii() {
        assert_eq!(
            repr_str("\u{1}\u{7f}é\u{a0}\u{200b}日"),
            "'\\x01\\x7fé\\xa0\\u200b日'"
        );
    }
}
