//! The command-line reference (`docs/cli.md`), rendered from the clap definitions so the
//! document cannot drift from the binary. A test compares the file with [`markdown`];
//! `NODEWRIGHT_UPDATE_DOCS=1 cargo test -p nodewright-reconciler cli_reference` rewrites it.

use std::fmt::Write as _;

use std::collections::BTreeSet;

use clap::{Arg, ArgAction, Command};

const PREAMBLE: &str = "\
<!-- Generated from the clap definitions (reconciler/src/cli/reference.rs). Do not edit by hand:
     run `NODEWRIGHT_UPDATE_DOCS=1 cargo test -p nodewright-reconciler cli_reference`. -->

# `nodewright` command reference

One binary, `nodewright`. Every section below is the same text `nodewright <command> --help`
prints. Where to start: [getting-started.md](getting-started.md); recovery stories:
[troubleshooting.md](troubleshooting.md).

**Exit codes** (every command): `0` success · `1` runtime error (I/O, Git, cluster, forge) ·
`2` usage error · `3` validation failed (for CI gates).
";

/// The whole reference as Markdown.
pub fn markdown() -> String {
    let mut root = super::command();
    root.build();
    let mut out = String::from(PREAMBLE);
    for sub in visible_subcommands(&root) {
        section(
            &mut out,
            sub,
            &format!("nodewright {}", sub.get_name()),
            &BTreeSet::new(),
        );
    }
    out
}

fn visible_subcommands(cmd: &Command) -> impl Iterator<Item = &Command> {
    cmd.get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
}

/// One command's section; `inherited` are the flags a parent command's section already lists
/// (flags of a command with subcommands are accepted after the subcommand's name too).
fn section(out: &mut String, cmd: &Command, path: &str, inherited: &BTreeSet<String>) {
    let _ = write!(out, "\n## `{path}`\n\n");
    let about = cmd
        .get_long_about()
        .or(cmd.get_about())
        .map(|s| s.to_string())
        .unwrap_or_default();
    if !about.is_empty() {
        out.push_str(about.trim_end());
        out.push_str("\n\n");
    }
    let aliases: Vec<&str> = cmd.get_visible_aliases().collect();
    if !aliases.is_empty() {
        let _ = writeln!(out, "Alias: `{}`.\n", aliases.join("`, `"));
    }
    let mut usage_cmd = cmd.clone().bin_name(path);
    let usage = usage_cmd.render_usage().to_string();
    let _ = writeln!(out, "```text\n{}\n```\n", usage.trim_end());

    let positionals: Vec<&Arg> = cmd.get_positionals().filter(|a| !a.is_hide_set()).collect();
    if !positionals.is_empty() {
        out.push_str("| Argument | Meaning |\n|---|---|\n");
        for arg in positionals {
            let name = value_names(arg);
            let dots = if matches!(arg.get_action(), ArgAction::Append) {
                "..."
            } else {
                ""
            };
            let _ = writeln!(out, "| `{name}{dots}` | {} |", cell(&help_of(arg)));
        }
        out.push('\n');
    }
    options_table(
        out,
        cmd.get_arguments().filter(|a| {
            !a.is_positional()
                && !inherited.contains(a.get_id().as_str())
                && !a.is_hide_set()
                && !matches!(
                    a.get_action(),
                    ArgAction::Help
                        | ArgAction::HelpShort
                        | ArgAction::HelpLong
                        | ArgAction::Version
                )
        }),
    );
    if let Some(after) = cmd.get_after_long_help().or(cmd.get_after_help()) {
        let _ = writeln!(out, "```text\n{}\n```\n", after.to_string().trim_end());
    }
    let mut inherited = inherited.clone();
    inherited.extend(
        cmd.get_arguments()
            .filter(|a| a.is_global_set())
            .map(|a| a.get_id().to_string()),
    );
    for sub in visible_subcommands(cmd) {
        section(out, sub, &format!("{path} {}", sub.get_name()), &inherited);
    }
}

fn options_table<'a>(out: &mut String, args: impl Iterator<Item = &'a Arg>) {
    let args: Vec<&Arg> = args.collect();
    if args.is_empty() {
        return;
    }
    out.push_str("| Option | Default | Meaning |\n|---|---|---|\n");
    for arg in args {
        let mut flag = String::new();
        if let Some(short) = arg.get_short() {
            let _ = write!(flag, "-{short}");
        }
        if let Some(long) = arg.get_long() {
            if !flag.is_empty() {
                flag.push_str(", ");
            }
            let _ = write!(flag, "--{long}");
        }
        if arg.get_action().takes_values() {
            let names = value_names(arg);
            let _ = write!(flag, " <{names}>");
        }
        let flag_only = matches!(
            arg.get_action(),
            ArgAction::SetTrue | ArgAction::SetFalse | ArgAction::Count
        );
        let default: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .filter(|v| !v.is_empty() && !flag_only)
            .collect();
        let default = if default.is_empty() {
            String::new()
        } else {
            format!("`{}`", default.join(","))
        };
        let mut meaning = help_of(arg);
        let possible: Vec<String> = arg
            .get_possible_values()
            .iter()
            .filter(|p| !p.is_hide_set())
            .map(|p| match p.get_help() {
                Some(h) => format!("`{}`: {h}", p.get_name()),
                None => format!("`{}`", p.get_name()),
            })
            .collect();
        if !possible.is_empty() && !flag_only {
            meaning.push_str("\n\nValues: ");
            meaning.push_str(&possible.join("; "));
            meaning.push('.');
        }
        if let Some(env) = arg.get_env() {
            let _ = write!(meaning, "\n\nEnvironment: `{}`.", env.to_string_lossy());
        }
        let _ = writeln!(
            out,
            "| `{}` | {default} | {} |",
            cell(&flag),
            cell(&meaning)
        );
    }
    out.push('\n');
}

/// An argument's value names (`PATH`, `NAME[:VERSION]`), or its id in capitals.
fn value_names(arg: &Arg) -> String {
    arg.get_value_names()
        .map(|v| {
            v.iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| arg.get_id().to_string().to_uppercase())
}

fn help_of(arg: &Arg) -> String {
    arg.get_long_help()
        .or(arg.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default()
}

/// Escapes text for one Markdown table cell: pipes escaped, line breaks as `<br>`.
fn cell(text: &str) -> String {
    text.trim()
        .replace('|', "\\|")
        .replace("\n\n", "<br><br>")
        .replace('\n', "<br>")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_reference_in_docs_matches_the_binary() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/cli.md");
        let generated = markdown();
        if std::env::var_os("NODEWRIGHT_UPDATE_DOCS").is_some() {
            std::fs::write(&path, &generated).unwrap();
        }
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            on_disk == generated,
            "docs/cli.md is out of date with the clap definitions: run \
             `NODEWRIGHT_UPDATE_DOCS=1 cargo test -p nodewright-reconciler cli_reference`"
        );
    }

    #[test]
    fn every_visible_command_has_a_section() {
        let text = markdown();
        for name in [
            "validate",
            "diff",
            "run",
            "demo",
            "status",
            "simulate",
            "crds",
            "sim serve",
            "reset",
            "node reset",
            "package logs",
            "deployment-policy reset",
            "version",
        ] {
            assert!(text.contains(&format!("## `nodewright {name}`")), "{name}");
        }
        assert!(text.contains("| `--kubeconfig <PATH>` |"));
    }
}
