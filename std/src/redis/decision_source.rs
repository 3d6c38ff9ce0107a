//! [`DecisionSource`]: who made a decision (Redis, the local deny cache, or the failure
//! policy).

use super::FailureCause;

/// Where a [`RedisDecision`](super::RedisDecision) came from.
///
/// ```
/// use tollgate::redis::{DecisionSource, FailureCause};
/// assert!(!DecisionSource::Redis.is_degraded());
/// assert!(!DecisionSource::DenyCache.is_degraded());
/// assert!(DecisionSource::Degraded(FailureCause::Timeout).is_degraded());
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum DecisionSource {
    /// The script decided on the shared state: one round trip.
    Redis,
    /// Answered locally: Redis denied this key and cost earlier and the retry time has not
    /// passed, so the outcome cannot have changed. No round trip.
    DenyCache,
    /// Redis could not decide; the configured [`FailurePolicy`](super::FailurePolicy) did.
    Degraded(FailureCause),
}

impl DecisionSource {
    /// Whether the decision was made without the shared state.
    pub fn is_degraded(&self) -> bool {
        matches!(self, DecisionSource::Degraded(_))
    }
}
