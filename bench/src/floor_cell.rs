//! [`FloorCell`]: the hardware floor of a direct check — the least work any GCRA limiter
//! must do (one clock read by the caller, one load, the arithmetic, one compare-and-swap),
//! written inline with no library around it.

use crate::sync::{AtomicU64, Ordering};

/// One `AtomicU64` holding a GCRA theoretical arrival time, checked with the bare minimum:
/// load, `max`, add, compare, `compare_exchange_weak`. No decision struct, no error type.
///
/// ```
/// use tollgate_bench::FloorCell;
/// // One permit per 10 ns, bursts of 2.
/// let cell = FloorCell::new(10, 2);
/// assert!(cell.check_at(100));
/// assert!(cell.check_at(100));
/// assert!(!cell.check_at(100));
/// assert!(cell.check_at(110));
/// ```
#[derive(Debug)]
pub struct FloorCell {
    tat: AtomicU64,
    interval: u64,
    tolerance: u64,
}

impl FloorCell {
    /// A fresh cell admitting one permit per `interval` ns with bursts of `burst`.
    pub fn new(interval: u64, burst: u64) -> FloorCell {
        FloorCell {
            tat: AtomicU64::new(0),
            interval,
            tolerance: interval.saturating_mul(burst),
        }
    }

    /// Admits one permit at `now` (ns) if the rate allows; records it if so.
    #[inline]
    pub fn check_at(&self, now: u64) -> bool {
        floor_gcra(&self.tat, now, self.interval, self.tolerance)
    }
}

/// The floor's GCRA step on one word, shared by [`FloorCell`] and
/// [`FloorTable`](crate::FloorTable).
#[inline(always)]
pub(crate) fn floor_gcra(cell: &AtomicU64, now: u64, interval: u64, tolerance: u64) -> bool {
    // Relaxed: the word is self-contained, nothing else is published with it (the same
    // argument as tollgate's StateCell).
    let mut tat = cell.load(Ordering::Relaxed);
    loop {
        let new = tat.max(now).saturating_add(interval);
        if new - now > tolerance {
            return false;
        }
        // Relaxed: see the load above; the CAS orders updates of this one word.
        match cell.compare_exchange_weak(tat, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(actual) => tat = actual,
        }
    }
}
