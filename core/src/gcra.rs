//! GCRA, the Generic Cell Rate Algorithm: `limit` per `period` with a burst of `b`.
//!
//! Emission interval `T = ⌈period / limit⌉` (rounded up, so the effective rate is never
//! above the configured one), tolerance `τ = b·T`. The state is the theoretical arrival time
//! `TAT`; a fresh key has `TAT = 0`.
//!
//! ```text
//! tat = max(TAT, now);  new = tat + cost·T
//! admit iff new − now ≤ τ, then TAT := new
//! remaining   = ⌊(τ − (new − now)) / T⌋
//! retry_after = new − now − τ            (deny)
//! reset_after = TAT − now                (until the bucket is full again)
//! ```
//!
//! Packed state (one `u64`, no packing needed):
//!
//! ```text
//!  63                                                             0
//! +----------------------------------------------------------------+
//! |            TAT: theoretical arrival time, ns since epoch        |
//! +----------------------------------------------------------------+
//! ```

use core::num::NonZeroU64;

use crate::algorithm::{admitted, check_cost};
use crate::{Algorithm, ConfigError, Decision, InsufficientCapacity, Nanos, Outcome};

/// GCRA parameters, validated and precomputed. Build with [`Gcra::per_second`] and friends.
///
/// ```
/// use tollgate_core::{Gcra, Limiter, Nanos};
/// const API: Gcra = match Gcra::per_second(100).burst(10).build() {
///     Ok(gcra) => gcra,
///     Err(_) => panic!("bad config"),
/// };
/// assert_eq!(API.emission_interval(), Nanos::from_millis(10));
/// let limiter = Limiter::new(API);
/// assert_eq!((0..20).filter(|_| limiter.check_at(Nanos::ZERO).allowed).count(), 10);
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Gcra {
    /// Emission interval T in ns (≥ 1). Non-zero by type, so dividing by it needs no
    /// zero check and a division whose result is unused compiles to nothing.
    interval: NonZeroU64,
    /// Tolerance τ = burst·T in ns.
    tolerance: u64,
    /// Burst b: the most permits admitted at once (≥ 1, so a one-permit check needs no
    /// cost check).
    burst: NonZeroU64,
}

/// A GCRA configuration awaiting validation: `limit` per `period`, burst defaulting to
/// `limit`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[must_use = "call .build() to validate the configuration"]
pub struct GcraBuilder {
    limit: u64,
    period: Nanos,
    burst: Option<u64>,
}

impl GcraBuilder {
    /// The most permits admitted at once (b ≥ 1). Defaults to `limit`.
    pub const fn burst(mut self, burst: u64) -> GcraBuilder {
        self.burst = Some(burst);
        self
    }

    /// Validates and precomputes.
    ///
    /// Errors: [`ConfigError::ZeroLimit`], [`ConfigError::ZeroPeriod`],
    /// [`ConfigError::ZeroBurst`], [`ConfigError::RateTooFine`] (more than one permit per
    /// ns), [`ConfigError::PeriodTooLong`] (one permit per more than
    /// [`Nanos::MAX_HORIZON`], 2^63 ns: only a limit of 1 can ask that),
    /// [`ConfigError::LimitTooLarge`] (burst·T beyond [`Nanos::MAX_HORIZON`]; `max` is the
    /// largest burst). Every config that builds admits its whole burst from a fresh state
    /// at any `now` up to [`Nanos::MAX_NOW`].
    pub const fn build(self) -> Result<Gcra, ConfigError> {
        let burst = match self.burst {
            Some(burst) => burst,
            None => self.limit,
        };
        match interval_of(self.limit, self.period) {
            Ok(interval) => Gcra::from_interval(interval, burst),
            Err(e) => Err(e),
        }
    }
}

/// `⌈period / limit⌉`, validated.
pub(crate) const fn interval_of(limit: u64, period: Nanos) -> Result<u64, ConfigError> {
    let period = period.as_u64();
    if limit == 0 {
        return Err(ConfigError::ZeroLimit);
    }
    if period == 0 {
        return Err(ConfigError::ZeroPeriod);
    }
    if period < limit {
        return Err(ConfigError::RateTooFine);
    }
    Ok(period.div_ceil(limit))
}

/// `count · interval` if it is within [`Nanos::MAX_HORIZON`] (`interval ≥ 1`): the horizon
/// of GCRA and the token bucket (`count` = the burst), and of the leaky bucket (`count` =
/// `2·queue + 1`, see there). Otherwise [`ConfigError::PeriodTooLong`] when one interval
/// alone is longer, else [`ConfigError::LimitTooLarge`] with the largest `count`,
/// `⌊MAX_HORIZON / interval⌋`.
pub(crate) const fn horizon_of(interval: u64, count: u64) -> Result<u64, ConfigError> {
    let max_horizon = Nanos::MAX_HORIZON.as_u64();
    if interval > max_horizon {
        return Err(ConfigError::PeriodTooLong {
            max: Nanos::MAX_HORIZON,
        });
    }
    match interval.checked_mul(count) {
        Some(horizon) if horizon <= max_horizon => Ok(horizon),
        _ => Err(ConfigError::LimitTooLarge {
            max: max_horizon / interval,
        }),
    }
}

impl Gcra {
    /// `limit` permits per `period`.
    pub const fn with_period(limit: u64, period: Nanos) -> GcraBuilder {
        GcraBuilder {
            limit,
            period,
            burst: None,
        }
    }

    /// `limit` permits per second.
    pub const fn per_second(limit: u64) -> GcraBuilder {
        Gcra::with_period(limit, Nanos::from_secs(1))
    }

    /// `limit` permits per minute.
    pub const fn per_minute(limit: u64) -> GcraBuilder {
        Gcra::with_period(limit, Nanos::from_secs(60))
    }

    /// `limit` permits per hour.
    pub const fn per_hour(limit: u64) -> GcraBuilder {
        Gcra::with_period(limit, Nanos::from_secs(3600))
    }

    /// `limit` permits per day.
    pub const fn per_day(limit: u64) -> GcraBuilder {
        Gcra::with_period(limit, Nanos::from_secs(86_400))
    }

    /// From an emission interval T (one permit every `interval`) and a burst.
    ///
    /// Errors: [`ConfigError::ZeroPeriod`], [`ConfigError::ZeroBurst`],
    /// [`ConfigError::PeriodTooLong`] (T beyond [`Nanos::MAX_HORIZON`]) and
    /// [`ConfigError::LimitTooLarge`] (τ = b·T beyond it: `max` is the largest burst, `⌊2^63
    /// / T⌋`). So the TAT never runs more than `MAX_HORIZON` ahead of `now`: at any `now` up
    /// to [`Nanos::MAX_NOW`] a fresh key admits its whole burst, and every request the
    /// algorithm admits fits in `u64` time.
    ///
    /// ```
    /// use tollgate_core::{ConfigError, Gcra, Nanos};
    /// let hour = 3_600_000_000_000;
    /// let max = Nanos::MAX_HORIZON.as_u64() / hour; // 2 562 047 bursts of an hour
    /// assert!(Gcra::from_interval(hour, max).is_ok());
    /// assert_eq!(Gcra::from_interval(hour, max + 1), Err(ConfigError::LimitTooLarge { max }));
    /// ```
    pub const fn from_interval(interval: u64, burst: u64) -> Result<Gcra, ConfigError> {
        let Some(nonzero_interval) = NonZeroU64::new(interval) else {
            return Err(ConfigError::ZeroPeriod);
        };
        let Some(nonzero_burst) = NonZeroU64::new(burst) else {
            return Err(ConfigError::ZeroBurst);
        };
        match horizon_of(interval, burst) {
            Ok(tolerance) => Ok(Gcra {
                interval: nonzero_interval,
                tolerance,
                burst: nonzero_burst,
            }),
            Err(e) => Err(e),
        }
    }

    /// The emission interval T.
    pub const fn emission_interval(&self) -> Nanos {
        Nanos::new(self.interval.get())
    }

    /// The burst b.
    pub const fn burst_size(&self) -> u64 {
        self.burst.get()
    }

    /// The tolerance τ = b·T: how far ahead of `now` the TAT may run.
    pub const fn tolerance(&self) -> Nanos {
        Nanos::new(self.tolerance)
    }
}

impl Algorithm for Gcra {
    #[inline]
    fn limit(&self) -> u64 {
        self.burst.get()
    }

    #[inline]
    fn max_cost(&self) -> u64 {
        self.burst.get()
    }

    #[inline]
    fn decide(&self, state: u64, now: Nanos, cost: u32) -> Result<Outcome, InsufficientCapacity> {
        check_cost(cost, self.burst.get())?;
        let now = now.as_u64();
        let tat = if state > now { state } else { now };
        // cost ≤ burst, so cost·T ≤ τ fits. A TAT past the end of u64 time cannot be
        // recorded: such a request is denied (it could only pass after the end of time).
        // With τ ≤ MAX_HORIZON that happens only past Nanos::MAX_NOW, or to a state
        // charged into debt beyond the horizon (which is denied anyway).
        let new_tat = tat.checked_add(u64::from(cost) * self.interval.get());
        let ahead = new_tat.map_or(u64::MAX, |t| t - now);
        if let (Some(new_tat), true) = (new_tat, ahead <= self.tolerance) {
            let remaining = (self.tolerance - ahead) / self.interval;
            let decision = Decision::allow(self.burst.get(), remaining, Nanos::new(ahead));
            Ok(admitted(cost, new_tat, decision))
        } else {
            let current = tat - now;
            let remaining = self.tolerance.saturating_sub(current) / self.interval;
            let decision = Decision::deny(
                self.burst.get(),
                remaining,
                Nanos::new(current),
                match new_tat {
                    Some(_) => Nanos::new(ahead - self.tolerance),
                    None => Nanos::MAX,
                },
            );
            Ok(Outcome::read_only(decision))
        }
    }

    #[inline]
    fn is_idle(&self, state: u64, now: Nanos) -> bool {
        state <= now.as_u64()
    }

    /// Exact when nothing was recorded since the take, or when the requests recorded in
    /// between found the bucket busy (their `now` not past `before`), in particular whenever
    /// concurrent callers share a clock reading. Otherwise (a caller whose `now` was later
    /// by `δ` slipped in between) up to `δ` of credit, less than one permit for `δ < T`,
    /// may come back early.
    #[inline]
    fn undo(&self, state: u64, before: u64, after: u64, cost: u32) -> u64 {
        tat::undo(state, before, after, cost, self.interval.get())
    }

    #[inline]
    fn refund(&self, state: u64, now: Nanos, cost: u32) -> u64 {
        tat::give_back(state, now.as_u64(), cost, self.interval.get())
    }

    #[inline]
    fn charge(&self, state: u64, now: Nanos, cost: u32) -> u64 {
        tat::charge(state, now.as_u64(), cost, self.interval.get())
    }

    #[inline]
    fn used(&self, state: u64, now: Nanos) -> u64 {
        tat::used(state, now.as_u64(), self.interval.get())
    }

    #[inline]
    fn with_used(&self, now: Nanos, used: u64) -> u64 {
        tat::with_used(now.as_u64(), used, self.interval.get())
    }
}

/// The arithmetic GCRA, token bucket and leaky bucket share: a state that is a time
/// running `interval` ns ahead per permit (TAT, or the leaky bucket's drain time F), with
/// `0` (any time not after `now`) meaning fresh.
pub(crate) mod tat {
    /// See [`Algorithm::undo`](crate::Algorithm::undo): the pre-take state if nothing was
    /// recorded since, else `cost·T` off, never below the pre-take state.
    #[inline]
    pub(crate) fn undo(state: u64, before: u64, after: u64, cost: u32, interval: u64) -> u64 {
        if state == after {
            before
        } else {
            give_back(state, before, cost, interval)
        }
    }

    /// `cost·T` off `state`, never below `floor` (nor below a state already at or before
    /// it: those permits have come back by themselves).
    #[inline]
    pub(crate) fn give_back(state: u64, floor: u64, cost: u32, interval: u64) -> u64 {
        if state <= floor {
            return state;
        }
        state
            .saturating_sub(u64::from(cost).saturating_mul(interval))
            .max(floor)
    }

    /// `max(state, now) + cost·T`, saturating: a take that never denies. Unchanged for
    /// `cost == 0`.
    #[inline]
    pub(crate) fn charge(state: u64, now: u64, cost: u32, interval: u64) -> u64 {
        if cost == 0 {
            return state;
        }
        state
            .max(now)
            .saturating_add(u64::from(cost).saturating_mul(interval))
    }

    /// The debt in permits, `⌈(state − now) / T⌉`.
    #[inline]
    pub(crate) fn used(state: u64, now: u64, interval: u64) -> u64 {
        state.saturating_sub(now).div_ceil(interval)
    }

    /// `now + used·T` (the whole debt, not capped at the limit), or fresh for none.
    #[inline]
    pub(crate) fn with_used(now: u64, used: u64, interval: u64) -> u64 {
        if used == 0 {
            0
        } else {
            now.saturating_add(used.saturating_mul(interval))
        }
    }

    /// A state under interval `from` moved to interval `to`: the same debt in permits,
    /// fractions included (`(state − now)·to / from`, rounded up to the nanosecond). Not
    /// capped: a key that used more than a lowered limit waits until the debt is repaid at
    /// the new rate, so flipping a limit down and up again (a rolling deploy, a reload
    /// reverted) never hands out the same permits twice.
    #[inline]
    pub(crate) fn rescale(state: u64, now: u64, from: u64, to: u64) -> u64 {
        if state <= now {
            return state;
        }
        let debt = u128::from(state - now) * u128::from(to);
        let scaled = debt.div_ceil(u128::from(from));
        now.saturating_add(u64::try_from(scaled).unwrap_or(u64::MAX))
    }
}
