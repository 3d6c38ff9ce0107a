//! Permits in transit, accounted until they settle: lease operations that timed out,
//! awaiting their late answer ([`PendingOp`]), permits queued back to Redis ([`Orphan`]),
//! and what becomes of them at shutdown.

use std::time::Instant;

use super::policy_clock::PolicyClock;
use super::Inner;
use crate::keys::TierKey;
use crate::stats::Stat;
use crate::store::{LeaseOp, LeaseReply, PendingLease};
use crate::sync::lock;
use std::sync::atomic::{AtomicU64, Ordering};

/// A lease operation whose answer did not come within the timeout (see
/// [`RedisStore::lease_op`](crate::RedisStore)).
#[derive(Debug)]
pub(super) struct PendingOp {
    /// The slot and claim epoch the permits are for (a lease) or came from (a return).
    from: Option<(usize, u64)>,
    target: TierKey,
    op: LeaseOp,
    permits: u64,
    reply: PendingLease,
}

/// Permits of `target` to give back to Redis.
#[derive(Debug)]
pub(super) struct Orphan {
    target: TierKey,
    permits: u64,
}

impl Inner {
    /// At shutdown, after every slot gave its permits back: waits (a timeout each) for the
    /// lease operations still in flight, and gives back what they and the queue hold;
    /// what is still unsettled after that is counted unknown, what Redis would not take
    /// lost.
    pub(super) fn finish(&self, clock: &mut PolicyClock) {
        let wait = self.redis.config().timeout();
        for _ in 0..3 {
            self.settle_pending(Instant::now().checked_add(wait));
            self.return_orphans(clock, true);
            if lock(&self.pending).is_empty() && lock(&self.orphans).is_empty() {
                return;
            }
        }
        for op in std::mem::take(&mut *lock(&self.pending)) {
            self.unsettle(op.permits);
            self.count(&self.counters.unknown, op.permits);
        }
        for orphan in std::mem::take(&mut *lock(&self.orphans)) {
            self.unsettle(orphan.permits);
            self.count(&self.counters.lost, orphan.permits);
        }
    }

    /// Adds `permits` to a statistic.
    pub(super) fn count(&self, stat: &Stat<AtomicU64>, permits: u64) {
        stat.add(permits);
    }

    /// `permits` more unsettled.
    fn unsettled(&self, permits: u64) {
        // Relaxed: a statistic.
        self.counters
            .unsettled
            .fetch_add(permits, Ordering::Relaxed);
    }

    /// `permits` no longer unsettled.
    fn unsettle(&self, permits: u64) {
        // Relaxed: a statistic.
        self.counters
            .unsettled
            .fetch_sub(permits, Ordering::Relaxed);
    }

    /// Keeps a lease operation that timed out until its outcome comes (see
    /// [`settle`](Self::settle)).
    pub(super) fn track(
        &self,
        from: Option<(usize, u64)>,
        target: &TierKey,
        op: LeaseOp,
        permits: u64,
        reply: PendingLease,
    ) {
        self.unsettled(permits);
        lock(&self.pending).push(PendingOp {
            from,
            target: target.clone(),
            op,
            permits,
            reply,
        });
    }

    /// Queues `permits` of `target` to go back to Redis (from the lease thread, tried at
    /// every tick): permits out of every slot that Redis still counts as leased.
    pub(super) fn orphan(&self, target: &TierKey, permits: u64) {
        if permits == 0 {
            return;
        }
        self.unsettled(permits);
        let mut orphans = lock(&self.orphans);
        match orphans.iter_mut().find(|o| o.target == *target) {
            Some(o) => o.permits = o.permits.saturating_add(permits),
            None => orphans.push(Orphan {
                target: target.clone(),
                permits,
            }),
        }
    }

    /// Settles the lease operations in flight whose outcome has come (with `until`: every
    /// one, waiting for them until then at most; an outcome still missing then is unknown).
    pub(super) fn settle_pending(&self, until: Option<Instant>) {
        let pending = std::mem::take(&mut *lock(&self.pending));
        let mut waiting = Vec::new();
        for op in pending {
            let reply = match until {
                None => op.reply.settled(),
                Some(until) => Some(
                    op.reply
                        .wait(until.saturating_duration_since(Instant::now())),
                ),
            };
            match reply {
                None => waiting.push(op),
                Some(reply) => {
                    // Unsettled only once what follows from it is accounted (in a slot, or
                    // in transit again), so the count never dips through zero meanwhile.
                    let permits = op.permits;
                    self.settle(op, reply);
                    self.unsettle(permits);
                }
            }
        }
        lock(&self.pending).extend(waiting);
    }

    /// What a lease operation that timed out did, now that it is known: a lease Redis
    /// granted late goes into the slot it was for (if that still holds the key's lease,
    /// up to the cap) or back to Redis; permits Redis did not take back go into their slot
    /// again or into the queue back to Redis; a refused or denied lease did nothing; an
    /// unknown outcome is counted.
    fn settle(&self, op: PendingOp, reply: LeaseReply) {
        match (op.op, reply) {
            (LeaseOp::Take, LeaseReply::Done(d)) if d.allowed => {
                let added = op.from.map_or(0, |(s, epoch)| {
                    let slot = &self.slots[s];
                    let mut keep = lock(&slot.keep);
                    if keep.epoch != epoch || keep.target.is_none() {
                        return 0;
                    }
                    slot.lease_answered_late(d.remaining);
                    // Relaxed: as in `lease_size`.
                    let added = slot.cell.fill(op.permits, slot.cap.load(Ordering::Relaxed));
                    slot.lease_done();
                    keep.granted += added;
                    added
                });
                // Relaxed: statistics.
                self.counters.leases.add(1);
                self.count(&self.counters.leased, op.permits);
                self.orphan(&op.target, op.permits - added);
            }
            (LeaseOp::Take, LeaseReply::Done(_) | LeaseReply::NotRun) => {}
            (LeaseOp::Return, LeaseReply::Done(_)) => {
                self.count(&self.counters.returned, op.permits)
            }
            (LeaseOp::Return, LeaseReply::NotRun) => {
                let kept = op.from.map_or(0, |(s, epoch)| {
                    let slot = &self.slots[s];
                    let mut keep = lock(&slot.keep);
                    if keep.epoch != epoch || keep.target.is_none() {
                        return 0;
                    }
                    self.keep_in_hand(slot, &mut keep, op.permits)
                });
                self.orphan(&op.target, op.permits - kept);
            }
            (_, LeaseReply::Unknown) => self.count(&self.counters.unknown, op.permits),
            (_, LeaseReply::Pending(reply)) => {
                // (an outcome is never Pending; kept waiting if it were)
                self.track(op.from, &op.target, op.op, op.permits, reply);
            }
        }
    }

    /// Gives the queued permits back to Redis; what Redis does not take stays queued (at
    /// shutdown: lost).
    pub(super) fn return_orphans(&self, clock: &PolicyClock, stopping: bool) {
        let orphans = std::mem::take(&mut *lock(&self.orphans));
        for orphan in orphans {
            if !self.give_back(None, &orphan.target, orphan.permits, clock) {
                if stopping {
                    self.count(&self.counters.lost, orphan.permits);
                } else {
                    self.orphan(&orphan.target, orphan.permits);
                }
            }
            // (after what follows from it is accounted, as in `settle_pending`)
            self.unsettle(orphan.permits);
        }
    }

    /// Gives `permits` of `target` back to Redis (taken out of slot `from`, claim epoch,
    /// if they came from one): whether they have left this process's hands. `true` if
    /// Redis took them, or may have (a timed-out call, settled later; an unknown outcome,
    /// counted); `false` if Redis certainly did not (the caller still has them).
    pub(super) fn give_back(
        &self,
        from: Option<(usize, u64)>,
        target: &TierKey,
        permits: u64,
        clock: &PolicyClock,
    ) -> bool {
        if permits == 0 {
            return true;
        }
        // `permits` ≤ cap, which a tier keeps within u32 (a queued sum saturates).
        let cost = u32::try_from(permits).unwrap_or(u32::MAX);
        let permits = u64::from(cost);
        match self
            .redis
            .lease_op(target, cost, clock.now(), LeaseOp::Return)
        {
            LeaseReply::Done(_) => {
                self.count(&self.counters.returned, permits);
                true
            }
            LeaseReply::NotRun => false,
            LeaseReply::Unknown => {
                self.count(&self.counters.unknown, permits);
                true
            }
            LeaseReply::Pending(reply) => {
                self.track(from, target, LeaseOp::Return, permits, reply);
                true
            }
        }
    }
}
