//! Small helpers the simulated controllers share: a deterministic random source and timestamp
//! arithmetic. Label selectors and tolerations match through the schema crate
//! (`nodewright_schema::{selector, toleration}`), as in the engine.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

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

    #[test]
    fn rng_is_deterministic() {
        let mut a = Rng::new(seed_from("x"));
        let mut b = Rng::new(seed_from("x"));
        assert_eq!(a.suffix(), b.suffix());
        assert_eq!(a.uid(), b.uid());
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
    }
}
