//! [`CoarseClock`]: a cached "recent" time, refreshed by quanta's upkeep thread.

use std::time::Duration;

use tollgate_core::{Clock, Nanos};

use super::unix::unix_now;

/// A clock that reads a cached time instead of the hardware: quanta's global "recent" time,
/// which an upkeep thread refreshes every `interval`.
///
/// - **Granularity**: readings advance in steps of the upkeep interval and lag the true time
///   by up to one interval. A limit of `n` per second enforced with a 1 ms clock can admit a
///   request up to 1 ms early or late; choose an interval well below your shortest emission
///   interval (`period / limit`).
/// - **The upkeep thread must run.** Start it with [`CoarseClock::with_upkeep`] and keep the
///   returned [`UpkeepHandle`] alive: dropping it stops the thread and freezes the cached time.
///   Without any upkeep thread ever started, readings fall back to a full clock read (correct,
///   just not cheaper). Only one upkeep thread can run per process.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Clock, CoarseClock};
/// let (clock, _upkeep) = CoarseClock::with_upkeep(Duration::from_millis(1))
///     .expect("no other upkeep thread in this doctest");
/// let a = clock.now();
/// let b = clock.now();
/// assert!(b >= a);
/// ```
#[derive(Copy, Clone, Debug)]
pub struct CoarseClock {
    start: quanta::Instant,
    /// Unix time in ns at `start`.
    unix_at_start: u64,
}

/// Keeps quanta's upkeep thread running; dropping it stops the thread.
#[derive(Debug)]
pub struct UpkeepHandle {
    _handle: quanta::Handle,
}

impl CoarseClock {
    /// A coarse clock reading Unix time (the wall clock read now, advanced by the cached
    /// time). Does not start the upkeep thread (use [`CoarseClock::with_upkeep`], or start
    /// `quanta::Upkeep` yourself).
    pub fn new() -> CoarseClock {
        CoarseClock {
            start: quanta::Instant::recent(),
            unix_at_start: unix_now(),
        }
    }

    /// Starts quanta's upkeep thread refreshing the cached time every `interval`, and
    /// returns a clock reading it plus the handle that keeps the thread alive.
    ///
    /// Errors if an upkeep thread already runs in this process (then [`CoarseClock::new`]
    /// reads that one) or the thread cannot be spawned.
    pub fn with_upkeep(interval: Duration) -> Result<(CoarseClock, UpkeepHandle), quanta::Error> {
        let handle = quanta::Upkeep::new(interval).start()?;
        Ok((CoarseClock::new(), UpkeepHandle { _handle: handle }))
    }
}

impl Default for CoarseClock {
    fn default() -> CoarseClock {
        CoarseClock::new()
    }
}

impl Clock for CoarseClock {
    /// One load of the cached time, plus the start's Unix time. A reading older than the
    /// start counts as the start.
    #[inline]
    fn now(&self) -> Nanos {
        let elapsed = quanta::Instant::recent().saturating_duration_since(self.start);
        Nanos::new(self.unix_at_start).saturating_add(Nanos::from_duration(elapsed))
    }
}
