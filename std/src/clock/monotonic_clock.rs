//! [`MonotonicClock`]: `std::time::Instant`, as nanoseconds since the clock was made.

use std::time::Instant;

use tollgate_core::{Clock, Nanos};

/// The default clock: `std::time::Instant` (the OS monotonic clock), reported as
/// nanoseconds since this clock was constructed. Copying the clock keeps its epoch, so
/// copies agree.
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
}

impl MonotonicClock {
    /// A clock whose epoch (time zero) is now.
    pub fn new() -> MonotonicClock {
        MonotonicClock {
            epoch: Instant::now(),
        }
    }

    /// The `Instant` this clock calls zero.
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
    /// One `Instant::now()`; saturates after 584 years.
    #[inline]
    fn now(&self) -> Nanos {
        Nanos::from_duration(self.epoch.elapsed())
    }
}
