//! [`TierStore`]: one tier's per-key state: a bounded keyed table of [`TierCell`]s and the
//! algorithm they run, which a reload may change in place.

use tollgate_core::{AnyAlgorithm, Decision, InsufficientCapacity, Nanos};

use super::keyed_cells::{KeyedCells, KeyedStore, KeyedValue};
use super::tier_cell::{Receipt, TierCell};

/// The keyed state of one tier. The algorithm lives beside the cells (per shard), so a
/// cell is always read with the algorithm it was written under; a reload converts the cells
/// and swaps the algorithm together, shard by shard, under the shard's write lock.
#[derive(Debug)]
pub(crate) struct TierStore {
    cells: KeyedCells<TierCell, AnyAlgorithm>,
}

impl TierStore {
    /// Fresh state for up to `capacity` keys.
    pub(crate) fn new(algorithm: AnyAlgorithm, capacity: usize) -> TierStore {
        TierStore {
            cells: KeyedCells::new(algorithm, capacity),
        }
    }

    /// Decides `cost` for `key` at `now`, recording it if admitted.
    #[inline]
    pub(crate) fn take(
        &self,
        key: &str,
        now: Nanos,
        cost: u32,
    ) -> Result<(Decision, Option<Receipt>), InsufficientCapacity> {
        self.cells.with(key, now, |a, cell| cell.take(a, now, cost))
    }

    /// The decision `cost` would get; records nothing and inserts no key.
    #[inline]
    pub(crate) fn peek(
        &self,
        key: &str,
        now: Nanos,
        cost: u32,
    ) -> Result<Decision, InsufficientCapacity> {
        self.cells.with_existing(key, |a, cell| match cell {
            Some(cell) => cell.peek(a, now, cost),
            None => TierCell::fresh(a).peek(a, now, cost),
        })
    }

    /// Undoes a take.
    pub(crate) fn compensate(&self, key: &str, receipt: Receipt, cost: u32) {
        self.cells.with_existing(key, |a, cell| {
            if let Some(cell) = cell {
                cell.compensate(a, receipt, cost);
            }
        })
    }

    /// Gives `cost` permits back to `key` at `now`.
    pub(crate) fn refund(&self, key: &str, now: Nanos, cost: u32) {
        self.cells.with_existing(key, |a, cell| {
            if let Some(cell) = cell {
                cell.refund(a, now, cost);
            }
        })
    }

    /// Switches to `algorithm`, converting every key's state at `now`.
    pub(crate) fn reconfigure(&self, algorithm: AnyAlgorithm, now: Nanos) {
        self.cells
            .reconfigure(algorithm, |old, new, cell| cell.convert(old, new, now));
    }

    /// The most keys it holds.
    pub(crate) fn capacity(&self) -> usize {
        self.cells.capacity()
    }

    /// Keys holding state.
    pub(crate) fn len(&self) -> usize {
        self.cells.len()
    }
}
