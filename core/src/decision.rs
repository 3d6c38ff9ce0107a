//! [`Decision`]: what a check answers, and [`Outcome`]: a decision plus the state to write.

use core::borrow::Borrow;

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
#[must_use = "a decision says whether the request may proceed"]
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

    /// Combines the decisions of several tiers checked together, all or nothing: the one
    /// rule every multi-tier executor (policy, Redis, fallback) uses. Returns the combined
    /// decision and the index of the *tightest* tier, or `None` for no tiers.
    ///
    /// - `allowed` iff every tier allowed;
    /// - the tightest tier: when denied, the denying tier with the longest `retry_after`
    ///   (no tier can pass sooner, so that wait is exact as far as is known now); when
    ///   allowed, the tier with the fewest `remaining`, ties going to the longer
    ///   `reset_after`; remaining ties to the first such tier;
    /// - `limit` and `reset_after`: the tightest tier's (so they describe the same tier);
    /// - `remaining`: the minimum over all tiers;
    /// - `retry_after`: the maximum over the denying tiers (zero when allowed);
    /// - `delay`: the longest any tier asked for when allowed, zero when denied.
    ///
    /// ```
    /// use tollgate_core::{Decision, Nanos};
    /// let per_second = Decision::allow(10, 7, Nanos::from_secs(1));
    /// let per_day = Decision::deny(1000, 3, Nanos::from_secs(3600), Nanos::from_secs(60));
    /// let (tightest, combined) = Decision::combine([per_second, per_day]).unwrap();
    /// assert_eq!(tightest, 1);
    /// assert!(!combined.allowed);
    /// assert_eq!(combined.retry_after, Nanos::from_secs(60));
    /// assert_eq!(combined.remaining, 3);
    /// assert_eq!(combined.limit, 1000);
    /// ```
    ///
    /// The tiers may be given by value or by reference (`&Decision`): by reference nothing
    /// is copied until the chosen tier's decision is.
    pub fn combine<D: Borrow<Decision>>(
        tiers: impl IntoIterator<Item = D>,
    ) -> Option<(usize, Decision)> {
        // One pass: the tightest admitting and the tightest denying candidate, then pick.
        let mut admit: Option<(usize, D)> = None;
        let mut deny: Option<(usize, D)> = None;
        let mut remaining = u64::MAX;
        let mut delay = Nanos::ZERO;
        for (i, tier) in tiers.into_iter().enumerate() {
            let d = tier.borrow();
            remaining = remaining.min(d.remaining);
            if d.allowed {
                delay = delay.max(d.delay);
                let tighter = admit.as_ref().map_or(true, |(_, b)| {
                    let b = b.borrow();
                    d.remaining < b.remaining
                        || (d.remaining == b.remaining && d.reset_after > b.reset_after)
                });
                if tighter {
                    admit = Some((i, tier));
                }
            } else if deny
                .as_ref()
                .map_or(true, |(_, b)| d.retry_after > b.borrow().retry_after)
            {
                deny = Some((i, tier));
            }
        }
        let (i, mut decision) = match deny {
            Some((i, denied)) => {
                let mut d = *denied.borrow();
                d.delay = Nanos::ZERO;
                (i, d)
            }
            None => {
                let (i, admitted) = admit?;
                let mut d = *admitted.borrow();
                d.delay = delay;
                (i, d)
            }
        };
        decision.remaining = remaining;
        Some((i, decision))
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
