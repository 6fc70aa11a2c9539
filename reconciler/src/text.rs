//! Text from a repository (file paths, object and package names, values, messages that quote
//! them) is written by whoever opens a pull request. These are the one place it is made safe
//! for where it is shown: a terminal line it cannot break or recolour, and Markdown it cannot
//! restructure (close a `<details>`, start a heading or a table row, mention someone, open a
//! comment that hides the rest).

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` must not reach a terminal as is: C0 and C1 controls, DEL, the line and
/// paragraph separators, and the bidirectional overrides and isolates that reorder what a
/// line appears to say.
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// `text` for one terminal line: control characters written as escapes (`\n`, `\r`, `\t`,
/// `\e`, `\u{85}`…) and a backslash doubled when any escape was needed, so a name with a
/// newline or ESC cannot forge or recolour a result line. Ordinary text is returned as is.
pub fn terminal(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{1b}' => out.push_str("\\e"),
            c if is_unsafe(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Each line of `text` through [`terminal`], for a block whose own line breaks are ours
/// (a rendered section) but whose lines may quote a repository.
pub fn terminal_lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let (body, end) = match line.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (line, ""),
        };
        out.push_str(&terminal(body));
        out.push_str(end);
    }
    out
}

fn longest_run(text: &str, c: char) -> usize {
    let mut longest = 0;
    let mut run = 0;
    for ch in text.chars() {
        run = if ch == c { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    longest
}

/// An inline Markdown code span of `text`, on one line: a fence longer than any backtick run
/// inside, padded with a space (which renderers drop) where a backtick or space at an end, or
/// nothing at all, would otherwise change the span. Inside code nothing is markup, no `@`
/// mentions anyone and no `<!--` opens a comment.
pub fn code_span(text: &str) -> String {
    let text = terminal(text);
    let fence = "`".repeat(longest_run(&text, '`') + 1);
    let pad = text.is_empty()
        || text.starts_with('`')
        || text.ends_with('`')
        || (text.starts_with(' ') && text.ends_with(' '));
    let pad = if pad { " " } else { "" };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// A code span for a table cell: [`code_span`] with `|` escaped, which GitHub and GitLab
/// read as the cell's own character even inside code.
pub fn cell_code(text: &str) -> String {
    code_span(text).replace('|', "\\|")
}

/// A fenced code block of `text` (with `lang`, e.g. `diff`), its fence longer than any
/// backtick run inside so no line of `text` can close it.
pub fn fenced(lang: &str, text: &str) -> String {
    let fence = "`".repeat(longest_run(text, '`').max(2) + 1);
    let newline = if text.ends_with('\n') { "" } else { "\n" };
    format!("{fence}{lang}\n{text}{newline}{fence}\n")
}

/// `text` for HTML element content or an attribute (`<code>{…}</code>` in a `<summary>`):
/// markup characters as entities, on one line. Forges mention nobody inside `<code>`.
pub fn html(text: &str) -> String {
    let text = terminal(text);
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `text` as a Mermaid label (a gantt `section` or task name): letters, digits and `-._/`
/// kept, anything else (`:`, `;`, `#`, line breaks, backticks) as `_`, so a name cannot end
/// the line, start a directive or close the diagram's fence.
pub fn mermaid_label(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_alphanumeric() || matches!(c, '-' | '.' | '_' | '/' | ' ') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_text_keeps_one_line_and_no_escape_sequences() {
        assert!(matches!(terminal("fleet/gpu.yaml"), Cow::Borrowed(_)));
        assert_eq!(
            terminal("a\nb\r\u{1b}[31mc\u{7f}\u{85}\u{202e}"),
            "a\\nb\\r\\e[31mc\\u{7f}\\u{85}\\u{202e}"
        );
        assert_eq!(terminal("back\\slash\n"), "back\\\\slash\\n");
        assert_eq!(terminal_lines("a\u{1b}\nb\n"), "a\\e\nb\n");
    }

    #[test]
    fn markdown_code_cannot_be_closed_from_inside() {
        assert_eq!(code_span("a`b"), "``a`b``");
        assert_eq!(code_span("a`"), "`` a` ``");
        assert_eq!(code_span("x\n# heading"), "`x\\n# heading`");
        assert_eq!(code_span(" a "), "`  a  `");
        assert_eq!(cell_code("a|b"), "`a\\|b`");
        assert_eq!(fenced("diff", "```\n"), "````diff\n```\n````\n");
        assert_eq!(mermaid_label("gpu:x\n```%%{init}"), "gpu_x_______init_");
        assert_eq!(html("</summary><!-- @x"), "&lt;/summary&gt;&lt;!-- @x");
    }
}
