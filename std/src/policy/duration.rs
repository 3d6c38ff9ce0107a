//! Human durations for configs: `250ms`, `1s`, `1m`, `1h`, `1d`, and sums such as `1m30s`
//! ([`parse_duration`]), and [`DurationError`]: why a text is not one.

use std::fmt;

use tollgate_core::Nanos;

/// The units [`parse_duration`] accepts, as its messages list them.
const UNITS: &str = "ns, us, ms, s, m, h, d";

/// Why [`parse_duration`] rejected a text. Its `Display` quotes the text and says what is
/// wrong, as a message meant to follow a field path (`rules[0].window: ...`).
///
/// ```
/// use tollgate::policy::{parse_duration, DurationError};
/// let err = parse_duration("1w").unwrap_err();
/// assert_eq!(err, DurationError::UnknownUnit { text: "1w".into(), unit: "w".into() });
/// assert_eq!(err.to_string(), "\"1w\": unknown unit \"w\" (ns, us, ms, s, m, h, d)");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DurationError {
    /// The text is empty (or only whitespace).
    Empty,
    /// No number where one must start, at byte `at` of the (trimmed) text.
    ExpectedNumber {
        /// The trimmed text.
        text: String,
        /// The byte offset in `text`.
        at: usize,
    },
    /// A number does not fit a `u64`.
    NumberTooLarge {
        /// The trimmed text.
        text: String,
    },
    /// A number has no unit after it.
    MissingUnit {
        /// The trimmed text.
        text: String,
    },
    /// A unit other than `ns`, `us` (`µs`), `ms`, `s`, `m`, `h`, `d`.
    UnknownUnit {
        /// The trimmed text.
        text: String,
        /// The unit as written.
        unit: String,
    },
    /// The total exceeds [`Nanos::MAX`] (about 584 years).
    TooLong {
        /// The trimmed text.
        text: String,
    },
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DurationError::Empty => {
                f.write_str("empty duration (write e.g. \"1s\", \"1m\", \"1d\")")
            }
            DurationError::ExpectedNumber { text, at } => {
                write!(f, "\"{text}\": expected a number at byte {at}")
            }
            DurationError::NumberTooLarge { text } => write!(f, "\"{text}\": number too large"),
            DurationError::MissingUnit { text } => {
                write!(f, "\"{text}\": missing unit ({UNITS})")
            }
            DurationError::UnknownUnit { text, unit } => {
                write!(f, "\"{text}\": unknown unit \"{unit}\" ({UNITS})")
            }
            DurationError::TooLong { text } => {
                write!(f, "\"{text}\": too long (at most about 584 years)")
            }
        }
    }
}

impl std::error::Error for DurationError {}

/// Parses a duration such as `1s`, `1m`, `1d`, `250ms`, `10us`, `5ns` or `1h30m` into
/// [`Nanos`]. Units: `ns`, `us`, `ms`, `s`, `m`, `h`, `d`; every number needs a unit.
/// A [`DurationError`] says what is wrong; its message is meant to follow a field path
/// (`rules[0].window: ...`).
///
/// ```
/// use tollgate::policy::parse_duration;
/// use tollgate::Nanos;
/// assert_eq!(parse_duration("1m"), Ok(Nanos::from_secs(60)));
/// assert_eq!(parse_duration("1d"), Ok(Nanos::from_secs(86_400)));
/// assert_eq!(parse_duration("1m30s"), Ok(Nanos::from_secs(90)));
/// assert!(parse_duration("10").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Nanos, DurationError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(DurationError::Empty);
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
            return Err(DurationError::ExpectedNumber {
                text: text.into(),
                at: start,
            });
        }
        let number: u64 = text[start..i]
            .parse()
            .map_err(|_| DurationError::NumberTooLarge { text: text.into() })?;
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
            "" => return Err(DurationError::MissingUnit { text: text.into() }),
            other => {
                return Err(DurationError::UnknownUnit {
                    text: text.into(),
                    unit: other.into(),
                })
            }
        };
        let too_long = || DurationError::TooLong { text: text.into() };
        let part = number.checked_mul(scale).ok_or_else(too_long)?;
        total = total.checked_add(part).ok_or_else(too_long)?;
    }
    Ok(Nanos::new(total))
}

#[cfg(test)]
mod tests {
    use super::{parse_duration, DurationError};
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
        let text = |t: &str| t.to_string();
        assert_eq!(parse_duration(" "), Err(DurationError::Empty));
        assert_eq!(
            parse_duration("1"),
            Err(DurationError::MissingUnit { text: text("1") })
        );
        assert_eq!(
            parse_duration("1w"),
            Err(DurationError::UnknownUnit {
                text: text("1w"),
                unit: text("w")
            })
        );
        assert_eq!(
            parse_duration("1s ms"),
            Err(DurationError::ExpectedNumber {
                text: text("1s ms"),
                at: 2
            })
        );
        assert_eq!(
            parse_duration("99999999999999999999s"),
            Err(DurationError::NumberTooLarge {
                text: text("99999999999999999999s")
            })
        );
        assert_eq!(
            parse_duration("999999d"),
            Err(DurationError::TooLong {
                text: text("999999d")
            })
        );
        // The messages that follow a config field's path.
        assert!(parse_duration("")
            .unwrap_err()
            .to_string()
            .contains("empty"));
        assert_eq!(
            parse_duration("1").unwrap_err().to_string(),
            "\"1\": missing unit (ns, us, ms, s, m, h, d)"
        );
        assert_eq!(
            parse_duration("s").unwrap_err().to_string(),
            "\"s\": expected a number at byte 0"
        );
        assert!(parse_duration("999999d")
            .unwrap_err()
            .to_string()
            .contains("too long"));
    }
}
