//! Shared arithmetic of the window algorithms: the window index and how many bits of a
//! packed `u64` it needs.
//!
//! The window index `w = ⌊now / W⌋` is stored in full (never truncated), so a key idle for
//! any length of time is recognised as such: no tag can alias. It needs
//! `bits(u64::MAX / W)` bits; the counters get the rest. That is why the largest limit a
//! window algorithm accepts depends on `W` (roughly: at most one permit per nanosecond for
//! a fixed window, `√W` permits per window for the sliding counter, whose two counters
//! share the low bits).

use crate::{ConfigError, Nanos};

/// Bits needed by the window index of any `u64` time: `bits(u64::MAX / W)`.
pub(crate) const fn index_bits(window: u64) -> u32 {
    // window ≥ 1, so u64::MAX / window ≥ 1 and needs at least one bit.
    u64::BITS - (u64::MAX / window).leading_zeros()
}

/// Bits left for the counters below the window index.
pub(crate) const fn free_bits(window: u64) -> u32 {
    u64::BITS - index_bits(window)
}

/// Validates `(limit, window)` for `counters` counters of `free_bits / counters` bits each.
/// Returns the width of one counter.
pub(crate) const fn validate(limit: u64, window: Nanos, counters: u32) -> Result<u32, ConfigError> {
    if limit == 0 {
        return Err(ConfigError::ZeroLimit);
    }
    if window.as_u64() == 0 {
        return Err(ConfigError::ZeroPeriod);
    }
    let width = free_bits(window.as_u64()) / counters;
    let max = if width == 0 { 0 } else { (1u64 << width) - 1 };
    if limit > max {
        return Err(ConfigError::LimitTooLarge { max });
    }
    Ok(width)
}

/// `(w + k)·W − now`, saturating: time from `now` to the start of window `w + k`.
#[inline]
pub(crate) fn until_window(window: u64, w: u64, k: u64, now: u64) -> u64 {
    let at = (u128::from(w) + u128::from(k)) * u128::from(window);
    Nanos::span_to(at, now).as_u64()
}
