//! The one place in `tollgate` that names atomic and locking types.
//!
//! - Normal builds use `portable-atomic` (the native atomics wherever they exist) and
//!   `std::sync::Mutex`.
//! - `--cfg tollgate_loom` swaps in loom's checked types, so loom models can explore the
//!   keyed table's insert/evict/check interleavings on the very code users run.

#[cfg(not(tollgate_loom))]
pub(crate) use portable_atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(tollgate_loom))]
pub(crate) use std::sync::{Arc, Mutex, MutexGuard, RwLock};

#[cfg(tollgate_loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(tollgate_loom)]
pub(crate) use loom::sync::{Arc, Mutex, MutexGuard, RwLock};

/// Waits a little for another thread (a reader leaving a slot the insert lock wants to
/// reuse). Under loom, a yield so the model checker runs the thread we wait for.
#[inline]
pub(crate) fn wait_a_little(round: u32) {
    #[cfg(not(tollgate_loom))]
    {
        if round < 64 {
            core::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    #[cfg(tollgate_loom)]
    {
        let _ = round;
        loom::thread::yield_now();
    }
}

/// Locks `mutex`, ignoring poisoning: every critical section leaves the table consistent
/// at each step (slots are claimed, written and published in order), so a panic inside
/// one (only possible from a user's `Clone`/`Eq`/`Drop`) cannot leave a broken invariant.
#[inline]
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    #[cfg(not(tollgate_loom))]
    {
        mutex
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
    #[cfg(tollgate_loom)]
    {
        mutex.lock().unwrap()
    }
}

/// Plain `std` atomics for the policy layer and the Redis backend: counters and hot-swapped
/// state that the loom models do not cover, so they stay on `std`'s types even under
/// `--cfg tollgate_loom` (where the keyed table above switches to loom's).
pub(crate) mod plain {
    pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
}
