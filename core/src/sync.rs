//! The one place in `tollgate-core` that names atomic types.
//!
//! - Normal builds use `portable-atomic`, which is the native `core::sync::atomic` type on
//!   targets with 64-bit atomics (zero cost) and an emulation elsewhere (thumbv7em,
//!   riscv32imac: lock-based fallback, not interrupt-safe unless the final binary enables
//!   portable-atomic's `unsafe-assume-single-core` / `unsafe-assume-privileged`; thumbv6m:
//!   the forwarded `critical-section` or
//!   portable-atomic's `unsafe-assume-single-core`, enabled by the final binary, chooses).
//! - `--cfg tollgate_loom` swaps in loom's checked atomics, so the loom models explore every
//!   interleaving of the very code users run.

#[cfg(not(tollgate_loom))]
pub(crate) use portable_atomic::{fence, AtomicU64, Ordering};

#[cfg(tollgate_loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU64, Ordering};

/// A hint that we are spinning; under loom, a yield so the model checker can run the
/// thread we are waiting for.
#[inline]
pub(crate) fn spin_loop() {
    #[cfg(not(tollgate_loom))]
    core::hint::spin_loop();
    #[cfg(tollgate_loom)]
    loom::thread::yield_now();
}

/// `AtomicU64::new`, usable in `const` contexts where the backend allows it.
#[cfg(not(tollgate_loom))]
#[inline]
pub(crate) const fn new_atomic_u64(value: u64) -> AtomicU64 {
    AtomicU64::new(value)
}

/// `AtomicU64::new` (loom's constructor is not `const`).
#[cfg(tollgate_loom)]
#[inline]
pub(crate) fn new_atomic_u64(value: u64) -> AtomicU64 {
    AtomicU64::new(value)
}
