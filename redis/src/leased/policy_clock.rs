//! [`PolicyClock`]: the lease thread's estimate of the policy's clock, for the instant its
//! calls decide at under a client time source.

use std::time::Instant;

use tollgate::Nanos;

/// The lease thread's estimate of the policy's clock: the last `now` a check passed, aged
/// by the time elapsed since it was seen.
#[derive(Debug, Default)]
pub(super) struct PolicyClock {
    pub(super) seen: u64,
    at: Option<Instant>,
}

impl PolicyClock {
    pub(super) fn observe(&mut self, seen: u64) {
        if seen != self.seen || self.at.is_none() {
            self.seen = seen;
            self.at = Some(Instant::now());
        }
    }

    pub(super) fn now(&self) -> Nanos {
        let elapsed = self.at.map_or(0, |t| {
            u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)
        });
        Nanos::new(self.seen.saturating_add(elapsed))
    }
}
