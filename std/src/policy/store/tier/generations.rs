//! Reload generations of a tier: a store succeeded and retired by a reload, keys carried
//! over from older generations on first touch, and old generations trimmed (see the
//! parent module docs, "Reload").

use std::sync::{Arc, Weak};

use tollgate_core::{Algorithm, Nanos, PackedAlgorithm};

use super::super::cell::TierCell;
use super::{Cells, TierStore};
use crate::keyed::{Table, Upsert};
use crate::sync::{lock, Mutex, Ordering};

/// The stores of one tier across reloads: which is the newest, for a store whose direct
/// successor is gone (a reload dropped it from the chain) to find where its keys went.
#[derive(Debug, Default)]
pub(super) struct Lineage {
    pub(super) newest: Mutex<Weak<TierStore>>,
}

/// The most older generations a tier keeps after reloads (see
/// [`TierStore::trim`]).
pub(super) const MAX_GENERATIONS: usize = 4;

/// The first answer `f` gives on `generation` and its older generations, newest first (the
/// direct one borrowed, older ones held only while they are looked at).
fn in_chain<R>(generation: &TierStore, f: &mut impl FnMut(&TierStore) -> Option<R>) -> Option<R> {
    if let Some(found) = f(generation) {
        return Some(found);
    }
    in_chain(&*generation.predecessor()?, f)
}

impl TierStore {
    /// `step(store)` on this store, then on its successor, its successor's successor…, until
    /// one answers; `None` if the chain of successors ends first. A loop, not a recursion: a
    /// check of an old rule set may be many reloads behind.
    pub(super) fn along_successors<R>(
        &self,
        mut step: impl FnMut(&TierStore) -> Option<R>,
    ) -> Option<R> {
        if let Some(answer) = step(self) {
            return Some(answer);
        }
        let mut store = self.successor()?;
        loop {
            if let Some(answer) = step(&store) {
                return Some(answer);
            }
            store = store.successor()?;
        }
    }

    /// Makes this (not yet published) store the successor of `old`, which the reload then
    /// [`retire`](Self::retire)s before it publishes the set holding this one.
    pub(crate) fn succeed(self: &Arc<Self>, old: &Arc<TierStore>) {
        self.predecessor.store(Arc::new(Some(Arc::clone(old))));
        // Release: pairs with the Acquire load in `predecessor`.
        self.migrating.store(true, Ordering::Release);
        // Weak: the successor holds its predecessor (strongly, until a later reload drops
        // it); a strong link back would make the two a cycle that is never freed.
        *lock(&old.successor) = Some(Arc::downgrade(self));
        // Set once: a store is made a successor by one reload only. (The lineage's newest
        // becomes this store when `old` is retired: see `retire`.)
        let _ = self
            .lineage
            .set(Arc::clone(old.lineage.get_or_init(Arc::default)));
    }

    /// Retires this store, replaced by a store of the set of generation `generation`
    /// (before that set is published): from now on it inserts no key (a miss goes to the
    /// successor), so keys may move out of it, each on its first touch, converted then (as
    /// the Redis store converts a state written under another version when it reads it).
    pub(crate) fn retire(&self, generation: u64) {
        // Relaxed: read by reloads only, which are serialized after this one.
        self.retired_at.store(generation, Ordering::Relaxed);
        // Release: pairs with the Acquire load in `is_retired`: whoever finds this store
        // retired finds its successor set.
        self.retired.store(true, Ordering::Release);
        // Only now is the successor the tier's newest: a check reaching it through the
        // lineage (from a generation long unlinked) must find every store older than it
        // retired, or it could insert a key there while a check of the rules in force
        // inserts the same key into this store (two states for one key).
        if let (Some(next), Some(lineage)) = (lock(&self.successor).clone(), self.lineage.get()) {
            *lock(&lineage.newest) = next;
        }
    }

    /// Whether a reload made this store a successor of one it has not retired yet (only
    /// between a reload's `succeed` and its `retire`).
    pub(crate) fn replaces_unretired(&self) -> Option<Arc<TierStore>> {
        self.predecessor().filter(|old| !old.is_retired())
    }

    /// Drops the older generations that hold nothing live any more and that no check or
    /// decision can still write to (`oldest_held`: the oldest generation number of a rule
    /// set still in use; a generation retired at `g` is used only by sets older than `g`).
    /// An old generation is a table of the size it had; more than [`MAX_GENERATIONS`] are
    /// not kept once they may go: the oldest ones' live keys are carried over now.
    pub(crate) fn trim(&self, now: Nanos, oldest_held: u64) {
        let Some(direct) = self.predecessor() else {
            return;
        };
        // The chain, newest first.
        let mut chain = vec![direct];
        while let Some(older) = chain.last().and_then(|g| g.predecessor()) {
            chain.push(older);
        }
        // From the oldest. One that no rule set in use can write to any more (every set
        // older than the reload that retired it is gone) and that holds nothing live is
        // dropped: its entries are fresh states, an idle state stays idle, and nothing writes
        // to a retired store once the sets that used it are gone. The store just retired is
        // not scanned (its keys have had no time to move or go idle; a later reload looks),
        // only dropped if empty. Past MAX_GENERATIONS the oldest goes anyway: its live keys
        // come here first, and if an old set may still write to it, every key it holds
        // leaves it (an idle one is dropped), so that nothing can land in it once unlinked:
        // a later access from that set misses there and follows the successor link (or, the
        // successor gone too, the tier's newest store: see `Lineage`).
        while let Some(oldest) = chain.last() {
            // Relaxed: written by an earlier reload, which this one follows (reloads are
            // serialized).
            let unused = oldest.retired_at.load(Ordering::Relaxed) <= oldest_held;
            let over = chain.len() > MAX_GENERATIONS;
            let leaving = if unused {
                if chain.len() == 1 && oldest.len() > 0 && !over {
                    break;
                }
                let live = oldest.held_keys(Some(now));
                if !live.is_empty() && !over {
                    break;
                }
                live
            } else if over {
                oldest.held_keys(None)
            } else {
                break;
            };
            for h in leaving {
                self.pull(h, now);
            }
            chain.pop();
            let newer = chain.last().map_or(self, |g| &**g);
            newer.predecessor.store(Arc::new(None));
            // Release: a miss that reads `false` (Acquire) needs no predecessor.
            newer.migrating.store(false, Ordering::Release);
        }
    }

    /// Carries `h` over from an older generation now, if one still holds it; whether one
    /// did.
    pub(super) fn pull(&self, h: u64, now: Nanos) -> bool {
        let Some(old) = self.predecessor() else {
            return false;
        };
        let mut carried = false;
        let mut seed = || {
            let cell = self.carry(Some(&old), h, now);
            carried = cell.is_some();
            cell
        };
        match self.cells() {
            Cells::Words { table, algorithm } => {
                table.upsert(
                    h,
                    algorithm,
                    now,
                    || true,
                    || seed().map_or(0, |cell| cell.word()),
                    |_| (None, ()),
                );
            }
            Cells::Logs { cells, .. } => {
                cells.with(h, now, || true, seed, |_| ());
            }
        }
        carried
    }

    /// Runs `f` on `h`'s word in `table` under the shard lock, inserting the key if it is
    /// absent (seeded with its state carried over from the predecessor `old`, converted),
    /// unless this store was retired meanwhile: the locked path of `take` and `charge`.
    pub(super) fn upsert_word<R>(
        &self,
        table: &Table<()>,
        algorithm: &PackedAlgorithm,
        h: u64,
        now: Nanos,
        old: Option<&Arc<TierStore>>,
        f: impl FnMut(u64) -> (Option<u64>, R),
    ) -> Upsert<R> {
        table.upsert(
            h,
            algorithm,
            now,
            || !self.is_retired(),
            || self.carry(old, h, now).map_or(0, |cell| cell.word()),
            f,
        )
    }

    /// Takes `h`'s entry out of the newest generation from `old` back that holds it and
    /// converts it to this store's algorithm; `None` if none does. Runs under this store's
    /// shard lock for `h` (the seed of an insert), so carriers of one key take turns and it
    /// moves once; older generations are locked after newer ones, never the other way.
    pub(super) fn carry(
        &self,
        old: Option<&Arc<TierStore>>,
        h: u64,
        now: Nanos,
    ) -> Option<TierCell> {
        in_chain(old?, &mut |generation| {
            // A store never used holds nothing to carry.
            let mut cell = match generation.cells.get()? {
                Cells::Words { table, .. } => TierCell::Word(table.extract(h)?),
                Cells::Logs { cells, .. } => TierCell::Log(cells.extract(h)?),
            };

            cell.convert(&generation.algorithm, &self.algorithm, now);
            Some(cell)
        })
    }

    /// A copy of `h`'s state in the newest generation from `old` back that holds it,
    /// converted to this store's algorithm at `now` (nothing moves). A key moves out of one
    /// generation before it is in a newer one, so the first found is its state.
    pub(super) fn converted(&self, old: &Arc<TierStore>, h: u64, now: Nanos) -> Option<TierCell> {
        in_chain(old, &mut |generation| {
            let mut cell = generation.snapshot(h)?;
            cell.convert(&generation.algorithm, &self.algorithm, now);
            Some(cell)
        })
    }

    /// A copy of `h`'s state, if held here.
    pub(super) fn snapshot(&self, h: u64) -> Option<TierCell> {
        match self.cells.get()? {
            Cells::Words { table, .. } => table
                .update_resident(h, |state| (None, state))
                .map(TierCell::Word),
            Cells::Logs { cells, .. } => cells.with_existing(h, |log| TierCell::Log(log.clone())),
        }
    }

    /// The state absent identity `h` starts from here at `now`: fresh, or (with the
    /// laundering guard) the debt the table's summary holds for it.
    pub(super) fn absent(&self, h: u64, now: Nanos) -> TierCell {
        match self.cells.get() {
            Some(Cells::Words { table, algorithm }) => {
                TierCell::Word(table.absent_state(h, algorithm, now))
            }
            Some(Cells::Logs { .. }) | None => TierCell::fresh(&self.algorithm),
        }
    }

    /// The keys it holds whose state is not idle at `now`, or every key it holds if `now`
    /// is `None` (a scan, shard by shard under its lock): what a retired generation still
    /// has to hand over.
    fn held_keys(&self, now: Option<Nanos>) -> Vec<u64> {
        match (self.cells.get(), now) {
            (Some(Cells::Words { table, algorithm }), now) => table
                .resident()
                .into_iter()
                .filter(|&(_, state)| now.is_none_or(|now| !algorithm.is_idle(state, now)))
                .map(|(h, _)| h)
                .collect(),
            (Some(Cells::Logs { cells, .. }), Some(now)) => cells.live_keys(now),
            (Some(Cells::Logs { cells, .. }), None) => cells.keys(),
            (None, _) => Vec::new(),
        }
    }

    /// The predecessor, if a reload replaced one and an older generation may still hold a
    /// live entry. Lock-free.
    pub(super) fn predecessor(&self) -> Option<Arc<TierStore>> {
        // Acquire: pairs with the Release stores in `succeed` and `trim`.
        if !self.migrating.load(Ordering::Acquire) {
            return None;
        }
        self.predecessor.load().as_ref().clone()
    }

    /// Whether a reload replaced this store.
    pub(super) fn is_retired(&self) -> bool {
        // Acquire: pairs with the Release store in `succeed` (the successor is set).
        self.retired.load(Ordering::Acquire)
    }

    /// The store that replaced this one: the direct successor while it lives, else (a
    /// later reload dropped it, after carrying its keys on) the tier's newest store.
    pub(super) fn successor(&self) -> Option<Arc<TierStore>> {
        if let Some(next) = lock(&self.successor).as_ref().and_then(Weak::upgrade) {
            return Some(next);
        }
        let newest = lock(&self.lineage.get()?.newest).upgrade()?;
        (!core::ptr::eq(&*newest, self)).then_some(newest)
    }

    /// A reload's steps for this store, no rule set in use any more: retires the store it
    /// replaces, then trims its older generations.
    #[cfg(test)]
    pub(super) fn settle_for_test(&self, now: Nanos) {
        if let Some(old) = self.replaces_unretired() {
            old.retire(0);
        }
        self.trim(now, u64::MAX);
    }
}
