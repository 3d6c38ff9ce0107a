//! The [`Clock`] trait: where "now" comes from.
//!
//! The core never reads a clock on its own: every check has an `*_at(now)` form, and the
//! plain forms take `&impl Clock` and read it exactly once, before the compare-and-swap loop.
//! `std`'s `tollgate` crate supplies TSC, coarse, `Instant` and manual clocks.

use crate::Nanos;

/// A source of monotonic time in nanoseconds since the clock's own epoch.
///
/// Implementations should be monotonic, but the algorithms stay correct if they are not:
/// a `now` older than what a state already holds is treated with `max`, never by a wrapping
/// subtraction, so a late reader can only be refused, never over-admitted. A clock that
/// wraps (a 32-bit tick counter: a `u32` of milliseconds wraps every 49.7 days) is late
/// after each wrap, so everything is refused until it climbs back: extend it to 64 bits.
///
/// ```
/// use tollgate_core::{Clock, Nanos};
/// struct Fixed(u64);
/// impl Clock for Fixed {
///     fn now(&self) -> Nanos { Nanos::new(self.0) }
/// }
/// assert_eq!(Fixed(7).now(), Nanos::new(7));
/// ```
pub trait Clock {
    /// The current time.
    fn now(&self) -> Nanos;
}

impl<C: Clock + ?Sized> Clock for &C {
    #[inline]
    fn now(&self) -> Nanos {
        (**self).now()
    }
}
