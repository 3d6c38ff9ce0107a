//! Where an identity lives: its shard, its two candidate buckets and their slots, the
//! mask of its state word, and the identity that marks a slot of a bucket empty.

use super::{Loc, Table};
use crate::keyed::key_ident::{splitmix, state_mask};
use crate::keyed::slot::{Bucket, Slot, BUCKET_SLOTS};
use crate::sync::Ordering;

/// The two candidate buckets (indices within the shard) of identity `h`.
#[inline(always)]
pub(super) fn pair(h: u64, buckets: u64, shard_bits: u32) -> (u64, u64) {
    let b1 = (u64::from(h as u32) * buckets) >> 32;
    // The top `shard_bits` bits chose the shard; shift them out.
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
        let loc = self.locate(h);
        prefetch_bucket(&self.buckets[loc.g1]);
        prefetch_bucket(&self.buckets[loc.g2]);
    }

    /// Where identity `h` lives.
    #[inline(always)]
    pub(crate) fn locate(&self, h: u64) -> Loc {
        // `h >> (64 - bits)` in two steps, so that zero bits (one shard) yields shard 0.
        let shard = ((h >> 1) >> (63 - self.shard_bits)) as usize;
        let nb = self.buckets_per_shard;
        let (b1, b2) = pair(h, nb as u64, self.shard_bits);
        let base = shard * nb;
        Loc {
            shard,
            g1: base + b1 as usize,
            g2: base + b2 as usize,
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

/// Hints the CPU to start loading `bucket`'s cache line.
#[inline(always)]
fn prefetch_bucket(bucket: &Bucket) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults, reads nothing the program can observe and writes
    // nothing; the address comes from a live reference anyway.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
            (bucket as *const Bucket).cast::<i8>(),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bucket;
}
