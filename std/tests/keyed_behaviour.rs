//! Keyed limiter behaviour on pinned cases and random traces (against the reference models).

use std::net::Ipv4Addr;

use proptest::prelude::*;
use tollgate::{
    FixedWindow, Gcra, InsufficientCapacity, KeyStorage, KeyedError, KeyedLimiter, LeakyBucket,
    ManualClock, Nanos, PackedAlgorithm, SlidingWindowCounter, TokenBucket,
};
use tollgate_core::reference::PackedModel;

fn gcra() -> Gcra {
    Gcra::per_second(2).burst(3).build().unwrap()
}

#[test]
fn peek_and_probes_never_insert() {
    let limiter: KeyedLimiter<u64, Gcra> = KeyedLimiter::new(gcra(), 10).unwrap();
    assert_eq!(limiter.peek_at(&1, Nanos::ZERO).remaining, 2);
    assert_eq!(limiter.peek_n_at(&1, Nanos::ZERO, 3).unwrap().remaining, 0);
    // A cost-0 check is a probe: it answers as a fresh key and stores nothing.
    assert_eq!(limiter.check_n_at(&1, Nanos::ZERO, 0).unwrap().remaining, 3);
    assert!(!limiter.contains(&1));
    assert!(limiter.is_empty());
    // A cost that can never be admitted is an error, not a deny, and inserts nothing.
    assert_eq!(
        limiter.check_n_at(&1, Nanos::ZERO, 4),
        Err(KeyedError::InsufficientCapacity(InsufficientCapacity {
            max_cost: 3
        }))
    );
    assert!(limiter.is_empty());
    assert_eq!(
        limiter.peek_n_at(&1, Nanos::ZERO, 4),
        Err(InsufficientCapacity { max_cost: 3 })
    );
}

#[test]
fn deny_is_a_decision_and_remove_forgets() {
    let clock = ManualClock::new();
    let limiter: KeyedLimiter<u64, Gcra, ManualClock> = KeyedLimiter::builder(gcra())
        .capacity(10)
        .clock(clock.clone())
        .build()
        .unwrap();
    for remaining in [2, 1, 0] {
        assert_eq!(limiter.check(&7).unwrap().remaining, remaining);
    }
    let denied = limiter.check(&7).unwrap();
    assert!(!denied.allowed);
    assert_eq!(denied.retry_after, Nanos::from_millis(500));
    assert!(!limiter.peek(&7).allowed);
    clock.advance(Nanos::from_millis(500));
    assert!(limiter.check_n(&7, 1).unwrap().allowed);
    assert!(limiter.remove(&7));
    assert!(!limiter.remove(&7));
    assert_eq!(limiter.check(&7).unwrap().remaining, 2);
    assert_eq!(limiter.stats().removals, 1);
}

#[test]
fn every_integer_like_key_type_is_stored_exactly_in_eight_bytes() {
    /// `stored`: whether keys of this type are stored in key cells (non-integer keys).
    fn exercise<K: std::hash::Hash + Eq + Clone + 'static>(keys: [K; 3], stored: bool) {
        let limiter: KeyedLimiter<K, Gcra> = KeyedLimiter::new(gcra(), 1_000).unwrap();
        for key in &keys {
            let _ = limiter.check_n_at(key, Nanos::ZERO, 3).unwrap();
        }
        for key in &keys {
            assert!(!limiter.check_at(key, Nanos::ZERO).unwrap().allowed);
            assert!(limiter.contains(key));
        }
        assert_eq!(limiter.len(), 3);
        // Integer keys: ≤ 20 B per key. Other (exact) keys: plus a key cell per slot.
        let cell = if stored {
            (std::mem::size_of::<K>() + 4) * 6 / 5 + 4
        } else {
            0
        };
        assert!(limiter.memory_bytes() <= (20 + cell) * 1_000 + 4096);
    }
    exercise([0u8, 1, 255], false);
    exercise([0u16, 1, u16::MAX], false);
    exercise([0u32, 1, u32::MAX], false);
    exercise([0u64, 1, u64::MAX], false);
    exercise([i8::MIN, 0, -1], false);
    exercise([i16::MIN, 0, -1], false);
    exercise([i32::MIN, 0, -1], false);
    exercise([i64::MIN, 0, -1], false);
    exercise([0usize, 1, usize::MAX], false);
    exercise([isize::MIN, 0, -1], false);
    exercise(['a', 'é', '\u{10FFFF}'], false);
    exercise(
        [
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            Ipv4Addr::BROADCAST,
        ],
        false,
    );
    // Other keys: exact (stored) and fingerprinted.
    exercise([String::new(), "a".to_string(), "b".to_string()], true);
    exercise([(1u32, 2u32), (2, 1), (0, 0)], true);
    exercise([vec![1u8], vec![1, 0], vec![]], true);
}

#[test]
fn memory_is_at_most_twenty_bytes_per_key_and_a_huge_page_fill_for_integer_and_fingerprint_keys() {
    // 100 000 keys' 1.83 MiB of buckets are rounded up to one 2 MiB huge page.
    for (capacity, huge_page_fill) in [(1_000, 0), (100_000, 256 << 10), (1_000_000, 0)] {
        let ints: KeyedLimiter<u64, Gcra> = KeyedLimiter::new(gcra(), capacity).unwrap();
        assert!(
            ints.memory_bytes() <= 20 * capacity + huge_page_fill,
            "{capacity}: {}",
            ints.memory_bytes()
        );
        assert_eq!(ints.capacity(), capacity);
        assert!(ints.slots() >= capacity * 6 / 5);
        if huge_page_fill > 0 {
            // The whole huge page is buckets: 2 MiB of 16-byte slots.
            assert_eq!(ints.slots(), (2 << 20) / 16);
        }
        let prints: KeyedLimiter<String, Gcra> = KeyedLimiter::builder(gcra())
            .capacity(capacity)
            .key_storage(KeyStorage::Fingerprint)
            .build()
            .unwrap();
        assert_eq!(prints.memory_bytes(), ints.memory_bytes());
    }
    // Exact String keys pay for a key cell per slot (plus each key's own heap).
    let strings: KeyedLimiter<String, Gcra> = KeyedLimiter::new(gcra(), 1_000).unwrap();
    let ints: KeyedLimiter<u64, Gcra> = KeyedLimiter::new(gcra(), 1_000).unwrap();
    assert!(strings.memory_bytes() > ints.memory_bytes());
}

#[test]
fn a_fixed_seed_hasher_gives_a_reproducible_layout() {
    let build = || -> KeyedLimiter<u64, Gcra, ManualClock, foldhash::fast::FixedState> {
        KeyedLimiter::builder(gcra())
            .capacity(4)
            .shards(1)
            .clock(ManualClock::new())
            .hasher(foldhash::fast::FixedState::with_seed(99))
            .build()
            .unwrap()
    };
    let (a, b) = (build(), build());
    for key in 0..100u64 {
        let _ = a.check_at(&key, Nanos::from_millis(key)).unwrap();
        let _ = b.check_at(&key, Nanos::from_millis(key)).unwrap();
    }
    for key in 0..100u64 {
        assert_eq!(a.contains(&key), b.contains(&key), "key {key}");
    }
    assert_eq!(a.stats(), b.stats());
}

fn any_algorithm() -> impl Strategy<Value = PackedAlgorithm> {
    let s = Nanos::from_secs;
    prop_oneof![
        (1..20u64, 1..10u64).prop_map(|(n, b)| Gcra::per_second(n)
            .burst(b)
            .build()
            .unwrap()
            .into()),
        (1..20u64, 1..5u64).prop_map(move |(c, r)| TokenBucket::new(c, r, s(1)).unwrap().into()),
        (1..5u64, 0..6u64).prop_map(move |(r, q)| LeakyBucket::new(r, s(1), q).unwrap().into()),
        (1..20u64, 1..3u64).prop_map(move |(l, w)| FixedWindow::new(l, s(w)).unwrap().into()),
        (1..20u64, 1..3u64)
            .prop_map(move |(l, w)| SlidingWindowCounter::new(l, s(w)).unwrap().into()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Random traces over a few keys (no eviction: capacity exceeds them): every keyed
    /// decision equals the key's reference model, for checks and peeks.
    #[test]
    fn keyed_decisions_equal_per_key_models(
        algorithm in any_algorithm(),
        trace in prop::collection::vec((0..6u64, 0..400_000_000u64, 0..4u32, any::<bool>()), 1..200),
    ) {
        let limiter: KeyedLimiter<u64> = KeyedLimiter::new(algorithm, 64).unwrap();
        let mut models: Vec<PackedModel> = (0..6).map(|_| PackedModel::new(&algorithm)).collect();
        let mut now = 0u64;
        for (key, step, cost, peek) in trace {
            now += step;
            let expected = models[key as usize].check(now, cost, !peek);
            let got = if peek {
                limiter.peek_n_at(&key, Nanos::new(now), cost).map_err(KeyedError::from)
            } else {
                limiter.check_n_at(&key, Nanos::new(now), cost)
            };
            prop_assert_eq!(got, expected.map_err(KeyedError::from), "key {} at {}", key, now);
        }
        prop_assert!(limiter.len() <= 6);
    }
}
