//! A [`LeasedStore`]'s counters: live ([`LeaseCounters`]) and as a snapshot
//! ([`LeaseStats`], [`LeasedStore::stats`]).

use super::LeasedStore;
use crate::RedisStats;
use std::sync::atomic::{AtomicU64, Ordering};
use tollgate::policy::StripedCounter;

/// Live counters of a [`LeasedStore`].
#[derive(Debug, Default)]
pub(super) struct LeaseCounters {
    /// Striped: every locally answered check counts here, from every thread.
    pub(super) local: StripedCounter,
    pub(super) remote: AtomicU64,
    pub(super) leases: AtomicU64,
    pub(super) leased: AtomicU64,
    pub(super) returned: AtomicU64,
    pub(super) lost: AtomicU64,
    pub(super) unknown: AtomicU64,
    pub(super) unsettled: AtomicU64,
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
        // Relaxed: statistics, read one by one.
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LeaseStats {
            local_checks: c.local.get(),
            remote_checks: get(&c.remote),
            leases: get(&c.leases),
            leased_permits: get(&c.leased),
            returned_permits: get(&c.returned),
            lost_permits: get(&c.lost),
            unknown_permits: get(&c.unknown),
            unsettled_permits: get(&c.unsettled),
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
