//! [`KeyedCells`]: the policy layer's bounded per-key state table, behind the small
//! [`KeyedStore`] trait so another table (the std layer's `KeyedLimiter`) can be plugged in.
//!
//! Sharded `RwLock<HashMap>`: a check of an existing key takes one shard's read lock (shared,
//! never exclusive) and then runs the algorithm's compare-and-swap on the key's cell, so
//! checks of the same or different keys never wait for each other. Only a first-seen key
//! (insert), an eviction or a reload's conversion takes a shard's write lock.
//!
//! Memory is bounded: each shard holds at most `⌈capacity / shards⌉` keys. A full shard
//! first drops every entry whose state equals a fresh key's (lossless), and only if none is
//! idle evicts the sixteenth of the shard that loses least (the entries closest to idle,
//! e.g. the smallest time to a full reset), so the scan is amortized over the next inserts.
//! An evicted busy key starts fresh when it returns: size `capacity` above the number of
//! keys active within your longest window.
//!
//! Per key and tier an entry costs 40 bytes in the map (the key inline when it has at most
//! 22 bytes, else a pointer to it on the heap; a 16-byte cell) and a control byte; a
//! sliding-window-log tier adds its boxed deque of up to `limit` timestamps.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::PoisonError;

use crate::sync::RwLock;

use crossbeam_utils::CachePadded;

use super::small_key::SmallKey;
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

/// The operations the policy layer needs from a keyed table. `X` is a per-table context
/// (the tier's algorithm) that changes only under exclusive access.
pub(crate) trait KeyedStore<V, X> {
    /// Runs `f` on `key`'s value, inserting a fresh one first if absent.
    fn with<R>(&self, key: &str, now: Nanos, f: impl FnOnce(&X, &V) -> R) -> R;
    /// Runs `f` on `key`'s value if present, without inserting.
    fn with_existing<R>(&self, key: &str, f: impl FnOnce(&X, Option<&V>) -> R) -> R;
    /// Replaces the context everywhere, letting `convert` rewrite each value with exclusive
    /// access (`old context, new context, value`).
    fn reconfigure(&self, ctx: X, convert: impl FnMut(&X, &X, &mut V));
    /// Keys currently held.
    fn len(&self) -> usize;
}

#[derive(Debug)]
struct Shard<V, X> {
    ctx: X,
    map: HashMap<SmallKey, V, foldhash::fast::RandomState>,
}

/// One shard, padded to its own cache lines.
type ShardLock<V, X> = CachePadded<RwLock<Shard<V, X>>>;

/// Sharded, bounded table from string keys to values `V` (see the module docs).
#[derive(Debug)]
pub(crate) struct KeyedCells<V, X> {
    shards: Box<[ShardLock<V, X>]>,
    shard_capacity: usize,
    hasher: ShardHasher,
}

/// Picks a key's shard: randomly seeded, except under loom, whose models must replay the
/// same shard for a key in every execution.
#[cfg(not(tollgate_loom))]
type ShardHasher = foldhash::fast::RandomState;
#[cfg(tollgate_loom)]
type ShardHasher = foldhash::fast::FixedState;

const SHARDS: usize = 16;

impl<V: KeyedValue<X>, X: Clone> KeyedCells<V, X> {
    /// A table for at most `capacity` keys (rounded up to a multiple of the shard count).
    pub(crate) fn new(ctx: X, capacity: usize) -> KeyedCells<V, X> {
        let shards = (0..SHARDS)
            .map(|_| {
                CachePadded::new(RwLock::new(Shard {
                    ctx: ctx.clone(),
                    map: HashMap::default(),
                }))
            })
            .collect();
        KeyedCells {
            shards,
            shard_capacity: capacity.div_ceil(SHARDS).max(1),
            hasher: ShardHasher::default(),
        }
    }

    #[inline]
    fn shard(&self, key: &str) -> &RwLock<Shard<V, X>> {
        let hash = self.hasher.hash_one(key);
        // The top bits: the map itself uses the low ones.
        &self.shards[(hash >> 60) as usize % SHARDS]
    }

    /// The most keys this table holds.
    pub(crate) fn capacity(&self) -> usize {
        self.shard_capacity * SHARDS
    }
}

impl<V: KeyedValue<X>, X: Clone> KeyedStore<V, X> for KeyedCells<V, X> {
    #[inline]
    fn with<R>(&self, key: &str, now: Nanos, f: impl FnOnce(&X, &V) -> R) -> R {
        let shard = self.shard(key);
        {
            // A poisoned lock only means another thread panicked while holding it; the map
            // and the atomic cells are still consistent, so keep serving.
            let guard = shard.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(value) = guard.map.get(key) {
                return f(&guard.ctx, value);
            }
        }
        let mut guard = shard.write().unwrap_or_else(PoisonError::into_inner);
        let shard = &mut *guard;
        if !shard.map.contains_key(key) && shard.map.len() >= self.shard_capacity {
            let ctx = &shard.ctx;
            shard.map.retain(|_, v| !v.is_idle(ctx, now));
            if shard.map.len() >= self.shard_capacity {
                // Nothing idle: evict the sixteenth that loses least (closest to idle), so
                // the next inserts need no scan.
                let evict = (self.shard_capacity / 16).max(1);
                let mut scored: Vec<(u64, &SmallKey)> = shard
                    .map
                    .iter()
                    .map(|(k, v)| (v.loss(ctx, now), k))
                    .collect();
                let evict = evict.min(scored.len());
                scored.select_nth_unstable_by_key(evict.saturating_sub(1), |(loss, _)| *loss);
                let victims: Vec<SmallKey> =
                    scored[..evict].iter().map(|(_, k)| (*k).clone()).collect();
                for victim in victims {
                    shard.map.remove(&victim);
                }
            }
        }
        let ctx = &shard.ctx;
        let value = shard
            .map
            .entry(SmallKey::new(key))
            .or_insert_with(|| V::fresh(ctx));
        f(ctx, value)
    }

    #[inline]
    fn with_existing<R>(&self, key: &str, f: impl FnOnce(&X, Option<&V>) -> R) -> R {
        let guard = self
            .shard(key)
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        f(&guard.ctx, guard.map.get(key))
    }

    fn reconfigure(&self, ctx: X, mut convert: impl FnMut(&X, &X, &mut V)) {
        for shard in self.shards.iter() {
            let mut guard = shard.write().unwrap_or_else(PoisonError::into_inner);
            let shard = &mut *guard;
            for value in shard.map.values_mut() {
                convert(&shard.ctx, &ctx, value);
            }
            shard.ctx = ctx.clone();
        }
    }

    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.read().unwrap_or_else(PoisonError::into_inner).map.len())
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

    #[test]
    fn bounded_and_idle_first() {
        let cells: KeyedCells<Counter, ()> = KeyedCells::new((), 64);
        // A busy key.
        // Relaxed: test counters, nothing published.
        cells.with("busy", Nanos::ZERO, |_, c| {
            c.0.fetch_add(1, Ordering::Relaxed)
        });
        for i in 0..10_000 {
            cells.with(&format!("k{i}"), Nanos::ZERO, |_, _| ());
            assert!(cells.len() <= cells.capacity());
        }
        // Idle keys were always available to evict first, so the busy key survived.
        assert_eq!(
            cells.with_existing("busy", |_, c| c.map(|c| c.0.load(Ordering::Relaxed))),
            Some(1)
        );
    }
}
