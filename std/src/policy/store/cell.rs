//! [`TierCell`]: one key's state under one tier, as the policy's stores read it out or carry
//! it between stores on reload, and [`Log`], a sliding-log key's state with the operations
//! the policy runs on it.
//!
//! Every formula lives in the core; this file only moves state in and out of storage:
//!
//! - single-word algorithms keep a packed `u64` in the tier store's lock-free keyed table;
//!   the store runs [`Algorithm::decide`], [`Algorithm::undo`] and [`Algorithm::refund`]
//!   on it in compare-and-swap loops. A `TierCell::Word` is that word while a reload
//!   carries it to a new store (converted by [`PackedAlgorithm::rescale`](tollgate_core::PackedAlgorithm::rescale)).
//! - the sliding window log keeps a sorted deque of timestamps ([`Log`]) in its key's slot
//!   of a log table (see `store::log`), read through [`LogView`] by the core's pure log
//!   transition ([`SlidingWindowLog::decide`], [`undo`](SlidingWindowLog::undo),
//!   [`refund`](SlidingWindowLog::refund), [`stale`](SlidingWindowLog::stale)).
//!   Every write (an admitted take, a charge, a refund) drops the entries the core calls
//!   stale afterwards: those beyond the newest
//!   [`ceiling`](SlidingWindowLog::ceiling) (`limit + 4096`), and those out of the window
//!   (the Redis store, a ring like the core's `LogRing`, keeps the newest `limit` whatever
//!   their age: see [`droppable`](SlidingWindowLog::droppable); both answer alike every
//!   caller not behind the newest stamp). A deny or a peek changes nothing.
//!   Admissions alone leave at most `limit` entries in the window; charges, conversions
//!   and a lowered limit up to the ceiling (every permit used is kept, so a rollback of a
//!   lowered limit hands out nothing twice).
//!
//! ## Compensation (undoing a take when another tier denied)
//!
//! A take returns a [`Receipt`]. For a word, [`Algorithm::undo`] restores the pre-take
//! value if nothing was recorded since, else takes the take's own contribution off (its
//! docs per algorithm say how exact that is); for a log, the take's timestamps are removed:
//! exact.

use std::collections::VecDeque;

use tollgate_core::{
    Algorithm, AnyAlgorithm, Decision, InsufficientCapacity, LogView, Nanos, SlidingWindowLog,
};

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

/// One key's state under one tier, owned: read out of a store or carried between stores
/// on a reload.
#[derive(Debug)]
pub(crate) enum TierCell {
    /// A packed single-word state.
    Word(u64),
    /// A sliding window log.
    Log(Log),
}

/// A sliding window log's timestamps, oldest first: after every write those still in the
/// window, at most the log's
/// [`ceiling`](SlidingWindowLog::ceiling) (`limit` from admissions alone), in storage
/// below `16 · ceiling` bytes.
#[derive(Clone, Debug, Default)]
pub(crate) struct Log(VecDeque<u64>);

impl LogView for Log {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }

    // Truncation: i < len, which came from a usize.
    #[allow(clippy::cast_possible_truncation)]
    fn stamp(&self, i: u64) -> u64 {
        self.0[i as usize]
    }
}

impl Log {
    /// Appends `count` stamps `stamp` (the deque grows by doubling: its storage stays below
    /// twice the most stamps it held, so below `2 · ceiling` words).
    fn record(&mut self, stamp: u64, count: u64) {
        // Truncation: count ≤ a request's cost, a u32 (`take`), or ≤ the log's ceiling
        // (`SlidingWindowLog::charge`, `with_used`), at most MAX_LOG_LIMIT + 4096 for a
        // policy tier; a usize has at least 32 bits wherever std builds.
        #[allow(clippy::cast_possible_truncation)]
        let count = count as usize;
        self.0.extend(std::iter::repeat_n(stamp, count));
    }

    /// What every write ends with: drops the core's [`stale`](SlidingWindowLog::stale)
    /// oldest entries (beyond the newest `ceiling`, or out of the window at `now`), so a
    /// log holds only what still counts (a handful of stamps for most keys, whatever the
    /// limit).
    fn keep(&mut self, params: &SlidingWindowLog, now: Nanos) {
        // Truncation: at most the log's length, a usize.
        #[allow(clippy::cast_possible_truncation)]
        let stale = params.stale(self, now) as usize;
        self.0.drain(..stale);
    }

    /// Forgets every stamp: a fresh key's log.
    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }

    /// Decides `cost` at `now` and records it if admitted (a deny changes nothing).
    pub(crate) fn take(
        &mut self,
        params: &SlidingWindowLog,
        now: Nanos,
        cost: u32,
    ) -> Result<(Decision, Option<Receipt>), InsufficientCapacity> {
        let outcome = params.decide(self, now, cost)?;
        let receipt = outcome.record.map(|stamp| {
            self.record(stamp, u64::from(cost));
            self.keep(params, now);
            Receipt::Log { stamp }
        });
        Ok((outcome.decision, receipt))
    }

    /// The decision `cost` would get at `now`; records nothing.
    pub(crate) fn peek(
        &self,
        params: &SlidingWindowLog,
        now: Nanos,
        cost: u32,
    ) -> Result<Decision, InsufficientCapacity> {
        Ok(params.decide(self, now, cost)?.decision)
    }

    /// Undoes a take of `cost` described by `receipt`: its timestamps are removed.
    pub(crate) fn compensate(&mut self, params: &SlidingWindowLog, receipt: Receipt, cost: u32) {
        if let Receipt::Log { stamp } = receipt {
            let (start, end) = params.undo(self, stamp, cost);
            // Truncation: start ≤ end ≤ the log's length, a usize.
            #[allow(clippy::cast_possible_truncation)]
            let range = start as usize..end as usize;
            self.0.drain(range);
        }
    }

    /// Records `cost` permits at `now` whatever the limit says (work already done).
    pub(crate) fn charge(&mut self, params: &SlidingWindowLog, now: Nanos, cost: u32) {
        let (stamp, count) = params.charge(self, now, cost);
        self.record(stamp, count);
        self.keep(params, now);
    }

    /// Gives `cost` permits back at `now` (a caller's refund: the request was not served).
    pub(crate) fn refund(&mut self, params: &SlidingWindowLog, now: Nanos, cost: u32) {
        // Truncation: at most the log's length, a usize.
        #[allow(clippy::cast_possible_truncation)]
        let back = params.refund(self, now, cost) as usize;
        let keep = self.0.len() - back;
        self.0.truncate(keep);
        self.keep(params, now);
    }

    /// Whether forgetting it at `now` loses nothing.
    pub(crate) fn is_idle(&self, params: &SlidingWindowLog, now: Nanos) -> bool {
        params.is_idle(self, now)
    }

    /// What forgetting it at `now` loses, as a keyed table compares it: the time until it
    /// is fresh again, then `u64::MAX - remaining`.
    pub(crate) fn loss(&self, params: &SlidingWindowLog, now: Nanos) -> (u64, u64) {
        crate::keyed::loss_of(self.peek(params, now, 0))
    }

    /// Bytes its storage takes.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.0.capacity() * core::mem::size_of::<u64>()
    }
}

impl TierCell {
    /// A key never seen, under `algorithm`.
    pub(crate) fn fresh(algorithm: &AnyAlgorithm) -> TierCell {
        match algorithm {
            AnyAlgorithm::Packed(_) => TierCell::Word(0),
            AnyAlgorithm::Log(_) => TierCell::Log(Log::default()),
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
            (TierCell::Log(log), AnyAlgorithm::Log(params)) => log.peek(params, now, cost),
            // A cell always matches its store's algorithm (a carried one is converted
            // first); a mismatched one holds nothing readable: refuse rather than guess.
            (TierCell::Word(_), AnyAlgorithm::Log(_))
            | (TierCell::Log(_), AnyAlgorithm::Packed(_)) => {
                Err(InsufficientCapacity { max_cost: 0 })
            }
        }
    }

    /// Rewrites this cell, valid under `old`, into its state under `new` at `now`: the
    /// core's conversion rules (see [`PackedAlgorithm::rescale`](tollgate_core::PackedAlgorithm::rescale) and
    /// [`SlidingWindowLog`]): exactly the permits used are carried, rounded toward the
    /// stricter side, not capped at the new limit (a key that used more than a lowered
    /// limit stays denied, and keeps that count when the limit is raised again).
    pub(crate) fn convert(&mut self, old: &AnyAlgorithm, new: &AnyAlgorithm, now: Nanos) {
        let used = match (&mut *self, old, new) {
            (TierCell::Word(word), AnyAlgorithm::Packed(o), AnyAlgorithm::Packed(n)) => {
                *word = n.rescale(o, *word, now);
                return;
            }
            // Timestamps keep their meaning under any log parameters: those the old ones
            // still count are kept.
            (TierCell::Log(log), AnyAlgorithm::Log(o), AnyAlgorithm::Log(n)) => {
                // Truncation: at most the log's length, a usize.
                #[allow(clippy::cast_possible_truncation)]
                let dropped = n.rescale_from(o, &*log, now) as usize;
                log.0.drain(..dropped);
                return;
            }
            (TierCell::Word(word), AnyAlgorithm::Packed(o), AnyAlgorithm::Log(_)) => {
                o.used(*word, now)
            }
            (TierCell::Log(log), AnyAlgorithm::Log(o), AnyAlgorithm::Packed(_)) => {
                o.used(&*log, now)
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
                let mut log = Log::default();
                if count > 0 {
                    log.record(stamp, count);
                }
                TierCell::Log(log)
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

    /// The log of a log cell (empty for a word).
    pub(crate) fn into_log(self) -> Log {
        match self {
            TierCell::Log(log) => log,
            TierCell::Word(_) => Log::default(),
        }
    }
}
