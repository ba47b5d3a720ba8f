//! Go-style durations (`1m30s`, `500ms`, `1h`), the format Flux and Argo CD users write for
//! `interval`, `timeout` and `retryInterval`.

use std::time::Duration;

/// Parses a Go duration string. Units: `ns`, `us`/`µs`, `ms`, `s`, `m`, `h`; fractions allowed.
pub fn parse(input: &str) -> Result<Duration, String> {
    let s = input.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err("empty duration".into());
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("duration '{input}' has a number without a unit"))?;
        if num_len == 0 {
            return Err(format!("duration '{input}' is not like 1m30s"));
        }
        let value: f64 = rest[..num_len]
            .parse()
            .map_err(|_| format!("duration '{input}' has a bad number"))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            other => return Err(format!("duration '{input}' has unknown unit '{other}'")),
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    Ok(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_forms() {
        assert_eq!(parse("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse("1.5m").unwrap(), Duration::from_secs(90));
        assert_eq!(parse("0").unwrap(), Duration::ZERO);
    }

    #[test]
    fn rejects_bad_input() {
        assert!(parse("").is_err());
        assert!(parse("10").is_err());
        assert!(parse("10d").unwrap_err().contains("unknown unit 'd'"));
        assert!(parse("m").is_err());
    }
}
