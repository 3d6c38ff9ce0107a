//! The check path's side of a lease: spending a tier's cost from its slot without a round
//! trip ([`Inner::spend`]), asking the lease thread for the next lease, giving the
//! spends of a denied check back ([`Inner::undo`]), and dropping a reset key's leases
//! ([`Inner::revoke`]).

use super::slot::{identity, Slot};
use super::Inner;
use std::sync::atomic::Ordering;
use tollgate::lease::Spend;
use tollgate::policy::{Plan, PlannedTier, TierOutcome};
use tollgate::{Decision, Nanos};

impl Inner {
    /// Wakes the lease thread for `slot` unless it was asked already.
    #[inline]
    pub(super) fn ask(&self, slot: &Slot, now: Nanos) {
        // Relaxed: a hint; the swap below decides who wakes the thread.
        if slot.asked.load(Ordering::Relaxed) {
            return;
        }
        // Relaxed: the policy's clock for the lease thread's calls, published by the swap
        // below. (At least 1: 0 means no check has told it yet.)
        self.seen_now.store(now.as_u64().max(1), Ordering::Relaxed);
        // AcqRel: pairs with the lease thread's Acquire load, which then sees this
        // check's `seen_now`.
        if !slot.asked.swap(true, Ordering::AcqRel) {
            if let Some(keeper) = self.keeper.get() {
                keeper.unpark();
            }
        }
    }

    /// Spends tier `p`'s cost from its lease, if one covers it: the slot and the
    /// generation spent from, and the decision.
    #[inline]
    pub(super) fn spend(
        &self,
        id: u64,
        p: &PlannedTier<'_>,
        now: Nanos,
    ) -> Option<(usize, u32, Decision)> {
        for s in self.probe(id) {
            let slot = &self.slots[s];
            match slot.cell.spend(id, u64::from(p.cost)) {
                Spend::Taken { left, generation } => {
                    // Relaxed: set by the lease thread with the lease; a stale value only
                    // asks a little early or late.
                    if left < slot.low_water.load(Ordering::Relaxed) {
                        self.ask(slot, now);
                    }
                    return Some((s, generation, slot.view(left, now)));
                }
                Spend::Short { .. } => {
                    self.ask(slot, now);
                    return None;
                }
                Spend::NotHeld => {}
            }
        }
        None
    }

    /// Gives back the permits a check spent from leases before Redis denied (or failed)
    /// another of its tiers; reports those tiers as they now stand. Permits the slot cannot
    /// take back (its lease was revoked since, or it is at its cap again after a refill)
    /// go back to Redis, where they are still counted: queued for the lease thread, which
    /// follows the return to its outcome (the check does not wait for it).
    pub(super) fn undo(
        &self,
        spent: &[Option<(usize, u32)>],
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) {
        for ((p, taken), outcome) in plan.iter().zip(spent).zip(outcomes.iter_mut()) {
            if let Some((s, generation)) = *taken {
                let slot = &self.slots[s];
                // Relaxed: written at the claim, before the lease the spend came from.
                let cap = slot.cap.load(Ordering::Relaxed);
                if !slot.cell.give_back(generation, u64::from(p.cost), cap) {
                    self.orphan(&self.redis.tier_key(p), u64::from(p.cost));
                    if let Some(keeper) = self.keeper.get() {
                        keeper.unpark();
                    }
                }
                outcome.decision = slot.view(slot.cell.permits(), now);
            }
        }
    }

    /// Drops the permits this process holds for the plan's keys (a reset: Redis forgets
    /// the keys next, and permits taken from their old state must not be spent against the
    /// new one). The lease thread counts them as spent, which only raises the key's local
    /// rate estimate for its next lease. Leases other processes hold of the key are not
    /// reached: they are spent or returned within their review, inside the lease bound.
    pub(super) fn revoke(&self, plan: &Plan<'_>) {
        for p in plan {
            let id = identity(p);
            for s in self.probe(id) {
                let cell = &self.slots[s].cell;
                if cell.owner() == Some(id) {
                    cell.revoke();
                }
            }
        }
    }
}
