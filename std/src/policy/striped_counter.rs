//! [`StripedCounter`]: a counter split over per-thread, cache-padded slots, so threads
//! counting the same event neither bounce one cache line between cores nor lock it; and
//! the stripe index a thread is given, for the rule set's holds.

use std::cell::Cell;

use crossbeam_utils::CachePadded;
use thread_local::ThreadLocal;

use crate::sync::plain::{AtomicU64, Ordering};

/// A counter of events, incremented from many threads. Each thread adds to a slot of its
/// own (cache-padded, so threads counting the same event do not bounce one line between
/// cores), which no other thread writes: an add is a load and a store, no locked
/// read-modify-write. Reading sums the slots. A thread's slot outlives it and passes to the
/// next thread given its id, so no count is lost when threads come and go.
///
/// ```
/// use tollgate::policy::StripedCounter;
/// let counter = StripedCounter::new();
/// counter.add(2);
/// std::thread::scope(|s| { s.spawn(|| counter.add(3)); });
/// assert_eq!(counter.get(), 5);
/// ```
#[derive(Debug, Default)]
pub struct StripedCounter {
    slots: ThreadLocal<CachePadded<AtomicU64>>,
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
    /// A zeroed counter (its slots are made as threads first add to it).
    pub fn new() -> StripedCounter {
        StripedCounter::default()
    }

    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        let slot = self.slots.get_or_default();
        // Relaxed: a statistic; readers need no ordering with other memory. A load and a
        // store, not a `fetch_add`: this thread alone writes its slot (a thread that
        // inherits a slot's id starts after the one that held it has exited).
        slot.store(
            slot.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    /// The total so far (a sum of slots; concurrent adds may or may not be included).
    pub fn get(&self) -> u64 {
        self.slots
            .iter()
            // Relaxed: see `add`.
            .map(|s| s.load(Ordering::Relaxed))
            .fold(0u64, u64::wrapping_add)
    }
}

#[cfg(test)]
mod tests {
    use super::StripedCounter;

    /// Threads at once and one after another (the later ones given the ids, and so the
    /// slots, of those that exited): every add counted once.
    #[test]
    fn adds_from_threads_that_come_and_go_are_all_counted() {
        let counter = StripedCounter::new();
        for _ in 0..3 {
            std::thread::scope(|s| {
                for _ in 0..4 {
                    s.spawn(|| (0..1000).for_each(|_| counter.add(1)));
                }
            });
        }
        counter.add(5);
        assert_eq!(counter.get(), 12_005);
    }
}
