//! loom model of the keyed table's debt summary (`KeyedLimiterBuilder::debt_summary`,
//! issue 16, item 1): two pressure evictions in different shards (so under different
//! locks) record their debts into the same summary cells at once. Records take the
//! summary's record lock (after their shard's), so neither is lost: a key evicted with its
//! burst spent comes back denied whatever the interleaving.
//!
//! Broken twin (`LoomFault::SummaryLostUpdate`: records without the record lock, so two
//! load-and-store merges interleave): loom finds the interleaving where the lighter record
//! overwrites the heavier one, and the evicted key comes back with a permit it had spent.
//!
//! Prints its execution count and wall time; bounded by `LOOM_MAX_PREEMPTIONS` (default 3).
#![cfg(tollgate_loom)]

use loom::sync::Arc;
use tollgate::LoomFault;
use tollgate::{KeyedLimiter, MonotonicClock, Nanos};
use tollgate_core::Gcra;
use tollgate_loom_tests::{explore, FixedHasher};

/// Runs `body` under loom (preemption bound `LOOM_MAX_PREEMPTIONS`, default 3) and prints
/// the execution count and wall time.
fn model(name: &str, body: impl Fn() + Sync + Send + 'static) {
    explore(name, Some(20_000), body);
}

type WordTable = KeyedLimiter<u64, Gcra, MonotonicClock, FixedHasher>;

/// Capacity 2 in two shards with a summary sized for two debts (one value cell per row:
/// every key shares both). Key `a` (shard 0) has spent its burst of 2, key `b` (shard 1) one permit; thread 1
/// inserts `c` (shard 0), evicting `a`, while thread 2 inserts `d` (shard 1), evicting `b`
/// (unless `d` already inherits `a`'s debt). Afterwards `a` must still be denied.
fn records_race(fault: Option<LoomFault>) {
    // T = 10 ns, burst 2.
    let gcra = Gcra::from_interval(10, 2).unwrap();
    let mut limiter: WordTable = KeyedLimiter::builder(gcra)
        .capacity(2)
        .shards(2)
        .debt_summary(2)
        .hasher(FixedHasher::default())
        .build()
        .expect("a valid model table");
    if let Some(fault) = fault {
        limiter.loom_inject(fault);
    }
    // Pure arithmetic on the hasher's seed: the same keys every execution.
    let in_shard = |s: usize| {
        let limiter = &limiter;
        (0..1_000u64).filter(move |&k| limiter.loom_buckets(&k).0 == s)
    };
    let (mut zero, mut one) = (in_shard(0), in_shard(1));
    let (a, c) = (zero.next().unwrap(), zero.next().unwrap());
    let (b, d) = (one.next().unwrap(), one.next().unwrap());
    let now = Nanos::ZERO;
    assert!(limiter.check_n_at(&a, now, 2).unwrap().allowed);
    assert!(limiter.check_n_at(&b, now, 1).unwrap().allowed);
    assert_eq!(limiter.len(), 2);
    let limiter = Arc::new(limiter);
    let other = {
        let limiter = Arc::clone(&limiter);
        loom::thread::spawn(move || {
            let _ = limiter.check_at(&d, now).unwrap();
        })
    };
    let _ = limiter.check_at(&c, now).unwrap();
    other.join().unwrap();
    // `c` inherits at most `b`'s one permit and gets in, evicting `a`; `d` may inherit
    // `a`'s two and be denied (then `b` stays: no race in that execution).
    assert!(!limiter.contains(&a));
    let back = limiter.peek_at(&a, now);
    assert!(
        !back.allowed,
        "the evicted key came back with a permit it had spent: {back:?}"
    );
}

#[test]
fn keyed_summary_records_race() {
    model("keyed/summary: two records into one cell", || {
        records_race(None)
    });
}

/// Without the record lock, loom finds the lost record.
#[test]
#[should_panic(expected = "came back with a permit")]
fn broken_summary_without_record_lock_is_caught() {
    model("broken: summary records without the record lock", || {
        records_race(Some(LoomFault::SummaryLostUpdate))
    });
}
