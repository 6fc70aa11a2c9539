//! Label selectors: apimachinery's validation (`LabelSelectorAsSelector`) with its error texts,
//! and matching against a label map. Shared by admission, node selection, compartments and the
//! drain barrier.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// One requirement of a parsed selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requirement {
    /// `key in (values)` (also `matchLabels`, with one value).
    In(String, Vec<String>),
    /// `key notin (values)`: true when the label is absent or not one of the values.
    NotIn(String, Vec<String>),
    /// The label is present.
    Exists(String),
    /// The label is absent.
    DoesNotExist(String),
}

/// A validated selector. An empty one matches every label set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    /// All must hold.
    pub requirements: Vec<Requirement>,
}

/// One selector problem, phrased like apimachinery's `field.Error`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectorError {
    /// Where inside the selector (`matchLabels`, `matchExpressions[0]`, …), for locating.
    pub location: Vec<String>,
    /// The apimachinery error text, e.g. `key: Invalid value: "a b": name part must …`.
    pub message: String,
}

const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";

/// apimachinery's `RegexError` phrasing.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let mut out = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{e}', "));
    }
    out.push_str(&format!("regex used for validation is '{fmt}')"));
    out
}

fn is_alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

fn qualified_name_part_ok(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && is_alnum(b[0])
        && is_alnum(b[b.len() - 1])
        && b.iter()
            .all(|&c| is_alnum(c) || c == b'-' || c == b'_' || c == b'.')
}

const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";

/// apimachinery `IsDNS1123Label` (namespace names): the error strings, empty when valid.
pub fn is_dns1123_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    let b = s.as_bytes();
    let ok = !b.is_empty()
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && (b[b.len() - 1].is_ascii_lowercase() || b[b.len() - 1].is_ascii_digit())
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-');
    if !ok {
        errs.push(regex_error(
            DNS1123_LABEL_MSG,
            DNS1123_LABEL_FMT,
            &["my-name", "123-abc"],
        ));
    }
    errs
}

/// Whether `s` is an RFC 1123 subdomain (object names, label-key prefixes).
pub fn is_dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push("must be no more than 253 characters".to_string());
    }
    let label_ok = |l: &str| {
        let b = l.as_bytes();
        !b.is_empty()
            && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
            && (b[b.len() - 1].is_ascii_lowercase() || b[b.len() - 1].is_ascii_digit())
            && b.iter()
                .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
    };
    if !s.split('.').all(label_ok) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_MSG,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// apimachinery `IsQualifiedName`: the error strings, empty when valid.
pub fn is_qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    is_dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".to_string());
    }
    if !qualified_name_part_ok(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_MSG,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// apimachinery `IsValidLabelValue`: the error strings, empty when valid.
pub fn is_valid_label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !value.is_empty() && !qualified_name_part_ok(value) {
        errs.push(regex_error(
            LABEL_VALUE_MSG,
            &format!("({QUALIFIED_NAME_FMT})?"),
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// Go's `%q` for the strings in these messages (ASCII-safe quoting).
fn go_quote(s: &str) -> String {
    format!("{s:?}")
}

fn json_list(values: &[String]) -> String {
    serde_json::to_string(values).unwrap_or_else(|_| "[]".to_string())
}

impl Selector {
    /// Validates and converts a `LabelSelector`, returning every problem (apimachinery stops at
    /// the first; we report all, matchLabels sorted by key first, then matchExpressions in order).
    pub fn parse(selector: &LabelSelector) -> Result<Selector, Vec<SelectorError>> {
        let mut requirements = Vec::new();
        let mut errors = Vec::new();
        for (key, value) in selector.match_labels.iter().flatten() {
            let location = vec!["matchLabels".to_string(), key.clone()];
            let mut msgs = key_errors(key);
            msgs.extend(value_errors(key, value, "values[0]"));
            if msgs.is_empty() {
                requirements.push(Requirement::In(key.clone(), vec![value.clone()]));
            } else {
                errors.push(SelectorError {
                    location,
                    message: aggregate(msgs),
                });
            }
        }
        for (i, expr) in selector.match_expressions.iter().flatten().enumerate() {
            let location = vec!["matchExpressions".to_string(), format!("[{i}]")];
            let values = expr.values.clone().unwrap_or_default();
            let op = expr.operator.as_str();
            if !matches!(op, "In" | "NotIn" | "Exists" | "DoesNotExist") {
                errors.push(SelectorError {
                    location,
                    message: format!("{} is not a valid label selector operator", go_quote(op)),
                });
                continue;
            }
            let mut msgs = key_errors(&expr.key);
            match op {
                // apimachinery copies the values with `append([]string(nil), …)`, so an
                // empty list is always reported as null.
                "In" | "NotIn" if values.is_empty() => msgs.push(
                    "values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty"
                        .to_string(),
                ),
                "Exists" | "DoesNotExist" if !values.is_empty() => msgs.push(format!(
                    "values: Invalid value: {}: values set must be empty for exists and does not exist",
                    json_list(&values)
                )),
                _ => {}
            }
            for (j, v) in values.iter().enumerate() {
                msgs.extend(value_errors(&expr.key, v, &format!("values[{j}]")));
            }
            if !msgs.is_empty() {
                errors.push(SelectorError {
                    location,
                    message: aggregate(msgs),
                });
                continue;
            }
            requirements.push(match op {
                "In" => Requirement::In(expr.key.clone(), values),
                "NotIn" => Requirement::NotIn(expr.key.clone(), values),
                "Exists" => Requirement::Exists(expr.key.clone()),
                _ => Requirement::DoesNotExist(expr.key.clone()),
            });
        }
        if errors.is_empty() {
            Ok(Selector { requirements })
        } else {
            Err(errors)
        }
    }

    /// Parses the text form `kubectl -l` and `?labelSelector=` use: comma-separated terms
    /// `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`. `!=` and `notin`
    /// also select objects without the label, as in Kubernetes. Keys and values are checked
    /// like the structured form.
    pub fn parse_text(text: &str) -> Result<Selector, String> {
        let mut expressions = Vec::new();
        let expr = |key: &str, operator: &str, values: Option<Vec<String>>| {
            k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                key: key.trim().to_string(),
                operator: operator.to_string(),
                values,
            }
        };
        for term in split_top_level(text) {
            let requirement = if let Some(key) = term.strip_prefix('!') {
                expr(key, "DoesNotExist", None)
            } else if let Some((k, v)) = term.split_once("!=") {
                expr(k, "NotIn", Some(vec![v.trim().to_string()]))
            } else if let Some((k, v)) = term.split_once("==") {
                expr(k, "In", Some(vec![v.trim().to_string()]))
            } else if let Some((k, v)) = term.split_once('=') {
                expr(k, "In", Some(vec![v.trim().to_string()]))
            } else if let Some((k, v)) = term.split_once(" notin ") {
                expr(k, "NotIn", Some(set_values(v)?))
            } else if let Some((k, v)) = term.split_once(" in ") {
                expr(k, "In", Some(set_values(v)?))
            } else if !term.contains(char::is_whitespace) && !term.contains(['(', ')']) {
                expr(term, "Exists", None)
            } else {
                return Err(format!("unable to parse requirement: {term:?}"));
            };
            expressions.push(requirement);
        }
        let selector = LabelSelector {
            match_labels: None,
            match_expressions: Some(expressions),
        };
        Selector::parse(&selector).map_err(|errors| {
            errors
                .into_iter()
                .map(|e| e.message)
                .collect::<Vec<_>>()
                .join("; ")
        })
    }

    /// Whether this selector selects nothing-in-particular (no requirements = everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_with(|k| labels.get(k).map(String::as_str))
    }

    /// Whether the labels `label` looks up satisfy every requirement: for labels held in
    /// another shape (a JSON object), without copying them into a map.
    pub fn matches_with<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.requirements.iter().all(|r| match r {
            Requirement::In(k, vs) => label(k).is_some_and(|v| vs.iter().any(|x| x == v)),
            Requirement::NotIn(k, vs) => label(k).is_none_or(|v| !vs.iter().any(|x| x == v)),
            Requirement::Exists(k) => label(k).is_some(),
            Requirement::DoesNotExist(k) => label(k).is_none(),
        })
    }
}

/// Splits a selector's text on the commas that are not inside a parenthesized set.
fn split_top_level(text: &str) -> Vec<&str> {
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

/// The values of `(a, b)`.
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

fn key_errors(key: &str) -> Vec<String> {
    let errs = is_qualified_name(key);
    if errs.is_empty() {
        Vec::new()
    } else {
        vec![format!(
            "key: Invalid value: {}: {}",
            go_quote(key),
            errs.join("; ")
        )]
    }
}

fn value_errors(key: &str, value: &str, path: &str) -> Vec<String> {
    let errs = is_valid_label_value(value);
    if errs.is_empty() {
        Vec::new()
    } else {
        vec![format!(
            "{path}[{key}]: Invalid value: {}: {}",
            go_quote(value),
            errs.join("; ")
        )]
    }
}

/// `utilerrors.NewAggregate(...).Error()`: one message as is, several as `[a, b]`.
fn aggregate(msgs: Vec<String>) -> String {
    if msgs.len() == 1 {
        msgs.into_iter().next().unwrap_or_default()
    } else {
        format!("[{}]", msgs.join(", "))
    }
}

/// Whether `selector` selects `labels`; an invalid selector selects nothing.
/// `None` (an absent selector) and an empty selector select everything.
pub fn matches(selector: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    match selector {
        None => true,
        Some(s) => Selector::parse(s).is_ok_and(|sel| sel.matches(labels)),
    }
}

/// Whether a selector has no requirements (`{}` or absent): used where empty means
/// "nothing" rather than "everything" (`podNonInterruptLabels`, §1.2).
pub fn is_empty(selector: Option<&LabelSelector>) -> bool {
    selector.is_none_or(|s| {
        s.match_labels.as_ref().is_none_or(|m| m.is_empty())
            && s.match_expressions.as_ref().is_none_or(|e| e.is_empty())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: Option<&[&str]>) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: values.map(|v| v.iter().map(|s| s.to_string()).collect()),
        }
    }

    #[test]
    fn matching_follows_kubernetes() {
        let sel = LabelSelector {
            match_labels: Some(labels(&[("gpu", "true")])),
            match_expressions: Some(vec![
                expr("zone", "In", Some(&["a", "b"])),
                expr("tier", "NotIn", Some(&["db"])),
                expr("ready", "Exists", None),
                expr("ignore", "DoesNotExist", None),
            ]),
        };
        let s = Selector::parse(&sel).unwrap();
        assert!(s.matches(&labels(&[("gpu", "true"), ("zone", "a"), ("ready", "")])));
        assert!(!s.matches(&labels(&[("gpu", "true"), ("zone", "c"), ("ready", "")])));
        assert!(!s.matches(&labels(&[
            ("gpu", "true"),
            ("zone", "a"),
            ("ready", ""),
            ("tier", "db")
        ])));
        assert!(!s.matches(&labels(&[
            ("gpu", "true"),
            ("zone", "a"),
            ("ready", ""),
            ("ignore", "x")
        ])));
        assert!(!s.matches(&labels(&[("zone", "a"), ("ready", "")])));
        assert!(matches(Some(&LabelSelector::default()), &labels(&[])));
        assert!(is_empty(Some(&LabelSelector::default())));
    }

    #[test]
    fn invalid_selectors_are_explained() {
        let sel = LabelSelector {
            match_labels: Some(labels(&[("bad key", "ok"), ("good", "bad value!")])),
            match_expressions: Some(vec![
                expr("k", "In", Some(&[])),
                expr("k", "Exists", Some(&["x"])),
                expr("k", "Equals", Some(&["x"])),
            ]),
        };
        let errs = Selector::parse(&sel).unwrap_err();
        let msgs: Vec<&str> = errs.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(msgs.len(), 5);
        assert!(msgs[0].starts_with(
            "key: Invalid value: \"bad key\": name part must consist of alphanumeric characters"
        ));
        assert!(msgs[1].starts_with(
            "values[0][good]: Invalid value: \"bad value!\": a valid label must be an empty string"
        ));
        assert_eq!(
            msgs[2],
            "values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty"
        );
        assert_eq!(
            msgs[3],
            "values: Invalid value: [\"x\"]: values set must be empty for exists and does not exist"
        );
        assert_eq!(msgs[4], "\"Equals\" is not a valid label selector operator");
        assert!(!matches(Some(&sel), &labels(&[])));
    }

    #[test]
    fn qualified_names() {
        assert!(is_qualified_name("nodewright.nvidia.com/ignore").is_empty());
        assert!(is_qualified_name("kubernetes.io/hostname").is_empty());
        assert_eq!(
            is_qualified_name("/x"),
            vec!["prefix part must be non-empty"]
        );
        assert!(!is_qualified_name("a/b/c").is_empty());
        assert!(!is_qualified_name(&"x".repeat(64)).is_empty());
        assert!(is_valid_label_value("").is_empty());
    }

    #[test]
    fn text_selectors_follow_kubectl_syntax() {
        let sel =
            Selector::parse_text("pool=gpu, zone in (a, b),tier!=web,!maintenance,rack").unwrap();
        assert!(sel.matches(&labels(&[("pool", "gpu"), ("zone", "b"), ("rack", "r1")])));
        // `!=` also selects objects without the label; `!k` refuses objects with it.
        assert!(!sel.matches(&labels(&[
            ("pool", "gpu"),
            ("zone", "b"),
            ("tier", "web"),
            ("rack", "r1")
        ])));
        assert!(!sel.matches(&labels(&[
            ("pool", "gpu"),
            ("zone", "b"),
            ("rack", "r1"),
            ("maintenance", "")
        ])));
        assert!(!sel.matches(&labels(&[("pool", "gpu"), ("zone", "c"), ("rack", "r1")])));
        assert!(Selector::parse_text("").unwrap().is_empty());
        let err = Selector::parse_text("bad key=x").unwrap_err();
        assert!(
            err.contains("unable to parse") || err.contains("Invalid value"),
            "{err}"
        );
        assert!(Selector::parse_text("k in a,b").is_err());
    }
}
