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
//! numbers). When a reload changes a tier, the in-process store gives the new tier's state
//! a *successor* store, linked to the old one (`store::tables`, through
//! [`Store::reload`](super::Store::reload)), and the old one's entries stay where they
//! are, tagged with their version by the store that holds them. Nothing waits:
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
//! [`Published`](super::super::published::Published)); at most
//! [`MAX_GENERATIONS`](generations::MAX_GENERATIONS) are kept per tier: past that, the
//! oldest's live keys are carried over at that reload. So a tier holds at most
//! `MAX_GENERATIONS + 1` tables, plus those of generations an old check still works on, and
//! between reloads the replaced table of a changed tier stays allocated.
//!
//! ## Files
//!
//! - this file: the store, where its state lives, and its size;
//! - [`take`]: a take (the check path), including the two-step take of a multi-tier check;
//! - [`ops`]: the other operations on a key: charge, peek, undo and refund;
//! - [`generations`]: reload generations: succession, retirement, carrying keys over, trimming.

use std::sync::{Arc, OnceLock, Weak};

use tollgate_core::{AnyAlgorithm, Decision, Nanos, PackedAlgorithm, SlidingWindowLog};

use super::cell::Receipt;
use super::log::LogCells;
use crate::keyed::{Geometry, KeyedBuildError, Mode, Table};
use crate::policy::Tier;
use crate::sync::{AtomicBool, AtomicU64, Mutex, SwapCell};
use crate::WhenFull;

mod generations;
mod ops;
mod take;

use generations::Lineage;
pub(crate) use take::Prepared;

/// The per-process seeds of policy keys' fingerprints (foldhash's), random (under loom,
/// whose models must replay the same table layout in every execution, fixed). Kept together
/// with their `OnceLock`'s state on one cache line of their own (a check that finds the
/// caches cold reads one line for them, not foldhash's global seed behind its own lock).
#[cfg(not(tollgate_loom))]
struct Seeds {
    per_hasher: u64,
    shared: foldhash::SharedSeed,
}

/// [`Seeds`], once, on a cache line of their own.
#[cfg(not(tollgate_loom))]
#[repr(align(64))]
struct SeedLine(OnceLock<Seeds>);

#[cfg(not(tollgate_loom))]
impl Seeds {
    fn random() -> Seeds {
        use std::hash::BuildHasher;
        // std's `RandomState` is keyed from the operating system's randomness.
        let random = std::hash::RandomState::new();
        Seeds {
            per_hasher: random.hash_one(0u8),
            shared: foldhash::SharedSeed::from_u64(random.hash_one(1u8)),
        }
    }
}

/// The 64-bit identity under which every tier store keeps `key`'s state.
#[cfg(not(tollgate_loom))]
#[inline]
pub(crate) fn fingerprint(key: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    static SEEDS: SeedLine = SeedLine(OnceLock::new());
    let seeds = SEEDS.0.get_or_init(Seeds::random);
    let mut hasher = foldhash::fast::FoldHasher::with_seed(seeds.per_hasher, &seeds.shared);
    key.hash(&mut hasher);
    hasher.finish()
}

/// The 64-bit identity under which every tier store keeps `key`'s state: fixed under loom.
#[cfg(tollgate_loom)]
pub(crate) fn fingerprint(key: &str) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::default().hash_one(key)
}

/// What a [`TierStore::take`] recorded, and in which store (the one asked, or a successor
/// when a reload retired that one mid-check): what [`TierStore::compensate`] undoes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TakeReceipt {
    receipt: Receipt,
    store: u64,
}

/// Where a store keeps its keys' state.
///
/// `repr(C)`, and the logs boxed, for a check that finds the caches cold: in a
/// [`TierStore`] (whose `cells` come first, on a line of their own), the tag and the
/// table's fields a lookup reads share the first line, and the algorithm shares the third
/// with the `OnceLock`'s state where std lays the `OnceLock` out with its value first, as
/// rustc does today (two lines, not four; its layout is std's to change).
#[derive(Debug)]
#[repr(C)]
enum Cells {
    /// Single-word algorithms: the lock-free keyed table.
    Words {
        table: Table<()>,
        algorithm: PackedAlgorithm,
    },
    /// The sliding window log.
    Logs {
        cells: Box<LogCells>,
        params: SlidingWindowLog,
    },
}

/// The keyed state of one tier (see the module docs): the table the in-process store keeps
/// for each tier, and a building block for a store's own local state (a remote store's
/// fallback while the remote is unreachable).
///
/// Keys are 64-bit fingerprints ([`PlannedTier::key`](crate::policy::PlannedTier::key)). A
/// [`take`](Self::take) decides and records; what it recorded can be undone exactly with
/// [`compensate`](Self::compensate) (a check all or nothing over several tiers).
///
/// ```
/// use tollgate::policy::TierStore;
/// use tollgate::{AlgorithmConfig, Nanos};
///
/// let algorithm = AlgorithmConfig::FixedWindow { limit: 2, window: Nanos::from_secs(1) }.build()?;
/// let store = TierStore::new(algorithm, 1_000)?;
/// let (first, receipt) = store.take(7, Nanos::ZERO, 1)?;
/// assert!(first.allowed);
/// // Undone: the key has its whole limit again.
/// store.compensate(7, receipt.expect("an admitted take records"), 1, Nanos::ZERO);
/// assert_eq!(store.peek(7, Nanos::ZERO, 0)?.remaining, 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
// The key states first, each store on lines of its own (see `Cells`).
#[derive(Debug)]
#[repr(C, align(64))]
pub struct TierStore {
    /// Built on first use, so validating a config, or a reload that keeps this tier (and
    /// so adopts the old store), allocates nothing for it. Under loom, built by `new`
    /// (a lazy initialisation would be invisible to the model checker).
    cells: OnceLock<Cells>,
    algorithm: AnyAlgorithm,
    /// The table's shape for its capacity (validated by `new`).
    geometry: Geometry,
    /// Whether its table keeps the debts of keys evicted under pressure (a single-word
    /// tier's debt summary, sized for one capacity of debts).
    launder_guard: bool,
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

/// Numbers every tier store (for receipts: the store a take landed in).
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The deny a tier answers when no slot can be made for a new key (not expected with
/// eviction on; see `Table::upsert`): retry at once.
fn no_room(limit: u64) -> Decision {
    Decision::deny(limit, 0, Nanos::ZERO, Nanos::new(1))
}

impl TierStore {
    /// Fresh state for up to `capacity` keys: validated now, its table (and a log tier's
    /// slab) allocated whole on first use, a log tier's logs as keys record.
    pub fn new(algorithm: AnyAlgorithm, capacity: usize) -> Result<TierStore, KeyedBuildError> {
        Ok(TierStore::with_geometry(
            algorithm,
            Geometry::new(capacity, None)?,
            false,
        ))
    }

    /// Fresh state for `tier`: its algorithm, its capacity (validated when the tier was
    /// compiled) and its rule's laundering guard (keeping the debts of keys evicted under
    /// pressure: single-word algorithms only, a [debt
    /// summary](crate::KeyedLimiterBuilder::debt_summary) sized for `capacity` debts,
    /// allocated with the table; the rules refuse the guard on a log tier).
    pub(crate) fn for_tier(tier: &Tier) -> TierStore {
        TierStore::with_geometry(*tier.algorithm(), tier.geometry(), tier.launder_guard())
    }

    /// Fresh state of `algorithm`, in a table of shape `geometry`.
    fn with_geometry(
        algorithm: AnyAlgorithm,
        geometry: Geometry,
        launder_guard: bool,
    ) -> TierStore {
        let store = TierStore {
            algorithm,
            geometry,
            launder_guard,
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
        store
    }

    /// The bytes a check reads first (its `cells`, with the word that says they are
    /// built): their address and length (see `policy::warm`).
    #[cfg(not(tollgate_loom))]
    pub(crate) fn warm_bytes(&self) -> (*const u8, usize) {
        (
            core::ptr::addr_of!(self.cells).cast(),
            core::mem::size_of::<OnceLock<Cells>>(),
        )
    }

    /// The key states, allocated on first use.
    #[inline]
    fn cells(&self) -> &Cells {
        self.cells.get_or_init(|| match self.algorithm {
            AnyAlgorithm::Packed(packed) => {
                let mask_seed = fingerprint("tollgate policy state mask");
                // In whole huge pages (a log tier's slab is per slot: its table is not).
                let geometry = self.geometry.in_huge_pages();
                let mut table = Table::new(geometry, Mode::Fingerprint, WhenFull::Evict, mask_seed);
                if self.launder_guard {
                    table.enable_debt_summary(self.geometry.capacity);
                }
                Cells::Words {
                    table,
                    algorithm: packed,
                }
            }
            AnyAlgorithm::Log(params) => Cells::Logs {
                cells: Box::new(LogCells::new(params, self.geometry)),
                params,
            },
        })
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
    pub fn algorithm(&self) -> &AnyAlgorithm {
        &self.algorithm
    }

    /// The most keys it holds.
    #[cfg(test)]
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
}

#[cfg(test)]
mod tests {
    use super::generations::MAX_GENERATIONS;
    use super::*;
    use crate::sync::lock;
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
        // Large enough that an allocated table cannot hide in a small header; smaller under
        // miri, which interprets the zeroing of every slot.
        let capacity = if cfg!(miri) { 2_000 } else { 100_000 };
        let store = Arc::new(TierStore::new(gcra(10, 10), capacity).unwrap());
        assert!(!store.is_allocated());
        assert_eq!(store.memory_bytes(), 0);
        assert_eq!(store.capacity(), capacity);
        assert!(
            store
                .peek(fingerprint("k"), Nanos::ZERO, 1)
                .unwrap()
                .allowed
        );
        let next = Arc::new(TierStore::new(gcra(20, 20), capacity).unwrap());
        next.succeed(&store);
        next.settle_for_test(Nanos::ZERO);
        assert!(!store.is_allocated() && !next.is_allocated());
        assert_eq!(admitted(&next, "k", 30), 20);
        assert!(next.is_allocated());
        assert!(next.memory_bytes() > capacity * 19);
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
        let n = if cfg!(miri) { 32 } else { 500 };
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
