//! [`KeyedSubject`]: `tollgate`'s `KeyedLimiter` (the keyed table) as a model subject.

use std::collections::hash_map::DefaultHasher;
use std::hash::BuildHasherDefault;

use tollgate::{KeyedError, KeyedLimiter, MonotonicClock, WhenFull};
use tollgate_core::{Algorithm, Nanos};

use crate::{Answer, FinalState, Op, Refusal, Subject};

/// A deterministic hasher: loom replays each execution and needs every one to touch the
/// same slots, so the limiter's seeds must not be random.
pub type FixedHasher = BuildHasherDefault<DefaultHasher>;

/// The real keyed table: a [`KeyedLimiter`] over `u64` keys, built with a fixed hasher, read
/// back at the end by peeks of `keys` at `probes`.
pub struct KeyedSubject<A> {
    limiter: KeyedLimiter<u64, A, MonotonicClock, FixedHasher>,
    keys: Vec<u64>,
    probes: Vec<u64>,
}

impl<A: Algorithm> KeyedSubject<A> {
    /// A fresh limiter of `capacity` keys, one shard, with policy `when_full`.
    pub fn new(
        algorithm: A,
        capacity: usize,
        when_full: WhenFull,
        keys: Vec<u64>,
        probes: Vec<u64>,
    ) -> KeyedSubject<A> {
        let limiter = KeyedLimiter::builder(algorithm)
            .capacity(capacity)
            .shards(1)
            .when_full(when_full)
            .hasher(FixedHasher::default())
            .build()
            .expect("a valid model table");
        KeyedSubject {
            limiter,
            keys,
            probes,
        }
    }
}

impl<A: Algorithm + Send + Sync + 'static> Subject for KeyedSubject<A> {
    fn apply(&self, op: Op) -> Answer {
        if op.commits() {
            self.limiter
                .check_n_at(&op.key, op.now(), op.cost())
                .map_err(|e| match e {
                    KeyedError::Full => Refusal::Full,
                    KeyedError::InsufficientCapacity(e) => Refusal::Capacity(e),
                    other => unreachable!("a keyed error this model does not know: {other}"),
                })
        } else {
            Ok(self.limiter.peek_n_at(&op.key, op.now(), op.cost())?)
        }
    }

    fn final_state(&self) -> FinalState {
        let probes = self
            .keys
            .iter()
            .flat_map(|&key| self.probes.iter().map(move |&t| (key, t)))
            .map(|(key, t)| Ok(self.limiter.peek_n_at(&key, Nanos::new(t), 1)?))
            .collect();
        FinalState::Table {
            entries: self.limiter.len(),
            probes,
        }
    }
}
