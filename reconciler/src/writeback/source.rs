//! What the status branch says about the desired state's source (issue 24): `status/_source.yaml`
//! and a section of `status/README.md` name the commit in force and a newer commit that was
//! rejected, with every violation at file:line, so a rejection is visible where people look (the
//! repository and its forge), not only in the reconciler's logs and metrics.
//!
//! NodeWright names are DNS labels, so `_source.yaml` never collides with a NodeWright's file.

use serde::Serialize;

use super::render::{STATUS_DIR, StatusFile};
use crate::diff::Problem;
use crate::text::{code_span, fenced, terminal};

/// The file holding the record, beside the NodeWright documents.
pub const SOURCE_FILE: &str = "_source.yaml";

/// The commit in force and the newest rejected commit, if any.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceRecord {
    /// The tracked branch.
    pub branch: String,
    /// The commit whose desired state is in force (none: nothing valid yet).
    pub applied_commit: Option<String>,
    /// A newer commit of the branch that was refused; cleared when a valid commit arrives.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejected: Option<Rejection>,
}

/// A refused commit and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Rejection {
    /// The commit.
    pub commit: String,
    /// Every error that refused it.
    pub violations: Vec<Violation>,
}

/// One error of a refused commit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// `file:line` (or the file, or the object).
    pub at: String,
    /// The rule id.
    pub rule: String,
    /// What is wrong.
    pub message: String,
}

impl Rejection {
    /// A rejection of `commit` for `errors`.
    pub fn new(commit: &str, errors: &[Problem]) -> Self {
        Rejection {
            commit: commit.to_owned(),
            violations: errors
                .iter()
                .map(|p| Violation {
                    at: p.location(),
                    rule: p.rule.clone(),
                    message: p.message.clone(),
                })
                .collect(),
        }
    }
}

impl SourceRecord {
    /// Adds `status/_source.yaml` and appends the source section to `status/README.md`.
    pub fn add_to(&self, files: &mut Vec<StatusFile>) {
        let readme = format!("{STATUS_DIR}/README.md");
        if let Some(file) = files.iter_mut().find(|f| f.path == readme) {
            file.content.push_str(&self.readme_section());
        }
        files.push(StatusFile {
            path: format!("{STATUS_DIR}/{SOURCE_FILE}"),
            content: format!(
                "# The commit in force and the newest rejected commit, written by nodewright.\n{}",
                serde_yaml::to_string(self).unwrap_or_default()
            ),
        });
    }

    /// The commit subject for a change of this record.
    pub fn commit_subject(&self) -> String {
        match (&self.rejected, &self.applied_commit) {
            (Some(r), _) => format!(
                "status: rejected {}: {} violation{}",
                short(&r.commit),
                r.violations.len(),
                if r.violations.len() == 1 { "" } else { "s" }
            ),
            (None, Some(applied)) => format!("status: applying {}", short(applied)),
            (None, None) => "status: nothing applied yet".to_owned(),
        }
    }

    fn readme_section(&self) -> String {
        let mut out = format!("\n## Source\n\nBranch {}: ", code_span(&self.branch));
        match &self.applied_commit {
            Some(commit) => out.push_str(&format!("commit `{commit}` is in force.\n")),
            None => out.push_str("no valid commit is in force.\n"),
        }
        if let Some(rejected) = &self.rejected {
            out.push_str(&format!(
                "\n**Rejected:** commit `{}` is invalid and was not applied ({} violation{}):\n\n",
                rejected.commit,
                rejected.violations.len(),
                if rejected.violations.len() == 1 {
                    ""
                } else {
                    "s"
                }
            ));
            let lines: Vec<String> = rejected
                .violations
                .iter()
                .map(|v| terminal(&format!("{}: {} [{}]", v.at, v.message, v.rule)).into_owned())
                .collect();
            out.push_str(&fenced("text", &lines.join("\n")));
        }
        out
    }
}

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(message: &str) -> SourceRecord {
        SourceRecord {
            branch: "main".into(),
            applied_commit: Some("a".repeat(40)),
            rejected: Some(Rejection {
                commit: "b".repeat(40),
                violations: vec![Violation {
                    at: "gpu-tuning.yaml:23".into(),
                    rule: "image-tag".into(),
                    message: message.into(),
                }],
            }),
        }
    }

    #[test]
    fn the_record_names_both_commits_and_each_violation_at_file_and_line() {
        let mut files = vec![StatusFile {
            path: "status/README.md".into(),
            content: "# Fleet rollout status\n".into(),
        }];
        record("image must not carry a tag").add_to(&mut files);
        let yaml = &files[1];
        assert_eq!(yaml.path, "status/_source.yaml");
        assert!(
            yaml.content
                .contains(&format!("appliedCommit: {}", "a".repeat(40)))
        );
        assert!(
            yaml.content.contains("at: gpu-tuning.yaml:23"),
            "{}",
            yaml.content
        );
        let readme = &files[0].content;
        assert!(readme.contains("## Source"));
        assert!(readme.contains(&format!("commit `{}` is invalid", "b".repeat(40))));
        assert!(readme.contains("gpu-tuning.yaml:23: image must not carry a tag [image-tag]"));
        assert_eq!(
            record("x").commit_subject(),
            "status: rejected bbbbbbbbbbbb: 1 violation"
        );
    }

    #[test]
    fn a_message_cannot_close_the_code_block_it_is_shown_in() {
        let mut files = vec![StatusFile {
            path: "status/README.md".into(),
            content: String::new(),
        }];
        record("```\n</details>\n# forged heading\n````").add_to(&mut files);
        let readme = &files[0].content;
        let fence = readme
            .lines()
            .find(|l| l.starts_with("```"))
            .unwrap()
            .trim_end_matches("text");
        assert_eq!(fence.len(), 5, "longer than any run inside");
        assert!(readme.trim_end().ends_with(fence));
    }
}
