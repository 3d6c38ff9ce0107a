//! Differential fuzzing of the sliding window counter: `StateCell` and `AnyLimiter` against
//! `SlidingWindowCounterModel` (whose `retry_after` is found by search, not by formula) on
//! arbitrary parameters and traces.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tollgate_core::reference::SlidingWindowCounterModel;
use tollgate_core::{AlgorithmConfig, SlidingWindowCounter};
use tollgate_fuzz::{constructed, Count, Differential, Span, Step};

#[derive(Arbitrary, Debug)]
struct Input {
    limit: Count,
    window: Span,
    steps: Vec<Step>,
}

fuzz_target!(|input: Input| {
    let (limit, window) = (input.limit.get(), input.window.get());
    let config = AlgorithmConfig::SlidingWindowCounter { limit, window };
    let direct = SlidingWindowCounter::new(limit, window);
    let Some(counter) = constructed(direct, Some(config)) else {
        return;
    };
    let mut model = SlidingWindowCounterModel::new(&counter);
    Differential::new(counter, |now, cost, commit| model.check(now, cost, commit))
        .run(&input.steps);
});
