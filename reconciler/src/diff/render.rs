//! Renderers for a [`DesiredDiff`]: plain text, Markdown for pull requests (a one-line
//! verdict, a table per NodeWright, collapsible manifest diffs) and JSON carrying the same
//! facts.

use std::fmt::Write as _;

use serde::Serialize;
use similar::TextDiff;

use super::classify::{DesiredDiff, ObjectChange, Problem, Summary};

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

fn text(diff: &DesiredDiff) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", verdict(diff));
    let _ = writeln!(out, "base {}  head {}", diff.base, diff.head);
    if !diff.problems.is_empty() {
        let _ = writeln!(out, "\nProblems in head:");
        for p in &diff.problems {
            let _ = writeln!(out, "  {}", problem_line(p));
        }
    }
    for nw in &diff.nodewrights {
        let _ = writeln!(out, "\nNodeWright {} ({})", nw.name, change_word(nw.change));
        for f in &nw.fields {
            let _ = writeln!(
                out,
                "  {}: {} → {}: {}",
                f.field,
                compact(&f.before),
                compact(&f.after),
                f.effect
            );
        }
        for p in &nw.packages {
            let version = match (&p.before_version, &p.after_version) {
                (Some(b), Some(h)) if b != h => format!("{b} → {h}"),
                (Some(v), _) | (None, Some(v)) => v.clone(),
                (None, None) => String::new(),
            };
            for c in &p.classes {
                let mark = if c.is_error() { "ERROR " } else { "" };
                let _ = writeln!(
                    out,
                    "  {mark}{} {version} [{}] {}",
                    p.package,
                    c.label(),
                    c.describe()
                );
            }
        }
        for line in &nw.pace {
            let _ = writeln!(out, "  {line}");
        }
    }
    for pol in &diff.policies {
        let _ = writeln!(
            out,
            "\nDeploymentPolicy {} ({})",
            pol.name,
            change_word(pol.change)
        );
        for part in &pol.parts {
            let _ = writeln!(out, "  {part}");
        }
        if !pol.used_by.is_empty() {
            let _ = writeln!(out, "  used by: {}", pol.used_by.join(", "));
        }
    }
    if let Some(t) = &diff.timeline {
        let _ = writeln!(out, "\nSimulated rollout:\n{}", t.text);
    }
    if let Some(e) = &diff.timeline_error {
        let _ = writeln!(out, "\nSimulation failed: {e}");
    }
    if !diff.base_problems.is_empty() {
        let _ = writeln!(out, "\nProblems already in base (context):");
        for p in &diff.base_problems {
            let _ = writeln!(out, "  {}", problem_line(p));
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

/// Escape text for a Markdown table cell.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn markdown(diff: &DesiredDiff) -> String {
    let mut out = String::new();
    let icon = if diff.has_errors() { "❌" } else { "✅" };
    let _ = writeln!(out, "{icon} **NodeWright dry run:** {}\n", verdict(diff));
    let _ = writeln!(
        out,
        "<sub>base `{}` → head `{}`</sub>\n",
        short(&diff.base),
        short(&diff.head)
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
                "| `{}` | {} | `{}` | {} |",
                cell(&p.location()),
                p.severity,
                p.rule,
                cell(&p.message)
            );
        }
        out.push('\n');
    }

    for nw in &diff.nodewrights {
        let _ = writeln!(
            out,
            "### NodeWright `{}` — {}\n",
            nw.name,
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
                    "| `{}` | `{}` | `{}` | {} |",
                    f.field,
                    cell(&compact(&f.before)),
                    cell(&compact(&f.after)),
                    cell(&f.effect)
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
                let version = match (&p.before_version, &p.after_version) {
                    (Some(b), Some(h)) if b != h => format!("{b} → {h}"),
                    (Some(v), _) | (None, Some(v)) => v.clone(),
                    (None, None) => String::new(),
                };
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
                        "| `{}` | {} | {} | {} | {} |",
                        p.package,
                        cell(&version),
                        label,
                        if cost.is_empty() {
                            "—".to_owned()
                        } else {
                            cell(&cost.join(", "))
                        },
                        cell(&c.describe())
                    );
                }
            }
            out.push('\n');
        }
        if let Some((head, compartments)) = nw.pace.split_first() {
            let _ = writeln!(out, "{head}\n");
            for line in compartments {
                let _ = writeln!(out, "- {line}");
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
            "<details><summary>Manifest diff: NodeWright <code>{}</code></summary>\n\n```diff\n{}```\n\n</details>\n",
            nw.name, diff_text
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
                "| `{}` | {} | {} | {} |",
                p.name,
                change_word(p.change),
                cell(&p.parts.join(", ")),
                cell(&p.used_by.join(", "))
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
                "<details><summary>Manifest diff: DeploymentPolicy <code>{}</code></summary>\n\n```diff\n{}```\n\n</details>\n",
                p.name, diff_text
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
            cell(e)
        );
    }
    if !diff.base_problems.is_empty() {
        let _ = writeln!(
            out,
            "<details><summary>Problems already present in base ({})</summary>\n",
            diff.base_problems.len()
        );
        for p in &diff.base_problems {
            let _ = writeln!(out, "- `{}` {}", p.location(), cell(&p.message));
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
