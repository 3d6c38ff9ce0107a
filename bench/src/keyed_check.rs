//! [`KeyedCheck`]: "check one permit for this key, now" — the one operation every keyed
//! case times — implemented for governor's keyed limiter and the floor table (and tollgate's
//! keyed limiter), so one generic case builder drives all contenders identically.

use crate::FloorTable;
use governor::clock::Clock as GovernorClock;
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::RateLimiter;
use std::hash::{BuildHasher, Hash};
use tollgate::{Clock, TscClock};

/// One keyed check with the contender's own clock read; `true` when admitted.
///
/// ```
/// use tollgate::TscClock;
/// use tollgate_bench::{FloorTable, KeyedCheck};
/// let floor = (FloorTable::new(8, 1, 10, foldhash::fast::RandomState::default()), TscClock::new());
/// assert!(floor.check_key(&7u64));
/// ```
pub trait KeyedCheck<K: ?Sized>: Send + Sync {
    /// Checks one permit for `key`, reading the clock once.
    fn check_key(&self, key: &K) -> bool;
}

impl<K, S, C> KeyedCheck<K>
    for RateLimiter<K, DashMapStateStore<K, S>, C, NoOpMiddleware<C::Instant>>
where
    K: Hash + Eq + Clone + Send + Sync,
    S: BuildHasher + Clone + Send + Sync,
    C: GovernorClock + Send + Sync,
    C::Instant: Send + Sync,
{
    #[inline]
    fn check_key(&self, key: &K) -> bool {
        RateLimiter::check_key(self, key).is_ok()
    }
}

impl<K, S> KeyedCheck<K> for (FloorTable<S>, TscClock)
where
    K: Hash + ?Sized,
    S: BuildHasher + Send + Sync,
{
    #[inline]
    fn check_key(&self, key: &K) -> bool {
        self.0.check_at(key, self.1.now().as_u64())
    }
}
