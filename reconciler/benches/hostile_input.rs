//! The hostile inputs of issue 24 that are answered rather than refused, timed against their
//! targets: 8,000 invalid packages in one NodeWright validated (under 5 s), and
//! `diff --simulate` of one NodeWright with 1,000 packages on 8 nodes (refused by the
//! projection's limit) and the largest upgrade the limit projects. Prints figures; asserts
//! nothing (the answers themselves are tested in `tests/hostile_input.rs`).
//!
//! Run with `cargo bench -p nodewright-reconciler --bench hostile_input`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use nodewright_reconciler::cli::fleet::Fleet;
use nodewright_reconciler::cluster::Desired;
use nodewright_reconciler::diff::RolloutSimulator;
use nodewright_reconciler::diff::projection::{
    DEFAULT_MAX_PAIRS, DEFAULT_MAX_PAIRS_AT_ONCE, FleetProjection,
};
use nodewright_reconciler::settings::Settings;
use nodewright_reconciler::source::manifests::{self, Limits};
use nodewright_schema::{NodeWright, NodeWrightSpec, Package};

/// Peak resident memory of this process so far, in MiB (Linux), for the figures only.
fn peak_mib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}

fn invalid_packages(count: usize) -> String {
    let mut text = String::from(
        "apiVersion: nodewright.nvidia.com/v1alpha1\nkind: NodeWright\nmetadata:\n  name: big\nspec:\n  packages:\n",
    );
    for i in 0..count {
        text.push_str(&format!(
            "    pkg{i:05}:\n      version: not a version\n      image: example/p\n"
        ));
    }
    text
}

fn desired(packages: usize, version: &str) -> Desired {
    let packages: BTreeMap<String, Package> = (0..packages)
        .map(|i| {
            let package = Package {
                version: version.to_owned(),
                image: format!("example/p{i}"),
                ..Package::default()
            };
            (format!("pkg{i:04}x"), package)
        })
        .collect();
    let spec = NodeWrightSpec {
        packages: Some(packages),
        ..NodeWrightSpec::default()
    };
    Desired {
        nodewrights: vec![NodeWright::new("big", spec)],
        policies: vec![],
        commit: "bench".into(),
        ..Desired::default()
    }
}

/// Projects the upgrade of `packages` packages on `nodes` nodes within the default limits;
/// prints the time, the process's peak so far and the verdict.
fn project(packages: usize, nodes: usize) {
    let projection = FleetProjection {
        fleet: Fleet::plain(nodes),
        settings: Settings::default(),
        limit: Duration::from_secs(24 * 3600),
        max_pairs: DEFAULT_MAX_PAIRS,
        max_pairs_at_once: DEFAULT_MAX_PAIRS_AT_ONCE,
    };
    let started = Instant::now();
    let outcome = projection.simulate(&desired(packages, "1.0.0"), &desired(packages, "1.0.1"));
    let elapsed = started.elapsed();
    let verdict = match &outcome {
        Ok(t) => t.text.lines().next().unwrap_or_default().to_owned(),
        Err(e) => format!("refused: {e}"),
    };
    println!(
        "diff --simulate, {packages} packages × {nodes} nodes (limits {DEFAULT_MAX_PAIRS} pairs, {DEFAULT_MAX_PAIRS_AT_ONCE} at once): {:.1} s, peak so far {} MiB ({verdict})",
        elapsed.as_secs_f64(),
        peak_mib().map_or("?".to_owned(), |m| m.to_string()),
    );
}

fn main() {
    // The refusal first, so the peak it prints is its own; then the largest upgrade the
    // default limits project with every node at once (base and head rollouts, 8 nodes).
    project(1_000, 8);
    project(DEFAULT_MAX_PAIRS_AT_ONCE / 8, 8);

    let text = invalid_packages(8_000);
    let started = Instant::now();
    let loaded = manifests::load(
        [("big.yaml".to_owned(), text.into_bytes())],
        &Limits::default(),
    );
    let violations = manifests::validate_set(&loaded, None);
    let elapsed = started.elapsed();
    println!(
        "validate, 8,000 invalid packages: {:.2} s for {} violations (target: under 5 s)",
        elapsed.as_secs_f64(),
        violations.len()
    );
}
