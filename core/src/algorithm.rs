//! The [`Algorithm`] trait: one pure transition on a packed `u64` state.
//!
//! Every single-word algorithm (GCRA, token bucket, leaky bucket, fixed window, sliding
//! window counter) implements it; the executors ([`StateCell`](crate::StateCell),
//! [`Limiter`](crate::Limiter), `std`'s keyed tables) run it without knowing which
//! algorithm it is.

use crate::{Decision, InsufficientCapacity, Nanos, Outcome};

/// A rate-limiting algorithm as precomputed parameters plus a pure, total transition on a
/// packed `u64` state. A state of `0` is a fresh key: full quota.
///
/// ```
/// use tollgate_core::{Algorithm, Gcra, Nanos};
/// let gcra = Gcra::per_second(1).burst(2).build().unwrap();
/// let first = gcra.decide(0, Nanos::ZERO, 1).unwrap();
/// assert!(first.decision.allowed);
/// let next = first.next.unwrap();
/// // A peek never writes.
/// assert_eq!(gcra.peek(next, Nanos::ZERO, 1).unwrap().next, None);
/// ```
pub trait Algorithm {
    /// The most cost-1 requests admissible at once from a fresh state.
    fn limit(&self) -> u64;

    /// The largest cost one check can ever admit; a larger cost is
    /// [`InsufficientCapacity`].
    fn max_cost(&self) -> u64;

    /// Decides a request of `cost` permits at `now` against `state`.
    ///
    /// Total: no input panics, overflows or divides by zero. `next` is `None` for every
    /// deny and for `cost == 0` (a probe). A `now` older than the state is handled with
    /// `max`, so a late caller is never admitted beyond the limit.
    fn decide(&self, state: u64, now: Nanos, cost: u32) -> Result<Outcome, InsufficientCapacity>;

    /// The decision a request of `cost` would get, without consuming anything.
    #[inline]
    fn peek(&self, state: u64, now: Nanos, cost: u32) -> Result<Outcome, InsufficientCapacity> {
        let outcome = self.decide(state, now, cost)?;
        Ok(Outcome::read_only(outcome.decision))
    }

    /// Whether `state` at `now` is indistinguishable from a fresh key's, now and at every
    /// later time: forgetting it loses nothing (what lossless eviction looks for).
    fn is_idle(&self, state: u64, now: Nanos) -> bool;

    /// Undoes a take: `before` and `after` are the states a check of `cost` read and wrote
    /// (its [`Outcome::next`]); `state` is the state now. If nothing was recorded since
    /// (`state == after`) the result is `before`, exactly. Otherwise the take's own
    /// contribution is taken off `state` (see each algorithm for how exact that is), never
    /// giving back more than the take took and never producing a state that admits more
    /// than a fresh key.
    fn undo(&self, state: u64, before: u64, after: u64, cost: u32) -> u64;

    /// Gives `cost` permits taken at or before `now` back to `state` (a caller's refund: the
    /// request was not served). Never produces a state that admits more than a fresh key:
    /// permits that have already come back by themselves are not given twice.
    fn refund(&self, state: u64, now: Nanos, cost: u32) -> u64;

    /// Records `cost` permits at `now` whatever the limit says: work that was already done
    /// (a reservation settled above its estimate, a cost known only afterwards). The key
    /// may go over its limit, into debt it then waits out; nothing else changes. Saturates
    /// where the state cannot hold more (a window's counter at its layout's maximum, a
    /// bucket at the end of time).
    fn charge(&self, state: u64, now: Nanos, cost: u32) -> u64;

    /// Permits `state` counts against the key at `now`: the count in the current window
    /// (sliding counter: the weighted estimate), or the debt in permits of a bucket
    /// (`⌈(TAT − now) / T⌉`), rounded up. `0` exactly when the key is as good as fresh.
    fn used(&self, state: u64, now: Nanos) -> u64;

    /// The state of a key that has `used` permits counted against it at `now`, as if they
    /// had just been admitted: the stricter side of any state with that
    /// [`used`](Self::used) count. Every permit is kept, also beyond the
    /// [`limit`](Self::limit) (the key is then denied until it has paid the excess back):
    /// a bucket keeps the whole debt, a window counts all of them in `now`'s window,
    /// saturating only where its packed count is full (its `max_count`: at least the
    /// limit, `2^35 − 1` for a one-minute fixed window). So `used(with_used(now, u), now) == u` below that point,
    /// and a state converted with a take and then refunded is the state converted without
    /// it. `with_used(now, 0)` is fresh.
    fn with_used(&self, now: Nanos, used: u64) -> u64;
}

/// Rejects a cost above `max_cost`; shared by every algorithm.
#[inline]
pub(crate) fn check_cost(cost: u32, max_cost: u64) -> Result<(), InsufficientCapacity> {
    if u64::from(cost) > max_cost {
        Err(InsufficientCapacity { max_cost })
    } else {
        Ok(())
    }
}

/// Convenience for implementations: build the outcome of an admitted request, writing
/// nothing when `cost` is zero.
#[inline]
pub(crate) fn admitted(cost: u32, next: u64, decision: Decision) -> Outcome {
    if cost == 0 {
        Outcome::read_only(decision)
    } else {
        Outcome::write(next, decision)
    }
}
