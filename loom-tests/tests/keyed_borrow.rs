//! loom model of the keyed table's quota borrow under `WhenFull::Refuse` (`Table::borrow`):
//! a shard whose base and the shared pool are spent moves an unused unit of another shard's
//! base to the pool and reserves again, while the lender inserts a key of its own. The
//! lender's key count and base are one word (`Shard::quota`): the borrower lowers the base
//! by one read-modify-write, only while it is above the count, and takes no lock (so a busy
//! lender lends all the same); the lender's `reserve` counts its key by another.
//!
//! The table: capacity 2 in two shards, so each shard's base is 1 and the pool is empty.
//! Key `a` (busy, never idle) fills shard 0's base. Thread 1 inserts a new key into shard 0
//! (it must borrow shard 1's unit) while thread 2 inserts a new key into shard 1 (which
//! needs that same unit). After every execution: the table never held more keys than its
//! capacity (resident keys counted one by one, and the count it keeps), the quota is
//! conserved (`Σ max(len, base) + pool spare = capacity`, read through the loom-only
//! `KeyedLimiter::loom_quota`), `a` and every admitted key are still resident, and exactly
//! one of the two new keys got in (room for one). A sequential model checks that a key is
//! admitted whenever the table has room, and that a removed pool unit comes back to the
//! quota.
//!
//! Broken twin (`LoomFault::LendByLoadStore`: the lender's base lowered by a load and a
//! store): loom finds the executions where the lender's `reserve` falls between the
//! borrower's load and store, so that the store writes back a word the lender had already
//! changed: the quota counts the unit twice, and the table holds (or counts) three keys at
//! capacity 2.
//!
//! Second broken twin (`LoomFault::LenderLoadStore`: the lender counts its own key with a
//! load and a store, as tables that never lend do): the borrower's lowered base is
//! overwritten, and three keys get in.
//!
//! A second race: the insert into shard 0 against the removal of shard 1's only key (which
//! frees the unit the insert borrows), with the same checks (6 executions). It has no broken
//! twin: a lend proceeds only once it reads the removal's count, so a load and a store
//! cannot lose the removal's update; against an insert they can (the first twin).
//!
//! 338 executions at bound 3 (the default), 1 322 at bound 8 (the insert race).
//!
//! Prints its execution count and wall time; bounded by `LOOM_MAX_PREEMPTIONS` (default 3).
#![cfg(tollgate_loom)]

use loom::sync::Arc;
use tollgate::LoomFault;
use tollgate::{KeyedError, KeyedLimiter, MonotonicClock, Nanos, WhenFull};
use tollgate_core::Gcra;
use tollgate_loom_tests::{explore, FixedHasher};

/// Runs `body` under loom (preemption bound `LOOM_MAX_PREEMPTIONS`, default 3) and prints
/// the execution count and wall time.
fn model(name: &str, body: impl Fn() + Sync + Send + 'static) {
    // An insert that borrows walks its buckets, sweeps its shard, borrows and looks again:
    // more scheduling points than loom's default cap.
    explore(name, Some(20_000), body);
}

type WordTable = KeyedLimiter<u64, Gcra, MonotonicClock, FixedHasher>;

const CAPACITY: usize = 2;

/// The table (capacity 2, two shards, `Refuse`) holding key `a` of shard 0 (its burst of
/// 2 spent at `now = 0`: never idle in the model), and `(a, c, b)`: `c` a new key of
/// shard 0, `b` one of shard 1.
fn setup(fault: Option<LoomFault>) -> (WordTable, u64, u64, u64) {
    let mut limiter: WordTable = KeyedLimiter::builder(Gcra::from_interval(10, 2).unwrap())
        .capacity(CAPACITY)
        .shards(2)
        .when_full(WhenFull::Refuse)
        .hasher(FixedHasher::default())
        .build()
        .expect("a valid model table");
    if let Some(fault) = fault {
        limiter.loom_inject(fault);
    }
    assert_eq!(limiter.shards(), 2);
    // Each shard's base is 1 and the pool is empty: shard 0's second key must borrow.
    assert_eq!(limiter.loom_quota(), (vec![(0, 1), (0, 1)], 0));
    // Pure arithmetic on the hasher's seed: the same keys every execution.
    let in_shard = |s: usize| {
        let limiter = &limiter;
        (0..1_000u64).filter(move |&k| limiter.loom_buckets(&k).0 == s)
    };
    let mut zero = in_shard(0);
    let (a, c) = (zero.next().unwrap(), zero.next().unwrap());
    let b = in_shard(1).next().unwrap();
    assert!(limiter.check_n_at(&a, Nanos::ZERO, 2).unwrap().allowed);
    assert_eq!(limiter.len(), 1);
    (limiter, a, c, b)
}

/// Inserts the new key `k` (one permit of a fresh burst of 2): whether it was admitted.
/// Refused only with `Full`.
fn insert(limiter: &WordTable, k: u64) -> bool {
    match limiter.check_at(&k, Nanos::ZERO) {
        Ok(d) => {
            assert!(d.allowed, "a fresh key was denied: {d:?}");
            true
        }
        Err(KeyedError::Full) => false,
        Err(e) => panic!("unexpected error: {e:?}"),
    }
}

/// `len ≤ capacity` (panics with "over capacity").
fn assert_within_capacity(limiter: &WordTable) {
    let len = limiter.len();
    assert!(
        len <= limiter.capacity(),
        "table over capacity: {len} keys, capacity {}",
        limiter.capacity()
    );
}

/// Of `keys`, those resident are at most the capacity (panics with "over capacity") and
/// as many as the table counts (panics with "drifted").
fn assert_resident(limiter: &WordTable, keys: [u64; 3]) {
    let resident = keys.iter().filter(|k| limiter.contains(k)).count();
    assert!(
        resident <= CAPACITY,
        "table over capacity: {resident} keys resident, capacity {CAPACITY}"
    );
    assert_eq!(resident, limiter.len(), "the count drifted from the keys");
}

/// With no insert running: `len ≤ capacity`, every shard's count is what `len` sums, and
/// the quota is conserved: `Σ max(len, base)` (bases plus pool units in use) plus the
/// pool's spare units is the capacity.
fn assert_quota(limiter: &WordTable) {
    assert_within_capacity(limiter);
    let (shards, spare) = limiter.loom_quota();
    let held: usize = shards.iter().map(|&(len, _)| len).sum();
    assert_eq!(held, limiter.len());
    let quota: usize = shards
        .iter()
        .map(|&(len, base)| len.max(base))
        .sum::<usize>()
        + spare;
    assert_eq!(
        quota,
        limiter.capacity(),
        "quota not conserved: shards (len, base) {shards:?}, pool spare {spare}"
    );
}

/// Thread 1 inserts `c` (shard 0: borrows shard 1's unit) while thread 2 inserts `b`
/// (shard 1: wants that unit).
fn borrow_races_lender_insert(fault: Option<LoomFault>) {
    let (limiter, a, c, b) = setup(fault);
    let limiter = Arc::new(limiter);
    let lender = {
        let limiter = Arc::clone(&limiter);
        loom::thread::spawn(move || insert(&limiter, b))
    };
    let c_in = insert(&limiter, c);
    // While the lender's insert may still run.
    assert_within_capacity(&limiter);
    let b_in = lender.join().unwrap();
    assert_resident(&limiter, [a, b, c]);
    assert_quota(&limiter);
    assert!(limiter.contains(&a), "a resident key was lost");
    assert_eq!(limiter.contains(&c), c_in, "c admitted {c_in}, resident?");
    assert_eq!(limiter.contains(&b), b_in, "b admitted {b_in}, resident?");
    assert!(
        c_in != b_in,
        "room for one key: c admitted {c_in}, b admitted {b_in}"
    );
    assert_eq!(limiter.len(), CAPACITY);
}

#[test]
fn keyed_borrow_races_lender_insert() {
    model("keyed/borrow vs the lender's insert", || {
        borrow_races_lender_insert(None)
    });
}

/// A thread inserts `c` (shard 0: must borrow shard 1's unit) while the model's thread
/// removes `b`, shard 1's only key (freeing the unit `c` needs). `c` is admitted only through a borrow
/// after the removal; either way the count matches the keys and the quota is conserved.
fn borrow_races_lender_removal(fault: Option<LoomFault>) {
    let (limiter, a, c, b) = setup(fault);
    assert!(insert(&limiter, b), "b fills shard 1's base");
    let limiter = Arc::new(limiter);
    let inserter = {
        let limiter = Arc::clone(&limiter);
        loom::thread::spawn(move || insert(&limiter, c))
    };
    assert!(limiter.remove(&b));
    assert_within_capacity(&limiter);
    let c_in = inserter.join().unwrap();
    assert_resident(&limiter, [a, b, c]);
    assert_quota(&limiter);
    assert!(limiter.contains(&a) && !limiter.contains(&b));
    assert_eq!(limiter.contains(&c), c_in, "c admitted {c_in}, resident?");
}

/// The lender's side as a load and a store: loom finds the borrower's lowered base
/// overwritten by the lender's count of `b`, and three keys in a table of 2.
#[test]
#[should_panic(expected = "over capacity")]
fn broken_lender_load_store_is_caught() {
    model("broken: the lender counts by a load and a store", || {
        borrow_races_lender_insert(Some(LoomFault::LenderLoadStore))
    });
}

#[test]
fn keyed_borrow_races_lender_removal() {
    model("keyed/borrow vs the lender's removal", || {
        borrow_races_lender_removal(None)
    });
}

/// One thread: `c` is admitted by borrowing shard 1's unused unit, then `b` is refused
/// (the table is full). Removing `c` returns its pool unit, and `b` gets in through it.
#[test]
fn keyed_borrow_single_thread() {
    model("keyed/borrow, one thread", || {
        let (limiter, a, c, b) = setup(None);
        assert!(insert(&limiter, c), "refused with room in the table");
        assert_eq!(limiter.loom_quota(), (vec![(2, 1), (0, 0)], 0));
        assert!(!insert(&limiter, b), "admitted beyond the capacity");
        assert_quota(&limiter);
        assert!(limiter.remove(&c));
        assert_eq!(limiter.loom_quota(), (vec![(1, 1), (0, 0)], 1));
        assert!(insert(&limiter, b), "refused with room in the table");
        assert_quota(&limiter);
        assert!(limiter.contains(&a) && limiter.contains(&b) && !limiter.contains(&c));
    });
}

/// Lending by a load and a store, loom finds the lender's insert lost from its count: three
/// keys resident in a table of 2.
#[test]
#[should_panic(expected = "over capacity")]
fn broken_lend_by_load_store_is_caught() {
    model("broken: lend by a load and a store", || {
        borrow_races_lender_insert(Some(LoomFault::LendByLoadStore))
    });
}
