//! [`FloorTable`]: the hardware floor of a keyed check — hash the key, index a flat array of
//! `AtomicU64` states, and run the floor's GCRA step on that word. It stores no keys, so
//! distinct keys may share a slot: it is a lower bound, not a usable limiter.

use crate::floor_cell::floor_gcra;
use crate::sync::AtomicU64;
use std::hash::{BuildHasher, Hash};

/// A power-of-two array of GCRA words indexed by `hash(key) & mask`.
///
/// ```
/// use tollgate_bench::FloorTable;
/// let table = FloorTable::new(1000, 10, 1, foldhash::fast::FixedState::with_seed(7));
/// assert!(table.check_at(&42u64, 100));
/// assert!(!table.check_at(&42u64, 100));
/// assert!(table.check_at(&42u64, 110));
/// ```
#[derive(Debug)]
pub struct FloorTable<S> {
    slots: Box<[AtomicU64]>,
    mask: u64,
    interval: u64,
    tolerance: u64,
    hasher: S,
}

impl<S: BuildHasher> FloorTable<S> {
    /// A table with at least `keys` slots (rounded up to a power of two), one permit per
    /// `interval` ns per slot, bursts of `burst`, hashing with `hasher`.
    pub fn new(keys: usize, interval: u64, burst: u64, hasher: S) -> FloorTable<S> {
        let len = keys.max(1).next_power_of_two();
        FloorTable {
            slots: (0..len).map(|_| AtomicU64::new(0)).collect(),
            mask: len as u64 - 1,
            interval,
            tolerance: interval.saturating_mul(burst),
            hasher,
        }
    }

    /// Bytes of the slot array.
    pub fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.slots)
    }

    /// Admits one permit for `key` at `now` (ns) if its slot's rate allows.
    #[inline]
    pub fn check_at<K: Hash + ?Sized>(&self, key: &K, now: u64) -> bool {
        let index = (self.hasher.hash_one(key) & self.mask) as usize;
        // The mask keeps the index below the power-of-two length.
        let cell = &self.slots[index];
        floor_gcra(cell, now, self.interval, self.tolerance)
    }
}
