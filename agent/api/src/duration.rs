//! Durations as users write them in specs (`interval`, `timeout`, `retryInterval`): Go's
//! format (`1m30s`, `500ms`, `1.5h`), the one Flux and Argo CD users know.
//!
//! Parsed as Go parses them, in integer nanoseconds with checked arithmetic, up to Go's
//! largest duration (2562047h47m16.854775807s); anything beyond is refused, never wrapped or
//! turned into a panic. Values that no interval or timeout can mean are refused too: negative
//! ones and zero (an interval of zero would reconcile in a tight loop). The CRD schema carries
//! [`PATTERN`], so the API server refuses most malformed values before skewer sees them.

use std::time::Duration;

use thiserror::Error;

/// The shape of a duration in the CRD schema: one or more `<number><unit>` with an optional
/// fraction; no sign, no exponent.
pub const PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$";

/// Go's largest duration, in nanoseconds (`i64::MAX`).
const MAX_NANOS: u64 = i64::MAX as u64;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DurationError {
    #[error("'{0}' is empty: write a duration like 1m30s")]
    Empty(String),
    #[error("'{0}' is negative")]
    Negative(String),
    #[error("'{0}' is zero: it must be more than that")]
    Zero(String),
    #[error("'{0}' is not a duration like 1m30s")]
    Malformed(String),
    #[error("'{input}' has a number without a unit (ns, us, ms, s, m or h)")]
    MissingUnit { input: String },
    #[error("'{input}' has unknown unit '{unit}' (ns, us, ms, s, m or h)")]
    UnknownUnit { input: String, unit: String },
    #[error("'{0}' is too long: durations go up to 2562047h47m16.854775807s")]
    TooLarge(String),
}

/// Parses a positive Go duration.
pub fn parse(input: &str) -> Result<Duration, DurationError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(DurationError::Empty(input.into()));
    }
    if s.starts_with('-') {
        return Err(DurationError::Negative(input.into()));
    }
    let s = s.strip_prefix('+').unwrap_or(s);
    if s == "0" {
        return Err(DurationError::Zero(input.into()));
    }
    let too_large = || DurationError::TooLarge(input.into());
    let mut total: u64 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let (whole, after) = digits(rest);
        let (fraction, after) = match after.strip_prefix('.') {
            Some(f) => {
                let (frac, after) = digits(f);
                (Some(frac), after)
            }
            None => (None, after),
        };
        if whole.is_empty() && fraction.is_none_or(str::is_empty) {
            return Err(DurationError::Malformed(input.into()));
        }
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let unit = match &after[..unit_len] {
            "" => {
                return Err(DurationError::MissingUnit {
                    input: input.into(),
                });
            }
            "ns" => 1u64,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            other => {
                return Err(DurationError::UnknownUnit {
                    input: input.into(),
                    unit: other.into(),
                });
            }
        };
        let mut nanos = leading_int(whole)
            .ok_or_else(too_large)?
            .checked_mul(unit)
            .ok_or_else(too_large)?;
        if let Some(fraction) = fraction {
            nanos = nanos
                .checked_add(fraction_of(fraction, unit))
                .ok_or_else(too_large)?;
        }
        total = total.checked_add(nanos).ok_or_else(too_large)?;
        if total > MAX_NANOS {
            return Err(too_large());
        }
        rest = &after[unit_len..];
    }
    if total == 0 {
        return Err(DurationError::Zero(input.into()));
    }
    Ok(Duration::from_nanos(total))
}

/// The shortest interval (and retry interval) skewer accepts. Shorter ones would keep the API
/// server and the source's host busy for nothing: an interval of 0 reconciles hundreds of
/// times a second.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// Parses interval field `field`, refusing values under [`MIN_INTERVAL`].
pub fn interval(field: &str, value: &str) -> Result<Duration, String> {
    let d = self::field(field, value)?;
    if d < MIN_INTERVAL {
        return Err(format!(
            "spec.{field}: '{value}' is shorter than skewer's minimum interval of 1s"
        ));
    }
    Ok(d)
}

/// Parses the value of spec field `field`; the message names the field, like
/// `spec.interval: '1fortnight' has unknown unit 'fortnight' (ns, us, ms, s, m or h)`.
pub fn field(field: &str, value: &str) -> Result<Duration, String> {
    parse(value).map_err(|e| format!("spec.{field}: {e}"))
}

/// The leading ASCII digits of `s`, and the rest.
fn digits(s: &str) -> (&str, &str) {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    s.split_at(end)
}

/// The integer value of decimal digits, `None` past `i64::MAX` (as Go refuses it).
fn leading_int(digits: &str) -> Option<u64> {
    digits.bytes().try_fold(0u64, |n, d| {
        let n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
        (n <= MAX_NANOS).then_some(n)
    })
}

/// Nanoseconds of the fraction `.digits` of `unit`. Digits past the 18th cannot change the
/// result by a nanosecond and are dropped, as Go drops them.
fn fraction_of(digits: &str, unit: u64) -> u64 {
    let kept = &digits[..digits.len().min(18)];
    let (mut value, mut scale) = (0u128, 1u128);
    for d in kept.bytes() {
        value = value * 10 + u128::from(d - b'0');
        scale *= 10;
    }
    // value < 10^18 and unit < 4·10^12: the product fits in u128, the quotient in u64.
    u64::try_from(value * u128::from(unit) / scale).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_forms() {
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("1.5m"), Ok(Duration::from_secs(90)));
        assert_eq!(parse(".5s"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("2h45m0.5s"), Ok(Duration::from_millis(9_900_500)));
        assert_eq!(parse("1µs1us1ns"), Ok(Duration::from_nanos(2001)));
        assert_eq!(parse("+10s"), Ok(Duration::from_secs(10)));
    }

    #[test]
    fn the_largest_go_duration_and_one_nanosecond_more() {
        assert_eq!(
            parse("2562047h47m16.854775807s"),
            Ok(Duration::from_nanos(i64::MAX as u64))
        );
        assert_eq!(
            parse("2562047h47m16.854775808s"),
            Err(DurationError::TooLarge("2562047h47m16.854775808s".into()))
        );
    }

    #[test]
    fn huge_numbers_are_refused_not_panics() {
        for input in [
            "99999999999999999999h",
            "9223372036854775807h",
            "2562048h",
            "18446744073709551616ns",
            "1000000000000000000000000000000000000000s",
            "9223372036854775807ns1ns",
        ] {
            assert_eq!(
                parse(input),
                Err(DurationError::TooLarge(input.into())),
                "{input}"
            );
        }
        // A very long fraction is not an overflow.
        assert_eq!(
            parse("1.0000000000000000000000000001s"),
            Ok(Duration::from_secs(1))
        );
    }

    #[test]
    fn what_no_interval_can_mean_is_refused_with_a_reason() {
        let err = |s: &str| parse(s).unwrap_err().to_string();
        assert_eq!(err("-1s"), "'-1s' is negative");
        assert_eq!(err("0"), "'0' is zero: it must be more than that");
        assert_eq!(err("0s"), "'0s' is zero: it must be more than that");
        assert_eq!(
            err("1fortnight"),
            "'1fortnight' has unknown unit 'fortnight' (ns, us, ms, s, m or h)"
        );
        assert_eq!(
            err("1e308h"),
            "'1e308h' has unknown unit 'e' (ns, us, ms, s, m or h)"
        );
        assert_eq!(
            err("10"),
            "'10' has a number without a unit (ns, us, ms, s, m or h)"
        );
        assert!(matches!(parse("m"), Err(DurationError::Malformed(_))));
        assert_eq!(
            parse("1.s"),
            Ok(Duration::from_secs(1)),
            "Go accepts a bare point"
        );
        assert!(matches!(parse(""), Err(DurationError::Empty(_))));
        assert!(matches!(parse("."), Err(DurationError::Malformed(_))));
    }

    #[test]
    fn intervals_have_a_floor() {
        assert_eq!(interval("interval", "1s"), Ok(Duration::from_secs(1)));
        assert_eq!(
            interval("retryInterval", "999ms").unwrap_err(),
            "spec.retryInterval: '999ms' is shorter than skewer's minimum interval of 1s"
        );
        assert_eq!(
            interval("interval", "0s").unwrap_err(),
            "spec.interval: '0s' is zero: it must be more than that"
        );
        assert_eq!(
            field("timeout", "500ms"),
            Ok(Duration::from_millis(500)),
            "timeouts may be short"
        );
    }

    #[test]
    fn messages_name_the_field() {
        assert_eq!(
            field("retryInterval", "1fortnight").unwrap_err(),
            "spec.retryInterval: '1fortnight' has unknown unit 'fortnight' (ns, us, ms, s, m or h)"
        );
    }
}
