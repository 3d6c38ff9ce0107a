//! [`RedisStats`]: counters of a Redis store (round trips, cache hits, degraded
//! decisions, script reloads, refused late calls, clock synchronisations, the last
//! failure), for benchmarks, tests and metrics.

use super::FailureCause;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use tollgate::policy::StripedCounter;

/// A snapshot of a store's counters since it was built.
///
/// ```
/// use tollgate_redis::RedisStats;
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
    /// Script calls sent to Redis (each one round trip), script reloads included (the
    /// clock's `TIME` samples are `clock_syncs`).
    pub round_trips: u64,
    /// Decisions answered by the local deny cache.
    pub deny_cache_hits: u64,
    /// Script calls that failed (answered by the failure policy), whatever the cause.
    pub degraded: u64,
    /// Times a `Function not found` (or, on `EVALSHA`, `NOSCRIPT`) answer made the store
    /// send the script again (`FUNCTION LOAD`, or `EVAL` of the body).
    pub script_reloads: u64,
    /// Script calls Redis refused, within the timeout, because their deadline had passed
    /// when the script ran ([`FailureCause::Expired`]; also in `degraded`). A call refused
    /// after the store gave up on it is not seen here (its answer is dropped): the
    /// server's `INFO errorstats` counts every refusal (`errorstat_TGEXPIRED`).
    pub expired: u64,
    /// Tier decisions the in-process fallback could not make
    /// ([`FailureCause::FallbackUnavailable`]): each such tier was denied.
    pub fallback_failures: u64,
    /// `TIME` commands sent to estimate the server's clock (for the calls' deadlines; not
    /// in `round_trips`).
    pub clock_syncs: u64,
    /// What failed last, if anything has.
    pub last_failure: Option<FailureCause>,
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

/// The live counters behind [`RedisStats`]. With the `metrics` feature the counts of
/// calls also go through the facade (registered when the store is built, so install the
/// recorder first): `tollgate_redis_decisions_total`, `tollgate_redis_script_decisions_total`,
/// `tollgate_redis_round_trips_total`, `tollgate_redis_deny_cache_hits_total`,
/// `tollgate_redis_script_reloads_total`, `tollgate_redis_clock_syncs_total`; the failures
/// go by cause (`tollgate_redis_failures_total{cause}`, see `events`).
#[derive(Debug)]
pub(crate) struct Counters {
    pub(crate) decisions: Stat<AtomicU64>,
    pub(crate) redis_decisions: Stat<AtomicU64>,
    pub(crate) round_trips: Stat<AtomicU64>,
    pub(crate) deny_cache_hits: Stat<AtomicU64>,
    pub(crate) degraded: AtomicU64,
    pub(crate) script_reloads: Stat<AtomicU64>,
    pub(crate) expired: AtomicU64,
    pub(crate) fallback_failures: AtomicU64,
    pub(crate) clock_syncs: Stat<AtomicU64>,
    /// The last failure's [`cause_code`] (0: none yet).
    pub(crate) last_failure: AtomicU8,
}

/// [`FailureCause`] as a nonzero byte (what [`Counters::last_failure`] holds).
fn cause_code(cause: FailureCause) -> u8 {
    match cause {
        FailureCause::Timeout => 1,
        FailureCause::Connection => 2,
        FailureCause::Server => 3,
        FailureCause::Backoff => 4,
        FailureCause::Expired => 5,
        FailureCause::FallbackUnavailable => 6,
    }
}

/// The inverse of [`cause_code`].
fn cause_of(code: u8) -> Option<FailureCause> {
    Some(match code {
        1 => FailureCause::Timeout,
        2 => FailureCause::Connection,
        3 => FailureCause::Server,
        4 => FailureCause::Backoff,
        5 => FailureCause::Expired,
        6 => FailureCause::FallbackUnavailable,
        _ => return None,
    })
}

impl Default for Counters {
    fn default() -> Counters {
        let stat = |name| Stat::new(AtomicU64::new(0), name, None);
        Counters {
            decisions: stat("tollgate_redis_decisions_total"),
            redis_decisions: stat("tollgate_redis_script_decisions_total"),
            round_trips: stat("tollgate_redis_round_trips_total"),
            deny_cache_hits: stat("tollgate_redis_deny_cache_hits_total"),
            degraded: AtomicU64::new(0),
            script_reloads: stat("tollgate_redis_script_reloads_total"),
            expired: AtomicU64::new(0),
            fallback_failures: AtomicU64::new(0),
            clock_syncs: stat("tollgate_redis_clock_syncs_total"),
            last_failure: AtomicU8::new(0),
        }
    }
}

/// Where a [`Stat`] keeps its count: an atomic word, or striped for a per-check count.
pub(crate) trait Count {
    fn add(&self, n: u64);
    fn get(&self) -> u64;
}

impl Count for AtomicU64 {
    fn add(&self, n: u64) {
        // Relaxed: a statistic; no other memory is published with it.
        self.fetch_add(n, Ordering::Relaxed);
    }
    fn get(&self) -> u64 {
        // Relaxed: see `add`.
        self.load(Ordering::Relaxed)
    }
}

impl Count for StripedCounter {
    fn add(&self, n: u64) {
        StripedCounter::add(self, n);
    }
    fn get(&self) -> u64 {
        StripedCounter::get(self)
    }
}

/// One count of a store: kept for its `stats()`, and reported through the `metrics` facade
/// under its name (feature `metrics`) by a handle registered when the store is built.
pub(crate) struct Stat<C> {
    count: C,
    #[cfg(feature = "metrics")]
    reported: metrics::Counter,
}

impl<C: Count> Stat<C> {
    /// `count`, reported (with the feature) as `name{label}`.
    pub(crate) fn new(
        count: C,
        name: &'static str,
        label: Option<(&'static str, &'static str)>,
    ) -> Self {
        #[cfg(feature = "metrics")]
        let reported = match label {
            Some((key, value)) => metrics::counter!(name, key => value),
            None => metrics::counter!(name),
        };
        #[cfg(not(feature = "metrics"))]
        let _ = (name, label);
        Stat {
            count,
            #[cfg(feature = "metrics")]
            reported,
        }
    }

    /// Adds `n`.
    #[inline]
    pub(crate) fn add(&self, n: u64) {
        self.count.add(n);
        #[cfg(feature = "metrics")]
        self.reported.increment(n);
    }

    /// The count so far.
    pub(crate) fn get(&self) -> u64 {
        self.count.get()
    }
}

impl<C: Count> core::fmt::Debug for Stat<C> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_tuple("Stat").field(&self.get()).finish()
    }
}

impl Counters {
    pub(crate) fn bump(counter: &AtomicU64) {
        // Relaxed: an independent statistic; no other memory is published with it.
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a failure of `cause` (the counters of its kind are the caller's).
    pub(crate) fn failed(&self, cause: FailureCause) {
        super::events::failed(cause);
        // Relaxed: a statistic; no other memory is published with it.
        self.last_failure
            .store(cause_code(cause), Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> RedisStats {
        // Relaxed: statistics read individually; a snapshot need not be atomic as a whole.
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RedisStats {
            decisions: self.decisions.get(),
            redis_decisions: self.redis_decisions.get(),
            round_trips: self.round_trips.get(),
            deny_cache_hits: self.deny_cache_hits.get(),
            degraded: get(&self.degraded),
            script_reloads: self.script_reloads.get(),
            expired: get(&self.expired),
            fallback_failures: get(&self.fallback_failures),
            clock_syncs: self.clock_syncs.get(),
            // Relaxed: as above.
            last_failure: cause_of(self.last_failure.load(Ordering::Relaxed)),
        }
    }
}
