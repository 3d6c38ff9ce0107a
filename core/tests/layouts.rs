//! Packed layouts round-trip, and their boundaries hold: the full window index of any
//! `u64` time fits beside counters as large as the config accepts.

use proptest::prelude::*;
use tollgate_core::{Algorithm, ConfigError, FixedWindow, Nanos, SlidingWindowCounter};

fn cases() -> u32 {
    if cfg!(miri) {
        8
    } else {
        1024
    }
}

/// The largest limit a window algorithm accepts for `window`, from its own error.
fn max_limit(build: impl Fn(u64) -> Result<(), ConfigError>) -> u64 {
    match build(u64::MAX) {
        Err(ConfigError::LimitTooLarge { max }) => max,
        other => panic!("expected LimitTooLarge, got {other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn fixed_window_round_trips_at_its_extremes(window in 2u64..=u64::MAX, now in any::<u64>(), pick in any::<u64>()) {
        let max = max_limit(|l| FixedWindow::new(l, Nanos::new(window)).map(|_| ()));
        prop_assume!(max >= 1);
        let fixed = FixedWindow::new(max, Nanos::new(window)).unwrap();
        let index = now / window;
        for count in [0, 1, max, pick % (max + 1)] {
            prop_assert_eq!(fixed.unpack(fixed.pack(index, count)), (index, count));
        }
        // The largest index any time can have still fits with the largest count.
        let last = u64::MAX / window;
        prop_assert_eq!(fixed.unpack(fixed.pack(last, max)), (last, max));
        // One more than the maximum limit is refused.
        prop_assert_eq!(FixedWindow::new(max + 1, Nanos::new(window)), Err(ConfigError::LimitTooLarge { max }));
    }

    #[test]
    fn sliding_counter_round_trips_at_its_extremes(window in 2u64..=u64::MAX, now in any::<u64>(),
                                                   a in any::<u64>(), b in any::<u64>()) {
        let max = max_limit(|l| SlidingWindowCounter::new(l, Nanos::new(window)).map(|_| ()));
        prop_assume!(max >= 1);
        let counter = SlidingWindowCounter::new(max, Nanos::new(window)).unwrap();
        let index = now / window;
        for (prev, curr) in [(0, 0), (max, max), (max, 0), (0, max), (a % (max + 1), b % (max + 1))] {
            prop_assert_eq!(counter.unpack(counter.pack(index, prev, curr)), (index, prev, curr));
        }
        let last = u64::MAX / window;
        prop_assert_eq!(counter.unpack(counter.pack(last, max, max)), (last, max, max));
        prop_assert_eq!(SlidingWindowCounter::new(max + 1, Nanos::new(window)), Err(ConfigError::LimitTooLarge { max }));
    }

    /// A window algorithm at its maximum limit, at the end of time, admits exactly its limit.
    #[test]
    fn maximum_limits_work_at_the_end_of_time(window in 1_000_000u64..=u64::MAX / 2) {
        let max = max_limit(|l| FixedWindow::new(l, Nanos::new(window)).map(|_| ()));
        let fixed = FixedWindow::new(max, Nanos::new(window)).unwrap();
        let end = Nanos::MAX;
        let d = fixed.decide(0, end, u32::try_from(max).unwrap_or(u32::MAX)).unwrap();
        prop_assert!(d.decision.allowed);
        let state = d.next.unwrap();
        prop_assert_eq!(fixed.unpack(state), (u64::MAX / window, u64::from(u32::try_from(max).unwrap_or(u32::MAX))));
    }
}

#[test]
fn window_limits_documented_in_the_crate_hold() {
    let max = |w: Nanos| max_limit(|l| SlidingWindowCounter::new(l, w).map(|_| ()));
    assert_eq!(max(Nanos::from_secs(1)), 16_383);
    assert_eq!(max(Nanos::from_secs(60)), 131_071);
    let fixed = |w: Nanos| max_limit(|l| FixedWindow::new(l, w).map(|_| ()));
    assert_eq!(fixed(Nanos::from_secs(1)), 536_870_911);
    assert_eq!(fixed(Nanos::from_millis(1)), 524_287);
}
