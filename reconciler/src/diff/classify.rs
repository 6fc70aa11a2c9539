//! Desired-vs-desired classification: what the lifecycle will do to the fleet when the head
//! commit replaces the base commit (spec/operator.md §6.5–§6.11, §16.3 "what you change /
//! what happens").

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use nodewright_schema::validate::{Severity, rules};
use nodewright_schema::{DeploymentPolicy, Interrupt, InterruptType, NodeWright, Package};
use serde::Serialize;
use serde_json::Value;

use crate::cluster::Desired;

/// A validation problem of the head commit, with where it comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// File path in the repository, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// 1-based line in that file, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// `NodeWright/<name>` or `DeploymentPolicy/<name>`, when the problem is about one object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    /// Stable rule id (`image-tag`, `downgrade-apply-first`, `file-too-large`, …).
    pub rule: String,
    /// What is wrong, with the field path when there is one.
    pub message: String,
    /// Error (the commit is refused) or warning.
    pub severity: Severity,
}

impl Problem {
    /// `file:line` (or `file`, or the object) for reports.
    pub fn location(&self) -> String {
        match (&self.file, self.line, &self.object) {
            (Some(f), Some(l), _) => format!("{f}:{l}"),
            (Some(f), None, _) => f.clone(),
            (None, _, Some(o)) => o.clone(),
            (None, _, None) => "commit".to_owned(),
        }
    }

    /// Whether it refuses the commit.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

/// How an object changed between the commits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ObjectChange {
    /// Only in head.
    Added,
    /// Only in base.
    Removed,
    /// In both, different.
    Changed,
}

/// A NodeWright-level field that changed, with its effect on the rollout.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FieldChange {
    /// Field (`nodeSelectors`, `priority`, `pause`, …).
    pub field: String,
    /// Value in base (`null` when unset), as JSON.
    pub before: Value,
    /// Value in head.
    pub after: Value,
    /// What the lifecycle does about it.
    pub effect: String,
}

/// A configInterrupts pattern that matched a changed key, and the interrupt it costs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConfigInterruptMatch {
    /// The changed configMap key.
    pub key: String,
    /// The pattern that matched it (literal key or glob).
    pub pattern: String,
    /// The interrupt it triggers.
    pub interrupt: Interrupt,
}

/// One change class the lifecycle will apply to a package.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "class", rename_all = "kebab-case")]
pub enum ChangeClass {
    /// New package: install lane from `apply` (§6.5).
    Install {
        /// The interrupt the install lane ends with, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        interrupt: Option<Interrupt>,
        /// `uninstall.apply` is already true: treated as uninstalled, nothing runs (§15).
        absent_and_requested: bool,
    },
    /// Version increase: `upgrade` → `config` [→ interrupt] (§6.6).
    Upgrade {
        /// Base version.
        from: String,
        /// Head version.
        to: String,
        /// The interrupt the upgrade lane runs, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        interrupt: Option<Interrupt>,
    },
    /// Version decrease (§6.7, §3.2).
    Downgrade {
        /// Base version.
        from: String,
        /// Head version.
        to: String,
        /// Whether the reconciler accepts it.
        allowed: bool,
        /// Why, and what runs.
        explanation: String,
    },
    /// A version that is not semver on either side (head validation reports it).
    VersionUnordered {
        /// Base version.
        from: String,
        /// Head version.
        to: String,
    },
    /// configMap keys changed: `config` [→ interrupt → post-interrupt] on every selected node
    /// (§6.8, §16.3).
    Config {
        /// Keys only in head.
        added: Vec<String>,
        /// Keys in both with different values.
        changed: Vec<String>,
        /// Keys only in base.
        removed: Vec<String>,
        /// configInterrupts patterns matching a changed key.
        interrupts: Vec<ConfigInterruptMatch>,
    },
    /// The configMap was emptied: the old ConfigMap stays, no config cycle runs (§6.8).
    ConfigEmptied {
        /// Keys that were there.
        removed: Vec<String>,
    },
    /// Only image or containerSHA changed: no stage change, but the current stage re-runs with
    /// the new image (§6.1, §8.14).
    ImageOnly {
        /// Pull reference in base.
        before: String,
        /// Pull reference in head.
        after: String,
    },
    /// The package's `interrupt` was added, removed or changed.
    InterruptChanged {
        /// Base interrupt.
        #[serde(skip_serializing_if = "Option::is_none")]
        before: Option<Interrupt>,
        /// Head interrupt.
        #[serde(skip_serializing_if = "Option::is_none")]
        after: Option<Interrupt>,
    },
    /// configInterrupts patterns changed (affects future config cycles).
    ConfigInterruptsChanged {
        /// Patterns only in head.
        added: Vec<String>,
        /// Patterns only in base.
        removed: Vec<String>,
        /// Patterns whose interrupt changed.
        changed: Vec<String>,
    },
    /// `dependsOn` changed: the order packages become runnable changes (§6.2).
    DependsOnChanged {
        /// `name|version` only in head.
        added: Vec<String>,
        /// `name|version` only in base.
        removed: Vec<String>,
    },
    /// `uninstall.apply` turned on: uninstall lane on every selected node (§6.9).
    UninstallRequested {
        /// Whether `uninstall-interrupt` follows.
        #[serde(skip_serializing_if = "Option::is_none")]
        interrupt: Option<Interrupt>,
    },
    /// `uninstall.apply` turned off: cancel (§6.10).
    UninstallCancelled,
    /// `uninstall.enabled` toggled without a request.
    UninstallEnabledChanged {
        /// Base value.
        before: bool,
        /// Head value.
        after: bool,
    },
    /// Package removed from the spec — not an uninstall (§6.11).
    RemovedFromSpec {
        /// Base version.
        version: String,
        /// What (does not) happen, and what the cluster checks first.
        explanation: String,
    },
    /// Other package fields (env, resources, agentImageOverride, gracefulShutdown,
    /// stageTimeout) changed: no stage change; a parked stage is re-attempted (§16.3).
    OtherFields {
        /// Field names.
        fields: Vec<String>,
    },
}

impl ChangeClass {
    /// Short label for tables.
    pub fn label(&self) -> &'static str {
        match self {
            ChangeClass::Install { .. } => "install",
            ChangeClass::Upgrade { .. } => "upgrade",
            ChangeClass::Downgrade { .. } => "downgrade",
            ChangeClass::VersionUnordered { .. } => "version change",
            ChangeClass::Config { .. } => "config",
            ChangeClass::ConfigEmptied { .. } => "config emptied",
            ChangeClass::ImageOnly { .. } => "image only",
            ChangeClass::InterruptChanged { .. } => "interrupt",
            ChangeClass::ConfigInterruptsChanged { .. } => "configInterrupts",
            ChangeClass::DependsOnChanged { .. } => "dependsOn",
            ChangeClass::UninstallRequested { .. } => "uninstall",
            ChangeClass::UninstallCancelled => "uninstall cancel",
            ChangeClass::UninstallEnabledChanged { .. } => "uninstall.enabled",
            ChangeClass::RemovedFromSpec { .. } => "removed from spec",
            ChangeClass::OtherFields { .. } => "other fields",
        }
    }

    /// Whether this class makes the head commit unacceptable.
    pub fn is_error(&self) -> bool {
        matches!(self, ChangeClass::Downgrade { allowed: false, .. })
    }

    /// The interrupt this change costs on each affected node, if any.
    pub fn interrupt_cost(&self) -> Vec<&Interrupt> {
        match self {
            ChangeClass::Install {
                interrupt: Some(i),
                absent_and_requested: false,
            }
            | ChangeClass::Upgrade {
                interrupt: Some(i), ..
            }
            | ChangeClass::UninstallRequested { interrupt: Some(i) } => vec![i],
            ChangeClass::Config { interrupts, .. } => {
                let mut seen: Vec<&Interrupt> = Vec::new();
                for m in interrupts {
                    if !seen.contains(&&m.interrupt) {
                        seen.push(&m.interrupt);
                    }
                }
                seen
            }
            _ => Vec::new(),
        }
    }

    /// What the lifecycle does, in one or two sentences.
    pub fn describe(&self) -> String {
        match self {
            ChangeClass::Install {
                absent_and_requested: true,
                ..
            } => "new package with uninstall.apply=true: treated as already uninstalled, nothing runs".to_owned(),
            ChangeClass::Install { interrupt, .. } => match interrupt {
                Some(i) => format!(
                    "first install: cordon, drain, apply → config → interrupt ({}) → post-interrupt",
                    interrupt_text(i)
                ),
                None => "first install: apply → config".to_owned(),
            },
            ChangeClass::Upgrade { from, to, interrupt } => match interrupt {
                Some(i) => format!(
                    "upgrade to {to}: cordon, drain, upgrade → config → interrupt ({}) → post-interrupt; the {from} entry is removed when the upgrade completes",
                    interrupt_text(i)
                ),
                None => format!(
                    "upgrade to {to}: upgrade → config; the {from} entry is removed when the upgrade completes"
                ),
            },
            ChangeClass::Downgrade { explanation, .. } => explanation.clone(),
            ChangeClass::VersionUnordered { from, to } => {
                format!("{from} → {to}: not comparable as semver; the head commit is invalid")
            }
            ChangeClass::Config { added, changed, removed, interrupts } => {
                let mut keys = Vec::new();
                if !added.is_empty() {
                    keys.push(format!("added {}", added.join(", ")));
                }
                if !changed.is_empty() {
                    keys.push(format!("changed {}", changed.join(", ")));
                }
                if !removed.is_empty() {
                    keys.push(format!("removed {}", removed.join(", ")));
                }
                let cost = if interrupts.is_empty() {
                    "config stage only, no interrupt (no configInterrupts pattern matches a changed key)".to_owned()
                } else {
                    let each: Vec<String> = interrupts
                        .iter()
                        .map(|m| {
                            if m.pattern == m.key {
                                format!("{} → {}", m.key, interrupt_text(&m.interrupt))
                            } else {
                                format!("{} (via {}) → {}", m.key, m.pattern, interrupt_text(&m.interrupt))
                            }
                        })
                        .collect();
                    format!(
                        "cordon, drain, config → interrupt → post-interrupt; interrupts: {}",
                        each.join("; ")
                    )
                };
                format!("configMap {}: every selected node re-runs {cost}", keys.join("; "))
            }
            ChangeClass::ConfigEmptied { removed } => format!(
                "configMap emptied (was {}): the existing ConfigMap keeps its old data and no config cycle runs (§6.8)",
                removed.join(", ")
            ),
            ChangeClass::ImageOnly { before, after } => format!(
                "{before} → {after}: no stage change; a stage running from the old image is replaced and re-runs with the new one"
            ),
            ChangeClass::InterruptChanged { before, after } => format!(
                "interrupt {} → {}: applies to the next interrupt this package runs (install, upgrade or config); completed nodes do not re-run",
                before.as_ref().map_or("none".to_owned(), interrupt_text),
                after.as_ref().map_or("none".to_owned(), interrupt_text)
            ),
            ChangeClass::ConfigInterruptsChanged { added, removed, changed } => {
                let mut parts = Vec::new();
                if !added.is_empty() {
                    parts.push(format!("added {}", added.join(", ")));
                }
                if !removed.is_empty() {
                    parts.push(format!("removed {}", removed.join(", ")));
                }
                if !changed.is_empty() {
                    parts.push(format!("changed {}", changed.join(", ")));
                }
                format!(
                    "configInterrupts {}: decides the interrupt of future config changes; nothing runs for this alone",
                    parts.join("; ")
                )
            }
            ChangeClass::DependsOnChanged { added, removed } => {
                let mut parts = Vec::new();
                if !added.is_empty() {
                    parts.push(format!("now waits for {}", added.join(", ")));
                }
                if !removed.is_empty() {
                    parts.push(format!("no longer waits for {}", removed.join(", ")));
                }
                format!("dependsOn: {} (order on nodes still to be worked)", parts.join("; "))
            }
            ChangeClass::UninstallRequested { interrupt } => match interrupt {
                Some(i) => format!(
                    "uninstall requested: cordon, drain, uninstall → uninstall-interrupt ({}) on every selected node where it is installed; the entry is then removed",
                    interrupt_text(i)
                ),
                None => "uninstall requested: uninstall on every selected node where it is installed; the entry is then removed".to_owned(),
            },
            ChangeClass::UninstallCancelled => "uninstall cancelled: nodes mid-uninstall restart at apply; nodes where uninstall completed re-install from apply".to_owned(),
            ChangeClass::UninstallEnabledChanged { before, after } => format!(
                "uninstall.enabled {before} → {after}: declares whether the image ships uninstall scripts; nothing runs"
            ),
            ChangeClass::RemovedFromSpec { explanation, .. } => explanation.clone(),
            ChangeClass::OtherFields { fields } => format!(
                "{} changed: no stage change; applies to stages started from now on, and a parked (failed) stage is retried",
                fields.join(", ")
            ),
        }
    }
}

/// Human text of an interrupt (`reboot`, `service (containerd, kubelet)`).
pub fn interrupt_text(i: &Interrupt) -> String {
    if i.services.is_empty() {
        i.kind.as_str().to_owned()
    } else {
        format!("{} ({})", i.kind.as_str(), i.services.join(", "))
    }
}

/// Everything that happens to one package.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PackageChange {
    /// Package name.
    pub package: String,
    /// Version in base.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before_version: Option<String>,
    /// Version in head.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after_version: Option<String>,
    /// Change classes, in lifecycle order.
    pub classes: Vec<ChangeClass>,
}

/// One NodeWright's change.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodeWrightChange {
    /// Name.
    pub name: String,
    /// Added, removed or changed.
    pub change: ObjectChange,
    /// NodeWright-level field changes.
    pub fields: Vec<FieldChange>,
    /// Package changes.
    pub packages: Vec<PackageChange>,
    /// How fast the package changes roll out under head's DeploymentPolicy or budget, one line
    /// per compartment (empty when no package changes).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pace: Vec<String>,
    /// Normalized manifest in base.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_yaml: Option<String>,
    /// Normalized manifest in head.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head_yaml: Option<String>,
}

/// One DeploymentPolicy's change.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PolicyChange {
    /// Name.
    pub name: String,
    /// Added, removed or changed.
    pub change: ObjectChange,
    /// What changed, one line per part (`compartment production: budget 25 % → 50 %`).
    pub parts: Vec<String>,
    /// NodeWrights in head that use it (their rollouts follow the new policy).
    pub used_by: Vec<String>,
    /// Normalized manifest in base.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_yaml: Option<String>,
    /// Normalized manifest in head.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head_yaml: Option<String>,
}

/// A section a rollout simulator contributes (the `--simulate` seam: a later issue renders a
/// simulated rollout timeline and fills this in).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimulatedTimeline {
    /// Plain-text rendering.
    pub text: String,
    /// Markdown rendering (e.g. a Mermaid gantt).
    pub markdown: String,
    /// Machine-readable facts.
    pub json: Value,
}

/// Something that can project a rollout of `head` over a fleet running `base`.
pub trait RolloutSimulator {
    /// Simulate; an error is reported in the diff instead of a timeline.
    fn simulate(&self, base: &Desired, head: &Desired) -> Result<SimulatedTimeline, String>;
}

/// The full dry-run diff between two commits.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DesiredDiff {
    /// Base commit id.
    pub base: String,
    /// Head commit id.
    pub head: String,
    /// NodeWrights added, removed or changed (sorted by name).
    pub nodewrights: Vec<NodeWrightChange>,
    /// Policies added, removed or changed (sorted by name).
    pub policies: Vec<PolicyChange>,
    /// Problems of the head commit: its validation and the update rules against base.
    pub problems: Vec<Problem>,
    /// Problems of the base commit (shown for context; they do not change the verdict).
    pub base_problems: Vec<Problem>,
    /// A simulated rollout, when a simulator was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeline: Option<SimulatedTimeline>,
    /// Why the simulator failed, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeline_error: Option<String>,
}

/// Counts for the verdict line.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Package change classes by label.
    pub classes: BTreeMap<String, usize>,
    /// Interrupt types any change costs, by type, counted per package change.
    pub interrupts: BTreeMap<String, usize>,
    /// Error-level problems (including refused downgrades/removals).
    pub errors: usize,
    /// Warnings.
    pub warnings: usize,
}

impl DesiredDiff {
    /// Whether the head commit would be refused (exit code 3).
    pub fn has_errors(&self) -> bool {
        self.problems.iter().any(Problem::is_error)
    }

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.nodewrights.is_empty() && self.policies.is_empty()
    }

    /// Counts of classes, interrupts and problems.
    pub fn summary(&self) -> Summary {
        let mut s = Summary::default();
        for nw in &self.nodewrights {
            let approvals = nw
                .fields
                .iter()
                .filter(|f| f.field == APPROVAL_FIELD)
                .count();
            if approvals > 0 {
                *s.classes.entry(APPROVAL_FIELD.to_owned()).or_default() += approvals;
            }
            for p in &nw.packages {
                for c in &p.classes {
                    *s.classes.entry(c.label().to_owned()).or_default() += 1;
                    for i in c.interrupt_cost() {
                        *s.interrupts.entry(i.kind.as_str().to_owned()).or_default() += 1;
                    }
                }
            }
        }
        s.errors = self.problems.iter().filter(|p| p.is_error()).count();
        s.warnings = self.problems.len() - s.errors;
        s
    }
}

/// Diff `base` against `head`. `head_problems` are the head commit's findings (file:line)
/// from validating it with `base` as the previous state — so §3.2's update rules are among
/// them (see [`crate::source::desired::evaluate_commit`]); `base_problems` are shown for
/// context. Removal of an uninstall-enabled package that was never asked to uninstall is
/// added here as a warning saying what the cluster will check (see
/// [`ChangeClass::RemovedFromSpec`]).
pub fn diff_desired(
    base: &Desired,
    head: &Desired,
    head_problems: Vec<Problem>,
    base_problems: Vec<Problem>,
) -> DesiredDiff {
    let base_nws: BTreeMap<&str, &NodeWright> =
        base.nodewrights.iter().map(|n| (n.name(), n)).collect();
    let head_nws: BTreeMap<&str, &NodeWright> =
        head.nodewrights.iter().map(|n| (n.name(), n)).collect();
    let mut problems = head_problems;
    let mut nodewrights = Vec::new();
    let names: BTreeSet<&str> = base_nws.keys().chain(head_nws.keys()).copied().collect();
    for name in names {
        match (base_nws.get(name), head_nws.get(name)) {
            (None, Some(h)) => nodewrights.push(NodeWrightChange {
                name: name.to_owned(),
                change: ObjectChange::Added,
                fields: added_fields(h),
                packages: h
                    .spec
                    .packages()
                    .iter()
                    .map(|(pkg, p)| PackageChange {
                        package: pkg.clone(),
                        before_version: None,
                        after_version: Some(p.version.clone()),
                        classes: vec![install(p)],
                    })
                    .collect(),
                pace: super::pace::pace(h, &head.policies),
                base_yaml: None,
                head_yaml: Some(yaml(*h)),
            }),
            (Some(b), None) => nodewrights.push(NodeWrightChange {
                name: name.to_owned(),
                change: ObjectChange::Removed,
                fields: Vec::new(),
                packages: b
                    .spec
                    .packages()
                    .iter()
                    .map(|(pkg, p)| PackageChange {
                        package: pkg.clone(),
                        before_version: Some(p.version.clone()),
                        after_version: None,
                        classes: vec![nodewright_deleted(p)],
                    })
                    .collect(),
                pace: Vec::new(),
                base_yaml: Some(yaml(*b)),
                head_yaml: None,
            }),
            (Some(b), Some(h)) => {
                if b == h {
                    continue;
                }
                let packages = package_changes(b, h, &mut problems);
                let fields = field_changes(b, h);
                let (by, hy) = (yaml(*b), yaml(*h));
                if by == hy && packages.is_empty() && fields.is_empty() {
                    continue;
                }
                let pace = if packages.is_empty() {
                    Vec::new()
                } else {
                    super::pace::pace(h, &head.policies)
                };
                nodewrights.push(NodeWrightChange {
                    name: name.to_owned(),
                    change: ObjectChange::Changed,
                    fields,
                    packages,
                    pace,
                    base_yaml: Some(by),
                    head_yaml: Some(hy),
                });
            }
            (None, None) => {}
        }
    }
    let policies = policy_changes(base, head);
    DesiredDiff {
        base: base.commit.clone(),
        head: head.commit.clone(),
        nodewrights,
        policies,
        problems,
        base_problems,
        timeline: None,
        timeline_error: None,
    }
}

impl DesiredDiff {
    /// Fill the timeline section from a simulator (the `--simulate` seam).
    pub fn with_simulation(
        mut self,
        simulator: &dyn RolloutSimulator,
        base: &Desired,
        head: &Desired,
    ) -> Self {
        match simulator.simulate(base, head) {
            Ok(t) => self.timeline = Some(t),
            Err(e) => self.timeline_error = Some(e),
        }
        self
    }
}

/// Normalized YAML of an object (typed round trip: field order fixed, defaults explicit).
pub fn yaml<T: Serialize>(obj: &T) -> String {
    // Serializing our own typed values cannot fail: no maps with non-string keys.
    serde_yaml::to_string(obj).unwrap_or_default()
}

fn install(p: &Package) -> ChangeClass {
    ChangeClass::Install {
        interrupt: p.interrupt.clone(),
        absent_and_requested: p.is_uninstalling(),
    }
}

fn nodewright_deleted(p: &Package) -> ChangeClass {
    let explanation = if p.uninstall_enabled() {
        "NodeWright deleted: its finalizer runs the uninstall lane on every selected node (uninstall.enabled=true), then removes it (§11)".to_owned()
    } else {
        "NodeWright deleted: nothing is removed from hosts (uninstall.enabled=false); node-state entries stay as markers (§11)".to_owned()
    };
    ChangeClass::RemovedFromSpec {
        version: p.version.clone(),
        explanation,
    }
}

fn package_changes(
    base: &NodeWright,
    head: &NodeWright,
    problems: &mut Vec<Problem>,
) -> Vec<PackageChange> {
    let bp = base.spec.packages();
    let hp = head.spec.packages();
    let names: BTreeSet<&String> = bp.keys().chain(hp.keys()).collect();
    let mut out = Vec::new();
    for name in names {
        let classes = match (bp.get(name), hp.get(name)) {
            (None, Some(h)) => vec![install(h)],
            (Some(b), None) => {
                if b.uninstall_enabled() && !b.is_uninstalling() {
                    problems.push(Problem {
                        file: None,
                        line: None,
                        object: Some(format!("NodeWright/{}", head.name())),
                        rule: rules::UNINSTALL_REMOVAL.id.to_owned(),
                        message: format!(
                            "spec.packages: package {name:?} has uninstall.enabled=true and was never asked to uninstall; the cluster accepts its removal only if no node's state in the NodeWright's status holds {name}|{version} (a NodeWright never reconciled, or selecting no node, qualifies) and otherwise refuses the commit: set uninstall.apply=true and wait for completion before removing it",
                            version = b.version
                        ),
                        severity: Severity::Warning,
                    });
                }
                vec![removed_from_spec(name, b)]
            }
            (Some(b), Some(h)) => package_classes(b, h),
            (None, None) => Vec::new(),
        };
        if classes.is_empty() {
            continue;
        }
        out.push(PackageChange {
            package: name.clone(),
            before_version: bp.get(name).map(|p| p.version.clone()),
            after_version: hp.get(name).map(|p| p.version.clone()),
            classes,
        });
    }
    out
}

/// §6.11 with §3.2 rule 1. Rule 1 judges by the cluster: the removal is accepted when no node
/// in the NodeWright's status holds the package's entry, and an absent status counts as fully
/// uninstalled. Git carries no status, so every removal is accepted here; the explanation says
/// what the cluster will check.
fn removed_from_spec(name: &str, b: &Package) -> ChangeClass {
    let explanation = if !b.uninstall_enabled() {
        "removed from the spec — this is NOT an uninstall: nothing runs, the package's files stay on the hosts and its node-state entry stays as a marker; its ConfigMap is deleted and its running Jobs are invalidated (§6.11)".to_owned()
    } else if b.is_uninstalling() {
        "removed after an uninstall request: accepted only once the uninstall has completed on every node (checked against the cluster when applied)".to_owned()
    } else {
        format!(
            "uninstall.enabled=true but no uninstall was requested: the cluster accepts this only if no node's state holds {}|{} (nothing installed, or a NodeWright that was never reconciled) and refuses the commit otherwise — to remove an installed package set uninstall.apply=true, wait for completion, then remove it (§3.2). Removing it from the spec is not an uninstall",
            name, b.version
        )
    };
    ChangeClass::RemovedFromSpec {
        version: b.version.clone(),
        explanation,
    }
}

fn package_classes(b: &Package, h: &Package) -> Vec<ChangeClass> {
    let mut out = Vec::new();
    let version_changed = b.version != h.version;
    if version_changed {
        out.push(
            match nodewright_schema::semver::compare(&h.version, &b.version) {
                Some(Ordering::Greater) => ChangeClass::Upgrade {
                    from: b.version.clone(),
                    to: h.version.clone(),
                    interrupt: h.interrupt.clone(),
                },
                Some(Ordering::Less) => downgrade(b, h),
                // Equal precedence with different spelling (`1.2` vs `v1.2.0`, build metadata):
                // a different node-state key, so it behaves as a new version.
                Some(Ordering::Equal) => ChangeClass::Upgrade {
                    from: b.version.clone(),
                    to: h.version.clone(),
                    interrupt: h.interrupt.clone(),
                },
                None => ChangeClass::VersionUnordered {
                    from: b.version.clone(),
                    to: h.version.clone(),
                },
            },
        );
    }

    // Uninstall toggles come first in the lifecycle: an uninstalling package does no config.
    let uninstall_requested = !b.is_uninstalling() && h.is_uninstalling();
    if uninstall_requested {
        out.push(ChangeClass::UninstallRequested {
            interrupt: h.interrupt.clone(),
        });
    } else if b.is_uninstalling() && !h.is_uninstalling() {
        out.push(ChangeClass::UninstallCancelled);
    }
    if b.uninstall_enabled() != h.uninstall_enabled() && !uninstall_requested {
        out.push(ChangeClass::UninstallEnabledChanged {
            before: b.uninstall_enabled(),
            after: h.uninstall_enabled(),
        });
    }

    // A version change clears configUpdates and runs config as part of its lane, so config
    // differences ride along; likewise nothing is configured while uninstalling (§6.8).
    if !version_changed && !h.is_uninstalling() && b.config_map() != h.config_map() {
        out.push(config_class(b, h));
    }

    if (b.image != h.image || b.container_sha != h.container_sha) && !version_changed {
        out.push(ChangeClass::ImageOnly {
            before: b.pull_image(),
            after: h.pull_image(),
        });
    }
    if b.interrupt != h.interrupt {
        out.push(ChangeClass::InterruptChanged {
            before: b.interrupt.clone(),
            after: h.interrupt.clone(),
        });
    }
    if b.config_interrupts() != h.config_interrupts() {
        let (added, removed, changed) = map_delta(b.config_interrupts(), h.config_interrupts());
        out.push(ChangeClass::ConfigInterruptsChanged {
            added,
            removed,
            changed,
        });
    }
    if b.depends_on() != h.depends_on() {
        let pairs = |p: &Package| -> BTreeSet<String> {
            p.depends_on()
                .iter()
                .map(|(n, v)| format!("{n}|{v}"))
                .collect()
        };
        let (bd, hd) = (pairs(b), pairs(h));
        out.push(ChangeClass::DependsOnChanged {
            added: hd.difference(&bd).cloned().collect(),
            removed: bd.difference(&hd).cloned().collect(),
        });
    }
    let mut other = Vec::new();
    if b.env != h.env {
        other.push("env".to_owned());
    }
    if b.resources != h.resources {
        other.push("resources".to_owned());
    }
    if b.agent_image_override != h.agent_image_override {
        other.push("agentImageOverride".to_owned());
    }
    if b.graceful_shutdown != h.graceful_shutdown {
        other.push("gracefulShutdown".to_owned());
    }
    if b.stage_timeout != h.stage_timeout {
        other.push("stageTimeout".to_owned());
    }
    if !other.is_empty() && !version_changed {
        out.push(ChangeClass::OtherFields { fields: other });
    }
    out
}

fn downgrade(b: &Package, h: &Package) -> ChangeClass {
    let (from, to) = (b.version.clone(), h.version.clone());
    if !b.uninstall_enabled() {
        return ChangeClass::Downgrade {
            from,
            to,
            allowed: true,
            explanation: format!(
                "downgrade: nothing runs for {} (no uninstall: uninstall.enabled=false), its files stay and its entry remains as a marker; {} installs fresh from apply (§6.7)",
                b.version, h.version
            ),
        };
    }
    if !b.is_uninstalling() {
        return ChangeClass::Downgrade {
            from,
            to,
            allowed: false,
            explanation: "refused: versions are identities, so a downgrade is a removal followed by a fresh install; with uninstall.enabled=true the old version must be uninstalled first — set uninstall.apply=true, wait for the uninstall to complete on every node, then lower the version (with apply=false in the same edit) (§3.2, §6.7)".to_owned(),
        };
    }
    let still_applying = h.is_uninstalling();
    ChangeClass::Downgrade {
        from,
        to,
        allowed: true,
        explanation: if still_applying {
            format!(
                "accepted once {} is uninstalled on every node (checked against the cluster); uninstall.apply is still true, so {} is treated as already uninstalled and never installs — set apply=false in this edit (§6.7, §15)",
                b.version, h.version
            )
        } else {
            format!(
                "accepted once {} is uninstalled on every node (checked against the cluster); {} then installs fresh from apply (§6.7)",
                b.version, h.version
            )
        },
    }
}

fn config_class(b: &Package, h: &Package) -> ChangeClass {
    let (bm, hm) = (b.config_map(), h.config_map());
    if hm.is_empty() {
        return ChangeClass::ConfigEmptied {
            removed: bm.keys().cloned().collect(),
        };
    }
    let added: Vec<String> = hm
        .keys()
        .filter(|k| !bm.contains_key(*k))
        .cloned()
        .collect();
    let removed: Vec<String> = bm
        .keys()
        .filter(|k| !hm.contains_key(*k))
        .cloned()
        .collect();
    let changed: Vec<String> = hm
        .iter()
        .filter(|(k, v)| bm.get(*k).is_some_and(|old| old != *v))
        .map(|(k, _)| k.clone())
        .collect();
    // §16.3: a node's changed keys are the keys added, removed or with a different value;
    // the interrupt is every configInterrupts pattern (of the head spec) matching one.
    let mut interrupts = Vec::new();
    for key in added.iter().chain(&changed).chain(&removed) {
        for (pattern, interrupt) in h.config_interrupts() {
            if nodewright_schema::glob::matches(pattern, key) {
                interrupts.push(ConfigInterruptMatch {
                    key: key.clone(),
                    pattern: pattern.clone(),
                    interrupt: interrupt.clone(),
                });
            }
        }
    }
    ChangeClass::Config {
        added,
        changed,
        removed,
        interrupts,
    }
}

fn map_delta<V: PartialEq>(
    b: &BTreeMap<String, V>,
    h: &BTreeMap<String, V>,
) -> (Vec<String>, Vec<String>, Vec<String>) {
    let added = h.keys().filter(|k| !b.contains_key(*k)).cloned().collect();
    let removed = b.keys().filter(|k| !h.contains_key(*k)).cloned().collect();
    let changed = h
        .iter()
        .filter(|(k, v)| b.get(*k).is_some_and(|old| old != *v))
        .map(|(k, _)| k.clone())
        .collect();
    (added, removed, changed)
}

/// NodeWright-level fields worth a line in the PR comment when a NodeWright is new.
fn added_fields(h: &NodeWright) -> Vec<FieldChange> {
    let empty = NodeWright::new(h.name(), Default::default());
    field_changes(&empty, h)
        .into_iter()
        .filter(|f| {
            matches!(
                f.field.as_str(),
                "nodeSelectors" | "deploymentPolicy" | "interruptionBudget" | "pause" | "disable"
            )
        })
        .collect()
}

fn field_changes(b: &NodeWright, h: &NodeWright) -> Vec<FieldChange> {
    let bv = serde_json::to_value(&b.spec).unwrap_or(Value::Null);
    let hv = serde_json::to_value(&h.spec).unwrap_or(Value::Null);
    let field = |v: &Value, f: &str| v.get(f).cloned().unwrap_or(Value::Null);
    let mut out = Vec::new();
    let spec_fields: [(&str, &str); 13] = [
        (
            "nodeSelectors",
            "re-evaluated every pass: newly matching nodes are enrolled and get every package; nodes no longer matching leave scope (their host changes and node state stay)",
        ),
        (
            "interruptionBudget",
            "changes how many nodes of the default compartment are worked at once",
        ),
        (
            "deploymentPolicy",
            "the rollout follows this policy's compartments, budgets and batch strategies from now on",
        ),
        (
            "deploymentPolicyOptions",
            "changes whether batch state resets when the rollout completes",
        ),
        (
            "priority",
            "changes the order across NodeWrights (lower first, ties by name); later priorities wait for earlier ones on each node (§5.10)",
        ),
        (
            "sequencing",
            "node: gates later priorities per node; all: gates them until this NodeWright is complete everywhere (§5.10)",
        ),
        (
            "serial",
            "true: one package at a time per node; false: independent packages run in parallel",
        ),
        (
            "podNonInterruptLabels",
            "changes which pods must finish before a drain starts (§7.5)",
        ),
        (
            "drainConfig",
            "changes how nodes are drained before interrupt work (§7)",
        ),
        (
            "additionalTolerations",
            "changes package pod tolerations and which tainted nodes are blocked (§5.8)",
        ),
        (
            "runtimeRequired",
            "changes whether nodes keep the runtime-required taint until this NodeWright completes (§10.3)",
        ),
        (
            "runtimeRequiredCordonAfter",
            "changes whether nodes are cordoned when the runtime-required taint is removed (§10.5)",
        ),
        (
            "autoTaintNewNodes",
            "changes whether new matching nodes are tainted runtime-required (§10.4)",
        ),
    ];
    for (name, effect) in spec_fields {
        let (before, after) = (field(&bv, name), field(&hv, name));
        if before != after {
            out.push(FieldChange {
                field: name.to_owned(),
                before,
                after,
                effect: effect.to_owned(),
            });
        }
    }
    let (bp, hp) = (b.is_paused(), h.is_paused());
    if bp != hp {
        out.push(FieldChange {
            field: "pause".to_owned(),
            before: Value::Bool(bp),
            after: Value::Bool(hp),
            effect: if hp {
                "paused: this NodeWright and everything after it in priority stop on its nodes; running stages are suspended (§5.11)".to_owned()
            } else {
                "resumed: suspended stages continue and later priorities proceed (§5.11)".to_owned()
            },
        });
    }
    out.extend(window_changes(
        b.metadata.annotations.as_ref(),
        h.metadata.annotations.as_ref(),
    ));
    out.extend(approval_changes(
        b.metadata.annotations.as_ref(),
        h.metadata.annotations.as_ref(),
    ));
    let (bd, hd) = (b.is_disabled(), h.is_disabled());
    if bd != hd {
        out.push(FieldChange {
            field: "disable".to_owned(),
            before: Value::Bool(bd),
            after: Value::Bool(hd),
            effect: if hd {
                "disabled: skipped; later priorities proceed as if it were absent; running stages finish (§5.11)".to_owned()
            } else {
                "enabled again: dispatch resumes (§5.11)".to_owned()
            },
        });
    }
    out
}

fn policy_changes(base: &Desired, head: &Desired) -> Vec<PolicyChange> {
    let name = |p: &DeploymentPolicy| p.metadata.name.clone().unwrap_or_default();
    let bp: BTreeMap<String, &DeploymentPolicy> =
        base.policies.iter().map(|p| (name(p), p)).collect();
    let hp: BTreeMap<String, &DeploymentPolicy> =
        head.policies.iter().map(|p| (name(p), p)).collect();
    let names: BTreeSet<&String> = bp.keys().chain(hp.keys()).collect();
    let mut out = Vec::new();
    for n in names {
        let used_by: Vec<String> = head
            .nodewrights
            .iter()
            .filter(|nw| nw.spec.deployment_policy.as_deref() == Some(n.as_str()))
            .map(|nw| nw.name().to_owned())
            .collect();
        let (change, parts) = match (bp.get(n), hp.get(n)) {
            (None, Some(_)) => (ObjectChange::Added, Vec::new()),
            (Some(_), None) => (ObjectChange::Removed, Vec::new()),
            (Some(b), Some(h)) => {
                let windows = window_changes(
                    b.metadata.annotations.as_ref(),
                    h.metadata.annotations.as_ref(),
                );
                if b.spec == h.spec && windows.is_empty() {
                    continue;
                }
                let mut parts = super::pace::policy_parts(b, h);
                parts.extend(windows.iter().map(|w| {
                    let text =
                        |v: &Value| v.as_str().map_or("none".to_string(), |s| format!("{s:?}"));
                    format!("{} {} → {}", w.field, text(&w.before), text(&w.after))
                }));
                (ObjectChange::Changed, parts)
            }
            (None, None) => continue,
        };
        out.push(PolicyChange {
            name: n.clone(),
            change,
            parts,
            used_by,
            base_yaml: bp.get(n).map(|p| yaml(*p)),
            head_yaml: hp.get(n).map(|p| yaml(*p)),
        });
    }
    out
}

/// Changes of the maintenance-window annotations (docs/maintenance-windows.md), as fields.
fn window_changes(
    b: Option<&BTreeMap<String, String>>,
    h: Option<&BTreeMap<String, String>>,
) -> Vec<FieldChange> {
    use nodewright_schema::keys::{MAINTENANCE_TIMEZONE, MAINTENANCE_WINDOWS};
    let mut out = Vec::new();
    for (key, field) in [
        (MAINTENANCE_WINDOWS, "maintenance-windows"),
        (MAINTENANCE_TIMEZONE, "maintenance-timezone"),
    ] {
        let before = b.and_then(|a| a.get(key));
        let after = h.and_then(|a| a.get(key));
        if before == after {
            continue;
        }
        let value = |v: Option<&String>| v.map_or(Value::Null, |v| Value::String(v.clone()));
        let effect = match (key, after) {
            (MAINTENANCE_WINDOWS, None) => "no windows: new nodes are admitted whenever their batch comes up".to_owned(),
            (MAINTENANCE_WINDOWS, Some(_)) => "new nodes are admitted only while a window is open; nodes already admitted finish what they started".to_owned(),
            _ => "the windows' wall-clock times are read in this timezone (default UTC)".to_owned(),
        };
        out.push(FieldChange {
            field: field.to_owned(),
            before: value(before),
            after: value(after),
            effect,
        });
    }
    out
}

/// The [`FieldChange::field`] of an approval edit: a change class of its own in the summary.
pub const APPROVAL_FIELD: &str = "approval";

/// Changes of the approval gate (docs/approvals.md): the gated compartments, and per
/// compartment what an `approved-batches` edit approves or withdraws. Values that do not
/// parse are the validation's errors, not changes.
fn approval_changes(
    b: Option<&BTreeMap<String, String>>,
    h: Option<&BTreeMap<String, String>>,
) -> Vec<FieldChange> {
    use nodewright_schema::approvals::approved_value;
    use nodewright_schema::keys::APPROVAL_REQUIRED;
    let mut out = Vec::new();
    let (required_b, required_h) = (
        b.and_then(|a| a.get(APPROVAL_REQUIRED)),
        h.and_then(|a| a.get(APPROVAL_REQUIRED)),
    );
    if required_b != required_h {
        let value = |v: Option<&String>| v.map_or(Value::Null, |v| Value::String(v.clone()));
        out.push(FieldChange {
            field: "approval-required".to_owned(),
            before: value(required_b),
            after: value(required_h),
            effect: match required_h {
                Some(_) => "in the gated compartments each batch after the first waits for an approval commit".to_owned(),
                None => "no gate: every batch follows the last without waiting for an approval".to_owned(),
            },
        });
    }
    let approved = |a: Option<&BTreeMap<String, String>>| {
        approved_value(a).and_then(Result::ok).unwrap_or_default()
    };
    let (before, after) = (approved(b), approved(h));
    let compartments: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    for c in compartments {
        let (was, now) = (before.get(c).copied(), after.get(c).copied());
        let effect = match (was, now) {
            (None, None) => continue,
            (Some(w), Some(n)) if w == n => continue,
            (Some(w), None) => format!(
                "withdraws the approval of {c} (was up to batch {w}): its batches after the first wait for approval"
            ),
            (Some(w), Some(n)) if n < w => format!(
                "approves {c} only up to batch {n} (was {w}): batches after it wait for a new approval"
            ),
            (was, Some(n)) => {
                let earlier = was.unwrap_or(1).max(1) + 1 < n;
                format!(
                    "approves {c} batch {n}{}",
                    if earlier {
                        " and the batches before it"
                    } else {
                        ""
                    }
                )
            }
        };
        let value = |k: Option<u32>| k.map_or(Value::Null, |k| Value::String(format!("{c}={k}")));
        out.push(FieldChange {
            field: APPROVAL_FIELD.to_owned(),
            before: value(was),
            after: value(now),
            effect,
        });
    }
    out
}

/// The interrupt type that dominates a set when coalesced on one node (§6.13: lowest rank).
pub fn dominant_interrupt<'a>(
    interrupts: impl IntoIterator<Item = &'a Interrupt>,
) -> Option<InterruptType> {
    interrupts
        .into_iter()
        .map(|i| i.kind)
        .min_by_key(|k| k.rank())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkg(yaml: &str) -> Package {
        serde_yaml::from_str(yaml).expect("test package parses")
    }

    #[test]
    fn a_version_change_carries_config_image_and_field_edits_along() {
        let b = pkg(
            "{version: 1.0.0, image: r/a, configMap: {k: '1'}, configInterrupts: {k: {type: reboot}}}",
        );
        let h = pkg(
            "{version: 1.1.0, image: r/b, configMap: {k: '2'}, configInterrupts: {k: {type: reboot}}, env: [{name: A, value: b}]}",
        );
        let classes = package_classes(&b, &h);
        assert_eq!(classes.len(), 1, "{classes:?}");
        assert!(matches!(
            &classes[0],
            ChangeClass::Upgrade {
                interrupt: None,
                ..
            }
        ));
    }

    #[test]
    fn equal_precedence_spellings_are_a_new_version_not_a_downgrade() {
        let classes = package_classes(
            &pkg("{version: v1.2.0, image: r/a}"),
            &pkg("{version: 1.2.0, image: r/a}"),
        );
        assert!(
            matches!(&classes[0], ChangeClass::Upgrade { .. }),
            "{classes:?}"
        );
        let classes = package_classes(
            &pkg("{version: 1.0.0, image: r/a}"),
            &pkg("{version: banana, image: r/a}"),
        );
        assert!(
            matches!(&classes[0], ChangeClass::VersionUnordered { .. }),
            "{classes:?}"
        );
    }

    #[test]
    fn removed_config_keys_cost_their_interrupt_and_uninstalling_packages_do_no_config() {
        let b = pkg(
            "{version: 1.0.0, image: r/a, configMap: {a.conf: '1', keep: x}, configInterrupts: {'*.conf': {type: restartAllServices}}}",
        );
        let h = pkg("{version: 1.0.0, image: r/a, configMap: {keep: x}}");
        match &package_classes(&b, &h)[0] {
            ChangeClass::Config {
                removed,
                interrupts,
                ..
            } => {
                assert_eq!(removed, &["a.conf"]);
                // The head spec has no configInterrupts: nothing matches, no interrupt.
                assert!(interrupts.is_empty());
            }
            other => panic!("{other:?}"),
        }
        let h2 = pkg(
            "{version: 1.0.0, image: r/a, configMap: {keep: x}, configInterrupts: {'*.conf': {type: restartAllServices}}}",
        );
        let b2 = pkg(
            "{version: 1.0.0, image: r/a, configMap: {a.conf: '1', keep: x}, configInterrupts: {'*.conf': {type: restartAllServices}}}",
        );
        // A removed key still matches the pattern (§16.3 counts removals as changed keys);
        // the admission rule that a pattern must match a key is the head's validation's job.
        match &package_classes(&b2, &h2)[0] {
            ChangeClass::Config { interrupts, .. } => assert_eq!(interrupts.len(), 1),
            other => panic!("{other:?}"),
        }
        let uninstalling = pkg(
            "{version: 1.0.0, image: r/a, configMap: {keep: y}, uninstall: {enabled: true, apply: true}}",
        );
        let before =
            pkg("{version: 1.0.0, image: r/a, configMap: {keep: x}, uninstall: {enabled: true}}");
        let classes = package_classes(&before, &uninstalling);
        assert_eq!(
            classes,
            vec![ChangeClass::UninstallRequested { interrupt: None }]
        );
    }

    #[test]
    fn the_dominant_interrupt_is_the_lowest_rank() {
        let i = |t: &str| -> Interrupt {
            serde_yaml::from_str(&format!("{{type: {t}}}")).expect("interrupt parses")
        };
        let all = [
            i("noop"),
            i("service"),
            i("reboot"),
            i("restartAllServices"),
        ];
        assert_eq!(dominant_interrupt(&all), Some(InterruptType::Reboot));
        assert_eq!(dominant_interrupt(&all[..2]), Some(InterruptType::Service));
        assert_eq!(dominant_interrupt(&[]), None);
    }
}
