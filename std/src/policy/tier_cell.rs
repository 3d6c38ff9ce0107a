//! [`TierCell`]: one key's state under one tier, and the operations the policy runs on it:
//! take (decide and record), peek, exact compensation of a take, refund, and conversion to
//! another algorithm on reload.
//!
//! Single-word algorithms keep a `u64` driven by the core's pure [`Algorithm::decide`] in a
//! compare-and-swap loop: in the tier store's keyed table on the check path (through
//! [`compensated_word`] and [`refunded_word`] for undoing), and in a `TierCell::Word` while
//! a reload carries it to a new store. The sliding window log keeps a sorted deque of
//! timestamps behind a per-key mutex (its state is `O(limit)` words; the policy needs to
//! remove single entries exactly, which the core's append-only ring cannot).
//!
//! ## Compensation (undoing a take when another tier denied)
//!
//! A take returns a [`Receipt`]. Compensating it:
//!
//! 1. if the word still holds exactly what the take wrote, the pre-take value is
//!    compare-and-swapped back: exact for every algorithm;
//! 2. otherwise (another request was recorded since) the take's own contribution is
//!    subtracted:
//!    - fixed window: `cost` off the count if the window the take counted in is still
//!      current, else nothing (that window no longer counts): exact;
//!    - sliding window counter: `cost` off `curr` if the window is the take's, off `prev`
//!      if it rolled once (the estimate is linear in both counts), else nothing: exact;
//!    - sliding window log: the take's timestamps are removed: exact;
//!    - GCRA, token bucket, leaky bucket: `cost · T` off the theoretical arrival (drain)
//!      time, never below the pre-take value. Exact when the requests recorded in between
//!      found the bucket busy (their `now` not past the pre-take time) — in particular
//!      whenever concurrent callers share a clock reading, which is when tiers race.
//!      Otherwise (a caller whose `now` is later by `δ` slipped in between) up to `δ`
//!      nanoseconds of credit, less than one permit for `δ < T`, may be returned early.

use std::collections::VecDeque;
use std::sync::PoisonError;

use tollgate_core::{
    Algorithm, AnyAlgorithm, Decision, InsufficientCapacity, Nanos, PackedAlgorithm,
    SlidingWindowLog,
};

use super::keyed_cells::KeyedValue;
use crate::sync::{AtomicU64, Mutex, Ordering};

/// What a take recorded, so it can be compensated exactly.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Receipt {
    /// A single word moved from `before` to `after`.
    Word {
        /// The value the take replaced.
        before: u64,
        /// The value the take wrote.
        after: u64,
    },
    /// `cost` timestamps equal to `stamp` were appended to a log.
    Log {
        /// The recorded timestamp.
        stamp: u64,
    },
}

/// One key's state under one tier.
#[derive(Debug)]
pub(crate) enum TierCell {
    /// A packed single-word state.
    Word(AtomicU64),
    /// A sliding window log: admitted timestamps, oldest first (boxed, so single-word
    /// cells stay two words).
    Log(Box<Mutex<VecDeque<u64>>>),
}

impl KeyedValue<AnyAlgorithm> for TierCell {
    fn fresh(algorithm: &AnyAlgorithm) -> TierCell {
        match algorithm {
            AnyAlgorithm::Packed(_) => TierCell::Word(AtomicU64::new(0)),
            AnyAlgorithm::Log(_) => TierCell::Log(Box::new(Mutex::new(VecDeque::new()))),
        }
    }

    fn is_idle(&self, algorithm: &AnyAlgorithm, now: Nanos) -> bool {
        match (self, algorithm) {
            // Relaxed: read under the shard's write lock, no other memory involved.
            (TierCell::Word(word), AnyAlgorithm::Packed(a)) => {
                a.is_idle(word.load(Ordering::Relaxed), now)
            }
            (TierCell::Log(log), AnyAlgorithm::Log(params)) => {
                let log = log.lock().unwrap_or_else(PoisonError::into_inner);
                log.back()
                    .map_or(true, |&t| !params.in_window(t, now.as_u64()))
            }
            _ => true,
        }
    }

    fn loss(&self, algorithm: &AnyAlgorithm, now: Nanos) -> u64 {
        // The time until the key is back to a fresh state: what eviction would forgive.
        self.peek(algorithm, now, 0)
            .map_or(u64::MAX, |d| d.reset_after.as_u64())
    }
}

/// The interval a TAT-based algorithm (GCRA, token bucket, leaky bucket) advances per
/// permit; `None` for the window algorithms.
fn tat_interval(algorithm: &PackedAlgorithm) -> Option<u64> {
    match algorithm {
        PackedAlgorithm::Gcra(g) => Some(g.emission_interval().as_u64()),
        PackedAlgorithm::TokenBucket(t) => Some(t.refill_interval().as_u64()),
        PackedAlgorithm::LeakyBucket(l) => Some(l.drain_interval().as_u64()),
        _ => None,
    }
}

/// Where compensation may subtract: for windows the window index the take counted in, for
/// TAT algorithms the floor the time may not drop below.
#[derive(Copy, Clone)]
enum Anchor {
    /// Undoing a take: the words it saw and wrote.
    Take { before: u64, after: u64 },
    /// A caller's refund at `now`.
    Now(u64),
}

/// The word after giving back `cost` permits to `state`.
fn give_back_word(algorithm: &PackedAlgorithm, state: u64, cost: u64, anchor: Anchor) -> u64 {
    match algorithm {
        PackedAlgorithm::FixedWindow(w) => {
            let target = match anchor {
                Anchor::Take { after, .. } => w.unpack(after).0,
                Anchor::Now(now) => now / w.window().as_u64(),
            };
            let (index, count) = w.unpack(state);
            if index == target {
                w.pack(index, count.saturating_sub(cost))
            } else {
                state
            }
        }
        PackedAlgorithm::SlidingWindowCounter(w) => {
            let target = match anchor {
                Anchor::Take { after, .. } => w.unpack(after).0,
                Anchor::Now(now) => now / w.window().as_u64(),
            };
            let (index, prev, curr) = w.unpack(state);
            if index == target {
                w.pack(index, prev, curr.saturating_sub(cost))
            } else if index == target.saturating_add(1) {
                w.pack(index, prev.saturating_sub(cost), curr)
            } else {
                state
            }
        }
        _ => {
            let Some(interval) = tat_interval(algorithm) else {
                return state;
            };
            let floor = match anchor {
                Anchor::Take { before, .. } => before,
                Anchor::Now(now) => now,
            };
            if state <= floor {
                return state;
            }
            state
                .saturating_sub(cost.saturating_mul(interval))
                .max(floor)
        }
    }
}

/// The word after undoing a take (described by `receipt`) of `cost` from `state`: the
/// pre-take word if nothing was recorded since, else the take's own contribution off.
pub(crate) fn compensated_word(
    algorithm: &PackedAlgorithm,
    state: u64,
    receipt: Receipt,
    cost: u32,
) -> u64 {
    match receipt {
        Receipt::Word { before, after } if state == after => before,
        Receipt::Word { before, after } => give_back_word(
            algorithm,
            state,
            u64::from(cost),
            Anchor::Take { before, after },
        ),
        Receipt::Log { .. } => state,
    }
}

/// The word after a caller's refund of `cost` permits at `now`.
pub(crate) fn refunded_word(algorithm: &PackedAlgorithm, state: u64, now: Nanos, cost: u32) -> u64 {
    give_back_word(algorithm, state, u64::from(cost), Anchor::Now(now.as_u64()))
}

impl TierCell {
    /// Decides `cost` at `now` and records it if admitted.
    pub(crate) fn take(
        &self,
        algorithm: &AnyAlgorithm,
        now: Nanos,
        cost: u32,
    ) -> Result<(Decision, Option<Receipt>), InsufficientCapacity> {
        match (self, algorithm) {
            (TierCell::Word(word), AnyAlgorithm::Packed(a)) => {
                // Relaxed throughout: the word is self-contained (as in the core's
                // `StateCell`); the CAS's modification order linearizes one key.
                let mut current = word.load(Ordering::Relaxed);
                loop {
                    let outcome = a.decide(current, now, cost)?;
                    let Some(next) = outcome.next else {
                        return Ok((outcome.decision, None));
                    };
                    match word.compare_exchange_weak(
                        current,
                        next,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => {
                            let receipt = Receipt::Word {
                                before: current,
                                after: next,
                            };
                            return Ok((outcome.decision, Some(receipt)));
                        }
                        Err(actual) => current = actual,
                    }
                }
            }
            (TierCell::Log(log), AnyAlgorithm::Log(params)) => {
                let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
                let (decision, stamp) = log_decide(params, &mut log, now.as_u64(), cost, true)?;
                Ok((decision, stamp.map(|stamp| Receipt::Log { stamp })))
            }
            // A cell always matches its store's algorithm (a store's algorithm never
            // changes; a reload converts cells as it carries them over). Refuse rather than
            // guess.
            _ => Err(InsufficientCapacity { max_cost: 0 }),
        }
    }

    /// The decision `cost` would get at `now`; records nothing.
    pub(crate) fn peek(
        &self,
        algorithm: &AnyAlgorithm,
        now: Nanos,
        cost: u32,
    ) -> Result<Decision, InsufficientCapacity> {
        match (self, algorithm) {
            (TierCell::Word(word), AnyAlgorithm::Packed(a)) => {
                // Relaxed: a single self-contained word.
                Ok(a.peek(word.load(Ordering::Relaxed), now, cost)?.decision)
            }
            (TierCell::Log(log), AnyAlgorithm::Log(params)) => {
                let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
                Ok(log_decide(params, &mut log, now.as_u64(), cost, false)?.0)
            }
            _ => Err(InsufficientCapacity { max_cost: 0 }),
        }
    }

    /// Undoes a take of `cost` described by `receipt` (see the module docs for exactness).
    pub(crate) fn compensate(&self, algorithm: &AnyAlgorithm, receipt: Receipt, cost: u32) {
        match (self, algorithm, receipt) {
            (TierCell::Word(word), AnyAlgorithm::Packed(a), Receipt::Word { before, after }) => {
                // Relaxed: see `take`.
                if word
                    .compare_exchange(after, before, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
                {
                    return;
                }
                let anchor = Anchor::Take { before, after };
                update_word(word, |s| give_back_word(a, s, u64::from(cost), anchor));
            }
            (TierCell::Log(log), AnyAlgorithm::Log(_), Receipt::Log { stamp }) => {
                let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
                let mut left = cost;
                // The take's entries are the newest equal to `stamp` it could be among;
                // entries with equal stamps are interchangeable.
                let mut i = log.len();
                while left > 0 && i > 0 {
                    i -= 1;
                    if log[i] == stamp {
                        log.remove(i);
                        left -= 1;
                    } else if log[i] < stamp {
                        break;
                    }
                }
            }
            _ => {}
        }
    }

    /// Gives `cost` permits back at `now` (a caller's refund: the request was not served).
    pub(crate) fn refund(&self, algorithm: &AnyAlgorithm, now: Nanos, cost: u32) {
        match (self, algorithm) {
            (TierCell::Word(word), AnyAlgorithm::Packed(a)) => {
                let anchor = Anchor::Now(now.as_u64());
                update_word(word, |s| give_back_word(a, s, u64::from(cost), anchor));
            }
            (TierCell::Log(log), AnyAlgorithm::Log(params)) => {
                let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
                for _ in 0..cost {
                    match log.back() {
                        Some(&t) if params.in_window(t, now.as_u64()) => {
                            log.pop_back();
                        }
                        _ => break,
                    }
                }
            }
            _ => {}
        }
    }

    /// Rewrites this cell, valid under `old`, into an equivalent or stricter state under
    /// `new` at `now` (see [`Policy::reload`](super::Policy::reload) for the rules).
    pub(crate) fn convert(&mut self, old: &AnyAlgorithm, new: &AnyAlgorithm, now: Nanos) {
        if old == new {
            return;
        }
        let now_u = now.as_u64();
        match (&mut *self, old, new) {
            (TierCell::Word(word), AnyAlgorithm::Packed(o), AnyAlgorithm::Packed(n)) => {
                // Relaxed: `&mut self`: no other thread can see this cell.
                let state = word.load(Ordering::Relaxed);
                if let Some(next) = convert_word(o, n, state, now_u) {
                    word.store(next, Ordering::Relaxed);
                    return;
                }
            }
            (TierCell::Log(_), AnyAlgorithm::Log(o), AnyAlgorithm::Log(n))
                if o.window() == n.window() =>
            {
                // Same window: the timestamps keep their meaning; a lowered limit simply
                // denies until enough of them slide out.
                return;
            }
            _ => {}
        }
        // Different shapes: carry the used count over, capped at the new limit.
        let used = self.used(old, now);
        *self = TierCell::fresh(new);
        self.record(new, now, used.min(new.limit()));
    }

    /// The packed word of a single-word cell (`0`, a fresh state, for a log).
    pub(crate) fn word(&self) -> u64 {
        match self {
            // Relaxed: a cell owned by the caller (taken out of its table).
            TierCell::Word(word) => word.load(Ordering::Relaxed),
            TierCell::Log(_) => 0,
        }
    }

    /// A copy of this cell's state.
    pub(crate) fn snapshot(&self) -> TierCell {
        match self {
            // Relaxed: a self-contained word.
            TierCell::Word(word) => TierCell::Word(AtomicU64::new(word.load(Ordering::Relaxed))),
            TierCell::Log(log) => {
                let log = log.lock().unwrap_or_else(PoisonError::into_inner);
                TierCell::Log(Box::new(Mutex::new(log.clone())))
            }
        }
    }

    /// Permits counted against the key at `now` (limit − remaining), rounded against it.
    fn used(&self, algorithm: &AnyAlgorithm, now: Nanos) -> u64 {
        let limit = algorithm.limit();
        match self.peek(algorithm, now, 0) {
            Ok(d) => limit.saturating_sub(d.remaining),
            Err(_) => limit,
        }
    }

    /// Records `permits` at `now` into a fresh cell, as if admitted.
    fn record(&mut self, algorithm: &AnyAlgorithm, now: Nanos, mut permits: u64) {
        match (&mut *self, algorithm) {
            (TierCell::Word(word), AnyAlgorithm::Packed(a)) => {
                // Relaxed: `&mut self`: no other thread can see this cell.
                let mut state = word.load(Ordering::Relaxed);
                let step = a.max_cost().clamp(1, u64::from(u32::MAX));
                while permits > 0 {
                    let cost = permits.min(step);
                    match a.decide(state, now, cost as u32) {
                        Ok(outcome) => match outcome.next {
                            Some(next) => state = next,
                            None => break,
                        },
                        Err(_) => break,
                    }
                    permits -= cost;
                }
                word.store(state, Ordering::Relaxed);
            }
            (TierCell::Log(log), AnyAlgorithm::Log(_)) => {
                let log = log.get_mut().unwrap_or_else(PoisonError::into_inner);
                for _ in 0..permits {
                    log.push_back(now.as_u64());
                }
            }
            _ => {}
        }
    }
}

/// Applies `f` to `word` atomically.
fn update_word(word: &AtomicU64, f: impl Fn(u64) -> u64) {
    // Relaxed: a self-contained word; see `TierCell::take`.
    let mut current = word.load(Ordering::Relaxed);
    loop {
        let next = f(current);
        if next == current {
            return;
        }
        match word.compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return,
            Err(actual) => current = actual,
        }
    }
}

/// Same-shape conversions that keep the state's meaning; `None` when the shapes differ.
fn convert_word(old: &PackedAlgorithm, new: &PackedAlgorithm, state: u64, now: u64) -> Option<u64> {
    use PackedAlgorithm as P;
    match (old, new) {
        (P::Gcra(_) | P::TokenBucket(_), P::Gcra(_) | P::TokenBucket(_))
        | (P::LeakyBucket(_), P::LeakyBucket(_)) => {
            let t_old = tat_interval(old)?;
            let t_new = tat_interval(new)?;
            if state <= now {
                return Some(state);
            }
            // The same number of permits in debt, at the new interval (rounded against the
            // client). Not capped: a key that used more than a lowered limit waits until
            // enough has refilled at the new rate, so flipping a limit down and up again
            // never hands out permits twice.
            let debt = u128::from(state - now);
            let scaled = (debt * u128::from(t_new)).div_ceil(u128::from(t_old));
            Some(now.saturating_add(u64::try_from(scaled).unwrap_or(u64::MAX)))
        }
        (P::FixedWindow(o), P::FixedWindow(n)) if o.window() == n.window() => {
            // The packed count may not exceed the limit: a lowered limit caps it (the key
            // is exhausted for the rest of the window).
            let (index, count) = o.unpack(state);
            Some(n.pack(index, count.min(n.limit())))
        }
        (P::SlidingWindowCounter(o), P::SlidingWindowCounter(n)) if o.window() == n.window() => {
            // Same window, same layout: the counts keep their meaning as they are (the
            // counter's arithmetic saturates when they exceed a lowered limit).
            Some(state)
        }
        _ => None,
    }
}

/// The sliding window log's decision on a deque, recording when `commit`.
fn log_decide(
    params: &SlidingWindowLog,
    log: &mut VecDeque<u64>,
    now: u64,
    cost: u32,
    commit: bool,
) -> Result<(Decision, Option<u64>), InsufficientCapacity> {
    let limit = params.limit();
    let cost = u64::from(cost);
    if cost > limit {
        return Err(InsufficientCapacity { max_cost: limit });
    }
    while log.front().is_some_and(|&t| !params.in_window(t, now)) {
        log.pop_front();
    }
    let count = log.len() as u64;
    let newest = log.back().copied();
    if count + cost <= limit {
        let stamp = newest.map_or(now, |t| t.max(now));
        let reset_after = if cost > 0 {
            params.until_out(stamp, now)
        } else {
            newest.map_or(Nanos::ZERO, |t| params.until_out(t, now))
        };
        let decision = Decision::allow(limit, limit - count - cost, reset_after);
        if commit && cost > 0 {
            log.extend(std::iter::repeat(stamp).take(cost as usize));
            return Ok((decision, Some(stamp)));
        }
        Ok((decision, None))
    } else {
        let reset_after = newest.map_or(Nanos::ZERO, |t| params.until_out(t, now));
        // The entry that must slide out before `cost` more fit.
        let blocking = (count + cost - limit - 1) as usize;
        let retry_after = log
            .get(blocking)
            .map_or(reset_after, |&t| params.until_out(t, now));
        Ok((
            Decision::deny(limit, limit - count.min(limit), reset_after, retry_after),
            None,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::TierCell;

    #[test]
    fn single_word_cells_stay_two_words() {
        assert_eq!(core::mem::size_of::<TierCell>(), 16);
    }
}
