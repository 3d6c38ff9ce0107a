//! What goes wrong with a Redis store: [`BuildError`] (a store or its configuration was
//! rejected) and [`FailureCause`] (why a decision was made without Redis).

use std::fmt;

use redis::RedisError;

/// A Redis store (or its configuration) could not be built: every variant is a
/// configuration mistake found at construction, never at check time.
///
/// ```
/// use tollgate_redis::{BuildError, FailurePolicy, RedisConfig};
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
    /// [`RedisStore::on_runtime`](super::RedisStore::on_runtime) was given a current-thread
    /// runtime, which drives its I/O only while its own thread runs it: a check blocking
    /// another thread on it could wait forever.
    CurrentThreadRuntime,
    /// The Redis URL(s) could not be parsed.
    Url(String),
    /// A [`LeaseConfig`](super::LeaseConfig) setting is out of range (which one, and its
    /// range).
    InvalidLease(&'static str),
    /// A [`RedisConfig`](super::RedisConfig) setting is out of its range (see
    /// [`RedisConfig::validate`](super::RedisConfig::validate)).
    OutOfRange {
        /// The setting, as its `with_*` method names it (`"ttl_slack"`, `"fallback_keys"`).
        setting: &'static str,
        /// The values it accepts.
        range: &'static str,
    },
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
            BuildError::CurrentThreadRuntime => f.write_str(
                "the store's runtime must be multi-threaded (a current-thread runtime cannot drive I/O for another thread)",
            ),
            BuildError::Url(e) => write!(f, "invalid Redis URL: {e}"),
            BuildError::InvalidLease(reason) => write!(f, "invalid lease configuration: {reason}"),
            BuildError::OutOfRange { setting, range } => {
                write!(f, "Redis store setting {setting} out of range: must be {range}")
            }
        }
    }
}

impl std::error::Error for BuildError {}

/// Why Redis did not decide.
///
/// ```
/// use tollgate_redis::FailureCause;
/// assert_eq!(FailureCause::Timeout.to_string(), "timed out");
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureCause {
    /// No answer within the configured timeout (server paused, overloaded, partitioned).
    Timeout,
    /// The connection failed or was refused (server down, restarting).
    Connection,
    /// The server answered with an error (e.g. cluster down, out of memory, script error).
    Server,
    /// A recent failure is still within the retry backoff: Redis was not tried.
    Backoff,
    /// Redis refused the call because its deadline had passed when the script ran (the
    /// server ran it too late for the store to wait for its answer; see "Deadlines" on
    /// [`RedisStore`](super::RedisStore)): nothing was changed.
    Expired,
    /// The in-process fallback ([`FailurePolicy::Fallback`](super::FailurePolicy::Fallback))
    /// could not decide a tier (its scaled rule or its table could not be built): the tier
    /// was denied.
    FallbackUnavailable,
}

/// The error code of the store script's refusal of a call whose deadline has passed
/// (`TGEXPIRED <server µs> <deadline µs>`, see `scripts/store.lua`).
pub(crate) const EXPIRED_CODE: &str = "TGEXPIRED";

impl FailureCause {
    /// The cause of a failed call: a timeout, a lost or refused connection, or anything
    /// else the server answered.
    pub(crate) fn of(error: &RedisError) -> FailureCause {
        if error.code() == Some(EXPIRED_CODE) {
            FailureCause::Expired
        } else if error.is_timeout() {
            FailureCause::Timeout
        } else if error.is_io_error()
            || error.is_connection_dropped()
            || error.is_connection_refusal()
        {
            FailureCause::Connection
        } else {
            FailureCause::Server
        }
    }
}

impl fmt::Display for FailureCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FailureCause::Timeout => "timed out",
            FailureCause::Connection => "connection failed",
            FailureCause::Server => "server error",
            FailureCause::Backoff => "backing off after a recent failure",
            FailureCause::Expired => "refused by the server: deadline passed",
            FailureCause::FallbackUnavailable => "the in-process fallback could not decide",
        })
    }
}
