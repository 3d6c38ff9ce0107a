//! [`Table`]: the keyed limiter's fixed-size, lock-free-for-readers hash table.
//!
//! Layout: `shards × buckets_per_shard` buckets of four 16-byte slots (one cache line per
//! bucket), allocated once. A key's 64-bit identity `h` picks its shard (top bits) and two
//! candidate buckets in it (from the low and high halves); the key lives in one of them.
//! A reader probes without a lock:
//!
//! - **lookup** (no lock, no write): load the eight identities of the two buckets; on a
//!   match, run the check on the slot's state word (load, decide, compare-and-swap);
//! - **insert, evict, remove** (under the shard's lock): claim a slot by setting its
//!   identity to the bucket's *empty* value, seal or overwrite its state, write the key
//!   (exact mode), then publish the new identity with `Release`;
//! - **move** (under the shard's lock, only to make room for a new key whose two buckets
//!   are full: cuckoo displacement): claim the entry's slot, take its state, publish it in
//!   a free slot of its other bucket.
//!
//! A lookup that overlaps a move can find the key in neither slot (between the claim and
//! the publication, or scanning the destination before and the source after the move).
//! A check then takes the shard lock and looks again, as for any new key; the lookups that
//! answer "absent" without the lock (peek, `contains`, the policy's compensations and
//! refunds through `update_resident`) confirm a miss: they read the shard's *move
//! sequence*, probe again, and trust the second miss only if the sequence shows no move
//! under way at the read and none since (`Table::miss_confirmed`; after a few such races,
//! under the lock). A hit never reads the sequence. The argument: a probe that misses a
//! key which was resident when it started read the move's claim of the key's slot (a
//! `SeqCst`, so release, store) with an `Acquire` load; the move bumped the sequence
//! before that claim, so the sequence read after the probe shows the bump.
//!
//! Why readers stay correct while a slot changes owner:
//!
//! 1. A reader re-reads the identity *after* an `Acquire` load (or failed CAS) of the
//!    state. Every eviction sets the identity to empty before it writes the state with
//!    `Release`, so a reader that saw an evicting write also sees the identity change and
//!    backs off (`None`), retrying the lookup.
//! 2. An eviction always changes the state word (it flips a bit, or compare-and-swaps an
//!    idle state away), so a check that loaded the old owner's state fails its CAS.
//! 3. State words are stored XOR a mask derived from the owner's identity, so a late CAS
//!    expecting the old owner's word cannot match the new owner's word except with
//!    probability 2⁻⁶⁴ (classic ABA, made improbable rather than impossible).
//! 4. Non-integer keys in exact mode are compared only while pinned (see
//!    [`KeyCell`]), and writers wait for pins to drain before touching a key: no key is
//!    ever read while it is written (no seqlock-validated reads of non-atomic memory).
//!
//! Idle entries are evicted only if their state is still the idle one at the moment of the
//! eviction (a compare-and-swap), so lossless eviction really loses nothing, even racing a
//! check on the same key.
//!
//! Why not `hashbrown::HashTable`: its slots move on insert/erase and its control bytes
//! live in a separate array, so lock-free readers would need a reclamation scheme, and each
//! lookup would touch two cache lines (control bytes, then the bucket). A flat array of
//! fixed slots, sized exactly from the capacity (no power-of-two rounding, no growth), gives
//! one line per probe, 19.2 bytes per key, and readers that never write a lock word.

use core::mem::size_of;

use tollgate_core::{Algorithm, Decision, InsufficientCapacity, Nanos};

use super::debt_summary::DebtSummary;
use super::geometry::Geometry;
use super::huge_pages::advise_huge_pages;
use super::key_cell::KeyCell;
use super::key_ident::{is_word, splitmix, state_mask};
use super::shard::{QuotaPool, Shard, ShardLocal};
use super::slot::{Bucket, Slot, BUCKET_SLOTS};
use super::{KeyedError, KeyedStats, WhenFull};
use crate::sync::{lock, loom_sc_fence, wait_a_little, AtomicUsize, Ordering};

mod by_ident;
pub(crate) use by_ident::{Seen, Upsert};

/// Slots the idle sweep looks at per eviction (four buckets).
const SWEEP: usize = 16;
/// Lock-free attempts before a lookup that keeps racing evictions takes the shard lock.
const LOCK_FREE_ATTEMPTS: usize = 4;

/// How a table identifies keys.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Integer keys: the identity is a bijection of the key; nothing else is stored.
    Word,
    /// Other keys, compared exactly: the identity is a hash, the key is stored too.
    Exact,
    /// Other keys, identified by their 64-bit hash alone.
    Fingerprint,
}

/// Where an identity lives: its shard and its two candidate buckets (global indices).
#[derive(Copy, Clone, Debug)]
pub(crate) struct Loc {
    shard: usize,
    g1: usize,
    g2: usize,
}

/// The result of probing for a key.
enum Probe<R> {
    /// Found; the closure's result.
    Hit(R),
    /// Found, but the slot changed owner while the closure ran: look again.
    Raced,
    /// Not resident.
    Missing,
}

/// An idle entry (`None`) or how much evicting it would lose: `(reset_after, −remaining)`,
/// compared lexicographically, smaller loses less.
type Loss = Option<(u64, u64)>;

/// A resident entry considered for eviction: its slot and what evicting it loses.
type Candidate = Option<(usize, (u64, u64))>;

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

/// The keyed table. See the module docs for the protocol.
#[derive(Debug)]
pub(crate) struct Table<K> {
    buckets: Box<[Bucket]>,
    /// One cell per slot in [`Mode::Exact`], empty otherwise.
    keys: Box<[KeyCell<K>]>,
    shards: Box<[Shard]>,
    /// Capacity beyond the shards' bases, shared.
    pool: Box<QuotaPool>,
    shard_bits: u32,
    buckets_per_shard: usize,
    /// ⌈2⁶⁴ / buckets_per_shard⌉: divides a bucket index (< 2³²) by `buckets_per_shard`
    /// with one multiplication (Lemire's exact fast division).
    bucket_divisor: u64,
    /// With one shard: two identities whose bucket pairs are disjoint (see `empty_ident`).
    single_empties: [u64; 2],
    capacity: usize,
    mode: Mode,
    policy: WhenFull,
    mask_seed: u64,
    /// The debts of entries evicted under pressure, which new keys inherit (opt-in: see
    /// [`DebtSummary`]): written only by pressure evictions, read only by inserts and by
    /// peeks of absent keys. Never touched by a check of a resident key.
    debts: Option<Box<DebtSummary>>,
    /// A protocol step switched off, for loom's broken-twin models only.
    #[cfg(tollgate_loom)]
    fault: Option<super::LoomFault>,
}

// SAFETY: the only non-`Sync` part is the exact-mode key cells. Keys are read through `&K`
// by many threads (needs `K: Sync`) and written or dropped by whichever thread holds the
// shard lock (needs `K: Send`); the pin protocol (see `KeyCell`) keeps reads and writes of
// one key from overlapping.
unsafe impl<K: Send + Sync> Sync for Table<K> {}

/// The two candidate buckets (indices within the shard) of identity `h`.
#[inline(always)]
fn pair(h: u64, buckets: u64, shard_bits: u32) -> (u64, u64) {
    let b1 = (u64::from(h as u32) * buckets) >> 32;
    // The top `shard_bits` bits chose the shard; shift them out.
    let upper = ((h >> 32) << shard_bits) as u32;
    // The two may coincide (probability 1/buckets): that key then has one bucket.
    let b2 = (u64::from(upper) * buckets) >> 32;
    (b1, b2)
}

/// Two identities whose candidate bucket pairs are disjoint in a one-shard table of
/// `buckets` buckets (≥ 4): for any bucket, at least one of them can never live there.
fn single_shard_empties(buckets: u64) -> [u64; 2] {
    let mut found: Vec<(u64, (u64, u64))> = Vec::with_capacity(2);
    let mut index = 0u64;
    while found.len() < 2 {
        let candidate = splitmix(index);
        index += 1;
        let (a, b) = pair(candidate, buckets, 0);
        if found
            .iter()
            .all(|&(_, (c, d))| a != c && a != d && b != c && b != d)
        {
            found.push((candidate, (a, b)));
        }
    }
    [found[0].0, found[1].0]
}

impl<K> Table<K> {
    /// An empty table of the given shape.
    pub(crate) fn new(
        geometry: Geometry,
        mode: Mode,
        policy: WhenFull,
        mask_seed: u64,
    ) -> Table<K> {
        let shard_bits = geometry.shards.trailing_zeros();
        let nb = geometry.buckets_per_shard;
        let single_empties = if geometry.shards == 1 {
            single_shard_empties(nb as u64)
        } else {
            [0; 2]
        };
        let shards: Box<[Shard]> = (0..geometry.shards)
            .map(|s| Shard::new(geometry.shard_base(s)))
            .collect();
        let mut table = Table {
            buckets: Box::new([]),
            keys: Box::new([]),
            shards,
            pool: Box::new(QuotaPool {
                spare: AtomicUsize::new(geometry.pool()),
            }),
            shard_bits,
            buckets_per_shard: nb,
            bucket_divisor: u64::MAX / nb as u64 + 1,
            single_empties,
            capacity: geometry.capacity,
            mode,
            policy,
            mask_seed,
            debts: None,
            #[cfg(tollgate_loom)]
            fault: None,
        };
        // Allocated, advised, then written: the hint must precede the first touch.
        let mut buckets = Vec::with_capacity(geometry.buckets());
        advise_huge_pages(buckets.as_ptr(), geometry.buckets() * size_of::<Bucket>());
        buckets.extend((0..geometry.buckets()).map(|g| Bucket::new(table.empty_ident(g))));
        table.buckets = buckets.into_boxed_slice();
        if mode == Mode::Exact {
            table.keys = (0..geometry.buckets() * BUCKET_SLOTS)
                .map(|_| KeyCell::new())
                .collect();
        }
        table
    }

    /// Gives the table a debt summary of `cells` cells (see [`DebtSummary`]); only a table
    /// that evicts under pressure has any use for one.
    pub(crate) fn enable_debt_summary(&mut self, cells: usize) {
        self.debts = Some(Box::new(DebtSummary::new(cells, self.slot_count())));
    }

    /// The state a new identity `h` starts from at `now` (fresh, or the debt the summary
    /// holds for it), and whether that was an inherited debt.
    #[inline]
    fn start_state<J: Judge + ?Sized>(
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

    /// Marks whether the entry just inserted in slot `idx` started from an inherited debt
    /// (under the shard lock).
    #[inline]
    fn note_inherited(&self, idx: usize, inherited: bool) {
        if let Some(debts) = &self.debts {
            debts.set_inherited(idx, inherited);
        }
    }

    /// What a check of `cost` would answer for an absent identity `h`: a fresh key's
    /// answer, or the one of the debt its insert would start from.
    fn peek_absent<A: Algorithm + ?Sized>(
        &self,
        h: u64,
        algorithm: &A,
        now: Nanos,
        cost: u32,
    ) -> Result<Decision, InsufficientCapacity> {
        let (start, _) = self.start_state(h, 0, algorithm, now);
        algorithm.peek(start, now, cost).map(|o| o.decision)
    }

    /// The identity that marks a slot of bucket `g` empty: one no key living in `g` has.
    ///
    /// With several shards, an identity of the neighbouring shard (it never lives in this
    /// one). With one, whichever of two identities with disjoint bucket pairs cannot live
    /// in `g`. No memory is read beyond the table's own fields.
    #[inline]
    fn empty_ident(&self, g: usize) -> u64 {
        if self.shard_bits > 0 {
            let shard = ((u128::from(self.bucket_divisor) * g as u128) >> 64) as u64;
            return (shard ^ 1) << (64 - self.shard_bits);
        }
        let nb = self.buckets_per_shard as u64;
        let [first, second] = self.single_empties;
        let (a, b) = pair(first, nb, 0);
        if a != g as u64 && b != g as u64 {
            first
        } else {
            // The pairs are disjoint: `g` is not in the second's.
            second
        }
    }

    /// Starts loading both candidate buckets of identity `h` into the cache, without
    /// waiting for them (a hint: no effect on what any check decides).
    #[inline(always)]
    pub(crate) fn prefetch(&self, h: u64) {
        let loc = self.locate(h);
        prefetch_bucket(&self.buckets[loc.g1]);
        prefetch_bucket(&self.buckets[loc.g2]);
    }

    /// Where identity `h` lives.
    #[inline(always)]
    pub(crate) fn locate(&self, h: u64) -> Loc {
        // `h >> (64 - bits)` in two steps, so that zero bits (one shard) yields shard 0.
        let shard = ((h >> 1) >> (63 - self.shard_bits)) as usize;
        let nb = self.buckets_per_shard;
        let (b1, b2) = pair(h, nb as u64, self.shard_bits);
        let base = shard * nb;
        Loc {
            shard,
            g1: base + b1 as usize,
            g2: base + b2 as usize,
        }
    }

    /// The mask for identity `h`'s state word.
    #[inline(always)]
    pub(crate) fn mask(&self, h: u64) -> u64 {
        state_mask(h, self.mask_seed)
    }

    #[inline(always)]
    fn slot(&self, idx: usize) -> &Slot {
        &self.buckets[idx / BUCKET_SLOTS].slots[idx % BUCKET_SLOTS]
    }

    /// Whether slot `idx` holds a key. Exact only under the shard lock (identities change
    /// only under it).
    #[inline]
    fn occupied(&self, idx: usize) -> bool {
        // Relaxed: called under the shard lock, which orders every identity change.
        self.slot(idx).ident.load(Ordering::Relaxed) != self.empty_ident(idx / BUCKET_SLOTS)
    }

    /// Runs the algorithm on a slot believed to hold identity `h`: `None` if the slot turns
    /// out to belong to another key (evicted meanwhile).
    #[inline(always)]
    fn run<A: Algorithm + ?Sized>(
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

    /// Whether the entry in slot `idx` is idle (`None`) or what evicting it loses.
    fn loss<J: Judge + ?Sized>(&self, idx: usize, judge: &J, now: Nanos) -> Loss {
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
    fn publish(&self, slot: &Slot, h: u64) {
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
    fn claim(&self, idx: usize) {
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
    fn drain_pins(&self, idx: usize) {
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
    fn evict_idle<J: Judge + ?Sized>(
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
    fn evict_now(
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
    fn reserve(&self, shard: &Shard) -> bool {
        let len = shard.len();
        if len >= shard.base
            && self
                .pool
                .spare
                // Relaxed: a counter; the RMW alone keeps it exact, nothing is published.
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_err()
        {
            return false;
        }
        shard.set_len(len + 1);
        true
    }

    /// Counts one resident key less in `shard`, returning a pool unit if it held one.
    fn release(&self, shard: &Shard) {
        let len = shard.len().saturating_sub(1);
        shard.set_len(len);
        if len >= shard.base {
            // Relaxed: see `reserve`.
            self.pool.spare.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A free slot of bucket `g` (under the shard lock).
    fn free_slot(&self, g: usize) -> Option<usize> {
        let empty = self.empty_ident(g);
        // Relaxed: under the shard lock, which orders every identity change.
        (g * BUCKET_SLOTS..(g + 1) * BUCKET_SLOTS)
            .find(|&idx| self.slot(idx).ident.load(Ordering::Relaxed) == empty)
    }

    /// Where a new key goes among its candidates: the first bucket while it has room (so
    /// most lookups touch one cache line), else the second.
    fn free_candidate(&self, loc: Loc) -> Option<usize> {
        self.free_slot(loc.g1).or_else(|| self.free_slot(loc.g2))
    }

    /// Whether `shard` could count one more key (a hint; [`Table::reserve`] decides).
    fn quota_left(&self, shard: &Shard) -> bool {
        // Relaxed: a hint, re-checked by `reserve`.
        shard.len() < shard.base || self.pool.spare.load(Ordering::Relaxed) > 0
    }

    /// The other candidate bucket of the entry in slot `idx` (under the shard lock).
    fn alternate(&self, idx: usize) -> usize {
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
    fn displace(&self, loc: Loc) -> Option<usize> {
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
    fn move_entry(&self, src: usize, dst: usize) {
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

    /// After a lock-free probe of shard `s` missed: whether "absent" can be trusted.
    ///
    /// The first miss only reads the shard's move sequence into `seq` and asks for another
    /// probe (so hits, the common case, never touch the shard's cache line, which inserts
    /// write). A later miss is trusted if no move was under way at that read and none
    /// started since; otherwise the sequence is read again for the next probe. Sound
    /// because a probe that misses a key resident all along read the claim of a move that
    /// started after the sequence read before it (see `moved_since`).
    #[inline]
    fn miss_confirmed(&self, s: usize, seq: &mut Option<u64>) -> bool {
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
    fn move_seq(&self, s: usize) -> u64 {
        // Acquire: pairs with the Release store ending a move, so a probe that starts
        // after it sees the moved entry in its new slot.
        self.shards[s].moves.load(Ordering::Acquire)
    }

    /// Whether a lookup that began at move sequence `seq` and found nothing may have missed
    /// a resident key: a move was under way when it began (`seq` odd) or one started since.
    #[inline]
    fn moved_since(&self, s: usize, seq: u64) -> bool {
        if !self.move_retry_enabled() {
            return false;
        }
        // Relaxed: ordered after the probe's Acquire identity loads; if the probe read a
        // move's claim, that move's first bump happens-before this load (see `move_entry`).
        seq & 1 == 1 || self.shards[s].moves.load(Ordering::Relaxed) != seq
    }

    /// Whether lookups retry after racing a move (always, except in a loom broken twin).
    #[inline(always)]
    fn move_retry_enabled(&self) -> bool {
        #[cfg(tollgate_loom)]
        {
            self.fault != Some(super::LoomFault::NoMoveRetry)
        }
        #[cfg(not(tollgate_loom))]
        {
            true
        }
    }

    /// Whether writers wait for pinned readers (always, except in a loom broken twin).
    #[inline(always)]
    fn pin_wait_enabled(&self) -> bool {
        #[cfg(tollgate_loom)]
        {
            self.fault != Some(super::LoomFault::NoPinWait)
        }
        #[cfg(not(tollgate_loom))]
        {
            true
        }
    }

    /// Switches a protocol step off (loom broken twins only).
    #[cfg(tollgate_loom)]
    pub(crate) fn inject(&mut self, fault: super::LoomFault) {
        if let (super::LoomFault::SummaryLostUpdate, Some(debts)) = (fault, &mut self.debts) {
            debts.lost_updates = true;
        }
        self.fault = Some(fault);
    }

    /// Identity `h`'s shard and candidate buckets within it (loom models only).
    #[cfg(tollgate_loom)]
    pub(crate) fn buckets_of(&self, h: u64) -> (usize, [usize; 2]) {
        let loc = self.locate(h);
        let base = loc.shard * self.buckets_per_shard;
        (loc.shard, [loc.g1 - base, loc.g2 - base])
    }

    /// Moves the shard's hand over the next [`SWEEP`] slots, evicting every idle entry
    /// there (the first keeps its quota for the key being inserted when `keep_first`);
    /// returns how many it evicted and the least-loss resident entry it saw.
    fn sweep<J: Judge + ?Sized>(
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
                    if best.map_or(true, |(_, b)| loss < b) {
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
    fn make_room<J: Judge + ?Sized>(
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
                        if best.map_or(true, |(_, b)| loss < b) {
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
                    if best.map_or(true, |(_, b)| loss < b) {
                        best = Some((idx, loss));
                    }
                }
            }
            if self.policy == WhenFull::Refuse {
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

    /// Resident keys.
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(Shard::len).sum()
    }

    /// The most keys the table holds.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes this table holds: its slot array, key cells and shards, plus the table value.
    /// (Heap memory owned by the keys themselves, such as a `String`'s bytes, is not
    /// included.)
    pub(crate) fn memory_bytes(&self) -> usize {
        size_of::<Self>()
            + self.buckets.len() * size_of::<Bucket>()
            + self.keys.len() * size_of::<KeyCell<K>>()
            + self.shards.len() * size_of::<Shard>()
            + size_of::<QuotaPool>()
            + self
                .debts
                .as_ref()
                .map_or(0, |d| size_of::<DebtSummary>() + d.heap_bytes())
    }

    /// Number of shards.
    pub(crate) fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Number of slots.
    pub(crate) fn slot_count(&self) -> usize {
        self.buckets.len() * BUCKET_SLOTS
    }

    /// Counters summed over shards.
    pub(crate) fn stats(&self) -> KeyedStats {
        // Relaxed: statistics snapshot.
        let sum = |f: fn(&Shard) -> &crate::sync::AtomicU64| {
            self.shards
                .iter()
                .map(|s| f(s).load(Ordering::Relaxed))
                .sum::<u64>()
        };
        KeyedStats {
            len: self.len(),
            capacity: self.capacity,
            inserts: sum(|s| &s.inserts),
            idle_evictions: sum(|s| &s.idle_evictions),
            pressure_evictions: sum(|s| &s.pressure_evictions),
            refusals: sum(|s| &s.refusals),
            removals: sum(|s| &s.removals),
        }
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

impl<K: Eq + Clone + 'static> Table<K> {
    /// Probes `loc`'s buckets for identity `h` (and, in exact mode, `key`), running `f` on
    /// the slot found.
    #[inline(always)]
    fn probe<R>(
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
    fn identities_only(&self) -> bool {
        is_word::<K>() || self.mode != Mode::Exact
    }

    /// The slot holding identity `h`, if resident (identity-only modes).
    ///
    /// Each bucket is scanned without data-dependent branches (four loads, four compares,
    /// one bit scan): a mispredicted branch waiting on a cache miss would keep the next
    /// lookup's miss from overlapping this one.
    #[inline(always)]
    fn find_ident(&self, h: u64, loc: Loc) -> Option<&Slot> {
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
    fn check_raced<A: Algorithm + ?Sized>(
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
    fn check_locked<A: Algorithm + ?Sized>(
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
fn update_slot<R>(
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

/// Hints the CPU to start loading `bucket`'s cache line.
#[inline(always)]
fn prefetch_bucket(bucket: &Bucket) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults, reads nothing the program can observe and writes
    // nothing; the address comes from a live reference anyway.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
            (bucket as *const Bucket).cast::<i8>(),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bucket;
}

impl<K> Drop for Table<K> {
    fn drop(&mut self) {
        if self.mode != Mode::Exact {
            return;
        }
        for idx in 0..self.slot_count() {
            if self.occupied(idx) {
                // SAFETY: `&mut self`: no reader or writer remains; an occupied slot's key
                // is initialised.
                unsafe { self.keys[idx].drop_key() };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Small concurrent scenarios sized for miri, whose data-race detector checks the pin
    //! protocol of exact-mode keys and the publication orderings (run with
    //! `cargo +nightly miri test -p tollgate --lib`).

    use std::sync::atomic::{AtomicU64, Ordering};

    use tollgate_core::{Gcra, Nanos};

    use crate::{KeyStorage, KeyedLimiter, WhenFull};

    const THREADS: u64 = 3;
    const ROUNDS: u64 = if cfg!(miri) { 40 } else { 4_000 };

    fn churn(storage: KeyStorage, when_full: WhenFull) {
        let gcra = Gcra::per_second(1).burst(2).build().unwrap();
        let limiter: KeyedLimiter<String, Gcra> = KeyedLimiter::builder(gcra)
            .capacity(4)
            .shards(1)
            .key_storage(storage)
            .when_full(when_full)
            .build()
            .unwrap();
        let admitted = AtomicU64::new(0);
        std::thread::scope(|scope| {
            for t in 0..THREADS {
                let (limiter, admitted) = (&limiter, &admitted);
                scope.spawn(move || {
                    for i in 0..ROUNDS {
                        let key = format!("k{}", (i * (t + 1)) % 9);
                        // Time advances so that keys fall idle and get evicted losslessly.
                        let now = Nanos::from_millis(i * 300);
                        if let Ok(decision) = limiter.check_at(&key, now) {
                            admitted.fetch_add(u64::from(decision.allowed), Ordering::Relaxed);
                        }
                        if i % 7 == t {
                            limiter.remove(&key);
                        }
                        let _ = limiter.peek_at(&key, now);
                        assert!(limiter.len() <= 4);
                    }
                });
            }
        });
        assert!(admitted.load(Ordering::Relaxed) > 0);
        assert!(limiter.len() <= 4);
    }

    #[test]
    fn exact_keys_race_without_data_races() {
        churn(KeyStorage::Exact, WhenFull::Evict);
        churn(KeyStorage::Exact, WhenFull::Refuse);
    }

    #[test]
    fn fingerprints_race_without_data_races() {
        churn(KeyStorage::Fingerprint, WhenFull::Evict);
    }

    #[test]
    fn empty_identities_never_belong_to_their_bucket() {
        use super::super::geometry::Geometry;
        use super::{Mode, Table};
        let large = if cfg!(miri) { 2_000 } else { 100_000 };
        for (capacity, shards) in [
            (large, None),
            (5, Some(1)),
            (1_000, Some(1)),
            (7_777, Some(8)),
        ] {
            let geometry = Geometry::new(capacity, shards).unwrap();
            let table: Table<u64> = Table::new(geometry, Mode::Word, WhenFull::Evict, 7);
            let nb = geometry.buckets_per_shard;
            for g in 0..geometry.buckets() {
                let empty = table.empty_ident(g);
                let loc = table.locate(empty);
                // Never a resident identity of bucket `g`: another shard, or not a candidate.
                assert!(
                    loc.shard != g / nb || (loc.g1 != g && loc.g2 != g),
                    "bucket {g}"
                );
            }
        }
    }

    #[test]
    fn integer_keys_race_without_data_races() {
        let gcra = Gcra::per_second(1).burst(2).build().unwrap();
        let limiter: KeyedLimiter<u64, Gcra> = KeyedLimiter::builder(gcra)
            .capacity(3)
            .shards(1)
            .build()
            .unwrap();
        std::thread::scope(|scope| {
            for t in 0..THREADS {
                let limiter = &limiter;
                scope.spawn(move || {
                    for i in 0..ROUNDS {
                        let now = Nanos::from_millis(i * 300);
                        let _ = limiter.check_at(&((i * (t + 1)) % 7), now);
                    }
                });
            }
        });
        assert!(limiter.len() <= 3);
    }
}
