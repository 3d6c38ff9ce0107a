//! [`PolicyDecision`]: the answer to a policy check: the combined decision and every
//! tier's part in it ([`TierOutcome`]: what one tier answered, with its [`TierLabel`]).
//!
//! A decision points into the rule set it was decided on (each tier's label lives in its
//! tier) and holds that set, as a check does (see `published`): the set lives as long as
//! the decision, however many reloads come meanwhile, and is reclaimed after the last one
//! is gone. Nothing is interned, so nothing grows with reloads.

use super::published::Hold;
use super::{Listing, Plan, RuleId, RuleSet};
use core::mem::MaybeUninit;
use core::ptr::NonNull;
use std::borrow::Cow;
use tollgate_core::{Decision, Nanos};

/// The decision of a request no rule matched.
const NO_RULE: Decision = Decision::allow(u64::MAX, u64::MAX, Nanos::ZERO);

/// The decision of a request a deny entry or a ban refuses: never admitted by waiting.
const BANNED: Decision = Decision::deny(0, 0, Nanos::MAX, Nanos::MAX);

/// No listing decided the request.
const UNLISTED: u32 = u32::MAX;

/// A tier's decision before the store writes it: all zeros, so that writing it takes no
/// constant from memory (a line a check from a cold cache would fetch). Never read: a store
/// writes every tier's decision before the check combines them (were one left, it would
/// deny).
const NO_DECISION: Decision = Decision {
    allowed: false,
    limit: 0,
    remaining: 0,
    reset_after: Nanos::ZERO,
    retry_after: Nanos::ZERO,
    delay: Nanos::ZERO,
};

/// The most tiers one request can be checked against (two rules of up to four tiers).
pub const MAX_TIERS: usize = 8;

/// The answer to [`Policy::allow`](super::Policy::allow): allowed only if every matching
/// tier admitted, plus each tier's own answer (for headers and metrics). Fixed size, no
/// allocation: 584 bytes (each tier's outcome is its decision, the quota it advertises
/// and a pointer to its [`TierLabel`](super::TierLabel); and a hold on the rule set the
/// labels live in), of which a check writes only the outcomes of the tiers it checked.
/// Cloning it takes another hold (one add on the cloning thread's own counter).
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
/// A request a list entry or a special rule decided ([`listing`](Self::listing)) has no
/// tier: admitted (an allow entry, an `unlimited` rule) as with no matching rule, or
/// refused (a deny entry, a ban) with `limit = remaining = 0` and `retry_after =
/// reset_after =` [`Nanos::MAX`]: a ban does not end by waiting, so
/// [`RateLimitHeaders`](super::RateLimitHeaders) renders no field for it (no
/// `Retry-After`); tell it apart with [`is_ban`](Self::is_ban).
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
pub struct PolicyDecision {
    /// The combined (tightest) decision.
    pub decision: Decision,
    /// The tiers' outcomes: `tiers[..len]` are initialised, the rest never written nor read
    /// (so a fresh decision costs no clearing of its unused slots).
    tiers: [MaybeUninit<TierOutcome>; MAX_TIERS],
    /// At most [`MAX_TIERS`].
    len: u8,
    tightest: u8,
    /// The listing that decided the request, by its index in the held set's listings
    /// ([`UNLISTED`]: none).
    listing: u32,
    /// The rule set the outcomes' labels (and the listing) live in (`None`: labels that
    /// live for good, or no tier).
    set: Option<Hold<RuleSet>>,
}

impl Clone for PolicyDecision {
    fn clone(&self) -> PolicyDecision {
        let mut tiers = [const { MaybeUninit::uninit() }; MAX_TIERS];
        for (slot, outcome) in tiers.iter_mut().zip(self.tiers()) {
            slot.write(outcome.duplicate());
        }
        PolicyDecision {
            decision: self.decision,
            tiers,
            len: self.len,
            tightest: self.tightest,
            listing: self.listing,
            // The copied labels point into the same set: hold it again.
            set: self.set.clone(),
        }
    }
}

/// Equal when the combined decisions, the tiers checked, the tightest tier and the
/// listings are (unused slots hold nothing to compare).
impl PartialEq for PolicyDecision {
    fn eq(&self, other: &PolicyDecision) -> bool {
        self.decision == other.decision
            && self.tightest == other.tightest
            && self.tiers() == other.tiers()
            && self.listing() == other.listing()
    }
}

impl Eq for PolicyDecision {}

impl PolicyDecision {
    /// A decision combining one outcome per `(label, decision)` (at most [`MAX_TIERS`];
    /// extra ones are ignored), with the core's one combine rule: for rendering or testing
    /// headers of decisions made elsewhere. The labels must live for good (a `static`, or
    /// leaked); a policy's own decisions point into their rule set instead.
    ///
    /// ```
    /// use std::borrow::Cow;
    /// use tollgate::policy::{PolicyDecision, RuleId, TierLabel};
    /// use tollgate::{Decision, Nanos};
    /// static API: TierLabel = TierLabel {
    ///     rule: RuleId(0),
    ///     rule_name: Cow::Borrowed("api"),
    ///     name: Cow::Borrowed("burst"),
    ///     quota: 10,
    ///     window: Nanos::from_secs(1),
    ///     shared: false,
    /// };
    /// let d = PolicyDecision::combine([(&API, Decision::allow(10, 9, Nanos::from_millis(100)))]);
    /// assert!(d.allowed());
    /// assert_eq!((d.tiers()[0].name(), d.remaining()), ("burst", 9));
    /// ```
    pub fn combine<I>(outcomes: I) -> PolicyDecision
    where
        I: IntoIterator<Item = (&'static TierLabel, Decision)>,
    {
        let mut decision = PolicyDecision::empty();
        for (slot, (label, outcome)) in decision.tiers.iter_mut().zip(outcomes) {
            slot.write(TierOutcome::labelled(label, outcome));
            decision.len += 1;
        }
        decision.settle(1);
        decision
    }

    /// A decision with no tier: what a request that no rule matches is answered (admitted,
    /// unlimited), and where a check starts before it writes its tiers' outcomes.
    ///
    /// ```
    /// use tollgate::policy::PolicyDecision;
    /// let none = PolicyDecision::empty();
    /// assert!(none.allowed());
    /// assert!(none.tiers().is_empty());
    /// ```
    #[inline(always)]
    pub fn empty() -> PolicyDecision {
        let mut empty = PolicyDecision {
            decision: NO_DECISION,
            tiers: [const { MaybeUninit::uninit() }; MAX_TIERS],
            len: 0,
            tightest: u8::MAX,
            listing: UNLISTED,
            set: None,
        };
        // Field by field (see `clear`).
        empty.clear();
        empty
    }

    /// Makes this decision [`empty`](Self::empty) again, in place (the hold on a rule set
    /// released): where a check into a caller's decision starts, and what a failed one
    /// leaves.
    #[inline(always)]
    pub(crate) fn clear(&mut self) {
        // `NO_RULE`, field by field: stores of immediates, where a copy of the constant
        // would read it from memory (a line a check from a cold cache would fetch).
        let d = &mut self.decision;
        d.allowed = true;
        d.limit = u64::MAX;
        d.remaining = u64::MAX;
        d.reset_after = Nanos::ZERO;
        d.retry_after = Nanos::ZERO;
        d.delay = Nanos::ZERO;
        self.len = 0;
        self.tightest = u8::MAX;
        self.listing = UNLISTED;
        self.set = None;
    }

    /// Makes this (empty) decision the one listing `at` of `set` decides: admitted with no
    /// tier, or refused for good. The caller then [`hold`](Self::hold)s `set`.
    #[inline]
    pub(crate) fn list(&mut self, at: u32, set: &RuleSet) {
        let admits = set.listings().get(at as usize).is_some_and(Listing::admits);
        self.decision = if admits { NO_RULE } else { BANNED };
        self.listing = at;
    }

    /// The list entry or special rule that decided the request, if one did: an allow or
    /// deny entry, an `unlimited` rule (when no rule of limits applied) or a ban. Nothing
    /// was stored or charged for it.
    pub fn listing(&self) -> Option<&Listing> {
        if self.listing == UNLISTED {
            return None;
        }
        self.set
            .as_ref()?
            .get()
            .listings()
            .get(self.listing as usize)
    }

    /// Whether the request is refused by a deny entry or a ban (`limit = 0`), not by a
    /// limit: waiting will not let it in ([`listing`](Self::listing) says which and why).
    pub fn is_ban(&self) -> bool {
        self.listing().is_some_and(|l| !l.admits())
    }

    /// Keeps `set` (the rule set the labels point into) alive as long as this decision.
    #[inline(always)]
    pub(crate) fn hold(&mut self, set: Hold<RuleSet>) {
        self.set = Some(set);
    }

    /// Makes this (empty) decision one about to be made over `plan`'s tiers: each outcome
    /// labelled, its decision not yet written (the store writes it through
    /// [`outcomes_mut`](Self::outcomes_mut), then [`settle`](Self::settle) combines them).
    /// The labels live in the plan's rule set, which the caller then [`hold`](Self::hold)s.
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
    #[inline(always)]
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

    /// Each rule's part in the decision, once per rule in tier order: its first tier (which
    /// names it) and whether every one of its tiers admitted. What per-rule counters count.
    pub fn rule_outcomes(&self) -> impl Iterator<Item = (&TierOutcome, bool)> {
        let tiers = self.tiers();
        tiers.iter().enumerate().filter_map(move |(i, tier)| {
            if tiers[..i].iter().any(|t| t.rule() == tier.rule()) {
                return None;
            }
            let allowed = tiers
                .iter()
                .filter(|t| t.rule() == tier.rule())
                .all(|t| t.decision.allowed);
            Some((tier, allowed))
        })
    }

    /// Multiplies limit, remaining and quota by `multiplier` (a rewarded client sees its
    /// raised limit), saturating.
    #[inline]
    pub(crate) fn scale_up(&mut self, multiplier: u32) {
        if multiplier > 1 {
            let m = u64::from(multiplier);
            let scale = |d: &mut Decision| {
                if d.limit != u64::MAX {
                    d.limit = d.limit.saturating_mul(m);
                    d.remaining = d.remaining.saturating_mul(m);
                }
            };
            scale(&mut self.decision);
            for t in self.outcomes_mut() {
                scale(&mut t.decision);
                t.quota = t.quota.saturating_mul(m);
            }
        }
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
/// Each tier of a rule set owns its label; a decision points to it (one pointer, however
/// often the decision is copied) and holds the rule set meanwhile, so labels need no
/// interning and no reference count on the hot path, and are freed with their rule set.
///
/// ```
/// use tollgate::policy::{RuleId, TierLabel};
/// use tollgate::Nanos;
/// let label = TierLabel {
///     rule: RuleId(0),
///     rule_name: "api".into(),
///     name: "burst".into(),
///     quota: 10,
///     window: Nanos::from_secs(1),
///     shared: false,
/// };
/// assert_eq!(label.name, "burst");
/// ```
// `repr(C)`, the quota first: what a check copies into each outcome, at the head of its
// tier's first cache line (see `Tier`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct TierLabel {
    /// What the tier advertises as its quota: the most it admits at once (the burst of
    /// GCRA and the token bucket, the queue plus one of the leaky bucket, the limit of the
    /// windows), which a decision's `remaining` counts down from. The `q` of
    /// `RateLimit-Policy`.
    pub quota: u64,
    /// The time the tier takes to restore its whole [`quota`](Self::quota) at its
    /// configured rate (the configured window when the quota is the limit). The `w` of
    /// `RateLimit-Policy`.
    pub window: Nanos,
    /// Whether every client shares this tier's state (a `per = "global"` rule): its
    /// denials are nobody's own doing, so [`AdaptivePenalty`](super::AdaptivePenalty)
    /// does not count them against the client.
    pub shared: bool,
    /// The rule the tier belongs to.
    pub rule: RuleId,
    /// That rule's name.
    pub rule_name: Cow<'static, str>,
    /// The tier's name (the policy name in `RateLimit` headers).
    pub name: Cow<'static, str>,
}

/// One tier's answer, with what headers need to describe it: the tier's [`TierLabel`]
/// (one pointer: names are read through it only when headers or metrics ask) and the
/// quota it advertises to this client. 64 bytes. Outcomes live only inside a
/// [`PolicyDecision`] (made by a check, or by [`PolicyDecision::combine`]): they are read
/// through it, and a store writes their decisions.
pub struct TierOutcome {
    /// The tier's decision (what a [`Store`](super::Store) writes). In a denied policy
    /// decision, tiers that admitted had their permits given back; their decision shows
    /// the state as of the check.
    pub decision: Decision,
    /// The quota advertised to this client: the label's, divided for a penalized client.
    quota: u64,
    /// The tier's description: in the rule set the decision holding this outcome holds,
    /// or living for good (see [`PolicyDecision::combine`]).
    label: NonNull<TierLabel>,
}

// SAFETY: the label is only read, through `&self`, while the decision holding this outcome
// keeps it alive (its rule set, held; or a label that lives for good); `TierLabel` is
// `Sync`. An outcome never leaves its decision: it has no public constructor and is neither
// `Clone` nor `Default`, so safe code can only swap outcomes within one decision.
unsafe impl Send for TierOutcome {}
// SAFETY: as for `Send`.
unsafe impl Sync for TierOutcome {}

/// Equal when their decisions, advertised quotas and labels are (labels by content: the
/// same tier in two rule sets, or two policies, compares equal).
impl PartialEq for TierOutcome {
    fn eq(&self, other: &TierOutcome) -> bool {
        self.decision == other.decision
            && self.quota == other.quota
            && self.label() == other.label()
    }
}

impl Eq for TierOutcome {}

impl core::fmt::Debug for TierOutcome {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TierOutcome")
            .field("decision", &self.decision)
            .field("quota", &self.quota)
            .field("label", self.label())
            .finish()
    }
}

impl TierOutcome {
    /// An outcome of the tier `label` describes: `label` lives in the rule set the decision
    /// made of this outcome holds, or for good.
    #[inline]
    pub(crate) fn labelled(label: &TierLabel, decision: Decision) -> TierOutcome {
        TierOutcome {
            decision,
            quota: label.quota,
            label: NonNull::from(label),
        }
    }

    /// A bitwise copy, for a copy of the decision holding this one (which holds the label's
    /// rule set too), or for a store's scratch outcomes that live within one check.
    #[inline]
    pub fn duplicate(&self) -> TierOutcome {
        TierOutcome {
            decision: self.decision,
            quota: self.quota,
            label: self.label,
        }
    }

    /// The tier's description.
    #[inline]
    pub fn label(&self) -> &TierLabel {
        // SAFETY: alive while the decision holding this outcome is (see the `Send` impl),
        // which outlives `&self`.
        unsafe { self.label.as_ref() }
    }

    /// The rule the tier belongs to.
    #[inline]
    pub fn rule(&self) -> RuleId {
        self.label().rule
    }

    /// That rule's name.
    #[inline]
    pub fn rule_name(&self) -> &str {
        &self.label().rule_name
    }

    /// The tier's name (the policy name in `RateLimit` headers).
    #[inline]
    pub fn name(&self) -> &str {
        &self.label().name
    }

    /// The quota advertised to this client ([`TierLabel::quota`]: the most the tier admits
    /// at once), divided for a client [`AdaptivePenalty`](super::AdaptivePenalty) penalizes.
    #[inline]
    pub fn quota(&self) -> u64 {
        self.quota
    }

    /// The time the tier takes to restore its quota ([`TierLabel::window`]).
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

    /// `clear` writes `NO_RULE` field by field: it must stay that constant, and `empty`
    /// (built on it) too.
    #[test]
    fn empty_and_cleared_decisions_are_no_rules() {
        let mut decision = PolicyDecision::empty();
        assert_eq!(decision.decision, NO_RULE);
        assert_eq!(
            (decision.len, decision.tightest, decision.listing),
            (0, u8::MAX, UNLISTED)
        );
        decision.decision = BANNED;
        decision.listing = 3;
        decision.clear();
        assert_eq!(decision.decision, NO_RULE);
        assert_eq!(decision.listing, UNLISTED);
    }

    /// What the docs promise: a decision cheap enough to return by value.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn outcomes_and_decisions_stay_compact() {
        assert_eq!(core::mem::size_of::<TierOutcome>(), 64);
        assert_eq!(core::mem::size_of::<PolicyDecision>(), 584);
    }

    const fn label(name: &'static str) -> TierLabel {
        TierLabel {
            rule: RuleId(0),
            rule_name: Cow::Borrowed("r"),
            name: Cow::Borrowed(name),
            quota: 10,
            window: Nanos::from_secs(1),
            shared: false,
        }
    }

    static A: TierLabel = label("a");
    static B: TierLabel = label("b");

    /// A decision of fewer tiers than it has slots (the rest never written): cloned,
    /// compared, formatted and scaled, only its tiers are read.
    #[test]
    fn a_partly_filled_decision_reads_only_its_tiers() {
        let (a, b) = (&A, &B);
        let first = Decision::allow(10, 4, Nanos::from_millis(600));
        let second = Decision::allow(10, 7, Nanos::from_millis(300));
        let decision = PolicyDecision::combine([(a, first), (b, second)]);
        let clone = decision.clone();
        assert_eq!(clone, decision);
        let names: Vec<_> = clone
            .tiers()
            .iter()
            .map(|t| (t.name(), t.decision))
            .collect();
        assert_eq!(names, [("a", first), ("b", second)]);
        assert_eq!(clone.tightest().map(TierOutcome::name), Some("a"));
        assert_eq!(clone.remaining(), 4);
        assert!(format!("{clone:?}").contains("tiers"));
        let other = PolicyDecision::combine([(a, first)]);
        assert_ne!(other, decision);
        let empty = PolicyDecision::combine([]);
        assert_eq!(empty, PolicyDecision::empty());
        assert!(empty.allowed() && empty.tiers().is_empty() && empty.tightest().is_none());
        let mut scaled = decision.clone();
        scaled.scale_down(2);
        assert_eq!(scaled.tiers()[0].quota(), 5);
        assert_eq!(scaled.remaining(), 2);
        let full = PolicyDecision::combine([(a, first); MAX_TIERS + 2]);
        assert_eq!(full.tiers().len(), MAX_TIERS);
        assert_eq!(full, full.clone());
    }
}
