//! [`PolicyDecision`]: the answer to a policy check: the combined decision and every
//! tier's part in it ([`TierOutcome`]: what one tier answered, with its [`TierLabel`]).

use super::Plan;
use super::RuleId;
use core::mem::MaybeUninit;
use std::collections::HashSet;
use std::sync::{Mutex, OnceLock, PoisonError};
use tollgate_core::{Decision, Nanos};

/// The decision of a request no rule matched.
const NO_RULE: Decision = Decision::allow(u64::MAX, u64::MAX, Nanos::ZERO);

/// A tier's decision before the store writes it.
const NO_DECISION: Decision = Decision::allow(0, 0, Nanos::ZERO);

/// The most tiers one request can be checked against (two rules of up to four tiers).
pub const MAX_TIERS: usize = 8;

/// The answer to [`Policy::allow`](super::Policy::allow): allowed only if every matching
/// tier admitted, plus each tier's own answer (for headers and metrics). Fixed size, no
/// allocation: 568 bytes (each tier's outcome is its decision, the quota it advertises
/// and a pointer to its [`TierLabel`](super::TierLabel)), of which a check writes only the
/// outcomes of the tiers it checked.
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
#[derive(Copy, Clone)]
pub struct PolicyDecision {
    /// The combined (tightest) decision.
    pub decision: Decision,
    /// The tiers' outcomes: `tiers[..len]` are initialised, the rest never written nor read
    /// (so a fresh decision costs no clearing of its unused slots).
    tiers: [MaybeUninit<TierOutcome>; MAX_TIERS],
    /// At most [`MAX_TIERS`].
    len: u8,
    tightest: u8,
}

/// Equal when the combined decisions, the tiers checked and the tightest tier are (unused
/// slots hold nothing to compare).
impl PartialEq for PolicyDecision {
    fn eq(&self, other: &PolicyDecision) -> bool {
        self.decision == other.decision
            && self.tightest == other.tightest
            && self.tiers() == other.tiers()
    }
}

impl Eq for PolicyDecision {}

impl PolicyDecision {
    /// A decision combining `tiers` (at most [`MAX_TIERS`]; extra ones are ignored).
    pub fn combine(outcomes: &[TierOutcome]) -> PolicyDecision {
        let mut decision = PolicyDecision::empty();
        for (slot, outcome) in decision.tiers.iter_mut().zip(outcomes) {
            slot.write(*outcome);
            decision.len += 1;
        }
        decision.settle(1);
        decision
    }

    /// A decision with no tier yet (see [`label`](Self::label)); its slots are left
    /// uninitialised until a tier's outcome is written to them.
    #[inline(always)]
    pub(crate) fn empty() -> PolicyDecision {
        PolicyDecision {
            decision: NO_RULE,
            tiers: [MaybeUninit::uninit(); MAX_TIERS],
            len: 0,
            tightest: u8::MAX,
        }
    }

    /// Makes this (empty) decision one about to be made over `plan`'s tiers: each outcome
    /// labelled, its decision not yet written (the store writes it through
    /// [`outcomes_mut`](Self::outcomes_mut), then [`settle`](Self::settle) combines them).
    #[inline]
    pub(crate) fn label(&mut self, plan: &Plan<'_>) {
        let mut len = 0u8;
        for (outcome, p) in self.tiers.iter_mut().zip(plan.iter()) {
            outcome.write(TierOutcome::labelled(p.tier.label(), NO_DECISION));
            len += 1;
        }
        self.len = len;
    }

    /// The outcomes a store fills in (as many as the plan has tiers).
    #[inline]
    pub(crate) fn outcomes_mut(&mut self) -> &mut [TierOutcome] {
        let len = usize::from(self.len).min(MAX_TIERS);
        // SAFETY: `tiers[..len]` is initialised (every place that raises `len` first writes
        // the slots below it), and `MaybeUninit<TierOutcome>` has `TierOutcome`'s layout;
        // the slice borrows `self.tiers` mutably for its lifetime.
        unsafe { core::slice::from_raw_parts_mut(self.tiers.as_mut_ptr().cast(), len) }
    }

    /// Combines the outcomes (the core's one combine rule), then scales limit, remaining
    /// and quota down by `divisor` (a penalized client sees its reduced limit).
    #[inline]
    pub(crate) fn settle(&mut self, divisor: u32) {
        let outcomes = self.tiers();
        if let Some((best, decision)) = Decision::combine(outcomes.iter().map(|o| &o.decision)) {
            self.decision = decision;
            // Truncation: `best` indexes `outcomes`, at most MAX_TIERS = 8 of them.
            #[allow(clippy::cast_possible_truncation)]
            let best = best as u8;
            self.tightest = best;
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
    #[inline]
    pub fn tiers(&self) -> &[TierOutcome] {
        let len = usize::from(self.len).min(MAX_TIERS);
        // SAFETY: `tiers[..len]` is initialised (every place that raises `len` first writes
        // the slots below it), and `MaybeUninit<TierOutcome>` has `TierOutcome`'s layout;
        // the slice borrows `self.tiers` for its lifetime.
        unsafe { core::slice::from_raw_parts(self.tiers.as_ptr().cast(), len) }
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
            for t in self.outcomes_mut() {
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

/// What headers and metrics say about a tier: its rule, its names and what it advertises.
/// Interned for the life of the process ([`intern`](Self::intern)), so a decision refers to
/// it by one pointer, however often it is copied, and needs no reference count on the hot
/// path. A rule set labels each of its tiers once, when it is compiled (and again if a
/// reload gives its rule another id); growth is bounded by the distinct labels ever
/// configured, not by traffic.
///
/// ```
/// use tollgate::policy::{RuleId, TierLabel};
/// use tollgate::Nanos;
/// let label = TierLabel {
///     rule: RuleId(0),
///     rule_name: "api",
///     name: "burst",
///     quota: 10,
///     window: Nanos::from_secs(1),
///     shared: false,
/// };
/// assert!(core::ptr::eq(label.intern(), label.intern()));
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct TierLabel {
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
}

impl TierLabel {
    /// The process-wide copy of this label (stored, and leaked, the first time it is seen).
    pub fn intern(&self) -> &'static TierLabel {
        static LABELS: OnceLock<Mutex<HashSet<&'static TierLabel>>> = OnceLock::new();
        let labels = LABELS.get_or_init(|| Mutex::new(HashSet::new()));
        // A poisoned set still holds valid labels: keep using it.
        let mut labels = labels.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(existing) = labels.get(self) {
            return existing;
        }
        let leaked: &'static TierLabel = Box::leak(Box::new(*self));
        labels.insert(leaked);
        leaked
    }
}

/// One tier's answer, with what headers need to describe it: the tier's [`TierLabel`]
/// (one pointer: names are read through it only when headers or metrics ask) and the
/// quota it advertises to this client. 64 bytes.
///
/// ```
/// use tollgate::policy::{RuleId, TierLabel, TierOutcome};
/// use tollgate::{Decision, Nanos};
/// let label = TierLabel {
///     rule: RuleId(0),
///     rule_name: "api",
///     name: "burst",
///     quota: 10,
///     window: Nanos::from_secs(1),
///     shared: false,
/// };
/// let outcome = TierOutcome::new(label, Decision::allow(10, 9, Nanos::from_millis(100)));
/// assert!(outcome.decision.allowed);
/// assert_eq!((outcome.name(), outcome.quota()), ("burst", 10));
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TierOutcome {
    /// The tier's decision (what a [`Store`](super::Store) writes). In a denied policy
    /// decision, tiers that admitted had their permits given back; their decision shows
    /// the state as of the check.
    pub decision: Decision,
    /// The quota advertised to this client: the label's, divided for a penalized client.
    quota: u64,
    /// The tier's description (interned).
    label: &'static TierLabel,
}

impl TierOutcome {
    /// An outcome of the tier `label` describes (interned: see [`TierLabel::intern`]).
    pub fn new(label: TierLabel, decision: Decision) -> TierOutcome {
        TierOutcome::labelled(label.intern(), decision)
    }

    /// An outcome of an interned label (the policy's check: no lookup).
    #[inline]
    pub(crate) fn labelled(label: &'static TierLabel, decision: Decision) -> TierOutcome {
        TierOutcome {
            decision,
            quota: label.quota,
            label,
        }
    }

    /// The tier's description.
    #[inline]
    pub fn label(&self) -> &'static TierLabel {
        self.label
    }

    /// The rule the tier belongs to.
    #[inline]
    pub fn rule(&self) -> RuleId {
        self.label().rule
    }

    /// That rule's name.
    #[inline]
    pub fn rule_name(&self) -> &'static str {
        self.label().rule_name
    }

    /// The tier's name (the policy name in `RateLimit` headers).
    #[inline]
    pub fn name(&self) -> &'static str {
        self.label().name
    }

    /// The limit per window advertised to this client: the configured one, divided for a
    /// client [`AdaptivePenalty`](super::AdaptivePenalty) penalizes.
    #[inline]
    pub fn quota(&self) -> u64 {
        self.quota
    }

    /// The configured window.
    #[inline]
    pub fn window(&self) -> Nanos {
        self.label().window
    }

    /// Whether every client shares this tier's state (see [`TierLabel::shared`]).
    #[inline]
    pub fn shared(&self) -> bool {
        self.label().shared
    }

    /// Divides the advertised quota by `divisor` (a penalized client).
    #[inline]
    pub(crate) fn scale_quota(&mut self, divisor: u64) {
        self.quota /= divisor;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PolicyDecision;

    /// What the docs promise: a decision cheap enough to return by value.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn outcomes_and_decisions_stay_compact() {
        assert_eq!(core::mem::size_of::<TierOutcome>(), 64);
        assert_eq!(core::mem::size_of::<PolicyDecision>(), 568);
    }

    fn outcome(name: &'static str, decision: Decision) -> TierOutcome {
        TierOutcome::new(
            TierLabel {
                rule: RuleId(0),
                rule_name: "r",
                name,
                quota: 10,
                window: Nanos::from_secs(1),
                shared: false,
            },
            decision,
        )
    }

    /// A decision of fewer tiers than it has slots (the rest never written): copied,
    /// compared, formatted and scaled, only its tiers are read.
    #[test]
    fn a_partly_filled_decision_reads_only_its_tiers() {
        let first = outcome("a", Decision::allow(10, 4, Nanos::from_millis(600)));
        let second = outcome("b", Decision::allow(10, 7, Nanos::from_millis(300)));
        let decision = PolicyDecision::combine(&[first, second]);
        let copy = decision;
        let clone = Clone::clone(&decision);
        assert_eq!(copy, decision);
        assert_eq!(clone, decision);
        assert_eq!(copy.tiers(), [first, second]);
        assert_eq!(copy.tightest(), Some(&first));
        assert_eq!(copy.remaining(), 4);
        assert!(format!("{copy:?}").contains("tiers"));
        let other = PolicyDecision::combine(&[first]);
        assert_ne!(other, decision);
        let empty = PolicyDecision::combine(&[]);
        assert_eq!(empty, PolicyDecision::empty());
        assert!(empty.allowed() && empty.tiers().is_empty() && empty.tightest().is_none());
        let mut scaled = decision;
        scaled.scale_down(2);
        assert_eq!(scaled.tiers()[0].quota(), 5);
        assert_eq!(scaled.remaining(), 2);
        let full = PolicyDecision::combine(&[first; MAX_TIERS + 2]);
        assert_eq!(full.tiers().len(), MAX_TIERS);
        assert_eq!(full, Clone::clone(&full));
    }
}
