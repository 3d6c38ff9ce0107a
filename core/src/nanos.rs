//! [`Nanos`]: the one unit of time in tollgate, a `u64` count of nanoseconds.
//!
//! Every instant is nanoseconds since some clock's epoch (the Unix epoch for std's default
//! clocks and Redis' `TIME`, whatever a firmware's timer counts from); every duration in a [`Decision`](crate::Decision)
//! is a `Nanos` too. `u64` nanoseconds span 584 years, so arithmetic saturates instead of
//! wrapping: a saturated value means "further away than can be represented".
//!
//! The core supports `now` up to [`Nanos::MAX_NOW`] (see [`Nanos`] for why, and what the
//! builders check so that a fresh key admits its whole limit anywhere in that range).

use core::fmt;
use core::time::Duration;

/// A point in time or a span of time, in nanoseconds.
///
/// ## The supported range of `now`
///
/// A state records instants ahead of `now` (a TAT, a drain time), so not every `u64` can be
/// a `now`: the core supports `now` up to [`Nanos::MAX_NOW`], `2^63 − 1` ns after the
/// clock's epoch (for the Unix epoch, 2262-04-11, the limit of `i64` nanosecond
/// timestamps), and every configuration's horizon, the furthest its state can run ahead of
/// `now`, is at most [`Nanos::MAX_HORIZON`] `= Nanos::MAX − Nanos::MAX_NOW = 2^63` ns
/// (about 292 years). The builders reject a configuration with a longer horizon
/// ([`ConfigError::PeriodTooLong`](crate::ConfigError::PeriodTooLong),
/// [`ConfigError::LimitTooLarge`](crate::ConfigError::LimitTooLarge)), so at every `now`
/// in the range a fresh key admits its whole burst and no request the algorithm admits is
/// refused for running past the end of `u64` time (only a deny's `retry_after` may read
/// [`Nanos::MAX`] where the retry's own state would pass it). Past
/// [`Nanos::MAX_NOW`] decisions stay total (no panic, no wrap) but may refuse what the
/// algorithm would admit. The window algorithms (fixed window, sliding window counter and
/// log) record nothing ahead of `now` and keep the whole window index of any `u64` time, so
/// they need no horizon: every window length admits a fresh key's limit at any `now`.
///
/// ```
/// use tollgate_core::Nanos;
/// let t = Nanos::from_millis(1500);
/// assert_eq!(t.as_u64(), 1_500_000_000);
/// assert_eq!(t.as_secs_ceil(), 2);
/// assert_eq!(Nanos::from_secs(3) - Nanos::from_secs(5), Nanos::ZERO); // saturates
/// ```
#[derive(Copy, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Nanos(u64);

impl Nanos {
    /// Zero nanoseconds: the epoch, or no time at all.
    pub const ZERO: Nanos = Nanos(0);
    /// The largest representable value (about 584 years).
    pub const MAX: Nanos = Nanos(u64::MAX);
    /// The latest `now` the core supports: `2^63 − 1` ns after the clock's epoch (for the
    /// Unix epoch, 2262-04-11T23:47:16.854775807Z, where `i64` nanosecond timestamps end).
    /// See [the supported range](Nanos#the-supported-range-of-now).
    ///
    /// ```
    /// use tollgate_core::{Algorithm, Gcra, Nanos};
    /// assert_eq!(Nanos::MAX_NOW.as_u64(), i64::MAX as u64);
    /// // The longest GCRA period there is, at the latest supported instant: admitted.
    /// let gcra = Gcra::with_period(1, Nanos::MAX_HORIZON).build().unwrap();
    /// assert!(gcra.decide(0, Nanos::MAX_NOW, 1).unwrap().decision.allowed);
    /// ```
    pub const MAX_NOW: Nanos = Nanos(u64::MAX >> 1);
    /// The furthest a state may run ahead of `now`: `Nanos::MAX − Nanos::MAX_NOW = 2^63` ns
    /// (about 292 years). Every algorithm's builder rejects a configuration whose horizon
    /// (GCRA's `burst · T`, a token bucket's `capacity · T`, a leaky bucket's
    /// `(2·queue + 1) · T`) is longer.
    ///
    /// ```
    /// use tollgate_core::{ConfigError, Gcra, Nanos};
    /// assert_eq!(Nanos::MAX_HORIZON.as_u64(), 1 << 63);
    /// let longer = Nanos::new(Nanos::MAX_HORIZON.as_u64() + 1);
    /// assert_eq!(
    ///     Gcra::with_period(1, longer).build(),
    ///     Err(ConfigError::PeriodTooLong { max: Nanos::MAX_HORIZON })
    /// );
    /// ```
    pub const MAX_HORIZON: Nanos = Nanos(u64::MAX - (u64::MAX >> 1));

    /// Wraps a raw nanosecond count.
    #[inline]
    pub const fn new(nanos: u64) -> Nanos {
        Nanos(nanos)
    }

    /// `secs` seconds, saturating at [`Nanos::MAX`].
    #[inline]
    pub const fn from_secs(secs: u64) -> Nanos {
        Nanos(secs.saturating_mul(1_000_000_000))
    }

    /// `millis` milliseconds, saturating at [`Nanos::MAX`].
    #[inline]
    pub const fn from_millis(millis: u64) -> Nanos {
        Nanos(millis.saturating_mul(1_000_000))
    }

    /// `micros` microseconds, saturating at [`Nanos::MAX`].
    #[inline]
    pub const fn from_micros(micros: u64) -> Nanos {
        Nanos(micros.saturating_mul(1_000))
    }

    /// Converts a [`Duration`], saturating at [`Nanos::MAX`].
    // Truncation: `nanos` is cast only when it is ≤ u64::MAX. (A const fn: no `try_from`.)
    #[allow(clippy::cast_possible_truncation)]
    #[inline]
    pub const fn from_duration(duration: Duration) -> Nanos {
        let nanos = duration.as_nanos();
        if nanos > u64::MAX as u128 {
            Nanos::MAX
        } else {
            Nanos(nanos as u64)
        }
    }

    /// The raw nanosecond count.
    #[inline]
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// As a [`Duration`].
    #[inline]
    pub const fn as_duration(self) -> Duration {
        Duration::from_nanos(self.0)
    }

    /// Whole seconds, rounded up (what `Retry-After` wants: never early).
    #[inline]
    pub const fn as_secs_ceil(self) -> u64 {
        self.0 / 1_000_000_000 + (self.0 % 1_000_000_000 != 0) as u64
    }

    /// The span from `now` to the instant `at` (which may lie beyond `u64` time): zero if
    /// `at` has passed, saturating at [`Nanos::MAX`].
    // Truncation: `span` is cast only when it is ≤ u64::MAX. (A const fn: no `try_from`.)
    #[allow(clippy::cast_possible_truncation)]
    #[inline]
    pub const fn span_to(at: u128, now: u64) -> Nanos {
        let span = at.saturating_sub(now as u128);
        if span > u64::MAX as u128 {
            Nanos::MAX
        } else {
            Nanos(span as u64)
        }
    }

    /// `self + rhs`, saturating at [`Nanos::MAX`].
    #[inline]
    pub const fn saturating_add(self, rhs: Nanos) -> Nanos {
        Nanos(self.0.saturating_add(rhs.0))
    }

    /// `self - rhs`, saturating at [`Nanos::ZERO`].
    #[inline]
    pub const fn saturating_sub(self, rhs: Nanos) -> Nanos {
        Nanos(self.0.saturating_sub(rhs.0))
    }
}

impl core::ops::Add for Nanos {
    type Output = Nanos;
    /// Saturating addition: time never wraps.
    #[inline]
    fn add(self, rhs: Nanos) -> Nanos {
        self.saturating_add(rhs)
    }
}

impl core::ops::Sub for Nanos {
    type Output = Nanos;
    /// Saturating subtraction: a span is never negative.
    #[inline]
    fn sub(self, rhs: Nanos) -> Nanos {
        self.saturating_sub(rhs)
    }
}

impl From<Duration> for Nanos {
    #[inline]
    fn from(duration: Duration) -> Nanos {
        Nanos::from_duration(duration)
    }
}

impl From<Nanos> for Duration {
    #[inline]
    fn from(nanos: Nanos) -> Duration {
        nanos.as_duration()
    }
}

impl From<u64> for Nanos {
    #[inline]
    fn from(nanos: u64) -> Nanos {
        Nanos(nanos)
    }
}

impl fmt::Debug for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ns", self.0)
    }
}

impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.as_duration(), f)
    }
}
