//! Runs a scenario: builds the simulated cluster and repository, drives reconcile passes every
//! `reconcileInterval` of virtual time through the [`Cluster`] port,
//! executes the steps, checks the invariants after every pass and step, and reports.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Taint;
use nodewright_schema::NodeWright;
use serde_yaml::Value;

use super::expect::{self, Sample};
use super::format::{ClusterSpec, NodeEntry, Scenario, Step};
use super::invariants;
use super::matcher::Mismatch;
use super::repo::{Repo, desired_of};
use crate::cluster::sim::{SimAdapter, block_on};
use crate::cluster::{Cluster, Desired};
use crate::engine::StateCache;
use crate::plan::{Executed, Plan};
use crate::settings::Settings;
use crate::sim::packages::DEFAULT_REBOOT_TAKES;
use crate::sim::util::{add, seed_from};
use crate::sim::{
    ContainerRunner, FaultWindow, ModelRunner, NodeInput, OwnerKind, PackageModels, PdbInput,
    SimCluster, WorkloadPodInput,
};
use crate::snapshot::{Memory, Snapshot};
use crate::source::manifests::Previous;

/// The reconciler under test: one pure pass, given the cache the run carries between passes
/// as the controller does (engine/incremental/state_cache.rs; a reconciler without one
/// ignores it).
pub type ReconcileFn = fn(&Snapshot, &Settings, &mut StateCache) -> Plan;
/// The reconciler's Prometheus samples for a world.
pub type MetricsFn = fn(&Snapshot, &Settings) -> Vec<Sample>;
/// The status document (`status/<name>.yaml`) of a NodeWright.
pub type GitStatusFn = fn(&NodeWright, &Settings) -> Value;
/// An operational verb (`nodewright <verb> …`) run against the simulated cluster; gets every
/// argument (including the verb) and returns the exit code and output.
pub type VerbFn = fn(&mut SimCluster, &[String], &Settings) -> VerbResult;
/// Builds the runner for real package directories (`path:`), i.e. the real agent.
pub type RealAgentFn = fn(&PackageModels) -> Box<dyn ContainerRunner>;

/// What a verb printed and returned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerbResult {
    /// Exit code.
    pub exit: i32,
    /// stdout and stderr.
    pub output: String,
}

/// The seams through which the runner reaches the rest of the product.
#[derive(Clone)]
pub struct Hooks {
    /// The reconcile pass.
    pub reconcile: ReconcileFn,
    /// Shown in reports, e.g. `engine`.
    pub reconciler_name: &'static str,
    /// Metrics source; `None` makes `metrics:` expectations fail with a clear message.
    pub metrics: Option<MetricsFn>,
    /// Status document renderer for `gitStatus:`.
    pub git_status: GitStatusFn,
    /// Operational verbs by their first argument.
    pub verbs: BTreeMap<&'static str, VerbFn>,
    /// Runner for `path:` packages; `None` makes such scenarios fail at set-up.
    pub real_agent: Option<RealAgentFn>,
}

/// A reconciler that never acts: the world changes only through the steps.
pub fn idle_reconcile(_snapshot: &Snapshot, _settings: &Settings, _: &mut StateCache) -> Plan {
    Plan::default()
}

impl Hooks {
    /// The product's wiring: the lifecycle engine and its metrics. Status write-back
    /// (`gitStatus`), the operational verbs (`cli:`) and the real agent (`path:` packages) are
    /// later issues; until they land the defaults below stand in (see each field).
    pub fn product() -> Self {
        let mut hooks = Hooks::with_reconciler(crate::engine::reconcile_cached, "engine");
        hooks.metrics = Some(crate::engine::metrics::samples);
        hooks.git_status = crate::writeback::render::scenario_git_status;
        hooks.real_agent = Some(crate::sim::agent::scenario_real_agent);
        for verb in crate::cli::verbs::VERB_NAMES {
            hooks
                .verbs
                .insert(verb, crate::cli::verbs::scenario_hook as VerbFn);
        }
        hooks
    }

    /// Hooks with a given reconciler and the defaults for everything else.
    pub fn with_reconciler(reconcile: ReconcileFn, name: &'static str) -> Self {
        Hooks {
            reconcile,
            reconciler_name: name,
            metrics: None,
            git_status: expect::default_git_status,
            verbs: BTreeMap::new(),
            real_agent: None,
        }
    }
}

/// The result of one step.
#[derive(Clone, Debug, PartialEq)]
pub struct StepReport {
    /// 1-based index.
    pub index: usize,
    /// Step key.
    pub kind: &'static str,
    /// Virtual time when it ended, relative to the start.
    pub at: Duration,
    /// Whether it passed.
    pub passed: bool,
    /// Summary when passed, the failure (expected vs actual) when not.
    pub detail: String,
}

/// The result of one scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// File.
    pub file: String,
    /// Scenario name.
    pub name: String,
    /// Steps run (stops at the first failure).
    pub steps: Vec<StepReport>,
    /// A failure before any step (parse, settings, set-up).
    pub setup_error: Option<String>,
    /// Passes run.
    pub passes: u64,
}

impl Report {
    /// Whether every step passed.
    pub fn passed(&self) -> bool {
        self.setup_error.is_none() && self.steps.iter().all(|s| s.passed)
    }

    /// Human-readable report.
    pub fn render(&self) -> String {
        let mut out = format!("scenario {} ({})\n", self.name, self.file);
        if let Some(e) = &self.setup_error {
            out.push_str(&format!("  FAIL set-up: {e}\n"));
        }
        for s in &self.steps {
            let mark = if s.passed { "ok  " } else { "FAIL" };
            out.push_str(&format!(
                "  {mark} step {} {} at +{}",
                s.index,
                s.kind,
                fmt_duration(s.at)
            ));
            if s.passed {
                if !s.detail.is_empty() {
                    out.push_str(&format!(": {}", s.detail));
                }
                out.push('\n');
            } else {
                out.push('\n');
                for line in s.detail.lines() {
                    out.push_str(&format!("       {line}\n"));
                }
            }
        }
        out.push_str(&format!(
            "  {} ({} passes)\n",
            if self.passed() { "PASSED" } else { "FAILED" },
            self.passes
        ));
        out
    }
}

/// `1h2m3s`-style rendering.
pub fn fmt_duration(d: Duration) -> String {
    let mut s = d.as_secs();
    let ms = d.subsec_millis();
    if s == 0 && ms == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    if s >= 3600 {
        out.push_str(&format!("{}h", s / 3600));
        s %= 3600;
    }
    if s >= 60 {
        out.push_str(&format!("{}m", s / 60));
        s %= 60;
    }
    if s > 0 || ms > 0 {
        if ms > 0 {
            out.push_str(&format!("{s}.{ms:03}s"));
        } else {
            out.push_str(&format!("{s}s"));
        }
    }
    out
}

/// One scenario in progress.
pub struct Run<'h> {
    cluster: SimAdapter,
    repo: Repo,
    settings: Settings,
    hooks: &'h Hooks,
    memory: Memory,
    /// What the engine carries from pass to pass; dropped with `memory` on a restart.
    cache: StateCache,
    last_snapshot: Option<Snapshot>,
    desired: Option<Desired>,
    previous: Option<Previous>,
    seen_commit: Option<String>,
    next_pass: Timestamp,
    start: Timestamp,
    passes: u64,
    /// Invariant violations found since the last step ended.
    violations: Vec<String>,
    /// What invariant 6 has seen of interrupts and applied configurations.
    interrupts: invariants::InterruptLedger,
    /// Non-fatal notes (invalid commits, API errors) since the last step ended.
    notes: Vec<String>,
}

impl<'h> Run<'h> {
    /// Builds the cluster and repository of a scenario.
    pub fn new(scenario: &Scenario, hooks: &'h Hooks) -> Result<Self, String> {
        let settings = scenario.settings.clone();
        settings.validate().map_err(|e| e.to_string())?;
        let models = PackageModels(scenario.packages.clone());
        let mut runner = ModelRunner::new(models.clone());
        if models.has_real_packages() {
            let Some(real) = hooks.real_agent else {
                return Err("this scenario uses real package directories (`path:`), but no real-agent runner is wired into the simulator (Hooks::real_agent)".into());
            };
            runner = runner.with_real_agent(real(&models));
        }
        let mut world = SimCluster::new(
            &settings.namespace,
            Box::new(runner),
            seed_from(&scenario.name),
        );
        add_objects(&mut world, &scenario.cluster)?;
        let start = world.now();
        Ok(Run {
            cluster: SimAdapter::new(world),
            repo: Repo::new(scenario.repo.files.clone()),
            settings,
            hooks,
            memory: Memory::default(),
            cache: StateCache::new(),
            last_snapshot: None,
            desired: None,
            previous: None,
            seen_commit: None,
            next_pass: start,
            start,
            passes: 0,
            violations: Vec::new(),
            interrupts: invariants::InterruptLedger::default(),
            notes: Vec::new(),
        })
    }

    /// The simulated world.
    pub fn world(&self) -> std::sync::MutexGuard<'_, SimCluster> {
        self.cluster.world()
    }

    fn elapsed(&self) -> Duration {
        crate::sim::util::since(self.start, self.world().now())
    }

    /// One reconcile pass at the current virtual time.
    pub fn pass(&mut self) {
        self.passes += 1;
        let head = self.repo.head().clone();
        if self.seen_commit.as_deref() != Some(head.id.as_str()) {
            self.seen_commit = Some(head.id.clone());
            match desired_of(&head, self.previous.as_ref()) {
                Ok((mut desired, previous)) => {
                    desired.approvals = self.repo.approvals_in_force(&head, &desired.nodewrights);
                    self.desired = Some(desired);
                    self.previous = Some(previous);
                }
                Err(problems) => self.notes.push(format!(
                    "commit {} is invalid; keeping the last valid desired state: {}",
                    &head.id[..8],
                    problems.join("; ")
                )),
            }
        }
        if let Some(desired) = &self.desired
            && let Err(e) = block_on(self.cluster.apply_desired(desired))
        {
            self.notes.push(format!("applying desired state: {e}"));
        }
        let mut snapshot = self.last_snapshot.take().unwrap_or_default();
        self.cluster.refresh_snapshot(&mut snapshot);
        #[cfg(debug_assertions)]
        self.check_snapshot_is_fresh(&snapshot);
        crate::controller::track_failure_targets(&mut self.memory, &snapshot);
        snapshot.memory = self.memory.clone();
        snapshot.approvals = self
            .desired
            .as_ref()
            .map(|d| d.approvals.clone())
            .unwrap_or_default();
        let plan = (self.hooks.reconcile)(&snapshot, &self.settings, &mut self.cache);
        let mut evictions = crate::controller::EvictionAttempts::default();
        let mut failed = Vec::new();
        let cluster = &self.cluster;
        block_on(crate::plan::execute(
            plan,
            crate::settings::constants::WRITES_IN_FLIGHT,
            |action| async move {
                let result = cluster.execute(&action).await;
                (action, result)
            },
            |_, action, executed| {
                evictions.observe(action, executed);
                if let Executed::Ran(Err(e)) = executed {
                    failed.push(format!("{}: {e}", action.kind()));
                }
            },
        ));
        let at = fmt_duration(self.elapsed());
        self.notes
            .extend(failed.into_iter().map(|f| format!("+{at} {f}")));
        evictions.record(&mut self.memory, snapshot.now);
        self.last_snapshot = Some(snapshot);
        self.check_invariants();
    }

    /// Debug builds prove the incremental snapshot equals a fresh one through the port (a
    /// write that forgot to move a resourceVersion would show up here in every test).
    #[cfg(debug_assertions)]
    fn check_snapshot_is_fresh(&self, refreshed: &Snapshot) {
        let fresh = match block_on(self.cluster.snapshot()) {
            Ok(s) => s,
            Err(e) => panic!("snapshot through the Cluster port failed: {e}"),
        };
        assert!(
            fresh.nodes == refreshed.nodes
                && fresh.pods == refreshed.pods
                && fresh.jobs == refreshed.jobs
                && fresh.config_maps == refreshed.config_maps
                && fresh.nodewrights == refreshed.nodewrights
                && fresh.policies == refreshed.policies,
            "the incremental snapshot diverged from the world: an object changed without a new resourceVersion"
        );
    }

    fn check_invariants(&mut self) {
        let mut world = self.cluster.world();
        let at = crate::sim::util::since(self.start, world.now());
        #[cfg(debug_assertions)]
        {
            let scanned: Vec<&String> = (world.jobs().iter())
                .filter(|(_, job)| !crate::sim::jobs_is_finished(job))
                .map(|(name, _)| name)
                .collect();
            let indexed: Vec<&String> = world.unfinished_jobs().map(|(name, _)| name).collect();
            assert_eq!(
                indexed, scanned,
                "the world's unfinished Jobs are not the Jobs it holds unfinished"
            );
        }
        let mut found: Vec<String> = invariants::over_budget(&world);
        found.extend(invariants::duplicate_jobs(&world));
        found.extend(self.interrupts.observe(&world));
        found.extend(
            world
                .take_violations()
                .into_iter()
                .map(|v| format!("invariant {}: {}", v.invariant, v.message)),
        );
        drop(world);
        for v in found {
            let line = format!("+{}: {v}", fmt_duration(at));
            if !self.violations.contains(&line) {
                self.violations.push(line);
            }
        }
    }

    /// Lets passes and the cluster run until `until`; with `stop`, returns early (true) as soon
    /// as `stop` holds after a pass.
    fn run_until(
        &mut self,
        until: Timestamp,
        mut stop: Option<&mut dyn FnMut(&Self) -> bool>,
    ) -> bool {
        let interval = self
            .settings
            .reconcile_interval()
            .max(Duration::from_millis(1));
        while self.next_pass <= until {
            let at = self.next_pass;
            self.cluster.world().advance_to(at);
            self.pass();
            self.next_pass = add(at, interval);
            if let Some(stop) = stop.as_mut()
                && stop(self)
            {
                return true;
            }
            if !self.violations.is_empty() {
                return false;
            }
        }
        self.cluster.world().advance_to(until);
        false
    }

    /// Lets passes and the cluster run for `d` of virtual time (benchmarks, embedding).
    pub fn run_for(&mut self, d: Duration) {
        let until = add(self.cluster.world().now(), d);
        self.run_until(until, None);
    }

    /// Passes run so far.
    pub fn passes(&self) -> u64 {
        self.passes
    }

    /// Executes one step; `Err` carries the failure text.
    pub fn step(&mut self, step: &Step) -> Result<String, String> {
        let passes_before = self.passes;
        let result = self.step_inner(step);
        self.check_invariants();
        if !self.violations.is_empty() {
            let mut text = String::from("invariant violated:\n");
            for v in self.violations.drain(..) {
                text.push_str(&format!("  {v}\n"));
            }
            return Err(text);
        }
        let notes = std::mem::take(&mut self.notes);
        const SHOWN: usize = 3;
        let summary = |shown: usize| {
            let mut text = notes
                .iter()
                .take(shown)
                .cloned()
                .collect::<Vec<_>>()
                .join(" | ");
            if notes.len() > shown {
                text.push_str(&format!(" | … and {} more", notes.len() - shown));
            }
            text
        };
        match result {
            Ok(mut detail) => {
                let passes = self.passes - passes_before;
                if passes > 0 {
                    detail.push_str(&format!(" ({passes} passes)"));
                }
                if !notes.is_empty() {
                    detail.push_str(&format!(" [notes: {}]", summary(SHOWN)));
                }
                Ok(detail)
            }
            // A failing step shows what went wrong along the way (a rejected commit is the usual
            // reason an expectation never holds), invalid commits first.
            Err(detail) => {
                let mut detail = detail.trim_end().to_string();
                for rejected in notes
                    .iter()
                    .filter(|n| n.starts_with("commit "))
                    .take(SHOWN)
                {
                    detail.push_str(&format!("\nnote: {rejected}"));
                }
                if notes.iter().any(|n| !n.starts_with("commit ")) {
                    detail.push_str(&format!("\nnotes: {}", summary(SHOWN)));
                }
                Err(detail)
            }
        }
    }

    fn step_inner(&mut self, step: &Step) -> Result<String, String> {
        let now = self.cluster.world().now();
        match step {
            Step::Advance(d) => {
                self.run_until(add(now, *d), None);
                Ok(format!("advanced {}", fmt_duration(*d)))
            }
            Step::Until { expect, within } => {
                let deadline = add(now, *within);
                let settings = self.settings.clone();
                let hooks = self.hooks;
                let mut last: Option<Mismatch> = None;
                let mut check = |run: &Self| -> bool {
                    let world = run.cluster.world();
                    match expect::check(expect, &world, &settings, hooks) {
                        Ok(()) => true,
                        Err(m) => {
                            last = Some(m);
                            false
                        }
                    }
                };
                if check(self) {
                    return Ok("held at once".into());
                }
                let start = self.elapsed();
                if self.run_until(deadline, Some(&mut check)) {
                    return Ok(format!(
                        "held after {}",
                        fmt_duration(self.elapsed().saturating_sub(start))
                    ));
                }
                if !self.violations.is_empty() {
                    return Err("stopped by an invariant violation".into());
                }
                let detail = last.map(|m| m.render()).unwrap_or_default();
                Err(format!(
                    "did not hold within {}\n{detail}",
                    fmt_duration(*within)
                ))
            }
            Step::Expect(expect) => {
                let world = self.cluster.world();
                expect::check(expect, &world, &self.settings, self.hooks)
                    .map(|()| String::new())
                    .map_err(|m| m.render())
            }
            Step::Commit(c) => {
                let mut files = self.repo.head().files.clone();
                for path in &c.delete {
                    if files.remove(path).is_none() {
                        return Err(format!(
                            "commit deletes {path}, which is not in the repository"
                        ));
                    }
                }
                files.extend(c.files.clone());
                let message = if c.message.is_empty() {
                    "commit"
                } else {
                    c.message.as_str()
                };
                let id = self.repo.commit(message, files).id.clone();
                let short = message.lines().next().unwrap_or_default();
                self.cluster
                    .world()
                    .record_history(format!("commit {short}"));
                Ok(format!("commit {} {short}", &id[..8]))
            }
            Step::Node(n) => self.node_step(n),
            Step::Add(objects) => {
                let mut world = self.cluster.world();
                add_objects(&mut world, objects)?;
                Ok(String::new())
            }
            Step::Delete(d) => {
                let mut world = self.cluster.world();
                for key in &d.pods {
                    let (ns, name) = key
                        .split_once('/')
                        .ok_or_else(|| format!("pod {key:?} must be written namespace/name"))?;
                    if !world.delete_pod(ns, name, None) {
                        return Err(format!("pod {key} does not exist"));
                    }
                }
                for key in &d.pdbs {
                    let (ns, name) = key
                        .split_once('/')
                        .ok_or_else(|| format!("pdb {key:?} must be written namespace/name"))?;
                    if !world.delete_pdb(ns, name) {
                        return Err(format!("pdb {key} does not exist"));
                    }
                }
                Ok(String::new())
            }
            Step::Annotate(a) => {
                if self
                    .cluster
                    .world()
                    .annotate_nodewright(&a.nodewright, &a.set, &a.remove)
                {
                    Ok(String::new())
                } else {
                    Err(format!("NodeWright {} does not exist", a.nodewright))
                }
            }
            Step::Cli { args, exit } => {
                let Some(verb) = args.first() else {
                    return Err("cli step without arguments".into());
                };
                let Some(f) = self.hooks.verbs.get(verb.as_str()) else {
                    let known: Vec<&str> = self.hooks.verbs.keys().copied().collect();
                    return Err(format!(
                        "unknown operational verb `{verb}` (nodewright {}): the simulator's verb table has {}",
                        args.join(" "),
                        if known.is_empty() {
                            "no verbs wired yet".to_string()
                        } else {
                            known.join(", ")
                        }
                    ));
                };
                let result = f(&mut self.cluster.world(), args, &self.settings);
                // A verb (rerun, reset) may legitimately start an interrupt again.
                self.interrupts.forgive();
                if result.exit == *exit {
                    Ok(format!("exit {}", result.exit))
                } else {
                    Err(format!(
                        "nodewright {} exited {} (expected {exit})\n{}",
                        args.join(" "),
                        result.exit,
                        result.output
                    ))
                }
            }
            Step::RestartReconciler => {
                self.memory = Memory::default();
                self.cache = StateCache::new();
                self.desired = None;
                self.previous = None;
                self.seen_commit = None;
                Ok("in-memory state dropped".into())
            }
            Step::FailApi { rate, duration } => {
                self.cluster.world().fail_api(FaultWindow {
                    rate: *rate,
                    until: add(now, *duration),
                });
                Ok(format!(
                    "{:.0}% of writes fail for {}",
                    rate * 100.0,
                    fmt_duration(*duration)
                ))
            }
        }
    }

    fn node_step(&mut self, n: &super::format::NodeStep) -> Result<String, String> {
        let mut world = self.cluster.world();
        if !world.nodes().contains_key(&n.name) {
            return Err(format!("node {} does not exist", n.name));
        }
        if n.delete {
            world.delete_node(&n.name);
            return Ok("deleted".into());
        }
        world.update_node(&n.name, |node| {
            let labels = node.metadata.labels.get_or_insert_with(BTreeMap::new);
            labels.extend(n.labels.clone());
            for k in &n.remove_labels {
                labels.remove(k);
            }
            let annotations = node.metadata.annotations.get_or_insert_with(BTreeMap::new);
            annotations.extend(n.annotations.clone());
            for k in &n.remove_annotations {
                annotations.remove(k);
            }
            let spec = node.spec.get_or_insert_with(Default::default);
            let taints = spec.taints.get_or_insert_with(Vec::new);
            taints.retain(|t| !n.remove_taints.contains(&t.key));
            for t in &n.taints {
                taints.retain(|x| !(x.key == t.key && x.effect == t.effect));
                taints.push(t.clone());
            }
            if let Some(u) = n.unschedulable {
                spec.unschedulable = u.then_some(true);
            }
        });
        if n.reboot {
            world.reboot(&n.name, DEFAULT_REBOOT_TAKES);
        }
        Ok(String::new())
    }
}

/// Adds a fleet description (a scenario's `cluster:` block) to a simulated world.
pub fn add_objects(world: &mut SimCluster, spec: &ClusterSpec) -> Result<(), String> {
    let node = |name: String, labels, annotations, taints: Vec<Taint>, unschedulable| NodeInput {
        name,
        labels,
        annotations,
        taints,
        unschedulable,
    };
    for entry in &spec.nodes {
        match entry {
            NodeEntry::Node(n) => world.add_node(node(
                n.name.clone(),
                n.labels.clone(),
                n.annotations.clone(),
                n.taints.clone(),
                n.unschedulable,
            )),
            NodeEntry::Generate { generate: g } => {
                for i in 0..g.count {
                    world.add_node(node(
                        format!("{}{i}", g.name_prefix),
                        g.labels.clone(),
                        g.annotations.clone(),
                        g.taints.clone(),
                        g.unschedulable,
                    ));
                }
            }
        }
    }
    for p in &spec.pods {
        let owner = match p.owner.as_deref() {
            None => OwnerKind::ReplicaSet,
            Some(text) => OwnerKind::parse(text).ok_or_else(|| format!("pod {}: unknown owner {text:?} (ReplicaSet, StatefulSet, DaemonSet, Job, none)", p.name))?,
        };
        world.add_workload_pod(WorkloadPodInput {
            name: p.name.clone(),
            namespace: p.namespace.clone(),
            node: p.node.clone(),
            labels: p.labels.clone(),
            owner,
            tolerations: p.tolerations.clone(),
            empty_dir: p.empty_dir,
            run_for: p.run_for.map(|d| d.0),
            grace_seconds: p
                .termination_grace_period
                .map(|d| d.0.as_secs_f64().ceil() as i64),
        });
    }
    for p in &spec.pdbs {
        if p.min_available.is_some() == p.max_unavailable.is_some() {
            return Err(format!(
                "pdb {}: set exactly one of minAvailable and maxUnavailable",
                p.name
            ));
        }
        world.add_pdb(PdbInput {
            name: p.name.clone(),
            namespace: p.namespace.clone(),
            selector: p.selector.clone(),
            min_available: p.min_available.clone(),
            max_unavailable: p.max_unavailable.clone(),
        });
    }
    Ok(())
}

/// Runs a parsed scenario to completion (stopping at the first failing step).
pub fn run_scenario(scenario: &Scenario, file: &str, hooks: &Hooks) -> Report {
    let mut report = Report {
        file: file.to_string(),
        name: scenario.name.clone(),
        steps: Vec::new(),
        setup_error: None,
        passes: 0,
    };
    let mut run = match Run::new(scenario, hooks) {
        Ok(run) => run,
        Err(e) => {
            report.setup_error = Some(e);
            return report;
        }
    };
    for (i, step) in scenario.steps.iter().enumerate() {
        let result = run.step(step);
        let at = run.elapsed();
        let passed = result.is_ok();
        report.steps.push(StepReport {
            index: i + 1,
            kind: step.kind(),
            at,
            passed,
            detail: result.unwrap_or_else(|e| e),
        });
        if !passed {
            break;
        }
    }
    report.passes = run.passes;
    report
}

/// Reads, parses and runs a scenario file.
pub fn run_file(path: &std::path::Path, hooks: &Hooks) -> Report {
    let file = path.display().to_string();
    let scenario = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read: {e}"))
        .and_then(|text| super::format::parse(&file, &text).map_err(|e| e.to_string()));
    match scenario {
        Ok(s) => run_scenario(&s, &file, hooks),
        Err(e) => Report {
            file: file.clone(),
            name: file,
            steps: Vec::new(),
            setup_error: Some(e),
            passes: 0,
        },
    }
}

/// Every scenario file under the paths: files as given, directories walked for `.yaml`/`.yml`
/// in name order.
pub fn scenario_files(paths: &[std::path::PathBuf]) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut entries: Vec<_> = std::fs::read_dir(p)?
                .filter_map(Result::ok)
                .map(|e| e.path())
                .collect();
            entries.sort();
            for e in entries {
                if e.is_dir() {
                    out.extend(scenario_files(&[e])?);
                } else if e.extension().is_some_and(|x| x == "yaml" || x == "yml") {
                    out.push(e);
                }
            }
        } else if p.exists() {
            out.push(p.clone());
        } else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{}: no such file or directory", p.display()),
            ));
        }
    }
    Ok(out)
}
