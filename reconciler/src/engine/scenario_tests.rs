//! Runs the pass/policy scenario files (`tests/scenarios/{pass,policy}-*.yaml`, issue 4)
//! through the scenario runner with this engine.

use crate::scenario::Hooks;

#[test]
fn pass_and_policy_scenarios_pass() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/scenarios");
    let files = crate::scenario::scenario_files(&[dir]).unwrap_or_default();
    let mut hooks = Hooks::with_reconciler(super::reconcile_cached, "engine");
    hooks.metrics = Some(super::metrics::samples);
    let mut failures = Vec::new();
    let mut ran = 0;
    for file in files {
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if !(name.starts_with("pass-") || name.starts_with("policy-")) {
            continue;
        }
        ran += 1;
        let report = crate::scenario::run_file(&file, &hooks);
        if !report.passed() {
            failures.push(report.render());
        }
    }
    assert!(ran > 0, "no pass-/policy- scenario found");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
