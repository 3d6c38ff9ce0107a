//! [`DebtSummary`]: the opt-in memory of debts evicted under pressure, so that eviction
//! cannot launder a limit
//! ([`KeyedLimiterBuilder::debt_summary`](crate::KeyedLimiterBuilder::debt_summary)).
//!
//! # Layout
//!
//! `rows = 2` rows of `width = ⌈cells / 2⌉` cells, one packed state (`u64`) each, plus one
//! bit per slot of the table (*inherited*) and one word (the latest `now` any merge used),
//! all allocated at build time:
//!
//! ```text
//! row 0   [ state ][ state ]  …  [ state ]     cell = ⌊mix(h, seed₀) · width / 2³²⌋
//! row 1   [ state ][ state ]  …  [ state ]     cell = ⌊mix(h, seed₁) · width / 2³²⌋
//! flags   one bit per slot: its entry started from a debt the summary gave it
//! ```
//!
//! A cell is a count-min cell whose "add" is a max over states: merging state `s` into
//! cell `c` at `now` writes `with_used(now, max(used(c), used(s)))`, which core proves at
//! least as strict as both at every later time (`core/tests/algebra.rs`). An idle cell (its
//! debt ended: TAT passed, window rolled) reads as empty; nothing expires by a timer.
//!
//! # The rules
//!
//! - **Estimate** of identity `h` at `now`: fresh unless *both* of its cells hold a debt,
//!   else the one with the smaller `used`. A new key starts from the stricter of fresh and
//!   its estimate (and its slot's *inherited* bit says whether the estimate was a debt).
//! - **Record** when an entry is evicted under pressure with state `S` (idle entries and
//!   [`remove`](crate::KeyedLimiter::remove) record nothing):
//!   - not inherited: `S` itself, merged into both cells (all of `S` is the key's own);
//!   - inherited: only the debt above what the summary now gives it, `with_used(now,
//!     used(S) − used(estimate))`, nothing if that is 0. Inherited debt is never recorded
//!     again as the key's own: **no cascade** (a phantom debt cannot spread to new cells
//!     or outlive the debts it came from).
//!
//! # Bounds
//!
//! Let `D` be the number of keys evicted under pressure whose recorded debt has not yet
//! ended (at most the evictions of one reset horizon: GCRA the burst tolerance, a fixed
//! window one window, a sliding counter two).
//!
//! - **Phantom debt** (a key never evicted starts with debt): only if both its cells hold a
//!   live debt. Each record fills at most one cell per row, so a row's filled share is at
//!   most `min(1, D/width)` and a new key (whose cells the seeded hash makes independent of
//!   everything before) has phantom debt with probability at most `min(1, D/width)²`,
//!   whoever chose the evicted keys. For evicted keys independent of the hash it is
//!   `(1 − (1 − 1/width)^D)² ≈ (1 − e^(−D/width))²`; a flood fills rows faster than that
//!   (its keys that inherit are denied and never evicted, so the keys that do get in, and
//!   later out, are those with an empty cell: measured 0.92 of a row at `D/width = 1.85`
//!   against 0.84). Its size is at most the smaller cell, each cell the largest debt one
//!   evicted key *took itself* (decayed since), and it ends when that key's debt would
//!   have. `KeyedStats::pressure_evictions` counts evictions (an upper bound on `D`).
//! - **Laundering**: a key evicted while holding only its own debt comes back with at least
//!   that debt, decayed as its entry would have: admitted no more than had it stayed. A key
//!   evicted again after it came back with an inherited debt comes back with at least the
//!   larger of the summary's estimate and what it took since, not their sum: per such
//!   eviction it can regain at most what it took since it came back (for the evicted key,
//!   at most its limit). It only happens to a key that least-loss eviction picks again: every
//!   entry in view owes at least as much.
//! - **Memory**: `8 × cells + slots / 8` bytes (rounded up to words), counted in
//!   [`memory_bytes`](crate::KeyedLimiter::memory_bytes), fixed at build.
//!
//! # Concurrency
//!
//! Records happen under the evicting shard's lock, estimates under the inserting shard's
//! lock (or in a peek of an absent key); a check of a resident key never touches the
//! summary. A key's eviction and its later insert take the same shard lock, so the insert
//! sees the record; records into one cell from different shards are compare-and-swap loops
//! (loom model `keyed_summary_records_race`), so none is lost. A slot's bit is read and
//! written only under its shard's lock.

use tollgate_core::{Algorithm, Nanos};

use crate::sync::{AtomicU64, Ordering};
use tollgate_core::hash::splitmix64 as splitmix;

/// Seeds of the two rows' cell choice (independent of the bucket choice, which uses the
/// identity's own bits).
const ROW_SEEDS: [u64; 2] = [0x6a09_e667_f3bc_c908, 0xbb67_ae85_84ca_a73b];

/// The most cells a summary can have: two rows of `u32::MAX` (a cell index is the top 32
/// bits of a hash scaled to the width), within the address space.
// Truncation: the value is at most `isize::MAX / 8`, so it fits in usize.
#[allow(clippy::cast_possible_truncation)]
pub(crate) const MAX_CELLS: usize = {
    let by_index = 2 * (u32::MAX as u64);
    let by_memory = (isize::MAX as u64) / 8;
    (if by_index < by_memory {
        by_index
    } else {
        by_memory
    }) as usize
};

/// The debts of keys evicted under pressure (see the module docs).
#[derive(Debug)]
pub(crate) struct DebtSummary {
    /// `2 × width` cells: row 0, then row 1.
    cells: Box<[AtomicU64]>,
    /// Cells per row (at most `u32::MAX`).
    width: u64,
    /// The latest `now` any record used.
    clock: AtomicU64,
    /// One bit per table slot: the entry there started from an inherited debt.
    inherited: Box<[AtomicU64]>,
    /// Records read and write cells without a compare-and-swap (loom broken twin only).
    #[cfg(tollgate_loom)]
    pub(crate) lost_updates: bool,
}

impl DebtSummary {
    /// An empty summary of about `cells` cells (`⌈cells / 2⌉` per row, at least 1) for a
    /// table of `slots` slots. `cells ≤ MAX_CELLS` (the builder checks).
    pub(crate) fn new(cells: usize, slots: usize) -> DebtSummary {
        let width = cells.div_ceil(2).max(1);
        DebtSummary {
            cells: (0..2 * width).map(|_| AtomicU64::new(0)).collect(),
            width: width as u64,
            clock: AtomicU64::new(0),
            inherited: (0..slots.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            #[cfg(tollgate_loom)]
            lost_updates: false,
        }
    }

    /// Heap bytes held: the cells and the slot bits.
    pub(crate) fn heap_bytes(&self) -> usize {
        (self.cells.len() + self.inherited.len()) * core::mem::size_of::<AtomicU64>()
    }

    /// Cells per row.
    #[cfg(all(test, not(tollgate_loom)))]
    // Truncation: `width` came from a usize (see `new`).
    #[allow(clippy::cast_possible_truncation)]
    pub(crate) fn width(&self) -> usize {
        self.width as usize
    }

    /// The two cells of identity `h`.
    #[inline]
    fn cells_of(&self, h: u64) -> [&AtomicU64; 2] {
        // The top 32 bits of a strong mix, scaled to the width (Lemire's reduction).
        let cell = |seed: u64| (((splitmix(h ^ seed) >> 32) * self.width) >> 32) as usize;
        // Truncation: `width` came from a usize (see `new`).
        #[allow(clippy::cast_possible_truncation)]
        let width = self.width as usize;
        [
            &self.cells[cell(ROW_SEEDS[0])],
            &self.cells[width + cell(ROW_SEEDS[1])],
        ]
    }

    /// The state a new key with identity `h` starts from at `now`: `0` (fresh) unless both
    /// its cells hold a debt, else the one with the smaller debt.
    #[inline]
    pub(crate) fn estimate<A: Algorithm + ?Sized>(&self, h: u64, algorithm: &A, now: Nanos) -> u64 {
        let [c0, c1] = self.cells_of(h);
        // Relaxed: a cell is a self-contained state. A key's own record was made under the
        // shard lock its insert now holds (ordered by it); for any other key, any value the
        // cell held is a valid (conservative) answer.
        let (s0, s1) = (c0.load(Ordering::Relaxed), c1.load(Ordering::Relaxed));
        if s0 == 0 || s1 == 0 || algorithm.is_idle(s0, now) || algorithm.is_idle(s1, now) {
            return 0;
        }
        if algorithm.used(s0, now) <= algorithm.used(s1, now) {
            s0
        } else {
            s1
        }
    }

    /// The stricter of `seed` (the state a new key would start from without the summary)
    /// and the estimate for `h`, and whether the estimate was a debt.
    #[inline]
    pub(crate) fn seed<A: Algorithm + ?Sized>(
        &self,
        h: u64,
        seed: u64,
        algorithm: &A,
        now: Nanos,
    ) -> (u64, bool) {
        let held = self.estimate(h, algorithm, now);
        if held == 0 {
            return (seed, false);
        }
        if seed == 0 || algorithm.is_idle(seed, now) {
            return (held, true);
        }
        // Both debts, as one state that dominates each.
        let used = algorithm.used(seed, now).max(algorithm.used(held, now));
        (algorithm.with_used(now, used), true)
    }

    /// Whether the entry in slot `idx` started from an inherited debt (under its shard's
    /// lock).
    #[inline]
    pub(crate) fn inherited(&self, idx: usize) -> bool {
        // Relaxed: written and read only under the slot's shard lock, which orders them.
        self.inherited[idx / 64].load(Ordering::Relaxed) & (1 << (idx % 64)) != 0
    }

    /// Sets slot `idx`'s bit (under its shard's lock).
    #[inline]
    pub(crate) fn set_inherited(&self, idx: usize, inherited: bool) {
        let bit = 1u64 << (idx % 64);
        // Relaxed: see `inherited`. An RMW because one word holds slots of several shards.
        if inherited {
            self.inherited[idx / 64].fetch_or(bit, Ordering::Relaxed);
        } else {
            self.inherited[idx / 64].fetch_and(!bit, Ordering::Relaxed);
        }
    }

    /// Identity `h`, whose entry started from an inherited debt or not, was evicted under
    /// pressure with `state` at `now`: records its own debt (see the module docs' rules).
    /// Called under the evicting shard's lock.
    pub(crate) fn evicted<A: Algorithm + ?Sized>(
        &self,
        h: u64,
        state: u64,
        inherited: bool,
        algorithm: &A,
        now: Nanos,
    ) {
        if algorithm.is_idle(state, now) {
            return;
        }
        // Relaxed: a max over clock readings; it publishes nothing (every cell value is a
        // self-contained state). Merging at the latest `now` keeps a thread with an older
        // reading from moving a window cell back to an earlier window.
        let latest = self.clock.fetch_max(now.as_u64(), Ordering::Relaxed);
        let now = Nanos::new(latest.max(now.as_u64()));
        let own = if inherited {
            let held = self.estimate(h, algorithm, now);
            let above = algorithm
                .used(state, now)
                .saturating_sub(algorithm.used(held, now));
            if above == 0 {
                return;
            }
            algorithm.with_used(now, above)
        } else {
            state
        };
        for cell in self.cells_of(h) {
            self.merge(cell, own, algorithm, now);
        }
    }

    /// Merges `state` into `cell` at `now` (a compare-and-swap loop).
    fn merge<A: Algorithm + ?Sized>(
        &self,
        cell: &AtomicU64,
        state: u64,
        algorithm: &A,
        now: Nanos,
    ) {
        let debt = algorithm.used(state, now);
        // Relaxed: see `estimate`; the loop's CAS keeps every merge.
        let mut current = cell.load(Ordering::Relaxed);
        loop {
            let merged = if current == 0 || algorithm.is_idle(current, now) {
                state
            } else {
                // Not a shortcut on `held >= debt`: equal counts may still end at different
                // times (a TAT anywhere within one interval), and only `with_used` of the
                // larger count is proven to dominate both.
                let held = algorithm.used(current, now);
                algorithm.with_used(now, held.max(debt))
            };
            if merged == current {
                return;
            }
            #[cfg(tollgate_loom)]
            if self.lost_updates {
                // Broken twin: a plain store of what was computed from a stale load.
                cell.store(merged, Ordering::Relaxed);
                return;
            }
            // Relaxed (success and failure): as for the load above.
            match cell.compare_exchange_weak(current, merged, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(actual) => current = actual,
            }
        }
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use tollgate_core::{Algorithm, FixedWindow, Gcra, Nanos};

    use super::DebtSummary;

    fn exhausted(gcra: &Gcra, now: Nanos, n: u32) -> u64 {
        (0..n).fold(0, |s, _| gcra.decide(s, now, 1).unwrap().next.unwrap())
    }

    #[test]
    fn width_and_bytes_follow_the_cells() {
        assert_eq!(DebtSummary::new(1, 64).width(), 1);
        assert_eq!(DebtSummary::new(3, 64).width(), 2);
        let s = DebtSummary::new(100_000, 120_000);
        assert_eq!(s.width(), 50_000);
        // 100 000 cells of 8 bytes, 1 875 words of slot bits.
        assert_eq!(s.heap_bytes(), 800_000 + 1_875 * 8);
    }

    /// A recorded debt comes back for its identity, decays as the state does and is gone
    /// once the state would be idle; an identity sharing no cell with it starts fresh.
    #[test]
    fn a_recorded_debt_comes_back_and_ends_with_its_reset() {
        let gcra = Gcra::per_second(1).burst(4).build().unwrap();
        let summary = DebtSummary::new(1_000, 64);
        let now = Nanos::from_secs(10);
        let state = exhausted(&gcra, now, 4);
        summary.evicted(7, state, false, &gcra, now);
        assert_eq!(summary.estimate(7, &gcra, now), state);
        let later = Nanos::from_secs(12);
        assert_eq!(gcra.used(summary.estimate(7, &gcra, later), later), 2);
        assert_eq!(summary.estimate(7, &gcra, Nanos::from_secs(14)), 0);
        let other = (0..1_000u64)
            .find(|&h| summary.estimate(h, &gcra, now) == 0)
            .unwrap();
        assert_eq!(summary.seed(other, 0, &gcra, now), (0, false));
        // An idle state is never recorded.
        let fresh = DebtSummary::new(1, 64);
        fresh.evicted(8, 0, false, &gcra, now);
        assert_eq!(fresh.estimate(9, &gcra, now), 0);
    }

    /// No cascade: a key that inherited a debt and took nothing more records nothing when
    /// evicted (its cells, if other than the source's, stay empty), and one that took `n`
    /// more records `n`, not the inherited debt plus `n`.
    #[test]
    fn inherited_debt_is_not_recorded_again() {
        let gcra = Gcra::per_second(1).burst(10).build().unwrap();
        let now = Nanos::from_secs(100);
        // Width 1: every identity shares both cells.
        let summary = DebtSummary::new(2, 64);
        summary.evicted(1, exhausted(&gcra, now, 8), false, &gcra, now);
        let (seed, inherited) = summary.seed(2, 0, &gcra, now);
        assert!(inherited);
        assert_eq!(gcra.used(seed, now), 8);
        // Key 2 took nothing more: nothing new is recorded.
        summary.evicted(2, seed, true, &gcra, now);
        assert_eq!(gcra.used(summary.estimate(3, &gcra, now), now), 8);
        // Key 2 took one more permit: it records that one (its own), not 8 + 1.
        let state = gcra.decide(seed, now, 1).unwrap().next.unwrap();
        assert_eq!(gcra.used(state, now), 9);
        summary.evicted(2, state, true, &gcra, now);
        assert_eq!(gcra.used(summary.estimate(3, &gcra, now), now), 8);
        // The same key, had it started fresh, would have recorded all 9 (its own).
        summary.evicted(2, state, false, &gcra, now);
        assert_eq!(gcra.used(summary.estimate(3, &gcra, now), now), 9);
    }

    /// Two debts in one cell (width 1): the cell is at least as strict as each, including
    /// a window state recorded with an older clock reading (it never moves a cell back).
    #[test]
    fn merged_cells_dominate_every_debt_recorded() {
        let window = FixedWindow::new(5, Nanos::from_secs(1)).unwrap();
        let summary = DebtSummary::new(1, 64);
        let late = Nanos::from_millis(2_100);
        let early = Nanos::from_millis(1_900);
        summary.evicted(1, window.with_used(late, 3), false, &window, late);
        summary.evicted(2, window.with_used(early, 4), false, &window, early);
        let held = summary.estimate(3, &window, late);
        assert!(window.used(held, late) >= 3);
        assert_eq!(summary.estimate(3, &window, Nanos::from_secs(3)), 0);
        let gcra = Gcra::per_second(1).burst(10).build().unwrap();
        let summary = DebtSummary::new(1, 64);
        let now = Nanos::from_secs(100);
        let (a, b) = (
            gcra.with_used(now, 2),
            gcra.with_used(Nanos::from_secs(99), 3),
        );
        summary.evicted(1, a, false, &gcra, now);
        summary.evicted(2, b, false, &gcra, now);
        let held = summary.estimate(9, &gcra, now);
        for t in (100..112).map(Nanos::from_secs) {
            assert!(
                gcra.used(held, t) >= gcra.used(a, t).max(gcra.used(b, t)),
                "{t:?}"
            );
        }
        let seed = gcra.with_used(now, 6);
        assert_eq!(gcra.used(summary.seed(9, seed, &gcra, now).0, now), 6);
    }

    #[test]
    fn slot_bits_set_and_clear() {
        let summary = DebtSummary::new(2, 200);
        for idx in [0, 63, 64, 199] {
            assert!(!summary.inherited(idx));
            summary.set_inherited(idx, true);
            assert!(summary.inherited(idx));
        }
        summary.set_inherited(64, false);
        assert!(!summary.inherited(64) && summary.inherited(63) && summary.inherited(199));
    }
}
