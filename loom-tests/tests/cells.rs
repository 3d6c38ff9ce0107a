//! loom models of `StateCell` (one `AtomicU64`, load → decide → `compare_exchange_weak`)
//! driving each single-word algorithm, plus the deliberately broken twin.
//!
//! Each model mixes costs, peeks and `now` values out of order across threads, and asserts
//! that every explored execution is explained by some sequential order run through the
//! pure `decide` (cross-checked against the reference model): same answers, same final
//! packed state, hence the same admitted count.
#![cfg(tollgate_loom)]

use tollgate_core::reference::{
    FixedWindowModel, GcraModel, LeakyBucketModel, SlidingWindowCounterModel,
};
use tollgate_core::{FixedWindow, Gcra, LeakyBucket, Nanos, SlidingWindowCounter, TokenBucket};
use tollgate_loom_tests::{BrokenCell, CellOracle, CellSubject, ModelRun, Op};

/// T = 10 ns, burst 2.
fn gcra() -> Gcra {
    Gcra::from_interval(10, 2).unwrap()
}

/// 3 tokens, one back every 10 ns.
fn token_bucket() -> TokenBucket {
    TokenBucket::from_interval(3, Nanos::new(10)).unwrap()
}

/// One unit drains every 10 ns, one may wait.
fn leaky_bucket() -> LeakyBucket {
    LeakyBucket::from_interval(Nanos::new(10), 1).unwrap()
}

/// 2 per 100 ns window.
fn fixed_window() -> FixedWindow {
    FixedWindow::new(2, Nanos::new(100)).unwrap()
}

/// 2 per sliding 100 ns window.
fn sliding_window_counter() -> SlidingWindowCounter {
    SlidingWindowCounter::new(2, Nanos::new(100)).unwrap()
}

#[test]
fn gcra_three_threads() {
    ModelRun::new("gcra/3 threads")
        .thread([Op::check(10, 1), Op::peek(0, 2), Op::check(40, 2)])
        .thread([Op::check(0, 2), Op::check(30, 1)])
        .thread([Op::check(25, 1), Op::check(12, 1)])
        .run(
            || CellSubject::new(gcra()),
            CellOracle::new(gcra(), GcraModel::new(&gcra())),
        );
}

/// At the end of `u64` time a new TAT cannot be recorded: such requests are denied, and
/// racing them against admissions must not wrap anything.
#[test]
fn gcra_end_of_time() {
    const END: u64 = u64::MAX;
    ModelRun::new("gcra/end of time")
        .thread([Op::check(END - 15, 1), Op::check(END, 2)])
        .thread([Op::check(END - 5, 1), Op::peek(END - 30, 2)])
        .run(
            || CellSubject::new(gcra()),
            CellOracle::new(gcra(), GcraModel::new(&gcra())),
        );
}

#[test]
fn token_bucket_three_threads() {
    let reference = GcraModel::token_bucket(&token_bucket());
    ModelRun::new("token bucket/3 threads")
        .thread([Op::check(0, 2), Op::peek(10, 3), Op::check(35, 3)])
        .thread([Op::check(15, 2), Op::check(5, 1)])
        .thread([Op::check(5, 1), Op::peek(50, 3)])
        .run(
            || CellSubject::new(token_bucket()),
            CellOracle::new(token_bucket(), reference),
        );
}

#[test]
fn leaky_bucket_three_threads() {
    ModelRun::new("leaky bucket/3 threads")
        .thread([Op::check(10, 1), Op::peek(10, 1), Op::check(30, 2)])
        .thread([Op::check(0, 1), Op::check(25, 1)])
        .thread([Op::check(4, 2), Op::check(15, 1)])
        .run(
            || CellSubject::new(leaky_bucket()),
            CellOracle::new(leaky_bucket(), LeakyBucketModel::new(&leaky_bucket())),
        );
}

/// The drain time of a request near the end of `u64` time does not fit: denied, no wrap.
#[test]
fn leaky_bucket_end_of_time() {
    const END: u64 = u64::MAX;
    ModelRun::new("leaky bucket/end of time")
        .thread([Op::check(END - 25, 2), Op::check(END - 3, 1)])
        .thread([Op::check(END - 12, 1), Op::peek(END, 1)])
        .run(
            || CellSubject::new(leaky_bucket()),
            CellOracle::new(leaky_bucket(), LeakyBucketModel::new(&leaky_bucket())),
        );
}

#[test]
fn fixed_window_three_threads() {
    ModelRun::new("fixed window/3 threads")
        .thread([Op::check(150, 1), Op::peek(99, 1), Op::check(210, 2)])
        .thread([Op::check(99, 2), Op::check(120, 1)])
        .thread([Op::check(120, 1), Op::check(50, 1)])
        .run(
            || CellSubject::new(fixed_window()),
            CellOracle::new(fixed_window(), FixedWindowModel::new(&fixed_window())),
        );
}

#[test]
fn sliding_window_counter_three_threads() {
    let reference = SlidingWindowCounterModel::new(&sliding_window_counter());
    ModelRun::new("sliding window counter/3 threads")
        .thread([Op::check(90, 2), Op::peek(180, 1), Op::check(260, 1)])
        .thread([Op::check(150, 1), Op::check(190, 1)])
        .thread([Op::check(210, 1), Op::check(99, 1)])
        .run(
            || CellSubject::new(sliding_window_counter()),
            CellOracle::new(sliding_window_counter(), reference),
        );
}

/// The lost update the compare-and-swap prevents: both threads read the fresh state, both
/// are admitted, and one write overwrites the other, so the final state records one
/// admission where two were answered. No sequential order explains that: the model must
/// notice.
#[test]
#[should_panic(expected = "no sequential order")]
fn broken_cell_gcra_is_caught() {
    ModelRun::new("broken cell/gcra")
        .thread([Op::check(0, 1)])
        .thread([Op::check(0, 1)])
        .run(
            || BrokenCell::new(gcra()),
            CellOracle::new(gcra(), GcraModel::new(&gcra())),
        );
}

#[test]
#[should_panic(expected = "no sequential order")]
fn broken_cell_token_bucket_is_caught() {
    let reference = GcraModel::token_bucket(&token_bucket());
    ModelRun::new("broken cell/token bucket")
        .thread([Op::check(0, 2)])
        .thread([Op::check(0, 2)])
        .run(
            || BrokenCell::new(token_bucket()),
            CellOracle::new(token_bucket(), reference),
        );
}

#[test]
#[should_panic(expected = "no sequential order")]
fn broken_cell_leaky_bucket_is_caught() {
    ModelRun::new("broken cell/leaky bucket")
        .thread([Op::check(0, 1)])
        .thread([Op::check(0, 1)])
        .run(
            || BrokenCell::new(leaky_bucket()),
            CellOracle::new(leaky_bucket(), LeakyBucketModel::new(&leaky_bucket())),
        );
}

#[test]
#[should_panic(expected = "no sequential order")]
fn broken_cell_fixed_window_is_caught() {
    ModelRun::new("broken cell/fixed window")
        .thread([Op::check(0, 1)])
        .thread([Op::check(0, 2)])
        .run(
            || BrokenCell::new(fixed_window()),
            CellOracle::new(fixed_window(), FixedWindowModel::new(&fixed_window())),
        );
}

#[test]
#[should_panic(expected = "no sequential order")]
fn broken_cell_sliding_window_counter_is_caught() {
    let reference = SlidingWindowCounterModel::new(&sliding_window_counter());
    ModelRun::new("broken cell/sliding window counter")
        .thread([Op::check(0, 1)])
        .thread([Op::check(0, 2)])
        .run(
            || BrokenCell::new(sliding_window_counter()),
            CellOracle::new(sliding_window_counter(), reference),
        );
}
