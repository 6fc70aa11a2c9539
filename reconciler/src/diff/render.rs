//! Renderers for a [`DesiredDiff`]: plain text, Markdown for pull requests (a one-line
//! verdict, a table per NodeWright, collapsible manifest diffs) and JSON carrying the same
//! facts.

use std::fmt::Write as _;

use serde::Serialize;
use similar::TextDiff;

use super::classify::{DesiredDiff, ObjectChange, Problem, Summary};
use crate::text::{cell_code, code_span, fenced, html, terminal, terminal_lines};

/// Output format of `nodewright diff`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// For a terminal.
    Text,
    /// For a pull-request comment.
    Markdown,
    /// For machines.
    Json,
}

/// Render `diff` in `format`.
pub fn render(diff: &DesiredDiff, format: Format) -> String {
    match format {
        Format::Text => text(diff),
        Format::Markdown => markdown(diff),
        Format::Json => json(diff),
    }
}

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

/// The one-line verdict shared by every format.
pub fn verdict(diff: &DesiredDiff) -> String {
    let s = diff.summary();
    if s.errors > 0 {
        let mut line = format!(
            "head {} is INVALID: {} error{} — the reconciler would refuse this commit and keep the last valid state",
            short(&diff.head),
            s.errors,
            if s.errors == 1 { "" } else { "s" }
        );
        if !s.classes.is_empty() {
            let classes: Vec<String> = s.classes.iter().map(|(k, v)| format!("{v} {k}")).collect();
            let _ = write!(line, "; it would apply {}", classes.join(", "));
        }
        return line;
    }
    if diff.is_empty() {
        return format!(
            "head {} changes nothing in the desired state",
            short(&diff.head)
        );
    }
    let mut parts = Vec::new();
    let count = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    if !diff.nodewrights.is_empty() {
        parts.push(count(diff.nodewrights.len(), "NodeWright"));
    }
    if !diff.policies.is_empty() {
        parts.push(count(diff.policies.len(), "DeploymentPolicy").replace("Policys", "Policies"));
    }
    let mut line = format!(
        "head {} is valid: changes {}",
        short(&diff.head),
        parts.join(" and ")
    );
    if !s.classes.is_empty() {
        let classes: Vec<String> = s.classes.iter().map(|(k, v)| format!("{v} {k}")).collect();
        let _ = write!(line, " ({})", classes.join(", "));
    }
    line.push_str(&interrupt_clause(&s));
    if s.warnings > 0 {
        let _ = write!(line, "; {}", count(s.warnings, "warning"));
    }
    line
}

fn interrupt_clause(s: &Summary) -> String {
    if s.interrupts.is_empty() {
        return "; no interrupts".to_owned();
    }
    let each: Vec<String> = s
        .interrupts
        .iter()
        .map(|(k, v)| format!("{v}× {k}"))
        .collect();
    let reboot = if s.interrupts.contains_key("reboot") {
        " — nodes will REBOOT"
    } else {
        ""
    };
    format!("; interrupts: {}{reboot}", each.join(", "))
}

fn change_word(c: ObjectChange) -> &'static str {
    match c {
        ObjectChange::Added => "added",
        ObjectChange::Removed => "removed",
        ObjectChange::Changed => "changed",
    }
}

fn unified(base: Option<&str>, head: Option<&str>, base_name: &str, head_name: &str) -> String {
    let (b, h) = (base.unwrap_or(""), head.unwrap_or(""));
    TextDiff::from_lines(b, h)
        .unified_diff()
        .context_radius(3)
        .header(base_name, head_name)
        .to_string()
}

fn problem_line(p: &Problem) -> String {
    format!(
        "{} [{}] {}: {}",
        p.location(),
        p.rule,
        p.severity,
        p.message
    )
}

/// Appends one terminal line: everything in it that came from the repository is escaped, so
/// it stays one line whatever a name or value holds.
fn line(out: &mut String, text: &str) {
    out.push_str(&terminal(text));
    out.push('\n');
}

fn version_text(p: &super::classify::PackageChange) -> String {
    match (&p.before_version, &p.after_version) {
        (Some(b), Some(h)) if b != h => format!("{b} → {h}"),
        (Some(v), _) | (None, Some(v)) => v.clone(),
        (None, None) => String::new(),
    }
}

fn text(diff: &DesiredDiff) -> String {
    let mut out = String::new();
    line(&mut out, &verdict(diff));
    line(&mut out, &format!("base {}  head {}", diff.base, diff.head));
    if !diff.problems.is_empty() {
        out.push('\n');
        line(&mut out, "Problems in head:");
        for p in &diff.problems {
            line(&mut out, &format!("  {}", problem_line(p)));
        }
    }
    for nw in &diff.nodewrights {
        out.push('\n');
        line(
            &mut out,
            &format!("NodeWright {} ({})", nw.name, change_word(nw.change)),
        );
        for f in &nw.fields {
            line(
                &mut out,
                &format!(
                    "  {}: {} → {}: {}",
                    f.field,
                    compact(&f.before),
                    compact(&f.after),
                    f.effect
                ),
            );
        }
        for p in &nw.packages {
            let version = version_text(p);
            for c in &p.classes {
                let mark = if c.is_error() { "ERROR " } else { "" };
                line(
                    &mut out,
                    &format!(
                        "  {mark}{} {version} [{}] {}",
                        p.package,
                        c.label(),
                        c.describe()
                    ),
                );
            }
        }
        for pace in &nw.pace {
            line(&mut out, &format!("  {pace}"));
        }
    }
    for pol in &diff.policies {
        out.push('\n');
        line(
            &mut out,
            &format!(
                "DeploymentPolicy {} ({})",
                pol.name,
                change_word(pol.change)
            ),
        );
        for part in &pol.parts {
            line(&mut out, &format!("  {part}"));
        }
        if !pol.used_by.is_empty() {
            line(&mut out, &format!("  used by: {}", pol.used_by.join(", ")));
        }
    }
    if let Some(t) = &diff.timeline {
        out.push('\n');
        line(&mut out, "Simulated rollout:");
        out.push_str(&terminal_lines(&t.text));
        out.push('\n');
    }
    if let Some(e) = &diff.timeline_error {
        out.push('\n');
        line(&mut out, &format!("Simulation failed: {e}"));
    }
    if !diff.base_problems.is_empty() {
        out.push('\n');
        line(&mut out, "Problems already in base (context):");
        for p in &diff.base_problems {
            line(&mut out, &format!("  {}", problem_line(p)));
        }
    }
    out
}

fn compact(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => "unset".to_owned(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The Markdown for a pull request. Every string that comes from the repository (names,
/// versions, values, paths, messages quoting them, the manifests) is in code — a code span
/// ([`code_span`], [`cell_code`] in tables), `<code>` with HTML escaped in a `<summary>`, or
/// a fenced block longer than any backtick run inside — so nothing in it is read as markup.
fn markdown(diff: &DesiredDiff) -> String {
    let mut out = String::new();
    let icon = if diff.has_errors() { "❌" } else { "✅" };
    let _ = writeln!(out, "{icon} **NodeWright dry run:** {}\n", verdict(diff));
    let _ = writeln!(
        out,
        "<sub>base {} → head {}</sub>\n",
        code_span(short(&diff.base)),
        code_span(short(&diff.head))
    );

    if !diff.problems.is_empty() {
        let _ = writeln!(out, "### Problems in head\n");
        let _ = writeln!(
            out,
            "| Where | Severity | Rule | Problem |\n|---|---|---|---|"
        );
        for p in &diff.problems {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                cell_code(&p.location()),
                p.severity,
                cell_code(&p.rule),
                cell_code(&p.message)
            );
        }
        out.push('\n');
    }

    for nw in &diff.nodewrights {
        let _ = writeln!(
            out,
            "### NodeWright {} — {}\n",
            code_span(&nw.name),
            change_word(nw.change)
        );
        if !nw.fields.is_empty() {
            let _ = writeln!(
                out,
                "| Field | Before | After | Effect |\n|---|---|---|---|"
            );
            for f in &nw.fields {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} |",
                    cell_code(&f.field),
                    cell_code(&compact(&f.before)),
                    cell_code(&compact(&f.after)),
                    // The field's effect is the renderer's own words.
                    f.effect.replace('|', "\\|")
                );
            }
            out.push('\n');
        }
        if !nw.packages.is_empty() {
            let _ = writeln!(
                out,
                "| Package | Version | Change | Interrupt | What happens |\n|---|---|---|---|---|"
            );
            for p in &nw.packages {
                let version = version_text(p);
                for c in &p.classes {
                    let label = if c.is_error() {
                        format!("❌ **{}**", c.label())
                    } else {
                        format!("**{}**", c.label())
                    };
                    let cost: Vec<String> = c
                        .interrupt_cost()
                        .iter()
                        .map(|i| super::classify::interrupt_text(i))
                        .collect();
                    let _ = writeln!(
                        out,
                        "| {} | {} | {} | {} | {} |",
                        cell_code(&p.package),
                        cell_code(&version),
                        label,
                        if cost.is_empty() {
                            "—".to_owned()
                        } else {
                            cell_code(&cost.join(", "))
                        },
                        cell_code(&c.describe())
                    );
                }
            }
            out.push('\n');
        }
        if let Some((head, compartments)) = nw.pace.split_first() {
            let _ = writeln!(out, "{}\n", code_span(head));
            for pace in compartments {
                let _ = writeln!(out, "- {}", code_span(pace));
            }
            out.push('\n');
        }
        let diff_text = unified(
            nw.base_yaml.as_deref(),
            nw.head_yaml.as_deref(),
            &format!("a/NodeWright/{}", nw.name),
            &format!("b/NodeWright/{}", nw.name),
        );
        let _ = writeln!(
            out,
            "<details><summary>Manifest diff: NodeWright <code>{}</code></summary>\n\n{}\n</details>\n",
            html(&nw.name),
            fenced("diff", &diff_text)
        );
    }

    if !diff.policies.is_empty() {
        let _ = writeln!(out, "### DeploymentPolicies\n");
        let _ = writeln!(
            out,
            "| Policy | Change | Parts | Used by |\n|---|---|---|---|"
        );
        for p in &diff.policies {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                cell_code(&p.name),
                change_word(p.change),
                cell_code(&p.parts.join(", ")),
                cell_code(&p.used_by.join(", "))
            );
        }
        out.push('\n');
        for p in &diff.policies {
            let diff_text = unified(
                p.base_yaml.as_deref(),
                p.head_yaml.as_deref(),
                &format!("a/DeploymentPolicy/{}", p.name),
                &format!("b/DeploymentPolicy/{}", p.name),
            );
            let _ = writeln!(
                out,
                "<details><summary>Manifest diff: DeploymentPolicy <code>{}</code></summary>\n\n{}\n</details>\n",
                html(&p.name),
                fenced("diff", &diff_text)
            );
        }
    }

    if let Some(t) = &diff.timeline {
        let _ = writeln!(out, "### Simulated rollout\n\n{}\n", t.markdown);
    }
    if let Some(e) = &diff.timeline_error {
        let _ = writeln!(
            out,
            "### Simulated rollout\n\nSimulation failed: {}\n",
            code_span(e)
        );
    }
    if !diff.base_problems.is_empty() {
        let _ = writeln!(
            out,
            "<details><summary>Problems already present in base ({})</summary>\n",
            diff.base_problems.len()
        );
        for p in &diff.base_problems {
            let _ = writeln!(
                out,
                "- {} {}",
                code_span(&p.location()),
                code_span(&p.message)
            );
        }
        let _ = writeln!(out, "\n</details>");
    }
    out
}

#[derive(Serialize)]
struct JsonPackageClass<'a> {
    #[serde(flatten)]
    class: &'a super::classify::ChangeClass,
    label: &'static str,
    error: bool,
    description: String,
}

#[derive(Serialize)]
struct JsonPackage<'a> {
    package: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    before_version: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    after_version: Option<&'a str>,
    changes: Vec<JsonPackageClass<'a>>,
}

#[derive(Serialize)]
struct JsonNodeWright<'a> {
    name: &'a str,
    change: ObjectChange,
    fields: &'a [super::classify::FieldChange],
    packages: Vec<JsonPackage<'a>>,
    manifest_diff: String,
}

#[derive(Serialize)]
struct JsonDiff<'a> {
    verdict: String,
    valid: bool,
    exit_code: i32,
    base: &'a str,
    head: &'a str,
    summary: Summary,
    problems: &'a [Problem],
    nodewrights: Vec<JsonNodeWright<'a>>,
    policies: &'a [super::classify::PolicyChange],
    #[serde(skip_serializing_if = "Option::is_none")]
    timeline: Option<&'a serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeline_error: Option<&'a str>,
    base_problems: &'a [Problem],
}

fn json(diff: &DesiredDiff) -> String {
    let doc = JsonDiff {
        verdict: verdict(diff),
        valid: !diff.has_errors(),
        exit_code: if diff.has_errors() { 3 } else { 0 },
        base: &diff.base,
        head: &diff.head,
        summary: diff.summary(),
        problems: &diff.problems,
        nodewrights: diff
            .nodewrights
            .iter()
            .map(|nw| JsonNodeWright {
                name: &nw.name,
                change: nw.change,
                fields: &nw.fields,
                packages: nw
                    .packages
                    .iter()
                    .map(|p| JsonPackage {
                        package: &p.package,
                        before_version: p.before_version.as_deref(),
                        after_version: p.after_version.as_deref(),
                        changes: p
                            .classes
                            .iter()
                            .map(|c| JsonPackageClass {
                                class: c,
                                label: c.label(),
                                error: c.is_error(),
                                description: c.describe(),
                            })
                            .collect(),
                    })
                    .collect(),
                manifest_diff: unified(
                    nw.base_yaml.as_deref(),
                    nw.head_yaml.as_deref(),
                    &format!("a/NodeWright/{}", nw.name),
                    &format!("b/NodeWright/{}", nw.name),
                ),
            })
            .collect(),
        policies: &diff.policies,
        timeline: diff.timeline.as_ref().map(|t| &t.json),
        timeline_error: diff.timeline_error.as_deref(),
        base_problems: &diff.base_problems,
    };
    // Serializing plain data with string keys cannot fail.
    serde_json::to_string_pretty(&doc).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use nodewright_schema::validate::Severity;
    use nodewright_schema::{DeploymentPolicy, NodeWright, NodeWrightSpec, Package};
    use proptest::prelude::*;
    use pulldown_cmark::{Event, Options, Parser};

    use super::*;
    use crate::cluster::Desired;
    use crate::diff::diff_desired;

    /// What an author of a pull request might put in a name, a path, a version or a value.
    fn hostile() -> impl Strategy<Value = String> {
        let fragment = prop_oneof![
            Just("</details>"),
            Just("</summary>"),
            Just("\n# Heading"),
            Just("\n\n## Heading\n"),
            Just("@octocat"),
            Just("<!--"),
            Just("|"),
            Just("\n| a | b |\n|---|---|\n"),
            Just("[link](https://example.invalid)"),
            Just("![img](x.png)"),
            Just("```"),
            Just("`"),
            Just("\r"),
            Just("\u{1b}[31m"),
            Just("\u{202e}"),
            Just("<img src=x>"),
            Just("&lt;"),
            Just("*"),
            Just("- item"),
            Just("gpu"),
        ];
        (proptest::collection::vec(fragment, 1..5), any::<String>())
            .prop_map(|(parts, noise)| format!("{}{noise}", parts.concat()))
    }

    fn problem(text: &str, severity: Severity) -> Problem {
        Problem {
            file: Some(format!("{text}.yaml")),
            line: Some(3),
            object: Some(format!("NodeWright/{text}")),
            rule: text.to_owned(),
            message: format!("name {text} is not valid"),
            severity,
        }
    }

    /// A diff whose every repository string is built from `texts`: a NodeWright per text with
    /// a package of that name upgraded, a DeploymentPolicy added, problems in head and base,
    /// and a failed simulation.
    fn diff_of(texts: &[String]) -> DesiredDiff {
        let nodewright = |name: &str, version: &str| {
            let package = Package {
                version: version.to_owned(),
                image: format!("example/{name}"),
                ..Package::default()
            };
            let spec = NodeWrightSpec {
                packages: Some(BTreeMap::from([(name.to_owned(), package)])),
                ..NodeWrightSpec::default()
            };
            NodeWright::new(name, spec)
        };
        let desired = |version: &str, policies: bool| Desired {
            nodewrights: texts.iter().map(|t| nodewright(t, version)).collect(),
            policies: if policies {
                texts
                    .iter()
                    .map(|t| DeploymentPolicy::new(t, Default::default()))
                    .collect()
            } else {
                Vec::new()
            },
            commit: "c".into(),
            ..Default::default()
        };
        let mut diff = diff_desired(
            &desired("1.0.0", false),
            &desired("1.1.0", true),
            texts.iter().map(|t| problem(t, Severity::Error)).collect(),
            texts
                .iter()
                .map(|t| problem(t, Severity::Warning))
                .collect(),
        );
        diff.timeline_error = Some(format!("simulation of {} failed", texts[0]));
        diff
    }

    /// The comment's structure: every block and inline element, HTML by its tags only; text
    /// and code are left out (that is where repository text lives).
    fn structure(markdown: &str) -> Vec<String> {
        Parser::new_ext(markdown, Options::ENABLE_TABLES)
            .filter_map(|event| match event {
                Event::Start(tag) => Some(format!("start {tag:?}")),
                Event::End(tag) => Some(format!("end {tag:?}")),
                Event::Html(html) | Event::InlineHtml(html) => {
                    Some(format!("html {}", html.matches('<').count()))
                }
                Event::Text(_) | Event::Code(_) => None,
                other => Some(format!("{other:?}")),
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn repository_text_cannot_change_the_comment_structure_or_add_result_lines(
            texts in proptest::collection::vec(hostile(), 1..4)
        ) {
            // Distinct names, as a commit's objects have.
            let texts: Vec<String> =
                texts.iter().enumerate().map(|(i, t)| format!("{t}{i}")).collect();
            let plain: Vec<String> = (0..texts.len()).map(|i| format!("name{i}")).collect();
            let (hostile, benign) = (diff_of(&texts), diff_of(&plain));

            let markdown = render(&hostile, Format::Markdown);
            prop_assert_eq!(structure(&markdown), structure(&render(&benign, Format::Markdown)));
            // One collapsible section per manifest diff and one for base's problems, opened
            // and closed by HTML the renderer wrote (inside code the same text is only text).
            let html: String = Parser::new_ext(&markdown, Options::ENABLE_TABLES)
                .filter_map(|event| match event {
                    Event::Html(h) | Event::InlineHtml(h) => Some(h.into_string()),
                    _ => None,
                })
                .collect();
            let details = texts.len() * 2 + 1;
            prop_assert_eq!(html.matches("<details>").count(), details);
            prop_assert_eq!(html.matches("</details>").count(), details);
            let mut in_code = false;
            for event in Parser::new_ext(&markdown, Options::ENABLE_TABLES) {
                match event {
                    Event::Start(pulldown_cmark::Tag::CodeBlock(_)) => in_code = true,
                    Event::End(pulldown_cmark::TagEnd::CodeBlock) => in_code = false,
                    Event::Text(t) if !in_code => {
                        prop_assert!(!t.contains('@'), "a mention outside code: {:?}", t);
                    }
                    Event::Html(h) | Event::InlineHtml(h) => {
                        prop_assert!(!h.contains("<!--"), "a comment opened: {:?}", h);
                    }
                    _ => {}
                }
            }

            let text = render(&hostile, Format::Text);
            prop_assert_eq!(text.lines().count(), render(&benign, Format::Text).lines().count());
            prop_assert!(
                !text.chars().any(|c| c.is_control() && c != '\n'),
                "a control character reached the terminal"
            );
        }
    }
}
