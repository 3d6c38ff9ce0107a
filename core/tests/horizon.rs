//! Configs at the edge of time: every config that builds admits a fresh key's whole limit at
//! any `now` up to `Nanos::MAX_NOW`, and a config whose horizon would run past the end of
//! `u64` time there is refused at build with the exact maximum (issue 27, item 7).
//!
//! Pinned cases at and just past each algorithm's boundary, the reported configuration
//! (one permit per 200 000 days), and a proptest over configs of every scale.

use proptest::prelude::*;
use tollgate_core::{
    Algorithm, AlgorithmConfig, AnyAlgorithm, ConfigError, FixedWindow, Gcra, LeakyBucket, Nanos,
    PackedAlgorithm, SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};

fn cases() -> u32 {
    if cfg!(miri) {
        4
    } else {
        1024
    }
}

const DAY: u64 = 86_400_000_000_000;
/// 2025-10-09, as a Unix-epoch clock reads it.
const TODAY: Nanos = Nanos::new(1_760_000_000_000_000_000);
const H: u64 = Nanos::MAX_HORIZON.as_u64();

/// The instants every pinned case is checked at: the epoch, today, the last supported.
const NOWS: [Nanos; 3] = [Nanos::ZERO, TODAY, Nanos::MAX_NOW];

/// The decision a fresh key gets for `cost` at `now`.
fn fresh(algorithm: &AnyAlgorithm, now: Nanos, cost: u32) -> tollgate_core::Decision {
    let empty: &[u64] = &[];
    match algorithm {
        AnyAlgorithm::Packed(a) => a.decide(0, now, cost).map(|o| o.decision),
        AnyAlgorithm::Log(log) => log.decide(empty, now, cost).map(|o| o.decision),
    }
    .unwrap_or_else(|e| panic!("{algorithm:?}: cost {cost} refused as {e:?}"))
}

/// The configuration of the report: one permit per `period`, for each bucket.
fn one_per(period: Nanos) -> [(&'static str, AlgorithmConfig); 3] {
    [
        (
            "gcra",
            AlgorithmConfig::Gcra {
                limit: 1,
                period,
                burst: 1,
            },
        ),
        (
            "token bucket",
            AlgorithmConfig::TokenBucket {
                capacity: 1,
                refill_amount: 1,
                refill_period: period,
            },
        ),
        (
            "leaky bucket",
            AlgorithmConfig::LeakyBucket {
                amount: 1,
                period,
                queue: 0,
            },
        ),
    ]
}

/// The reported failure: one permit per ~200 000 days (or more) built, and then `now + T`
/// overflowed, so a fresh client's first request was denied, today and forever. Such a
/// config must not build.
#[test]
fn issue27_item7_a_config_that_can_never_admit_is_refused_at_build() {
    for period in [
        Nanos::new(200_000 * DAY),
        Nanos::new(213_000 * DAY),
        Nanos::MAX,
    ] {
        for (name, config) in one_per(period) {
            if let Ok(algorithm) = config.build() {
                let first = fresh(&algorithm, TODAY, 1);
                panic!(
                    "{name}, one per {} days: builds, and a fresh client's first request \
                     today is {first:?}",
                    period.as_u64() / DAY
                );
            }
        }
        assert!(Gcra::with_period(1, period).build().is_err());
        assert!(TokenBucket::new(1, 1, period).is_err());
        assert!(LeakyBucket::new(1, period, 0).is_err());
    }
}

#[test]
fn the_supported_range_and_the_horizon() {
    assert_eq!(Nanos::MAX_NOW.as_u64(), i64::MAX as u64);
    assert_eq!(H, 1 << 63);
    assert_eq!(Nanos::MAX_NOW.as_u64() + H, u64::MAX);
    // 2262-04-11: 106 751 days after 1970-01-01.
    assert_eq!(Nanos::MAX_NOW.as_u64() / DAY, 106_751);
}

#[test]
fn one_permit_per_period_at_and_past_the_horizon() {
    let longest = Nanos::new(H);
    let past = Nanos::new(H + 1);
    let too_long = Some(ConfigError::PeriodTooLong {
        max: Nanos::MAX_HORIZON,
    });
    for (name, config) in one_per(longest) {
        let algorithm = config.build().unwrap_or_else(|e| panic!("{name}: {e:?}"));
        for now in NOWS {
            let d = fresh(&algorithm, now, 1);
            assert!(d.allowed, "{name} at {now:?}: {d:?}");
            assert_eq!((d.remaining, d.delay), (0, Nanos::ZERO), "{name}");
            assert_eq!(d.reset_after, longest, "{name}");
        }
    }
    for (name, config) in one_per(past) {
        assert_eq!(config.build().err(), too_long, "{name}");
    }
    for (name, config) in one_per(Nanos::new(200_000 * DAY)) {
        assert_eq!(config.build().err(), too_long, "{name}");
    }
    // The same through each constructor.
    assert!(Gcra::with_period(1, longest).build().is_ok());
    assert_eq!(Gcra::with_period(1, past).build().err(), too_long);
    assert_eq!(Gcra::from_interval(H + 1, 1).err(), too_long);
    assert_eq!(Gcra::from_interval(u64::MAX, 1).err(), too_long);
    assert!(TokenBucket::new(1, 1, longest).is_ok());
    assert_eq!(TokenBucket::new(1, 1, past).err(), too_long);
    assert_eq!(TokenBucket::from_interval(1, past).err(), too_long);
    assert!(LeakyBucket::new(1, longest, 0).is_ok());
    assert_eq!(LeakyBucket::new(1, past, 0).err(), too_long);
    assert_eq!(LeakyBucket::from_interval(Nanos::MAX, 0).err(), too_long);
    // Two permits per period can never be this long: T = ⌈period / 2⌉ ≤ 2^63.
    assert!(Gcra::with_period(2, Nanos::MAX).burst(1).build().is_ok());
    assert_eq!(
        Gcra::with_period(2, Nanos::MAX).build(),
        Err(ConfigError::LimitTooLarge { max: 1 })
    );
    // The error says the maximum.
    assert_eq!(
        ConfigError::PeriodTooLong {
            max: Nanos::MAX_HORIZON
        }
        .to_string(),
        "period too long: at most 9223372036854775808 ns (9223372036.854775808s) per permit"
    );
}

#[test]
fn gcra_and_token_bucket_burst_at_and_past_the_horizon() {
    // 3 s per permit: at most ⌊2^63 / 3·10^9⌋ = 3 074 457 345 at once.
    let interval = 3_000_000_000;
    let max = 3_074_457_345;
    assert_eq!(H / interval, max);
    let gcra = Gcra::from_interval(interval, max).unwrap();
    assert_eq!(
        Gcra::from_interval(interval, max + 1),
        Err(ConfigError::LimitTooLarge { max })
    );
    assert_eq!(
        Gcra::with_period(1, Nanos::new(interval))
            .burst(max + 1)
            .build(),
        Err(ConfigError::LimitTooLarge { max })
    );
    let bucket = TokenBucket::from_interval(max, Nanos::new(interval)).unwrap();
    assert_eq!(
        TokenBucket::from_interval(max + 1, Nanos::new(interval)),
        Err(ConfigError::LimitTooLarge { max })
    );
    assert_eq!(
        TokenBucket::new(max + 1, 1, Nanos::new(interval)),
        Err(ConfigError::LimitTooLarge { max })
    );
    // The whole burst at once, up to the last supported instant; then a deny. Its
    // retry_after is one interval, except where that retry's TAT would pass u64 time
    // (a deny's hint only, past MAX_NOW + τ − T): there it reads "never", as before.
    let cost = u32::try_from(max).unwrap();
    for (name, a) in [
        ("gcra", PackedAlgorithm::from(gcra)),
        ("token bucket", PackedAlgorithm::from(bucket)),
    ] {
        for now in NOWS {
            let out = a.decide(0, now, cost).unwrap();
            assert!(out.decision.allowed, "{name} at {now:?}");
            let next = out.next.unwrap();
            let d = a.decide(next, now, 1).unwrap().decision;
            assert!(!d.allowed, "{name}");
            let hint = if now == Nanos::MAX_NOW {
                Nanos::MAX
            } else {
                Nanos::new(interval)
            };
            assert_eq!(d.retry_after, hint, "{name} at {now:?}");
        }
    }
    // The old bound was u64 ns: a burst of u64::MAX per second reported 18 446 744 073.
    assert_eq!(
        Gcra::per_second(1).burst(u64::MAX).build(),
        Err(ConfigError::LimitTooLarge { max: 9_223_372_036 })
    );
}

#[test]
fn leaky_bucket_queue_at_and_past_the_horizon() {
    // One interval of 2^63 ns: no queue at all.
    assert!(LeakyBucket::from_interval(Nanos::new(H), 0).is_ok());
    assert_eq!(
        LeakyBucket::from_interval(Nanos::new(H), 1),
        Err(ConfigError::LimitTooLarge { max: 0 })
    );
    // 3 s per unit: (2Q + 1)·3 s ≤ 2^63 ns for Q ≤ (3 074 457 345 − 1) / 2.
    let interval = Nanos::from_secs(3);
    let max = 1_537_228_672;
    let shaper = LeakyBucket::from_interval(interval, max).unwrap();
    assert_eq!(
        LeakyBucket::from_interval(interval, max + 1),
        Err(ConfigError::LimitTooLarge { max })
    );
    assert_eq!(
        LeakyBucket::new(1, interval, max + 1),
        Err(ConfigError::LimitTooLarge { max })
    );
    assert_eq!(
        LeakyBucket::from_interval(Nanos::new(1), u64::MAX),
        Err(ConfigError::LimitTooLarge { max: (1 << 62) - 1 })
    );
    assert!(LeakyBucket::from_interval(Nanos::new(1), (1 << 62) - 1).is_ok());
    let q = u32::try_from(max).unwrap();
    for now in NOWS {
        // The furthest the drain time can run: Q units queued, then the largest request
        // (Q + 1) behind a full wait: (2Q + 1)·T ahead, still admitted.
        let first = shaper.decide(0, now, q).unwrap();
        assert!(first.decision.allowed, "at {now:?}");
        let last = shaper.decide(first.next.unwrap(), now, q + 1).unwrap();
        assert!(last.decision.allowed, "at {now:?}: {:?}", last.decision);
        assert_eq!(
            last.decision.delay,
            Nanos::new(u64::from(q) * 3_000_000_000)
        );
        // ...and a full queue says how long, not "never".
        let full = shaper.decide(last.next.unwrap(), now, 1).unwrap().decision;
        assert!(!full.allowed);
        assert!(full.retry_after < Nanos::MAX, "at {now:?}: {full:?}");
    }
    // The old bound let a queue of 1 at 2^63 − 1 ns build with a max cost of 2.
    assert_eq!(
        LeakyBucket::from_interval(Nanos::new(u64::MAX / 2), 1),
        Err(ConfigError::LimitTooLarge { max: 0 })
    );
}

/// The window algorithms record nothing ahead of `now` and keep the whole window index:
/// no window length is too long, and a fresh key gets its whole limit at any `now`, even
/// past the supported range.
#[test]
fn window_algorithms_admit_at_every_window_length_and_instant() {
    let windows = [
        1,
        2,
        1_000_000_000,
        200_000 * DAY,
        H - 1,
        H,
        H + 1,
        u64::MAX - 1,
        u64::MAX,
    ];
    for window in windows.map(Nanos::new) {
        let mut algorithms: Vec<(&str, AnyAlgorithm)> = Vec::new();
        for limit in [1, 3, 1_000] {
            if let Ok(a) = FixedWindow::new(limit, window) {
                algorithms.push(("fixed window", a.into()));
            }
            if let Ok(a) = SlidingWindowCounter::new(limit, window) {
                algorithms.push(("sliding counter", a.into()));
            }
            algorithms.push((
                "sliding log",
                SlidingWindowLog::new(limit, window).unwrap().into(),
            ));
        }
        // The largest limits each layout takes at this window.
        let max = |e: ConfigError| match e {
            ConfigError::LimitTooLarge { max } => max,
            other => panic!("{other:?}"),
        };
        if let Err(e) = FixedWindow::new(u64::MAX, window) {
            if let Ok(a) = FixedWindow::new(max(e), window) {
                algorithms.push(("fixed window at its max", a.into()));
            }
        }
        if let Err(e) = SlidingWindowCounter::new(u64::MAX, window) {
            if let Ok(a) = SlidingWindowCounter::new(max(e), window) {
                algorithms.push(("sliding counter at its max", a.into()));
            }
        }
        for (name, a) in &algorithms {
            for now in NOWS
                .into_iter()
                .chain([Nanos::new(u64::MAX - 1), Nanos::MAX])
            {
                let limit = a.limit();
                let cost = u32::try_from(limit).unwrap_or(u32::MAX);
                let d = fresh(a, now, cost);
                assert!(d.allowed, "{name}, window {window:?}, at {now:?}: {d:?}");
                assert_eq!(d.remaining, limit - u64::from(cost), "{name}");
            }
        }
    }
    // Their limits are bounded by the layout only; a huge window leaves the most room.
    assert_eq!(
        FixedWindow::new(u64::MAX, Nanos::MAX),
        Err(ConfigError::LimitTooLarge { max: (1 << 63) - 1 })
    );
    assert_eq!(
        SlidingWindowCounter::new(u64::MAX, Nanos::MAX),
        Err(ConfigError::LimitTooLarge { max: (1 << 31) - 1 })
    );
}

/// A `u64` of any magnitude: every bit length equally likely, and the boundaries.
fn any_scale() -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => (0u32..64, any::<u64>()).prop_map(|(shift, x)| x >> shift),
        1 => prop_oneof![
            Just(0u64), Just(1), Just(2), Just(3),
            Just(H - 1), Just(H), Just(H + 1),
            Just(H / 2), Just(H / 3), Just(u64::MAX - 1), Just(u64::MAX),
        ],
    ]
}

fn any_config() -> impl Strategy<Value = AlgorithmConfig> {
    let n = any_scale;
    let t = || any_scale().prop_map(Nanos::new);
    prop_oneof![
        (n(), t(), n()).prop_map(|(limit, period, burst)| AlgorithmConfig::Gcra {
            limit,
            period,
            burst
        }),
        (n(), n(), t()).prop_map(|(capacity, refill_amount, refill_period)| {
            AlgorithmConfig::TokenBucket {
                capacity,
                refill_amount,
                refill_period,
            }
        }),
        (n(), t(), n()).prop_map(|(amount, period, queue)| AlgorithmConfig::LeakyBucket {
            amount,
            period,
            queue
        }),
        (n(), t()).prop_map(|(limit, window)| AlgorithmConfig::FixedWindow { limit, window }),
        (n(), t())
            .prop_map(|(limit, window)| AlgorithmConfig::SlidingWindowCounter { limit, window }),
        (1u64..=64, t())
            .prop_map(|(limit, window)| AlgorithmConfig::SlidingWindowLog { limit, window }),
    ]
}

/// A `now` anywhere in the supported range, its ends more often.
fn supported_now() -> impl Strategy<Value = Nanos> {
    prop_oneof![
        4 => (0..=Nanos::MAX_NOW.as_u64()).prop_map(Nanos::new),
        1 => (0u64..1_000).prop_map(Nanos::new),
        1 => (0u64..1_000).prop_map(|back| Nanos::new(Nanos::MAX_NOW.as_u64() - back)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// Every config that builds admits a fresh key's first request at every supported
    /// `now`, and its whole largest cost at once; the request after that gets an exact
    /// answer (a bucket never says "retry after the end of time"). A config that does not
    /// build says why with a typed error.
    #[test]
    fn every_config_that_builds_admits_its_first_request(config in any_config(), now in supported_now()) {
        let algorithm = match config.build() {
            Ok(a) => a,
            Err(e) => {
                // Rejections are typed, and a horizon error states the maximum.
                if let ConfigError::PeriodTooLong { max } = e {
                    prop_assert_eq!(max, Nanos::MAX_HORIZON);
                }
                return Ok(());
            }
        };
        let first = fresh(&algorithm, now, 1);
        prop_assert!(first.allowed, "{:?} at {:?}: {:?}", config, now, first);
        let all = u32::try_from(algorithm.max_cost()).unwrap_or(u32::MAX);
        let whole = fresh(&algorithm, now, all);
        prop_assert!(whole.allowed, "{:?} at {:?}, cost {}: {:?}", config, now, all, whole);
        if let AnyAlgorithm::Packed(a) = algorithm {
            if u64::from(all) == a.max_cost() {
                // All of it taken: the next request waits.
                let full = a.decide(0, now, all).unwrap().next.unwrap();
                let then = a.decide(full, now, 1).unwrap().decision;
                prop_assert!(!then.allowed, "{:?} at {:?}, after cost {}: {:?}", config, now, all, then);
            }
            if let PackedAlgorithm::LeakyBucket(l) = a {
                // The furthest a drain time runs: Q queued, then the largest cost behind them.
                let q = u32::try_from(l.queue_depth()).unwrap_or(u32::MAX - 1);
                let queued = a.decide(0, now, q).unwrap();
                let state = queued.next.unwrap_or(0);
                let last = a.decide(state, now, q + 1).unwrap().decision;
                prop_assert!(last.allowed, "{:?} at {:?}: {:?}", config, now, last);
            }
        }
    }
}
