//! [`Admitted`]: what a direct limiter's `until_ready` resolves to — the admitting
//! decision, which a caller may read or ignore.

use core::ops::Deref;

use tollgate_core::Decision;

/// The admitting decision [`RateLimiter::until_ready`](crate::RateLimiter::until_ready)
/// resolves to. A check's [`Decision`] is `#[must_use]` (ignoring it would let a denied
/// request through); this one is not: the wait ends only once the request is admitted, so
/// `limiter.until_ready().await;` is a whole statement, as with governor. It reads as the
/// decision (it derefs to one: `remaining`, `delay`, …).
///
/// ```
/// use tollgate::{Gcra, RateLimiter};
/// let limiter = RateLimiter::new(Gcra::per_second(100).burst(2).build()?);
/// let runtime = tokio::runtime::Builder::new_current_thread().build()?;
/// runtime.block_on(async {
///     limiter.until_ready().await; // no warning: nothing to check
///     assert_eq!(limiter.until_ready().await.remaining, 0);
/// });
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
