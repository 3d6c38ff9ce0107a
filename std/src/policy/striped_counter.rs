//! [`StripedCounter`]: a counter split over cache-padded slots, each owned by one running
//! thread (which adds to it without a locked instruction), so threads counting the same
//! event neither bounce one cache line between cores nor lock it; and the stripe index a
//! thread is given, for the rule set's holds.

use std::cell::Cell;
use std::sync::OnceLock;

use crossbeam_utils::CachePadded;

use crate::sync::plain::{AtomicU64, Mutex, Ordering, PoisonError};

/// A counter of events, incremented from many threads. A running thread holds an owner id
/// (one per available core, handed out on its first add and given back as it ends) and adds
/// to that id's slot, which no other thread writes meanwhile: a load and a store, no locked
/// read-modify-write. A thread without one (all held, or its own given back: an add from
/// another thread-local's destructor as the thread ends) adds to a shared stripe with a
/// `fetch_add`. Reading sums both. A slot keeps its count when its id passes to another
/// thread, so no count is lost when threads come and go.
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
    /// Indexed by owner id: written by the thread holding it only.
    owned: Box<[CachePadded<AtomicU64>]>,
    /// The threads without an owner id, each at its [`thread_stripe`].
    shared: Box<[CachePadded<AtomicU64>]>,
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

/// A thread's owner id before its first add.
const UNCLAIMED: usize = usize::MAX;
/// A thread without an owner id: none was free, or it gave its own back as it ends.
const NO_OWNER: usize = usize::MAX - 1;

thread_local! {
    /// This thread's owner id (or [`UNCLAIMED`], [`NO_OWNER`]). Without a destructor, so
    /// still read, never destroyed, by adds from other thread-locals' destructors.
    static OWNER: Cell<usize> = const { Cell::new(UNCLAIMED) };
    /// Gives this thread's owner id back as it ends.
    static RELEASE: Release = const { Release };
}

/// The owner ids not held by a running thread, and the next never handed out.
struct Owners {
    free: Vec<usize>,
    next: usize,
}

/// Every counter's count of owned slots, and so of owner ids: fixed at first use.
fn owner_count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT.get_or_init(stripe_count)
}

/// The owner ids: a slot's hand-over from a thread that ends to one that starts goes
/// through this lock, so the new owner's first load sees the old owner's last store.
static OWNERS: Mutex<Owners> = Mutex::new(Owners {
    free: Vec::new(),
    next: 0,
});

/// The destructor of [`RELEASE`].
struct Release;

impl Drop for Release {
    fn drop(&mut self) {
        // No owner from here on (before the id is free for another thread): a later add
        // of this thread's, from another destructor, goes to a shared stripe.
        let id = OWNER.with(|o| o.replace(NO_OWNER));
        if id < NO_OWNER {
            let mut owners = OWNERS.lock().unwrap_or_else(PoisonError::into_inner);
            owners.free.push(id);
        }
    }
}

/// This thread's first add: takes a free owner id if there is one, once the destructor
/// that gives it back is registered (a thread that cannot register it takes none).
#[cold]
fn claim() -> usize {
    let id = if RELEASE.try_with(|_| ()).is_ok() {
        let mut owners = OWNERS.lock().unwrap_or_else(PoisonError::into_inner);
        match owners.free.pop() {
            Some(id) => id,
            None if owners.next < owner_count() => {
                owners.next += 1;
                owners.next - 1
            }
            None => NO_OWNER,
        }
    } else {
        NO_OWNER
    };
    OWNER.with(|o| o.set(id));
    id
}

/// `n` cache-padded zeros.
fn zeroed(n: usize) -> Box<[CachePadded<AtomicU64>]> {
    (0..n)
        .map(|_| CachePadded::new(AtomicU64::new(0)))
        .collect()
}

impl StripedCounter {
    /// A zeroed counter.
    pub fn new() -> StripedCounter {
        StripedCounter {
            owned: zeroed(owner_count()),
            shared: zeroed(stripe_count()),
        }
    }

    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        let mut id = OWNER.with(Cell::get);
        if id == UNCLAIMED {
            id = claim();
        }
        // Relaxed, here and below: a statistic; readers need no ordering with other
        // memory (an owned slot's hand-over is ordered by the `OWNERS` lock).
        match self.owned.get(id) {
            // A load and a store, not a `fetch_add`: this thread alone writes the slot
            // while it holds the id. (Under loom every model thread runs on one OS thread
            // and shares its id; loom never switches between this load and store, which
            // are not loom operations.)
            Some(slot) => slot.store(
                slot.load(Ordering::Relaxed).wrapping_add(n),
                Ordering::Relaxed,
            ),
            None => {
                let stripe = thread_stripe() & (self.shared.len() - 1);
                self.shared[stripe].fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// The total so far (a sum of slots; concurrent adds may or may not be included).
    pub fn get(&self) -> u64 {
        self.owned
            .iter()
            .chain(self.shared.iter())
            // Relaxed: see `add`.
            .map(|s| s.load(Ordering::Relaxed))
            .fold(0u64, u64::wrapping_add)
    }
}

#[cfg(test)]
mod tests {
    use super::{owner_count, StripedCounter};

    /// Threads at once and one after another (the later ones given the ids, and so the
    /// slots, of those that exited), more of them than owner ids: every add counted once.
    #[test]
    fn adds_from_threads_that_come_and_go_are_all_counted() {
        let counter = StripedCounter::new();
        let threads = owner_count() + 3;
        for _ in 0..3 {
            std::thread::scope(|s| {
                for _ in 0..threads {
                    s.spawn(|| (0..1000).for_each(|_| counter.add(1)));
                }
            });
        }
        counter.add(5);
        assert_eq!(counter.get(), 3 * threads as u64 * 1000 + 5);
    }
}
