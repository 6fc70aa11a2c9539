//! Scenario files (spec/scenarios.md): the format, the in-memory repository, the runner with
//! its seams, expectations and invariants.

pub mod expect;
#[cfg(test)]
mod fault_prop_tests;
pub mod format;
pub mod invariants;
pub mod matcher;
pub mod repo;
pub mod runner;
#[cfg(test)]
mod tests;

pub use format::{Scenario, Step, parse};
pub use runner::{
    Hooks, Report, StepReport, VerbFn, VerbResult, idle_reconcile, run_file, run_scenario,
    scenario_files,
};
