//! Benchmark (not a test): one `reconcile` pass over 10,000 nodes and 5 NodeWrights × 10
//! packages in mixed states (issue 4). Prints the per-pass time; target ≤ 10 ms on one core.
//!
//! The headline figure is a steady pass: the same snapshot, with the cache the last pass left
//! (as the controller runs every pass). Also prints, per pass, the allocations and bytes
//! allocated (a counting global allocator) and the bytes still live after the plan is dropped,
//! then (with `--features step-timing`) a per-step time breakdown, and three passes after a
//! change, each with the cache the last pass left: a few nodes, Jobs and pods replaced by new
//! objects; a Job and its pods gone and another joined in front (shifting the positions of
//! most Jobs and pods); a node gone near the front (shifting most nodes). Then a pass without
//! the cache. Last, rollout passes: a simulated 10,000-node rollout run pass by pass, printing
//! each pass in which at least 5 % of the nodes start or finish a stage (target ≤ 50 ms).
//! Figures only, nothing is asserted.
//!
//! Run: `cargo bench -p nodewright-reconciler --bench engine_pass`
//! (`ENGINE_BENCH_PASSES=N` sets the number of passes, default 10; for profilers,
//! `ENGINE_BENCH_WARM_ONLY=1` runs steady passes only, through `steady_pass`; add
//! `ENGINE_BENCH_CHANGED=1`, `ENGINE_BENCH_SHIFTED=1` or `ENGINE_BENCH_DEPARTED=1` for the
//! passes after each change; `ENGINE_BENCH_ROLLOUT_ONLY=1` runs the rollout passes alone;
//! with `--features step-timing`, `ENGINE_BENCH_CORE_ONLY=1` runs passes without their
//! package-lane steps).

// The counting allocator implements `GlobalAlloc`, an unsafe trait; it only forwards to
// mimalloc.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use nodewright_reconciler::cluster::Desired;
#[cfg(feature = "step-timing")]
use nodewright_reconciler::engine::context::{Flow, NodeWorkResult, PassCtx};
#[cfg(feature = "step-timing")]
use nodewright_reconciler::engine::{Hooks, reconcile_with, reconcile_with_cache};
use nodewright_reconciler::engine::{StateCache, reconcile, reconcile_cached};
use nodewright_reconciler::settings::Settings;
use nodewright_reconciler::sim::{ModelRunner, NodeInput, PackageModels, SimCluster};
use nodewright_reconciler::snapshot::{Memory, Snapshot};
use nodewright_schema::{
    InterruptionBudget, NodeState, NodeWright, NodeWrightSpec, Package, PackageStatus, Stage,
    State, Status, keys,
};

/// Counts every allocation (and reallocation) of the process, and the bytes still live, so
/// the bench can show what one pass allocates and that nothing accumulates across passes.
/// Memory comes from mimalloc, the allocator the `nodewright` binary runs with, so pass
/// times are those of the product.
struct Counting;

static INNER: mimalloc::MiMalloc = mimalloc::MiMalloc;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);
static LIVE: AtomicI64 = AtomicI64::new(0);

// SAFETY: every method forwards to mimalloc with the caller's arguments unchanged; the
// counters are plain atomics and never touch the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: forwarded as received (see the impl).
        unsafe { INNER.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: forwarded as received (see the impl).
        unsafe { INNER.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: forwarded as received (see the impl).
        unsafe { INNER.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        LIVE.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        // SAFETY: forwarded as received (see the impl).
        unsafe { INNER.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocation counters at one instant.
#[derive(Clone, Copy)]
struct AllocMark {
    allocs: u64,
    bytes: u64,
    live: i64,
}

fn alloc_mark() -> AllocMark {
    AllocMark {
        allocs: ALLOCS.load(Ordering::Relaxed),
        bytes: BYTES.load(Ordering::Relaxed),
        live: LIVE.load(Ordering::Relaxed),
    }
}

const NODES: usize = 10_000;
const NODEWRIGHTS: usize = 5;
const PACKAGES: usize = 10;

fn nodewrights() -> Vec<NodeWright> {
    let mut nodewrights = Vec::new();
    for w in 0..NODEWRIGHTS {
        let name = format!("nw{w}");
        let packages: BTreeMap<String, Package> = (0..PACKAGES)
            .map(|p| {
                (
                    format!("pkg{p}"),
                    Package {
                        version: "1.0.0".into(),
                        image: format!("example/pkg{p}"),
                        ..Package::default()
                    },
                )
            })
            .collect();
        let mut nw = NodeWright::new(
            &name,
            NodeWrightSpec {
                priority: 100 + w as i32,
                node_selectors: Some(LabelSelector {
                    match_labels: Some([("pool".to_string(), format!("p{}", w % 2))].into()),
                    match_expressions: None,
                }),
                interruption_budget: Some(InterruptionBudget {
                    percent: Some(10),
                    count: None,
                }),
                packages: Some(packages),
                ..NodeWrightSpec::default()
            },
        );
        nw.metadata.generation = Some(1);
        nodewrights.push(nw);
    }
    nodewrights
}

/// Node annotations in mixed states: most nodes complete, some part-way, some untouched.
fn node_annotations(i: usize) -> BTreeMap<String, String> {
    let mut annotations = BTreeMap::new();
    for w in 0..NODEWRIGHTS {
        if w % 2 != i % 2 {
            continue;
        }
        let name = format!("nw{w}");
        let done = match i % 10 {
            0 => 0,
            1..=2 => 5,
            _ => PACKAGES,
        };
        if done == 0 {
            continue;
        }
        let mut state = NodeState::default();
        for p in 0..done {
            state.upsert(PackageStatus::new(
                &format!("pkg{p}"),
                "1.0.0",
                &format!("example/pkg{p}"),
                Stage::Config,
                State::Complete,
            ));
        }
        let status = if done == PACKAGES {
            Status::Complete
        } else {
            Status::Waiting
        };
        annotations.insert(keys::node_state(&name), state.to_annotation());
        annotations.insert(keys::status(&name), status.as_str().to_string());
        annotations.insert(keys::node_version(&name), "v0.1.0".to_string());
    }
    annotations
}

/// A simulated cluster a few passes into the rollout (Jobs running, batches admitted).
fn world(settings: &Settings) -> Snapshot {
    let models =
        PackageModels(serde_yaml::from_str("{}").expect("empty package models are valid YAML"));
    let mut sim = SimCluster::new("nodewright", Box::new(ModelRunner::new(models)), 1);
    for i in 0..NODES {
        sim.add_node(NodeInput {
            name: format!("node-{i:05}"),
            labels: BTreeMap::from([("pool".to_string(), format!("p{}", i % 2))]),
            annotations: node_annotations(i),
            ..NodeInput::default()
        });
    }
    sim.apply_desired(&Desired {
        nodewrights: nodewrights(),
        policies: Vec::new(),
        commit: "bench".into(),
        ..Default::default()
    });
    let mut cache = StateCache::new();
    for _ in 0..12 {
        let snap = sim.snapshot(Memory::default());
        let plan = reconcile_cached(&snap, settings, &mut cache);
        for a in &plan.actions {
            let _ = sim.execute(a);
        }
        sim.advance(Duration::from_secs(2));
    }
    sim.snapshot(Memory::default())
}

/// How many nodes, Jobs and pods change between the passes of the "after a change" figure.
const CHURN: usize = 10;

/// `snap` with `count` nodes, Jobs and pods from position `from` (wrapping) replaced by new
/// objects whose resourceVersion moved.
fn churned(snap: &Snapshot, from: usize, count: usize) -> Snapshot {
    fn moved(meta: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) {
        let version = meta.resource_version.as_deref().unwrap_or("0");
        meta.resource_version = Some(format!("{version}-next"));
    }
    let mut out = snap.clone();
    for k in from..from + count {
        let at = k % out.nodes.len();
        let mut node = (*out.nodes[at]).clone();
        moved(&mut node.metadata);
        out.nodes[at] = std::sync::Arc::new(node);
        if !out.jobs.is_empty() {
            let at = k % out.jobs.len();
            let mut job = (*out.jobs[at]).clone();
            moved(&mut job.metadata);
            out.jobs[at] = std::sync::Arc::new(job);
        }
        if !out.pods.is_empty() {
            let at = k % out.pods.len();
            let mut pod = (*out.pods[at]).clone();
            moved(&mut pod.metadata);
            out.pods[at] = std::sync::Arc::new(pod);
        }
    }
    out
}

/// `snap` after a stage Job finished and the next one started: the Job at a position near
/// the back leaves with its pods, and a new Job with one pod joins near the front, so most
/// Jobs and pods sit one position away from where the last pass had them (an adapter lists
/// pods by name, so one that joins moves those after it).
fn shifted(snap: &Snapshot, pass: usize) -> Snapshot {
    fn owner(pod: &k8s_openapi::api::core::v1::Pod) -> Option<&String> {
        pod.metadata
            .labels
            .as_ref()?
            .get(keys::JOB_CONTROLLER_UID_LABEL)
    }
    let mut out = snap.clone();
    if out.jobs.len() < 2 {
        return out;
    }
    let at = out.jobs.len() - 1 - pass % (out.jobs.len() / 2);
    let gone = out.jobs.remove(at);
    let uid = gone.metadata.uid.clone();
    let template = out
        .pods
        .iter()
        .find(|p| owner(p) == uid.as_ref())
        .map(|p| (**p).clone());
    out.pods.retain(|p| owner(p) != uid.as_ref());
    let new_uid = format!("bench-next-{pass}");
    let mut job = (*gone).clone();
    let name = job.metadata.name.clone().unwrap_or_default();
    job.metadata.name = Some(format!("{name}-next-{pass}"));
    job.metadata.uid = Some(new_uid.clone());
    out.jobs.insert(pass % 16, std::sync::Arc::new(job));
    if let Some(mut pod) = template {
        let name = pod.metadata.name.clone().unwrap_or_default();
        pod.metadata.name = Some(format!("{name}-next-{pass}"));
        pod.metadata.uid = Some(format!("{new_uid}-pod"));
        if let Some(labels) = pod.metadata.labels.as_mut() {
            labels.insert(keys::JOB_CONTROLLER_UID_LABEL.to_string(), new_uid);
        }
        let at = (pass % 16).min(out.pods.len());
        out.pods.insert(at, std::sync::Arc::new(pod));
    }
    out
}

/// `snap` after a node near the front left the fleet, so most nodes shift position.
fn departed(snap: &Snapshot, pass: usize) -> Snapshot {
    let mut out = snap.clone();
    if !out.nodes.is_empty() {
        let at = (pass * 7) % out.nodes.len().min(100);
        out.nodes.remove(at);
    }
    out
}

/// `snap` after a relist: every node, Job and pod a new object of the same uid and
/// resourceVersion, as a watch that fell behind the API server's log hands them over.
fn relisted(snap: &Snapshot, _pass: usize) -> Snapshot {
    fn renewed<T: Clone>(objects: &mut [std::sync::Arc<T>]) {
        for object in objects {
            *object = std::sync::Arc::new((**object).clone());
        }
    }
    let mut out = snap.clone();
    renewed(&mut out.nodes);
    renewed(&mut out.jobs);
    renewed(&mut out.pods);
    out
}

/// The median wall time of `runs` passes, each over the snapshot `change` makes from the one
/// before (the first from `snap`) and with the cache the last pass left. The snapshots are
/// made before the clock starts.
fn median_after(
    snap: &Snapshot,
    settings: &Settings,
    cache: &mut StateCache,
    runs: usize,
    change: impl Fn(&Snapshot, usize) -> Snapshot,
) -> Duration {
    let mut snapshots: Vec<Snapshot> = Vec::with_capacity(runs);
    for pass in 0..runs {
        let before = snapshots.last().unwrap_or(snap);
        snapshots.push(change(before, pass));
    }
    let mut walls: Vec<Duration> = snapshots
        .iter()
        .map(|s| clocked(|| steady_pass(s, settings, cache)).1)
        .collect();
    walls.sort();
    walls[runs / 2]
}

/// Nanoseconds spent in each package-lane step, summed over the passes of one measurement.
#[cfg(feature = "step-timing")]
static PHASE_NANOS: [AtomicU64; PHASES.len()] = [const { AtomicU64::new(0) }; PHASES.len()];
/// Allocations made in each package-lane step, summed likewise.
#[cfg(feature = "step-timing")]
static PHASE_ALLOCS: [AtomicU64; PHASES.len()] = [const { AtomicU64::new(0) }; PHASES.len()];

/// The package-lane steps, in pass order (`engine::Hooks`).
#[cfg(feature = "step-timing")]
const PHASES: [&str; 9] = [
    "handlers (Job + Pod evidence)",
    "refresh_conditions",
    "finalizer",
    "suspend_jobs",
    "sweep",
    "node_metadata",
    "package_configmaps",
    "resume_jobs",
    "work_node (all picked nodes)",
];

#[cfg(feature = "step-timing")]
fn timed<T>(phase: usize, f: impl FnOnce() -> T) -> T {
    let allocs = ALLOCS.load(Ordering::Relaxed);
    let start = Instant::now();
    let out = f();
    PHASE_NANOS[phase].fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
    PHASE_ALLOCS[phase].fetch_add(ALLOCS.load(Ordering::Relaxed) - allocs, Ordering::Relaxed);
    out
}

/// CPU time of this thread (`/proc/thread-self/schedstat`, nanoseconds on CPU), so the figure
/// is not inflated when other work shares the cores; `None` where unavailable.
fn thread_cpu() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let nanos: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(nanos))
}

/// Wall and CPU time of `f`.
fn clocked<T>(f: impl FnOnce() -> T) -> (T, Duration, Option<Duration>) {
    let cpu = thread_cpu();
    let start = Instant::now();
    let out = f();
    let wall = start.elapsed();
    let cpu = cpu.zip(thread_cpu()).map(|(a, b)| b.saturating_sub(a));
    (out, wall, cpu)
}

/// The standard steps, each wrapped in a timer (hooks are plain `fn`s, so one wrapper each).
#[cfg(feature = "step-timing")]
fn timed_hooks() -> Hooks {
    fn handlers(ctx: &mut PassCtx<'_>) {
        timed(0, || (Hooks::STANDARD.handlers)(ctx))
    }
    fn refresh_conditions(ctx: &mut PassCtx<'_>, nw: usize) {
        timed(1, || (Hooks::STANDARD.refresh_conditions)(ctx, nw))
    }
    fn finalizer(ctx: &mut PassCtx<'_>, nw: usize) -> Flow {
        timed(2, || (Hooks::STANDARD.finalizer)(ctx, nw))
    }
    fn suspend_jobs(ctx: &mut PassCtx<'_>, nw: usize) {
        timed(3, || (Hooks::STANDARD.suspend_jobs)(ctx, nw))
    }
    fn sweep(ctx: &mut PassCtx<'_>, nw: usize) {
        timed(4, || (Hooks::STANDARD.sweep)(ctx, nw))
    }
    fn node_metadata(ctx: &mut PassCtx<'_>, nw: usize) {
        timed(5, || (Hooks::STANDARD.node_metadata)(ctx, nw))
    }
    fn package_configmaps(ctx: &mut PassCtx<'_>, nw: usize) {
        timed(6, || (Hooks::STANDARD.package_configmaps)(ctx, nw))
    }
    fn resume_jobs(ctx: &mut PassCtx<'_>, nw: usize) {
        timed(7, || (Hooks::STANDARD.resume_jobs)(ctx, nw))
    }
    fn work_node(ctx: &mut PassCtx<'_>, nw: usize, node: usize) -> NodeWorkResult {
        timed(8, || (Hooks::STANDARD.work_node)(ctx, nw, node))
    }
    Hooks {
        handlers,
        refresh_conditions,
        finalizer,
        suspend_jobs,
        sweep,
        node_metadata,
        package_configmaps,
        resume_jobs,
        work_node,
    }
}

/// The variant name of an action (its `Debug` up to the first delimiter).
fn action_kind(action: &nodewright_reconciler::plan::Action) -> String {
    let text = format!("{action:?}");
    text.split(['(', ' ', '{'])
        .next()
        .unwrap_or_default()
        .to_string()
}

/// One warm pass, kept out of line so an instruction counter can collect exactly the steady
/// passes (`valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*steady_pass*'`):
/// on this shared machine, CPU time swings by 2x, instruction counts do not.
#[inline(never)]
fn steady_pass(snap: &Snapshot, settings: &Settings, cache: &mut StateCache) {
    drop(std::hint::black_box(reconcile_cached(
        snap, settings, cache,
    )));
}

/// The rollout case's fleet: the issue-27 measurement (two packages, the driver with a reboot,
/// budget 10 %) over `NODES` nodes that all carry the selected label.
const ROLLOUT_NODEWRIGHT: &str = r#"
apiVersion: nodewright.nvidia.com/v1alpha1
kind: NodeWright
metadata: {name: gpu, generation: 1}
spec:
  nodeSelectors: {matchLabels: {nvidia.com/gpu.present: "true"}}
  interruptionBudget: {percent: 10}
  packages:
    driver:
      version: 570.124.6
      image: example/driver
      interrupt: {type: reboot}
    tuning:
      version: 1.4.0
      image: example/tuning
      configMap: {sysctl.conf: "vm.max_map_count=262144"}
"#;

/// A rollout pass: the simulated fleet runs as a controller would run it (a pass every
/// `reconcileInterval`, the plan executed, the cache carried), and the passes in which at
/// least 5 % of the nodes start or finish a stage are printed with their wall time,
/// allocations and actions. Package steps take the same time on every node, so a batch
/// (10 % of the fleet) finishes a stage and starts the next one in the same pass.
fn rollout_passes(settings: &Settings, shown: usize) {
    let models = PackageModels(
        serde_yaml::from_str(
            "example/driver: {default: {duration: 2s}, rebootTakes: 20s}\n\
             example/tuning: {default: {duration: 1s}}",
        )
        .expect("the rollout's package models are valid YAML"),
    );
    let nodewright: NodeWright =
        serde_yaml::from_str(ROLLOUT_NODEWRIGHT).expect("the rollout's NodeWright is valid YAML");
    let mut sim = SimCluster::new("nodewright", Box::new(ModelRunner::new(models)), 1);
    for i in 0..NODES {
        sim.add_node(NodeInput {
            name: format!("gpu-{i}"),
            labels: BTreeMap::from([("nvidia.com/gpu.present".to_string(), "true".to_string())]),
            ..NodeInput::default()
        });
    }
    sim.apply_desired(&Desired {
        nodewrights: vec![nodewright],
        policies: Vec::new(),
        commit: "bench".into(),
        ..Default::default()
    });
    let interval = settings.reconcile_interval();
    let mut cache = StateCache::new();
    let mut snap = Snapshot::default();
    let mut seen = 0;
    let mut walls = Vec::new();
    println!(
        "rollout pass: {NODES} nodes, 1 NodeWright x 2 packages (one reboots), budget 10 %; passes in which >= {} nodes start or finish a stage:",
        NODES / 20
    );
    println!("  pass   wall ms   allocations   actions   nodes acted on   Jobs   pods");
    for pass in 1..=2_000 {
        sim.refresh_snapshot(&mut snap);
        let before = alloc_mark();
        let (plan, wall, _) = clocked(|| reconcile_cached(&snap, settings, &mut cache));
        let allocs = alloc_mark().allocs - before.allocs;
        // The nodes, Jobs and pods the pass let go of are freed outside it, as the controller
        // frees them once the plan's writes are out.
        drop(cache.take_released());
        let acted: std::collections::BTreeSet<&str> = plan
            .actions
            .iter()
            .filter_map(|a| match a {
                nodewright_reconciler::plan::Action::PatchNode(p) if !p.node_state.is_empty() => {
                    Some(p.node.as_str())
                }
                _ => None,
            })
            .collect();
        if acted.len() >= NODES / 20 {
            println!(
                "  {pass:>4} {:>9.2} {allocs:>13} {:>9} {:>16} {:>6} {:>6}",
                ms(wall),
                plan.actions.len(),
                acted.len(),
                snap.jobs.len(),
                snap.pods.len()
            );
            walls.push(wall);
            seen += 1;
        }
        let converged = plan.actions.is_empty()
            && snap
                .nodewrights
                .iter()
                .all(|nw| nw.status.as_ref().and_then(|s| s.status) == Some(Status::Complete));
        for a in &plan.actions {
            let _ = sim.execute(a);
        }
        if seen >= shown || converged {
            break;
        }
        sim.advance(interval);
    }
    walls.sort();
    if let (Some(min), Some(max)) = (walls.first(), walls.last()) {
        println!(
            "rollout pass: median {:.2} ms, min {:.2} ms, max {:.2} ms wall over {} passes (target <= 50 ms)",
            ms(walls[walls.len() / 2]),
            ms(*min),
            ms(*max),
            walls.len()
        );
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let settings = Settings::default();
    let runs: usize = std::env::var("ENGINE_BENCH_PASSES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10)
        .max(1);
    if std::env::var_os("ENGINE_BENCH_ROLLOUT_ONLY").is_some() {
        rollout_passes(&settings, runs);
        return;
    }
    let build = Instant::now();
    let snap = world(&settings);
    eprintln!(
        "built a mid-rollout world in {:.1} s",
        build.elapsed().as_secs_f64()
    );
    if std::env::var_os("ENGINE_BENCH_WARM_ONLY").is_some() {
        // For profiling steady passes alone: one pass fills the cache, then `runs` more.
        let mut cache = StateCache::new();
        let plan = reconcile_cached(&snap, &settings, &mut cache);
        for action in &plan.actions {
            eprintln!("action: {}", action_kind(action));
        }
        // With `ENGINE_BENCH_CHANGED=1`, each pass runs after a change instead, and with
        // `ENGINE_BENCH_SHIFTED=1` after Jobs and pods joined and left, and with
        // `ENGINE_BENCH_DEPARTED=1` after a node left (see below).
        let changed = std::env::var_os("ENGINE_BENCH_CHANGED").is_some();
        let shift = std::env::var_os("ENGINE_BENCH_SHIFTED").is_some();
        let gone = std::env::var_os("ENGINE_BENCH_DEPARTED").is_some();
        let mut before = snap.clone();
        for pass in 0..runs {
            if changed {
                before = churned(&before, pass * CHURN, CHURN);
            }
            if shift {
                before = shifted(&before, pass);
            }
            if gone {
                before = departed(&before, pass);
            }
            steady_pass(&before, &settings, &mut cache);
        }
        return;
    }
    #[cfg(feature = "step-timing")]
    if std::env::var_os("ENGINE_BENCH_CORE_ONLY").is_some() {
        // For profiling the pass without its package-lane steps.
        for _ in 0..runs {
            let _ = reconcile_with(&snap, &settings, &Hooks::inert());
        }
        return;
    }

    // Full passes over the same snapshot, as the controller runs them: with the parse cache
    // carried from pass to pass (pass 1 starts empty). Time and allocations of each, and the
    // bytes still live once the plan is dropped, the cache included (growth there would be a
    // leak or an unbounded cache).
    println!(
        "engine pass: {NODES} nodes, {NODEWRIGHTS} NodeWrights x {PACKAGES} packages, {} Jobs, {} pods, {} ConfigMaps",
        snap.jobs.len(),
        snap.pods.len(),
        snap.config_maps.len()
    );
    println!(
        "  pass   wall ms    cpu ms   allocations        bytes   live bytes after (delta vs pass 1)"
    );
    let mut times = Vec::with_capacity(runs);
    let mut cpus = Vec::with_capacity(runs);
    let mut actions = 0;
    let mut first_live = None;
    let mut cache = StateCache::new();
    for pass in 1..=runs {
        let before = alloc_mark();
        let (plan, elapsed, cpu) = clocked(|| reconcile_cached(&snap, &settings, &mut cache));
        let during = alloc_mark();
        actions = plan.actions.len();
        drop(plan);
        let after = alloc_mark();
        let live = after.live - before.live;
        let base = *first_live.get_or_insert(after.live);
        println!(
            "  {pass:>4} {:>9.2} {:>9} {:>13} {:>12} {:>12} ({:+})",
            ms(elapsed),
            cpu.map_or("-".to_string(), |c| format!("{:.2}", ms(c))),
            during.allocs - before.allocs,
            during.bytes - before.bytes,
            live,
            after.live - base,
        );
        times.push(elapsed);
        cpus.extend(cpu);
    }
    cpus.sort();
    times.sort();

    // Where the time goes: the package-lane steps timed one by one; the rest is selection,
    // policy, status, conditions and write-back, plus building the pass context.
    #[cfg(feature = "step-timing")]
    step_breakdown(&snap, &settings, &mut cache, runs);
    #[cfg(not(feature = "step-timing"))]
    println!("  per-step breakdown: run with --features step-timing");
    // Passes after a change: each starts from the last pass's cache over a snapshot in which
    // `CHURN` nodes, Jobs and pods are new objects (a fresh allocation with its
    // resourceVersion moved, as an adapter hands over an object the API server rewrote).
    let after_change = median_after(&snap, &settings, &mut cache, runs, |before, pass| {
        churned(before, pass * CHURN, CHURN)
    });
    println!(
        "  after a change ({CHURN} nodes, {CHURN} Jobs and {CHURN} pods new objects each pass): median {:.2} ms wall",
        ms(after_change)
    );
    let after_shift = median_after(&snap, &settings, &mut cache, runs, shifted);
    println!(
        "  after a Job and its pods left and another joined in front (positions shifted): median {:.2} ms wall",
        ms(after_shift)
    );
    let after_departure = median_after(&snap, &settings, &mut cache, runs, departed);
    println!(
        "  after a node left (most nodes shifted): median {:.2} ms wall",
        ms(after_departure)
    );
    let after_relist = median_after(&snap, &settings, &mut cache, runs, relisted);
    println!(
        "  after a relist (every node, Job and pod a new object of the same version): median {:.2} ms wall",
        ms(after_relist)
    );
    let mut cold = Vec::with_capacity(runs);
    for _ in 0..runs {
        let (_, wall, cpu) = clocked(|| reconcile(&snap, &settings));
        cold.push(cpu.unwrap_or(wall));
    }
    cold.sort();
    println!(
        "  without the parse cache (every annotation parsed): median {:.2} ms CPU",
        ms(cold[runs / 2])
    );
    #[cfg(feature = "step-timing")]
    {
        let mut core = Vec::with_capacity(runs);
        for _ in 0..runs {
            let (_, wall, cpu) = clocked(|| reconcile_with(&snap, &settings, &Hooks::inert()));
            core.push(cpu.unwrap_or(wall));
        }
        core.sort();
        println!(
            "  without its package-lane steps (no cache): median {:.2} ms CPU",
            ms(core[runs / 2])
        );
    }
    let start = Instant::now();
    let mut entries = 0;
    for n in &snap.nodes {
        for (k, v) in n.metadata.annotations.iter().flatten() {
            if k.starts_with(&keys::node_state("")) {
                entries += NodeState::parse(v).map(|s| s.0.len()).unwrap_or(0);
            }
        }
    }
    println!(
        "  for scale: parsing every node-state annotation once ({entries} entries): {:.2} ms",
        ms(start.elapsed())
    );
    println!(
        "engine pass: median {:.2} ms, min {:.2} ms, max {:.2} ms wall per pass over {runs} passes \
         ({actions} actions; target <= 10 ms on one core)",
        ms(times[runs / 2]),
        ms(times[0]),
        ms(times[runs - 1]),
    );
    if !cpus.is_empty() {
        println!(
            "engine pass CPU time: median {:.2} ms, min {:.2} ms",
            ms(cpus[cpus.len() / 2]),
            ms(cpus[0])
        );
    }
    rollout_passes(&settings, runs);
}

/// Mean time and allocations of each package-lane step over `runs` warm passes, of building the
/// pass context, and of the rest of the pass.
#[cfg(feature = "step-timing")]
fn step_breakdown(snap: &Snapshot, settings: &Settings, cache: &mut StateCache, runs: usize) {
    for (n, a) in PHASE_NANOS.iter().zip(&PHASE_ALLOCS) {
        n.store(0, Ordering::Relaxed);
        a.store(0, Ordering::Relaxed);
    }
    let hooks = timed_hooks();
    let allocs = ALLOCS.load(Ordering::Relaxed);
    let start = Instant::now();
    for _ in 0..runs {
        let _ = reconcile_with_cache(snap, settings, &hooks, Some(&mut *cache));
    }
    let total = start.elapsed() / runs as u32;
    let total_allocs = (ALLOCS.load(Ordering::Relaxed) - allocs) / runs as u64;
    let allocs = ALLOCS.load(Ordering::Relaxed);
    let start = Instant::now();
    for _ in 0..runs {
        // The nodes' entries move into the pass and back out: hand them back, or the next
        // pass would start cold.
        let ctx = PassCtx::new_cached(snap, settings, Some(&mut *cache));
        drop(ctx.into_actions(Vec::new(), Some(&mut *cache)));
    }
    let ctx_build = start.elapsed() / runs as u32;
    let ctx_allocs = (ALLOCS.load(Ordering::Relaxed) - allocs) / runs as u64;
    let mut hooks_total = Duration::ZERO;
    let mut hooks_allocs = 0;
    println!(
        "  per-phase breakdown (mean of {runs} passes: {:.2} ms wall, {total_allocs} allocations per pass):",
        ms(total)
    );
    println!(
        "    {:<40} {:>9.2} ms {:>10} allocations",
        "build the pass context (and hand back)",
        ms(ctx_build),
        ctx_allocs
    );
    for ((name, nanos), count) in PHASES.iter().zip(&PHASE_NANOS).zip(&PHASE_ALLOCS) {
        let d = Duration::from_nanos(nanos.load(Ordering::Relaxed)) / runs as u32;
        let a = count.load(Ordering::Relaxed) / runs as u64;
        hooks_total += d;
        hooks_allocs += a;
        println!("    {name:<40} {:>9.2} ms {a:>10} allocations", ms(d));
    }
    println!(
        "    {:<40} {:>9.2} ms {:>10} allocations",
        "the rest (selection, status, write-back)",
        ms(total.saturating_sub(hooks_total + ctx_build)),
        total_allocs.saturating_sub(hooks_allocs + ctx_allocs)
    );
}
