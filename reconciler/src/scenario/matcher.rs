//! Subset matching of expectations against what the cluster shows (spec/scenarios.md §5):
//! maps match as subsets, lists element by element with the same length, a key that is absent
//! matches only the word `absent`, scalars compare by value (a quoted `"3"` equals `3`).

use serde_yaml::Value;

/// The first difference between an expectation and the actual value.
#[derive(Clone, Debug, PartialEq)]
pub struct Mismatch {
    /// Where, e.g. `nodewrights.tuning.status`.
    pub path: String,
    /// What was expected.
    pub expected: Box<Value>,
    /// What was found (`None` = absent).
    pub actual: Option<Box<Value>>,
    /// Extra explanation.
    pub note: Option<String>,
}

impl Mismatch {
    /// A mismatch with a note.
    pub fn note(
        path: &str,
        expected: Value,
        actual: Option<Value>,
        note: impl Into<String>,
    ) -> Self {
        Mismatch {
            path: path.to_string(),
            expected: Box::new(expected),
            actual: actual.map(Box::new),
            note: Some(note.into()),
        }
    }

    /// Multi-line rendering: path, expected, actual as YAML.
    pub fn render(&self) -> String {
        let mut out = format!("mismatch at {}", self.path);
        if let Some(note) = &self.note {
            out.push_str(&format!(": {note}"));
        }
        out.push_str("\n  expected:");
        out.push_str(&indent_yaml(&self.expected));
        out.push_str("\n  actual:");
        match &self.actual {
            Some(v) => out.push_str(&indent_yaml(v)),
            None => out.push_str(" absent"),
        }
        out
    }
}

fn indent_yaml(v: &Value) -> String {
    let text = serde_yaml::to_string(v).unwrap_or_default();
    let text = text.trim_end();
    if !text.contains('\n') && !matches!(v, Value::Mapping(_) | Value::Sequence(_)) {
        return format!(" {text}");
    }
    let mut out = String::new();
    for line in text.lines() {
        out.push_str("\n    ");
        out.push_str(line);
    }
    out
}

/// Whether `v` is the word `absent`.
pub fn is_absent_word(v: &Value) -> bool {
    v.as_str() == Some("absent")
}

/// Matches `expected` against `actual` at `path`.
pub fn matches(path: &str, expected: &Value, actual: Option<&Value>) -> Result<(), Mismatch> {
    let actual = actual.filter(|a| !a.is_null());
    if is_absent_word(expected) {
        return match actual {
            None => Ok(()),
            Some(a) if is_absent_word(a) => Ok(()),
            Some(a) => Err(Mismatch::note(
                path,
                expected.clone(),
                Some(a.clone()),
                "expected the key to be absent",
            )),
        };
    }
    let Some(actual) = actual else {
        if expected.is_null() {
            return Ok(());
        }
        return Err(Mismatch {
            path: path.to_string(),
            expected: Box::new(expected.clone()),
            actual: None,
            note: None,
        });
    };
    match expected {
        Value::Mapping(map) => {
            let Value::Mapping(actual_map) = actual else {
                return Err(Mismatch::note(
                    path,
                    expected.clone(),
                    Some(actual.clone()),
                    "expected a map",
                ));
            };
            for (k, ev) in map {
                let key = scalar_text(k);
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                let av = actual_map
                    .get(k)
                    .or_else(|| actual_map.get(Value::String(key.clone())));
                matches(&child, ev, av)?;
            }
            Ok(())
        }
        Value::Sequence(items) => {
            let Value::Sequence(actual_items) = actual else {
                return Err(Mismatch::note(
                    path,
                    expected.clone(),
                    Some(actual.clone()),
                    "expected a list",
                ));
            };
            if items.len() != actual_items.len() {
                return Err(Mismatch::note(
                    path,
                    expected.clone(),
                    Some(actual.clone()),
                    format!(
                        "expected {} items, found {}",
                        items.len(),
                        actual_items.len()
                    ),
                ));
            }
            for (i, (e, a)) in items.iter().zip(actual_items).enumerate() {
                matches(&format!("{path}[{i}]"), e, Some(a))?;
            }
            Ok(())
        }
        Value::Tagged(t) => matches(path, &t.value, Some(actual)),
        scalar => {
            if scalars_equal(scalar, actual) {
                Ok(())
            } else {
                Err(Mismatch {
                    path: path.to_string(),
                    expected: Box::new(expected.clone()),
                    actual: Some(Box::new(actual.clone())),
                    note: None,
                })
            }
        }
    }
}

/// The text of a scalar (`true`, `3`, `abc`).
pub fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Null => "null".into(),
        other => serde_yaml::to_string(other)
            .unwrap_or_default()
            .trim()
            .to_string(),
    }
}

fn scalars_equal(expected: &Value, actual: &Value) -> bool {
    if expected == actual {
        return true;
    }
    if let (Some(a), Some(b)) = (as_f64(expected), as_f64(actual)) {
        return a == b;
    }
    if matches!(actual, Value::Mapping(_) | Value::Sequence(_)) {
        return false;
    }
    scalar_text(expected) == scalar_text(actual)
}

fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// Converts any serializable value (Kubernetes objects) to YAML.
pub fn to_value<T: serde::Serialize>(v: &T) -> Value {
    serde_yaml::to_value(v).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn y(s: &str) -> Value {
        serde_yaml::from_str(s).unwrap()
    }

    #[test]
    fn maps_are_subsets_lists_are_exact_and_absent_is_a_word() {
        let actual = y("{a: 1, b: {c: x, d: y}, l: [{k: 1, z: 2}, {k: 2}]}");
        assert!(matches("", &y("{b: {c: x}}"), Some(&actual)).is_ok());
        assert!(matches("", &y("{l: [{k: 1}, {k: 2}]}"), Some(&actual)).is_ok());
        let err = matches("", &y("{l: [{k: 1}]}"), Some(&actual)).unwrap_err();
        assert_eq!(err.path, "l");
        assert!(matches("", &y("{missing: absent}"), Some(&actual)).is_ok());
        let err = matches("", &y("{a: absent}"), Some(&actual)).unwrap_err();
        assert_eq!(err.path, "a");
        let err = matches("", &y("{missing: 1}"), Some(&actual)).unwrap_err();
        assert!(err.render().contains("actual: absent"), "{}", err.render());
        assert!(matches("", &y(r#"{a: "1"}"#), Some(&actual)).is_ok());
    }

    #[test]
    fn a_mismatch_renders_expected_and_actual_as_yaml() {
        let err = matches("nodes.n1", &y("{ready: true}"), Some(&y("{ready: false}"))).unwrap_err();
        let text = err.render();
        assert!(text.contains("mismatch at nodes.n1.ready"), "{text}");
        assert!(text.contains("expected: true"), "{text}");
        assert!(text.contains("actual: false"), "{text}");
    }
}
