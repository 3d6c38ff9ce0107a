//! A hot key's [`Slot`]: its lease cell and local view, the lease thread's bookkeeping of it
//! ([`Keep`]), and where a key's slot may be ([`identity`], [`Inner::probe`]).

use std::time::Instant;

use super::Inner;
use crate::keys::TierKey;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use tollgate::lease::LeaseCell;
use tollgate::policy::PlannedTier;
use tollgate::{Decision, Nanos};

/// One slot for a hot key.
#[derive(Debug)]
pub(super) struct Slot {
    pub(super) cell: LeaseCell,
    /// Set by a spender that wants a lease (the slot ran low or dry); cleared by the lease
    /// thread once served.
    pub(super) asked: AtomicBool,
    /// Below this many permits, a spend asks for the next lease.
    pub(super) low_water: AtomicU64,
    /// The local view after the last lease: Redis' remaining, and the policy-clock instant
    /// at which its `reset_after` ends; the tier's limit.
    pub(super) view_remaining: AtomicU64,
    pub(super) view_reset_at: AtomicU64,
    pub(super) limit: AtomicU64,
    /// The most permits the slot holds (its key's `max_lease_for`).
    pub(super) cap: AtomicU64,
    /// The lease thread's bookkeeping (a claiming check writes the target once).
    pub(super) keep: Mutex<Keep>,
}

impl Slot {
    /// A free slot.
    pub(super) fn new() -> Slot {
        Slot {
            cell: LeaseCell::new(),
            asked: AtomicBool::new(false),
            low_water: AtomicU64::new(0),
            view_remaining: AtomicU64::new(0),
            view_reset_at: AtomicU64::new(0),
            limit: AtomicU64::new(0),
            cap: AtomicU64::new(0),
            keep: Mutex::new(Keep::default()),
        }
    }

    /// The local view of the slot when it holds `held` permits, at `now`.
    #[inline]
    pub(super) fn view(&self, held: u64, now: Nanos) -> Decision {
        // Relaxed: the view is advisory (see "local view" on `LeasedStore`).
        let remaining = self.view_remaining.load(Ordering::Relaxed);
        let reset_at = self.view_reset_at.load(Ordering::Relaxed);
        Decision::allow(
            self.limit.load(Ordering::Relaxed),
            held.saturating_add(remaining),
            Nanos::new(reset_at.saturating_sub(now.as_u64())),
        )
    }
}

/// What the lease thread knows of a slot.
#[derive(Debug, Default)]
pub(super) struct Keep {
    /// The key's tier in Redis; `None` until the claiming check has written it.
    pub(super) target: Option<TierKey>,
    /// When the lease in hand is next reviewed; `None`: no lease in hand.
    pub(super) review_at: Option<Instant>,
    /// Permits granted since the slot was claimed, and returned; what the slot holds then
    /// tells what was spent.
    pub(super) granted: u64,
    pub(super) returned: u64,
    /// Spent (granted, minus returned, minus held) when last looked at, and at `mark`
    /// (the last lease), for the local rate.
    pub(super) last_spent: u64,
    pub(super) spent_at_mark: u64,
    pub(super) mark: Option<Instant>,
    /// Last time the key's spends moved.
    pub(super) active: Option<Instant>,
    /// Not before this may a lease be asked of Redis again (after a deny or a failure).
    pub(super) next_try: Option<Instant>,
    /// Which claim of the slot this is (from 1; 0: free): a lease operation settled late
    /// touches the slot only if it is still the claim the operation was for.
    pub(super) epoch: u64,
}

/// 64-bit finalizer of splitmix64: spreads a key identity over the slot and heat indices.
#[inline]
pub(super) fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The key a tier of a plan is leased under: the rule and tier (by name: a reload that
/// keeps them keeps their leases), the tier's version and the key within the rule.
#[inline]
pub(super) fn identity(p: &PlannedTier<'_>) -> u64 {
    mix(mix(p.tier.names()) ^ p.tier.version()) ^ mix(p.key)
}

impl Inner {
    /// The two slots key `id` may hold.
    #[inline]
    pub(super) fn probe(&self, id: u64) -> impl Iterator<Item = usize> {
        let mask = self.slots.len() - 1;
        let h = mix(id);
        // Truncation: deliberate where a usize is narrower: it keeps the low bits, which the
        // mask selects.
        #[allow(clippy::cast_possible_truncation)]
        let a = h as usize & mask;
        let b = (h >> 32) as usize & mask;
        core::iter::once(a).chain((b != a).then_some(b))
    }
}
