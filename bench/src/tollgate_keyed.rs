//! tollgate's side of the keyed cases (filled in once `tollgate::KeyedLimiter` exists).

use crate::{KeySet, TimedCase};
use std::sync::Arc;

/// Adds tollgate's one-thread runner to `case`.
pub(crate) fn single(case: TimedCase, _keys: &KeySet, _order: &Arc<[u64]>) -> TimedCase {
    case
}

/// Adds tollgate's two-thread runner to `case`.
pub(crate) fn threaded(case: TimedCase, _keys: &KeySet, _orders: &[Arc<[u64]>; 2]) -> TimedCase {
    case
}

/// A fresh tollgate keyed table of `capacity` keys.
pub(crate) fn fresh_table(
    capacity: usize,
) -> (
    crate::FloorTable<foldhash::fast::RandomState>,
    crate::QuantaTscClock,
) {
    (
        crate::FloorTable::new(capacity, 1, 1, Default::default()),
        crate::QuantaTscClock::new(),
    )
}
