//! Operations on an identity-only table by 64-bit identity alone, for owners that give the
//! state word their own meaning: the policy layer's per-tier stores, which compensate and
//! refund takes, and carry states over to a new table when a reload changes a tier.
//!
//! They follow the protocol of the parent module (lock-free lookups whose only write is the
//! state's compare-and-swap; inserts and removals under the shard lock) and only differ in
//! what runs on the state: a caller's closure instead of an [`Algorithm`]'s decision.

use tollgate_core::Nanos;

use super::lookup::update_slot;
use super::shard::Shard;
use super::{Judge, Loc, Mode, Table, Victims, LOCK_FREE_ATTEMPTS};
use crate::keyed::table::{Slot, BUCKET_SLOTS};
use crate::sync::{lock, Ordering};

/// What a state update does: the state to store (`None`: leave it) and what to return.
pub(crate) type Step<R> = (Option<u64>, R);

/// A resident identity's state as a lock-free lookup read it ([`Table::read_if_found`]):
/// the slot and the word it held. [`replace`](Self::replace) later writes a successor state
/// with one compare-and-swap, without looking the identity up again.
///
/// Sound for the reason every lock-free update of the table is (see the parent module):
/// the word was loaded with `Acquire` and the identity re-checked after it, exactly as
/// `update_slot` does before it decides; any change of the slot's owner since (eviction,
/// removal, move) writes the state word, so the compare-and-swap fails and the caller
/// looks again. The time between the read and the write does not matter to that argument
/// (`update_slot`'s decision runs in between too).
#[derive(Copy, Clone, Debug)]
pub(crate) struct Seen<'t> {
    slot: &'t Slot,
    /// The state word as stored (masked).
    stored: u64,
    mask: u64,
}

impl Seen<'_> {
    /// The state read (unmasked).
    #[inline(always)]
    pub(crate) fn state(&self) -> u64 {
        self.stored ^ self.mask
    }

    /// Writes `next` if the slot still holds the word read (so the same identity, with
    /// the same state); whether it did.
    #[inline(always)]
    pub(crate) fn replace(&self, next: u64) -> bool {
        // Success Relaxed: as in `update_slot` (one word's modification order linearises
        // the key's updates; nothing else is published with it). Failure Relaxed: the
        // caller then looks the identity up again, with its own Acquire load.
        self.slot
            .state
            .compare_exchange(
                self.stored,
                next ^ self.mask,
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_ok()
    }
}

/// How an [`Table::upsert`] ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Upsert<R> {
    /// The update ran (on the resident state, or on the seeded state of a new entry).
    Done(R),
    /// The identity was absent and the caller's gate refused to insert it.
    Closed,
    /// The identity was absent and no slot could be made for it.
    Full,
}

impl<K: Eq + Clone + 'static> Table<K> {
    /// Runs `f` on the state of resident identity `h` in a compare-and-swap loop (`f` may
    /// run several times; only its last result is returned); `None` if `h` is not resident.
    /// Lock-free unless the entry keeps moving under it, then settled under the shard lock.
    /// A probe that misses while a cuckoo move is under way in the shard looks again (see
    /// the parent module), so a resident entry is never reported absent: what
    /// compensations, refunds and peeks need.
    #[inline]
    pub(crate) fn update_resident<R>(&self, h: u64, f: impl FnMut(u64) -> Step<R>) -> Option<R> {
        self.update_found(h, true, f)
    }

    /// As [`update_resident`](Self::update_resident), but a miss is not confirmed: `None`
    /// may also mean the entry was between two slots of a cuckoo move. Only for callers
    /// that go on to [`upsert`](Self::upsert) on `None` (which looks again under the shard
    /// lock, where nothing moves): a take of a new key then pays one probe, as before.
    #[inline]
    pub(crate) fn update_if_found<R>(&self, h: u64, f: impl FnMut(u64) -> Step<R>) -> Option<R> {
        self.update_found(h, false, f)
    }

    /// The state of resident identity `h`, read lock-free, with where it was read (for a
    /// later [`Seen::replace`]); `None` if `h` is not resident, or was being moved or
    /// evicted at each of a few attempts (a miss is not confirmed, as for
    /// [`update_if_found`](Self::update_if_found)). `loc`: where `h` lives, as this
    /// table's [`locate`](Self::locate) or [`prefetch_located`](Self::prefetch_located)
    /// answered it.
    #[inline(always)]
    pub(crate) fn read_if_found(&self, h: u64, loc: Loc) -> Option<Seen<'_>> {
        debug_assert!(self.mode != Mode::Exact, "identity-only tables");
        for _ in 0..LOCK_FREE_ATTEMPTS {
            let slot = self.find_ident(h, loc)?;
            // Acquire: as in `update_slot` (pairs with the Release writes an eviction or
            // insert makes to this word after setting the identity to empty).
            let stored = slot.state.load(Ordering::Acquire);
            // Relaxed: ordered after the Acquire state load above.
            if slot.ident.load(Ordering::Relaxed) == h {
                return Some(Seen {
                    slot,
                    stored,
                    mask: self.mask(h),
                });
            }
        }
        None
    }

    #[inline(always)]
    fn update_found<R>(
        &self,
        h: u64,
        confirm_miss: bool,
        mut f: impl FnMut(u64) -> Step<R>,
    ) -> Option<R> {
        debug_assert!(self.mode != Mode::Exact, "identity-only tables");
        let loc = self.locate(h);
        let mask = self.mask(h);
        let mut seq = None;
        for _ in 0..LOCK_FREE_ATTEMPTS {
            let Some(slot) = self.find_ident(h, loc) else {
                // Absent, unless the probe may have raced a move (then look again): a
                // compensation or refund must not be dropped because its entry was between
                // two slots.
                if !confirm_miss || self.miss_confirmed(loc.shard, &mut seq) {
                    return None;
                }
                continue;
            };
            if let Some(result) = update_slot(slot, h, mask, &mut f) {
                return Some(result);
            }
        }
        // Racing evictions or moves each time: under the lock no slot changes owner.
        let _local = lock(&self.shards[loc.shard].lock);
        update_slot(self.find_ident(h, loc)?, h, mask, &mut f)
    }

    /// Under `h`'s shard lock: runs `f` on `h`'s state if resident; else, if `admit()`
    /// allows, runs it on `seed()` (made at least as strict as the debt summary's state for
    /// `h`, if the table has one) and inserts the entry with the result (or with the seed
    /// when `f` stores nothing and the seed is not `0`, the fresh state), making room per
    /// the table's [`WhenFull`](crate::WhenFull) with `judge` judging idle entries.
    ///
    /// `admit` and `seed` run under the shard lock: they may take other locks only in an
    /// order no lock holder of this table reverses.
    pub(crate) fn upsert<J: Judge + ?Sized, R>(
        &self,
        h: u64,
        judge: &J,
        now: Nanos,
        admit: impl FnOnce() -> bool,
        seed: impl FnOnce() -> u64,
        mut f: impl FnMut(u64) -> Step<R>,
    ) -> Upsert<R> {
        debug_assert!(self.mode != Mode::Exact, "identity-only tables");
        let loc = self.locate(h);
        let mask = self.mask(h);
        let shard = &self.shards[loc.shard];
        // Identity-only: no key is stored, so none is ever evicted into it.
        let mut victims = Victims::new();
        let mut local = lock(&shard.lock);
        if let Some(slot) = self.find_ident(h, loc) {
            // Under the lock the slot cannot change owner: the update completes.
            if let Some(result) = update_slot(slot, h, mask, &mut f) {
                return Upsert::Done(result);
            }
        }
        if !admit() {
            return Upsert::Closed;
        }
        // The stricter of the caller's seed and the debt the summary holds for `h`.
        let (base, inherited) = self.start_state(h, seed(), judge, now);
        let (next, result) = f(base);
        let Some(initial) = next.or((base != 0).then_some(base)) else {
            // A fresh state left fresh: nothing to remember.
            return Upsert::Done(result);
        };
        let Some(idx) = self.make_room(&mut local, loc, judge, now, &mut victims) else {
            Shard::bump(&shard.refusals);
            return Upsert::Full;
        };
        self.note_inherited(idx, inherited);
        let slot = self.slot(idx);
        // Release: pairs with readers' Acquire loads of the state.
        slot.state.store(initial ^ mask, Ordering::Release);
        self.publish(slot, h);
        Shard::bump(&shard.inserts);
        Upsert::Done(result)
    }

    /// Removes resident identity `h` and returns its last state: every update that
    /// completed before is in it, and every update still under way fails its
    /// compare-and-swap, finds `h` gone and goes to the slow path (where its owner decides).
    pub(crate) fn extract(&self, h: u64) -> Option<u64> {
        debug_assert!(self.mode != Mode::Exact, "identity-only tables");
        let loc = self.locate(h);
        let shard = &self.shards[loc.shard];
        let mut victims = Victims::new();
        let _local = lock(&shard.lock);
        let idx = self.find_index(h, loc)?;
        Some(self.evict_now(shard, idx, true, false, &mut victims) ^ self.mask(h))
    }

    /// Every resident `(identity, state)` pair, read shard by shard under the shard's lock
    /// (a snapshot: states may change after their shard is read).
    pub(crate) fn resident(&self) -> Vec<(u64, u64)> {
        let span = self.buckets_per_shard * BUCKET_SLOTS;
        let mut out = Vec::new();
        for (s, shard) in self.shards.iter().enumerate() {
            let _local = lock(&shard.lock);
            for idx in s * span..(s + 1) * span {
                if !self.occupied(idx) {
                    continue;
                }
                let slot = self.slot(idx);
                // Relaxed: under the shard lock, which orders every identity change.
                let h = slot.ident.load(Ordering::Relaxed);
                // Acquire: pairs with the Release stores and CASes of the state.
                out.push((h, slot.state.load(Ordering::Acquire) ^ self.mask(h)));
            }
        }
        out
    }

    /// The index of the slot holding identity `h`, if resident (under the shard lock).
    fn find_index(&self, h: u64, loc: Loc) -> Option<usize> {
        [loc.g1, loc.g2]
            .into_iter()
            .flat_map(|g| g * BUCKET_SLOTS..(g + 1) * BUCKET_SLOTS)
            // Relaxed: under the shard lock, which orders every identity change.
            .find(|&idx| self.slot(idx).ident.load(Ordering::Relaxed) == h)
    }
}
