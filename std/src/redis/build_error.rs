//! [`BuildError`]: why a Redis store or its configuration was rejected.

use std::fmt;

/// A Redis store (or its configuration) could not be built: every variant is a
/// configuration mistake found at construction, never at check time.
///
/// ```
/// use tollgate::redis::{BuildError, FailurePolicy, RedisConfig};
/// assert!(matches!(RedisConfig::new("a{b"), Err(BuildError::InvalidName(_))));
/// let half = FailurePolicy::Fallback { share: 1.5 };
/// assert_eq!(RedisConfig::new("api")?.with_failure_policy(half).err(), Some(BuildError::InvalidShare));
/// # Ok::<(), BuildError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum BuildError {
    /// A key prefix is empty or contains `{`, `}` or `:` (they would break the
    /// `{prefix}:{rule}:{tier}:{{client}}` layout and its hash tag).
    InvalidName(String),
    /// The fallback share must be a number in `(0, 1]`.
    InvalidShare,
    /// The tokio runtime of the store's I/O thread could not be started.
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
            BuildError::InvalidName(name) => write!(
                f,
                "invalid name {name:?}: must be non-empty, without '{{', '}}' or ':'"
            ),
            BuildError::InvalidShare => f.write_str("fallback share must be in (0, 1]"),
            BuildError::Runtime(e) => write!(f, "cannot start the tokio runtime: {e}"),
            BuildError::Url(e) => write!(f, "invalid Redis URL: {e}"),
            BuildError::InvalidLease(reason) => write!(f, "invalid lease configuration: {reason}"),
        }
    }
}

impl std::error::Error for BuildError {}
