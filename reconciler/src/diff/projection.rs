//! The projected rollout of a change (`diff --simulate`, `simulate --repo --rev`): the real
//! engine drives a simulated fleet through the base state and then the head state, and the
//! simulator's history becomes a timeline — batches per NodeWright, interrupts, reboots and the
//! estimated duration — rendered as text, a Mermaid gantt for pull requests, and JSON.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use nodewright_schema::duration::format_go_duration;
use nodewright_schema::{Status, keys};
use serde_json::json;

use super::classify::{RolloutSimulator, SimulatedTimeline};
use crate::cli::fleet::Fleet;
use crate::cluster::Desired;
use crate::cluster::sim::SimAdapter;
use crate::controller::Controller;
use crate::settings::Settings;
use crate::sim::util::since;
use crate::text::{mermaid_label, terminal};

/// Projects rollouts on a simulated fleet.
pub struct FleetProjection {
    /// The fleet.
    pub fleet: Fleet,
    /// Operator settings.
    pub settings: Settings,
    /// Give up after this much virtual time per phase.
    pub limit: Duration,
    /// Most package × node pairs each rollout may run in all (`--max-simulated-pairs`).
    pub max_pairs: usize,
    /// Most package × node pairs each rollout's budgets may let run at once
    /// (`--max-simulated-pairs-at-once`).
    pub max_pairs_at_once: usize,
}

/// How many package × node pairs each rollout of a projection (base, then head) may run by
/// default. The projection's time follows them (about 1–2 ms each), and so does what it keeps
/// of a finished pair (its entry in the node's state, a few kilobytes); a change beyond it is
/// diffed, not projected.
pub const DEFAULT_MAX_PAIRS: usize = 20_000;

/// How many package × node pairs the budgets of each rollout may let run at once by default.
/// A running pair is a Job and its pod, about 100 KB in the simulated world, and packages
/// without an order all run together on a node, so this bounds the projection's memory.
pub const DEFAULT_MAX_PAIRS_AT_ONCE: usize = 2_000;

/// What rolling out one NodeWright runs on a fleet.
#[derive(Debug, Default)]
struct Work {
    nodewright: String,
    packages: usize,
    /// The nodes its selector picks.
    nodes: usize,
    /// The most of them its budget or policy lets be worked on at once.
    at_once: usize,
}

impl Work {
    fn pairs(&self) -> usize {
        self.packages * self.nodes
    }

    fn pairs_at_once(&self) -> usize {
        self.packages * self.at_once
    }
}

/// What rolling out `desired` runs on the nodes with these labels, per NodeWright.
fn work<'a>(
    desired: &Desired,
    nodes: impl Iterator<Item = &'a BTreeMap<String, String>> + Clone,
) -> Vec<Work> {
    desired
        .nodewrights
        .iter()
        .map(|nw| {
            let selector = nw.spec.node_selectors.as_ref();
            let selected: Vec<&BTreeMap<String, String>> = nodes
                .clone()
                .filter(|labels| nodewright_schema::selector::matches(selector, labels))
                .collect();
            Work {
                nodewright: nw.name().to_string(),
                packages: nw.spec.packages().len(),
                nodes: selected.len(),
                at_once: nodes_at_once(nw, desired, &selected),
            }
        })
        .collect()
}

/// The most of its `selected` nodes a NodeWright's budget lets be worked on at once (§5.7): the
/// legacy batch without a policy; with one, each compartment's ceiling when it has no strategy
/// and all its nodes when it has one (a strategy's batches may grow to them).
fn nodes_at_once(
    nw: &nodewright_schema::NodeWright,
    desired: &Desired,
    selected: &[&BTreeMap<String, String>],
) -> usize {
    use crate::engine::policy;
    let count = i32::try_from(selected.len()).unwrap_or(i32::MAX);
    let at_once: i64 = match policy::policy_of(&desired.policies, nw) {
        (None, false) => policy::legacy_default(nw, count)
            .strategy
            .map_or(i64::from(count), |(_, params)| {
                i64::from(params.initial_batch())
            }),
        // A missing policy holds the rollout (§2.9); counted as all nodes, the bound holds
        // whatever the policy turns out to be.
        (None, true) => i64::from(count),
        (Some(p), _) => {
            let defs = policy::compartments(nw, Some(p), false, count);
            defs.iter()
                .map(|def| {
                    let matched = compartment_nodes(def, &defs, selected);
                    let ceiling = policy::ceiling(def.budget, matched);
                    i64::from(match def.strategy {
                        None if ceiling > 0 => ceiling.min(matched),
                        _ => matched,
                    })
                })
                .sum()
        }
    };
    usize::try_from(at_once.clamp(0, i64::from(count))).unwrap_or(selected.len())
}

/// How many of the `selected` nodes compartment `def` may take: those its selector matches,
/// and for the default compartment those no other compartment selects. A node several
/// compartments match counts in each, which keeps [`nodes_at_once`] an upper bound.
fn compartment_nodes(
    def: &crate::engine::policy::CompartmentDef,
    defs: &[crate::engine::policy::CompartmentDef],
    selected: &[&BTreeMap<String, String>],
) -> i32 {
    let selects = |d: &crate::engine::policy::CompartmentDef, labels: &BTreeMap<String, String>| {
        d.selector
            .as_ref()
            .is_some_and(|s| nodewright_schema::selector::matches(Some(s), labels))
    };
    let taken = selected
        .iter()
        .filter(|labels| match &def.selector {
            Some(_) => selects(def, labels),
            None => !defs.iter().any(|other| selects(other, labels)),
        })
        .count();
    i32::try_from(taken).unwrap_or(i32::MAX)
}

/// How driving the fleet towards one desired state ended.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    /// Every NodeWright complete.
    Converged,
    /// Every NodeWright not complete waits, with no node in progress, for an approval in Git
    /// (docs/approvals.md): the `AwaitingApproval` messages, per NodeWright.
    AwaitsApproval(Vec<(String, String)>),
    /// The limit of simulated time passed first.
    TimedOut,
}

/// The NodeWrights that hold the rollout for an approval, when nothing else moves: every
/// NodeWright is complete or waits for an approval with no node in progress.
fn awaiting_approval<'a>(
    nodewrights: impl IntoIterator<Item = &'a nodewright_schema::NodeWright>,
) -> Option<Vec<(String, String)>> {
    let mut waiting = Vec::new();
    for nw in nodewrights {
        let status = nw.status.as_ref();
        if status.and_then(|s| s.status) == Some(Status::Complete) {
            continue;
        }
        let awaiting = status.and_then(|s| s.conditions.as_ref()).and_then(|cs| {
            cs.iter()
                .find(|c| c.type_ == keys::condition::AWAITING_APPROVAL && c.status == "True")
        })?;
        if status.and_then(|s| s.nodes_in_progress).unwrap_or(0) > 0 {
            return None;
        }
        waiting.push((nw.name().to_string(), awaiting.message.clone()));
    }
    (!waiting.is_empty()).then_some(waiting)
}

/// One batch: nodes whose work started together.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Batch {
    start: Duration,
    end: Duration,
    nodes: Vec<String>,
    interrupts: usize,
    reboots: usize,
}

impl FleetProjection {
    /// How much simulated time a projection of `desired` may take: a day, or eight when
    /// maintenance windows may hold the rollout for up to a week.
    pub fn limit_for(desired: &Desired) -> Duration {
        let windows = |a: Option<&BTreeMap<String, String>>| {
            a.is_some_and(|a| a.contains_key(keys::MAINTENANCE_WINDOWS))
        };
        let any = desired
            .nodewrights
            .iter()
            .any(|nw| windows(nw.metadata.annotations.as_ref()))
            || desired
                .policies
                .iter()
                .any(|p| windows(p.metadata.annotations.as_ref()));
        Duration::from_secs(if any { 8 } else { 1 } * 24 * 3600)
    }

    /// A fleet of `count` nodes carrying every label the NodeWrights' `matchLabels` ask for,
    /// so each NodeWright selects them all.
    pub fn matching_nodes(count: usize, desired: &Desired) -> Fleet {
        let mut labels = BTreeMap::new();
        for nw in &desired.nodewrights {
            if let Some(m) = nw
                .spec
                .node_selectors
                .as_ref()
                .and_then(|s| s.match_labels.as_ref())
            {
                labels.extend(m.clone());
            }
        }
        let labels: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k:?}: {v:?}"))
            .collect();
        let yaml = format!(
            "cluster:\n  nodes:\n    - generate: {{count: {count}, namePrefix: node-, labels: {{{}}}}}\n",
            labels.join(", ")
        );
        Fleet::parse(&yaml).unwrap_or_else(|_| Fleet::plain(count))
    }

    /// Rolls `desired` out until it converges or the limit passes, handing the history each
    /// pass wrote to `activity` and forgetting it (and the Events) in the world, so a long
    /// rollout keeps a summary, not a log.
    fn drive(
        &self,
        runtime: &tokio::runtime::Runtime,
        controller: &mut Controller<SimAdapter>,
        desired: &Desired,
        mut activity: Option<&mut Activity>,
    ) -> Result<Phase, String> {
        runtime.block_on(async {
            controller
                .apply_desired(desired)
                .await
                .map_err(|e| e.to_string())?;
            let start = controller.cluster().world().now();
            if let Some(activity) = activity.as_deref_mut() {
                activity.started = Some(start);
            }
            loop {
                let report = controller.pass().await.map_err(|e| e.to_string())?;
                // Read from the world itself: a snapshot would copy every changed Job and pod
                // only to look at the NodeWrights' status.
                let mut world = controller.cluster().world();
                let history = world.take_history();
                world.take_events();
                if let Some(activity) = activity.as_deref_mut() {
                    for entry in history {
                        activity.record(since(start, entry.at), &entry.line);
                    }
                }
                let converged = world
                    .nodewrights()
                    .values()
                    .all(|nw| nw.status.as_ref().and_then(|s| s.status) == Some(Status::Complete));
                let waiting = awaiting_approval(world.nodewrights().values());
                drop(world);
                if converged && !report.wrote() {
                    return Ok(Phase::Converged);
                }
                if !report.wrote()
                    && let Some(waiting) = waiting
                {
                    return Ok(Phase::AwaitsApproval(waiting));
                }
                let now = controller.cluster().world().now();
                if since(start, now) >= self.limit {
                    return Ok(Phase::TimedOut);
                }
                let delay = controller.delay_after(&report);
                controller.cluster().world().advance(delay);
            }
        })
    }
}

impl RolloutSimulator for FleetProjection {
    fn simulate(&self, base: &Desired, head: &Desired) -> Result<SimulatedTimeline, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .map_err(|e| format!("cannot start the simulator runtime: {e}"))?;
        let world = self.fleet.build(&self.settings.namespace, 7)?;
        let empty = std::collections::BTreeMap::new();
        let labels = world
            .nodes()
            .values()
            .map(|n| n.metadata.labels.as_ref().unwrap_or(&empty));
        for (phase, desired) in [("base", base), ("head", head)] {
            let work = work(desired, labels.clone());
            let total: usize = work.iter().map(Work::pairs).sum();
            if total > self.max_pairs {
                let most = work.iter().max_by_key(|w| w.pairs());
                let most = most.map_or_else(String::new, |w| {
                    format!(
                        " (most for NodeWright {}: {} packages × {} node(s))",
                        terminal(&w.nodewright),
                        w.packages,
                        w.nodes
                    )
                });
                return Err(format!(
                    "too large to project: the {phase} rollout runs {total} package × node pairs{most}, more than --max-simulated-pairs ({}); the diff itself is complete, and a larger limit projects it",
                    self.max_pairs
                ));
            }
            let at_once: usize = work.iter().map(Work::pairs_at_once).sum();
            if at_once > self.max_pairs_at_once {
                let most = work.iter().max_by_key(|w| w.pairs_at_once());
                let most = most.map_or_else(String::new, |w| {
                    format!(
                        " (most for NodeWright {}: {} packages × {} of its {} node(s) at once)",
                        terminal(&w.nodewright),
                        w.packages,
                        w.at_once,
                        w.nodes
                    )
                });
                return Err(format!(
                    "too large to project: the {phase} rollout's budgets let {at_once} package × node pairs run at once{most}, more than --max-simulated-pairs-at-once ({}); the diff itself is complete, and a smaller interruption budget or a larger limit projects it",
                    self.max_pairs_at_once
                ));
            }
        }
        // A finished Job's outcome is on its node once the Job is marked; a projection keeps
        // no finished Job past that, so its memory follows the Jobs running, not every Job of
        // the rollout (in a cluster the TTL controller removes them later, which changes
        // nothing the timeline shows).
        let mut settings = self.settings.clone();
        settings.job_ttl_succeeded = nodewright_schema::duration::GoDuration::new("0s");
        let mut controller = Controller::new(
            SimAdapter::new(world),
            crate::engine::reconcile_cached,
            settings,
        );
        // A base rollout held for an approval is where the cluster stands: the head starts there.
        if !base.nodewrights.is_empty()
            && self.drive(&runtime, &mut controller, base, None)? == Phase::TimedOut
        {
            return Err(format!(
                "the base state did not converge within {} of simulated time",
                format_go_duration(self.limit)
            ));
        }
        let mut activity = Activity::default();
        let phase = self.drive(&runtime, &mut controller, head, Some(&mut activity))?;
        let world = controller.cluster().world();
        let total = activity
            .started
            .map_or(Duration::ZERO, |t0| since(t0, world.now()));
        Ok(render(
            &activity.batches(),
            total,
            &phase,
            world.nodes().len(),
        ))
    }
}

/// What a projection keeps of the simulator's history: per NodeWright and node the first and
/// last activity and the interrupt Jobs started, and the reboot times per node. It grows with
/// the nodes worked on, not with the packages or the lines of history.
#[derive(Debug, Default)]
struct Activity {
    /// When the head state was applied.
    started: Option<Timestamp>,
    spans: BTreeMap<(String, String), (Duration, Duration, usize)>,
    reboots: BTreeMap<String, Vec<Duration>>,
}

impl Activity {
    /// Takes one history line written `at` after the head state was applied.
    fn record(&mut self, at: Duration, line: &str) {
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some(kind @ ("job" | "job-ok" | "job-fail")), Some(address)) => {
                let parts: Vec<&str> = address.split('/').collect();
                if let [nw, _pkg, stage, node] = parts[..] {
                    let span = self
                        .spans
                        .entry((nw.to_string(), node.to_string()))
                        .or_insert((at, at, 0));
                    span.1 = span.1.max(at);
                    if kind == "job" && (stage == "interrupt" || stage == "uninstall-interrupt") {
                        span.2 += 1;
                    }
                }
            }
            (Some("reboot"), Some(node)) => {
                self.reboots.entry(node.to_string()).or_default().push(at);
            }
            _ => {}
        }
    }

    /// Batches per NodeWright: nodes whose work started together.
    fn batches(self) -> BTreeMap<String, Vec<Batch>> {
        let mut out: BTreeMap<String, Vec<Batch>> = BTreeMap::new();
        for ((nw, node), (start, end, interrupts)) in self.spans {
            let batches = out.entry(nw).or_default();
            // A reboot belongs to the NodeWright whose work on the node spans it.
            let reboots_here = self
                .reboots
                .get(&node)
                .map(|times| times.iter().filter(|t| **t >= start && **t <= end).count())
                .unwrap_or(0);
            match batches.iter_mut().find(|b| b.start == start) {
                Some(b) => {
                    b.end = b.end.max(end);
                    b.nodes.push(node);
                    b.interrupts += interrupts;
                    b.reboots += reboots_here;
                }
                None => batches.push(Batch {
                    start,
                    end,
                    nodes: vec![node],
                    interrupts,
                    reboots: reboots_here,
                }),
            }
        }
        for batches in out.values_mut() {
            batches.sort_by_key(|b| b.start);
        }
        out
    }
}

fn short(d: Duration) -> String {
    format_go_duration(Duration::from_secs(d.as_secs()))
}

fn render(
    timeline: &BTreeMap<String, Vec<Batch>>,
    total: Duration,
    phase: &Phase,
    fleet_size: usize,
) -> SimulatedTimeline {
    let verdict = match phase {
        Phase::Converged => format!(
            "converges in about {} on a simulated fleet of {fleet_size} nodes",
            short(total)
        ),
        Phase::AwaitsApproval(_) => format!(
            "waits for approval after about {} on a simulated fleet of {fleet_size} nodes",
            short(total)
        ),
        Phase::TimedOut => format!(
            "does not converge within {} on a simulated fleet of {fleet_size} nodes",
            short(total)
        ),
    };
    let waiting: &[(String, String)] = match phase {
        Phase::AwaitsApproval(waiting) => waiting,
        _ => &[],
    };
    let mut text = format!("The change {verdict}.\n");
    for (nw, message) in waiting {
        text.push_str(&format!("{nw} waits at +{}: {message}\n", short(total)));
    }
    let mut markdown = format!(
        "The change **{verdict}** (package durations from the fleet description; unknown images take 2 s per step).\n\n```mermaid\ngantt\n    dateFormat X\n    axisFormat %H:%M:%S\n"
    );
    let mut json_nws = Vec::new();
    if timeline.is_empty() {
        text.push_str("No node is worked on.\n");
    }
    for (nw, batches) in timeline {
        let nodes: usize = batches.iter().map(|b| b.nodes.len()).sum();
        let interrupts: usize = batches.iter().map(|b| b.interrupts).sum();
        let reboots: usize = batches.iter().map(|b| b.reboots).sum();
        text.push_str(&format!(
            "{}: {nodes} node(s) in {} batch(es), {interrupts} interrupt Job(s), {reboots} reboot(s)\n",
            terminal(nw),
            batches.len()
        ));
        markdown.push_str(&format!("    section {}\n", mermaid_label(nw)));
        let mut json_batches = Vec::new();
        for (i, b) in batches.iter().enumerate() {
            let names = if b.nodes.len() > 6 {
                format!(
                    "{} … {} ({} nodes)",
                    b.nodes[0],
                    b.nodes[b.nodes.len() - 1],
                    b.nodes.len()
                )
            } else {
                b.nodes.join(", ")
            };
            text.push_str(&format!(
                "  batch {:>2}  +{:<8} → +{:<8}  {}\n",
                i + 1,
                short(b.start),
                short(b.end),
                terminal(&names)
            ));
            let end = b.end.as_secs().max(b.start.as_secs() + 1);
            markdown.push_str(&format!(
                "    batch {} · {} node(s){} : {}, {}\n",
                i + 1,
                b.nodes.len(),
                if b.reboots > 0 {
                    format!(" · {} reboot(s)", b.reboots)
                } else {
                    String::new()
                },
                b.start.as_secs(),
                end
            ));
            json_batches.push(json!({
                "startSeconds": b.start.as_secs(),
                "endSeconds": b.end.as_secs(),
                "nodes": b.nodes,
                "interrupts": b.interrupts,
                "reboots": b.reboots,
            }));
        }
        json_nws.push(json!({
            "name": nw,
            "nodes": nodes,
            "interrupts": interrupts,
            "reboots": reboots,
            "batches": json_batches,
        }));
    }
    markdown.push_str("```\n");
    if !waiting.is_empty() {
        markdown.push_str(&format!(
            "\nThe rollout then waits for approval at +{} (docs/approvals.md):\n\n",
            short(total)
        ));
        for (nw, message) in waiting {
            markdown.push_str(&format!("- `{nw}`: `{message}`\n"));
        }
    }
    let json_waiting: Vec<_> = waiting
        .iter()
        .map(|(nw, message)| json!({"nodewright": nw, "message": message}))
        .collect();
    SimulatedTimeline {
        text,
        markdown,
        json: json!({
            "converged": *phase == Phase::Converged,
            "awaitingApproval": json_waiting,
            "durationSeconds": total.as_secs(),
            "fleetNodes": fleet_size,
            "nodewrights": json_nws,
        }),
    }
}

/// Counts of nodes per NodeWright annotation prefix (used by tests to check the fleet matched).
pub fn selected_by(fleet_nodes: &[k8s_openapi::api::core::v1::Node], nw: &str) -> usize {
    fleet_nodes
        .iter()
        .filter(|n| {
            n.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(&keys::status(nw)))
        })
        .count()
}

/// Wall time of a timestamp relative to another (re-exported for renderers).
pub fn offset(start: Timestamp, at: Timestamp) -> Duration {
    since(start, at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use nodewright_schema::{NodeWright, NodeWrightSpec, Package};

    fn desired(version: &str, reboot: bool) -> Desired {
        let mut packages = BTreeMap::new();
        packages.insert(
            "driver".to_string(),
            Package {
                version: version.into(),
                image: "example/driver".into(),
                interrupt: reboot.then(|| nodewright_schema::Interrupt {
                    kind: nodewright_schema::InterruptType::Reboot,
                    services: vec![],
                }),
                ..Package::default()
            },
        );
        let spec = NodeWrightSpec {
            interruption_budget: Some(nodewright_schema::InterruptionBudget {
                percent: None,
                count: Some(2),
            }),
            packages: Some(packages),
            priority: 200,
            ..NodeWrightSpec::default()
        };
        Desired {
            nodewrights: vec![NodeWright::new("gpu", spec)],
            policies: vec![],
            commit: "c".into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_version_bump_projects_batches_within_the_budget_with_reboots() {
        let projection = FleetProjection {
            fleet: Fleet::plain(5),
            settings: Settings::default(),
            limit: Duration::from_secs(6 * 3600),
            max_pairs: DEFAULT_MAX_PAIRS,
            max_pairs_at_once: DEFAULT_MAX_PAIRS_AT_ONCE,
        };
        let t = projection
            .simulate(&desired("1.0.0", true), &desired("1.1.0", true))
            .unwrap();
        assert_eq!(t.json["converged"], true);
        let nw = &t.json["nodewrights"][0];
        assert_eq!(nw["nodes"], 5);
        assert_eq!(nw["reboots"], 5);
        for batch in nw["batches"].as_array().unwrap() {
            assert!(
                batch["nodes"].as_array().unwrap().len() <= 2,
                "budget count 2: {batch}"
            );
        }
        assert!(t.markdown.contains("```mermaid\ngantt"));
        assert!(t.markdown.contains("section gpu"));
        assert!(
            t.text.contains("gpu: 5 node(s) in 3 batch(es)"),
            "{}",
            t.text
        );
    }

    #[test]
    fn an_unchanged_state_works_no_node() {
        let projection = FleetProjection {
            fleet: Fleet::plain(2),
            settings: Settings::default(),
            limit: Duration::from_secs(3600),
            max_pairs: DEFAULT_MAX_PAIRS,
            max_pairs_at_once: DEFAULT_MAX_PAIRS_AT_ONCE,
        };
        let t = projection
            .simulate(&desired("1.0.0", false), &desired("1.0.0", false))
            .unwrap();
        assert!(t.text.contains("No node is worked on"), "{}", t.text);
    }

    #[test]
    fn the_limit_counts_the_nodes_each_nodewright_selects() {
        // Two of five nodes carry the label the NodeWright selects: one package on them is two
        // pairs in each rollout.
        let fleet = Fleet::parse(
            "cluster:\n  nodes:\n    - generate: {count: 2, namePrefix: gpu-, labels: {gpu: \"true\"}}\n    - generate: {count: 3, namePrefix: cpu-}\n",
        )
        .unwrap();
        let selecting = |version: &str| {
            let mut d = desired(version, false);
            d.nodewrights[0].spec.node_selectors = Some(LabelSelector {
                match_labels: Some([("gpu".to_string(), "true".to_string())].into()),
                ..LabelSelector::default()
            });
            d
        };
        let projection = |max_pairs| FleetProjection {
            fleet: fleet.clone(),
            settings: Settings::default(),
            limit: Duration::from_secs(6 * 3600),
            max_pairs,
            max_pairs_at_once: DEFAULT_MAX_PAIRS_AT_ONCE,
        };
        let (base, head) = (selecting("1.0.0"), selecting("1.1.0"));
        let t = projection(2).simulate(&base, &head).unwrap();
        assert_eq!(t.json["nodewrights"][0]["nodes"], 2);
        let refused = projection(1).simulate(&base, &head).unwrap_err();
        assert!(
            refused.contains("the base rollout runs 2 package × node pairs (most for NodeWright gpu: 1 packages × 2 node(s)), more than --max-simulated-pairs (1)"),
            "{refused}"
        );
    }

    #[test]
    fn the_memory_limit_counts_the_nodes_a_budget_lets_work_at_once() {
        // Three packages on ten nodes: 30 pairs in all, 6 at once under a budget of two nodes.
        let three = |version: &str, budget: Option<i32>| {
            let mut d = desired(version, false);
            let spec = &mut d.nodewrights[0].spec;
            let package = spec.packages().get("driver").cloned().unwrap_or_default();
            let packages = spec.packages.get_or_insert_with(BTreeMap::new);
            packages.insert("tuning".into(), package.clone());
            packages.insert("firmware".into(), package);
            spec.interruption_budget = budget.map(|count| nodewright_schema::InterruptionBudget {
                percent: None,
                count: Some(count),
            });
            d
        };
        let projection = |at_once| FleetProjection {
            fleet: Fleet::plain(10),
            settings: Settings::default(),
            limit: Duration::from_secs(6 * 3600),
            max_pairs: 30,
            max_pairs_at_once: at_once,
        };
        let (base, head) = (three("1.0.0", Some(2)), three("1.1.0", Some(2)));
        let t = projection(6).simulate(&base, &head).unwrap();
        assert_eq!(t.json["nodewrights"][0]["nodes"], 10);
        let refused = projection(5).simulate(&base, &head).unwrap_err();
        assert!(
            refused.contains("the base rollout's budgets let 6 package × node pairs run at once (most for NodeWright gpu: 3 packages × 2 of its 10 node(s) at once), more than --max-simulated-pairs-at-once (5)"),
            "{refused}"
        );
        // Without a budget every node is worked on at once.
        let refused = projection(29)
            .simulate(&three("1.0.0", None), &three("1.1.0", None))
            .unwrap_err();
        assert!(
            refused.contains("let 30 package × node pairs run at once"),
            "{refused}"
        );
    }

    #[test]
    fn a_policy_compartment_without_a_strategy_is_held_to_its_ceiling_and_one_with_a_strategy_is_not()
     {
        // Ten nodes, all in compartment `canary` (budget three); the default compartment's
        // strategy has no node left to grow to.
        let policy = |strategy: &str| {
            serde_yaml::from_str::<nodewright_schema::DeploymentPolicy>(&format!(
                "apiVersion: nodewright.nvidia.com/v1alpha1\nkind: DeploymentPolicy\nmetadata: {{name: tiers}}\nspec:\n  default: {{budget: {{count: 1}}, strategy: {{exponential: {{initialBatch: 1}}}}}}\n  compartments:\n    - {{name: canary, selector: {{matchLabels: {{tier: canary}}}}, budget: {{count: 3}}{strategy}}}\n"
            ))
            .unwrap()
        };
        let mut d = desired("1.0.0", false);
        d.nodewrights[0].spec.deployment_policy = Some("tiers".into());
        let labels = vec![BTreeMap::from([("tier".to_string(), "canary".to_string())]); 10];
        d.policies = vec![policy("")];
        assert_eq!(work(&d, labels.iter())[0].at_once, 3);
        d.policies = vec![policy(", strategy: {exponential: {initialBatch: 1}}")];
        assert_eq!(work(&d, labels.iter())[0].at_once, 10);
    }
}
