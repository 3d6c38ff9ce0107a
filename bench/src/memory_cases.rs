//! The memory cases: heap bytes per key after inserting a million distinct keys, measured as
//! the growth of the [`CountingAllocator`]'s live bytes (the keys themselves are built
//! before the baseline; only the store's own allocations, key clones included, count).
//!
//! - tollgate: a keyed limiter of capacity exactly the key count, filled to capacity, and
//!   the same in fingerprint mode (the table keeps a hash of the key, not the key).
//! - governor: its default keyed store (`RateLimiter::keyed`, a `DashMap`).
//! - floor: the information-theoretic packing, key bytes (inline and heap) plus the 8-byte
//!   state, with no table overhead at all.

use crate::direct_cases::governor_quota;
use crate::{CountingAllocator, KeySet, MemorySpec, Row, Unit};
use governor::RateLimiter;
use std::hash::Hash;

/// The memory cases, in report order.
pub fn specs() -> Vec<MemorySpec> {
    vec![
        MemorySpec::new("memory_u64_1m", |scale, alloc| {
            let keys = KeySet::new(scale.big_keys).u64s().to_vec();
            row("memory_u64_1m", &keys, 0, alloc)
        }),
        MemorySpec::new("memory_ipv6_1m", |scale, alloc| {
            let keys = KeySet::new(scale.big_keys).ipv6s();
            row("memory_ipv6_1m", &keys, 0, alloc)
        }),
        MemorySpec::new("memory_string_1m", |scale, alloc| {
            let keys = KeySet::new(scale.big_keys).strings(24);
            row("memory_string_1m", &keys, 24, alloc)
        }),
    ]
}

/// One memory row for `keys` (each owning `heap_per_key` heap bytes).
fn row<K>(name: &str, keys: &[K], heap_per_key: usize, alloc: &CountingAllocator) -> Row
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    assert!(
        alloc.is_installed(),
        "memory cases need CountingAllocator as the global allocator"
    );
    let governor = governor_bytes_per_key(keys, alloc);
    let floor = (std::mem::size_of::<K>() + heap_per_key + 8) as f64;
    Row {
        name: name.into(),
        unit: Unit::BytesPerKey,
        values: [None, Some(governor), Some(floor)],
    }
}

/// Live-byte growth per key of governor's default keyed limiter after checking every key
/// once.
fn governor_bytes_per_key<K>(keys: &[K], alloc: &CountingAllocator) -> f64
where
    K: Hash + Eq + Clone,
{
    let before = alloc.live();
    let limiter = RateLimiter::keyed(governor_quota(1, 1_000_000));
    for key in keys {
        let _ = limiter.check_key(key);
    }
    let grown = alloc.live().saturating_sub(before);
    drop(limiter);
    grown as f64 / keys.len().max(1) as f64
}
