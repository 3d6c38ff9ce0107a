//! Each algorithm's guarantee, checked on random monotone traces (property tests):
//!
//! - GCRA / token bucket: admitted in any interval `[t_i, t_j]` ≤ `b + (t_j − t_i)/T`;
//! - leaky bucket: admitted departures (`now + delay`) spaced ≥ `cost/r`, delays ≤ `Q/r`;
//! - fixed window: ≤ `L` per window;
//! - sliding window log: ≤ `L` in every window of length `W`;
//! - sliding window counter: ≤ `L` per fixed window and < `2·L` in any sliding window;
//! - every algorithm: `retry_after` is exact and `reset_after` reaches a fresh-equivalent state.

use proptest::prelude::*;
use tollgate_core::{
    Algorithm, FixedWindow, Gcra, LeakyBucket, LogRing, Nanos, SlidingWindowCounter,
    SlidingWindowLog, StateCell, TokenBucket,
};

fn cases() -> u32 {
    if cfg!(miri) {
        4
    } else {
        384
    }
}

/// Trace length bound: long traces natively, short ones under miri's interpreter.
fn trace_len() -> usize {
    if cfg!(miri) {
        16
    } else {
        120
    }
}

/// A monotone trace of `(now, cost)` with gaps up to `scale`.
fn monotone(scale: u64, max_cost: u32) -> impl Strategy<Value = Vec<(u64, u32)>> {
    prop::collection::vec(
        (prop_oneof![2 => Just(0u64), 5 => 0..=scale], 1..=max_cost),
        1..trace_len(),
    )
    .prop_map(|steps| {
        let mut now = 1_000_000u64;
        steps
            .into_iter()
            .map(|(gap, cost)| {
                now += gap;
                (now, cost)
            })
            .collect()
    })
}

/// Runs a packed algorithm over `trace`, returning `(now, cost, delay)` of each admission.
fn admitted<A: Algorithm>(algorithm: &A, trace: &[(u64, u32)]) -> Vec<(u64, u64, u64)> {
    let cell = StateCell::new();
    trace
        .iter()
        .filter_map(|&(now, cost)| {
            let d = cell.check_at(algorithm, Nanos::new(now), cost).ok()?;
            d.allowed
                .then_some((now, u64::from(cost), d.delay.as_u64()))
        })
        .collect()
}

/// Total cost admitted with time in `(from, to]`.
fn admitted_in(admissions: &[(u64, u64, u64)], from: u64, to: u64) -> u64 {
    admissions
        .iter()
        .filter(|a| a.0 > from && a.0 <= to)
        .map(|a| a.1)
        .sum()
}

fn gcra_bound(
    admissions: &[(u64, u64, u64)],
    interval: u64,
    burst: u64,
) -> Result<(), TestCaseError> {
    for (i, first) in admissions.iter().enumerate() {
        let mut total = 0;
        for last in &admissions[i..] {
            total += last.1;
            // total ≤ b + (t_j − t_i)/T  ⇔  (total − b)·T ≤ t_j − t_i
            let excess = total.saturating_sub(burst);
            prop_assert!(
                excess * interval <= last.0 - first.0,
                "{} admitted in {} ns",
                total,
                last.0 - first.0
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn gcra_never_exceeds_burst_plus_rate(interval in 1u64..=5_000, burst in 1u64..=12,
                                          trace in monotone(20_000, 4)) {
        let gcra = Gcra::from_interval(interval, burst).unwrap();
        gcra_bound(&admitted(&gcra, &trace), interval, burst)?;
    }

    #[test]
    fn token_bucket_never_exceeds_capacity_plus_refill(interval in 1u64..=5_000, capacity in 1u64..=12,
                                                      trace in monotone(20_000, 4)) {
        let bucket = TokenBucket::from_interval(capacity, Nanos::new(interval)).unwrap();
        gcra_bound(&admitted(&bucket, &trace), interval, capacity)?;
    }

    #[test]
    fn leaky_bucket_departures_are_paced(interval in 1u64..=5_000, queue in 0u64..=6,
                                         trace in monotone(10_000, 3)) {
        let bucket = LeakyBucket::from_interval(Nanos::new(interval), queue).unwrap();
        let admissions = admitted(&bucket, &trace);
        for pair in admissions.windows(2) {
            let (depart_a, cost_a) = (pair[0].0 + pair[0].2, pair[0].1);
            let depart_b = pair[1].0 + pair[1].2;
            prop_assert!(depart_b >= depart_a + cost_a * interval, "departures {} then {}", depart_a, depart_b);
        }
        for a in &admissions {
            prop_assert!(a.2 <= queue * interval, "delay {} beyond the queue", a.2);
        }
    }

    #[test]
    fn fixed_window_never_exceeds_limit_per_window(limit in 1u64..=12, window in 100u64..=50_000,
                                                   trace in monotone(20_000, 4)) {
        let fixed = FixedWindow::new(limit, Nanos::new(window)).unwrap();
        let admissions = admitted(&fixed, &trace);
        for a in &admissions {
            let index = a.0 / window;
            let in_window: u64 = admissions.iter().filter(|b| b.0 / window == index).map(|b| b.1).sum();
            prop_assert!(in_window <= limit);
        }
    }

    #[test]
    fn sliding_counter_bounds(limit in 1u64..=12, window in 2_000u64..=50_000, trace in monotone(20_000, 4)) {
        let counter = SlidingWindowCounter::new(limit, Nanos::new(window)).unwrap();
        let admissions = admitted(&counter, &trace);
        for a in &admissions {
            let index = a.0 / window;
            let per_window: u64 = admissions.iter().filter(|b| b.0 / window == index).map(|b| b.1).sum();
            prop_assert!(per_window <= limit);
            prop_assert!(admitted_in(&admissions, a.0.saturating_sub(window), a.0) < 2 * limit);
        }
    }

    #[test]
    fn sliding_log_never_exceeds_limit_in_any_window(limit in 1u64..=8, window in 1u64..=50_000,
                                                     trace in monotone(20_000, 3)) {
        let log = SlidingWindowLog::new(limit, Nanos::new(window)).unwrap();
        let ring = LogRing::<8>::new();
        let admissions: Vec<(u64, u64, u64)> = trace
            .iter()
            .filter_map(|&(now, cost)| {
                let d = ring.check_at(&log, Nanos::new(now), cost).ok()?;
                d.allowed.then_some((now, u64::from(cost), 0))
            })
            .collect();
        for a in &admissions {
            prop_assert!(admitted_in(&admissions, a.0.saturating_sub(window), a.0) <= limit);
        }
    }

    /// After a deny, the same request is refused 1 ns before `retry_after` and admitted at
    /// it; after any decision, the state at `now + reset_after` is a fresh key's.
    #[test]
    fn retry_after_and_reset_after_are_exact(kind in 0usize..5, limit in 1u64..=8, scale in 1_000u64..=60_000,
                                             trace in monotone(30_000, 3)) {
        let algorithm: tollgate_core::PackedAlgorithm = match kind {
            0 => Gcra::from_interval(scale, limit).unwrap().into(),
            1 => TokenBucket::from_interval(limit, Nanos::new(scale)).unwrap().into(),
            2 => LeakyBucket::from_interval(Nanos::new(scale), limit).unwrap().into(),
            3 => FixedWindow::new(limit, Nanos::new(scale)).unwrap().into(),
            _ => SlidingWindowCounter::new(limit, Nanos::new(scale)).unwrap().into(),
        };
        let cell = StateCell::new();
        for &(now, cost) in &trace {
            let cost = cost.min(limit as u32);
            let d = cell.check_at(&algorithm, Nanos::new(now), cost).unwrap();
            let state = cell.load();
            let reset_at = Nanos::new(now) + d.reset_after;
            prop_assert!(algorithm.is_idle(state, reset_at), "not fresh at reset_after");
            if !d.allowed {
                let retry_at = Nanos::new(now) + d.retry_after;
                let before = algorithm.peek(state, retry_at - Nanos::new(1), cost).unwrap().decision;
                let at = algorithm.peek(state, retry_at, cost).unwrap().decision;
                prop_assert!(!before.allowed, "admitted before retry_after");
                prop_assert!(at.allowed, "refused at retry_after");
            }
        }
    }
}
