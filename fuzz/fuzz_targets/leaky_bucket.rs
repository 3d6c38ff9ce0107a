//! Differential fuzzing of the leaky bucket (shaper): `StateCell` and `AnyLimiter` against
//! `LeakyBucketModel` on arbitrary parameters and traces; `delay` is compared too.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tollgate_core::reference::LeakyBucketModel;
use tollgate_core::{AlgorithmConfig, LeakyBucket};
use tollgate_fuzz::{constructed, Count, Differential, Span, Step};

/// The two ways to build a leaky bucket.
#[derive(Arbitrary, Debug)]
enum Params {
    /// `LeakyBucket::new(amount, period, queue)`.
    Rate {
        amount: Count,
        period: Span,
        queue: Count,
    },
    /// `LeakyBucket::from_interval(interval, queue)`.
    Interval { interval: Span, queue: Count },
}

#[derive(Arbitrary, Debug)]
struct Input {
    params: Params,
    steps: Vec<Step>,
}

fuzz_target!(|input: Input| {
    let (direct, config) = match input.params {
        Params::Rate {
            amount,
            period,
            queue,
        } => (
            LeakyBucket::new(amount.get(), period.get(), queue.get()),
            Some(AlgorithmConfig::LeakyBucket {
                amount: amount.get(),
                period: period.get(),
                queue: queue.get(),
            }),
        ),
        Params::Interval { interval, queue } => (
            LeakyBucket::from_interval(interval.get(), queue.get()),
            None,
        ),
    };
    let Some(bucket) = constructed(direct, config) else {
        return;
    };
    let mut model = LeakyBucketModel::new(&bucket);
    Differential::new(bucket, |now, cost, commit| model.check(now, cost, commit)).run(&input.steps);
});
