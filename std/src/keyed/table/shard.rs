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
    /// Keys resident in this shard; written under `lock`, read lock-free by `len()`.
    pub(crate) len: AtomicUsize,
    /// The keys this shard may hold before drawing on the table's shared pool. Starts at
    /// the geometry's share; lowered by one (its unit moved to the pool) when another shard
    /// finds the pool spent under [`WhenFull::Refuse`](crate::WhenFull::Refuse) while this
    /// one holds fewer keys (`Table::borrow`). Written only under this shard's lock.
    pub(crate) base: AtomicUsize,
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
    /// An empty shard allowed `cap` keys.
    pub(crate) fn new(base: usize) -> Shard {
        Shard {
            lock: Mutex::new(ShardLocal::default()),
            len: AtomicUsize::new(0),
            base: AtomicUsize::new(base),
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
        // Relaxed: a count, publishes nothing.
        self.len.load(Ordering::Relaxed)
    }

    /// The keys this shard may hold without the pool (exact under the lock, a hint
    /// otherwise).
    #[inline]
    pub(crate) fn base(&self) -> usize {
        // Relaxed: only written under the shard lock, which orders it with `len`.
        self.base.load(Ordering::Relaxed)
    }

    /// Sets the base (under the lock).
    #[inline]
    pub(crate) fn set_base(&self, base: usize) {
        // Relaxed: see `base`.
        self.base.store(base, Ordering::Relaxed)
    }

    /// Sets the resident count (under the lock).
    #[inline]
    pub(crate) fn set_len(&self, len: usize) {
        // Relaxed: see `len`.
        self.len.store(len, Ordering::Relaxed)
    }
}

/// The capacity not assigned to any shard's base, on its own cache line (only inserts into
/// shards beyond their base touch it).
#[derive(Debug)]
#[repr(align(64))]
pub(crate) struct QuotaPool {
    pub(crate) spare: AtomicUsize,
}
