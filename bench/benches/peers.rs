//! Criterion benches: every timed case of the `compare` binary as a criterion group, with
//! tollgate, governor and the floor side by side (`cargo bench -p tollgate-bench`; filter
//! with e.g. `cargo bench -p tollgate-bench -- keyed_1m`). The memory cases need a counting
//! global allocator and live in `compare` only.

use criterion::{criterion_group, criterion_main, Criterion};
use std::time::Duration;
use tollgate_bench::{Contender, Scale};

fn peers(c: &mut Criterion) {
    let scale = Scale::standard();
    for spec in tollgate_bench::timed_specs() {
        let mut case = (spec.build)(&scale);
        let mut group = c.benchmark_group(spec.name);
        group
            .sample_size(20)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
        for contender in Contender::ALL {
            if let Some(runner) = case.runner(contender) {
                group.bench_function(contender.name(), |b| b.iter_custom(&mut *runner));
            }
        }
        group.finish();
    }
}

criterion_group!(benches, peers);
criterion_main!(benches);
