//! The ready-made CI definitions in `ci/`: they parse, run `nodewright validate` and
//! `nodewright diff --simulate --format markdown` against the pull request's base and head, post
//! the comment to their own forge, and ask for no more token permission than commenting needs.

use std::path::{Path, PathBuf};

use serde_yaml::Value;

fn ci() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace root")
        .join("ci")
}

fn load(file: &str) -> Value {
    let text = std::fs::read_to_string(ci().join(file)).unwrap();
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// Joins the shell lines a job runs into one string (continuations removed).
fn script_text(lines: &[&str]) -> String {
    lines.join("\n").replace("\\\n", " ")
}

fn assert_runs_validate_and_diff(script: &str, forge: &str, what: &str) {
    let words: Vec<&str> = script.split_whitespace().collect();
    let has = |w: &str| words.contains(&w);
    assert!(
        script.contains("nodewright validate"),
        "{what}: no validate"
    );
    assert!(script.contains("nodewright diff"), "{what}: no diff");
    for flag in ["--simulate", "--base", "--head", "--pr", "--path"] {
        assert!(has(flag), "{what}: diff lacks {flag}");
    }
    let pos = |w: &str| words.iter().position(|x| *x == w).unwrap();
    assert_eq!(words[pos("--format") + 1], "markdown", "{what}");
    assert_eq!(words[pos("--post-comment") + 1], forge, "{what}");
}

#[test]
fn github_workflow_validates_diffs_and_comments_with_a_narrow_token() {
    let w = load("github/nodewright-diff.yaml");
    assert!(
        w["on"]["pull_request"].is_mapping(),
        "runs on pull requests"
    );
    let permissions = w["permissions"].as_mapping().unwrap();
    let writes: Vec<&str> = permissions
        .iter()
        .filter(|(_, v)| v.as_str() == Some("write"))
        .map(|(k, _)| k.as_str().unwrap())
        .collect();
    assert_eq!(
        writes,
        ["pull-requests"],
        "only commenting needs write access"
    );
    let steps = w["jobs"]["diff"]["steps"].as_sequence().unwrap();
    let runs: Vec<&str> = steps.iter().filter_map(|s| s["run"].as_str()).collect();
    assert_runs_validate_and_diff(&script_text(&runs), "github", "github workflow");
    // The comment is posted even when validation failed, and the job still fails after it.
    let validate = steps.iter().find(|s| s["id"] == "validate").unwrap();
    assert_eq!(validate["continue-on-error"], Value::Bool(true));
    let diff = steps
        .iter()
        .find(|s| {
            s["run"]
                .as_str()
                .is_some_and(|r| r.contains("nodewright diff"))
        })
        .unwrap();
    assert_eq!(diff["if"], "always()");
    assert_eq!(diff["env"]["GITHUB_TOKEN"], "${{ secrets.GITHUB_TOKEN }}");
    assert!(
        steps
            .iter()
            .any(|s| s["if"] == "steps.validate.outcome == 'failure'"),
        "a failing validation fails the job"
    );
    let checkout = steps
        .iter()
        .find(|s| {
            s["uses"]
                .as_str()
                .is_some_and(|u| u.starts_with("actions/checkout"))
        })
        .unwrap();
    assert_eq!(checkout["with"]["fetch-depth"], 0, "base commit needed");
}

#[test]
fn gitlab_template_validates_diffs_and_comments_on_merge_requests() {
    let t = load("gitlab/nodewright-diff.gitlab-ci.yml");
    let job = &t["nodewright-diff"];
    let rule = job["rules"][0]["if"].as_str().unwrap();
    assert!(rule.contains("merge_request_event"), "{rule}");
    assert_eq!(job["variables"]["GIT_DEPTH"], "0", "base commit needed");
    let lines: Vec<&str> = job["script"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    let script = script_text(&lines);
    assert_runs_validate_and_diff(&script, "gitlab", "gitlab template");
    assert!(script.contains("$CI_MERGE_REQUEST_DIFF_BASE_SHA"));
    assert!(script.contains("$CI_MERGE_REQUEST_IID"));
    // Validation's status is kept and returned after the note is posted.
    assert!(script.contains("|| status=$?"));
    assert_eq!(lines.last().copied(), Some("exit $status"));
}

#[test]
fn readme_links_both_definitions() {
    let readme = std::fs::read_to_string(ci().join("README.md")).unwrap();
    for f in [
        "github/nodewright-diff.yaml",
        "gitlab/nodewright-diff.gitlab-ci.yml",
    ] {
        assert!(
            readme.contains(&format!("({f})")),
            "README does not link {f}"
        );
        assert!(ci().join(f).exists());
    }
}
