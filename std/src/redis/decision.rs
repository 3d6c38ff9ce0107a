//! [`RedisDecision`]: a combined decision over every tier of a check, and where it came
//! from.

use super::DecisionSource;
use crate::{Decision, Nanos};

/// The answer to one check of a Redis limiter.
///
/// `decision` combines the tiers, all or nothing, by the core's one combine rule
/// ([`Decision::combine`], the same as the in-process policy's): admitted iff every tier
/// admits; `remaining` the fewest; when any tier denies, nothing was consumed anywhere and
/// `retry_after` is the longest any denying tier asks (no tier's outcome can improve
/// sooner, so that retry time is exact). `tier` is the tightest tier's index. `tiers`
/// holds each rule's own decision, in rule order, when Redis decided.
///
/// ```
/// use tollgate::redis::{DecisionSource, RedisDecision};
/// use tollgate::{Decision, Nanos};
/// let d = RedisDecision::combine(
///     vec![
///         Decision::allow(10, 7, Nanos::from_secs(1)),
///         Decision::deny(100, 0, Nanos::from_secs(60), Nanos::from_secs(30)),
///     ],
///     DecisionSource::Redis,
/// );
/// assert!(!d.decision.allowed);
/// assert_eq!(d.tier, Some(1));
/// assert_eq!(d.decision.retry_after, Nanos::from_secs(30));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisDecision {
    /// The combined decision.
    pub decision: Decision,
    /// Who decided.
    pub source: DecisionSource,
    /// Index of the rule whose decision `decision` is, when known.
    pub tier: Option<usize>,
    /// Every rule's decision, in rule order (empty unless Redis decided).
    pub tiers: Vec<Decision>,
}

impl RedisDecision {
    /// Combines per-tier decisions as described above. An empty list yields a fail-open
    /// style admit with limit 0.
    pub fn combine(tiers: Vec<Decision>, source: DecisionSource) -> RedisDecision {
        // One combine rule for every multi-tier executor: the core's.
        let (pick, decision) = match Decision::combine(tiers.iter().copied()) {
            Some((i, decision)) => (Some(i), decision),
            None => (None, Decision::allow(0, 0, Nanos::ZERO)),
        };
        RedisDecision {
            decision,
            source,
            tier: pick,
            tiers,
        }
    }

    /// Whether the request is admitted.
    pub fn allowed(&self) -> bool {
        self.decision.allowed
    }

    /// Whether the failure policy decided (Redis was unreachable or too slow).
    pub fn is_degraded(&self) -> bool {
        self.source.is_degraded()
    }
}
