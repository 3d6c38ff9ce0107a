//! [`DenyCache`]: remembers Redis' denies until their retry time, so repeated checks of a
//! key that cannot pass are answered locally, without a round trip.
//!
//! Exact: a deny's `retry_after` is the earliest time the same request could pass if
//! nothing else arrives, and other clients can only consume more (every algorithm's outcome
//! for a fixed state only improves with time), so until then Redis would deny too. The
//! deadline is measured from when the request was *sent* (the script ran later), so the
//! cache can only stop answering early, never late. Entries are per key and cost: at most
//! the configured number of keys, and [`COSTS_PER_KEY`] costs per key.
//!
//! The cache is generic over what it remembers per deny ([`RedisStore`] keeps every tier's
//! decision of a plan); the remembered durations are shifted by the time elapsed since the
//! request was sent ([`shift`]).
//!
//! [`RedisStore`]: super::RedisStore

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Mutex;

use tollgate::{Decision, Nanos};

const SHARDS: usize = 16;

/// The most denies remembered per key (one per distinct cost): memory stays at most
/// `capacity × COSTS_PER_KEY` entries whatever costs a client sends.
pub(crate) const COSTS_PER_KEY: usize = 4;

/// One cached deny.
#[derive(Clone, Debug)]
struct Entry<V> {
    cost: u32,
    /// Local time the request was sent (durations in `value` are measured from it).
    sent: u64,
    /// Local time the same request can pass (exclusive end of the cached deny).
    deadline: u64,
    value: V,
}

/// One shard: key → its cached denies (one per cost).
type Shard<V> = HashMap<String, Vec<Entry<V>>>;

/// Sharded, bounded map from key to its cached denies.
///
/// The capacity is split exactly over the shards (the first `capacity % 16` shards hold
/// one key more), so the cache never holds more than `capacity` keys.
#[derive(Debug)]
pub(crate) struct DenyCache<V> {
    shards: Box<[Mutex<Shard<V>>]>,
    capacity: usize,
    hasher: RandomState,
}

/// `decision`, answered at local time `now` by Redis for a request sent at `sent`, as of
/// `now`: its durations (retry of a deny, reset, delay) shortened by the time elapsed.
/// `allowed`, `limit` and `remaining` are Redis' as reported.
pub(crate) fn shift(mut decision: Decision, sent: u64, now: u64) -> Decision {
    let at = |after: Nanos| Nanos::new(sent.saturating_add(after.as_u64()).saturating_sub(now));
    if !decision.allowed {
        decision.retry_after = at(decision.retry_after);
    }
    decision.reset_after = at(decision.reset_after);
    if decision.delay != Nanos::ZERO {
        decision.delay = at(decision.delay);
    }
    decision
}

impl<V> DenyCache<V> {
    /// A cache of at most `capacity` keys (0: disabled).
    pub(crate) fn new(capacity: usize) -> DenyCache<V> {
        DenyCache {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            capacity,
            hasher: RandomState::new(),
        }
    }

    /// Whether the cache may hold anything (capacity above 0).
    pub(crate) fn enabled(&self) -> bool {
        self.capacity > 0
    }

    /// The most keys shard `i` holds: the capacity split exactly over the shards.
    fn shard_limit(&self, i: usize) -> usize {
        self.capacity / SHARDS + usize::from(i < self.capacity % SHARDS)
    }

    fn shard(&self, key: &str) -> (usize, std::sync::MutexGuard<'_, Shard<V>>) {
        // Truncation: the remainder is below SHARDS, a usize.
        #[allow(clippy::cast_possible_truncation)]
        let i = (self.hasher.hash_one(key) % SHARDS as u64) as usize;
        // Poisoning only means a panic elsewhere mid-update of plain data; the map is
        // still a valid map.
        (i, self.shards[i].lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Reads the live deny cached for `key` and `cost` at local time `now` with `read`
    /// (given the value and the local time its request was sent), under the shard's lock
    /// (no copy of the value). If `read` answers `None` the entry is stale for the caller
    /// and is dropped. Expired entries of `key` are dropped.
    pub(crate) fn find<R>(
        &self,
        key: &str,
        cost: u32,
        now: u64,
        read: impl FnOnce(&V, u64) -> Option<R>,
    ) -> Option<R> {
        if !self.enabled() {
            return None;
        }
        let (_, mut shard) = self.shard(key);
        let entries = shard.get_mut(key)?;
        let found = entries
            .iter()
            .position(|e| e.cost == cost && e.deadline > now);
        let answer = found.and_then(|i| read(&entries[i].value, entries[i].sent));
        if let (Some(i), None) = (found, &answer) {
            entries.swap_remove(i);
        }
        entries.retain(|e| e.deadline > now);
        if entries.is_empty() {
            shard.remove(key);
        }
        answer
    }

    /// Remembers a deny of `cost` for `key`, sent at local time `sent` and standing until
    /// local time `deadline` (exclusive), replacing any for the same cost. Nothing if
    /// the cache is disabled, the deadline is not after `sent`, the shard is full of
    /// live denies (a miss only costs a round trip), or `still` (asked under the shard's
    /// lock, so that a [`forget`](Self::forget) cannot pass between it and the insertion)
    /// answers `false`.
    pub(crate) fn put(
        &self,
        key: &str,
        cost: u32,
        sent: u64,
        deadline: u64,
        value: V,
        still: impl FnOnce() -> bool,
    ) {
        if !self.enabled() || deadline <= sent {
            return;
        }
        let entry = Entry {
            cost,
            sent,
            deadline,
            value,
        };
        let (i, mut shard) = self.shard(key);
        if !still() {
            return;
        }
        if let Some(entries) = shard.get_mut(key) {
            entries.retain(|e| e.cost != cost && e.deadline > sent);
            if entries.len() >= COSTS_PER_KEY {
                // Bounded per key: the entry ending first makes room.
                if let Some(first) = (0..entries.len()).min_by_key(|&i| entries[i].deadline) {
                    entries.swap_remove(first);
                }
            }
            entries.push(entry);
            return;
        }
        let limit = self.shard_limit(i);
        if shard.len() >= limit {
            shard.retain(|_, entries| entries.iter().any(|e| e.deadline > sent));
            if shard.len() >= limit {
                // Full of live denies: skip caching (a miss only costs a round trip).
                return;
            }
        }
        shard.insert(key.to_owned(), vec![entry]);
    }

    /// Drops every entry whose key `matches`, shard by shard under each shard's lock: how
    /// many denies it dropped.
    pub(crate) fn forget(&self, mut matches: impl FnMut(&str) -> bool) -> usize {
        let mut dropped = 0;
        for shard in self.shards.iter() {
            // Poisoning: see `shard`.
            let mut shard = shard.lock().unwrap_or_else(|e| e.into_inner());
            shard.retain(|key, entries| {
                let keep = !matches(key);
                if !keep {
                    dropped += entries.len();
                }
                keep
            });
        }
        dropped
    }

    /// Keys held (live or not yet dropped), over all shards.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One key denied at many distinct costs keeps at most `COSTS_PER_KEY` entries: the
    /// latest deadlines.
    #[test]
    fn entries_per_key_are_bounded() {
        let cache: DenyCache<u32> = DenyCache::new(16);
        for cost in 1..=10u32 {
            cache.put("k", cost, 0, 1_000 * u64::from(cost), cost, || true);
        }
        let (_, shard) = cache.shard("k");
        let entries = shard.get("k").unwrap();
        assert_eq!(entries.len(), COSTS_PER_KEY);
        let mut costs: Vec<u32> = entries.iter().map(|e| e.cost).collect();
        costs.sort_unstable();
        assert_eq!(costs, [7, 8, 9, 10]);
        drop(shard);
        assert_eq!(cache.find("k", 10, 1, |v, _| Some(*v)), Some(10));
        assert_eq!(cache.find("k", 1, 1, |v, _| Some(*v)), None);
    }

    /// Many distinct keys never hold more than the capacity, also when it is not a
    /// multiple of the shard count.
    #[test]
    fn keys_are_bounded_by_the_capacity_exactly() {
        for capacity in [1, 5, 16, 40] {
            let cache: DenyCache<()> = DenyCache::new(capacity);
            for k in 0..1_000 {
                cache.put(&k.to_string(), 1, 0, 1_000, (), || true);
            }
            assert!(cache.len() <= capacity, "{} > {capacity}", cache.len());
        }
        let disabled: DenyCache<()> = DenyCache::new(0);
        disabled.put("k", 1, 0, 1_000, (), || true);
        assert_eq!(disabled.len(), 0);
        assert!(disabled.find("k", 1, 0, |_, _| Some(())).is_none());
    }

    /// A reader that finds its entry stale drops it; durations shift by the time elapsed.
    #[test]
    fn stale_entries_are_dropped_and_durations_shift() {
        let cache: DenyCache<u64> = DenyCache::new(16);
        cache.put("k", 1, 100, 1_100, 7, || true);
        assert_eq!(
            cache.find("k", 1, 600, |v, sent| Some((*v, sent))),
            Some((7, 100))
        );
        assert_eq!(cache.find("k", 1, 600, |_, _| None::<()>), None);
        assert_eq!(cache.find("k", 1, 600, |v, _| Some(*v)), None);
        assert_eq!(cache.len(), 0);
        let d = Decision::deny(10, 0, Nanos::new(2_000), Nanos::new(1_000));
        let s = shift(d, 100, 600);
        assert_eq!(
            (s.retry_after, s.reset_after),
            (Nanos::new(500), Nanos::new(1_500))
        );
        let a = shift(Decision::allow(10, 3, Nanos::new(300)), 100, 600);
        assert_eq!((a.retry_after, a.reset_after), (Nanos::ZERO, Nanos::ZERO));
    }

    /// Forgetting drops exactly the matching keys' denies, and a put whose `still` says no
    /// stores nothing.
    #[test]
    fn forget_drops_the_matching_keys_and_a_put_can_be_refused() {
        let cache: DenyCache<u32> = DenyCache::new(64);
        for k in ["a1", "a2", "b1"] {
            cache.put(k, 1, 0, 1_000, 1, || true);
            cache.put(k, 2, 0, 1_000, 2, || true);
        }
        assert_eq!(cache.forget(|k| k.starts_with('a')), 4);
        assert_eq!(cache.find("a1", 1, 1, |v, _| Some(*v)), None);
        assert_eq!(cache.find("b1", 2, 1, |v, _| Some(*v)), Some(2));
        cache.put("c", 1, 0, 1_000, 3, || false);
        assert_eq!(cache.find("c", 1, 1, |v, _| Some(*v)), None);
        assert_eq!(cache.len(), 1);
    }
}
