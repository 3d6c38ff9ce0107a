//! [`TierCell`]: one key's state under one tier, as the policy's stores hold it or carry
//! it between stores on reload, and the operations the policy runs on a sliding-log cell.
//!
//! Every formula lives in the core; this file only moves state in and out of storage:
//!
//! - single-word algorithms keep a packed `u64` in the tier store's lock-free keyed table;
//!   the store runs [`Algorithm::decide`], [`Algorithm::undo`] and [`Algorithm::refund`]
//!   on it in compare-and-swap loops. A `TierCell::Word` is that word while a reload
//!   carries it to a new store (converted by [`PackedAlgorithm::rescale`](tollgate_core::PackedAlgorithm::rescale)).
//! - the sliding window log keeps a sorted deque of timestamps behind a per-key mutex, read
//!   through [`LogView`] by the core's pure log transition ([`SlidingWindowLog::decide`],
//!   [`undo`](SlidingWindowLog::undo), [`refund`](SlidingWindowLog::refund),
//!   [`expired`](SlidingWindowLog::expired)). The deque only holds entries still in the
//!   window, so it is at most `limit` long.
//!
//! ## Compensation (undoing a take when another tier denied)
//!
//! A take returns a [`Receipt`]. For a word, [`Algorithm::undo`] restores the pre-take
//! value if nothing was recorded since, else takes the take's own contribution off (its
//! docs per algorithm say how exact that is); for a log, the take's timestamps are removed:
//! exact.

use std::collections::VecDeque;
use std::sync::PoisonError;

use tollgate_core::{
    Algorithm, AnyAlgorithm, Decision, InsufficientCapacity, LogView, Nanos, SlidingWindowLog,
};

use super::keyed_cells::KeyedValue;
use crate::sync::Mutex;

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
    /// A packed single-word state (owned: in transit between stores).
    Word(u64),
    /// A sliding window log: admitted timestamps still in the window, oldest first (boxed,
    /// so a cell stays two words).
    Log(Box<Mutex<VecDeque<u64>>>),
}

/// A deque of timestamps as the core's [`LogView`].
struct Stamps<'a>(&'a VecDeque<u64>);

impl LogView for Stamps<'_> {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }

    fn stamp(&self, i: u64) -> u64 {
        // i < len, which came from a usize.
        self.0[i as usize]
    }
}

impl KeyedValue<AnyAlgorithm> for TierCell {
    fn fresh(algorithm: &AnyAlgorithm) -> TierCell {
        match algorithm {
            AnyAlgorithm::Packed(_) => TierCell::Word(0),
            AnyAlgorithm::Log(_) => TierCell::Log(Box::new(Mutex::new(VecDeque::new()))),
        }
    }

    fn is_idle(&self, algorithm: &AnyAlgorithm, now: Nanos) -> bool {
        match (self, algorithm) {
            (TierCell::Word(word), AnyAlgorithm::Packed(a)) => a.is_idle(*word, now),
            (TierCell::Log(log), AnyAlgorithm::Log(params)) => {
                let log = log.lock().unwrap_or_else(PoisonError::into_inner);
                params.is_idle(&Stamps(&log), now)
            }
            // A cell always matches its store's algorithm; a mismatched one means nothing.
            (TierCell::Word(_), AnyAlgorithm::Log(_))
            | (TierCell::Log(_), AnyAlgorithm::Packed(_)) => true,
        }
    }

    fn loss(&self, algorithm: &AnyAlgorithm, now: Nanos) -> u64 {
        // The time until the key is back to a fresh state: what eviction would forgive.
        self.peek(algorithm, now, 0)
            .map_or(u64::MAX, |d| d.reset_after.as_u64())
    }
}

/// The cell a store answers for an algorithm it cannot pair with a cell (never expected:
/// a store's cells are created for its own algorithm). Refuse rather than guess.
const MISMATCH: InsufficientCapacity = InsufficientCapacity { max_cost: 0 };

impl TierCell {
    /// Decides `cost` at `now` and records it if admitted (a log cell; a word's take runs
    /// in its keyed table).
    pub(crate) fn take(
        &self,
        algorithm: &AnyAlgorithm,
        now: Nanos,
        cost: u32,
    ) -> Result<(Decision, Option<Receipt>), InsufficientCapacity> {
        match (self, algorithm) {
            (TierCell::Log(log), AnyAlgorithm::Log(params)) => {
                let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
                prune(params, &mut log, now);
                let outcome = params.decide(&Stamps(&log), now, cost)?;
                let receipt = outcome.record.map(|stamp| {
                    log.extend(std::iter::repeat(stamp).take(cost as usize));
                    Receipt::Log { stamp }
                });
                Ok((outcome.decision, receipt))
            }
            // A word's take runs in its keyed table, never on a carried copy.
            (TierCell::Word(_), AnyAlgorithm::Packed(_) | AnyAlgorithm::Log(_))
            | (TierCell::Log(_), AnyAlgorithm::Packed(_)) => Err(MISMATCH),
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
                Ok(a.peek(*word, now, cost)?.decision)
            }
            (TierCell::Log(log), AnyAlgorithm::Log(params)) => {
                let log = log.lock().unwrap_or_else(PoisonError::into_inner);
                Ok(params.decide(&Stamps(&log), now, cost)?.decision)
            }
            (TierCell::Word(_), AnyAlgorithm::Log(_))
            | (TierCell::Log(_), AnyAlgorithm::Packed(_)) => Err(MISMATCH),
        }
    }

    /// Undoes a log take of `cost` described by `receipt`: its timestamps are removed.
    pub(crate) fn compensate(&self, algorithm: &AnyAlgorithm, receipt: Receipt, cost: u32) {
        if let (TierCell::Log(log), AnyAlgorithm::Log(params), Receipt::Log { stamp }) =
            (self, algorithm, receipt)
        {
            let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
            let (start, end) = params.undo(&Stamps(&log), stamp, cost);
            log.drain(start as usize..end as usize);
        }
    }

    /// Records `cost` permits in a log at `now` whatever its limit says (work already done).
    pub(crate) fn charge(&self, algorithm: &AnyAlgorithm, now: Nanos, cost: u32) {
        if let (TierCell::Log(log), AnyAlgorithm::Log(params)) = (self, algorithm) {
            let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
            prune(params, &mut log, now);
            let (stamp, count) = params.charge(&Stamps(&log), now, cost);
            log.extend(std::iter::repeat(stamp).take(count as usize));
        }
    }

    /// Gives `cost` permits of a log back at `now` (a caller's refund: the request was
    /// not served).
    pub(crate) fn refund(&self, algorithm: &AnyAlgorithm, now: Nanos, cost: u32) {
        if let (TierCell::Log(log), AnyAlgorithm::Log(params)) = (self, algorithm) {
            let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
            let back = params.refund(&Stamps(&log), now, cost) as usize;
            let keep = log.len() - back;
            log.truncate(keep);
        }
    }

    /// Rewrites this cell, valid under `old`, into its state under `new` at `now`: the
    /// core's conversion rules (see [`PackedAlgorithm::rescale`](tollgate_core::PackedAlgorithm::rescale) and
    /// [`SlidingWindowLog`]): the permits used are carried, rounded toward the stricter
    /// side, never over the new limit.
    pub(crate) fn convert(&mut self, old: &AnyAlgorithm, new: &AnyAlgorithm, now: Nanos) {
        let used = match (&mut *self, old, new) {
            (TierCell::Word(word), AnyAlgorithm::Packed(o), AnyAlgorithm::Packed(n)) => {
                *word = n.rescale(o, *word, now);
                return;
            }
            // Timestamps keep their meaning under any log parameters.
            (TierCell::Log(_), AnyAlgorithm::Log(_), AnyAlgorithm::Log(_)) => return,
            (TierCell::Word(word), AnyAlgorithm::Packed(o), AnyAlgorithm::Log(_)) => {
                o.used(*word, now)
            }
            (TierCell::Log(log), AnyAlgorithm::Log(o), AnyAlgorithm::Packed(_)) => {
                let log = log.get_mut().unwrap_or_else(PoisonError::into_inner);
                o.used(&Stamps(log), now)
            }
            // A cell that does not match `old` holds nothing we can read: start fresh.
            (TierCell::Word(_), AnyAlgorithm::Log(_), _)
            | (TierCell::Log(_), AnyAlgorithm::Packed(_), _) => 0,
        };
        *self = TierCell::with_used(new, now, used);
    }

    /// A cell under `algorithm` with `used` permits counted against it at `now`.
    fn with_used(algorithm: &AnyAlgorithm, now: Nanos, used: u64) -> TierCell {
        match algorithm {
            AnyAlgorithm::Packed(a) => TierCell::Word(a.with_used(now, used)),
            AnyAlgorithm::Log(params) => {
                let (stamp, count) = params.with_used(now, used);
                let log = std::iter::repeat(stamp).take(count as usize).collect();
                TierCell::Log(Box::new(Mutex::new(log)))
            }
        }
    }

    /// The packed word of a single-word cell (`0`, a fresh state, for a log).
    pub(crate) fn word(&self) -> u64 {
        match self {
            TierCell::Word(word) => *word,
            TierCell::Log(_) => 0,
        }
    }

    /// A copy of this cell's state.
    pub(crate) fn snapshot(&self) -> TierCell {
        match self {
            TierCell::Word(word) => TierCell::Word(*word),
            TierCell::Log(log) => {
                let log = log.lock().unwrap_or_else(PoisonError::into_inner);
                TierCell::Log(Box::new(Mutex::new(log.clone())))
            }
        }
    }
}

/// Drops the timestamps that no longer count at `now`, keeping the deque at most `limit`
/// long.
fn prune(params: &SlidingWindowLog, log: &mut VecDeque<u64>, now: Nanos) {
    let expired = params.expired(&Stamps(log), now) as usize;
    log.drain(..expired);
}

#[cfg(test)]
mod tests {
    use super::TierCell;

    #[test]
    fn cells_stay_two_words() {
        assert_eq!(core::mem::size_of::<TierCell>(), 16);
    }
}
