//! [`Limiter`]: an algorithm's parameters and one [`StateCell`], the direct (un-keyed)
//! rate limiter of the core.

use crate::{Algorithm, Clock, Decision, InsufficientCapacity, Nanos, StateCell};

/// A single rate limit: parameters plus one lock-free state cell.
///
/// Every method has an `*_at(now)` form that takes the time from the caller, and a form
/// that reads a [`Clock`] exactly once.
///
/// ```
/// use tollgate_core::{Limiter, Nanos, TokenBucket};
/// // 20 tokens of capacity, refilled at 1 token per second.
/// let bucket = Limiter::new(TokenBucket::new(20, 1, Nanos::from_secs(1)).unwrap());
/// let admitted = (0..25).filter(|_| bucket.check_at(Nanos::ZERO).allowed).count();
/// assert_eq!(admitted, 20);
/// // Ten seconds later, ten tokens have come back. A peek answers what a check would:
/// // admitted, with 9 left after it.
/// let later = Nanos::from_secs(10);
/// assert_eq!(bucket.peek_at(later).remaining, 9);
/// assert_eq!((0..25).filter(|_| bucket.check_at(later).allowed).count(), 10);
/// ```
#[derive(Debug, Default)]
pub struct Limiter<A> {
    algorithm: A,
    cell: StateCell,
}

impl<A: Algorithm> Limiter<A> {
    /// A limiter in the fresh state (full quota). `const`, so a firmware can keep one in
    /// a `static` with no allocation and no initialisation code:
    ///
    /// ```
    /// use tollgate_core::{Gcra, Limiter, Nanos};
    /// static COMMANDS: Limiter<Gcra> = Limiter::new(match Gcra::per_second(100).burst(10).build() {
    ///     Ok(gcra) => gcra,
    ///     Err(_) => panic!("invalid rate"),
    /// });
    /// assert!(COMMANDS.check_at(Nanos::from_millis(1)).allowed);
    /// ```
    #[cfg(not(tollgate_loom))]
    #[inline]
    pub const fn new(algorithm: A) -> Limiter<A> {
        Limiter {
            algorithm,
            cell: StateCell::new(),
        }
    }

    /// A limiter in the fresh state (full quota); not `const` under loom.
    #[cfg(tollgate_loom)]
    #[inline]
    pub fn new(algorithm: A) -> Limiter<A> {
        Limiter {
            algorithm,
            cell: StateCell::new(),
        }
    }

    /// The algorithm's parameters.
    #[inline]
    pub fn algorithm(&self) -> &A {
        &self.algorithm
    }

    /// The underlying state cell.
    #[inline]
    pub fn cell(&self) -> &StateCell {
        &self.cell
    }

    /// Checks one permit at `now`. Cost 1 is always within capacity, so this cannot fail.
    #[inline]
    pub fn check_at(&self, now: Nanos) -> Decision {
        match self.cell.check_at(&self.algorithm, now, 1) {
            Ok(decision) => decision,
            // Every validated config admits at least one permit at once.
            Err(_) => unreachable_capacity(&self.algorithm, now),
        }
    }

    /// Checks `cost` permits at `now`, all or nothing.
    #[inline]
    pub fn check_n_at(&self, now: Nanos, cost: u32) -> Result<Decision, InsufficientCapacity> {
        self.cell.check_at(&self.algorithm, now, cost)
    }

    /// What a one-permit check at `now` would answer; consumes nothing.
    #[inline]
    pub fn peek_at(&self, now: Nanos) -> Decision {
        match self.cell.peek_at(&self.algorithm, now, 1) {
            Ok(decision) => decision,
            Err(_) => unreachable_capacity(&self.algorithm, now),
        }
    }

    /// Checks one permit, reading `clock` once.
    #[inline]
    pub fn check(&self, clock: &impl Clock) -> Decision {
        self.check_at(clock.now())
    }

    /// Checks `cost` permits, reading `clock` once.
    #[inline]
    pub fn check_n(&self, clock: &impl Clock, cost: u32) -> Result<Decision, InsufficientCapacity> {
        self.check_n_at(clock.now(), cost)
    }

    /// Peeks one permit, reading `clock` once.
    #[inline]
    pub fn peek(&self, clock: &impl Clock) -> Decision {
        self.peek_at(clock.now())
    }

    /// Forgets all history: the next check sees a fresh key.
    #[inline]
    pub fn reset(&self) {
        self.cell.store(0);
    }
}

/// A cost-1 check on a validated config never exceeds capacity; if an `Algorithm`
/// implementation outside this crate claims otherwise, answer with a deny rather than panic.
#[cold]
fn unreachable_capacity<A: Algorithm>(algorithm: &A, _now: Nanos) -> Decision {
    Decision::deny(algorithm.limit(), 0, Nanos::MAX, Nanos::MAX)
}
