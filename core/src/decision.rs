//! [`Decision`]: what a check answers, and [`Outcome`]: a decision plus the state to write.

use crate::Nanos;

/// The answer to one rate-limit check.
///
/// All durations are relative to the `now` the check was made at.
///
/// | field | allowed | denied |
/// |---|---|---|
/// | `remaining` | cost-1 requests still admissible right now | the same (never negative) |
/// | `reset_after` | until the limiter is back to a fresh key's state | the same |
/// | `retry_after` | always zero | until the same request could be admitted |
/// | `delay` | leaky bucket: wait this long before forwarding; others zero | zero |
///
/// ```
/// use tollgate_core::{Gcra, Limiter, Nanos};
/// let limiter = Limiter::new(Gcra::per_second(2).build().unwrap());
/// let d = limiter.check_at(Nanos::ZERO);
/// assert!(d.allowed);
/// assert_eq!((d.limit, d.remaining), (2, 1));
/// assert_eq!(d.retry_after, Nanos::ZERO);
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Decision {
    /// Whether the request is admitted.
    pub allowed: bool,
    /// The most cost-1 requests the limiter can admit at once (burst, window limit, queue).
    pub limit: u64,
    /// How many more cost-1 requests would be admitted right now; never negative.
    pub remaining: u64,
    /// Time until the key's state is indistinguishable from a fresh key's (full quota).
    pub reset_after: Nanos,
    /// Zero when allowed; when denied, the time after which the same request would be
    /// admitted if nothing else arrives. Never zero for a deny.
    pub retry_after: Nanos,
    /// Leaky bucket only: how long the caller must hold the admitted request before
    /// forwarding it, so that output never exceeds the drain rate. Zero otherwise.
    pub delay: Nanos,
}

impl Decision {
    /// An admitted decision with no delay.
    #[inline]
    pub const fn allow(limit: u64, remaining: u64, reset_after: Nanos) -> Decision {
        Decision {
            allowed: true,
            limit,
            remaining,
            reset_after,
            retry_after: Nanos::ZERO,
            delay: Nanos::ZERO,
        }
    }

    /// A denied decision. A zero `retry_after` is raised to one nanosecond: a deny always
    /// tells the caller to wait.
    #[inline]
    pub const fn deny(
        limit: u64,
        remaining: u64,
        reset_after: Nanos,
        retry_after: Nanos,
    ) -> Decision {
        let retry_after = if retry_after.as_u64() == 0 {
            Nanos::new(1)
        } else {
            retry_after
        };
        Decision {
            allowed: false,
            limit,
            remaining,
            reset_after,
            retry_after,
            delay: Nanos::ZERO,
        }
    }

    /// The same decision with `delay` set (leaky bucket).
    #[inline]
    pub const fn with_delay(mut self, delay: Nanos) -> Decision {
        self.delay = delay;
        self
    }
}

/// The result of one pure transition: the decision and, when something must be written,
/// the next packed state.
///
/// `next == None` means "write nothing": every deny and every peek.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The state to compare-and-swap in, or `None` to leave the state untouched.
    pub next: Option<u64>,
    /// The decision to return if the write (if any) succeeds.
    pub decision: Decision,
}

impl Outcome {
    /// An outcome that writes `next`.
    #[inline]
    pub const fn write(next: u64, decision: Decision) -> Outcome {
        Outcome {
            next: Some(next),
            decision,
        }
    }

    /// An outcome that writes nothing.
    #[inline]
    pub const fn read_only(decision: Decision) -> Outcome {
        Outcome {
            next: None,
            decision,
        }
    }
}
