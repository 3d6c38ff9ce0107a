//! [`Admitted`]: what the limiters' `until_*ready` waits resolve to — the admitting
//! decision, which a caller may read or ignore.

use core::ops::Deref;

use tollgate_core::Decision;

/// The admitting decision the waits resolve to:
/// [`RateLimiter::until_ready`](crate::RateLimiter::until_ready) and `until_n_ready`,
/// [`KeyedLimiter::until_key_ready`](crate::KeyedLimiter::until_key_ready),
/// `until_key_ready_with_jitter` and `until_key_n_ready` (all but `until_ready` in a
/// `Result`). A
/// check's [`Decision`] is `#[must_use]` (ignoring it would let a denied request through);
/// this one is not: the wait ends only once the request is admitted, so
/// `limiter.until_ready().await;` and `limiter.until_key_ready(&key).await?;` are whole
/// statements, as with governor. It reads as the decision (it derefs to one: `remaining`,
/// `delay`, …).
///
/// ```
/// #![deny(unused_must_use)]
/// use tollgate::{Gcra, KeyedError, KeyedLimiter, RateLimiter};
/// let limiter = RateLimiter::new(Gcra::per_second(100).burst(2).build()?);
/// let runtime = tokio::runtime::Builder::new_current_thread().build()?;
/// runtime.block_on(async {
///     limiter.until_ready().await; // no warning: nothing to check
///     assert_eq!(limiter.until_ready().await.remaining, 0);
/// });
/// let keyed: KeyedLimiter<u64, Gcra> = KeyedLimiter::new(Gcra::per_second(100).build()?, 10)?;
/// runtime.block_on(async {
///     keyed.until_key_ready(&7).await?; // nor here, once the error is handled
///     Ok::<_, KeyedError>(())
/// })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Admitted(pub Decision);

impl Deref for Admitted {
    type Target = Decision;

    fn deref(&self) -> &Decision {
        &self.0
    }
}

impl From<Admitted> for Decision {
    fn from(admitted: Admitted) -> Decision {
        admitted.0
    }
}
