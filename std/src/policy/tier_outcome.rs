//! [`TierOutcome`]: what one tier answered within a policy decision, and [`TierLabel`],
//! the tier's description that headers and metrics read from it.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock, PoisonError};

use tollgate_core::{Decision, Nanos};

use super::RuleId;

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

    /// The label of no tier (placeholder slots).
    const NONE: TierLabel = TierLabel {
        rule: RuleId(0),
        rule_name: "",
        name: "",
        quota: 0,
        window: Nanos::ZERO,
        shared: false,
    };
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
    /// `None` only in unused slots of a decision (so that those are all zero bits, which
    /// makes a fresh decision cheap to initialise).
    label: Option<&'static TierLabel>,
}

impl TierOutcome {
    /// An unused slot: all zero bits.
    pub(crate) const EMPTY: TierOutcome = TierOutcome {
        decision: Decision {
            allowed: false,
            limit: 0,
            remaining: 0,
            reset_after: Nanos::ZERO,
            retry_after: Nanos::ZERO,
            delay: Nanos::ZERO,
        },
        quota: 0,
        label: None,
    };

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
            label: Some(label),
        }
    }

    /// The tier's description.
    #[inline]
    pub fn label(&self) -> &'static TierLabel {
        self.label.unwrap_or(&TierLabel::NONE)
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

#[cfg(all(test, target_pointer_width = "64"))]
mod tests {
    use super::*;
    use crate::policy::PolicyDecision;

    /// What the docs promise: a decision cheap enough to return by value.
    #[test]
    fn outcomes_and_decisions_stay_compact() {
        assert_eq!(core::mem::size_of::<TierOutcome>(), 64);
        assert_eq!(core::mem::size_of::<PolicyDecision>(), 568);
    }
}
