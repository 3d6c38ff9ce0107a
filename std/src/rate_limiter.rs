//! [`RateLimiter`]: one limit (one lock-free state cell) plus the clock it reads.

use core::convert::Infallible;

use tollgate_core::{Algorithm, Clock, Decision, InsufficientCapacity, Limiter, Nanos};

use crate::wait::{until_admitted, Admitted, Jitter};
use crate::MonotonicClock;

/// A direct (un-keyed) rate limiter: a [`Limiter`] from `tollgate-core` plus a clock.
///
/// Each plain method reads the clock once; each `*_at(now)` form takes the time from the
/// caller (one clock read for a batch, or a [`ManualClock`](crate::ManualClock)-free test).
///
/// ```
/// use tollgate::{Gcra, ManualClock, Nanos, RateLimiter};
/// let clock = ManualClock::new();
/// let limiter = RateLimiter::with_clock(Gcra::per_second(10).burst(2).build()?, clock.clone());
/// assert!(limiter.check().allowed);
/// assert!(limiter.check().allowed);
/// let denied = limiter.check();
/// assert!(!denied.allowed);
/// assert_eq!(denied.retry_after, Nanos::from_millis(100));
/// clock.advance(Nanos::from_millis(100));
/// assert!(limiter.check().allowed);
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Debug)]
pub struct RateLimiter<A, C = MonotonicClock> {
    limiter: Limiter<A>,
    clock: C,
}

impl<A: Algorithm> RateLimiter<A, MonotonicClock> {
    /// A limiter in the fresh state, on a new [`MonotonicClock`].
    ///
    /// ```
    /// use tollgate::{FixedWindow, Nanos, RateLimiter};
    /// let limiter = RateLimiter::new(FixedWindow::new(100, Nanos::from_secs(60))?);
    /// assert_eq!(limiter.check().remaining, 99);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn new(algorithm: A) -> RateLimiter<A, MonotonicClock> {
        RateLimiter::with_clock(algorithm, MonotonicClock::new())
    }
}

impl<A: Algorithm, C: Clock> RateLimiter<A, C> {
    /// A limiter in the fresh state, reading `clock`.
    pub fn with_clock(algorithm: A, clock: C) -> RateLimiter<A, C> {
        RateLimiter {
            limiter: Limiter::new(algorithm),
            clock,
        }
    }

    /// Checks one permit now.
    #[inline]
    pub fn check(&self) -> Decision {
        self.limiter.check_at(self.clock.now())
    }

    /// Checks `cost` permits now, all or nothing; [`InsufficientCapacity`] if `cost` can
    /// never be admitted at once.
    ///
    /// ```
    /// use tollgate::{Gcra, InsufficientCapacity, RateLimiter};
    /// let limiter = RateLimiter::new(Gcra::per_second(10).burst(5).build()?);
    /// assert!(limiter.check_n(5).unwrap().allowed);
    /// assert_eq!(limiter.check_n(6), Err(InsufficientCapacity { max_cost: 5 }));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[inline]
    pub fn check_n(&self, cost: u32) -> Result<Decision, InsufficientCapacity> {
        self.limiter.check_n_at(self.clock.now(), cost)
    }

    /// Waits until one permit is admitted and returns the admitting decision (governor's
    /// `until_ready`).
    ///
    /// Checks now; if denied, sleeps until the decision's `retry_after` and checks again. An
    /// admission with a `delay` (a [`LeakyBucket`](crate::LeakyBucket)'s queue) resolves
    /// once that delay has passed. Needs no particular runtime: it sleeps on
    /// [`Delay`](crate::wait::Delay), a timer thread of tollgate's own. Dropping the
    /// future while it backs off consumes nothing; dropped during a `delay`, the admitted
    /// permit stays spent.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use tollgate::{Gcra, RateLimiter};
    ///
    /// let limiter = RateLimiter::new(Gcra::per_second(100).burst(1).build()?);
    /// assert!(limiter.check().allowed);
    /// assert!(!limiter.check().allowed); // the burst is spent: the next permit is 10 ms away
    ///
    /// // Any executor will do; here a current-thread tokio runtime.
    /// let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    /// let start = Instant::now();
    /// let decision = runtime.block_on(limiter.until_ready());
    /// assert!(decision.allowed);
    /// assert!(start.elapsed() >= Duration::from_millis(5));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn until_ready(&self) -> Admitted {
        self.until_ready_with_jitter(Jitter::NONE).await
    }

    /// [`until_ready`](Self::until_ready) with `jitter` added to each backoff, so callers
    /// denied together come back spread out (governor's `until_ready_with_jitter`).
    pub async fn until_ready_with_jitter(&self, jitter: Jitter) -> Admitted {
        match until_admitted(|| Ok::<_, Infallible>(self.check()))
            .with_jitter(jitter)
            .await
        {
            Ok(decision) => Admitted(decision),
            Err(never) => match never {},
        }
    }

    /// Waits until `cost` permits are admitted at once (governor's `until_n_ready`), as
    /// [`until_ready`](Self::until_ready); [`InsufficientCapacity`] at once if `cost` can
    /// never be admitted, since waiting could not help.
    ///
    /// ```
    /// use tollgate::{Gcra, InsufficientCapacity, RateLimiter};
    ///
    /// let limiter = RateLimiter::new(Gcra::per_second(100).burst(5).build()?);
    /// let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    /// runtime.block_on(async {
    ///     assert_eq!(limiter.until_n_ready(5).await?.remaining, 0);
    ///     assert!(limiter.until_n_ready(2).await?.allowed); // after about 20 ms
    ///     assert_eq!(
    ///         limiter.until_n_ready(6).await,
    ///         Err(InsufficientCapacity { max_cost: 5 })
    ///     );
    ///     Ok::<_, InsufficientCapacity>(())
    /// })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn until_n_ready(&self, cost: u32) -> Result<Admitted, InsufficientCapacity> {
        until_admitted(|| self.check_n(cost)).await.map(Admitted)
    }

    /// What a one-permit check would answer now; consumes nothing.
    #[inline]
    pub fn peek(&self) -> Decision {
        self.limiter.peek_at(self.clock.now())
    }

    /// Checks one permit at `now`.
    #[inline]
    pub fn check_at(&self, now: Nanos) -> Decision {
        self.limiter.check_at(now)
    }

    /// Checks `cost` permits at `now`, all or nothing.
    #[inline]
    pub fn check_n_at(&self, now: Nanos, cost: u32) -> Result<Decision, InsufficientCapacity> {
        self.limiter.check_n_at(now, cost)
    }

    /// What a one-permit check at `now` would answer; consumes nothing.
    #[inline]
    pub fn peek_at(&self, now: Nanos) -> Decision {
        self.limiter.peek_at(now)
    }

    /// Forgets all history: the next check sees full quota.
    pub fn reset(&self) {
        self.limiter.reset()
    }

    /// The algorithm's parameters.
    pub fn algorithm(&self) -> &A {
        self.limiter.algorithm()
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The underlying core limiter (parameters and state cell).
    pub fn limiter(&self) -> &Limiter<A> {
        &self.limiter
    }
}
