//! Sliding window log parameters: exactly at most `L` permits in every window of length `W`.
//!
//! ```text
//! admit iff #{ admitted t : t > now − W } + cost ≤ L
//! ```
//!
//! Exact, no boundary burst, at the price of O(L) memory per key. Each admitted permit is
//! recorded at `max(now, newest recorded)`, so the log stays sorted and a late caller
//! (older `now`) can only make the log stricter.
//!
//! The transition is pure, like every other algorithm's, but its state is many words: it
//! reads the stored timestamps through a [`LogView`] (a slice, an array, a deque, an atomic
//! ring's snapshot) whose length is a runtime value, and answers what to write as a
//! [`LogOutcome`] (append `cost` copies of one stamp). Every executor calls these
//! functions: the core's [`LogRing`](crate::LogRing) (const-generic capacity, no
//! allocation), std's policy log tiers, and, through its Lua mirror, Redis.
//!
//! ## More permits than the limit
//!
//! Admissions alone never leave more than `L` entries in the window. A charge (work already
//! done), a conversion from other parameters and a lowered limit may: a log keeps them all,
//! up to its [`ceiling`](SlidingWindowLog::ceiling) `L + EXCESS` (4 096 permits beyond the
//! limit: a bound on a key's memory, where it saturates, keeping the newest). Decisions read
//! only the newest `L` entries, so such a key is denied until enough slide out; [`used`]
//! and [`refund`](SlidingWindowLog::refund) count every entry in the window up to the
//! ceiling. So a key that used 100 of a log of 100, moved to a log of 10, refunded one and
//! moved back to 100 has used 99: a rollback never hands out the same permits twice.
//!
//! What an executor keeps: every write that records into a log or refunds from it (an
//! admitted take, a charge, a refund) drops the [`droppable`](SlidingWindowLog::droppable)
//! oldest entries afterwards: those beyond the newest `ceiling`, and those out of the
//! window but older than the newest `L` (the newest `L` are always kept, so a late caller,
//! whose `now` is older than the write's, decides exactly as on a ring of the last `L`);
//! a deny or a peek writes nothing. Executors that do the same keep the same entries, so
//! they answer identically also after the window changes (a reload).
//!
//! Conversions carry what the old parameters count at the instant of the conversion: a
//! log moved to other log parameters keeps the timestamps the old ones still count (all
//! but the old [`droppable`](SlidingWindowLog::droppable) ones: see
//! [`rescale_from`](SlidingWindowLog::rescale_from)), and the new window and limit apply to
//! them from then on (a lowered limit denies until enough slide out). To and from the
//! single-word algorithms a conversion carries [`used`] permits (see
//! [`PackedAlgorithm::rescale`](crate::PackedAlgorithm::rescale)), recorded here by
//! [`with_used`], not capped at the limit. So, as for every algorithm, a state that is
//! idle under the parameters that wrote it converts to a fresh one: a store may forget it
//! (an expiry, an eviction, an old generation dropped) without changing any answer.
//!
//! [`used`]: SlidingWindowLog::used
//! [`with_used`]: SlidingWindowLog::with_used
//!
//! ```
//! use tollgate_core::{Nanos, SlidingWindowLog};
//! let log = SlidingWindowLog::new(2, Nanos::from_secs(1)).unwrap();
//! let mut stamps: Vec<u64> = Vec::new();
//! for ms in [0, 300, 600] {
//!     let out = log.decide(&stamps[..], Nanos::from_millis(ms), 1).unwrap();
//!     if let Some(stamp) = out.record {
//!         stamps.push(stamp);
//!     }
//! }
//! assert_eq!(stamps, [0, 300_000_000]); // the third was denied
//! ```

use crate::{ConfigError, Decision, InsufficientCapacity, Nanos};

/// Read access to a sliding log's stored timestamps, oldest first (non-decreasing).
///
/// Implemented for slices and arrays; an executor with other storage (an atomic ring, a
/// deque) implements it over what it read. Only the newest `min(len, L)` entries ever
/// matter to a decision, and the functions below read `O(log L)` of them.
pub trait LogView {
    /// How many timestamps are stored.
    fn len(&self) -> u64;

    /// Timestamp number `i`, `0` the oldest; called only with `i < len()`.
    fn stamp(&self, i: u64) -> u64;

    /// The most timestamps the storage can hold; a log whose limit is larger enforces
    /// this instead (stricter, never looser). Unbounded by default.
    fn capacity(&self) -> u64 {
        u64::MAX
    }

    /// Whether nothing is stored.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl LogView for [u64] {
    #[inline]
    fn len(&self) -> u64 {
        <[u64]>::len(self) as u64
    }

    // Truncation: i < len, which came from a usize.
    #[allow(clippy::cast_possible_truncation)]
    #[inline]
    fn stamp(&self, i: u64) -> u64 {
        self[i as usize]
    }
}

impl<const N: usize> LogView for [u64; N] {
    #[inline]
    fn len(&self) -> u64 {
        N as u64
    }

    // Truncation: i < len = N, a usize.
    #[allow(clippy::cast_possible_truncation)]
    #[inline]
    fn stamp(&self, i: u64) -> u64 {
        self[i as usize]
    }
}

/// What [`SlidingWindowLog::decide`] answers: the decision and what to record.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct LogOutcome {
    /// The decision.
    pub decision: Decision,
    /// When admitted with `cost > 0`: append `cost` copies of this timestamp (it is never
    /// older than the newest stored one). `None`: write nothing.
    pub record: Option<u64>,
}

/// Sliding window log parameters: limit `L` per window `W`. Run with a
/// [`LogRing`](crate::LogRing) of capacity `N ≥ L`, or a [`SlidingLogLimiter`](crate::SlidingLogLimiter).
///
/// ```
/// use tollgate_core::{Nanos, SlidingLogLimiter, SlidingWindowLog};
/// let log = SlidingWindowLog::new(3, Nanos::from_secs(1)).unwrap();
/// let limiter = SlidingLogLimiter::<3>::new(log).unwrap();
/// let at = |ms| Nanos::from_millis(ms);
/// assert!(limiter.check_at(at(0)).allowed);
/// assert!(limiter.check_at(at(600)).allowed);
/// assert!(limiter.check_at(at(900)).allowed);
/// let d = limiter.check_at(at(999));
/// assert!(!d.allowed);
/// assert_eq!(d.retry_after, at(1)); // the permit from t = 0 slides out at t = 1000
/// assert!(limiter.check_at(at(1000)).allowed);
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct SlidingWindowLog {
    limit: u64,
    window: u64,
}

impl SlidingWindowLog {
    /// How many permits beyond its limit a log stores (charged, converted, or left by a
    /// lowered limit): see [`ceiling`](Self::ceiling).
    pub const EXCESS: u64 = 4096;

    /// `limit` permits in any window of length `window`.
    pub const fn new(limit: u64, window: Nanos) -> Result<SlidingWindowLog, ConfigError> {
        if limit == 0 {
            return Err(ConfigError::ZeroLimit);
        }
        if window.as_u64() == 0 {
            return Err(ConfigError::ZeroPeriod);
        }
        Ok(SlidingWindowLog {
            limit,
            window: window.as_u64(),
        })
    }

    /// The limit L.
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// The window W.
    pub const fn window(&self) -> Nanos {
        Nanos::new(self.window)
    }

    /// Whether a permit recorded at `t` still counts at `now` (`t > now − W`).
    #[inline]
    pub const fn in_window(&self, t: u64, now: u64) -> bool {
        now < self.window || t > now - self.window
    }

    /// Time from `now` until a permit recorded at `t` leaves the window (0 if it has).
    #[inline]
    pub const fn until_out(&self, t: u64, now: u64) -> Nanos {
        Nanos::span_to(t as u128 + self.window as u128, now)
    }

    /// The largest cost one check can admit: `L`.
    #[inline]
    pub const fn max_cost(&self) -> u64 {
        self.limit
    }

    /// The most entries a log keeps, `L + EXCESS` (saturating): the permits counted beyond
    /// the limit (charges, conversions, a lowered limit) saturate there, the newest kept.
    ///
    /// ```
    /// use tollgate_core::{Nanos, SlidingWindowLog};
    /// let log = SlidingWindowLog::new(10, Nanos::from_secs(60)).unwrap();
    /// assert_eq!(log.ceiling(), 10 + SlidingWindowLog::EXCESS);
    /// ```
    #[inline]
    pub const fn ceiling(&self) -> u64 {
        self.limit.saturating_add(Self::EXCESS)
    }

    /// The limit enforced over `log`: `min(L, capacity)`.
    #[inline]
    fn limit_for<V: LogView + ?Sized>(&self, log: &V) -> u64 {
        self.limit.min(log.capacity())
    }

    /// The most entries counted over `log`: `min(ceiling, capacity)`.
    #[inline]
    fn ceiling_for<V: LogView + ?Sized>(&self, log: &V) -> u64 {
        self.ceiling().min(log.capacity())
    }

    /// Index of the oldest of the newest `within` entries still in the window at `now`
    /// (`log.len()` if none is): a binary search, the entries being sorted.
    #[inline]
    fn first_in_window<V: LogView + ?Sized>(&self, log: &V, within: u64, now: u64) -> u64 {
        let len = log.len();
        let (mut lo, mut hi) = (len - within.min(len), len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.in_window(log.stamp(mid), now) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }

    /// Decides `cost` permits at `now` against the stored timestamps: the pure transition
    /// every sliding-log executor runs.
    ///
    /// ```text
    /// in_window = #{ t among the newest L stored : t > now − W }
    /// admit iff in_window + cost ≤ L, then append cost × max(now, newest)
    /// retry_after (deny) = until entry #(len + cost − L − 1) leaves the window
    /// ```
    ///
    /// Total for any stored values (an executor may call it on a torn read it then
    /// discards): no panic, no overflow.
    #[inline]
    pub fn decide<V: LogView + ?Sized>(
        &self,
        log: &V,
        now: Nanos,
        cost: u32,
    ) -> Result<LogOutcome, InsufficientCapacity> {
        let limit = self.limit_for(log);
        let cost = u64::from(cost);
        if cost > limit {
            return Err(InsufficientCapacity { max_cost: limit });
        }
        let now = now.as_u64();
        let len = log.len();
        let in_window = len - self.first_in_window(log, limit, now);
        let newest = if len > 0 {
            Some(log.stamp(len - 1))
        } else {
            None
        };
        let until_newest_out = newest.map_or(Nanos::ZERO, |t| self.until_out(t, now));
        if in_window + cost <= limit {
            let stamp = newest.map_or(now, |newest| newest.max(now));
            let reset_after = if cost > 0 {
                self.until_out(stamp, now)
            } else {
                until_newest_out
            };
            Ok(LogOutcome {
                decision: Decision::allow(limit, limit - in_window - cost, reset_after),
                record: (cost > 0).then_some(stamp),
            })
        } else {
            // The entry that must slide out before `cost` more fit: it is live and in the
            // window (in_window + cost > limit ≥ cost, so the index is within the newest).
            let retry_after = (len + cost)
                .checked_sub(limit + 1)
                .map_or(until_newest_out, |i| self.until_out(log.stamp(i), now));
            Ok(LogOutcome {
                decision: Decision::deny(limit, limit - in_window, until_newest_out, retry_after),
                record: None,
            })
        }
    }

    /// How many of the oldest stored entries no longer count at `now` (an executor with
    /// growable storage may drop them).
    #[inline]
    pub fn expired<V: LogView + ?Sized>(&self, log: &V, now: Nanos) -> u64 {
        self.first_in_window(log, log.len(), now.as_u64())
    }

    /// How many of the oldest stored entries no longer count at `now` and never will: those
    /// beyond the newest [`ceiling`](Self::ceiling) and those out of the window (what a
    /// write into growable storage drops; see [`droppable`](Self::droppable)).
    #[inline]
    pub fn stale<V: LogView + ?Sized>(&self, log: &V, now: Nanos) -> u64 {
        self.first_in_window(log, self.ceiling_for(log), now.as_u64())
    }

    /// How many of the oldest stored entries a write drops at `now` in a store that keeps
    /// the newest `L` whatever their age, as a ring of `L` slots does ([`LogRing`], the
    /// Redis store's sorted sets): those beyond the newest [`ceiling`](Self::ceiling), and
    /// those out of the window but older than the newest `L`. A store with growable storage
    /// may drop every [`stale`](Self::stale) entry instead (the policy's in-process log
    /// tiers do): the two answer every caller whose `now` is not behind the newest stamp
    /// alike, and a late caller is never admitted beyond `L` in the window of the stamp it
    /// records.
    ///
    /// [`LogRing`]: crate::LogRing
    ///
    /// ```
    /// use tollgate_core::{Nanos, SlidingWindowLog};
    /// let log = SlidingWindowLog::new(1, Nanos::from_secs(1)).unwrap();
    /// let stamps = [0, 500_000_000, 1_200_000_000];
    /// // At 1.4 s the permit of t = 0 has slid out; the one of 0.5 s is still in.
    /// assert_eq!(log.droppable(&stamps[..], Nanos::from_millis(1400)), 1);
    /// // At 2.3 s only the newest is kept (the newest L always are), though all are stale.
    /// assert_eq!(log.droppable(&stamps[..], Nanos::from_millis(2300)), 2);
    /// assert_eq!(log.stale(&stamps[..], Nanos::from_millis(2300)), 3);
    /// ```
    #[inline]
    pub fn droppable<V: LogView + ?Sized>(&self, log: &V, now: Nanos) -> u64 {
        let counted = self.first_in_window(log, self.ceiling_for(log), now.as_u64());
        counted.min(log.len().saturating_sub(self.limit_for(log)))
    }

    /// Permits counted against the key at `now`: the entries in the window among the newest
    /// [`ceiling`](Self::ceiling), so also those beyond the limit (a charge, a conversion,
    /// a lowered limit).
    #[inline]
    pub fn used<V: LogView + ?Sized>(&self, log: &V, now: Nanos) -> u64 {
        log.len() - self.first_in_window(log, self.ceiling_for(log), now.as_u64())
    }

    /// Whether no stored entry is still in the window at `now` (forgetting the log loses
    /// nothing).
    #[inline]
    pub fn is_idle<V: LogView + ?Sized>(&self, log: &V, now: Nanos) -> bool {
        log.is_empty() || !self.in_window(log.stamp(log.len() - 1), now.as_u64())
    }

    /// A caller's refund of `cost` permits at `now`: how many of the newest entries to
    /// remove (those still in the window, at most `cost`, counted up to the
    /// [`ceiling`](Self::ceiling) as [`used`](Self::used) counts them; permits that slid
    /// out came back by themselves).
    #[inline]
    pub fn refund<V: LogView + ?Sized>(&self, log: &V, now: Nanos, cost: u32) -> u64 {
        self.used(log, now).min(u64::from(cost))
    }

    /// Undoing a take that recorded `cost` copies of `stamp`: the range `start..end` of
    /// entries to remove (the newest entries equal to `stamp`, at most `cost`; entries with
    /// equal stamps are interchangeable, so removing any of them is exact).
    #[inline]
    pub fn undo<V: LogView + ?Sized>(&self, log: &V, stamp: u64, cost: u32) -> (u64, u64) {
        // First entry newer than `stamp` (entries are sorted).
        let (mut lo, mut hi) = (0, log.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if log.stamp(mid) > stamp {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        let end = lo;
        let mut start = end;
        while start > 0 && end - start < u64::from(cost) && log.stamp(start - 1) == stamp {
            start -= 1;
        }
        (start, end)
    }

    /// Recording `cost` permits at `now` whatever the limit says (work already done):
    /// `(stamp, count)`, append `count` copies of `stamp = max(now, newest)` (so the log
    /// stays sorted). `count = min(cost, ceiling)`: all of them, as far as the log keeps
    /// any (the write then drops the [`droppable`](Self::droppable) oldest). The key is
    /// denied until enough slide out, and a refund or a raised limit still sees them all.
    #[inline]
    pub fn charge<V: LogView + ?Sized>(&self, log: &V, now: Nanos, cost: u32) -> (u64, u64) {
        let now = now.as_u64();
        let stamp = if log.is_empty() {
            now
        } else {
            log.stamp(log.len() - 1).max(now)
        };
        (stamp, u64::from(cost).min(self.ceiling()))
    }

    /// A log written under `old` moved to these parameters at `now`: how many of its oldest
    /// entries the conversion drops, those `old` no longer counts (out of its window, or
    /// beyond its ceiling: all but its [`used`](Self::used) ones). The rest are kept as
    /// they are, also beyond this limit, so a rollback of a lowered limit finds every
    /// permit used; entries the old window had let go of do not come back under a longer
    /// one (as a bucket's debt repaid under one rate is not owed again).
    ///
    /// ```
    /// use tollgate_core::{Nanos, SlidingWindowLog};
    /// let second = SlidingWindowLog::new(5, Nanos::from_secs(1)).unwrap();
    /// let minute = SlidingWindowLog::new(5, Nanos::from_secs(60)).unwrap();
    /// let stamps = [0, 1_500_000_000];
    /// // At 2 s the per-second log no longer counts the permit of t = 0: it is not carried.
    /// assert_eq!(minute.rescale_from(&second, &stamps[..], Nanos::from_secs(2)), 1);
    /// ```
    #[inline]
    pub fn rescale_from<V: LogView + ?Sized>(
        &self,
        old: &SlidingWindowLog,
        log: &V,
        now: Nanos,
    ) -> u64 {
        log.len() - old.used(log, now)
    }

    /// A log whose key has `used` permits counted against it at `now` (a conversion from
    /// another algorithm): `min(used, ceiling)` copies of `now`, as `(stamp, count)`: every
    /// permit used, also beyond the limit, so that `used` reads `used` back.
    #[inline]
    pub fn with_used(&self, now: Nanos, used: u64) -> (u64, u64) {
        (now.as_u64(), used.min(self.ceiling()))
    }
}
