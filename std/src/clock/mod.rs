//! Clocks: where "now" comes from.
//!
//! Every check in tollgate reads its clock exactly once, before the compare-and-swap, and
//! every check also has an `*_at(now)` form so a caller can read one clock for a batch.
//!
//! | clock | source | cost per read | resolution | use it for |
//! |---|---|---|---|---|
//! | [`TscClock`] | CPU time-stamp counter (quanta), scaled to ns | a few ns | ~ns | hot paths |
//! | [`CoarseClock`] | a cached time refreshed by quanta's upkeep thread | ~1–2 ns | the upkeep interval (e.g. 1 ms) | very hot paths that tolerate ms error |
//! | [`MonotonicClock`] | `std::time::Instant` | ~20 ns (vDSO) | ~ns | the default: portable, no calibration |
//! | [`ManualClock`] | a shared counter you set | an atomic load | exact | tests and simulations |
//!
//! All four are monotonic under repeated reads from one thread. Across threads, TSC readings
//! can differ by the (small) skew between cores; the algorithms treat an older `now` with
//! `max`, never a wrapping subtraction, so skew can only refuse, never over-admit.
//!
//! ## One time base: Unix time
//!
//! [`MonotonicClock`], [`TscClock`] and [`CoarseClock`] count nanoseconds since the Unix
//! epoch, as Redis' `TIME` does: each reads the wall clock once, when it is made, and from
//! then on advances by its monotonic source, so a wall-clock step (NTP, a user changing the
//! time) never moves it backwards. Window algorithms align their windows to the clock's
//! epoch, so a `"1m"` window is a UTC minute and a `"1d"` quota resets at UTC midnight, in
//! every process, across restarts, and in the Redis store alike. A [`ManualClock`] counts
//! whatever its owner sets (start it at a Unix time to simulate a real day).
//!
//! ```
//! use std::time::{SystemTime, UNIX_EPOCH};
//! use tollgate::{Clock, MonotonicClock};
//! let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
//! let ours = MonotonicClock::new().now().as_u64() / 1_000_000_000;
//! assert!(ours.abs_diff(wall) <= 1);
//! ```
//!
//! [`TscClock`]: crate::TscClock
//! [`CoarseClock`]: crate::CoarseClock
//! [`MonotonicClock`]: crate::MonotonicClock
//! [`ManualClock`]: crate::ManualClock

// The clocks are declared in these modules and re-exported at the crate root only (one path
// each; `FnClock` at `policy::FnClock`); this module keeps the guide above.
pub(crate) mod coarse;
pub(crate) mod manual;
pub(crate) mod monotonic;
pub(crate) mod tsc;
mod unix;
