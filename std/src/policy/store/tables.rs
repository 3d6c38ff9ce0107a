//! [`Tables`]: the in-process store's tables, one [`TierStore`] per tier state it checks,
//! built on the state's first check, found through the state with no lock (see
//! `policy::state_id`), and carried through reloads: each table of a tier whose state a
//! reload converts is linked to the table it converts from before the new rules are
//! published, the replaced tables are retired as they are published, and old generations
//! nothing can use any more are dropped after.

use arrayvec::ArrayVec;
use tollgate_core::Nanos;

use super::tier::TierStore;
use super::Plan;
use crate::policy::state_id::TableRef;
use crate::policy::{RuleSet, Tier, MAX_TIERS};

/// The in-process store's tables (see the module docs), under the store's number.
#[derive(Debug)]
pub(super) struct Tables {
    /// This store's number, unique in the process: its key in every tier state.
    store: u64,
    /// A loom model's broken twin: a state's first table set without an atomic
    /// check-and-set (two first checks racing each set and use their own).
    #[cfg(tollgate_loom)]
    pub(super) build_blind: bool,
}

/// Numbers every in-process store.
static NEXT_STORE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Tables {
    /// A store's tables, none built yet.
    pub(super) fn new() -> Tables {
        Tables {
            // Relaxed: only uniqueness matters.
            store: NEXT_STORE.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            #[cfg(tollgate_loom)]
            build_blind: false,
        }
    }

    /// `tier`'s table, if this store is the first of the tier's state and has built it
    /// (the steady state of a policy's store).
    #[inline]
    pub(super) fn first<'a>(&self, tier: &'a Tier) -> Option<&'a TierStore> {
        tier.state().first_table(self.store)
    }

    /// The table of every tier of `plan`, in its order, if this store is the first of each
    /// tier's state and has built it (the steady state of a policy's store); `None`
    /// otherwise (see [`resolve`](Self::resolve)).
    #[inline]
    pub(super) fn find<'a>(&self, plan: &Plan<'a>) -> Option<ArrayVec<&'a TierStore, MAX_TIERS>> {
        // At most MAX_TIERS, as the plan.
        plan.iter().map(|p| self.first(p.tier)).collect()
    }

    /// The table of every tier of `plan`, in its order, each built now if this store has
    /// none for its state yet.
    pub(super) fn resolve<'a>(&self, plan: &Plan<'a>) -> ArrayVec<TableRef<'a>, MAX_TIERS> {
        // At most MAX_TIERS: a plan holds no more.
        plan.iter().map(|p| self.get_or_build(p.tier)).collect()
    }

    /// `tier`'s table, built now if this store has none for its state.
    #[inline]
    fn get_or_build<'a>(&self, tier: &'a Tier) -> TableRef<'a> {
        #[cfg(tollgate_loom)]
        if self.build_blind {
            return tier
                .state()
                .loom_table_or_build_blind(self.store, || TierStore::for_tier(tier));
        }
        tier.state()
            .table_or_build(self.store, || TierStore::for_tier(tier))
    }

    /// `tier`'s table, if this store built one.
    pub(super) fn get<'a>(&self, tier: &'a Tier) -> Option<TableRef<'a>> {
        tier.state().table(self.store)
    }

    /// [`ReloadStep::Prepare`](super::ReloadStep::Prepare): each tier of `new` that
    /// converts a tier of `old` gets a table of its own, the successor of the old tier's
    /// (built now if no check had used it), so that keys move to it converted as they are
    /// touched.
    pub(super) fn prepare(&self, old: &RuleSet, new: &RuleSet) {
        for (tier, replaced) in new.replacing(old) {
            let replaced = self.get_or_build(replaced);
            let table = self.get_or_build(tier);
            table.succeed(&replaced);
        }
    }

    /// [`ReloadStep::Publish`](super::ReloadStep::Publish): retires every table the tables
    /// of `new` replace, before any check can see `new`.
    pub(super) fn publish(&self, new: &RuleSet, generation: u64) {
        for tier in new.tiers() {
            if let Some(old) = self.get(tier).and_then(|t| t.replaces_unretired()) {
                old.retire(generation);
            }
        }
    }

    /// [`ReloadStep::Done`](super::ReloadStep::Done): drops the old generations of `new`'s
    /// tables that hold nothing live and that no rule set in use can write to (see
    /// `TierStore::trim`).
    pub(super) fn done(&self, new: &RuleSet, now: Nanos, oldest_held: u64) {
        for tier in new.tiers() {
            if let Some(table) = self.get(tier) {
                table.trim(now, oldest_held);
            }
        }
    }
}
