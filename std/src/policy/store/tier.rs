//! [`TierStore`]: one tier's per-key state under one algorithm, and how a reload that
//! changes the tier carries every key's state over to a new store with no lock on the
//! check path.
//!
//! ## Where state lives
//!
//! - **Single-word algorithms** (GCRA, token bucket, leaky bucket, fixed window, sliding
//!   window counter): in the std layer's keyed table, the one behind
//!   [`KeyedLimiter`](crate::KeyedLimiter), allocated whole on the store's first use (so a
//!   config that is only validated, or a tier a reload keeps, allocates nothing): fixed
//!   memory from then on (19.2 bytes per key of capacity; a one-key rule's is ~600 bytes),
//!   lock-free lookups whose only write is one compare-and-swap on the key's word, idle
//!   entries evicted first. A take, a compensation and a refund are each one such CAS loop.
//! - **Sliding window log**: in the same keyed table, whose word for a key is a handle to
//!   the key's slot in a slab of logs allocated with it ([`LogCells`]): a lock-free probe,
//!   then the slot's own mutex over its deque of timestamps (the log is `O(limit)` words and
//!   a compensation removes single entries from it, which no single-word CAS can do). Fixed
//!   memory per key of capacity (the table's and a 48-byte slot), plus each live log.
//!
//! Keys are identified by a 64-bit fingerprint of the key string ([`fingerprint`], seeded
//! randomly per process): two distinct keys share state with probability about
//! `n² / 2⁶⁵` among `n` keys held (≈ 3·10⁻¹⁰ for 100 000).
//!
//! ## Reload: versioned state, converted when first written
//!
//! A store's algorithm never changes: a store *is* one version of its tier (algorithm and
//! numbers). When a reload changes a tier, the new rule set gets a *successor* store,
//! linked to the old one, and the old one's entries stay where they are, tagged with their
//! version by the store that holds them:
//!
//! 1. the reload takes the successor's *gate*, publishes the new set, then waits until no
//!    check that may have loaded the old set is in flight (see
//!    [`Published`](super::in_flight::Published)): the grace period. A check on the new set
//!    that misses a key meanwhile waits on the gate, so no key moves while a check on the
//!    old set might still take from, or undo a take in, the old store;
//! 2. then the old store is *retired* (a check still reaching it, which the grace period
//!    rules out for the policy's own checks, inserts nothing there and continues in the
//!    successor) and the gate let go. From then on a miss reads the key from the newest
//!    older generation that holds it, converted per
//!    [`Policy::reload`](super::Policy::reload)'s rules at the request's time: a peek or a
//!    deny leaves it there (read again, converted again, next time), a request that
//!    records something *carries* it over (extracts it from the old generation and inserts
//!    it converted, then records). That is exactly when the Redis store rewrites a state
//!    of another version, so both stores answer a trace with reloads identically
//!    (`tests/redis_policy.rs`).
//!
//! There is no sweep and no migration lock: a carry runs as the seed of the successor's
//! insert, under the successor's shard lock for that key, so carriers of one key take
//! turns and it moves exactly once (older generations are locked after newer ones, never
//! the other way); checks of keys a store already holds stay lock-free throughout, and a
//! miss after the grace period pays one atomic load to find the predecessor retired. Every
//! admission recorded in the old store is carried, and every take undone on the old set is
//! undone in the old store before its key can move: all-or-nothing holds across a reload
//! (loom-checked: a take, a reload that converts through a capped limit, the undo; two
//! checks on both sides of a reload; and a broken twin without the gate).
//!
//! An old generation is dropped at a later reload once nothing live is left in it (every
//! key carried, or idle: an idle state converts to a fresh one); at most
//! [`MAX_GENERATIONS`] are kept per tier: past that, the oldest's live keys are carried over
//! at that reload. So a tier holds at most `MAX_GENERATIONS + 1` tables, and between
//! reloads the replaced table of a changed tier stays allocated.

use std::sync::{Arc, OnceLock, Weak};

use tollgate_core::{
    Algorithm, AnyAlgorithm, Decision, InsufficientCapacity, Nanos, Outcome, PackedAlgorithm,
    SlidingWindowLog,
};

use super::cell::{Log, Receipt, TierCell};
use super::log::LogCells;
use crate::keyed::{Geometry, KeyedBuildError, Loc, Mode, Seen, Table, Upsert};
use crate::sync::{lock, AtomicBool, Mutex, MutexGuard, Ordering, SwapCell};
use crate::WhenFull;

/// The per-process hasher of policy keys: random, except under loom, whose models must
/// replay the same table layout in every execution.
#[cfg(not(tollgate_loom))]
type FingerprintHasher = foldhash::fast::RandomState;
#[cfg(tollgate_loom)]
type FingerprintHasher = foldhash::fast::FixedState;

/// The 64-bit identity under which every tier store keeps `key`'s state.
#[inline]
pub(crate) fn fingerprint(key: &str) -> u64 {
    use std::hash::BuildHasher;
    static HASHER: OnceLock<FingerprintHasher> = OnceLock::new();
    HASHER.get_or_init(FingerprintHasher::default).hash_one(key)
}

/// What a take recorded, and in which store: `hops` successor links past the store the
/// policy asked (non-zero when a reload retired that store mid-check).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct TakeReceipt {
    receipt: Receipt,
    hops: u8,
}

/// `algorithm.decide(state, now, cost)`, its decision written to `out`, the state to
/// write returned: dispatched here so that each algorithm's transition inlines into the
/// check, and each arm stores its decision into `out` itself. (The core's dispatch is too
/// large to inline, and an outcome merged from several arms travels through a stack slot,
/// written in words and read back in wider moves that the store buffer cannot forward:
/// measured, a stall of a dozen cycles per tier.)
#[inline(always)]
fn decide_into(
    algorithm: &PackedAlgorithm,
    state: u64,
    now: Nanos,
    cost: u32,
    out: &mut Decision,
) -> Result<Option<u64>, InsufficientCapacity> {
    #[inline(always)]
    fn put(
        outcome: Result<Outcome, InsufficientCapacity>,
        out: &mut Decision,
    ) -> Result<Option<u64>, InsufficientCapacity> {
        let outcome = outcome?;
        *out = outcome.decision;
        Ok(outcome.next)
    }
    match algorithm {
        PackedAlgorithm::Gcra(a) => put(a.decide(state, now, cost), out),
        PackedAlgorithm::TokenBucket(a) => put(a.decide(state, now, cost), out),
        PackedAlgorithm::LeakyBucket(a) => put(a.decide(state, now, cost), out),
        PackedAlgorithm::FixedWindow(a) => put(a.decide(state, now, cost), out),
        PackedAlgorithm::SlidingWindowCounter(a) => put(a.decide(state, now, cost), out),
    }
}

/// Where a single-word store's table may hold a key, as [`TierStore::prefetch`] located
/// it: the table, its algorithm and the key's buckets, so that [`prepare`](Self::prepare)
/// neither looks the store's state up nor locates the key again.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Spot<'t> {
    table: &'t Table<()>,
    algorithm: &'t PackedAlgorithm,
    loc: Loc,
}

impl<'t> Spot<'t> {
    /// Step 1 of a two-step take (the in-process store's check of several tiers): decides
    /// `cost` for `key` (the key this spot was located for) at `now` on its current state,
    /// writing the decision to `out` and recording nothing. `None` when the fast path does
    /// not apply (a key not resident, or a probe that raced a move): the caller then takes
    /// the general path.
    #[inline(always)]
    pub(crate) fn prepare(
        self,
        key: u64,
        now: Nanos,
        cost: u32,
        out: &mut Decision,
    ) -> Option<Result<Prepared<'t>, InsufficientCapacity>> {
        let seen = self.table.read_if_found(key, self.loc)?;
        let state = seen.state();
        Some(
            decide_into(self.algorithm, state, now, cost, out).map(|next| Prepared {
                state,
                seen: Some(seen),
                next,
            }),
        )
    }
}

/// What [`Spot::prepare`] decided: the state it decided on, where it read it (so the
/// commit writes without a second lookup) and the state to write (`None`: nothing to write).
#[derive(Copy, Clone, Debug)]
pub(crate) struct Prepared<'t> {
    state: u64,
    seen: Option<Seen<'t>>,
    next: Option<u64>,
}

impl Prepared<'_> {
    /// Step 2 of a two-step take, its fast path: whether it recorded the state step 1
    /// decided (`false`: nothing to record), with one compare-and-swap on the slot step 1
    /// read; `None` if that slot changed since (the store must look the key up again:
    /// [`TierStore::commit_again`]).
    #[inline(always)]
    pub(crate) fn try_commit(&self) -> Option<bool> {
        let Some(next) = self.next else {
            return Some(false);
        };
        self.seen
            .is_some_and(|seen| seen.replace(next))
            .then_some(true)
    }

    /// The receipt of the take that recorded it (step 2 of a two-step take), if it wrote.
    #[inline]
    pub(crate) fn receipt(&self) -> Option<TakeReceipt> {
        self.next.map(|after| TakeReceipt {
            receipt: Receipt::Word {
                before: self.state,
                after,
            },
            hops: 0,
        })
    }
}

/// Where a store keeps its keys' state.
#[derive(Debug)]
enum Cells {
    /// Single-word algorithms: the lock-free keyed table.
    Words {
        table: Table<()>,
        algorithm: PackedAlgorithm,
    },
    /// The sliding window log.
    Logs {
        cells: LogCells,
        params: SlidingWindowLog,
    },
}

/// The keyed state of one tier (see the module docs).
#[derive(Debug)]
pub(crate) struct TierStore {
    algorithm: AnyAlgorithm,
    /// The table's shape for its capacity (validated by `new`).
    geometry: Geometry,
    /// Built on first use, so validating a config, or a reload that keeps this tier (and
    /// so adopts the old store), allocates nothing for it. Under loom, built by `new`
    /// (a lazy initialisation would be invisible to the model checker).
    cells: OnceLock<Cells>,
    /// Set when a reload replaced this store: it inserts no key any more.
    retired: AtomicBool,
    /// The store that replaced this one (set before `retired`; weak, see `succeed`).
    successor: Mutex<Option<Weak<TierStore>>>,
    /// Whether `predecessor` may still hold entries to carry over (a hint for misses).
    migrating: AtomicBool,
    /// The store this one replaced (through its own `predecessor`, older generations too),
    /// while any of them may hold a live entry; read lock-free by misses.
    predecessor: SwapCell<Option<Arc<TierStore>>>,
    /// Held by the reload that made this store a successor from before it publishes the
    /// new set until it retires the predecessor (the grace period): a miss that finds the
    /// predecessor not yet retired waits on it. Never taken otherwise.
    gate: Mutex<()>,
}

/// The most older generations a tier keeps after reloads (see
/// [`TierStore::settle_predecessors`]).
pub(crate) const MAX_GENERATIONS: usize = 4;

/// The first answer `f` gives on `generation` and its older generations, newest first (the
/// direct one borrowed, older ones held only while they are looked at).
fn in_chain<R>(generation: &TierStore, f: &mut impl FnMut(&TierStore) -> Option<R>) -> Option<R> {
    if let Some(found) = f(generation) {
        return Some(found);
    }
    in_chain(&*generation.predecessor()?, f)
}

/// The deny a tier answers when no slot can be made for a new key (not expected with
/// eviction on; see `Table::upsert`): retry at once.
fn no_room(limit: u64) -> Decision {
    Decision::deny(limit, 0, Nanos::ZERO, Nanos::new(1))
}

impl TierStore {
    /// Fresh state for up to `capacity` keys: validated now, its table (and a log tier's
    /// slab) allocated whole on first use, a log tier's logs as keys record.
    pub(crate) fn new(
        algorithm: AnyAlgorithm,
        capacity: usize,
    ) -> Result<TierStore, KeyedBuildError> {
        let geometry = Geometry::new(capacity, None)?;
        let store = TierStore {
            algorithm,
            geometry,
            cells: OnceLock::new(),
            retired: AtomicBool::new(false),
            successor: Mutex::new(None),
            migrating: AtomicBool::new(false),
            predecessor: SwapCell::from_pointee(None),
            gate: Mutex::new(()),
        };
        #[cfg(tollgate_loom)]
        store.cells();
        Ok(store)
    }

    /// The key states, allocated on first use.
    #[inline]
    fn cells(&self) -> &Cells {
        self.cells.get_or_init(|| match self.algorithm {
            AnyAlgorithm::Packed(packed) => {
                let mask_seed = fingerprint("tollgate policy state mask");
                Cells::Words {
                    table: Table::new(self.geometry, Mode::Fingerprint, WhenFull::Evict, mask_seed),
                    algorithm: packed,
                }
            }
            AnyAlgorithm::Log(params) => Cells::Logs {
                cells: LogCells::new(params, self.geometry),
                params,
            },
        })
    }

    /// Starts loading the table buckets that may hold `key` into the cache, without
    /// waiting (a hint: it decides nothing). A check prefetches every tier of its plan
    /// first, so the tiers' cache misses overlap instead of following one another. Does
    /// nothing for a store not yet allocated.
    ///
    /// For a single-word tier, answers where the key lives in its table, for
    /// [`Spot::prepare`] (which then need not locate it again).
    #[inline]
    pub(crate) fn prefetch(&self, key: u64) -> Option<Spot<'_>> {
        match self.cells.get() {
            Some(Cells::Words { table, algorithm }) => Some(Spot {
                table,
                algorithm,
                loc: table.prefetch_located(key),
            }),
            Some(Cells::Logs { cells, .. }) => {
                cells.prefetch(key);
                None
            }
            None => None,
        }
    }

    /// The algorithm every key of this store runs.
    pub(crate) fn algorithm(&self) -> &AnyAlgorithm {
        &self.algorithm
    }

    /// Makes this (not yet published) store the successor of `old`. Nothing moves until
    /// [`settle_predecessors`](Self::settle_predecessors) retires `old`.
    pub(crate) fn succeed(self: &Arc<Self>, old: &Arc<TierStore>) {
        self.predecessor.store(Arc::new(Some(Arc::clone(old))));
        // Release: pairs with the Acquire load in `predecessor`.
        self.migrating.store(true, Ordering::Release);
        // Weak: the successor holds its predecessor (strongly, until a later reload drops
        // it); a strong link back would make the two a cycle that is never freed.
        *lock(&old.successor) = Some(Arc::downgrade(self));
    }

    /// The gate, while the predecessor is not yet retired: a reload holds it through the
    /// grace period (see [`ready_predecessor`](Self::ready_predecessor)).
    pub(crate) fn hold_gate(&self) -> Option<MutexGuard<'_, ()>> {
        let old = self.predecessor()?;
        (!old.is_retired()).then(|| lock(&self.gate))
    }

    /// After the grace period (no check on the old set is in flight): retires the
    /// predecessor, so keys may move (each on its first touch, converted then, as the
    /// Redis store converts a state written under another version when it reads it), and
    /// drops the generations that hold nothing live any more. An old generation is a table
    /// of the size it had; more than [`MAX_GENERATIONS`] are never kept: the oldest ones'
    /// live keys are carried over now.
    pub(crate) fn settle_predecessors(&self, now: Nanos) {
        let Some(direct) = self.predecessor() else {
            return;
        };
        // Release: pairs with the Acquire load in `is_retired`: whoever finds `direct`
        // retired finds its successor set, and (through the reload's wait for the old
        // set's checks) every write those checks made to it.
        direct.retired.store(true, Ordering::Release);
        // The chain, newest first.
        let mut chain = vec![direct];
        while let Some(older) = chain.last().and_then(|g| g.predecessor()) {
            chain.push(older);
        }
        // From the oldest: one that holds nothing live is dropped (its entries are fresh
        // states; an idle state stays idle, and nothing writes to a retired store); past
        // MAX_GENERATIONS, the oldest's live keys come here first. The store just retired
        // is not scanned (its keys have had no time to move or go idle; a later reload
        // looks), only dropped if empty.
        while let Some(oldest) = chain.last() {
            let live = if chain.len() == 1 && oldest.len() > 0 {
                break;
            } else {
                oldest.live_keys(now)
            };
            if !live.is_empty() && chain.len() <= MAX_GENERATIONS {
                break;
            }
            for h in live {
                self.pull(h, now);
            }
            chain.pop();
            let newer = chain.last().map_or(self, |g| &**g);
            newer.predecessor.store(Arc::new(None));
            // Release: a miss that reads `false` (Acquire) needs no predecessor.
            newer.migrating.store(false, Ordering::Release);
        }
    }

    /// Step 2 of a two-step take: records what [`Spot::prepare`] decided, if the
    /// key's state is still the one it decided on (one compare-and-swap on the slot step 1
    /// read, no second lookup and no second decision); else decides again on the state
    /// found (another caller wrote meanwhile, or the key moved), overwriting `out` and
    /// `prepared`. Whether something was recorded (`false`: a deny, or an admit that
    /// writes nothing); `None` if the key is no longer resident (evicted or moved since
    /// step 1, which recorded nothing): the caller takes the general path. (The in-process
    /// store runs the two parts itself: [`Prepared::try_commit`] inline, then
    /// [`commit_again`](Self::commit_again) only if needed.)
    #[cfg(test)]
    pub(crate) fn commit<'t>(
        &'t self,
        key: u64,
        now: Nanos,
        cost: u32,
        prepared: &mut Prepared<'t>,
        out: &mut Decision,
    ) -> Option<Result<bool, InsufficientCapacity>> {
        match prepared.try_commit() {
            Some(recorded) => Some(Ok(recorded)),
            None => self.commit_again(key, now, cost, prepared, out),
        }
    }

    /// Step 2 of a two-step take when [`Prepared::try_commit`] found the slot read in step
    /// 1 changed: looks the key up again, and records what step 1 decided if the state is
    /// unchanged (the key moved), else decides again on the state found, overwriting `out`
    /// and `prepared`. Answers as [`commit`](Self::commit) does.
    #[inline(never)]
    pub(crate) fn commit_again<'t>(
        &'t self,
        key: u64,
        now: Nanos,
        cost: u32,
        prepared: &mut Prepared<'t>,
        out: &mut Decision,
    ) -> Option<Result<bool, InsufficientCapacity>> {
        let Some(Cells::Words { table, algorithm }) = self.cells.get() else {
            return None;
        };
        table.update_if_found(key, |state| {
            // The state decided on (the slot changed, not the state: a move), or the one
            // decided again in an earlier round of this loop.
            if state == prepared.state {
                return (prepared.next, Ok(prepared.next.is_some()));
            }
            match algorithm.decide(state, now, cost) {
                Ok(outcome) => {
                    *out = outcome.decision;
                    *prepared = Prepared {
                        state,
                        seen: None,
                        next: outcome.next,
                    };
                    (outcome.next, Ok(outcome.next.is_some()))
                }
                Err(e) => (None, Err(e)),
            }
        })
    }

    /// Decides `cost` for the key with fingerprint `key` at `now`, recording it if
    /// admitted.
    #[inline]
    pub(crate) fn take(
        &self,
        key: u64,
        now: Nanos,
        cost: u32,
    ) -> Result<(Decision, Option<TakeReceipt>), InsufficientCapacity> {
        // The hot path, inline: a key already resident in a single-word table. Everything
        // else (a new key, a log tier, a store a reload retired) goes to `take_h`.
        if let Some(Cells::Words { table, algorithm }) = self.cells.get() {
            let decide = |state: u64| match algorithm.decide(state, now, cost) {
                Ok(outcome) => {
                    let receipt = outcome.next.map(|after| TakeReceipt {
                        receipt: Receipt::Word {
                            before: state,
                            after,
                        },
                        hops: 0,
                    });
                    (outcome.next, Ok((outcome.decision, receipt)))
                }
                Err(e) => (None, Err(e)),
            };
            if let Some(taken) = table.update_if_found(key, decide) {
                return taken;
            }
        }
        self.take_h(key, now, cost, 0)
    }

    #[inline(never)]
    fn take_h(
        &self,
        h: u64,
        now: Nanos,
        cost: u32,
        hops: u8,
    ) -> Result<(Decision, Option<TakeReceipt>), InsufficientCapacity> {
        let stamp = |(decision, receipt): (Decision, Option<Receipt>)| {
            (
                decision,
                receipt.map(|receipt| TakeReceipt { receipt, hops }),
            )
        };
        let upsert = match self.cells() {
            Cells::Words { table, algorithm } => {
                let decide = |state: u64| match algorithm.decide(state, now, cost) {
                    Ok(outcome) => {
                        let receipt = outcome.next.map(|after| Receipt::Word {
                            before: state,
                            after,
                        });
                        (outcome.next, Ok((outcome.decision, receipt)))
                    }
                    Err(e) => (None, Err(e)),
                };
                // A miss goes on to `upsert`, which looks again under the lock.
                if let Some(taken) = table.update_if_found(h, decide) {
                    return taken.map(stamp);
                }
                let old = self.ready_predecessor();
                if let Some(cell) = old.as_ref().and_then(|old| self.converted(old, h, now)) {
                    // A key still in an older generation moves only when this take records
                    // something (as the Redis store rewrites a state of another version
                    // only when it writes): a deny decides on the converted state and
                    // leaves it where it is.
                    match algorithm.decide(cell.word(), now, cost) {
                        Ok(Outcome {
                            decision,
                            next: None,
                        }) => return Ok((decision, None)),
                        Err(e) => return Err(e),
                        Ok(_) => {}
                    }
                }
                self.upsert_word(table, algorithm, h, now, old.as_ref(), decide)
            }
            Cells::Logs { cells, params } => {
                let take = |log: &mut Log| log.take(params, now, cost);
                if let Some(taken) = cells.find(h, take) {
                    return taken.map(stamp);
                }
                let old = self.ready_predecessor();
                if let Some(cell) = old.as_ref().and_then(|old| self.converted(old, h, now)) {
                    // As for single-word tiers: only a take that records moves the key.
                    let decision = cell.peek(&self.algorithm, now, cost)?;
                    if !decision.allowed || cost == 0 {
                        return Ok((decision, None));
                    }
                }
                cells.with(
                    h,
                    now,
                    || !self.is_retired(),
                    || self.carry(old.as_ref(), h, now),
                    take,
                )
            }
        };
        match upsert {
            Upsert::Done(taken) => taken.map(stamp),
            Upsert::Closed => match self.successor() {
                Some(next) => next.take_h(h, now, cost, hops.saturating_add(1)),
                None => Ok((no_room(self.algorithm.limit()), None)),
            },
            Upsert::Full => Ok((no_room(self.algorithm.limit()), None)),
        }
    }

    /// Records `cost` permits for `key` at `now` whatever the limit says (work already
    /// done: a reservation settled above its estimate). Inserts the key if needed.
    pub(crate) fn charge(&self, key: u64, now: Nanos, cost: u32) {
        let upsert = match self.cells() {
            Cells::Words { table, algorithm } => {
                let charge = |state: u64| {
                    let next = algorithm.charge(state, now, cost);
                    ((next != state).then_some(next), ())
                };
                if table.update_if_found(key, charge).is_some() {
                    return;
                }
                let old = self.ready_predecessor();
                self.upsert_word(table, algorithm, key, now, old.as_ref(), charge)
            }
            Cells::Logs { cells, params } => {
                let charge = |log: &mut Log| log.charge(params, now, cost);
                if cells.find(key, charge).is_some() {
                    return;
                }
                let old = self.ready_predecessor();
                cells.with(
                    key,
                    now,
                    || !self.is_retired(),
                    || self.carry(old.as_ref(), key, now),
                    charge,
                )
            }
        };
        if let Upsert::Closed = upsert {
            if let Some(next) = self.successor() {
                next.charge(key, now, cost);
            }
        }
    }

    /// The decision `cost` would get; records nothing and inserts no key.
    #[inline]
    pub(crate) fn peek(
        &self,
        key: u64,
        now: Nanos,
        cost: u32,
    ) -> Result<Decision, InsufficientCapacity> {
        // The hot path, inline: a key resident in a single-word table. A miss (which may
        // have raced a move) is confirmed by `peek_h`.
        if let Some(Cells::Words { table, algorithm }) = self.cells.get() {
            let peek = |state: u64| (None, algorithm.peek(state, now, cost).map(|o| o.decision));
            if let Some(peeked) = table.update_if_found(key, peek) {
                return peeked;
            }
        }
        self.peek_h(key, now, cost)
    }

    #[inline(never)]
    fn peek_h(&self, h: u64, now: Nanos, cost: u32) -> Result<Decision, InsufficientCapacity> {
        if let Some(cell) = self.snapshot(h) {
            return cell.peek(&self.algorithm, now, cost);
        }
        // Absent here: a retired store's key may live on in the successor, a migrating
        // store's may still wait in the predecessor.
        if self.is_retired() {
            if let Some(next) = self.successor() {
                return next.peek_h(h, now, cost);
            }
        }
        match self
            .predecessor()
            .and_then(|old| self.converted(&old, h, now))
        {
            Some(cell) => cell.peek(&self.algorithm, now, cost),
            None => TierCell::fresh(&self.algorithm).peek(&self.algorithm, now, cost),
        }
    }

    /// Undoes a take (see the module docs of `store::cell` for exactness).
    pub(crate) fn compensate(&self, key: u64, receipt: TakeReceipt, cost: u32) {
        self.compensate_h(key, receipt, cost);
    }

    fn compensate_h(&self, h: u64, receipt: TakeReceipt, cost: u32) {
        if receipt.hops > 0 {
            if let Some(next) = self.successor() {
                let receipt = TakeReceipt {
                    hops: receipt.hops - 1,
                    ..receipt
                };
                next.compensate_h(h, receipt, cost);
            }
            return;
        }
        match self.cells() {
            Cells::Words { table, algorithm } => {
                if let Receipt::Word { before, after } = receipt.receipt {
                    table.update_resident(h, |state| {
                        let next = algorithm.undo(state, before, after, cost);
                        ((next != state).then_some(next), ())
                    });
                }
            }
            Cells::Logs { cells, params } => {
                cells.with_existing(h, |log| log.compensate(params, receipt.receipt, cost));
            }
        }
    }

    /// Gives `cost` permits back to `key` at `now`.
    pub(crate) fn refund(&self, key: u64, now: Nanos, cost: u32) {
        self.refund_h(key, now, cost);
    }

    fn refund_h(&self, h: u64, now: Nanos, cost: u32) {
        let refunded = match self.cells() {
            Cells::Words { table, algorithm } => table
                .update_resident(h, |state| {
                    let next = algorithm.refund(state, now, cost);
                    ((next != state).then_some(next), ())
                })
                .is_some(),
            Cells::Logs { cells, params } => cells
                .with_existing(h, |log| log.refund(params, now, cost))
                .is_some(),
        };
        if refunded {
            return;
        }
        if self.is_retired() {
            if let Some(next) = self.successor() {
                next.refund_h(h, now, cost);
            }
        } else if self.pull(h, now) {
            self.refund_h(h, now, cost);
        }
    }

    /// Carries `h` over from an older generation now, if one still holds it; whether one
    /// did.
    fn pull(&self, h: u64, now: Nanos) -> bool {
        let Some(old) = self.ready_predecessor() else {
            return false;
        };
        let mut carried = false;
        let mut seed = || {
            let cell = self.carry(Some(&old), h, now);
            carried = cell.is_some();
            cell
        };
        match self.cells() {
            Cells::Words { table, algorithm } => {
                table.upsert(
                    h,
                    algorithm,
                    now,
                    || true,
                    || seed().map_or(0, |cell| cell.word()),
                    |_| (None, ()),
                );
            }
            Cells::Logs { cells, .. } => {
                cells.with(h, now, || true, seed, |_| ());
            }
        }
        carried
    }

    /// Runs `f` on `h`'s word in `table` under the shard lock, inserting the key if it is
    /// absent (seeded with its state carried over from the predecessor `old`, converted),
    /// unless this store was retired meanwhile: the locked path of `take` and `charge`.
    fn upsert_word<R>(
        &self,
        table: &Table<()>,
        algorithm: &PackedAlgorithm,
        h: u64,
        now: Nanos,
        old: Option<&Arc<TierStore>>,
        f: impl FnMut(u64) -> (Option<u64>, R),
    ) -> Upsert<R> {
        table.upsert(
            h,
            algorithm,
            now,
            || !self.is_retired(),
            || self.carry(old, h, now).map_or(0, |cell| cell.word()),
            f,
        )
    }

    /// Takes `h`'s entry out of the newest generation from `old` back that holds it and
    /// converts it to this store's algorithm; `None` if none does. Runs under this store's
    /// shard lock for `h` (the seed of an insert), so carriers of one key take turns and it
    /// moves once; older generations are locked after newer ones, never the other way.
    fn carry(&self, old: Option<&Arc<TierStore>>, h: u64, now: Nanos) -> Option<TierCell> {
        in_chain(old?, &mut |generation| {
            // A store never used holds nothing to carry.
            let mut cell = match generation.cells.get()? {
                Cells::Words { table, .. } => TierCell::Word(table.extract(h)?),
                Cells::Logs { cells, .. } => TierCell::Log(cells.extract(h)?),
            };
            cell.convert(&generation.algorithm, &self.algorithm, now);
            Some(cell)
        })
    }

    /// A copy of `h`'s state in the newest generation from `old` back that holds it,
    /// converted to this store's algorithm at `now` (nothing moves). A key moves out of one
    /// generation before it is in a newer one, so the first found is its state.
    fn converted(&self, old: &Arc<TierStore>, h: u64, now: Nanos) -> Option<TierCell> {
        in_chain(old, &mut |generation| {
            let mut cell = generation.snapshot(h)?;
            cell.convert(&generation.algorithm, &self.algorithm, now);
            Some(cell)
        })
    }

    /// A copy of `h`'s state, if held here.
    fn snapshot(&self, h: u64) -> Option<TierCell> {
        match self.cells.get()? {
            Cells::Words { table, .. } => table
                .update_resident(h, |state| (None, state))
                .map(TierCell::Word),
            Cells::Logs { cells, .. } => cells.with_existing(h, |log| TierCell::Log(log.clone())),
        }
    }

    /// The keys whose state is not idle at `now` (a scan, shard by shard under its lock):
    /// what a retired generation still has to hand over.
    fn live_keys(&self, now: Nanos) -> Vec<u64> {
        match self.cells.get() {
            Some(Cells::Words { table, algorithm }) => table
                .resident()
                .into_iter()
                .filter(|&(_, state)| !algorithm.is_idle(state, now))
                .map(|(h, _)| h)
                .collect(),
            Some(Cells::Logs { cells, .. }) => cells.live_keys(now),
            None => Vec::new(),
        }
    }

    /// The predecessor, if a reload replaced one and an older generation may still hold a
    /// live entry. Lock-free.
    fn predecessor(&self) -> Option<Arc<TierStore>> {
        // Acquire: pairs with the Release stores in `succeed` and `settle_predecessors`.
        if !self.migrating.load(Ordering::Acquire) {
            return None;
        }
        self.predecessor.load().as_ref().clone()
    }

    /// [`predecessor`](Self::predecessor), once it is retired: keys of a changed tier
    /// move only after the grace period (a check still on the old set may yet take from,
    /// or undo a take in, the old store), so a miss meanwhile waits for the reload to let
    /// go of the gate. After the grace period: one atomic load, no lock.
    fn ready_predecessor(&self) -> Option<Arc<TierStore>> {
        let old = self.predecessor()?;
        if !old.is_retired() {
            // This store is reachable only through the new set, published after the
            // reload took the gate, which it lets go of once `old` is retired.
            drop(lock(&self.gate));
        }
        Some(old)
    }

    /// Whether a reload replaced this store.
    fn is_retired(&self) -> bool {
        // Acquire: pairs with the Release store in `succeed` (the successor is set).
        self.retired.load(Ordering::Acquire)
    }

    /// The store that replaced this one, while it lives (only checks on the old rule set
    /// reach a retired store, and the grace period waits for them, so a successor that is
    /// gone has nobody left to forward to).
    fn successor(&self) -> Option<Arc<TierStore>> {
        lock(&self.successor).as_ref().and_then(Weak::upgrade)
    }

    /// The most keys it holds.
    pub(crate) fn capacity(&self) -> usize {
        match self.cells.get() {
            Some(Cells::Words { table, .. }) => table.capacity(),
            Some(Cells::Logs { cells, .. }) => cells.capacity(),
            None => self.geometry.capacity,
        }
    }

    /// Keys holding state.
    pub(crate) fn len(&self) -> usize {
        match self.cells.get() {
            Some(Cells::Words { table, .. }) => table.len(),
            Some(Cells::Logs { cells, .. }) => cells.len(),
            None => 0,
        }
    }

    /// Bytes of its state (0 until first use): the table, and for a log tier its slab and
    /// every log's storage.
    pub(crate) fn memory_bytes(&self) -> usize {
        match self.cells.get() {
            Some(Cells::Words { table, .. }) => table.memory_bytes(),
            Some(Cells::Logs { cells, .. }) => cells.memory_bytes(),
            None => 0,
        }
    }

    /// Whether its state has been allocated (it is on first use).
    #[cfg(test)]
    pub(crate) fn is_allocated(&self) -> bool {
        self.cells.get().is_some()
    }

    /// The capacity it was configured with.
    pub(crate) fn configured_capacity(&self) -> usize {
        self.geometry.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_core::AlgorithmConfig;

    fn gcra(limit: u64, burst: u64) -> AnyAlgorithm {
        AlgorithmConfig::Gcra {
            limit,
            period: Nanos::from_secs(60),
            burst,
        }
        .build()
        .unwrap()
    }

    fn log(limit: u64) -> AnyAlgorithm {
        AlgorithmConfig::SlidingWindowLog {
            limit,
            window: Nanos::from_secs(60),
        }
        .build()
        .unwrap()
    }

    fn admitted(store: &TierStore, key: &str, n: usize) -> usize {
        (0..n)
            .filter(|_| {
                store
                    .take(fingerprint(key), Nanos::ZERO, 1)
                    .unwrap()
                    .0
                    .allowed
            })
            .count()
    }

    /// A store allocates nothing until it is used; a peek, or moving an unused store's
    /// (absent) keys, does not allocate it either.
    #[test]
    fn a_store_is_allocated_on_first_use() {
        let store = Arc::new(TierStore::new(gcra(10, 10), 100_000).unwrap());
        assert!(!store.is_allocated());
        assert_eq!(store.memory_bytes(), 0);
        assert_eq!(store.capacity(), 100_000);
        assert!(
            store
                .peek(fingerprint("k"), Nanos::ZERO, 1)
                .unwrap()
                .allowed
        );
        let next = Arc::new(TierStore::new(gcra(20, 20), 100_000).unwrap());
        next.succeed(&store);
        next.settle_predecessors(Nanos::ZERO);
        assert!(!store.is_allocated() && !next.is_allocated());
        assert_eq!(admitted(&next, "k", 30), 20);
        assert!(next.is_allocated());
        assert!(next.memory_bytes() > 100_000 * 19);
    }

    /// The two-step take: a commit records what the prepare decided when the state is
    /// unchanged, and decides again (here: a deny, writing nothing) when another caller
    /// wrote the key in between; a key not resident has no fast path.
    #[test]
    fn commit_records_the_prepared_take_or_decides_again() {
        let store = TierStore::new(gcra(10, 10), 100).unwrap();
        let k = fingerprint("k");
        let mut out = Decision::allow(0, 0, Nanos::ZERO);
        // A store not yet allocated locates nothing; a key not resident has no fast path.
        assert!(store.prefetch(k).is_none());
        assert_eq!(admitted(&store, "k", 8), 8);
        let other = fingerprint("other");
        assert!(store
            .prefetch(other)
            .unwrap()
            .prepare(other, Nanos::ZERO, 1, &mut out)
            .is_none());
        // Unchanged state: one CAS records the prepared take.
        let mut prepared = store
            .prefetch(k)
            .unwrap()
            .prepare(k, Nanos::ZERO, 1, &mut out)
            .unwrap()
            .unwrap();
        assert!(out.allowed && out.remaining == 1);
        let receipt = prepared.receipt().unwrap();
        assert_eq!(
            store.commit(k, Nanos::ZERO, 1, &mut prepared, &mut out),
            Some(Ok(true))
        );
        assert_eq!(store.peek(k, Nanos::ZERO, 0).unwrap().remaining, 1);
        // Its receipt undoes it exactly.
        store.compensate(k, receipt, 1);
        assert_eq!(store.peek(k, Nanos::ZERO, 0).unwrap().remaining, 2);
        assert_eq!(admitted(&store, "k", 1), 1);
        // Another caller takes the last permit between the steps: decided again, denied.
        let mut prepared = store
            .prefetch(k)
            .unwrap()
            .prepare(k, Nanos::ZERO, 1, &mut out)
            .unwrap()
            .unwrap();
        assert!(out.allowed);
        assert_eq!(admitted(&store, "k", 1), 1);
        assert_eq!(
            store.commit(k, Nanos::ZERO, 1, &mut prepared, &mut out),
            Some(Ok(false))
        );
        assert!(!out.allowed);
        assert_eq!(store.peek(k, Nanos::ZERO, 0).unwrap().remaining, 0);
    }

    /// After the grace period: a check still on the old store updates keys the old store
    /// holds, sends keys it does not hold to the successor (never inserting them in the
    /// retired store), and keys move once, with their state, on their first touch; an old
    /// generation with nothing live left is dropped.
    #[test]
    fn retired_store_forwards_misses_and_keys_move_once() {
        for (old_algorithm, new_algorithm) in [
            (gcra(10, 10), gcra(10, 20)),
            (log(10), gcra(10, 20)),
            (gcra(10, 10), log(20)),
        ] {
            let old = Arc::new(TierStore::new(old_algorithm, 100).unwrap());
            assert_eq!(admitted(&old, "a", 4), 4);
            let new = Arc::new(TierStore::new(new_algorithm, 100).unwrap());
            new.succeed(&old);
            // (The grace period is over.)
            new.settle_predecessors(Nanos::ZERO);
            // A key the old store never saw: goes to the successor.
            assert_eq!(admitted(&old, "b", 1), 1);
            assert_eq!((old.len(), new.len()), (1, 1));
            // A key the old store holds: still updated there until it moves.
            assert_eq!(admitted(&old, "a", 1), 1);
            assert_eq!(old.len(), 1);
            // The successor's miss carries it over: 5 of 10 used → 15 of 20 left.
            assert_eq!(
                new.peek(fingerprint("a"), Nanos::ZERO, 1)
                    .unwrap()
                    .remaining,
                14
            );
            assert_eq!(admitted(&new, "a", 1), 1);
            assert_eq!((old.len(), new.len()), (0, 2));
            // Now the old store forwards "a" too; with nothing live left it is dropped.
            assert_eq!(admitted(&old, "a", 100), 14);
            assert!(new.predecessor().is_some());
            new.settle_predecessors(Nanos::ZERO);
            assert_eq!((old.len(), new.len()), (0, 2));
            assert!(new.predecessor().is_none());
        }
    }

    /// Keys stay in the old generation until touched (a peek reads them there, converted,
    /// without moving them), then move with their state; a take undone on the retired store
    /// after the swap is undone in the successor it was forwarded to.
    #[test]
    fn keys_move_on_first_touch_and_receipts_follow_forwarded_takes() {
        let old = Arc::new(TierStore::new(gcra(10, 10), 1000).unwrap());
        let n = if cfg!(miri) { 100 } else { 500 };
        let keys: Vec<String> = (0..n).map(|i| format!("key-{i}")).collect();
        for key in &keys {
            assert_eq!(admitted(&old, key, 3), 3);
        }
        let new = Arc::new(TierStore::new(gcra(10, 20), 1000).unwrap());
        new.succeed(&old);
        new.settle_predecessors(Nanos::ZERO);
        let (decision, receipt) = old.take(fingerprint("fresh"), Nanos::ZERO, 2).unwrap();
        assert!(decision.allowed);
        let receipt = receipt.unwrap();
        assert_eq!(receipt.hops, 1);
        old.compensate(fingerprint("fresh"), receipt, 2);
        assert_eq!(
            new.peek(fingerprint("fresh"), Nanos::ZERO, 0)
                .unwrap()
                .remaining,
            20
        );
        // (The compensated key stays resident, idle: evictable at no loss.)
        assert_eq!((old.len(), new.len()), (keys.len(), 1));
        // The same emission interval, a larger burst: 3 used stay 3 used, 17 left, read
        // in place.
        for key in &keys {
            let peeked = new.peek(fingerprint(key), Nanos::ZERO, 0).unwrap();
            assert_eq!(peeked.remaining, 17, "{key}");
        }
        assert_eq!((old.len(), new.len()), (keys.len(), 1));
        for key in &keys {
            assert_eq!(admitted(&new, key, 20), 17, "{key}");
        }
        assert_eq!((old.len(), new.len()), (0, keys.len() + 1));
    }

    /// Reload after reload of a tier whose key is never touched: at most
    /// `MAX_GENERATIONS` old tables are kept (the oldest's live keys are carried over
    /// then), generations with nothing live are dropped, and the key's state reaches the
    /// newest store converted step by step, never lost.
    #[test]
    fn old_generations_are_bounded_and_dropped_when_idle() {
        let generations = |store: &TierStore| {
            let (mut n, mut older) = (0, store.predecessor());
            while let Some(g) = older {
                n += 1;
                older = g.predecessor();
            }
            n
        };
        let mut stores = vec![Arc::new(TierStore::new(gcra(10, 10), 100).unwrap())];
        assert_eq!(admitted(&stores[0], "kept", 4), 4);
        for burst in 11..=18 {
            let next = Arc::new(TierStore::new(gcra(10, burst), 100).unwrap());
            next.succeed(stores.last().unwrap());
            next.settle_predecessors(Nanos::ZERO);
            stores.push(next);
            let newest = stores.last().unwrap();
            assert!(generations(newest) <= MAX_GENERATIONS);
            // Used 4 at burst 10 and T unchanged: 4 used whatever the burst.
            let remaining = newest.peek(fingerprint("kept"), Nanos::ZERO, 0).unwrap();
            assert_eq!(remaining.remaining, burst - 4, "burst {burst}");
        }
        // Once the key has gone idle (4 permits of 6 s each drain in 24 s), a reload drops
        // every old generation but the one it retires if that one holds keys (it is not
        // scanned yet), and the next reload drops that one too.
        let later = Nanos::from_secs(3600);
        let last = Arc::new(TierStore::new(gcra(10, 30), 100).unwrap());
        last.succeed(stores.last().unwrap());
        last.settle_predecessors(later);
        assert!(generations(&last) <= 1);
        let again = Arc::new(TierStore::new(gcra(10, 31), 100).unwrap());
        again.succeed(&last);
        again.settle_predecessors(later);
        assert_eq!(generations(&again), 0);
        assert_eq!(admitted(&again, "kept", 40), 31);
    }
}
