//! Label and field selectors of list and watch requests.

use nodewright_schema::selector::Selector;
use serde_json::Value;

use super::resources::{self, Rid};

/// A parsed `labelSelector` (the syntax lives in `schema::selector`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector(Selector);

/// A parsed `fieldSelector`: `path=value` and `path!=value` terms.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

/// Splits on commas (field selectors have no sets).
fn split_top(text: &str) -> Vec<&str> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

impl LabelSelector {
    /// Parses the Kubernetes label selector syntax.
    pub fn parse(text: &str) -> Result<Self, String> {
        Selector::parse_text(text).map(LabelSelector)
    }

    /// Whether an object's labels satisfy every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        if self.0.is_empty() {
            return true;
        }
        let labels = object
            .get("metadata")
            .and_then(|m| m.get("labels"))
            .and_then(Value::as_object);
        self.0
            .matches_with(|k| labels.and_then(|l| l.get(k)).and_then(Value::as_str))
    }
}

/// The string form of a field for selection (`true`, `5`, `""` when absent).
fn field_text<'a>(object: &'a Value, path: &str) -> std::borrow::Cow<'a, str> {
    use std::borrow::Cow;
    let field = path
        .split('.')
        .try_fold(object, |value, segment| value.get(segment));
    match field {
        Some(Value::String(s)) => Cow::Borrowed(s),
        Some(Value::Bool(b)) => Cow::Owned(b.to_string()),
        Some(Value::Number(n)) => Cow::Owned(n.to_string()),
        // An unset `spec.unschedulable` selects as false, like the apiserver's field sets.
        None if path == "spec.unschedulable" => Cow::Borrowed("false"),
        _ => Cow::Borrowed(""),
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

    /// The value `path` must equal, when a term requires one.
    pub fn required(&self, path: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(p, eq, _)| *eq && p == path)
            .map(|(_, _, value)| value.as_str())
    }

    /// Whether an object satisfies every term.
    pub fn matches(&self, object: &Value) -> bool {
        self.0
            .iter()
            .all(|(path, eq, value)| (field_text(object, path) == *value) == *eq)
    }
}

/// The fields a resource can be selected by (kube-apiserver's field label conversions for
/// the kinds served here): `metadata.name` and `metadata.namespace` everywhere, plus each
/// kind's own.
fn selectable(rid: Rid) -> &'static [&'static str] {
    match rid {
        resources::PODS => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
        ],
        resources::NODES => &["spec.unschedulable"],
        resources::JOBS => &["status.successful"],
        resources::NAMESPACES => &["status.phase"],
        resources::CORE_EVENTS => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        _ => &[],
    }
}

impl FieldSelector {
    /// The first field `rid` cannot be selected by, as the apiserver refuses it (400).
    pub fn check(&self, rid: Rid) -> Result<(), String> {
        for (path, _, _) in &self.0 {
            let common = path == "metadata.name" || path == "metadata.namespace";
            if !common && !selectable(rid).contains(&path.as_str()) {
                return Err(format!("field label not supported: {path}"));
            }
        }
        Ok(())
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
