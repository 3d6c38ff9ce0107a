//! [`Jitter`]: extra time added to each backoff of an `until_ready`, so callers denied at
//! the same instant do not all come back at the same instant (governor's `Jitter`).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use tollgate_core::hash::splitmix64;
use tollgate_core::Nanos;

/// Extra time added to each backoff of an `until_ready` (never to a leaky bucket's delay,
/// which holds a permit already admitted): a duration drawn uniformly from
/// `[min, min + spread)` per backoff, from a per-wait random sequence.
///
/// ```
/// use std::time::Duration;
/// use tollgate::wait::Jitter;
/// use tollgate::{Gcra, RateLimiter};
///
/// let limiter = RateLimiter::new(Gcra::per_second(100).burst(1).build()?);
/// assert!(limiter.check().allowed);
/// // Denied for 10 ms, then back after 10–15 ms rather than exactly 10.
/// let runtime = tokio::runtime::Builder::new_current_thread().build()?;
/// let start = std::time::Instant::now();
/// runtime.block_on(limiter.until_ready_with_jitter(Jitter::up_to(Duration::from_millis(5))));
/// assert!(start.elapsed() >= Duration::from_millis(5));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Jitter {
    min: Nanos,
    spread: Nanos,
}

impl Jitter {
    /// No jitter: every backoff is exactly the decision's `retry_after`.
    pub const NONE: Jitter = Jitter {
        min: Nanos::ZERO,
        spread: Nanos::ZERO,
    };

    /// Between zero and `max` (excluded) added to each backoff.
    pub const fn up_to(max: Duration) -> Jitter {
        Jitter::new(Duration::ZERO, max)
    }

    /// At least `min`, plus up to `spread` (excluded), added to each backoff.
    pub const fn new(min: Duration, spread: Duration) -> Jitter {
        Jitter {
            min: Nanos::from_duration(min),
            spread: Nanos::from_duration(spread),
        }
    }

    /// The extra time of a backoff whose random draw is `draw`.
    fn extra(&self, draw: u64) -> Nanos {
        match self.spread.as_u64() {
            0 => self.min,
            spread => self.min.saturating_add(Nanos::new(draw % spread)),
        }
    }
}

/// The draws of one wait: [`Jitter`] and a random sequence of its own (seeded by the
/// standard library's per-process random keys, which differ for every call).
#[derive(Debug)]
pub(crate) struct Draws {
    jitter: Jitter,
    state: u64,
}

impl Draws {
    pub(crate) fn new(jitter: Jitter) -> Draws {
        Draws {
            jitter,
            state: RandomState::new().build_hasher().finish(),
        }
    }

    /// `backoff` plus the next draw's extra time.
    pub(crate) fn add_to(&mut self, backoff: Nanos) -> Nanos {
        // A Weyl sequence through the splitmix64 finaliser: every draw distinct.
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        backoff.saturating_add(self.jitter.extra(splitmix64(self.state)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_stay_in_the_range_and_spread_over_it() {
        let jitter = Jitter::new(Duration::from_nanos(100), Duration::from_nanos(50));
        let mut draws = Draws::new(jitter);
        let extras: Vec<u64> = (0..1_000)
            .map(|_| draws.add_to(Nanos::new(1_000)).as_u64() - 1_000)
            .collect();
        assert!(extras.iter().all(|e| (100..150).contains(e)));
        // Both halves of the range are drawn.
        assert!(extras.iter().any(|&e| e < 125) && extras.iter().any(|&e| e >= 125));
        let mut none = Draws::new(Jitter::NONE);
        assert_eq!(none.add_to(Nanos::new(7)), Nanos::new(7));
        let mut fixed = Draws::new(Jitter::new(Duration::from_nanos(3), Duration::ZERO));
        assert_eq!(fixed.add_to(Nanos::new(7)), Nanos::new(10));
    }
}
