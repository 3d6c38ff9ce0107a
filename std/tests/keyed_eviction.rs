//! Eviction policy: idle entries go first (losslessly), then the entry that loses least;
//! `WhenFull::Refuse` fails closed with a typed error. All time is injected.

use std::collections::hash_map::DefaultHasher;
use std::hash::BuildHasherDefault;

use tollgate::{Gcra, KeyedError, KeyedLimiter, Nanos, WhenFull};

fn secs(s: u64) -> Nanos {
    Nanos::from_secs(s)
}

/// One permit per second, bursts of ten: `reset_after` = permits in use × 1 s.
fn gcra() -> Gcra {
    Gcra::per_second(1).burst(10).build().unwrap()
}

fn small(capacity: usize, when_full: WhenFull) -> KeyedLimiter<u64, Gcra> {
    KeyedLimiter::builder(gcra())
        .capacity(capacity)
        .shards(1)
        .when_full(when_full)
        .build()
        .unwrap()
}

/// Uses `n` permits of `key` at `now`.
fn spend(limiter: &KeyedLimiter<u64, Gcra>, key: u64, n: u32, now: Nanos) {
    assert!(limiter.check_n_at(&key, now, n).unwrap().allowed);
}

#[test]
fn a_limited_key_survives_a_flood_of_new_keys() {
    const CAPACITY: usize = 1_000;
    let limiter: KeyedLimiter<u64, Gcra> = KeyedLimiter::new(gcra(), CAPACITY).unwrap();
    let limited = u64::MAX;
    // t = 0: the limited key spends its whole burst; 999 others spend one permit each.
    spend(&limiter, limited, 10, secs(0));
    for key in 0..(CAPACITY as u64 - 1) {
        spend(&limiter, key, 1, secs(0));
    }
    assert_eq!(limiter.len(), CAPACITY);
    // t = 2 s: the 999 are idle again (equal to fresh keys); the limited key still owes 8 s.
    let now = secs(2);
    assert_eq!(limiter.peek_at(&limited, now).remaining, 1);
    // A flood of 20 000 new keys, each spending one permit (1 s of state each).
    for key in 1_000_000..1_020_000u64 {
        spend(&limiter, key, 1, now);
        assert!(limiter.len() <= CAPACITY);
    }
    // The limited key kept its state: a fresh key would have 9 permits left, it has 1.
    assert!(limiter.contains(&limited));
    assert_eq!(limiter.peek_at(&limited, now).remaining, 1);
    let stats = limiter.stats();
    // The idle entries went first (at most a few were skipped by the bounded search) …
    assert!(stats.idle_evictions >= 990, "{stats:?}");
    // … then the flood evicted its own entries (1 s of state) rather than the limited key.
    assert!(stats.pressure_evictions >= 19_000, "{stats:?}");
    assert_eq!(stats.inserts, 1_000 + 20_000);
}

#[test]
fn idle_entries_are_evicted_before_any_limited_one() {
    // Capacity 4 in one 16-slot shard: every eviction sees the whole table.
    let limiter = small(4, WhenFull::Evict);
    for (key, permits) in [(1, 4), (2, 3), (3, 2), (4, 1)] {
        spend(&limiter, key, permits, secs(0));
    }
    // At t = 1 s key 4 is idle (it spent 1 permit, refilled after 1 s); 1, 2, 3 are limited.
    assert!(limiter.check_at(&5, secs(1)).unwrap().allowed);
    assert!(!limiter.contains(&4));
    assert!([1, 2, 3, 5].iter().all(|k| limiter.contains(k)));
    let stats = limiter.stats();
    assert_eq!((stats.idle_evictions, stats.pressure_evictions), (1, 0));
}

#[test]
fn under_pressure_the_entry_closest_to_fresh_is_evicted() {
    let limiter = small(4, WhenFull::Evict);
    for (key, permits) in [(1, 4), (2, 3), (3, 2), (4, 1)] {
        spend(&limiter, key, permits, secs(0));
    }
    // No entry is idle at t = 0: the one with the smallest reset_after (key 4, 1 s) goes.
    spend(&limiter, 5, 2, secs(0));
    assert!(!limiter.contains(&4));
    assert!([1, 2, 3, 5].iter().all(|k| limiter.contains(k)));
    assert_eq!(limiter.stats().pressure_evictions, 1);
    // Key 4 comes back fresh (its state was lost: that is what pressure eviction costs) …
    assert_eq!(limiter.check_at(&4, secs(0)).unwrap().remaining, 9);
    // … pushing out the least-loss entry again: key 3 or key 5 (both 2 s), never 1 or 2.
    assert!(limiter.contains(&1) && limiter.contains(&2));
    assert_eq!(limiter.len(), 4);
    // Ties on reset_after break towards more remaining permits, then slot order; either
    // way the survivors are exactly the four most-loaded keys.
    assert!(limiter.contains(&3) ^ limiter.contains(&5));
}

#[test]
fn refuse_fails_closed_with_a_typed_error_and_keeps_every_state() {
    let limiter = small(2, WhenFull::Refuse);
    spend(&limiter, 1, 10, secs(0));
    spend(&limiter, 2, 5, secs(0));
    // Full of limited keys: a new key is refused, which is not a deny.
    assert_eq!(limiter.check_at(&3, secs(0)), Err(KeyedError::Full));
    assert_eq!(limiter.check_at(&3, secs(1)), Err(KeyedError::Full));
    assert_eq!(limiter.stats().refusals, 2);
    assert!(!limiter.contains(&3));
    // The resident keys are untouched: key 1 is denied (a normal deny, Ok), key 2 allowed.
    let denied = limiter.check_at(&1, secs(0)).unwrap();
    assert!(!denied.allowed);
    assert_eq!(denied.retry_after, secs(1));
    assert!(limiter.check_at(&2, secs(0)).unwrap().allowed);
    // Once key 2 is idle again (6 permits spent → idle at 6 s), key 3 takes its place.
    assert!(limiter.check_at(&3, secs(6)).unwrap().allowed);
    assert!(!limiter.contains(&2) && limiter.contains(&1) && limiter.contains(&3));
    assert_eq!(limiter.stats().idle_evictions, 1);
    assert_eq!(limiter.stats().pressure_evictions, 0);
}

#[test]
fn evict_idle_at_sweeps_the_whole_table() {
    let limiter: KeyedLimiter<u64, Gcra> = KeyedLimiter::new(gcra(), 10_000).unwrap();
    for key in 0..5_000u64 {
        spend(&limiter, key, 1 + (key % 5) as u32, secs(0));
    }
    // At 3 s the keys that spent 1..=3 permits are idle (3 000 of them).
    assert_eq!(limiter.evict_idle_at(secs(3)), 3_000);
    assert_eq!(limiter.len(), 2_000);
    assert_eq!(limiter.evict_idle_at(secs(3)), 0);
    assert_eq!(limiter.evict_idle_at(secs(5)), 2_000);
    assert!(limiter.is_empty());
}

/// A keyed limiter with a fixed hasher (a reproducible layout).
type Fixed = KeyedLimiter<u64, Gcra, tollgate::MonotonicClock, BuildHasherDefault<DefaultHasher>>;

/// A `Refuse` table of `capacity` keys in `shards` shards.
fn refusing(capacity: usize, shards: usize) -> Fixed {
    KeyedLimiter::builder(gcra())
        .capacity(capacity)
        .shards(shards)
        .when_full(WhenFull::Refuse)
        .hasher(BuildHasherDefault::<DefaultHasher>::default())
        .build()
        .unwrap()
}

/// Offers `keys` (each spending one permit at t = 0, so none is ever idle) to a `Refuse`
/// table; asserts that a key is refused only once the table holds its capacity, and that
/// nothing was evicted (every admitted key still resident, with its state).
fn fill_until_refused(limiter: &Fixed, keys: impl Iterator<Item = u64>) -> Result<(), String> {
    let capacity = limiter.capacity();
    let mut admitted = Vec::new();
    for key in keys {
        match limiter.check_at(&key, secs(0)) {
            Ok(decision) => {
                assert!(decision.allowed);
                admitted.push(key);
            }
            Err(KeyedError::Full) => {
                if limiter.len() < capacity {
                    return Err(format!(
                        "key {key} refused at len {} of capacity {capacity} ({} shards)",
                        limiter.len(),
                        limiter.shards(),
                    ));
                }
            }
            Err(other) => panic!("{other:?}"),
        }
        assert!(limiter.len() <= capacity);
    }
    assert_eq!(limiter.len(), capacity);
    assert_eq!(admitted.len(), capacity);
    let stats = limiter.stats();
    assert_eq!((stats.idle_evictions, stats.pressure_evictions), (0, 0));
    for key in admitted {
        // One permit of ten spent, one more peeked at.
        assert_eq!(limiter.peek_at(&key, secs(0)).remaining, 8, "key {key}");
    }
    Ok(())
}

/// Small shards: hashing never spreads keys evenly, and a shard beyond its 90 % share
/// once found the shared pool spent while other shards left part of their shares unused:
/// `Full` at 9 818 keys of 10 000 (1 024 shards), 4 092 of 4 096 (256), 999 of 1 000 (64).
#[test]
fn refuse_admits_live_keys_until_the_whole_capacity_is_used() {
    for (capacity, shards, first) in [
        (10_000, 1_024, 0),
        (10_000, 1_024, 1_000_000_007),
        (4_096, 256, 1_000_000_007),
        (1_000, 64, 1_000_000_007),
        (100, 8, 2_000_000_014),
        (1_000, 1, 0),
    ] {
        let limiter = refusing(capacity, shards);
        let keys = first..first + 3 * capacity as u64;
        if let Err(message) = fill_until_refused(&limiter, keys) {
            panic!("{message}");
        }
    }
}
