//! The clock cases: what one clock read costs (tollgate's TSC and coarse clocks against the
//! governor clocks built on the same quanta sources, and the bare quanta read as the floor),
//! and the GCRA allow path on the coarse clock.
//!
//! quanta runs at most one upkeep thread per process: governor's `QuantaUpkeepClock` starts
//! it (and keeps it alive for the case), and tollgate's `CoarseClock::new()` and the floor read
//! the same cached time.

use crate::direct_cases::{governor_quota, ok};
use crate::loops::direct;
use crate::{CaseSpec, FloorCell, TimedCase};
use governor::clock::{Clock as GovernorClock, QuantaClock, QuantaUpkeepClock};
use governor::RateLimiter;
use std::hint::black_box;
use std::time::Duration;
use tollgate::engine::Limiter;
use tollgate::{Clock, CoarseClock, Gcra, TscClock};

/// Refresh interval of the coarse clocks.
const UPKEEP: Duration = Duration::from_millis(1);

/// The clock cases, in report order.
pub fn specs() -> Vec<CaseSpec> {
    vec![
        CaseSpec::new("clock_read_tsc", |_| {
            let tollgate = TscClock::new();
            let governor = QuantaClock::default();
            let floor = quanta::Clock::new();
            TimedCase::new("clock_read_tsc")
                .tollgate(direct(move || black_box(tollgate.now().as_u64()) > 0))
                .governor(direct(move || {
                    black_box(GovernorClock::now(&governor));
                    true
                }))
                .floor(direct(move || black_box(floor.raw()) > 0))
        }),
        CaseSpec::new("clock_read_coarse", |_| {
            let governor = upkeep_clock();
            let tollgate = CoarseClock::new();
            TimedCase::new("clock_read_coarse")
                .tollgate(direct(move || black_box(tollgate.now().as_u64()) > 0))
                .governor(direct(move || {
                    black_box(GovernorClock::now(&governor));
                    true
                }))
                .floor(direct(move || {
                    black_box(quanta::Instant::recent());
                    true
                }))
        }),
        CaseSpec::new("direct_allow_coarse_clock", |_| {
            let governor_clock = upkeep_clock();
            let clock = CoarseClock::new();
            let limiter = Limiter::new(ok(Gcra::from_interval(1, 1_000_000)));
            let governor =
                RateLimiter::direct_with_clock(governor_quota(1, 1_000_000), governor_clock);
            let floor = FloorCell::new(1, 1_000_000);
            TimedCase::new("direct_allow_coarse_clock")
                .tollgate(direct(move || limiter.check(&clock).allowed))
                .governor(direct(move || governor.check().is_ok()))
                .floor(direct(move || floor.check_at(clock.now().as_u64())))
        }),
    ]
}

/// governor's coarse clock, which starts (and keeps alive) quanta's upkeep thread.
fn upkeep_clock() -> QuantaUpkeepClock {
    match QuantaUpkeepClock::from_interval(UPKEEP) {
        Ok(clock) => clock,
        Err(error) => panic!("cannot start quanta's upkeep thread: {error}"),
    }
}
