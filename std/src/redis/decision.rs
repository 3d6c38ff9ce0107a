//! [`RedisDecision`]: a combined decision over every tier of a check, and where it came
//! from.

use super::DecisionSource;
use crate::{Decision, Nanos};

/// The answer to one check of a Redis limiter.
///
/// `decision` combines the tiers, all or nothing: when every tier admits, it is the tier
/// with the fewest `remaining` (its `delay` raised to the longest delay of any tier); when
/// any tier denies, nothing was consumed anywhere and it is the denying tier with the
/// longest `retry_after` (no tier's outcome can improve sooner, so that retry time is
/// exact). `tiers` holds each rule's own decision, in rule order, when Redis decided.
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
        let pick = if tiers.iter().all(|d| d.allowed) {
            tiers
                .iter()
                .enumerate()
                .min_by_key(|(_, d)| d.remaining)
                .map(|(i, _)| i)
        } else {
            // max_by_key returns the last maximum; prefer the first rule on ties.
            tiers
                .iter()
                .enumerate()
                .filter(|(_, d)| !d.allowed)
                .fold(None::<(usize, Nanos)>, |best, (i, d)| match best {
                    Some((_, r)) if r >= d.retry_after => best,
                    _ => Some((i, d.retry_after)),
                })
                .map(|(i, _)| i)
        };
        let decision = match pick {
            Some(i) => {
                let mut decision = tiers[i];
                if decision.allowed {
                    decision.delay = tiers.iter().map(|d| d.delay).max().unwrap_or(Nanos::ZERO);
                }
                decision
            }
            None => Decision::allow(0, 0, Nanos::ZERO),
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
