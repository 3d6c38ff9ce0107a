//! Fixed window: at most `L` permits in each window `[w·W, (w+1)·W)`, windows aligned to the
//! clock's epoch.
//!
//! ```text
//! w = ⌊now / W⌋ ;  count = 0 if the stored window is older than w
//! admit iff count + cost ≤ L ;  reset_after = (w+1)·W − now
//! ```
//!
//! The boundary burst: `L` permits at the very end of one window and `L` more at the start
//! of the next are all admitted, so up to `2·L` pass in an instant straddling a boundary.
//! That is the price of O(1) state; the sliding window counter and log avoid it.
//!
//! A `now` in a window older than the stored one (a late thread) is counted against the
//! stored, newer window: it can be refused, never over-admitted.
//!
//! Packed state, with `c = 64 − bits(u64::MAX / W)` counter bits (so the full window index of
//! any time fits and nothing wraps):
//!
//! ```text
//!  63                           c   c-1                      0
//! +------------------------------+----------------------------+
//! |  window index w = ⌊now / W⌋  |   count used in w (< 2^c)  |
//! +------------------------------+----------------------------+
//! ```
//!
//! The count is at most `L` from admissions alone, but the counter holds far more (35 bits
//! for a one-minute window, 29 for a second): a charge (work already done) and a conversion
//! from other parameters (a reload that lowered the limit, see
//! [`rescale_from`](FixedWindow::rescale_from)) record every permit used, saturating only at
//! `2^c − 1` ([`max_count`](FixedWindow::max_count)). Decisions read a count above `L` as
//! exhausted. So a key that used 100 of 100, moved to a limit of 10 and back to 100 within
//! the window, still has used 100: a rollback never hands out the same permits twice.

use crate::algorithm::{admitted, check_cost};
use crate::window::{until_window, validate};
use crate::{Algorithm, ConfigError, Decision, InsufficientCapacity, Nanos, Outcome};

/// Fixed window parameters: limit `L` per window `W`.
///
/// ```
/// use tollgate_core::{FixedWindow, Limiter, Nanos};
/// let window = Limiter::new(FixedWindow::new(3, Nanos::from_secs(1)).unwrap());
/// let at = |ms| Nanos::from_millis(ms);
/// assert_eq!((0..5).filter(|_| window.check_at(at(900)).allowed).count(), 3);
/// // The next window starts fresh: the boundary burst.
/// assert_eq!((0..5).filter(|_| window.check_at(at(1000)).allowed).count(), 3);
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct FixedWindow {
    limit: u64,
    window: u64,
    count_bits: u32,
}

impl FixedWindow {
    /// `limit` permits per window of `window`.
    ///
    /// Errors: zero limit or window, or a limit too large for the counter bits left beside
    /// the window index (about one permit per nanosecond of window; the error says the
    /// exact maximum).
    pub const fn new(limit: u64, window: Nanos) -> Result<FixedWindow, ConfigError> {
        match validate(limit, window, 1) {
            Ok(count_bits) => Ok(FixedWindow {
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

    /// The most the packed count holds, `2^c − 1` (at least the limit): where a charge or
    /// a conversion saturates.
    ///
    /// ```
    /// use tollgate_core::{FixedWindow, Nanos};
    /// let minute = FixedWindow::new(100, Nanos::from_secs(60)).unwrap();
    /// assert_eq!(minute.max_count(), (1 << 35) - 1);
    /// ```
    #[inline]
    pub const fn max_count(&self) -> u64 {
        (1u64 << self.count_bits) - 1
    }

    /// Packs `(window index, count)`.
    #[inline]
    pub const fn pack(&self, index: u64, count: u64) -> u64 {
        (index << self.count_bits) | count
    }

    /// Unpacks into `(window index, count)`.
    #[inline]
    pub const fn unpack(&self, state: u64) -> (u64, u64) {
        (
            state >> self.count_bits,
            state & ((1u64 << self.count_bits) - 1),
        )
    }

    /// The window index and count in force at `now`: a stored window older than `now`'s
    /// counts zero; a newer one (late caller) is kept.
    #[inline]
    fn current(&self, state: u64, now: u64) -> (u64, u64) {
        let (stored, count) = self.unpack(state);
        let index = now / self.window;
        if stored >= index {
            (stored, count)
        } else {
            (index, 0)
        }
    }
}

impl Algorithm for FixedWindow {
    #[inline]
    fn limit(&self) -> u64 {
        self.limit
    }

    #[inline]
    fn max_cost(&self) -> u64 {
        self.limit
    }

    #[inline]
    fn decide(&self, state: u64, now: Nanos, cost: u32) -> Result<Outcome, InsufficientCapacity> {
        check_cost(cost, self.limit)?;
        let now = now.as_u64();
        let (index, count) = self.current(state, now);
        let reset_after = Nanos::new(until_window(self.window, index, 1, now));
        // count < 2^c ≤ 2^63 and cost < 2^32: the sum cannot overflow.
        let new_count = count + u64::from(cost);
        if new_count <= self.limit {
            let decision = Decision::allow(self.limit, self.limit - new_count, reset_after);
            Ok(admitted(cost, self.pack(index, new_count), decision))
        } else {
            // Saturating: a charge or a conversion from a higher limit may have left more.
            let decision = Decision::deny(
                self.limit,
                self.limit.saturating_sub(count),
                reset_after,
                reset_after,
            );
            Ok(Outcome::read_only(decision))
        }
    }

    #[inline]
    fn is_idle(&self, state: u64, now: Nanos) -> bool {
        self.current(state, now.as_u64()).1 == 0
    }

    /// `cost` off the count if the window the take counted in is still the stored one,
    /// else nothing (that window no longer counts): exact.
    #[inline]
    fn undo(&self, state: u64, before: u64, after: u64, cost: u32) -> u64 {
        if state == after {
            before
        } else {
            self.give_back(state, self.unpack(after).0, cost)
        }
    }

    /// `cost` off the count of `now`'s window, if that is the stored one.
    #[inline]
    fn refund(&self, state: u64, now: Nanos, cost: u32) -> u64 {
        self.give_back(state, now.as_u64() / self.window, cost)
    }

    /// The count of the current window raised by `cost`, saturating at what the layout's
    /// counter holds (at least the limit, so the key is denied for the rest of the window).
    #[inline]
    fn charge(&self, state: u64, now: Nanos, cost: u32) -> u64 {
        if cost == 0 {
            return state;
        }
        let (index, count) = self.current(state, now.as_u64());
        self.pack(
            index,
            count.saturating_add(u64::from(cost)).min(self.max_count()),
        )
    }

    #[inline]
    fn used(&self, state: u64, now: Nanos) -> u64 {
        self.current(state, now.as_u64()).1
    }

    /// All of `used` counted in `now`'s window, not capped at the limit (a count above it
    /// denies until the window ends), saturating only at [`max_count`](Self::max_count).
    #[inline]
    fn with_used(&self, now: Nanos, used: u64) -> u64 {
        if used == 0 {
            0
        } else {
            self.pack(now.as_u64() / self.window, used.min(self.max_count()))
        }
    }
}

impl FixedWindow {
    /// `cost` off the count if the stored window is `index`.
    #[inline]
    fn give_back(&self, state: u64, index: u64, cost: u32) -> u64 {
        let (stored, count) = self.unpack(state);
        if stored == index {
            self.pack(stored, count.saturating_sub(u64::from(cost)))
        } else {
            state
        }
    }

    /// A state under `old` moved to these parameters at `now`.
    ///
    /// - Same window (so the same layout): the state as it is, the whole count kept. A
    ///   lowered limit leaves a key that used more exhausted until the window ends, and a
    ///   limit raised again (a rollback) gives it only what it has left: 100 used of 100,
    ///   lowered to 10, one refunded, raised back to 100, is 99 used, 1 left.
    /// - Another window: the permits [`used`](Algorithm::used) now, all recorded in `now`'s
    ///   window by [`with_used`](Algorithm::with_used) (not capped at the new limit).
    ///
    /// Either way the count is exactly what was used (saturating only at
    /// [`max_count`](Self::max_count)), so a take converted and then refunded is the state
    /// converted without the take.
    #[inline]
    pub fn rescale_from(&self, old: &FixedWindow, state: u64, now: Nanos) -> u64 {
        if old.window == self.window {
            state
        } else {
            self.with_used(now, old.used(state, now))
        }
    }
}
