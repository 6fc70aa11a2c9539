//! The per-node state annotation (`nodeState_<nw>`, spec/operator.md §4.2) and the three
//! lifecycle vocabularies: Status, State and Stage (§0).
//!
//! The stored form is byte-compatible with upstream: compact JSON, outer keys in ascending byte
//! order, entry fields in the fixed order `name, version, image, containerSHA, stage, state,
//! restarts`. Fields this version does not know are kept and written back after the known ones.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Status of a NodeWright, and of a node with respect to one NodeWright.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
pub enum Status {
    /// Every package complete.
    #[serde(rename = "complete")]
    Complete,
    /// Cannot proceed (ignore label, taints, missing policy).
    #[serde(rename = "blocked")]
    Blocked,
    /// Waiting for a batch slot or a predecessor.
    #[serde(rename = "waiting")]
    Waiting,
    /// Disabled by annotation.
    #[serde(rename = "disabled")]
    Disabled,
    /// Paused by annotation.
    #[serde(rename = "paused")]
    Paused,
    /// Work is running.
    #[serde(rename = "in_progress")]
    InProgress,
    /// A stage gave up or a drain timed out.
    #[serde(rename = "erroring")]
    Erroring,
    /// Not known yet.
    #[serde(rename = "unknown")]
    Unknown,
}

impl Status {
    /// Every value, in the order the Ready message lists buckets after `complete` (§12.1).
    pub const ALL: [Status; 8] = [
        Status::Complete,
        Status::InProgress,
        Status::Blocked,
        Status::Erroring,
        Status::Waiting,
        Status::Paused,
        Status::Disabled,
        Status::Unknown,
    ];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Complete => "complete",
            Status::Blocked => "blocked",
            Status::Waiting => "waiting",
            Status::Disabled => "disabled",
            Status::Paused => "paused",
            Status::InProgress => "in_progress",
            Status::Erroring => "erroring",
            Status::Unknown => "unknown",
        }
    }

    /// Reads an annotation value; absent or unrecognised values read as `unknown` (§4.1).
    pub fn from_annotation(value: Option<&str>) -> Status {
        value
            .and_then(|v| v.parse().ok())
            .unwrap_or(Status::Unknown)
    }
}

impl FromStr for Status {
    type Err = UnknownValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "complete" => Status::Complete,
            "blocked" => Status::Blocked,
            "waiting" => Status::Waiting,
            "disabled" => Status::Disabled,
            "paused" => Status::Paused,
            "in_progress" => Status::InProgress,
            "erroring" => Status::Erroring,
            "unknown" => Status::Unknown,
            other => return Err(UnknownValue(other.to_string())),
        })
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A value that is not one of an enum's wire spellings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown value {0:?}")]
pub struct UnknownValue(pub String);

/// State of one package on one node.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
pub enum State {
    /// The stage finished and its check passed.
    #[serde(rename = "complete")]
    Complete,
    /// The stage's Job is running (or about to).
    #[serde(rename = "in_progress")]
    InProgress,
    /// A sibling owns this node's merged interrupt (§6.14).
    #[serde(rename = "skipped")]
    Skipped,
    /// The stage failed.
    #[serde(rename = "erroring")]
    Erroring,
    /// Not known.
    #[serde(rename = "unknown")]
    Unknown,
}

impl State {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Complete => "complete",
            State::InProgress => "in_progress",
            State::Skipped => "skipped",
            State::Erroring => "erroring",
            State::Unknown => "unknown",
        }
    }
}

impl State {
    /// Every State, in wire order.
    pub const ALL: [State; 5] = [
        State::Complete,
        State::InProgress,
        State::Skipped,
        State::Erroring,
        State::Unknown,
    ];
}

impl FromStr for State {
    type Err = UnknownValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        State::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| UnknownValue(s.to_string()))
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Stage of one package on one node.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
pub enum Stage {
    /// First install.
    #[serde(rename = "apply")]
    Apply,
    /// Apply the configMap.
    #[serde(rename = "config")]
    Config,
    /// The (merged) interrupt.
    #[serde(rename = "interrupt")]
    Interrupt,
    /// After the interrupt.
    #[serde(rename = "post-interrupt")]
    PostInterrupt,
    /// Version increase.
    #[serde(rename = "upgrade")]
    Upgrade,
    /// Uninstall scripts.
    #[serde(rename = "uninstall")]
    Uninstall,
    /// The interrupt after an uninstall.
    #[serde(rename = "uninstall-interrupt")]
    UninstallInterrupt,
}

impl Stage {
    /// Every stage.
    pub const ALL: [Stage; 7] = [
        Stage::Apply,
        Stage::Config,
        Stage::Interrupt,
        Stage::PostInterrupt,
        Stage::Upgrade,
        Stage::Uninstall,
        Stage::UninstallInterrupt,
    ];

    /// The wire spelling (also the agent mode and the Job `stage` label).
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Apply => "apply",
            Stage::Config => "config",
            Stage::Interrupt => "interrupt",
            Stage::PostInterrupt => "post-interrupt",
            Stage::Upgrade => "upgrade",
            Stage::Uninstall => "uninstall",
            Stage::UninstallInterrupt => "uninstall-interrupt",
        }
    }

    /// Whether the stage is run by an interrupt Job.
    pub fn is_interrupt(self) -> bool {
        matches!(self, Stage::Interrupt | Stage::UninstallInterrupt)
    }

    /// Whether the stage belongs to the uninstall cycle.
    pub fn is_uninstall_cycle(self) -> bool {
        matches!(self, Stage::Uninstall | Stage::UninstallInterrupt)
    }

    /// Position in the rerun predicate's stage order (§8.14 rule 2; inferred order):
    /// uninstall/uninstall-interrupt < apply/upgrade < config < interrupt < post-interrupt.
    pub fn order(self) -> u8 {
        match self {
            Stage::Uninstall | Stage::UninstallInterrupt => 0,
            Stage::Apply | Stage::Upgrade => 1,
            Stage::Config => 2,
            Stage::Interrupt => 3,
            Stage::PostInterrupt => 4,
        }
    }
}

impl FromStr for Stage {
    type Err = UnknownValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Stage::ALL
            .into_iter()
            .find(|stage| stage.as_str() == s)
            .ok_or_else(|| UnknownValue(s.to_string()))
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of the node-state annotation (§4.2).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct PackageStatus {
    /// Package name (always present, even when empty).
    #[serde(default)]
    pub name: String,
    /// Package version (always present).
    #[serde(default)]
    pub version: String,
    /// Bare image, no tag (always present).
    #[serde(default)]
    pub image: String,
    /// Omitted when empty.
    #[serde(
        rename = "containerSHA",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub container_sha: String,
    /// Always present; `""` when unset.
    #[serde(default, with = "optional_stage")]
    #[schemars(with = "String")]
    pub stage: Option<Stage>,
    /// Omitted only when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<State>,
    /// Failed attempts; omitted when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restarts: i32,
    /// Fields written by other versions, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub extra: BTreeMap<String, serde_json::Value>,
}

fn is_zero(v: &i32) -> bool {
    *v == 0
}

impl PackageStatus {
    /// A fresh entry for a package at a stage and state.
    pub fn new(name: &str, version: &str, image: &str, stage: Stage, state: State) -> Self {
        PackageStatus {
            name: name.to_string(),
            version: version.to_string(),
            image: image.to_string(),
            container_sha: String::new(),
            stage: Some(stage),
            state: Some(state),
            restarts: 0,
            extra: BTreeMap::new(),
        }
    }

    /// Whether the entry records `stage` as `complete`.
    pub fn is(&self, stage: Stage, state: State) -> bool {
        self.stage == Some(stage) && self.state == Some(state)
    }
}

mod optional_stage {
    use super::Stage;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(stage: &Option<Stage>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(stage.map(Stage::as_str).unwrap_or(""))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Stage>, D::Error> {
        let raw = String::deserialize(d)?;
        if raw.is_empty() {
            return Ok(None);
        }
        raw.parse().map(Some).map_err(serde::de::Error::custom)
    }
}

/// Entry key `<pkg>|<ver>` (§6.1).
pub fn entry_key(name: &str, version: &str) -> String {
    format!("{name}|{version}")
}

/// Whether `key` is the entry key of `name` at `version` ([`entry_key`]), without building it:
/// the lookups of a package's entry or record run for every node, package and pass.
pub fn is_entry_key(key: &str, name: &str, version: &str) -> bool {
    key.len() == name.len() + 1 + version.len()
        && key.as_bytes()[name.len()] == b'|'
        && key.starts_with(name)
        && key.ends_with(version)
}

/// Splits an entry key into name and version; keys without `|` have an empty version.
pub fn split_entry_key(key: &str) -> (&str, &str) {
    key.split_once('|').unwrap_or((key, ""))
}

/// The node-state of one NodeWright on one node: `<pkg>|<ver>` → entry, in key order.
#[derive(Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(transparent)]
pub struct NodeState(#[schemars(with = "BTreeMap<String, PackageStatus>")] pub Entries);

/// A node's entries as a sorted vector: a node holds a handful, and a search tree sizes each
/// node for eleven (~1.8 KB for two entries), which a fleet pays per node and per copy held.
pub type Entries = litemap::LiteMap<String, PackageStatus>;

impl Serialize for NodeState {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter())
    }
}

impl<'de> Deserialize<'de> for NodeState {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntryMap;
        impl<'de> serde::de::Visitor<'de> for EntryMap {
            type Value = NodeState;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of package entries")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<NodeState, A::Error> {
                let mut entries: Vec<(String, PackageStatus)> = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                // Written states are in key order already. The sort is stable, so of a
                // repeated key the entry read last is kept, as a JSON object's reader does.
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                entries.dedup_by(|later, kept| {
                    let repeated = later.0 == kept.0;
                    if repeated {
                        std::mem::swap(later, kept);
                    }
                    repeated
                });
                // A parsed state lives as long as its node: no spare slots.
                entries.shrink_to_fit();
                Ok(NodeState(Entries::from_sorted_store_unchecked(entries)))
            }
        }
        deserializer.deserialize_map(EntryMap)
    }
}

/// A node-state annotation value that does not parse (the node is *malformed*, §4.2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("node-state annotation does not parse: {reason}")]
pub struct MalformedNodeState {
    /// The parser's explanation.
    pub reason: String,
}

impl NodeState {
    /// A state without entries (a node the NodeWright has not touched).
    pub const fn new() -> NodeState {
        NodeState(Entries::new_vec())
    }

    /// Parses an annotation value; any key order and whitespace are accepted.
    pub fn parse(value: &str) -> Result<NodeState, MalformedNodeState> {
        serde_json::from_str(value).map_err(|e| MalformedNodeState {
            reason: e.to_string(),
        })
    }

    /// The stored form: compact JSON, keys sorted, fields in upstream order.
    pub fn to_annotation(&self) -> String {
        // Serialization of string-keyed maps of plain structs cannot fail.
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_string())
    }

    /// The entry for `<name>|<version>`.
    pub fn get(&self, name: &str, version: &str) -> Option<&PackageStatus> {
        // A node holds a handful of entries: comparing lengths first rules out almost every
        // key, and beats a binary search that needs a built key.
        if self.0.len() <= 32 {
            return (self.0.iter())
                .find(|(k, _)| is_entry_key(k, name, version))
                .map(|(_, e)| e);
        }
        self.keyed_entries_of(name)
            .find(|(v, _)| *v == version)
            .map(|(_, e)| e)
    }

    /// Every entry of a package, whatever its version, in key order (no key is built: this
    /// runs for every node, package and pass).
    pub fn entries_of<'s>(&'s self, name: &str) -> impl Iterator<Item = &'s PackageStatus> {
        self.keyed_entries_of(name).map(|(_, e)| e)
    }

    /// (version, entry) of every entry `<name>|<version>`. Keys that start with `name` are
    /// contiguous in key order, so the walk starts at the first such key and stops after the
    /// last; keys of other packages that share the prefix (`name-x|…`) are skipped.
    fn keyed_entries_of<'s>(
        &'s self,
        name: &str,
    ) -> impl Iterator<Item = (&'s str, &'s PackageStatus)> {
        let first = self.0.find_index(name).unwrap_or_else(|at| at);
        self.0.as_slice()[first..]
            .iter()
            .take_while(move |(k, _)| k.starts_with(name))
            .filter_map(move |(k, e)| k[name.len()..].strip_prefix('|').map(|v| (v, e)))
    }

    /// A state holding only the entries of package `name` (every version), under the keys
    /// they have here: what a decision about one package reads, without copying the others.
    pub fn of_package(&self, name: &str) -> NodeState {
        NodeState(
            self.keyed_entries_of(name)
                .map(|(version, e)| (entry_key(name, version), e.clone()))
                .collect(),
        )
    }

    /// Inserts or replaces the entry for the package.
    pub fn upsert(&mut self, entry: PackageStatus) {
        self.0.insert(entry_key(&entry.name, &entry.version), entry);
    }

    /// Removes the entry for `<name>|<version>`.
    pub fn remove(&mut self, name: &str, version: &str) -> Option<PackageStatus> {
        self.0.remove(&entry_key(name, version))
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UPSTREAM: &str = r#"{"dax|1.2.3":{"name":"dax","version":"1.2.3","image":"ghcr.io/nvidia/skyhook/agentless","stage":"post-interrupt","state":"complete"},"zeb|2.1.4":{"name":"zeb","version":"2.1.4","image":"ghcr.io/nvidia/skyhook/agentless","containerSHA":"sha256:0000000000000000000000000000000000000000000000000000000000000000","stage":"config","state":"erroring","restarts":2}}"#;

    #[test]
    fn upstream_annotation_round_trips_byte_for_byte() {
        let state = NodeState::parse(UPSTREAM).unwrap();
        assert_eq!(state.to_annotation(), UPSTREAM);
        let dax = state.get("dax", "1.2.3").unwrap();
        assert_eq!(dax.stage, Some(Stage::PostInterrupt));
        assert_eq!(dax.state, Some(State::Complete));
        assert_eq!(state.get("zeb", "2.1.4").unwrap().restarts, 2);
    }

    #[test]
    fn lookups_by_package_skip_packages_that_share_a_name_prefix() {
        let mut state = NodeState::default();
        for (name, version) in [
            ("a", "1"),
            ("a-b", "1"),
            ("a", "2"),
            ("a~z", "1"),
            ("aa", "1"),
            ("b", "1"),
        ] {
            state.upsert(PackageStatus::new(
                name,
                version,
                "img",
                Stage::Apply,
                State::Complete,
            ));
        }
        let versions =
            |n: &str| -> Vec<String> { state.entries_of(n).map(|e| e.version.clone()).collect() };
        assert_eq!(versions("a"), ["1", "2"]);
        assert_eq!(versions("a-b"), ["1"]);
        assert_eq!(versions("a~z"), ["1"]);
        assert!(versions("a-").is_empty());
        assert!(versions("c").is_empty());
        let only_a = state.of_package("a");
        assert_eq!(
            only_a.0.keys().collect::<Vec<_>>(),
            ["a|1", "a|2"],
            "one package's entries under their keys, none of a-b, a~z or aa"
        );
        assert_eq!(only_a.get("a", "2"), state.get("a", "2"));
        assert_eq!(state.get("a", "2").unwrap().name, "a");
        assert_eq!(state.get("a-b", "1").unwrap().name, "a-b");
        assert!(state.get("a", "3").is_none());
        assert!(state.get("a-b", "2").is_none());
        // Large states take the sorted walk: same answers.
        for i in 0..40 {
            state.upsert(PackageStatus::new(
                &format!("p{i}"),
                "1",
                "img",
                Stage::Apply,
                State::Complete,
            ));
        }
        assert_eq!(state.get("a", "2").unwrap().name, "a");
        assert_eq!(state.get("a-b", "1").unwrap().name, "a-b");
        assert_eq!(state.get("p39", "1").unwrap().name, "p39");
        assert!(state.get("a", "3").is_none());
        assert!(state.get("p4", "2").is_none());
    }

    #[test]
    fn readers_accept_any_order_and_whitespace_and_writers_normalise() {
        let messy = r#"{ "b|1.0.0": {"state":"in_progress","stage":"apply","image":"i","version":"1.0.0","name":"b"},
                         "a|1.0.0": {"name":"a","version":"1.0.0","image":"i","stage":"","restarts":0} }"#;
        let state = NodeState::parse(messy).unwrap();
        assert_eq!(
            state.to_annotation(),
            r#"{"a|1.0.0":{"name":"a","version":"1.0.0","image":"i","stage":""},"b|1.0.0":{"name":"b","version":"1.0.0","image":"i","stage":"apply","state":"in_progress"}}"#
        );
    }

    #[test]
    fn unknown_fields_survive_a_round_trip() {
        let with_extra = r#"{"a|1":{"name":"a","version":"1","image":"i","stage":"apply","state":"complete","zz":{"k":1}}}"#;
        let state = NodeState::parse(with_extra).unwrap();
        assert_eq!(state.to_annotation(), with_extra);
    }

    #[test]
    fn empty_map_is_written_as_braces() {
        assert_eq!(NodeState::default().to_annotation(), "{}");
        assert!(NodeState::parse("{}").unwrap().is_empty());
        assert!(
            NodeState::parse("[]").is_err(),
            "a list is not a node state"
        );
    }

    #[test]
    fn a_repeated_key_keeps_its_last_entry() {
        let repeated = r#"{"b|1":{"name":"b","version":"1","image":"i","stage":"apply"},"a|1":{"name":"a","version":"1","image":"i","stage":"apply"},"b|1":{"name":"b","version":"1","image":"i","stage":"config"}}"#;
        let state = NodeState::parse(repeated).unwrap();
        assert_eq!(
            state.to_annotation(),
            r#"{"a|1":{"name":"a","version":"1","image":"i","stage":"apply"},"b|1":{"name":"b","version":"1","image":"i","stage":"config"}}"#
        );
    }

    #[test]
    fn garbage_is_malformed_not_empty() {
        assert!(NodeState::parse("{not json").is_err());
        assert!(NodeState::parse(r#"{"a|1":{"stage":"dance"}}"#).is_err());
    }

    #[test]
    fn status_reads_unknown_for_absent_or_unrecognised_values() {
        assert_eq!(Status::from_annotation(None), Status::Unknown);
        assert_eq!(Status::from_annotation(Some("Complete")), Status::Unknown);
        assert_eq!(
            Status::from_annotation(Some("in_progress")),
            Status::InProgress
        );
    }
}
