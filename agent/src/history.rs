//! The per-package history file `R/history/<package>.json` (§9.6).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::timefmt::utc_iso_now;

/// History could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Filesystem error.
    #[error("history file {path}: {source}")]
    Io {
        /// File path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// Valid JSON without the expected keys (upstream crashes too).
    #[error("history file {path} is JSON but lacks {key:?}")]
    Shape {
        /// File path.
        path: PathBuf,
        /// Missing or mistyped key.
        key: &'static str,
    },
}

/// Outcome of loading the history file.
enum Loaded {
    Missing,
    Doc(Map<String, Value>),
}

fn backup(path: &Path) -> Result<(), Error> {
    let mut b = path.as_os_str().to_owned();
    b.push(".backup");
    println!(
        "Failed to load existing history, corrupt history file moved to {}...",
        PathBuf::from(&b).display()
    );
    std::fs::rename(path, &b).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Upstream's notice, printed on reads and writes alike when the file does not exist.
fn no_history_notice(path: &Path) {
    let package = path
        .file_stem()
        .map(|s| s.to_string_lossy())
        .unwrap_or_default();
    println!("no existing history found for {package}, could be first installation...");
}

fn empty_doc() -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("current-version".into(), Value::from(""));
    m.insert("history".into(), Value::Array(vec![]));
    m
}

fn load(path: &Path) -> Result<Loaded, Error> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Loaded::Missing),
        Err(source) => {
            return Err(Error::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(m)) => Ok(Loaded::Doc(m)),
        Ok(_) => Err(Error::Shape {
            path: path.to_path_buf(),
            key: "current-version",
        }),
        Err(_) => {
            backup(path)?;
            Ok(Loaded::Doc(empty_doc()))
        }
    }
}

/// `PREVIOUS_VERSION` for upgrades: the current version, `unknown` without a file, empty when
/// the file was corrupt (it is then backed up).
pub fn previous_version(path: &Path) -> Result<String, Error> {
    match load(path)? {
        Loaded::Missing => {
            no_history_notice(path);
            Ok("unknown".to_string())
        }
        Loaded::Doc(m) => match m.get("current-version") {
            Some(Value::String(s)) => Ok(s.clone()),
            _ => Err(Error::Shape {
                path: path.to_path_buf(),
                key: "current-version",
            }),
        },
    }
}

/// Prepends `version` with the current UTC time and makes it current.
pub fn record(path: &Path, version: &str) -> Result<(), Error> {
    let mut doc = match load(path)? {
        Loaded::Missing => {
            no_history_notice(path);
            empty_doc()
        }
        Loaded::Doc(m) => m,
    };
    let mut entry = Map::new();
    entry.insert("version".into(), Value::from(version));
    entry.insert("time".into(), Value::from(utc_iso_now()));
    match doc.get_mut("history") {
        Some(Value::Array(a)) => a.insert(0, Value::Object(entry)),
        _ => {
            return Err(Error::Shape {
                path: path.to_path_buf(),
                key: "history",
            });
        }
    }
    if !matches!(doc.get("current-version"), Some(Value::String(_))) {
        return Err(Error::Shape {
            path: path.to_path_buf(),
            key: "current-version",
        });
    }
    doc.insert("current-version".into(), Value::from(version));
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    std::fs::write(path, python_json(&Value::Object(doc))).map_err(io)
}

/// `json.dumps` with Python's default separators and `ensure_ascii`.
pub fn python_json(v: &Value) -> String {
    let mut out = String::new();
    write_py(v, &mut out);
    out
}

fn write_py(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => write_py_str(s, out),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_py(x, out);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_py_str(k, out);
                out.push_str(": ");
                write_py(x, out);
            }
            out.push('}');
        }
    }
}

fn write_py_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7f => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_json_uses_python_separators_and_ascii() {
        let v: Value = serde_json::from_str(r#"{"a": [1, "é"], "b": {"c": true}}"#).unwrap();
        assert_eq!(python_json(&v), r#"{"a": [1, "\u00e9"], "b": {"c": true}}"#);
    }
}
