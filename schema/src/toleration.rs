//! Kubernetes toleration matching (`Toleration.ToleratesTaint`), used by the taint check of
//! node selection (§5.8).

use k8s_openapi::api::core::v1::{Taint, Toleration};

/// Whether `toleration` tolerates `taint` under Kubernetes rules: an empty effect matches
/// every effect, an empty key (with `Exists`) every key; `Equal` (or no operator) compares
/// values, `Exists` ignores them; any other operator tolerates nothing.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or_default() {
        "" | "Equal" => {
            toleration.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default()
        }
        "Exists" => true,
        _ => false,
    }
}

/// Whether at least one of `tolerations` tolerates `taint`.
pub fn tolerated(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| tolerates(t, taint))
}

/// Whether every taint is tolerated by at least one of `tolerations` (§5.8: all effects count).
pub fn tolerates_all<'a>(
    tolerations: &[Toleration],
    taints: impl IntoIterator<Item = &'a Taint>,
) -> bool {
    taints
        .into_iter()
        .all(|taint| tolerated(tolerations, taint))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect: effect.into(),
            time_added: None,
        }
    }

    fn tol(
        key: Option<&str>,
        op: Option<&str>,
        value: Option<&str>,
        effect: Option<&str>,
    ) -> Toleration {
        Toleration {
            key: key.map(Into::into),
            operator: op.map(Into::into),
            value: value.map(Into::into),
            effect: effect.map(Into::into),
            toleration_seconds: None,
        }
    }

    #[test]
    fn kubernetes_matching_rules() {
        let rr = taint(
            "nodewright.nvidia.com",
            Some("runtime-required"),
            "NoSchedule",
        );
        assert!(tolerates(
            &tol(
                Some("nodewright.nvidia.com"),
                Some("Equal"),
                Some("runtime-required"),
                Some("NoSchedule")
            ),
            &rr
        ));
        assert!(tolerates(
            &tol(
                Some("nodewright.nvidia.com"),
                None,
                Some("runtime-required"),
                None
            ),
            &rr
        ));
        assert!(!tolerates(
            &tol(
                Some("nodewright.nvidia.com"),
                Some("Equal"),
                Some("other"),
                None
            ),
            &rr
        ));
        assert!(tolerates(
            &tol(Some("nodewright.nvidia.com"), Some("Exists"), None, None),
            &rr
        ));
        assert!(!tolerates(
            &tol(
                Some("nodewright.nvidia.com"),
                Some("Exists"),
                None,
                Some("NoExecute")
            ),
            &rr
        ));
        assert!(tolerates(&tol(None, Some("Exists"), None, None), &rr));
        assert!(!tolerates(
            &tol(Some("other"), Some("Exists"), None, None),
            &rr
        ));
        assert!(!tolerates(
            &tol(Some("nodewright.nvidia.com"), Some("Gt"), None, None),
            &rr
        ));
        let unsched = taint("node.kubernetes.io/unschedulable", None, "NoSchedule");
        let set = [tol(
            Some("node.kubernetes.io/unschedulable"),
            Some("Exists"),
            None,
            Some("NoSchedule"),
        )];
        assert!(tolerates_all(&set, [&unsched]));
        assert!(!tolerates_all(&set, [&unsched, &rr]));
        assert!(tolerates_all(&set, []));
    }
}
