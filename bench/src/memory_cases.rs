//! The memory cases: heap bytes per key after inserting a million distinct keys, measured as
//! the growth of the [`CountingAllocator`]'s live bytes (the keys themselves are built
//! before the baseline; only the store's own allocations, key clones included, count).
//!
//! - tollgate: a keyed limiter of capacity exactly the key count, filled to capacity
//!   (`memory_*`), and the same in fingerprint mode (`memory_*_fingerprint`: the table keeps
//!   a 64-bit hash of the key, not the key; integer keys are always stored in 8 bytes).
//! - governor: its default keyed store (`RateLimiter::keyed`, a `DashMap` with SipHash),
//!   measured once per key type and shown in both rows.
//! - floor: the information-theoretic packing — key bytes (inline and heap) plus the
//!   8-byte state, with no table overhead at all.

use crate::direct_cases::governor_quota;
use crate::tollgate_keyed::table;
use crate::{CountingAllocator, KeySet, KeyedCheck, MemorySpec, Row, Unit};
use governor::RateLimiter;
use std::hash::Hash;
use tollgate::KeyStorage;

/// The memory cases, in report order.
pub fn specs() -> Vec<MemorySpec> {
    vec![
        MemorySpec::new("memory_u64_1m", |scale, alloc| {
            let keys = KeySet::new(scale.big_keys).u64s().to_vec();
            rows("memory_u64_1m", &keys, 0, false, alloc)
        }),
        MemorySpec::new("memory_ipv6_1m", |scale, alloc| {
            let keys = KeySet::new(scale.big_keys).ipv6s();
            rows("memory_ipv6_1m", &keys, 0, true, alloc)
        }),
        MemorySpec::new("memory_string_1m", |scale, alloc| {
            let keys = KeySet::new(scale.big_keys).strings(24);
            rows("memory_string_1m", &keys, 24, true, alloc)
        }),
    ]
}

/// The rows for `keys` (each owning `heap_per_key` heap bytes): exact storage, and
/// fingerprint storage when `fingerprint`.
fn rows<K>(
    name: &str,
    keys: &[K],
    heap_per_key: usize,
    fingerprint: bool,
    alloc: &CountingAllocator,
) -> Vec<Row>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    assert!(
        alloc.is_installed(),
        "memory cases need CountingAllocator as the global allocator"
    );
    let governor = Some(governor_bytes_per_key(keys, alloc));
    let floor = Some((std::mem::size_of::<K>() + heap_per_key + 8) as f64);
    let mut rows = vec![Row {
        name: name.into(),
        unit: Unit::BytesPerKey,
        values: [
            Some(tollgate_bytes_per_key(keys, KeyStorage::Exact, alloc)),
            governor,
            floor,
        ],
    }];
    if fingerprint {
        rows.push(Row {
            name: format!("{name}_fingerprint"),
            unit: Unit::BytesPerKey,
            values: [
                Some(tollgate_bytes_per_key(keys, KeyStorage::Fingerprint, alloc)),
                governor,
                floor,
            ],
        });
    }
    rows
}

/// Live-byte growth per key of a tollgate keyed limiter of capacity `keys.len()` after
/// checking every key once (so it holds all of them: full capacity).
fn tollgate_bytes_per_key<K>(keys: &[K], storage: KeyStorage, alloc: &CountingAllocator) -> f64
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    let before = alloc.live();
    let limiter = table::<K>(keys.len(), storage);
    for key in keys {
        limiter.check_key(key);
    }
    let grown = alloc.live().saturating_sub(before);
    if limiter.len() != keys.len() {
        eprintln!(
            "note: tollgate holds {} of {} keys after the fill ({:?})",
            limiter.len(),
            keys.len(),
            limiter.stats()
        );
    }
    drop(limiter);
    grown as f64 / keys.len().max(1) as f64
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
