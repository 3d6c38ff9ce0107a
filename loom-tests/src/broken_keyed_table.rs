//! [`BrokenKeyedTable`]: a deliberately wrong keyed table, to prove the keyed models can
//! fail.

use loom::sync::atomic::{AtomicU64, Ordering};
use tollgate_core::{Algorithm, Nanos};

use crate::{Answer, FinalState, Op, Refusal, Subject};

/// Slots of `(key + 1, state)` (0 = empty) where a new key is inserted without any lock or
/// claim: look for the key, and if it is missing, take the first empty slot with a plain
/// store. Two threads inserting the same key both find it missing, both insert it fresh
/// and both get admitted; one entry survives with one admission. A model run against it
/// must panic.
#[derive(Debug)]
pub struct BrokenKeyedTable<A> {
    algorithm: A,
    slots: [(AtomicU64, AtomicU64); 2],
    keys: Vec<u64>,
    probes: Vec<u64>,
}

impl<A: Algorithm> BrokenKeyedTable<A> {
    /// An empty two-slot table, read back at the end by peeks of `keys` at `probes`.
    pub fn new(algorithm: A, keys: Vec<u64>, probes: Vec<u64>) -> BrokenKeyedTable<A> {
        BrokenKeyedTable {
            algorithm,
            slots: std::array::from_fn(|_| (AtomicU64::new(0), AtomicU64::new(0))),
            keys,
            probes,
        }
    }

    fn find(&self, key: u64) -> Option<&(AtomicU64, AtomicU64)> {
        // SeqCst everywhere: the bug under test is the unclaimed insert, not an ordering.
        self.slots
            .iter()
            .find(|(ident, _)| ident.load(Ordering::SeqCst) == key + 1)
    }

    fn peek(&self, key: u64, now: Nanos, cost: u32) -> Answer {
        let state = self
            .find(key)
            .map_or(0, |(_, state)| state.load(Ordering::SeqCst));
        Ok(self.algorithm.peek(state, now, cost)?.decision)
    }
}

impl<A: Algorithm + Send + Sync + 'static> Subject for BrokenKeyedTable<A> {
    fn apply(&self, op: Op) -> Answer {
        if !op.commits() {
            return self.peek(op.key, op.now(), op.cost());
        }
        if let Some((_, state)) = self.find(op.key) {
            // Resident keys are updated correctly, with a compare-and-swap loop.
            let mut current = state.load(Ordering::SeqCst);
            loop {
                let outcome = self.algorithm.decide(current, op.now(), op.cost())?;
                let Some(next) = outcome.next else {
                    return Ok(outcome.decision);
                };
                match state.compare_exchange(current, next, Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(_) => return Ok(outcome.decision),
                    Err(actual) => current = actual,
                }
            }
        }
        let outcome = self.algorithm.decide(0, op.now(), op.cost())?;
        let Some(next) = outcome.next else {
            return Ok(outcome.decision);
        };
        let Some((ident, state)) = self
            .slots
            .iter()
            .find(|(ident, _)| ident.load(Ordering::SeqCst) == 0)
        else {
            return Err(Refusal::Full);
        };
        state.store(next, Ordering::SeqCst);
        ident.store(op.key + 1, Ordering::SeqCst);
        Ok(outcome.decision)
    }

    fn final_state(&self) -> FinalState {
        let probes = self
            .keys
            .iter()
            .flat_map(|&key| self.probes.iter().map(move |&t| (key, t)))
            .map(|(key, t)| self.peek(key, Nanos::new(t), 1))
            .collect();
        let entries = self
            .slots
            .iter()
            .filter(|(ident, _)| ident.load(Ordering::SeqCst) != 0)
            .count();
        FinalState::Table { entries, probes }
    }
}
