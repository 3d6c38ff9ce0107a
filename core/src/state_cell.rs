//! [`StateCell`]: the lock-free executor that runs an [`Algorithm`]'s transition on one
//! `AtomicU64`.
//!
//! The loop is load → decide → `compare_exchange_weak`, retried on conflict with the value
//! the failed exchange returned. A deny or a peek is one load and no write, so a flood of
//! denied requests never bounces the cache line between cores.

use crate::sync::{new_atomic_u64, AtomicU64, Ordering};
use crate::{Algorithm, Decision, InsufficientCapacity, Nanos};

/// One key's packed state, as an atomic word. It holds no parameters: the same
/// [`Algorithm`] value drives millions of cells (that is how `std`'s keyed tables stay at
/// 8 bytes of state per key).
///
/// ```
/// use tollgate_core::{FixedWindow, Nanos, StateCell};
/// let window = FixedWindow::new(2, Nanos::from_secs(1)).unwrap();
/// let cell = StateCell::new();
/// assert!(cell.check_at(&window, Nanos::ZERO, 1).unwrap().allowed);
/// assert!(cell.check_at(&window, Nanos::ZERO, 1).unwrap().allowed);
/// assert!(!cell.check_at(&window, Nanos::ZERO, 1).unwrap().allowed);
/// ```
#[derive(Debug)]
pub struct StateCell {
    state: AtomicU64,
}

impl Default for StateCell {
    fn default() -> Self {
        StateCell::new()
    }
}

impl StateCell {
    /// A fresh cell (state 0: full quota).
    #[cfg(not(tollgate_loom))]
    #[inline]
    pub const fn new() -> StateCell {
        StateCell::from_state(0)
    }

    /// A fresh cell (state 0: full quota).
    #[cfg(tollgate_loom)]
    #[inline]
    pub fn new() -> StateCell {
        StateCell::from_state(0)
    }

    /// A cell holding a given packed state (for restoring, migrating or testing).
    #[cfg(not(tollgate_loom))]
    #[inline]
    pub const fn from_state(state: u64) -> StateCell {
        StateCell {
            state: new_atomic_u64(state),
        }
    }

    /// A cell holding a given packed state (for restoring, migrating or testing).
    #[cfg(tollgate_loom)]
    #[inline]
    pub fn from_state(state: u64) -> StateCell {
        StateCell {
            state: new_atomic_u64(state),
        }
    }

    /// The current packed state.
    #[inline]
    pub fn load(&self) -> u64 {
        // Relaxed: the state word is self-contained; no other memory is published with it.
        self.state.load(Ordering::Relaxed)
    }

    /// Overwrites the state (used when a key is reset or its rule is replaced).
    #[inline]
    pub fn store(&self, state: u64) {
        // Relaxed: see `load`; the word carries all the information.
        self.state.store(state, Ordering::Relaxed)
    }

    /// Decides a request of `cost` at `now` and, if admitted, records it atomically.
    ///
    /// Linearizable: the result is what `algorithm` run sequentially would answer at the
    /// point the compare-and-swap (or, for a deny, the load) took effect.
    #[inline(always)]
    pub fn check_at<A: Algorithm + ?Sized>(
        &self,
        algorithm: &A,
        now: Nanos,
        cost: u32,
    ) -> Result<Decision, InsufficientCapacity> {
        let mut current = self.load();
        loop {
            let outcome = algorithm.decide(current, now, cost)?;
            let Some(next) = outcome.next else {
                return Ok(outcome.decision);
            };
            // Relaxed on both paths: the CAS on this single word is totally ordered by its
            // modification order, which is all linearizability of one key needs; nothing
            // else is read or written under it.
            match self.state.compare_exchange_weak(
                current,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(outcome.decision),
                Err(actual) => current = actual,
            }
        }
    }

    /// The decision a request of `cost` would get at `now`; writes nothing.
    #[inline]
    pub fn peek_at<A: Algorithm + ?Sized>(
        &self,
        algorithm: &A,
        now: Nanos,
        cost: u32,
    ) -> Result<Decision, InsufficientCapacity> {
        Ok(algorithm.peek(self.load(), now, cost)?.decision)
    }

    /// Whether this cell's state at `now` equals a fresh key's (see [`Algorithm::is_idle`]).
    #[inline]
    pub fn is_idle<A: Algorithm + ?Sized>(&self, algorithm: &A, now: Nanos) -> bool {
        algorithm.is_idle(self.load(), now)
    }
}
