//! Clocks the caller drives: [`ManualClock`], moved by hand and shared by its clones, and
//! [`FnClock`], any `Fn() -> Nanos`.

use tollgate_core::{Clock, Nanos};

use crate::sync::{Arc, AtomicU64, Ordering};

/// A clock that only moves when told to. Clones share one counter, so a test can hand a
/// clone to a limiter and advance time from outside.
///
/// ```
/// use tollgate::{Clock, ManualClock, Nanos};
/// let clock = ManualClock::new();
/// let shared = clock.clone();
/// clock.advance(Nanos::from_millis(5));
/// assert_eq!(shared.now(), Nanos::from_millis(5));
/// shared.set(Nanos::from_secs(1));
/// assert_eq!(clock.now(), Nanos::from_secs(1));
/// ```
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock at time zero.
    pub fn new() -> ManualClock {
        ManualClock::starting_at(Nanos::ZERO)
    }

    /// A clock at `now`.
    pub fn starting_at(now: Nanos) -> ManualClock {
        ManualClock {
            now: Arc::new(AtomicU64::new(now.as_u64())),
        }
    }

    /// Moves time forward by `by`, saturating at [`Nanos::MAX`]; returns the new time.
    pub fn advance(&self, by: Nanos) -> Nanos {
        // Relaxed: the counter is self-contained; no other memory is published with it.
        let previous = self
            .now
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
                Some(now.saturating_add(by.as_u64()))
            })
            .unwrap_or_else(|now| now);
        Nanos::new(previous.saturating_add(by.as_u64()))
    }

    /// Sets the time. May move it backwards (to test how limiters treat a late `now`); the
    /// clock is then no longer monotonic, by your request.
    pub fn set(&self, now: Nanos) {
        // Relaxed: see `advance`.
        self.now.store(now.as_u64(), Ordering::Relaxed)
    }
}

impl Clock for ManualClock {
    /// One atomic load.
    #[inline]
    fn now(&self) -> Nanos {
        // Relaxed: see `advance`.
        Nanos::new(self.now.load(Ordering::Relaxed))
    }
}

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
