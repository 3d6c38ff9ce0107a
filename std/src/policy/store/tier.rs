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
//! version by the store that holds them. Nothing waits:
//!
//! 1. before the new set is published, the old store is *retired*: it inserts no key any
//!    more. A check still on the old set (one that started before the reload, or an awaited
//!    one suspended across it) keeps working on the keys the old store holds; a key it
//!    does not find there it looks for in the successor (a take, charge, refund or peek
//!    follows the successor link, and its receipt records the hop);
//! 2. from then on a miss in the successor reads the key from the newest older generation
//!    that holds it, converted per [`Policy::reload`](super::Policy::reload)'s rules at the
//!    request's time: a peek or a deny leaves it there (read again, converted again, next
//!    time), a request that records something *carries* it over (extracts it from the old
//!    generation and inserts it converted, then records). That is exactly when the Redis
//!    store rewrites a state of another version, so both stores answer a trace with reloads
//!    identically (`tests/redis_policy.rs`).
//!
//! A carry runs as the seed of the successor's insert, under the successor's shard lock for
//! that key, so carriers of one key take turns and it moves exactly once (older generations
//! are locked after newer ones, never the other way); the extraction is linearizable with
//! the old store's lock-free updates (every update still under way fails its
//! compare-and-swap and looks again, finds the key gone and follows the successor link).
//! So an admission recorded in the old store is either in the state carried over or lands
//! in the successor, never lost. A take that a check on the old set must *undo* (another
//! tier denied) after its key was carried is undone in the store that holds the key now: as
//! a refund of the same cost at the take's time, which gives back exactly what the take
//! added to the converted state (conversions carry the permits used, rounded toward the
//! stricter side); all-or-nothing holds across a reload (loom-checked: a take, a reload that
//! converts through a lowered limit, the undo; two checks on both sides of a reload; a check
//! suspended across a reload; and a broken twin that retires the old store only after the
//! new set is visible). Checks of keys a store already holds stay lock-free throughout.
//!
//! An old generation is dropped at a later reload once nothing live is left in it (every
//! key carried, or idle: an idle state converts to a fresh one) and no check or decision
//! may still write to it (every rule set that used it is gone: see
//! [`Published`](super::super::published::Published)); at most [`MAX_GENERATIONS`] are kept
//! per tier: past that, the oldest's live keys are carried over at that reload. So a tier
//! holds at most `MAX_GENERATIONS + 1` tables, plus those of generations an old check still
//! works on, and between reloads the replaced table of a changed tier stays allocated.

use std::sync::{Arc, OnceLock, Weak};

use tollgate_core::{
    Algorithm, AnyAlgorithm, Decision, InsufficientCapacity, Nanos, Outcome, PackedAlgorithm,
    SlidingWindowLog,
};

use super::cell::{Log, Receipt, TierCell};
use super::log::LogCells;
use crate::keyed::{Geometry, KeyedBuildError, Loc, Mode, Seen, Table, Upsert};
use crate::sync::{lock, AtomicBool, AtomicU64, Mutex, Ordering, SwapCell};
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

/// What a take recorded, and in which store (by [`TierStore::id`]: the one the policy asked,
/// or a successor when a reload retired that one mid-check).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct TakeReceipt {
    receipt: Receipt,
    store: u64,
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

    /// The receipt of the take that recorded it (step 2 of a two-step take) in the store
    /// `store` (the one whose spot prepared it), if it wrote.
    #[inline]
    pub(crate) fn receipt(&self, store: &TierStore) -> Option<TakeReceipt> {
        self.next.map(|after| TakeReceipt {
            receipt: Receipt::Word {
                before: self.state,
                after,
            },
            store: store.id,
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
    /// The generation number of the rule set that replaced this store (see `retire`): the
    /// sets older than it may still use it.
    retired_at: AtomicU64,
    /// The store that replaced this one (set before `retired`; weak, see `succeed`).
    successor: Mutex<Option<Weak<TierStore>>>,
    /// The tier's stores across reloads (set when a reload first replaces one of them).
    lineage: OnceLock<Arc<Lineage>>,
    /// This store's number, unique in the process.
    id: u64,
    /// Whether `predecessor` may still hold entries to carry over (a hint for misses).
    migrating: AtomicBool,
    /// The store this one replaced (through its own `predecessor`, older generations too),
    /// while any of them may hold a live entry; read lock-free by misses.
    predecessor: SwapCell<Option<Arc<TierStore>>>,
}

/// The stores of one tier across reloads: which is the newest, for a store whose direct
/// successor is gone (a reload dropped it from the chain) to find where its keys went.
#[derive(Debug, Default)]
struct Lineage {
    newest: Mutex<Weak<TierStore>>,
}

/// Numbers every tier store (for receipts: the store a take landed in).
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The most older generations a tier keeps after reloads (see
/// [`TierStore::trim`]).
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
            retired_at: AtomicU64::new(0),
            successor: Mutex::new(None),
            lineage: OnceLock::new(),
            // Relaxed: only uniqueness matters.
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            migrating: AtomicBool::new(false),
            predecessor: SwapCell::from_pointee(None),
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

    /// `step(store)` on this store, then on its successor, its successor's successor…, until
    /// one answers; `None` if the chain of successors ends first. A loop, not a recursion: a
    /// check of an old rule set may be many reloads behind.
    fn along_successors<R>(&self, mut step: impl FnMut(&TierStore) -> Option<R>) -> Option<R> {
        if let Some(answer) = step(self) {
            return Some(answer);
        }
        let mut store = self.successor()?;
        loop {
            if let Some(answer) = step(&store) {
                return Some(answer);
            }
            store = store.successor()?;
        }
    }

    /// The key states, allocated on first use, unless this store is retired (it will never
    /// insert a key) and was never used (so holds none): then `None`, and nothing is
    /// allocated for it.
    #[inline]
    fn cells_unless_retired_unused(&self) -> Option<&Cells> {
        match self.cells.get() {
            Some(cells) => Some(cells),
            None if self.is_retired() => None,
            None => Some(self.cells()),
        }
    }

    /// The algorithm every key of this store runs.
    pub(crate) fn algorithm(&self) -> &AnyAlgorithm {
        &self.algorithm
    }

    /// Makes this (not yet published) store the successor of `old`, which the reload then
    /// [`retire`](Self::retire)s before it publishes the set holding this one.
    pub(crate) fn succeed(self: &Arc<Self>, old: &Arc<TierStore>) {
        self.predecessor.store(Arc::new(Some(Arc::clone(old))));
        // Release: pairs with the Acquire load in `predecessor`.
        self.migrating.store(true, Ordering::Release);
        // Weak: the successor holds its predecessor (strongly, until a later reload drops
        // it); a strong link back would make the two a cycle that is never freed.
        *lock(&old.successor) = Some(Arc::downgrade(self));
        // Set once: a store is made a successor by one reload only. (The lineage's newest
        // becomes this store when `old` is retired: see `retire`.)
        let _ = self
            .lineage
            .set(Arc::clone(old.lineage.get_or_init(Arc::default)));
    }

    /// Retires this store, replaced by a store of the set of generation `generation`
    /// (before that set is published): from now on it inserts no key (a miss goes to the
    /// successor), so keys may move out of it, each on its first touch, converted then (as
    /// the Redis store converts a state written under another version when it reads it).
    pub(crate) fn retire(&self, generation: u64) {
        // Relaxed: read by reloads only, which are serialized after this one.
        self.retired_at.store(generation, Ordering::Relaxed);
        // Release: pairs with the Acquire load in `is_retired`: whoever finds this store
        // retired finds its successor set.
        self.retired.store(true, Ordering::Release);
        // Only now is the successor the tier's newest: a check reaching it through the
        // lineage (from a generation long unlinked) must find every store older than it
        // retired, or it could insert a key there while a check of the rules in force
        // inserts the same key into this store (two states for one key).
        if let (Some(next), Some(lineage)) = (lock(&self.successor).clone(), self.lineage.get()) {
            *lock(&lineage.newest) = next;
        }
    }

    /// Whether a reload made this store a successor of one it has not retired yet (only
    /// between a reload's `succeed` and its `retire`).
    pub(crate) fn replaces_unretired(&self) -> Option<Arc<TierStore>> {
        self.predecessor().filter(|old| !old.is_retired())
    }

    /// Drops the older generations that hold nothing live any more and that no check or
    /// decision can still write to (`oldest_held`: the oldest generation number of a rule
    /// set still in use; a generation retired at `g` is used only by sets older than `g`).
    /// An old generation is a table of the size it had; more than [`MAX_GENERATIONS`] are
    /// not kept once they may go: the oldest ones' live keys are carried over now.
    pub(crate) fn trim(&self, now: Nanos, oldest_held: u64) {
        let Some(direct) = self.predecessor() else {
            return;
        };
        // The chain, newest first.
        let mut chain = vec![direct];
        while let Some(older) = chain.last().and_then(|g| g.predecessor()) {
            chain.push(older);
        }
        // From the oldest. One that no rule set in use can write to any more (every set
        // older than the reload that retired it is gone) and that holds nothing live is
        // dropped: its entries are fresh states, an idle state stays idle, and nothing writes
        // to a retired store once the sets that used it are gone. The store just retired is
        // not scanned (its keys have had no time to move or go idle; a later reload looks),
        // only dropped if empty. Past MAX_GENERATIONS the oldest goes anyway: its live keys
        // come here first, and if an old set may still write to it, every key it holds
        // leaves it (an idle one is dropped), so that nothing can land in it once unlinked:
        // a later access from that set misses there and follows the successor link (or, the
        // successor gone too, the tier's newest store: see `Lineage`).
        while let Some(oldest) = chain.last() {
            // Relaxed: written by an earlier reload, which this one follows (reloads are
            // serialized).
            let unused = oldest.retired_at.load(Ordering::Relaxed) <= oldest_held;
            let over = chain.len() > MAX_GENERATIONS;
            let leaving = if unused {
                if chain.len() == 1 && oldest.len() > 0 && !over {
                    break;
                }
                let live = oldest.held_keys(Some(now));
                if !live.is_empty() && !over {
                    break;
                }
                live
            } else if over {
                oldest.held_keys(None)
            } else {
                break;
            };
            for h in leaving {
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
                        store: self.id,
                    });
                    (outcome.next, Ok((outcome.decision, receipt)))
                }
                Err(e) => (None, Err(e)),
            };
            if let Some(taken) = table.update_if_found(key, decide) {
                return taken;
            }
        }
        self.take_h(key, now, cost)
    }

    /// The general path of a take: here, or (this store retired and the key not here) in
    /// the successor that holds it now, following successor links.
    #[inline(never)]
    fn take_h(
        &self,
        h: u64,
        now: Nanos,
        cost: u32,
    ) -> Result<(Decision, Option<TakeReceipt>), InsufficientCapacity> {
        self.along_successors(|store| store.take_here(h, now, cost))
            .unwrap_or_else(|| Ok((no_room(self.algorithm.limit()), None)))
    }

    /// [`take_h`](Self::take_h) in this store; `None` if this store is retired and does not
    /// hold the key.
    fn take_here(
        &self,
        h: u64,
        now: Nanos,
        cost: u32,
    ) -> Option<Result<(Decision, Option<TakeReceipt>), InsufficientCapacity>> {
        let cells = self.cells_unless_retired_unused()?;
        let stamp = |(decision, receipt): (Decision, Option<Receipt>)| {
            (
                decision,
                receipt.map(|receipt| TakeReceipt {
                    receipt,
                    store: self.id,
                }),
            )
        };
        let upsert = match cells {
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
                    return Some(taken.map(stamp));
                }
                // Retired: a key it does not hold lives on in the successor (whose miss
                // looks in this store's older generations too).
                if self.is_retired() {
                    return None;
                }
                let old = self.predecessor();
                if let Some(cell) = old.as_ref().and_then(|old| self.converted(old, h, now)) {
                    // A key still in an older generation moves only when this take records
                    // something (as the Redis store rewrites a state of another version
                    // only when it writes): a deny decides on the converted state and
                    // leaves it where it is.
                    match algorithm.decide(cell.word(), now, cost) {
                        Ok(Outcome {
                            decision,
                            next: None,
                        }) => return Some(Ok((decision, None))),
                        Err(e) => return Some(Err(e)),
                        Ok(_) => {}
                    }
                }
                self.upsert_word(table, algorithm, h, now, old.as_ref(), decide)
            }
            Cells::Logs { cells, params } => {
                let take = |log: &mut Log| log.take(params, now, cost);
                if let Some(taken) = cells.find(h, take) {
                    return Some(taken.map(stamp));
                }
                if self.is_retired() {
                    return None;
                }
                let old = self.predecessor();
                if let Some(cell) = old.as_ref().and_then(|old| self.converted(old, h, now)) {
                    // As for single-word tiers: only a take that records moves the key.
                    let decision = match cell.peek(&self.algorithm, now, cost) {
                        Ok(decision) => decision,
                        Err(e) => return Some(Err(e)),
                    };
                    if !decision.allowed || cost == 0 {
                        return Some(Ok((decision, None)));
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
            Upsert::Done(taken) => Some(taken.map(stamp)),
            Upsert::Closed => None,
            Upsert::Full => Some(Ok((no_room(self.algorithm.limit()), None))),
        }
    }

    /// Records `cost` permits for `key` at `now` whatever the limit says (work already
    /// done: a reservation settled above its estimate). Inserts the key if needed.
    pub(crate) fn charge(&self, key: u64, now: Nanos, cost: u32) {
        self.along_successors(|store| store.charge_here(key, now, cost));
    }

    /// [`charge`](Self::charge) in this store; `None` if it is retired and does not hold
    /// the key.
    fn charge_here(&self, key: u64, now: Nanos, cost: u32) -> Option<()> {
        let upsert = match self.cells_unless_retired_unused()? {
            Cells::Words { table, algorithm } => {
                let charge = |state: u64| {
                    let next = algorithm.charge(state, now, cost);
                    ((next != state).then_some(next), ())
                };
                if table.update_if_found(key, charge).is_some() {
                    return Some(());
                }
                let old = self.predecessor();
                self.upsert_word(table, algorithm, key, now, old.as_ref(), charge)
            }
            Cells::Logs { cells, params } => {
                let charge = |log: &mut Log| log.charge(params, now, cost);
                if cells.find(key, charge).is_some() {
                    return Some(());
                }
                let old = self.predecessor();
                cells.with(
                    key,
                    now,
                    || !self.is_retired(),
                    || self.carry(old.as_ref(), key, now),
                    charge,
                )
            }
        };
        match upsert {
            Upsert::Closed => None,
            Upsert::Done(()) | Upsert::Full => Some(()),
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
        self.along_successors(|store| store.peek_here(h, now, cost))
            .unwrap_or_else(|| TierCell::fresh(&self.algorithm).peek(&self.algorithm, now, cost))
    }

    /// [`peek_h`](Self::peek_h) in this store; `None` if it is retired and does not hold
    /// the key (its successor may).
    fn peek_here(
        &self,
        h: u64,
        now: Nanos,
        cost: u32,
    ) -> Option<Result<Decision, InsufficientCapacity>> {
        if let Some(cell) = self.snapshot(h) {
            return Some(cell.peek(&self.algorithm, now, cost));
        }
        // Absent here: a retired store's key may live on in the successor, a migrating
        // store's may still wait in the predecessor.
        if self.is_retired() {
            return None;
        }
        Some(
            match self
                .predecessor()
                .and_then(|old| self.converted(&old, h, now))
            {
                Some(cell) => cell.peek(&self.algorithm, now, cost),
                None => TierCell::fresh(&self.algorithm).peek(&self.algorithm, now, cost),
            },
        )
    }

    /// Undoes a take made at `now` (see the module docs of `store::cell` for exactness). If
    /// the key left the store that recorded the take (a reload retired it and a check on the
    /// new rules carried the key over), the take is undone where the key is now, as a
    /// refund of its cost at `now` (see the module docs).
    pub(crate) fn compensate(&self, key: u64, receipt: TakeReceipt, cost: u32, now: Nanos) {
        self.compensate_h(key, receipt, cost, now);
    }

    fn compensate_h(&self, h: u64, receipt: TakeReceipt, cost: u32, now: Nanos) {
        self.along_successors(|store| {
            if store.id == receipt.store {
                // Absent from a retired store: carried over since the take (a retired store
                // evicts nothing, as it inserts nothing; a key evicted before the reload,
                // while the table was full of live keys, forgot its use with it, take
                // included): undone where the key is now, as a refund.
                if !store.undo_here(h, receipt.receipt, cost) {
                    if let Some(next) = store.successor() {
                        next.refund_h(h, now, cost);
                    }
                }
                return Some(());
            }
            // Not retired: the store in force, past where the take landed, which is gone (a
            // reload dropped it, its keys carried here first).
            if !store.is_retired() {
                store.refund_h(h, now, cost);
                return Some(());
            }
            None
        });
    }

    /// Undoes a take's `receipt` on `h` here (exact when nothing else wrote since); whether
    /// `h` was here, or this store is not retired (nothing to forward then).
    fn undo_here(&self, h: u64, receipt: Receipt, cost: u32) -> bool {
        let found = self.cells.get().is_some_and(|cells| match cells {
            Cells::Words { table, algorithm } => match receipt {
                Receipt::Word { before, after } => table
                    .update_resident(h, |state| {
                        let next = algorithm.undo(state, before, after, cost);
                        ((next != state).then_some(next), ())
                    })
                    .is_some(),
                // A log receipt is only ever made by a log store.
                Receipt::Log { .. } => true,
            },
            Cells::Logs { cells, params } => cells
                .with_existing(h, |log| log.compensate(params, receipt, cost))
                .is_some(),
        });
        found || !self.is_retired()
    }

    /// Gives `cost` permits back to `key` at `now`.
    pub(crate) fn refund(&self, key: u64, now: Nanos, cost: u32) {
        self.refund_h(key, now, cost);
    }

    fn refund_h(&self, h: u64, now: Nanos, cost: u32) {
        self.along_successors(|store| store.refund_here(h, now, cost));
    }

    /// [`refund`](Self::refund) in this store; `None` if it is retired and does not hold
    /// the key (its successor may).
    fn refund_here(&self, h: u64, now: Nanos, cost: u32) -> Option<()> {
        let refund = |cells: &Cells| match cells {
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
        if refund(self.cells_unless_retired_unused()?) {
            return Some(());
        }
        if self.is_retired() {
            return None;
        }
        if self.pull(h, now) {
            refund(self.cells());
        }
        Some(())
    }

    /// Carries `h` over from an older generation now, if one still holds it; whether one
    /// did.
    fn pull(&self, h: u64, now: Nanos) -> bool {
        let Some(old) = self.predecessor() else {
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

    /// The keys it holds whose state is not idle at `now`, or every key it holds if `now`
    /// is `None` (a scan, shard by shard under its lock): what a retired generation still
    /// has to hand over.
    fn held_keys(&self, now: Option<Nanos>) -> Vec<u64> {
        match (self.cells.get(), now) {
            (Some(Cells::Words { table, algorithm }), now) => table
                .resident()
                .into_iter()
                .filter(|&(_, state)| now.is_none_or(|now| !algorithm.is_idle(state, now)))
                .map(|(h, _)| h)
                .collect(),
            (Some(Cells::Logs { cells, .. }), Some(now)) => cells.live_keys(now),
            (Some(Cells::Logs { cells, .. }), None) => cells.keys(),
            (None, _) => Vec::new(),
        }
    }

    /// The predecessor, if a reload replaced one and an older generation may still hold a
    /// live entry. Lock-free.
    fn predecessor(&self) -> Option<Arc<TierStore>> {
        // Acquire: pairs with the Release stores in `succeed` and `trim`.
        if !self.migrating.load(Ordering::Acquire) {
            return None;
        }
        self.predecessor.load().as_ref().clone()
    }

    /// Whether a reload replaced this store.
    fn is_retired(&self) -> bool {
        // Acquire: pairs with the Release store in `succeed` (the successor is set).
        self.retired.load(Ordering::Acquire)
    }

    /// The store that replaced this one: the direct successor while it lives, else (a
    /// later reload dropped it, after carrying its keys on) the tier's newest store.
    fn successor(&self) -> Option<Arc<TierStore>> {
        if let Some(next) = lock(&self.successor).as_ref().and_then(Weak::upgrade) {
            return Some(next);
        }
        let newest = lock(&self.lineage.get()?.newest).upgrade()?;
        (!core::ptr::eq(&*newest, self)).then_some(newest)
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

    /// A reload's steps for this store, no rule set in use any more: retires the store it
    /// replaces, then trims its older generations.
    #[cfg(test)]
    fn settle_for_test(&self, now: Nanos) {
        if let Some(old) = self.replaces_unretired() {
            old.retire(0);
        }
        self.trim(now, u64::MAX);
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
        next.settle_for_test(Nanos::ZERO);
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
        let receipt = prepared.receipt(&store).unwrap();
        assert_eq!(
            store.commit(k, Nanos::ZERO, 1, &mut prepared, &mut out),
            Some(Ok(true))
        );
        assert_eq!(store.peek(k, Nanos::ZERO, 0).unwrap().remaining, 1);
        // Its receipt undoes it exactly.
        store.compensate(k, receipt, 1, Nanos::ZERO);
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

    /// After a reload: a check still on the old store updates keys the old store
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
            new.settle_for_test(Nanos::ZERO);
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
            new.settle_for_test(Nanos::ZERO);
            assert_eq!((old.len(), new.len()), (0, 2));
            assert!(new.predecessor().is_none());
        }
    }

    /// A store reached through its tier's lineage (by a check of an old rule set whose
    /// direct successor is gone) is never one whose predecessor still inserts keys: the
    /// lineage's newest moves to a successor only once its predecessor is retired (else a
    /// check there and a check of the rules in force could each insert the same key, one
    /// of the two states then lost with its generation).
    #[test]
    fn the_newest_of_a_lineage_follows_retirements_not_successions() {
        let newest = |s: &TierStore| {
            lock(&s.lineage.get().unwrap().newest)
                .upgrade()
                .map(|n| n.id)
        };
        let a = Arc::new(TierStore::new(gcra(10, 10), 16).unwrap());
        let b = Arc::new(TierStore::new(gcra(10, 20), 16).unwrap());
        b.succeed(&a);
        assert_eq!(newest(&a), None, "b replaces a, which is not retired yet");
        a.retire(1);
        assert_eq!(newest(&a), Some(b.id));
        let c = Arc::new(TierStore::new(gcra(10, 30), 16).unwrap());
        c.succeed(&b);
        assert_eq!(
            newest(&a),
            Some(b.id),
            "b still inserts: c is not the newest yet"
        );
        b.retire(2);
        assert_eq!(newest(&a), Some(c.id));
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
        new.settle_for_test(Nanos::ZERO);
        let (decision, receipt) = old.take(fingerprint("fresh"), Nanos::ZERO, 2).unwrap();
        assert!(decision.allowed);
        let receipt = receipt.unwrap();
        assert_eq!(receipt.store, new.id);
        old.compensate(fingerprint("fresh"), receipt, 2, Nanos::ZERO);
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
            next.settle_for_test(Nanos::ZERO);
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
        last.settle_for_test(later);
        assert!(generations(&last) <= 1);
        let again = Arc::new(TierStore::new(gcra(10, 31), 100).unwrap());
        again.succeed(&last);
        again.settle_for_test(later);
        assert_eq!(generations(&again), 0);
        assert_eq!(admitted(&again, "kept", 40), 31);
    }
}
