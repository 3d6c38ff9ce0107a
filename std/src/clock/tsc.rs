//! [`TscClock`]: the CPU's time-stamp counter through `quanta`, scaled to nanoseconds.

use tollgate_core::{Clock, Nanos};

use super::unix::unix_now;

/// A clock on the CPU time-stamp counter (via [`quanta`](https://docs.rs/quanta), the source
/// governor uses), scaled to nanoseconds and counted from the Unix time at which the clock
/// was made (the wall clock is read once; the counter advances it, never backwards).
///
/// `quanta` calibrates the counter against the OS clock when the clock is built (once per
/// process; copies share the calibration) and falls back to the OS monotonic clock where no
/// invariant TSC exists. Reads from one thread never go backwards; between cores they can
/// differ by the hardware's TSC skew, which the algorithms absorb (an older `now` is handled
/// with `max`).
///
/// ```
/// use tollgate::{Clock, TscClock};
/// let clock = TscClock::new();
/// let a = clock.now();
/// let b = clock.now();
/// assert!(b >= a);
/// ```
#[derive(Clone, Debug)]
pub struct TscClock {
    clock: quanta::Clock,
    start: u64,
    /// Unix time in ns at `start`.
    unix_at_start: u64,
}

impl TscClock {
    /// A calibrated clock reading Unix time.
    pub fn new() -> TscClock {
        TscClock::from_quanta(quanta::Clock::new())
    }

    /// Wraps an existing `quanta` clock (for instance a mock from `quanta::Clock::mock()`),
    /// its current reading taken as the wall clock's Unix time now.
    pub fn from_quanta(clock: quanta::Clock) -> TscClock {
        let start = clock.raw();
        TscClock {
            clock,
            start,
            unix_at_start: unix_now(),
        }
    }

    /// The underlying `quanta` clock.
    pub fn quanta(&self) -> &quanta::Clock {
        &self.clock
    }
}

impl Default for TscClock {
    fn default() -> TscClock {
        TscClock::new()
    }
}

impl Clock for TscClock {
    /// One raw counter read, scaled by quanta's calibration (a multiply and a shift), plus
    /// the start's Unix time. A reading below the start (cross-core skew) counts as the
    /// start, never a wrapped huge value.
    #[inline]
    fn now(&self) -> Nanos {
        Nanos::new(
            self.unix_at_start
                .saturating_add(self.clock.delta_as_nanos(self.start, self.clock.raw())),
        )
    }
}
