//! The fault corpus (`tests/scenarios-faults/`): rollouts of hundreds to a thousand nodes
//! while API writes fail and the reconciler crashes, each asserting one reboot per node per
//! interrupt cycle (invariant 6) and the right final states. One test per file, so the
//! larger fleets run side by side.

use std::path::PathBuf;

use nodewright_reconciler::scenario::{Hooks, run_file};

fn run(name: &str) {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/scenarios-faults")
        .join(format!("{name}.yaml"));
    let report = run_file(&file, &Hooks::product());
    assert!(report.passed(), "{}", report.render());
}

#[test]
fn reboot_1000_nodes_5pct_write_failures() {
    run("reboot-1000-nodes-5pct-write-failures");
}

#[test]
fn reboot_1000_nodes_20pct_write_failures() {
    run("reboot-1000-nodes-20pct-write-failures");
}

#[test]
fn config_interrupt_change_under_write_failures() {
    run("config-interrupt-change-under-write-failures");
}

#[test]
fn upgrade_reboot_package_under_write_failures() {
    run("upgrade-reboot-package-under-write-failures");
}

#[test]
fn restarts_and_write_failures() {
    run("restarts-and-write-failures");
}

#[test]
fn every_file_of_the_fault_corpus_has_a_test() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/scenarios-faults");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("tests/scenarios-faults exists")
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|n| n.strip_suffix(".yaml").map(str::to_string))
        .collect();
    names.sort();
    let source = include_str!("fault_scenarios.rs");
    for name in names {
        assert!(
            source.contains(&format!("run(\"{name}\")")),
            "tests/scenarios-faults/{name}.yaml has no test in reconciler/tests/fault_scenarios.rs"
        );
    }
}
