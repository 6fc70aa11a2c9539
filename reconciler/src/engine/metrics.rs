//! Metric samples (spec/operator.md §13.3), computed from a snapshot: the simulator's
//! `metrics:` expectations and the Prometheus endpoint both render these.

use std::collections::BTreeMap;

use nodewright_schema::keys::{DEFAULT_COMPARTMENT, LEGACY_POLICY_LABEL, node_state};
use nodewright_schema::{NodeState, Stage, State, Status};

use super::context::PassCtx;
use super::policy;
use crate::settings::Settings;
use crate::snapshot::Snapshot;

/// One gauge sample.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Metric name (`nodewright_status`, …).
    pub name: String,
    /// Labels, sorted by name.
    pub labels: BTreeMap<String, String>,
    /// Value.
    pub value: f64,
}

const STATES: [State; 5] = [
    State::Complete,
    State::InProgress,
    State::Skipped,
    State::Erroring,
    State::Unknown,
];

/// Every sample of every NodeWright (current names, plus `skyhook_*` twins when
/// `publishLegacyMetrics`).
pub fn samples(snapshot: &Snapshot, settings: &Settings) -> Vec<Sample> {
    let ctx = PassCtx::new(snapshot, settings);
    let mut out = Vec::new();
    for view in &ctx.nws {
        let nw = view.name;
        let mut push = |name: &str, extra: &[(&str, &str)], value: f64| {
            let mut labels: BTreeMap<String, String> = extra
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            labels.insert("nodewright_name".into(), nw.to_string());
            out.push(Sample {
                name: format!("nodewright_{name}"),
                labels: labels.clone(),
                value,
            });
            if settings.publish_legacy_metrics {
                labels.remove("nodewright_name");
                labels.insert("skyhook_name".into(), nw.to_string());
                out.push(Sample {
                    name: format!("skyhook_{name}"),
                    labels,
                    value,
                });
            }
        };
        let status = view.status.status.unwrap_or(Status::Unknown);
        for s in Status::ALL {
            push(
                "status",
                &[("status", s.as_str())],
                f64::from(u8::from(s == status)),
            );
        }
        let mut per_status: BTreeMap<Status, usize> = BTreeMap::new();
        let empty = NodeState::default();
        let mut states: BTreeMap<(&str, &str, State), usize> = BTreeMap::new();
        let mut stages: BTreeMap<(&str, &str, Stage), usize> = BTreeMap::new();
        let mut restarts: BTreeMap<&str, i64> = BTreeMap::new();
        let key = node_state(nw);
        for &n in &view.selected {
            let node = ctx.node(n);
            *per_status
                .entry(Status::from_annotation(
                    node.annotation(&nodewright_schema::keys::status(nw)),
                ))
                .or_default() += 1;
            let parsed = node
                .node()
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(&key))
                .and_then(|raw| NodeState::parse(raw).ok());
            let state = parsed.as_ref().unwrap_or(&empty);
            for (pname, pkg) in view.nw.spec.packages() {
                if let Some(e) = state.get(pname, &pkg.version) {
                    if let Some(st) = e.state {
                        *states.entry((pname, &pkg.version, st)).or_default() += 1;
                    }
                    if let Some(sg) = e.stage {
                        *stages.entry((pname, &pkg.version, sg)).or_default() += 1;
                    }
                    *restarts.entry(pname).or_default() += i64::from(e.restarts);
                }
            }
        }
        for s in Status::ALL {
            let c = per_status.get(&s).copied().unwrap_or(0);
            push("node_status_count", &[("status", s.as_str())], c as f64);
        }
        push("node_target_count", &[], view.selected.len() as f64);
        for (pname, pkg) in view.nw.spec.packages() {
            let v = pkg.version.as_str();
            let base = [("package_name", pname.as_str()), ("package_version", v)];
            for st in STATES {
                let c = states.get(&(pname.as_str(), v, st)).copied().unwrap_or(0);
                push(
                    "package_state_count",
                    &[base[0], base[1], ("state", st.as_str())],
                    c as f64,
                );
            }
            for sg in Stage::ALL {
                let c = stages.get(&(pname.as_str(), v, sg)).copied().unwrap_or(0);
                push(
                    "package_stage_count",
                    &[base[0], base[1], ("stage", sg.as_str())],
                    c as f64,
                );
            }
            let r = restarts.get(pname.as_str()).copied().unwrap_or(0);
            push("package_restarts_count", &base, r as f64);
        }
        let policy_name = view
            .nw
            .spec
            .deployment_policy
            .clone()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| LEGACY_POLICY_LABEL.to_string());
        let defs = policy::compartments(
            view.nw,
            view.policy,
            view.policy_missing,
            view.selected.len() as i32,
        );
        for (cname, cs) in view.status.compartment_statuses.iter().flatten() {
            let strategy = defs
                .iter()
                .find(|d| &d.name == cname)
                .map_or("unknown", |d| d.strategy_label());
            let comp = if cname.is_empty() {
                DEFAULT_COMPARTMENT
            } else {
                cname.as_str()
            };
            let labels = [
                ("policy_name", policy_name.as_str()),
                ("compartment_name", comp),
                ("strategy", strategy),
            ];
            let bs = cs.batch_state.clone().unwrap_or_default();
            for (m, v) in [
                ("rollout_matched_nodes", cs.matched),
                ("rollout_ceiling", cs.ceiling),
                ("rollout_in_progress", cs.in_progress),
                ("rollout_completed", cs.completed),
                ("rollout_progress_percent", cs.progress_percent),
                ("rollout_current_batch", bs.current_batch),
                ("rollout_consecutive_failures", bs.consecutive_failures),
                ("rollout_should_stop", i32::from(bs.should_stop)),
            ] {
                push(m, &labels, f64::from(v));
            }
        }
    }
    out
}
