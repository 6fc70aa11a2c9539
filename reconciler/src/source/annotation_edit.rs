//! Setting one annotation of one manifest as a minimal textual edit, for commits people
//! review (`nodewright approve`, approval pull requests): every other byte of the file —
//! comments, key order, quoting, indentation, line endings, the other documents — stays as
//! written, so the commit's diff is the one annotation line.
//!
//! The edit reads the YAML the way manifests are written (block mappings, one key per line,
//! `annotations` in block or one-line flow style) rather than re-serializing a parsed tree,
//! which would lose comments and formatting. What it cannot edit faithfully (a value over
//! several lines, `metadata` in flow style) is refused with the line, never guessed at;
//! callers still validate the edited file as a whole.

/// Why the annotation cannot be set by a minimal edit.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// No document contains the given line.
    #[error("line {line} is not inside a YAML document of this file")]
    NoDocument {
        /// The line asked for.
        line: usize,
    },
    /// The document has no top-level `metadata:` key.
    #[error("the document at line {line} has no metadata")]
    NoMetadata {
        /// The document's first line.
        line: usize,
    },
    /// A construct the edit does not rewrite; the file must be edited by hand.
    #[error("line {line}: {what} cannot be edited in place; set the annotation by hand")]
    Unsupported {
        /// 1-based line.
        line: usize,
        /// What was found there.
        what: &'static str,
    },
}

/// The edited file and the 1-based line that now carries the annotation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edited {
    /// The whole file after the edit.
    pub text: String,
    /// Where the annotation is.
    pub line: usize,
}

/// One line of the file: its text without the line ending, and the ending (`\n`, `\r\n` or
/// nothing on a last line without one).
#[derive(Clone, Copy, Debug)]
struct Line<'a> {
    text: &'a str,
    eol: &'a str,
}

impl Line<'_> {
    fn indent(&self) -> usize {
        self.text.len() - self.text.trim_start_matches(' ').len()
    }

    /// Blank or comment-only lines carry no structure.
    fn is_content(&self) -> bool {
        let t = self.text.trim_start();
        !t.is_empty() && !t.starts_with('#')
    }

    fn is_separator(&self) -> bool {
        let t = self.text;
        (t.starts_with("---") || t.starts_with("..."))
            && t[3..].chars().next().is_none_or(char::is_whitespace)
    }
}

fn split_lines(text: &str) -> Vec<Line<'_>> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (line, eol, next) = match rest.find('\n') {
            Some(i) if i > 0 && rest.as_bytes()[i - 1] == b'\r' => {
                (&rest[..i - 1], &rest[i - 1..=i], &rest[i + 1..])
            }
            Some(i) => (&rest[..i], &rest[i..=i], &rest[i + 1..]),
            None => (rest, "", ""),
        };
        out.push(Line { text: line, eol });
        rest = next;
    }
    out
}

/// A key at the start of `text` (after indentation): plain, `"double"` or `'single'` quoted,
/// followed by `:` and a space or the end. Returns the key and the byte offset after the `:`.
fn key_of(text: &str) -> Option<(String, usize)> {
    let (key, after) = match text.chars().next()? {
        '"' | '\'' => {
            let (value, len) = quoted_at(text)?;
            (value, len)
        }
        _ => {
            let mut end = None;
            for (i, _) in text.match_indices(':') {
                if text[i + 1..].chars().next().is_none_or(char::is_whitespace) {
                    end = Some(i);
                    break;
                }
            }
            let end = end?;
            (text[..end].trim_end().to_string(), end)
        }
    };
    let rest = &text[after..];
    let colon = rest.len() - rest.trim_start_matches(' ').len();
    if !rest[colon..].starts_with(':') {
        return None;
    }
    let after_colon = after + colon + 1;
    text[after_colon..]
        .chars()
        .next()
        .is_none_or(char::is_whitespace)
        .then_some((key, after_colon))
}

/// A quoted scalar at the start of `text`: its value and its length in bytes, quotes included.
fn quoted_at(text: &str) -> Option<(String, usize)> {
    let quote = text.chars().next()?;
    let mut value = String::new();
    let mut chars = text.char_indices().skip(1).peekable();
    while let Some((i, c)) = chars.next() {
        match (quote, c) {
            ('"', '\\') => {
                let (_, escaped) = chars.next()?;
                value.push(escaped);
            }
            ('\'', '\'') if chars.peek().is_some_and(|(_, n)| *n == '\'') => {
                chars.next();
                value.push('\'');
            }
            (q, c) if c == q => return Some((value, i + 1)),
            (_, c) => value.push(c),
        }
    }
    None
}

/// How a scalar value is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Style {
    Plain,
    Double,
    Single,
}

/// `value` written in `style`; a plain style falls back to double quotes when the value would
/// read differently unquoted (in flow context `,` and brackets end a plain scalar too).
fn render(value: &str, style: Style, flow: bool) -> String {
    let plain_ok = !value.is_empty()
        && value.chars().all(|c| {
            c.is_ascii_alphanumeric()
                || matches!(c, '=' | '_' | '-' | '.' | '/')
                || (c == ',' && !flow)
        })
        && !value.starts_with(['-', '.'])
        && !matches!(
            value,
            "null" | "true" | "false" | "yes" | "no" | "on" | "off"
        )
        && value.parse::<f64>().is_err();
    match style {
        Style::Plain if plain_ok => value.to_string(),
        Style::Single => format!("'{}'", value.replace('\'', "''")),
        Style::Plain | Style::Double => {
            format!("\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\""))
        }
    }
}

/// The span `(start, end)` of a one-line scalar value starting at byte `from` of `text` (after
/// the key's `:`), and its style; `None` for an empty value (nothing but a comment).
fn value_span(
    text: &str,
    from: usize,
    line: usize,
) -> Result<Option<(usize, usize, Style)>, Error> {
    let rest = &text[from..];
    let start = from + (rest.len() - rest.trim_start().len());
    let value = &text[start..];
    match value.chars().next() {
        None | Some('#') => Ok(None),
        Some(q @ ('"' | '\'')) => {
            let (_, len) = quoted_at(value).ok_or(Error::Unsupported {
                line,
                what: "a quoted value that continues on the next line",
            })?;
            let style = if q == '"' {
                Style::Double
            } else {
                Style::Single
            };
            Ok(Some((start, start + len, style)))
        }
        Some('|' | '>') => Err(Error::Unsupported {
            line,
            what: "a block scalar value",
        }),
        Some('{' | '[' | '&' | '*' | '!') => Err(Error::Unsupported {
            line,
            what: "a value that is not a plain or quoted string",
        }),
        Some(_) => {
            let end = value
                .match_indices(" #")
                .next()
                .map_or(value.len(), |(i, _)| i);
            let end = start + value[..end].trim_end().len();
            Ok(Some((start, end, Style::Plain)))
        }
    }
}

/// Sets annotation `key` to `value` in the metadata of the YAML document of `text` that
/// contains 1-based line `line` (the loader's provenance line of the object), as a minimal
/// textual edit:
///
/// - an existing entry has its value replaced in place, in its quoting style;
/// - else the entry is added at the end of the existing `annotations:` block, at its
///   entries' indentation (or inside a one-line flow mapping `annotations: {…}`);
/// - else an `annotations:` block is added at the end of `metadata:`.
///
/// Inserted lines take the line ending of the line they follow. Errors name the line of what
/// cannot be edited faithfully.
pub fn set_annotation(text: &str, line: usize, key: &str, value: &str) -> Result<Edited, Error> {
    let lines = split_lines(text);
    let (first, end) = document_at(&lines, line)?;
    let doc = &lines[first..end];
    let top = doc
        .iter()
        .find(|l| l.is_content())
        .map_or(0, |l| l.indent());
    let metadata = doc
        .iter()
        .position(|l| {
            l.indent() == top && key_of(&l.text[top..]).is_some_and(|(k, _)| k == "metadata")
        })
        .ok_or(Error::NoMetadata { line: first + 1 })?;
    let (_, after) =
        key_of(&doc[metadata].text[top..]).ok_or(Error::NoMetadata { line: first + 1 })?;
    let inline = doc[metadata].text[top + after..].trim_start();
    if !inline.is_empty() && !inline.starts_with('#') {
        return Err(Error::Unsupported {
            line: first + metadata + 1,
            what: "metadata in flow style",
        });
    }
    let meta_end = block_end(doc, metadata, top);
    let Some(child) = doc[metadata + 1..meta_end]
        .iter()
        .find(|l| l.is_content())
        .map(|l| l.indent())
    else {
        return Err(Error::NoMetadata { line: first + 1 });
    };
    let step = child - top;
    let annotations = (metadata + 1..meta_end).find_map(|i| {
        let (k, after) = key_of(&doc[i].text[child.min(doc[i].text.len())..])?;
        (doc[i].indent() == child && k == "annotations").then_some((i, child + after))
    });
    let edit = match annotations {
        Some((at, from)) => in_annotations(doc, (at, from), child + step, first, key, value)?,
        None => {
            let last = last_content(doc, metadata, meta_end);
            let eol = line_ending(&lines, first + last);
            Change::Insert {
                after: last,
                lines: vec![
                    format!("{}annotations:", " ".repeat(child)),
                    format!(
                        "{}{}: {}",
                        " ".repeat(child + step),
                        key,
                        render(value, Style::Double, false)
                    ),
                ],
                eol,
            }
        }
    };
    Ok(apply(&lines, first, with_document_eol(edit, &lines)))
}

/// What to change in a document (indices relative to it).
enum Change {
    /// Replace bytes `start..end` of line `line`.
    Replace {
        line: usize,
        start: usize,
        end: usize,
        with: String,
    },
    /// Insert whole lines after line `after`.
    Insert {
        after: usize,
        lines: Vec<String>,
        eol: String,
    },
}

fn apply(lines: &[Line<'_>], first: usize, change: Change) -> Edited {
    let mut out = String::new();
    let mut at = 0;
    for (i, l) in lines.iter().enumerate() {
        match &change {
            Change::Replace {
                line,
                start,
                end,
                with,
            } if first + line == i => {
                out.push_str(&l.text[..*start]);
                out.push_str(with);
                out.push_str(&l.text[*end..]);
                out.push_str(l.eol);
                at = i + 1;
            }
            Change::Insert {
                after,
                lines: new,
                eol,
            } if first + after == i => {
                out.push_str(l.text);
                // A last line without an ending gets one before the new lines, which then
                // end the file without one as it did.
                out.push_str(if l.eol.is_empty() { eol } else { l.eol });
                for (n, new_line) in new.iter().enumerate() {
                    out.push_str(new_line);
                    if n + 1 < new.len() || !l.eol.is_empty() {
                        out.push_str(eol);
                    }
                }
                at = i + 1 + new.len();
            }
            _ => {
                out.push_str(l.text);
                out.push_str(l.eol);
            }
        }
    }
    Edited {
        text: out,
        line: at,
    }
}

/// The edit inside an existing `annotations:` entry at document line `at`, its value from
/// byte `from`; `indent` is where entries of an empty block go.
fn in_annotations(
    doc: &[Line<'_>],
    (at, from): (usize, usize),
    indent: usize,
    first: usize,
    key: &str,
    value: &str,
) -> Result<Change, Error> {
    let rest = doc[at].text[from..].trim_start();
    if rest.starts_with('{') {
        return in_flow(doc[at].text, from, at, first, key, value);
    }
    if value_span(doc[at].text, from, first + at + 1)?.is_some() {
        return Err(Error::Unsupported {
            line: first + at + 1,
            what: "annotations that are not a mapping",
        });
    }
    let end = block_end(doc, at, doc[at].indent());
    let entries: Vec<usize> = (at + 1..end).filter(|&i| doc[i].is_content()).collect();
    let Some(&entry_first) = entries.first() else {
        let eol = doc[at].eol.to_string();
        return Ok(Change::Insert {
            after: at,
            lines: vec![format!(
                "{}{}: {}",
                " ".repeat(indent),
                key,
                render(value, Style::Double, false)
            )],
            eol,
        });
    };
    let indent = doc[entry_first].indent();
    for &i in &entries {
        if doc[i].indent() != indent {
            continue;
        }
        let Some((k, after)) = key_of(&doc[i].text[indent..]) else {
            continue;
        };
        if k != key {
            continue;
        }
        let from = indent + after;
        let span = value_span(doc[i].text, from, first + i + 1)?;
        // A value continued on more indented lines is several lines long.
        let next = entries.iter().find(|&&n| n > i);
        if next.is_some_and(|&n| doc[n].indent() > indent) {
            return Err(Error::Unsupported {
                line: first + i + 1,
                what: "a value over several lines",
            });
        }
        return Ok(match span {
            Some((start, end, style)) => Change::Replace {
                line: i,
                start,
                end,
                with: render(value, style, false),
            },
            None => Change::Replace {
                line: i,
                start: from,
                end: from,
                with: format!(" {}", render(value, Style::Double, false)),
            },
        });
    }
    // New entries follow the first entry's key quoting.
    let quoted_keys = doc[entry_first].text[indent..].starts_with('"');
    let written_key = if quoted_keys {
        render(key, Style::Double, false)
    } else {
        key.to_string()
    };
    let last = *entries.last().unwrap_or(&entry_first);
    Ok(Change::Insert {
        after: last,
        lines: vec![format!(
            "{}{}: {}",
            " ".repeat(indent),
            written_key,
            render(value, Style::Double, false)
        )],
        eol: doc[last].eol.to_string(),
    })
}

/// A last line without an ending takes the document's usual one for the lines added after it.
fn with_document_eol(change: Change, doc: &[Line<'_>]) -> Change {
    match change {
        Change::Insert { after, lines, eol } if eol.is_empty() => Change::Insert {
            after,
            lines,
            eol: usual_eol(doc),
        },
        other => other,
    }
}

fn usual_eol(lines: &[Line<'_>]) -> String {
    lines
        .iter()
        .find(|l| !l.eol.is_empty())
        .map_or("\n", |l| l.eol)
        .to_string()
}

fn line_ending(lines: &[Line<'_>], i: usize) -> String {
    if lines[i].eol.is_empty() {
        usual_eol(lines)
    } else {
        lines[i].eol.to_string()
    }
}

/// The edit inside a one-line flow mapping `annotations: {…}` starting after byte `from`.
fn in_flow(
    text: &str,
    from: usize,
    at: usize,
    first: usize,
    key: &str,
    value: &str,
) -> Result<Change, Error> {
    let line = first + at + 1;
    let open = from + text[from..].find('{').ok_or(Error::NoDocument { line })?;
    // Top-level entry boundaries: the separating commas and the closing brace.
    let mut commas = Vec::new();
    let mut close = None;
    let mut depth = 0usize;
    let mut i = open;
    while i < text.len() {
        let c = text[i..].chars().next().unwrap_or(' ');
        match c {
            '"' | '\'' => {
                let (_, len) = quoted_at(&text[i..]).ok_or(Error::Unsupported {
                    line,
                    what: "a flow mapping over several lines",
                })?;
                i += len;
                continue;
            }
            '{' | '[' => depth += 1,
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    close = Some(i);
                    break;
                }
            }
            ',' if depth == 1 => commas.push(i),
            _ => {}
        }
        i += c.len_utf8();
    }
    let close = close.ok_or(Error::Unsupported {
        line,
        what: "a flow mapping over several lines",
    })?;
    let mut bounds = vec![open];
    bounds.extend(&commas);
    bounds.push(close);
    for pair in bounds.windows(2) {
        let (start, end) = (pair[0] + 1, pair[1]);
        let entry = &text[start..end];
        let lead = entry.len() - entry.trim_start().len();
        let Some((k, after)) = key_of(&entry[lead..]) else {
            continue;
        };
        if k != key {
            continue;
        }
        let value_from = start + lead + after;
        let raw = &text[value_from..end];
        let v_start = value_from + (raw.len() - raw.trim_start().len());
        let v_end = value_from + raw.trim_end().len();
        let style = match text[v_start..].chars().next() {
            Some('"') => Style::Double,
            Some('\'') => Style::Single,
            _ => Style::Plain,
        };
        return Ok(Change::Replace {
            line: at,
            start: v_start,
            end: v_end.max(v_start),
            with: render(value, style, true),
        });
    }
    let entry = format!("{key}: {}", render(value, Style::Double, true));
    let inner = &text[open + 1..close];
    if inner.trim().is_empty() {
        return Ok(Change::Replace {
            line: at,
            start: open + 1,
            end: close,
            with: entry,
        });
    }
    // After the last entry's text, keeping the spacing before the brace.
    let last_start = commas.last().map_or(open + 1, |c| c + 1);
    let last = &text[last_start..close];
    if last.trim().is_empty() {
        // A trailing comma already separates.
        let at_byte = last_start + (last.len() - last.trim_start().len());
        return Ok(Change::Replace {
            line: at,
            start: at_byte,
            end: at_byte,
            with: format!(" {entry}"),
        });
    }
    let at_byte = last_start + last.trim_end().len();
    Ok(Change::Replace {
        line: at,
        start: at_byte,
        end: at_byte,
        with: format!(", {entry}"),
    })
}

/// The document (lines `first..end`) that holds 1-based `line`.
fn document_at(lines: &[Line<'_>], line: usize) -> Result<(usize, usize), Error> {
    let index = line
        .checked_sub(1)
        .filter(|&i| i < lines.len() && !lines[i].is_separator())
        .ok_or(Error::NoDocument { line })?;
    let first = lines[..index]
        .iter()
        .rposition(Line::is_separator)
        .map_or(0, |i| i + 1);
    let end = lines[index..]
        .iter()
        .position(Line::is_separator)
        .map_or(lines.len(), |i| index + i);
    Ok((first, end))
}

/// The end (exclusive) of the block under the key at `at` with indentation `indent`: the
/// next content line indented no deeper (a `- ` item at the same indentation belongs to it).
fn block_end(doc: &[Line<'_>], at: usize, indent: usize) -> usize {
    doc.iter()
        .enumerate()
        .skip(at + 1)
        .find(|(_, l)| {
            l.is_content()
                && (l.indent() < indent
                    || (l.indent() == indent
                        && !l.text[indent..].starts_with("- ")
                        && &l.text[indent..] != "-"))
        })
        .map_or(doc.len(), |(i, _)| i)
}

/// The last content line in `from..end` (at least `from`).
fn last_content(doc: &[Line<'_>], from: usize, end: usize) -> usize {
    (from..end)
        .rev()
        .find(|&i| doc[i].is_content())
        .unwrap_or(from)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "gitops.nodewright.nvidia.com/approved-batches";

    /// The edit, and a check that the result is still YAML with the annotation set.
    fn edit(text: &str, line: usize, value: &str) -> String {
        let edited = set_annotation(text, line, KEY, value).unwrap();
        let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&edited.text)
            .map(|d| serde::Deserialize::deserialize(d).unwrap())
            .collect();
        let found = docs
            .iter()
            .any(|d| d["metadata"]["annotations"][KEY].as_str() == Some(value));
        assert!(found, "annotation not set:\n{}", edited.text);
        let edited_line = edited.text.lines().nth(edited.line - 1).unwrap();
        assert!(
            edited_line.contains(value),
            "line {}: {edited_line}",
            edited.line
        );
        edited.text
    }

    /// Lines that differ between two texts (removed, added).
    fn changed(before: &str, after: &str) -> (Vec<String>, Vec<String>) {
        let b: Vec<&str> = before.split_inclusive('\n').collect();
        let a: Vec<&str> = after.split_inclusive('\n').collect();
        let prefix = b.iter().zip(&a).take_while(|(x, y)| x == y).count();
        let suffix = b[prefix..]
            .iter()
            .rev()
            .zip(a[prefix..].iter().rev())
            .take_while(|(x, y)| x == y)
            .count();
        (
            b[prefix..b.len() - suffix]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            a[prefix..a.len() - suffix]
                .iter()
                .map(|s| s.to_string())
                .collect(),
        )
    }

    const COMMENTED: &str = r#"# The GPU driver rollout.  Reviewed by the platform team.
apiVersion: nodewright.nvidia.com/v1alpha1
kind: NodeWright
metadata:   # who we are
  name: driver
  annotations:
    # canary first, then production
    gitops.nodewright.nvidia.com/approval-required: "canary,production"   # gated
    'gitops.nodewright.nvidia.com/approved-batches':    "production=2"    # approved by ops
    example.com/owner:   platform
  labels: {team: gpu}
spec:
  packages:
    driver:   {version: "2.0.0", image: example/driver}   # odd spacing kept
"#;

    #[test]
    fn an_existing_value_is_replaced_in_place_keeping_everything_else() {
        let out = edit(COMMENTED, 2, "canary=2,production=3");
        let (removed, added) = changed(COMMENTED, &out);
        assert_eq!(
            removed,
            [
                "    'gitops.nodewright.nvidia.com/approved-batches':    \"production=2\"    # approved by ops\n"
            ]
        );
        assert_eq!(
            added,
            [
                "    'gitops.nodewright.nvidia.com/approved-batches':    \"canary=2,production=3\"    # approved by ops\n"
            ]
        );
    }

    #[test]
    fn plain_and_single_quoted_values_keep_their_style() {
        let plain = "kind: NodeWright\nmetadata:\n  name: a\n  annotations:\n    gitops.nodewright.nvidia.com/approved-batches: canary=2 # ok\nspec: {}\n";
        let out = edit(plain, 1, "canary=3");
        assert!(out.contains("approved-batches: canary=3 # ok\n"), "{out}");
        let single = plain.replace("canary=2", "'canary=2'");
        let out = edit(&single, 1, "canary=3");
        assert!(out.contains("approved-batches: 'canary=3' # ok\n"), "{out}");
        let empty = plain.replace(" canary=2 # ok", "");
        let out = edit(&empty, 1, "canary=3");
        assert!(out.contains("approved-batches: \"canary=3\"\n"), "{out}");
    }

    #[test]
    fn a_missing_entry_is_added_to_the_annotations_block_at_its_indentation() {
        let text = "kind: NodeWright\nmetadata:\n    name: a\n    annotations:\n        # owners\n        \"example.com/owner\": platform\n    # labels next\n    labels:\n        x: y\nspec: {}\n";
        let out = edit(text, 1, "production=2");
        let (removed, added) = changed(text, &out);
        assert!(removed.is_empty());
        assert_eq!(
            added,
            ["        \"gitops.nodewright.nvidia.com/approved-batches\": \"production=2\"\n"]
        );
    }

    #[test]
    fn flow_style_annotations_are_edited_inside_their_braces() {
        let text = "kind: NodeWright\nmetadata:\n  name: a\n  annotations: {example.com/owner: platform, \"x/y\": 'a,b' }  # flow\nspec: {}\n";
        let out = edit(text, 1, "production=2");
        assert!(
            out.contains("  annotations: {example.com/owner: platform, \"x/y\": 'a,b', gitops.nodewright.nvidia.com/approved-batches: \"production=2\" }  # flow\n"),
            "{out}"
        );
        let out2 = edit(&out, 1, "canary=2,production=2");
        assert!(
            out2.contains("approved-batches: \"canary=2,production=2\" }  # flow\n"),
            "{out2}"
        );
        let empty = "kind: NodeWright\nmetadata:\n  name: a\n  annotations: {}\nspec: {}\n";
        let out = edit(empty, 1, "production=2");
        assert!(
            out.contains(
                "  annotations: {gitops.nodewright.nvidia.com/approved-batches: \"production=2\"}\n"
            ),
            "{out}"
        );
    }

    #[test]
    fn missing_annotations_become_a_block_at_the_end_of_metadata() {
        let text = "apiVersion: nodewright.nvidia.com/v1alpha1\nkind: NodeWright\nmetadata:\n   name: a\n   finalizers:\n   - x\n# the spec\nspec: {}\n";
        let out = edit(text, 1, "production=2");
        let (removed, added) = changed(text, &out);
        assert!(removed.is_empty());
        assert_eq!(
            added,
            [
                "   annotations:\n",
                "      gitops.nodewright.nvidia.com/approved-batches: \"production=2\"\n"
            ]
        );
        let bare =
            "kind: NodeWright\nmetadata:\n  name: a\n  annotations:\n  labels: {}\nspec: {}\n";
        let out = edit(bare, 1, "production=2");
        assert!(
            out.contains("  annotations:\n    gitops.nodewright.nvidia.com/approved-batches: \"production=2\"\n  labels: {}\n"),
            "{out}"
        );
    }

    #[test]
    fn only_the_document_holding_the_line_is_edited() {
        let text = "# fleet\nkind: NodeWright\nmetadata:\n  name: a\nspec: {}\n---\n# second\nkind: NodeWright\nmetadata:\n  name: b\nspec: {}\n--- # third\nkind: DeploymentPolicy\nmetadata:\n  name: p\n";
        let out = edit(text, 8, "production=2");
        let (removed, added) = changed(text, &out);
        assert!(removed.is_empty());
        assert_eq!(
            added,
            [
                "  annotations:\n",
                "    gitops.nodewright.nvidia.com/approved-batches: \"production=2\"\n",
            ]
        );
        assert!(out.find("approved-batches").unwrap() > out.find("name: b").unwrap());
        assert!(matches!(
            set_annotation(text, 6, KEY, "x=1"),
            Err(Error::NoDocument { line: 6 })
        ));
    }

    #[test]
    fn crlf_files_keep_crlf_and_a_missing_final_newline_stays_missing() {
        let text =
            "kind: NodeWright\r\nmetadata:\r\n  name: a\r\n  annotations:\r\n    x: y\r\nspec: {}";
        let out = edit(text, 1, "production=2");
        assert_eq!(
            out,
            "kind: NodeWright\r\nmetadata:\r\n  name: a\r\n  annotations:\r\n    x: y\r\n    gitops.nodewright.nvidia.com/approved-batches: \"production=2\"\r\nspec: {}"
        );
        let last = "kind: NodeWright\r\nspec: {}\r\nmetadata:\r\n  name: a";
        let out = edit(last, 1, "production=2");
        assert_eq!(
            out,
            "kind: NodeWright\r\nspec: {}\r\nmetadata:\r\n  name: a\r\n  annotations:\r\n    gitops.nodewright.nvidia.com/approved-batches: \"production=2\""
        );
    }

    #[test]
    fn what_cannot_be_edited_faithfully_is_refused_with_its_line() {
        let flow_meta = "kind: NodeWright\nmetadata: {name: a}\nspec: {}\n";
        assert_eq!(
            set_annotation(flow_meta, 1, KEY, "x=1"),
            Err(Error::Unsupported {
                line: 2,
                what: "metadata in flow style"
            })
        );
        let folded = "kind: NodeWright\nmetadata:\n  name: a\n  annotations:\n    gitops.nodewright.nvidia.com/approved-batches: >\n      x=1\n";
        let err = set_annotation(folded, 1, KEY, "x=2").unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 5: a block scalar value cannot be edited in place; set the annotation by hand"
        );
        let continued = "kind: NodeWright\nmetadata:\n  name: a\n  annotations:\n    gitops.nodewright.nvidia.com/approved-batches: x=1,\n      y=2\n";
        assert!(matches!(
            set_annotation(continued, 1, KEY, "x=2"),
            Err(Error::Unsupported { line: 5, .. })
        ));
        let no_meta = "kind: NodeWright\nspec: {}\n";
        assert_eq!(
            set_annotation(no_meta, 1, KEY, "x=1"),
            Err(Error::NoMetadata { line: 1 })
        );
    }

    /// Every document of the example fleet: the edit changes exactly the annotation, whatever
    /// else the manifests hold.
    #[test]
    fn the_example_fleet_round_trips_except_for_the_annotation() {
        let fleet = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/fleet");
        let mut edited_documents = 0;
        for name in [
            "gpu-driver.yaml",
            "gpu-tuning.yaml",
            "policies/gpu-rollout.yaml",
        ] {
            let text = std::fs::read_to_string(fleet.join(name)).unwrap();
            let documents: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&text)
                .map(|d| serde::Deserialize::deserialize(d).unwrap())
                .collect();
            for index in 0..documents.len() {
                // The first content line of document `index`.
                let line = text
                    .lines()
                    .enumerate()
                    .filter(|(_, l)| l.starts_with("kind:"))
                    .nth(index)
                    .map(|(i, _)| i + 1)
                    .unwrap();
                let out = set_annotation(&text, line, KEY, "production=2").unwrap();
                let after: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&out.text)
                    .map(|d| serde::Deserialize::deserialize(d).unwrap())
                    .collect();
                let mut expected = documents.clone();
                let metadata = expected[index]["metadata"].as_mapping_mut().unwrap();
                let annotations = metadata
                    .entry("annotations".into())
                    .or_insert_with(|| serde_yaml::Mapping::new().into());
                if annotations.is_null() {
                    *annotations = serde_yaml::Mapping::new().into();
                }
                annotations
                    .as_mapping_mut()
                    .unwrap()
                    .insert(KEY.into(), "production=2".into());
                assert_eq!(after, expected, "{name} document {index}:\n{}", out.text);
                let (removed, added) = changed(&text, &out.text);
                assert!(
                    removed.len() <= 1 && added.len() <= 2,
                    "{name}: {removed:?} {added:?}"
                );
                edited_documents += 1;
            }
        }
        assert!(edited_documents >= 3);
    }
}
