//! Human durations for configs: `250ms`, `1s`, `1m`, `1h`, `1d`, and sums such as `1m30s`.

use tollgate_core::Nanos;

/// Parses a duration such as `1s`, `1m`, `1d`, `250ms`, `10us`, `5ns` or `1h30m` into
/// [`Nanos`]. Units: `ns`, `us`, `ms`, `s`, `m`, `h`, `d`; every number needs a unit.
/// Errors are messages meant to follow a field path (`rules[0].window: ...`).
///
/// ```
/// use tollgate::policy::parse_duration;
/// use tollgate::Nanos;
/// assert_eq!(parse_duration("1m"), Ok(Nanos::from_secs(60)));
/// assert_eq!(parse_duration("1d"), Ok(Nanos::from_secs(86_400)));
/// assert_eq!(parse_duration("1m30s"), Ok(Nanos::from_secs(90)));
/// assert!(parse_duration("10").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Nanos, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration (write e.g. \"1s\", \"1m\", \"1d\")".into());
    }
    let bytes = text.as_bytes();
    let mut total: u64 = 0;
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if start == i {
            return Err(format!("\"{text}\": expected a number at byte {start}"));
        }
        let number: u64 = text[start..i]
            .parse()
            .map_err(|_| format!("\"{text}\": number too large"))?;
        let unit_start = i;
        while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
            i += 1;
        }
        let unit = &text[unit_start..i];
        let scale: u64 = match unit {
            "ns" => 1,
            "us" | "µs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "d" => 86_400_000_000_000,
            "" => return Err(format!("\"{text}\": missing unit (ns, us, ms, s, m, h, d)")),
            other => {
                return Err(format!(
                    "\"{text}\": unknown unit \"{other}\" (ns, us, ms, s, m, h, d)"
                ))
            }
        };
        let part = number
            .checked_mul(scale)
            .ok_or_else(|| format!("\"{text}\": too long (at most about 584 years)"))?;
        total = total
            .checked_add(part)
            .ok_or_else(|| format!("\"{text}\": too long (at most about 584 years)"))?;
    }
    Ok(Nanos::new(total))
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use tollgate_core::Nanos;

    #[test]
    fn units() {
        assert_eq!(parse_duration("5ns"), Ok(Nanos::new(5)));
        assert_eq!(parse_duration("10us"), Ok(Nanos::from_micros(10)));
        assert_eq!(parse_duration("250ms"), Ok(Nanos::from_millis(250)));
        assert_eq!(parse_duration("1s"), Ok(Nanos::from_secs(1)));
        assert_eq!(parse_duration("1h"), Ok(Nanos::from_secs(3600)));
        assert_eq!(parse_duration(" 1h30m "), Ok(Nanos::from_secs(5400)));
        assert_eq!(parse_duration("0s"), Ok(Nanos::ZERO));
    }

    #[test]
    fn errors() {
        assert!(parse_duration("").unwrap_err().contains("empty"));
        assert!(parse_duration("1").unwrap_err().contains("missing unit"));
        assert!(parse_duration("1w").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("s")
            .unwrap_err()
            .contains("expected a number"));
        assert!(parse_duration("99999999999999999999s").is_err());
        assert!(parse_duration("999999d").unwrap_err().contains("too long"));
    }
}
