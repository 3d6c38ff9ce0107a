//! The packed cells and the plain reference models agree decision by decision on random
//! traces: random parameters, costs (zero, within capacity, beyond it, huge), peeks, and
//! times that jump forward, stand still and go backwards, near zero and near the end of
//! `u64` time.

use proptest::prelude::*;
use tollgate_core::reference::{
    FixedWindowModel, GcraModel, LeakyBucketModel, SlidingWindowCounterModel, SlidingWindowLogModel,
};
use tollgate_core::{
    Decision, FixedWindow, Gcra, InsufficientCapacity, LeakyBucket, LogRing, Nanos,
    SlidingWindowCounter, SlidingWindowLog, StateCell, TokenBucket,
};

type Answer = Result<Decision, InsufficientCapacity>;

/// One step of a trace: move time by `delta` (may be negative), then check or peek `cost`.
#[derive(Clone, Debug)]
struct Step {
    delta: i64,
    cost: u32,
    peek: bool,
}

fn cases() -> u32 {
    if cfg!(miri) {
        4
    } else {
        512
    }
}

/// Trace length bound: long traces natively, short ones under miri's interpreter.
fn trace_len() -> usize {
    if cfg!(miri) {
        12
    } else {
        60
    }
}

/// A start time: near zero, in the middle, or close to the end of u64 time.
fn start() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0..1_000_000u64,
        2 => (1u64 << 60)..(1u64 << 60) + 1_000_000,
        1 => (u64::MAX - 1_000_000)..=u64::MAX,
    ]
}

/// Steps whose time moves are scaled to `scale` (an interval or window) and whose costs
/// straddle `max_cost`.
fn steps(scale: u64, max_cost: u64) -> impl Strategy<Value = Vec<Step>> {
    let scale = scale.min(i64::MAX as u64 / 8) as i64;
    let delta = prop_oneof![
        3 => Just(0i64),
        6 => 0..=scale,
        2 => 0..=scale * 4,
        1 => -scale..0,
        1 => Just(i64::MIN / 2),
        1 => Just(i64::MAX / 2),
    ];
    let max_cost = max_cost.min(u64::from(u32::MAX - 2)) as u32;
    let cost = prop_oneof![
        6 => Just(1u32),
        3 => 0..=max_cost + 2,
        1 => Just(u32::MAX),
    ];
    prop::collection::vec((delta, cost, prop::bool::weighted(0.15)), 1..trace_len()).prop_map(|v| {
        v.into_iter()
            .map(|(delta, cost, peek)| Step { delta, cost, peek })
            .collect()
    })
}

/// Runs the trace through both executors and asserts they agree at every step.
fn agree(
    start: u64,
    trace: &[Step],
    mut cell: impl FnMut(Nanos, u32, bool) -> Answer,
    mut model: impl FnMut(u64, u32, bool) -> Answer,
) -> Result<(), TestCaseError> {
    let mut now = start;
    for (i, step) in trace.iter().enumerate() {
        now = now.saturating_add_signed(step.delta);
        let got = cell(Nanos::new(now), step.cost, step.peek);
        let want = model(now, step.cost, !step.peek);
        prop_assert_eq!(
            got,
            want,
            "step {} at now={} cost={} peek={}",
            i,
            now,
            step.cost,
            step.peek
        );
        if let Ok(d) = got {
            prop_assert!(d.remaining <= d.limit);
            prop_assert_eq!(d.allowed, d.retry_after == Nanos::ZERO);
            prop_assert!(d.allowed || d.delay == Nanos::ZERO);
        }
    }
    Ok(())
}

/// Executes a packed algorithm on a `StateCell`, as a check or a peek.
fn cell_of<A: tollgate_core::Algorithm>(algorithm: A) -> impl FnMut(Nanos, u32, bool) -> Answer {
    let cell = StateCell::new();
    move |now, cost, peek| {
        if peek {
            cell.peek_at(&algorithm, now, cost)
        } else {
            cell.check_at(&algorithm, now, cost)
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn gcra_cell_matches_model(interval in 1u64..=10_000, burst in 1u64..=16, start in start(),
                               trace in steps(160_000, 16)) {
        let gcra = Gcra::from_interval(interval, burst).unwrap();
        let mut model = GcraModel::new(&gcra);
        agree(start, &trace, cell_of(gcra), |n, c, k| model.check(n, c, k))?;
    }

    #[test]
    fn token_bucket_cell_matches_model(interval in 1u64..=10_000, capacity in 1u64..=16,
                                       start in start(), trace in steps(160_000, 16)) {
        let bucket = TokenBucket::from_interval(capacity, Nanos::new(interval)).unwrap();
        let mut model = GcraModel::token_bucket(&bucket);
        agree(start, &trace, cell_of(bucket), |n, c, k| model.check(n, c, k))?;
    }

    #[test]
    fn leaky_bucket_cell_matches_model(interval in prop_oneof![1u64..=10_000, Just(u64::MAX / 3)],
                                       queue in 0u64..=8, start in start(), trace in steps(90_000, 8)) {
        // Huge intervals with a queue can overflow the horizon: a config error, not a case.
        let Ok(bucket) = LeakyBucket::from_interval(Nanos::new(interval), queue) else { return Ok(()) };
        let mut model = LeakyBucketModel::new(&bucket);
        agree(start, &trace, cell_of(bucket), |n, c, k| model.check(n, c, k))?;
    }

    #[test]
    fn fixed_window_cell_matches_model(limit in 1u64..=16, window in 64u64..=100_000,
                                       start in start(), trace in steps(100_000, 16)) {
        let fixed = FixedWindow::new(limit, Nanos::new(window)).unwrap();
        let mut model = FixedWindowModel::new(&fixed);
        agree(start, &trace, cell_of(fixed), |n, c, k| model.check(n, c, k))?;
    }

    #[test]
    fn sliding_counter_cell_matches_model(limit in 1u64..=16, window in 1024u64..=1_000_000,
                                          start in start(), trace in steps(1_000_000, 16)) {
        let counter = SlidingWindowCounter::new(limit, Nanos::new(window)).unwrap();
        let mut model = SlidingWindowCounterModel::new(&counter);
        agree(start, &trace, cell_of(counter), |n, c, k| model.check(n, c, k))?;
    }

    #[test]
    fn sliding_log_ring_matches_model(limit in 1u64..=8, window in 1u64..=100_000,
                                      start in start(), trace in steps(100_000, 8)) {
        let log = SlidingWindowLog::new(limit, Nanos::new(window)).unwrap();
        let ring = LogRing::<8>::new();
        let mut model = SlidingWindowLogModel::new(&log);
        agree(
            start,
            &trace,
            |now, cost, peek| if peek { ring.peek_at(&log, now, cost) } else { ring.check_at(&log, now, cost) },
            |n, c, k| model.check(n, c, k),
        )?;
    }

    /// Arbitrary (even impossible) packed states never panic any algorithm.
    #[test]
    fn any_state_any_input_is_total(state in any::<u64>(), now in any::<u64>(), cost in prop_oneof![0u32..=70, any::<u32>()],
                                    interval in 1u64..=u64::MAX, burst in 1u64..=64, window in 1u64..=u64::MAX) {
        use tollgate_core::Algorithm;
        let now = Nanos::new(now);
        if let Ok(a) = Gcra::from_interval(interval, burst) { let _ = a.decide(state, now, cost); let _ = a.is_idle(state, now); }
        if let Ok(a) = LeakyBucket::from_interval(Nanos::new(interval), burst) { let _ = a.decide(state, now, cost); }
        if let Ok(a) = FixedWindow::new(burst, Nanos::new(window)) { let _ = a.decide(state, now, cost); let _ = a.is_idle(state, now); }
        if let Ok(a) = SlidingWindowCounter::new(burst, Nanos::new(window)) { let _ = a.decide(state, now, cost); let _ = a.is_idle(state, now); }
    }
}
