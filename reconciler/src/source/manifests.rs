//! Manifest loading: (path, bytes) pairs → typed NodeWright and DeploymentPolicy objects with
//! provenance, then whole-set validation.
//!
//! Used by the Git source (one commit's files), the simulator's scenario repositories and
//! `nodewright validate`. The loader never fails as a whole: everything it could not read is
//! an entry of [`Loaded::errors`], everything it skipped a [`Notice`], so a caller can report
//! all problems of a commit at once and apply all-or-nothing.
//!
//! Limits keep a hostile or broken repository from exhausting memory: file size, documents per
//! load, and per-document node count and expanded size — the latter bound YAML alias expansion
//! ("billion laughs"), which is counted while the value is built and refused once over budget.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nodewright_schema::validate::{self, FieldPath, PolicyCatalog, Segment, Violation};
use nodewright_schema::{DeploymentPolicy, NodeWright, keys, legacy};

use super::budget::Budget;
use serde::Serialize;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Bounds applied while loading (each is a [`Budget`] with its flag).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest manifest file read, in bytes (default 1 MiB).
    pub max_file_bytes: usize,
    /// Most manifest files read from a folder (default 10 000; a commit's tree walk counts
    /// its own).
    pub max_files: usize,
    /// Most bytes of manifest files read from a folder, all files together (default 64 MiB;
    /// a commit's tree walk counts its own).
    pub max_total_bytes: u64,
    /// Most YAML documents read in one load, across all files (default 10 000).
    pub max_documents: usize,
    /// Most YAML nodes (scalars, sequences, mappings) one document may expand to, aliases
    /// included (default 100 000).
    pub max_nodes_per_document: usize,
    /// Most scalar bytes one document may expand to, aliases included (default 8 MiB).
    pub max_expanded_bytes_per_document: usize,
    /// Deepest `[`/`{` nesting of one document (default 64). Manifests nest a handful of
    /// levels; the parser's own recursion limit (128) is reached only after work that grows
    /// with the input's square, so deeper input is refused by a linear scan first.
    pub max_flow_nesting: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_file_bytes: 1024 * 1024,
            max_files: 10_000,
            max_total_bytes: 64 * 1024 * 1024,
            max_documents: 10_000,
            max_nodes_per_document: 100_000,
            max_expanded_bytes_per_document: 8 * 1024 * 1024,
            max_flow_nesting: 64,
        }
    }
}

/// Where an object (or problem) comes from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Provenance {
    /// The file path as given to the loader.
    pub file: String,
    /// 1-based line of the document's first content line.
    pub line: usize,
    /// 0-based index of the document within its file.
    pub document: usize,
}

impl fmt::Display for Provenance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// The text of one YAML document, kept to map field paths back to lines.
#[derive(Debug)]
struct DocumentText {
    text: String,
    /// 1-based file line of `text`'s first line.
    first_line: usize,
    /// The document's block structure, computed on the first lookup and kept: a document with
    /// thousands of violations is indexed once, not once per violation.
    outline: std::sync::OnceLock<Outline>,
}

impl DocumentText {
    fn new(text: String, first_line: usize) -> Self {
        DocumentText {
            text,
            first_line,
            outline: std::sync::OnceLock::new(),
        }
    }

    fn outline(&self) -> &Outline {
        self.outline.get_or_init(|| Outline::new(&self.text))
    }
}

/// An object read from a file, with where it came from.
#[derive(Clone, Debug)]
pub struct Sourced<T> {
    /// The typed object (DeploymentPolicies carry the mutating webhook's defaults, §2.1).
    pub object: T,
    /// The object exactly as written (after legacy conversion), as JSON.
    pub raw: Value,
    /// File and line of the document.
    pub source: Provenance,
    text: Arc<DocumentText>,
}

impl<T> Sourced<T> {
    /// `metadata.name` as written (empty when missing).
    pub fn name(&self) -> &str {
        object_name(&self.raw)
    }
    /// `kind` as read (after legacy conversion).
    pub fn kind(&self) -> &str {
        self.raw
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
    /// The file line of a field: the line of the deepest part of `path` found in the
    /// document's text, else the document's line.
    pub fn line_of(&self, path: &FieldPath) -> usize {
        locate_in(&self.text.text, self.text.outline(), path.segments())
            .map(|l| self.text.first_line + l)
            .unwrap_or(self.source.line)
    }
    /// An object that did not come from YAML text (built in code, read from a cluster): line
    /// lookups fall back to `source.line`.
    pub fn detached(object: T, raw: Value, source: Provenance) -> Sourced<T> {
        Sourced {
            object,
            raw,
            source,
            text: Arc::new(DocumentText::new(String::new(), 1)),
        }
    }
    /// Same object, different payload (keeps provenance and text).
    fn with<U>(&self, object: U) -> Sourced<U> {
        Sourced {
            object,
            raw: self.raw.clone(),
            source: self.source.clone(),
            text: self.text.clone(),
        }
    }
}

fn object_name(raw: &Value) -> &str {
    raw.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Something the user should know that is not a problem (legacy conversion, ignored kinds).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Notice {
    /// Where.
    pub source: Provenance,
    /// What happened.
    pub message: String,
}

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: note: {}", self.source, self.message)
    }
}

/// A file or document the loader could not read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{file}{}: {reason}", if *line == 0 { String::new() } else { format!(":{line}") })]
pub struct LoadError {
    /// The file path as given, or the commit and tree of a problem that is no file's.
    pub file: String,
    /// 1-based line (1 when the problem is the whole file; 0 when it is not in a file).
    pub line: usize,
    /// What went wrong.
    pub reason: LoadErrorKind,
}

/// The kinds of [`LoadError`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "error", rename_all = "kebab-case")]
pub enum LoadErrorKind {
    /// The file exceeds [`Limits::max_file_bytes`].
    #[error(
        "file is {size} bytes, over the {limit}-byte limit for manifests; split it ({})",
        Budget::FileBytes
    )]
    TooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The file is not UTF-8.
    #[error(
        "file is not valid UTF-8 (first bad byte at offset {offset}); manifests must be UTF-8 text"
    )]
    NotUtf8 {
        /// Byte offset of the first invalid byte.
        offset: usize,
    },
    /// The file could not be read.
    #[error("cannot read file: {message}")]
    Io {
        /// The OS error.
        message: String,
    },
    /// YAML syntax error.
    #[error("invalid YAML: {message}")]
    Yaml {
        /// The parser's message.
        message: String,
    },
    /// A document nests deeper, or expands to more, than a budget allows (alias bombs end
    /// here).
    #[error("document has more than {limit} {}, refused ({budget})", budget.counts())]
    TooComplex {
        /// Which budget ran out.
        budget: Budget,
        /// Its value.
        limit: u64,
    },
    /// Alias expansion the YAML parser itself refuses (a fixed limit of the parser).
    #[error(
        "alias expansion exceeds the YAML parser's repetition limit; YAML aliases that multiply content are refused"
    )]
    TooManyRepetitions,
    /// A folder or commit holds more than a budget allows; nothing after this point was read,
    /// so the set is incomplete and rules across objects were not applied.
    #[error(
        "more than {limit} {}: the rest was not read and rules across objects were not applied ({budget})",
        budget.counts()
    )]
    OverBudget {
        /// Which budget ran out.
        budget: Budget,
        /// Its value.
        limit: u64,
    },
    /// A NodeWright group object of a version or kind this product does not serve.
    #[error("unsupported {api_version} kind {kind:?}: this version reads {api}: NodeWright and DeploymentPolicy (legacy {legacy}: Skyhook and DeploymentPolicy)", api = keys::API_VERSION, legacy = keys::LEGACY_API_VERSION)]
    Unsupported {
        /// `apiVersion` as written.
        api_version: String,
        /// `kind` as written.
        kind: String,
    },
}

impl LoadErrorKind {
    /// The budget that refused the file or document, if a budget did.
    pub fn budget(&self) -> Option<Budget> {
        match self {
            LoadErrorKind::TooLarge { .. } => Some(Budget::FileBytes),
            LoadErrorKind::TooComplex { budget, .. } | LoadErrorKind::OverBudget { budget, .. } => {
                Some(*budget)
            }
            _ => None,
        }
    }
}

/// Everything one load produced.
#[derive(Clone, Debug, Default)]
pub struct Loaded {
    /// NodeWright objects that decoded, in file then document order.
    pub nodewrights: Vec<Sourced<NodeWright>>,
    /// DeploymentPolicy objects that decoded (defaults applied), in file then document order.
    pub policies: Vec<Sourced<DeploymentPolicy>>,
    /// Objects of our kinds that did not decode into the typed form; [`validate_set`]
    /// explains why (schema violations).
    pub undecodable: Vec<Sourced<String>>,
    /// Legacy conversions, ignored documents.
    pub notices: Vec<Notice>,
    /// Files or documents that could not be read.
    pub errors: Vec<LoadError>,
    /// Number of files read.
    pub files: usize,
    /// The budget that stopped the load before the end of its input: the objects are a part
    /// of the set, so rules that need the whole set (a deploymentPolicy that must exist, a
    /// policy deleted while in use) are not applied.
    pub incomplete: Option<Budget>,
}

impl Loaded {
    /// Whether every manifest was read: no budget stopped the load or refused a file or a
    /// document (whose objects would then be missing from the set).
    pub fn is_complete(&self) -> bool {
        self.incomplete.is_none()
            && !self.errors.iter().any(|e| {
                e.reason.budget().is_some() || matches!(e.reason, LoadErrorKind::TooManyRepetitions)
            })
    }

    /// Records the error of a budget that stops the load, and that the set is incomplete.
    pub fn stop(&mut self, error: LoadError, budget: Budget) {
        self.errors.push(error);
        self.incomplete.get_or_insert(budget);
    }
    /// Whether nothing failed to load (validation is separate: see [`validate_set`]).
    pub fn is_clean(&self) -> bool {
        self.errors.is_empty()
    }
    /// The NodeWright named `name`, if loaded.
    pub fn nodewright(&self, name: &str) -> Option<&Sourced<NodeWright>> {
        self.nodewrights.iter().find(|s| s.name() == name)
    }
    /// The DeploymentPolicy named `name`, if loaded.
    pub fn policy(&self, name: &str) -> Option<&Sourced<DeploymentPolicy>> {
        self.policies.iter().find(|s| s.name() == name)
    }
}

/// Whether a path names a manifest file (`.yaml` / `.yml`).
pub fn is_manifest_path(path: &str) -> bool {
    path.ends_with(".yaml") || path.ends_with(".yml")
}

/// Loads manifests from (path, bytes) pairs. Files are read in the order given; callers that
/// want a deterministic order sort first (Git trees and [`read_paths`] already are).
pub fn load<I>(files: I, limits: &Limits) -> Loaded
where
    I: IntoIterator<Item = (String, Vec<u8>)>,
{
    let mut loaded = Loaded::default();
    let mut documents = 0usize;
    for (path, bytes) in files {
        loaded.files += 1;
        if !load_file(&path, &bytes, limits, &mut documents, &mut loaded) {
            break;
        }
    }
    loaded
}

/// Reads every `.yaml`/`.yml` file under `paths` (files are taken as given, directories
/// walked recursively in name order, skipping hidden directories such as `.git` and not
/// following directory symlinks) and loads them, one file in memory at a time. A path that
/// does not exist is an `Err`; unreadable files inside are [`LoadError`]s. The file count and
/// the total size are budgets: past either, reading stops with an error and the set is
/// [`Loaded::incomplete`].
pub fn read_paths(paths: &[PathBuf], limits: &Limits) -> io::Result<Loaded> {
    let mut files: Vec<(String, Result<PathBuf, LoadErrorKind>)> = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))?;
        if meta.is_dir() {
            let root = p.canonicalize()?;
            walk_dir(p, &root, limits.max_files, &mut files)?;
        } else {
            files.push((p.display().to_string(), Ok(p.clone())));
        }
    }
    let mut loaded = Loaded::default();
    let mut documents = 0usize;
    let mut total_bytes = 0u64;
    for (path, target) in files {
        let over = |budget: Budget, limit: u64| LoadError {
            file: path.clone(),
            line: 1,
            reason: LoadErrorKind::OverBudget { budget, limit },
        };
        if loaded.files == limits.max_files {
            loaded.stop(over(Budget::Files, limits.max_files as u64), Budget::Files);
            break;
        }
        let bytes = target.and_then(|target| {
            let size = std::fs::metadata(&target).map_or(0, |m| m.len());
            total_bytes = total_bytes.saturating_add(size);
            read_bounded(&target, size, limits)
        });
        if total_bytes > limits.max_total_bytes {
            loaded.stop(
                over(Budget::TotalBytes, limits.max_total_bytes),
                Budget::TotalBytes,
            );
            break;
        }
        loaded.files += 1;
        match bytes {
            Ok(b) => {
                if !load_file(&path, &b, limits, &mut documents, &mut loaded) {
                    break;
                }
            }
            Err(reason) => loaded.errors.push(LoadError {
                file: path,
                line: 1,
                reason,
            }),
        }
    }
    Ok(loaded)
}

/// Reads a file of `size` bytes (from its metadata); an oversized one is refused from its
/// length, without reading it.
fn read_bounded(path: &Path, size: u64, limits: &Limits) -> Result<Vec<u8>, LoadErrorKind> {
    if size > limits.max_file_bytes as u64 {
        return Err(LoadErrorKind::TooLarge {
            size: usize::try_from(size).unwrap_or(usize::MAX),
            limit: limits.max_file_bytes,
        });
    }
    std::fs::read(path).map_err(|e| LoadErrorKind::Io {
        message: e.to_string(),
    })
}

/// Collects the manifests under `dir` (the file to read for each, or why it is refused),
/// stopping once more than `max_files` are found. A file symlink is read only when its target
/// stays under `root` (the canonical folder given on the command line): a link to
/// `/etc/shadow` or to a file beside the folder is refused by name, never read. Directory
/// symlinks are not walked.
fn walk_dir(
    dir: &Path,
    root: &Path,
    max_files: usize,
    out: &mut Vec<(String, Result<PathBuf, LoadErrorKind>)>,
) -> io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        if out.len() > max_files {
            return Ok(());
        }
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().to_string();
        let ft = entry.file_type()?;
        if ft.is_dir() {
            if !name.starts_with('.') {
                walk_dir(&path, root, max_files, out)?;
            }
        } else if ft.is_symlink() && is_manifest_path(&name) && path.is_file() {
            let target = match path.canonicalize() {
                Ok(target) if target.starts_with(root) => Ok(target),
                Ok(target) => Err(LoadErrorKind::Io {
                    message: format!(
                        "symbolic link to {} leaves {}; links must stay inside the folder being read",
                        target.display(),
                        root.display()
                    ),
                }),
                Err(e) => Err(LoadErrorKind::Io {
                    message: e.to_string(),
                }),
            };
            out.push((path.display().to_string(), target));
        } else if ft.is_file() && is_manifest_path(&name) {
            out.push((path.display().to_string(), Ok(path)));
        }
    }
    Ok(())
}

/// Loads one file; returns false when the document limit stops the whole load.
fn load_file(
    path: &str,
    bytes: &[u8],
    limits: &Limits,
    documents: &mut usize,
    loaded: &mut Loaded,
) -> bool {
    let err = |line: usize, reason: LoadErrorKind| LoadError {
        file: path.to_string(),
        line,
        reason,
    };
    if bytes.len() > limits.max_file_bytes {
        loaded.errors.push(err(
            1,
            LoadErrorKind::TooLarge {
                size: bytes.len(),
                limit: limits.max_file_bytes,
            },
        ));
        return true;
    }
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let offset = e.valid_up_to();
            let line = 1 + bytes[..offset].iter().filter(|b| **b == b'\n').count();
            loaded
                .errors
                .push(err(line, LoadErrorKind::NotUtf8 { offset }));
            return true;
        }
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    for (doc_index, chunk) in split_documents(text).into_iter().enumerate() {
        let Some(content_line) = chunk.content_line else {
            continue;
        };
        *documents += 1;
        if *documents > limits.max_documents {
            loaded.stop(
                err(
                    chunk.first_line + content_line,
                    LoadErrorKind::OverBudget {
                        budget: Budget::Documents,
                        limit: limits.max_documents as u64,
                    },
                ),
                Budget::Documents,
            );
            return false;
        }
        let provenance = Provenance {
            file: path.to_string(),
            line: chunk.first_line + content_line,
            document: doc_index,
        };
        if let Some(line) = nesting_beyond(chunk.text, limits.max_flow_nesting) {
            loaded.errors.push(err(
                chunk.first_line + line,
                LoadErrorKind::TooComplex {
                    budget: Budget::YamlNesting,
                    limit: limits.max_flow_nesting as u64,
                },
            ));
            continue;
        }
        let value = match parse_document(chunk.text, limits) {
            Ok(Some(v)) => v,
            Ok(None) => continue,
            Err(ParseError::Yaml { message, line }) => {
                let last_line = chunk.first_line + chunk.text.lines().count().max(1) - 1;
                let line = line.map_or(provenance.line, |l| {
                    (chunk.first_line + l - 1).min(last_line)
                });
                loaded
                    .errors
                    .push(err(line, LoadErrorKind::Yaml { message }));
                continue;
            }
            Err(ParseError::OverBudget(budget, limit)) => {
                loaded.errors.push(err(
                    provenance.line,
                    LoadErrorKind::TooComplex { budget, limit },
                ));
                continue;
            }
            Err(ParseError::Repetitions) => {
                loaded
                    .errors
                    .push(err(provenance.line, LoadErrorKind::TooManyRepetitions));
                continue;
            }
        };
        let doc = Arc::new(DocumentText::new(chunk.text.to_string(), chunk.first_line));
        classify(value, provenance, doc, loaded);
    }
    true
}

/// Sorts one parsed document into the right bucket.
fn classify(mut value: Value, source: Provenance, text: Arc<DocumentText>, loaded: &mut Loaded) {
    if !value.is_object() {
        loaded.notices.push(Notice {
            source,
            message: format!(
                "ignored: the document is a {}, not a Kubernetes object",
                json_kind(&value)
            ),
        });
        return;
    }
    if let Some(notice) = legacy::convert(&mut value) {
        loaded.notices.push(Notice {
            source: source.clone(),
            message: notice.message,
        });
    }
    let api_version = value
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let kind = value
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if api_version.is_empty() || kind.is_empty() {
        loaded.notices.push(Notice {
            source,
            message: "ignored: not a Kubernetes object (no apiVersion or kind)".to_string(),
        });
        return;
    }
    let group = api_version.split('/').next().unwrap_or_default();
    let ours = api_version == keys::API_VERSION
        && (kind == keys::KIND_NODEWRIGHT || kind == keys::KIND_DEPLOYMENT_POLICY);
    if !ours {
        if group == keys::GROUP || group == keys::LEGACY_GROUP {
            loaded.errors.push(LoadError {
                file: source.file.clone(),
                line: source.line,
                reason: LoadErrorKind::Unsupported { api_version, kind },
            });
        } else {
            let name = object_name(&value);
            let what = if name.is_empty() {
                kind.clone()
            } else {
                format!("{kind}/{name}")
            };
            loaded.notices.push(Notice {
                source,
                message: format!(
                    "ignored: {what} ({api_version}) is not a NodeWright or DeploymentPolicy"
                ),
            });
        }
        return;
    }
    let base = Sourced {
        object: (),
        raw: value,
        source,
        text,
    };
    if kind == keys::KIND_NODEWRIGHT {
        match serde_json::from_value::<NodeWright>(base.raw.clone()) {
            Ok(nw) => loaded.nodewrights.push(base.with(nw)),
            Err(e) => loaded.undecodable.push(base.with(e.to_string())),
        }
    } else {
        match serde_json::from_value::<DeploymentPolicy>(base.raw.clone()) {
            Ok(p) => loaded
                .policies
                .push(base.with(validate::default_policy(&p))),
            Err(e) => loaded.undecodable.push(base.with(e.to_string())),
        }
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "mapping",
    }
}

// ---------------------------------------------------------------------------------------------
// Document splitting
// ---------------------------------------------------------------------------------------------

/// One YAML document's text.
struct Chunk<'a> {
    text: &'a str,
    /// 1-based file line of `text`'s first line.
    first_line: usize,
    /// 0-based line within `text` of the first content line; `None` for an empty document.
    content_line: Option<usize>,
}

fn is_marker(line: &str, marker: &str) -> bool {
    line.strip_prefix(marker)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r']))
}

/// Whether a line carries document content (not blank, comment, directive or bare marker).
fn content_of(line: &str) -> bool {
    let t = line.trim();
    if t.is_empty() || t.starts_with('#') || line.starts_with('%') {
        return false;
    }
    if is_marker(line, "---") {
        let rest = line[3..].trim();
        return !rest.is_empty() && !rest.starts_with('#');
    }
    !is_marker(line, "...")
}

/// Splits a stream at `---` lines. YAML forbids a `---` at column 0 inside any content, so
/// these lines always start a document; a leading part holding only comments or directives
/// belongs to the next document.
fn split_documents(text: &str) -> Vec<Chunk<'_>> {
    let mut chunks = Vec::new();
    let mut start = 0usize;
    let mut start_line = 1usize;
    let mut has_content: Option<usize> = None;
    let mut offset = 0usize;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let line_no = i + 1;
        let bare = line.trim_end_matches(['\n', '\r']);
        if is_marker(bare, "---")
            && (has_content.is_some()
                || (offset != start && chunk_has_marker(&text[start..offset])))
        {
            chunks.push(Chunk {
                text: &text[start..offset],
                first_line: start_line,
                content_line: has_content,
            });
            start = offset;
            start_line = line_no;
            has_content = None;
        }
        if has_content.is_none() && content_of(bare) {
            has_content = Some(line_no - start_line);
        }
        offset += line.len();
    }
    if start < text.len() || chunks.is_empty() {
        chunks.push(Chunk {
            text: &text[start..],
            first_line: start_line,
            content_line: has_content,
        });
    }
    chunks
}

/// Whether a chunk already holds a `---` line (an explicit, possibly empty, document).
fn chunk_has_marker(chunk: &str) -> bool {
    chunk.lines().any(|l| is_marker(l, "---"))
}

// ---------------------------------------------------------------------------------------------
// Bounded YAML → JSON
// ---------------------------------------------------------------------------------------------

enum ParseError {
    Yaml {
        message: String,
        line: Option<usize>,
    },
    OverBudget(Budget, u64),
    Repetitions,
}

/// The node and byte budget of one document, charged as values are built.
struct ExpansionBudget {
    nodes_left: Cell<usize>,
    bytes_left: Cell<usize>,
    /// The budget that ran out, and its value.
    exceeded: Cell<Option<(Budget, u64)>>,
    max_nodes: usize,
    max_bytes: usize,
}

impl ExpansionBudget {
    fn charge<E: de::Error>(&self, bytes: usize) -> Result<(), E> {
        let nodes = self.nodes_left.get();
        if nodes == 0 {
            return Err(self.exceed(Budget::YamlNodes, self.max_nodes));
        }
        self.nodes_left.set(nodes - 1);
        let left = self.bytes_left.get();
        if bytes > left {
            return Err(self.exceed(Budget::YamlExpandedBytes, self.max_bytes));
        }
        self.bytes_left.set(left - bytes);
        Ok(())
    }

    fn exceed<E: de::Error>(&self, budget: Budget, limit: usize) -> E {
        self.exceeded.set(Some((budget, limit as u64)));
        E::custom(format!("more than {limit} {}", budget.counts()))
    }
}

/// The 0-based line where flow collections in `text` first nest deeper than `max`, if they do.
/// Quoted scalars and comments are skipped; brackets inside plain scalars count, which can only
/// make a (pathological) document be refused, never let a deep one through.
fn nesting_beyond(text: &str, max: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut line = 0usize;
    let mut quote: Option<u8> = None;
    let mut previous = b'\n';
    let mut bytes = text.bytes();
    while let Some(b) = bytes.next() {
        if b == b'\n' {
            line += 1;
        }
        match quote {
            Some(b'"') if b == b'\\' => {
                if bytes.next() == Some(b'\n') {
                    line += 1;
                }
            }
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None => match b {
                // A quote opens a quoted scalar only where a token starts (`it's` is plain).
                b'"' | b'\''
                    if previous.is_ascii_whitespace()
                        || matches!(previous, b'[' | b'{' | b',' | b':') =>
                {
                    quote = Some(b)
                }
                b'#' if previous.is_ascii_whitespace() => {
                    for c in bytes.by_ref() {
                        if c == b'\n' {
                            line += 1;
                            break;
                        }
                    }
                }
                b'[' | b'{' => {
                    depth += 1;
                    if depth > max {
                        return Some(line);
                    }
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
        previous = b;
    }
    None
}

/// Parses one document's text (which holds exactly one document, possibly with `...`).
/// `Ok(None)` for an empty document.
fn parse_document(text: &str, limits: &Limits) -> Result<Option<Value>, ParseError> {
    let budget = ExpansionBudget {
        nodes_left: Cell::new(limits.max_nodes_per_document),
        bytes_left: Cell::new(limits.max_expanded_bytes_per_document),
        exceeded: Cell::new(None),
        max_nodes: limits.max_nodes_per_document,
        max_bytes: limits.max_expanded_bytes_per_document,
    };
    let mut result: Option<Value> = None;
    for doc in serde_yaml::Deserializer::from_str(text) {
        match (ValueSeed { budget: &budget }).deserialize(doc) {
            Ok(Value::Null) => {}
            Ok(v) => {
                if result.is_some() {
                    return Err(ParseError::Yaml {
                        message: "a document end marker (...) is followed by another document without ---".into(),
                        line: None,
                    });
                }
                result = Some(v);
            }
            Err(e) => {
                if let Some((exceeded, limit)) = budget.exceeded.get() {
                    return Err(ParseError::OverBudget(exceeded, limit));
                }
                if e.to_string().contains("repetition limit exceeded") {
                    return Err(ParseError::Repetitions);
                }
                return Err(ParseError::Yaml {
                    message: strip_location(&e),
                    line: e.location().map(|l| l.line()),
                });
            }
        }
    }
    Ok(result)
}

/// Removes the parser's document-relative " at line N column C" fragments: the error's own
/// line is reported file-relative instead.
fn strip_positions(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(i) = rest.find(" at line ") {
        out.push_str(&rest[..i]);
        let tail = &rest[i + " at line ".len()..];
        let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
        let after = &tail[digits..];
        rest = match after.strip_prefix(" column ") {
            Some(c) => &c[c.bytes().take_while(u8::is_ascii_digit).count()..],
            None => after,
        };
    }
    out.push_str(rest);
    out
}

/// serde_yaml appends " at line L column C"; we report lines ourselves (file-relative).
fn strip_location(e: &serde_yaml::Error) -> String {
    strip_positions(&e.to_string())
}

struct ValueSeed<'b> {
    budget: &'b ExpansionBudget,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(ValueVisitor {
            budget: self.budget,
        })
    }
}

struct ValueVisitor<'b> {
    budget: &'b ExpansionBudget,
}

impl<'de> Visitor<'de> for ValueVisitor<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.budget.charge(0)?;
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.budget.charge(8)?;
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.budget.charge(8)?;
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.budget.charge(8)?;
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom(format!("the number {v} cannot be represented in JSON")))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.budget.charge(v.len())?;
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.budget.charge(v.len())?;
        Ok(Value::String(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.budget.charge(0)?;
        Ok(Value::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        ValueSeed {
            budget: self.budget,
        }
        .deserialize(d)
    }
    fn visit_newtype_struct<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.visit_some(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.budget.charge(0)?;
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(ValueSeed {
            budget: self.budget,
        })? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.budget.charge(0)?;
        let mut out = Map::new();
        while let Some(key) = map.next_key_seed(KeySeed {
            budget: self.budget,
        })? {
            let value = map.next_value_seed(ValueSeed {
                budget: self.budget,
            })?;
            if out.contains_key(&key) {
                return Err(de::Error::custom(format!(
                    "duplicate key {key:?} in one mapping"
                )));
            }
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
    fn visit_enum<A: de::EnumAccess<'de>>(self, _data: A) -> Result<Value, A::Error> {
        Err(de::Error::custom(
            "YAML tags (such as !custom) are not supported in manifests",
        ))
    }
}

/// Mapping keys: scalars, rendered as JSON object keys.
struct KeySeed<'b> {
    budget: &'b ExpansionBudget,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = String;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        match (ValueSeed {
            budget: self.budget,
        })
        .deserialize(d)?
        {
            Value::String(s) => Ok(s),
            Value::Bool(b) => Ok(b.to_string()),
            Value::Number(n) => Ok(n.to_string()),
            Value::Null => Ok("null".to_string()),
            _ => Err(de::Error::custom(
                "mapping keys must be scalars, not lists or mappings",
            )),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Field path → line
// ---------------------------------------------------------------------------------------------

/// One line of block YAML, as the locator sees it.
#[derive(Debug)]
struct LineInfo {
    /// Column of the line's first non-space character.
    indent: usize,
    /// Whether it starts with a `- ` list marker.
    dash: bool,
    /// Column of the first token after any list markers.
    key_col: usize,
    /// Byte range of the text from `key_col` to the end of the line, within the document.
    rest: std::ops::Range<usize>,
}

/// The locator's view of every line of `text` (`None` for blank, comment and marker lines).
fn index_lines(text: &str) -> Vec<Option<LineInfo>> {
    let mut start = 0;
    text.lines()
        .map(|line| {
            let info = line_info(line, start);
            // `lines()` drops the `\n` (and a `\r` before it); step over what it dropped.
            start += line.len();
            if text[start..].starts_with("\r\n") {
                start += 2;
            } else if text[start..].starts_with('\n') {
                start += 1;
            }
            info
        })
        .collect()
}

fn line_info(line: &str, line_start: usize) -> Option<LineInfo> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    let mut rest = &line[indent..];
    let t = rest.trim();
    if t.is_empty() || t.starts_with('#') || is_marker(line, "---") || is_marker(line, "...") {
        return None;
    }
    let mut key_col = indent;
    let mut dash = false;
    while let Some(after) = rest.strip_prefix('-') {
        if !(after.is_empty() || after.starts_with(' ')) {
            break;
        }
        dash = true;
        let trimmed = after.trim_start_matches(' ');
        key_col += rest.len() - trimmed.len();
        rest = trimmed;
    }
    Some(LineInfo {
        indent,
        dash,
        key_col,
        rest: line_start + (line.len() - rest.len())..line_start + line.len(),
    })
}

/// Whether `rest` starts with `key:` (the key bare, double- or single-quoted) followed by the
/// end of the line or a blank. Allocation-free: it runs for every line of a scope.
fn key_matches(rest: &str, key: &str) -> bool {
    let quoted = |q: char| {
        rest.strip_prefix(q)
            .and_then(|r| r.strip_prefix(key))
            .and_then(|r| r.strip_prefix(q))
    };
    let Some(after) = rest
        .strip_prefix(key)
        .or_else(|| quoted('"'))
        .or_else(|| quoted('\''))
    else {
        return false;
    };
    after
        .strip_prefix(':')
        .is_some_and(|a| a.is_empty() || a.starts_with([' ', '\t']))
}

/// A scope of an [`Outline`]: lines `lo..hi` whose members sit at a key column.
type Scope = (usize, usize, usize);

/// Each key of a scope's members → the first member line with that key.
type ScopeKeys = HashMap<Box<str>, usize>;

/// Scopes with more member lines than this get a key index on their first lookup; smaller ones
/// are scanned, which costs less than building a map.
const KEYED_SCOPE_LINES: usize = 32;

/// The block structure of one document, built in linear time (plus a sort-free stack pass):
/// where each line's children end and at which column they sit, so following a field path
/// visits the scopes on the path, not every line of the document. A scope that is searched for
/// a key and is large (a NodeWright with thousands of packages) gets a map from key to line the
/// first time, so locating every one of its members costs what reading it once does.
#[derive(Debug)]
struct Outline {
    lines: Vec<Option<LineInfo>>,
    /// For each line: the first later line at or left of its key column that is not a list
    /// item at that column, i.e. where the line's children end (`lines.len()` when they run to
    /// the end). Children nest: a child's scope ends no later than its parent's.
    ends: Vec<usize>,
    /// For each line: the smallest key column among its children (`None` without children).
    child_col: Vec<Option<usize>>,
    /// The smallest key column of the whole document.
    root_col: Option<usize>,
    /// Key → first member line, per scope `(lo, hi, column)`, for scopes searched so far.
    keys: std::sync::Mutex<HashMap<Scope, Arc<ScopeKeys>>>,
}

impl Outline {
    fn new(text: &str) -> Self {
        let lines = index_lines(text);
        let n = lines.len();
        // A line j closes line i's scope when j is left of i's key column, or at it without a
        // list marker: with rank = 2 × indent + dash, that is rank(j) ≤ 2 × key_col(i). The
        // stack holds the lines to the right whose rank no nearer line undercuts, nearest on
        // top, so ranks increase towards the top and the nearest closing line is found by
        // binary search.
        let rank = |l: &LineInfo| 2 * l.indent + usize::from(l.dash);
        let mut ends = vec![n; n];
        let mut stack: Vec<(usize, usize)> = Vec::new();
        for i in (0..n).rev() {
            let Some(l) = &lines[i] else { continue };
            let closing = stack.partition_point(|&(r, _)| r <= 2 * l.key_col);
            if closing > 0 {
                ends[i] = stack[closing - 1].1;
            }
            let r = rank(l);
            while stack.last().is_some_and(|&(top, _)| top >= r) {
                stack.pop();
            }
            stack.push((r, i));
        }
        // The smallest key column under each line, from its direct children (each line is
        // one line's direct child at most, so this is linear).
        let mut child_col: Vec<Option<usize>> = vec![None; n];
        let subtree_col = |child_col: &[Option<usize>], j: usize| {
            lines[j]
                .as_ref()
                .map(|l| child_col[j].map_or(l.key_col, |c| c.min(l.key_col)))
        };
        let direct_min = |child_col: &[Option<usize>], lo: usize, hi: usize| {
            let mut min: Option<usize> = None;
            let mut j = lo;
            while j < hi {
                if let Some(c) = subtree_col(child_col, j) {
                    min = Some(min.map_or(c, |m| m.min(c)));
                    j = ends[j].max(j + 1);
                } else {
                    j += 1;
                }
            }
            min
        };
        for i in (0..n).rev() {
            if lines[i].is_some() {
                child_col[i] = direct_min(&child_col, i + 1, ends[i]);
            }
        }
        let root_col = direct_min(&child_col, 0, n);
        Outline {
            lines,
            ends,
            child_col,
            root_col,
            keys: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The first line of `lo..hi` at key column `col` whose key is `key`.
    fn find_key(
        &self,
        text: &str,
        (lo, hi, col): (usize, usize, usize),
        key: &str,
    ) -> Option<usize> {
        let members =
            || (lo..hi).filter(move |&i| self.lines[i].as_ref().is_some_and(|l| l.key_col == col));
        if hi - lo <= KEYED_SCOPE_LINES {
            return members().find(|&i| {
                self.lines[i]
                    .as_ref()
                    .is_some_and(|l| key_matches(&text[l.rest.clone()], key))
            });
        }
        let map = {
            // A panic while another lookup held the lock leaves a complete map or none.
            let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
            keys.entry((lo, hi, col))
                .or_insert_with(|| {
                    let mut map = HashMap::new();
                    for i in members() {
                        if let Some(l) = &self.lines[i] {
                            for k in keys_of(&text[l.rest.clone()]) {
                                map.entry(k.into()).or_insert(i);
                            }
                        }
                    }
                    Arc::new(map)
                })
                .clone()
        };
        map.get(key).copied()
    }
}

/// Every key `rest` can be read as by [`key_matches`]: the text before each `:` that ends the
/// line or precedes a blank, and, when the line starts with a quote, the text between it and
/// the same quote right before such a `:`.
fn keys_of(rest: &str) -> impl Iterator<Item = &str> {
    let quote = rest.chars().next().filter(|c| matches!(c, '"' | '\''));
    rest.match_indices(':')
        .map(|(p, _)| p)
        .filter(move |&p| rest[p + 1..].is_empty() || rest[p + 1..].starts_with([' ', '\t']))
        .flat_map(move |p| {
            let quoted =
                quote.and_then(|q| (p >= 2 && rest[..p].ends_with(q)).then(|| &rest[1..p - 1]));
            std::iter::once(&rest[..p]).chain(quoted)
        })
}

/// The `n`th item of the block list in lines `lo..hi` (the dash lines at the smallest dash
/// indent), and the scope of its members: from its dash line (its first key sits there) to
/// the next item, at the column of that first key.
fn list_item(
    lines: &[Option<LineInfo>],
    (lo, hi): (usize, usize),
    n: usize,
) -> Option<(usize, Scope)> {
    let item_indent = (lo..hi)
        .filter_map(|i| lines[i].as_ref())
        .filter(|l| l.dash)
        .map(|l| l.indent)
        .min()?;
    let items: Vec<usize> = (lo..hi)
        .filter(|&i| {
            lines[i]
                .as_ref()
                .is_some_and(|l| l.dash && l.indent == item_indent)
        })
        .collect();
    let i = *items.get(n)?;
    let end = items.get(n + 1).copied().unwrap_or(hi);
    let item_key_col = lines[i].as_ref().map_or(item_indent, |l| l.key_col);
    Some((i, (i, end, item_key_col)))
}

/// The 0-based line (within `text`) of the deepest segment of `path` found by following block
/// YAML indentation; `None` when not even the first segment is found (e.g. flow style).
#[cfg(test)]
fn locate(text: &str, path: &[Segment]) -> Option<usize> {
    locate_in(text, &Outline::new(text), path)
}

/// [`locate`] over `text`'s [`Outline`].
fn locate_in(text: &str, outline: &Outline, path: &[Segment]) -> Option<usize> {
    let lines = &outline.lines;
    // Current scope: lines [lo, hi) whose members sit at column `col`.
    let (mut lo, mut hi) = (0usize, lines.len());
    let mut col: Option<usize> = outline.root_col;
    let mut found: Option<usize> = None;
    for seg in path {
        let Some(member_col) = col else { break };
        match seg {
            Segment::Key(key) => {
                let Some(i) = outline.find_key(text, (lo, hi, member_col), key) else {
                    break;
                };
                found = Some(i);
                // Children: following lines indented deeper than the key, or list items at
                // the key's own column.
                lo = i + 1;
                hi = outline.ends[i].min(hi);
                col = outline.child_col[i];
            }
            Segment::Index(n) => {
                let Some((i, scope)) = list_item(lines, (lo, hi), *n) else {
                    break;
                };
                found = Some(i);
                (lo, hi) = (scope.0, scope.1);
                col = Some(scope.2);
            }
        }
    }
    found
}

// ---------------------------------------------------------------------------------------------
// Whole-set validation
// ---------------------------------------------------------------------------------------------

/// A finding with where it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Located<T> {
    /// File path.
    pub file: String,
    /// 1-based line of the offending field (or of the document).
    pub line: usize,
    /// Object kind (`NodeWright`, `DeploymentPolicy`).
    pub kind: String,
    /// Object name.
    pub name: String,
    /// The finding.
    #[serde(flatten)]
    pub item: T,
}

impl fmt::Display for Located<Violation> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: {}/{}: {}",
            self.file, self.line, self.kind, self.name, self.item
        )
    }
}

/// The objects that exist before the change being validated: the cluster's objects (with
/// status, for §3.2's "fully uninstalled") or the previous commit's.
#[derive(Clone, Debug, Default)]
pub struct Previous {
    /// NodeWrights by name.
    pub nodewrights: BTreeMap<String, NodeWright>,
    /// DeploymentPolicy names.
    pub policies: BTreeSet<String>,
}

impl Previous {
    /// From live objects.
    pub fn from_objects(
        nodewrights: impl IntoIterator<Item = NodeWright>,
        policies: impl IntoIterator<Item = String>,
    ) -> Previous {
        Previous {
            nodewrights: nodewrights
                .into_iter()
                .map(|nw| (nw.name().to_string(), nw))
                .collect(),
            policies: policies.into_iter().collect(),
        }
    }
    /// From a previous load (e.g. the last good commit).
    pub fn from_loaded(loaded: &Loaded) -> Previous {
        Previous::from_objects(
            loaded.nodewrights.iter().map(|s| s.object.clone()),
            loaded.policies.iter().map(|s| s.name().to_string()),
        )
    }
}

fn locate_violation<T>(s: &Sourced<T>, kind: &str, v: Violation) -> Located<Violation> {
    Located {
        file: s.source.file.clone(),
        line: s.line_of(&v.path),
        kind: kind.to_string(),
        name: s.name().to_string(),
        item: v,
    }
}

/// Validates everything loaded as one desired state: each object through the schema and its
/// webhook (§3.1–§3.4), NodeWright updates against `previous` (§3.2), rule 23 against the
/// policies in the set, duplicate names, and deletion of still-referenced policies. Sorted by
/// file and line.
pub fn validate_set(loaded: &Loaded, previous: Option<&Previous>) -> Vec<Located<Violation>> {
    let mut out = Vec::new();
    let policy_names: BTreeSet<String> = loaded
        .policies
        .iter()
        .map(|p| p.name().to_string())
        .filter(|n| !n.is_empty())
        .collect();
    // A part of the set cannot say a policy is missing: it may be in what was not read.
    let complete = loaded.is_complete();
    let catalog: Option<&dyn PolicyCatalog> =
        complete.then_some(&policy_names as &dyn PolicyCatalog);
    for s in &loaded.nodewrights {
        let old = previous.and_then(|p| p.nodewrights.get(s.name()));
        let (_, violations) = validate::validate_nodewright_value(&s.raw, old, catalog);
        out.extend(
            violations
                .into_iter()
                .map(|v| locate_violation(s, keys::KIND_NODEWRIGHT, v)),
        );
        out.extend(
            approval_compartments(loaded, &s.object)
                .into_iter()
                .map(|v| locate_violation(s, keys::KIND_NODEWRIGHT, v)),
        );
    }
    for s in &loaded.policies {
        let (_, violations) = validate::validate_policy_value(&s.raw);
        out.extend(
            violations
                .into_iter()
                .map(|v| locate_violation(s, keys::KIND_DEPLOYMENT_POLICY, v)),
        );
    }
    for s in &loaded.undecodable {
        let kind = s.kind().to_string();
        let violations = if kind == keys::KIND_NODEWRIGHT {
            validate::validate_nodewright_value(&s.raw, None, None).1
        } else {
            validate::validate_policy_value(&s.raw).1
        };
        out.extend(
            violations
                .into_iter()
                .map(|v| locate_violation(s, &kind, v)),
        );
    }
    duplicates(&loaded.nodewrights, keys::KIND_NODEWRIGHT, &mut out);
    duplicates(&loaded.policies, keys::KIND_DEPLOYMENT_POLICY, &mut out);
    if let Some(prev) = previous.filter(|_| complete) {
        for name in prev.policies.difference(&policy_names) {
            let referencing: Vec<&Sourced<NodeWright>> = loaded
                .nodewrights
                .iter()
                .filter(|s| s.object.spec.deployment_policy.as_deref() == Some(name.as_str()))
                .collect();
            let names: Vec<&str> = referencing.iter().map(|s| s.name()).collect();
            if let (Some(v), Some(first)) =
                (validate::policy_delete(name, &names), referencing.first())
            {
                let path = FieldPath::of(&["spec", "deploymentPolicy"]);
                out.push(Located {
                    file: first.source.file.clone(),
                    line: first.line_of(&path),
                    kind: keys::KIND_DEPLOYMENT_POLICY.to_string(),
                    name: name.clone(),
                    item: v,
                });
            }
        }
    }
    out.sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
    out
}

/// The approval gate of a NodeWright against the compartments it has in this set: its
/// policy's and `__default__` (a missing policy is rule 23's error, not checked here).
fn approval_compartments(loaded: &Loaded, nw: &NodeWright) -> Vec<Violation> {
    let annotations = nw.metadata.annotations.as_ref();
    if !annotations.is_some_and(|a| {
        a.contains_key(keys::APPROVAL_REQUIRED) || a.contains_key(keys::APPROVED_BATCHES)
    }) {
        return Vec::new();
    }
    let mut compartments = vec![(keys::DEFAULT_COMPARTMENT, true)];
    if let Some(policy) = &nw.spec.deployment_policy {
        let Some(policy) = loaded.policy(policy) else {
            return Vec::new();
        };
        compartments.extend(
            policy
                .object
                .spec
                .compartments
                .iter()
                .map(|c| (c.name.as_str(), c.strategy.is_some())),
        );
    }
    validate::approval_compartments(annotations, &compartments)
}

fn duplicates<T>(items: &[Sourced<T>], kind: &str, out: &mut Vec<Located<Violation>>) {
    let mut first: BTreeMap<&str, &Provenance> = BTreeMap::new();
    for s in items {
        let name = s.name();
        if name.is_empty() {
            continue;
        }
        match first.get(name) {
            Some(at) => out.push(Located {
                file: s.source.file.clone(),
                line: s.source.line,
                kind: kind.to_string(),
                name: name.to_string(),
                item: Violation::error(
                    validate::rules::DUPLICATE_NAME,
                    FieldPath::of(&["metadata", "name"]),
                    format!("{kind} {name:?} is declared more than once; first declared at {at}"),
                ),
            }),
            None => {
                first.insert(name, &s.source);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The locator as a scan of every line of each scope, the reference the outline must
    /// agree with.
    fn locate_by_scanning(
        text: &str,
        lines: &[Option<LineInfo>],
        path: &[Segment],
    ) -> Option<usize> {
        // Current scope: lines [lo, hi) whose members sit at column `col` (None = the smallest
        // column found in the scope).
        let (mut lo, mut hi) = (0usize, lines.len());
        let mut col: Option<usize> = None;
        let mut found: Option<usize> = None;
        for seg in path {
            let member_col = match col {
                Some(c) => c,
                None => match (lo..hi)
                    .filter_map(|i| lines[i].as_ref())
                    .map(|l| l.key_col)
                    .min()
                {
                    Some(c) => c,
                    None => break,
                },
            };
            match seg {
                Segment::Key(key) => {
                    let hit = (lo..hi).find(|&i| {
                        lines[i].as_ref().is_some_and(|l| {
                            l.key_col == member_col && key_matches(&text[l.rest.clone()], key)
                        })
                    });
                    let Some(i) = hit else { break };
                    found = Some(i);
                    // Children: following lines indented deeper than the key, or list items at
                    // the key's own column.
                    let end = (i + 1..hi)
                        .find(|&j| {
                            lines[j].as_ref().is_some_and(|l| {
                                l.indent < member_col || (l.indent == member_col && !l.dash)
                            })
                        })
                        .unwrap_or(hi);
                    lo = i + 1;
                    hi = end;
                    col = None;
                }
                Segment::Index(n) => {
                    let Some((i, scope)) = list_item(lines, (lo, hi), *n) else {
                        break;
                    };
                    found = Some(i);
                    (lo, hi) = (scope.0, scope.1);
                    col = Some(scope.2);
                }
            }
        }
        found
    }

    fn yaml_line() -> impl Strategy<Value = String> {
        let key = prop_oneof![
            Just("a"),
            Just("b"),
            Just("\"a\""),
            Just("'b'"),
            Just("a: b"),
            Just("\"a:\" b")
        ];
        let value = prop_oneof![Just(""), Just(" 1"), Just(" x: y"), Just(" |")];
        prop_oneof![
            4 => (0usize..8, any::<bool>(), key, value).prop_map(|(indent, dash, k, v)| {
                format!("{}{}{k}:{v}", " ".repeat(indent), if dash { "- " } else { "" })
            }),
            1 => (0usize..8).prop_map(|indent| format!("{}- x", " ".repeat(indent))),
            1 => (0usize..8).prop_map(|indent| format!("{}plain text", " ".repeat(indent))),
            1 => Just(String::new()),
            1 => Just("# comment".to_owned()),
        ]
    }

    fn segment() -> impl Strategy<Value = Segment> {
        prop_oneof![
            3 => prop_oneof![Just("a"), Just("b"), Just("a: b"), Just("a:")]
                .prop_map(|k| Segment::Key(k.to_owned())),
            1 => (0usize..3).prop_map(Segment::Index),
        ]
    }

    proptest::proptest! {
        #[test]
        fn the_outline_finds_the_line_a_scan_of_every_line_finds(
            lines in proptest::collection::vec(yaml_line(), 0..120),
            paths in proptest::collection::vec(proptest::collection::vec(segment(), 1..5), 1..8),
        ) {
            let text = lines.join("\n");
            let outline = Outline::new(&text);
            for path in &paths {
                proptest::prop_assert_eq!(
                    locate_in(&text, &outline, path),
                    locate_by_scanning(&text, &index_lines(&text), path),
                    "path {:?} in\n{}", path, text
                );
            }
        }
    }

    fn load_one(text: &str) -> Loaded {
        load(
            [("f.yaml".to_string(), text.as_bytes().to_vec())],
            &Limits::default(),
        )
    }

    const NW: &str = "apiVersion: nodewright.nvidia.com/v1alpha1\nkind: NodeWright\nmetadata:\n  name: tuning\nspec:\n  packages:\n    tuning:\n      version: 1.0.0\n      image: example/tuning\n";

    #[test]
    fn documents_keep_their_lines() {
        let text = format!(
            "# leading comment\n---\n{NW}---\n\n# policy\n{}",
            "apiVersion: nodewright.nvidia.com/v1alpha1\nkind: DeploymentPolicy\nmetadata:\n  name: p\nspec:\n  default:\n    budget: {percent: 10}\n    strategy: {fixed: {}}\n"
        );
        let l = load_one(&text);
        assert!(l.errors.is_empty(), "{:?}", l.errors);
        assert_eq!(l.nodewrights.len(), 1);
        assert_eq!(l.nodewrights[0].source.line, 3);
        assert_eq!(l.policies.len(), 1);
        assert_eq!(l.policies[0].source.line, 15);
        // Defaults of the mutating webhook are applied to the typed policy.
        let fixed = l.policies[0]
            .object
            .spec
            .default
            .strategy
            .fixed
            .clone()
            .unwrap();
        assert_eq!(fixed.batch_threshold, Some(100));
        assert_eq!(fixed.safety_limit, Some(50));
        assert_eq!(fixed.initial_batch, Some(1));
    }

    #[test]
    fn paths_map_to_key_lines() {
        let l = load_one(NW);
        let s = &l.nodewrights[0];
        let p = FieldPath::of(&["spec", "packages", "tuning", "image"]);
        assert_eq!(s.line_of(&p), 9);
        let p = FieldPath::of(&["spec", "packages", "tuning", "nope"]);
        assert_eq!(s.line_of(&p), 7);
        let text = "kind: DeploymentPolicy\nspec:\n  compartments:\n  - name: a\n    budget: {count: 1}\n  - name: b\n    selector:\n      matchLabels: {x: y}\n";
        let segs = FieldPath::of(&["spec", "compartments"])
            .index(1)
            .key("selector");
        assert_eq!(locate(text, segs.segments()), Some(6));
        let segs = FieldPath::of(&["spec", "compartments"])
            .index(1)
            .key("name");
        assert_eq!(locate(text, segs.segments()), Some(5));
    }

    #[test]
    fn legacy_and_foreign_kinds_are_noted() {
        let text = "apiVersion: skyhook.nvidia.com/v1alpha1\nkind: Skyhook\nmetadata:\n  name: old\nspec: {}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n";
        let l = load_one(text);
        assert_eq!(l.nodewrights.len(), 1);
        assert_eq!(l.nodewrights[0].kind(), "NodeWright");
        assert_eq!(l.notices.len(), 2);
        assert!(l.notices[1].message.contains("ConfigMap/cm"));
        assert_eq!(l.notices[1].source.line, 7);
    }

    #[test]
    fn limits_and_bad_input_are_errors() {
        let big = Limits {
            max_file_bytes: 10,
            ..Limits::default()
        };
        let l = load([("big.yaml".into(), NW.as_bytes().to_vec())], &big);
        assert!(matches!(l.errors[0].reason, LoadErrorKind::TooLarge { .. }));

        let l = load(
            [("bin.yaml".into(), b"a: 1\nb: \xff\n".to_vec())],
            &Limits::default(),
        );
        assert_eq!(l.errors[0].line, 2);
        assert!(matches!(
            l.errors[0].reason,
            LoadErrorKind::NotUtf8 { offset: 8 }
        ));

        let l = load_one("kind: X\n---\na: 1\nb: [unclosed\n");
        assert!(
            matches!(l.errors[0].reason, LoadErrorKind::Yaml { .. }),
            "{:?}",
            l.errors
        );
        assert_eq!(l.errors[0].line, 4);
        assert!(
            !l.errors[0].to_string().contains("line 3 "),
            "{}",
            l.errors[0]
        );

        let l = load_one("a: 1\na: 2\n");
        assert!(l.errors[0].to_string().contains("duplicate key"));

        let l = load_one("apiVersion: nodewright.nvidia.com/v1beta1\nkind: NodeWright\n");
        assert!(matches!(
            l.errors[0].reason,
            LoadErrorKind::Unsupported { .. }
        ));

        let few = Limits {
            max_documents: 1,
            ..Limits::default()
        };
        let l = load(
            [("f.yaml".into(), format!("{NW}---\n{NW}").into_bytes())],
            &few,
        );
        assert_eq!(
            l.errors[0].to_string(),
            "f.yaml:11: more than 1 YAML documents: the rest was not read and rules across objects were not applied (--max-documents raises this limit)"
        );
        assert!(!l.is_complete());
    }

    #[test]
    fn alias_bombs_are_refused() {
        let mut bomb = String::from(
            "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
        );
        let names = ["b", "c", "d", "e", "f", "g", "h", "i"];
        let mut prev = "a";
        for n in names {
            bomb.push_str(&format!("{n}: &{n} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n"));
            prev = n;
        }
        let l = load_one(&bomb);
        assert_eq!(l.errors.len(), 1, "{:?}", l.errors);
        assert!(
            matches!(l.errors[0].reason, LoadErrorKind::TooManyRepetitions),
            "{:?}",
            l.errors
        );
        let few_nodes = Limits {
            max_nodes_per_document: 1_000,
            ..Limits::default()
        };
        let l = load([("f.yaml".into(), bomb.into_bytes())], &few_nodes);
        assert_eq!(
            l.errors[0].to_string(),
            "f.yaml:1: document has more than 1000 YAML nodes in one document, refused (--max-yaml-nodes raises this limit)"
        );
        // Modest aliasing is fine.
        let l = load_one("base: &b {x: 1}\nother: *b\n");
        assert!(l.errors.is_empty());
    }

    #[test]
    fn set_validation_finds_duplicates_and_missing_policies() {
        let with_policy = NW.replace("spec:\n", "spec:\n  deploymentPolicy: missing\n");
        let l = load_one(&format!("{with_policy}---\n{NW}"));
        let v = validate_set(&l, None);
        let msgs: Vec<String> = v.iter().map(|v| v.to_string()).collect();
        assert!(msgs.iter().any(|m| m == "f.yaml:6: NodeWright/tuning: spec.deploymentPolicy: deploymentPolicy \"missing\" not found"), "{msgs:?}");
        assert!(msgs.iter().any(|m| m.starts_with("f.yaml:12: NodeWright/tuning: metadata.name: NodeWright \"tuning\" is declared more than once; first declared at f.yaml:1")), "{msgs:?}");
    }

    #[test]
    fn a_set_cut_short_by_a_budget_says_so_and_claims_nothing_is_missing() {
        // See: issue 24 — the document cap stopped silently, then "deploymentPolicy not found".
        let tmp = tempfile::tempdir().unwrap();
        let with_policy = NW.replace("spec:\n", "spec:\n  deploymentPolicy: rollout\n");
        std::fs::write(tmp.path().join("a.yaml"), &with_policy).unwrap();
        std::fs::write(
            tmp.path().join("b.yaml"),
            "apiVersion: nodewright.nvidia.com/v1alpha1\nkind: DeploymentPolicy\nmetadata:\n  name: rollout\nspec:\n  default:\n    budget: {percent: 10}\n    strategy: {fixed: {}}\n",
        )
        .unwrap();
        let folder = [tmp.path().to_path_buf()];
        let whole = read_paths(&folder, &Limits::default()).unwrap();
        assert!(whole.is_complete() && whole.errors.is_empty());
        assert!(validate_set(&whole, None).is_empty());

        let a = tmp.path().join("a.yaml").display().to_string();
        let b = tmp.path().join("b.yaml").display().to_string();
        for (limits, refusal) in [
            (
                Limits {
                    max_documents: 1,
                    ..Limits::default()
                },
                format!(
                    "{b}:1: more than 1 YAML documents: the rest was not read and rules across objects were not applied (--max-documents raises this limit)"
                ),
            ),
            (
                Limits {
                    max_files: 1,
                    ..Limits::default()
                },
                format!(
                    "{b}:1: more than 1 manifest files: the rest was not read and rules across objects were not applied (--max-files raises this limit)"
                ),
            ),
            (
                Limits {
                    max_total_bytes: with_policy.len() as u64 + 10,
                    ..Limits::default()
                },
                format!(
                    "{b}:1: more than {} bytes of manifest files: the rest was not read and rules across objects were not applied (--max-total-bytes raises this limit)",
                    with_policy.len() + 10
                ),
            ),
        ] {
            let cut = read_paths(&folder, &limits).unwrap();
            let errors: Vec<String> = cut.errors.iter().map(|e| e.to_string()).collect();
            assert_eq!(errors, [refusal]);
            assert!(!cut.is_complete());
            assert_eq!(cut.nodewrights[0].source.file, a);
            assert!(cut.policies.is_empty());
            assert!(
                validate_set(&cut, None).is_empty(),
                "the policy is in what was not read, not missing"
            );
        }
    }

    #[test]
    fn deleting_a_referenced_policy_is_rejected() {
        let with_policy = NW.replace("spec:\n", "spec:\n  deploymentPolicy: gone\n");
        let l = load_one(&with_policy);
        let prev = Previous::from_objects([], ["gone".to_string()]);
        let v = validate_set(&l, Some(&prev));
        assert!(v.iter().any(|v| v.item.message == "cannot delete DeploymentPolicy \"gone\": still referenced by 1 NodeWright(s): [tuning]"), "{v:?}");
    }

    #[test]
    fn deep_flow_nesting_is_refused_at_its_line_before_parsing() {
        // See: issue 24 — `a: [[[[…]]]]` of 200 KB took 17 s before "recursion limit exceeded".
        let deep = format!(
            "kind: NodeWright\n# [[[ a comment\na: {}{}\n",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let l = load(
            vec![("deep.yaml".to_owned(), deep.into_bytes())],
            &Limits::default(),
        );
        assert_eq!(l.errors.len(), 1, "{:?}", l.errors);
        assert_eq!(l.errors[0].line, 3);
        assert_eq!(
            l.errors[0].to_string(),
            "deep.yaml:3: document has more than 64 levels of flow nesting in one document, refused (--max-yaml-nesting raises this limit)"
        );
        let shallow = "a: [[1, 2], {b: '[[[[', c: \"]]\"}]\nd: it's [plain]\n";
        assert_eq!(nesting_beyond(shallow, 2), None);
        assert_eq!(nesting_beyond("a: [[[x]]]\n", 2), Some(0));
    }

    #[test]
    fn a_document_is_indexed_once_however_many_fields_are_located() {
        let text = "spec:\n  packages:\n    a:\n      version: 1\n    'b':\n      version: 2\n";
        let doc = DocumentText::new(text.to_owned(), 10);
        let first: *const Outline = doc.outline();
        let path = FieldPath::of(&["spec", "packages", "b", "version"]);
        assert_eq!(locate_in(text, doc.outline(), path.segments()), Some(5));
        assert!(std::ptr::eq(doc.outline(), first), "the index is kept");
    }

    #[cfg(unix)]
    #[test]
    fn a_folder_walk_never_reads_through_a_link_that_leaves_it() {
        // See: issue 24 — `validate DIR` followed a link to /etc/shadow.
        let tmp = tempfile::tempdir().unwrap();
        let fleet = tmp.path().join("fleet");
        std::fs::create_dir_all(&fleet).unwrap();
        std::fs::write(tmp.path().join("secret.yaml"), "token: s3cret\n").unwrap();
        std::fs::write(fleet.join("real.yaml"), "kind: Other\n").unwrap();
        std::os::unix::fs::symlink("../secret.yaml", fleet.join("escape.yaml")).unwrap();
        std::os::unix::fs::symlink("real.yaml", fleet.join("inside.yaml")).unwrap();
        let loaded = read_paths(std::slice::from_ref(&fleet), &Limits::default()).unwrap();
        let refused: Vec<String> = loaded.errors.iter().map(|e| e.to_string()).collect();
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(
            refused[0].contains("escape.yaml") && refused[0].contains("leaves"),
            "{refused:?}"
        );
        assert!(!refused[0].contains("s3cret"));
        assert_eq!(
            loaded.files, 3,
            "real, inside (read through the link) and escape"
        );
    }
}
