//! Differential fuzzing of the token bucket: `StateCell` and `AnyLimiter` against
//! `GcraModel::token_bucket` on arbitrary parameters and traces.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tollgate_core::reference::GcraModel;
use tollgate_core::{AlgorithmConfig, TokenBucket};
use tollgate_fuzz::{constructed, Count, Differential, Span, Step};

/// The two ways to build a token bucket.
#[derive(Arbitrary, Debug)]
enum Params {
    /// `TokenBucket::new(capacity, amount, period)`.
    Rate {
        capacity: Count,
        amount: Count,
        period: Span,
    },
    /// `TokenBucket::from_interval(capacity, interval)`.
    Interval { capacity: Count, interval: Span },
}

#[derive(Arbitrary, Debug)]
struct Input {
    params: Params,
    steps: Vec<Step>,
}

fuzz_target!(|input: Input| {
    let (direct, config) = match input.params {
        Params::Rate {
            capacity,
            amount,
            period,
        } => (
            TokenBucket::new(capacity.get(), amount.get(), period.get()),
            Some(AlgorithmConfig::TokenBucket {
                capacity: capacity.get(),
                refill_amount: amount.get(),
                refill_period: period.get(),
            }),
        ),
        Params::Interval { capacity, interval } => (
            TokenBucket::from_interval(capacity.get(), interval.get()),
            None,
        ),
    };
    let Some(bucket) = constructed(direct, config) else {
        return;
    };
    let mut model = GcraModel::token_bucket(&bucket);
    Differential::new(bucket, |now, cost, commit| model.check(now, cost, commit)).run(&input.steps);
});
