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
use crate::cluster::sim::SimAdapter;
use crate::cluster::{Cluster, Desired};
use crate::controller::Controller;
use crate::settings::Settings;
use crate::sim::util::since;

/// Projects rollouts on a simulated fleet.
pub struct FleetProjection {
    /// The fleet.
    pub fleet: Fleet,
    /// Operator settings.
    pub settings: Settings,
    /// Give up after this much virtual time per phase.
    pub limit: Duration,
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
fn awaiting_approval(
    nodewrights: &[nodewright_schema::NodeWright],
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

    fn drive(
        &self,
        runtime: &tokio::runtime::Runtime,
        controller: &mut Controller<SimAdapter>,
        desired: &Desired,
    ) -> Result<Phase, String> {
        runtime.block_on(async {
            controller
                .apply_desired(desired)
                .await
                .map_err(|e| e.to_string())?;
            let start = controller.cluster().world().now();
            loop {
                let report = controller.pass().await.map_err(|e| e.to_string())?;
                let snapshot = controller
                    .cluster()
                    .snapshot()
                    .await
                    .map_err(|e| e.to_string())?;
                let converged = snapshot
                    .nodewrights
                    .iter()
                    .all(|nw| nw.status.as_ref().and_then(|s| s.status) == Some(Status::Complete));
                if converged && !report.wrote() {
                    return Ok(Phase::Converged);
                }
                if !report.wrote()
                    && let Some(waiting) = awaiting_approval(&snapshot.nodewrights)
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
        let mut controller = Controller::new(
            SimAdapter::new(world),
            crate::engine::reconcile_cached,
            self.settings.clone(),
        );
        // A base rollout held for an approval is where the cluster stands: the head starts there.
        if !base.nodewrights.is_empty()
            && self.drive(&runtime, &mut controller, base)? == Phase::TimedOut
        {
            return Err(format!(
                "the base state did not converge within {} of simulated time",
                format_go_duration(self.limit)
            ));
        }
        let (t0, h0) = {
            let world = controller.cluster().world();
            (world.now(), world.history().entries().len())
        };
        let phase = self.drive(&runtime, &mut controller, head)?;
        let world = controller.cluster().world();
        let entries: Vec<(Duration, String)> = world.history().entries()[h0..]
            .iter()
            .map(|e| (since(t0, e.at), e.line.clone()))
            .collect();
        let total = since(t0, world.now());
        Ok(render(
            &timeline(&entries),
            total,
            &phase,
            world.nodes().len(),
        ))
    }
}

/// Groups history lines into batches per NodeWright.
fn timeline(entries: &[(Duration, String)]) -> BTreeMap<String, Vec<Batch>> {
    // Per NodeWright and node: first and last activity, interrupt Jobs.
    let mut spans: BTreeMap<(String, String), (Duration, Duration, usize)> = BTreeMap::new();
    let mut reboots: BTreeMap<String, Vec<Duration>> = BTreeMap::new();
    for (at, line) in entries {
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some(kind @ ("job" | "job-ok" | "job-fail")), Some(address)) => {
                let parts: Vec<&str> = address.split('/').collect();
                if let [nw, _pkg, stage, node] = parts[..] {
                    let span = spans
                        .entry((nw.to_string(), node.to_string()))
                        .or_insert((*at, *at, 0));
                    span.1 = span.1.max(*at);
                    if kind == "job" && (stage == "interrupt" || stage == "uninstall-interrupt") {
                        span.2 += 1;
                    }
                }
            }
            (Some("reboot"), Some(node)) => reboots.entry(node.to_string()).or_default().push(*at),
            _ => {}
        }
    }
    let mut out: BTreeMap<String, Vec<Batch>> = BTreeMap::new();
    for ((nw, node), (start, end, interrupts)) in spans {
        let batches = out.entry(nw).or_default();
        // A reboot belongs to the NodeWright whose work on the node spans it.
        let reboots_here = reboots
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
            "{nw}: {nodes} node(s) in {} batch(es), {interrupts} interrupt Job(s), {reboots} reboot(s)\n",
            batches.len()
        ));
        markdown.push_str(&format!("    section {nw}\n"));
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
                "  batch {:>2}  +{:<8} → +{:<8}  {names}\n",
                i + 1,
                short(b.start),
                short(b.end)
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
        };
        let t = projection
            .simulate(&desired("1.0.0", false), &desired("1.0.0", false))
            .unwrap();
        assert!(t.text.contains("No node is worked on"), "{}", t.text);
    }
}
