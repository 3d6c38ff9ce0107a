//! [`RedisStats`]: counters of a Redis store (round trips, cache hits, degraded
//! decisions, script reloads), for benchmarks, tests and metrics.

use crate::sync::plain::{AtomicU64, Ordering};

/// A snapshot of a store's counters since it was built.
///
/// ```
/// use tollgate::redis::RedisStats;
/// let stats = RedisStats::default();
/// assert_eq!(stats.round_trips_per_redis_decision(), 0.0);
/// ```
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct RedisStats {
    /// Decisions answered (every source).
    pub decisions: u64,
    /// Decisions made by a script on Redis.
    pub redis_decisions: u64,
    /// Commands sent to Redis (each one round trip), script reloads included.
    pub round_trips: u64,
    /// Decisions answered by the local deny cache.
    pub deny_cache_hits: u64,
    /// Decisions made by the failure policy.
    pub degraded: u64,
    /// Times a `Function not found` (or, on `EVALSHA`, `NOSCRIPT`) answer made the store
    /// send the script again (`FUNCTION LOAD`, or `EVAL` of the body).
    pub script_reloads: u64,
}

impl RedisStats {
    /// Round trips per decision that Redis made: 1.0 unless scripts had to be reloaded.
    pub fn round_trips_per_redis_decision(&self) -> f64 {
        if self.redis_decisions == 0 {
            0.0
        } else {
            self.round_trips as f64 / self.redis_decisions as f64
        }
    }
}

/// The live counters behind [`RedisStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) decisions: AtomicU64,
    pub(crate) redis_decisions: AtomicU64,
    pub(crate) round_trips: AtomicU64,
    pub(crate) deny_cache_hits: AtomicU64,
    pub(crate) degraded: AtomicU64,
    pub(crate) script_reloads: AtomicU64,
}

impl Counters {
    pub(crate) fn bump(counter: &AtomicU64) {
        // Relaxed: an independent statistic; no other memory is published with it.
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> RedisStats {
        // Relaxed: statistics read individually; a snapshot need not be atomic as a whole.
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RedisStats {
            decisions: get(&self.decisions),
            redis_decisions: get(&self.redis_decisions),
            round_trips: get(&self.round_trips),
            deny_cache_hits: get(&self.deny_cache_hits),
            degraded: get(&self.degraded),
            script_reloads: get(&self.script_reloads),
        }
    }
}
