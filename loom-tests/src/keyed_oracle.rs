//! [`KeyedOracle`]: the sequential specification of a keyed table under
//! `WhenFull::Refuse`.

use tollgate_core::{Algorithm, Nanos};

use crate::{Answer, FinalState, Op, Oracle, Refusal};

/// A keyed table run sequentially: a list of `(key, packed state)` entries of at most
/// `capacity`, each driven by the pure [`Algorithm::decide`].
///
/// A resident key is checked on its state. A new key is decided as fresh; if that writes a
/// state it is inserted when there is room, else in place of an entry that is idle at that
/// `now` (lossless eviction), else refused with [`Refusal::Full`]. A deny, a probe or a peek
/// of a new key inserts nothing.
///
/// This matches the table exactly for one-shard tables whose capacity the modelled keys
/// reach only through inserts (the idle sweep runs only when the shard is at quota, which
/// is when this oracle evicts too).
#[derive(Clone, Debug)]
pub struct KeyedOracle<A> {
    algorithm: A,
    capacity: usize,
    entries: Vec<(u64, u64)>,
    keys: Vec<u64>,
    probes: Vec<u64>,
}

impl<A: Algorithm + Clone + Send + Sync + 'static> KeyedOracle<A> {
    /// An empty table of `capacity`, read back at the end by peeks of `keys` at `probes`.
    pub fn new(algorithm: A, capacity: usize, keys: Vec<u64>, probes: Vec<u64>) -> KeyedOracle<A> {
        KeyedOracle {
            algorithm,
            capacity,
            entries: Vec::new(),
            keys,
            probes,
        }
    }

    fn peek(&self, key: u64, now: Nanos, cost: u32) -> Answer {
        let state = self
            .entries
            .iter()
            .find(|&&(k, _)| k == key)
            .map_or(0, |&(_, state)| state);
        Ok(self.algorithm.peek(state, now, cost)?.decision)
    }
}

impl<A: Algorithm + Clone + Send + Sync + 'static> Oracle for KeyedOracle<A> {
    fn apply(&mut self, op: Op) -> Answer {
        if !op.commits() {
            return self.peek(op.key, op.now(), op.cost());
        }
        if let Some(entry) = self.entries.iter_mut().find(|(k, _)| *k == op.key) {
            let outcome = self.algorithm.decide(entry.1, op.now(), op.cost())?;
            if let Some(next) = outcome.next {
                entry.1 = next;
            }
            return Ok(outcome.decision);
        }
        let outcome = self.algorithm.decide(0, op.now(), op.cost())?;
        let Some(next) = outcome.next else {
            return Ok(outcome.decision);
        };
        if self.entries.len() < self.capacity {
            self.entries.push((op.key, next));
        } else if let Some(idle) = self
            .entries
            .iter_mut()
            .find(|(_, state)| self.algorithm.is_idle(*state, op.now()))
        {
            *idle = (op.key, next);
        } else {
            return Err(Refusal::Full);
        }
        Ok(outcome.decision)
    }

    fn final_state(&self) -> FinalState {
        let probes = self
            .keys
            .iter()
            .flat_map(|&key| self.probes.iter().map(move |&t| (key, t)))
            .map(|(key, t)| self.peek(key, Nanos::new(t), 1))
            .collect();
        FinalState::Table {
            entries: self.entries.len(),
            probes,
        }
    }
}
