//! Completion predicates (spec/operator.md §6.4) with this project's amendments for lazy
//! admission (§16.3): a node is complete only when no requested uninstall still has an entry
//! and every package's applied-config record matches its current `configMap`.

use std::borrow::Cow;
use std::collections::BTreeMap;

use nodewright_schema::keys;
use nodewright_schema::{
    NodeState, NodeWright, NodeWrightSpec, Package, PackageStatus, Stage, State,
};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::context::PassCtx;

/// The parsed `configApplied_<nw>` record of a node: `name|version` → key → sha256 hex.
pub type AppliedConfig = BTreeMap<String, BTreeMap<String, String>>;

/// Parses a node's applied-config record. An absent or unreadable record reads as empty (every
/// package then counts as matching, §16.3 backfill).
pub fn parse_applied(raw: Option<&str>) -> AppliedConfig {
    raw.and_then(|r| serde_json::from_str(r).ok())
        .unwrap_or_default()
}

/// A node's applied-config record as [`parse_applied`] reads it, its text borrowed from the
/// annotation wherever it needs no unescaping: for a step that reads every node's record and
/// rewrites few. It writes the same document an [`AppliedConfig`] would.
pub type AppliedRecord<'a> = BTreeMap<RecordText<'a>, BTreeMap<RecordText<'a>, RecordText<'a>>>;

/// A string of an applied-config record.
#[derive(Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RecordText<'a>(#[serde(borrow)] pub Cow<'a, str>);

/// [`parse_applied`], borrowing.
pub fn read_applied(raw: Option<&str>) -> AppliedRecord<'_> {
    raw.and_then(|r| serde_json::from_str(r).ok())
        .unwrap_or_default()
}

/// The record a package's current `configMap` would leave: key → lowercase hex sha256 (§16.3).
pub fn config_digests(pkg: &Package) -> BTreeMap<String, String> {
    pkg.config_map()
        .iter()
        .map(|(k, v)| (k.clone(), sha256_hex(v)))
        .collect()
}

/// Lowercase hex SHA-256 of a string.
pub fn sha256_hex(value: &str) -> String {
    hex::encode(Sha256::digest(value.as_bytes()))
}

/// Keys added, removed or changed between a node's record of a package and its spec (§16.3),
/// sorted. A package without a record has no changed keys (the record is backfilled, not
/// re-run).
pub fn changed_config_keys(
    nw: &impl CompletionSource,
    applied: &AppliedConfig,
    name: &str,
    pkg: &Package,
) -> Vec<String> {
    let mut keys: Vec<String> = changed_keys(nw, applied, name, pkg)
        .map(str::to_string)
        .collect();
    keys.sort();
    keys
}

/// Whether a node's record of a package differs from its spec: [`changed_config_keys`] is not
/// empty.
pub fn config_changed(
    nw: &impl CompletionSource,
    applied: &AppliedConfig,
    name: &str,
    pkg: &Package,
) -> bool {
    changed_keys(nw, applied, name, pkg).next().is_some()
}

fn changed_keys<'a>(
    nw: &'a impl CompletionSource,
    applied: &'a AppliedConfig,
    name: &str,
    pkg: &'a Package,
) -> impl Iterator<Item = &'a str> + 'a {
    let record = (applied.iter())
        .find(|(key, _)| nodewright_schema::node_state::is_entry_key(key, name, &pkg.version))
        .map(|(_, record)| record);
    let spec = pkg.config_map();
    record.into_iter().flat_map(move |record| {
        let changed = (spec.iter())
            .filter(move |(k, v)| !record.get(*k).is_some_and(|d| nw.config_digest_is(v, d)))
            .map(|(k, _)| k.as_str());
        let removed = (record.keys())
            .filter(move |k| !spec.contains_key(*k))
            .map(String::as_str);
        changed.chain(removed)
    })
}

/// Whether `recorded` is the lowercase hex SHA-256 of `value`, without building a digest
/// string.
fn digest_is(value: &str, recorded: &str) -> bool {
    let mut hex = [0u8; 64];
    hex::encode_to_slice(Sha256::digest(value.as_bytes()), &mut hex).is_ok()
        && hex.as_slice() == recorded.as_bytes()
}

/// Shell-style glob match of a whole key (§6.8), through the workspace's one matcher
/// (`nodewright_schema::glob`).
pub fn glob_match(pattern: &str, key: &str) -> bool {
    nodewright_schema::glob::matches(pattern, key)
}

/// Whether uninstall is requested for a package: `IsUninstalling`, or the NodeWright is being
/// deleted and the package has `uninstall.enabled` (§6.9, §11.1).
pub fn uninstall_requested(nw: &impl CompletionSource, pkg: &Package) -> bool {
    pkg.is_uninstalling() || (nw.deleting() && pkg.uninstall_enabled())
}

/// The keys that decide HasInterrupt for a package on a node: the node's own changed keys when
/// its record differs from the spec (§16.3), else `status.configUpdates[pkg]` (§6.4).
pub fn interrupt_keys(
    nw: &impl CompletionSource,
    applied: &AppliedConfig,
    name: &str,
    pkg: &Package,
) -> Vec<String> {
    let changed = changed_config_keys(nw, applied, name, pkg);
    if !changed.is_empty() {
        return changed;
    }
    nw.config_updates(name).to_vec()
}

/// HasInterrupt (§6.4): with config keys pending, true iff a `configInterrupts` pattern matches
/// one of them; otherwise whether `interrupt` is set.
pub fn has_interrupt_for(pkg: &Package, config_keys: &[String]) -> bool {
    if config_keys.is_empty() {
        return pkg.has_spec_interrupt();
    }
    pkg.config_interrupts()
        .keys()
        .any(|pat| config_keys.iter().any(|k| glob_match(pat, k)))
}

/// Whether one spec package is complete on a node (§6.4, §16.3 (b)).
pub fn package_complete(
    nw: &impl CompletionSource,
    state: &NodeState,
    applied: &AppliedConfig,
    name: &str,
    pkg: &Package,
) -> bool {
    let Some(entry) = state.get(name, &pkg.version) else {
        return false;
    };
    if entry.state != Some(State::Complete) {
        return false;
    }
    // A record that differs from the spec makes the package incomplete whatever its stage;
    // without one, the keys HasInterrupt reads are `status.configUpdates` (interrupt_keys).
    if config_changed(nw, applied, name, pkg) {
        return false;
    }
    match entry.stage {
        Some(Stage::PostInterrupt) => true,
        Some(Stage::Config) => !has_interrupt_for(pkg, nw.config_updates(name)),
        _ => false,
    }
}

/// What node completion (§6.4, §16.3) may read of a NodeWright: its spec, whether it is being
/// deleted, and `status.configUpdates`. The completion rules read a NodeWright through this
/// alone, and [`NodeDigest::of`] reads [`CompletionInputs`], the key completions are remembered
/// under across passes: a rule that needs anything else of the NodeWright does not compile
/// until the key holds it too.
pub trait CompletionSource {
    /// The spec.
    fn spec(&self) -> &NodeWrightSpec;
    /// Whether the NodeWright is being deleted.
    fn deleting(&self) -> bool;
    /// `status.configUpdates` of a package: the keys whose change the NodeWright recorded.
    fn config_updates(&self, package: &str) -> &[String];
    /// Whether `recorded` is the digest a node records of the configuration value `value`
    /// (§16.3).
    fn config_digest_is(&self, value: &str, recorded: &str) -> bool {
        digest_is(value, recorded)
    }
}

impl CompletionSource for NodeWright {
    fn spec(&self) -> &NodeWrightSpec {
        &self.spec
    }
    fn deleting(&self) -> bool {
        self.is_deleting()
    }
    fn config_updates(&self, package: &str) -> &[String] {
        (self.status.as_ref())
            .and_then(|s| s.config_updates.as_ref())
            .and_then(|m| m.get(package))
            .map_or(&[], Vec::as_slice)
    }
}

impl CompletionSource for CompletionInputs {
    fn spec(&self) -> &NodeWrightSpec {
        &self.spec
    }
    fn deleting(&self) -> bool {
        self.deleting
    }
    fn config_updates(&self, package: &str) -> &[String] {
        (self.config_updates.as_ref())
            .and_then(|m| m.get(package))
            .map_or(&[], Vec::as_slice)
    }
    fn config_digest_is(&self, value: &str, recorded: &str) -> bool {
        match self.config_digests.get(value) {
            Some(digest) => digest == recorded,
            None => digest_is(value, recorded),
        }
    }
}

/// Everything of a NodeWright that node completion reads besides the node itself
/// ([`CompletionSource`]: the spec, whether the NodeWright is being deleted, and
/// `status.configUpdates`), held apart as the key completions and digests are remembered under
/// across passes (engine/incremental/state_cache.rs). The whole spec is kept, not only the
/// packages, so that a later completion rule reading another spec field stays covered.
#[derive(Debug, PartialEq)]
pub struct CompletionInputs {
    spec: NodeWrightSpec,
    deleting: bool,
    config_updates: Option<BTreeMap<String, Vec<String>>>,
    /// The digest of each configuration value of the spec's packages, by value: completion
    /// compares a node's record with them for every package on every node it judges.
    config_digests: FxHashMap<String, String>,
}

impl CompletionInputs {
    /// The completion inputs of a NodeWright as the snapshot holds it.
    pub fn of(nw: &NodeWright) -> CompletionInputs {
        let config_digests = (nw.spec.packages().values())
            .flat_map(|p| p.config_map().values())
            .map(|value| (value.clone(), sha256_hex(value)))
            .collect();
        CompletionInputs {
            spec: nw.spec.clone(),
            deleting: nw.is_deleting(),
            config_updates: nw.status.as_ref().and_then(|s| s.config_updates.clone()),
            config_digests,
        }
    }
}

/// What one node's state says about each package of a NodeWright, derived in one walk:
/// completion (§6.4, §16.3), the wait before the non-interrupt barrier (§7.5,
/// [`super::packages::waits_on_drain`]),
/// and the per-package facts the package-lane conditions aggregate (§6.15, §12.2).
///
/// It depends only on the node's state, its `configApplied_<nw>` record and the NodeWright's
/// [`CompletionInputs`], so it is remembered with the node's parse
/// (engine/incremental/state_cache.rs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeDigest {
    /// The node is complete for the NodeWright (§6.4 with §16.3 (a)): every active package
    /// complete ([`package_complete`]), none in its uninstall cycle, and no package whose
    /// uninstall is requested still has an entry.
    pub complete: bool,
    /// Some entry is `erroring` or `unknown` (the node's Erroring condition, §4.5).
    pub erroring: bool,
    /// Some interrupt package still waits on a drain ([`super::packages::waits_on_drain`]).
    pub waits_on_drain: bool,
    /// Some entry of a spec package is in its uninstall cycle.
    pub uninstalling: bool,
    /// Some entry of a spec package in its uninstall cycle is `erroring`.
    pub uninstall_failing: bool,
    /// The node's applied-config record names only entries the node has, and every spec
    /// package with a `configMap` that the node applied has its record (§16.3): the record
    /// needs no pruning and no backfill.
    pub records_current: bool,
    /// Per spec package, in spec order.
    pub packages: Box<[PackageMarks]>,
}

/// Per-package facts of one node (see [`NodeDigest`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PackageMarks {
    /// The node has an entry of the package (any version).
    pub present: bool,
    /// One of those entries is in the uninstall cycle.
    pub in_cycle: bool,
    /// The package is not complete on the node ([`package_complete`]).
    pub incomplete: bool,
}

impl NodeDigest {
    /// Derives the digest of a node state under a NodeWright's completion inputs and the
    /// node's applied record.
    pub fn of(inputs: &CompletionInputs, state: &NodeState, applied: &AppliedConfig) -> NodeDigest {
        let mut uninstalling = false;
        let mut uninstall_failing = false;
        let mut packages = Vec::with_capacity(inputs.spec().packages().len());
        let mut complete = true;
        for (name, pkg) in inputs.spec().packages() {
            let mut marks = PackageMarks::default();
            for e in state.entries_of(name) {
                marks.present = true;
                if e.stage.is_some_and(Stage::is_uninstall_cycle) {
                    marks.in_cycle = true;
                    uninstalling = true;
                    uninstall_failing |= e.state == Some(State::Erroring);
                }
            }
            marks.incomplete = !package_complete(inputs, state, applied, name, pkg);
            // A package whose uninstall is requested counts once its entries are gone; any
            // other once complete, which its entry never is in the uninstall cycle.
            complete &= match uninstall_requested(inputs, pkg) {
                true => !marks.present,
                false => !marks.incomplete,
            };
            packages.push(marks);
        }
        NodeDigest {
            complete,
            erroring: state
                .0
                .values()
                .any(|e| matches!(e.state, Some(State::Erroring) | Some(State::Unknown))),
            waits_on_drain: super::packages::waits_on_drain(inputs, state, applied).is_some(),
            uninstalling,
            uninstall_failing,
            records_current: records_current(inputs, state, applied),
            packages: packages.into_boxed_slice(),
        }
    }
}

/// Whether an entry has applied its package's configuration: complete at `config` or a
/// later stage of the apply cycle (§16.3).
pub fn config_applied_in(entry: &PackageStatus) -> bool {
    entry.state == Some(State::Complete)
        && matches!(
            entry.stage,
            Some(Stage::Config | Stage::Interrupt | Stage::PostInterrupt)
        )
}

/// [`NodeDigest::records_current`].
fn records_current(inputs: &CompletionInputs, state: &NodeState, applied: &AppliedConfig) -> bool {
    applied.keys().all(|k| state.0.contains_key(k.as_str()))
        && inputs.spec().packages().iter().all(|(name, pkg)| {
            pkg.config_map().is_empty()
                || !state.get(name, &pkg.version).is_some_and(config_applied_in)
                || applied.contains_key(&nodewright_schema::node_state::entry_key(
                    name,
                    &pkg.version,
                ))
        })
}

/// Whether node `node` is complete for NodeWright `nw` in the working state. A malformed
/// node state is never complete (§4.2).
pub fn node_complete(ctx: &PassCtx, nw: usize, node: usize) -> bool {
    ctx.node_digest(nw, node, |d| d.is_some_and(|d| d.complete))
}

/// HasInterrupt of a package on a node in the working state (§6.4, §16.3).
pub fn has_interrupt(ctx: &PassCtx, nw: usize, node: usize, name: &str) -> bool {
    let view = &ctx.nws[nw];
    let Some(pkg) = view.nw.spec.packages().get(name) else {
        return false;
    };
    let applied = parse_applied(ctx.node(node).annotation(&keys::config_applied(view.name)));
    has_interrupt_for(
        pkg,
        &interrupt_keys(view.completion_inputs(), &applied, name, pkg),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodewright_schema::{Interrupt, InterruptType, PackageStatus, Uninstall};

    fn pkg(version: &str) -> Package {
        Package {
            version: version.into(),
            image: "example/p".into(),
            ..Package::default()
        }
    }

    fn nw_with(pkgs: &[(&str, Package)]) -> NodeWright {
        let mut nw = NodeWright::new("nw", Default::default());
        nw.spec.packages = Some(
            pkgs.iter()
                .map(|(n, p)| (n.to_string(), p.clone()))
                .collect(),
        );
        nw
    }

    /// Whether a node is complete for a NodeWright given its parsed state and record.
    fn state_complete(nw: &NodeWright, state: &NodeState, applied: &AppliedConfig) -> bool {
        NodeDigest::of(&CompletionInputs::of(nw), state, applied).complete
    }

    fn state(entries: &[(&str, &str, Stage, State)]) -> NodeState {
        let mut s = NodeState::default();
        for (n, v, stage, st) in entries {
            s.upsert(PackageStatus::new(n, v, "example/p", *stage, *st));
        }
        s
    }

    #[test]
    fn a_record_is_current_when_it_names_only_present_entries_and_every_applied_configuration() {
        let mut configured = pkg("1");
        configured.config_map = Some(BTreeMap::from([("a.conf".into(), "x=1".into())]));
        let nw = nw_with(&[("a", configured.clone()), ("b", pkg("1"))]);
        let record = |entries: &[&str]| -> AppliedConfig {
            entries
                .iter()
                .map(|e| (e.to_string(), config_digests(&configured)))
                .collect()
        };
        let current = |state: &NodeState, applied: &AppliedConfig| {
            NodeDigest::of(&CompletionInputs::of(&nw), state, applied).records_current
        };
        let applied_a = state(&[("a", "1", Stage::Config, State::Complete)]);
        assert!(
            !current(&applied_a, &record(&[])),
            "an applied configuration without its record"
        );
        assert!(current(&applied_a, &record(&["a|1"])));
        let applying_a = state(&[("a", "1", Stage::Apply, State::Complete)]);
        assert!(
            current(&applying_a, &record(&[])),
            "nothing applied yet, nothing to record"
        );
        assert!(
            !current(&applying_a, &record(&["a|1", "a|0"])),
            "a record of an entry the node no longer has"
        );
        let only_b = state(&[("b", "1", Stage::Config, State::Complete)]);
        assert!(
            current(&only_b, &record(&[])),
            "a package without a configMap has no record"
        );
    }

    #[test]
    fn glob_matches_like_go_filepath_match() {
        assert!(glob_match("*.conf", "a.conf"));
        assert!(!glob_match("*.conf", "ab.txt"));
        assert!(glob_match("?b*", "ab.txt"));
        assert!(glob_match("[ab]*.conf", "b.conf"));
        assert!(!glob_match("[^ab]*.conf", "b.conf"));
        assert!(glob_match("[a-c]x", "bx"));
        assert!(!glob_match("[ab", "a"), "malformed pattern matches nothing");
        assert!(glob_match("a\\*", "a*"));
        assert!(!glob_match("a", "ab"));
    }

    #[test]
    fn package_without_interrupt_completes_at_config() {
        let nw = nw_with(&[("a", pkg("1.0.0"))]);
        let s = state(&[("a", "1.0.0", Stage::Config, State::Complete)]);
        assert!(state_complete(&nw, &s, &AppliedConfig::new()));
        let s = state(&[("a", "1.0.0", Stage::Apply, State::Complete)]);
        assert!(!state_complete(&nw, &s, &AppliedConfig::new()));
    }

    #[test]
    fn interrupt_package_needs_post_interrupt() {
        let mut p = pkg("1.0.0");
        p.interrupt = Some(Interrupt {
            kind: InterruptType::Reboot,
            services: vec![],
        });
        let nw = nw_with(&[("a", p)]);
        let s = state(&[("a", "1.0.0", Stage::Config, State::Complete)]);
        assert!(!state_complete(&nw, &s, &AppliedConfig::new()));
        let s = state(&[("a", "1.0.0", Stage::PostInterrupt, State::Complete)]);
        assert!(state_complete(&nw, &s, &AppliedConfig::new()));
    }

    #[test]
    fn old_version_entry_is_not_completion() {
        let nw = nw_with(&[("a", pkg("2.0.0"))]);
        let s = state(&[("a", "1.0.0", Stage::Config, State::Complete)]);
        assert!(!state_complete(&nw, &s, &AppliedConfig::new()));
    }

    #[test]
    fn requested_uninstall_with_entry_is_incomplete_and_absent_is_complete() {
        let mut p = pkg("1.0.0");
        p.uninstall = Some(Uninstall {
            enabled: true,
            apply: true,
        });
        let nw = nw_with(&[("a", p)]);
        let s = state(&[("a", "1.0.0", Stage::Config, State::Complete)]);
        assert!(!state_complete(&nw, &s, &AppliedConfig::new()));
        assert!(state_complete(
            &nw,
            &NodeState::default(),
            &AppliedConfig::new()
        ));
    }

    #[test]
    fn changed_config_record_makes_node_incomplete_and_decides_interrupt() {
        let mut p = pkg("1.0.0");
        p.config_map = Some([("a.conf".to_string(), "new".to_string())].into());
        p.config_interrupts = Some(
            [(
                "*.conf".to_string(),
                Interrupt {
                    kind: InterruptType::Service,
                    services: vec!["x".into()],
                },
            )]
            .into(),
        );
        let nw = nw_with(&[("a", p.clone())]);
        let s = state(&[("a", "1.0.0", Stage::Config, State::Complete)]);
        let mut applied = AppliedConfig::new();
        applied.insert(
            "a|1.0.0".into(),
            [("a.conf".to_string(), sha256_hex("old"))].into(),
        );
        assert_eq!(changed_config_keys(&nw, &applied, "a", &p), vec!["a.conf"]);
        let inputs = CompletionInputs::of(&nw);
        assert_eq!(
            changed_config_keys(&inputs, &applied, "a", &p),
            vec!["a.conf"]
        );
        assert!(!state_complete(&nw, &s, &applied));
        assert!(has_interrupt_for(
            &p,
            &changed_config_keys(&nw, &applied, "a", &p)
        ));
        applied.insert("a|1.0.0".into(), config_digests(&p));
        assert!(state_complete(&nw, &s, &applied));
        // No record at all: a node last worked by upstream counts as matching.
        assert!(state_complete(&nw, &s, &AppliedConfig::new()));
    }

    #[test]
    fn sha256_is_lowercase_hex() {
        assert_eq!(
            sha256_hex(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
