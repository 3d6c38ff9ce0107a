//! The keyed cases: one check per key from a pre-generated order (no allocation or RNG in
//! the timed loop), on 1 key, 100k and 1M keys, round robin and Zipf-skewed; two threads on
//! one key and on distinct keys; and first-seen key inserts.
//!
//! Fairness: every contender gets the same key set and order, the same per-key quota (one
//! permit per ns, bursts of a million: every check admits, so every check writes), the
//! same TSC reading through quanta, and the same hasher class (foldhash) — governor through
//! `dashmap_with_hasher`. `keyed_100k_default_hashers` gives each its out-of-the-box
//! hasher instead (governor: SipHash `RandomState`). Tables are filled with every key before
//! timing, so lookups hit existing keys except in `keyed_insert`.

use crate::direct_cases::governor_quota;
use crate::loops::{keyed, two_threads};
use crate::Stopwatch;
use crate::{CaseSpec, FloorTable, KeySet, KeyedCheck, Scale, TimedCase};
use governor::clock::{QuantaClock, QuantaInstant};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::RateLimiter;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;
use tollgate::engine::hash::splitmix64;
use tollgate::TscClock;

/// Per-key quota of the keyed cases: one permit per ns, bursts of a million.
pub(crate) const INTERVAL: u64 = 1;
/// Per-key burst of the keyed cases.
pub(crate) const BURST: u32 = 1_000_000;

/// Zipf exponent of the skewed orders (the classic s = 1).
const ZIPF_S: f64 = 1.0;

/// Fresh keys per table in `keyed_insert`: each batch inserts into tables of this capacity.
pub const INSERT_CHUNK: usize = 100_000;

/// The keyed cases, in report order.
pub fn specs() -> Vec<CaseSpec> {
    vec![
        CaseSpec::new("keyed_1key", |_| {
            let keys = KeySet::new(1);
            single("keyed_1key", &keys, keys.round_robin(1024))
        }),
        CaseSpec::new("keyed_100k", |s| {
            let keys = KeySet::new(s.mid_keys);
            single("keyed_100k", &keys, keys.u64s().to_vec())
        }),
        CaseSpec::new("keyed_100k_zipf", |s| {
            let keys = KeySet::new(s.mid_keys);
            let order = keys.zipf(s.order_len, ZIPF_S, 1);
            single("keyed_100k_zipf", &keys, order)
        }),
        CaseSpec::new("keyed_1m", |s| {
            let keys = KeySet::new(s.big_keys);
            single("keyed_1m", &keys, keys.u64s().to_vec())
        }),
        CaseSpec::new("keyed_1m_zipf", |s| {
            let keys = KeySet::new(s.big_keys);
            let order = keys.zipf(s.order_len, ZIPF_S, 2);
            single("keyed_1m_zipf", &keys, order)
        }),
        CaseSpec::new("keyed_100k_default_hashers", default_hashers),
        CaseSpec::new("keyed_1key_2threads", |_| {
            let keys = KeySet::new(1);
            threaded(
                "keyed_1key_2threads",
                &keys,
                [keys.round_robin(1024), keys.round_robin(1024)],
            )
        }),
        CaseSpec::new("keyed_100k_2threads", |s| {
            threaded_split("keyed_100k_2threads", s.mid_keys)
        }),
        CaseSpec::new("keyed_1m_2threads", |s| {
            threaded_split("keyed_1m_2threads", s.big_keys)
        }),
        CaseSpec::new("keyed_insert", |_| insert("keyed_insert")),
    ]
}

/// The floor: a flat foldhash-indexed array with a power-of-two slot per key.
fn floor(keys: usize) -> (FloorTable<foldhash::fast::RandomState>, TscClock) {
    let table = FloorTable::new(keys, INTERVAL, u64::from(BURST), Default::default());
    (table, TscClock::new())
}

/// governor's DashMap store with foldhash and quanta (its default clock).
fn governor_foldhash() -> impl KeyedCheck<u64> {
    RateLimiter::dashmap_with_clock_and_hasher(
        governor_quota(INTERVAL, BURST),
        QuantaClock::default(),
        foldhash::fast::RandomState::default(),
    )
}

/// [`governor_foldhash`] with its map allocated for `capacity` keys (`keyed_insert`), as
/// tollgate's table is, so that its timed inserts, like ours, do not grow (rehash) the map;
/// and its memory touched once (filled with other keys, then cleared, which keeps the
/// allocation), as our table's is when it is built, so that they do not take its pages'
/// first faults either.
fn governor_foldhash_sized(capacity: usize) -> impl KeyedCheck<u64> {
    let state: DashMapStateStore<u64, foldhash::fast::RandomState> =
        DashMapStateStore::with_capacity_and_hasher(capacity, Default::default());
    for key in 0..capacity as u64 {
        state.insert(key, Default::default());
    }
    state.clear();
    RateLimiter::<_, _, _, NoOpMiddleware<QuantaInstant>>::new(
        governor_quota(INTERVAL, BURST),
        state,
        QuantaClock::default(),
    )
}

/// Checks every key once (inserting it) before timing.
pub(crate) fn fill<C: KeyedCheck<u64> + ?Sized>(check: &C, keys: &KeySet) {
    for key in keys.u64s() {
        black_box(check.check_key(key));
    }
}

/// A one-thread runner of `order` through `check`.
fn runner<C: KeyedCheck<u64> + 'static>(
    check: C,
    order: &Arc<[u64]>,
) -> impl FnMut(u64) -> Duration + Send + 'static {
    keyed(order.clone(), move |key: &u64| check.check_key(key))
}

/// One thread replaying `order` over pre-filled tables.
fn single(name: &str, keys: &KeySet, order: Vec<u64>) -> TimedCase {
    let order: Arc<[u64]> = order.into();
    let governor = governor_foldhash();
    fill(&governor, keys);
    let floor = floor(keys.len());
    fill(&floor, keys);
    let case = TimedCase::new(name)
        .governor(runner(governor, &order))
        .floor(runner(floor, &order));
    crate::tollgate_keyed::single(case, keys, &order)
}

/// 100k keys in round robin, each contender with its default hasher.
fn default_hashers(scale: &Scale) -> TimedCase {
    let keys = KeySet::new(scale.mid_keys);
    let order: Arc<[u64]> = keys.u64s().to_vec().into();
    let governor = RateLimiter::keyed(governor_quota(INTERVAL, BURST));
    fill(&governor, &keys);
    let floor = floor(keys.len());
    fill(&floor, &keys);
    let case = TimedCase::new("keyed_100k_default_hashers")
        .governor(runner(governor, &order))
        .floor(runner(floor, &order));
    crate::tollgate_keyed::single(case, &keys, &order)
}

/// Two threads, each replaying its own order, over shared pre-filled tables.
fn threaded(name: &str, keys: &KeySet, orders: [Vec<u64>; 2]) -> TimedCase {
    let orders: [Arc<[u64]>; 2] = orders.map(Into::into);
    let governor = Arc::new(governor_foldhash());
    fill(&*governor, keys);
    let floor = Arc::new(floor(keys.len()));
    fill(&*floor, keys);
    let case = TimedCase::new(name)
        .governor(two_threads(orders.clone(), check_fn(governor)))
        .floor(two_threads(orders.clone(), check_fn(floor)));
    crate::tollgate_keyed::threaded(case, keys, &orders)
}

/// Two threads on disjoint halves of `n` keys, each in round robin.
fn threaded_split(name: &str, n: usize) -> TimedCase {
    let keys = KeySet::new(n);
    let (a, b) = keys.u64s().split_at(n / 2);
    threaded(name, &keys, [a.to_vec(), b.to_vec()])
}

/// The shared check closure of a two-thread runner.
pub(crate) fn check_fn<C: KeyedCheck<u64> + 'static>(
    check: Arc<C>,
) -> Arc<impl Fn(&u64) -> bool + Send + Sync + 'static> {
    Arc::new(move |key: &u64| check.check_key(key))
}

/// First-seen keys: each batch inserts fresh keys (never seen by any contender) into fresh
/// tables of [`INSERT_CHUNK`] capacity. Building the tables, generating the keys and
/// dropping the tables happen outside the timed part.
fn insert(name: &str) -> TimedCase {
    TimedCase::new(name)
        .governor(insert_runner(governor_foldhash_sized))
        .floor(insert_runner(floor))
        .tollgate(insert_runner(crate::tollgate_keyed::fresh_table))
}

/// A runner inserting fresh keys into tables made by `make(capacity)`.
pub fn insert_runner<C, M>(make: M) -> impl FnMut(u64) -> Duration + Send + 'static
where
    C: KeyedCheck<u64>,
    M: Fn(usize) -> C + Send + 'static,
{
    // Fresh keys come from a counter range no other case uses.
    let mut next = 1u64 << 60;
    move |iters| {
        let mut total = Duration::ZERO;
        let mut left = iters;
        while left > 0 {
            let n = left.min(INSERT_CHUNK as u64);
            let keys: Vec<u64> = (next..next + n).map(splitmix64).collect();
            next += n;
            let table = make(INSERT_CHUNK);
            let start = Stopwatch::start();
            for key in &keys {
                black_box(table.check_key(key));
            }
            total += start.elapsed();
            drop(table);
            left -= n;
        }
        total
    }
}
