//! [`MonotonicClock`]: `std::time::Instant`, as Unix-time nanoseconds (the wall clock read
//! once when the clock is made, advanced by the monotonic clock).

use std::time::Instant;

use tollgate_core::{Clock, Nanos};

use super::unix::unix_now;

/// The default clock: `std::time::Instant` (the OS monotonic clock), reported as
/// nanoseconds since the Unix epoch: the wall clock is read once, when the clock is made,
/// and the monotonic clock advances it from there (never backwards, whatever the wall
/// clock does later). Copying the clock keeps its epoch, so copies agree.
///
/// ```
/// use tollgate::{Clock, MonotonicClock};
/// let clock = MonotonicClock::new();
/// let a = clock.now();
/// let b = clock.now();
/// assert!(b >= a);
/// ```
#[derive(Copy, Clone, Debug)]
pub struct MonotonicClock {
    epoch: Instant,
    /// Unix time in ns at `epoch`.
    unix_at_epoch: u64,
}

impl MonotonicClock {
    /// A clock reading Unix time, taken from the wall clock now.
    pub fn new() -> MonotonicClock {
        MonotonicClock {
            epoch: Instant::now(),
            unix_at_epoch: unix_now(),
        }
    }

    /// The `Instant` at which this clock read the wall clock.
    pub fn epoch(&self) -> Instant {
        self.epoch
    }
}

impl Default for MonotonicClock {
    fn default() -> MonotonicClock {
        MonotonicClock::new()
    }
}

impl Clock for MonotonicClock {
    /// One `Instant::now()`; saturates in the year 2554.
    #[inline]
    fn now(&self) -> Nanos {
        Nanos::new(self.unix_at_epoch).saturating_add(Nanos::from_duration(self.epoch.elapsed()))
    }
}
