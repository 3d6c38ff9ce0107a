//! [`ServerClock`]: a [`RedisStore`](super::RedisStore)'s estimate of the Redis server's
//! clock, from which every script call gets its *deadline*: the instant, in the server's
//! `TIME`, after which the store will have given up on the call, so that the script can
//! refuse a call that reaches it too late (see "Deadlines" on `RedisStore`).
//!
//! ## The estimate
//!
//! The store sends `TIME` at local (monotonic) instant `t0` and reads the answer, `S` µs of
//! Unix time, at `t1`. The server read its clock at some local instant in `[t0, t1]`, and
//! its µs truncate: the offset `server − local` therefore lies in
//! `[S·1000 − t1, S·1000 + 999 − t0]` (ns), an interval of width `u = t1 − t0 + 999`. The
//! store keeps both bounds (`lo`, `hi`) and when they were taken.
//!
//! ## The deadline
//!
//! A call whose operation started at local `t` with a timeout `T` (the store gives up at
//! `t + T`; the calls of one operation share it) carries
//!
//! > `deadline = t + hi + T − margin`, `margin = T/10 + 2u + age/5000 + 1 µs`
//!
//! where `age` is the time since the sample (the clocks may drift apart by 200 ppm) and the
//! µs absorbs the deadline's rounding. The script refuses the call if the server's clock is
//! past the deadline. With `off` the true offset (`hi − u − drift ≤ off ≤ hi + drift`):
//!
//! - **no ghost write**: a call the server runs at local instant `e` is accepted only if
//!   `e + off ≤ deadline`, so `e ≤ t + T − T/10 − u`: it ran at least a tenth of the
//!   timeout (and `u`) before the store gave up, time for its answer to come back. A call
//!   that waited in a stalled server's buffer past that is refused and changes nothing;
//! - **no healthy call refused**: a call the server runs within `T·9/10 − 2u − 2·age/5000`
//!   of its operation's start is accepted (a call started `T·9/10` or more after it is
//!   not sent at all: it would be refused).
//!
//! The store then rounds the deadline down to a step of at most `T/20` (see
//! `deadline_quantum_ms`), which only refuses more: a healthy call is accepted if the
//! server runs it within `T·17/20 − 2u − 2·age/5000`.
//!
//! A sample is kept only if `u` is at most a quarter of the timeout (a `TIME` that took
//! longer says nothing useful, e.g. one answered by a server just resumed from a stall, or
//! the first on a connection, which also waited for its setup: the store then sends
//! another at once);
//! the estimate is refreshed in the background once it is [`REFRESH`] old, and before the
//! next call once it is [`MAX_AGE`] old, after a refused call (the server's clock may have
//! stepped) or when there is none yet. In a cluster each sample comes from the master of
//! the calling key's slot: the masters' clocks are assumed to agree to well within a tenth
//! of the timeout (what NTP keeps them to); a master behind the others by `δ` accepts a late
//! call up to `δ` later than the margin allows.

use std::sync::Mutex;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Past this age (local ns) the estimate is refreshed in the background by the next call.
pub(crate) const REFRESH: u64 = 5_000_000_000;

/// Past this age (local ns) the estimate is not used: the next call samples the clock
/// first (its drift allowance would be 12 ms).
pub(crate) const MAX_AGE: u64 = 60_000_000_000;

/// The clocks may drift apart by one part in this many (200 ppm).
const DRIFT: u64 = 5_000;

/// The estimate (see the module docs), read lock-free by every call.
#[derive(Debug, Default)]
pub(crate) struct ServerClock {
    /// Sequence number of the sample: odd while one is being written.
    seq: AtomicU64,
    /// Bounds of `server ns − local ns`; `hi` 0: no sample yet.
    hi: AtomicU64,
    lo: AtomicU64,
    /// Local ns of the sample (`t1`).
    at: AtomicU64,
    /// Set when the estimate is known wrong (the server refused a call as expired): the
    /// next call samples the clock before it is sent.
    stale: AtomicBool,
    /// A background refresh is running.
    refreshing: AtomicBool,
    /// Serialises writers (samples are rare; calls never take it).
    write: Mutex<()>,
}

/// One reading of the estimate.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Sample {
    hi: u64,
    lo: u64,
    at: u64,
}

impl ServerClock {
    /// The sample, if there is a usable one.
    fn sample(&self) -> Option<Sample> {
        loop {
            // Acquire: pairs with the Release store that ended the write, so the fields
            // read below are at least that sample's.
            let before = self.seq.load(Ordering::Acquire);
            // Relaxed: validated by the fence and the second load of `seq` below.
            let sample = Sample {
                hi: self.hi.load(Ordering::Relaxed),
                lo: self.lo.load(Ordering::Relaxed),
                at: self.at.load(Ordering::Relaxed),
            };
            // Acquire fence: the field loads above happen before the `seq` load below, so
            // an unchanged even `seq` means no write overlapped them (the seqlock read).
            std::sync::atomic::fence(Ordering::Acquire);
            // Relaxed: ordered by the fence above.
            if before & 1 == 0 && self.seq.load(Ordering::Relaxed) == before {
                return (sample.hi != 0).then_some(sample);
            }
            std::hint::spin_loop();
        }
    }

    /// The deadline, in the server's µs, of a call started at local `start` ns whose
    /// client gives up `timeout` ns later; `None` if the call must sample the clock first
    /// (no estimate, a stale one, or one older than [`MAX_AGE`]).
    pub(crate) fn deadline_us(&self, start: u64, timeout: u64) -> Option<u64> {
        // Relaxed: a hint; the sample is read consistently below.
        if self.stale.load(Ordering::Relaxed) {
            return None;
        }
        let s = self.sample()?;
        let age = start.saturating_sub(s.at);
        if age > MAX_AGE {
            return None;
        }
        let margin = (timeout / 10)
            .saturating_add((s.hi - s.lo).saturating_mul(2))
            .saturating_add(age / DRIFT)
            .saturating_add(1_000);
        let budget = timeout.saturating_sub(margin);
        Some(start.saturating_add(s.hi).saturating_add(budget) / 1_000)
    }

    /// Whether a call at local `now` should refresh the estimate in the background (it is
    /// [`REFRESH`] old and no refresh is running); if so the caller runs one and then
    /// calls [`refreshed`](Self::refreshed).
    pub(crate) fn claim_refresh(&self, now: u64) -> bool {
        let Some(s) = self.sample() else {
            return false;
        };
        // Relaxed: one refresh at a time is a courtesy to the server, not a requirement.
        now.saturating_sub(s.at) > REFRESH && !self.refreshing.swap(true, Ordering::Relaxed)
    }

    /// A background refresh has ended (kept or not).
    pub(crate) fn refreshed(&self) {
        // Relaxed: see `claim_refresh`.
        self.refreshing.store(false, Ordering::Relaxed);
    }

    /// Marks the estimate wrong: the next call samples the clock first.
    pub(crate) fn invalidate(&self) {
        // Relaxed: a hint (see `deadline_us`).
        self.stale.store(true, Ordering::Relaxed);
    }

    /// Records the server's `TIME`, `server_us`, read between local `t0` and `t1` (ns);
    /// kept unless its uncertainty exceeds a quarter of `timeout` (ns). Whether it was.
    pub(crate) fn record(&self, t0: u64, t1: u64, server_us: u64, timeout: u64) -> bool {
        let server = server_us.saturating_mul(1_000);
        let hi = server.saturating_add(999).saturating_sub(t0);
        let lo = server.saturating_sub(t1.max(t0));
        if hi == 0 || hi - lo.min(hi) > timeout / 4 {
            return false;
        }
        let _writer = self
            .write
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Relaxed: only writers (serialised above) store `seq`.
        let seq = self.seq.load(Ordering::Relaxed);
        // Relaxed, then a Release fence: readers that see the fields written below also
        // see `seq` odd (or changed) when they load it again.
        self.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Release);
        // Relaxed: published by the Release store of `seq` below.
        self.hi.store(hi, Ordering::Relaxed);
        self.lo.store(lo, Ordering::Relaxed);
        self.at.store(t1, Ordering::Relaxed);
        // Release: pairs with the readers' first Acquire load of `seq`.
        self.seq.store(seq.wrapping_add(2), Ordering::Release);
        // Relaxed: a hint (see `deadline_us`).
        self.stale.store(false, Ordering::Relaxed);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::{ServerClock, MAX_AGE, REFRESH};

    const MS: u64 = 1_000_000;

    /// The deadline is the sample's upper bound, plus the timeout, less the margin, and the
    /// margin grows with the sample's uncertainty and age.
    #[test]
    fn the_deadline_leaves_a_tenth_of_the_timeout_and_twice_the_uncertainty() {
        let clock = ServerClock::default();
        let timeout = 300 * MS;
        assert_eq!(clock.deadline_us(0, timeout), None);
        // TIME said 1 000 s (in µs) between local 10 ms and 10.5 ms: u = 0.5 ms + 999 ns.
        assert!(clock.record(10 * MS, 10 * MS + MS / 2, 1_000_000_000, timeout));
        let hi = 1_000_000_000_000 + 999 - 10 * MS;
        let u = MS / 2 + 999;
        let start = 20 * MS;
        let age = start - (10 * MS + MS / 2);
        let want = (start + hi + timeout - (timeout / 10 + 2 * u + age / 5_000 + 1_000)) / 1_000;
        assert_eq!(clock.deadline_us(start, timeout), Some(want));
        // Refreshed in the background past REFRESH, once at a time.
        assert!(!clock.claim_refresh(start));
        assert!(clock.claim_refresh(10 * MS + REFRESH + MS));
        assert!(!clock.claim_refresh(10 * MS + REFRESH + MS));
        clock.refreshed();
        // Too old, or known wrong: sample first.
        assert_eq!(clock.deadline_us(11 * MS + MAX_AGE, timeout), None);
        clock.invalidate();
        assert_eq!(clock.deadline_us(start, timeout), None);
        // A sample whose TIME took more than a quarter of the timeout is not kept.
        assert!(!clock.record(20 * MS, 20 * MS + timeout / 4 + MS, 1_000_000_000, timeout));
        assert_eq!(clock.deadline_us(start, timeout), None);
        assert!(clock.record(30 * MS, 30 * MS, 1_000_020_000, timeout));
        assert!(clock.deadline_us(start, timeout).is_some());
    }

    /// A margin as large as the timeout (here: an old sample's drift allowance) leaves no
    /// budget: the deadline is the call's own start on the server's clock (at the upper
    /// bound), so the server refuses it unless it runs at once.
    #[test]
    fn a_margin_as_large_as_the_timeout_leaves_no_budget() {
        let clock = ServerClock::default();
        assert!(clock.record(0, 1_000, 5_000, 8_000));
        let hi = 5_000_000 + 999;
        let start = 1_000 + MAX_AGE;
        assert_eq!(clock.deadline_us(start, 8_000), Some((start + hi) / 1_000));
    }
}
