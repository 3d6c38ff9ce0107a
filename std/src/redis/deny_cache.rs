//! [`DenyCache`]: remembers Redis' denies until their retry time, so repeated checks of a
//! key that cannot pass are answered locally, without a round trip.
//!
//! Exact: a deny's `retry_after` is the earliest time the same request could pass if
//! nothing else arrives, and other clients can only consume more (every algorithm's outcome
//! for a fixed state only improves with time), so until then Redis would deny too. The
//! deadline is measured from when the request was *sent* (the script ran later), so the
//! cache can only stop answering early, never late. Entries are per key and cost: at most
//! the configured number of keys, and [`COSTS_PER_KEY`] costs per key.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Mutex;

use crate::{Decision, Nanos};

const SHARDS: usize = 16;

/// The most denies remembered per key (one per distinct cost): memory stays at most
/// `capacity × COSTS_PER_KEY` entries whatever costs a client sends.
pub(crate) const COSTS_PER_KEY: usize = 4;

/// One cached deny.
#[derive(Copy, Clone, Debug)]
struct Entry {
    cost: u32,
    /// Local time the same request can pass (exclusive end of the cached deny).
    deadline: u64,
    /// Local time the key is fresh again, as Redis reported it.
    reset_at: u64,
    decision: Decision,
    tier: Option<usize>,
}

/// One shard: key → its cached denies (one per cost).
type Shard = HashMap<String, Vec<Entry>>;

/// Sharded, bounded map from key to its cached denies.
#[derive(Debug)]
pub(crate) struct DenyCache {
    shards: Box<[Mutex<Shard>]>,
    per_shard: usize,
    hasher: RandomState,
}

impl DenyCache {
    /// A cache of about `capacity` keys (0: disabled).
    pub(crate) fn new(capacity: usize) -> DenyCache {
        DenyCache {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            per_shard: capacity.div_ceil(SHARDS),
            hasher: RandomState::new(),
        }
    }

    fn shard(&self, key: &str) -> std::sync::MutexGuard<'_, Shard> {
        let i = (self.hasher.hash_one(key) % SHARDS as u64) as usize;
        // Poisoning only means a panic elsewhere mid-update of plain data; the map is
        // still a valid map.
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cached deny for `key` and `cost` at local time `now`, with its durations
    /// measured from `now`; expired entries are dropped.
    pub(crate) fn lookup(
        &self,
        key: &str,
        cost: u32,
        now: u64,
    ) -> Option<(Decision, Option<usize>)> {
        if self.per_shard == 0 {
            return None;
        }
        let mut shard = self.shard(key);
        let entries = shard.get_mut(key)?;
        let found = entries.iter().find(|e| e.cost == cost).copied();
        entries.retain(|e| e.deadline > now);
        if entries.is_empty() {
            shard.remove(key);
        }
        let entry = found.filter(|e| e.deadline > now)?;
        let mut decision = entry.decision;
        decision.retry_after = Nanos::new(entry.deadline - now);
        decision.reset_after = Nanos::new(entry.reset_at.saturating_sub(now));
        Some((decision, entry.tier))
    }

    /// Remembers a deny Redis gave to a request of `cost` sent at local time `sent`.
    pub(crate) fn insert(
        &self,
        key: &str,
        cost: u32,
        sent: u64,
        decision: Decision,
        tier: Option<usize>,
    ) {
        if self.per_shard == 0 || decision.allowed {
            return;
        }
        let entry = Entry {
            cost,
            deadline: sent.saturating_add(decision.retry_after.as_u64()),
            reset_at: sent.saturating_add(decision.reset_after.as_u64()),
            decision,
            tier,
        };
        let mut shard = self.shard(key);
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
        if shard.len() >= self.per_shard {
            shard.retain(|_, entries| entries.iter().any(|e| e.deadline > sent));
            if shard.len() >= self.per_shard {
                // Full of live denies: skip caching (a miss only costs a round trip).
                return;
            }
        }
        shard.insert(key.to_owned(), vec![entry]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One key denied at many distinct costs keeps at most `COSTS_PER_KEY` entries: the
    /// latest deadlines.
    #[test]
    fn entries_per_key_are_bounded() {
        let cache = DenyCache::new(16);
        for cost in 1..=10u32 {
            let retry = Nanos::new(1_000 * u64::from(cost));
            let decision = Decision::deny(10, 0, retry, retry);
            cache.insert("k", cost, 0, decision, None);
        }
        let shard = cache.shard("k");
        let entries = shard.get("k").unwrap();
        assert_eq!(entries.len(), COSTS_PER_KEY);
        let mut costs: Vec<u32> = entries.iter().map(|e| e.cost).collect();
        costs.sort_unstable();
        assert_eq!(costs, [7, 8, 9, 10]);
        drop(shard);
        assert!(cache.lookup("k", 10, 1).is_some());
        assert!(cache.lookup("k", 1, 1).is_none());
    }
}
