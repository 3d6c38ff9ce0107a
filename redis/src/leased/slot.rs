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

/// A slot's view before any answer from Redis: above every answer, so the first one
/// lowers it (see [`Slot::lease_answered`]).
pub(super) const UNKNOWN: u64 = u64::MAX;

/// One slot for a hot key.
#[derive(Debug)]
pub(super) struct Slot {
    pub(super) cell: LeaseCell,
    /// Set by a spender that wants a lease (the slot ran low or dry); cleared by the lease
    /// thread once served.
    pub(super) asked: AtomicBool,
    /// Below this many permits, a spend asks for the next lease.
    pub(super) low_water: AtomicU64,
    /// The local view: Redis' remaining as last answered ([`UNKNOWN`] before any
    /// answer), and the policy-clock instant at which the last lease's `reset_after` ends;
    /// the tier's limit.
    pub(super) view_remaining: AtomicU64,
    pub(super) view_reset_at: AtomicU64,
    pub(super) limit: AtomicU64,
    /// The most permits the slot holds (its key's `max_lease_for`).
    pub(super) cap: AtomicU64,
    /// One past the latest policy-clock instant at which Redis denied a check of the key in
    /// this process (0: none): spends at or before that instant are refused (they go to
    /// Redis), so a caller's decisions at one instant never admit after a deny because a
    /// lease arrived meanwhile.
    pub(super) denied_at: AtomicU64,
    /// Leases asked of Redis for the slot, twice: bumped when one is sent and again when
    /// its answer is in the slot, so it is odd while one is on its way. A check's answer
    /// from Redis is the newest word on the key only if the count was even when the check
    /// was sent and has not moved since (see [`Inner::answered`]).
    pub(super) grants: AtomicU64,
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
            view_remaining: AtomicU64::new(UNKNOWN),
            view_reset_at: AtomicU64::new(0),
            limit: AtomicU64::new(0),
            cap: AtomicU64::new(0),
            denied_at: AtomicU64::new(0),
            grants: AtomicU64::new(0),
            keep: Mutex::new(Keep::default()),
        }
    }

    /// Before a lease is sent: marks one on its way, and returns the view it may replace.
    #[inline]
    pub(super) fn lease_asked(&self) -> u64 {
        // Relaxed: a count checks compare; the view is advisory.
        self.grants.fetch_add(1, Ordering::Relaxed);
        self.view_remaining.load(Ordering::Relaxed)
    }

    /// A lease's answer: Redis' `remaining` after it. It replaces the view `asked` (what
    /// [`lease_asked`](Self::lease_asked) returned) if no check's answer came meanwhile;
    /// otherwise whichever of the two Redis ran last left less (nothing refills a key
    /// within one round trip's race but time, which only errs low).
    #[inline]
    pub(super) fn lease_answered(&self, asked: u64, remaining: u64) {
        // Relaxed: the view is advisory.
        if self
            .view_remaining
            .compare_exchange(asked, remaining, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            self.view_remaining.fetch_min(remaining, Ordering::Relaxed);
        }
    }

    /// A lease answered late (followed in the background after a timeout): checks
    /// answered meanwhile may have read Redis before or after it ran, so the view keeps
    /// the lower of its answer and theirs.
    #[inline]
    pub(super) fn lease_answered_late(&self, remaining: u64) {
        // Relaxed: a count checks compare; the view is advisory.
        self.grants.fetch_add(1, Ordering::Relaxed);
        self.view_remaining.fetch_min(remaining, Ordering::Relaxed);
    }

    /// The lease asked is settled (its permits, if any, in the slot; or it never ran, or
    /// it is followed in the background): no longer on its way.
    #[inline]
    pub(super) fn lease_done(&self) {
        // Relaxed: see `lease_asked`.
        self.grants.fetch_add(1, Ordering::Relaxed);
    }

    /// The local view of the slot when it holds `held` permits, at `now`.
    #[inline]
    pub(super) fn view(&self, held: u64, now: Nanos) -> Decision {
        // Relaxed: the view is advisory (see "local view" on `LeasedStore`).
        let remaining = match self.view_remaining.load(Ordering::Relaxed) {
            UNKNOWN => 0,
            remaining => remaining,
        };
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
    /// The slot key `id` holds in this process, if it holds one.
    #[inline]
    pub(super) fn held_slot(&self, id: u64) -> Option<&Slot> {
        self.probe(id)
            .map(|s| &*self.slots[s])
            .find(|slot| slot.cell.owner() == Some(id.max(1)))
    }

    /// How many leases the slot key `id` holds was granted (`None`: it holds none): taken
    /// before a call to Redis, so its answer knows whether a lease arrived meanwhile.
    #[inline]
    pub(super) fn grants_of(&self, id: u64) -> Option<u64> {
        // Relaxed: compared with a later load of the same counter by the same thread.
        self.held_slot(id)
            .map(|slot| slot.grants.load(Ordering::Relaxed))
    }

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
