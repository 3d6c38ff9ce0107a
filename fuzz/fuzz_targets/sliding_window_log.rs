//! Differential fuzzing of the sliding window log: `LogRing` (through `SlidingLogLimiter`
//! and `AnyLimiter`) against `SlidingWindowLogModel` on arbitrary parameters and traces.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tollgate_core::reference::SlidingWindowLogModel;
use tollgate_core::{
    AlgorithmConfig, AnyAlgorithm, AnyLimiter, ConfigError, Nanos, SlidingLogLimiter,
    SlidingWindowLog,
};
use tollgate_fuzz::{check_decision, constructed, Count, Span, Step};

/// Ring capacity: limits above it are a `ConfigError`, which is fuzzed too.
const N: usize = 64;

#[derive(Arbitrary, Debug)]
struct Input {
    limit: Count,
    window: Span,
    steps: Vec<Step>,
}

fuzz_target!(|input: Input| {
    let (limit, window) = (input.limit.get(), input.window.get());
    let config = AlgorithmConfig::SlidingWindowLog { limit, window };
    let Some(log) = constructed(SlidingWindowLog::new(limit, window), Some(config)) else {
        return;
    };
    let direct = SlidingLogLimiter::<N>::new(log);
    let any = AnyLimiter::<N>::new(AnyAlgorithm::Log(log));
    if limit > N as u64 {
        let too_large = Err(ConfigError::LimitTooLarge { max: N as u64 });
        assert_eq!(direct.map(|_| ()), too_large);
        assert_eq!(any.map(|_| ()), too_large);
        return;
    }
    let (limiter, any) = (direct.unwrap(), any.unwrap());
    let (ring, log) = (limiter.ring(), *limiter.log());
    let mut model = SlidingWindowLogModel::new(&log);

    for (now, cost, commit) in Step::timeline(&input.steps) {
        let at = Nanos::new(now);
        let empty = model.check(now, 0, false).map(|d| d.remaining == limit);
        assert_eq!(Ok(ring.is_idle(&log, at)), empty, "is_idle at {now}");
        let recorded = ring.recorded();

        let (got, via_any) = if commit {
            (ring.check_at(&log, at, cost), any.check_n_at(at, cost))
        } else {
            (ring.peek_at(&log, at, cost), any.peek_n_at(at, cost))
        };
        let expected = model.check(now, cost, commit);
        assert_eq!(
            got, expected,
            "ring vs model at now={now} cost={cost} commit={commit}"
        );
        assert_eq!(via_any, got, "AnyLimiter vs ring at now={now} cost={cost}");

        let written = match got {
            Ok(decision) => {
                check_decision(&decision, limit);
                if commit && decision.allowed {
                    u64::from(cost)
                } else {
                    0
                }
            }
            Err(e) => {
                assert!(u64::from(cost) > limit);
                assert_eq!(e.max_cost, limit);
                0
            }
        };
        assert_eq!(ring.recorded(), recorded + written, "permits recorded");
    }
});
