//! [`PolicyDecision`]: the answer to a policy check: the combined decision and every
//! tier's part in it.

use tollgate_core::{Decision, Nanos};

use super::{Plan, TierOutcome};

/// The decision of a request no rule matched.
const NO_RULE: Decision = Decision::allow(u64::MAX, u64::MAX, Nanos::ZERO);

/// A tier's decision before the store writes it.
const NO_DECISION: Decision = Decision::allow(0, 0, Nanos::ZERO);

/// The most tiers one request can be checked against (two rules of up to four tiers).
pub const MAX_TIERS: usize = 8;

/// The answer to [`Policy::allow`](super::Policy::allow): allowed only if every matching
/// tier admitted, plus each tier's own answer (for headers and metrics). Fixed size, no
/// allocation: 568 bytes (each tier's outcome is its decision, the quota it advertises
/// and a pointer to its [`TierLabel`](super::TierLabel)).
///
/// The combined [`decision`](Self::decision) follows the core's one combine rule,
/// [`Decision::combine`]: admitted iff every tier admitted; `remaining` the fewest of any
/// tier; for a deny, `retry_after` the longest any denying tier asks (when the request can
/// pass every denying tier as far as is known now); `limit` and `reset_after` those of the
/// *tightest* tier (the longest-waiting denier, or the admitting tier with the fewest
/// `remaining`, ties to the later `reset_after`, then the first); `delay` the longest any
/// tier asked for. With no matching rule the request is admitted with
/// `limit = remaining = u64::MAX`.
///
/// ```
/// use tollgate::policy::Policy;
/// use tollgate::Nanos;
/// let policy = Policy::from_toml(r#"
///     [[rules]]
///     name = "default"
///     limit = 2
///     window = "1m"
/// "#, tollgate::policy::FnClock(|| Nanos::ZERO))?;
/// let d = policy.allow("acct_123", "/search", 1)?;
/// assert!(d.allowed());
/// assert_eq!(d.remaining(), 1);
/// assert_eq!(d.tightest().unwrap().name(), "default");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Copy, Clone, PartialEq, Eq)]
pub struct PolicyDecision {
    /// The combined (tightest) decision.
    pub decision: Decision,
    tiers: [TierOutcome; MAX_TIERS],
    len: u8,
    tightest: u8,
}

impl PolicyDecision {
    /// A decision combining `tiers` (at most [`MAX_TIERS`]; extra ones are ignored).
    pub fn combine(outcomes: &[TierOutcome]) -> PolicyDecision {
        let len = outcomes.len().min(MAX_TIERS);
        let mut decision = PolicyDecision {
            decision: NO_RULE,
            tiers: [TierOutcome::EMPTY; MAX_TIERS],
            len: len as u8,
            tightest: u8::MAX,
        };
        decision.tiers[..len].copy_from_slice(&outcomes[..len]);
        decision.settle(1);
        decision
    }

    /// A decision with no tier yet (see [`label`](Self::label)). Not a `const`: built
    /// field by field, its unused slots (all zero bits) are cleared, not copied.
    #[inline(always)]
    pub(crate) fn empty() -> PolicyDecision {
        PolicyDecision {
            decision: NO_RULE,
            tiers: [TierOutcome::EMPTY; MAX_TIERS],
            len: 0,
            tightest: u8::MAX,
        }
    }

    /// Makes this (empty) decision one about to be made over `plan`'s tiers: each outcome
    /// labelled, its decision not yet written (the store writes it through
    /// [`outcomes_mut`](Self::outcomes_mut), then [`settle`](Self::settle) combines them).
    #[inline]
    pub(crate) fn label(&mut self, plan: &Plan<'_>) {
        self.len = plan.len().min(MAX_TIERS) as u8;
        for (outcome, p) in self.tiers.iter_mut().zip(plan.iter()) {
            *outcome = TierOutcome::labelled(p.tier.label(), NO_DECISION);
        }
    }

    /// The outcomes a store fills in (as many as the plan has tiers).
    #[inline]
    pub(crate) fn outcomes_mut(&mut self) -> &mut [TierOutcome] {
        &mut self.tiers[..usize::from(self.len)]
    }

    /// Combines the outcomes (the core's one combine rule), then scales limit, remaining
    /// and quota down by `divisor` (a penalized client sees its reduced limit).
    #[inline]
    pub(crate) fn settle(&mut self, divisor: u32) {
        let outcomes = &self.tiers[..usize::from(self.len)];
        if let Some((best, decision)) = Decision::combine(outcomes.iter().map(|o| &o.decision)) {
            self.decision = decision;
            self.tightest = best as u8;
        }
        self.scale_down(divisor);
    }

    /// Whether the request is admitted (by every tier).
    pub fn allowed(&self) -> bool {
        self.decision.allowed
    }

    /// The tightest tier's remaining permits.
    pub fn remaining(&self) -> u64 {
        self.decision.remaining
    }

    /// The tightest tier's limit.
    pub fn limit(&self) -> u64 {
        self.decision.limit
    }

    /// The tightest tier's time to a full reset.
    pub fn reset_after(&self) -> Nanos {
        self.decision.reset_after
    }

    /// Zero when admitted; otherwise when to retry (never zero for a deny).
    pub fn retry_after(&self) -> Nanos {
        self.decision.retry_after
    }

    /// Leaky bucket tiers: how long to hold the admitted request before forwarding it.
    pub fn delay(&self) -> Nanos {
        self.decision.delay
    }

    /// Every tier checked, global-slot rule first.
    pub fn tiers(&self) -> &[TierOutcome] {
        &self.tiers[..usize::from(self.len)]
    }

    /// The tier the combined decision comes from, if any rule matched.
    pub fn tightest(&self) -> Option<&TierOutcome> {
        self.tiers().get(usize::from(self.tightest))
    }

    /// The tiers that denied.
    pub fn denied_by(&self) -> impl Iterator<Item = &TierOutcome> {
        self.tiers().iter().filter(|t| !t.decision.allowed)
    }

    /// Divides limit and remaining divided by `divisor` (a penalized
    /// client sees its reduced limit).
    #[inline]
    pub(crate) fn scale_down(&mut self, divisor: u32) {
        if divisor > 1 {
            let div = u64::from(divisor);
            let scale = |d: &mut Decision| {
                if d.limit != u64::MAX {
                    d.limit /= div;
                    d.remaining /= div;
                }
            };
            scale(&mut self.decision);
            for t in &mut self.tiers[..usize::from(self.len)] {
                scale(&mut t.decision);
                t.scale_quota(div);
            }
        }
    }
}

impl core::fmt::Debug for PolicyDecision {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PolicyDecision")
            .field("decision", &self.decision)
            .field("tiers", &self.tiers())
            .finish()
    }
}
