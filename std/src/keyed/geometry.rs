//! [`Geometry`]: how a capacity becomes shards and buckets.

use super::slot::BUCKET_SLOTS;
use super::KeyedBuildError;

/// Slots per resident key, as a fraction: `SLOTS_PER_KEY_NUM / SLOTS_PER_KEY_DEN` = 1.2.
/// A key may live in one of two 4-slot buckets; 20 % spare slots keep "both buckets full
/// while the shard still has room" rare, at 16 B × 1.2 = 19.2 B per key.
const SLOTS_PER_KEY_NUM: usize = 6;
const SLOTS_PER_KEY_DEN: usize = 5;
/// Fewest buckets per shard (a one-shard table needs four to place its empty markers). A
/// minimal shard has 16 slots, exactly one sweep window, so small tables evict by a
/// whole-table view.
pub(crate) const MIN_BUCKETS: usize = 4;
/// Share of an even split that a shard may fill without drawing on the shared pool. The
/// per-shard load of uniformly hashed keys deviates from the mean by a few percent (one
/// standard deviation is `1/√(capacity/shards)`), so 10 % in the pool lets a table hold its
/// whole capacity of distinct keys.
const BASE_PERCENT: usize = 90;
/// Most shards.
pub(crate) const MAX_SHARDS: usize = 1024;
/// Default: one shard per this many keys, at most 64 shards.
const KEYS_PER_DEFAULT_SHARD: usize = 1024;
const MAX_DEFAULT_SHARDS: usize = 64;

/// The shape of a keyed table: `shards` (a power of two) × `buckets_per_shard` buckets of
/// four slots, and the key quota they share.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub(crate) capacity: usize,
    pub(crate) shards: usize,
    pub(crate) buckets_per_shard: usize,
}

fn pow2_floor(value: usize) -> usize {
    1usize << (usize::BITS - 1 - value.max(1).leading_zeros())
}

impl Geometry {
    /// The largest accepted capacity (keeps every size computation far from overflow).
    pub(crate) const MAX_CAPACITY: usize = (isize::MAX as usize) / 64;

    /// Sizes a table for `capacity` keys, with `shards` shards if given (rounded down to a
    /// power of two, at most [`MAX_SHARDS`] and at most the capacity).
    pub(crate) fn new(capacity: usize, shards: Option<usize>) -> Result<Geometry, KeyedBuildError> {
        if capacity == 0 {
            return Err(KeyedBuildError::ZeroCapacity);
        }
        if capacity > Geometry::MAX_CAPACITY {
            return Err(KeyedBuildError::CapacityTooLarge {
                max: Geometry::MAX_CAPACITY,
            });
        }
        let wanted = shards
            .unwrap_or_else(|| (capacity / KEYS_PER_DEFAULT_SHARD).clamp(1, MAX_DEFAULT_SHARDS));
        let shards = pow2_floor(wanted.clamp(1, MAX_SHARDS)).min(pow2_floor(capacity));
        let per_shard = capacity.div_ceil(shards);
        let slots = (per_shard * SLOTS_PER_KEY_NUM).div_ceil(SLOTS_PER_KEY_DEN);
        let buckets_per_shard = slots.div_ceil(BUCKET_SLOTS).max(MIN_BUCKETS);
        // Bucket indices come from 32 hash bits and are divided with a 64-bit reciprocal,
        // exact for indices below 2³².
        if shards * buckets_per_shard > u32::MAX as usize {
            return Err(KeyedBuildError::CapacityTooLarge {
                max: Geometry::MAX_CAPACITY,
            });
        }
        Ok(Geometry {
            capacity,
            shards,
            buckets_per_shard,
        })
    }

    /// Total buckets.
    pub(crate) fn buckets(&self) -> usize {
        self.shards * self.buckets_per_shard
    }

    /// The keys shard `index` may hold without drawing on the shared pool: 90 % of an
    /// even split (all of it with one shard), at least one.
    pub(crate) fn shard_base(&self, index: usize) -> usize {
        let even = self.capacity / self.shards + usize::from(index < self.capacity % self.shards);
        if self.shards == 1 {
            even
        } else {
            (even * BASE_PERCENT / 100).max(1)
        }
    }

    /// The shared pool: the capacity not given to any shard's base. Shards that receive
    /// more than their base (hashing is never perfectly even) draw from it.
    pub(crate) fn pool(&self) -> usize {
        self.capacity - (0..self.shards).map(|s| self.shard_base(s)).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_near_the_slot_budget() {
        let g = Geometry::new(100_000, None).unwrap();
        assert_eq!(g.shards, 64);
        let slots = g.buckets() * BUCKET_SLOTS;
        assert!(
            (120_000..120_000 + 64 * BUCKET_SLOTS).contains(&slots),
            "{slots}"
        );
        let bases = (0..g.shards).map(|s| g.shard_base(s)).sum::<usize>();
        assert_eq!(bases + g.pool(), 100_000);
        assert!(g.pool() >= 9_000);
    }

    #[test]
    fn small_and_odd_requests() {
        let g = Geometry::new(1, None).unwrap();
        assert_eq!((g.shards, g.buckets_per_shard), (1, MIN_BUCKETS));
        let g = Geometry::new(10, Some(3)).unwrap();
        assert_eq!(g.shards, 2);
        let g = Geometry::new(1_000_000, Some(5000)).unwrap();
        assert_eq!(g.shards, MAX_SHARDS);
        assert_eq!(Geometry::new(0, None), Err(KeyedBuildError::ZeroCapacity));
        assert!(Geometry::new(usize::MAX, None).is_err());
    }
}
