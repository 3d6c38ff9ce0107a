//! Which cold keys turn hot: admitted checks counted per key per 100 ms
//! ([`Inner::heat`]), and the claim of a slot for a key that reaches the hot rate.

use super::slot::{mix, Keep, UNKNOWN};
use super::Inner;
use crate::sync::lock;
use std::sync::atomic::Ordering;
use tollgate::policy::PlannedTier;
use tollgate::{AnyAlgorithm, Nanos, PackedAlgorithm};

/// Heat is counted per period of this many ns.
const HEAT_PERIOD: u64 = 100_000_000;

/// How many admitted checks within one heat period make a key hot at `hot_rate` checks per
/// second: `hot_rate` over one heat period, at least one.
// Truncation: clamped to u32::MAX.
#[allow(clippy::cast_possible_truncation)]
pub(super) fn hot_count(hot_rate: u64) -> u64 {
    (u128::from(hot_rate) * u128::from(HEAT_PERIOD))
        .div_ceil(1_000_000_000)
        .clamp(1, u128::from(u32::MAX)) as u64
}

/// Whether a lease can serve a tier of `algorithm` and keep its promise: every algorithm
/// but the leaky bucket, whose admitted requests each carry a delay (their place in the
/// queue it drains) that only the key's one state in Redis can give; spent from a lease
/// they would leave at once, bunched. Such a tier is always decided by Redis.
fn leasable(algorithm: &AnyAlgorithm) -> bool {
    match algorithm {
        AnyAlgorithm::Packed(PackedAlgorithm::LeakyBucket(_)) => false,
        AnyAlgorithm::Packed(
            PackedAlgorithm::Gcra(_)
            | PackedAlgorithm::TokenBucket(_)
            | PackedAlgorithm::FixedWindow(_)
            | PackedAlgorithm::SlidingWindowCounter(_),
        )
        | AnyAlgorithm::Log(_) => true,
    }
}

impl Inner {
    /// Counts an admitted check of the cold key `id` (tier `p`); when it turns hot, claims
    /// a slot for it. Heat cells are shared by keys: each remembers a 12-bit tag of the
    /// key it counts, and a check of another key starts the count over, so keys sharing a
    /// cell cannot add up to a hot one.
    pub(super) fn heat(&self, id: u64, p: &PlannedTier<'_>, now: Nanos) {
        if !leasable(p.tier.algorithm()) {
            return;
        }
        let limit = p.tier.algorithm().limit();
        let cap = self.config.max_lease_for(limit, p.tier.max_cost());
        if u64::from(p.cost) > cap {
            // No lease of this key could ever cover such a request.
            return;
        }
        let h = mix(id ^ 0x9e37_79b9_7f4a_7c15);
        // `[period: 20 | tag: 12 | count: 32]`: periods of 100 ms wrap every 29 hours,
        // and only equality matters.
        let stamp = ((now.as_u64() / HEAT_PERIOD) << 12 | (h >> 52)) & 0xffff_ffff;
        // Truncation: deliberate where a usize is narrower: it keeps the low bits, which the
        // mask (the length is a power of two) selects.
        #[allow(clippy::cast_possible_truncation)]
        let cell = &self.heat[h as usize & (self.heat.len() - 1)];
        // Relaxed: a statistic; the compare-and-swap below re-reads.
        let mut word = cell.load(Ordering::Relaxed);
        let count = loop {
            let count = if word >> 32 == stamp {
                (word & u64::from(u32::MAX))
                    .saturating_add(1)
                    .min(u64::from(u32::MAX))
            } else {
                1
            };
            // Relaxed: counts only, nothing published with them.
            match cell.compare_exchange_weak(
                word,
                stamp << 32 | count,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break count,
                Err(seen) => word = seen,
            }
        };
        if count != self.hot_count {
            return;
        }
        // Claims are rare (a key turning hot): one at a time, so a key never holds two
        // slots.
        let _claiming = lock(&self.claiming);
        if self
            .probe(id)
            .any(|s| self.slots[s].cell.owner() == Some(id.max(1)))
        {
            // Held already (its lease ran dry, or Redis has nothing left).
            return;
        }
        for s in self.probe(id) {
            let slot = &self.slots[s];
            if slot.cell.owner().is_some() || !slot.cell.claim(id) {
                continue;
            }
            // Relaxed: read by spenders after the grant's Release (see `LeaseCell`), and by
            // the lease thread after it locks the bookkeeping written below.
            slot.limit.store(limit, Ordering::Relaxed);
            slot.cap.store(cap, Ordering::Relaxed);
            slot.denied_at.store(0, Ordering::Relaxed);
            slot.view_remaining.store(UNKNOWN, Ordering::Relaxed);
            *lock(&slot.keep) = Keep {
                target: Some(self.redis.tier_key(p)),
                // Relaxed: a unique number; claims are serialised by `claiming`.
                epoch: self.claims.fetch_add(1, Ordering::Relaxed) + 1,
                ..Keep::default()
            };
            self.ask(slot, now);
            return;
        }
    }
}
