//! [`TierOutcome`]: what one tier answered within a policy decision.

use tollgate_core::{Decision, Nanos};

use super::RuleId;

/// One tier's answer, with what headers need to describe it.
///
/// ```
/// use tollgate::policy::{RuleId, TierOutcome};
/// use tollgate::{Decision, Nanos};
/// let outcome = TierOutcome {
///     rule: RuleId(0),
///     rule_name: "api",
///     name: "burst",
///     quota: 10,
///     window: Nanos::from_secs(1),
///     shared: false,
///     decision: Decision::allow(10, 9, Nanos::from_millis(100)),
/// };
/// assert!(outcome.decision.allowed);
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TierOutcome {
    /// The rule the tier belongs to.
    pub rule: RuleId,
    /// That rule's name.
    pub rule_name: &'static str,
    /// The tier's name (the policy name in `RateLimit` headers).
    pub name: &'static str,
    /// The configured limit per window.
    pub quota: u64,
    /// The configured window.
    pub window: Nanos,
    /// Whether every client shares this tier's state (a `per = "global"` rule): its
    /// denials are nobody's own doing, so [`AdaptivePenalty`](super::AdaptivePenalty)
    /// does not count them against the client.
    pub shared: bool,
    /// The tier's decision. In a denied policy decision, tiers that admitted had their
    /// permits given back; their decision shows the state as of the check.
    pub decision: Decision,
}

impl TierOutcome {
    pub(crate) const EMPTY: TierOutcome = TierOutcome {
        rule: RuleId(0),
        rule_name: "",
        name: "",
        quota: 0,
        window: Nanos::ZERO,
        shared: false,
        decision: Decision::allow(0, 0, Nanos::ZERO),
    };
}
