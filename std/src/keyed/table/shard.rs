//! [`Shard`]: one insert lock's worth of the keyed table: its key quota, eviction hand and
//! counters. Lookups never touch it; only inserts, evictions and removals do.

use crate::sync::{AtomicU64, AtomicUsize, Mutex, Ordering};

/// State only the lock holder touches.
#[derive(Debug, Default)]
pub(crate) struct ShardLocal {
    /// The next slot (relative to the shard) the idle sweep looks at: a CLOCK-style hand.
    pub(crate) hand: usize,
}

/// A shard: a contiguous run of buckets guarded by one insert lock.
#[derive(Debug)]
#[repr(align(64))]
pub(crate) struct Shard {
    /// Serialises inserts, evictions and removals in this shard (never taken by a lookup
    /// of a resident key).
    pub(crate) lock: Mutex<ShardLocal>,
    /// The shard's key quota: the keys resident in it (`len`) and the keys it may hold
    /// before drawing on the table's shared pool (`base`), in one word so that another
    /// shard can lower `base` without this shard's lock (`Table::borrow`, under
    /// [`WhenFull::Refuse`](crate::WhenFull::Refuse)) and this shard's own `reserve` sees
    /// both at once:
    ///
    /// ```text
    ///  63                 32 31                  0
    /// +---------------------+---------------------+
    /// |        base         |         len         |
    /// +---------------------+---------------------+
    /// ```
    ///
    /// `len` changes only under `lock` (an insert's `reserve`, an eviction's or removal's
    /// `release`); `base` only ever falls, by one, when it is above `len` (`lend`, under
    /// `Refuse` only). Under `Refuse` every change is one read-modify-write of the word;
    /// otherwise nothing lends, and the lock holder writes it with a load and a store.
    /// Both halves fit: a table holds at most `u32::MAX` keys (`Geometry::MAX_CAPACITY`).
    quota: AtomicU64,
    /// Move sequence: bumped (to odd) before a cuckoo move takes an entry out of its slot
    /// and again (to even) once it is published in its new one, under the lock. A lock-free
    /// lookup that finds nothing trusts "absent" only if this was even before its probe and
    /// unchanged after (see `Table::moved_since`).
    pub(crate) moves: AtomicU64,
    pub(crate) inserts: AtomicU64,
    pub(crate) idle_evictions: AtomicU64,
    pub(crate) pressure_evictions: AtomicU64,
    pub(crate) refusals: AtomicU64,
    pub(crate) removals: AtomicU64,
}

impl Shard {
    /// An empty shard that may hold `base` keys before drawing on the pool.
    pub(crate) fn new(base: usize) -> Shard {
        Shard {
            lock: Mutex::new(ShardLocal::default()),
            quota: AtomicU64::new(pack(0, base)),
            moves: AtomicU64::new(0),
            inserts: AtomicU64::new(0),
            idle_evictions: AtomicU64::new(0),
            pressure_evictions: AtomicU64::new(0),
            refusals: AtomicU64::new(0),
            removals: AtomicU64::new(0),
        }
    }

    /// Adds one to a counter. Called under the shard lock, so a load and a store suffice.
    #[inline]
    pub(crate) fn bump(counter: &AtomicU64) {
        // Relaxed: statistics only; the lock orders the writers, readers want a snapshot.
        counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// Resident keys (relaxed snapshot).
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.quota().0
    }

    /// `(len, base)`, read at one instant (see the field).
    #[inline]
    pub(crate) fn quota(&self) -> (usize, usize) {
        // Relaxed: a count, publishes nothing.
        unpack(self.quota.load(Ordering::Relaxed))
    }

    /// Changes the quota word by `f` (under the lock): one read-modify-write if other
    /// shards may `lend` from this one (`lent`: under `WhenFull::Refuse`, a borrower lowers
    /// `base` without the lock), else a load and a store (the lock holder is the word's
    /// only writer). The word before, or the one `f` refused.
    #[inline]
    fn update(&self, lent: bool, f: impl Fn(u64) -> Option<u64>) -> Result<u64, u64> {
        // Relaxed: the read-modify-write (or the lock, when it is the only writer) alone
        // keeps the word exact; nothing is published with it.
        if lent {
            return self
                .quota
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, f);
        }
        let word = self.quota.load(Ordering::Relaxed);
        let new = f(word).ok_or(word)?;
        self.quota.store(new, Ordering::Relaxed);
        Ok(word)
    }

    /// Counts one more resident key if the shard is below its base (under the lock;
    /// `lent` as for `update`). Whether it did.
    #[inline]
    pub(crate) fn take_base_unit(&self, lent: bool) -> bool {
        self.update(lent, |word| {
            let (len, base) = unpack(word);
            (len < base).then_some(word + 1)
        })
        .is_ok()
    }

    /// Counts one more resident key beyond the base: one the caller took from the pool
    /// (under the lock; `lent` as for `update`).
    #[inline]
    pub(crate) fn add_pool_unit(&self, lent: bool) {
        // `len` stays below 2³² (the capacity's bound), so the carry never reaches `base`.
        let _ = self.update(lent, |word| Some(word + 1));
    }

    /// Counts one resident key less (under the lock; `lent` as for `update`): whether that
    /// key held a pool unit (the count left is at or above the base), for the caller to
    /// give back. Nothing if the shard held none.
    #[inline]
    pub(crate) fn remove_one(&self, lent: bool) -> bool {
        match self.update(lent, |word| (unpack(word).0 > 0).then(|| word - 1)) {
            Ok(before) => {
                let (len, base) = unpack(before);
                len > base
            }
            Err(_) => false,
        }
    }

    /// Gives one unit of the base to the pool if the shard holds fewer keys than its base
    /// (any thread, no lock: the one read-modify-write orders it with this shard's own
    /// `take_base_unit`). Whether it did.
    #[inline]
    pub(crate) fn lend(&self) -> bool {
        // Relaxed: see `update`.
        self.quota
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |word| {
                let (len, base) = unpack(word);
                (len < base).then(|| word - (1 << 32))
            })
            .is_ok()
    }

    /// [`lend`](Self::lend) as a plain load and store (a loom broken twin only,
    /// `LoomFault::LendByLoadStore`): an insert counted between the two is lost.
    #[cfg(tollgate_loom)]
    pub(crate) fn lend_by_load_store(&self) -> bool {
        let word = self.quota.load(Ordering::Relaxed);
        let (len, base) = unpack(word);
        if len >= base {
            return false;
        }
        self.quota.store(word - (1 << 32), Ordering::Relaxed);
        true
    }
}

/// The quota word of `len` keys under `base` (see [`Shard`]'s `quota`).
#[inline]
fn pack(len: usize, base: usize) -> u64 {
    // Both below 2³² (the capacity's bound).
    ((base as u64) << 32) | len as u64
}

/// `(len, base)` of a quota word.
#[inline]
fn unpack(word: u64) -> (usize, usize) {
    // Truncation: each half is below 2³², and fits a `usize` where the capacity does.
    #[allow(clippy::cast_possible_truncation)]
    ((word & u64::from(u32::MAX)) as usize, (word >> 32) as usize)
}

/// The capacity not assigned to any shard's base, on its own cache line (only inserts into
/// shards beyond their base touch it).
#[derive(Debug)]
#[repr(align(64))]
pub(crate) struct QuotaPool {
    pub(crate) spare: AtomicUsize,
}
