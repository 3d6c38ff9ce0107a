//! A [`LeasedStore`]'s counters: live ([`LeaseCounters`]) and as a snapshot
//! ([`LeaseStats`], [`LeasedStore::stats`]).

use super::LeasedStore;
use crate::stats::{Count, Stat};
use crate::RedisStats;
use std::sync::atomic::AtomicU64;
use tollgate::policy::StripedCounter;

/// Live counters of a [`LeasedStore`]. With the `metrics` feature each also reports
/// through the `metrics` facade, by a handle registered when the store is built (so
/// install the recorder first): `tollgate_lease_checks_total{answered="local"|"redis"}`,
/// `tollgate_lease_leases_total`, `tollgate_lease_permits_total{fate="leased"|"returned"|
/// "lost"|"unknown"}`.
#[derive(Debug)]
pub(super) struct LeaseCounters {
    /// Striped: every locally answered check counts here, from every thread.
    pub(super) local: Stat<StripedCounter>,
    pub(super) remote: Stat<AtomicU64>,
    pub(super) leases: Stat<AtomicU64>,
    pub(super) leased: Stat<AtomicU64>,
    pub(super) returned: Stat<AtomicU64>,
    pub(super) lost: Stat<AtomicU64>,
    pub(super) unknown: Stat<AtomicU64>,
    /// A level (up and down), for [`LeaseStats::unsettled_permits`] only.
    pub(super) unsettled: AtomicU64,
}

impl LeaseCounters {
    pub(super) fn new() -> LeaseCounters {
        LeaseCounters {
            local: Stat::new(
                StripedCounter::new(),
                "tollgate_lease_checks_total",
                Some(("answered", "local")),
            ),
            remote: Stat::new(
                AtomicU64::new(0),
                "tollgate_lease_checks_total",
                Some(("answered", "redis")),
            ),
            leases: Stat::new(AtomicU64::new(0), "tollgate_lease_leases_total", None),
            leased: Stat::new(
                AtomicU64::new(0),
                "tollgate_lease_permits_total",
                Some(("fate", "leased")),
            ),
            returned: Stat::new(
                AtomicU64::new(0),
                "tollgate_lease_permits_total",
                Some(("fate", "returned")),
            ),
            lost: Stat::new(
                AtomicU64::new(0),
                "tollgate_lease_permits_total",
                Some(("fate", "lost")),
            ),
            unknown: Stat::new(
                AtomicU64::new(0),
                "tollgate_lease_permits_total",
                Some(("fate", "unknown")),
            ),
            unsettled: AtomicU64::new(0),
        }
    }
}

/// A snapshot of a [`LeasedStore`]'s counters since it was built.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseStats {
    /// Checks answered from leases alone (no round trip).
    pub local_checks: u64,
    /// Checks that went to Redis (at least one tier not covered by a lease).
    pub remote_checks: u64,
    /// Leases taken.
    pub leases: u64,
    /// Permits taken by leases.
    pub leased_permits: u64,
    /// Permits given back to Redis (expired, idle or shut-down leases).
    pub returned_permits: u64,
    /// Permits Redis counts as leased that no process holds or will admit: what could not
    /// be given back by the time the store was dropped (Redis unreachable). They stay
    /// counted in Redis until the key's state frees them.
    pub lost_permits: u64,
    /// Permits of lease operations whose outcome Redis never told (the connection failed
    /// with the call in flight, or no answer within 60 s): Redis may count up to this many
    /// more than the accounting below says.
    pub unknown_permits: u64,
    /// Permits in transit now: of lease operations that timed out and whose answer is still
    /// awaited (the late answer settles them: a grant goes into the slot, a refused call
    /// changes nothing), and permits queued to go back to Redis.
    ///
    /// Whenever none are in transit, what Redis counts for the store's keys is exactly what
    /// the store admitted from leases, plus `held_permits`, plus `lost_permits` (plus at
    /// most `unknown_permits`).
    pub unsettled_permits: u64,
    /// Keys holding a slot now.
    pub hot_keys: u64,
    /// Permits in hand now (leased, not yet spent or returned), over every key.
    pub held_permits: u64,
    /// The wrapped store's counters (its round trips include the leases').
    pub redis: RedisStats,
}

impl LeasedStore {
    /// Counters since construction.
    pub fn stats(&self) -> LeaseStats {
        let c = &self.inner.counters;
        LeaseStats {
            local_checks: c.local.get(),
            remote_checks: c.remote.get(),
            leases: c.leases.get(),
            leased_permits: c.leased.get(),
            returned_permits: c.returned.get(),
            lost_permits: c.lost.get(),
            unknown_permits: c.unknown.get(),
            unsettled_permits: Count::get(&c.unsettled),
            hot_keys: self
                .inner
                .slots
                .iter()
                .filter(|s| s.cell.owner().is_some())
                .count() as u64,
            held_permits: self.inner.slots.iter().map(|s| s.cell.permits()).sum(),
            redis: self.inner.redis.stats(),
        }
    }
}
