//! Sliding window counter: the fixed window's O(1) state with the boundary burst smoothed
//! away, by weighting the previous window's count by how much of it still overlaps the
//! sliding window `(now − W, now]`.
//!
//! ```text
//! w = ⌊now / W⌋ ;  elapsed = now − w·W
//! prev = count of window w−1 (0 if the last window seen is older than w−1)
//! estimate = prev·(W − elapsed)/W + curr
//! admit iff estimate + cost ≤ L
//! ```
//!
//! The comparison is done exactly in integers, as `prev·(W − elapsed) + (curr + cost)·W ≤
//! L·W` in `u128`: no rounding, no floating point.
//!
//! Approximation bound: the estimate assumes the previous window's requests were spread
//! evenly. The true count in `(now − W, now]` lies between `curr` and `prev + curr`, so the
//! most that can pass in any window of length `W` is below `2·L` in the worst case (all of the
//! previous window's permits at its very end), and exactly `L` when traffic is even. In
//! practice it removes the fixed window's boundary burst: right after a boundary, a full
//! previous window still counts almost fully.
//!
//! A `now` in a window older than the stored one (a late thread) is counted against the
//! stored window with the previous window at full weight: refused, never over-admitted.
//!
//! Packed state, with `c = ⌊(64 − bits(u64::MAX / W)) / 2⌋` bits per counter:
//!
//! ```text
//!  63                  2c   2c-1            c   c-1            0
//! +----------------------+------------------+-----------------+
//! | window index w       | prev (count w−1) | curr (count w)  |
//! +----------------------+------------------+-----------------+
//! ```
//!
//! Each count is at most `L` from admissions alone; a charge and a conversion from other
//! parameters record every permit used beyond it, saturating only at `2^c − 1`
//! ([`max_count`](SlidingWindowCounter::max_count), at least `L`). Decisions read counts
//! above `L` as exhausted, so a rollback of a lowered limit hands out nothing twice.

use crate::algorithm::{admitted, check_cost};
use crate::window::{until_window, validate};
use crate::{Algorithm, ConfigError, Decision, InsufficientCapacity, Nanos, Outcome};

/// Sliding window counter parameters: limit `L` per sliding window `W`.
///
/// ```
/// use tollgate_core::{Limiter, Nanos, SlidingWindowCounter};
/// let limiter = Limiter::new(SlidingWindowCounter::new(10, Nanos::from_secs(1)).unwrap());
/// let at = |ms| Nanos::from_millis(ms);
/// assert_eq!((0..20).filter(|_| limiter.check_at(at(999)).allowed).count(), 10);
/// // Just after the boundary the previous window still weighs 99.9 %: nothing passes.
/// assert!(!limiter.check_at(at(1000)).allowed);
/// // Half-way through, half of it has slid out.
/// assert_eq!((0..20).filter(|_| limiter.check_at(at(1500)).allowed).count(), 5);
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct SlidingWindowCounter {
    limit: u64,
    window: u64,
    count_bits: u32,
}

/// A state unpacked and rolled forward to a given `now`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Rolled {
    index: u64,
    prev: u64,
    curr: u64,
    /// `now − index·W`, clamped to 0 when `now` lies before window `index` (late caller).
    elapsed: u64,
}

impl SlidingWindowCounter {
    /// `limit` permits per sliding window of `window`.
    ///
    /// Errors: zero limit or window, or a limit above what one counter's bits hold beside
    /// the full window index (the error names the maximum; roughly `√W` in ns, e.g. 16 383
    /// for a 1 s window, 131 071 for a minute).
    pub const fn new(limit: u64, window: Nanos) -> Result<SlidingWindowCounter, ConfigError> {
        match validate(limit, window, 2) {
            Ok(count_bits) => Ok(SlidingWindowCounter {
                limit,
                window: window.as_u64(),
                count_bits,
            }),
            Err(e) => Err(e),
        }
    }

    /// The window length W.
    pub const fn window(&self) -> Nanos {
        Nanos::new(self.window)
    }

    /// The most each packed count holds, `2^c − 1` (at least the limit): where a charge
    /// or a conversion saturates.
    ///
    /// ```
    /// use tollgate_core::{Nanos, SlidingWindowCounter};
    /// let minute = SlidingWindowCounter::new(100, Nanos::from_secs(60)).unwrap();
    /// assert_eq!(minute.max_count(), (1 << 17) - 1);
    /// ```
    #[inline]
    pub const fn max_count(&self) -> u64 {
        (1u64 << self.count_bits) - 1
    }

    /// Packs `(window index, prev, curr)`.
    #[inline]
    pub const fn pack(&self, index: u64, prev: u64, curr: u64) -> u64 {
        (index << (2 * self.count_bits)) | (prev << self.count_bits) | curr
    }

    /// Unpacks into `(window index, prev, curr)`.
    #[inline]
    pub const fn unpack(&self, state: u64) -> (u64, u64, u64) {
        let mask = (1u64 << self.count_bits) - 1;
        (
            state >> (2 * self.count_bits),
            (state >> self.count_bits) & mask,
            state & mask,
        )
    }

    #[inline]
    fn roll(&self, state: u64, now: u64) -> Rolled {
        let (stored, prev, curr) = self.unpack(state);
        let index = now / self.window;
        if stored >= index {
            let elapsed = if stored == index {
                now - index * self.window
            } else {
                0
            };
            Rolled {
                index: stored,
                prev,
                curr,
                elapsed,
            }
        } else {
            let prev = if stored + 1 == index { curr } else { 0 };
            Rolled {
                index,
                prev,
                curr: 0,
                elapsed: now - index * self.window,
            }
        }
    }

    /// `prev·(W − elapsed)`: the previous window's weight, times W.
    #[inline]
    fn weighted_prev(&self, rolled: &Rolled) -> u128 {
        u128::from(rolled.prev) * u128::from(self.window - rolled.elapsed)
    }

    /// Cost-1 requests admissible on top of `curr`: `⌊(L·W − weighted)/W⌋ − curr`.
    #[inline]
    fn remaining(&self, weighted: u128, curr: u64) -> u64 {
        let capacity = u128::from(self.limit) * u128::from(self.window);
        let room = capacity.saturating_sub(weighted);
        // Divided in u64 when the dividend fits (the common case: L·W < 2⁶⁴), which is the
        // same quotient without the out-of-line u128 division.
        // Truncation: whole ≤ L (room ≤ L·W), so it fits in u64.
        #[allow(clippy::cast_possible_truncation)]
        let whole = match u64::try_from(room) {
            Ok(room) => room / self.window,
            Err(_) => (room / u128::from(self.window)) as u64,
        };
        whole.saturating_sub(curr)
    }

    /// Time from `now` until a request of `cost` fits, given it does not fit now. Out of
    /// line: only a deny asks, and the admit path inlines better without it.
    #[inline(never)]
    fn retry_after(&self, rolled: &Rolled, cost: u64, now: u64) -> u64 {
        let window = u128::from(self.window);
        // Offset into window `w + k` from which `p·(W − e) ≤ x·W` holds: e ≥ W − ⌊x·W/p⌋.
        let earliest = |x: u64, p: u64| -> u128 {
            if p == 0 {
                return 0;
            }
            // ⌊x·W/p⌋, divided in u64 when x·W fits (the common case), which is the same
            // quotient without the out-of-line u128 division.
            let fits = match x.checked_mul(self.window) {
                Some(xw) => u128::from(xw / p),
                None => u128::from(x) * window / u128::from(p),
            };
            window - fits.min(window)
        };
        let (k, offset) = match self.limit.checked_sub(rolled.curr + cost) {
            // Fits later in this window, once enough of `prev` has slid out.
            Some(room) => (0, earliest(room, rolled.prev)),
            // Only in the next window, where `curr` becomes `prev` (cost ≤ L).
            None => (1, earliest(self.limit - cost, rolled.curr)),
        };
        let at = (u128::from(rolled.index) + k) * window + offset;
        Nanos::span_to(at, now).as_u64()
    }
}

impl Algorithm for SlidingWindowCounter {
    #[inline]
    fn limit(&self) -> u64 {
        self.limit
    }

    #[inline]
    fn max_cost(&self) -> u64 {
        self.limit
    }

    #[inline(always)]
    fn decide(&self, state: u64, now: Nanos, cost: u32) -> Result<Outcome, InsufficientCapacity> {
        check_cost(cost, self.limit)?;
        let now = now.as_u64();
        let rolled = self.roll(state, now);
        let weighted = self.weighted_prev(&rolled);
        let cost = u64::from(cost);
        let new_curr = rolled.curr + cost;
        let capacity = u128::from(self.limit) * u128::from(self.window);
        if weighted + u128::from(new_curr) * u128::from(self.window) <= capacity {
            // Until every counted permit has slid out of the window.
            let reset_after = if new_curr > 0 {
                until_window(self.window, rolled.index, 2, now)
            } else if weighted > 0 {
                until_window(self.window, rolled.index, 1, now)
            } else {
                0
            };
            let decision = Decision::allow(
                self.limit,
                self.remaining(weighted, new_curr),
                Nanos::new(reset_after),
            );
            let next = self.pack(rolled.index, rolled.prev, new_curr);
            // Truncation: `cost` is the u32 argument, widened above.
            #[allow(clippy::cast_possible_truncation)]
            let cost = cost as u32;
            Ok(admitted(cost, next, decision))
        } else {
            let reset_after = if rolled.curr > 0 {
                until_window(self.window, rolled.index, 2, now)
            } else {
                until_window(self.window, rolled.index, 1, now)
            };
            let decision = Decision::deny(
                self.limit,
                self.remaining(weighted, rolled.curr),
                Nanos::new(reset_after),
                Nanos::new(self.retry_after(&rolled, cost, now)),
            );
            Ok(Outcome::read_only(decision))
        }
    }

    #[inline]
    fn is_idle(&self, state: u64, now: Nanos) -> bool {
        let rolled = self.roll(state, now.as_u64());
        rolled.prev == 0 && rolled.curr == 0
    }

    /// `cost` off `curr` if the stored window is the take's, off `prev` if it rolled once
    /// since (the estimate is linear in both counts), else nothing: exact.
    #[inline]
    fn undo(&self, state: u64, before: u64, after: u64, cost: u32) -> u64 {
        if state == after {
            before
        } else {
            self.give_back(state, self.unpack(after).0, cost)
        }
    }

    /// `cost` off the count of `now`'s window (or of the previous one, if the take was
    /// counted there and it is still weighed).
    #[inline]
    fn refund(&self, state: u64, now: Nanos, cost: u32) -> u64 {
        self.give_back(state, now.as_u64() / self.window, cost)
    }

    /// The current window's count raised by `cost`, saturating at what the layout's
    /// counter holds (at least the limit).
    #[inline]
    fn charge(&self, state: u64, now: Nanos, cost: u32) -> u64 {
        if cost == 0 {
            return state;
        }
        let rolled = self.roll(state, now.as_u64());
        let curr = rolled
            .curr
            .saturating_add(u64::from(cost))
            .min(self.max_count());
        self.pack(rolled.index, rolled.prev, curr)
    }

    /// The estimate rounded up: `curr + ⌈prev·(W − elapsed)/W⌉`.
    #[inline]
    fn used(&self, state: u64, now: Nanos) -> u64 {
        let rolled = self.roll(state, now.as_u64());
        let weighted = self
            .weighted_prev(&rolled)
            .div_ceil(u128::from(self.window));
        // Truncation: weighted ≤ prev < 2^32.
        #[allow(clippy::cast_possible_truncation)]
        let weighted = weighted as u64;
        rolled.curr.saturating_add(weighted)
    }

    /// All of `used` counted in `now`'s window: stricter than any spread over the previous
    /// one (they keep counting, weighted, through the next window). Not capped at the
    /// limit (a count above it denies until enough slides out), saturating only at
    /// [`max_count`](Self::max_count).
    #[inline]
    fn with_used(&self, now: Nanos, used: u64) -> u64 {
        if used == 0 {
            0
        } else {
            self.pack(now.as_u64() / self.window, 0, used.min(self.max_count()))
        }
    }
}

impl SlidingWindowCounter {
    /// `cost` off the count of window `index`: `curr` if it is the stored window, `prev`
    /// if the stored one is `index + 1`.
    #[inline]
    fn give_back(&self, state: u64, index: u64, cost: u32) -> u64 {
        let cost = u64::from(cost);
        let (stored, prev, curr) = self.unpack(state);
        if stored == index {
            self.pack(stored, prev, curr.saturating_sub(cost))
        } else if Some(stored) == index.checked_add(1) {
            self.pack(stored, prev.saturating_sub(cost), curr)
        } else {
            state
        }
    }

    /// A state under `old` moved to these parameters at `now`. Same window (so the same
    /// layout): the counts are kept as they are, and a lowered limit denies until enough of
    /// them slide out. Another window: the permits [`used`](Algorithm::used) now (rounded
    /// up) are recorded in `now`'s window by [`with_used`](Algorithm::with_used), not
    /// capped at the new limit. Either way what was used is kept whole (saturating only at
    /// [`max_count`](Self::max_count)), so a take converted and then refunded is the state
    /// converted without the take.
    #[inline]
    pub fn rescale_from(&self, old: &SlidingWindowCounter, state: u64, now: Nanos) -> u64 {
        if old.window == self.window {
            state
        } else {
            self.with_used(now, old.used(state, now))
        }
    }
}
