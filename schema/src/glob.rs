//! Shell-style pattern matching as Go's `path/filepath.Match` does it on Linux (§6.8).
//!
//! Used by admission (§3.1 rules 9–10) and by the runtime that collects matched
//! `configInterrupts`. The whole name must match. `*` matches any run of characters other than
//! `/`, `?` one character other than `/`, `[…]` a class (`a-z` ranges, `^` negation), and `\`
//! escapes. ConfigMap keys cannot contain `/`, so for them `*` matches any run.

/// A syntactically invalid pattern (Go's `ErrBadPattern`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("syntax error in pattern")]
pub struct BadPattern;

const SEPARATOR: char = '/';

/// Whether `name` matches `pattern`; a malformed pattern matches nothing.
pub fn matches(pattern: &str, name: &str) -> bool {
    try_match(pattern, name).unwrap_or(false)
}

/// Go's `filepath.Match`: `Err(BadPattern)` when the pattern is malformed (reported as soon as
/// the matcher reaches the malformed part, exactly like Go).
pub fn try_match(pattern: &str, name: &str) -> Result<bool, BadPattern> {
    let mut pattern = pattern;
    let mut name = name;
    'pattern: while !pattern.is_empty() {
        let (star, chunk, rest) = scan_chunk(pattern);
        pattern = rest;
        if star && chunk.is_empty() {
            // A trailing `*` matches the rest of the name unless it has a separator.
            return Ok(!name.contains(SEPARATOR));
        }
        let (t, ok, err) = match_chunk(chunk, name);
        if ok && (t.is_empty() || !pattern.is_empty()) {
            name = t;
            continue;
        }
        if err {
            return Err(BadPattern);
        }
        if star {
            // Try the chunk at every later position; `*` cannot cross a separator.
            for (i, c) in name.char_indices() {
                if c == SEPARATOR {
                    break;
                }
                let (t, ok, err) = match_chunk(chunk, &name[i + c.len_utf8()..]);
                if ok {
                    if pattern.is_empty() && !t.is_empty() {
                        continue;
                    }
                    name = t;
                    continue 'pattern;
                }
                if err {
                    return Err(BadPattern);
                }
            }
        }
        // Report a malformed remainder even though the match already failed, as Go does.
        while !pattern.is_empty() {
            let (_, chunk, rest) = scan_chunk(pattern);
            pattern = rest;
            if match_chunk(chunk, "").2 {
                return Err(BadPattern);
            }
        }
        return Ok(false);
    }
    Ok(name.is_empty())
}

/// Splits off leading stars and the chunk up to the next unbracketed `*`.
fn scan_chunk(pattern: &str) -> (bool, &str, &str) {
    let trimmed = pattern.trim_start_matches('*');
    let star = trimmed.len() != pattern.len();
    let bytes = trimmed.as_bytes();
    let mut in_range = false;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if i + 1 < bytes.len() => i += 1,
            b'[' => in_range = true,
            b']' => in_range = false,
            b'*' if !in_range => break,
            _ => {}
        }
        i += 1;
    }
    (star, &trimmed[..i], &trimmed[i..])
}

/// Matches `chunk` against the start of `s`: (rest of s, matched, pattern error).
fn match_chunk<'a>(chunk: &str, s: &'a str) -> (&'a str, bool, bool) {
    let mut chunk = chunk;
    let mut s = s;
    // After a failure keep walking the chunk only to detect malformed syntax.
    let mut failed = false;
    while let Some(first) = chunk.chars().next() {
        if !failed && s.is_empty() {
            failed = true;
        }
        match first {
            '[' => {
                let mut r = '\0';
                if !failed {
                    // `s` is non-empty here because `failed` would be set otherwise.
                    let c = s.chars().next().unwrap_or('\0');
                    r = c;
                    s = &s[c.len_utf8()..];
                }
                chunk = &chunk[1..];
                let negated = chunk.starts_with('^');
                if negated {
                    chunk = &chunk[1..];
                }
                let mut matched = false;
                let mut nrange = 0;
                loop {
                    if chunk.starts_with(']') && nrange > 0 {
                        chunk = &chunk[1..];
                        break;
                    }
                    let Ok((lo, rest)) = get_esc(chunk) else {
                        return ("", false, true);
                    };
                    chunk = rest;
                    let mut hi = lo;
                    if chunk.starts_with('-') {
                        let Ok((h, rest)) = get_esc(&chunk[1..]) else {
                            return ("", false, true);
                        };
                        hi = h;
                        chunk = rest;
                    }
                    if lo <= r && r <= hi {
                        matched = true;
                    }
                    nrange += 1;
                }
                if matched == negated {
                    failed = true;
                }
            }
            '?' => {
                if !failed {
                    let c = s.chars().next().unwrap_or('\0');
                    if c == SEPARATOR {
                        failed = true;
                    }
                    s = &s[c.len_utf8()..];
                }
                chunk = &chunk[1..];
            }
            _ => {
                if first == '\\' {
                    chunk = &chunk[1..];
                    if chunk.is_empty() {
                        return ("", false, true);
                    }
                }
                let want = chunk.chars().next().unwrap_or('\0');
                if !failed {
                    let c = s.chars().next().unwrap_or('\0');
                    if c != want {
                        failed = true;
                    }
                    s = &s[c.len_utf8()..];
                }
                chunk = &chunk[want.len_utf8()..];
            }
        }
    }
    if failed {
        ("", false, false)
    } else {
        (s, true, false)
    }
}

/// One possibly escaped character of a class; errors on `-`, `]`, end, or a class that ends
/// right after it (Go requires the closing `]`).
fn get_esc(chunk: &str) -> Result<(char, &str), BadPattern> {
    let mut chunk = chunk;
    match chunk.chars().next() {
        None | Some('-') | Some(']') => return Err(BadPattern),
        Some('\\') => {
            chunk = &chunk[1..];
            if chunk.is_empty() {
                return Err(BadPattern);
            }
        }
        Some(_) => {}
    }
    let c = chunk.chars().next().ok_or(BadPattern)?;
    let rest = &chunk[c.len_utf8()..];
    if rest.is_empty() {
        return Err(BadPattern);
    }
    Ok((c, rest))
}

/// Whether admission treats the pattern as a glob (§3.1 rule 9): it contains `*`.
pub fn is_glob(pattern: &str) -> bool {
    pattern.contains('*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_examples() {
        let keys = ["a.conf", "b.conf", "ab.txt"];
        let hits =
            |p: &str| -> Vec<&str> { keys.iter().copied().filter(|k| matches(p, k)).collect() };
        assert_eq!(hits("*.conf"), ["a.conf", "b.conf"]);
        assert_eq!(hits("?b*"), ["ab.txt"]);
        assert_eq!(hits("[ab]*.conf"), ["a.conf", "b.conf"]);
        assert_eq!(hits("[ab].conf"), ["a.conf", "b.conf"]);
    }

    #[test]
    fn go_match_table() {
        // Cases from Go's path/filepath match_test.go.
        let cases: &[(&str, &str, Result<bool, BadPattern>)] = &[
            ("abc", "abc", Ok(true)),
            ("*", "abc", Ok(true)),
            ("*c", "abc", Ok(true)),
            ("a*", "a", Ok(true)),
            ("a*", "abc", Ok(true)),
            ("a*", "ab/c", Ok(false)),
            ("a*/b", "abc/b", Ok(true)),
            ("a*/b", "a/c/b", Ok(false)),
            ("a*b*c*d*e*/f", "axbxcxdxe/f", Ok(true)),
            ("a*b*c*d*e*/f", "axbxcxdxexxx/f", Ok(true)),
            ("a*b*c*d*e*/f", "axbxcxdxe/xxx/f", Ok(false)),
            ("a*b*c*d*e*/f", "axbxcxdxexxx/fff", Ok(false)),
            ("a*b?c*x", "abxbbxdbxebxczzx", Ok(true)),
            ("a*b?c*x", "abxbbxdbxebxczzy", Ok(false)),
            ("ab[c]", "abc", Ok(true)),
            ("ab[b-d]", "abc", Ok(true)),
            ("ab[e-g]", "abc", Ok(false)),
            ("ab[^c]", "abc", Ok(false)),
            ("ab[^b-d]", "abc", Ok(false)),
            ("ab[^e-g]", "abc", Ok(true)),
            ("a\\*b", "a*b", Ok(true)),
            ("a\\*b", "ab", Ok(false)),
            ("a?b", "a☺b", Ok(true)),
            ("a[^a]b", "a☺b", Ok(true)),
            ("a???b", "a☺b", Ok(false)),
            ("a[^a][^a][^a]b", "a☺b", Ok(false)),
            ("[a-ζ]*", "α", Ok(true)),
            ("*[a-ζ]", "A", Ok(false)),
            ("a?b", "a/b", Ok(false)),
            ("a*b", "a/b", Ok(false)),
            ("[\\]a]", "]", Ok(true)),
            ("[\\-]", "-", Ok(true)),
            ("[x\\-]", "x", Ok(true)),
            ("[x\\-]", "-", Ok(true)),
            ("[x\\-]", "z", Ok(false)),
            ("[\\-x]", "x", Ok(true)),
            ("[\\-x]", "-", Ok(true)),
            ("[\\-x]", "a", Ok(false)),
            ("[]a]", "]", Err(BadPattern)),
            ("[-]", "-", Err(BadPattern)),
            ("[x-]", "x", Err(BadPattern)),
            ("[x-]", "-", Err(BadPattern)),
            ("[x-]", "z", Err(BadPattern)),
            ("[-x]", "x", Err(BadPattern)),
            ("[-x]", "-", Err(BadPattern)),
            ("[-x]", "a", Err(BadPattern)),
            ("\\", "a", Err(BadPattern)),
            ("[a-b-c]", "a", Err(BadPattern)),
            ("[", "a", Err(BadPattern)),
            ("[^", "a", Err(BadPattern)),
            ("[^bc", "a", Err(BadPattern)),
            ("a[", "a", Err(BadPattern)),
            ("a[", "ab", Err(BadPattern)),
            ("a[", "x", Err(BadPattern)),
            ("a/b[", "x", Err(BadPattern)),
            ("*x", "xxx", Ok(true)),
        ];
        for (pattern, name, want) in cases {
            assert_eq!(
                try_match(pattern, name),
                *want,
                "Match({pattern:?}, {name:?})"
            );
        }
    }

    #[test]
    fn malformed_patterns_match_nothing() {
        assert!(!matches("*[", "a["));
        assert!(!matches("[*", "[x"));
    }
}
