//! Issue 16, item 3 under real threads: lock-free lookups of a resident key racing the
//! cuckoo moves that inserts of other keys make. A peek must never report the resident
//! key fresh and `contains` must never say it is gone. (The loom models in
//! `loom-tests/tests/keyed_races.rs` prove the protocol; this checks the real build.)

use std::sync::atomic::{AtomicBool, Ordering};

use tollgate::{Gcra, KeyedLimiter, Nanos, WhenFull};

#[test]
fn lookups_never_miss_a_key_that_cuckoo_moves() {
    const ROUNDS: u64 = 200_000;
    // T = 1 µs, burst 4.
    let gcra = Gcra::from_interval(1_000, 4).unwrap();
    // 16 slots in 4 buckets for 13 keys. `Refuse`: nothing busy is ever evicted, so the
    // busy keys stay resident whatever the churn does.
    let limiter: KeyedLimiter<u64, Gcra> = KeyedLimiter::builder(gcra)
        .capacity(13)
        .shards(1)
        .when_full(WhenFull::Refuse)
        .build()
        .unwrap();
    // Four busy keys: their whole burst spent at a time far ahead of the churn, so they
    // are never idle during the test.
    let far = Nanos::from_secs(1_000_000);
    let busy: Vec<u64> = (1_000_000..1_000_004).collect();
    for k in &busy {
        assert!(limiter.check_n_at(k, far, 4).unwrap().allowed);
    }
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let (limiter, done, busy) = (&limiter, &done, &busy);
        scope.spawn(move || {
            for i in 0..ROUNDS {
                // At most 8 churn keys resident besides the 4 busy ones: 12 of 16 slots
                // used, under the quota of 13, so a new key whose two buckets are full
                // gets room by moving an entry (often a busy key) to its other bucket.
                let _ = limiter.check_at(&(i % 4_096), Nanos::ZERO);
                limiter.remove(&(i.wrapping_sub(8) % 4_096));
            }
            // Relaxed: a stop flag; the scope's join orders everything else.
            done.store(true, Ordering::Relaxed);
        });
        for _ in 0..2 {
            scope.spawn(move || {
                let mut rounds = 0u64;
                // Relaxed: see above.
                while !done.load(Ordering::Relaxed) || rounds == 0 {
                    for k in busy {
                        let d = limiter.peek_at(k, far);
                        assert_eq!(d.remaining, 0, "peek reported busy key {k} fresh: {d:?}");
                        assert!(limiter.contains(k), "busy key {k} reported absent");
                    }
                    rounds += 1;
                }
            });
        }
    });
    for k in &busy {
        assert!(limiter.contains(k));
    }
}
