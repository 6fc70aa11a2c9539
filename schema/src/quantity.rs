//! Kubernetes resource quantities (`500m`, `2Gi`, `1e3`), parsed exactly enough to compare.
//!
//! The value is kept as `mantissa × 10^exp10 × 2^exp2` with an integer mantissa, so `1Gi`
//! equals `1073741824` and `1000m` equals `1` without floating-point rounding.

use std::cmp::Ordering;

/// A parsed quantity.
#[derive(Clone, Copy, Debug)]
pub struct Quantity {
    negative: bool,
    mantissa: u128,
    exp10: i32,
    exp2: u32,
}

/// A string that is not a Kubernetes quantity.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "quantity {0:?} is invalid: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)]
pub struct QuantityError(pub String);

impl Quantity {
    /// Parses a quantity string the way apimachinery's `ParseQuantity` accepts it.
    pub fn parse(text: &str) -> Result<Quantity, QuantityError> {
        let err = || QuantityError(text.to_string());
        let s = text.trim();
        if s.is_empty() || s != text {
            return Err(err());
        }
        let (negative, body) = match s.as_bytes()[0] {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let num_end = body
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(body.len());
        let (number, suffix) = body.split_at(num_end);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(err());
        }
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        let digits = format!("{int_part}{frac_part}");
        let digits = digits.trim_start_matches('0');
        if digits.len() > 30 {
            return Err(err());
        }
        let mantissa: u128 = if digits.is_empty() {
            0
        } else {
            digits.parse().map_err(|_| err())?
        };
        let mut exp10 = -(frac_part.len() as i32);
        let mut exp2 = 0u32;
        match suffix {
            "" => {}
            "Ki" => exp2 = 10,
            "Mi" => exp2 = 20,
            "Gi" => exp2 = 30,
            "Ti" => exp2 = 40,
            "Pi" => exp2 = 50,
            "Ei" => exp2 = 60,
            "n" => exp10 -= 9,
            "u" => exp10 -= 6,
            "m" => exp10 -= 3,
            "k" => exp10 += 3,
            "M" => exp10 += 6,
            "G" => exp10 += 9,
            "T" => exp10 += 12,
            "P" => exp10 += 15,
            "E" => exp10 += 18,
            other => {
                let rest = other
                    .strip_prefix('e')
                    .or_else(|| other.strip_prefix('E'))
                    .ok_or_else(err)?;
                let unsigned = rest.strip_prefix(['+', '-']).unwrap_or(rest);
                if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(err());
                }
                let e: i32 = rest.parse().map_err(|_| err())?;
                if e.abs() > 1000 {
                    return Err(err());
                }
                exp10 += e;
            }
        }
        Ok(Quantity {
            negative: negative && mantissa != 0,
            mantissa,
            exp10,
            exp2,
        })
    }

    /// Whether the value is zero.
    pub fn is_zero(&self) -> bool {
        self.mantissa == 0
    }

    /// Sign of the value: -1, 0 or 1.
    pub fn signum(&self) -> i32 {
        if self.mantissa == 0 {
            0
        } else if self.negative {
            -1
        } else {
            1
        }
    }

    /// Magnitude comparison of two non-negative values without rounding where it fits.
    fn cmp_magnitude(&self, other: &Quantity) -> Ordering {
        if self.mantissa == 0 || other.mantissa == 0 {
            return self.mantissa.cmp(&other.mantissa);
        }
        // Scale both to a common power of ten; multiply the 2^n factors in exactly.
        let e = self.exp10.min(other.exp10);
        let scale = |q: &Quantity| -> Option<u128> {
            let mut v = q.mantissa.checked_mul(1u128.checked_shl(q.exp2)?)?;
            for _ in 0..(q.exp10 - e) {
                v = v.checked_mul(10)?;
            }
            Some(v)
        };
        match (scale(self), scale(other)) {
            (Some(a), Some(b)) => a.cmp(&b),
            // Out of exact range (absurdly large quantities): compare approximately.
            _ => self
                .approx()
                .abs()
                .partial_cmp(&other.approx().abs())
                .unwrap_or(Ordering::Equal),
        }
    }

    /// The value as a float (for display and out-of-range comparison).
    pub fn approx(&self) -> f64 {
        let v = self.mantissa as f64 * 10f64.powi(self.exp10) * 2f64.powi(self.exp2 as i32);
        if self.negative { -v } else { v }
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self.signum(), other.signum()) {
            (a, b) if a != b => a.cmp(&b),
            (0, _) => Ordering::Equal,
            (1, _) => self.cmp_magnitude(other),
            _ => other.cmp_magnitude(self),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    #[test]
    fn semantic_equality() {
        assert_eq!(q("1000m"), q("1"));
        assert_eq!(q("1Gi"), q("1073741824"));
        assert_eq!(q("1k"), q("1e3"));
        assert_eq!(q("0.5"), q("500m"));
        assert_eq!(q("1.5Gi"), q("1536Mi"));
        assert_eq!(q("0"), q("0Mi"));
        assert_eq!(q("-0"), q("0"));
    }

    #[test]
    fn ordering() {
        assert!(q("500m") < q("1"));
        assert!(q("1G") < q("1Gi"));
        assert!(q("-1") < q("0"));
        assert!(q("-2") < q("-1"));
        assert!(q("128Mi") > q("100M"));
        assert!(q("1E") < q("1Ei"));
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "", "abc", "1.2.3", "1Xi", "1 Gi", "1e", "1e+", ".", "1mi", "Gi",
        ] {
            assert!(Quantity::parse(bad).is_err(), "{bad}");
        }
    }
}
