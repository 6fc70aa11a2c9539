//! Every change class of the dry-run diff, across two real commits.

mod common;

use common::WorkRepo;
use nodewright_reconciler::cli::diff::{Args, compute};
use nodewright_reconciler::diff::classify::ObjectChange;
use nodewright_reconciler::diff::{ChangeClass, DesiredDiff, Format, render};
use nodewright_reconciler::source::budget::BudgetArgs;
use serde_json::{Value, json};

fn diff_fixture() -> (tempfile::TempDir, DesiredDiff) {
    let tmp = tempfile::tempdir().unwrap();
    let work = WorkRepo::init(&tmp.path().join("fleet"));
    work.write(
        "manifests/fleet.yaml",
        include_str!("fixtures/diff/base.yaml"),
    );
    let base = work.commit("base");
    work.write(
        "manifests/fleet.yaml",
        include_str!("fixtures/diff/head.yaml"),
    );
    let head = work.commit("head");
    let args = Args {
        repo: work.dir.to_string_lossy().into_owned(),
        base,
        head,
        root: "manifests".to_owned(),
        format: Format::Json,
        cache_dir: None,
        token_file: None,
        token_env: None,
        budgets: BudgetArgs::default(),
        simulate: false,
        fleet: None,
        nodes: 8,
        max_simulated_pairs: nodewright_reconciler::diff::projection::DEFAULT_MAX_PAIRS,
        max_simulated_pairs_at_once:
            nodewright_reconciler::diff::projection::DEFAULT_MAX_PAIRS_AT_ONCE,
        post_comment: None,
        pr: None,
    };
    let diff = compute(&args).unwrap();
    (tmp, diff)
}

fn classes<'a>(diff: &'a DesiredDiff, nw: &str, pkg: &str) -> &'a [ChangeClass] {
    let nw = diff
        .nodewrights
        .iter()
        .find(|n| n.name == nw)
        .unwrap_or_else(|| panic!("no NodeWright {nw}"));
    &nw.packages
        .iter()
        .find(|p| p.package == pkg)
        .unwrap_or_else(|| panic!("no change for {pkg}"))
        .classes
}

fn only(diff: &DesiredDiff, pkg: &str) -> Value {
    let c = classes(diff, "fleet", pkg);
    assert_eq!(c.len(), 1, "{pkg}: {c:?}");
    serde_json::to_value(&c[0]).unwrap()
}

#[test]
fn every_package_change_class() {
    let (_tmp, diff) = diff_fixture();
    assert_eq!(
        only(&diff, "up"),
        json!({"class": "upgrade", "from": "1.0.0", "to": "1.1.0"})
    );

    let free = only(&diff, "down-free");
    assert_eq!(
        (free["class"].as_str(), free["allowed"].as_bool()),
        (Some("downgrade"), Some(true))
    );
    assert!(
        free["explanation"]
            .as_str()
            .unwrap()
            .contains("nothing runs for 2.0.0")
    );
    let locked = only(&diff, "down-locked");
    assert_eq!(locked["allowed"], false);
    let ready = &classes(&diff, "fleet", "down-ready");
    assert!(
        matches!(&ready[0], ChangeClass::Downgrade { allowed: true, .. }),
        "{ready:?}"
    );
    assert!(
        ready.contains(&ChangeClass::UninstallCancelled),
        "apply flipped off too: {ready:?}"
    );

    let lit = only(&diff, "cfg-lit");
    assert_eq!(lit["class"], "config");
    assert_eq!(lit["changed"], json!(["a.conf"]));
    assert_eq!(
        lit["interrupts"],
        json!([{"key": "a.conf", "pattern": "a.conf", "interrupt": {"type": "reboot"}}])
    );
    let glob = only(&diff, "cfg-glob");
    assert_eq!(
        glob["interrupts"],
        json!([{"key": "x.conf", "pattern": "*.conf", "interrupt": {"type": "service", "services": ["kubelet"]}}])
    );
    let none = only(&diff, "cfg-none");
    assert_eq!(
        (none["added"].clone(), none["changed"].clone()),
        (json!(["z.txt"]), json!(["y.txt"]))
    );
    assert_eq!(
        none["interrupts"],
        json!([]),
        "no pattern matches y.txt or z.txt"
    );
    assert_eq!(
        only(&diff, "cfg-empty"),
        json!({"class": "config-emptied", "removed": ["k"]})
    );

    assert_eq!(only(&diff, "img")["class"], "image-only");
    let sha = only(&diff, "sha");
    assert_eq!(sha["class"], "image-only");
    assert!(
        sha["after"]
            .as_str()
            .unwrap()
            .ends_with("@sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb")
    );
    assert_eq!(
        only(&diff, "intr"),
        json!({"class": "interrupt-changed", "after": {"type": "noop"}})
    );
    assert_eq!(
        only(&diff, "cfgi"),
        json!({"class": "config-interrupts-changed", "added": [], "removed": [], "changed": ["p.conf"]})
    );
    assert_eq!(
        only(&diff, "dep"),
        json!({"class": "depends-on-changed", "added": ["up|1.1.0"], "removed": ["up|1.0.0"]})
    );
    assert_eq!(
        only(&diff, "un-req"),
        json!({"class": "uninstall-requested"})
    );
    assert_eq!(
        only(&diff, "un-cancel"),
        json!({"class": "uninstall-cancelled"})
    );
    assert_eq!(
        only(&diff, "un-en"),
        json!({"class": "uninstall-enabled-changed", "before": false, "after": true})
    );
    assert_eq!(
        only(&diff, "env-pkg"),
        json!({"class": "other-fields", "fields": ["env"]})
    );

    let gone = only(&diff, "gone-free");
    assert_eq!(gone["class"].as_str(), Some("removed-from-spec"));
    assert!(
        gone["explanation"]
            .as_str()
            .unwrap()
            .contains("NOT an uninstall")
    );
    // Issue 28 item 7: §3.2 rule 1 judges by the
    // cluster's status, which Git does not have; the diff says what the cluster will check.
    let locked = only(&diff, "gone-locked");
    assert_eq!(locked["class"].as_str(), Some("removed-from-spec"));
    assert!(
        locked["explanation"]
            .as_str()
            .unwrap()
            .contains("accepts this only if no node's state holds gone-locked|1.0.0"),
        "{locked}"
    );

    assert_eq!(
        only(&diff, "new-pkg"),
        json!({"class": "install", "interrupt": {"type": "reboot"}, "absent_and_requested": false})
    );
    assert_eq!(only(&diff, "new-requested")["absent_and_requested"], true);
}

#[test]
fn nodewright_fields_objects_and_policies() {
    let (_tmp, diff) = diff_fixture();
    let fleet = diff.nodewrights.iter().find(|n| n.name == "fleet").unwrap();
    let fields: Vec<&str> = fleet.fields.iter().map(|f| f.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "nodeSelectors",
            "interruptionBudget",
            "deploymentPolicy",
            "priority",
            "sequencing",
            "pause",
            "disable"
        ]
    );
    let priority = fleet.fields.iter().find(|f| f.field == "priority").unwrap();
    assert_eq!(
        (priority.before.clone(), priority.after.clone()),
        (json!(100), json!(50))
    );

    let added = diff.nodewrights.iter().find(|n| n.name == "fresh").unwrap();
    assert_eq!(added.change, ObjectChange::Added);
    let removed = diff.nodewrights.iter().find(|n| n.name == "old").unwrap();
    assert_eq!(removed.change, ObjectChange::Removed);
    assert!(
        matches!(&removed.packages[0].classes[0], ChangeClass::RemovedFromSpec { explanation, .. } if explanation.contains("finalizer"))
    );

    let policies: Vec<(&str, ObjectChange)> = diff
        .policies
        .iter()
        .map(|p| (p.name.as_str(), p.change))
        .collect();
    assert_eq!(
        policies,
        [
            ("canary", ObjectChange::Added),
            ("keep", ObjectChange::Changed),
            ("retired", ObjectChange::Removed)
        ]
    );
    let canary = &diff.policies[0];
    assert_eq!(canary.used_by, ["fleet"]);
    // Issue 28 item 8: the part says what changed inside it.
    assert_eq!(diff.policies[1].parts, ["default: budget 10 % → 20 %"]);
}

#[test]
fn the_refused_changes_make_the_head_invalid_with_locations() {
    let (_tmp, diff) = diff_fixture();
    assert!(diff.has_errors());
    let errors: Vec<(String, String)> = diff
        .problems
        .iter()
        .filter(|p| p.is_error())
        .map(|p| (p.rule.clone(), p.location()))
        .collect();
    // The refused downgrade (located in the file); nothing else is wrong with head.
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors
            .iter()
            .any(|(r, at)| r == "uninstall-downgrade-apply-first"
                && at.starts_with("manifests/fleet.yaml:")),
        "{errors:?}"
    );
    // The removal of an uninstall-enabled package never asked to uninstall is a warning:
    // the cluster decides from its status (§3.2 rule 1).
    assert!(
        diff.problems
            .iter()
            .any(|p| !p.is_error() && p.rule == "uninstall-removal"),
        "{:?}",
        diff.problems
    );
    // down-ready's cancel is a warning, not an error.
    assert!(
        diff.problems
            .iter()
            .any(|p| !p.is_error() && p.message.contains("uninstall cancelled"))
    );

    let md = render(&diff, Format::Markdown);
    assert!(md.starts_with("❌"));
    for label in [
        "upgrade",
        "downgrade",
        "config",
        "config emptied",
        "image only",
        "interrupt",
        "configInterrupts",
        "dependsOn",
        "uninstall",
        "uninstall cancel",
        "uninstall.enabled",
        "removed from spec",
        "other fields",
        "install",
    ] {
        assert!(
            md.contains(&format!("**{label}**")),
            "markdown lacks {label}"
        );
    }
    assert!(md.contains("### DeploymentPolicies"));
    assert!(md.contains("| `pause` | `false` | `true` |"), "{md}");
    let json: Value = serde_json::from_str(&render(&diff, Format::Json)).unwrap();
    assert_eq!(json["summary"]["errors"], 1);
    assert_eq!(json["summary"]["classes"]["config"], 3);
}

#[test]
fn identical_commits_change_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let work = WorkRepo::init(&tmp.path().join("fleet"));
    work.write("fleet.yaml", include_str!("fixtures/diff/head.yaml"));
    let base = work.commit("base");
    work.write("notes.md", "docs only\n");
    let head = work.commit("docs");
    let args = Args {
        repo: work.dir.to_string_lossy().into_owned(),
        base,
        head,
        root: String::new(),
        format: Format::Text,
        cache_dir: None,
        token_file: None,
        token_env: None,
        budgets: BudgetArgs::default(),
        simulate: false,
        fleet: None,
        nodes: 8,
        max_simulated_pairs: nodewright_reconciler::diff::projection::DEFAULT_MAX_PAIRS,
        max_simulated_pairs_at_once:
            nodewright_reconciler::diff::projection::DEFAULT_MAX_PAIRS_AT_ONCE,
        post_comment: None,
        pr: None,
    };
    let diff = compute(&args).unwrap();
    assert!(diff.is_empty() && !diff.has_errors(), "{diff:?}");
    assert!(
        render(&diff, Format::Text)
            .starts_with(&format!("head {} changes nothing", &args.head[..12]))
    );
}
