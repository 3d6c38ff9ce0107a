//! Differential fuzzing of the fixed window: `StateCell` and `AnyLimiter` against
//! `FixedWindowModel` on arbitrary parameters and traces.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tollgate_core::reference::FixedWindowModel;
use tollgate_core::{AlgorithmConfig, FixedWindow};
use tollgate_fuzz::{constructed, Count, Differential, Span, Step};

#[derive(Arbitrary, Debug)]
struct Input {
    limit: Count,
    window: Span,
    steps: Vec<Step>,
}

fuzz_target!(|input: Input| {
    let (limit, window) = (input.limit.get(), input.window.get());
    let config = AlgorithmConfig::FixedWindow { limit, window };
    let Some(fixed) = constructed(FixedWindow::new(limit, window), Some(config)) else {
        return;
    };
    let mut model = FixedWindowModel::new(&fixed);
    Differential::new(fixed, |now, cost, commit| model.check(now, cost, commit)).run(&input.steps);
});
