//! The lease thread: serves a slot's ask for the next lease at once, and every tick reviews
//! the leases in hand (returning what the key's rate no longer needs), frees idle keys'
//! slots, and at shutdown returns everything.

use std::thread;
use std::time::{Duration, Instant};

use super::policy_clock::PolicyClock;
use super::slot::{Keep, Slot};
use super::Inner;
use crate::store::{LeaseOp, LeaseReply};
use crate::sync::lock;
use std::sync::atomic::Ordering;

impl Inner {
    /// The lease thread: serves asks at once, looks at reviews and idle keys every tick,
    /// and returns every lease when the store is dropped.
    pub(super) fn keep_leases(&self) {
        let mut clock = PolicyClock::default();
        loop {
            thread::park_timeout(self.config.tick());
            // Relaxed: set before the unpark that woke us (or seen at a later tick).
            let stopping = self.stop.load(Ordering::Relaxed);
            for (s, slot) in self.slots.iter().enumerate() {
                if slot.cell.owner().is_none() {
                    continue;
                }
                let mut keep = lock(&slot.keep);
                if keep.target.is_none() {
                    // Claimed, not yet described by its check.
                    continue;
                }
                if stopping {
                    self.retire(s, &mut keep, &mut clock, true);
                    continue;
                }
                self.tend(s, &mut keep, &mut clock);
            }
            if stopping {
                self.finish(&mut clock);
                return;
            }
            // Relaxed: the last instant a check told (see `ask`).
            clock.observe(self.seen_now.load(Ordering::Relaxed));
            self.settle_pending(None);
            self.return_orphans(&clock, false);
        }
    }

    /// One slot's work at a tick or an ask: an idle key gives its lease back and frees
    /// the slot; a lease due for review gives back what the key's rate no longer needs; a
    /// slot that ran low (or holds no lease) takes the next one.
    fn tend(&self, s: usize, keep: &mut Keep, clock: &mut PolicyClock) {
        let slot = &self.slots[s];
        let at = Instant::now();
        // Permits handed to the cell and not returned, minus what it holds: spent so far.
        let outstanding = keep.granted - keep.returned;
        let spent = outstanding - slot.cell.permits().min(outstanding);
        if spent != keep.last_spent || keep.active.is_none() {
            keep.last_spent = spent;
            keep.active = Some(at);
        }
        let ttl = self.config.ttl();
        if keep.active.is_some_and(|t| at.duration_since(t) >= ttl) {
            self.retire(s, keep, clock, false);
            return;
        }
        if keep.review_at.is_some_and(|e| at >= e) {
            // Review: keep what one horizon of the local rate needs, return the rest. The
            // permits kept stay spendable throughout (same generation, no round trip).
            let need = self.lease_size(slot, keep, spent, at);
            let excess = slot.cell.trim(need);
            keep.returned += excess;
            if excess > 0 && !self.give_to_redis(s, keep, excess, clock) {
                // Redis cannot take them now: they stay in hand, spendable (the cap held
                // them before the trim).
                let kept = self.keep_in_hand(slot, keep, excess);
                if let Some(target) = &keep.target {
                    self.orphan(target, excess - kept);
                }
            }
            keep.review_at = checked_after(at, ttl);
        }
        // Acquire: pairs with the AcqRel swap of `ask` (and so with the `seen_now` stored
        // before it).
        let asked = slot.asked.load(Ordering::Acquire);
        if !asked && keep.review_at.is_some() {
            return;
        }
        if keep.next_try.is_some_and(|t| at < t) {
            return;
        }
        // Relaxed: ordered after the `asked` load above (see `ask`).
        clock.observe(self.seen_now.load(Ordering::Relaxed));
        self.refill(s, keep, clock, at, spent);
    }

    /// The lease size the key's local rate asks for: the rate since the last lease times
    /// the horizon (the hot rate for a first lease), within 1 and the slot's cap.
    fn lease_size(&self, slot: &Slot, keep: &Keep, spent: u64, at: Instant) -> u64 {
        let horizon = self.config.horizon().as_nanos();
        let want = match keep.mark {
            // The first lease: the key is known to run at the hot rate at least.
            None => u128::from(self.config.hot_rate()).saturating_mul(horizon) / 1_000_000_000,
            Some(mark) => {
                let elapsed = at.duration_since(mark).as_nanos().max(1);
                let used = spent - keep.spent_at_mark.min(spent);
                u128::from(used).saturating_mul(horizon) / elapsed
            }
        };
        // Relaxed: written before the claim's bookkeeping, which the caller has locked.
        let cap = slot.cap.load(Ordering::Relaxed);
        u64::try_from(want).unwrap_or(u64::MAX).clamp(1, cap.max(1))
    }

    /// Takes the next lease for `slot`.
    fn refill(&self, s: usize, keep: &mut Keep, clock: &PolicyClock, at: Instant, spent: u64) {
        let slot = &self.slots[s];
        let Some(target) = keep.target.clone() else {
            return;
        };
        if clock.seen == 0 {
            // No check has told the policy's clock yet (a client time source decides at it).
            return;
        }
        let size = self.lease_size(slot, keep, spent, at);
        // Relaxed: as in `lease_size`.
        let cap = slot.cap.load(Ordering::Relaxed);
        let held = slot.cell.permits();
        let mut want = size.min(cap.saturating_sub(held));
        if want == 0 {
            // Relaxed: served (the slot is full); nothing published with it.
            slot.asked.store(false, Ordering::Relaxed);
            return;
        }
        let now = clock.now();
        let ttl = self.config.ttl();
        for _ in 0..2 {
            // `want` ≤ cap ≤ max_cost, which a tier keeps within u32.
            let cost = u32::try_from(want).unwrap_or(u32::MAX);
            let asked = slot.lease_asked();
            match self.redis.lease_op(&target, cost, now, LeaseOp::Take) {
                LeaseReply::Done(d) if d.allowed => {
                    slot.lease_answered(asked, d.remaining);
                    // Relaxed: the view is advisory; the grant below publishes the
                    // permits (Release).
                    slot.view_reset_at.store(
                        now.as_u64().saturating_add(d.reset_after.as_u64()),
                        Ordering::Relaxed,
                    );
                    slot.low_water.store(size.div_ceil(2), Ordering::Relaxed);
                    // Checks may have given permits back since `held` was read: what would
                    // lift the slot above its cap goes straight back to Redis.
                    let added = slot.cell.fill(want, cap);
                    slot.lease_done();
                    if !self.give_back(Some((s, keep.epoch)), &target, want - added, clock) {
                        self.orphan(&target, want - added);
                    }
                    keep.granted += added;
                    if keep.review_at.is_none() {
                        keep.review_at = checked_after(at, ttl);
                    }
                    keep.mark = Some(at);
                    keep.spent_at_mark = spent;
                    keep.next_try = None;
                    self.counters.leases.add(1);
                    self.counters.leased.add(want);
                    // Relaxed: served; a spend that asks again after this wakes us again.
                    slot.asked.store(false, Ordering::Relaxed);
                    return;
                }
                LeaseReply::Done(d) if d.remaining > 0 && d.remaining < want => {
                    slot.lease_answered(asked, d.remaining);
                    slot.lease_done();
                    want = d.remaining;
                }
                LeaseReply::Done(d) => {
                    slot.lease_answered(asked, d.remaining);
                    slot.lease_done();
                    // Nothing left: ask again when Redis would have some, within a tick
                    // and a TTL.
                    let wait =
                        Duration::from_nanos(d.retry_after.as_u64()).clamp(self.config.tick(), ttl);
                    keep.next_try = checked_after(at, wait);
                    return;
                }
                reply @ (LeaseReply::NotRun | LeaseReply::Unknown | LeaseReply::Pending(_)) => {
                    // A late grant counts itself as asked again when it lands (`settle`).
                    slot.lease_done();
                    match reply {
                        // It may still run, or have run: its outcome settles later.
                        LeaseReply::Pending(reply) => {
                            self.track(Some((s, keep.epoch)), &target, LeaseOp::Take, want, reply);
                        }
                        LeaseReply::Unknown => self.count(&self.counters.unknown, want),
                        LeaseReply::NotRun | LeaseReply::Done(_) => {}
                    }
                    let backoff = self.redis.config().retry_backoff().max(self.config.tick());
                    keep.next_try = checked_after(at, backoff);
                    return;
                }
            }
        }
    }

    /// Gives `permits` of slot `s`'s key back to Redis: whether they left this process's
    /// hands (see [`give_back`](Self::give_back)).
    fn give_to_redis(&self, s: usize, keep: &Keep, permits: u64, clock: &PolicyClock) -> bool {
        let Some(target) = keep.target.as_ref() else {
            return false;
        };
        self.give_back(Some((s, keep.epoch)), target, permits, clock)
    }

    /// Returns everything the slot holds to Redis and frees it (an idle key, or the store
    /// dropped). If Redis cannot take the permits back, an idle key keeps holding them
    /// (spendable, tried again after the backoff); only at shutdown are they lost.
    fn retire(&self, s: usize, keep: &mut Keep, clock: &mut PolicyClock, stopping: bool) {
        let slot = &self.slots[s];
        // Relaxed: the last instant a check told (see `ask`).
        clock.observe(self.seen_now.load(Ordering::Relaxed));
        // The owner stays until the permits are back: meanwhile spends find none and go
        // to Redis, and no other key can claim the slot (nor wait on its bookkeeping).
        let left = slot.cell.revoke();
        keep.returned += left;
        if left > 0 && !self.give_to_redis(s, keep, left, clock) {
            if stopping {
                self.count(&self.counters.lost, left);
            } else {
                let kept = self.keep_in_hand(slot, keep, left);
                if let Some(target) = &keep.target {
                    self.orphan(target, left - kept);
                }
                return;
            }
        }
        *keep = Keep::default();
        // Relaxed: nothing is asked of a free slot.
        slot.asked.store(false, Ordering::Relaxed);
        slot.cell.release();
    }

    /// Puts `left` permits Redis could not take back into the slot again (spendable), and
    /// tries again after the backoff: how many went in (the caller queues the rest, see
    /// [`orphan`](Self::orphan)).
    pub(super) fn keep_in_hand(&self, slot: &Slot, keep: &mut Keep, left: u64) -> u64 {
        // They were in the cell, under the cap, a moment ago; checks may have given some
        // back since.
        // Relaxed: as in `lease_size`.
        let kept = slot.cell.fill(left, slot.cap.load(Ordering::Relaxed));
        keep.returned -= kept;
        let at = Instant::now();
        keep.active = Some(at);
        let backoff = self.redis.config().retry_backoff().max(self.config.tick());
        keep.next_try = checked_after(at, backoff);
        kept
    }
}

/// `at + wait`, or (for durations no `Instant` can reach) `None`: never.
fn checked_after(at: Instant, wait: Duration) -> Option<Instant> {
    at.checked_add(wait)
}
