//! The per-package stage machine (spec/operator.md §6): the dependency DAG and the runnable
//! set (§6.2), the next-stage table (§6.3), stage choice at dispatch under lazy admission
//! (§6.6, §6.7, §6.8, §16.3), the uninstall lane (§6.9), cancel (§6.10), and the NodeWright
//! conditions fed by the lane: `Blocked`/`DependencyUninstalled` (§6.15),
//! `Blocked`/`NonInterruptPodsRunning` (§7.5), `DrainBlocked` (§7.10), `UninstallInProgress`
//! and `UninstallFailed` (§12.2).

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use nodewright_schema::node_state::entry_key;
use nodewright_schema::{NodeState, NodeWright, Package, PackageStatus, Stage, State, keys};

use super::complete::{self, AppliedConfig};
use super::context::PassCtx;
use crate::plan::{EventObject, EventType};

/// Runnable packages (§6.2): every spec package not in `completed` whose every `dependsOn`
/// parent is in `completed`, sorted by name. A dependency on a version the spec does not
/// carry is a parent that can never complete.
pub fn runnable(nw: &NodeWright, completed: &BTreeSet<String>) -> Vec<String> {
    let packages = nw.spec.packages();
    let complete = |name: &str, version: &str| {
        completed.contains(name) && packages.get(name).is_some_and(|p| p.version == version)
    };
    (packages.iter())
        .filter(|(name, _)| !completed.contains(*name))
        .filter(|(_, p)| (p.depends_on().iter()).all(|(parent, version)| complete(parent, version)))
        .map(|(name, _)| name.clone())
        .collect()
}

/// The next stage after a completed stage (§6.3 table); `None` when terminal.
pub fn next_stage(stage: Stage, has_interrupt: bool) -> Option<Stage> {
    match stage {
        Stage::Apply | Stage::Upgrade => Some(Stage::Config),
        Stage::Config => has_interrupt.then_some(Stage::Interrupt),
        Stage::Interrupt => Some(Stage::PostInterrupt),
        Stage::PostInterrupt => None,
        Stage::Uninstall => (!has_interrupt).then_some(Stage::Apply),
        Stage::UninstallInterrupt => None,
    }
}

/// Compares two package versions with Go semver rules (optional `v`, shorthands like `1.2`).
pub fn compare_versions(a: &str, b: &str) -> Option<std::cmp::Ordering> {
    nodewright_schema::semver::compare(a, b)
}

/// The stage a runnable package enters when dispatched now (§6.3 step 1 with §6.6, §6.7 and
/// §16.3): `None` when there is nothing to run.
pub fn choose_stage(
    state: &NodeState,
    name: &str,
    package: &Package,
    has_interrupt: bool,
) -> Option<Stage> {
    match state.get(name, &package.version) {
        None => {
            let older = state.entries_of(name).any(|e| {
                compare_versions(&package.version, &e.version) == Some(std::cmp::Ordering::Greater)
                    && !e.stage.is_some_and(Stage::is_uninstall_cycle)
            });
            Some(if older { Stage::Upgrade } else { Stage::Apply })
        }
        Some(entry) => match entry.state {
            Some(State::Complete) => entry.stage.and_then(|s| next_stage(s, has_interrupt)),
            _ => Some(entry.stage.unwrap_or(Stage::Apply)),
        },
    }
}

/// A fresh entry for a package at a stage and state (image and pin from the spec).
pub fn entry(name: &str, package: &Package, stage: Stage, state: State) -> PackageStatus {
    let mut e = PackageStatus::new(name, &package.version, &package.image, stage, state);
    e.container_sha = package.container_sha.clone().unwrap_or_default();
    e
}

/// What the uninstall lane does for one package on one node (§6.9).
#[derive(Clone, Debug, PartialEq)]
pub enum UninstallStep {
    /// Nothing: absent, not requested, or an install still running/erroring.
    None,
    /// `(uninstall-interrupt, complete)`: remove this entry key.
    Remove(String),
    /// Write this entry (entering the lane) and treat the package as uninstall work.
    Enter(PackageStatus),
    /// Already in the lane: uninstall work.
    Work,
}

/// The uninstall-lane decision for a package on a node (§6.9).
pub fn uninstall_step(
    nw: &NodeWright,
    state: &NodeState,
    name: &str,
    package: &Package,
) -> UninstallStep {
    let requested = complete::uninstall_requested(nw, package);
    let entry = state.get(name, &package.version).or_else(|| {
        state
            .entries_of(name)
            .find(|e| e.stage.is_some_and(Stage::is_uninstall_cycle))
    });
    let Some(entry) = entry else {
        return UninstallStep::None;
    };
    let in_cycle = entry.stage.is_some_and(Stage::is_uninstall_cycle);
    if !requested && !in_cycle {
        return UninstallStep::None;
    }
    match entry.stage {
        Some(Stage::Uninstall) => UninstallStep::Work,
        Some(Stage::UninstallInterrupt) => {
            if entry.state == Some(State::Complete) {
                UninstallStep::Remove(entry_key(&entry.name, &entry.version))
            } else {
                UninstallStep::Work
            }
        }
        _ => {
            if entry.state == Some(State::Complete) {
                let mut e = entry.clone();
                e.stage = Some(Stage::Uninstall);
                e.state = Some(State::InProgress);
                e.restarts = 0;
                UninstallStep::Enter(e)
            } else {
                UninstallStep::None
            }
        }
    }
}

/// Cancel (§6.10): an entry at `uninstall` (in progress or erroring) of a package whose
/// uninstall is no longer requested restarts the install pipeline at `apply`.
pub fn cancel_entry(
    nw: &NodeWright,
    state: &NodeState,
    name: &str,
    package: &Package,
) -> Option<PackageStatus> {
    if complete::uninstall_requested(nw, package) {
        return None;
    }
    let e = state.get(name, &package.version)?;
    let cancellable = e.stage == Some(Stage::Uninstall)
        && matches!(e.state, Some(State::InProgress) | Some(State::Erroring));
    cancellable.then(|| entry(name, package, Stage::Apply, State::InProgress))
}

/// Spec packages complete on a node (§6.4 amended).
pub fn completed_set(
    nw: &impl complete::CompletionSource,
    state: &NodeState,
    applied: &AppliedConfig,
) -> BTreeSet<String> {
    (nw.spec().packages().iter())
        .filter(|(name, p)| complete::package_complete(nw, state, applied, name, p))
        .map(|(name, _)| name.clone())
        .collect()
}

fn condition(type_: &str, reason: &str, message: String) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: "True".to_string(),
        reason: reason.to_string(),
        message,
        last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
        observed_generation: None,
    }
}

/// Preamble step 1 (§5.4): `Blocked` (dependency uninstalled, non-interrupt pods),
/// `DrainBlocked`, `UninstallInProgress`, `UninstallFailed`; also drops stale drain-blocker
/// records of nodes no longer waiting on a drain.
pub fn refresh_conditions(ctx: &mut PassCtx<'_>, nw: usize) {
    let now = ctx.now;
    let view = &ctx.nws[nw];
    let nw_obj = view.nw;
    let name = view.name.to_string();
    let selected = view.selected.clone();
    let packages = nw_obj.spec.packages();

    // Per node, the digest of its packages ([`complete::NodeDigest`]), folded into
    // per-package facts in spec order.
    let mut marks = vec![complete::PackageMarks::default(); packages.len()];
    let mut uninstalling = false;
    let mut uninstall_failing = false;
    let mut held_nodes: Vec<String> = Vec::new();
    let mut stale_blockers: Vec<usize> = Vec::new();
    let blocked_key = ctx.nws[nw].keys.drain_blocked.clone();
    for &id in &selected {
        let waits_on_drain = ctx.node_digest(nw, id, |digest| {
            let digest = digest?;
            for (all, node) in marks.iter_mut().zip(&digest.packages) {
                all.present |= node.present;
                all.in_cycle |= node.in_cycle;
                all.incomplete |= node.incomplete;
            }
            uninstalling |= digest.uninstalling;
            uninstall_failing |= digest.uninstall_failing;
            Some(digest.waits_on_drain)
        });
        let Some(waits_on_drain) = waits_on_drain else {
            continue;
        };
        let n = ctx.node(id);
        if waits_on_drain {
            let node_name = n.name();
            let held = super::drain::non_interrupt_selector(nw_obj).is_some_and(|selector| {
                !super::drain::protected_pods(selector, ctx.index.pods_on(node_name)).is_empty()
            });
            if held {
                held_nodes.push(node_name.to_string());
            }
        } else if ctx.carries_drain_blockers(nw, id) {
            stale_blockers.push(id);
        }
    }
    let marks_of = |pkg: &str| {
        packages
            .keys()
            .position(|k| k == pkg)
            .map_or(complete::PackageMarks::default(), |i| marks[i])
    };
    for id in stale_blockers {
        ctx.node_mut(id).remove_annotation(&blocked_key);
    }

    // §6.15: B depends on A, A being (or having been) uninstalled, B still has work.
    let mut messages = Vec::new();
    for (b, pb) in packages {
        if complete::uninstall_requested(nw_obj, pb) || !marks_of(b).incomplete {
            continue;
        }
        for dep in pb.depends_on().keys() {
            let Some(pa) = packages.get(dep) else {
                continue;
            };
            if marks_of(dep).in_cycle {
                messages.push(format!(
                    "package {b} is blocked: dependency {dep} is being uninstalled"
                ));
            } else if complete::uninstall_requested(nw_obj, pa) && !marks_of(dep).present {
                messages.push(format!(
                    "package {b} is blocked: dependency {dep} has been uninstalled"
                ));
            }
        }
    }
    messages.sort();
    let view = &mut ctx.nws[nw];
    let blocked_reason = view
        .condition(keys::condition::BLOCKED)
        .map(|c| c.reason.clone());
    let mut entered_hold = false;
    if !messages.is_empty() {
        view.set_condition(
            condition(
                keys::condition::BLOCKED,
                keys::reason::DEPENDENCY_UNINSTALLED,
                messages.join("; "),
            ),
            now,
        );
    } else if !held_nodes.is_empty() {
        held_nodes.sort();
        let list = if held_nodes.len() > crate::settings::constants::CONDITION_NODE_LIST_CAP {
            "(list truncated; see controller logs)".to_string()
        } else {
            format!("({})", held_nodes.join(", "))
        };
        let message = if held_nodes.len() == 1 {
            format!("1 node blocked by non-interrupt pods {list}. Waiting.")
        } else {
            format!(
                "{} nodes blocked by non-interrupt pods {list}. Waiting.",
                held_nodes.len()
            )
        };
        entered_hold = blocked_reason.as_deref() != Some(keys::reason::NON_INTERRUPT_PODS_RUNNING);
        view.set_condition(
            condition(
                keys::condition::BLOCKED,
                keys::reason::NON_INTERRUPT_PODS_RUNNING,
                message,
            ),
            now,
        );
    } else if blocked_reason.is_some() {
        view.remove_condition(keys::condition::BLOCKED);
    }

    if uninstalling {
        view.set_condition(
            condition(
                keys::condition::UNINSTALL_IN_PROGRESS,
                keys::reason::UNINSTALL_IN_PROGRESS,
                "One or more packages are being uninstalled".to_string(),
            ),
            now,
        );
    } else {
        view.remove_condition(keys::condition::UNINSTALL_IN_PROGRESS);
    }
    if uninstall_failing {
        view.set_condition(
            condition(
                keys::condition::UNINSTALL_FAILED,
                keys::reason::UNINSTALL_POD_FAILING,
                "One or more uninstall pods are failing".to_string(),
            ),
            now,
        );
    } else {
        view.remove_condition(keys::condition::UNINSTALL_FAILED);
    }

    match super::drain::drain_blocked_condition(ctx, nw) {
        Some((reason, message)) => ctx.nws[nw].set_condition(
            condition(keys::condition::DRAIN_BLOCKED, &reason, message),
            now,
        ),
        None => ctx.nws[nw].remove_condition(keys::condition::DRAIN_BLOCKED),
    }
    if entered_hold {
        ctx.event(
            EventObject::NodeWright(name.clone()),
            EventType::Warning,
            keys::event::DRAIN,
            format!("[nodewright:{name}] drain held: non-interrupt pods are running"),
        );
    }
}

/// The first interrupt package of a node that still waits on a drain (its next stage is
/// before the interrupt: entry absent, or an install/uninstall stage not complete), if any.
pub fn waits_on_drain(
    nw: &impl complete::CompletionSource,
    state: &NodeState,
    applied: &AppliedConfig,
) -> Option<String> {
    for (name, p) in nw.spec().packages() {
        let keys = complete::interrupt_keys(nw, applied, name, p);
        if !complete::has_interrupt_for(p, &keys) {
            continue;
        }
        if complete::package_complete(nw, state, applied, name, p) {
            continue;
        }
        let waiting = match state.get(name, &p.version) {
            None => !complete::uninstall_requested(nw, p),
            Some(e) => {
                e.state != Some(State::Complete)
                    && matches!(
                        e.stage,
                        Some(Stage::Apply | Stage::Upgrade | Stage::Config | Stage::Uninstall)
                    )
            }
        };
        if waiting {
            return Some(name.clone());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn pkg(version: &str, deps: &[(&str, &str)]) -> Package {
        Package {
            version: version.into(),
            image: "example/p".into(),
            depends_on: (!deps.is_empty()).then(|| {
                deps.iter()
                    .map(|(n, v)| (n.to_string(), v.to_string()))
                    .collect()
            }),
            ..Package::default()
        }
    }

    fn nw(pkgs: &[(&str, Package)]) -> NodeWright {
        let mut nw = NodeWright::new("nw", Default::default());
        nw.spec.packages = Some(
            pkgs.iter()
                .map(|(n, p)| (n.to_string(), p.clone()))
                .collect(),
        );
        nw
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn runnable_is_the_set_of_ready_incomplete_vertices() {
        let nw = nw(&[
            ("a", pkg("1.0.0", &[])),
            ("b", pkg("1.0.0", &[("a", "1.0.0")])),
            ("c", pkg("1.0.0", &[])),
            ("d", pkg("1.0.0", &[("b", "1.0.0"), ("c", "1.0.0")])),
        ]);
        assert_eq!(runnable(&nw, &set(&[])), ["a", "c"]);
        assert_eq!(runnable(&nw, &set(&["a"])), ["b", "c"]);
        // A dependency-free package stays runnable whatever else completed (S002 fix).
        assert_eq!(runnable(&nw, &set(&["a", "b"])), ["c"]);
        assert_eq!(runnable(&nw, &set(&["a", "b", "c"])), ["d"]);
        assert!(runnable(&nw, &set(&["a", "b", "c", "d"])).is_empty());
    }

    #[test]
    fn a_dependency_on_another_version_never_completes() {
        let nw = nw(&[
            ("a", pkg("2.0.0", &[])),
            ("b", pkg("1.0.0", &[("a", "1.0.0")])),
        ]);
        assert_eq!(runnable(&nw, &set(&["a"])), Vec::<String>::new());
    }

    #[test]
    fn next_stage_table() {
        assert_eq!(next_stage(Stage::Apply, false), Some(Stage::Config));
        assert_eq!(next_stage(Stage::Upgrade, true), Some(Stage::Config));
        assert_eq!(next_stage(Stage::Config, false), None);
        assert_eq!(next_stage(Stage::Config, true), Some(Stage::Interrupt));
        assert_eq!(
            next_stage(Stage::Interrupt, false),
            Some(Stage::PostInterrupt)
        );
        assert_eq!(next_stage(Stage::PostInterrupt, true), None);
        assert_eq!(next_stage(Stage::Uninstall, false), Some(Stage::Apply));
        assert_eq!(next_stage(Stage::Uninstall, true), None);
        assert_eq!(next_stage(Stage::UninstallInterrupt, false), None);
    }

    #[test]
    fn stage_choice_upgrade_downgrade_and_rerun() {
        let p = pkg("2.0.0", &[]);
        let mut state = NodeState::default();
        assert_eq!(choose_stage(&state, "a", &p, false), Some(Stage::Apply));
        state.upsert(entry(
            "a",
            &pkg("1.0.0", &[]),
            Stage::Config,
            State::Complete,
        ));
        assert_eq!(choose_stage(&state, "a", &p, false), Some(Stage::Upgrade));
        // Downgrade: a fresh install from apply.
        assert_eq!(
            choose_stage(&state, "a", &pkg("0.9", &[]), false),
            Some(Stage::Apply)
        );
        state.upsert(entry("a", &p, Stage::PostInterrupt, State::Erroring));
        assert_eq!(
            choose_stage(&state, "a", &p, true),
            Some(Stage::PostInterrupt)
        );
        state.upsert(entry("a", &p, Stage::Config, State::Complete));
        assert_eq!(choose_stage(&state, "a", &p, true), Some(Stage::Interrupt));
        assert_eq!(choose_stage(&state, "a", &p, false), None);
    }

    #[test]
    fn versions_compare_as_go_semver() {
        use std::cmp::Ordering::*;
        assert_eq!(compare_versions("1.10.0", "1.9.0"), Some(Greater));
        assert_eq!(compare_versions("v1.2", "1.2.0"), Some(Equal));
        assert_eq!(compare_versions("1", "0.9.9"), Some(Greater));
        assert_eq!(compare_versions("nope", "1.0.0"), None);
    }

    #[test]
    fn uninstall_lane_enters_only_from_a_complete_install() {
        let mut p = pkg("1.0.0", &[]);
        p.uninstall = Some(nodewright_schema::Uninstall {
            enabled: true,
            apply: true,
        });
        let nw = nw(&[("a", p.clone())]);
        let mut state = NodeState::default();
        assert_eq!(uninstall_step(&nw, &state, "a", &p), UninstallStep::None);
        state.upsert(entry("a", &p, Stage::Apply, State::Erroring));
        assert_eq!(uninstall_step(&nw, &state, "a", &p), UninstallStep::None);
        state.upsert(entry("a", &p, Stage::Config, State::Complete));
        match uninstall_step(&nw, &state, "a", &p) {
            UninstallStep::Enter(e) => assert!(e.is(Stage::Uninstall, State::InProgress)),
            other => panic!("{other:?}"),
        }
        state.upsert(entry("a", &p, Stage::UninstallInterrupt, State::Complete));
        assert_eq!(
            uninstall_step(&nw, &state, "a", &p),
            UninstallStep::Remove("a|1.0.0".into())
        );
        state.upsert(entry("a", &p, Stage::Uninstall, State::Erroring));
        assert_eq!(uninstall_step(&nw, &state, "a", &p), UninstallStep::Work);
    }

    #[test]
    fn cancel_restarts_at_apply_but_not_from_uninstall_interrupt() {
        let mut p = pkg("1.0.0", &[]);
        p.uninstall = Some(nodewright_schema::Uninstall {
            enabled: true,
            apply: false,
        });
        let nw = nw(&[("a", p.clone())]);
        let mut state = NodeState::default();
        state.upsert(entry("a", &p, Stage::Uninstall, State::InProgress));
        assert!(
            cancel_entry(&nw, &state, "a", &p)
                .unwrap()
                .is(Stage::Apply, State::InProgress)
        );
        state.upsert(entry("a", &p, Stage::UninstallInterrupt, State::InProgress));
        assert_eq!(cancel_entry(&nw, &state, "a", &p), None);
    }

    use super::super::context::PassCtx;
    use super::super::testkit::{self, node, settings, world};

    #[test]
    fn dependency_uninstalled_blocks_the_dependent_with_the_spec_message() {
        let mut base = testkit::package("base", "1.0.0");
        base.uninstall = Some(nodewright_schema::Uninstall {
            enabled: true,
            apply: true,
        });
        let mut addon = testkit::package("addon", "1.0.0");
        addon.depends_on = Some(BTreeMap::from([("base".to_string(), "1.0.0".to_string())]));
        let build = |entries: &[(&str, &str, Stage, State)]| {
            world()
                .node(node("n1").state("nw", entries))
                .nw(testkit::nw("nw")
                    .with_package("base", base.clone())
                    .with_package("addon", addon.clone()))
                .build()
        };
        let s = settings();
        let snap = build(&[("base", "1.0.0", Stage::Uninstall, State::InProgress)]);
        let mut ctx = PassCtx::new(&snap, &s);
        refresh_conditions(&mut ctx, 0);
        let c = ctx.nws[0]
            .condition(keys::condition::BLOCKED)
            .cloned()
            .unwrap();
        assert_eq!(c.reason, "DependencyUninstalled");
        assert_eq!(
            c.message,
            "package addon is blocked: dependency base is being uninstalled"
        );
        assert!(
            ctx.nws[0]
                .condition(keys::condition::UNINSTALL_IN_PROGRESS)
                .is_some()
        );

        let snap = build(&[]);
        let mut ctx = PassCtx::new(&snap, &s);
        refresh_conditions(&mut ctx, 0);
        let c = ctx.nws[0]
            .condition(keys::condition::BLOCKED)
            .cloned()
            .unwrap();
        assert_eq!(
            c.message,
            "package addon is blocked: dependency base has been uninstalled"
        );

        let snap = build(&[("base", "1.0.0", Stage::Uninstall, State::Erroring)]);
        let mut ctx = PassCtx::new(&snap, &s);
        refresh_conditions(&mut ctx, 0);
        assert_eq!(
            ctx.nws[0]
                .condition(keys::condition::UNINSTALL_FAILED)
                .map(|c| c.reason.clone()),
            Some("UninstallPodFailing".to_string())
        );
    }

    #[test]
    fn a_complete_dependent_is_not_reported_blocked() {
        let mut base = testkit::package("base", "1.0.0");
        base.uninstall = Some(nodewright_schema::Uninstall {
            enabled: true,
            apply: true,
        });
        let mut addon = testkit::package("addon", "1.0.0");
        addon.depends_on = Some(BTreeMap::from([("base".to_string(), "1.0.0".to_string())]));
        let snap = world()
            .node(node("n1").state("nw", &[("addon", "1.0.0", Stage::Config, State::Complete)]))
            .nw(testkit::nw("nw")
                .with_package("base", base)
                .with_package("addon", addon))
            .build();
        let s = settings();
        let mut ctx = PassCtx::new(&snap, &s);
        refresh_conditions(&mut ctx, 0);
        assert!(ctx.nws[0].condition(keys::condition::BLOCKED).is_none());
    }
}
