//! [`FailureCause`]: why a decision was made without Redis.

use std::fmt;

use redis::RedisError;

/// Why Redis did not decide.
///
/// ```
/// use tollgate::redis::FailureCause;
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
}

impl FailureCause {
    /// The cause of a failed call: a timeout, a lost or refused connection, or anything
    /// else the server answered.
    pub(crate) fn of(error: &RedisError) -> FailureCause {
        if error.is_timeout() {
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
        })
    }
}
