//! Invariants 1, 2 and 6 of spec/scenarios.md §6 (6 is this project's, docs/decisions.md),
//! checked on the world after every pass and every step (3–5 are checked by the simulator as
//! actions execute).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::Node;
use nodewright_schema::node_state::{NodeState, entry_key};
use nodewright_schema::{
    BatchState, Budget, NodeWright, Stage, State, Status, Strategy, StrategyKind, keys,
};

use crate::engine::complete;
use crate::sim::SimCluster;
use crate::verbs::node_annotation;
use nodewright_schema::selector::Selector;

/// Invariant 2: never two unfinished Jobs for one NodeWright/package/stage/node. Jobs being
/// deleted are not counted (their name is no longer a claim).
pub fn duplicate_jobs(world: &SimCluster) -> Vec<String> {
    let mut by_address: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, job) in world.unfinished_jobs() {
        if job.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if let Some(address) = crate::sim::job_address(job) {
            by_address.entry(address).or_default().push(name.clone());
        }
    }
    by_address
        .into_iter()
        .filter(|(_, jobs)| jobs.len() > 1)
        .map(|(address, jobs)| {
            format!(
                "invariant 2: {} unfinished Jobs for {address}: {}",
                jobs.len(),
                jobs.join(", ")
            )
        })
        .collect()
}

/// `ceiling(budget, matched)` (spec/operator.md §2.2), with upstream's float truncation.
pub fn ceiling(budget: &Budget, matched: i32) -> i32 {
    if let Some(count) = budget.count {
        return count;
    }
    match budget.percent {
        Some(pct) if matched > 0 => ((f64::from(matched) * (f64::from(pct) / 100.0)) as i32).max(1),
        _ => 0,
    }
}

/// Batch size of a strategy compartment (spec/operator.md §2.3).
pub fn batch_size(strategy: &Strategy, n: i32, state: &BatchState) -> i32 {
    let Some((kind, params)) = strategy.resolved() else {
        return n;
    };
    let processed = state.completed_nodes + state.failed_nodes;
    let remaining = n - processed;
    let progress = if n > 0 { processed * 100 / n } else { 0 };
    let size = match kind {
        StrategyKind::Fixed => params.initial_batch().min(remaining),
        StrategyKind::Linear | StrategyKind::Exponential if n == 0 => return 0,
        StrategyKind::Linear => {
            let size = if state.last_batch_size > 0 {
                if state.last_batch_failed && progress < params.safety_limit() {
                    (state.last_batch_size - params.delta()).max(1)
                } else {
                    state.last_batch_size + params.delta()
                }
            } else {
                params.initial_batch()
            };
            size.min(remaining)
        }
        StrategyKind::Exponential => {
            let size = if state.last_batch_size > 0 {
                if state.last_batch_failed && progress < params.safety_limit() {
                    (state.last_batch_size / params.growth_factor()).max(1)
                } else {
                    (state.last_batch_size * params.growth_factor()).min(n)
                }
            } else {
                params.initial_batch()
            };
            size.min(remaining)
        }
    };
    size.max(1)
}

fn rank(strategy: Option<&Strategy>) -> u8 {
    match strategy.and_then(|s| s.resolved()).map(|(k, _)| k) {
        Some(StrategyKind::Fixed) => 0,
        Some(StrategyKind::Linear) => 1,
        Some(StrategyKind::Exponential) => 2,
        None => 3,
    }
}

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

fn labels(node: &Node) -> &BTreeMap<String, String> {
    node.metadata.labels.as_ref().unwrap_or(&NO_LABELS)
}

/// Whether a parsed selector matches; an invalid selector matches nothing, as in the engine.
fn matches<E>(selector: &Result<Selector, E>, labels: &BTreeMap<String, String>) -> bool {
    selector.as_ref().is_ok_and(|s| s.matches(labels))
}

/// Invariant 1: per NodeWright and compartment, the nodes being worked on never exceed the
/// size of the compartment's current batch (its ceiling for budget-only compartments; the
/// §2.8 batch for a NodeWright without a policy). A node is worked on while it has an
/// unfinished package Job of that NodeWright, or carries its cordon annotation and is not
/// complete.
pub fn over_budget(world: &SimCluster) -> Vec<String> {
    let mut out = Vec::new();
    for nw in world.nodewrights().values() {
        let name = nw.metadata.name.clone().unwrap_or_default();
        let selector = nw.spec.node_selectors.as_ref().map(Selector::parse);
        let selects = |n: &Node| selector.as_ref().is_none_or(|s| matches(s, labels(n)));
        let selected: Vec<&Node> = (world.nodes().values())
            .map(|n| &**n)
            .filter(|n| selects(n))
            .collect();
        let worked = worked_nodes(world, nw, &selected, |node| {
            world.nodes().get(node).is_some_and(|n| selects(n))
        });
        if worked.is_empty() {
            continue;
        }
        let count = selected.len() as i32;
        let mut compartments: BTreeMap<String, (i32, Vec<String>)> = BTreeMap::new();
        match nw.spec.deployment_policy.as_ref() {
            None => {
                let budget = nw.spec.interruption_budget.clone().unwrap_or_default();
                let bound = match (budget.percent, budget.count) {
                    (Some(pct), _) => ((f64::from(count) * (f64::from(pct) / 100.0)) as i32).max(1),
                    (None, Some(c)) => c.min(count).max(1),
                    (None, None) => count.max(1),
                };
                compartments.insert(
                    keys::DEFAULT_COMPARTMENT.into(),
                    (bound, worked.iter().cloned().collect()),
                );
            }
            Some(policy_name) => {
                let Some(policy) = world.policies().get(policy_name) else {
                    continue;
                };
                let spec = &policy.spec;
                let mut members: BTreeMap<String, Vec<&Node>> = BTreeMap::new();
                // M of §2.5 (b): selected nodes matching each compartment's selector.
                let selectors: Vec<_> = (spec.compartments.iter())
                    .map(|c| Selector::parse(&c.selector))
                    .collect();
                let matching: Vec<i32> = selectors
                    .iter()
                    .map(|s| {
                        selected
                            .iter()
                            .filter(|n| matches(s, labels(n)))
                            .count()
                            .max(1) as i32
                    })
                    .collect();
                for node in &selected {
                    let l = labels(node);
                    let chosen = spec
                        .compartments
                        .iter()
                        .zip(&matching)
                        .zip(&selectors)
                        .filter(|(_, s)| matches(s, l))
                        .map(|(c, _)| c)
                        .min_by_key(|(c, m)| {
                            (
                                rank(c.strategy.as_ref()),
                                ceiling(&c.budget, **m),
                                c.name.clone(),
                            )
                        })
                        .map(|(c, _)| c.name.clone())
                        .unwrap_or_else(|| keys::DEFAULT_COMPARTMENT.to_string());
                    members.entry(chosen).or_default().push(node);
                }
                let statuses = nw
                    .status
                    .as_ref()
                    .and_then(|s| s.compartment_statuses.clone())
                    .unwrap_or_default();
                for (comp, nodes) in members {
                    let n = nodes.len() as i32;
                    let (budget, strategy) = match spec.compartments.iter().find(|c| c.name == comp)
                    {
                        Some(c) => (c.budget.clone(), c.strategy.clone()),
                        None => (
                            spec.default.budget.clone(),
                            Some(spec.default.strategy.clone()),
                        ),
                    };
                    let bound = match strategy {
                        Some(strategy) => {
                            let state = statuses
                                .get(&comp)
                                .and_then(|s| s.batch_state.clone())
                                .unwrap_or_else(|| BatchState {
                                    current_batch: 1,
                                    ..BatchState::default()
                                });
                            batch_size(&strategy, n, &state)
                        }
                        None => ceiling(&budget, n),
                    };
                    let names: BTreeSet<String> = nodes
                        .iter()
                        .filter_map(|n| n.metadata.name.clone())
                        .collect();
                    compartments.insert(
                        comp,
                        (bound, worked.intersection(&names).cloned().collect()),
                    );
                }
            }
        }
        for (comp, (bound, nodes)) in compartments {
            if nodes.len() as i32 > bound {
                out.push(format!(
                    "invariant 1: NodeWright {name} compartment {comp}: {} nodes worked on ({}) but the current batch allows {bound}",
                    nodes.len(),
                    nodes.join(", ")
                ));
            }
        }
    }
    out
}

fn worked_nodes(
    world: &SimCluster,
    nw: &NodeWright,
    selected: &[&Node],
    selects: impl Fn(&str) -> bool,
) -> BTreeSet<String> {
    let name = nw.metadata.name.as_deref().unwrap_or_default();
    let cordon = keys::cordon(name);
    let status = keys::status(name);
    let mut worked: BTreeSet<String> = selected
        .iter()
        .filter(|n| {
            let a = n.metadata.annotations.as_ref().unwrap_or(&NO_LABELS);
            a.contains_key(&cordon)
                && Status::from_annotation(a.get(&status).map(String::as_str)) != Status::Complete
        })
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    for (_, job) in world.unfinished_jobs() {
        let owner = job
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(keys::JOB_LABEL_NAME));
        if owner.map(String::as_str) != Some(name) {
            continue;
        }
        let node = job
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|s| s.node_name.as_deref());
        if let Some(node) = node.filter(|n| selects(n)) {
            worked.insert(node.to_string());
        }
    }
    worked
}

/// Invariant 6 (docs/decisions.md): a node is interrupted once per interrupt cycle, and a
/// NodeWright never reads `complete` while a node still owes the interrupt its configuration
/// needs.
///
/// An interrupt cycle of an owner package on a node starts when that package's entry is at a
/// stage before its interrupt (`apply`, `upgrade`, `config`, `uninstall`) and not complete, or
/// is gone; it ends with the interrupt Job. A second interrupt Job of the same owner, stage and
/// node inside one cycle is a reboot (or service restart) the node's work did not need. A
/// failed interrupt Job, and an operator's verb, may start it again.
///
/// A node owes an interrupt when its applied-config record for a package changes in a key that
/// one of the package's `configInterrupts` patterns matches (§6.4, §16.3); a completed interrupt
/// Job of that NodeWright on the node pays it.
#[derive(Debug, Default)]
pub struct InterruptLedger {
    /// History entries already read.
    cursor: usize,
    /// (NodeWright, node, owner package, stage) whose interrupt started in the current cycle,
    /// with the resourceVersion of the node last found still inside that cycle (the world
    /// moves it with every write of the node, so an unchanged node is not read again).
    spent: BTreeMap<(String, String, String, String), Option<String>>,
    /// The applied-config record last seen, by NodeWright and node.
    records: BTreeMap<String, HashMap<String, SeenRecord>>,
    /// (NodeWright, node) → the package whose configuration still needs its interrupt.
    owed: BTreeMap<(String, String), String>,
}

impl InterruptLedger {
    /// An operator's verb may legitimately start any interrupt again.
    pub fn forgive(&mut self) {
        self.spent.clear();
    }

    /// Reads what happened since the last call; returns the violations found.
    pub fn observe(&mut self, world: &SimCluster) -> Vec<String> {
        let mut found = Vec::new();
        let entries = world.history().entries();
        for entry in entries.get(self.cursor..).unwrap_or_default() {
            let Some((verb, address)) = entry.line.split_once(' ') else {
                continue;
            };
            let parts: Vec<&str> = address.split('/').collect();
            let [nw, package, stage, node] = parts[..] else {
                continue;
            };
            if stage != "interrupt" && stage != "uninstall-interrupt" {
                continue;
            }
            let key = (
                nw.to_string(),
                node.to_string(),
                package.to_string(),
                stage.to_string(),
            );
            match verb {
                "job" if self.spent.insert(key.clone(), None).is_some() => {
                    found.push(format!(
                        "invariant 6: a second {stage} Job of {nw}/{package} on node {node} in one interrupt cycle (an interrupt its work did not need)"
                    ));
                }
                "job-fail" => {
                    self.spent.remove(&key);
                }
                "job-ok" => {
                    self.owed.remove(&(nw.to_string(), node.to_string()));
                }
                _ => {}
            }
        }
        self.cursor = entries.len();

        let nws = world.nodewrights();
        // Every node that ran an interrupt stays here: its NodeWright's key is made once.
        let mut state_keys: HashMap<String, String> = HashMap::new();
        self.spent.retain(|(nw, node, package, _), checked| {
            if !state_keys.contains_key(nw) {
                state_keys.insert(nw.clone(), keys::node_state(nw));
            }
            let Some(node) = world.nodes().get(node) else {
                return false;
            };
            let version = node.metadata.resource_version.as_deref();
            if version.is_some() && checked.as_deref() == version {
                return true;
            }
            let Some(raw) = node_annotation(node, &state_keys[nw]) else {
                return false;
            };
            let Ok(state) = NodeState::parse(raw) else {
                return false;
            };
            let mut entries = state.entries_of(package).peekable();
            if entries.peek().is_none() {
                return false;
            }
            let in_cycle = !entries.any(|e| {
                e.stage
                    .is_some_and(|s| s.order() < Stage::Interrupt.order())
                    && matches!(e.state, Some(State::InProgress) | Some(State::Erroring))
                    && e.stage != Some(Stage::UninstallInterrupt)
            });
            *checked = version.map(str::to_string);
            in_cycle
        });

        for (nw_name, nw) in nws {
            let applied_key = keys::config_applied(nw_name);
            let records = self.records.entry(nw_name.clone()).or_default();
            for (name, node) in world.nodes() {
                let version = node.metadata.resource_version.as_deref();
                if version.is_some()
                    && records
                        .get(name)
                        .is_some_and(|seen| seen.version.as_deref() == version)
                {
                    continue;
                }
                let raw = node_annotation(node, &applied_key);
                let seen = SeenRecord {
                    version: version.map(str::to_string),
                    record: raw.map(str::to_string),
                };
                let previous = records.insert(name.clone(), seen).and_then(|s| s.record);
                let (Some(raw), Some(previous)) = (raw, previous) else {
                    continue;
                };
                if previous == raw {
                    continue;
                }
                let before = complete::parse_applied(Some(&previous));
                let after = complete::parse_applied(Some(raw));
                for (package, p) in nw.spec.packages() {
                    let entry = entry_key(package, &p.version);
                    let (Some(old), Some(new)) = (before.get(&entry), after.get(&entry)) else {
                        continue;
                    };
                    let changed: Vec<String> = old
                        .keys()
                        .chain(new.keys())
                        .filter(|k| old.get(*k) != new.get(*k))
                        .cloned()
                        .collect();
                    let needs = p
                        .config_interrupts()
                        .keys()
                        .any(|pattern| changed.iter().any(|k| complete::glob_match(pattern, k)));
                    if needs {
                        self.owed
                            .insert((nw_name.clone(), name.clone()), package.clone());
                    }
                }
            }
        }

        self.owed.retain(|(nw, node), _| {
            nws.get(nw).is_some_and(|nw| {
                let labels = world.nodes().get(node).map(|n| labels(n));
                labels.is_some_and(|l| {
                    nodewright_schema::selector::matches(nw.spec.node_selectors.as_ref(), l)
                })
            })
        });
        for ((nw_name, node), package) in &self.owed {
            let Some(nw) = nws.get(nw_name) else {
                continue;
            };
            if nw.is_converged() {
                found.push(format!(
                    "invariant 6: NodeWright {nw_name} reads complete while node {node} still owes the interrupt its configuration of {package} needs"
                ));
            }
        }
        found
    }
}

/// A node's applied-config record as the ledger last read it, with the node's resourceVersion
/// then: a node the world has not written since is not read again.
#[derive(Debug)]
struct SeenRecord {
    version: Option<String>,
    record: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_schema::StrategyParams;

    /// A world with one node `n1` and NodeWright `gpu`, whose package `tuning` needs a
    /// reboot when `sysctl.conf` changes.
    fn ledger_world() -> SimCluster {
        use crate::cluster::Desired;
        use crate::sim::{ModelRunner, NodeInput, PackageModels};
        let nw: NodeWright = serde_yaml::from_str(
            r#"
apiVersion: nodewright.nvidia.com/v1alpha1
kind: NodeWright
metadata: {name: gpu, generation: 1}
spec:
  packages:
    tuning:
      version: 1.0.0
      image: example/tuning
      configMap: {sysctl.conf: "a=1"}
      configInterrupts: {sysctl.conf: {type: reboot}}
"#,
        )
        .expect("the test NodeWright is valid YAML");
        let runner = ModelRunner::new(PackageModels::default());
        let mut world = SimCluster::new("nodewright", Box::new(runner), 1);
        world.add_node(NodeInput {
            name: "n1".into(),
            ..NodeInput::default()
        });
        world.apply_desired(&Desired {
            nodewrights: vec![nw],
            ..Default::default()
        });
        world
    }

    fn write(world: &mut SimCluster, action: crate::plan::Action) {
        world.execute(&action).expect("the test's write applies");
    }

    fn annotate(key: String, value: &str) -> crate::plan::Action {
        let mut patch = crate::plan::NodePatch::new("n1");
        patch.annotations.insert(key, Some(value.to_string()));
        crate::plan::Action::PatchNode(patch)
    }

    #[test]
    fn invariant_6_names_a_node_that_owes_its_interrupt_while_its_nodewright_reads_complete() {
        let mut world = ledger_world();
        let mut ledger = InterruptLedger::default();
        let record = |digest: &str| {
            annotate(
                keys::config_applied("gpu"),
                &format!(r#"{{"tuning|1.0.0":{{"sysctl.conf":"{digest}"}}}}"#),
            )
        };
        let complete = || {
            let status = nodewright_schema::NodeWrightStatus {
                status: Some(Status::Complete),
                observed_generation: Some(1),
                ..Default::default()
            };
            crate::plan::Action::PatchNodeWrightStatus {
                name: "gpu".into(),
                patch: Box::new(crate::plan::StatusPatch::whole(status)),
            }
        };
        write(&mut world, record("old"));
        assert_eq!(ledger.observe(&world), Vec::<String>::new());
        write(&mut world, complete());
        assert_eq!(
            ledger.observe(&world),
            Vec::<String>::new(),
            "a record seen once owes nothing"
        );
        write(&mut world, record("new"));
        let found = ledger.observe(&world);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("node n1 still owes"), "{found:?}");
        assert_eq!(
            ledger.observe(&world),
            found,
            "an unchanged node still owes it"
        );
        write(&mut world, annotate("unrelated".into(), "x"));
        assert_eq!(
            ledger.observe(&world),
            found,
            "a write of something else pays nothing"
        );
    }

    #[test]
    fn invariant_6_names_a_second_interrupt_job_inside_one_interrupt_cycle() {
        use crate::engine::jobs::{InterruptJobInput, build_interrupt_job};
        let mut world = ledger_world();
        let nw = world.nodewrights()["gpu"].clone();
        let package = nw.spec.packages()["tuning"].clone();
        let interrupt = nodewright_schema::Interrupt {
            kind: nodewright_schema::InterruptType::Reboot,
            services: Vec::new(),
        };
        let job = build_interrupt_job(
            &nw,
            &crate::settings::Settings::default(),
            InterruptJobInput {
                package_name: "tuning",
                package: &package,
                stage: Stage::Interrupt,
                interrupt: &interrupt,
                node: "n1",
                node_order: 0,
            },
        );
        let name = job.metadata.name.clone().unwrap_or_default();
        // The package's entry is at its interrupt, not before it: the cycle goes on.
        let mut state = NodeState::default();
        state.upsert(nodewright_schema::PackageStatus::new(
            "tuning",
            "1.0.0",
            "example/tuning",
            Stage::Interrupt,
            State::InProgress,
        ));
        write(
            &mut world,
            annotate(keys::node_state("gpu"), &state.to_annotation()),
        );
        let mut ledger = InterruptLedger::default();
        write(
            &mut world,
            crate::plan::Action::CreateJob(crate::plan::NewJob::from(job.clone())),
        );
        assert_eq!(ledger.observe(&world), Vec::<String>::new());
        write(&mut world, annotate("unrelated".into(), "x"));
        assert_eq!(ledger.observe(&world), Vec::<String>::new());
        write(
            &mut world,
            crate::plan::Action::DeleteJob {
                name,
                uid: None,
                reason: "test".into(),
            },
        );
        // Deleted in the foreground: the name is free once its pod is gone.
        world.advance(std::time::Duration::from_secs(60));
        let again = world.execute(&crate::plan::Action::CreateJob(crate::plan::NewJob::from(
            job,
        )));
        assert!(matches!(again, Ok(crate::plan::Outcome::Done)), "{again:?}");
        let found = ledger.observe(&world);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("a second interrupt Job"), "{found:?}");
    }

    #[test]
    fn ceilings_and_batch_sizes_follow_the_spec() {
        let pct = |p| Budget {
            percent: Some(p),
            count: None,
        };
        assert_eq!(ceiling(&pct(25), 10), 2);
        assert_eq!(ceiling(&pct(29), 100), 28, "upstream's float truncation");
        assert_eq!(ceiling(&pct(10), 5), 1);
        assert_eq!(
            ceiling(
                &Budget {
                    percent: None,
                    count: Some(3)
                },
                10
            ),
            3
        );
        let linear = Strategy {
            linear: Some(StrategyParams::default()),
            ..Strategy::default()
        };
        let state = |last, failed| BatchState {
            current_batch: 2,
            last_batch_size: last,
            last_batch_failed: failed,
            completed_nodes: last,
            ..BatchState::default()
        };
        assert_eq!(batch_size(&linear, 10, &state(0, false)), 1);
        assert_eq!(batch_size(&linear, 10, &state(2, false)), 3);
        let exp = Strategy {
            exponential: Some(StrategyParams::default()),
            ..Strategy::default()
        };
        assert_eq!(batch_size(&exp, 100, &state(4, false)), 8);
        assert_eq!(batch_size(&exp, 100, &state(4, true)), 2);
    }
}
