//! [`QuantaTscClock`]: quanta's raw counter scaled to nanoseconds — exactly what governor's
//! default `QuantaClock` reads — as a tollgate [`Clock`], so the floor and the comparison
//! share a time source.

use tollgate::{Clock, Nanos};

/// Reads the TSC through quanta (`raw()` then `delta_as_nanos(0, raw)`), the same two
/// calls governor's `QuantaClock::now` makes.
///
/// ```
/// use tollgate::Clock;
/// let clock = tollgate_bench::QuantaTscClock::new();
/// let a = clock.now();
/// assert!(clock.now() >= a);
/// ```
#[derive(Clone, Debug)]
pub struct QuantaTscClock {
    clock: quanta::Clock,
}

impl QuantaTscClock {
    /// A clock calibrated by quanta.
    pub fn new() -> QuantaTscClock {
        QuantaTscClock {
            clock: quanta::Clock::new(),
        }
    }
}

impl Default for QuantaTscClock {
    fn default() -> Self {
        QuantaTscClock::new()
    }
}

impl Clock for QuantaTscClock {
    #[inline]
    fn now(&self) -> Nanos {
        Nanos::new(self.clock.delta_as_nanos(0, self.clock.raw()))
    }
}
