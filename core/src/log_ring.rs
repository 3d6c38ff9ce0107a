//! [`LogRing`]: the sliding window log's multi-word state, a fixed ring of timestamps, and
//! [`SlidingLogLimiter`], its direct limiter.
//!
//! Layout: one head word and `N` timestamp slots. Permit number `s` (counting from 0 since
//! the ring was fresh) is stored in `slots[s % N]`; the live entries are `[h − min(h, L), h)`.
//!
//! ```text
//! head:  63                                         1   0
//!       +--------------------------------------------+---+
//!       |  h: permits recorded since fresh            | W |   W = a writer is recording
//!       +--------------------------------------------+---+
//! slots: [ t(s) for s ≡ 0 mod N ] [ t(s) ≡ 1 ] ... [ t(s) ≡ N−1 ]   sorted by s
//! ```
//!
//! Concurrency: a sequence lock. Readers (every check starts as one) read the head, the few
//! slots a binary search needs, and the head again; a changed head means retry. A deny or a
//! peek therefore writes nothing. An admission claims the writer bit with a
//! compare-and-swap from exactly the head it decided on, so no other admission can slip in
//! between its decision and its record; it then writes its slots and releases the head with
//! `h + cost`. `h` only grows, so the head never repeats a value (no ABA).
//!
//! Progress: this is the one executor in tollgate that is not lock-free. Checks of one key
//! never block each other while nobody is recording; a check (admit, deny or peek) that finds
//! the writer bit set spins until that writer's `cost` slot stores and one head store are
//! done. Other keys are never affected. Because a preempted writer stalls its key's readers,
//! on a single core do not share one ring between an interrupt handler and the code it
//! interrupts (the single-word algorithms have no such restriction).
//!
//! Why not lock-free: an admission must record up to `L` timestamps and advance the head as
//! one step, and the stamps are full 64-bit times, leaving no bits for the sequence tags a
//! lock-free multi-word protocol would need. The loom model `log_ring` checks this protocol.

use crate::sync::{fence, new_atomic_u64, spin_loop, AtomicU64, Ordering};
use crate::{Clock, ConfigError, Decision, InsufficientCapacity, LogView, Nanos, SlidingWindowLog};

const WRITER: u64 = 1;

/// The ring of the last `N` admitted timestamps of one key (lock-free reads, see the module
/// docs for the write protocol). `N` must be at least the limit `L`; a smaller ring enforces
/// `N` instead (stricter, never looser).
pub struct LogRing<const N: usize> {
    head: AtomicU64,
    slots: [AtomicU64; N],
}

impl<const N: usize> core::fmt::Debug for LogRing<N> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Relaxed: a diagnostic snapshot, not a decision.
        f.debug_struct("LogRing")
            .field("recorded", &(self.head.load(Ordering::Relaxed) >> 1))
            .field("capacity", &N)
            .finish()
    }
}

impl<const N: usize> Default for LogRing<N> {
    fn default() -> Self {
        LogRing::new()
    }
}

/// The live entries of a ring as a [`LogView`], read with `Relaxed` loads inside the
/// sequence lock's read section (validated by the caller's head re-read).
struct RingView<'a, const N: usize> {
    ring: &'a LogRing<N>,
    /// Permits recorded since fresh (the head, writer bit shifted out).
    recorded: u64,
}

impl<const N: usize> LogView for RingView<'_, N> {
    #[inline]
    fn len(&self) -> u64 {
        self.recorded.min(N as u64)
    }

    #[inline]
    fn stamp(&self, i: u64) -> u64 {
        let seq = self.recorded - self.len() + i;
        // Relaxed: validated by re-reading the head after the read section's fence.
        self.ring.slot(seq).load(Ordering::Relaxed)
    }

    #[inline]
    fn capacity(&self) -> u64 {
        N as u64
    }
}

impl<const N: usize> LogRing<N> {
    /// An empty ring: a fresh key.
    pub fn new() -> LogRing<N> {
        LogRing {
            head: new_atomic_u64(0),
            slots: core::array::from_fn(|_| new_atomic_u64(0)),
        }
    }

    #[inline]
    fn slot(&self, seq: u64) -> &AtomicU64 {
        // N ≥ 1 whenever a slot is read (the effective limit is then ≥ 1).
        // Truncation: the remainder is below N, a usize.
        #[allow(clippy::cast_possible_truncation)]
        let index = (seq % N as u64) as usize;
        &self.slots[index]
    }

    /// Runs `f` on one consistent view of the ring: retried until no writer interfered.
    /// Returns the head word it read (writer bit clear) with `f`'s answer.
    fn read<R>(&self, f: impl Fn(&RingView<'_, N>) -> R) -> (u64, R) {
        loop {
            // Acquire: pairs with the writer's Release store of the head, so the slots it
            // wrote before releasing are visible to the view's loads.
            let head = self.head.load(Ordering::Acquire);
            if head & WRITER != 0 {
                spin_loop();
                continue;
            }
            let answer = f(&RingView {
                ring: self,
                recorded: head >> 1,
            });
            // Acquire fence: orders the view's slot loads before the head re-read, pairing
            // with the writer's Release fence after it set the writer bit (seqlock).
            fence(Ordering::Acquire);
            if self.head.load(Ordering::Relaxed) == head {
                return (head, answer);
            }
        }
    }

    /// Decides `cost` permits at `now` and records them if admitted
    /// ([`SlidingWindowLog::decide`] on a consistent view of the ring).
    pub fn check_at(
        &self,
        log: &SlidingWindowLog,
        now: Nanos,
        cost: u32,
    ) -> Result<Decision, InsufficientCapacity> {
        loop {
            let (head, outcome) = self.read(|view| log.decide(view, now, cost));
            let outcome = outcome?;
            let Some(stamp) = outcome.record else {
                return Ok(outcome.decision);
            };
            // Claim the writer bit from exactly the head we decided on: if any admission
            // happened since, the claim fails and we decide again. Acquire: pairs with the
            // previous writer's Release store, so our slot writes are ordered after theirs.
            if self
                .head
                .compare_exchange(head, head | WRITER, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            // Release fence: a reader that sees any slot written below also sees the writer
            // bit when it re-reads the head (pairs with the reader's Acquire fence).
            fence(Ordering::Release);
            let h = head >> 1;
            for seq in h..h + u64::from(cost) {
                // Relaxed: published by the Release store of the head below.
                self.slot(seq).store(stamp, Ordering::Relaxed);
            }
            // Release: publishes the slot writes to readers that Acquire-load the head.
            self.head
                .store((h + u64::from(cost)) << 1, Ordering::Release);
            return Ok(outcome.decision);
        }
    }

    /// The decision `cost` permits would get at `now`; writes nothing.
    pub fn peek_at(
        &self,
        log: &SlidingWindowLog,
        now: Nanos,
        cost: u32,
    ) -> Result<Decision, InsufficientCapacity> {
        Ok(self.read(|view| log.decide(view, now, cost)).1?.decision)
    }

    /// Whether no recorded permit is still in the window at `now` (forgetting the ring
    /// loses nothing).
    pub fn is_idle(&self, log: &SlidingWindowLog, now: Nanos) -> bool {
        self.read(|view| log.is_idle(view, now)).1
    }

    /// Permits recorded since the ring was fresh.
    pub fn recorded(&self) -> u64 {
        // Relaxed: a count for diagnostics and tests, not used for a decision.
        self.head.load(Ordering::Relaxed) >> 1
    }
}

/// A direct sliding-window-log limiter: parameters plus a [`LogRing`] of capacity `N`.
///
/// ```
/// use tollgate_core::{Nanos, SlidingLogLimiter, SlidingWindowLog};
/// let limiter = SlidingLogLimiter::<100>::new(SlidingWindowLog::new(100, Nanos::from_secs(60)).unwrap()).unwrap();
/// assert_eq!(limiter.check_at(Nanos::ZERO).remaining, 99);
/// // A ring smaller than the limit is a configuration error.
/// assert!(SlidingLogLimiter::<10>::new(SlidingWindowLog::new(11, Nanos::from_secs(1)).unwrap()).is_err());
/// ```
#[derive(Debug)]
pub struct SlidingLogLimiter<const N: usize> {
    log: SlidingWindowLog,
    ring: LogRing<N>,
}

impl<const N: usize> SlidingLogLimiter<N> {
    /// A fresh limiter; [`ConfigError::LimitTooLarge`] if `L > N`.
    pub fn new(log: SlidingWindowLog) -> Result<SlidingLogLimiter<N>, ConfigError> {
        if log.limit() > N as u64 {
            return Err(ConfigError::LimitTooLarge { max: N as u64 });
        }
        Ok(SlidingLogLimiter {
            log,
            ring: LogRing::new(),
        })
    }

    /// The parameters.
    pub fn log(&self) -> &SlidingWindowLog {
        &self.log
    }

    /// The ring.
    pub fn ring(&self) -> &LogRing<N> {
        &self.ring
    }

    /// Checks one permit at `now`.
    pub fn check_at(&self, now: Nanos) -> Decision {
        match self.ring.check_at(&self.log, now, 1) {
            Ok(decision) => decision,
            // L ≥ 1 and N ≥ L were checked at construction.
            Err(_) => Decision::deny(self.log.limit(), 0, Nanos::MAX, Nanos::MAX),
        }
    }

    /// Checks `cost` permits at `now`, all or nothing.
    pub fn check_n_at(&self, now: Nanos, cost: u32) -> Result<Decision, InsufficientCapacity> {
        self.ring.check_at(&self.log, now, cost)
    }

    /// What a one-permit check would answer at `now`; consumes nothing.
    pub fn peek_at(&self, now: Nanos) -> Decision {
        match self.ring.peek_at(&self.log, now, 1) {
            Ok(decision) => decision,
            Err(_) => Decision::deny(self.log.limit(), 0, Nanos::MAX, Nanos::MAX),
        }
    }

    /// Checks one permit, reading `clock` once.
    pub fn check(&self, clock: &impl Clock) -> Decision {
        self.check_at(clock.now())
    }

    /// Checks `cost` permits, reading `clock` once.
    pub fn check_n(&self, clock: &impl Clock, cost: u32) -> Result<Decision, InsufficientCapacity> {
        self.check_n_at(clock.now(), cost)
    }
}
