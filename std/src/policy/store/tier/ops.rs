//! The operations on a key of a tier store other than a take: a charge (work already done),
//! a peek (records nothing), the undo of a take another tier denied, a refund and a reset.
//! Each follows successor links when a reload retired the store (see the parent module
//! docs).

use tollgate_core::{Algorithm, Decision, InsufficientCapacity, Nanos};

use super::super::cell::{Log, Receipt, TierCell};
use super::{Cells, TakeReceipt, TierStore};
use crate::keyed::Upsert;

impl TierStore {
    /// Records `cost` permits for `key` at `now` whatever the limit says (work already
    /// done: a reservation settled above its estimate). Inserts the key if needed.
    pub fn charge(&self, key: u64, now: Nanos, cost: u32) {
        self.along_successors(|store| store.charge_here(key, now, cost));
    }

    /// [`charge`](Self::charge) in this store; `None` if it is retired and does not hold
    /// the key.
    fn charge_here(&self, key: u64, now: Nanos, cost: u32) -> Option<()> {
        let upsert = match self.cells_unless_retired_unused()? {
            Cells::Words { table, algorithm } => {
                let charge = |state: u64| {
                    let next = algorithm.charge(state, now, cost);
                    ((next != state).then_some(next), ())
                };
                if table.update_if_found(key, charge).is_some() {
                    return Some(());
                }
                let old = self.predecessor();
                self.upsert_word(table, algorithm, key, now, old.as_ref(), charge)
            }
            Cells::Logs { cells, params } => {
                let charge = |log: &mut Log| log.charge(params, now, cost);
                if cells.find(key, charge).is_some() {
                    return Some(());
                }
                let old = self.predecessor();
                cells.with(
                    key,
                    now,
                    || !self.is_retired(),
                    || self.carry(old.as_ref(), key, now),
                    charge,
                )
            }
        };
        match upsert {
            Upsert::Closed => None,
            Upsert::Done(()) | Upsert::Full => Some(()),
        }
    }

    /// Forgets `key`'s state (a fresh key from then on) in this store and in every
    /// generation before and after it: oldest first, so a carry racing the reset moves a
    /// state either already forgotten or forgotten after it (never one the reset missed).
    /// A take racing it counts before the reset (forgotten) or after (kept).
    pub fn reset(&self, key: u64) {
        self.forget_from_oldest(key);
        let mut next = self.successor();
        while let Some(store) = next {
            store.forget_here(key);
            next = store.successor();
        }
    }

    /// Forgets `h` in this store's older generations, oldest first, then in this one.
    fn forget_from_oldest(&self, h: u64) {
        if let Some(old) = self.predecessor() {
            old.forget_from_oldest(h);
        }
        self.forget_here(h);
    }

    /// Forgets `h` here: a word back to the fresh state (0, as [`TierCell::fresh`]), a log
    /// emptied. The key stays resident, idle: the first to go when the table is full.
    fn forget_here(&self, h: u64) {
        match self.cells.get() {
            Some(Cells::Words { table, .. }) => {
                let fresh = TierCell::fresh(&self.algorithm).word();
                table.update_resident(h, |state| ((state != fresh).then_some(fresh), ()));
            }
            Some(Cells::Logs { cells, .. }) => {
                cells.with_existing(h, Log::clear);
            }
            None => {}
        }
    }

    /// The decision `cost` would get; records nothing and inserts no key.
    #[inline]
    pub fn peek(&self, key: u64, now: Nanos, cost: u32) -> Result<Decision, InsufficientCapacity> {
        // The hot path, inline: a key resident in a single-word table. A miss (which may
        // have raced a move) is confirmed by `peek_h`.
        if let Some(Cells::Words { table, algorithm }) = self.cells.get() {
            let peek = |state: u64| (None, algorithm.peek(state, now, cost).map(|o| o.decision));
            if let Some(peeked) = table.update_if_found(key, peek) {
                return peeked;
            }
        }
        self.peek_h(key, now, cost)
    }

    #[inline(never)]
    fn peek_h(&self, h: u64, now: Nanos, cost: u32) -> Result<Decision, InsufficientCapacity> {
        self.along_successors(|store| store.peek_here(h, now, cost))
            .unwrap_or_else(|| TierCell::fresh(&self.algorithm).peek(&self.algorithm, now, cost))
    }

    /// [`peek_h`](Self::peek_h) in this store; `None` if it is retired and does not hold
    /// the key (its successor may).
    fn peek_here(
        &self,
        h: u64,
        now: Nanos,
        cost: u32,
    ) -> Option<Result<Decision, InsufficientCapacity>> {
        if let Some(cell) = self.snapshot(h) {
            return Some(cell.peek(&self.algorithm, now, cost));
        }
        // Absent here: a retired store's key may live on in the successor, a migrating
        // store's may still wait in the predecessor.
        if self.is_retired() {
            return None;
        }
        Some(
            match self
                .predecessor()
                .and_then(|old| self.converted(&old, h, now))
            {
                Some(cell) => cell.peek(&self.algorithm, now, cost),
                None => self.absent(h, now).peek(&self.algorithm, now, cost),
            },
        )
    }

    /// Undoes a take made at `now` (see the module docs of `store::cell` for exactness). If
    /// the key left the store that recorded the take (a reload retired it and a check on the
    /// new rules carried the key over), the take is undone where the key is now, as a
    /// refund of its cost at `now` (see the module docs).
    pub fn compensate(&self, key: u64, receipt: TakeReceipt, cost: u32, now: Nanos) {
        self.compensate_h(key, receipt, cost, now);
    }

    fn compensate_h(&self, h: u64, receipt: TakeReceipt, cost: u32, now: Nanos) {
        self.along_successors(|store| {
            if store.id == receipt.store {
                // Absent from a retired store: carried over since the take (a retired store
                // evicts nothing, as it inserts nothing; a key evicted before the reload,
                // while the table was full of live keys, forgot its use with it, take
                // included): undone where the key is now, as a refund.
                if !store.undo_here(h, receipt.receipt, cost) {
                    if let Some(next) = store.successor() {
                        next.refund_h(h, now, cost);
                    }
                }
                return Some(());
            }
            // Not retired: the store in force, past where the take landed, which is gone (a
            // reload dropped it, its keys carried here first).
            if !store.is_retired() {
                store.refund_h(h, now, cost);
                return Some(());
            }
            None
        });
    }

    /// Undoes a take's `receipt` on `h` here (exact when nothing else wrote since); whether
    /// `h` was here, or this store is not retired (nothing to forward then).
    fn undo_here(&self, h: u64, receipt: Receipt, cost: u32) -> bool {
        let found = self.cells.get().is_some_and(|cells| match cells {
            Cells::Words { table, algorithm } => match receipt {
                Receipt::Word { before, after } => table
                    .update_resident(h, |state| {
                        let next = algorithm.undo(state, before, after, cost);
                        ((next != state).then_some(next), ())
                    })
                    .is_some(),
                // A log receipt is only ever made by a log store.
                Receipt::Log { .. } => true,
            },
            Cells::Logs { cells, params } => cells
                .with_existing(h, |log| log.compensate(params, receipt, cost))
                .is_some(),
        });
        found || !self.is_retired()
    }

    /// Gives `cost` permits back to `key` at `now`.
    pub(crate) fn refund(&self, key: u64, now: Nanos, cost: u32) {
        self.refund_h(key, now, cost);
    }

    fn refund_h(&self, h: u64, now: Nanos, cost: u32) {
        self.along_successors(|store| store.refund_here(h, now, cost));
    }

    /// [`refund`](Self::refund) in this store; `None` if it is retired and does not hold
    /// the key (its successor may).
    fn refund_here(&self, h: u64, now: Nanos, cost: u32) -> Option<()> {
        let refund = |cells: &Cells| match cells {
            Cells::Words { table, algorithm } => table
                .update_resident(h, |state| {
                    let next = algorithm.refund(state, now, cost);
                    ((next != state).then_some(next), ())
                })
                .is_some(),
            Cells::Logs { cells, params } => cells
                .with_existing(h, |log| log.refund(params, now, cost))
                .is_some(),
        };
        if refund(self.cells_unless_retired_unused()?) {
            return Some(());
        }
        if self.is_retired() {
            return None;
        }
        if self.pull(h, now) {
            refund(self.cells());
        }
        Some(())
    }
}
