//! [`LeaseCell`]: a slice of a shared key's quota held by this process, spent lock-free.
//!
//! A shared store (Redis) decides every request of a fleet in one place, which costs a
//! round trip per request and caps a hot key at what one server can decide. A *lease* moves
//! a slice of a hot key's quota into the process: the shared store takes `n` permits from
//! the key's state exactly as a check of cost `n` would, and the process then admits up to
//! `n` requests from the slice without asking (the `redis` feature's `LeasedStore` drives
//! these cells). What a process
//! leased and did not use goes back to the shared store with the core's refund.
//!
//! A cell is one slot of a table of hot keys: it is *held* for one key at a time (its
//! `owner`, a 64-bit identity), and holds the permits leased for it. Two kinds of caller
//! touch it:
//!
//! - **spenders** (any thread, the hot path): [`spend`](LeaseCell::spend) takes `cost`
//!   permits if the cell is held for their key and holds that many; a request that did not
//!   go through after all gives them back with [`give_back`](LeaseCell::give_back). Both
//!   are one compare-and-swap loop: no lock, no allocation.
//! - **the keeper** (one thread at a time, e.g. the store's lease thread): it
//!   [`claim`](LeaseCell::claim)s a free cell for a key, [`grant`](LeaseCell::grant)s the
//!   permits a lease brought, [`revoke`](LeaseCell::revoke)s what is left when a lease
//!   expires, and [`release`](LeaseCell::release)s the cell for another key.
//!
//! ## Layout
//!
//! ```text
//!  63                 40 39                                   0
//! +---------------------+--------------------------------------+
//! | generation (24 bits)|          permits (40 bits)           |
//! +---------------------+--------------------------------------+
//! ```
//!
//! Every [`revoke`](LeaseCell::revoke) (so every release) empties the permits and moves the
//! generation on, in one swap. A spend's compare-and-swap therefore fails if a revoke came
//! between its read and its write, and a [`give_back`](LeaseCell::give_back) for permits of
//! an earlier generation adds nothing (they were already returned or lost with the lease:
//! the strict side). The generation wraps after 2²⁴ revokes of one cell; a spender would
//! have to stall across all of them between one load and its compare-and-swap for the
//! wrap to matter.
//!
//! ## Why a spend cannot take permits granted for another key
//!
//! A spend reads the word (`Acquire`), then the owner, and compare-and-swaps the word it
//! read. The keeper hands a cell to another key in program order: revoke (the word's
//! generation moves on), store the new owner, then grant (a `Release` write of the word).
//! A spend whose word read sees that grant therefore also sees the new owner and refuses;
//! a spend that read an older word fails its compare-and-swap (the revoke changed the
//! generation) or finds no permits. Checked by the loom models of
//! `loom-tests/tests/lease_cell.rs` (a spend racing a refill and an expiry; a spend racing
//! the hand-off to another key), with broken twins (`LeaseFault`, loom builds only) whose
//! spend does not re-check the owner after a failed compare-and-swap, or writes the word
//! with a load and a plain store.
//!
//! ```
//! use tollgate::lease::{LeaseCell, Spend};
//! let cell = LeaseCell::new();
//! assert!(cell.claim(7));
//! cell.grant(3)?;
//! let Spend::Taken { left, generation } = cell.spend(7, 2) else { unreachable!() };
//! assert_eq!(left, 1);
//! assert_eq!(cell.spend(8, 1), Spend::NotHeld);
//! assert_eq!(cell.spend(7, 2), Spend::Short { left: 1 });
//! // Not above a ceiling of 2 (1 held + 2 would be 3), then within 3.
//! assert!(!cell.give_back(generation, 2, 2));
//! assert!(cell.give_back(generation, 2, 3));
//! assert_eq!(cell.trim(1), 2);
//! assert_eq!(cell.revoke(), 1);
//! assert_eq!(cell.release(), 0);
//! assert_eq!(cell.owner(), None);
//! # Ok::<(), tollgate::lease::GrantError>(())
//! ```

use core::fmt;

use crate::sync::{AtomicU64, Ordering};

#[cfg(tollgate_loom)]
mod loom_fault;
#[cfg(tollgate_loom)]
pub use loom_fault::LeaseFault;

/// The most permits one cell holds: the low 40 bits of its word.
pub const MAX_PERMITS: u64 = (1 << PERMIT_BITS) - 1;

const PERMIT_BITS: u32 = 40;

/// The owner value of a free cell; a key whose identity is 0 is held as 1.
const FREE: u64 = 0;

/// What [`LeaseCell::spend`] did.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Spend {
    /// The permits were taken: `left` remain in the cell, under `generation` (what a
    /// [`give_back`](LeaseCell::give_back) of them names).
    Taken {
        /// Permits left in the cell after this spend.
        left: u64,
        /// The lease generation the permits came from.
        generation: u32,
    },
    /// The cell is held for the key but holds fewer than `cost` permits: nothing taken.
    Short {
        /// Permits in the cell.
        left: u64,
    },
    /// The cell is not held for this key: nothing taken.
    NotHeld,
}

/// A grant that would overflow the cell's 40-bit permit count: nothing was added.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct GrantError {
    /// Permits the cell held.
    pub held: u64,
    /// Permits the grant asked to add.
    pub granted: u64,
}

impl fmt::Display for GrantError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a lease cell holding {} permits cannot take {} more (at most {MAX_PERMITS})",
            self.held, self.granted
        )
    }
}

impl std::error::Error for GrantError {}

/// One hot key's leased permits (see the module docs).
#[derive(Debug)]
pub struct LeaseCell {
    owner: AtomicU64,
    word: AtomicU64,
    /// A protocol step switched off, for loom's broken-twin models only.
    #[cfg(tollgate_loom)]
    fault: Option<LeaseFault>,
}

impl Default for LeaseCell {
    fn default() -> LeaseCell {
        LeaseCell::new()
    }
}

/// `key` as stored in `owner` (never the free value).
#[inline]
fn held_as(key: u64) -> u64 {
    if key == FREE {
        1
    } else {
        key
    }
}

#[inline]
fn permits(word: u64) -> u64 {
    word & MAX_PERMITS
}

#[inline]
fn generation(word: u64) -> u32 {
    // The top 24 bits.
    (word >> PERMIT_BITS) as u32
}

impl LeaseCell {
    /// A free cell holding nothing.
    pub fn new() -> LeaseCell {
        LeaseCell {
            owner: AtomicU64::new(FREE),
            word: AtomicU64::new(0),
            #[cfg(tollgate_loom)]
            fault: None,
        }
    }

    /// The identity of the key the cell is held for, if any (a key `0` reads as `1`).
    #[inline]
    pub fn owner(&self) -> Option<u64> {
        // Acquire: pairs with the keeper's Release stores of the owner.
        match self.owner.load(Ordering::Acquire) {
            FREE => None,
            key => Some(key),
        }
    }

    /// Permits in the cell now (a snapshot).
    #[inline]
    pub fn permits(&self) -> u64 {
        // Relaxed: a snapshot, nothing read through it.
        permits(self.word.load(Ordering::Relaxed))
    }

    /// Takes `cost` permits if the cell is held for `key` and holds at least that many.
    #[inline]
    pub fn spend(&self, key: u64, cost: u64) -> Spend {
        let key = held_as(key);
        // Acquire: pairs with the Release of `grant` (and `give_back`), so that a word
        // granted for a new owner comes with that owner visible to the load below.
        let mut word = self.word.load(Ordering::Acquire);
        let mut retry = false;
        loop {
            // Acquire: pairs with the Release stores of `claim` / `release`.
            if self.checks_owner(retry) && self.owner.load(Ordering::Acquire) != key {
                return Spend::NotHeld;
            }
            let left = permits(word);
            if left < cost {
                return Spend::Short { left };
            }
            // cost ≤ left ≤ MAX_PERMITS: the subtraction stays inside the permit bits.
            let next = word - cost;
            match self.swap_spent(word, next) {
                Ok(()) => {
                    return Spend::Taken {
                        left: left - cost,
                        generation: generation(word),
                    }
                }
                Err(seen) => {
                    word = seen;
                    retry = true;
                }
            }
        }
    }

    /// Whether a spend's pass checks the owner: every pass, the first and each `retry`
    /// after a failed compare-and-swap (in a loom broken twin, the first only).
    #[inline(always)]
    fn checks_owner(&self, retry: bool) -> bool {
        #[cfg(tollgate_loom)]
        {
            !retry || self.fault != Some(LeaseFault::NoOwnerRecheck)
        }
        #[cfg(not(tollgate_loom))]
        {
            let _ = retry;
            true
        }
    }

    /// A spend's write of `next` over the `word` it read: `Err` with the word seen if
    /// another write came between (a compare-and-swap; in a loom broken twin, a plain
    /// store that overwrites whatever came between).
    #[inline(always)]
    fn swap_spent(&self, word: u64, next: u64) -> Result<(), u64> {
        #[cfg(tollgate_loom)]
        if self.fault == Some(LeaseFault::SpendLoadStore) {
            // Release: as the compare-and-swap's success ordering below (pairs with the
            // Acquire of `spend` and `revoke`); the twin drops the atomicity, not the
            // ordering.
            self.word.store(next, Ordering::Release);
            return Ok(());
        }
        // AcqRel on success: Acquire as the load above (a retry reads a newer word);
        // Release so a keeper's revoke that reads this word counts the spend.
        self.word
            .compare_exchange_weak(word, next, Ordering::AcqRel, Ordering::Acquire)
            .map(|_| ())
    }

    /// Switches a protocol step off (loom broken twins only; `--cfg tollgate_loom`).
    #[cfg(tollgate_loom)]
    #[doc(hidden)]
    pub fn loom_inject(&mut self, fault: LeaseFault) {
        self.fault = Some(fault);
    }

    /// Puts back `cost` permits taken under `generation` (a request that did not go
    /// through after all), if the cell then holds at most `ceiling` (and at most
    /// [`MAX_PERMITS`]): `false`, and nothing added, if the lease they came from was
    /// revoked since or the cell has no room for them under the ceiling. The caller then
    /// returns them to the shared store itself (they are still counted there).
    #[inline]
    pub fn give_back(&self, generation_taken: u32, cost: u64, ceiling: u64) -> bool {
        let ceiling = ceiling.min(MAX_PERMITS);
        // Relaxed: the compare-and-swap below re-reads.
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            // `cost` against the room left, not `permits + cost` against the ceiling: the
            // sum could overflow (and wrap into a "fits").
            if generation(word) != generation_taken || cost > ceiling.saturating_sub(permits(word))
            {
                return false;
            }
            // Release: pairs with the Acquire of `spend` and `revoke` (the permits are
            // visible with the word). Checked above: no carry into the generation.
            match self.word.compare_exchange_weak(
                word,
                word + cost,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(seen) => word = seen,
            }
        }
    }

    /// Holds a free cell for `key` (the keeper): `false` if it is held already.
    pub fn claim(&self, key: u64) -> bool {
        // AcqRel: Release pairs with the spenders' Acquire owner loads; Acquire with the
        // Release of the `release` that freed it.
        self.owner
            .compare_exchange(FREE, held_as(key), Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Adds `permits` a lease brought (the keeper, after [`claim`](Self::claim)): the
    /// permits now in the cell.
    pub fn grant(&self, permits_granted: u64) -> Result<u64, GrantError> {
        // Relaxed: the compare-and-swap below re-reads.
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            let held = permits(word);
            if permits_granted > MAX_PERMITS - held {
                return Err(GrantError {
                    held,
                    granted: permits_granted,
                });
            }
            // Release: pairs with the spenders' Acquire word load: whoever spends these
            // permits sees the owner stored before them. Checked above: no carry.
            match self.word.compare_exchange_weak(
                word,
                word + permits_granted,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(held + permits_granted),
                Err(seen) => word = seen,
            }
        }
    }

    /// Adds up to `permits`, as many as keep the cell at most at `ceiling` (and at most
    /// [`MAX_PERMITS`]): how many it added (the keeper, with a lease whose size it chose
    /// before spenders gave permits back: the rest goes back to the shared store).
    pub fn fill(&self, permits_granted: u64, ceiling: u64) -> u64 {
        let ceiling = ceiling.min(MAX_PERMITS);
        // Relaxed: the compare-and-swap below re-reads.
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            let add = permits_granted.min(ceiling.saturating_sub(permits(word)));
            if add == 0 {
                return 0;
            }
            // Release: as `grant`. add ≤ MAX_PERMITS − permits: no carry.
            match self.word.compare_exchange_weak(
                word,
                word + add,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return add,
                Err(seen) => word = seen,
            }
        }
    }

    /// Lowers the permits held to at most `keep`, in the same generation (the keeper, when
    /// it reviews a lease: what the key no longer needs goes back): how many it removed.
    /// Spends go on meanwhile; permits given back later still count.
    pub fn trim(&self, keep: u64) -> u64 {
        // Relaxed: the compare-and-swap below re-reads.
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            let held = permits(word);
            if held <= keep {
                return 0;
            }
            // AcqRel: as `revoke` (the permits read are net of every spend before it).
            // keep < held: the subtraction stays inside the permit bits.
            match self.word.compare_exchange_weak(
                word,
                word - (held - keep),
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return held - keep,
                Err(seen) => word = seen,
            }
        }
    }

    /// Empties the cell and moves its generation on (the keeper, when a lease expires):
    /// the permits that were left, which nobody can spend any more.
    pub fn revoke(&self) -> u64 {
        // Relaxed: the compare-and-swap below re-reads.
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            let next = (u64::from(generation(word)).wrapping_add(1) << PERMIT_BITS) & !MAX_PERMITS;
            // AcqRel: Acquire pairs with the spenders' Release, so the permits read are
            // net of every spend before it; Release orders the owner change after it.
            match self
                .word
                .compare_exchange_weak(word, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return permits(word),
                Err(seen) => word = seen,
            }
        }
    }

    /// Revokes what is left and frees the cell for another key (the keeper): the permits
    /// that were left.
    pub fn release(&self) -> u64 {
        let left = self.revoke();
        // Release: pairs with the spenders' Acquire owner load (after the revoke, so a
        // spender that sees the cell free or re-held sees the emptied word).
        self.owner.store(FREE, Ordering::Release);
        left
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_grant_that_would_overflow_adds_nothing() {
        let cell = LeaseCell::new();
        assert!(cell.claim(1));
        assert_eq!(cell.grant(MAX_PERMITS), Ok(MAX_PERMITS));
        assert_eq!(
            cell.grant(1),
            Err(GrantError {
                held: MAX_PERMITS,
                granted: 1
            })
        );
        assert_eq!(
            cell.grant(u64::MAX),
            Err(GrantError {
                held: MAX_PERMITS,
                granted: u64::MAX
            })
        );
        assert_eq!(cell.permits(), MAX_PERMITS);
        assert!(!cell.give_back(0, 1, MAX_PERMITS));
        assert_eq!(cell.revoke(), MAX_PERMITS);
        assert_eq!(cell.permits(), 0);
    }

    #[test]
    fn a_give_back_after_a_revoke_adds_nothing() {
        let cell = LeaseCell::new();
        assert!(cell.claim(0));
        assert_eq!(cell.owner(), Some(1));
        cell.grant(5).unwrap();
        let Spend::Taken { generation, left } = cell.spend(0, 5) else {
            panic!("held for key 0 with 5 permits");
        };
        assert_eq!(left, 0);
        assert_eq!(cell.revoke(), 0);
        assert!(!cell.give_back(generation, 5, MAX_PERMITS));
        cell.grant(2).unwrap();
        assert_eq!(cell.spend(0, 3), Spend::Short { left: 2 });
        assert!(!cell.claim(9));
        assert_eq!(cell.release(), 2);
        assert_eq!(cell.spend(0, 1), Spend::NotHeld);
        assert!(cell.claim(9));
    }

    #[test]
    fn a_give_back_the_cell_cannot_hold_adds_nothing() {
        let cell = LeaseCell::new();
        assert!(cell.claim(5));
        cell.grant(3).unwrap();
        let Spend::Taken { generation, .. } = cell.spend(5, 1) else {
            panic!("held for key 5 with 3 permits");
        };
        // Beyond the cell's 40 bits, up to amounts whose sum with the permits held
        // overflows a u64: refused, never wrapped into the word.
        for cost in [MAX_PERMITS - 1, MAX_PERMITS, u64::MAX - 1, u64::MAX] {
            assert!(
                !cell.give_back(generation, cost, u64::MAX),
                "gave back {cost}"
            );
            assert_eq!(cell.permits(), 2);
        }
        assert!(!cell.give_back(generation, 2, 3));
        assert!(cell.give_back(generation, MAX_PERMITS - 2, u64::MAX));
        assert_eq!(cell.permits(), MAX_PERMITS);
        assert_eq!(cell.revoke(), MAX_PERMITS);
    }

    #[test]
    fn a_trim_keeps_the_generation_and_what_it_is_told() {
        let cell = LeaseCell::new();
        assert!(cell.claim(5));
        cell.grant(10).unwrap();
        let Spend::Taken { generation, .. } = cell.spend(5, 4) else {
            panic!("held for key 5 with 10 permits");
        };
        assert_eq!(cell.trim(8), 0);
        assert_eq!(cell.trim(2), 4);
        // A fill stops at its ceiling.
        assert_eq!(cell.fill(5, 4), 2);
        assert_eq!(cell.fill(5, 4), 0);
        assert_eq!(cell.trim(2), 2);
        assert_eq!(cell.permits(), 2);
        // Same generation: the spend's permits can still come back (up to the ceiling).
        assert!(cell.give_back(generation, 4, 6));
        assert_eq!(cell.permits(), 6);
    }

    #[test]
    fn the_generation_wraps_without_touching_the_permits() {
        let cell = LeaseCell::new();
        // Relaxed: a single-threaded test.
        cell.word
            .store((u64::from(u32::MAX >> 8)) << PERMIT_BITS, Ordering::Relaxed);
        assert!(cell.claim(3));
        cell.grant(4).unwrap();
        assert_eq!(cell.revoke(), 4);
        assert_eq!(cell.permits(), 0);
        assert_eq!(generation(cell.word.load(Ordering::Relaxed)), 0);
    }

    #[test]
    fn threads_spend_exactly_what_was_granted() {
        let cell = std::sync::Arc::new(LeaseCell::new());
        assert!(cell.claim(42));
        cell.grant(100_000).unwrap();
        let spent: u64 = std::thread::scope(|s| {
            let workers: Vec<_> = (0..4)
                .map(|_| {
                    let cell = &cell;
                    s.spawn(move || {
                        let mut n = 0;
                        while let Spend::Taken { .. } = cell.spend(42, 3) {
                            n += 3;
                        }
                        n
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).sum()
        });
        assert_eq!(spent + cell.revoke(), 100_000);
        assert_eq!(spent, 99_999);
    }
}
