//! Go's duration syntax (`time.ParseDuration`): what Porch's flags (`--pod-ttl 30m`), the
//! wrapper-server's flags (`-connect-timeout 1s`) and FunctionConfig fields (`timeToLive`) take,
//! so that krm-runner accepts exactly what Porch accepts. One parser for all of them.

use std::time::Duration;

/// A parsed Go duration: a sign and a magnitude (Go's `time.Duration` is signed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GoDuration {
    pub negative: bool,
    pub magnitude: Duration,
}

/// Text that is not a Go duration, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {text:?}: {reason}")]
pub struct InvalidGoDuration {
    pub text: String,
    pub reason: &'static str,
}

/// Go's largest duration, 2^63 - 1 nanoseconds (about 292 years); a negative one may be one
/// nanosecond longer.
const MAX_NANOS: u64 = i64::MAX as u64;

/// The value of a run of digits, refused past 2^63 as Go's `leadingInt` does.
fn leading_int(digits: &str) -> Option<u64> {
    digits.bytes().try_fold(0u64, |x, c| {
        if x > (1 << 63) / 10 {
            return None;
        }
        Some(x * 10 + u64::from(c - b'0')).filter(|&x| x <= 1 << 63)
    })
}

/// A fraction's digits as an integer and the power of ten that divides it, keeping only the
/// digits that fit as Go's `leadingFraction` does (the others cannot change the result).
fn leading_fraction(digits: &str) -> (u64, f64) {
    let (mut x, mut scale) = (0u64, 1f64);
    for c in digits.bytes() {
        if x > (1 << 63) / 10 {
            break;
        }
        let next = x * 10 + u64::from(c - b'0');
        if next > 1 << 63 {
            break;
        }
        x = next;
        scale *= 10.0;
    }
    (x, scale)
}

/// Parses `text` as Go's `time.ParseDuration` does: an optional sign, then one or more decimal
/// numbers (with an optional fraction), each followed by a unit (`ns`, `us`, `µs`, `μs`, `ms`,
/// `s`, `m`, `h`), as in `300ms`, `-1.5h` or `2h45m`; a bare `0` is zero.
pub fn parse(text: &str) -> Result<GoDuration, InvalidGoDuration> {
    let invalid = |reason| InvalidGoDuration {
        text: text.to_owned(),
        reason,
    };
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok(GoDuration {
            negative,
            magnitude: Duration::ZERO,
        });
    }
    if rest.is_empty() {
        return Err(invalid("no number"));
    }
    let mut nanos: u64 = 0;
    while !rest.is_empty() {
        let whole_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let whole = &rest[..whole_len];
        rest = &rest[whole_len..];
        let fraction = match rest.strip_prefix('.') {
            Some(after) => {
                let len = after.bytes().take_while(u8::is_ascii_digit).count();
                rest = &after[len..];
                &after[..len]
            }
            None => "",
        };
        if whole.is_empty() && fraction.is_empty() {
            return Err(invalid("expected a number"));
        }
        let unit_len = rest
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit: u64 = match &rest[..unit_len] {
            "" => return Err(invalid("missing unit")),
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(invalid("unknown unit")),
        };
        rest = &rest[unit_len..];
        let whole = leading_int(whole).ok_or_else(|| invalid("overflow"))?;
        if whole > (1 << 63) / unit {
            return Err(invalid("overflow"));
        }
        // As Go computes it, in floating point, so that the last nanosecond agrees.
        let (digits, scale) = leading_fraction(fraction);
        let fraction_nanos = (digits as f64 * (unit as f64 / scale)) as u64;
        nanos = nanos
            .checked_add(whole * unit + fraction_nanos)
            .filter(|&n| n <= 1 << 63)
            .ok_or_else(|| invalid("overflow"))?;
    }
    if !negative && nanos > MAX_NANOS {
        return Err(invalid("overflow"));
    }
    Ok(GoDuration {
        negative,
        magnitude: Duration::new(nanos / 1_000_000_000, (nanos % 1_000_000_000) as u32),
    })
}

/// Parses a Go duration that must not be negative.
pub fn parse_non_negative(text: &str) -> Result<Duration, InvalidGoDuration> {
    match parse(text)? {
        GoDuration {
            negative: true,
            magnitude,
        } if !magnitude.is_zero() => Err(InvalidGoDuration {
            text: text.to_owned(),
            reason: "negative",
        }),
        parsed => Ok(parsed.magnitude),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nanos(text: &str) -> Result<i128, &'static str> {
        parse(text)
            .map(|d| {
                let n = d.magnitude.as_nanos() as i128;
                if d.negative { -n } else { n }
            })
            .map_err(|e| e.reason)
    }

    /// Cases and answers of Go's own `time.ParseDuration` tests.
    #[test]
    fn parses_as_go_does() {
        for (text, expected) in [
            ("0", 0),
            ("5s", 5_000_000_000),
            ("30s", 30_000_000_000),
            ("1478s", 1_478_000_000_000),
            ("-5s", -5_000_000_000),
            ("+5s", 5_000_000_000),
            ("-0", 0),
            ("+0", 0),
            ("5.0s", 5_000_000_000),
            ("5.6s", 5_600_000_000),
            ("5.s", 5_000_000_000),
            (".5s", 500_000_000),
            ("1.0s", 1_000_000_000),
            ("1.00s", 1_000_000_000),
            ("1.004s", 1_004_000_000),
            ("1.0040s", 1_004_000_000),
            ("100.00100s", 100_001_000_000),
            ("10ns", 10),
            ("11us", 11_000),
            ("12µs", 12_000),
            ("12μs", 12_000),
            ("13ms", 13_000_000),
            ("14s", 14_000_000_000),
            ("15m", 900_000_000_000),
            ("16h", 57_600_000_000_000),
            ("3h30m", 12_600_000_000_000),
            ("10.5s4m", 250_500_000_000),
            ("-2m3.4s", -123_400_000_000),
            ("1h2m3s4ms5us6ns", 3_723_004_005_006),
            ("39h9m14.425s", 140_954_425_000_000),
            ("52763797000ns", 52_763_797_000),
            ("0.3333333333333333333h", 1_200_000_000_000),
            ("9007199254740993ns", 9_007_199_254_740_993),
            ("9223372036854775807ns", 9_223_372_036_854_775_807),
            ("-9223372036854775808ns", -9_223_372_036_854_775_808),
            ("1.5h30m", 7_200_000_000_000),
            ("0.100000000000000000000h", 360_000_000_000),
        ] {
            assert_eq!(nanos(text), Ok(expected), "{text}");
        }
        for (text, reason) in [
            ("", "no number"),
            ("3", "missing unit"),
            ("-", "no number"),
            ("s", "expected a number"),
            (".", "expected a number"),
            ("-.", "expected a number"),
            (".s", "expected a number"),
            ("+.s", "expected a number"),
            ("1d", "unknown unit"),
            ("2 hours", "unknown unit"),
            ("PT1H", "expected a number"),
            ("9223372036854775808ns", "overflow"),
            ("9223372036854775.808us", "overflow"),
            ("-9223372036854775809ns", "overflow"),
            ("3000000h", "overflow"),
        ] {
            assert_eq!(nanos(text), Err(reason), "{text}");
        }
    }

    #[test]
    fn non_negative_refuses_a_sign_that_matters() {
        assert_eq!(parse_non_negative("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_non_negative("-0"), Ok(Duration::ZERO));
        let error = parse_non_negative("-1s").unwrap_err();
        assert_eq!(error.to_string(), "invalid duration \"-1s\": negative");
    }
}
