//! [`line`]: the one place that asks the CPU to start loading a cache line ahead of a
//! read (a table's buckets, a policy's warm lines).

/// Hints the CPU to start loading the cache line holding `at` into every cache level.
/// Nothing else: no read the program can observe, no fault, whatever the address.
#[inline(always)]
pub(crate) fn line(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults, reads nothing the program can observe and writes
    // nothing, whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(at.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}
