//! Leaky bucket as a shaper: requests leave at the drain rate `r`, at most `Q` may wait.
//!
//! The state `F` is the time the queue drains (0 = empty). A request of `cost` units:
//!
//! ```text
//! start = max(now, F)
//! admit iff start − now ≤ Q/r, then F := start + cost/r
//! delay = start − now        (the caller forwards the request after this)
//! ```
//!
//! Output never exceeds `r`, however long the client was idle: this smooths, it does not
//! tolerate bursts. `Q = 0` is strict pacing. The "meter" variant, which admits while a
//! leaking level stays under a capacity and never delays, is a token bucket in disguise: use
//! [`TokenBucket`](crate::TokenBucket) for that.
//!
//! Packed state:
//!
//! ```text
//!  63                                                             0
//! +----------------------------------------------------------------+
//! |      F: time the queue is drained, ns since epoch (0 = empty)   |
//! +----------------------------------------------------------------+
//! ```

use crate::algorithm::{admitted, check_cost};
use crate::gcra::tat;
use crate::{Algorithm, ConfigError, Decision, InsufficientCapacity, Nanos, Outcome};

/// Leaky bucket parameters: drain interval `1/r` and queue depth `Q`.
///
/// `limit` in a decision is `Q + 1` (the request in service plus `Q` waiting); `remaining`
/// counts the further cost-1 requests that would be queued right now.
///
/// ```
/// use tollgate_core::{LeakyBucket, Limiter, Nanos};
/// // Drain 2 per second, up to 3 waiting.
/// let shaper = Limiter::new(LeakyBucket::new(2, Nanos::from_secs(1), 3).unwrap());
/// let delays: Vec<_> = (0..5).map(|_| shaper.check_at(Nanos::ZERO)).collect();
/// assert_eq!(delays[0].delay, Nanos::ZERO);
/// assert_eq!(delays[3].delay, Nanos::from_millis(1500));
/// assert!(!delays[4].allowed);
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeakyBucket {
    /// Drain interval 1/r in ns (≥ 1).
    interval: u64,
    /// Queue depth Q.
    queue: u64,
    /// Q/r in ns: the longest admissible wait.
    horizon: u64,
}

impl LeakyBucket {
    /// Drains `amount` units per `period` (`r = amount / period`, interval rounded up to
    /// whole ns); at most `queue` requests wait behind the one in service.
    pub const fn new(amount: u64, period: Nanos, queue: u64) -> Result<LeakyBucket, ConfigError> {
        match crate::gcra::interval_of(amount, period) {
            Ok(interval) => LeakyBucket::from_interval(Nanos::new(interval), queue),
            Err(e) => Err(e),
        }
    }

    /// Drains one unit every `interval`; at most `queue` requests wait.
    ///
    /// The drain time runs furthest ahead of `now` when a request of the largest cost
    /// (`Q + 1`) is queued behind a full wait (`Q·T`): `(2Q + 1)·T`. That must be within
    /// [`Nanos::MAX_HORIZON`], so that at a `now` up to [`Nanos::MAX_NOW`] no request the
    /// queue has room for is refused for running past the end of `u64` time (a fresh key
    /// always gets its whole queue). Errors: [`ConfigError::ZeroPeriod`], [`ConfigError::PeriodTooLong`] (`T`
    /// alone longer than the horizon) and [`ConfigError::LimitTooLarge`] (the queue too
    /// deep: `max` is the deepest, `⌊(⌊2^63 / T⌋ − 1) / 2⌋`).
    ///
    /// ```
    /// use tollgate_core::{ConfigError, LeakyBucket, Nanos};
    /// let second = Nanos::from_secs(1);
    /// let max = 4_611_686_017; // (⌊2^63 / 10^9⌋ − 1) / 2
    /// assert!(LeakyBucket::from_interval(second, max).is_ok());
    /// assert_eq!(
    ///     LeakyBucket::from_interval(second, max + 1),
    ///     Err(ConfigError::LimitTooLarge { max })
    /// );
    /// ```
    pub const fn from_interval(interval: Nanos, queue: u64) -> Result<LeakyBucket, ConfigError> {
        let interval = interval.as_u64();
        if interval == 0 {
            return Err(ConfigError::ZeroPeriod);
        }
        // 2Q + 1 drain intervals: a LimitTooLarge from horizon_of names the most intervals
        // (n), which is a queue of ⌊(n − 1) / 2⌋. Q > 2^62 cannot fit at any interval.
        let intervals = if queue < 1 << 62 {
            2 * queue + 1
        } else {
            u64::MAX
        };
        match crate::gcra::horizon_of(interval, intervals) {
            Ok(_) => Ok(LeakyBucket {
                interval,
                queue,
                // Q·T ≤ (2Q + 1)·T, which fits.
                horizon: queue * interval,
            }),
            Err(ConfigError::LimitTooLarge { max }) => Err(ConfigError::LimitTooLarge {
                // max ≥ 1: horizon_of checked that one interval fits.
                max: (max - 1) / 2,
            }),
            Err(e) => Err(e),
        }
    }

    /// Time to drain one unit (1/r).
    pub const fn drain_interval(&self) -> Nanos {
        Nanos::new(self.interval)
    }

    /// Queue depth Q.
    pub const fn queue_depth(&self) -> u64 {
        self.queue
    }

    /// `Q/r`: the longest an admitted request may be told to wait.
    pub const fn horizon(&self) -> Nanos {
        Nanos::new(self.horizon)
    }
}

impl Algorithm for LeakyBucket {
    #[inline]
    fn limit(&self) -> u64 {
        self.queue + 1
    }

    /// What the queue can hold: `Q + 1` (the request in service plus `Q` waiting). A
    /// larger request could only be admitted by making everyone behind it wait longer than
    /// the queue allows, so it is [`InsufficientCapacity`], not a deny.
    #[inline]
    fn max_cost(&self) -> u64 {
        self.queue + 1
    }

    #[inline]
    fn decide(&self, state: u64, now: Nanos, cost: u32) -> Result<Outcome, InsufficientCapacity> {
        check_cost(cost, self.queue + 1)?;
        // cost ≤ Q + 1, and (Q + 1)·T ≤ (2Q + 1)·T ≤ MAX_HORIZON: the product fits.
        let drain = u64::from(cost) * self.interval;
        let now = now.as_u64();
        let start = if state > now { state } else { now };
        let wait = start - now;
        // A drain time past the end of u64 time cannot be recorded: denied. Admitted,
        // drained_at − now ≤ Q·T + (Q + 1)·T ≤ MAX_HORIZON, so this happens only past
        // Nanos::MAX_NOW (or to a state charged beyond the horizon, denied anyway).
        if let (true, Some(drained_at)) = (wait <= self.horizon, start.checked_add(drain)) {
            let backlog = drained_at - now;
            let remaining = match self.horizon.checked_sub(backlog) {
                Some(slack) => slack / self.interval + 1,
                None => 0,
            };
            let decision = Decision::allow(self.queue + 1, remaining, Nanos::new(backlog))
                .with_delay(Nanos::new(wait));
            Ok(admitted(cost, drained_at, decision))
        } else {
            let decision = Decision::deny(
                self.queue + 1,
                0,
                Nanos::new(wait),
                match wait.checked_sub(self.horizon) {
                    Some(late) if late > 0 => Nanos::new(late),
                    // The drain time would pass the end of u64 time: never.
                    _ => Nanos::MAX,
                },
            );
            Ok(Outcome::read_only(decision))
        }
    }

    #[inline]
    fn is_idle(&self, state: u64, now: Nanos) -> bool {
        state <= now.as_u64()
    }

    /// As [`Gcra`](crate::Gcra)'s: the drain time `F` runs `1/r` per unit as a TAT does.
    #[inline]
    fn undo(&self, state: u64, before: u64, after: u64, cost: u32) -> u64 {
        tat::undo(state, before, after, cost, self.interval)
    }

    #[inline]
    fn refund(&self, state: u64, now: Nanos, cost: u32) -> u64 {
        tat::give_back(state, now.as_u64(), cost, self.interval)
    }

    #[inline]
    fn charge(&self, state: u64, now: Nanos, cost: u32) -> u64 {
        tat::charge(state, now.as_u64(), cost, self.interval)
    }

    /// Units in the queue or in service, `⌈(F − now) · r⌉`.
    #[inline]
    fn used(&self, state: u64, now: Nanos) -> u64 {
        tat::used(state, now.as_u64(), self.interval)
    }

    #[inline]
    fn with_used(&self, now: Nanos, used: u64) -> u64 {
        tat::with_used(now.as_u64(), used, self.interval)
    }
}
