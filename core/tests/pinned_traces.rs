//! Exact decisions on pinned traces: the spec's use cases run through every algorithm.

use tollgate_core::{
    Algorithm, AlgorithmConfig, AnyLimiter, ConfigError, Decision, FixedWindow, Gcra,
    InsufficientCapacity, LeakyBucket, Limiter, Nanos, SlidingLogLimiter, SlidingWindowCounter,
    SlidingWindowLog, TokenBucket,
};

fn ms(ms: u64) -> Nanos {
    Nanos::from_millis(ms)
}

/// The spec's burst: 20 requests within one second (every 50 ms from `start`).
fn burst_times(start: u64) -> impl Iterator<Item = Nanos> {
    (0..20).map(move |i| ms(start + 50 * i))
}

#[test]
fn token_bucket_admits_a_burst_within_capacity_then_refills_while_idle() {
    // Capacity 20, one token per second.
    let bucket = Limiter::new(TokenBucket::new(20, 1, Nanos::from_secs(1)).unwrap());
    let decisions: Vec<Decision> = burst_times(0).map(|t| bucket.check_at(t)).collect();
    assert!(decisions.iter().all(|d| d.allowed), "all 20 fit the bucket");
    let remaining: Vec<u64> = decisions.iter().map(|d| d.remaining).collect();
    assert_eq!(remaining, (0..20).rev().collect::<Vec<u64>>());
    // The 21st in the same second is refused, and told exactly when a token is back:
    // the bucket is full again at TAT = 20 s; one token is back at 20 s − 19 s = 1 s.
    let d = bucket.check_at(ms(960));
    assert!(!d.allowed);
    assert_eq!(d.retry_after, ms(40));
    assert_eq!(d.reset_after, ms(19_040));
    // Ten idle seconds later (t = 10.95 s) the bucket holds ⌊10.95⌋ = 10 tokens.
    let later = ms(10_950);
    let admitted = (0..20).filter(|_| bucket.check_at(later).allowed).count();
    assert_eq!(admitted, 10);
}

#[test]
fn leaky_bucket_shapes_the_same_burst_to_the_drain_rate() {
    // Drains 2 per second (one every 500 ms); up to 5 may wait.
    let shaper = Limiter::new(LeakyBucket::new(2, Nanos::from_secs(1), 5).unwrap());
    let mut admitted = Vec::new();
    let mut denied = Vec::new();
    for t in burst_times(0) {
        let d = shaper.check_at(t);
        if d.allowed {
            admitted.push((t, d.delay));
        } else {
            assert_eq!(d.delay, Nanos::ZERO);
            denied.push((t, d.retry_after));
        }
    }
    let expected_admitted = [
        (0, 0),
        (50, 450),
        (100, 900),
        (150, 1350),
        (200, 1800),
        (250, 2250),
        (500, 2500),
    ];
    let got: Vec<(u64, u64)> = admitted
        .iter()
        .map(|(t, delay)| (t.as_u64() / 1_000_000, delay.as_u64() / 1_000_000))
        .collect();
    assert_eq!(got, expected_admitted);
    assert_eq!(denied.len(), 13);
    // Denials between the 6th and 7th admission say exactly when the queue has room.
    assert_eq!(denied[0], (ms(300), ms(200)));
    assert_eq!(denied[3], (ms(450), ms(50)));
    // Departures (arrival + delay) are spaced exactly one drain interval apart.
    let departures: Vec<u64> = admitted.iter().map(|(t, d)| (*t + *d).as_u64()).collect();
    for pair in departures.windows(2) {
        assert_eq!(pair[1] - pair[0], 500_000_000);
    }
    // After ten idle seconds the shaper still passes only one at once plus the queue: idling
    // does not bank a burst.
    let later = ms(11_000);
    let delays: Vec<Option<u64>> = (0..10)
        .map(|_| {
            let d = shaper.check_at(later);
            d.allowed.then(|| d.delay.as_u64() / 1_000_000)
        })
        .collect();
    assert_eq!(
        delays,
        [
            Some(0),
            Some(500),
            Some(1000),
            Some(1500),
            Some(2000),
            Some(2500),
            None,
            None,
            None,
            None
        ]
    );
}

#[test]
fn strict_pacing_with_no_queue() {
    let pacer = Limiter::new(LeakyBucket::new(10, Nanos::from_secs(1), 0).unwrap());
    assert_eq!(pacer.check_at(ms(0)).delay, Nanos::ZERO);
    let d = pacer.check_at(ms(1));
    assert!(!d.allowed);
    assert_eq!(d.retry_after, ms(99));
    assert!(pacer.check_at(ms(100)).allowed);
    assert_eq!(pacer.algorithm().limit(), 1);
}

#[test]
fn fixed_window_admits_two_limits_across_a_boundary() {
    let window = Limiter::new(FixedWindow::new(10, Nanos::from_secs(1)).unwrap());
    let last_ms: Vec<bool> = (0..11).map(|_| window.check_at(ms(999)).allowed).collect();
    assert_eq!(last_ms.iter().filter(|&&a| a).count(), 10);
    let d = window.check_at(ms(999));
    assert_eq!(
        (d.allowed, d.retry_after, d.reset_after),
        (false, ms(1), ms(1))
    );
    // One millisecond later a new window opens: 10 more, 20 within 2 ms.
    let first_ms = (0..11)
        .filter(|_| window.check_at(ms(1000)).allowed)
        .count();
    assert_eq!(first_ms, 10);
    let d = window.check_at(ms(1000));
    assert_eq!(
        (d.allowed, d.remaining, d.retry_after),
        (false, 0, ms(1000))
    );
}

#[test]
fn sliding_window_counter_smooths_the_boundary_burst() {
    let counter = Limiter::new(SlidingWindowCounter::new(10, Nanos::from_secs(1)).unwrap());
    assert_eq!(
        (0..11)
            .filter(|_| counter.check_at(ms(999)).allowed)
            .count(),
        10
    );
    // Right after the boundary, the previous window weighs 100 %: nothing passes, and the
    // retry says when 10 % of it has slid out.
    let d = counter.check_at(ms(1000));
    assert!(!d.allowed);
    assert_eq!(d.retry_after, ms(100));
    assert!(!counter.check_at(ms(1099)).allowed);
    assert!(counter.check_at(ms(1100)).allowed);
    // At 1.5 s the estimate is 10·0.5 + 1 = 6: four more fit.
    assert_eq!(
        (0..10)
            .filter(|_| counter.check_at(ms(1500)).allowed)
            .count(),
        4
    );
    // In the sliding second (0.5 s, 1.5 s] at most 15 were admitted: far below fixed window's 20.
}

#[test]
fn sliding_window_log_is_exact_across_the_boundary() {
    let log = SlidingLogLimiter::<10>::new(SlidingWindowLog::new(10, Nanos::from_secs(1)).unwrap())
        .unwrap();
    assert_eq!(
        (0..11).filter(|_| log.check_at(ms(999)).allowed).count(),
        10
    );
    let d = log.check_at(ms(1000));
    assert_eq!(
        (d.allowed, d.retry_after, d.reset_after),
        (false, ms(999), ms(999))
    );
    assert!(!log.check_at(ms(1998)).allowed);
    // The burst at 999 ms leaves the window (t > now − W) exactly at 1999 ms.
    assert_eq!(
        (0..11).filter(|_| log.check_at(ms(1999)).allowed).count(),
        10
    );
}

#[test]
fn gcra_spaces_requests_after_the_burst() {
    let gcra = Limiter::new(Gcra::per_second(10).burst(3).build().unwrap());
    let d: Vec<Decision> = (0..4).map(|_| gcra.check_at(ms(0))).collect();
    assert_eq!(
        d.iter().map(|d| d.remaining).collect::<Vec<_>>(),
        [2, 1, 0, 0]
    );
    assert!(!d[3].allowed);
    assert_eq!(d[3].retry_after, ms(100));
    assert_eq!(d[3].reset_after, ms(300));
    assert!(!gcra.check_at(ms(99)).allowed);
    assert!(gcra.check_at(ms(100)).allowed);
}

/// Every algorithm, configured to admit `limit` at once, as an `AnyLimiter`.
fn all_algorithms(limit: u64) -> Vec<(&'static str, AnyLimiter<64>)> {
    let second = Nanos::from_secs(1);
    let configs = [
        (
            "gcra",
            AlgorithmConfig::Gcra {
                limit,
                period: second,
                burst: limit,
            },
        ),
        (
            "token bucket",
            AlgorithmConfig::TokenBucket {
                capacity: limit,
                refill_amount: limit,
                refill_period: second,
            },
        ),
        (
            "leaky bucket",
            AlgorithmConfig::LeakyBucket {
                amount: limit,
                period: second,
                queue: limit - 1,
            },
        ),
        (
            "fixed window",
            AlgorithmConfig::FixedWindow {
                limit,
                window: second,
            },
        ),
        (
            "sliding counter",
            AlgorithmConfig::SlidingWindowCounter {
                limit,
                window: second,
            },
        ),
        (
            "sliding log",
            AlgorithmConfig::SlidingWindowLog {
                limit,
                window: second,
            },
        ),
    ];
    configs
        .into_iter()
        .map(|(name, c)| (name, AnyLimiter::new(c.build().unwrap()).unwrap()))
        .collect()
}

#[test]
fn a_new_client_always_starts_with_full_quota() {
    for start in [0, 1, 999_999_999, 1_700_000_000_000_000_000, u64::MAX / 2] {
        for (name, limiter) in all_algorithms(7) {
            let now = Nanos::new(start);
            let peek = limiter.peek_at(now);
            assert!(peek.allowed, "{name} at {start}");
            assert_eq!((peek.limit, peek.remaining), (7, 6), "{name} at {start}");
            let admitted = (0..10).filter(|_| limiter.check_at(now).allowed).count();
            assert_eq!(
                admitted, 7,
                "{name} admits exactly its limit at once from {start}"
            );
        }
    }
}

#[test]
fn remaining_counts_down_to_zero_and_never_below() {
    for (name, limiter) in all_algorithms(5) {
        let remaining: Vec<u64> = (0..8).map(|_| limiter.check_at(ms(10)).remaining).collect();
        assert_eq!(remaining, [4, 3, 2, 1, 0, 0, 0, 0], "{name}");
    }
}

#[test]
fn every_deny_says_when_to_retry_and_that_time_is_exact() {
    for (name, limiter) in all_algorithms(4) {
        let now = ms(10);
        while limiter.check_at(now).allowed {}
        let denied = limiter.check_at(now);
        assert!(denied.retry_after > Nanos::ZERO, "{name}");
        let just_before = now + denied.retry_after - Nanos::new(1);
        assert!(
            !limiter.peek_at(just_before).allowed,
            "{name}: not before retry_after"
        );
        assert!(
            limiter.peek_at(now + denied.retry_after).allowed,
            "{name}: at retry_after"
        );
    }
}

#[test]
fn a_cost_beyond_capacity_is_its_own_error_not_a_deny() {
    for (name, limiter) in all_algorithms(5) {
        let max = limiter.algorithm().max_cost();
        assert_eq!(
            limiter.check_n_at(ms(0), max as u32 + 1),
            Err(InsufficientCapacity { max_cost: max }),
            "{name}"
        );
        assert!(
            limiter.check_n_at(ms(0), max as u32).unwrap().allowed,
            "{name}: a full-size request fits fresh"
        );
    }
    // A leaky bucket holds the one in service plus its queue: on a 10/s shaper with no
    // queue, a request of u32::MAX units (13.6 years of drain) is refused outright instead
    // of blocking everyone behind it.
    let leaky = Limiter::new(LeakyBucket::new(10, Nanos::from_secs(1), 0).unwrap());
    assert_eq!(
        leaky.check_n_at(ms(0), u32::MAX),
        Err(InsufficientCapacity { max_cost: 1 })
    );
    let queued = Limiter::new(LeakyBucket::new(10, Nanos::from_secs(1), 3).unwrap());
    assert_eq!(
        queued.check_n_at(ms(0), 5),
        Err(InsufficientCapacity { max_cost: 4 })
    );
    let d = queued.check_n_at(ms(0), 4).unwrap();
    assert!(d.allowed);
    assert_eq!(d.delay, Nanos::ZERO);
    // ...and the queue is then full until one unit has drained (100 ms), when the next
    // waits the 300 ms the other three still take.
    assert!(!queued.check_at(ms(99)).allowed);
    assert_eq!(queued.check_at(ms(100)).delay, ms(300));
    // Always the whole queue: a queue whose drain would not fit the horizon does not build
    // (core/tests/horizon.rs).
    let long = Limiter::new(LeakyBucket::from_interval(Nanos::new(u64::MAX / 8), 1).unwrap());
    assert_eq!(
        long.check_n_at(ms(0), 3),
        Err(InsufficientCapacity { max_cost: 2 })
    );
    assert!(long.check_n_at(ms(0), 2).unwrap().allowed);
}

#[test]
fn all_or_nothing_costs() {
    let gcra = Limiter::new(Gcra::per_second(10).build().unwrap());
    assert!(gcra.check_n_at(ms(0), 7).unwrap().allowed);
    let d = gcra.check_n_at(ms(0), 4).unwrap();
    assert!(!d.allowed);
    assert_eq!(d.remaining, 3, "a refused request consumes nothing");
    assert!(gcra.check_n_at(ms(0), 3).unwrap().allowed);
}

#[test]
fn cost_zero_and_peek_never_consume() {
    for (name, limiter) in all_algorithms(3) {
        for _ in 0..10 {
            assert!(limiter.check_n_at(ms(5), 0).unwrap().allowed, "{name}");
            assert!(limiter.peek_at(ms(5)).allowed, "{name}");
        }
        assert_eq!(
            (0..5).filter(|_| limiter.check_at(ms(5)).allowed).count(),
            3,
            "{name}"
        );
    }
}

#[test]
fn a_late_caller_with_an_older_now_is_never_over_admitted() {
    for (name, limiter) in all_algorithms(3) {
        let now = Nanos::from_secs(100);
        assert_eq!(
            (0..5).filter(|_| limiter.check_at(now).allowed).count(),
            3,
            "{name}"
        );
        // A thread that read the clock long ago arrives now.
        for back in [1, 1_000_000, 1_000_000_000, 50_000_000_000, 100_000_000_000] {
            assert!(
                !limiter.check_at(now - Nanos::new(back)).allowed,
                "{name}, {back} ns late"
            );
        }
        // And the state is not corrupted: the current time still sees the same answer.
        assert!(!limiter.check_at(now).allowed, "{name}");
    }
}

#[test]
fn the_end_of_time_is_refused_not_wrapped() {
    let end = Nanos::MAX;
    let gcra = Limiter::new(Gcra::per_second(1).burst(2).build().unwrap());
    // A TAT beyond u64 nanoseconds cannot be recorded.
    let d = gcra.check_at(end);
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Nanos::MAX);
    let leaky = Limiter::new(LeakyBucket::new(1, Nanos::from_secs(1), 3).unwrap());
    assert!(!leaky.check_at(end).allowed);
    let window = Limiter::new(FixedWindow::new(3, Nanos::from_secs(1)).unwrap());
    assert_eq!((0..5).filter(|_| window.check_at(end).allowed).count(), 3);
}

#[test]
fn invalid_configs_are_typed_errors() {
    let s = Nanos::from_secs(1);
    assert_eq!(Gcra::per_second(0).build(), Err(ConfigError::ZeroLimit));
    assert_eq!(
        Gcra::with_period(1, Nanos::ZERO).build(),
        Err(ConfigError::ZeroPeriod)
    );
    assert_eq!(
        Gcra::per_second(5).burst(0).build(),
        Err(ConfigError::ZeroBurst)
    );
    assert_eq!(
        Gcra::with_period(10, Nanos::new(9)).build(),
        Err(ConfigError::RateTooFine)
    );
    assert_eq!(
        Gcra::per_second(1).burst(u64::MAX).build(),
        Err(ConfigError::LimitTooLarge {
            max: Nanos::MAX_HORIZON.as_u64() / 1_000_000_000
        })
    );
    assert_eq!(TokenBucket::new(0, 1, s), Err(ConfigError::ZeroLimit));
    assert_eq!(TokenBucket::new(1, 0, s), Err(ConfigError::ZeroLimit));
    assert_eq!(
        LeakyBucket::new(1, Nanos::ZERO, 1),
        Err(ConfigError::ZeroPeriod)
    );
    // (2·queue + 1) drain intervals within 2^63 ns.
    assert_eq!(
        LeakyBucket::from_interval(s, u64::MAX),
        Err(ConfigError::LimitTooLarge { max: 4_611_686_017 })
    );
    assert_eq!(FixedWindow::new(0, s), Err(ConfigError::ZeroLimit));
    assert_eq!(
        FixedWindow::new(1, Nanos::ZERO),
        Err(ConfigError::ZeroPeriod)
    );
    // One second of window leaves 29 bits beside the 35-bit window index.
    assert_eq!(
        FixedWindow::new(1 << 29, s),
        Err(ConfigError::LimitTooLarge { max: (1 << 29) - 1 })
    );
    assert!(FixedWindow::new((1 << 29) - 1, s).is_ok());
    // The sliding counter's two counters share those 29 bits: 14 each.
    assert_eq!(
        SlidingWindowCounter::new(1 << 14, s),
        Err(ConfigError::LimitTooLarge { max: (1 << 14) - 1 })
    );
    assert!(SlidingWindowCounter::new((1 << 14) - 1, s).is_ok());
    // A 1 ns window leaves no counter bits at all.
    assert_eq!(
        FixedWindow::new(1, Nanos::new(1)),
        Err(ConfigError::LimitTooLarge { max: 0 })
    );
    assert_eq!(SlidingWindowLog::new(0, s), Err(ConfigError::ZeroLimit));
    assert!(SlidingLogLimiter::<4>::new(SlidingWindowLog::new(5, s).unwrap()).is_err());
    assert_eq!(
        AlgorithmConfig::SlidingWindowLog {
            limit: 5,
            window: s
        }
        .build()
        .map(|a| AnyLimiter::<4>::new(a).err()),
        Ok(Some(ConfigError::LimitTooLarge { max: 4 }))
    );
    // Errors explain themselves.
    assert_eq!(ConfigError::ZeroLimit.to_string(), "limit must be > 0");
}

#[test]
fn a_state_written_under_a_higher_limit_is_read_safely_under_a_lower_one() {
    // What a hot reload that lowers a limit does to a live key: its state was packed under the
    // old parameters. The new limit applies at once, remaining never underflows.
    let now = ms(10);
    let second = Nanos::from_secs(1);
    let cell = tollgate_core::StateCell::new();
    let (high, low) = (
        FixedWindow::new(10, second).unwrap(),
        FixedWindow::new(5, second).unwrap(),
    );
    for _ in 0..8 {
        assert!(cell.check_at(&high, now, 1).unwrap().allowed);
    }
    let d = cell.check_at(&low, now, 1).unwrap();
    assert_eq!((d.allowed, d.remaining), (false, 0));

    let cell = tollgate_core::StateCell::new();
    let (high, low) = (
        SlidingWindowCounter::new(10, second).unwrap(),
        SlidingWindowCounter::new(5, second).unwrap(),
    );
    for _ in 0..8 {
        assert!(cell.check_at(&high, now, 1).unwrap().allowed);
    }
    let d = cell.check_at(&low, now, 1).unwrap();
    assert_eq!((d.allowed, d.remaining), (false, 0));

    let cell = tollgate_core::StateCell::new();
    let (high, low) = (
        Gcra::per_second(10).build().unwrap(),
        Gcra::per_second(5).build().unwrap(),
    );
    for _ in 0..8 {
        assert!(cell.check_at(&high, now, 1).unwrap().allowed);
    }
    // GCRA's state is time owed: 8 permits at 10/s are 0.8 s of the new 1 s tolerance, so
    // exactly one more 5/s permit (0.2 s) fits, and then none.
    let d = cell.check_at(&low, now, 1).unwrap();
    assert_eq!((d.allowed, d.remaining), (true, 0));
    assert!(!cell.check_at(&low, now, 1).unwrap().allowed);
}

#[test]
fn an_interval_that_does_not_divide_the_period_is_rounded_up() {
    // 3 per second: T = ⌈10⁹ / 3⌉ = 333 333 334 ns, so the effective rate is never above
    // the configured one (rounded down, 3 permits would fit in 999 999 999 ns).
    let s = Nanos::from_secs(1);
    let t = Nanos::new(333_333_334);
    let gcra = Gcra::with_period(3, s).burst(1).build().unwrap();
    assert_eq!(gcra.emission_interval(), t);
    assert_eq!(TokenBucket::new(1, 3, s).unwrap().refill_interval(), t);
    assert_eq!(LeakyBucket::new(3, s, 0).unwrap().drain_interval(), t);
    // The trace: one permit, then the next exactly one rounded-up interval later.
    let limiter = Limiter::new(gcra);
    assert!(limiter.check_at(Nanos::ZERO).allowed);
    let d = limiter.check_at(Nanos::new(333_333_333));
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Nanos::new(1));
    assert!(limiter.check_at(t).allowed);
}

#[test]
fn one_permit_per_nanosecond_is_the_finest_rate_accepted() {
    // "Rate finer than 1 ns" is the error; exactly one permit per ns is a valid config.
    let gcra = Gcra::with_period(10, Nanos::new(10)).build().unwrap();
    assert_eq!(gcra.emission_interval(), Nanos::new(1));
    assert_eq!(
        TokenBucket::new(4, 10, Nanos::new(10))
            .unwrap()
            .refill_interval(),
        Nanos::new(1)
    );
    assert_eq!(
        LeakyBucket::new(10, Nanos::new(10), 0)
            .unwrap()
            .drain_interval(),
        Nanos::new(1)
    );
    assert_eq!(
        Gcra::with_period(11, Nanos::new(10)).build(),
        Err(ConfigError::RateTooFine)
    );
}

#[test]
fn a_deny_with_no_wait_is_raised_to_one_nanosecond() {
    let d = Decision::deny(5, 0, Nanos::from_secs(1), Nanos::ZERO);
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Nanos::new(1));
    assert_eq!(
        Decision::deny(5, 0, Nanos::ZERO, Nanos::new(7)).retry_after,
        Nanos::new(7)
    );
}

#[test]
fn combined_tiers_break_exact_ties_toward_the_first_tier() {
    // Admitted, same remaining and reset_after: the first tier is the tightest.
    let a = Decision::allow(10, 3, Nanos::from_secs(5));
    let b = Decision::allow(20, 3, Nanos::from_secs(5));
    let (i, d) = Decision::combine([a, b]).unwrap();
    assert_eq!((i, d.limit), (0, 10));
    // Denied with the same retry_after: the first denying tier.
    let c = Decision::deny(10, 0, Nanos::from_secs(5), Nanos::from_secs(2));
    let e = Decision::deny(20, 0, Nanos::from_secs(9), Nanos::from_secs(2));
    let (i, d) = Decision::combine([a, c, e]).unwrap();
    assert_eq!((i, d.limit, d.reset_after), (1, 10, Nanos::from_secs(5)));
}

#[test]
fn whole_seconds_are_rounded_up_never_early() {
    // What Retry-After and the reset header are rendered from.
    assert_eq!(Nanos::ZERO.as_secs_ceil(), 0);
    assert_eq!(Nanos::new(1).as_secs_ceil(), 1);
    assert_eq!(Nanos::from_secs(1).as_secs_ceil(), 1);
    assert_eq!(Nanos::new(1_000_000_001).as_secs_ceil(), 2);
    assert_eq!(Nanos::MAX.as_secs_ceil(), u64::MAX / 1_000_000_000 + 1);
}

#[test]
fn a_share_of_a_leaky_bucket_may_leave_no_queue() {
    let shaper = AlgorithmConfig::LeakyBucket {
        amount: 10,
        period: Nanos::from_secs(1),
        queue: 1,
    };
    // A quarter: 2 per second, no one waiting (strict pacing), as documented.
    assert_eq!(
        shaper.share(1, 4),
        AlgorithmConfig::LeakyBucket {
            amount: 2,
            period: Nanos::from_secs(1),
            queue: 0,
        }
    );
    assert_eq!(shaper.share(1, 4).build().unwrap().max_cost(), 1);
    // The amounts that admit never drop below one.
    let window = AlgorithmConfig::FixedWindow {
        limit: 3,
        window: Nanos::from_secs(1),
    };
    assert_eq!(
        window.share(1, 10),
        AlgorithmConfig::FixedWindow {
            limit: 1,
            window: Nanos::from_secs(1),
        }
    );
}
