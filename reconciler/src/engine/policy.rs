//! DeploymentPolicy arithmetic (spec/operator.md §2.2–§2.4, §2.7–§2.9, §5.7): ceilings,
//! compartment definitions, batch sizes and batch judgement. Pure functions over numbers.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use nodewright_schema::keys::DEFAULT_COMPARTMENT;
use nodewright_schema::{BatchState, DeploymentPolicy, NodeWright, StrategyKind, StrategyParams};

/// A budget (`count` wins when both are set; the webhook rejects that anyway).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Budget {
    /// `count: c`.
    Count(i32),
    /// `percent: p`.
    Percent(i32),
    /// Neither field.
    Unset,
}

impl Budget {
    fn from_fields(percent: Option<i32>, count: Option<i32>) -> Budget {
        match (count, percent) {
            (Some(c), _) => Budget::Count(c),
            (None, Some(p)) => Budget::Percent(p),
            (None, None) => Budget::Unset,
        }
    }
}

/// The DeploymentPolicy a NodeWright names among `policies`, and whether it names one that
/// does not exist (§2.9).
pub fn policy_of<'a>(
    policies: &'a [DeploymentPolicy],
    nw: &NodeWright,
) -> (Option<&'a DeploymentPolicy>, bool) {
    match nw.spec.deployment_policy.as_deref() {
        Some(p) if !p.is_empty() => {
            let found = policies
                .iter()
                .find(|d| d.metadata.name.as_deref() == Some(p));
            (found, found.is_none())
        }
        _ => (None, false),
    }
}

/// `trunc(matched × (percent / 100.0))` in IEEE-754 binary64 without fused multiply-add, the
/// way upstream computes it, which is one below the exact floor for a few inputs (§2.2).
pub fn percent_of(matched: i32, percent: i32) -> i32 {
    let factor = f64::from(percent) / 100.0;
    // A plain `*` on f64 is never fused by rustc (no fast-math), which is what §2.2 requires.
    (f64::from(matched) * factor).trunc() as i32
}

/// `ceiling(budget, matched)` (§2.2).
pub fn ceiling(budget: Budget, matched: i32) -> i32 {
    match budget {
        Budget::Count(c) => c,
        Budget::Percent(_) if matched == 0 => 0,
        Budget::Percent(p) => percent_of(matched, p).max(1),
        Budget::Unset => 0,
    }
}

/// A compartment as one pass uses it (§2.5, §2.8).
#[derive(Clone, Debug, PartialEq)]
pub struct CompartmentDef {
    /// Name (`__default__` for the default one).
    pub name: String,
    /// Node selector; `None` for `__default__`.
    pub selector: Option<LabelSelector>,
    /// Budget.
    pub budget: Budget,
    /// Strategy with every parameter defaulted; `None` = budget-only.
    pub strategy: Option<(StrategyKind, StrategyParams)>,
    /// The legacy no-policy default compartment (§2.8).
    pub legacy: bool,
}

impl CompartmentDef {
    /// Metric label of the strategy (§13.3).
    pub fn strategy_label(&self) -> &'static str {
        self.strategy
            .as_ref()
            .map_or("unknown", |(k, _)| k.as_str())
    }
    /// Safety rank for overlapping compartments (§2.5): fixed < linear < exponential < none.
    pub fn safety_rank(&self) -> u8 {
        match self.strategy.as_ref().map(|(k, _)| *k) {
            Some(StrategyKind::Fixed) => 0,
            Some(StrategyKind::Linear) => 1,
            Some(StrategyKind::Exponential) => 2,
            None => 3,
        }
    }
}

fn resolve(strategy: &nodewright_schema::Strategy) -> Option<(StrategyKind, StrategyParams)> {
    strategy
        .resolved()
        .map(|(kind, params)| (kind, params.with_defaults(kind)))
}

/// The compartments of a NodeWright (§2.5, §2.8); empty when its policy is missing (§2.9).
/// `selected` is the number of selected nodes (the legacy default's `initialBatch`).
pub fn compartments(
    nw: &NodeWright,
    policy: Option<&DeploymentPolicy>,
    policy_missing: bool,
    selected: i32,
) -> Vec<CompartmentDef> {
    if policy_missing {
        return Vec::new();
    }
    match policy {
        Some(p) => {
            let mut out: Vec<CompartmentDef> = p
                .spec
                .compartments
                .iter()
                .map(|c| CompartmentDef {
                    name: c.name.clone(),
                    selector: Some(c.selector.clone()),
                    budget: Budget::from_fields(c.budget.percent, c.budget.count),
                    strategy: c.strategy.as_ref().and_then(resolve),
                    legacy: false,
                })
                .collect();
            out.push(CompartmentDef {
                name: DEFAULT_COMPARTMENT.to_string(),
                selector: None,
                budget: Budget::from_fields(
                    p.spec.default.budget.percent,
                    p.spec.default.budget.count,
                ),
                strategy: resolve(&p.spec.default.strategy),
                legacy: false,
            });
            out
        }
        None => vec![legacy_default(nw, selected)],
    }
}

/// The legacy `__default__` compartment of a NodeWright without a policy (§2.8).
pub fn legacy_default(nw: &NodeWright, selected: i32) -> CompartmentDef {
    let ib = nw.spec.interruption_budget.as_ref();
    let budget = match (ib.and_then(|b| b.percent), ib.and_then(|b| b.count)) {
        (Some(p), _) => Budget::Percent(p),
        (None, Some(c)) => Budget::Count(c),
        (None, None) => Budget::Percent(100),
    };
    let initial = match budget {
        Budget::Count(c) => selected.min(c).max(1),
        Budget::Percent(p) => percent_of(selected, p).max(1),
        Budget::Unset => 1,
    };
    CompartmentDef {
        name: DEFAULT_COMPARTMENT.to_string(),
        selector: None,
        budget,
        strategy: Some((
            StrategyKind::Fixed,
            StrategyParams {
                initial_batch: Some(initial),
                delta: None,
                growth_factor: None,
                batch_threshold: Some(100),
                failure_threshold: None,
                safety_limit: Some(50),
            },
        )),
        legacy: true,
    }
}

/// Batch size of a compartment with `n` nodes and batch state `s` (§2.3).
pub fn batch_size(def: &CompartmentDef, n: i32, s: &BatchState) -> i32 {
    let Some((kind, p)) = &def.strategy else {
        return ceiling(def.budget, n);
    };
    let processed = s.completed_nodes + s.failed_nodes;
    let remaining = n - processed;
    let progress = if n == 0 { 0 } else { processed * 100 / n };
    let safety = p.safety_limit();
    let size = match kind {
        StrategyKind::Fixed => p.initial_batch().min(remaining),
        StrategyKind::Linear => {
            if n == 0 {
                return 0;
            }
            let base = if s.last_batch_size > 0 {
                if s.last_batch_failed && progress < safety {
                    (s.last_batch_size - p.delta()).max(1)
                } else {
                    s.last_batch_size + p.delta()
                }
            } else {
                p.initial_batch()
            };
            base.min(remaining)
        }
        StrategyKind::Exponential => {
            if n == 0 {
                return 0;
            }
            let base = if s.last_batch_size > 0 {
                if s.last_batch_failed && progress < safety {
                    (s.last_batch_size / p.growth_factor().max(1)).max(1)
                } else {
                    s.last_batch_size.saturating_mul(p.growth_factor()).min(n)
                }
            } else {
                p.initial_batch()
            };
            base.min(remaining)
        }
    };
    size.max(1)
}

/// Node counts of one compartment at evaluation time (§2.4 step 2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Nodes in the compartment.
    pub nodes: i32,
    /// Nodes reading `in_progress`.
    pub in_progress: i32,
    /// Nodes complete by package state.
    pub complete: i32,
    /// Nodes reading `erroring` and not complete.
    pub erroring: i32,
    /// Nodes reading `blocked`.
    pub blocked: i32,
}

/// What an evaluation did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Evaluation {
    /// The batch is still running or nothing happened.
    Unchanged,
    /// Checkpoints moved without judging a batch (currentBatch 0→1, negative delta,
    /// all-blocked batch).
    Rebaselined,
    /// A batch was judged.
    Judged {
        /// Whether it failed its threshold.
        failed: bool,
    },
}

/// Batch judgement of a compartment with a strategy (§2.4). Budget-only compartments are not
/// evaluated: their size needs no checkpoints (decision, see docs/decisions.md).
///
/// Negative deltas follow UP+: only the field that went backwards is re-baselined, and the
/// result is persisted.
pub fn evaluate(def: &CompartmentDef, s: &mut BatchState, c: Counts) -> Evaluation {
    let Some((_, p)) = &def.strategy else {
        return Evaluation::Unchanged;
    };
    if c.in_progress > 0 {
        return Evaluation::Unchanged;
    }
    if s.current_batch == 0 {
        s.current_batch = 1;
        return Evaluation::Rebaselined;
    }
    let d_c = c.complete - s.completed_nodes;
    let d_f = c.erroring - s.failed_nodes;
    if d_c < 0 || d_f < 0 {
        if d_c < 0 {
            s.completed_nodes = c.complete;
        }
        if d_f < 0 {
            s.failed_nodes = c.erroring;
        }
        return Evaluation::Rebaselined;
    }
    if d_c == 0 && d_f == 0 {
        return Evaluation::Unchanged;
    }
    s.completed_nodes = c.complete;
    s.failed_nodes = c.erroring;
    let batch = d_c + d_f;
    let success_pct = d_c * 100 / batch;
    let progress = if c.nodes == 0 {
        0
    } else {
        (s.completed_nodes + s.failed_nodes) * 100 / c.nodes
    };
    let failed = success_pct < p.batch_threshold();
    s.last_batch_size = batch;
    s.last_batch_failed = failed;
    if failed {
        s.consecutive_failures += 1;
        if let Some(ft) = p.failure_threshold
            && progress < p.safety_limit()
            && s.consecutive_failures >= ft
        {
            s.should_stop = true;
        }
    } else {
        s.consecutive_failures = 0;
    }
    s.current_batch += 1;
    Evaluation::Judged { failed }
}

/// Whether automatic batch reset is enabled (§2.7): the NodeWright option, else the policy's
/// field, else false.
pub fn auto_reset_enabled(nw: &NodeWright, policy: Option<&DeploymentPolicy>) -> bool {
    nw.spec
        .deployment_policy_options
        .as_ref()
        .and_then(|o| o.reset_batch_state_on_completion)
        .or_else(|| policy.and_then(|p| p.spec.reset_batch_state_on_completion))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_rounding_reproduces_float_truncation() {
        assert_eq!(percent_of(100, 29), 28);
        assert_eq!(percent_of(50, 58), 28);
        assert_eq!(percent_of(100, 57), 56);
        assert_eq!(percent_of(90, 70), 62);
        assert_eq!(ceiling(Budget::Percent(25), 10), 2);
        assert_eq!(ceiling(Budget::Percent(30), 10), 3);
        assert_eq!(ceiling(Budget::Percent(10), 5), 1);
        assert_eq!(ceiling(Budget::Percent(1), 100), 1);
        assert_eq!(ceiling(Budget::Percent(50), 0), 0);
        assert_eq!(ceiling(Budget::Count(0), 6), 0);
        assert_eq!(ceiling(Budget::Count(9), 6), 9);
        assert_eq!(ceiling(Budget::Unset, 6), 0);
    }

    #[test]
    fn forty_nine_float_cases_up_to_a_thousand_nodes() {
        // §2.2 counts the (matched ≤ 1000) inputs where float truncation is below the floor.
        let mut cases = 0;
        for m in 0..=1000 {
            for p in 0..=100 {
                if percent_of(m, p) < m * p / 100 {
                    cases += 1;
                }
            }
        }
        assert_eq!(cases, 49);
    }

    fn strat(kind: StrategyKind, params: StrategyParams) -> CompartmentDef {
        CompartmentDef {
            name: "c".into(),
            selector: None,
            budget: Budget::Count(1),
            strategy: Some((kind, params.with_defaults(kind))),
            legacy: false,
        }
    }

    fn state(last: i32, failed: bool, done: i32) -> BatchState {
        BatchState {
            current_batch: 1,
            last_batch_size: last,
            last_batch_failed: failed,
            completed_nodes: done,
            ..BatchState::default()
        }
    }

    #[test]
    fn linear_and_exponential_progressions() {
        let lin = strat(StrategyKind::Linear, StrategyParams::default());
        assert_eq!(batch_size(&lin, 20, &state(0, false, 0)), 1);
        assert_eq!(batch_size(&lin, 20, &state(1, false, 1)), 2);
        assert_eq!(batch_size(&lin, 20, &state(2, false, 3)), 3);
        assert_eq!(
            batch_size(&lin, 20, &state(3, true, 3)),
            2,
            "failure shrinks"
        );
        assert_eq!(
            batch_size(&lin, 4, &state(3, false, 3)),
            1,
            "capped at remaining"
        );
        let exp = strat(StrategyKind::Exponential, StrategyParams::default());
        assert_eq!(batch_size(&exp, 20, &state(0, false, 0)), 1);
        assert_eq!(batch_size(&exp, 20, &state(2, false, 3)), 4);
        assert_eq!(batch_size(&exp, 20, &state(4, true, 7)), 2);
        assert_eq!(batch_size(&exp, 0, &state(4, false, 0)), 0);
        // At or above the safety limit failures no longer slow it down.
        assert_eq!(batch_size(&exp, 10, &state(2, true, 5)), 4);
    }

    #[test]
    fn fixed_is_capped_and_at_least_one() {
        let fixed = strat(
            StrategyKind::Fixed,
            StrategyParams {
                initial_batch: Some(3),
                ..StrategyParams::default()
            },
        );
        assert_eq!(batch_size(&fixed, 10, &state(0, false, 0)), 3);
        assert_eq!(batch_size(&fixed, 10, &state(3, false, 9)), 1);
        assert_eq!(batch_size(&fixed, 10, &state(3, false, 10)), 1);
    }

    #[test]
    fn budget_only_uses_ceiling() {
        let c = CompartmentDef {
            name: "c".into(),
            selector: None,
            budget: Budget::Percent(30),
            strategy: None,
            legacy: false,
        };
        assert_eq!(batch_size(&c, 10, &BatchState::default()), 3);
    }

    #[test]
    fn legacy_default_batches() {
        let mut nw = NodeWright::new("nw", Default::default());
        assert_eq!(initial(&legacy_default(&nw, 6)), 6);
        nw.spec.interruption_budget = Some(nodewright_schema::InterruptionBudget {
            percent: None,
            count: Some(0),
        });
        let d = legacy_default(&nw, 6);
        assert_eq!(initial(&d), 1);
        assert_eq!(ceiling(d.budget, 6), 0);
        nw.spec.interruption_budget = Some(nodewright_schema::InterruptionBudget {
            percent: Some(0),
            count: None,
        });
        assert_eq!(initial(&legacy_default(&nw, 6)), 1);
        nw.spec.interruption_budget = Some(nodewright_schema::InterruptionBudget {
            percent: Some(29),
            count: None,
        });
        assert_eq!(initial(&legacy_default(&nw, 100)), 28);
        assert_eq!(initial(&legacy_default(&nw, 0)), 1);
    }

    fn initial(d: &CompartmentDef) -> i32 {
        d.strategy
            .as_ref()
            .map(|(_, p)| p.initial_batch())
            .unwrap_or(0)
    }

    #[test]
    fn judgement_counts_successes_and_failures() {
        let c = strat(
            StrategyKind::Fixed,
            StrategyParams {
                batch_threshold: Some(80),
                failure_threshold: Some(2),
                ..StrategyParams::default()
            },
        );
        let mut s = BatchState::reset();
        let counts = Counts {
            nodes: 10,
            in_progress: 1,
            complete: 2,
            ..Counts::default()
        };
        assert_eq!(evaluate(&c, &mut s, counts), Evaluation::Unchanged);
        let counts = Counts {
            nodes: 10,
            complete: 1,
            erroring: 1,
            ..Counts::default()
        };
        assert_eq!(
            evaluate(&c, &mut s, counts),
            Evaluation::Judged { failed: true }
        );
        assert_eq!(s.current_batch, 2);
        assert_eq!(s.consecutive_failures, 1);
        assert!(!s.should_stop);
        let counts = Counts {
            nodes: 10,
            complete: 1,
            erroring: 2,
            ..Counts::default()
        };
        assert_eq!(
            evaluate(&c, &mut s, counts),
            Evaluation::Judged { failed: true }
        );
        assert!(
            s.should_stop,
            "two failures in a row below the safety limit"
        );
        assert_eq!(s.last_batch_size, 1);
    }

    #[test]
    fn blocked_only_batch_and_negative_delta_do_not_judge() {
        let c = strat(StrategyKind::Fixed, StrategyParams::default());
        let mut s = BatchState {
            current_batch: 2,
            completed_nodes: 3,
            failed_nodes: 1,
            ..BatchState::default()
        };
        let counts = Counts {
            nodes: 10,
            complete: 2,
            erroring: 2,
            ..Counts::default()
        };
        assert_eq!(evaluate(&c, &mut s, counts), Evaluation::Rebaselined);
        assert_eq!(
            (s.completed_nodes, s.failed_nodes),
            (2, 1),
            "UP+: only the backwards field"
        );
        let mut zero = BatchState::default();
        assert_eq!(
            evaluate(&c, &mut zero, Counts::default()),
            Evaluation::Rebaselined
        );
        assert_eq!(zero.current_batch, 1);
    }
}
