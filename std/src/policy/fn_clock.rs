//! [`FnClock`]: any `Fn() -> Nanos` as a [`Clock`].

use tollgate_core::{Clock, Nanos};

/// Adapts a closure into a [`Clock`] (handy for examples, simulations and clocks owned by
/// another framework).
///
/// ```
/// use tollgate::policy::FnClock;
/// use tollgate::{Clock, Nanos};
/// assert_eq!(FnClock(|| Nanos::from_secs(7)).now(), Nanos::from_secs(7));
/// ```
#[derive(Copy, Clone, Debug)]
pub struct FnClock<F>(pub F);

impl<F: Fn() -> Nanos> Clock for FnClock<F> {
    #[inline]
    fn now(&self) -> Nanos {
        (self.0)()
    }
}
