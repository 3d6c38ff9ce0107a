//! [`DeniedRecord`]: a bounded record of the (rule, client) pairs a policy's checks denied
//! recently, the in-process store's candidates for a listing of the clients currently
//! limited ([`Policy::limited`](super::Policy::limited)).
//!
//! The in-process tier tables keep 64-bit fingerprints of client keys, not their names, so
//! the names a listing needs are recorded here, on the deny path of a check. The record is
//! a fixed array of slots, in buckets of [`WAYS`], each slot owned by one (rule, client)
//! fingerprint:
//!
//! - a pair denied again finds its fingerprint in its bucket: a few `Relaxed` loads of one
//!   cache line, no lock, no allocation (the common case of a client hammering its limit);
//! - a new pair takes an empty slot of its bucket, or, on one denial in 32 of the thread's
//!   (so a flood of new pairs copies few names), evicts one chosen by its fingerprint,
//!   under that slot's lock taken with `try_lock`: under contention the denial is simply
//!   not recorded (the record is a hint; a later denial records it). The names are copied
//!   into the slot's own strings, whose allocations are reused;
//! - names longer than [`MAX_RECORDED_NAME`] bytes are not recorded (memory stays bounded by the
//!   capacity: at most `capacity · (2 · MAX_RECORDED_NAME + slot)` bytes).
//!
//! The slots are allocated by the first denial (a policy that never denies pays nothing:
//! building one allocates nothing big).
//!
//! Nothing is ever removed: a listing peeks each recorded pair at its own `now` and keeps
//! those a check would deny, so a pair whose limit has refilled (or was reset) is simply
//! not listed, and its slot goes to the next pair denied in its bucket.

use std::sync::OnceLock;

use crate::sync::{AtomicU64, Mutex, Ordering};

/// Slots per bucket: a pair may sit in any slot of its bucket (so a few pairs hashed to
/// one bucket do not evict each other).
pub(crate) const WAYS: usize = 4;

/// The default number of slots ([`Policy::with_limited_record`](super::Policy::with_limited_record)):
/// 1024 (none in the loom models' build, whose checks then explore no more interleavings
/// than before the record).
pub const DEFAULT_LIMITED_RECORD: usize = if cfg!(tollgate_loom) { 0 } else { 1024 };

/// A full bucket gives a slot to a new pair on one denial in this many (see `claim`).
const EVICT_ONE_IN: u32 = 32;

/// Whether this denial may evict (one in [`EVICT_ONE_IN`] of this thread's): a count per
/// thread, so the deny path shares no cache line between threads.
#[inline]
fn evict_now() -> bool {
    thread_local! {
        static DENIALS: core::cell::Cell<u32> = const { core::cell::Cell::new(0) };
    }
    DENIALS.with(|d| {
        let n = d.get().wrapping_add(1);
        d.set(n);
        n % EVICT_ONE_IN == 0
    })
}

/// The most slots a record may have (larger capacities are reduced to it): 2^20.
pub const MAX_LIMITED_RECORD: usize = 1 << 20;

/// The longest rule name or client (in bytes) recorded; a longer one is not (its pair is
/// never listed from this record).
pub const MAX_RECORDED_NAME: usize = 1024;

/// No pair owns the slot.
const EMPTY: u64 = 0;

/// The names of a slot's pair (empty strings: none yet).
#[derive(Debug, Default)]
struct Names {
    rule: String,
    client: String,
}

/// A bounded record of recently denied (rule, client) pairs (see the module docs).
#[derive(Debug)]
pub(crate) struct DeniedRecord {
    /// How many slots, a multiple of [`WAYS`] (0: records nothing).
    capacity: usize,
    /// The slots, allocated by the first denial.
    slots: OnceLock<Slots>,
}

/// A record's slots.
#[derive(Debug)]
struct Slots {
    /// Each slot's owner: the fingerprint of its pair ([`EMPTY`]: none), in buckets of
    /// [`WAYS`] adjacent slots.
    owners: Box<[AtomicU64]>,
    /// Each slot's names, written under its lock.
    names: Box<[Mutex<Names>]>,
}

/// A recorded pair ([`DeniedRecord::pairs`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Pair {
    pub(crate) rule: String,
    pub(crate) client: String,
}

/// The fingerprint of the pair (`rule`, the client whose fingerprint is `client`): never
/// [`EMPTY`].
#[inline]
pub(crate) fn pair_fingerprint(rule: u32, client: u64) -> u64 {
    // splitmix64's finalizer over the client's fingerprint and the rule's id.
    let mut x = client ^ u64::from(rule).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    if x == EMPTY {
        1
    } else {
        x
    }
}

impl DeniedRecord {
    /// A record of `capacity` slots, rounded up to a whole bucket and reduced to
    /// [`MAX_LIMITED_RECORD`]; 0 records nothing.
    pub(crate) fn new(capacity: usize) -> DeniedRecord {
        DeniedRecord {
            capacity: capacity.min(MAX_LIMITED_RECORD).div_ceil(WAYS) * WAYS,
            slots: OnceLock::new(),
        }
    }

    /// How many slots (pairs at most).
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Records that `client` was denied under the rule `rule`, whose pair's fingerprint
    /// is `fingerprint` ([`pair_fingerprint`]). No lock and no allocation when the pair
    /// is already recorded; otherwise a `try_lock` of one slot (skipped if held). The
    /// first call allocates the slots.
    #[inline]
    pub(crate) fn note(&self, fingerprint: u64, rule: &str, client: &str) {
        if self.capacity == 0 {
            return;
        }
        self.slots
            .get_or_init(|| Slots::new(self.capacity))
            .note(fingerprint, rule, client);
    }

    /// Every recorded pair, each once (the slots' names, read under their locks; a slot
    /// being written is waited for).
    pub(crate) fn pairs(&self) -> Vec<Pair> {
        self.slots.get().map_or_else(Vec::new, Slots::pairs)
    }

    /// The bytes the record holds: its slots and its names' allocations.
    #[cfg(all(test, not(tollgate_loom)))]
    fn footprint(&self) -> usize {
        self.slots.get().map_or(0, Slots::footprint)
    }
}

impl Slots {
    /// `capacity` empty slots (a multiple of [`WAYS`], not 0).
    fn new(capacity: usize) -> Slots {
        Slots {
            owners: (0..capacity).map(|_| AtomicU64::new(EMPTY)).collect(),
            names: (0..capacity)
                .map(|_| Mutex::new(Names::default()))
                .collect(),
        }
    }

    /// The first slot of the bucket of `fingerprint`.
    #[inline]
    fn bucket(&self, fingerprint: u64) -> usize {
        let buckets = (self.owners.len() / WAYS) as u64;
        // Lemire's range reduction: the high half of the product is below `buckets`.
        // Truncation: less than `buckets`, itself a usize.
        #[allow(clippy::cast_possible_truncation)]
        let bucket = ((u128::from(fingerprint) * u128::from(buckets)) >> 64) as usize;
        bucket * WAYS
    }

    /// [`DeniedRecord::note`] in these slots.
    #[inline]
    fn note(&self, fingerprint: u64, rule: &str, client: &str) {
        let first = self.bucket(fingerprint);
        let mut room = false;
        for owner in &self.owners[first..first + WAYS] {
            // Relaxed: the owner is only a hint of which slot holds the pair; the names
            // are read under the slot's lock, which orders them (see `claim`).
            let owner = owner.load(Ordering::Relaxed);
            if owner == fingerprint {
                return;
            }
            room |= owner == EMPTY;
        }
        // A full bucket gives a slot to a new pair on one denial in EVICT_ONE_IN.
        if room || evict_now() {
            self.claim(first, fingerprint, rule, client);
        }
    }

    /// [`note`](Self::note)'s slow path: the pair takes a slot of the bucket at `first`.
    #[cold]
    #[inline(never)]
    fn claim(&self, first: usize, fingerprint: u64, rule: &str, client: &str) {
        if rule.len() > MAX_RECORDED_NAME || client.len() > MAX_RECORDED_NAME {
            return;
        }
        // An empty slot, else (one denial in EVICT_ONE_IN: see `note`) one chosen by the
        // fingerprint's top bits: another pair of the bucket is then forgotten, listed
        // again once denied again. A flood of new pairs thus copies names once per
        // EVICT_ONE_IN denials, and a client that keeps hammering is recorded within a few
        // dozen of its denials.
        // Truncation: the top two bits, below WAYS = 4.
        #[allow(clippy::cast_possible_truncation)]
        let way = (0..WAYS)
            // Relaxed: a hint, as in `note`.
            .find(|&w| self.owners[first + w].load(Ordering::Relaxed) == EMPTY)
            .unwrap_or((fingerprint >> 62) as usize % WAYS);
        let slot = first + way;
        // Skipped under contention: another denial is writing this slot now.
        let Ok(mut names) = self.names[slot].try_lock() else {
            return;
        };
        // Another denial of the pair may have recorded it meanwhile (in another slot of
        // the bucket): one slot per pair.
        // Relaxed: a hint, as in `note`.
        if self.owners[first..first + WAYS]
            .iter()
            .any(|o| o.load(Ordering::Relaxed) == fingerprint)
        {
            return;
        }
        names.rule.clear();
        names.rule.push_str(rule);
        names.client.clear();
        names.client.push_str(client);
        // Relaxed: written under the slot's lock, after the names; a reader of the names
        // takes the lock (which orders them), and `note`'s readers only compare it.
        self.owners[slot].store(fingerprint, Ordering::Relaxed);
    }

    /// [`DeniedRecord::pairs`] of these slots.
    fn pairs(&self) -> Vec<Pair> {
        let mut pairs = Vec::new();
        for names in self.names.iter() {
            let names = crate::sync::lock(names);
            if !names.client.is_empty() || !names.rule.is_empty() {
                pairs.push(Pair {
                    rule: names.rule.clone(),
                    client: names.client.clone(),
                });
            }
        }
        pairs
    }

    /// [`DeniedRecord::footprint`] of these slots.
    #[cfg(all(test, not(tollgate_loom)))]
    fn footprint(&self) -> usize {
        let names: usize = self
            .names
            .iter()
            .map(|n| {
                let n = crate::sync::lock(n);
                n.rule.capacity() + n.client.capacity()
            })
            .sum();
        self.owners.len() * core::mem::size_of::<AtomicU64>()
            + self.names.len() * core::mem::size_of::<Mutex<Names>>()
            + names
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;

    /// A pair denied again is found in its bucket (recorded once); distinct pairs are all
    /// recorded while their buckets have room.
    #[test]
    fn a_pair_is_recorded_once() {
        let record = DeniedRecord::new(64);
        assert_eq!(record.capacity(), 64);
        for _ in 0..3 {
            record.note(pair_fingerprint(0, 7), "r", "alice");
        }
        record.note(pair_fingerprint(1, 7), "s", "alice");
        let mut pairs = record.pairs();
        pairs.sort_by(|a, b| a.rule.cmp(&b.rule));
        assert_eq!(
            pairs,
            [
                Pair {
                    rule: "r".into(),
                    client: "alice".into()
                },
                Pair {
                    rule: "s".into(),
                    client: "alice".into()
                }
            ]
        );
    }

    /// More pairs than slots: the record keeps at most its capacity of them, and its
    /// memory stops growing once every slot has held a name of the longest length.
    #[test]
    fn the_record_is_bounded() {
        let record = DeniedRecord::new(16);
        let many = if cfg!(miri) { 64 } else { 4096 };
        let name = |i: u64| format!("client-{i:08}");
        for i in 0..many {
            record.note(pair_fingerprint(0, i), "r", &name(i));
        }
        let full = record.footprint();
        assert_eq!(record.pairs().len(), 16);
        for i in many..2 * many {
            record.note(pair_fingerprint(0, i), "r", &name(i));
        }
        assert_eq!(record.footprint(), full);
        assert!(record.pairs().len() <= 16);
        // Too long a name is not recorded; a record of no slots records nothing.
        let long = "x".repeat(MAX_RECORDED_NAME + 1);
        let small = DeniedRecord::new(1);
        small.note(pair_fingerprint(0, 1), "r", &long);
        assert!(small.pairs().is_empty());
        let none = DeniedRecord::new(0);
        none.note(pair_fingerprint(0, 1), "r", "a");
        assert!(none.pairs().is_empty() && none.capacity() == 0);
        assert_eq!(DeniedRecord::new(usize::MAX).capacity(), MAX_LIMITED_RECORD);
    }

    /// A slot whose lock is held is skipped, not waited for.
    #[test]
    fn a_held_slot_is_skipped() {
        let record = DeniedRecord::new(WAYS);
        assert_eq!(record.footprint(), 0, "no slot before the first denial");
        let slots = record.slots.get_or_init(|| Slots::new(WAYS));
        let guards: Vec<_> = slots.names.iter().map(|m| m.lock().unwrap()).collect();
        record.note(pair_fingerprint(0, 1), "r", "a");
        drop(guards);
        assert!(record.pairs().is_empty());
        record.note(pair_fingerprint(0, 1), "r", "a");
        assert_eq!(record.pairs().len(), 1);
    }
}
