//! The keyed table's layout: its [`Geometry`] (how a capacity becomes shards and buckets), its
//! storage ([`Slot`]: 16 bytes, four to a 64-byte [`Bucket`]), where an identity lives (its shard,
//! its two candidate buckets, the mask of its state word, the identity that marks a slot
//! empty).

use core::mem::size_of;

use super::pages::HUGE_PAGE;
use super::{Loc, Table};
use crate::keyed::key::state_mask;
use crate::keyed::KeyedBuildError;
use crate::sync::{AtomicU64, Ordering};
use tollgate_core::hash::splitmix64 as splitmix;

/// The two candidate buckets (indices within the shard) of identity `h`.
#[inline(always)]
pub(super) fn pair(h: u64, buckets: u64, shard_bits: u32) -> (u64, u64) {
    // Truncation: deliberate, the low 32 bits of `h` pick the first bucket.
    #[allow(clippy::cast_possible_truncation)]
    let b1 = (u64::from(h as u32) * buckets) >> 32;
    // The top `shard_bits` bits chose the shard; shift them out.
    // Truncation: deliberate, the 32 bits below them pick the second bucket.
    #[allow(clippy::cast_possible_truncation)]
    let upper = ((h >> 32) << shard_bits) as u32;
    // The two may coincide (probability 1/buckets): that key then has one bucket.
    let b2 = (u64::from(upper) * buckets) >> 32;
    (b1, b2)
}

/// Two identities whose candidate bucket pairs are disjoint in a one-shard table of
/// `buckets` buckets (≥ 4): for any bucket, at least one of them can never live there.
pub(super) fn single_shard_empties(buckets: u64) -> [u64; 2] {
    let mut found: Vec<(u64, (u64, u64))> = Vec::with_capacity(2);
    let mut index = 0u64;
    while found.len() < 2 {
        let candidate = splitmix(index);
        index += 1;
        let (a, b) = pair(candidate, buckets, 0);
        if found
            .iter()
            .all(|&(_, (c, d))| a != c && a != d && b != c && b != d)
        {
            found.push((candidate, (a, b)));
        }
    }
    [found[0].0, found[1].0]
}

impl<K> Table<K> {
    /// The identity that marks a slot of bucket `g` empty: one no key living in `g` has.
    ///
    /// With several shards, an identity of the neighbouring shard (it never lives in this
    /// one). With one, whichever of two identities with disjoint bucket pairs cannot live
    /// in `g`. No memory is read beyond the table's own fields.
    #[inline]
    pub(super) fn empty_ident(&self, g: usize) -> u64 {
        if self.shard_bits > 0 {
            let shard = ((u128::from(self.bucket_divisor) * g as u128) >> 64) as u64;
            return (shard ^ 1) << (64 - self.shard_bits);
        }
        let nb = self.buckets_per_shard as u64;
        let [first, second] = self.single_empties;
        let (a, b) = pair(first, nb, 0);
        if a != g as u64 && b != g as u64 {
            first
        } else {
            // The pairs are disjoint: `g` is not in the second's.
            second
        }
    }

    /// Starts loading both candidate buckets of identity `h` into the cache, without
    /// waiting for them (a hint: no effect on what any check decides).
    #[inline(always)]
    pub(crate) fn prefetch(&self, h: u64) {
        self.prefetch_located(h);
    }

    /// [`prefetch`](Self::prefetch), answering where `h` lives (for a later
    /// [`read_if_found`](Self::read_if_found) of the same table, which then need not
    /// locate it again).
    #[inline(always)]
    pub(crate) fn prefetch_located(&self, h: u64) -> Loc {
        let loc = self.locate(h);
        // Addresses only (no bounds check: `locate` answers buckets of this table, and a
        // prefetch of any address is harmless anyway).
        prefetch_bucket(self.buckets.as_ptr().wrapping_add(loc.g1));
        prefetch_bucket(self.buckets.as_ptr().wrapping_add(loc.g2));
        loc
    }

    /// Where identity `h` lives.
    #[inline(always)]
    pub(crate) fn locate(&self, h: u64) -> Loc {
        // `h >> (64 - bits)` in two steps, so that zero bits (one shard) yields shard 0.
        let shard = ((h >> 1) >> self.shard_shift) as usize;
        let nb = self.buckets_per_shard;
        let (b1, b2) = pair(h, nb as u64, self.shard_bits);
        let base = shard * nb;
        // Truncation: `pair` answers indices below `nb`, a usize.
        #[allow(clippy::cast_possible_truncation)]
        let (b1, b2) = (b1 as usize, b2 as usize);
        Loc {
            shard,
            g1: base + b1,
            g2: base + b2,
        }
    }

    /// The mask for identity `h`'s state word.
    #[inline(always)]
    pub(crate) fn mask(&self, h: u64) -> u64 {
        state_mask(h, self.mask_seed)
    }

    #[inline(always)]
    pub(super) fn slot(&self, idx: usize) -> &Slot {
        &self.buckets[idx / BUCKET_SLOTS].slots[idx % BUCKET_SLOTS]
    }

    /// Whether slot `idx` holds a key. Exact only under the shard lock (identities change
    /// only under it).
    #[inline]
    pub(super) fn occupied(&self, idx: usize) -> bool {
        // Relaxed: called under the shard lock, which orders every identity change.
        self.slot(idx).ident.load(Ordering::Relaxed) != self.empty_ident(idx / BUCKET_SLOTS)
    }
}

/// Hints the CPU to start loading the cache line at `bucket`.
#[inline(always)]
fn prefetch_bucket(bucket: *const Bucket) {
    crate::prefetch::line(bucket.cast());
}

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

/// The most a table's buckets grow to fill whole huge pages: an eighth of one.
const HUGE_PAGE_FILL: usize = HUGE_PAGE / 8;

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
    /// The largest accepted capacity: keeps every size computation far from overflow, and
    /// a shard's key count and base within the 32 bits each its quota word gives them.
    pub(crate) const MAX_CAPACITY: usize = {
        let sizes = (isize::MAX as usize) / 64;
        let counts = u32::MAX as usize;
        if sizes < counts {
            sizes
        } else {
            counts
        }
    };

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

    /// This shape, with more buckets per shard if that makes the buckets fill whole huge
    /// pages ([`HUGE_PAGE`]) with at most [`HUGE_PAGE_FILL`] bytes more: the kernel can then
    /// back the whole table with huge pages (see [`Buckets`](super::pages::Buckets)), where
    /// a table just under a whole number of them would keep its last one in small pages
    /// (the default capacity's table, 1.83 MiB, would keep all of it). The buckets added
    /// lower the load of every shard; the capacity does not change. For tables with nothing
    /// else per slot (no exact keys' cells, no log slab), whose growth that bound covers.
    pub(crate) fn in_huge_pages(self) -> Geometry {
        let bytes = self.buckets() * size_of::<Bucket>();
        let filled = bytes.next_multiple_of(HUGE_PAGE);
        if bytes + HUGE_PAGE_FILL < HUGE_PAGE || filled - bytes > HUGE_PAGE_FILL {
            return self;
        }
        Geometry {
            // Exact: `filled` is a multiple of 2 MiB, `shards` a power of two of at most
            // 1 024, and a bucket 64 bytes; more buckets than before, never fewer.
            buckets_per_shard: filled / size_of::<Bucket>() / self.shards,
            ..self
        }
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
        let g = Geometry::new(80_000, None).unwrap();
        assert_eq!(g.shards, 64);
        let slots = g.buckets() * BUCKET_SLOTS;
        assert!(
            (96_000..96_000 + 64 * BUCKET_SLOTS).contains(&slots),
            "{slots}"
        );
        let bases = (0..g.shards).map(|s| g.shard_base(s)).sum::<usize>();
        assert_eq!(bases + g.pool(), 80_000);
        assert!(g.pool() >= 7_200);
    }

    /// Buckets within an eighth of a huge page of filling whole ones are raised to fill
    /// them; the rest keep the slot budget's size, and no capacity changes.
    #[test]
    fn tables_just_under_whole_huge_pages_fill_them() {
        let bytes = |g: &Geometry| g.buckets() * size_of::<Bucket>();
        // (capacity, the slot budget's bytes, the table's bytes)
        let cases = [
            // The default: 1.83 MiB, one huge page.
            (100_000, 1_921_024, HUGE_PAGE),
            // Under 1.75 MiB: its own size.
            (90_000, 1_732_608, 1_732_608),
            // 3.9 MiB: two huge pages.
            (213_000, 4_091_904, 2 * HUGE_PAGE),
            // 18.3 MiB: 1.7 MiB short of 20, which would add more than an eighth of one.
            (1_000_000, 19_202_048, 19_202_048),
        ];
        for (capacity, budget, table) in cases {
            let g = Geometry::new(capacity, None).unwrap();
            let huge = g.in_huge_pages();
            assert_eq!(
                (bytes(&g), bytes(&huge), huge.capacity, huge.shards),
                (budget, table, capacity, g.shards),
                "{capacity}"
            );
        }
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

    /// A shard's key count and base share one 64-bit word, 32 bits each
    /// (`Shard::quota`): the capacity stops where a count would not fit.
    #[test]
    fn the_capacity_fits_a_shards_32_bit_counts() {
        let max = Geometry::MAX_CAPACITY;
        assert!(u32::try_from(max).is_ok(), "{max}");
        assert!(Geometry::new(max, Some(1)).is_ok());
        assert_eq!(
            Geometry::new(max + 1, Some(1)),
            Err(KeyedBuildError::CapacityTooLarge { max })
        );
        let g = Geometry::new(max, None).unwrap();
        assert!((0..g.shards).all(|shard| u32::try_from(g.shard_base(shard)).is_ok()));
    }
}

/// Slots per bucket: one bucket is one cache line.
pub(crate) const BUCKET_SLOTS: usize = 4;

/// One key's entry: its 64-bit identity and its masked packed state.
///
/// - `ident`: the key's identity (a seeded bijection of an integer key, or a 64-bit hash),
///   or the bucket's *empty* value, chosen so that no key that can live in this bucket has
///   it (see `Table::empty_ident`).
/// - `state`: the algorithm's packed state XOR a mask derived from `ident` (see
///   `key_ident::state_mask`), so a check that loaded one key's state can never
///   compare-and-swap it into a different key's (except with probability 2⁻⁶⁴).
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Slot {
    pub(crate) ident: AtomicU64,
    pub(crate) state: AtomicU64,
}

/// Four slots on one cache line: a lookup touches one line per candidate bucket.
#[derive(Debug)]
#[repr(C, align(64))]
pub(crate) struct Bucket {
    pub(crate) slots: [Slot; BUCKET_SLOTS],
}

impl Bucket {
    /// A bucket whose slots all hold `empty`.
    pub(crate) fn new(empty: u64) -> Bucket {
        Bucket {
            slots: core::array::from_fn(|_| Slot {
                ident: AtomicU64::new(empty),
                state: AtomicU64::new(0),
            }),
        }
    }
}
