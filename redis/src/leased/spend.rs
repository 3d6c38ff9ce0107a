//! The check path's side of a lease: spending a tier's cost from its slot without a round
//! trip ([`Inner::spend`]), asking the lease thread for the next lease, giving the
//! spends of a denied check back ([`Inner::undo`]), and dropping a reset key's leases
//! ([`Inner::revoke`]); what a Redis answer tells a held key ([`Inner::answered`]).

use super::slot::{identity, Slot};
use super::Inner;
use std::sync::atomic::Ordering;
use tollgate::lease::Spend;
use tollgate::policy::{Plan, PlannedTier, TierOutcome};
use tollgate::{Decision, Nanos};

/// Which answer [`Inner::answered`] is given, and whether Redis made it (`clean`: not the
/// failure policy).
#[derive(Copy, Clone, Debug)]
pub(super) enum Answer {
    Check { clean: bool },
    Peek { clean: bool },
}

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
            // Relaxed: a caller's own deny is ordered before its later checks by program
            // order; other callers see it soon after (a deny at their instant they could
            // not have seen anyway).
            if now.as_u64() < slot.denied_at.load(Ordering::Relaxed)
                && slot.cell.owner() == Some(id.max(1))
            {
                // Denied at this instant already: Redis decides, exactly.
                return None;
            }
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

    /// What Redis answered for key `id`, as this process sees it. For a key it holds a
    /// lease of: a denied check closes the slot at `now` (see [`Slot::denied_at`]); if
    /// Redis made the answer (not the failure policy) and no lease was on its way when the
    /// call was sent nor asked since (`grants`, read before the call), the answer is the
    /// newest word on the key: a check's refreshes the slot's view, and the answer counts
    /// the permits the slot holds, which the fleet has left too. If one was, Redis may have
    /// run it before or after this call: the view keeps the lower of the two, and the
    /// answer is left as Redis gave it (low by what the slot holds, never high). A failure
    /// policy's answer says nothing of the key: left as it is.
    pub(super) fn answered(
        &self,
        id: u64,
        grants: Option<u64>,
        now: Nanos,
        decision: &mut Decision,
        answer: Answer,
    ) {
        let Some(slot) = self.held_slot(id) else {
            return;
        };
        let (check, clean) = match answer {
            Answer::Check { clean } => (true, clean),
            Answer::Peek { clean } => (false, clean),
        };
        if check && !decision.allowed {
            // Relaxed: see `spend`. Stored one past `now`, so an instant 0 closes too.
            slot.denied_at
                .fetch_max(now.as_u64().saturating_add(1), Ordering::Relaxed);
        }
        if !clean {
            return;
        }
        // Relaxed: see `Slot::grants`; the view is advisory.
        let newest = grants.is_some_and(|g| g % 2 == 0)
            && grants == Some(slot.grants.load(Ordering::Relaxed));
        match (check, newest) {
            (true, true) => slot
                .view_remaining
                .store(decision.remaining, Ordering::Relaxed),
            (true, false) => {
                slot.view_remaining
                    .fetch_min(decision.remaining, Ordering::Relaxed);
            }
            (false, _) => {}
        }
        if newest {
            decision.remaining = decision.remaining.saturating_add(slot.cell.permits());
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
