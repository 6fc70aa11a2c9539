//! The `nodewright` binary as a user runs it: `validate` and `crds`, exit codes and output.

use std::path::PathBuf;
use std::process::{Command, Output};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

fn nodewright(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nodewright"))
        .args(args)
        .current_dir(repo_root())
        .output()
        .expect("the nodewright binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

#[test]
fn the_example_fleet_is_valid() {
    let out = nodewright(&["validate", "examples/fleet"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = String::from_utf8_lossy(&out.stderr);
    assert!(
        summary.contains("2 NodeWright(s), 1 DeploymentPolicy(s)"),
        "{summary}"
    );
    // No warnings either: the examples are what users copy.
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
}

#[test]
fn a_broken_folder_names_every_problem_with_file_and_line() {
    let out = nodewright(&["validate", "reconciler/tests/fixtures/broken"]);
    assert_eq!(out.status.code(), Some(3));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    let has = |prefix: &str, needle: &str| {
        lines
            .iter()
            .any(|l| l.starts_with(prefix) && l.contains(needle))
    };
    assert!(
        has(
            "reconciler/tests/fixtures/broken/cycle.yaml:11: NodeWright/cyclic: spec.packages.alpha.dependsOn: ",
            "dependsOn forms a cycle: [alpha|1.0.0 -> beta|2.0.0 -> alpha|1.0.0]"
        ),
        "{text}"
    );
    assert!(
        has(
            "reconciler/tests/fixtures/broken/images.yaml:16: NodeWright/tagged: spec.packages.tuning.image: ",
            "contains an inline tag '1.2.3'"
        ),
        "{text}"
    );
    assert!(
        has(
            "reconciler/tests/fixtures/broken/images.yaml:18: NodeWright/tagged: spec.packages.driver.version: ",
            "error version string for driver is invalid: latest"
        ),
        "{text}"
    );
    assert!(
        has(
            "reconciler/tests/fixtures/broken/images.yaml:26: NodeWright/tagged: spec.packages.config.configInterrupts[b.conf]: ",
            "b.conf doesn't exist as a configmap"
        ),
        "{text}"
    );
    // The registry port in localhost:5000/... is not a tag; the ConfigMap is only noted.
    assert!(
        !text.contains("localhost:5000/example/config' contains"),
        "{text}"
    );
    assert!(
        has(
            "reconciler/tests/fixtures/broken/images.yaml:1: note: ",
            "ConfigMap/unrelated"
        ),
        "{text}"
    );
}

#[test]
fn json_output_is_machine_readable() {
    let out = nodewright(&[
        "validate",
        "--format",
        "json",
        "reconciler/tests/fixtures/broken",
    ]);
    assert_eq!(out.status.code(), Some(3));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(doc["valid"], false);
    let violations = doc["violations"].as_array().expect("violations");
    assert_eq!(violations.len(), 4);
    let rules: Vec<&str> = violations
        .iter()
        .filter_map(|v| v["rule"].as_str())
        .collect();
    assert_eq!(
        rules,
        [
            "depends-on-cycle",
            "image-tag",
            "version-invalid",
            "config-interrupt-key-missing"
        ]
    );
    assert_eq!(
        violations[2]["admission_message"],
        "validating NodeWright \"tagged\": error version string for driver is invalid: latest"
    );
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(nodewright(&["validate"]).status.code(), Some(2));
    assert_eq!(
        nodewright(&["validate", "does/not/exist"]).status.code(),
        Some(2)
    );
    assert_eq!(nodewright(&["frobnicate"]).status.code(), Some(2));
    assert_eq!(
        nodewright(&["validate", "--format", "xml", "examples"])
            .status
            .code(),
        Some(2)
    );
    let help = nodewright(&["validate", "--help"]);
    assert_eq!(help.status.code(), Some(0));
    assert!(stdout(&help).contains("nodewright validate examples/fleet"));
}

#[test]
fn crds_prints_both_definitions() {
    let out = nodewright(&["crds"]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert_eq!(text, nodewright_schema::crd::all_yaml());
    assert!(text.contains("name: nodewrights.nodewright.nvidia.com"));
    assert!(text.contains("name: deploymentpolicies.nodewright.nvidia.com"));
}

#[test]
fn a_malformed_maintenance_window_or_timezone_is_an_error_at_its_line() {
    let out = nodewright(&["validate", "reconciler/tests/fixtures/maintenance-invalid"]);
    assert_eq!(out.status.code(), Some(3), "{}", stdout(&out));
    let text = stdout(&out);
    let file = "reconciler/tests/fixtures/maintenance-invalid/gpu.yaml";
    assert!(
        text.contains(&format!(
            "{file}:6: DeploymentPolicy/night: metadata.annotations[gitops.nodewright.nvidia.com/maintenance-windows]: \"Sat 2:00-6:00\": \"2:00\" is not a time HH:MM"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "{file}:16: NodeWright/gpu: metadata.annotations[gitops.nodewright.nvidia.com/maintenance-timezone]: unknown timezone \"Europe/Berln\""
        )),
        "{text}"
    );
    // Each message shows the expected form.
    assert!(
        text.contains("e.g. \"Sat,Sun 02:00-06:00; Mon-Fri 22:00-23:30\""),
        "{text}"
    );
}

#[test]
fn malformed_approval_gates_are_errors_at_their_line() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("policy.yaml"),
        "apiVersion: nodewright.nvidia.com/v1alpha1\nkind: DeploymentPolicy\nmetadata: {name: tiers}\nspec:\n  default: {budget: {count: 1}, strategy: {fixed: {}}}\n  compartments:\n    - {name: canary, selector: {matchLabels: {tier: canary}}, budget: {count: 1}, strategy: {fixed: {}}}\n",
    )
    .unwrap();
    let nodewright_with = |name: &str, required: &str, approved: &str| {
        format!(
            "apiVersion: nodewright.nvidia.com/v1alpha1\nkind: NodeWright\nmetadata:\n  name: {name}\n  annotations:\n    # who may go on\n    gitops.nodewright.nvidia.com/approval-required: \"{required}\"\n    gitops.nodewright.nvidia.com/approved-batches: \"{approved}\"\nspec:\n  deploymentPolicy: tiers\n  packages:\n    driver: {{version: 1.0.0, image: example/driver}}\n"
        )
    };
    std::fs::write(
        tmp.path().join("fleet.yaml"),
        [
            nodewright_with("unknown", "canary,production", "canary=2"),
            nodewright_with("zero", "canary", "canary=0"),
            nodewright_with("syntax", "canary", "canary:2"),
            nodewright_with("fine", "*", "canary=2,__default__=3"),
        ]
        .join("---\n"),
    )
    .unwrap();
    let out = nodewright(&["validate", tmp.path().to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    let line = |n: usize| -> &str {
        text.lines()
            .find(|l| l.contains(&format!("fleet.yaml:{n}:")))
            .unwrap_or_else(|| panic!("no finding at line {n}: {text}"))
    };
    assert!(
        line(7).contains("NodeWright/unknown")
            && line(7).contains("gates compartment \"production\", which this NodeWright does not have (its compartments: __default__, canary)"),
        "{text}"
    );
    assert!(
        line(21).contains("NodeWright/zero") && line(21).contains("batches are numbered from 1"),
        "{text}"
    );
    assert!(
        line(34).contains("NodeWright/syntax") && line(34).contains("has no `=N`"),
        "{text}"
    );
    assert!(!text.contains("NodeWright/fine"), "{text}");
}
