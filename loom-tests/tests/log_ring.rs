//! loom models of `LogRing`, the sliding window log's sequence-locked ring (a head word
//! with a writer bit, plus `N` timestamp slots), and its deliberately broken twin.
//!
//! Each model asserts after every explored execution that some sequential order, run
//! through `SlidingWindowLogModel`, gives the same answers and the same final ring (read
//! back by peeks at every instant the in-window count can change); models whose `now`
//! values all lie within one window also assert directly that at most `L` permits were
//! admitted.
//!
//! Two threads per model, with three operations each: with three threads, two of them can
//! wait on the writer bit at once, and loom's scheduler then alternates between the two
//! yielding waiters forever instead of running the writer (a known loom limitation,
//! tokio-rs/loom issue 53: "With two threads blocked on a third one, the scheduler
//! oscillates between the two blocked threads"), so the model never ends. Two threads
//! still cover every race of the protocol: a claim racing a claim, a reader racing a
//! writer's slot stores, a reader validating against a changed head.
#![cfg(tollgate_loom)]

use tollgate_core::{Nanos, SlidingWindowLog};
use tollgate_loom_tests::{BrokenLogRing, LogOracle, LogSubject, ModelRun, Op};

const WINDOW: u64 = 100;

fn log(limit: u64) -> SlidingWindowLog {
    SlidingWindowLog::new(limit, Nanos::new(WINDOW)).unwrap()
}

/// Runs `model` against a fresh `LogRing<N>` of limit `limit`.
fn run_ring<const N: usize>(model: ModelRun, limit: u64) {
    let probes = LogOracle::probes_for(WINDOW, model.nows());
    let oracle = LogOracle::new(&log(limit), probes.clone());
    model.run(
        move || LogSubject::<N>::new(log(limit), probes.clone()),
        oracle,
    );
}

/// Admissions racing for the last permits of one window, with peeks in between: never more
/// than L = 2, and the answers are some sequential order's.
#[test]
fn log_ring_one_window() {
    let model = ModelRun::new("log ring/one window")
        .thread([Op::check(10, 1), Op::check(30, 1), Op::peek(40, 1)])
        .thread([Op::check(20, 2), Op::peek(35, 1), Op::check(5, 1)])
        .at_most_admitted(2);
    run_ring::<2>(model, 2);
}

/// Out-of-order `now` values across a window boundary and a ring larger than L (so slot
/// indices wrap differently from the live range), mixed costs.
#[test]
fn log_ring_sliding() {
    let model = ModelRun::new("log ring/sliding, N > L")
        .thread([Op::check(50, 2), Op::check(140, 1), Op::peek(200, 2)])
        .thread([Op::check(160, 1), Op::peek(120, 1), Op::check(155, 1)]);
    run_ring::<3>(model, 2);
}

/// A ring that wraps while readers search it: L = N = 3, costs up to L, entries sliding
/// out while the newer ones are written.
#[test]
fn log_ring_wraps() {
    let model = ModelRun::new("log ring/wraps, cost up to L")
        .thread([Op::check(0, 2), Op::check(190, 3)])
        .thread([Op::check(60, 2), Op::peek(150, 3), Op::check(120, 1)]);
    run_ring::<3>(model, 3);
}

/// Without the writer claim two admissions that read the same head both fit: more than L.
#[test]
#[should_panic(expected = "more than")]
fn broken_log_ring_is_caught() {
    let model = ModelRun::new("broken log ring")
        .thread([Op::check(10, 1)])
        .thread([Op::check(20, 1)])
        .at_most_admitted(1);
    let probes = LogOracle::probes_for(WINDOW, model.nows());
    let oracle = LogOracle::new(&log(1), probes.clone());
    model.run(
        move || BrokenLogRing::<1>::new(log(1), probes.clone()),
        oracle,
    );
}
