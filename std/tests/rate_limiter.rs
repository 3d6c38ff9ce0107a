//! The direct `RateLimiter`: one clock read per check, decisions equal to the reference
//! model, `*_at` forms, and exact counts under threads.

use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use tollgate::{Clock, Gcra, InsufficientCapacity, ManualClock, Nanos, RateLimiter};
use tollgate_core::reference::GcraModel;

/// A clock that counts its reads.
#[derive(Default)]
struct CountingClock {
    reads: AtomicU64,
}

impl Clock for CountingClock {
    fn now(&self) -> Nanos {
        self.reads.fetch_add(1, Ordering::Relaxed);
        Nanos::from_secs(1)
    }
}

#[test]
fn each_check_reads_the_clock_exactly_once() {
    let limiter = RateLimiter::with_clock(
        Gcra::per_second(5).build().unwrap(),
        CountingClock::default(),
    );
    let _ = limiter.check();
    let _ = limiter.check_n(2).unwrap();
    let _ = limiter.peek();
    assert_eq!(
        limiter.check_n(9),
        Err(InsufficientCapacity { max_cost: 5 })
    );
    assert_eq!(limiter.clock().reads.load(Ordering::Relaxed), 4);
    // The `*_at` forms read no clock.
    let _ = limiter.check_at(Nanos::ZERO);
    let _ = limiter.peek_at(Nanos::ZERO);
    let _ = limiter.check_n_at(Nanos::ZERO, 1).unwrap();
    assert_eq!(limiter.clock().reads.load(Ordering::Relaxed), 4);
}

#[test]
fn manual_clock_drives_refill_and_reset_forgets() {
    let clock = ManualClock::new();
    let limiter =
        RateLimiter::with_clock(Gcra::per_second(4).burst(2).build().unwrap(), clock.clone());
    assert!(limiter.check().allowed);
    assert!(limiter.check().allowed);
    let denied = limiter.check();
    assert!(!denied.allowed);
    assert_eq!(denied.retry_after, Nanos::from_millis(250));
    clock.advance(Nanos::from_millis(249));
    assert!(!limiter.peek().allowed);
    clock.advance(Nanos::from_millis(1));
    assert!(limiter.check().allowed);
    limiter.reset();
    assert_eq!(limiter.peek().remaining, 1);
    assert_eq!(limiter.algorithm().burst_size(), 2);
}

#[test]
fn threads_admit_exactly_the_burst_at_one_instant() {
    let limiter = RateLimiter::new(Gcra::per_second(1).burst(1_000).build().unwrap());
    let admitted = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for _ in 0..1_000 {
                    if limiter.check_at(Nanos::from_secs(5)).allowed {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(admitted.load(Ordering::Relaxed), 1_000);
}

proptest! {
    #[test]
    fn decisions_equal_the_reference_model(
        rate in 1..50u64,
        burst in 1..20u64,
        trace in prop::collection::vec((0..200_000_000u64, 0..25u32), 1..100),
    ) {
        let gcra = Gcra::per_second(rate).burst(burst).build().unwrap();
        let limiter = RateLimiter::new(gcra);
        let mut model = GcraModel::new(&gcra);
        let mut now = 0;
        for (step, cost) in trace {
            now += step;
            prop_assert_eq!(
                limiter.check_n_at(Nanos::new(now), cost),
                model.check(now, cost, true)
            );
        }
    }
}
