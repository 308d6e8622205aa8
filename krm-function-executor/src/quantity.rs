//! Kubernetes resource quantities (`500m`, `1.5Gi`, `2e3`) as apimachinery's
//! `resource.Quantity` reads, compares, multiplies and writes them, which is what ConfigHub's
//! container functions do with them: exact decimal arithmetic, values finer than a nano
//! rounded up to it, and the canonical form `String()` writes (`1000m` is `1`, `2048Mi` is
//! `2Gi`, a binary quantity under 1Ki is written in decimal).

use std::cmp::Ordering;
use std::fmt;
use std::sync::LazyLock;

use regex::Regex;

/// The most significant digits a quantity may carry: enough for any real request or limit,
/// and few enough that every value, times the largest binary suffix, fits an `i128`.
const MAX_DIGITS: usize = 18;

/// How the quantity was written, which decides how it is written again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// `Ki`, `Mi` ... `Ei`.
    BinarySi,
    /// `n`, `u`, `m`, none, `k`, `M` ... `E`.
    DecimalSi,
    /// `e3`, `E-2`.
    DecimalExponent,
}

/// A quantity: `mantissa` x 10^`exponent`, never finer than 10^-9.
#[derive(Debug, Clone, Copy)]
pub struct Quantity {
    mantissa: i128,
    exponent: i32,
    format: Format,
}

/// Why a text is not a quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error(
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )]
    Format,
    #[error("more than {MAX_DIGITS} significant digits")]
    TooPrecise,
    #[error("too large")]
    TooLarge,
}

static QUANTITY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^([+-]?)([0-9]*)(?:\.([0-9]*))?(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]{1,3})?$")
        .expect("the quantity pattern compiles")
});

const DECIMAL_SUFFIXES: [(&str, i32); 10] = [
    ("n", -9),
    ("u", -6),
    ("m", -3),
    ("", 0),
    ("k", 3),
    ("M", 6),
    ("G", 9),
    ("T", 12),
    ("P", 15),
    ("E", 18),
];

const BINARY_SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];

impl Quantity {
    /// Reads a quantity as `resource.ParseQuantity` does.
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        let captures = QUANTITY.captures(text).ok_or(QuantityError::Format)?;
        let whole = captures.get(2).map_or("", |m| m.as_str());
        let fraction = captures.get(3).map_or("", |m| m.as_str());
        if whole.is_empty() && fraction.is_empty() {
            return Err(QuantityError::Format);
        }
        let digits = format!("{whole}{fraction}");
        let significant = digits.trim_start_matches('0');
        if significant.len() > MAX_DIGITS {
            return Err(QuantityError::TooPrecise);
        }
        let mut mantissa: i128 = significant.parse().unwrap_or(0);
        if captures.get(1).is_some_and(|m| m.as_str() == "-") {
            mantissa = -mantissa;
        }
        let mut exponent = -(fraction.len() as i32);
        let suffix = captures.get(4).map_or("", |m| m.as_str());
        let format = if let Some(power) = BINARY_SUFFIXES.iter().position(|s| *s == suffix) {
            if power == 0 {
                Format::DecimalSi
            } else {
                mantissa = mantissa
                    .checked_mul(1024_i128.pow(power as u32))
                    .ok_or(QuantityError::TooLarge)?;
                Format::BinarySi
            }
        } else if let Some((_, power)) = DECIMAL_SUFFIXES.iter().find(|(s, _)| *s == suffix) {
            exponent += power;
            Format::DecimalSi
        } else {
            exponent += suffix[1..]
                .parse::<i32>()
                .map_err(|_| QuantityError::Format)?;
            Format::DecimalExponent
        };
        Self::new(mantissa, exponent, format)
    }

    /// Rounds up (away from zero) to a nano, as ParseQuantity does, and keeps trailing zeros
    /// in the exponent.
    fn new(mut mantissa: i128, mut exponent: i32, format: Format) -> Result<Self, QuantityError> {
        if exponent < -9 {
            let divisor = 10_i128
                .checked_pow((-9 - exponent) as u32)
                .ok_or(QuantityError::TooLarge)?;
            let (quotient, remainder) = (mantissa / divisor, mantissa % divisor);
            mantissa = quotient + remainder.signum();
            exponent = -9;
        }
        while mantissa != 0 && mantissa % 10 == 0 {
            mantissa /= 10;
            exponent += 1;
        }
        if mantissa == 0 {
            exponent = 0;
        }
        if exponent > 36 {
            return Err(QuantityError::TooLarge);
        }
        Ok(Self {
            mantissa,
            exponent,
            format,
        })
    }

    /// This quantity `factor` times (`Quantity.Mul`), in the same format.
    pub fn times(&self, factor: i64) -> Result<Self, QuantityError> {
        let mantissa = self
            .mantissa
            .checked_mul(i128::from(factor))
            .ok_or(QuantityError::TooLarge)?;
        Self::new(mantissa, self.exponent, self.format)
    }

    /// The value as an integer, when it is one and fits.
    fn integer(&self) -> Option<i128> {
        if self.exponent < 0 {
            return None;
        }
        10_i128
            .checked_pow(self.exponent as u32)
            .and_then(|scale| self.mantissa.checked_mul(scale))
    }

    /// The decimal digits and their exponent, the exponent a multiple of 3
    /// (`AsCanonicalBytes`).
    fn decimal(&self) -> (i128, i32) {
        let (mut amount, mut exponent) = (self.mantissa, self.exponent);
        match exponent % 3 {
            1 | -2 => {
                amount *= 10;
                exponent -= 1;
            }
            2 | -1 => {
                amount *= 100;
                exponent -= 2;
            }
            _ => {}
        }
        (amount, exponent)
    }
}

impl fmt::Display for Quantity {
    /// The canonical form `Quantity.String()` writes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.mantissa == 0 {
            return f.write_str("0");
        }
        if self.format == Format::BinarySi
            && let Some(mut value) = self.integer().filter(|v| v.abs() >= 1024)
        {
            let mut power = 0;
            while value % 1024 == 0 && power < BINARY_SUFFIXES.len() - 1 {
                value /= 1024;
                power += 1;
            }
            return write!(f, "{value}{}", BINARY_SUFFIXES[power]);
        }
        let (amount, exponent) = self.decimal();
        let suffix = DECIMAL_SUFFIXES
            .iter()
            .find(|(_, power)| *power == exponent && self.format != Format::DecimalExponent)
            .map(|(suffix, _)| (*suffix).to_owned());
        match suffix {
            Some(suffix) => write!(f, "{amount}{suffix}"),
            None if exponent == 0 => write!(f, "{amount}"),
            None => write!(f, "{amount}e{exponent}"),
        }
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
    /// Exact comparison (`Quantity.Cmp`): both mantissas carry at most 37 digits, so each is
    /// brought to the smaller exponent unless their magnitudes already decide.
    fn cmp(&self, other: &Self) -> Ordering {
        let sign = self.mantissa.signum().cmp(&other.mantissa.signum());
        if sign != Ordering::Equal || self.mantissa == 0 {
            return sign;
        }
        let magnitude = |q: &Self| q.mantissa.unsigned_abs().ilog10() as i32 + q.exponent;
        let by_magnitude = magnitude(self).cmp(&magnitude(other));
        let ordered = if by_magnitude != Ordering::Equal {
            by_magnitude
        } else {
            let low = self.exponent.min(other.exponent);
            let scaled =
                |q: &Self| q.mantissa.unsigned_abs() * 10_u128.pow((q.exponent - low) as u32);
            scaled(self).cmp(&scaled(other))
        };
        if self.mantissa < 0 {
            ordered.reverse()
        } else {
            ordered
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(text: &str) -> Quantity {
        Quantity::parse(text).unwrap()
    }

    #[test]
    fn written_in_canonical_form() {
        for (text, factor, written) in [
            ("500m", 2, "1"),
            ("500m", 3, "1500m"),
            ("256Mi", 2, "512Mi"),
            ("512Mi", 2, "1Gi"),
            ("1.5Gi", 2, "3Gi"),
            ("1.5Gi", 1, "1536Mi"),
            ("100Mi", 3, "300Mi"),
            ("0.5Ki", 1, "512"),
            ("0.3Ki", 1, "307200m"),
            ("0.5", 2, "1"),
            ("2000", 1, "2k"),
            ("1e3", 1, "1e3"),
            ("1E3", 2, "2e3"),
            ("100", 1, "100"),
            ("1.1", 1, "1100m"),
            ("0.0000000001", 1, "1n"),
            ("0", 5, "0"),
            ("-500m", 2, "-1"),
            ("128Mi", 1, "128Mi"),
            ("1000k", 1, "1M"),
        ] {
            assert_eq!(
                q(text).times(factor).unwrap().to_string(),
                written,
                "{text} x {factor}"
            );
        }
    }

    #[test]
    fn compared_exactly() {
        assert!(q("500m") < q("1"));
        assert!(q("1Gi") > q("1G"));
        assert_eq!(q("1000m"), q("1"));
        assert_eq!(q("1Ki"), q("1024"));
        assert!(q("-1") < q("0"));
        assert!(q("-2") < q("-1"));
        assert!(q("1E") > q("999P"));
        assert!(q("999999999999999999n") < q("1G"));
    }

    #[test]
    fn refused_with_the_reason() {
        for bad in ["", ".", "lots", "1Q", "1e", "1.2.3", "--1", "1 Gi"] {
            assert_eq!(Quantity::parse(bad), Err(QuantityError::Format), "{bad:?}");
        }
        assert_eq!(
            Quantity::parse("1234567890123456789"),
            Err(QuantityError::TooPrecise)
        );
        assert_eq!(Quantity::parse("1e999"), Err(QuantityError::TooLarge));
    }
}
