//! Differential fuzzing of GCRA: `StateCell` and `AnyLimiter` against `GcraModel` on
//! arbitrary parameters and traces (clock going backwards, end of time, huge costs).
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tollgate_core::reference::GcraModel;
use tollgate_core::{AlgorithmConfig, Gcra};
use tollgate_fuzz::{constructed, Count, Differential, Span, Step};

/// The two ways to build a GCRA.
#[derive(Arbitrary, Debug)]
enum Params {
    /// `Gcra::with_period(limit, period)`, with `.burst(b)` when given.
    Rate {
        limit: Count,
        period: Span,
        burst: Option<Count>,
    },
    /// `Gcra::from_interval(interval, burst)`.
    Interval { interval: Span, burst: Count },
}

#[derive(Arbitrary, Debug)]
struct Input {
    params: Params,
    steps: Vec<Step>,
}

fuzz_target!(|input: Input| {
    let (direct, config) = match input.params {
        Params::Rate {
            limit,
            period,
            burst,
        } => {
            let builder = Gcra::with_period(limit.get(), period.get());
            let builder = match burst {
                Some(b) => builder.burst(b.get()),
                None => builder,
            };
            let config = AlgorithmConfig::Gcra {
                limit: limit.get(),
                period: period.get(),
                burst: burst.unwrap_or(limit).get(),
            };
            (builder.build(), Some(config))
        }
        Params::Interval { interval, burst } => (
            Gcra::from_interval(interval.get().as_u64(), burst.get()),
            None,
        ),
    };
    let Some(gcra) = constructed(direct, config) else {
        return;
    };
    let mut model = GcraModel::new(&gcra);
    Differential::new(gcra, |now, cost, commit| model.check(now, cost, commit)).run(&input.steps);
});
