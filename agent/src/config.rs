//! `config.json`: schema check, migration hook, step building and step-set validation (§6).
//!
//! The v1 JSON Schemas are reproduced as hand checks with the same accept/reject results, so the
//! agent needs no JSON Schema engine; error messages name the offending field.

use std::path::Path;

use serde_json::{Map, Value};

/// Action modes, in upstream's order.
/// Upstream's `APPLY_TO_CHECK` order, which decides which error is reported first.
pub const ACTION_MODES: [&str; 5] = ["uninstall", "upgrade", "apply", "config", "post-interrupt"];
/// The ten modes that carry steps.
pub const STEP_MODES: [&str; 10] = [
    "apply",
    "apply-check",
    "config",
    "config-check",
    "post-interrupt",
    "post-interrupt-check",
    "uninstall",
    "uninstall-check",
    "upgrade",
    "upgrade-check",
];
/// Upstream's enum names of [`ACTION_MODES`], used in its error message.
pub const ACTION_MODE_NAMES: [&str; 5] =
    ["UNINSTALL", "UPGRADE", "APPLY", "CONFIG", "POST_INTERRUPT"];
/// Mode key accepted in `modes` whose steps never run (§6.4 step 3).
pub const INTERRUPT_MODE: &str = "interrupt";

/// A `config.json` problem; all are fatal (exit 1) before any step runs (§6.6).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// File path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The file is not JSON.
    #[error("{path} is not valid JSON: {source}")]
    Json {
        /// File path.
        path: String,
        /// Cause.
        source: serde_json::Error,
    },
    /// `schema_version` is missing or not a supported version.
    #[error("Unknown skyhook-agent schema version: {0}")]
    UnknownSchemaVersion(String),
    /// A schema rule failed.
    #[error("schema validation failed at {field}: {reason}")]
    Schema {
        /// JSON path of the field, e.g. `modes.apply[0].returncodes`.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// `modes` has a key that is not a mode.
    #[error("unknown mode {0:?} in modes")]
    UnknownMode(String),
    /// A step has a key the agent does not know (§16 Q9).
    #[error("unknown key {key:?} in step {field}")]
    UnknownStepKey {
        /// JSON path of the step.
        field: String,
        /// The key.
        key: String,
    },
    /// An upgrade step declares arguments.
    #[error("UpgradeStep {name} can not have any arguments, but found: {}", crate::pyrepr::repr_str_list(.arguments))]
    UpgradeStepArguments {
        /// Mode.
        mode: String,
        /// Step name.
        name: String,
        /// The arguments given.
        arguments: Vec<String>,
    },
    /// No mode has a step.
    #[error("There are no defined steps.")]
    NoSteps,
    /// Only check modes are defined.
    #[error("There are only check modes defined. You must define at least one of {}", ACTION_MODE_NAMES.join(", "))]
    OnlyCheckModes,
    /// An action mode with steps has no check steps.
    #[error("Couldn't validate steps. There are no checks for any of the {mode} steps.")]
    MissingCheckMode {
        /// The action mode.
        mode: String,
    },
    /// An upgrade step appears in a non-upgrade mode.
    #[error(
        "UpgradeStep {path} defined in the {mode} mode but can only be defined in the UPGRADE or UPGRADE_CHECK modes."
    )]
    UpgradeStepOutsideUpgrade {
        /// Mode.
        mode: String,
        /// Step path.
        path: String,
    },
    /// Step files missing under `skyhook_dir/`.
    #[error("Following steps did not exist:{}", .0.join(", "))]
    MissingStepFiles(Vec<String>),
    /// `package_name` could not name a directory under the state directories.
    #[error(
        "package_name {0:?} is not a valid package name: lower-case letters, digits, '-' or \
         '_', at most {max} characters, starting with a letter and ending with a letter or \
         digit",
        max = crate::names::MAX_PACKAGE_NAME
    )]
    PackageName(String),
    /// An expected config file is missing under `configmaps/`.
    #[error("Expected config file {0} not found in configmaps directory.")]
    MissingConfigFile(String),
}

/// Result alias of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A schema version. Numbered versions order by number; `latest` is above every number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SchemaVersion {
    /// `v<n>`.
    Numbered(u32),
    /// `latest`: resolves to the highest supported version.
    Latest,
}

/// Numbered schema versions this agent embeds.
pub const SUPPORTED_VERSIONS: [u32; 1] = [1];

impl SchemaVersion {
    /// Parses `v1`, `v2`, …, or `latest`.
    pub fn parse(s: &str) -> Option<Self> {
        if s == "latest" {
            return Some(Self::Latest);
        }
        let n = s.strip_prefix('v')?;
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) || n.starts_with('0') {
            return None;
        }
        n.parse().ok().map(Self::Numbered)
    }

    /// The highest numbered version supported.
    pub fn latest() -> Self {
        // SUPPORTED_VERSIONS is a non-empty constant.
        Self::Numbered(SUPPORTED_VERSIONS[SUPPORTED_VERSIONS.len() - 1])
    }

    /// `Latest` → the highest numbered version; numbered versions unchanged.
    pub fn resolve(self) -> Self {
        match self {
            Self::Latest => Self::latest(),
            v => v,
        }
    }

    /// Ids of the schemas for this version (config and step), none for unknown versions.
    pub fn schema_ids(self) -> Vec<String> {
        match self {
            Self::Numbered(n) if SUPPORTED_VERSIONS.contains(&n) => vec![
                format!("v{n}/skyhook-agent-schema.json"),
                format!("v{n}/step-schema.json"),
            ],
            _ => vec![],
        }
    }
}

impl std::fmt::Display for SchemaVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Numbered(n) => write!(f, "v{n}"),
            Self::Latest => f.write_str("latest"),
        }
    }
}

impl PartialEq<&str> for SchemaVersion {
    fn eq(&self, other: &&str) -> bool {
        Self::parse(other) == Some(*self)
    }
}

/// One step of a mode (§6.2).
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Label only.
    pub name: String,
    /// Path relative to `skyhook_dir/`.
    pub path: String,
    /// Raw arguments (`env:NAME` unsubstituted).
    pub arguments: Vec<String>,
    /// Success statuses.
    pub returncodes: Vec<i64>,
    /// Printed only.
    pub on_host: bool,
    /// `true` = the step handles idempotence itself and always re-runs (§6.5).
    pub idempotence: bool,
    /// Receives previous and current version as extra arguments (§12).
    pub upgrade_step: bool,
    /// Extra environment, in file order.
    pub env: Vec<(String, String)>,
}

impl Step {
    /// A step with upstream's defaults: name = path, no arguments, `[0]`, on host, auto
    /// idempotence (flags honoured).
    pub fn new(path: &str) -> Self {
        Self {
            name: path.to_string(),
            path: path.to_string(),
            arguments: vec![],
            returncodes: vec![0],
            on_host: true,
            idempotence: false,
            upgrade_step: false,
            env: vec![],
        }
    }

    /// Upstream's idempotence label for console lines.
    pub fn idempotence_label(&self) -> &'static str {
        if self.idempotence {
            "Idempotence.Disabled"
        } else {
            "Idempotence.Auto"
        }
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("name".into(), self.name.clone().into());
        m.insert("path".into(), self.path.clone().into());
        m.insert("arguments".into(), self.arguments.clone().into());
        m.insert("returncodes".into(), self.returncodes.clone().into());
        m.insert("on_host".into(), self.on_host.into());
        m.insert("idempotence".into(), self.idempotence.into());
        m.insert("upgrade_step".into(), self.upgrade_step.into());
        let env: Map<String, Value> = self
            .env
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(v.clone())))
            .collect();
        m.insert("env".into(), Value::Object(env));
        Value::Object(m)
    }
}

/// A loaded, schema-valid `config.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Schema version (always v1 today).
    pub schema_version: SchemaVersion,
    /// Names flags, logs and history.
    pub package_name: String,
    /// Names flags and logs; `CURRENT_VERSION`.
    pub package_version: String,
    /// Files that must exist in `configmaps/`.
    pub expected_config_files: Vec<String>,
    /// Modes in file order, the `interrupt` key included when present.
    pub modes: Vec<(String, Vec<Step>)>,
}

impl Config {
    /// Steps of a mode, empty when absent.
    pub fn steps(&self, mode: &str) -> &[Step] {
        self.modes
            .iter()
            .find(|(m, _)| m == mode)
            .map(|(_, s)| s.as_slice())
            .unwrap_or(&[])
    }

    /// Every step of every mode.
    pub fn all_steps(&self) -> impl Iterator<Item = (&str, &Step)> {
        self.modes
            .iter()
            .flat_map(|(m, steps)| steps.iter().map(move |s| (m.as_str(), s)))
    }

    /// Writes the v1 document as upstream's writer does (`root_dir` emitted as `/`).
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert(
            "schema_version".into(),
            self.schema_version.to_string().into(),
        );
        m.insert("package_name".into(), self.package_name.clone().into());
        m.insert(
            "package_version".into(),
            self.package_version.clone().into(),
        );
        m.insert("root_dir".into(), "/".into());
        m.insert(
            "expected_config_files".into(),
            self.expected_config_files.clone().into(),
        );
        let modes: Map<String, Value> = self
            .modes
            .iter()
            .map(|(k, steps)| {
                (
                    k.clone(),
                    Value::Array(steps.iter().map(Step::to_json).collect()),
                )
            })
            .collect();
        m.insert("modes".into(), Value::Object(modes));
        Value::Object(m)
    }
}

/// Python's `re.search` with a pattern ending in `$` also matches before one trailing newline;
/// upstream validates with it, so we accept what it accepts.
fn strip_python_dollar(s: &str) -> &str {
    s.strip_suffix('\n').unwrap_or(s)
}

/// Strict semver as the v1 schema's pattern: `X.Y.Z`, no leading zeros, optional `-pre` and
/// `+build`.
pub fn is_semver(v: &str) -> bool {
    let v = strip_python_dollar(v);
    fn numeric(s: &str) -> bool {
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
    }
    fn ident(s: &str) -> bool {
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    }
    let (rest, build) = match v.split_once('+') {
        Some((r, b)) => (r, Some(b)),
        None => (v, None),
    };
    if let Some(b) = build
        && !b.split('.').all(ident)
    {
        return false;
    }
    let (core, pre) = match rest.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (rest, None),
    };
    if let Some(p) = pre
        && !p
            .split('.')
            .all(|id| ident(id) && (!id.bytes().all(|b| b.is_ascii_digit()) || numeric(id)))
    {
        return false;
    }
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3 && parts.iter().all(|p| numeric(p))
}

/// `^[a-zA-Z0-9_\-.]+$`.
fn is_step_name(s: &str) -> bool {
    let s = strip_python_dollar(s);
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

fn schema(field: impl Into<String>, reason: impl Into<String>) -> Error {
    Error::Schema {
        field: field.into(),
        reason: reason.into(),
    }
}

fn req<'a>(obj: &'a Map<String, Value>, key: &str, at: &str) -> Result<&'a Value> {
    obj.get(key)
        .ok_or_else(|| schema(format!("{at}{key}"), "required property is missing"))
}

fn string(v: &Value, field: &str) -> Result<String> {
    v.as_str()
        .map(str::to_string)
        .ok_or_else(|| schema(field, "must be a string"))
}

fn boolean(v: &Value, field: &str) -> Result<bool> {
    v.as_bool()
        .ok_or_else(|| schema(field, "must be a boolean"))
}

fn strings(v: &Value, field: &str) -> Result<Vec<String>> {
    let arr = v
        .as_array()
        .ok_or_else(|| schema(field, "must be an array"))?;
    arr.iter()
        .enumerate()
        .map(|(i, x)| string(x, &format!("{field}[{i}]")))
        .collect()
}

/// Step keys the agent accepts; `requires_interrupt` is accepted and ignored (§6.2).
const STEP_KEYS: [&str; 9] = [
    "name",
    "path",
    "arguments",
    "returncodes",
    "on_host",
    "idempotence",
    "upgrade_step",
    "env",
    "requires_interrupt",
];

/// Parses one step. `loader_rules` adds the loader's check on unknown keys (§16 Q9), which the
/// schema itself does not make.
fn parse_step(v: &Value, at: &str, loader_rules: bool) -> Result<Step> {
    let obj = v
        .as_object()
        .ok_or_else(|| schema(at, "step must be an object"))?;
    let p = format!("{at}.");
    let name = string(req(obj, "name", &p)?, &format!("{p}name"))?;
    if !is_step_name(&name) {
        return Err(schema(
            format!("{p}name"),
            format!("{name:?} does not match ^[a-zA-Z0-9_\\-.]+$"),
        ));
    }
    let path = string(req(obj, "path", &p)?, &format!("{p}path"))?;
    let arguments = strings(req(obj, "arguments", &p)?, &format!("{p}arguments"))?;
    let rc_field = format!("{p}returncodes");
    let rc = req(obj, "returncodes", &p)?
        .as_array()
        .ok_or_else(|| schema(&rc_field, "must be an array"))?;
    if rc.is_empty() {
        return Err(schema(&rc_field, "must have at least 1 item"));
    }
    let returncodes = rc
        .iter()
        .enumerate()
        .map(|(i, x)| {
            x.as_i64()
                .ok_or_else(|| schema(format!("{rc_field}[{i}]"), "must be an integer"))
        })
        .collect::<Result<Vec<_>>>()?;
    let on_host = boolean(req(obj, "on_host", &p)?, &format!("{p}on_host"))?;
    let idempotence = boolean(req(obj, "idempotence", &p)?, &format!("{p}idempotence"))?;
    let upgrade_step = boolean(req(obj, "upgrade_step", &p)?, &format!("{p}upgrade_step"))?;
    let env = match obj.get("env") {
        None => vec![],
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| Ok((k.clone(), string(v, &format!("{p}env.{k}"))?)))
            .collect::<Result<Vec<_>>>()?,
        Some(_) => return Err(schema(format!("{p}env"), "must be an object of strings")),
    };
    if let Some(key) = obj
        .keys()
        .find(|k| loader_rules && !STEP_KEYS.contains(&k.as_str()))
    {
        return Err(Error::UnknownStepKey {
            field: at.to_string(),
            key: key.clone(),
        });
    }
    Ok(Step {
        name,
        path,
        arguments,
        returncodes,
        on_host,
        idempotence,
        upgrade_step,
        env,
    })
}

/// Schema-validates a v1 document (top level and steps) without building it.
fn check_v1(doc: &Map<String, Value>) -> Result<()> {
    let version = string(req(doc, "package_version", "")?, "package_version")?;
    if !is_semver(&version) {
        return Err(schema(
            "package_version",
            format!("{version:?} is not strict semver"),
        ));
    }
    string(req(doc, "package_name", "")?, "package_name")?;
    strings(
        req(doc, "expected_config_files", "")?,
        "expected_config_files",
    )?;
    let modes = req(doc, "modes", "")?
        .as_object()
        .ok_or_else(|| schema("modes", "must be an object"))?;
    // The schema constrains only the ten step modes; other keys are the loader's business.
    for (mode, steps) in modes
        .iter()
        .filter(|(m, _)| STEP_MODES.contains(&m.as_str()))
    {
        let arr = steps
            .as_array()
            .ok_or_else(|| schema(format!("modes.{mode}"), "must be an array of steps"))?;
        for (i, s) in arr.iter().enumerate() {
            parse_step(s, &format!("modes.{mode}[{i}]"), false)?;
        }
    }
    // `root_dir` is not in the v1 schema: any value is accepted and ignored.
    Ok(())
}

/// Validates against the schema `schema_version` names (the JSON Schema step of §6.4, without
/// the loader's own rules such as unknown mode keys).
pub fn validate_schema(doc: &Value) -> Result<SchemaVersion> {
    let obj = doc
        .as_object()
        .ok_or_else(|| schema("$", "config must be a JSON object"))?;
    let raw = match obj.get("schema_version") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => return Err(Error::UnknownSchemaVersion(other.to_string())),
        None => return Err(schema("schema_version", "required property is missing")),
    };
    // `latest` is not a schema of its own: upstream has no schema registered for it.
    match SchemaVersion::parse(&raw) {
        Some(v @ SchemaVersion::Numbered(n)) if SUPPORTED_VERSIONS.contains(&n) => {
            check_v1(obj)?;
            Ok(v)
        }
        _ => Err(Error::UnknownSchemaVersion(raw)),
    }
}

/// Migrates a document to the latest schema version. The identity today: v1 is the latest. A
/// future v2 adds its conversion here; the result is validated again.
pub fn migrate(doc: Value) -> Value {
    doc
}

/// Parses and validates `config.json` text: schema, migrate, schema again, build steps
/// (§6.4 steps 1–3).
pub fn parse(text: &str, path_for_errors: &str) -> Result<Config> {
    let doc: Value = serde_json::from_str(text).map_err(|source| Error::Json {
        path: path_for_errors.to_string(),
        source,
    })?;
    validate_schema(&doc)?;
    let doc = migrate(doc);
    let version = validate_schema(&doc)?;
    build(&doc, version)
}

fn build(doc: &Value, schema_version: SchemaVersion) -> Result<Config> {
    // validate_schema proved the shapes below; fall back to errors rather than panics anyway.
    let obj = doc
        .as_object()
        .ok_or_else(|| schema("$", "must be an object"))?;
    let package_name = string(req(obj, "package_name", "")?, "package_name")?;
    let package_version = string(req(obj, "package_version", "")?, "package_version")?;
    let expected_config_files = strings(
        req(obj, "expected_config_files", "")?,
        "expected_config_files",
    )?;
    let mut modes = vec![];
    let modes_obj = req(obj, "modes", "")?
        .as_object()
        .ok_or_else(|| schema("modes", "must be an object"))?;
    for (mode, steps) in modes_obj {
        if !STEP_MODES.contains(&mode.as_str()) && mode != INTERRUPT_MODE {
            return Err(Error::UnknownMode(mode.clone()));
        }
        let arr = steps
            .as_array()
            .ok_or_else(|| schema(format!("modes.{mode}"), "must be an array"))?;
        let steps = arr
            .iter()
            .enumerate()
            .map(|(i, s)| parse_step(s, &format!("modes.{mode}[{i}]"), true))
            .collect::<Result<Vec<_>>>()?;
        for s in &steps {
            if s.upgrade_step && !s.arguments.is_empty() {
                return Err(Error::UpgradeStepArguments {
                    mode: mode.clone(),
                    name: s.name.clone(),
                    arguments: s.arguments.clone(),
                });
            }
        }
        modes.push((mode.clone(), steps));
    }
    Ok(Config {
        schema_version,
        package_name,
        package_version,
        expected_config_files,
        modes,
    })
}

/// Step-set rules of §6.4 step 4 (without the file check). Returns the warnings for missing
/// conventional `_check` counterparts.
pub fn check_step_set(modes: &[(String, Vec<Step>)]) -> Result<Vec<String>> {
    let non_empty = |m: &str| modes.iter().any(|(k, s)| k == m && !s.is_empty());
    if !modes.iter().any(|(_, s)| !s.is_empty()) {
        return Err(Error::NoSteps);
    }
    if !modes
        .iter()
        .any(|(k, _)| ACTION_MODES.contains(&k.as_str()))
    {
        return Err(Error::OnlyCheckModes);
    }
    for mode in ACTION_MODES {
        if non_empty(mode) && !non_empty(&format!("{mode}-check")) {
            return Err(Error::MissingCheckMode {
                mode: mode.to_string(),
            });
        }
    }
    for (mode, steps) in modes {
        if mode != "upgrade"
            && mode != "upgrade-check"
            && let Some(s) = steps.iter().find(|s| s.upgrade_step)
        {
            return Err(Error::UpgradeStepOutsideUpgrade {
                mode: mode.clone(),
                path: s.path.clone(),
            });
        }
    }
    let check_paths: Vec<&str> = modes
        .iter()
        .filter(|(k, _)| k.ends_with("-check"))
        .flat_map(|(_, s)| s.iter().map(|s| s.path.as_str()))
        .collect();
    // A set difference upstream: each missing check reported once.
    let mut missing: Vec<String> = vec![];
    for (_, steps) in modes
        .iter()
        .filter(|(k, _)| ACTION_MODES.contains(&k.as_str()))
    {
        for s in steps {
            let expected = conventional_check_path(&s.path);
            if !check_paths.contains(&expected.as_str()) && !missing.contains(&expected) {
                missing.push(expected);
            }
        }
    }
    Ok(missing
        .into_iter()
        .map(|name| {
            format!(
                "WARNING: {name} doesn't exist. Checks ensure that all tasks in the step will complete."
            )
        })
        .collect())
}

/// The conventional check of an action step, as upstream derives it: split the whole path at
/// its last `.` (directories included), `x.ext` → `x_check.ext`, `x` or `x.` → `x_check`.
pub fn conventional_check_path(path: &str) -> String {
    match path.rsplit_once('.') {
        Some((name, ext)) if !ext.is_empty() => format!("{name}_check.{ext}"),
        Some((name, _)) => format!("{name}_check"),
        None => format!("{path}_check"),
    }
}

/// Every step file of every mode must exist under `skyhook_dir` (§6.4 step 4.6).
pub fn check_step_files(config: &Config, skyhook_dir: &Path) -> Result<()> {
    let mut missing: Vec<String> = vec![];
    for (_, s) in config.all_steps() {
        let p = skyhook_dir.join(&s.path);
        if !p.exists() && !missing.contains(&s.path) {
            missing.push(s.path.clone());
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Error::MissingStepFiles(missing))
    }
}

/// Each expected config file must exist under `configmaps/` (§6.4 step 5).
pub fn check_config_files(config: &Config, configmaps: &Path) -> Result<()> {
    match config
        .expected_config_files
        .iter()
        .find(|f| !configmaps.join(f).exists())
    {
        Some(f) => Err(Error::MissingConfigFile(f.clone())),
        None => Ok(()),
    }
}

/// Reads, parses and validates the config of a package directory; returns it with warnings.
pub fn load(package_dir: &Path) -> Result<(Config, Vec<String>)> {
    let path = package_dir.join("config.json");
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(&path).map_err(|source| Error::Read {
        path: shown.clone(),
        source,
    })?;
    let config = parse(&text, &shown)?;
    // Beyond upstream's schema: the name is a component of the flag, log and history paths
    // (§9.1), so one that could leave them is refused before any of them is touched.
    if !crate::names::is_config_package_name(&config.package_name) {
        return Err(Error::PackageName(config.package_name));
    }
    let warnings = check_step_set(&config.modes)?;
    check_step_files(&config, &package_dir.join("skyhook_dir"))?;
    Ok((config, warnings))
}
