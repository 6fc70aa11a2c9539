//! Runs every scenario of the corpus (`tests/scenarios/*.yaml`) with the product's wiring,
//! and checks that `nodewright simulate` reports failures with expected and actual values.

use std::path::PathBuf;

use nodewright_reconciler::cli::{Cli, Command, simulate};
use nodewright_reconciler::scenario::{Hooks, run_file, scenario_files};

fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/scenarios")
}

#[test]
fn every_scenario_in_the_corpus_passes() {
    let files = scenario_files(&[corpus()]).expect("tests/scenarios exists");
    assert!(!files.is_empty(), "the corpus is empty");
    let hooks = Hooks::product();
    let failures: Vec<String> = files
        .iter()
        .map(|f| run_file(f, &hooks))
        .filter(|r| !r.passed())
        .map(|r| r.render())
        .collect();
    assert!(
        failures.is_empty(),
        "{} scenario(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// `nodewright simulate ARGS` in-process (the shared build directory makes the binary on
/// disk a moving target while several branches build).
fn simulate(args: &[&str]) -> (i32, String) {
    use clap::Parser;
    let cli = match Cli::try_parse_from(["nodewright", "simulate"].iter().chain(args)) {
        Ok(cli) => cli,
        Err(e) => return (e.exit_code(), e.to_string()),
    };
    let Command::Simulate(args) = cli.command else {
        unreachable!("parsed as simulate")
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = simulate::run_to(&args, &Hooks::product(), &mut out, &mut err);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out),
        String::from_utf8_lossy(&err)
    );
    (i32::from(code), text)
}

#[test]
fn simulate_fails_a_broken_expectation_with_expected_and_actual() {
    let broken =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/broken-expectation.yaml");
    let (code, text) = simulate(&[broken.to_str().unwrap()]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("FAIL step 3 expect"), "{text}");
    assert!(
        text.contains("mismatch at nodes.n1.unschedulable"),
        "{text}"
    );
    assert!(text.contains("expected: false"), "{text}");
    assert!(text.contains("actual: true"), "{text}");
    assert!(text.contains("0 passed, 1 failed"), "{text}");
}

#[test]
fn simulate_exits_zero_when_every_scenario_passes_and_two_on_a_missing_path() {
    let one = corpus().join("sim-node-reboot.yaml");
    let (code, text) = simulate(&[one.to_str().unwrap()]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("1 passed, 0 failed"), "{text}");
    let (code, text) = simulate(&["/no/such/scenarios"]);
    assert_eq!(code, 2, "{text}");
}

#[test]
fn budget_flags_without_a_repository_are_refused_not_ignored() {
    let (code, text) = simulate(&[corpus().to_str().unwrap(), "--max-files", "3"]);
    assert_eq!(code, 2, "{text}");
    assert_eq!(
        text,
        "error: the --max-… budget flags apply to reading a repository: use them with --repo\n"
    );
}
