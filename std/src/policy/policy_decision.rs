//! [`PolicyDecision`]: the answer to a policy check: the combined decision and every
//! tier's part in it.

use tollgate_core::{Decision, Nanos};

use super::TierOutcome;

/// The most tiers one request can be checked against (two rules of up to four tiers).
pub const MAX_TIERS: usize = 8;

/// The answer to [`Policy::allow`](super::Policy::allow): allowed only if every matching
/// tier admitted, plus each tier's own answer (for headers and metrics). Fixed size, no
/// allocation.
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
/// assert_eq!(d.tightest().unwrap().name, "default");
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
        let mut tiers = [TierOutcome::EMPTY; MAX_TIERS];
        let len = outcomes.len().min(MAX_TIERS);
        tiers[..len].copy_from_slice(&outcomes[..len]);
        PolicyDecision::from_tiers(tiers, len)
    }

    /// [`combine`](Self::combine) of the first `len` of `tiers`, taken by value (the
    /// policy's check builds the array in place: no copy of it).
    #[inline]
    pub(crate) fn from_tiers(tiers: [TierOutcome; MAX_TIERS], len: usize) -> PolicyDecision {
        let len = len.min(MAX_TIERS);
        let outcomes = &tiers[..len];
        if outcomes.is_empty() {
            return PolicyDecision {
                decision: Decision::allow(u64::MAX, u64::MAX, Nanos::ZERO),
                tiers,
                len: 0,
                tightest: u8::MAX,
            };
        }
        // One combine rule for every multi-tier executor: the core's.
        let (best, decision) = Decision::combine(outcomes.iter().map(|o| o.decision)).unwrap_or((
            usize::from(u8::MAX),
            Decision::allow(u64::MAX, u64::MAX, Nanos::ZERO),
        ));
        PolicyDecision {
            decision,
            tiers,
            len: len as u8,
            tightest: best as u8,
        }
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
                t.quota /= div;
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
