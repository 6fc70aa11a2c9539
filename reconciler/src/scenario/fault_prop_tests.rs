//! Property test of the write order under faults (engine/write_order.rs): random fleets and
//! changes, random failing subsets of every plan's writes, answers arriving out of order under
//! the concurrent executor, and random crash points (the rest of the plan is lost and the
//! reconciler's memory with it). Replaying passes must converge to
//! the node states a run without faults reaches, with no extra interrupt Job, and invariant 6
//! must hold after every pass.

use std::collections::BTreeMap;

use nodewright_schema::node_state::NodeState;
use nodewright_schema::{Interrupt, InterruptType, NodeWright, Package, keys};
use proptest::prelude::*;

use super::invariants::InterruptLedger;
use crate::cluster::sim::block_on;
use crate::cluster::{ClusterError, Desired};
use crate::plan::Outcome;
use crate::settings::Settings;
use crate::sim::{ModelRunner, NodeInput, PackageModels, SimCluster};
use crate::snapshot::Memory;

#[derive(Clone, Debug)]
struct Pkg {
    interrupt: Option<InterruptType>,
    /// A configMap whose `*.conf` keys need a reboot.
    configured: bool,
}

/// What the second commit changes once the first rollout converged.
#[derive(Clone, Debug)]
enum Change {
    /// A configMap value under a `configInterrupts` reboot pattern.
    Config,
    /// A version bump of every package.
    Upgrade,
}

#[derive(Clone, Debug)]
struct Fleet {
    nodes: usize,
    budget: i32,
    packages: Vec<Pkg>,
    change: Change,
}

fn any_fleet() -> impl Strategy<Value = Fleet> {
    let pkg = (
        prop::option::of(prop::sample::select(vec![
            InterruptType::Reboot,
            InterruptType::Service,
        ])),
        any::<bool>(),
    )
        .prop_map(|(interrupt, configured)| Pkg {
            interrupt,
            configured,
        });
    (
        1..=4usize,
        1..=3i32,
        prop::collection::vec(pkg, 1..=2),
        prop_oneof![Just(Change::Config), Just(Change::Upgrade)],
    )
        .prop_map(|(nodes, budget, packages, change)| Fleet {
            nodes,
            budget,
            packages,
            change,
        })
}

/// The fate of each write, drawn in turn: most land, some fail, a few crash the pass.
#[derive(Clone, Debug)]
struct Faults {
    draws: Vec<u8>,
    /// Draws below this fail (out of 256).
    fail_below: u8,
}

fn any_faults() -> impl Strategy<Value = Faults> {
    (prop::collection::vec(any::<u8>(), 64..256), 20..110u8)
        .prop_map(|(draws, fail_below)| Faults { draws, fail_below })
}

fn nodewright(f: &Fleet, changed: bool) -> NodeWright {
    let version = if changed && matches!(f.change, Change::Upgrade) {
        "1.1.0"
    } else {
        "1.0.0"
    };
    let swappiness = if changed && matches!(f.change, Change::Config) {
        "60"
    } else {
        "10"
    };
    let packages: BTreeMap<String, Package> = f
        .packages
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut pkg = Package {
                version: version.into(),
                image: format!("example/p{i}"),
                interrupt: p.interrupt.map(|kind| Interrupt {
                    services: if kind == InterruptType::Service {
                        vec!["kubelet".into()]
                    } else {
                        Vec::new()
                    },
                    kind,
                }),
                ..Package::default()
            };
            if p.configured {
                pkg.config_map = Some(BTreeMap::from([
                    (
                        "sysctl.conf".into(),
                        format!("vm.swappiness={swappiness}\n"),
                    ),
                    ("notes.txt".into(), "v1".into()),
                ]));
                pkg.config_interrupts = Some(BTreeMap::from([(
                    "*.conf".into(),
                    Interrupt {
                        kind: InterruptType::Reboot,
                        services: Vec::new(),
                    },
                )]));
            }
            (format!("p{i}"), pkg)
        })
        .collect();
    let mut nw: NodeWright = serde_json::from_value(serde_json::json!({
        "apiVersion": "nodewright.nvidia.com/v1alpha1",
        "kind": "NodeWright",
        "metadata": {"name": "nw"},
        "spec": {
            "nodeSelectors": {"matchLabels": {"pool": "gpu"}},
            "interruptionBudget": {"count": f.budget},
        }
    }))
    .expect("a valid NodeWright");
    nw.spec.packages = Some(packages);
    nw
}

/// What a run leaves: per node, its entries (stage and state) and applied-config record, and
/// the interrupt Jobs started on it; plus invariant violations.
#[derive(Debug, PartialEq)]
struct RunResult {
    nodes: BTreeMap<String, (Vec<String>, Option<String>, usize)>,
    violations: Vec<String>,
    converged: bool,
}

fn run(f: &Fleet, faults: Option<&Faults>) -> RunResult {
    let settings = Settings::default();
    let models: String = (0..f.packages.len())
        .map(|i| format!("example/p{i}: {{default: {{duration: 2s}}, rebootTakes: 20s}}\n"))
        .collect();
    let models = PackageModels(serde_yaml::from_str(&models).expect("package models"));
    let mut world = SimCluster::new(&settings.namespace, Box::new(ModelRunner::new(models)), 11);
    for i in 0..f.nodes {
        world.add_node(NodeInput {
            name: format!("n{i}"),
            labels: BTreeMap::from([("pool".into(), "gpu".into())]),
            ..NodeInput::default()
        });
    }
    let mut ledger = InterruptLedger::default();
    let mut violations = Vec::new();
    let mut memory = Memory::default();
    let mut draw = 0usize;
    let mut converged = true;
    for changed in [false, true] {
        world.apply_desired(&Desired {
            nodewrights: vec![nodewright(f, changed)],
            policies: Vec::new(),
            commit: format!("c{}", u8::from(changed)),
            ..Default::default()
        });
        // Faults for the first 60 passes of each rollout, then clean passes until it converges.
        let mut done = false;
        for pass in 0..600 {
            let now = world.now();
            world.advance_to(now + jiff::SignedDuration::from_secs(2));
            let mut snapshot = world.snapshot(Memory::default());
            crate::controller::track_failure_targets(&mut memory, &snapshot);
            snapshot.memory = memory.clone();
            let plan = crate::engine::reconcile(&snapshot, &settings);
            let mut crashed = false;
            let faulty = faults.filter(|_| pass < 60);
            let shared = std::cell::RefCell::new(&mut world);
            block_on(crate::plan::execute(
                plan,
                crate::settings::constants::WRITES_IN_FLIGHT,
                |action| {
                    let fate = faulty.map(|fs| {
                        draw += 1;
                        fs.draws[draw % fs.draws.len()]
                    });
                    let fate = match fate {
                        _ if crashed => Fate::Lost,
                        Some(255) => {
                            crashed = true;
                            Fate::Lost
                        }
                        Some(d) if d < faulty.map_or(0, |fs| fs.fail_below) => {
                            if d % 2 == 0 {
                                Fate::Conflict
                            } else {
                                Fate::Lost
                            }
                        }
                        // Answers arrive out of order: some writes take a few polls longer.
                        Some(d) => Fate::Lands { delay: d % 4 },
                        None => Fate::Lands { delay: 0 },
                    };
                    InFlight {
                        world: &shared,
                        action: Some(action),
                        fate,
                    }
                },
                |_, _, _| {},
            ));
            if crashed {
                memory = Memory::default();
            }
            violations.extend(ledger.observe(&world));
            violations.extend(world.take_violations().into_iter().map(|v| v.message));
            violations.dedup();
            if pass >= 60 && complete(&world) {
                done = true;
                break;
            }
        }
        converged &= done;
    }
    let nodes = world
        .nodes()
        .iter()
        .map(|(name, node)| {
            let annotations = node.metadata.annotations.clone().unwrap_or_default();
            let entries = annotations
                .get(&keys::node_state("nw"))
                .and_then(|raw| NodeState::parse(raw).ok())
                .map(|s| {
                    s.0.values()
                        .map(|e| format!("{}|{} {:?} {:?}", e.name, e.version, e.stage, e.state))
                        .collect()
                })
                .unwrap_or_default();
            let record = annotations.get(&keys::config_applied("nw")).cloned();
            let interrupts = world
                .history()
                .entries()
                .iter()
                .filter(|e| {
                    e.line.starts_with("job nw/")
                        && e.line.contains("/interrupt/")
                        && e.line.ends_with(&format!("/{name}"))
                })
                .count();
            (name.clone(), (entries, record, interrupts))
        })
        .collect();
    RunResult {
        nodes,
        violations,
        converged,
    }
}

/// What becomes of one write.
#[derive(Clone, Copy)]
enum Fate {
    /// Applied after `delay` more polls.
    Lands { delay: u8 },
    /// 409 after the retries.
    Conflict,
    /// A 500 or a crash: nothing applied.
    Lost,
}

/// A write in flight against the simulated cluster, applied when its answer arrives.
struct InFlight<'w, 'a> {
    world: &'w std::cell::RefCell<&'a mut SimCluster>,
    action: Option<crate::plan::Action>,
    fate: Fate,
}

impl std::future::Future for InFlight<'_, '_> {
    type Output = (crate::plan::Action, Result<Outcome, ClusterError>);
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        if let Fate::Lands { delay } = self.fate
            && delay > 0
        {
            self.fate = Fate::Lands { delay: delay - 1 };
            cx.waker().wake_by_ref();
            return std::task::Poll::Pending;
        }
        // Polled once more after it was ready is a bug of the executor.
        let action = self.action.take().expect("a write is answered once");
        let result = match self.fate {
            Fate::Lands { .. } => self.world.borrow_mut().execute(&action),
            Fate::Conflict => Ok(Outcome::Conflict),
            Fate::Lost => Err(lost()),
        };
        std::task::Poll::Ready((action, result))
    }
}

fn lost() -> ClusterError {
    ClusterError::Api {
        action: "write".into(),
        status: 500,
        message: "injected".into(),
    }
}

fn complete(world: &SimCluster) -> bool {
    world
        .nodewrights()
        .get("nw")
        .is_some_and(NodeWright::is_converged)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]

    #[test]
    fn failed_writes_and_crashes_converge_with_no_extra_interrupt(f in any_fleet(), faults in any_faults()) {
        let clean = run(&f, None);
        prop_assert!(clean.converged, "the fleet converges without faults: {f:?}");
        prop_assert!(clean.violations.is_empty(), "{:?}", clean.violations);
        let faulty = run(&f, Some(&faults));
        prop_assert!(faulty.violations.is_empty(), "{:?}", faulty.violations);
        prop_assert!(faulty.converged, "the fleet converges after the faults end: {f:?}");
        prop_assert_eq!(faulty.nodes, clean.nodes);
    }
}
