//! The package-lane steps a pass runs (§5.2, §5.4), as a table so tests can swap them for
//! stand-ins and the engine bench can time each one.

use super::context::{Flow, NodeWorkResult, PassCtx};
use super::{configmaps, deletion, handlers, node_work, packages, sweep};

/// A preamble step that ends the pass when it returns [`Flow::EndPass`] (§5.4).
pub type StepFn = fn(&mut PassCtx<'_>, usize) -> Flow;
/// A preamble step that cannot end the pass.
pub type SideFn = fn(&mut PassCtx<'_>, usize);
/// The per-node work of one NodeWright (§5.5 step 6).
pub type WorkFn = fn(&mut PassCtx<'_>, usize, usize) -> NodeWorkResult;

/// The package-lane steps the pass runs, in the order of §5.2 and §5.4. Production passes run
/// [`Hooks::STANDARD`]; tests (and the engine bench, with the `step-timing` feature) swap
/// steps to isolate or time the rest of the pass.
#[derive(Clone, Copy)]
pub struct Hooks {
    /// Job handler and Pod-evidence handler (§8.8–§8.13), once, first.
    pub handlers: fn(&mut PassCtx<'_>),
    /// Preamble step 1: conditions fed by the package lane.
    pub refresh_conditions: SideFn,
    /// Preamble step 2: finalizer and deletion phases (§11).
    pub finalizer: StepFn,
    /// Preamble step 4: suspend Jobs of a paused NodeWright (§8.15).
    pub suspend_jobs: SideFn,
    /// Preamble step 5a: Job sweep (§8.14).
    pub sweep: SideFn,
    /// Preamble step 5b: node-metadata ConfigMaps (§9.1).
    pub node_metadata: SideFn,
    /// Preamble step 5c: package ConfigMaps and the config gate (§9.2, §6.8).
    pub package_configmaps: SideFn,
    /// Preamble step 6: resume suspended Jobs (§8.15).
    pub resume_jobs: SideFn,
    /// Dispatch step 6: one picked, ready node.
    pub work_node: WorkFn,
}

impl Hooks {
    /// The product's steps.
    pub const STANDARD: Hooks = Hooks {
        handlers: handlers::run,
        refresh_conditions: packages::refresh_conditions,
        finalizer: deletion::finalizer,
        suspend_jobs: sweep::suspend_jobs,
        sweep: sweep::sweep,
        node_metadata: configmaps::node_metadata,
        package_configmaps: configmaps::package_configmaps,
        resume_jobs: sweep::resume_jobs,
        work_node: node_work::work_node,
    };

    /// Steps that do nothing: the pass then only selects, orders and reports.
    #[cfg(any(test, feature = "step-timing"))]
    pub fn inert() -> Hooks {
        fn no_handlers(_: &mut PassCtx<'_>) {}
        fn no_side(_: &mut PassCtx<'_>, _: usize) {}
        fn no_step(_: &mut PassCtx<'_>, _: usize) -> Flow {
            Flow::Continue
        }
        fn no_work(_: &mut PassCtx<'_>, _: usize, _: usize) -> NodeWorkResult {
            NodeWorkResult::default()
        }
        Hooks {
            handlers: no_handlers,
            refresh_conditions: no_side,
            finalizer: no_step,
            suspend_jobs: no_side,
            sweep: no_side,
            node_metadata: no_side,
            package_configmaps: no_side,
            resume_jobs: no_side,
            work_node: no_work,
        }
    }
}
