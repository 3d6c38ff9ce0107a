//! [`KeyedOracle`]: the sequential specification of a keyed table under
//! `WhenFull::Refuse` or `WhenFull::Evict`.

use tollgate::WhenFull;
use tollgate_core::{Algorithm, Nanos};

use crate::{Answer, FinalState, Op, Oracle, Refusal};

/// A keyed table run sequentially: a list of `(key, packed state)` entries of at most
/// `capacity`, each driven by the pure [`Algorithm::decide`].
///
/// A resident key is checked on its state. A new key is decided as fresh; if that writes a
/// state it is inserted when there is room, else in place of an entry that is idle at that
/// `now` (lossless eviction), else, by the table's [`WhenFull`]:
///
/// - `Refuse`: refused with [`Refusal::Full`];
/// - `Evict`: in place of a resident entry, whose state is forgotten (that key restarts
///   fresh if it comes back). *Which* entry is left open: [`Oracle::successors`] offers
///   one successor per resident entry, and the search for a sequential order tries each.
///   The table picks the entry that loses least (smallest `reset_after`) from states read
///   under its shard lock, while lock-free checks of resident keys may still change them,
///   so the least-loss choice is not a linearizable property; the std eviction tests check
///   it sequentially. What the models check is the rest: at most `capacity` entries, an
///   evicted key restarts fresh, and nothing is admitted that no order of checks and
///   evictions would admit.
///
/// A deny, a probe or a peek of a new key inserts nothing.
///
/// This matches the table exactly for one-shard tables whose capacity the modelled keys
/// reach only through inserts (the idle sweep runs only when the shard is at quota, which
/// is when this oracle evicts too).
#[derive(Clone, Debug)]
pub struct KeyedOracle<A> {
    algorithm: A,
    capacity: usize,
    when_full: WhenFull,
    entries: Vec<(u64, u64)>,
    keys: Vec<u64>,
    probes: Vec<u64>,
}

/// Where a new key's state goes.
enum Place {
    /// A free place, or the place of an idle entry (index).
    Free(Option<usize>),
    /// No free or idle place: `Evict` chooses a victim, `Refuse` refuses.
    Full,
}

impl<A: Algorithm + Clone + Send + Sync + 'static> KeyedOracle<A> {
    /// An empty `WhenFull::Refuse` table of `capacity`, read back at the end by peeks of
    /// `keys` at `probes`.
    pub fn new(algorithm: A, capacity: usize, keys: Vec<u64>, probes: Vec<u64>) -> KeyedOracle<A> {
        KeyedOracle {
            algorithm,
            capacity,
            when_full: WhenFull::Refuse,
            entries: Vec::new(),
            keys,
            probes,
        }
    }

    /// The same table with policy `when_full`.
    pub fn when_full(mut self, when_full: WhenFull) -> KeyedOracle<A> {
        self.when_full = when_full;
        self
    }

    fn peek(&self, key: u64, now: Nanos, cost: u32) -> Answer {
        let state = self
            .entries
            .iter()
            .find(|&&(k, _)| k == key)
            .map_or(0, |&(_, state)| state);
        Ok(self.algorithm.peek(state, now, cost)?.decision)
    }

    /// Performs `op` unless it is a check of a new key (`None`): a peek, or a check of a
    /// resident key on its state.
    fn apply_resident(&mut self, op: Op) -> Option<Answer> {
        if !op.commits() {
            return Some(self.peek(op.key, op.now(), op.cost()));
        }
        let entry = self.entries.iter_mut().find(|(k, _)| *k == op.key)?;
        Some(match self.algorithm.decide(entry.1, op.now(), op.cost()) {
            Ok(outcome) => {
                if let Some(next) = outcome.next {
                    entry.1 = next;
                }
                Ok(outcome.decision)
            }
            Err(e) => Err(e.into()),
        })
    }

    fn place(&self, now: Nanos) -> Place {
        if self.entries.len() < self.capacity {
            return Place::Free(None);
        }
        match self
            .entries
            .iter()
            .position(|&(_, state)| self.algorithm.is_idle(state, now))
        {
            Some(idle) => Place::Free(Some(idle)),
            None => Place::Full,
        }
    }

    /// Puts a new key's first state at `place` (an index, or a new entry).
    fn insert(&mut self, place: Option<usize>, key: u64, state: u64) {
        match place {
            Some(idx) => self.entries[idx] = (key, state),
            None => self.entries.push((key, state)),
        }
    }
}

impl<A: Algorithm + Clone + Send + Sync + 'static> Oracle for KeyedOracle<A> {
    /// The deterministic step; under `Evict` with no free or idle place it evicts the first
    /// entry (use [`successors`](Oracle::successors) for every choice).
    fn apply(&mut self, op: Op) -> Answer {
        let mut successors = self.successors(op);
        let (after, answer) = successors.swap_remove(0);
        *self = after;
        answer
    }

    fn successors(&self, op: Op) -> Vec<(Self, Answer)> {
        let mut after = self.clone();
        if let Some(answer) = after.apply_resident(op) {
            return vec![(after, answer)];
        }
        // A new key whose fresh decision writes a state.
        let outcome = match self.algorithm.decide(0, op.now(), op.cost()) {
            Ok(outcome) => outcome,
            Err(e) => return vec![(after, Err(e.into()))],
        };
        let Some(next) = outcome.next else {
            return vec![(after, Ok(outcome.decision))];
        };
        match (self.place(op.now()), self.when_full) {
            (Place::Free(place), _) => {
                after.insert(place, op.key, next);
                vec![(after, Ok(outcome.decision))]
            }
            (Place::Full, WhenFull::Refuse) => vec![(after, Err(Refusal::Full))],
            (Place::Full, WhenFull::Evict) => (0..self.entries.len())
                .map(|victim| {
                    let mut after = self.clone();
                    after.insert(Some(victim), op.key, next);
                    (after, Ok(outcome.decision))
                })
                .collect(),
            // `WhenFull` may grow (it is `#[non_exhaustive]`): a policy this oracle does
            // not model fails the model loudly rather than passing it unchecked.
            (Place::Full, policy) => panic!("the keyed oracle does not model {policy:?}"),
        }
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
