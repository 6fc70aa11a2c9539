//! Deterministic object names (spec/operator.md §4.9).

use sha2::{Digest, Sha256};

/// `safeName(maxLen, parts…)`: join with `-`, replace `.` with `-`, suffix the first 8 hex
/// characters of the SHA-256 of the full dotless string, cutting the string to `maxLen − 9`
/// bytes first when needed; the result is lowercased and at most `maxLen` characters.
pub fn safe_name(max_len: usize, parts: &[&str]) -> String {
    let joined = parts.join("-").replace('.', "-");
    let digest = Sha256::digest(joined.as_bytes());
    let hash: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    let keep = max_len.saturating_sub(9);
    let mut prefix = joined.as_str();
    if prefix.len() > keep {
        let mut cut = keep;
        // Node names are ASCII in practice; never split a multi-byte character.
        while !prefix.is_char_boundary(cut) {
            cut -= 1;
        }
        prefix = &prefix[..cut];
    }
    format!("{prefix}-{hash}").to_lowercase()
}

/// Name of the stage Job of a package (§8.1).
pub fn stage_job_name(nw: &str, pkg: &str, version: &str, stage: &str, node: &str) -> String {
    safe_name(63, &[nw, pkg, version, stage, node])
}

/// Name of the interrupt Job of a node (§8.1): no package or version.
pub fn interrupt_job_name(nw: &str, stage: &str, interrupt_type: &str, node: &str) -> String {
    safe_name(63, &[nw, stage, interrupt_type, node])
}

/// Name of the node-metadata ConfigMap (§9.1).
pub fn node_metadata_configmap(nw: &str, node: &str) -> String {
    safe_name(253, &[nw, node, "metadata"])
}

/// Name of the node-metadata volume in stage pods (§8.4).
pub fn node_metadata_volume(node: &str) -> String {
    safe_name(63, &["metadata", node])
}

/// Name of the node-metadata volume in interrupt pods (§4.9).
pub fn interrupt_node_metadata_volume(nw: &str, node: &str) -> String {
    safe_name(63, &[nw, node, "metadata"])
}

/// Name of the package ConfigMap (§9.2): lowercase, no hashing, dots kept.
pub fn package_configmap(nw: &str, pkg: &str, version: &str) -> String {
    format!("{nw}-{pkg}-{version}").to_lowercase()
}

/// Value of the `node` label on Jobs: the node name, or its safeName when over 63 chars (§4.7).
pub fn node_label_value(node: &str) -> String {
    if node.len() <= 63 {
        node.to_string()
    } else {
        safe_name(63, &[node])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worked_examples_from_the_spec() {
        assert_eq!(
            safe_name(63, &["gpu-init", "tuning", "1.2.3", "config", "node-a"]),
            "gpu-init-tuning-1-2-3-config-node-a-f8704da8"
        );
        assert_eq!(
            safe_name(
                63,
                &[
                    "my-very-long-nodewright-name",
                    "package-name-xyz",
                    "1.2.3",
                    "post-interrupt",
                    "ip-10-0-1-234.us-west-2.compute.internal"
                ]
            ),
            "my-very-long-nodewright-name-package-name-xyz-1-2-3-po-d0fdad99"
        );
    }

    #[test]
    fn names_never_exceed_the_limit() {
        let long = "x".repeat(300);
        assert_eq!(safe_name(63, &[&long]).len(), 63);
        assert_eq!(safe_name(253, &[&long, "n", "metadata"]).len(), 253);
    }
}
