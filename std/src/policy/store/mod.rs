//! [`Store`]: where a policy's per-key state lives, and [`InProcess`], the default store.
//!
//! A [`Policy`](super::Policy) matches a request to its rules and compiles a *plan*: one
//! [`PlannedTier`] per tier that applies (rule, tier, the key under that rule, the permits
//! it charges). Everything after that is the store's: decide every tier of the plan and
//! record all or nothing, peek, refund, charge. The same plan runs on any store, so the
//! rules, headers, decorators (`Metered`, `AdaptivePenalty`), waiting and reservations
//! work unchanged whichever store holds the state.
//!
//! ```text
//! request ─▶ Policy: match rules ─▶ plan [PlannedTier; ≤ MAX_TIERS] ─▶ Store::check
//!                                                                      (all or nothing)
//! ```
//!
//! [`InProcess`] keeps each tier's keys in the tier's own bounded lock-free table (see
//! `store::tier`): no allocation and no lock on the check path.
//!
//! A store whose operations wait on the network also implements [`AsyncStore`], so an
//! async server awaits them ([`Policy::allow_async`](super::Policy::allow_async)) instead
//! of blocking one of its worker threads for the round trip.

use std::fmt;
use std::future::Future;

use arrayvec::ArrayVec;
use tollgate_core::{Decision, InsufficientCapacity, Nanos};

use super::{Rule, Tier, TierOutcome, MAX_TIERS};
use crate::sync::plain::{AtomicU64, Ordering};
use tier::{Prepared, Spot, TakeReceipt as Receipt};

mod cell;
mod log;
mod tier;

pub(crate) use tier::{fingerprint, TierStore};

/// One tier of a request's plan: everything a store needs to decide it.
#[derive(Copy, Clone, Debug)]
pub struct PlannedTier<'a> {
    /// The rule the tier belongs to.
    pub rule: &'a Rule,
    /// The tier: its name, algorithm and parameters.
    pub tier: &'a Tier,
    /// The 64-bit fingerprint of the key the tier's state is kept under (the client's, or
    /// the rule's one shared key for `per = "global"`).
    pub key: u64,
    /// The client the request came from, as given (a store that names its keys, such as
    /// Redis, builds them from it; a shared rule's key does not depend on it).
    pub client: &'a str,
    /// The permits the request charges this tier.
    pub cost: u32,
}

/// The tiers one request is checked against, in order (the global-slot rule's first): at
/// most [`MAX_TIERS`], kept inline (no allocation).
#[derive(Clone)]
pub struct Plan<'a> {
    /// The tiers, inline (an unused slot is never written nor read, so an empty plan costs
    /// no clearing).
    entries: ArrayVec<Entry<'a>, MAX_TIERS>,
}

/// One tier of a plan, and where the in-process store located its key's table slot when
/// the plan was made (so its check need not locate it again).
#[derive(Copy, Clone, Debug)]
struct Entry<'a> {
    tier: PlannedTier<'a>,
    /// In `tier.tier.store`'s own table (`None`: not located).
    at: Option<Spot<'a>>,
}

impl<'a> Plan<'a> {
    /// An empty plan.
    #[inline]
    pub(crate) fn new() -> Plan<'a> {
        Plan {
            entries: ArrayVec::new_const(),
        }
    }

    /// Appends `tier`, not located; `false` if the plan is full (the Redis stores' plans of
    /// some of a plan's tiers).
    #[cfg(feature = "redis")]
    #[inline]
    pub(crate) fn push(&mut self, tier: PlannedTier<'a>) -> bool {
        self.push_located(tier, None)
    }

    /// Appends `tier`, whose key lives at `at` in its store's table (as that store's
    /// `prefetch` answered); `false` if the plan is full.
    #[inline]
    pub(crate) fn push_located(&mut self, tier: PlannedTier<'a>, at: Option<Spot<'a>>) -> bool {
        // Checked first, so the push below writes the entry in place.
        if self.entries.is_full() {
            return false;
        }
        self.entries.push(Entry { tier, at });
        true
    }

    /// The filled entries.
    #[inline]
    fn entries(&self) -> &[Entry<'a>] {
        &self.entries
    }

    /// How many tiers.
    #[inline]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no rule matched.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The tiers, in order.
    #[inline]
    pub fn iter(&self) -> PlanIter<'_, 'a> {
        PlanIter {
            entries: self.entries().iter(),
        }
    }

    /// Tier `i`.
    #[inline]
    pub fn get(&self, i: usize) -> Option<&PlannedTier<'a>> {
        self.entries().get(i).map(|e| &e.tier)
    }
}

impl fmt::Debug for Plan<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// The iterator of [`Plan::iter`]: the tiers, in order.
#[derive(Clone, Debug)]
pub struct PlanIter<'p, 'a> {
    /// The plan's filled entries.
    entries: core::slice::Iter<'p, Entry<'a>>,
}

impl<'p, 'a> Iterator for PlanIter<'p, 'a> {
    type Item = &'p PlannedTier<'a>;

    #[inline]
    fn next(&mut self) -> Option<&'p PlannedTier<'a>> {
        self.entries.next().map(|e| &e.tier)
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.entries.size_hint()
    }
}

impl ExactSizeIterator for PlanIter<'_, '_> {}

impl<'p, 'a> IntoIterator for &'p Plan<'a> {
    type Item = &'p PlannedTier<'a>;
    type IntoIter = PlanIter<'p, 'a>;

    #[inline]
    fn into_iter(self) -> PlanIter<'p, 'a> {
        self.iter()
    }
}

/// Where a policy's per-key state lives (see the module docs). Implementations must be
/// all or nothing: a check that any tier denies records nothing in any tier.
pub trait Store: Send + Sync + fmt::Debug {
    /// Decides every tier of `plan` at `now` and records them all if every tier admits.
    /// `outcomes[i].decision` receives tier `i`'s decision (`outcomes` is at least as long
    /// as `plan`; the policy has filled in the rest of each outcome). When any tier denies,
    /// nothing is recorded, and the tiers that would have admitted report their current
    /// state (the request did not count).
    fn check(
        &self,
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity>;

    /// What [`check`](Self::check) would decide, recording nothing.
    fn peek(
        &self,
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity>;

    /// Gives each tier's `cost` back at `now` (a request admitted but not served).
    fn refund(&self, plan: &Plan<'_>, now: Nanos);

    /// Records each tier's `cost` at `now` whatever the limits say (work already done).
    fn charge(&self, plan: &Plan<'_>, now: Nanos);
}

/// A [`Store`] whose operations can be awaited: the same four operations, with the same
/// contract, as futures. A store that talks to a server (Redis) waits for it there without
/// holding a thread; [`InProcess`] never waits, so its futures are ready when first polled.
/// The policy's `*_async` methods ([`Policy::allow_async`](super::Policy::allow_async),
/// `peek_async`, `refund_async`, `charge_async`) run on it.
///
/// ```
/// use tollgate::policy::{FnClock, Policy};
/// use tollgate::Nanos;
/// let policy = Policy::from_toml(r#"
///     [[rules]]
///     name = "default"
///     limit = 1
///     window = "1m"
/// "#, FnClock(|| Nanos::ZERO))?;
/// let runtime = tokio::runtime::Builder::new_current_thread().build()?;
/// runtime.block_on(async {
///     assert!(policy.allow_async("a", "/", 1).await?.allowed());
///     assert!(!policy.allow_async("a", "/", 1).await?.allowed());
///     Ok::<(), tollgate::InsufficientCapacity>(())
/// })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait AsyncStore: Store {
    /// [`Store::check`], awaited.
    fn check_async<'a>(
        &'a self,
        plan: &'a Plan<'a>,
        now: Nanos,
        outcomes: &'a mut [TierOutcome],
    ) -> impl Future<Output = Result<(), InsufficientCapacity>> + Send + 'a;

    /// [`Store::peek`], awaited.
    fn peek_async<'a>(
        &'a self,
        plan: &'a Plan<'a>,
        now: Nanos,
        outcomes: &'a mut [TierOutcome],
    ) -> impl Future<Output = Result<(), InsufficientCapacity>> + Send + 'a;

    /// [`Store::refund`], awaited.
    fn refund_async<'a>(
        &'a self,
        plan: &'a Plan<'a>,
        now: Nanos,
    ) -> impl Future<Output = ()> + Send + 'a;

    /// [`Store::charge`], awaited.
    fn charge_async<'a>(
        &'a self,
        plan: &'a Plan<'a>,
        now: Nanos,
    ) -> impl Future<Output = ()> + Send + 'a;
}

/// The default [`Store`]: state in this process, each tier's keys in the tier's own bounded
/// lock-free table, allocated on the tier's first use.
///
/// ## All or nothing: take in order, compensate exactly
///
/// Tiers live in different atomic words (different keys, different rules), so no single
/// compare-and-swap can cover them. The store therefore:
///
/// 1. *prechecks*: decides every tier on the state it reads, writing nothing, and keeps
///    each state read and the state its take would write. If any tier denies, it answers
///    the deny with nothing consumed — a flood of denied requests writes nothing;
/// 2. *takes* each tier in turn: one compare-and-swap from the state read in step 1 to
///    the state decided there. Only if another caller wrote the key in between does it
///    decide again, on the state it finds;
/// 3. if a tier denies at this point (a concurrent caller took the last permit between 1
///    and 2), *compensates* every tier already taken with the core's
///    [`undo`](tollgate_core::Algorithm::undo), using the receipt of its own take.
///
/// Step 1 finds each tier's key once and remembers the slot it read; step 2 writes that
/// slot directly (looking the key up again only if the slot changed since), and each tier
/// is decided once: the check path has no lock, no allocation, one clock read (by the
/// policy) and one compare-and-swap per tier. That fast path covers keys already held by single-word
/// tiers (the steady state); a key's first request, a sliding-log tier, a key that left
/// its table between the steps (whose takes are then given back first), or a plan of one
/// tier takes the general path: peek every tier but the first (whose take, if it denies,
/// has taken nothing), then take each in turn with a full lookup, then step 3 as above.
///
/// Compensation is exact for the fixed and sliding windows and the sliding log, and for
/// the buckets whenever the racing callers share a clock reading (the conditions are on
/// [`Algorithm::undo`](tollgate_core::Algorithm::undo)). While a take awaits its
/// compensation, a concurrent request may see one permit fewer than it would have: the
/// error is on the strict side and lasts nanoseconds. [`compensations`](Self::compensations)
/// counts how often step 3 ran.
///
/// ```
/// use tollgate::policy::{FnClock, InProcess, Policy, PolicyCheck};
/// use tollgate::Nanos;
/// let policy = Policy::from_toml(r#"
///     [[rules]]
///     name = "default"
///     limit = 2
///     window = "1m"
/// "#, FnClock(|| Nanos::ZERO))?
/// .store(InProcess::new());
/// assert!(policy.allow("a", "/", 1)?.allowed());
/// assert_eq!(policy.backend().compensations(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct InProcess {
    precheck: bool,
    compensations: AtomicU64,
}

impl Default for InProcess {
    fn default() -> InProcess {
        InProcess::new()
    }
}

impl InProcess {
    /// The in-process store, with the precheck on.
    pub fn new() -> InProcess {
        InProcess {
            precheck: true,
            compensations: AtomicU64::new(0),
        }
    }

    /// Turns the precheck (step 1 of the all-or-nothing scheme) off or on. Off, every deny
    /// takes and compensates; only useful to exercise compensation in tests.
    pub fn with_precheck(mut self, precheck: bool) -> InProcess {
        self.precheck = precheck;
        self
    }

    /// How many checks had to compensate a take (step 3): a race between callers.
    pub fn compensations(&self) -> u64 {
        // Relaxed: a statistic.
        self.compensations.load(Ordering::Relaxed)
    }

    /// In a denied check, replaces each admitting tier's answer (which describes the state
    /// *after* the request) by its current state (a zero-cost peek): the request was not
    /// admitted, so headers must not count it.
    fn current_state(plan: &Plan<'_>, outcomes: &mut [TierOutcome], now: Nanos) {
        for (p, outcome) in plan.iter().zip(outcomes.iter_mut()) {
            if outcome.decision.allowed {
                if let Ok(current) = p.tier.store.peek(p.key, now, 0) {
                    outcome.decision = current;
                }
            }
        }
    }

    /// Compensates the takes of the fast path's step 2 (step 3 of the scheme), counting it
    /// if there was any: see [`give_back`](Self::give_back).
    #[cold]
    fn undo_prepared(&self, plan: &Plan<'_>, prepared: &[Prepared<'_>], taken: u32, now: Nanos) {
        if taken != 0 {
            // Relaxed: a statistic.
            self.compensations.fetch_add(1, Ordering::Relaxed);
            Self::give_back(plan, prepared, taken, now);
        }
    }

    /// Undoes the takes of the fast path's step 2 (made at `now`): tier `i`'s if bit `i` of
    /// `taken` is set, with the receipt of `prepared[i]`.
    #[cold]
    fn give_back(plan: &Plan<'_>, prepared: &[Prepared<'_>], taken: u32, now: Nanos) {
        for (i, (p, prepared)) in plan.iter().zip(prepared).enumerate() {
            if taken & (1 << i) != 0 {
                if let Some(receipt) = prepared.receipt(&p.tier.store) {
                    p.tier.store.compensate(p.key, receipt, p.cost, now);
                }
            }
        }
    }

    /// Compensates the takes (made at `now`) recorded in `receipts` for the tiers of `plan`.
    fn undo(plan: &Plan<'_>, receipts: &[Option<Receipt>], now: Nanos) {
        for (p, receipt) in plan.iter().zip(receipts) {
            if let Some(receipt) = *receipt {
                p.tier.store.compensate(p.key, receipt, p.cost, now);
            }
        }
    }
}

impl InProcess {
    /// Step 2 of the scheme, then step 3 if needed: takes every tier in order through
    /// `take(i, tier, decision)` (which writes tier `i`'s decision and returns its
    /// receipt); if one denies, compensates the tiers already taken and reports every tier
    /// as it is now.
    #[inline(always)]
    fn take_all(
        &self,
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
        mut take: impl FnMut(
            usize,
            &PlannedTier<'_>,
            &mut Decision,
        ) -> Result<Option<Receipt>, InsufficientCapacity>,
    ) -> Result<(), InsufficientCapacity> {
        let mut receipts: [Option<Receipt>; MAX_TIERS] = [None; MAX_TIERS];
        for (i, p) in plan.iter().enumerate() {
            match take(i, p, &mut outcomes[i].decision) {
                Ok(receipt) => receipts[i] = receipt,
                Err(e) => {
                    Self::undo(plan, &receipts[..i], now);
                    return Err(e);
                }
            }
            if !outcomes[i].decision.allowed {
                if receipts[..i].iter().any(Option::is_some) {
                    // Relaxed: a statistic.
                    self.compensations.fetch_add(1, Ordering::Relaxed);
                }
                Self::undo(plan, &receipts[..i], now);
                // Report the other tiers as they are now (after the undo).
                for (j, p) in plan.iter().enumerate().skip(i + 1) {
                    outcomes[j].decision = p.tier.store.peek(p.key, now, p.cost)?;
                }
                Self::current_state(plan, outcomes, now);
                return Ok(());
            }
        }
        Ok(())
    }

    /// The general path: prechecks tiers 2..n with peeks, then takes every tier.
    #[inline(never)]
    fn check_general(
        &self,
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity> {
        // The first tier needs no precheck: if its take denies, nothing has been taken.
        if self.precheck && plan.len() > 1 {
            let mut denied = false;
            for (i, p) in plan.iter().enumerate().skip(1) {
                let decision = p.tier.store.peek(p.key, now, p.cost)?;
                denied |= !decision.allowed;
                outcomes[i].decision = decision;
            }
            if denied {
                if let Some(p) = plan.get(0) {
                    outcomes[0].decision = p.tier.store.peek(p.key, now, p.cost)?;
                }
                Self::current_state(plan, outcomes, now);
                return Ok(());
            }
        }
        self.take_all(plan, now, outcomes, |_, p, out| {
            let (decision, receipt) = p.tier.store.take(p.key, now, p.cost)?;
            *out = decision;
            Ok(receipt)
        })
    }
}

impl InProcess {
    /// The fast path's step 2 after tier `i`'s commit recorded nothing although the tier
    /// admits, or could not run (`committed`: a deny decided again, an error, or the key
    /// gone), the tiers in `taken` having recorded theirs: compensates them (step 3) and
    /// reports, or starts over on the general path.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn commit_failed(
        &self,
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
        prepared: &[Prepared<'_>],
        i: usize,
        committed: Option<Result<bool, InsufficientCapacity>>,
        taken: u32,
    ) -> Result<(), InsufficientCapacity> {
        match committed {
            Some(Ok(_)) => {
                // Another caller took the last permit since step 1: compensate.
                self.undo_prepared(plan, prepared, taken, now);
                // Report the other tiers as they are now (after the undo).
                for (j, p) in plan.iter().enumerate().skip(i + 1) {
                    outcomes[j].decision = p.tier.store.peek(p.key, now, p.cost)?;
                }
                Self::current_state(plan, outcomes, now);
                Ok(())
            }
            Some(Err(e)) => {
                Self::give_back(plan, prepared, taken, now);
                Err(e)
            }
            None => {
                // The key left the table since step 1: give back what was taken and
                // start over on the general path.
                self.undo_prepared(plan, prepared, taken, now);
                self.check_general(plan, now, outcomes)
            }
        }
    }
}

impl Store for InProcess {
    /// Every tier resident in a single-word table (the steady state) takes a fast path:
    /// the precheck decides every tier (the first included) on the state it reads and
    /// remembers that state, so the take that follows is one compare-and-swap per tier
    /// with no second decision, unless another caller wrote the key in between. Anything
    /// else (a new key, a log tier, a single tier, the precheck off) takes the general
    /// path.
    #[inline]
    fn check(
        &self,
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity> {
        if !self.precheck || plan.len() < 2 {
            return self.check_general(plan, now, outcomes);
        }
        // Exactly the plan's outcomes (the caller gives at least as many), so the loops
        // below walk plan, outcomes and slots together with no bounds check.
        let outcomes = &mut outcomes[..plan.len()];
        // Not cleared: the hot path writes only the plan's tiers.
        let mut prepared = ArrayVec::<Prepared<'_>, MAX_TIERS>::new_const();
        let mut denied = false;
        let mut located = true;
        for (entry, outcome) in plan.entries().iter().zip(outcomes.iter_mut()) {
            let p = &entry.tier;
            let ready = match entry.at {
                Some(spot) => spot.prepare(p.key, now, p.cost, &mut outcome.decision),
                None => None,
            };
            let Some(ready) = ready else {
                located = false;
                break;
            };
            // As many as the plan's entries, at most MAX_TIERS: this never refuses.
            let _ = prepared.try_push(ready?);
            denied |= !outcome.decision.allowed;
        }
        if !located {
            return self.check_general(plan, now, outcomes);
        }
        let prepared: &mut [Prepared<'_>] = &mut prepared;
        if denied {
            Self::current_state(plan, outcomes, now);
            return Ok(());
        }
        // Bit i: tier i recorded its take (the receipt is `prepared[i]`'s).
        let mut taken = 0u32;
        // All of one length (every tier was prepared), so indexing checks no bound.
        let n = prepared.len();
        let (entries, outcomes) = (&plan.entries()[..n], &mut outcomes[..n]);
        for i in 0..n {
            let p = &entries[i].tier;
            let out = &mut outcomes[i].decision;
            // The common case inline (the slot unchanged since step 1); the tier's store is
            // asked only when the key must be looked up again.
            let committed = match prepared[i].try_commit() {
                Some(recorded) => Some(Ok(recorded)),
                None => p
                    .tier
                    .store
                    .commit_again(p.key, now, p.cost, &mut prepared[i], out),
            };
            match committed {
                Some(Ok(true)) => taken |= 1 << i,
                Some(Ok(false)) if out.allowed => {}
                committed => {
                    return self.commit_failed(plan, now, outcomes, prepared, i, committed, taken)
                }
            }
        }
        Ok(())
    }

    fn peek(
        &self,
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity> {
        for (p, outcome) in plan.iter().zip(outcomes.iter_mut()) {
            outcome.decision = p.tier.store.peek(p.key, now, p.cost)?;
        }
        Ok(())
    }

    fn refund(&self, plan: &Plan<'_>, now: Nanos) {
        for p in plan {
            p.tier.store.refund(p.key, now, p.cost);
        }
    }

    fn charge(&self, plan: &Plan<'_>, now: Nanos) {
        for p in plan {
            p.tier.store.charge(p.key, now, p.cost);
        }
    }
}

/// The in-process store never waits: each future runs the synchronous operation when first
/// polled, and is then ready.
impl AsyncStore for InProcess {
    async fn check_async<'a>(
        &'a self,
        plan: &'a Plan<'a>,
        now: Nanos,
        outcomes: &'a mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity> {
        self.check(plan, now, outcomes)
    }

    async fn peek_async<'a>(
        &'a self,
        plan: &'a Plan<'a>,
        now: Nanos,
        outcomes: &'a mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity> {
        self.peek(plan, now, outcomes)
    }

    async fn refund_async<'a>(&'a self, plan: &'a Plan<'a>, now: Nanos) {
        self.refund(plan, now)
    }

    async fn charge_async<'a>(&'a self, plan: &'a Plan<'a>, now: Nanos) {
        self.charge(plan, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{PolicyConfig, RuleSet};

    /// A plan fills its slots in order, refuses past [`MAX_TIERS`], and (copied, iterated,
    /// formatted) reads only the slots it filled.
    #[test]
    fn a_plan_reads_only_the_tiers_pushed() {
        let set = RuleSet::compile(
            &PolicyConfig::from_toml(
                "[[rules]]\nname = \"d\"\n[[rules.tiers]]\nname = \"a\"\nlimit = 1\nwindow = \"1s\"\n[[rules.tiers]]\nname = \"b\"\nlimit = 2\nwindow = \"1s\"\n",
            )
            .unwrap(),
        )
        .unwrap();
        let rule = &set.rules()[0];
        let planned = |i: usize| PlannedTier {
            rule,
            tier: &rule.tiers()[i % 2],
            key: i as u64,
            client: "c",
            cost: 1,
        };
        let mut plan = Plan::new();
        assert!(plan.is_empty() && plan.iter().next().is_none() && plan.get(0).is_none());
        assert!(plan.push_located(planned(0), None));
        assert!(plan.push_located(planned(1), None));
        let copy = plan.clone();
        assert_eq!(copy.len(), 2);
        assert_eq!(copy.iter().map(|p| p.key).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(copy.get(1).map(|p| p.tier.name()), Some("b"));
        assert!(copy.get(2).is_none());
        assert_eq!(format!("{copy:?}").matches("PlannedTier").count(), 2);
        for i in 2..MAX_TIERS {
            assert!(plan.push_located(planned(i), None));
        }
        assert!(!plan.push_located(planned(MAX_TIERS), None));
        assert_eq!(plan.iter().len(), MAX_TIERS);
        assert_eq!(
            plan.iter().last().map(|p| p.key),
            Some(MAX_TIERS as u64 - 1)
        );
    }
}
