//! [`BuildError`]: why a Redis limiter, rule or configuration was rejected.

use std::fmt;

use crate::ConfigError;

/// A Redis limiter could not be built: every variant is a configuration mistake found at
/// construction, never at check time.
///
/// ```
/// use tollgate::redis::{BuildError, RedisRule};
/// use tollgate::{AlgorithmConfig, ConfigError, Nanos};
/// let zero = AlgorithmConfig::FixedWindow { limit: 0, window: Nanos::from_secs(1) };
/// assert_eq!(RedisRule::new("api", zero).err(), Some(BuildError::Config(ConfigError::ZeroLimit)));
/// let ok = AlgorithmConfig::FixedWindow { limit: 1, window: Nanos::from_secs(1) };
/// assert!(matches!(RedisRule::new("a{b", ok), Err(BuildError::InvalidName(_))));
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum BuildError {
    /// The algorithm's numbers were rejected by the core.
    Config(ConfigError),
    /// A rule name or key prefix is empty or contains `{`, `}` or `:` (they would break the
    /// `{prefix}:{rule}:{{key}}` layout and its hash tag).
    InvalidName(String),
    /// Two rules of one limiter share a name (they would share a Redis key).
    DuplicateRule(String),
    /// A limiter needs at least one rule.
    NoRules,
    /// A sliding window log limit above [`MAX_LOG_LIMIT`](super::MAX_LOG_LIMIT) (one sorted
    /// set member per permit).
    LogTooLarge {
        /// The largest accepted limit.
        max: u64,
    },
    /// The fallback share must be a number in `(0, 1]`.
    InvalidShare,
    /// The tokio runtime of a blocking limiter could not be started.
    Runtime(String),
    /// The Redis URL(s) could not be parsed.
    Url(String),
    /// A [`LeaseConfig`](super::LeaseConfig) setting is out of range (which one, and its
    /// range).
    InvalidLease(&'static str),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::Config(e) => write!(f, "invalid limit: {e}"),
            BuildError::InvalidName(name) => write!(
                f,
                "invalid name {name:?}: must be non-empty, without '{{', '}}' or ':'"
            ),
            BuildError::DuplicateRule(name) => write!(f, "two rules are named {name:?}"),
            BuildError::NoRules => f.write_str("a limiter needs at least one rule"),
            BuildError::LogTooLarge { max } => {
                write!(f, "sliding window log limit above {max}")
            }
            BuildError::InvalidShare => f.write_str("fallback share must be in (0, 1]"),
            BuildError::Runtime(e) => write!(f, "cannot start the tokio runtime: {e}"),
            BuildError::Url(e) => write!(f, "invalid Redis URL: {e}"),
            BuildError::InvalidLease(reason) => write!(f, "invalid lease configuration: {reason}"),
        }
    }
}

impl std::error::Error for BuildError {}

impl From<ConfigError> for BuildError {
    fn from(e: ConfigError) -> BuildError {
        BuildError::Config(e)
    }
}
