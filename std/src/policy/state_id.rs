//! [`StateId`]: which keyed state a tier is checked against, and where each in-process
//! store finds the table it built for that state.
//!
//! A tier's state has one identity for as long as the rule sets using it last: the tiers
//! of successive sets share it when a reload keeps the tier's state as it is (same
//! algorithm, capacity and laundering guard: [`Tier::adopt`](super::Tier::adopt)), and a
//! tier whose state a reload converts gets a new one.
//!
//! The tables are the store's: an [`InProcess`](super::InProcess) store builds a state's
//! table on the state's first check through it, links it to the table it converts from
//! when a reload prepares, retires and trims it (`store::tables`). The identity only
//! lends them out, by the store's number, without a lock:
//!
//! ```text
//!   StateId ─ first: OnceSlot<(store, table)>      the first store to check the state
//!           └ more:  Mutex<Vec<(store, table)>>    any other store (a set run on several)
//! ```
//!
//! A policy has one store, so its checks read `first`: one load, one comparison. A table
//! lives as long as its state: until the last rule set with a tier of that state is gone
//! (no check, decision or reservation can use it then), or longer while a newer table
//! still converts keys from it (see `store::tier`).

use std::ops::Deref;
use std::sync::Arc;

use crate::policy::store::TierStore;
use crate::sync::{lock, Mutex, OnceSlot};

/// The identity of a tier's keyed state, and the stores' tables for it (see the module
/// docs). Shared through an `Arc` by every tier using the state; compared by address.
#[derive(Debug)]
pub(crate) struct StateId {
    /// The table of the first store that checked the state.
    first: OnceSlot<(u64, Arc<TierStore>)>,
    /// The tables of other stores.
    more: Mutex<Vec<(u64, Arc<TierStore>)>>,
}

/// A store's table for a state, for one operation: borrowed from the state, or shared.
pub(crate) enum TableRef<'a> {
    /// The first store's, in place.
    First(&'a Arc<TierStore>),
    /// Another store's.
    Other(Arc<TierStore>),
}

impl Deref for TableRef<'_> {
    type Target = Arc<TierStore>;

    #[inline]
    fn deref(&self) -> &Arc<TierStore> {
        match self {
            TableRef::First(table) => table,
            TableRef::Other(table) => table,
        }
    }
}

impl StateId {
    /// A new identity, with no table.
    pub(crate) fn fresh() -> Arc<StateId> {
        Arc::new(StateId {
            first: OnceSlot::new(),
            more: Mutex::new(Vec::new()),
        })
    }

    /// The table store `store` built for this state, if it is the state's first store: the
    /// check path's one load and comparison.
    #[inline]
    pub(crate) fn first_table(&self, store: u64) -> Option<&TierStore> {
        match self.first.get() {
            Some((first, table)) if *first == store => Some(table),
            _ => None,
        }
    }

    /// Where a check of this state reads first (its `first` slot), and the table of the
    /// first store that checks it, if one has (a policy's own store: see `policy::warm`).
    #[cfg(not(tollgate_loom))]
    pub(crate) fn warm_lines(&self) -> (*const u8, Option<&TierStore>) {
        (
            core::ptr::addr_of!(self.first).cast(),
            self.first.get().map(|(_, table)| &**table),
        )
    }

    /// The first table, if it is store `store`'s.
    #[inline]
    fn first_of(&self, store: u64) -> Option<TableRef<'_>> {
        match self.first.get() {
            Some((first, table)) if *first == store => Some(TableRef::First(table)),
            _ => None,
        }
    }

    /// The table store `store` built for this state, if any.
    #[inline]
    pub(crate) fn table(&self, store: u64) -> Option<TableRef<'_>> {
        // A store other than the first builds only once `first` is set.
        self.first_of(store).or_else(|| self.other(store))
    }

    /// The table store `store` keeps for this state, `build()` made its table first if it
    /// has none (racing builders of one store all get the one that was kept).
    #[inline]
    pub(crate) fn table_or_build(
        &self,
        store: u64,
        build: impl FnOnce() -> TierStore,
    ) -> TableRef<'_> {
        match self.first_of(store) {
            Some(table) => table,
            None => self.build(store, build),
        }
    }

    /// [`table_or_build`](Self::table_or_build)'s path when the first table is not
    /// `store`'s: first use, or another store's state. The table is made before it is known
    /// to be needed (cheap: its keys' storage is allocated on its first use), and dropped
    /// if a racing builder's was kept.
    #[cold]
    #[inline(never)]
    fn build(&self, store: u64, build: impl FnOnce() -> TierStore) -> TableRef<'_> {
        let table = Arc::new(build());
        let (first, kept) = self.first.get_or_init(|| (store, Arc::clone(&table)));
        if *first == store {
            return TableRef::First(kept);
        }
        let mut more = lock(&self.more);
        if let Some((_, kept)) = more.iter().find(|(s, _)| *s == store) {
            return TableRef::Other(Arc::clone(kept));
        }
        more.push((store, Arc::clone(&table)));
        TableRef::Other(table)
    }

    /// The broken twin of [`table_or_build`](Self::table_or_build) (loom models only): a
    /// first check that found no table works on the one it built, whether or not it became
    /// the state's, so two first checks racing each work on their own.
    #[cfg(tollgate_loom)]
    pub(crate) fn loom_table_or_build_blind(
        &self,
        store: u64,
        build: impl FnOnce() -> TierStore,
    ) -> TableRef<'_> {
        if let Some(table) = self.first_of(store) {
            return table;
        }
        let (_, table) = self.first.loom_set_blind((store, Arc::new(build())));
        TableRef::Other(table)
    }

    /// Another store's table, if it built one.
    #[cold]
    fn other(&self, store: u64) -> Option<TableRef<'_>> {
        lock(&self.more)
            .iter()
            .find(|(s, _)| *s == store)
            .map(|(_, table)| TableRef::Other(Arc::clone(table)))
    }
}
