//! [`StripedCounter`]: a lock-free counter split over cache-padded stripes, so threads
//! counting the same event do not bounce one cache line between cores.

use std::cell::Cell;

use crossbeam_utils::CachePadded;

use crate::sync::plain::{AtomicU64, Ordering};

/// A counter of events, incremented from many threads. Each thread adds to its own stripe
/// (chosen once per thread, round robin); reading sums the stripes.
///
/// ```
/// use tollgate::policy::StripedCounter;
/// let counter = StripedCounter::new();
/// counter.add(2);
/// std::thread::scope(|s| { s.spawn(|| counter.add(3)); });
/// assert_eq!(counter.get(), 5);
/// ```
#[derive(Debug)]
pub struct StripedCounter {
    stripes: Box<[CachePadded<AtomicU64>]>,
}

impl Default for StripedCounter {
    fn default() -> Self {
        StripedCounter::new()
    }
}

/// Stripes per counter: one per available core, rounded up to a power of two (at most 64).
pub(crate) fn stripe_count() -> usize {
    std::thread::available_parallelism()
        .map_or(4, |n| n.get())
        .clamp(1, 64)
        .next_power_of_two()
}

/// This thread's stripe index (round robin, fixed per thread; mask it to a stripe count).
pub(crate) fn thread_stripe() -> usize {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    STRIPE.with(|s| {
        if s.get() == usize::MAX {
            // Relaxed: only uniqueness-ish spreading matters, nothing is published.
            // Truncation: harmless where a usize is narrower: only the low bits are used
            // (callers mask by a power-of-two stripe count).
            #[allow(clippy::cast_possible_truncation)]
            let stripe = NEXT.fetch_add(1, Ordering::Relaxed) as usize;
            s.set(stripe);
        }
        s.get()
    })
}

impl StripedCounter {
    /// A zeroed counter with one stripe per available core (rounded to a power of two).
    pub fn new() -> StripedCounter {
        StripedCounter {
            stripes: (0..stripe_count())
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
        }
    }

    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        let stripe = thread_stripe() & (self.stripes.len() - 1);
        // Relaxed: a statistic; readers need no ordering with other memory.
        self.stripes[stripe].fetch_add(n, Ordering::Relaxed);
    }

    /// The total so far (a sum of stripes; concurrent adds may or may not be included).
    pub fn get(&self) -> u64 {
        self.stripes
            .iter()
            // Relaxed: see `add`.
            .map(|s| s.load(Ordering::Relaxed))
            .fold(0u64, u64::wrapping_add)
    }
}
