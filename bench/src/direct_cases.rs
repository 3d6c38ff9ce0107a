//! The direct (un-keyed) cases: one limiter, one state word, the allow path and the deny
//! path of every algorithm, plus the clock comparison. governor only implements GCRA, so
//! its column is empty for the other algorithms; the floor is the same bare GCRA step for
//! all (clock read, load, arithmetic, CAS — or no CAS on the deny path).

use crate::loops::direct;
use crate::{CaseSpec, FloorCell, TimedCase};
use governor::{Quota, RateLimiter};
use std::num::NonZeroU32;
use std::time::Duration;
use tollgate::engine::{Limiter, SlidingLogLimiter};
use tollgate::{
    Algorithm, Clock, FixedWindow, Gcra, LeakyBucket, Nanos, SlidingWindowCounter,
    SlidingWindowLog, TokenBucket, TscClock,
};

/// Burst of the allow-path configs: with one permit per ns, nothing a benchmark loop can do
/// ever exhausts it, so every check takes the admit path (load, decide, CAS).
const ALLOW_BURST: u32 = 1_000_000;

/// One hour: the deny-path configs admit one permit per hour, primed before timing, so
/// every timed check is refused (a load and no write).
const HOUR: u64 = 3_600_000_000_000;

/// The direct cases, in report order.
pub fn specs() -> Vec<CaseSpec> {
    vec![
        CaseSpec::new("direct_allow", |_| gcra_case("direct_allow", true)),
        CaseSpec::new("direct_deny", |_| gcra_case("direct_deny", false)),
        CaseSpec::new("direct_allow_token_bucket", |_| {
            let bucket = ok(TokenBucket::from_interval(
                u64::from(ALLOW_BURST),
                Nanos::new(1),
            ));
            algorithm_case("direct_allow_token_bucket", bucket, true)
        }),
        CaseSpec::new("direct_deny_token_bucket", |_| {
            let bucket = ok(TokenBucket::from_interval(1, Nanos::new(HOUR)));
            algorithm_case("direct_deny_token_bucket", bucket, false)
        }),
        CaseSpec::new("direct_allow_leaky_bucket", |_| {
            let bucket = ok(LeakyBucket::from_interval(
                Nanos::new(1),
                u64::from(ALLOW_BURST),
            ));
            algorithm_case("direct_allow_leaky_bucket", bucket, true)
        }),
        CaseSpec::new("direct_deny_leaky_bucket", |_| {
            let bucket = ok(LeakyBucket::from_interval(Nanos::new(HOUR), 0));
            algorithm_case("direct_deny_leaky_bucket", bucket, false)
        }),
        CaseSpec::new("direct_allow_fixed_window", |_| {
            let window = ok(FixedWindow::new(500_000_000, Nanos::from_secs(1)));
            algorithm_case("direct_allow_fixed_window", window, true)
        }),
        CaseSpec::new("direct_deny_fixed_window", |_| {
            let window = ok(FixedWindow::new(1, Nanos::new(HOUR)));
            algorithm_case("direct_deny_fixed_window", window, false)
        }),
        CaseSpec::new("direct_allow_sliding_counter", |_| {
            // The packed counters leave √W of headroom per window W; a 64 ns window with a
            // limit of 7 sustains one check per ~9 ns, faster than any loop here.
            let counter = ok(SlidingWindowCounter::new(7, Nanos::new(64)));
            algorithm_case("direct_allow_sliding_counter", counter, true)
        }),
        CaseSpec::new("direct_deny_sliding_counter", |_| {
            let counter = ok(SlidingWindowCounter::new(1, Nanos::new(HOUR)));
            algorithm_case("direct_deny_sliding_counter", counter, false)
        }),
        CaseSpec::new("direct_allow_sliding_log", |_| {
            let log = ok(SlidingWindowLog::new(64, Nanos::new(640)));
            sliding_log_case::<64>("direct_allow_sliding_log", log, true)
        }),
        CaseSpec::new("direct_deny_sliding_log", |_| {
            let log = ok(SlidingWindowLog::new(1, Nanos::new(HOUR)));
            sliding_log_case::<1>("direct_deny_sliding_log", log, false)
        }),
    ]
}

/// Unwraps a config the bench chose to be valid.
pub fn ok<T, E: core::fmt::Debug>(result: Result<T, E>) -> T {
    match result {
        Ok(value) => value,
        Err(error) => panic!("benchmark config rejected: {error:?}"),
    }
}

/// GCRA: tollgate's `Limiter<Gcra>`, governor's direct limiter, the floor cell; all on
/// quanta's TSC reading.
fn gcra_case(name: &str, allow: bool) -> TimedCase {
    let (interval, burst) = if allow { (1, ALLOW_BURST) } else { (HOUR, 1) };
    let gcra = ok(Gcra::from_interval(interval, u64::from(burst)));
    let quota = governor_quota(interval, burst);
    let governor = RateLimiter::direct(quota);
    if !allow {
        prime(|| governor.check().is_ok());
    }
    algorithm_case(name, gcra, allow).governor(direct(move || governor.check().is_ok()))
}

/// The governor quota of one permit per `interval_ns` with bursts of `burst`.
pub fn governor_quota(interval_ns: u64, burst: u32) -> Quota {
    let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
    ok(Quota::with_period(Duration::from_nanos(interval_ns)).ok_or("zero period"))
        .allow_burst(burst)
}

/// tollgate's `Limiter<A>` and the floor, on the same clock. A deny case is primed until
/// its first refusal, so every timed check is a refusal.
fn algorithm_case<A>(name: &str, algorithm: A, allow: bool) -> TimedCase
where
    A: Algorithm + Send + Sync + 'static,
{
    let clock = TscClock::new();
    let limiter = Limiter::new(algorithm);
    let floor = if allow {
        FloorCell::new(1, u64::from(ALLOW_BURST))
    } else {
        FloorCell::new(HOUR, 1)
    };
    if !allow {
        prime(|| limiter.check(&clock).allowed);
        prime(|| floor.check_at(clock.now().as_u64()));
    }
    let floor_clock = clock.clone();
    TimedCase::new(name)
        .tollgate(direct(move || limiter.check(&clock).allowed))
        .floor(direct(move || floor.check_at(floor_clock.now().as_u64())))
}

/// The sliding log (a ring of `N` timestamps, its own executor) and the floor.
fn sliding_log_case<const N: usize>(name: &str, log: SlidingWindowLog, allow: bool) -> TimedCase {
    let clock = TscClock::new();
    let limiter = ok(SlidingLogLimiter::<N>::new(log));
    let floor = if allow {
        FloorCell::new(1, u64::from(ALLOW_BURST))
    } else {
        FloorCell::new(HOUR, 1)
    };
    if !allow {
        prime(|| limiter.check(&clock).allowed);
        prime(|| floor.check_at(clock.now().as_u64()));
    }
    let floor_clock = clock.clone();
    TimedCase::new(name)
        .tollgate(direct(move || limiter.check(&clock).allowed))
        .floor(direct(move || floor.check_at(floor_clock.now().as_u64())))
}

/// Checks until the first refusal (at most a thousand times).
fn prime(mut check: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if !check() {
            return;
        }
    }
}
