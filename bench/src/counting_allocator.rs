//! [`CountingAllocator`]: a global allocator wrapper that tallies live heap bytes, so the
//! `compare` binary can report bytes per key of each contender's keyed store.

use crate::sync::{AtomicUsize, Ordering};
use std::alloc::{GlobalAlloc, Layout, System};

/// Wraps [`System`] and counts the bytes currently allocated through it.
///
/// Install it in a binary with `#[global_allocator]`; [`CountingAllocator::live`] then
/// reads the live byte count. The difference of two readings around building a structure
/// is that structure's heap footprint (allocator rounding and headers excluded).
///
/// ```
/// use tollgate_bench::CountingAllocator;
/// static COUNTER: CountingAllocator = CountingAllocator::new();
/// // Not installed as the global allocator here, so nothing is counted.
/// assert_eq!(COUNTER.live(), 0);
/// assert!(!COUNTER.is_installed());
/// ```
#[derive(Debug)]
pub struct CountingAllocator {
    live: AtomicUsize,
    calls: AtomicUsize,
}

impl CountingAllocator {
    /// A counter at zero.
    pub const fn new() -> CountingAllocator {
        CountingAllocator {
            live: AtomicUsize::new(0),
            calls: AtomicUsize::new(0),
        }
    }

    /// Bytes allocated and not yet freed through this allocator.
    pub fn live(&self) -> usize {
        // Relaxed: a statistic read between measurements on the measuring thread; no data
        // is published through it.
        self.live.load(Ordering::Relaxed)
    }

    /// Whether any allocation has gone through this allocator, i.e. whether it is really
    /// the global allocator of this process (every Rust program allocates before `main`
    /// returns: argument parsing, stdout buffering).
    pub fn is_installed(&self) -> bool {
        // Relaxed: see `live`.
        self.calls.load(Ordering::Relaxed) > 0
    }

    fn add(&self, bytes: usize) {
        // Relaxed: counters only; the allocation itself is published by `System`.
        self.live.fetch_add(bytes, Ordering::Relaxed);
        self.calls.fetch_add(1, Ordering::Relaxed);
    }

    fn sub(&self, bytes: usize) {
        // Relaxed: counters only, see `add`.
        self.live.fetch_sub(bytes, Ordering::Relaxed);
    }
}

impl Default for CountingAllocator {
    fn default() -> Self {
        CountingAllocator::new()
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so the
// `GlobalAlloc` contract is `System`'s; the counters never affect what is returned.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract (non-zero size), forwarded as is.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            self.add(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            self.add(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout` (every allocation of this
        // allocator is), as the caller guarantees.
        unsafe { System.dealloc(ptr, layout) };
        self.sub(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr`/`layout` come from this allocator (so from `System`) and `new_size`
        // meets `realloc`'s contract, as the caller guarantees.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            self.sub(layout.size());
            self.add(new_size);
        }
        new
    }
}
