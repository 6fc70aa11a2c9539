//! Reading legacy `skyhook.nvidia.com/v1alpha1` manifests (spec/operator.md §0.2, §3.6).
//!
//! A legacy `Skyhook` or legacy-group `DeploymentPolicy` is converted to its NodeWright form
//! on read so existing repositories load unchanged; the caller reports the returned notice.

use serde_json::Value;

use crate::keys;

/// What conversion did to one object, for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyNotice {
    /// The kind as written.
    pub from_kind: String,
    /// The kind after conversion.
    pub to_kind: String,
    /// A sentence for the user.
    pub message: String,
}

/// Converts a legacy object in place. Returns a notice when something was converted.
///
/// Converts `apiVersion`, kind `Skyhook` → `NodeWright`, the legacy finalizer, and legacy
/// metadata keys (`skyhook.nvidia.com/pause`, `…/disable`) on the object itself.
pub fn convert(object: &mut Value) -> Option<LegacyNotice> {
    let api_version = object.get("apiVersion")?.as_str()?;
    if api_version != keys::LEGACY_API_VERSION {
        return None;
    }
    let from_kind = object.get("kind")?.as_str()?.to_string();
    let to_kind = match from_kind.as_str() {
        keys::KIND_LEGACY_SKYHOOK => keys::KIND_NODEWRIGHT,
        keys::KIND_DEPLOYMENT_POLICY => keys::KIND_DEPLOYMENT_POLICY,
        _ => return None,
    };
    object["apiVersion"] = Value::String(keys::API_VERSION.to_string());
    object["kind"] = Value::String(to_kind.to_string());
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in ["annotations", "labels"] {
            if let Some(map) = metadata.get_mut(field).and_then(Value::as_object_mut) {
                let legacy_keys: Vec<String> = map
                    .keys()
                    .filter(|k| k.starts_with(keys::LEGACY_PREFIX))
                    .cloned()
                    .collect();
                for key in legacy_keys {
                    let new_key = format!("{}{}", keys::PREFIX, &key[keys::LEGACY_PREFIX.len()..]);
                    if let Some(value) = map.remove(&key) {
                        map.entry(new_key).or_insert(value);
                    }
                }
            }
        }
        if let Some(finalizers) = metadata.get_mut("finalizers").and_then(Value::as_array_mut) {
            for f in finalizers.iter_mut() {
                if f.as_str() == Some(keys::LEGACY_FINALIZER) {
                    *f = Value::String(keys::FINALIZER.to_string());
                }
            }
        }
    }
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("<unnamed>");
    Some(LegacyNotice {
        message: format!(
            "{from_kind}/{name} uses the legacy group {}; read as {}/{to_kind}. Rename apiVersion to {} (and kind Skyhook to NodeWright) to silence this notice.",
            keys::LEGACY_API_VERSION,
            keys::API_VERSION,
            keys::API_VERSION
        ),
        from_kind,
        to_kind: to_kind.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn skyhook_becomes_nodewright_with_a_notice() {
        let mut obj = json!({
            "apiVersion": "skyhook.nvidia.com/v1alpha1",
            "kind": "Skyhook",
            "metadata": {"name": "tuning", "annotations": {"skyhook.nvidia.com/pause": "true"}},
            "spec": {"packages": {}}
        });
        let notice = convert(&mut obj).unwrap();
        assert_eq!(obj["apiVersion"], "nodewright.nvidia.com/v1alpha1");
        assert_eq!(obj["kind"], "NodeWright");
        assert_eq!(
            obj["metadata"]["annotations"]["nodewright.nvidia.com/pause"],
            "true"
        );
        assert!(notice.message.contains("Skyhook/tuning"));
    }

    #[test]
    fn legacy_policy_changes_group_only() {
        let mut obj = json!({"apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "DeploymentPolicy", "metadata": {"name": "p"}});
        assert!(convert(&mut obj).is_some());
        assert_eq!(obj["kind"], "DeploymentPolicy");
    }

    #[test]
    fn current_objects_are_untouched() {
        let mut obj = json!({"apiVersion": "nodewright.nvidia.com/v1alpha1", "kind": "NodeWright"});
        assert!(convert(&mut obj).is_none());
    }
}
