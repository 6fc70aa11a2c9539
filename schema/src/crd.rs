//! The CustomResourceDefinitions generated from the types, as committed under `schema/crds/`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::{DeploymentPolicy, NodeWright};

/// Every CRD this product serves, with the file name it is committed under.
pub fn all() -> Vec<(&'static str, CustomResourceDefinition)> {
    vec![
        ("nodewright.nvidia.com_nodewrights.yaml", NodeWright::crd()),
        (
            "nodewright.nvidia.com_deploymentpolicies.yaml",
            DeploymentPolicy::crd(),
        ),
    ]
}

/// A CRD rendered as YAML, the form committed and printed by `nodewright crds`.
pub fn to_yaml(crd: &CustomResourceDefinition) -> String {
    // Serializing a CRD built from our own types cannot fail: all keys are strings.
    serde_yaml::to_string(crd).unwrap_or_default()
}

/// All CRDs as one multi-document YAML stream.
pub fn all_yaml() -> String {
    all()
        .iter()
        .map(|(_, crd)| format!("---\n{}", to_yaml(crd)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_crds_match_the_types() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
        for (file, crd) in all() {
            let expected = to_yaml(&crd);
            let path = dir.join(file);
            if std::env::var_os("NODEWRIGHT_BLESS_CRDS").is_some() {
                std::fs::write(&path, &expected).unwrap();
            }
            let committed = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                committed == expected,
                "{} drifted from the types; regenerate with NODEWRIGHT_BLESS_CRDS=1 cargo test -p nodewright-schema crd",
                path.display()
            );
        }
    }

    #[test]
    fn nodewright_is_cluster_scoped_with_status_and_printer_columns() {
        let crd = NodeWright::crd();
        assert_eq!(crd.spec.scope, "Cluster");
        let version = &crd.spec.versions[0];
        assert!(version.subresources.as_ref().unwrap().status.is_some());
        let columns: Vec<_> = version
            .additional_printer_columns
            .as_ref()
            .unwrap()
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(
            columns,
            [
                "Status",
                "Priority",
                "Age",
                "Nodes In-Progress",
                "Complete Nodes",
                "Packages",
                "Policy"
            ]
        );
        assert_eq!(DeploymentPolicy::crd().spec.scope, "Cluster");
    }
}
