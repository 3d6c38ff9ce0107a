//! Sliding window log parameters: exactly at most `L` permits in every window of length `W`.
//!
//! ```text
//! admit iff #{ admitted t : t > now − W } + cost ≤ L
//! ```
//!
//! Exact, no boundary burst, at the price of O(L) memory per key: the timestamps live in a
//! fixed ring ([`LogRing`](crate::LogRing), const-generic capacity, no allocation). Each
//! admitted permit is recorded at `max(now, newest recorded)`, so the ring stays sorted and a
//! late caller (older `now`) can only make the log stricter.

use crate::{ConfigError, Nanos};

/// Sliding window log parameters: limit `L` per window `W`. Run with a
/// [`LogRing`](crate::LogRing) of capacity `N ≥ L`, or a [`SlidingLogLimiter`](crate::SlidingLogLimiter).
///
/// ```
/// use tollgate_core::{Nanos, SlidingLogLimiter, SlidingWindowLog};
/// let log = SlidingWindowLog::new(3, Nanos::from_secs(1)).unwrap();
/// let limiter = SlidingLogLimiter::<3>::new(log).unwrap();
/// let at = |ms| Nanos::from_millis(ms);
/// assert!(limiter.check_at(at(0)).allowed);
/// assert!(limiter.check_at(at(600)).allowed);
/// assert!(limiter.check_at(at(900)).allowed);
/// let d = limiter.check_at(at(999));
/// assert!(!d.allowed);
/// assert_eq!(d.retry_after, at(1)); // the permit from t = 0 slides out at t = 1000
/// assert!(limiter.check_at(at(1000)).allowed);
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct SlidingWindowLog {
    limit: u64,
    window: u64,
}

impl SlidingWindowLog {
    /// `limit` permits in any window of length `window`.
    pub const fn new(limit: u64, window: Nanos) -> Result<SlidingWindowLog, ConfigError> {
        if limit == 0 {
            return Err(ConfigError::ZeroLimit);
        }
        if window.as_u64() == 0 {
            return Err(ConfigError::ZeroPeriod);
        }
        Ok(SlidingWindowLog {
            limit,
            window: window.as_u64(),
        })
    }

    /// The limit L.
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// The window W.
    pub const fn window(&self) -> Nanos {
        Nanos::new(self.window)
    }

    /// Whether a permit recorded at `t` still counts at `now` (`t > now − W`).
    #[inline]
    pub const fn in_window(&self, t: u64, now: u64) -> bool {
        now < self.window || t > now - self.window
    }

    /// Time from `now` until a permit recorded at `t` leaves the window (0 if it has).
    #[inline]
    pub const fn until_out(&self, t: u64, now: u64) -> Nanos {
        Nanos::span_to(t as u128 + self.window as u128, now)
    }
}
