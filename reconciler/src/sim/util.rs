//! Small Kubernetes helpers the simulated controllers share: label selectors, toleration
//! matching, a deterministic random source and timestamp arithmetic.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};

/// `t + d`, saturating at the far future.
pub fn add(t: Timestamp, d: Duration) -> Timestamp {
    let span = jiff::SignedDuration::try_from(d).unwrap_or(jiff::SignedDuration::MAX);
    t.checked_add(span).unwrap_or(Timestamp::MAX)
}

/// `b - a` as a non-negative duration.
pub fn since(a: Timestamp, b: Timestamp) -> Duration {
    Duration::try_from(b.duration_since(a)).unwrap_or(Duration::ZERO)
}

/// A `metav1.Time`.
pub fn time(t: Timestamp) -> Time {
    Time(t)
}

/// Whether `labels` satisfy a label selector (matchLabels and matchExpressions). An empty
/// selector matches everything, as in Kubernetes.
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    if let Some(match_labels) = &selector.match_labels {
        for (k, v) in match_labels {
            if labels.get(k) != Some(v) {
                return false;
            }
        }
    }
    for expr in selector.match_expressions.iter().flatten() {
        let value = labels.get(&expr.key);
        let values = expr.values.as_deref().unwrap_or_default();
        let ok = match expr.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

/// Kubernetes toleration matching (`v1.Toleration.ToleratesTaint`).
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = toleration.effect.as_deref()
        && !effect.is_empty()
        && effect != taint.effect
    {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        _ => {
            // An empty key with Equal is invalid in the API; treat it as not matching.
            !key.is_empty()
                && toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
    }
}

/// Whether any toleration in the list tolerates the taint.
pub fn tolerated(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| tolerates(t, taint))
}

/// A deterministic pseudo-random source (SplitMix64): the simulator never uses real randomness,
/// so every run of a scenario is identical.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// Seeded generator.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Five characters like the suffix Kubernetes appends to generated names.
    pub fn suffix(&mut self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let mut v = self.next_u64();
        (0..5)
            .map(|_| {
                let c = ALPHABET[(v % ALPHABET.len() as u64) as usize] as char;
                v /= ALPHABET.len() as u64;
                c
            })
            .collect()
    }
    /// A UUID-shaped identifier.
    pub fn uid(&mut self) -> String {
        let a = self.next_u64();
        let b = self.next_u64();
        format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            (b >> 48) & 0xfff,
            b & 0xffff_ffff_ffff
        )
    }
}

/// Seed derived from a text (a scenario name), FNV-1a.
pub fn seed_from(text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect: effect.into(),
            time_added: None,
        }
    }

    #[test]
    fn toleration_matching_follows_kubernetes() {
        let exists_any = Toleration {
            key: Some("node.kubernetes.io/unschedulable".into()),
            operator: Some("Exists".into()),
            ..Toleration::default()
        };
        assert!(tolerates(
            &exists_any,
            &taint("node.kubernetes.io/unschedulable", None, "NoSchedule")
        ));
        let equal = Toleration {
            key: Some("dedicated".into()),
            value: Some("gpu".into()),
            effect: Some("NoSchedule".into()),
            ..Toleration::default()
        };
        assert!(tolerates(
            &equal,
            &taint("dedicated", Some("gpu"), "NoSchedule")
        ));
        assert!(!tolerates(
            &equal,
            &taint("dedicated", Some("cpu"), "NoSchedule")
        ));
        assert!(!tolerates(
            &equal,
            &taint("dedicated", Some("gpu"), "NoExecute")
        ));
        let wildcard = Toleration {
            operator: Some("Exists".into()),
            ..Toleration::default()
        };
        assert!(tolerates(&wildcard, &taint("anything", None, "NoExecute")));
    }

    #[test]
    fn selectors_match_labels_and_expressions() {
        let labels: BTreeMap<String, String> = [("app".to_string(), "web".to_string())].into();
        let mut selector = LabelSelector {
            match_labels: Some([("app".to_string(), "web".to_string())].into()),
            ..LabelSelector::default()
        };
        assert!(selector_matches(&selector, &labels));
        selector.match_expressions = Some(vec![LabelSelectorRequirement {
            key: "tier".into(),
            operator: "Exists".into(),
            values: None,
        }]);
        assert!(!selector_matches(&selector, &labels));
        assert!(selector_matches(&LabelSelector::default(), &labels));
    }

    #[test]
    fn rng_is_deterministic() {
        let mut a = Rng::new(seed_from("x"));
        let mut b = Rng::new(seed_from("x"));
        assert_eq!(a.suffix(), b.suffix());
        assert_eq!(a.uid(), b.uid());
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
    }
}
