//! Label and field selectors of list and watch requests.

use serde_json::Value;

/// One label requirement.
#[derive(Clone, Debug, PartialEq)]
enum LabelReq {
    Eq(String, String),
    NotEq(String, String),
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// A parsed `labelSelector`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector(Vec<LabelReq>);

/// A parsed `fieldSelector`: `path=value` and `path!=value` terms.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

/// Splits on commas that are not inside parentheses.
fn split_top(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

fn set_values(text: &str) -> Result<Vec<String>, String> {
    let inner = text
        .trim()
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .ok_or_else(|| format!("expected a parenthesized set, found {text:?}"))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parses the Kubernetes label selector syntax.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for term in split_top(text) {
            let req = if let Some(key) = term.strip_prefix('!') {
                LabelReq::NotExists(key.trim().to_string())
            } else if let Some((k, v)) = term.split_once("!=") {
                LabelReq::NotEq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once("==") {
                LabelReq::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once('=') {
                LabelReq::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once(" notin ") {
                LabelReq::NotIn(k.trim().into(), set_values(v)?)
            } else if let Some((k, v)) = term.split_once(" in ") {
                LabelReq::In(k.trim().into(), set_values(v)?)
            } else if term
                .chars()
                .all(|c| c.is_alphanumeric() || "-_./".contains(c))
            {
                LabelReq::Exists(term.to_string())
            } else {
                return Err(format!("unable to parse requirement: {term:?}"));
            };
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether an object's labels satisfy every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = object.pointer("/metadata/labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|req| match req {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
        })
    }
}

/// The string form of a field for selection (`true`, `5`, `""` when absent).
fn field_text(object: &Value, path: &str) -> String {
    let pointer = format!("/{}", path.replace('.', "/"));
    match object.pointer(&pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Number(n)) => n.to_string(),
        // An unset `spec.unschedulable` selects as false, like the apiserver's field sets.
        None if path == "spec.unschedulable" => "false".into(),
        _ => String::new(),
    }
}

impl FieldSelector {
    /// Parses `a.b=c,d!=e` (also `==`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut terms = Vec::new();
        for term in split_top(text) {
            let (path, eq, value) = if let Some((k, v)) = term.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = term.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = term.split_once('=') {
                (k, true, v)
            } else {
                return Err(format!("invalid field selector term {term:?}"));
            };
            terms.push((path.trim().to_string(), eq, value.trim().to_string()));
        }
        Ok(FieldSelector(terms))
    }

    /// Whether an object satisfies every term.
    pub fn matches(&self, object: &Value) -> bool {
        self.0
            .iter()
            .all(|(path, eq, value)| (field_text(object, path) == *value) == *eq)
    }
}

/// Both selectors of a request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selectors {
    /// `labelSelector`.
    pub labels: LabelSelector,
    /// `fieldSelector`.
    pub fields: FieldSelector,
}

impl Selectors {
    /// Whether an object is selected.
    pub fn matches(&self, object: &Value) -> bool {
        self.labels.matches(object) && self.fields.matches(object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selectors_cover_equality_sets_and_existence() {
        let obj = json!({"metadata": {"labels": {"app": "web", "tier": "front"}}});
        let yes = [
            "app=web",
            "app==web,tier",
            "tier in (front, back)",
            "!missing",
            "app notin (db)",
            "x!=y",
        ];
        for s in yes {
            assert!(LabelSelector::parse(s).unwrap().matches(&obj), "{s}");
        }
        let no = [
            "app=db",
            "missing",
            "!app",
            "tier in (back)",
            "app notin (web)",
        ];
        for s in no {
            assert!(!LabelSelector::parse(s).unwrap().matches(&obj), "{s}");
        }
    }

    #[test]
    fn field_selectors_read_dotted_paths() {
        let pod = json!({"metadata": {"name": "p", "namespace": "a"}, "spec": {"nodeName": "n1"}});
        assert!(
            FieldSelector::parse("spec.nodeName=n1,metadata.name=p")
                .unwrap()
                .matches(&pod)
        );
        assert!(
            !FieldSelector::parse("spec.nodeName=n2")
                .unwrap()
                .matches(&pod)
        );
        assert!(
            FieldSelector::parse("metadata.namespace!=b")
                .unwrap()
                .matches(&pod)
        );
        let node = json!({"metadata": {"name": "n"}, "spec": {}});
        assert!(
            FieldSelector::parse("spec.unschedulable=false")
                .unwrap()
                .matches(&node)
        );
    }
}
