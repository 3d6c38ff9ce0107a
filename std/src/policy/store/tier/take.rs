//! A take on one tier store: the check path. The two-step take of a multi-tier check
//! ([`TierStore::prefetch`], [`Spot::prepare`], [`Prepared::try_commit`] or
//! [`TierStore::commit_again`]) and the one-step [`TierStore::take`], with their general
//! path (a new key, a log tier, a store a reload retired).

use tollgate_core::{Algorithm, Decision, InsufficientCapacity, Nanos, Outcome, PackedAlgorithm};

use super::super::cell::{Log, Receipt};
use super::{no_room, Cells, TakeReceipt, TierStore};
use crate::keyed::{Loc, Seen, Table, Upsert};

/// `algorithm.decide(state, now, cost)`, its decision written to `out`, the state to
/// write returned: dispatched here so that each algorithm's transition inlines into the
/// check, and each arm stores its decision into `out` itself. (The core's dispatch is too
/// large to inline, and an outcome merged from several arms travels through a stack slot,
/// written in words and read back in wider moves that the store buffer cannot forward:
/// measured, a stall of a dozen cycles per tier.)
#[inline(always)]
fn decide_into(
    algorithm: &PackedAlgorithm,
    state: u64,
    now: Nanos,
    cost: u32,
    out: &mut Decision,
) -> Result<Option<u64>, InsufficientCapacity> {
    #[inline(always)]
    fn put(
        outcome: Result<Outcome, InsufficientCapacity>,
        out: &mut Decision,
    ) -> Result<Option<u64>, InsufficientCapacity> {
        let outcome = outcome?;
        *out = outcome.decision;
        Ok(outcome.next)
    }
    match algorithm {
        PackedAlgorithm::Gcra(a) => put(a.decide(state, now, cost), out),
        PackedAlgorithm::TokenBucket(a) => put(a.decide(state, now, cost), out),
        PackedAlgorithm::LeakyBucket(a) => put(a.decide(state, now, cost), out),
        PackedAlgorithm::FixedWindow(a) => put(a.decide(state, now, cost), out),
        PackedAlgorithm::SlidingWindowCounter(a) => put(a.decide(state, now, cost), out),
    }
}

/// Where a single-word store's table may hold a key, as [`TierStore::prefetch`] located
/// it: the table, its algorithm and the key's buckets, so that [`prepare`](Self::prepare)
/// neither looks the store's state up nor locates the key again.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Spot<'t> {
    table: &'t Table<()>,
    algorithm: &'t PackedAlgorithm,
    loc: Loc,
}

impl<'t> Spot<'t> {
    /// Step 1 of a two-step take (the in-process store's check of several tiers): decides
    /// `cost` for `key` (the key this spot was located for) at `now` on its current state,
    /// writing the decision to `out` and recording nothing. `None` when the fast path does
    /// not apply (a key not resident, or a probe that raced a move): the caller then takes
    /// the general path.
    #[inline(always)]
    pub(crate) fn prepare(
        self,
        key: u64,
        now: Nanos,
        cost: u32,
        out: &mut Decision,
    ) -> Option<Result<Prepared<'t>, InsufficientCapacity>> {
        let seen = self.table.read_if_found(key, self.loc)?;
        let state = seen.state();
        Some(
            decide_into(self.algorithm, state, now, cost, out).map(|next| Prepared {
                state,
                seen: Some(seen),
                next,
            }),
        )
    }
}

/// What [`Spot::prepare`] decided: the state it decided on, where it read it (so the
/// commit writes without a second lookup) and the state to write (`None`: nothing to write).
#[derive(Copy, Clone, Debug)]
pub(crate) struct Prepared<'t> {
    state: u64,
    seen: Option<Seen<'t>>,
    next: Option<u64>,
}

impl Prepared<'_> {
    /// Step 2 of a two-step take, its fast path: whether it recorded the state step 1
    /// decided (`false`: nothing to record), with one compare-and-swap on the slot step 1
    /// read; `None` if that slot changed since (the store must look the key up again:
    /// [`TierStore::commit_again`]).
    #[inline(always)]
    pub(crate) fn try_commit(&self) -> Option<bool> {
        let Some(next) = self.next else {
            return Some(false);
        };
        self.seen
            .is_some_and(|seen| seen.replace(next))
            .then_some(true)
    }

    /// The receipt of the take that recorded it (step 2 of a two-step take) in the store
    /// `store` (the one whose spot prepared it), if it wrote.
    #[inline]
    pub(crate) fn receipt(&self, store: &TierStore) -> Option<TakeReceipt> {
        self.next.map(|after| TakeReceipt {
            receipt: Receipt::Word {
                before: self.state,
                after,
            },
            store: store.id,
        })
    }
}

impl TierStore {
    /// Starts loading the table buckets that may hold `key` into the cache, without
    /// waiting (a hint: it decides nothing). The in-process store's check calls it for
    /// each tier of its plan, just before deciding the tier on the state found. Does
    /// nothing for a store not yet allocated.
    ///
    /// For a single-word tier, answers where the key lives in its table, for
    /// [`Spot::prepare`] (which then need not locate it again).
    #[inline]
    pub(crate) fn prefetch(&self, key: u64) -> Option<Spot<'_>> {
        match self.cells.get() {
            Some(Cells::Words { table, algorithm }) => Some(Spot {
                table,
                algorithm,
                loc: table.prefetch_located(key),
            }),
            Some(Cells::Logs { cells, .. }) => {
                cells.prefetch(key);
                None
            }
            None => None,
        }
    }

    /// Step 2 of a two-step take: records what [`Spot::prepare`] decided, if the
    /// key's state is still the one it decided on (one compare-and-swap on the slot step 1
    /// read, no second lookup and no second decision); else decides again on the state
    /// found (another caller wrote meanwhile, or the key moved), overwriting `out` and
    /// `prepared`. Whether something was recorded (`false`: a deny, or an admit that
    /// writes nothing); `None` if the key is no longer resident (evicted or moved since
    /// step 1, which recorded nothing): the caller takes the general path. The common case
    /// ([`Prepared::try_commit`]) inline; the store is asked
    /// ([`commit_again`](Self::commit_again)) only when the key must be looked up again.
    #[inline(always)]
    pub(crate) fn commit<'t>(
        &'t self,
        key: u64,
        now: Nanos,
        cost: u32,
        prepared: &mut Prepared<'t>,
        out: &mut Decision,
    ) -> Option<Result<bool, InsufficientCapacity>> {
        match prepared.try_commit() {
            Some(recorded) => Some(Ok(recorded)),
            None => self.commit_again(key, now, cost, prepared, out),
        }
    }

    /// Step 2 of a two-step take when [`Prepared::try_commit`] found the slot read in step
    /// 1 changed: looks the key up again, and records what step 1 decided if the state is
    /// unchanged (the key moved), else decides again on the state found, overwriting `out`
    /// and `prepared`. Answers as [`commit`](Self::commit) does.
    #[inline(never)]
    pub(crate) fn commit_again<'t>(
        &'t self,
        key: u64,
        now: Nanos,
        cost: u32,
        prepared: &mut Prepared<'t>,
        out: &mut Decision,
    ) -> Option<Result<bool, InsufficientCapacity>> {
        let Some(Cells::Words { table, algorithm }) = self.cells.get() else {
            return None;
        };
        table.update_if_found(key, |state| {
            // The state decided on (the slot changed, not the state: a move), or the one
            // decided again in an earlier round of this loop.
            if state == prepared.state {
                return (prepared.next, Ok(prepared.next.is_some()));
            }
            match algorithm.decide(state, now, cost) {
                Ok(outcome) => {
                    *out = outcome.decision;
                    *prepared = Prepared {
                        state,
                        seen: None,
                        next: outcome.next,
                    };
                    (outcome.next, Ok(outcome.next.is_some()))
                }
                Err(e) => (None, Err(e)),
            }
        })
    }

    /// Decides `cost` for the key with fingerprint `key` at `now`, recording it if
    /// admitted.
    #[inline]
    pub fn take(
        &self,
        key: u64,
        now: Nanos,
        cost: u32,
    ) -> Result<(Decision, Option<TakeReceipt>), InsufficientCapacity> {
        // The hot path, inline: a key already resident in a single-word table. Everything
        // else (a new key, a log tier, a store a reload retired) goes to `take_h`.
        if let Some(Cells::Words { table, algorithm }) = self.cells.get() {
            let decide = |state: u64| match algorithm.decide(state, now, cost) {
                Ok(outcome) => {
                    let receipt = outcome.next.map(|after| TakeReceipt {
                        receipt: Receipt::Word {
                            before: state,
                            after,
                        },
                        store: self.id,
                    });
                    (outcome.next, Ok((outcome.decision, receipt)))
                }
                Err(e) => (None, Err(e)),
            };
            if let Some(taken) = table.update_if_found(key, decide) {
                return taken;
            }
        }
        self.take_h(key, now, cost)
    }

    /// The general path of a take: here, or (this store retired and the key not here) in
    /// the successor that holds it now, following successor links.
    #[inline(never)]
    fn take_h(
        &self,
        h: u64,
        now: Nanos,
        cost: u32,
    ) -> Result<(Decision, Option<TakeReceipt>), InsufficientCapacity> {
        self.along_successors(|store| store.take_here(h, now, cost))
            .unwrap_or_else(|| Ok((no_room(self.algorithm.limit()), None)))
    }

    /// [`take_h`](Self::take_h) in this store; `None` if this store is retired and does not
    /// hold the key.
    fn take_here(
        &self,
        h: u64,
        now: Nanos,
        cost: u32,
    ) -> Option<Result<(Decision, Option<TakeReceipt>), InsufficientCapacity>> {
        let cells = self.cells_unless_retired_unused()?;
        let stamp = |(decision, receipt): (Decision, Option<Receipt>)| {
            (
                decision,
                receipt.map(|receipt| TakeReceipt {
                    receipt,
                    store: self.id,
                }),
            )
        };
        let upsert = match cells {
            Cells::Words { table, algorithm } => {
                let decide = |state: u64| match algorithm.decide(state, now, cost) {
                    Ok(outcome) => {
                        let receipt = outcome.next.map(|after| Receipt::Word {
                            before: state,
                            after,
                        });
                        (outcome.next, Ok((outcome.decision, receipt)))
                    }
                    Err(e) => (None, Err(e)),
                };
                // A miss goes on to `upsert`, which looks again under the lock.
                if let Some(taken) = table.update_if_found(h, decide) {
                    return Some(taken.map(stamp));
                }
                // Retired: a key it does not hold lives on in the successor (whose miss
                // looks in this store's older generations too).
                if self.is_retired() {
                    return None;
                }
                let old = self.predecessor();
                if let Some(cell) = old.as_ref().and_then(|old| self.converted(old, h, now)) {
                    // A key still in an older generation moves only when this take records
                    // something (as the Redis store rewrites a state of another version
                    // only when it writes): a deny decides on the converted state and
                    // leaves it where it is.
                    match algorithm.decide(cell.word(), now, cost) {
                        Ok(Outcome {
                            decision,
                            next: None,
                        }) => return Some(Ok((decision, None))),
                        Err(e) => return Some(Err(e)),
                        Ok(_) => {}
                    }
                }
                self.upsert_word(table, algorithm, h, now, old.as_ref(), decide)
            }
            Cells::Logs { cells, params } => {
                let take = |log: &mut Log| log.take(params, now, cost);
                if let Some(taken) = cells.find(h, take) {
                    return Some(taken.map(stamp));
                }
                if self.is_retired() {
                    return None;
                }
                let old = self.predecessor();
                if let Some(cell) = old.as_ref().and_then(|old| self.converted(old, h, now)) {
                    // As for single-word tiers: only a take that records moves the key.
                    let decision = match cell.peek(&self.algorithm, now, cost) {
                        Ok(decision) => decision,
                        Err(e) => return Some(Err(e)),
                    };
                    if !decision.allowed || cost == 0 {
                        return Some(Ok((decision, None)));
                    }
                }
                cells.with(
                    h,
                    now,
                    || !self.is_retired(),
                    || self.carry(old.as_ref(), h, now),
                    take,
                )
            }
        };
        match upsert {
            Upsert::Done(taken) => Some(taken.map(stamp)),
            Upsert::Closed => None,
            Upsert::Full => Some(Ok((no_room(self.algorithm.limit()), None))),
        }
    }
}
