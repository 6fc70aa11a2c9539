//! The operational verbs of upstream's kubectl plugin (spec/operator.md §14): `reset`,
//! `node …`, `package …`, `pause|resume|disable|enable`, `deployment-policy reset`.
//!
//! Each verb is planned as a pure function over a [`Snapshot`]: it returns the [`Action`]s it
//! would execute and a human account of every change, so `--dry-run` and the missing
//! `--confirm` show exactly what would happen and change nothing. Execution goes through the
//! [`crate::cluster::Cluster`] port, so the verbs work the same against the simulator, `sim
//! serve` and a real cluster. Every effect is an edit of annotations, labels or status: the
//! reconciler picks it up on its next pass (§14.7).

pub mod lifecycle;
pub mod node;
pub mod package;
pub mod policy;
pub mod reset;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use nodewright_schema::{NodeState, NodeWright, keys};
use regex::Regex;
use serde::Serialize;

use crate::plan::Action;
use crate::snapshot::Snapshot;

/// What a mutating verb would do.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VerbPlan {
    /// The writes, in order.
    pub actions: Vec<Action>,
    /// One line per change, for the user (`n1: remove annotation …`).
    pub changes: Vec<String>,
    /// Things the user must know (skipped nodes, kept annotations).
    pub warnings: Vec<String>,
    /// A final informational line when nothing needs changing.
    pub notes: Vec<String>,
}

impl VerbPlan {
    /// Whether the verb would change nothing.
    pub fn is_noop(&self) -> bool {
        self.actions.is_empty()
    }
}

/// A verb that cannot be planned, with the object it names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerbError {
    /// The NodeWright does not exist.
    #[error("nodewright {0:?} not found")]
    NodeWrightNotFound(String),
    /// The package is not in the NodeWright's spec.
    #[error("package {package:?} is not in the spec of nodewright {nodewright:?}")]
    PackageNotInSpec {
        /// NodeWright name.
        nodewright: String,
        /// Package name.
        package: String,
    },
    /// A node pattern is neither a node name nor a valid regular expression.
    #[error("node pattern {pattern:?} is not a valid regular expression: {reason}")]
    BadPattern {
        /// The pattern as given.
        pattern: String,
        /// The parser's explanation.
        reason: String,
    },
    /// No node matched the patterns.
    #[error("no node matches {0}")]
    NoNodeMatches(String),
    /// An argument value is not allowed.
    #[error("{0}")]
    InvalidArgument(String),
}

/// Node name patterns: exact names or regular expressions anchored to the whole name (§14.1).
#[derive(Debug, Clone)]
pub struct NodePatterns {
    raw: Vec<String>,
    compiled: Vec<Regex>,
}

impl NodePatterns {
    /// Compiles the patterns; an empty list matches every node.
    pub fn new(patterns: &[String]) -> Result<Self, VerbError> {
        let compiled = patterns
            .iter()
            .map(|p| {
                Regex::new(&format!("^(?:{p})$")).map_err(|e| VerbError::BadPattern {
                    pattern: p.clone(),
                    reason: e.to_string(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(NodePatterns {
            raw: patterns.to_vec(),
            compiled,
        })
    }

    /// Whether the node name matches (exactly, or as a regular expression).
    pub fn matches(&self, node: &str) -> bool {
        self.raw.is_empty()
            || self.raw.iter().any(|p| p == node)
            || self.compiled.iter().any(|re| re.is_match(node))
    }

    /// Whether no pattern was given.
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// The patterns as the user wrote them, for messages.
    pub fn describe(&self) -> String {
        self.raw.join(", ")
    }
}

/// Output format of the read verbs and of the change account (`-o`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Aligned columns.
    #[default]
    Table,
    /// Columns with extra detail.
    Wide,
    /// JSON document.
    Json,
    /// YAML document.
    Yaml,
}

/// Finds a NodeWright by name.
pub fn find_nodewright<'a>(
    snapshot: &'a Snapshot,
    name: &str,
) -> Result<&'a NodeWright, VerbError> {
    snapshot
        .nodewrights
        .iter()
        .map(|nw| &**nw)
        .find(|nw| nw.name() == name)
        .ok_or_else(|| VerbError::NodeWrightNotFound(name.to_string()))
}

/// A node's name.
pub fn node_name(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or_default()
}

/// A node annotation value.
pub fn node_annotation<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// A node's labels (empty when none).
pub fn node_labels(node: &Node) -> BTreeMap<String, String> {
    node.metadata.labels.clone().unwrap_or_default()
}

/// Whether `node.spec.unschedulable` is set.
pub fn is_cordoned(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

/// Whether the NodeWright's `nodeSelectors` select the node (empty selects every node).
pub fn selects(nw: &NodeWright, node: &Node) -> bool {
    nodewright_schema::selector::matches(nw.spec.node_selectors.as_ref(), &node_labels(node))
}

/// The parsed node-state of a NodeWright on a node: `None` when absent, `Err` when malformed.
pub fn node_state_of(node: &Node, nw: &str) -> Option<Result<NodeState, String>> {
    node_annotation(node, &keys::node_state(nw))
        .map(|raw| NodeState::parse(raw).map_err(|e| e.to_string()))
}

/// Renders serializable rows as JSON or YAML, or as a table through `table`.
pub fn render<T: Serialize>(
    rows: &T,
    format: OutputFormat,
    table: impl FnOnce(bool) -> Vec<Vec<String>>,
) -> String {
    match format {
        OutputFormat::Json => serde_json::to_string_pretty(rows).unwrap_or_default() + "\n",
        OutputFormat::Yaml => serde_yaml::to_string(rows).unwrap_or_default(),
        OutputFormat::Table | OutputFormat::Wide => {
            format_table(&table(format == OutputFormat::Wide))
        }
    }
}

/// Aligns rows into columns (first row is the header).
pub fn format_table(rows: &[Vec<String>]) -> String {
    // Names and messages come from repositories and clusters: one line per row, whatever they
    // hold.
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            row.iter()
                .map(|cell| crate::text::terminal(cell).into_owned())
                .collect()
        })
        .collect();
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, cell)| {
                if i + 1 == row.len() {
                    cell.clone()
                } else {
                    format!("{cell:<width$}", width = widths[i])
                }
            })
            .collect();
        out.push_str(line.join("   ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
pub(crate) mod testkit {
    //! Small builders for verb tests.
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{Node, NodeSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
    use nodewright_schema::{NodeWright, NodeWrightSpec, NodeWrightStatus, Package};

    pub fn node(name: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec::default()),
            status: None,
        }
    }

    pub fn cordoned(mut node: Node) -> Node {
        node.spec
            .get_or_insert_with(NodeSpec::default)
            .unschedulable = Some(true);
        node
    }

    pub fn nodewright(
        name: &str,
        selector: &[(&str, &str)],
        packages: &[(&str, &str)],
    ) -> NodeWright {
        let mut nw = NodeWright::new(
            name,
            NodeWrightSpec {
                node_selectors: Some(LabelSelector {
                    match_labels: Some(
                        selector
                            .iter()
                            .map(|(k, v)| (k.to_string(), v.to_string()))
                            .collect(),
                    ),
                    match_expressions: None,
                }),
                packages: Some(
                    packages
                        .iter()
                        .map(|(n, v)| {
                            (
                                n.to_string(),
                                Package {
                                    version: v.to_string(),
                                    image: format!("example/{n}"),
                                    ..Package::default()
                                },
                            )
                        })
                        .collect::<BTreeMap<_, _>>(),
                ),
                priority: 200,
                ..NodeWrightSpec::default()
            },
        );
        nw.status = Some(NodeWrightStatus::default());
        nw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_exact_names_and_anchored_regexes() {
        let p = NodePatterns::new(&["gpu-[0-2]".to_string(), "cpu.a".to_string()]).unwrap();
        assert!(p.matches("gpu-1"));
        assert!(!p.matches("gpu-10"));
        assert!(p.matches("cpu.a"));
        assert!(p.matches("cpuXa"));
        assert!(NodePatterns::new(&[]).unwrap().matches("anything"));
        assert!(matches!(
            NodePatterns::new(&["(".to_string()]),
            Err(VerbError::BadPattern { .. })
        ));
    }

    #[test]
    fn tables_align_columns() {
        let t = format_table(&[
            vec!["NODE".into(), "STATUS".into()],
            vec!["n-long".into(), "complete".into()],
        ]);
        assert_eq!(t, "NODE     STATUS\nn-long   complete\n");
    }
}
