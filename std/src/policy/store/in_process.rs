//! [`InProcess`], the default [`Store`]: each tier's keys in a bounded lock-free table the
//! store keeps for the tier's state (see `store::tables` and `store::tier`), all or nothing
//! across tiers by precheck, take and exact compensation.

use arrayvec::ArrayVec;
use tollgate_core::{Decision, InsufficientCapacity, Nanos};

use super::tables::Tables;
use super::tier::{Prepared, TakeReceipt as Receipt, TierStore};
use super::{Op, Plan, PlannedTier, ReloadStep, Store};
use crate::policy::{Tier, TierOutcome, MAX_TIERS};
use crate::sync::plain::{AtomicU64, Ordering};

/// The default [`Store`]: state in this process, each tier's keys in a bounded lock-free
/// table of the store's, allocated on the tier's first check (one table per tier state: a
/// reload that keeps a tier's algorithm and capacity keeps its table).
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
/// policy) and one compare-and-swap per tier. That fast path covers keys already held by
/// single-word tiers (the steady state), a plan of one tier included (its key located
/// once, by the check itself: where a key lives is the store's business, not the plan's);
/// a key's first request, a sliding-log tier, or a key that
/// left its table between the steps (whose takes are then given back first) takes the
/// general path: peek every tier but the first (whose take, if it denies,
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
    /// Each tier state's table.
    tables: Tables,
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
            tables: Tables::new(),
        }
    }

    /// Bytes of `tier`'s key state in this store: allocated on the tier's first use (0
    /// before), fixed from then on for single-word algorithms (about 19.2 per key of
    /// capacity; a one-key rule's table is about 600). A sliding-log tier adds a 48-byte
    /// slot per table slot (about 60 per key of capacity) and its live logs, each under
    /// `16 · limit` bytes (a scan).
    ///
    /// ```
    /// use tollgate::policy::{FnClock, Policy};
    /// use tollgate::Nanos;
    /// let policy = Policy::from_toml(
    ///     "capacity = 1000\n[[rules]]\nname = \"api\"\nlimit = 5\nwindow = \"1s\"\n",
    ///     FnClock(|| Nanos::ZERO),
    /// )?;
    /// let set = policy.rule_set();
    /// let tier = &set.rules()[0].tiers()[0];
    /// assert_eq!(policy.backend().memory_bytes(tier), 0);
    /// policy.allow("a", "/", 1)?;
    /// assert!(policy.backend().memory_bytes(tier) > 1000 * 19);
    /// assert_eq!(policy.backend().keys(tier), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn memory_bytes(&self, tier: &Tier) -> usize {
        self.tables.get(tier).map_or(0, |t| t.memory_bytes())
    }

    /// How many keys hold state under `tier` in this store.
    pub fn keys(&self, tier: &Tier) -> usize {
        self.tables.get(tier).map_or(0, |t| t.len())
    }

    /// Turns the precheck (step 1 of the all-or-nothing scheme) off or on. Off, every deny
    /// takes and compensates; only useful to exercise compensation in tests (the crate's
    /// own, and the loom models'), so it exists only in them.
    #[cfg(any(test, tollgate_loom))]
    #[doc(hidden)]
    pub fn with_precheck(mut self, precheck: bool) -> InProcess {
        self.precheck = precheck;
        self
    }

    /// Lets a tier state's first check work on the table it built whether or not that
    /// table became the state's (a loom model's broken twin: two first checks racing each
    /// work on their own table, and both are admitted under a limit of 1).
    #[cfg(tollgate_loom)]
    #[doc(hidden)]
    pub fn loom_build_blind(mut self) -> InProcess {
        self.tables.build_blind = true;
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
    fn current_state(
        plan: &Plan<'_>,
        stores: &[&TierStore],
        outcomes: &mut [TierOutcome],
        now: Nanos,
    ) {
        for ((p, store), outcome) in plan.iter().zip(stores).zip(outcomes.iter_mut()) {
            if outcome.decision.allowed {
                if let Ok(current) = store.peek(p.key, now, 0) {
                    outcome.decision = current;
                }
            }
        }
    }

    /// Compensates the takes of the fast path's step 2 (step 3 of the scheme), counting it
    /// if there was any: see [`give_back`](Self::give_back).
    #[cold]
    fn undo_prepared(
        &self,
        plan: &Plan<'_>,
        stores: &[&TierStore],
        prepared: &[Prepared<'_>],
        taken: u32,
        now: Nanos,
    ) {
        if taken != 0 {
            // Relaxed: a statistic.
            self.compensations.fetch_add(1, Ordering::Relaxed);
            Self::give_back(plan, stores, prepared, taken, now);
        }
    }

    /// Undoes the takes of the fast path's step 2 (made at `now`): tier `i`'s if bit `i` of
    /// `taken` is set, with the receipt of `prepared[i]`.
    #[cold]
    fn give_back(
        plan: &Plan<'_>,
        stores: &[&TierStore],
        prepared: &[Prepared<'_>],
        taken: u32,
        now: Nanos,
    ) {
        for (i, ((p, store), prepared)) in plan.iter().zip(stores).zip(prepared).enumerate() {
            if taken & (1 << i) != 0 {
                if let Some(receipt) = prepared.receipt(store) {
                    store.compensate(p.key, receipt, p.cost, now);
                }
            }
        }
    }

    /// Compensates the takes (made at `now`) recorded in `receipts` for the tiers of `plan`.
    fn undo(plan: &Plan<'_>, stores: &[&TierStore], receipts: &[Option<Receipt>], now: Nanos) {
        for ((p, store), receipt) in plan.iter().zip(stores).zip(receipts) {
            if let Some(receipt) = *receipt {
                store.compensate(p.key, receipt, p.cost, now);
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
        stores: &[&TierStore],
        now: Nanos,
        outcomes: &mut [TierOutcome],
        mut take: impl FnMut(
            &PlannedTier<'_>,
            &TierStore,
            &mut Decision,
        ) -> Result<Option<Receipt>, InsufficientCapacity>,
    ) -> Result<(), InsufficientCapacity> {
        let mut receipts: [Option<Receipt>; MAX_TIERS] = [None; MAX_TIERS];
        for (i, (p, store)) in plan.iter().zip(stores).enumerate() {
            match take(p, store, &mut outcomes[i].decision) {
                Ok(receipt) => receipts[i] = receipt,
                Err(e) => {
                    Self::undo(plan, stores, &receipts[..i], now);
                    return Err(e);
                }
            }
            if !outcomes[i].decision.allowed {
                if receipts[..i].iter().any(Option::is_some) {
                    // Relaxed: a statistic.
                    self.compensations.fetch_add(1, Ordering::Relaxed);
                }
                Self::undo(plan, stores, &receipts[..i], now);
                Self::peek_after(plan, stores, i, now, outcomes)?;
                return Ok(());
            }
        }
        Ok(())
    }

    /// A deny at tier `i`, its takes undone: reports the tiers after it as they are now
    /// (a peek of the request's cost) and the admitting ones before it as they are now.
    fn peek_after(
        plan: &Plan<'_>,
        stores: &[&TierStore],
        i: usize,
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity> {
        for (j, (p, store)) in plan.iter().zip(stores).enumerate().skip(i + 1) {
            outcomes[j].decision = store.peek(p.key, now, p.cost)?;
        }
        Self::current_state(plan, stores, outcomes, now);
        Ok(())
    }

    /// [`check_general`](Self::check_general) on the tables `locate` gives, or, if it
    /// misses one, resolving every table first.
    #[inline(never)]
    fn check_general_located<'s, 't>(
        &self,
        plan: &Plan<'s>,
        locate: impl Fn(usize, &PlannedTier<'s>) -> Option<&'t TierStore>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity> {
        let stores: Option<ArrayVec<&TierStore, MAX_TIERS>> =
            plan.iter().enumerate().map(|(i, p)| locate(i, p)).collect();
        match stores {
            Some(stores) => self.check_general(plan, &stores, now, outcomes),
            None => self.run_resolving(Op::Check, plan, now, outcomes),
        }
    }

    /// The general path: prechecks tiers 2..n with peeks, then takes every tier.
    #[inline(never)]
    fn check_general(
        &self,
        plan: &Plan<'_>,
        stores: &[&TierStore],
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity> {
        // The first tier needs no precheck: if its take denies, nothing has been taken.
        if self.precheck && plan.len() > 1 {
            let mut denied = false;
            for (i, (p, store)) in plan.iter().zip(stores).enumerate().skip(1) {
                let decision = store.peek(p.key, now, p.cost)?;
                denied |= !decision.allowed;
                outcomes[i].decision = decision;
            }
            if denied {
                if let (Some(p), Some(store)) = (plan.get(0), stores.first()) {
                    outcomes[0].decision = store.peek(p.key, now, p.cost)?;
                }
                Self::current_state(plan, stores, outcomes, now);
                return Ok(());
            }
        }
        self.take_all(plan, stores, now, outcomes, |p, store, out| {
            let (decision, receipt) = store.take(p.key, now, p.cost)?;
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
        stores: &[&TierStore],
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
                self.undo_prepared(plan, stores, prepared, taken, now);
                Self::peek_after(plan, stores, i, now, outcomes)
            }
            Some(Err(e)) => {
                Self::give_back(plan, stores, prepared, taken, now);
                Err(e)
            }
            None => {
                // The key left the table since step 1: give back what was taken and
                // start over on the general path.
                self.undo_prepared(plan, stores, prepared, taken, now);
                self.check_general(plan, stores, now, outcomes)
            }
        }
    }
}

impl InProcess {
    /// Every tier resident in a single-word table (the steady state) takes a fast path:
    /// the precheck decides every tier (the first included) on the state it reads and
    /// remembers that state, so the take that follows is one compare-and-swap per tier
    /// with no second decision, unless another caller wrote the key in between. Anything
    /// else (a new key, a log tier, the precheck off) takes the general path.
    ///
    /// `locate(i, tier)` gives tier `i`'s table: found through its state as the loop
    /// reaches it (a policy's steady state), or from a list resolved beforehand. If it
    /// gives none (a tier state's first check through this store), nothing has been
    /// written yet, and the check starts over resolving every table first.
    #[inline]
    fn check<'s, 't>(
        &self,
        plan: &Plan<'s>,
        locate: impl Fn(usize, &PlannedTier<'s>) -> Option<&'t TierStore>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity> {
        if !self.precheck || plan.is_empty() {
            return self.check_general_located(plan, locate, now, outcomes);
        }
        // Exactly the plan's outcomes (the caller gives at least as many), so the loops
        // below walk plan, outcomes and slots together with no bounds check.
        let outcomes = &mut outcomes[..plan.len()];
        let tiers = plan.as_slice();
        // Not cleared: the hot path writes only the plan's tiers.
        let mut prepared = ArrayVec::<Prepared<'_>, MAX_TIERS>::new_const();
        let mut stores = ArrayVec::<&TierStore, MAX_TIERS>::new_const();
        let mut denied = false;
        let mut located = true;
        let mut unknown = false;
        for (i, (p, outcome)) in tiers.iter().zip(outcomes.iter_mut()).enumerate() {
            let Some(store) = locate(i, p) else {
                unknown = true;
                break;
            };
            // As many as the plan's tiers, at most MAX_TIERS: this never refuses.
            let _ = stores.try_push(store);
            // Each key located once, here (where a key lives is the store's business, not
            // the plan's), its buckets' loading started at once. The next tier's lookup
            // does not depend on this tier's state, only on predicted branches, so an
            // out-of-order core overlaps the tiers' cache misses.
            let ready = match store.prefetch(p.key) {
                Some(spot) => spot.prepare(p.key, now, p.cost, &mut outcome.decision),
                None => None,
            };
            let Some(ready) = ready else {
                located = false;
                break;
            };
            // As many as the plan's tiers, at most MAX_TIERS: this never refuses.
            let _ = prepared.try_push(ready?);
            denied |= !outcome.decision.allowed;
        }
        if unknown {
            return self.run_resolving(Op::Check, plan, now, outcomes);
        }
        if !located {
            return self.check_general_located(plan, &locate, now, outcomes);
        }
        let stores: &[&TierStore] = &stores;
        let prepared: &mut [Prepared<'_>] = &mut prepared;
        if denied {
            Self::current_state(plan, stores, outcomes, now);
            return Ok(());
        }
        // Bit i: tier i recorded its take (the receipt is `prepared[i]`'s).
        let mut taken = 0u32;
        // All of one length (every tier was prepared), so indexing checks no bound.
        let n = prepared.len();
        let (tiers, tier_stores, outcomes) = (&tiers[..n], &stores[..n], &mut outcomes[..n]);
        for i in 0..n {
            let p = &tiers[i];
            let out = &mut outcomes[i].decision;
            // The common case inline (the slot unchanged since step 1); the tier's store is
            // asked only when the key must be looked up again (`TierStore::commit`, written
            // out: through it, this loop compiles to 9 more instructions per check).
            let committed = match prepared[i].try_commit() {
                Some(recorded) => Some(Ok(recorded)),
                None => tier_stores[i].commit_again(p.key, now, p.cost, &mut prepared[i], out),
            };
            match committed {
                Some(Ok(true)) => taken |= 1 << i,
                Some(Ok(false)) if out.allowed => {}
                committed => {
                    return self
                        .commit_failed(plan, stores, now, outcomes, prepared, i, committed, taken)
                }
            }
        }
        Ok(())
    }

    /// A check of a plan of one tier `p` (a policy of one rule of one tier: the common
    /// configuration): [`check`](Self::check)'s two steps in a straight line, with no list
    /// of tiers to keep. A denied tier has nothing taken and nothing to report but itself.
    /// Out of line, so that `check`'s loop over several tiers stays as it is compiled
    /// without it.
    #[inline(never)]
    fn check_one<'s, 't>(
        &self,
        plan: &Plan<'s>,
        p: &PlannedTier<'s>,
        locate: impl Fn(usize, &PlannedTier<'s>) -> Option<&'t TierStore>,
        now: Nanos,
        outcome: &mut TierOutcome,
    ) -> Result<(), InsufficientCapacity> {
        let Some(store) = locate(0, p) else {
            return self.run_resolving(Op::Check, plan, now, core::slice::from_mut(outcome));
        };
        let out = &mut outcome.decision;
        let ready = store
            .prefetch(p.key)
            .and_then(|spot| spot.prepare(p.key, now, p.cost, out));
        let Some(ready) = ready else {
            return self.check_general_located(plan, &locate, now, core::slice::from_mut(outcome));
        };
        let mut prepared = ready?;
        if !out.allowed {
            return Ok(());
        }
        match store.commit(p.key, now, p.cost, &mut prepared, out) {
            Some(Ok(true)) => Ok(()),
            Some(Ok(false)) if out.allowed => Ok(()),
            committed => self.commit_failed(
                plan,
                &[store],
                now,
                core::slice::from_mut(outcome),
                core::slice::from_ref(&prepared),
                0,
                committed,
                0,
            ),
        }
    }

    /// Every tier peeked in turn.
    fn peek(
        plan: &Plan<'_>,
        stores: &[&TierStore],
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity> {
        for ((p, store), outcome) in plan.iter().zip(stores).zip(outcomes.iter_mut()) {
            outcome.decision = store.peek(p.key, now, p.cost)?;
        }
        Ok(())
    }

    /// Every tier refunded in turn.
    fn refund(plan: &Plan<'_>, stores: &[&TierStore], now: Nanos) {
        for (p, store) in plan.iter().zip(stores) {
            store.refund(p.key, now, p.cost);
        }
    }

    /// Every tier's key forgotten in turn.
    fn reset(plan: &Plan<'_>, stores: &[&TierStore]) {
        for (p, store) in plan.iter().zip(stores) {
            store.reset(p.key);
        }
    }

    /// Every tier charged in turn.
    fn charge(plan: &Plan<'_>, stores: &[&TierStore], now: Nanos) {
        for (p, store) in plan.iter().zip(stores) {
            store.charge(p.key, now, p.cost);
        }
    }
}

impl InProcess {
    /// `run` on a plan whose tables are not all this store's first of their state (a
    /// tier's first check through it, or a set another store checked first).
    #[cold]
    #[inline(never)]
    fn run_resolving(
        &self,
        op: Op,
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity> {
        let tables = self.tables.resolve(plan);
        let stores: ArrayVec<&TierStore, MAX_TIERS> = tables.iter().map(|t| &***t).collect();
        self.run_on(op, plan, &stores, now, outcomes)
    }

    /// `op` on every tier of `plan`, tier `i` in table `stores[i]`.
    #[inline(always)]
    fn run_on(
        &self,
        op: Op,
        plan: &Plan<'_>,
        stores: &[&TierStore],
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity> {
        match op {
            Op::Check => self.check(plan, |i, _| stores.get(i).copied(), now, outcomes),
            Op::Peek => Self::peek(plan, stores, now, outcomes),
            Op::Refund => {
                Self::refund(plan, stores, now);
                Ok(())
            }
            Op::Charge => {
                Self::charge(plan, stores, now);
                Ok(())
            }
            Op::Reset => {
                Self::reset(plan, stores);
                Ok(())
            }
        }
    }
}

/// One operation, inline into the policy's check (the match folds away for the constant
/// operation a caller names). Never waits: its awaited form is the trait's, ready when
/// first polled.
impl Store for InProcess {
    #[inline(always)]
    fn run(
        &self,
        op: Op,
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity> {
        // Each tier's table, found through its state (see `store::tables`).
        match op {
            Op::Check => match (plan.as_slice(), &mut *outcomes) {
                ([p], [outcome, ..]) if self.precheck => {
                    self.check_one(plan, p, |_, p| self.tables.first(p.tier), now, outcome)
                }
                _ => self.check(plan, |_, p| self.tables.first(p.tier), now, outcomes),
            },
            Op::Peek | Op::Refund | Op::Charge | Op::Reset => match self.tables.find(plan) {
                Some(stores) => self.run_on(op, plan, &stores, now, outcomes),
                None => self.run_resolving(op, plan, now, outcomes),
            },
        }
    }

    fn reload(&self, step: ReloadStep<'_>) {
        match step {
            ReloadStep::Prepare { old, new } => self.tables.prepare(old, new),
            ReloadStep::Publish { new, generation } => self.tables.publish(new, generation),
            ReloadStep::Done {
                new,
                now,
                oldest_held,
            } => self.tables.done(new, now, oldest_held),
        }
    }

    fn memory_bytes(&self, tier: &Tier) -> usize {
        InProcess::memory_bytes(self, tier)
    }
}
