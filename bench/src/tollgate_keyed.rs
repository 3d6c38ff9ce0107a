//! tollgate's side of the keyed cases: a [`KeyedLimiter`] on the TSC clock with foldhash
//! (its default hasher class), sized to exactly the key count, so the timed tables are at
//! full capacity.

use crate::keyed_cases::{check_fn, fill, BURST, INTERVAL};
use crate::loops::{keyed, two_threads};
use crate::{KeySet, KeyedCheck, TimedCase};
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;
use tollgate::{Clock, Gcra, KeyStorage, KeyedLimiter};

/// tollgate's keyed limiter as the bench builds it.
pub type TollgateKeyed<K, C = tollgate::TscClock> =
    KeyedLimiter<K, Gcra, C, foldhash::fast::RandomState>;

impl<K, C, S> KeyedCheck<K> for KeyedLimiter<K, Gcra, C, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock + Send + Sync,
    S: BuildHasher + Send + Sync,
{
    #[inline]
    fn check_key(&self, key: &K) -> bool {
        matches!(KeyedLimiter::check(self, key), Ok(decision) if decision.allowed)
    }
}

/// A tollgate keyed limiter of exactly `capacity` keys, storing keys as `storage` says
/// (integer keys are always stored exactly in 8 bytes).
pub fn table<K>(capacity: usize, storage: KeyStorage) -> TollgateKeyed<K>
where
    K: Hash + Eq + Clone + 'static,
{
    let gcra = crate::direct_cases::ok(Gcra::from_interval(INTERVAL, u64::from(BURST)));
    crate::direct_cases::ok(
        KeyedLimiter::builder(gcra)
            .capacity(capacity)
            .key_storage(storage)
            .clock(tollgate::TscClock::new())
            .hasher(foldhash::fast::RandomState::default())
            .build(),
    )
}

/// A fresh, empty `u64` table of `capacity` keys (for `keyed_insert`).
pub fn fresh_table(capacity: usize) -> TollgateKeyed<u64> {
    table(capacity, KeyStorage::Exact)
}

/// Adds tollgate's one-thread runner to `case`.
pub(crate) fn single(case: TimedCase, keys: &KeySet, order: &Arc<[u64]>) -> TimedCase {
    let limiter = table::<u64>(keys.len(), KeyStorage::Exact);
    fill(&limiter, keys);
    case.tollgate(keyed(order.clone(), move |key: &u64| {
        limiter.check_key(key)
    }))
}

/// Adds tollgate's two-thread runner to `case`.
pub(crate) fn threaded(case: TimedCase, keys: &KeySet, orders: &[Arc<[u64]>; 2]) -> TimedCase {
    let limiter = Arc::new(table::<u64>(keys.len(), KeyStorage::Exact));
    fill(&*limiter, keys);
    case.tollgate(two_threads(orders.clone(), check_fn(limiter)))
}
