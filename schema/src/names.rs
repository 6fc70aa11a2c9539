//! Deterministic object names (spec/operator.md §4.9).

use sha2::{Digest, Sha256};

/// `safeName(maxLen, parts…)`: join with `-`, replace `.` with `-`, suffix the first 8 hex
/// characters of the SHA-256 of the full dotless string, cutting the string to `maxLen − 9`
/// bytes first when needed; the result is lowercased and at most `maxLen` characters.
pub fn safe_name(max_len: usize, parts: &[&str]) -> String {
    // Names are derived thousands of times per pass (ConfigMaps, Jobs), so this builds each
    // string once instead of through `join`, `replace`, `format!` and `to_lowercase`.
    let mut joined = String::with_capacity(parts.iter().map(|p| p.len() + 1).sum());
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            joined.push('-');
        }
        joined.extend(part.chars().map(|c| if c == '.' { '-' } else { c }));
    }
    let digest = Sha256::digest(joined.as_bytes());
    let keep = max_len.saturating_sub(9);
    let mut cut = joined.len().min(keep);
    // Node names are ASCII in practice; never split a multi-byte character.
    while !joined.is_char_boundary(cut) {
        cut -= 1;
    }
    joined.truncate(cut);
    joined.push('-');
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in digest.iter().take(4) {
        joined.push(char::from(HEX[usize::from(b >> 4)]));
        joined.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
    if joined.is_ascii() {
        joined.make_ascii_lowercase();
        joined
    } else {
        joined.to_lowercase()
    }
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

    #[test]
    fn upper_case_and_non_ascii_names_are_lowercased_after_hashing_as_given() {
        // The hash is of the joined name as given; only the result is lowercased.
        let upper = safe_name(63, &["NW", "Node.A"]);
        assert!(upper.starts_with("nw-node-a-"), "{upper}");
        assert_ne!(upper, safe_name(63, &["nw", "node.a"]));
        let accented = safe_name(63, &["NW", "NÖDE"]);
        assert!(accented.starts_with("nw-nöde-"), "{accented}");
        // A cut never splits a character: 53 ASCII bytes, then a two-byte one across the cut.
        let cut = safe_name(63, &[&format!("{}é", "a".repeat(53))]);
        assert!(cut.starts_with(&"a".repeat(53)), "{cut}");
        assert_eq!(cut.chars().count(), 53 + 9);
    }
}
