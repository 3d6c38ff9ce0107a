//! The one place in `tollgate` that names atomic and locking types.
//!
//! - Normal builds use `portable-atomic` (the native atomics wherever they exist) and
//!   `std::sync::Mutex`.
//! - `--cfg tollgate_loom` swaps in loom's checked types, so loom models can explore the
//!   keyed table's insert/evict/check interleavings on the very code users run.

#[cfg(not(tollgate_loom))]
pub(crate) use portable_atomic::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(not(tollgate_loom))]
pub(crate) use std::sync::{Arc, Mutex, MutexGuard};

#[cfg(tollgate_loom)]
pub(crate) use loom::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
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

/// Under `--cfg tollgate_loom` only, a `SeqCst` fence; in normal builds nothing.
///
/// The exact-key pin handshake (`keyed::key_cell`) is a store-buffering (Dekker) pattern
/// made of `SeqCst` accesses: C++20/Rust order all of them in one total order, so a reader
/// and a writer cannot both miss each other. loom does not model that total order across
/// different atomics for `SeqCst` *accesses* (only for `SeqCst` *fences*), and so reports
/// the handshake as racy. Each side therefore puts this fence between its store and its
/// load: under loom it gives the model the total order the real build gets from its
/// `SeqCst` accesses (on x86 the locked RMW and `SeqCst` store already are full
/// barriers), so the model checks the handshake's logic, not a gap in the checker.
#[inline(always)]
pub(crate) fn loom_sc_fence() {
    #[cfg(tollgate_loom)]
    loom::sync::atomic::fence(Ordering::SeqCst);
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

/// A hot-swappable shared value: readers take the current `Arc<T>`, a writer replaces it;
/// what the policy's rule-set reload swaps.
///
/// Normal builds wrap [`arc_swap::ArcSwap`] (lock-free loads). Under `--cfg tollgate_loom`
/// it is a loom `RwLock` around the `Arc`, so each load and each store is a point where loom
/// interleaves the swap with the checks running on the old or the new value. The `Arc`
/// stays `std`'s in both builds, so the policy's public `rule_set() -> Arc<RuleSet>` has one
/// type; loom's `Arc` would only add reference-count leak checks, not interleavings.
pub(crate) struct SwapCell<T> {
    #[cfg(not(tollgate_loom))]
    inner: arc_swap::ArcSwap<T>,
    #[cfg(tollgate_loom)]
    inner: RwLock<std::sync::Arc<T>>,
}

/// What [`SwapCell::load`] returns: derefs to the `Arc<T>` current at the load.
#[cfg(not(tollgate_loom))]
pub(crate) type SwapGuard<T> = arc_swap::Guard<std::sync::Arc<T>>;
/// What [`SwapCell::load`] returns: derefs to the `Arc<T>` current at the load.
#[cfg(tollgate_loom)]
pub(crate) type SwapGuard<T> = std::sync::Arc<T>;

impl<T> SwapCell<T> {
    /// A cell holding `value`.
    pub(crate) fn from_pointee(value: T) -> SwapCell<T> {
        let value = std::sync::Arc::new(value);
        SwapCell {
            #[cfg(not(tollgate_loom))]
            inner: arc_swap::ArcSwap::new(value),
            #[cfg(tollgate_loom)]
            inner: RwLock::new(value),
        }
    }

    /// The current value, for a short use (the hot path: no reference-count traffic in
    /// normal builds).
    #[inline]
    pub(crate) fn load(&self) -> SwapGuard<T> {
        #[cfg(not(tollgate_loom))]
        {
            self.inner.load()
        }
        #[cfg(tollgate_loom)]
        {
            std::sync::Arc::clone(&self.inner.read().unwrap())
        }
    }

    /// The current value, as an owned `Arc`.
    pub(crate) fn load_full(&self) -> std::sync::Arc<T> {
        #[cfg(not(tollgate_loom))]
        {
            self.inner.load_full()
        }
        #[cfg(tollgate_loom)]
        {
            std::sync::Arc::clone(&self.inner.read().unwrap())
        }
    }

    /// Replaces the value; loads already made keep the old one.
    pub(crate) fn store(&self, value: std::sync::Arc<T>) {
        #[cfg(not(tollgate_loom))]
        {
            self.inner.store(value);
        }
        #[cfg(tollgate_loom)]
        {
            *self.inner.write().unwrap() = value;
        }
    }
}

impl<T: core::fmt::Debug> core::fmt::Debug for SwapCell<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_tuple("SwapCell").field(&*self.load_full()).finish()
    }
}

/// A value set once, then read without a lock (what a tier state keeps its first store's
/// table in): a [`std::sync::OnceLock`].
///
/// Under `--cfg tollgate_loom` the value is published through a loom flag instead (set
/// with `Release` after the value, read with `Acquire` before it, its first set serialized
/// by a loom mutex), so the model checker sees the edge from the thread that built the
/// value to each reader, and interleaves racing first sets (the `OnceLock`'s own wait is
/// one its scheduler cannot see).
#[derive(Debug)]
pub(crate) struct OnceSlot<T> {
    inner: std::sync::OnceLock<T>,
    #[cfg(tollgate_loom)]
    ready: AtomicBool,
    #[cfg(tollgate_loom)]
    init: Mutex<()>,
}

impl<T> OnceSlot<T> {
    /// An empty slot.
    pub(crate) fn new() -> OnceSlot<T> {
        OnceSlot {
            inner: std::sync::OnceLock::new(),
            #[cfg(tollgate_loom)]
            ready: AtomicBool::new(false),
            #[cfg(tollgate_loom)]
            init: Mutex::new(()),
        }
    }

    /// The value, if set.
    #[inline]
    pub(crate) fn get(&self) -> Option<&T> {
        #[cfg(tollgate_loom)]
        // Acquire: pairs with the Release store in `publish`.
        if !self.ready.load(Ordering::Acquire) {
            return None;
        }
        self.inner.get()
    }

    /// The value, set to `init()` first if the slot is empty (one caller's `init` runs;
    /// racing callers all get its value).
    pub(crate) fn get_or_init(&self, init: impl FnOnce() -> T) -> &T {
        #[cfg(not(tollgate_loom))]
        {
            self.inner.get_or_init(init)
        }
        #[cfg(tollgate_loom)]
        {
            if let Some(value) = self.get() {
                return value;
            }
            let _setting = lock(&self.init);
            // Looked at again under the lock: a racing caller may have set it.
            let value = self.inner.get_or_init(init);
            self.publish();
            value
        }
    }

    /// Under loom, makes the value visible to `get`.
    #[cfg(tollgate_loom)]
    fn publish(&self) {
        // Release: pairs with the Acquire load in `get`.
        self.ready.store(true, Ordering::Release);
    }

    /// A loom model's broken twin: `value` set if the slot is still empty, without
    /// looking again under the lock, and returned either way (the caller then works on a
    /// value the slot may not hold).
    #[cfg(tollgate_loom)]
    pub(crate) fn loom_set_blind(&self, value: T) -> T
    where
        T: Clone,
    {
        let _setting = lock(&self.init);
        let _ = self.inner.set(value.clone());
        self.publish();
        value
    }
}

/// Plain `std` atomics (and the lock of the striped counters' owner ids) for the policy
/// layer: counters and state that
/// the loom models do not cover (the rule-set swap is [`SwapCell`], which they do), so they stay on `std`'s types even under
/// `--cfg tollgate_loom` (where the keyed table above switches to loom's).
pub(crate) mod plain {
    pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
    pub(crate) use std::sync::{Mutex, PoisonError};
}
