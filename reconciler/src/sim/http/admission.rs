//! The validation kube-apiserver applies to the built-in objects `sim serve` stores, for the
//! fields the simulator models: object names (RFC 1123 subdomains, namespace names RFC 1123
//! labels), label and annotation keys and label values, node taints, and the restart policy
//! of a Job's pod template. Errors carry apimachinery's field paths and messages, so a client
//! sees what a real cluster would answer (422 Invalid).

use serde_json::Value;

use nodewright_schema::selector::{
    is_dns1123_label, is_dns1123_subdomain, is_qualified_name, is_valid_label_value,
};

use super::resources::{self, Rid};

/// The taint effects a node accepts.
const TAINT_EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];
/// The restart policies a pod accepts.
const POD_RESTART_POLICIES: [&str; 3] = ["Always", "OnFailure", "Never"];
/// The restart policies a Job's pod template accepts.
const JOB_RESTART_POLICIES: [&str; 2] = ["OnFailure", "Never"];

/// One field error, as apimachinery's `field.Error` renders it.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    /// The field path (`metadata.name`, `spec.taints[0].effect`).
    pub field: String,
    /// The cause reason of the Status (`FieldValueInvalid`, …).
    pub reason: &'static str,
    /// The message without the field (`Invalid value: "x": …`).
    pub message: String,
}

impl FieldError {
    fn invalid(field: impl Into<String>, value: &str, why: &str) -> Self {
        FieldError {
            field: field.into(),
            reason: "FieldValueInvalid",
            message: format!("Invalid value: {value:?}: {why}"),
        }
    }

    fn not_supported(field: impl Into<String>, value: &str, supported: &[&str]) -> Self {
        let supported: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        FieldError {
            field: field.into(),
            reason: "FieldValueNotSupported",
            message: format!(
                "Unsupported value: {value:?}: supported values: {}",
                supported.join(", ")
            ),
        }
    }

    fn required(field: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            reason: "FieldValueRequired",
            message: "Required value".into(),
        }
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Every field error of `value` as an object of `rid` would be written.
pub fn validate(rid: Rid, value: &Value) -> Vec<FieldError> {
    let mut errors = object_meta(rid, value);
    match rid {
        resources::NODES => errors.extend(node_taints(value)),
        resources::JOBS => errors.extend(job_restart_policy(value)),
        resources::PODS => errors.extend(pod_spec(value)),
        _ => {}
    }
    errors
}

fn strings<'a>(value: &'a Value, pointer: &str) -> impl Iterator<Item = (&'a String, &'a Value)> {
    value
        .pointer(pointer)
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
}

/// `metadata`: the name (NodeWrights and DeploymentPolicies check theirs in their own
/// admission), label keys and values, annotation keys.
fn object_meta(rid: Rid, value: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let name = value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let name_errors = match rid {
        resources::NODEWRIGHTS | resources::POLICIES => Vec::new(),
        resources::NAMESPACES => is_dns1123_label(name),
        _ => is_dns1123_subdomain(name),
    };
    errors.extend(
        name_errors
            .iter()
            .map(|why| FieldError::invalid("metadata.name", name, why)),
    );
    for (key, label) in strings(value, "/metadata/labels") {
        for why in is_qualified_name(key) {
            errors.push(FieldError::invalid("metadata.labels", key, &why));
        }
        let text = label.as_str().unwrap_or_default();
        for why in is_valid_label_value(text) {
            errors.push(FieldError::invalid("metadata.labels", text, &why));
        }
    }
    for (key, _) in strings(value, "/metadata/annotations") {
        for why in is_qualified_name(&key.to_lowercase()) {
            errors.push(FieldError::invalid("metadata.annotations", key, &why));
        }
    }
    errors
}

/// `spec.taints`: qualified-name keys and one of the three effects.
fn node_taints(value: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let taints = value
        .pointer("/spec/taints")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (i, taint) in taints.iter().enumerate() {
        let key = taint.get("key").and_then(Value::as_str).unwrap_or_default();
        for why in is_qualified_name(key) {
            errors.push(FieldError::invalid(
                format!("spec.taints[{i}].key"),
                key,
                &why,
            ));
        }
        let field = format!("spec.taints[{i}].effect");
        match taint
            .get("effect")
            .and_then(Value::as_str)
            .unwrap_or_default()
        {
            "" => errors.push(FieldError::required(field)),
            effect if !TAINT_EFFECTS.contains(&effect) => {
                errors.push(FieldError::not_supported(field, effect, &TAINT_EFFECTS));
            }
            _ => {}
        }
    }
    errors
}

/// `spec.template.spec.restartPolicy` of a Job: `OnFailure` or `Never` (unset defaults to
/// `Always`, which a Job refuses).
fn job_restart_policy(value: &Value) -> Vec<FieldError> {
    let policy = value
        .pointer("/spec/template/spec/restartPolicy")
        .and_then(Value::as_str)
        .unwrap_or("Always");
    if JOB_RESTART_POLICIES.contains(&policy) {
        return Vec::new();
    }
    vec![FieldError::not_supported(
        "spec.template.spec.restartPolicy",
        policy,
        &JOB_RESTART_POLICIES,
    )]
}

/// A pod's spec: at least one container, each named and with an image, names unique, and a
/// known restart policy.
fn pod_spec(value: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let containers = value
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if containers.is_empty() {
        errors.push(FieldError::required("spec.containers"));
    }
    let inits = value
        .pointer("/spec/initContainers")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut seen = std::collections::BTreeSet::new();
    for (list, field) in [
        (inits, "spec.initContainers"),
        (containers, "spec.containers"),
    ] {
        for (i, c) in list.iter().enumerate() {
            let name = c.get("name").and_then(Value::as_str).unwrap_or_default();
            if name.is_empty() {
                errors.push(FieldError::required(format!("{field}[{i}].name")));
            } else if !seen.insert(name.to_string()) {
                errors.push(FieldError {
                    field: format!("{field}[{i}].name"),
                    reason: "FieldValueDuplicate",
                    message: format!("Duplicate value: {name:?}"),
                });
            }
            if c.get("image")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                errors.push(FieldError::required(format!("{field}[{i}].image")));
            }
        }
    }
    if let Some(policy) = value.pointer("/spec/restartPolicy").and_then(Value::as_str)
        && !POD_RESTART_POLICIES.contains(&policy)
    {
        errors.push(FieldError::not_supported(
            "spec.restartPolicy",
            policy,
            &POD_RESTART_POLICIES,
        ));
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_are_subdomains_and_namespace_names_labels() {
        let cm = |name: &str| json!({"metadata": {"name": name}});
        assert!(validate(resources::CONFIG_MAPS, &cm("a.b-c")).is_empty());
        let errors = validate(resources::CONFIG_MAPS, &cm("A_b"));
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].to_string().starts_with(
                "metadata.name: Invalid value: \"A_b\": a lowercase RFC 1123 subdomain must consist of"
            ),
            "{}",
            errors[0]
        );
        assert_eq!(
            validate(resources::CONFIG_MAPS, &cm(&"a".repeat(254))).len(),
            1
        );
        assert!(validate(resources::NAMESPACES, &cm("a.b")).len() == 1);
        assert!(validate(resources::NAMESPACES, &cm("team-1")).is_empty());
    }

    #[test]
    fn label_keys_and_values_and_annotation_keys_are_checked() {
        let obj = json!({"metadata": {"name": "x",
            "labels": {"ok/key": "v", "bad key": "v", "k": "bad value"},
            "annotations": {"example.com/Fine": "any text", "-bad": ""}}});
        let fields: Vec<String> = validate(resources::CONFIG_MAPS, &obj)
            .iter()
            .map(|e| e.field.clone())
            .collect();
        assert_eq!(
            fields,
            ["metadata.labels", "metadata.labels", "metadata.annotations"]
        );
    }

    #[test]
    fn a_pod_needs_named_containers_with_images_and_a_known_restart_policy() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {
            "restartPolicy": "Sometimes",
            "initContainers": [{"name": "a", "image": "x"}],
            "containers": [{"name": "a", "image": "x"}, {"name": "", "image": ""}]}});
        let fields: Vec<(String, &str)> = validate(resources::PODS, &pod)
            .iter()
            .map(|e| (e.field.clone(), e.reason))
            .collect();
        assert_eq!(
            fields,
            [
                ("spec.containers[0].name".to_string(), "FieldValueDuplicate"),
                ("spec.containers[1].name".to_string(), "FieldValueRequired"),
                ("spec.containers[1].image".to_string(), "FieldValueRequired"),
                ("spec.restartPolicy".to_string(), "FieldValueNotSupported"),
            ]
        );
        let empty = json!({"metadata": {"name": "p"}, "spec": {"containers": []}});
        assert_eq!(
            validate(resources::PODS, &empty)[0].field,
            "spec.containers"
        );
    }

    #[test]
    fn taint_effects_and_job_restart_policies_are_closed_sets() {
        let node = json!({"metadata": {"name": "n"}, "spec": {"taints": [
            {"key": "a", "effect": "NoSchedule"},
            {"key": "b", "effect": "Sometimes"},
            {"key": "c"},
        ]}});
        let errors: Vec<String> = validate(resources::NODES, &node)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            errors,
            [
                "spec.taints[1].effect: Unsupported value: \"Sometimes\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\"",
                "spec.taints[2].effect: Required value",
            ]
        );
        let job = |policy: Option<&str>| json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": {"restartPolicy": policy}}}});
        assert!(validate(resources::JOBS, &job(Some("Never"))).is_empty());
        assert_eq!(
            validate(resources::JOBS, &job(None))[0].to_string(),
            "spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\""
        );
    }
}
