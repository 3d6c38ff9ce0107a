//! Real threads on one cell, with time injected: `k` threads × `m` checks at a fixed `now`,
//! then `now` advanced in steps, admit exactly as many as the sequential model does for the
//! same arrivals. Counts, never timings.

use std::sync::Barrier;
use std::thread;

use tollgate_core::reference::{
    FixedWindowModel, GcraModel, LeakyBucketModel, SlidingWindowCounterModel, SlidingWindowLogModel,
};
use tollgate_core::{
    Algorithm, Decision, FixedWindow, Gcra, LeakyBucket, Nanos, SlidingLogLimiter,
    SlidingWindowCounter, SlidingWindowLog, StateCell, TokenBucket,
};

const THREADS: usize = if cfg!(miri) { 2 } else { 4 };
const PER_STEP: usize = if cfg!(miri) { 3 } else { 400 };
const STEPS: u64 = if cfg!(miri) { 2 } else { 25 };
const STEP: u64 = 37_000_000; // 37 ms between rounds

/// Runs `STEPS` rounds; in each, every thread makes `PER_STEP` one-permit checks at the same
/// `now`. Returns the admitted decisions of each round.
fn hammer(check: impl Fn(Nanos) -> Decision + Sync) -> Vec<Vec<Decision>> {
    (0..STEPS)
        .map(|step| {
            let now = Nanos::new(1_000_000_000 + step * STEP);
            let barrier = Barrier::new(THREADS);
            thread::scope(|s| {
                let handles: Vec<_> = (0..THREADS)
                    .map(|_| {
                        s.spawn(|| {
                            barrier.wait();
                            (0..PER_STEP)
                                .map(|_| check(now))
                                .filter(|d| d.allowed)
                                .collect::<Vec<_>>()
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .flat_map(|h| h.join().unwrap())
                    .collect()
            })
        })
        .collect()
}

/// The sequential model's admissions per round for the same arrivals.
fn sequential(mut check: impl FnMut(u64) -> bool) -> Vec<usize> {
    (0..STEPS)
        .map(|step| {
            let now = 1_000_000_000 + step * STEP;
            (0..THREADS * PER_STEP).filter(|_| check(now)).count()
        })
        .collect()
}

fn counts(rounds: &[Vec<Decision>]) -> Vec<usize> {
    rounds.iter().map(Vec::len).collect()
}

fn packed<A: Algorithm + Sync>(algorithm: A, model: impl FnMut(u64) -> bool) {
    let cell = StateCell::new();
    let rounds = hammer(|now| cell.check_at(&algorithm, now, 1).unwrap());
    assert_eq!(counts(&rounds), sequential(model));
    // Each admission saw a distinct `remaining`: no two threads were handed the same permit.
    for round in &rounds {
        let mut remaining: Vec<u64> = round.iter().map(|d| d.remaining).collect();
        remaining.sort_unstable();
        remaining.dedup();
        assert_eq!(
            remaining.len(),
            round.len(),
            "two admissions shared one permit"
        );
    }
}

#[test]
fn gcra_under_threads_matches_the_sequential_model() {
    let gcra = Gcra::per_second(100).burst(50).build().unwrap();
    let mut model = GcraModel::new(&gcra);
    packed(gcra, |now| model.check(now, 1, true).unwrap().allowed);
}

#[test]
fn token_bucket_under_threads_matches_the_sequential_model() {
    let bucket = TokenBucket::new(30, 40, Nanos::from_secs(1)).unwrap();
    let mut model = GcraModel::token_bucket(&bucket);
    packed(bucket, |now| model.check(now, 1, true).unwrap().allowed);
}

#[test]
fn fixed_window_under_threads_matches_the_sequential_model() {
    let fixed = FixedWindow::new(45, Nanos::from_millis(100)).unwrap();
    let mut model = FixedWindowModel::new(&fixed);
    packed(fixed, |now| model.check(now, 1, true).unwrap().allowed);
}

#[test]
fn sliding_counter_under_threads_matches_the_sequential_model() {
    let counter = SlidingWindowCounter::new(60, Nanos::from_millis(100)).unwrap();
    let mut model = SlidingWindowCounterModel::new(&counter);
    packed(counter, |now| model.check(now, 1, true).unwrap().allowed);
}

#[test]
fn leaky_bucket_under_threads_hands_out_each_queue_slot_once() {
    let bucket = LeakyBucket::new(50, Nanos::from_secs(1), 20).unwrap();
    let mut model = LeakyBucketModel::new(&bucket);
    let cell = StateCell::new();
    let rounds = hammer(|now| cell.check_at(&bucket, now, 1).unwrap());
    assert_eq!(
        counts(&rounds),
        sequential(|now| model.check(now, 1, true).unwrap().allowed)
    );
    for round in &rounds {
        let mut delays: Vec<Nanos> = round.iter().map(|d| d.delay).collect();
        delays.sort_unstable();
        delays.dedup();
        assert_eq!(
            delays.len(),
            round.len(),
            "two requests were given the same departure slot"
        );
    }
}

#[test]
fn sliding_log_under_threads_matches_the_sequential_model() {
    let log = SlidingWindowLog::new(64, Nanos::from_millis(100)).unwrap();
    let limiter = SlidingLogLimiter::<64>::new(log).unwrap();
    let mut model = SlidingWindowLogModel::new(&log);
    let rounds = hammer(|now| limiter.check_at(now));
    assert_eq!(
        counts(&rounds),
        sequential(|now| model.check(now, 1, true).unwrap().allowed)
    );
    assert_eq!(
        limiter.ring().recorded(),
        counts(&rounds).iter().sum::<usize>() as u64
    );
}

#[test]
fn mixed_costs_never_exceed_the_burst_at_one_instant() {
    // With mixed costs the order matters, but no order admits more than the burst.
    let gcra = Gcra::per_second(10).burst(100).build().unwrap();
    let cell = StateCell::new();
    let now = Nanos::from_secs(5);
    let admitted: u64 = thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS as u32)
            .map(|t| {
                let (cell, gcra) = (&cell, &gcra);
                s.spawn(move || {
                    (0..PER_STEP as u32)
                        .map(|i| 1 + (i + t) % 7)
                        .filter(|&cost| cell.check_at(gcra, now, cost).unwrap().allowed)
                        .map(u64::from)
                        .sum::<u64>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    // Conservation: every permit is either admitted exactly once or still available.
    let left = cell.peek_at(&gcra, now, 1).unwrap();
    let available = left.remaining + u64::from(left.allowed);
    assert_eq!(admitted + available, 100);
    if !cfg!(miri) {
        // Each thread asks for cost 1 every 7th request (hundreds in all, far more than the
        // burst), so some cost-1 request found the bucket empty, and nothing was left after
        // it: everything was admitted.
        assert_eq!(admitted, 100);
    }
}
