//! Typed errors: [`ConfigError`] for limits that cannot be built, [`InsufficientCapacity`]
//! for a request that can never be admitted.

use core::fmt;

use crate::Nanos;

/// Why a limit configuration was rejected. Configs are validated once, at construction;
/// nothing on the hot path can fail for a configuration reason afterwards.
///
/// ```
/// use tollgate_core::{ConfigError, FixedWindow, Nanos};
/// assert_eq!(FixedWindow::new(0, Nanos::from_secs(1)).err(), Some(ConfigError::ZeroLimit));
/// assert_eq!(FixedWindow::new(5, Nanos::ZERO).err(), Some(ConfigError::ZeroPeriod));
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConfigError {
    /// The limit (requests per period, capacity, window limit) is zero.
    ZeroLimit,
    /// The period, window or refill interval is zero.
    ZeroPeriod,
    /// The burst is zero: nothing could ever be admitted.
    ZeroBurst,
    /// The rate asks for more than one permit per nanosecond: the emission interval would
    /// round to zero.
    RateTooFine,
    /// A limit, burst or queue is too large for the packed state layout, or makes the
    /// horizon (GCRA's burst × interval, a token bucket's capacity × interval, a leaky
    /// bucket's (2 × queue + 1) × interval) longer than [`Nanos::MAX_HORIZON`].
    LimitTooLarge {
        /// The largest value this configuration accepts.
        max: u64,
    },
    /// One permit's interval (the period divided by the limit, or the interval given) is
    /// longer than [`Nanos::MAX_HORIZON`] (2^63 ns, about 292 years): a state recording it
    /// ahead of a `now` late in the [supported range](Nanos#the-supported-range-of-now)
    /// would run past the end of `u64` time, so a fresh key could never be admitted there.
    /// Only a limit of one permit per period can be this long.
    ///
    /// ```
    /// use tollgate_core::{ConfigError, Gcra, Nanos};
    /// let day = Nanos::from_secs(86_400);
    /// let ages = Nanos::new(200_000 * day.as_u64());
    /// assert_eq!(
    ///     Gcra::with_period(1, ages).build(),
    ///     Err(ConfigError::PeriodTooLong { max: Nanos::MAX_HORIZON })
    /// );
    /// ```
    PeriodTooLong {
        /// The longest interval per permit accepted: [`Nanos::MAX_HORIZON`].
        max: Nanos,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::ZeroLimit => f.write_str("limit must be > 0"),
            ConfigError::ZeroPeriod => f.write_str("period must be > 0"),
            ConfigError::ZeroBurst => f.write_str("burst must be > 0"),
            ConfigError::RateTooFine => f.write_str("rate is finer than one permit per nanosecond"),
            ConfigError::LimitTooLarge { max } => {
                write!(
                    f,
                    "too large for the packed state or the horizon: at most {max}"
                )
            }
            ConfigError::PeriodTooLong { max } => write!(
                f,
                "period too long: at most {} ns ({max}) per permit",
                max.as_u64()
            ),
        }
    }
}

impl core::error::Error for ConfigError {}

/// The request's cost exceeds what the limiter could ever admit at once, so retrying can
/// never succeed. Distinct from a deny, which says "later".
///
/// ```
/// use tollgate_core::{Gcra, InsufficientCapacity, Limiter, Nanos};
/// let limiter = Limiter::new(Gcra::per_second(10).burst(5).build().unwrap());
/// assert_eq!(
///     limiter.check_n_at(Nanos::ZERO, 6),
///     Err(InsufficientCapacity { max_cost: 5 })
/// );
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct InsufficientCapacity {
    /// The largest cost this limiter can admit in one check.
    pub max_cost: u64,
}

impl fmt::Display for InsufficientCapacity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cost exceeds the most this limit can ever admit at once ({})",
            self.max_cost
        )
    }
}

impl core::error::Error for InsufficientCapacity {}
