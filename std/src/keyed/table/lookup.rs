//! Lookups: the lock-free probe of a key's two buckets, the check, peek and removal that
//! run on what it finds, the compare-and-swap loop every lock-free update goes through, and
//! the locked path that inserts a new key.

use tollgate_core::{Algorithm, Decision, InsufficientCapacity, Nanos};

use super::eviction::Victims;
use super::shard::Shard;
use super::{Loc, Mode, Table, LOCK_FREE_ATTEMPTS};
use crate::keyed::key::is_word;
use crate::keyed::table::{Bucket, Slot, BUCKET_SLOTS};
use crate::keyed::KeyedError;
use crate::sync::{lock, Ordering};

/// The result of probing for a key.
pub(super) enum Probe<R> {
    /// Found; the closure's result.
    Hit(R),
    /// Found, but the slot changed owner while the closure ran: look again.
    Raced,
    /// Not resident.
    Missing,
}

impl<K> Table<K> {
    /// Runs the algorithm on a slot believed to hold identity `h`: `None` if the slot turns
    /// out to belong to another key (evicted meanwhile).
    #[inline(always)]
    pub(super) fn run<A: Algorithm + ?Sized>(
        slot: &Slot,
        h: u64,
        mask: u64,
        algorithm: &A,
        now: Nanos,
        cost: u32,
        peek: bool,
    ) -> Option<Result<Decision, InsufficientCapacity>> {
        update_slot(slot, h, mask, &mut |state| {
            if peek {
                return (None, algorithm.peek(state, now, cost).map(|o| o.decision));
            }
            match algorithm.decide(state, now, cost) {
                Ok(outcome) => (outcome.next, Ok(outcome.decision)),
                Err(e) => (None, Err(e)),
            }
        })
    }

    /// What a check of `cost` would answer for an absent identity `h`: a fresh key's
    /// answer, or the one of the debt its insert would start from.
    pub(super) fn peek_absent<A: Algorithm + ?Sized>(
        &self,
        h: u64,
        algorithm: &A,
        now: Nanos,
        cost: u32,
    ) -> Result<Decision, InsufficientCapacity> {
        let (start, _) = self.start_state(h, 0, algorithm, now);
        algorithm.peek(start, now, cost).map(|o| o.decision)
    }

    /// After a lock-free probe of shard `s` missed: whether "absent" can be trusted.
    ///
    /// The first miss only reads the shard's move sequence into `seq` and asks for another
    /// probe (so hits, the common case, never touch the shard's cache line, which inserts
    /// write). A later miss is trusted if no move was under way at that read and none
    /// started since; otherwise the sequence is read again for the next probe. Sound
    /// because a probe that misses a key resident all along read the claim of a move that
    /// started after the sequence read before it (see `moved_since`).
    #[inline]
    pub(super) fn miss_confirmed(&self, s: usize, seq: &mut Option<u64>) -> bool {
        if let Some(before) = *seq {
            if !self.moved_since(s, before) {
                return true;
            }
        }
        *seq = Some(self.move_seq(s));
        false
    }

    /// The move sequence of shard `s`, read before a probe whose miss must be confirmed.
    #[inline]
    pub(super) fn move_seq(&self, s: usize) -> u64 {
        // Acquire: pairs with the Release store ending a move, so a probe that starts
        // after it sees the moved entry in its new slot.
        self.shards[s].moves.load(Ordering::Acquire)
    }

    /// Whether a lookup that began at move sequence `seq` and found nothing may have missed
    /// a resident key: a move was under way when it began (`seq` odd) or one started since.
    #[inline]
    pub(super) fn moved_since(&self, s: usize, seq: u64) -> bool {
        if !self.move_retry_enabled() {
            return false;
        }
        // Relaxed: ordered after the probe's Acquire identity loads; if the probe read a
        // move's claim, that move's first bump happens-before this load (see `move_entry`).
        seq & 1 == 1 || self.shards[s].moves.load(Ordering::Relaxed) != seq
    }
}

impl<K: Eq + Clone + 'static> Table<K> {
    /// Probes `loc`'s buckets for identity `h` (and, in exact mode, `key`), running `f` on
    /// the slot found.
    #[inline(always)]
    pub(super) fn probe<R>(
        &self,
        key: &K,
        h: u64,
        loc: Loc,
        mut f: impl FnMut(usize, &Slot) -> Option<R>,
    ) -> Probe<R> {
        for g in [loc.g1, loc.g2] {
            for (i, slot) in self.buckets[g].slots.iter().enumerate() {
                // Acquire: pairs with the Release store that published this identity, so
                // the state (and key) written before it are visible.
                if slot.ident.load(Ordering::Acquire) != h {
                    continue;
                }
                let idx = g * BUCKET_SLOTS + i;
                if self.mode != Mode::Exact {
                    return match f(idx, slot) {
                        Some(r) => Probe::Hit(r),
                        None => Probe::Raced,
                    };
                }
                let cell = &self.keys[idx];
                let pin = cell.pin();
                // SeqCst: as for the pin; if the identity still names a key, no writer can
                // touch that key until we unpin.
                let outcome = if slot.ident.load(Ordering::SeqCst) == h
                    // SAFETY: pinned after the identity was published and re-checked: the key
                    // is initialised and no writer touches it until we unpin.
                    && unsafe { cell.get() } == key
                {
                    Some(f(idx, slot))
                } else {
                    None
                };
                drop(pin);
                match outcome {
                    Some(Some(r)) => return Probe::Hit(r),
                    Some(None) => return Probe::Raced,
                    None => {}
                }
            }
        }
        Probe::Missing
    }

    /// Whether lookups compare identities only (integer keys, or fingerprint mode).
    #[inline(always)]
    pub(super) fn identities_only(&self) -> bool {
        is_word::<K>() || self.mode != Mode::Exact
    }

    /// The slot holding identity `h`, if resident (identity-only modes).
    ///
    /// Each bucket is scanned without data-dependent branches (four loads, four compares,
    /// one bit scan): a mispredicted branch waiting on a cache miss would keep the next
    /// lookup's miss from overlapping this one.
    #[inline(always)]
    pub(super) fn find_ident(&self, h: u64, loc: Loc) -> Option<&Slot> {
        #[inline(always)]
        fn scan(bucket: &Bucket, h: u64) -> u32 {
            let mut hits = 0u32;
            for (i, slot) in bucket.slots.iter().enumerate() {
                // Acquire: pairs with the Release store that published this identity, so
                // the state written before it is visible.
                hits |= u32::from(slot.ident.load(Ordering::Acquire) == h) << i;
            }
            hits
        }
        let first = &self.buckets[loc.g1];
        let hits = scan(first, h);
        if hits != 0 {
            return first.slots.get(hits.trailing_zeros() as usize);
        }
        let second = &self.buckets[loc.g2];
        let hits = scan(second, h);
        if hits != 0 {
            return second.slots.get(hits.trailing_zeros() as usize);
        }
        None
    }

    /// Checks `cost` permits for `key` (identity `h`) at `now`, inserting the key if new.
    ///
    /// Always inlined: with several callers (`check`, `check_n`, `check_n_at`) the
    /// optimiser would otherwise keep it out of line, adding a call and a copy of the
    /// decision to every check.
    #[inline(always)]
    pub(crate) fn check<A: Algorithm + ?Sized>(
        &self,
        key: &K,
        h: u64,
        algorithm: &A,
        now: Nanos,
        cost: u32,
    ) -> Result<Decision, KeyedError> {
        let loc = self.locate(h);
        let mask = self.mask(h);
        if self.identities_only() {
            // One attempt inline: a short hot path (the former four unrolled attempts made
            // it ~4× the code). A new key and a lookup that raced an eviction continue out
            // of line.
            let Some(slot) = self.find_ident(h, loc) else {
                return self.check_locked(key, h, loc, algorithm, now, cost);
            };
            if let Some(result) = Self::run(slot, h, mask, algorithm, now, cost, false) {
                return result.map_err(KeyedError::from);
            }
            return self.check_raced(key, h, loc, algorithm, now, cost);
        }
        for _ in 0..LOCK_FREE_ATTEMPTS {
            match self.probe(key, h, loc, |_, slot| {
                Self::run(slot, h, mask, algorithm, now, cost, false)
            }) {
                Probe::Hit(result) => return result.map_err(KeyedError::from),
                Probe::Raced => continue,
                Probe::Missing => break,
            }
        }
        self.check_locked(key, h, loc, algorithm, now, cost)
    }

    /// An identity-only lookup whose first attempt raced an eviction: the remaining
    /// lock-free attempts, then the locked path.
    #[cold]
    #[inline(never)]
    pub(super) fn check_raced<A: Algorithm + ?Sized>(
        &self,
        key: &K,
        h: u64,
        loc: Loc,
        algorithm: &A,
        now: Nanos,
        cost: u32,
    ) -> Result<Decision, KeyedError> {
        let mask = self.mask(h);
        for _ in 1..LOCK_FREE_ATTEMPTS {
            let Some(slot) = self.find_ident(h, loc) else {
                break;
            };
            if let Some(result) = Self::run(slot, h, mask, algorithm, now, cost, false) {
                return result.map_err(KeyedError::from);
            }
        }
        self.check_locked(key, h, loc, algorithm, now, cost)
    }

    /// The slow path: under the shard lock, check a key that appeared meanwhile, or insert
    /// it (making room per the policy) with the state its first check leaves.
    #[cold]
    #[inline(never)]
    pub(super) fn check_locked<A: Algorithm + ?Sized>(
        &self,
        key: &K,
        h: u64,
        loc: Loc,
        algorithm: &A,
        now: Nanos,
        cost: u32,
    ) -> Result<Decision, KeyedError> {
        let mask = self.mask(h);
        let shard = &self.shards[loc.shard];
        // Declared before the lock guard, so dropped after it on every path: evicted keys'
        // `Drop` runs once the new key is published and the lock released.
        let mut victims = Victims::new();
        let mut local = lock(&shard.lock);
        // Under the lock no slot changes owner, so a hit cannot race.
        if let Probe::Hit(result) = self.probe(key, h, loc, |_, slot| {
            Self::run(slot, h, mask, algorithm, now, cost, false)
        }) {
            return result.map_err(KeyedError::from);
        }
        // Fresh, or the debt the summary holds for `h` (its own, if it was evicted under
        // pressure, else at worst a collision's).
        let (start, inherited) = self.start_state(h, 0, algorithm, now);
        let outcome = algorithm.decide(start, now, cost)?;
        let Some(initial) = outcome.next else {
            // Nothing to remember (a probe, or a deny): the key stays absent (a debt it
            // would inherit stays in the summary).
            return Ok(outcome.decision);
        };
        // Clone before touching any slot: a panicking `Clone` leaves the table as it was.
        let stored_key = (self.mode == Mode::Exact).then(|| key.clone());
        let Some(idx) = self.make_room(&mut local, loc, algorithm, now, &mut victims) else {
            Shard::bump(&shard.refusals);
            return Err(KeyedError::Full);
        };
        let slot = self.slot(idx);
        if let Some(stored_key) = stored_key {
            // SAFETY: `make_room` returned a slot of ours with an empty identity, no pin and
            // no key, and we hold the shard lock.
            unsafe { self.keys[idx].write(stored_key) };
        }
        self.note_inherited(idx, inherited);
        // Release: pairs with readers' Acquire loads of the state (see `run`).
        slot.state.store(initial ^ mask, Ordering::Release);
        self.publish(slot, h);
        Shard::bump(&shard.inserts);
        Ok(outcome.decision)
    }

    /// What a check of `cost` would answer; inserts nothing (an absent key answers from the
    /// state its insert would start from: fresh, or the debt summary's).
    #[inline]
    pub(crate) fn peek<A: Algorithm + ?Sized>(
        &self,
        key: &K,
        h: u64,
        algorithm: &A,
        now: Nanos,
        cost: u32,
    ) -> Result<Decision, InsufficientCapacity> {
        let loc = self.locate(h);
        let mask = self.mask(h);
        let run = |_: usize, slot: &Slot| Self::run(slot, h, mask, algorithm, now, cost, true);
        let mut seq = None;
        for _ in 0..LOCK_FREE_ATTEMPTS {
            match self.probe(key, h, loc, run) {
                Probe::Hit(result) => return result,
                Probe::Raced => continue,
                // Absent, unless the probe may have raced a move (then look again).
                Probe::Missing if !self.miss_confirmed(loc.shard, &mut seq) => continue,
                Probe::Missing => return self.peek_absent(h, algorithm, now, cost),
            }
        }
        let _local = lock(&self.shards[loc.shard].lock);
        match self.probe(key, h, loc, run) {
            Probe::Hit(result) => result,
            _ => self.peek_absent(h, algorithm, now, cost),
        }
    }

    /// Whether `key` is resident.
    pub(crate) fn contains(&self, key: &K, h: u64) -> bool {
        let loc = self.locate(h);
        let mut seq = None;
        for _ in 0..LOCK_FREE_ATTEMPTS {
            match self.probe(key, h, loc, |_, _| Some(())) {
                Probe::Hit(()) => return true,
                Probe::Raced => continue,
                Probe::Missing if !self.miss_confirmed(loc.shard, &mut seq) => continue,
                Probe::Missing => return false,
            }
        }
        let _local = lock(&self.shards[loc.shard].lock);
        matches!(self.probe(key, h, loc, |_, _| Some(())), Probe::Hit(()))
    }

    /// Forgets `key` (its next check starts fresh); whether it was resident.
    pub(crate) fn remove(&self, key: &K, h: u64) -> bool {
        let loc = self.locate(h);
        let shard = &self.shards[loc.shard];
        // Dropped after the lock guard (see `Victims`).
        let mut victims = Victims::new();
        let _local = lock(&shard.lock);
        match self.probe(key, h, loc, |idx, _| Some(idx)) {
            Probe::Hit(idx) => {
                self.evict_now(shard, idx, true, false, &mut victims);
                true
            }
            _ => false,
        }
    }
}

/// Runs `f` on `slot`'s state (held by identity `h`, stored XOR `mask`) in a
/// compare-and-swap loop: `f` returns the state to store (`None`: leave it, no write) and
/// its result; `None` if the slot turns out to belong to another identity (evicted or moved
/// meanwhile). Every lock-free update of a resident entry goes through here.
#[inline(always)]
pub(super) fn update_slot<R>(
    slot: &Slot,
    h: u64,
    mask: u64,
    f: &mut impl FnMut(u64) -> (Option<u64>, R),
) -> Option<R> {
    // Acquire: pairs with the Release writes an eviction or insert makes to this word
    // (each made after the identity was set to empty), so the identity re-check below sees
    // any eviction whose write we read.
    let mut stored = slot.state.load(Ordering::Acquire);
    loop {
        // Relaxed: ordered after the Acquire state load (or failed CAS) above.
        if slot.ident.load(Ordering::Relaxed) != h {
            return None;
        }
        let (next, result) = f(stored ^ mask);
        let Some(next) = next else {
            return Some(result);
        };
        // Success Relaxed: one word's modification order linearises the key's updates, and
        // nothing else is published with it. Failure Acquire: as for the first load.
        match slot.state.compare_exchange_weak(
            stored,
            next ^ mask,
            Ordering::Relaxed,
            Ordering::Acquire,
        ) {
            Ok(_) => return Some(result),
            Err(actual) => stored = actual,
        }
    }
}
