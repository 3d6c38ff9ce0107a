//! The policy layer's errors: [`PolicyConfigError`] (a config rejected, naming the rule and
//! field), [`DurationError`] (a text that is not a duration), [`PenaltyConfigError`] (which
//! of the adaptive penalty's numbers is wrong) and [`HeaderNameError`] (a name that cannot
//! be rendered into a rate-limit header).

use std::fmt;

use tollgate_core::ConfigError;

/// A rejected policy config. `path` names the offending rule and field in the config's own
/// terms (`rules[3].limit`, `rules[0].tiers[1].window`); `message` says what is wrong.
/// Displayed as `path: message`. Where the core refused a tier's numbers, `config` is its
/// typed error (also the error's [`source`](std::error::Error::source)), with the exact
/// maximum where there is one.
///
/// ```
/// use tollgate::policy::PolicyConfig;
/// use tollgate::{ConfigError, Nanos};
/// // (`limit = 0` alone is a ban; with a window it is a limit, which must be > 0.)
/// let err = PolicyConfig::from_toml("[[rules]]\nname = \"d\"\nlimit = 0\nwindow = \"1m\"\n")
///     .unwrap_err();
/// assert_eq!(err.to_string(), "rules[0].limit: must be > 0");
/// // One permit per 200 000 days could never be admitted late in the clock's range.
/// let err = PolicyConfig::from_toml("[[rules]]\nname = \"d\"\nlimit = 1\nwindow = \"200000d\"\n")
///     .unwrap_err();
/// assert_eq!(err.path, "rules[0].window");
/// assert_eq!(err.config, Some(ConfigError::PeriodTooLong { max: Nanos::MAX_HORIZON }));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PolicyConfigError {
    /// Where: `rules[3].limit`, or `toml` for a syntax or type error.
    pub path: String,
    /// What is wrong.
    pub message: String,
    /// The core's typed error, when it refused the numbers of the tier at `path`.
    pub config: Option<ConfigError>,
}

impl PolicyConfigError {
    /// An error at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> PolicyConfigError {
        PolicyConfigError {
            path: path.into(),
            message: message.into(),
            config: None,
        }
    }

    /// The core's error `config` for the field at `path`, explained by `message`.
    pub fn from_config(
        path: impl Into<String>,
        message: impl Into<String>,
        config: ConfigError,
    ) -> PolicyConfigError {
        PolicyConfigError {
            config: Some(config),
            ..PolicyConfigError::new(path, message)
        }
    }
}

impl fmt::Display for PolicyConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

impl std::error::Error for PolicyConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.config
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// The units [`parse_duration`](super::parse_duration) accepts, as its messages list them.
const UNITS: &str = "ns, us, ms, s, m, h, d, w, or their names: sec, min, hours, days, …";

/// Why [`parse_duration`](super::parse_duration) rejected a text. Its `Display` quotes the text and says what is
/// wrong, as a message meant to follow a field path (`rules[0].window: ...`).
///
/// ```
/// use tollgate::policy::{parse_duration, DurationError};
/// let err = parse_duration("1y").unwrap_err();
/// assert_eq!(err, DurationError::UnknownUnit { text: "1y".into(), unit: "y".into() });
/// assert_eq!(
///     err.to_string(),
///     "\"1y\": unknown unit \"y\" (ns, us, ms, s, m, h, d, w, or their names: sec, min, hours, days, …)"
/// );
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
    /// A unit other than `ns`, `us` (`µs`), `ms`, `s`, `m`, `h`, `d`, `w` and their
    /// names (see [`parse_duration`](super::parse_duration)); months and years are not
    /// units (their length varies).
    UnknownUnit {
        /// The trimmed text.
        text: String,
        /// The unit as written.
        unit: String,
    },
    /// The total exceeds [`Nanos::MAX`](tollgate_core::Nanos::MAX) (about 584 years).
    TooLong {
        /// The trimmed text.
        text: String,
    },
    /// A fraction finer than a nanosecond (`0.5ns`, `1.0000000001s`).
    TooPrecise {
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
            DurationError::TooPrecise { text } => {
                write!(f, "\"{text}\": finer than a nanosecond")
            }
        }
    }
}

impl std::error::Error for DurationError {}

/// Why a [`PenaltyConfig`](super::PenaltyConfig) or a [`RewardConfig`](super::RewardConfig)
/// was rejected; its `Display` names the field.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PenaltyConfigError {
    /// `denials` is zero: every client would be penalized at once.
    ZeroDenials,
    /// `period` is zero.
    ZeroPeriod,
    /// `divisor` is below 2: a penalty that reduces nothing.
    DivisorTooSmall,
    /// `cooldown` is zero.
    ZeroCooldown,
    /// `cooldown` is longer than [`Nanos::MAX_HORIZON`](tollgate_core::Nanos::MAX_HORIZON)
    /// (2^63 ns, about 292 years): a penalty's end would run past `u64` time late in the
    /// clock's supported range.
    CooldownTooLong {
        /// The longest cooldown accepted.
        max: tollgate_core::Nanos,
    },
    /// `denials` per `period` does not fit the denial counter's window layout.
    DenialsTooMany {
        /// The most denials this period can count.
        max: u64,
    },
    /// More clients than a keyed table can hold
    /// ([`AdaptivePenalty::with_capacity`](super::AdaptivePenalty::with_capacity)).
    CapacityTooLarge {
        /// The most clients accepted.
        max: usize,
    },
    /// The reward's `window` is zero.
    ZeroRewardWindow,
    /// The reward's `quiet_windows` is zero: every client would be rewarded at once.
    ZeroQuietWindows,
    /// The reward's `factor` is below 2: a reward that raises nothing.
    RewardFactorTooSmall,
    /// The reward's `max_factor` is below its `factor`.
    MaxFactorBelowFactor,
    /// The reward's standing (`window` times every step's `quiet_windows`) runs past
    /// [`Nanos::MAX_HORIZON`](tollgate_core::Nanos::MAX_HORIZON).
    RewardTooLong {
        /// The longest standing accepted.
        max: tollgate_core::Nanos,
    },
    /// The rule the penalty keeps its state in did not compile for these numbers (the
    /// message says which field of it).
    State(String),
}

impl fmt::Display for PenaltyConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PenaltyConfigError::ZeroDenials => f.write_str("denials: must be > 0"),
            PenaltyConfigError::ZeroPeriod => f.write_str("period: must be > 0"),
            PenaltyConfigError::DivisorTooSmall => f.write_str("divisor: must be >= 2"),
            PenaltyConfigError::ZeroCooldown => f.write_str("cooldown: must be > 0"),
            PenaltyConfigError::CooldownTooLong { max } => {
                write!(f, "cooldown: at most {} ns", max.as_u64())
            }
            PenaltyConfigError::DenialsTooMany { max } => {
                write!(f, "denials: at most {max} for this period")
            }
            PenaltyConfigError::CapacityTooLarge { max } => {
                write!(f, "capacity: at most {max} clients")
            }
            PenaltyConfigError::ZeroRewardWindow => f.write_str("reward.window: must be > 0"),
            PenaltyConfigError::ZeroQuietWindows => {
                f.write_str("reward.quiet_windows: must be > 0")
            }
            PenaltyConfigError::RewardFactorTooSmall => f.write_str("reward.factor: must be >= 2"),
            PenaltyConfigError::MaxFactorBelowFactor => {
                f.write_str("reward.max_factor: must be >= reward.factor")
            }
            PenaltyConfigError::RewardTooLong { max } => write!(
                f,
                "reward.window: times quiet_windows for every step, at most {} ns",
                max.as_u64()
            ),
            PenaltyConfigError::State(message) => write!(f, "penalty state rule: {message}"),
        }
    }
}

impl std::error::Error for PenaltyConfigError {}

/// A policy name rejected by [`RateLimitHeaders::from_decision`]: empty, or holding a
/// character outside printable ASCII (`' '..='~'`), such as CR, LF, NUL, a tab or any
/// non-ASCII character. Such a character cannot appear in a structured-field string, and
/// CR/LF in a header value would let the name inject headers of its own.
///
/// (Quotes and backslashes are allowed: they are escaped inside the sf-string.)
///
/// [`RateLimitHeaders::from_decision`]: super::RateLimitHeaders::from_decision
///
/// ```
/// use tollgate::policy::RateLimitHeaders;
/// use tollgate::{Decision, Nanos};
/// let d = Decision::allow(10, 9, Nanos::ZERO);
/// let err = RateLimitHeaders::from_decision("a\r\nSet-Cookie: x", 10, Nanos::from_secs(1), &d)
///     .unwrap_err();
/// assert_eq!(err.name(), "a\r\nSet-Cookie: x");
/// assert_eq!(err.to_string(), "policy name \"a\\r\\nSet-Cookie: x\": '\\r' is not allowed in a header (printable ASCII only)");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderNameError {
    name: String,
}

impl HeaderNameError {
    /// Checks `name`: non-empty printable ASCII.
    pub(crate) fn check(name: &str) -> Result<(), HeaderNameError> {
        if name.is_empty() || !name.chars().all(is_printable) {
            return Err(HeaderNameError { name: name.into() });
        }
        Ok(())
    }

    /// The rejected name, as given.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Whether `c` may appear in a structured-field string (escaped if `"` or `\`).
pub(crate) fn is_printable(c: char) -> bool {
    (' '..='~').contains(&c)
}

impl fmt::Display for HeaderNameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `{:?}` escapes the offending characters, so the message itself stays one line.
        match self.name.chars().find(|&c| !is_printable(c)) {
            Some(bad) => write!(
                f,
                "policy name {:?}: {bad:?} is not allowed in a header (printable ASCII only)",
                self.name
            ),
            None => write!(f, "policy name must not be empty"),
        }
    }
}

impl std::error::Error for HeaderNameError {}
