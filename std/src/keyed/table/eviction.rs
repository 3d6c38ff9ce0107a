//! Making room for a key, under its shard's lock: the key quota, idle and pressure
//! evictions (judged by a [`Judge`]), cuckoo displacement between a key's two buckets, the
//! debts evicted keys leave, and the claim, pin drain and publication every change of a
//! slot's owner goes through.

use tollgate_core::{Algorithm, Decision, InsufficientCapacity, Nanos};

use super::shard::{Shard, ShardLocal};
use super::{Loc, Mode, Table, SWEEP};
use crate::keyed::debt_summary::DebtSummary;
use crate::keyed::table::{Slot, BUCKET_SLOTS};
use crate::keyed::WhenFull;
use crate::sync::{lock, loom_sc_fence, wait_a_little, Ordering};

/// An idle entry (`None`) or how much evicting it would lose: `(reset_after, −remaining)`,
/// compared lexicographically, smaller loses less.
pub(super) type Loss = Option<(u64, u64)>;

/// A resident entry considered for eviction: its slot and what evicting it loses.
pub(super) type Candidate = Option<(usize, (u64, u64))>;

/// How a table judges the entries it may evict, and lets go of one: what a state word
/// means is its owner's business. An [`Algorithm`] judges its own packed states (the
/// blanket implementation, and the only judge a debt summary works with); an owner that
/// keeps a key's state elsewhere and stores a handle to it in the word (the policy's
/// sliding-log tiers: an index into their slab of logs) judges by what the handle holds,
/// and is told when an entry leaves.
pub(crate) trait Judge {
    /// Whether evicting the entry whose word is `state` loses nothing at `now`.
    fn is_idle(&self, state: u64, now: Nanos) -> bool;

    /// What evicting a non-idle entry loses, compared as a pair (lowest evicted first):
    /// the time until it would be fresh again, then `u64::MAX - remaining`.
    fn loss(&self, state: u64, now: Nanos) -> (u64, u64);

    /// The entry whose word is `state` is about to be evicted, under the shard lock: idle
    /// (`idle`: only if it still is; `false` keeps the entry, evicting nothing) or under
    /// pressure (always). Whatever the word refers to is let go of here.
    fn release(&self, state: u64, now: Nanos, idle: bool) -> bool;

    /// The state a new identity starts from given the debt summary (see
    /// [`DebtSummary::seed`]): `seed` itself, and not inherited, for a judge that is not an
    /// algorithm (a table of handles has no summary).
    fn seed_from(&self, debts: &DebtSummary, h: u64, seed: u64, now: Nanos) -> (u64, bool);

    /// Records an entry evicted under pressure in the debt summary (see
    /// [`DebtSummary::evicted`]).
    fn record_evicted(&self, debts: &DebtSummary, h: u64, state: u64, inherited: bool, now: Nanos);
}

/// What evicting an entry loses, from a peek of it at cost 0, as [`Judge::loss`] compares
/// it (a peek that fails: nothing known, evicted first).
pub(crate) fn loss_of(peeked: Result<Decision, InsufficientCapacity>) -> (u64, u64) {
    match peeked {
        Ok(d) => (d.reset_after.as_u64(), u64::MAX - d.remaining),
        Err(_) => (0, u64::MAX),
    }
}

impl<A: Algorithm + ?Sized> Judge for A {
    #[inline]
    fn is_idle(&self, state: u64, now: Nanos) -> bool {
        Algorithm::is_idle(self, state, now)
    }

    fn loss(&self, state: u64, now: Nanos) -> (u64, u64) {
        loss_of(self.peek(state, now, 0).map(|o| o.decision))
    }

    /// A packed state refers to nothing: the table's own compare-and-swap of the word
    /// settles an idle eviction racing a check.
    #[inline]
    fn release(&self, _: u64, _: Nanos, _: bool) -> bool {
        true
    }

    #[inline]
    fn seed_from(&self, debts: &DebtSummary, h: u64, seed: u64, now: Nanos) -> (u64, bool) {
        debts.seed(h, seed, self, now)
    }

    fn record_evicted(&self, debts: &DebtSummary, h: u64, state: u64, inherited: bool, now: Nanos) {
        debts.evicted(h, state, inherited, self, now);
    }
}

/// Keys taken out of their cells by evictions and removals (exact mode), to be dropped by
/// the caller once every count is settled, the new key (if any) published and the shard
/// lock released.
///
/// A key's `Drop` is user code: it may panic, or even call back into the limiter. Run
/// inside an eviction it could unwind between the eviction and the accounting or insert
/// that completes it, stranding a unit of the shard's key quota (`len()` counting a key
/// that is gone, for ever); run under the shard lock it could deadlock. Here it runs after
/// the table is whole again, so a panic only propagates to the caller.
///
/// Room for [`SWEEP`] keys: the most one [`Table::make_room`] evicts (one sweep window, or
/// one candidate). Callers evicting more flush it between batches (see
/// [`Table::evict_idle_all`]).
pub(crate) struct Victims<K> {
    keys: [Option<K>; SWEEP],
    len: usize,
}

impl<K> Victims<K> {
    /// None yet.
    pub(crate) fn new() -> Victims<K> {
        Victims {
            keys: core::array::from_fn(|_| None),
            len: 0,
        }
    }

    /// Keeps `key` to be dropped later. Beyond the capacity (which no caller reaches) it is
    /// dropped at once: its eviction's accounting is already done, so even then a panic
    /// leaves every count right.
    fn push(&mut self, key: K) {
        match self.keys.get_mut(self.len) {
            Some(place) => {
                *place = Some(key);
                self.len += 1;
            }
            None => drop(key),
        }
    }

    /// Whether another eviction might not fit.
    fn is_full(&self) -> bool {
        self.len == SWEEP
    }
}

impl<K> Table<K> {
    /// The state a new identity `h` starts from at `now` (fresh, or the debt the summary
    /// holds for it), and whether that was an inherited debt.
    #[inline]
    pub(super) fn start_state<J: Judge + ?Sized>(
        &self,
        h: u64,
        seed: u64,
        judge: &J,
        now: Nanos,
    ) -> (u64, bool) {
        match &self.debts {
            Some(debts) => judge.seed_from(debts, h, seed, now),
            None => (seed, false),
        }
    }

    /// The state absent identity `h` would start from at `now` (fresh, or the debt the
    /// summary holds for it): what a peek of it answers from.
    #[inline]
    pub(crate) fn absent_state<J: Judge + ?Sized>(&self, h: u64, judge: &J, now: Nanos) -> u64 {
        self.start_state(h, 0, judge, now).0
    }

    /// Marks whether the entry just inserted in slot `idx` started from an inherited debt
    /// (under the shard lock).
    #[inline]
    pub(super) fn note_inherited(&self, idx: usize, inherited: bool) {
        if let Some(debts) = &self.debts {
            debts.set_inherited(idx, inherited);
        }
    }

    /// Whether the entry in slot `idx` is idle (`None`) or what evicting it loses.
    pub(super) fn loss<J: Judge + ?Sized>(&self, idx: usize, judge: &J, now: Nanos) -> Loss {
        let slot = self.slot(idx);
        // Relaxed: under the shard lock (identities are stable).
        let h = slot.ident.load(Ordering::Relaxed);
        // Acquire: see `run`.
        let state = slot.state.load(Ordering::Acquire) ^ self.mask(h);
        if judge.is_idle(state, now) {
            return None;
        }
        Some(judge.loss(state, now))
    }

    /// Publishes identity `h` in `slot`, after its state (and key) are written.
    #[inline]
    pub(super) fn publish(&self, slot: &Slot, h: u64) {
        // Release: publishes the state and key written before it to readers that
        // Acquire-load this identity. In exact mode SeqCst: then every store to an identity
        // takes part in the pin handshake's single total order (the handshake's reasoning
        // needs no rule about SC loads reading non-SC stores).
        let order = if self.mode == Mode::Exact {
            Ordering::SeqCst
        } else {
            Ordering::Release
        };
        slot.ident.store(h, order);
    }

    /// Marks slot `idx` empty (first step of every eviction), under the shard lock.
    #[inline]
    pub(super) fn claim(&self, idx: usize) {
        // SeqCst: the writer half of the pin handshake (see `KeyCell`), and ordered before
        // the state write that readers Acquire.
        self.slot(idx)
            .ident
            .store(self.empty_ident(idx / BUCKET_SLOTS), Ordering::SeqCst);
        // A no-op outside loom (see `loom_sc_fence`): the claim and the pin count loads
        // that follow it are both SeqCst already.
        loom_sc_fence();
    }

    /// Waits until no reader is comparing slot `idx`'s key (exact mode), after a claim.
    #[inline]
    pub(super) fn drain_pins(&self, idx: usize) {
        if self.mode != Mode::Exact || !self.pin_wait_enabled() {
            return;
        }
        let mut round = 0;
        // SeqCst: the writer half of the pin handshake; its acquire part pairs with the
        // readers' Release unpin, so their key reads happen before our key write.
        while self.keys[idx].pins.load(Ordering::SeqCst) != 0 {
            wait_a_little(round);
            round = round.saturating_add(1);
        }
    }

    /// Evicts slot `idx` if its entry is idle right now; `false` if a check got there
    /// first (the entry then stays, untouched). The evicted key goes to `victims`.
    pub(super) fn evict_idle<J: Judge + ?Sized>(
        &self,
        shard: &Shard,
        idx: usize,
        judge: &J,
        now: Nanos,
        keep_quota: bool,
        victims: &mut Victims<K>,
    ) -> bool {
        let slot = self.slot(idx);
        // Relaxed: under the shard lock.
        let h = slot.ident.load(Ordering::Relaxed);
        // Acquire: see `run`.
        let stored = slot.state.load(Ordering::Acquire);
        if !judge.is_idle(stored ^ self.mask(h), now) {
            return false;
        }
        // A handle's judge confirms (and closes) what the word refers to; a packed state
        // is confirmed by the compare-and-swap below.
        if !judge.release(stored ^ self.mask(h), now, true) {
            return false;
        }
        self.claim(idx);
        // Wait out readers comparing the key (a pin lasts one `Eq`), as every other
        // eviction does. Backing off instead left an idle entry that a reader happened to
        // be comparing un-evictable; when it was the only one in view, an insert under
        // `WhenFull::Evict` failed with `Full` (loom: `keyed_exact_key_pin_races_idle_eviction`).
        self.drain_pins(idx);
        // AcqRel: succeeds only if no check changed the state since we judged it idle (so
        // the eviction loses nothing); Release pairs with readers' Acquire state loads.
        if slot
            .state
            .compare_exchange(stored, stored ^ 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            self.publish(slot, h);
            return false;
        }
        // SAFETY: under the shard lock, identity empty, pins drained: the key is ours.
        // Moved out, not dropped: its `Drop` runs later (see `Victims`).
        let key = (self.mode == Mode::Exact).then(|| unsafe { self.keys[idx].take() });
        if !keep_quota {
            self.release(shard);
        }
        Shard::bump(&shard.idle_evictions);
        // After the accounting (see `Victims::push`).
        if let Some(key) = key {
            victims.push(key);
        }
        true
    }

    /// Evicts slot `idx` whatever its state (pressure eviction or removal) and returns its
    /// last stored (masked) state. With `keep_quota` the entry's place in the quota passes
    /// to the key about to be inserted. The evicted key goes to `victims`.
    pub(super) fn evict_now(
        &self,
        shard: &Shard,
        idx: usize,
        removal: bool,
        keep_quota: bool,
        victims: &mut Victims<K>,
    ) -> u64 {
        self.claim(idx);
        self.drain_pins(idx);
        // AcqRel: flipping a bit always changes the word, so a check that loaded it before
        // fails its CAS; Acquire takes every update made before; Release pairs with readers'
        // Acquire state loads (they then see the empty identity).
        let stored = self.slot(idx).state.fetch_xor(1, Ordering::AcqRel);
        // SAFETY: under the shard lock, identity empty, pins drained: the key is ours.
        // Moved out, not dropped: its `Drop` runs later (see `Victims`).
        let key = (self.mode == Mode::Exact).then(|| unsafe { self.keys[idx].take() });
        if !keep_quota {
            self.release(shard);
        }
        Shard::bump(if removal {
            &shard.removals
        } else {
            &shard.pressure_evictions
        });
        // After the accounting (see `Victims::push`).
        if let Some(key) = key {
            victims.push(key);
        }
        stored
    }

    /// Counts one more resident key in `shard` if the quota allows: within the shard's
    /// base, or by taking one unit from the shared pool. Under the shard lock.
    pub(super) fn reserve(&self, shard: &Shard) -> bool {
        if shard.take_base_unit(self.lends()) {
            return true;
        }
        // The base is spent, and stays spent: only this lock's holder raises `len`, and a
        // borrower lowers `base` only while it is above `len`.
        if self
            .pool
            .spare
            // Relaxed: a counter; the RMW alone keeps it exact, nothing is published.
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_err()
        {
            return false;
        }
        shard.add_pool_unit(self.lends());
        true
    }

    /// Counts one resident key less in `shard`, returning a pool unit if it held one.
    pub(super) fn release(&self, shard: &Shard) {
        if shard.remove_one(self.lends()) {
            // Relaxed: see `reserve`.
            self.pool.spare.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The pool is spent (under shard `to`'s lock, whose base is spent too): moves one
    /// unused unit of another shard's base (looking from `to` on) to the pool, so that a
    /// table short of its capacity does not refuse a key because hashing sent more keys to
    /// one shard than its share and the pool together (the other shards' unused bases are
    /// quota too). Whether it did.
    ///
    /// No lender's lock is taken: a lender's `len` and `base` are one word, lowered by one
    /// read-modify-write only while `base` is above `len` (`Shard::lend`), so a lender busy
    /// inserting is lent from all the same, and two shards borrowing from each other cannot
    /// deadlock. Reads each shard's word once (no write) when none has a unit to lend, as
    /// at a full table: a refusal there costs one pass over the shard headers.
    pub(super) fn borrow(&self, to: usize) -> bool {
        let n = self.shards.len();
        for step in 1..n {
            let lender = &self.shards[(to + step) % n];
            if self.lend(lender) {
                // Relaxed: see `reserve`.
                self.pool.spare.fetch_add(1, Ordering::Relaxed);
                return true;
            }
        }
        false
    }

    /// A free slot of bucket `g` (under the shard lock).
    pub(super) fn free_slot(&self, g: usize) -> Option<usize> {
        let empty = self.empty_ident(g);
        // Relaxed: under the shard lock, which orders every identity change.
        (g * BUCKET_SLOTS..(g + 1) * BUCKET_SLOTS)
            .find(|&idx| self.slot(idx).ident.load(Ordering::Relaxed) == empty)
    }

    /// Where a new key goes among its candidates: the first bucket while it has room (so
    /// most lookups touch one cache line), else the second.
    pub(super) fn free_candidate(&self, loc: Loc) -> Option<usize> {
        self.free_slot(loc.g1).or_else(|| self.free_slot(loc.g2))
    }

    /// Whether `shard` could count one more key (a hint; [`Table::reserve`] decides).
    pub(super) fn quota_left(&self, shard: &Shard) -> bool {
        let (len, base) = shard.quota();
        // Relaxed: a hint, re-checked by `reserve`.
        len < base || self.pool.spare.load(Ordering::Relaxed) > 0
    }

    /// The other candidate bucket of the entry in slot `idx` (under the shard lock).
    pub(super) fn alternate(&self, idx: usize) -> usize {
        // Relaxed: under the shard lock.
        let home = self.locate(self.slot(idx).ident.load(Ordering::Relaxed));
        if home.g1 == idx / BUCKET_SLOTS {
            home.g2
        } else {
            home.g1
        }
    }

    /// Both of `loc`'s buckets are full: makes room by moving entries to their other
    /// candidate bucket (cuckoo hashing, paths of one or two moves), and returns the slot
    /// freed, or `None` if no such path exists.
    pub(super) fn displace(&self, loc: Loc) -> Option<usize> {
        let slots = |g: usize| g * BUCKET_SLOTS..(g + 1) * BUCKET_SLOTS;
        let candidates = slots(loc.g1).chain(slots(loc.g2));
        for src in candidates.clone() {
            let other = self.alternate(src);
            if other != loc.g1 && other != loc.g2 {
                if let Some(dst) = self.free_slot(other) {
                    self.move_entry(src, dst);
                    return Some(src);
                }
            }
        }
        for src in candidates {
            let other = self.alternate(src);
            if other == loc.g1 || other == loc.g2 {
                continue;
            }
            for middle in slots(other) {
                let last = self.alternate(middle);
                if last == loc.g1 || last == loc.g2 || last == other {
                    continue;
                }
                if let Some(dst) = self.free_slot(last) {
                    self.move_entry(middle, dst);
                    self.move_entry(src, middle);
                    return Some(src);
                }
            }
        }
        None
    }

    /// Moves the entry in `src` to the free slot `dst` (same shard), keeping every admission:
    /// the state is taken with one atomic read-modify-write that also makes any check still
    /// working on `src` fail its CAS and look again.
    pub(super) fn move_entry(&self, src: usize, dst: usize) {
        let (from, to) = (self.slot(src), self.slot(dst));
        let shard = &self.shards[src / (self.buckets_per_shard * BUCKET_SLOTS)];
        // Relaxed: only written under the shard lock, which we hold.
        let seq = shard.moves.load(Ordering::Relaxed);
        // Relaxed: odd from here until the entry is published again. Ordered for lookups by
        // the claim below: a lookup that reads the claim (a SeqCst, so release, store) with
        // an Acquire load then reads this bump, or a later value, in `moved_since`
        // (coherence); nothing is published by this store itself.
        shard.moves.store(seq.wrapping_add(1), Ordering::Relaxed);
        // Relaxed: under the shard lock.
        let h = from.ident.load(Ordering::Relaxed);
        self.claim(src);
        self.drain_pins(src);
        self.drain_pins(dst);
        // AcqRel: takes the latest state (Acquire: every admitted CAS before it) and changes
        // the word so later CASes on `src` fail (Release pairs with their Acquire reloads,
        // which then see the empty identity).
        let stored = from.state.fetch_xor(1, Ordering::AcqRel);
        if self.mode == Mode::Exact {
            // SAFETY: under the shard lock, both identities empty and both pin counts
            // drained: `src` holds a key we own, `dst` holds none.
            unsafe { self.keys[dst].write(self.keys[src].take()) };
        }
        if let Some(debts) = &self.debts {
            debts.set_inherited(dst, debts.inherited(src));
        }
        // Release: pairs with readers' Acquire loads of the state.
        to.state.store(stored, Ordering::Release);
        self.publish(to, h);
        // Release: pairs with the Acquire load in `move_seq`: a lookup that starts from
        // this value sees the entry published in its new slot.
        shard.moves.store(seq.wrapping_add(2), Ordering::Release);
    }

    /// Moves the shard's hand over the next [`SWEEP`] slots, evicting every idle entry
    /// there (the first keeps its quota for the key being inserted when `keep_first`);
    /// returns how many it evicted and the least-loss resident entry it saw.
    pub(super) fn sweep<J: Judge + ?Sized>(
        &self,
        shard_index: usize,
        local: &mut ShardLocal,
        judge: &J,
        now: Nanos,
        keep_first: bool,
        victims: &mut Victims<K>,
    ) -> (usize, Candidate) {
        let shard = &self.shards[shard_index];
        let span = self.buckets_per_shard * BUCKET_SLOTS;
        let base = shard_index * span;
        let mut evicted = 0;
        let mut best: Candidate = None;
        for step in 0..SWEEP.min(span) {
            let idx = base + (local.hand + step) % span;
            if !self.occupied(idx) {
                continue;
            }
            match self.loss(idx, judge, now) {
                None => {
                    let keep = keep_first && evicted == 0;
                    evicted += usize::from(self.evict_idle(shard, idx, judge, now, keep, victims));
                }
                Some(loss) => {
                    if best.is_none_or(|(_, b)| loss < b) {
                        best = Some((idx, loss));
                    }
                }
            }
        }
        local.hand = (local.hand + SWEEP) % span;
        (evicted, best)
    }

    /// Finds (making it if needed, per the policy) a free slot in one of `loc`'s buckets and
    /// counts it as resident. `None`: refused ([`WhenFull::Refuse`]). Evicted keys go to
    /// `victims` (at most [`SWEEP`]), for the caller to drop after publishing the new key.
    pub(super) fn make_room<J: Judge + ?Sized>(
        &self,
        local: &mut ShardLocal,
        loc: Loc,
        judge: &J,
        now: Nanos,
        victims: &mut Victims<K>,
    ) -> Option<usize> {
        let shard = &self.shards[loc.shard];
        let candidates = (loc.g1 * BUCKET_SLOTS..(loc.g1 + 1) * BUCKET_SLOTS)
            .chain(loc.g2 * BUCKET_SLOTS..(loc.g2 + 1) * BUCKET_SLOTS);
        let rounds = self.buckets_per_shard * BUCKET_SLOTS / SWEEP + 16;
        for _ in 0..rounds {
            let mut free = self.free_candidate(loc);
            if free.is_none() && self.quota_left(shard) {
                free = self.displace(loc);
            }
            if let Some(idx) = free {
                if self.reserve(shard) {
                    self.drain_pins(idx);
                    return Some(idx);
                }
            }
            // (A free slot's last eviction already waited out its readers, and any reader
            // pinning it now sees the empty identity; the drains below are belt and braces.)
            // No quota left, or both buckets full: one resident entry must go, and its place
            // in the quota passes to the new key. First choice: an idle candidate (the new
            // key takes its slot); meanwhile note the least-loss candidate.
            let mut best: Candidate = None;
            for idx in candidates.clone() {
                if !self.occupied(idx) {
                    continue;
                }
                match self.loss(idx, judge, now) {
                    None => {
                        if self.evict_idle(shard, idx, judge, now, true, victims) {
                            return Some(idx);
                        }
                    }
                    Some(loss) => {
                        if best.is_none_or(|(_, b)| loss < b) {
                            best = Some((idx, loss));
                        }
                    }
                }
            }
            if let Some(free) = free {
                // The key's buckets have room but the quota is spent: the victim may be
                // anywhere in the shard. Sweep for idle entries first.
                let (swept, window_best) = self.sweep(loc.shard, local, judge, now, true, victims);
                if swept > 0 {
                    self.drain_pins(free);
                    return Some(free);
                }
                if let Some((idx, loss)) = window_best {
                    if best.is_none_or(|(_, b)| loss < b) {
                        best = Some((idx, loss));
                    }
                }
            }
            if self.policy == WhenFull::Refuse {
                // Nothing idle to take the place of. If it is the quota that is spent (this
                // shard's base and the pool) while other shards leave part of theirs
                // unused, borrow a unit and look again (displacement included): only a
                // table at its capacity, or a shard with no slot to bring into the key's
                // buckets, refuses.
                if !self.quota_left(shard) && self.borrow(loc.shard) {
                    continue;
                }
                return None;
            }
            if let Some((idx, _)) = best {
                // Relaxed: under the shard lock (identities are stable).
                let h = self.slot(idx).ident.load(Ordering::Relaxed);
                let stored = self.evict_now(shard, idx, false, true, victims);
                // Under pressure: always let go.
                judge.release(stored ^ self.mask(h), now, false);
                if let Some(debts) = &self.debts {
                    // Its own debt is kept: the key, back later, starts from it.
                    judge.record_evicted(
                        debts,
                        h,
                        stored ^ self.mask(h),
                        debts.inherited(idx),
                        now,
                    );
                }
                let slot = free.unwrap_or(idx);
                self.drain_pins(slot);
                return Some(slot);
            }
            // Nothing resident in view (the sweep window was empty): the hand moved on.
        }
        None
    }

    /// Evicts every idle entry (takes each shard's lock in turn, once per [`SWEEP`] keys
    /// evicted in exact mode, whose keys are dropped outside it); returns how many.
    pub(crate) fn evict_idle_all<J: Judge + ?Sized>(&self, judge: &J, now: Nanos) -> usize {
        let span = self.buckets_per_shard * BUCKET_SLOTS;
        let mut evicted = 0;
        for (s, shard) in self.shards.iter().enumerate() {
            let (mut idx, end) = (s * span, (s + 1) * span);
            while idx < end {
                let mut victims = Victims::new();
                let local = lock(&shard.lock);
                while idx < end && !victims.is_full() {
                    if self.occupied(idx) && self.loss(idx, judge, now).is_none() {
                        evicted += usize::from(self.evict_idle(
                            shard,
                            idx,
                            judge,
                            now,
                            false,
                            &mut victims,
                        ));
                    }
                    idx += 1;
                }
                drop(local);
                drop(victims);
            }
        }
        evicted
    }
}
