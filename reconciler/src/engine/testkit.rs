//! A small builder DSL for engine tests: nodes, NodeWrights, policies, Jobs and pods, and a
//! snapshot to run a pass over. Shared by both halves of the engine.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::job::Job;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, NodeSystemInfo, Pod, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use nodewright_schema::keys;
use nodewright_schema::{
    Budget, Compartment, DeploymentPolicy, DeploymentPolicySpec, Interrupt, InterruptType,
    InterruptionBudget, NodeState, NodeWright, NodeWrightSpec, NodeWrightStatus, Package,
    PackageStatus, Sequencing, Stage, State, Status, Strategy, StrategyParams, Uninstall,
};

use crate::settings::Settings;
use crate::snapshot::Snapshot;

/// The pass time used by tests: 2026-01-01T00:00:00Z.
pub fn t0() -> Timestamp {
    Timestamp::from_second(1_767_225_600).expect("valid time")
}

/// A node under construction.
#[derive(Clone)]
pub struct NodeB(pub Node);

/// A node named `name`, created `created` seconds after the epoch (for node order).
pub fn node(name: &str) -> NodeB {
    NodeB(Node {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            creation_timestamp: Some(Time(Timestamp::UNIX_EPOCH)),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec::default()),
        status: Some(NodeStatus::default()),
    })
}

impl NodeB {
    /// Creation time in seconds since the epoch.
    pub fn created(mut self, secs: i64) -> Self {
        self.0.metadata.creation_timestamp =
            Some(Time(Timestamp::from_second(secs).expect("valid time")));
        self
    }
    /// Adds a label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.0
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(k.into(), v.into());
        self
    }
    /// Adds an annotation.
    pub fn annotation(mut self, k: &str, v: &str) -> Self {
        self.0
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(k.into(), v.into());
        self
    }
    /// Adds a taint.
    pub fn taint(mut self, key: &str, value: &str, effect: &str) -> Self {
        let spec = self.0.spec.get_or_insert_with(NodeSpec::default);
        spec.taints.get_or_insert_with(Vec::new).push(Taint {
            key: key.into(),
            value: (!value.is_empty()).then(|| value.to_string()),
            effect: effect.into(),
            time_added: None,
        });
        self
    }
    /// Sets `spec.unschedulable`.
    pub fn unschedulable(mut self) -> Self {
        self.0
            .spec
            .get_or_insert_with(NodeSpec::default)
            .unschedulable = Some(true);
        self
    }
    /// Sets `status.nodeInfo.bootID`.
    pub fn boot(mut self, id: &str) -> Self {
        let status = self.0.status.get_or_insert_with(NodeStatus::default);
        status
            .node_info
            .get_or_insert_with(NodeSystemInfo::default)
            .boot_id = id.into();
        self
    }
    /// Writes the node-state annotation of `nw` from `(pkg, version, stage, state)` entries.
    pub fn state(self, nw: &str, entries: &[(&str, &str, Stage, State)]) -> Self {
        let mut s = NodeState::default();
        for (p, v, stage, st) in entries {
            s.upsert(PackageStatus::new(
                p,
                v,
                &format!("example/{p}"),
                *stage,
                *st,
            ));
        }
        self.annotation(&keys::node_state(nw), &s.to_annotation())
    }
    /// Writes the node Status of `nw` (annotation and label).
    pub fn status(self, nw: &str, status: Status) -> Self {
        self.annotation(&keys::status(nw), status.as_str())
            .label(&keys::status(nw), status.as_str())
    }
    /// The node.
    pub fn build(self) -> Node {
        self.0
    }
}

/// A NodeWright under construction.
#[derive(Clone)]
pub struct NwB(pub NodeWright);

/// A NodeWright named `name` (priority 200, no packages, selects every node).
pub fn nw(name: &str) -> NwB {
    let mut obj = NodeWright::new(
        name,
        NodeWrightSpec {
            priority: 200,
            ..NodeWrightSpec::default()
        },
    );
    obj.metadata.generation = Some(1);
    NwB(obj)
}

/// A package `version` of image `example/<name>`.
pub fn package(name: &str, version: &str) -> Package {
    Package {
        version: version.into(),
        image: format!("example/{name}"),
        ..Package::default()
    }
}

impl NwB {
    /// Adds a package (no interrupt).
    pub fn package(self, name: &str, version: &str) -> Self {
        self.with_package(name, package(name, version))
    }
    /// Adds a package with a reboot interrupt.
    pub fn reboot_package(self, name: &str, version: &str) -> Self {
        let mut p = package(name, version);
        p.interrupt = Some(Interrupt {
            kind: InterruptType::Reboot,
            services: vec![],
        });
        self.with_package(name, p)
    }
    /// Adds a package with `uninstall: {enabled, apply}`.
    pub fn uninstall_package(self, name: &str, version: &str, apply: bool) -> Self {
        let mut p = package(name, version);
        p.uninstall = Some(Uninstall {
            enabled: true,
            apply,
        });
        self.with_package(name, p)
    }
    /// Adds a fully specified package.
    pub fn with_package(mut self, name: &str, p: Package) -> Self {
        self.0
            .spec
            .packages
            .get_or_insert_with(BTreeMap::new)
            .insert(name.into(), p);
        self
    }
    /// `spec.priority`.
    pub fn priority(mut self, p: i32) -> Self {
        self.0.spec.priority = p;
        self
    }
    /// `sequencing: all`.
    pub fn sequencing_all(mut self) -> Self {
        self.0.spec.sequencing = Sequencing::All;
        self
    }
    /// `nodeSelectors.matchLabels`.
    pub fn selects(mut self, k: &str, v: &str) -> Self {
        self.0
            .spec
            .node_selectors
            .get_or_insert_with(LabelSelector::default)
            .match_labels
            .get_or_insert_with(BTreeMap::new)
            .insert(k.into(), v.into());
        self
    }
    /// `interruptionBudget.count`.
    pub fn budget_count(mut self, c: i32) -> Self {
        self.0.spec.interruption_budget = Some(InterruptionBudget {
            percent: None,
            count: Some(c),
        });
        self
    }
    /// `interruptionBudget.percent`.
    pub fn budget_percent(mut self, p: i32) -> Self {
        self.0.spec.interruption_budget = Some(InterruptionBudget {
            percent: Some(p),
            count: None,
        });
        self
    }
    /// `deploymentPolicy`.
    pub fn policy(mut self, name: &str) -> Self {
        self.0.spec.deployment_policy = Some(name.into());
        self
    }
    /// `runtimeRequired: true` (and `autoTaintNewNodes` when `auto_taint`).
    pub fn runtime_required(mut self, auto_taint: bool) -> Self {
        self.0.spec.runtime_required = true;
        self.0.spec.auto_taint_new_nodes = auto_taint;
        self
    }
    /// Sets an annotation on the NodeWright (pause/disable).
    pub fn annotation(mut self, k: &str, v: &str) -> Self {
        self.0
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(k.into(), v.into());
        self
    }
    /// `pause: "true"`.
    pub fn paused(self) -> Self {
        self.annotation(keys::PAUSE, "true")
    }
    /// `disable: "true"`.
    pub fn disabled(self) -> Self {
        self.annotation(keys::DISABLE, "true")
    }
    /// Replaces the status.
    pub fn status(mut self, status: NodeWrightStatus) -> Self {
        self.0.status = Some(status);
        self
    }
    /// Edits the status.
    pub fn with_status(mut self, f: impl FnOnce(&mut NodeWrightStatus)) -> Self {
        f(self.0.status.get_or_insert_with(NodeWrightStatus::default));
        self
    }
    /// The NodeWright.
    pub fn build(self) -> NodeWright {
        self.0
    }
}

/// Strategy parameters helper.
pub fn params(initial: i32, threshold: i32, failure: Option<i32>, safety: i32) -> StrategyParams {
    StrategyParams {
        initial_batch: Some(initial),
        batch_threshold: Some(threshold),
        failure_threshold: failure,
        safety_limit: Some(safety),
        ..StrategyParams::default()
    }
}

/// A fixed strategy.
pub fn fixed(p: StrategyParams) -> Strategy {
    Strategy {
        fixed: Some(p),
        ..Strategy::default()
    }
}
/// A linear strategy.
pub fn linear(p: StrategyParams) -> Strategy {
    Strategy {
        linear: Some(p),
        ..Strategy::default()
    }
}
/// An exponential strategy.
pub fn exponential(p: StrategyParams) -> Strategy {
    Strategy {
        exponential: Some(p),
        ..Strategy::default()
    }
}
/// A count budget.
pub fn count(c: i32) -> Budget {
    Budget {
        percent: None,
        count: Some(c),
    }
}
/// A percent budget.
pub fn percent(p: i32) -> Budget {
    Budget {
        percent: Some(p),
        count: None,
    }
}

/// A compartment: name, selecting label `k=v`, budget, optional strategy.
pub type CompartmentSpec<'a> = (&'a str, (&'a str, &'a str), Budget, Option<Strategy>);

/// A policy with a default budget/strategy and compartments `(name, label k=v, budget,
/// strategy)`.
pub fn policy(
    name: &str,
    budget: Budget,
    strategy: Strategy,
    compartments: Vec<CompartmentSpec<'_>>,
) -> DeploymentPolicy {
    let mut p = DeploymentPolicy::new(
        name,
        DeploymentPolicySpec {
            reset_batch_state_on_completion: Some(true),
            default: nodewright_schema::policy::PolicyDefault { budget, strategy },
            compartments: compartments
                .into_iter()
                .map(|(n, (k, v), budget, strategy)| Compartment {
                    name: n.into(),
                    selector: LabelSelector {
                        match_labels: Some([(k.to_string(), v.to_string())].into()),
                        match_expressions: None,
                    },
                    budget,
                    strategy,
                })
                .collect(),
        },
    );
    p.metadata.generation = Some(1);
    p
}

/// A snapshot under construction.
#[derive(Clone, Default)]
pub struct World(pub Snapshot);

/// An empty world at [`t0`].
pub fn world() -> World {
    World(Snapshot {
        now: t0(),
        ..Snapshot::default()
    })
}

impl World {
    /// Adds a node.
    pub fn node(mut self, n: NodeB) -> Self {
        self.0.nodes.push(Arc::new(n.build()));
        self
    }
    /// Adds `count` nodes `n0..` created one second apart, with an optional label.
    pub fn nodes(mut self, count: usize, label: Option<(&str, &str)>) -> Self {
        for i in 0..count {
            let mut b = node(&format!("n{i:02}")).created(i as i64);
            if let Some((k, v)) = label {
                b = b.label(k, v);
            }
            self.0.nodes.push(Arc::new(b.build()));
        }
        self
    }
    /// Adds a NodeWright.
    pub fn nw(mut self, b: NwB) -> Self {
        self.0.nodewrights.push(Arc::new(b.build()));
        self
    }
    /// Adds a policy.
    pub fn policy(mut self, p: DeploymentPolicy) -> Self {
        self.0.policies.push(p);
        self
    }
    /// Adds a Job.
    pub fn job(mut self, j: Job) -> Self {
        self.0.jobs.push(Arc::new(j));
        self
    }
    /// Adds a pod.
    pub fn pod(mut self, p: Pod) -> Self {
        self.0.pods.push(Arc::new(p));
        self
    }
    /// Sets the pass time.
    pub fn at(mut self, now: Timestamp) -> Self {
        self.0.now = now;
        self
    }
    /// The snapshot.
    pub fn build(self) -> Snapshot {
        self.0
    }
}

/// Default settings.
pub fn settings() -> Settings {
    Settings::default()
}

/// Applies a plan's node and status writes to a snapshot, the way a cluster would (enough
/// for multi-pass engine tests; Jobs are not simulated).
pub fn apply(snap: &mut Snapshot, plan: &crate::plan::Plan) {
    use crate::plan::{Action, NodeStateDelta};
    for a in &plan.actions {
        match a {
            Action::PatchNode(p) => {
                let Some(n) = snap
                    .nodes
                    .iter_mut()
                    .find(|n| n.metadata.name.as_deref() == Some(&p.node))
                else {
                    continue;
                };
                let n = Arc::make_mut(n);
                let ann = n.metadata.annotations.get_or_insert_with(BTreeMap::new);
                for (k, v) in &p.annotations {
                    match v {
                        Some(v) => ann.insert(k.clone(), v.clone()),
                        None => ann.remove(k),
                    };
                }
                for d in &p.node_state {
                    match d {
                        NodeStateDelta::Delete { nodewright } => {
                            ann.remove(&keys::node_state(nodewright));
                        }
                        NodeStateDelta::Entries {
                            nodewright,
                            upsert,
                            remove,
                        } => {
                            let key = keys::node_state(nodewright);
                            let mut s = ann
                                .get(&key)
                                .and_then(|r| NodeState::parse(r).ok())
                                .unwrap_or_default();
                            for r in remove {
                                s.0.remove(r);
                            }
                            for (k, v) in upsert {
                                s.0.insert(k.clone(), v.clone());
                            }
                            ann.insert(key, s.to_annotation());
                        }
                    }
                }
                let labels = n.metadata.labels.get_or_insert_with(BTreeMap::new);
                for (k, v) in &p.labels {
                    match v {
                        Some(v) => labels.insert(k.clone(), v.clone()),
                        None => labels.remove(k),
                    };
                }
                let spec = n.spec.get_or_insert_with(NodeSpec::default);
                let taints = spec.taints.get_or_insert_with(Vec::new);
                taints.retain(|t| !p.remove_taints.contains(&t.key));
                for t in &p.add_taints {
                    taints.retain(|x| !(x.key == t.key && x.effect == t.effect));
                    taints.push(t.clone());
                }
                if let Some(u) = p.unschedulable {
                    spec.unschedulable = Some(u);
                }
            }
            Action::PatchNodeWrightStatus { name, patch } => {
                if let Some(nw) = snap
                    .nodewrights
                    .iter_mut()
                    .find(|n| n.metadata.name.as_deref() == Some(name))
                {
                    patch.apply(
                        Arc::make_mut(nw)
                            .status
                            .get_or_insert_with(Default::default),
                    );
                }
            }
            Action::PatchNodeConditions { node, set, remove } => {
                let Some(n) = snap
                    .nodes
                    .iter_mut()
                    .find(|n| n.metadata.name.as_deref() == Some(node))
                else {
                    continue;
                };
                let n = Arc::make_mut(n);
                let list = n
                    .status
                    .get_or_insert_with(NodeStatus::default)
                    .conditions
                    .get_or_insert_with(Vec::new);
                list.retain(|c| !remove.contains(&c.type_));
                for c in set {
                    match list.iter_mut().find(|x| x.type_ == c.type_) {
                        Some(x) => *x = c.clone(),
                        None => list.insert(0, c.clone()),
                    }
                }
            }
            _ => {}
        }
    }
}

/// Test stand-in for the per-node work (`node_work::work_node`): every incomplete spec
/// package gets `(config, in_progress)` and the node reads `in_progress`.
pub fn fake_work(
    ctx: &mut super::context::PassCtx<'_>,
    nw: usize,
    node: usize,
) -> super::context::NodeWorkResult {
    let name = ctx.nws[nw].state_key();
    let pkgs: Vec<(String, Package)> = ctx.nws[nw]
        .nw
        .spec
        .packages()
        .iter()
        .map(|(n, p)| (n.clone(), p.clone()))
        .collect();
    let mut dispatched = 0;
    for (pname, p) in pkgs {
        let done = ctx
            .node(node)
            .state(name)
            .ok()
            .and_then(|s| s.get(&pname, &p.version).cloned())
            .is_some_and(|e| {
                e.state == Some(State::Complete) || e.state == Some(State::InProgress)
            });
        if !done {
            let e = PackageStatus::new(
                &pname,
                &p.version,
                &p.image,
                Stage::Config,
                State::InProgress,
            );
            if ctx.node_mut(node).set_entry(name, e).is_ok() {
                dispatched += 1;
            }
        }
    }
    if dispatched > 0 {
        ctx.set_node_status(nw, node, Status::InProgress);
    }
    super::context::NodeWorkResult { requeue: true }
}

/// Completes (or fails) every in-progress entry of a NodeWright on the nodes `pick` selects,
/// as the Job handler would after the Jobs finished.
pub fn finish_jobs(snap: &mut Snapshot, nw: &str, fail: impl Fn(&str) -> bool) {
    let key = keys::node_state(nw);
    for n in &mut snap.nodes {
        let n = Arc::make_mut(n);
        let name = n.metadata.name.clone().unwrap_or_default();
        let Some(ann) = n.metadata.annotations.as_mut() else {
            continue;
        };
        let Some(mut s) = ann.get(&key).and_then(|r| NodeState::parse(r).ok()) else {
            continue;
        };
        let failing = fail(&name);
        let mut any = false;
        for (_, e) in s.0.iter_mut() {
            if e.state == Some(State::InProgress) {
                e.state = Some(if failing {
                    State::Erroring
                } else {
                    State::Complete
                });
                any = true;
            }
        }
        ann.insert(key.clone(), s.to_annotation());
        if any && failing {
            ann.insert(keys::status(nw), Status::Erroring.as_str().into());
        }
    }
}

/// Node names whose `status_<nw>` annotation reads `status`.
pub fn nodes_reading(snap: &Snapshot, nw: &str, status: Status) -> Vec<String> {
    snap.nodes
        .iter()
        .filter(|n| {
            Status::from_annotation(
                n.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(&keys::status(nw)))
                    .map(String::as_str),
            ) == status
        })
        .filter_map(|n| n.metadata.name.clone())
        .collect()
}

/// The NodeWright's published status.
pub fn nw_status<'a>(snap: &'a Snapshot, nw: &str) -> &'a NodeWrightStatus {
    static EMPTY: std::sync::OnceLock<NodeWrightStatus> = std::sync::OnceLock::new();
    snap.nodewrights
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(nw))
        .and_then(|n| n.status.as_ref())
        .unwrap_or_else(|| EMPTY.get_or_init(NodeWrightStatus::default))
}
