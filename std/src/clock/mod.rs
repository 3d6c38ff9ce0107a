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

mod coarse_clock;
mod manual_clock;
mod monotonic_clock;
mod tsc_clock;

pub use coarse_clock::{CoarseClock, UpkeepHandle};
pub use manual_clock::ManualClock;
pub use monotonic_clock::MonotonicClock;
pub use tsc_clock::TscClock;
