//! Token bucket: capacity `C`, refilled lazily at `r` tokens per second (fractional rates
//! allowed: `amount` tokens per `period`).
//!
//! No timer thread refills anything: the number of tokens at time `t` is
//! `min(C, tokens + elapsed·r)`, computed on demand. Mathematically this is GCRA with
//! `T = 1/r` and burst `b = C`, and it shares GCRA's state: the time at which the bucket
//! would be full again (`TAT`). Tokens available at `now` are `⌊(C·T − (TAT − now)) / T⌋`.
//!
//! Packed state (shared with [`Gcra`]):
//!
//! ```text
//!  63                                                             0
//! +----------------------------------------------------------------+
//! |   TAT: when the bucket is full again, ns since epoch (0 = full) |
//! +----------------------------------------------------------------+
//! ```

use crate::{Algorithm, ConfigError, Gcra, InsufficientCapacity, Nanos, Outcome};

/// Token bucket parameters: `capacity` tokens, one token back every `period / amount`.
///
/// `remaining` in a decision is the number of whole tokens left in the bucket.
///
/// ```
/// use tollgate_core::{Limiter, Nanos, TokenBucket};
/// // 0.4 tokens per second: 2 tokens every 5 s, at most 3 saved up.
/// let bucket = Limiter::new(TokenBucket::new(3, 2, Nanos::from_secs(5)).unwrap());
/// assert_eq!((0..5).filter(|_| bucket.check_at(Nanos::ZERO).allowed).count(), 3);
/// let d = bucket.check_at(Nanos::ZERO);
/// assert_eq!(d.retry_after, Nanos::from_millis(2500));
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct TokenBucket {
    gcra: Gcra,
}

impl TokenBucket {
    /// A bucket of `capacity` tokens that regains `amount` tokens every `period`
    /// (`r = amount / period`). The refill interval is rounded up to whole nanoseconds.
    pub const fn new(
        capacity: u64,
        amount: u64,
        period: Nanos,
    ) -> Result<TokenBucket, ConfigError> {
        if capacity == 0 {
            return Err(ConfigError::ZeroLimit);
        }
        match crate::gcra::interval_of(amount, period) {
            Ok(interval) => TokenBucket::from_interval(capacity, Nanos::new(interval)),
            Err(e) => Err(e),
        }
    }

    /// A bucket of `capacity` tokens that regains one token every `interval`.
    ///
    /// As [`Gcra::from_interval`] with the burst `capacity`: the interval and the time to
    /// refill a whole bucket (`capacity · interval`) must be within
    /// [`Nanos::MAX_HORIZON`] ([`ConfigError::PeriodTooLong`];
    /// [`ConfigError::LimitTooLarge`] names the largest capacity), so a fresh bucket gives
    /// all its tokens at any `now` up to [`Nanos::MAX_NOW`].
    pub const fn from_interval(capacity: u64, interval: Nanos) -> Result<TokenBucket, ConfigError> {
        if capacity == 0 {
            return Err(ConfigError::ZeroLimit);
        }
        match Gcra::from_interval(interval.as_u64(), capacity) {
            Ok(gcra) => Ok(TokenBucket { gcra }),
            Err(e) => Err(e),
        }
    }

    /// The bucket's capacity C.
    pub const fn capacity(&self) -> u64 {
        self.gcra.burst_size()
    }

    /// Time to regain one token (1/r).
    pub const fn refill_interval(&self) -> Nanos {
        self.gcra.emission_interval()
    }

    /// The equivalent GCRA.
    pub const fn as_gcra(&self) -> &Gcra {
        &self.gcra
    }
}

impl Algorithm for TokenBucket {
    #[inline]
    fn limit(&self) -> u64 {
        self.gcra.limit()
    }

    #[inline]
    fn max_cost(&self) -> u64 {
        self.gcra.max_cost()
    }

    #[inline]
    fn decide(&self, state: u64, now: Nanos, cost: u32) -> Result<Outcome, InsufficientCapacity> {
        self.gcra.decide(state, now, cost)
    }

    #[inline]
    fn is_idle(&self, state: u64, now: Nanos) -> bool {
        self.gcra.is_idle(state, now)
    }

    #[inline]
    fn undo(&self, state: u64, before: u64, after: u64, cost: u32) -> u64 {
        self.gcra.undo(state, before, after, cost)
    }

    #[inline]
    fn refund(&self, state: u64, now: Nanos, cost: u32) -> u64 {
        self.gcra.refund(state, now, cost)
    }

    #[inline]
    fn charge(&self, state: u64, now: Nanos, cost: u32) -> u64 {
        self.gcra.charge(state, now, cost)
    }

    #[inline]
    fn used(&self, state: u64, now: Nanos) -> u64 {
        self.gcra.used(state, now)
    }

    #[inline]
    fn with_used(&self, now: Nanos, used: u64) -> u64 {
        self.gcra.with_used(now, used)
    }
}
