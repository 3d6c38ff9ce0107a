//! loom models of `tollgate`'s keyed table (`KeyedLimiter`): the same key inserted by two
//! threads at once, a check racing the idle eviction of its key, two inserts racing for the
//! last place; under `WhenFull::Evict`, checks and inserts racing pressure evictions; and
//! the deliberately broken twin (against both oracles).
//!
//! Each model asserts after every explored execution that some sequential order, run
//! through [`KeyedOracle`] (a capacity-bounded list of keyed states with lossless idle
//! eviction, then `WhenFull::Refuse` or `WhenFull::Evict`), gives the same answers
//! (decisions and `Full`), the same number of entries and the same peeks of every key at
//! the end: one entry per key, no admission lost or doubled, nothing evicted that was not
//! idle (`Refuse`) or, under `Evict`, an evicted key restarting fresh and nothing admitted
//! beyond what some order of checks and evictions admits.
//!
//! The evicting oracle lets *any* resident entry be the victim: a strict least-loss oracle
//! fails `keyed_evict_chooses_while_a_victim_is_checked` (loom finds the execution where
//! the insert picks key 2 as least loss, key 2's lock-free check is then admitted on its
//! old state, and the eviction drops that check's take: fail open, as `WhenFull::Evict`
//! documents).
#![cfg(tollgate_loom)]

use tollgate::WhenFull;
use tollgate_core::Gcra;
use tollgate_loom_tests::{BrokenKeyedTable, KeyedOracle, KeyedSubject, ModelRun, Op};

/// T = 10 ns, burst `burst`.
fn gcra(burst: u64) -> Gcra {
    Gcra::from_interval(10, burst).unwrap()
}

/// Every `now` of the model, plus one after everything has recovered.
fn probes(model: &ModelRun) -> Vec<u64> {
    let mut probes = model.nows();
    probes.push(probes.iter().max().unwrap() + 100);
    probes.sort_unstable();
    probes.dedup();
    probes
}

/// Runs `model` on a one-shard `KeyedLimiter` of `capacity` (`Refuse`), peeking `keys`.
fn run_keyed(model: ModelRun, burst: u64, capacity: usize, keys: Vec<u64>) {
    let probes = probes(&model);
    let oracle = KeyedOracle::new(gcra(burst), capacity, keys.clone(), probes.clone());
    model.run(
        move || {
            KeyedSubject::new(
                gcra(burst),
                capacity,
                WhenFull::Refuse,
                keys.clone(),
                probes.clone(),
            )
        },
        oracle,
    );
}

/// Two threads insert the same new key at once: one entry, every admission counted once.
#[test]
fn keyed_same_key_insert() {
    let model = ModelRun::new("keyed/same key inserted twice")
        .thread([Op::check(0, 1).key(1), Op::peek(5, 1).key(1)])
        .thread([Op::check(5, 1).key(1), Op::check(3, 1).key(1)]);
    run_keyed(model, 2, 4, vec![1]);
}

/// Three threads, two keys inserted and checked concurrently, `now` out of order.
#[test]
fn keyed_two_keys_three_threads() {
    let model = ModelRun::new("keyed/two keys, 3 threads")
        .thread([Op::check(0, 1).key(1), Op::check(15, 1).key(2)])
        .thread([Op::check(5, 1).key(2), Op::peek(10, 1).key(1)])
        .thread([Op::check(12, 2).key(1)]);
    run_keyed(model, 2, 2, vec![1, 2]);
}

/// Capacity 1 holds key 1, idle by `now = 20`. Key 1's check races key 2's insert, which
/// may evict key 1 only while it is still idle: exactly one of them gets the place.
#[test]
fn keyed_check_races_idle_eviction() {
    let model = ModelRun::new("keyed/check vs idle eviction")
        .setup([Op::check(0, 1).key(1)])
        .thread([Op::check(20, 1).key(1), Op::peek(25, 1).key(2)])
        .thread([Op::check(20, 1).key(2)]);
    run_keyed(model, 1, 1, vec![1, 2]);
}

/// Capacity 1 holds key 1, idle by then. Two new keys race to evict it: one wins the place,
/// the other is refused (the winner is not idle), never both.
#[test]
fn keyed_insert_races_insert() {
    let model = ModelRun::new("keyed/insert vs insert for one place")
        .setup([Op::check(0, 1).key(1)])
        .thread([Op::check(20, 1).key(2)])
        .thread([Op::check(25, 1).key(3), Op::peek(30, 1).key(1)]);
    run_keyed(model, 1, 1, vec![1, 2, 3]);
}

/// Without a lock around inserts, both threads insert the same key fresh and both are
/// admitted with a burst of 1.
#[test]
#[should_panic(expected = "no sequential order")]
fn broken_keyed_table_is_caught() {
    let model = ModelRun::new("broken keyed table")
        .thread([Op::check(0, 1).key(1)])
        .thread([Op::check(0, 1).key(1)]);
    let probes = probes(&model);
    let oracle = KeyedOracle::new(gcra(1), 2, vec![1], probes.clone());
    model.run(
        move || BrokenKeyedTable::new(gcra(1), vec![1], probes.clone()),
        oracle,
    );
}

/// Runs `model` on a one-shard `KeyedLimiter` of `capacity` under `WhenFull::Evict`,
/// peeking `keys`, against the oracle that may evict any resident entry when full.
fn run_keyed_evicting(model: ModelRun, burst: u64, capacity: usize, keys: Vec<u64>) {
    let probes = probes(&model);
    let oracle = KeyedOracle::new(gcra(burst), capacity, keys.clone(), probes.clone())
        .when_full(WhenFull::Evict);
    model.run(
        move || {
            KeyedSubject::new(
                gcra(burst),
                capacity,
                WhenFull::Evict,
                keys.clone(),
                probes.clone(),
            )
        },
        oracle,
    );
}

/// Capacity 1 holds key 1, busy (burst 2, one used, not idle before `now = 10`). Key 2's
/// insert evicts it under pressure while key 1 is checked twice: each check of key 1 lands
/// before the eviction (on its state) or after it (fresh, evicting key 2 in turn). Never
/// more admitted than some order of the checks and evictions allows.
#[test]
fn keyed_evict_check_races_pressure_eviction() {
    let model = ModelRun::new("keyed/evict: check vs pressure eviction")
        .setup([Op::check(0, 1).key(1)])
        .thread([Op::check(2, 1).key(1), Op::check(3, 2).key(1)])
        .thread([Op::check(2, 1).key(2)]);
    run_keyed_evicting(model, 2, 1, vec![1, 2]);
}

/// Capacity 1 holds key 1, busy. Two new keys race for its place: each insert evicts
/// whoever is resident, the table never holds more than one entry, and key 1 restarts
/// fresh.
#[test]
fn keyed_evict_insert_races_insert() {
    let model = ModelRun::new("keyed/evict: insert vs insert under pressure")
        .setup([Op::check(0, 2).key(1)])
        .thread([Op::check(1, 1).key(2)])
        .thread([Op::check(1, 1).key(3), Op::peek(2, 1).key(1)]);
    run_keyed_evicting(model, 2, 1, vec![1, 2, 3]);
}

/// The broken table against the evicting oracle: the freedom to evict any entry must not
/// explain a key inserted twice (both admitted with a burst of 1).
#[test]
#[should_panic(expected = "no sequential order")]
fn broken_keyed_table_is_caught_with_eviction() {
    let model = ModelRun::new("broken keyed table, evicting oracle")
        .thread([Op::check(0, 1).key(1)])
        .thread([Op::check(0, 1).key(1)]);
    let probes = probes(&model);
    let oracle = KeyedOracle::new(gcra(1), 2, vec![1], probes.clone()).when_full(WhenFull::Evict);
    model.run(
        move || BrokenKeyedTable::new(gcra(1), vec![1], probes.clone()),
        oracle,
    );
}

/// Capacity 2 holds keys 1 (two of a burst of 3 used) and 2 (one used). Key 3's insert must
/// evict one of them while key 2 is checked for two more, which makes it the busier one:
/// whichever entry goes, its key restarts fresh and nothing else changes.
#[test]
fn keyed_evict_chooses_while_a_victim_is_checked() {
    let model = ModelRun::new("keyed/evict: victim chosen while checked")
        .setup([Op::check(0, 2).key(1), Op::check(0, 1).key(2)])
        .thread([Op::check(1, 2).key(2)])
        .thread([Op::check(1, 1).key(3), Op::peek(2, 1).key(1)]);
    run_keyed_evicting(model, 3, 2, vec![1, 2, 3]);
}
