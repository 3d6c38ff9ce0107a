//! [`FailurePolicy`]: what a check answers when Redis cannot (timeout, connection lost,
//! server error).

use std::time::Duration;

/// What to answer while Redis is unreachable or too slow. Every such decision is counted
/// in [`RedisStats::degraded`](super::RedisStats::degraded).
///
/// ```
/// use std::time::Duration;
/// use tollgate::redis::FailurePolicy;
/// let open = FailurePolicy::FailOpen;
/// let closed = FailurePolicy::FailClosed { retry_after: Duration::from_secs(1) };
/// // Each process enforces half of every limit on its own while Redis is away.
/// let local = FailurePolicy::Fallback { share: 0.5 };
/// assert_ne!(open, closed);
/// assert_ne!(closed, local);
/// ```
#[derive(Copy, Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Admit everything (availability over enforcement), answering as a fresh key would
    /// (`remaining = limit − cost`).
    FailOpen,
    /// Deny everything, telling the caller to retry after `retry_after` (never zero).
    FailClosed {
        /// The `retry_after` of the degraded denies.
        retry_after: Duration,
    },
    /// Decide in this process, per key, with `share` (in `(0, 1]`) of every tier's limit, e.g. `1 / number of servers`. Its state starts
    /// fresh when Redis fails and is not merged back when Redis returns.
    Fallback {
        /// The fraction of each limit (limit, burst, capacity, refill, queue) enforced
        /// locally; scaled values are rounded down but kept at least 1 (queue at least 0).
        share: f64,
    },
}

impl Default for FailurePolicy {
    /// [`FailurePolicy::FailClosed`] with a one-second `retry_after`: a store that cannot
    /// see its state does not admit.
    fn default() -> Self {
        FailurePolicy::FailClosed {
            retry_after: Duration::from_secs(1),
        }
    }
}
