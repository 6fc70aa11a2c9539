//! Admission and validation (spec/operator.md §3) as pure functions.
//!
//! Every function returns **all** violations it finds, in the spec's rule order, each with a
//! field path, a rule and a severity, so `nodewright validate` can show a user everything to fix
//! at once (upstream's webhook stops at the first). Messages are the spec's *inner* texts;
//! [`Violation::admission_message`] renders the exact string upstream's webhook would return
//! (UP+ wraps §3.1 rules 1–22 as `validating NodeWright "<nw>": …`).
//!
//! Layers, in the order the apiserver applies them:
//! 1. [`structural`]: the CRD schema (§3.3) over the raw object, before typed decoding;
//! 2. [`nodewright`]: the NodeWright webhook (§3.1, §3.2 with the old object);
//! 3. [`policy`]: the DeploymentPolicy webhook (§3.4) and its defaulting (§2.1).

use std::collections::{BTreeSet, HashSet};
use std::fmt;

use serde::{Serialize, Serializer};

pub mod nodewright;
pub mod policy;
pub mod rules;
pub mod structural;

pub use nodewright::{
    MAX_NODEWRIGHT_NAME_LEN, nodewright_create, nodewright_metadata, nodewright_update,
    validate_nodewright_value,
};
pub use policy::{default_policy, policy_delete, policy_spec, validate_policy_value};
pub use rules::Rule;

/// This project's maintenance-window annotations (on a NodeWright or a DeploymentPolicy) must
/// parse: a commit whose windows cannot be evaluated is rejected like any invalid commit.
pub fn maintenance_annotations(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
) -> Vec<Violation> {
    use crate::keys::{MAINTENANCE_TIMEZONE, MAINTENANCE_WINDOWS};
    let Some(annotations) = annotations else {
        return Vec::new();
    };
    let path = |key: &str| FieldPath::of(&["metadata", "annotations", key]);
    let windows = annotations.get(MAINTENANCE_WINDOWS);
    let timezone = annotations.get(MAINTENANCE_TIMEZONE).map(String::as_str);
    let mut out = Vec::new();
    if let Some(tz) = timezone
        && let Err(e) = crate::maintenance::check_timezone(tz)
    {
        out.push(Violation::error(
            rules::MAINTENANCE_WINDOW,
            path(MAINTENANCE_TIMEZONE),
            e.to_string(),
        ));
    }
    if let Some(windows) = windows
        && let Err(e) = crate::maintenance::check_windows(windows)
    {
        out.push(Violation::error(
            rules::MAINTENANCE_WINDOW,
            path(MAINTENANCE_WINDOWS),
            e.to_string(),
        ));
    }
    out
}

/// This project's approval-gate annotations on a NodeWright must parse (docs/approvals.md).
pub fn approval_annotations(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
) -> Vec<Violation> {
    use crate::approvals;
    use crate::keys::{APPROVAL_REQUIRED, APPROVED_BATCHES};
    let path = |key: &str| FieldPath::of(&["metadata", "annotations", key]);
    let mut out = Vec::new();
    if let Some(Err(e)) = approvals::declared(annotations) {
        out.push(Violation::error(
            rules::APPROVAL_GATE,
            path(APPROVAL_REQUIRED),
            e.to_string(),
        ));
    }
    if let Some(Err(e)) = approvals::approved_value(annotations) {
        out.push(Violation::error(
            rules::APPROVAL_GATE,
            path(APPROVED_BATCHES),
            e.to_string(),
        ));
    }
    out
}

/// The approval-gate annotations of a NodeWright against its compartments (its policy's and
/// `__default__`, each with whether it has a strategy): a gate or an approval naming another
/// compartment is an error; a gated compartment without a strategy has no batches to hold, a
/// warning. Values that do not parse are left to [`approval_annotations`].
pub fn approval_compartments(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
    compartments: &[(&str, bool)],
) -> Vec<Violation> {
    use crate::approvals::{self, Gated};
    use crate::keys::{APPROVAL_REQUIRED, APPROVED_BATCHES};
    let path = |key: &str| FieldPath::of(&["metadata", "annotations", key]);
    let known = |name: &str| compartments.iter().any(|(c, _)| *c == name);
    let list = compartments
        .iter()
        .map(|(c, _)| *c)
        .collect::<Vec<_>>()
        .join(", ");
    let mut out = Vec::new();
    if let Some(Ok(gated)) = approvals::declared(annotations) {
        for name in gated.named().filter(|n| !known(n)) {
            out.push(Violation::error(
                rules::APPROVAL_GATE,
                path(APPROVAL_REQUIRED),
                format!(
                    "gates compartment {name:?}, which this NodeWright does not have (its compartments: {list})"
                ),
            ));
        }
        if let Gated::Only(_) = gated {
            for (name, _) in compartments
                .iter()
                .filter(|(c, strategy)| !strategy && gated.covers(c))
            {
                out.push(Violation::warning(
                    rules::APPROVAL_GATE,
                    path(APPROVAL_REQUIRED),
                    format!(
                        "compartment {name:?} has no strategy, so it runs without batches and the gate never holds it; give it a strategy to roll it out in approved batches"
                    ),
                ));
            }
        }
    }
    if let Some(Ok(approved)) = approvals::approved_value(annotations) {
        for name in approved.keys().filter(|n| !known(n)) {
            out.push(Violation::error(
                rules::APPROVAL_GATE,
                path(APPROVED_BATCHES),
                format!(
                    "approves compartment {name:?}, which this NodeWright does not have (its compartments: {list})"
                ),
            ));
        }
    }
    out
}

/// How serious a violation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The object is rejected.
    Error,
    /// Accepted, but the user should know (e.g. §3.2 uninstall cancel).
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

/// One step of a [`FieldPath`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Segment {
    /// An object field or map key.
    Key(String),
    /// A list index.
    Index(usize),
}

/// Where in an object a violation is, e.g. `spec.packages.driver.dependsOn`.
///
/// Rendered like apiserver field paths: keys joined with `.`, list indices as `[i]`; a map
/// key that is not a plain identifier (`*.conf`, `a.b`) is rendered as `[key]` so the path
/// stays unambiguous.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FieldPath(pub Vec<Segment>);

impl FieldPath {
    /// The empty path (the object itself).
    pub fn root() -> FieldPath {
        FieldPath(Vec::new())
    }
    /// A path of plain keys, e.g. `FieldPath::of(&["spec", "priority"])`.
    pub fn of(keys: &[&str]) -> FieldPath {
        FieldPath(keys.iter().map(|k| Segment::Key(k.to_string())).collect())
    }
    /// This path extended by a key.
    pub fn key(&self, key: impl Into<String>) -> FieldPath {
        let mut p = self.clone();
        p.0.push(Segment::Key(key.into()));
        p
    }
    /// This path extended by a list index.
    pub fn index(&self, i: usize) -> FieldPath {
        let mut p = self.clone();
        p.0.push(Segment::Index(i));
        p
    }
    /// The segments.
    pub fn segments(&self) -> &[Segment] {
        &self.0
    }
    /// Whether this is the root path.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }
}

fn plain_key(k: &str) -> bool {
    !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                Segment::Key(k) if plain_key(k) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                Segment::Key(k) => write!(f, "[{k}]")?,
                Segment::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

impl PartialEq<&str> for FieldPath {
    fn eq(&self, other: &&str) -> bool {
        let rendered: String = self.to_string();
        rendered.as_str() == *other
    }
}

impl Serialize for FieldPath {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// One admission finding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// The offending field.
    pub path: FieldPath,
    /// What is wrong (the spec's inner message text).
    pub message: String,
    /// Which rule.
    pub rule: Rule,
    /// Error or warning.
    pub severity: Severity,
}

impl Violation {
    /// An error.
    pub fn error(rule: Rule, path: FieldPath, message: impl Into<String>) -> Violation {
        Violation {
            path,
            message: message.into(),
            rule,
            severity: Severity::Error,
        }
    }
    /// A warning.
    pub fn warning(rule: Rule, path: FieldPath, message: impl Into<String>) -> Violation {
        Violation {
            path,
            message: message.into(),
            rule,
            severity: Severity::Warning,
        }
    }
    /// Whether the object is rejected.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
    /// The text upstream's webhook would return for this violation on object `name`
    /// (§3.1 rules 1–22 wrapped as `validating NodeWright "<nw>": …`, everything else as is).
    pub fn admission_message(&self, name: &str) -> String {
        if self.rule.wrapped {
            format!("validating NodeWright {name:?}: {}", self.message)
        } else {
            self.message.clone()
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.severity == Severity::Warning {
            f.write_str("warning: ")?;
        }
        if self.path.is_root() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Whether any violation rejects the object.
pub fn has_errors(violations: &[Violation]) -> bool {
    violations.iter().any(Violation::is_error)
}

/// Answers rule 23 of §3.1: does a DeploymentPolicy with this name exist?
pub trait PolicyCatalog {
    /// `Ok(true)` when it exists; `Err(text)` when the lookup itself failed.
    fn policy_exists(&self, name: &str) -> Result<bool, String>;
}

impl PolicyCatalog for BTreeSet<String> {
    fn policy_exists(&self, name: &str) -> Result<bool, String> {
        Ok(self.contains(name))
    }
}

impl PolicyCatalog for HashSet<String> {
    fn policy_exists(&self, name: &str) -> Result<bool, String> {
        Ok(self.contains(name))
    }
}

impl<F: Fn(&str) -> Result<bool, String>> PolicyCatalog for F {
    fn policy_exists(&self, name: &str) -> Result<bool, String> {
        self(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_render_like_the_apiserver() {
        let p = FieldPath::of(&["spec", "packages", "driver", "dependsOn"]);
        assert_eq!(p.to_string(), "spec.packages.driver.dependsOn");
        let p = FieldPath::of(&["spec", "compartments"])
            .index(1)
            .key("selector");
        assert_eq!(p.to_string(), "spec.compartments[1].selector");
        let p = FieldPath::of(&["spec", "packages", "t", "configInterrupts"]).key("*.conf");
        assert_eq!(p.to_string(), "spec.packages.t.configInterrupts[*.conf]");
    }
}
