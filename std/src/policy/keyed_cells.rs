//! [`KeyedCells`]: a bounded table from key fingerprints to multi-word values, for the
//! policy's state that does not fit one word: sliding-window-log tiers (a deque of
//! timestamps per key). Single-word tiers and the adaptive penalty's words live in the
//! lock-free keyed table instead (see [`TierStore`](super::TierStore)).
//!
//! Sharded `RwLock<HashMap>`: a check of an existing key takes one shard's read lock (shared,
//! never exclusive) and then works on the key's value (its own atomics or mutex), so checks
//! of the same or different keys never wait for each other's shard. Only a first-seen key
//! (insert), an eviction, a removal or a reload's carry-over takes a shard's write lock.
//!
//! Memory is bounded: each shard holds at most `⌈capacity / shards⌉` keys. A full shard
//! first drops every entry whose state equals a fresh key's (lossless), and only if none is
//! idle evicts the sixteenth of the shard that loses least (the entries closest to idle,
//! e.g. the smallest time to a full reset), so the scan is amortized over the next inserts.
//! An evicted busy key starts fresh when it returns: size `capacity` above the number of
//! keys active within your longest window.
//!
//! Keys are 64-bit fingerprints (see [`fingerprint`](super::tier_store::fingerprint)); an entry costs
//! the fingerprint, the value and a control byte, plus whatever the value owns.

use std::collections::HashMap;
use std::sync::PoisonError;

use crate::keyed::Upsert;
use crate::sync::RwLock;

use crossbeam_utils::CachePadded;

use tollgate_core::Nanos;

/// A value kept per key: how to make a fresh one and whether one is idle.
pub(crate) trait KeyedValue<X>: Sized {
    /// The state of a key never seen, under context `ctx`.
    fn fresh(ctx: &X) -> Self;
    /// Whether forgetting this value at `now` loses nothing.
    fn is_idle(&self, ctx: &X, now: Nanos) -> bool;
    /// How much forgetting it at `now` would lose (e.g. time until it is idle): under
    /// pressure the lowest scores are evicted first.
    fn loss(&self, ctx: &X, now: Nanos) -> u64;
}

/// Fingerprints are already uniformly distributed: the map hashes them again only cheaply.
type MapHasher = foldhash::fast::FixedState;

/// One shard, padded to its own cache lines.
type ShardLock<V> = CachePadded<RwLock<HashMap<u64, V, MapHasher>>>;

/// Sharded, bounded table from fingerprints to values `V` under a fixed context `X` (see
/// the module docs).
#[derive(Debug)]
pub(crate) struct KeyedCells<V, X> {
    ctx: X,
    shards: Box<[ShardLock<V>]>,
    shard_capacity: usize,
}

const SHARDS: usize = 16;

impl<V: KeyedValue<X>, X> KeyedCells<V, X> {
    /// A table for at most `capacity` keys (rounded up to a multiple of the shard count).
    pub(crate) fn new(ctx: X, capacity: usize) -> KeyedCells<V, X> {
        let shards = (0..SHARDS)
            .map(|_| CachePadded::new(RwLock::new(HashMap::default())))
            .collect();
        KeyedCells {
            ctx,
            shards,
            shard_capacity: capacity.div_ceil(SHARDS).max(1),
        }
    }

    #[inline]
    fn shard(&self, h: u64) -> &RwLock<HashMap<u64, V, MapHasher>> {
        // The top bits: the map itself uses the low ones.
        &self.shards[(h >> 60) as usize % SHARDS]
    }

    /// The most keys this table holds.
    pub(crate) fn capacity(&self) -> usize {
        self.shard_capacity * SHARDS
    }

    /// Runs `f` on `h`'s value; if absent and `admit()` allows, inserts `seed()` (or a fresh
    /// value) first, evicting per the module docs when the shard is full.
    #[inline]
    pub(crate) fn with<R>(
        &self,
        h: u64,
        now: Nanos,
        admit: impl FnOnce() -> bool,
        seed: impl FnOnce() -> Option<V>,
        f: impl FnOnce(&X, &V) -> R,
    ) -> Upsert<R> {
        let shard = self.shard(h);
        {
            // A poisoned lock only means another thread panicked while holding it; the map
            // and the values' own synchronisation are still consistent, so keep serving.
            let guard = shard.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(value) = guard.get(&h) {
                return Upsert::Done(f(&self.ctx, value));
            }
        }
        let mut map = shard.write().unwrap_or_else(PoisonError::into_inner);
        if !map.contains_key(&h) {
            if !admit() {
                return Upsert::Closed;
            }
            if map.len() >= self.shard_capacity {
                self.make_room(&mut map, now);
            }
            let value = seed().unwrap_or_else(|| V::fresh(&self.ctx));
            map.insert(h, value);
        }
        match map.get(&h) {
            Some(value) => Upsert::Done(f(&self.ctx, value)),
            None => Upsert::Full,
        }
    }

    /// Drops every idle entry of a full shard, or if none is idle the sixteenth that loses
    /// least, so the next inserts need no scan.
    fn make_room(&self, map: &mut HashMap<u64, V, MapHasher>, now: Nanos) {
        let ctx = &self.ctx;
        map.retain(|_, v| !v.is_idle(ctx, now));
        if map.len() < self.shard_capacity {
            return;
        }
        let evict = (self.shard_capacity / 16).clamp(1, map.len());
        let mut scored: Vec<(u64, u64)> = map.iter().map(|(k, v)| (v.loss(ctx, now), *k)).collect();
        scored.select_nth_unstable_by_key(evict - 1, |(loss, _)| *loss);
        for (_, victim) in &scored[..evict] {
            map.remove(victim);
        }
    }

    /// Runs `f` on `h`'s value if present, without inserting.
    #[inline]
    pub(crate) fn with_existing<R>(&self, h: u64, f: impl FnOnce(&X, Option<&V>) -> R) -> R {
        let guard = self.shard(h).read().unwrap_or_else(PoisonError::into_inner);
        f(&self.ctx, guard.get(&h))
    }

    /// Removes `h`'s value and returns it: whoever held a read lock on it is done with it.
    pub(crate) fn extract(&self, h: u64) -> Option<V> {
        self.shard(h)
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&h)
    }

    /// The keys whose value is not idle at `now`.
    pub(crate) fn live_keys(&self, now: Nanos) -> Vec<u64> {
        self.shards
            .iter()
            .flat_map(|shard| {
                let map = shard.read().unwrap_or_else(PoisonError::into_inner);
                map.iter()
                    .filter(|(_, value)| !value.is_idle(&self.ctx, now))
                    .map(|(&h, _)| h)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Keys currently held.
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.read().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    struct Counter(AtomicU64);
    impl KeyedValue<()> for Counter {
        fn fresh(_: &()) -> Counter {
            Counter(AtomicU64::new(0))
        }
        fn is_idle(&self, _: &(), _: Nanos) -> bool {
            // Relaxed: a test counter read under the shard's write lock.
            self.0.load(Ordering::Relaxed) == 0
        }
        fn loss(&self, _: &(), _: Nanos) -> u64 {
            // Relaxed: see `is_idle`.
            self.0.load(Ordering::Relaxed)
        }
    }

    fn touch(cells: &KeyedCells<Counter, ()>, h: u64, add: u64) -> Upsert<u64> {
        // Relaxed: test counters, nothing published.
        cells.with(
            h,
            Nanos::ZERO,
            || true,
            || None,
            |_, c| c.0.fetch_add(add, Ordering::Relaxed),
        )
    }

    #[test]
    fn bounded_and_idle_first() {
        let cells: KeyedCells<Counter, ()> = KeyedCells::new((), 64);
        let busy = u64::MAX / 3;
        assert_eq!(touch(&cells, busy, 1), Upsert::Done(0));
        // (Fewer under miri, which interprets every hash-map probe: still 6× the capacity.)
        let inserts = if cfg!(miri) { 400 } else { 10_000u64 };
        for i in 0..inserts {
            touch(&cells, i.wrapping_mul(0x9e37_79b9_7f4a_7c15), 0);
            assert!(cells.len() <= cells.capacity());
        }
        // Idle keys were always available to evict first, so the busy key survived.
        assert_eq!(
            cells.with_existing(busy, |_, c| c.map(|c| c.0.load(Ordering::Relaxed))),
            Some(1)
        );
    }

    #[test]
    fn closed_gate_inserts_nothing_and_extract_takes_the_value() {
        let cells: KeyedCells<Counter, ()> = KeyedCells::new((), 64);
        let closed = cells.with(7, Nanos::ZERO, || false, || None, |_, _| ());
        assert_eq!(closed, Upsert::Closed);
        assert_eq!(cells.len(), 0);
        let seeded = cells.with(
            7,
            Nanos::ZERO,
            || true,
            || Some(Counter(AtomicU64::new(5))),
            |_, c| c.0.load(Ordering::Relaxed),
        );
        assert_eq!(seeded, Upsert::Done(5));
        cells.with(8, Nanos::ZERO, || true, || None, |_, _| ());
        // 8 holds a fresh (idle) value: only 7 is live.
        assert_eq!(cells.live_keys(Nanos::ZERO), [7]);
        assert_eq!(cells.extract(7).map(|c| c.0.into_inner()), Some(5));
        assert_eq!(cells.len(), 1);
        assert!(cells.live_keys(Nanos::ZERO).is_empty());
    }
}
