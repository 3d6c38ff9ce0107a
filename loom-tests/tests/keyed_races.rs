//! loom models of two races inside `tollgate`'s keyed table (issue 16, item 3), each with a
//! broken twin that switches the protecting step off (`tollgate::LoomFault`) and
//! must fail:
//!
//! 1. **A lookup racing a cuckoo move.** Key X sits in its first bucket, which is full, as
//!    is the other bucket of a new key Z: Z's insert moves X to X's second bucket. A
//!    lock-free lookup of X probing meanwhile can see X in neither slot (the source already
//!    claimed, the destination not yet published). Peek (and `contains`) and the policy
//!    layer's `update_resident` (compensation, refund, peek of a tier) must still find X:
//!    they re-probe when the shard's move sequence says a move overlapped the probe.
//!    Broken twin (`NoMoveRetry`): the peek reports X fresh, the resident read misses X.
//! 2. **The exact-key pin protocol** (`key_cell.rs`). A reader comparing a stored key
//!    pins its cell and re-checks the slot's identity; a writer evicting that key claims
//!    the slot and waits for the pins to drain before moving the key out (it is dropped
//!    later, after the lock). The key type here keeps a loom `UnsafeCell` that `Eq` reads
//!    and `Drop` writes, so loom reports any comparison not ordered before the drop.
//!    Broken twin (`NoPinWait`): loom finds the comparison racing the drop. A third model
//!    races the lookup with an *idle* eviction: the insert must not fail with `Full`
//!    because the only evictable key was being compared (it did, before idle evictions
//!    waited for pins).
//!
//! Every model prints its execution count and wall time; bounded by
//! `LOOM_MAX_PREEMPTIONS` (default 3), as the whole stage.
#![cfg(tollgate_loom)]

use std::hash::{Hash, Hasher};

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use tollgate::LoomFault;
use tollgate::{KeyStorage, KeyedLimiter, MonotonicClock, Nanos, WhenFull};
use tollgate_core::Gcra;
use tollgate_loom_tests::{explore, FixedHasher};

/// Runs `body` under loom (preemption bound `LOOM_MAX_PREEMPTIONS`, default 3) and prints
/// the execution count and wall time.
fn model(name: &str, body: impl Fn() + Sync + Send + 'static) {
    // An insert that displaces an entry walks both buckets and the mover's path: more
    // scheduling points than loom's default cap.
    explore(name, Some(20_000), body);
}

/// T = 10 ns, burst 2.
fn gcra() -> Gcra {
    Gcra::from_interval(10, 2).unwrap()
}

type WordTable = KeyedLimiter<u64, Gcra, MonotonicClock, FixedHasher>;

/// A one-shard table of 4 buckets (capacity 13: 16 slots) and the keys of the move race:
/// `(x, z)` where X (busy: its burst spent) lives in its first bucket, that bucket and the
/// other bucket of new key Z are full, and X is the only entry there whose other bucket
/// is free, so inserting Z moves X.
fn displacement_setup(fault: Option<LoomFault>) -> (WordTable, u64, u64) {
    let mut limiter: WordTable = KeyedLimiter::builder(gcra())
        .capacity(13)
        .shards(1)
        .when_full(WhenFull::Refuse)
        .hasher(FixedHasher::default())
        .build()
        .expect("a valid model table");
    if let Some(fault) = fault {
        limiter.loom_inject(fault);
    }
    // Pure arithmetic on the hasher's seed: no loom operation, same choice every execution.
    let buckets = |k: u64| limiter.loom_buckets(&k).1;
    let keys = 0..100_000u64;
    let (z, [b1, b2]) = keys
        .clone()
        .map(|k| (k, buckets(k)))
        .find(|&(_, [a, b])| a != b)
        .expect("a key with two buckets");
    let inside = |b: usize| b == b1 || b == b2;
    let x = keys
        .clone()
        .find(|&k| {
            let [first, second] = buckets(k);
            first == b2 && !inside(second)
        })
        .expect("a key that can move out");
    let fill = |bucket: usize, n: usize| -> Vec<u64> {
        keys.clone()
            .filter(|&k| k != z && k != x)
            .filter(|&k| {
                let [first, second] = buckets(k);
                first == bucket && inside(second)
            })
            .take(n)
            .collect()
    };
    // X first, into bucket b2 (its first), then three more there and four in b1: every
    // other entry of b1 and b2 has both its buckets among them and cannot move.
    let spend = |k: u64, cost: u32| {
        assert!(limiter.check_n_at(&k, Nanos::ZERO, cost).unwrap().allowed);
    };
    spend(x, 2);
    for k in fill(b2, 3).into_iter().chain(fill(b1, 4)) {
        spend(k, 1);
    }
    assert_eq!(limiter.len(), 8);
    (limiter, x, z)
}

/// Thread 1 peeks X (its burst spent: must be denied, remaining 0) while thread 2 inserts Z,
/// moving X.
fn peek_races_move(fault: Option<LoomFault>) {
    let (limiter, x, z) = displacement_setup(fault);
    let limiter = Arc::new(limiter);
    let inserter = {
        let limiter = Arc::clone(&limiter);
        loom::thread::spawn(move || {
            assert!(limiter.check_at(&z, Nanos::ZERO).unwrap().allowed);
        })
    };
    let peek = limiter.peek_n_at(&x, Nanos::ZERO, 1).unwrap();
    assert!(
        !peek.allowed && peek.remaining == 0,
        "peek of a resident key reported it fresh: {peek:?}"
    );
    inserter.join().unwrap();
    assert!(limiter.contains(&x) && limiter.contains(&z));
}

/// Thread 1 reads X's state the way the policy layer compensates and refunds while thread
/// 2 inserts Z, moving X: X must be found.
fn resident_read_races_move(fault: Option<LoomFault>) {
    let (limiter, x, z) = displacement_setup(fault);
    let limiter = Arc::new(limiter);
    let inserter = {
        let limiter = Arc::clone(&limiter);
        loom::thread::spawn(move || {
            assert!(limiter.check_at(&z, Nanos::ZERO).unwrap().allowed);
        })
    };
    assert!(
        limiter.loom_resident_state(&x).is_some(),
        "a resident key was reported absent: its compensation or refund would be dropped"
    );
    inserter.join().unwrap();
}

#[test]
fn keyed_peek_races_cuckoo_move() {
    model("keyed/peek vs cuckoo move", || peek_races_move(None));
}

#[test]
fn keyed_resident_read_races_cuckoo_move() {
    model("keyed/update_resident vs cuckoo move", || {
        resident_read_races_move(None)
    });
}

/// Without the move-sequence re-probe, loom finds the peek that misses the moving key.
#[test]
#[should_panic(expected = "reported it fresh")]
fn broken_peek_without_move_retry_is_caught() {
    model("broken: peek vs cuckoo move, no re-probe", || {
        peek_races_move(Some(LoomFault::NoMoveRetry))
    });
}

/// Without the move-sequence re-probe, loom finds the compensation that would be dropped.
#[test]
#[should_panic(expected = "reported absent")]
fn broken_resident_read_without_move_retry_is_caught() {
    model(
        "broken: update_resident vs cuckoo move, no re-probe",
        || resident_read_races_move(Some(LoomFault::NoMoveRetry)),
    );
}

/// A key whose contents loom tracks: `Eq` and `Clone` read the cell, `Drop` writes it, so
/// a comparison of a stored key that is not ordered before its drop is a reported race.
struct TrackedKey {
    id: u64,
    cell: UnsafeCell<u64>,
}

impl TrackedKey {
    fn new(id: u64) -> TrackedKey {
        TrackedKey {
            id,
            cell: UnsafeCell::new(id),
        }
    }

    fn read(&self) -> u64 {
        // SAFETY: a plain read of a `u64`; loom checks that no write races it.
        self.cell.with(|p| unsafe { *p })
    }
}

impl Clone for TrackedKey {
    fn clone(&self) -> TrackedKey {
        TrackedKey::new(self.read())
    }
}

impl PartialEq for TrackedKey {
    fn eq(&self, other: &TrackedKey) -> bool {
        self.id == other.id && self.read() == other.read()
    }
}

impl Eq for TrackedKey {}

impl Hash for TrackedKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.id.hash(state);
    }
}

impl Drop for TrackedKey {
    fn drop(&mut self) {
        // SAFETY: a plain write through the cell; loom checks that no access races it.
        self.cell.with_mut(|p| unsafe { *p = u64::MAX });
    }
}

/// Capacity 1, exact keys: key 1 (busy) is resident. Thread 1 asks whether key 1 is
/// resident (a lock-free probe that pins the slot and compares the stored key); thread 2
/// inserts key 2, evicting key 1 under pressure and dropping its stored key.
fn pin_races_eviction(fault: Option<LoomFault>) {
    let mut limiter: KeyedLimiter<TrackedKey, Gcra, MonotonicClock, FixedHasher> =
        KeyedLimiter::builder(gcra())
            .capacity(1)
            .shards(1)
            .key_storage(KeyStorage::Exact)
            .when_full(WhenFull::Evict)
            .hasher(FixedHasher::default())
            .build()
            .expect("a valid model table");
    if let Some(fault) = fault {
        limiter.loom_inject(fault);
    }
    let one = TrackedKey::new(1);
    assert!(limiter.check_n_at(&one, Nanos::ZERO, 2).unwrap().allowed);
    let limiter = Arc::new(limiter);
    let inserter = {
        let limiter = Arc::clone(&limiter);
        loom::thread::spawn(move || {
            let two = TrackedKey::new(2);
            assert!(limiter.check_at(&two, Nanos::ZERO).unwrap().allowed);
        })
    };
    // Either answer is linearizable (before or after the eviction); the comparison itself
    // must never race the stored key's drop.
    let _ = limiter.contains(&one);
    inserter.join().unwrap();
    assert!(!limiter.contains(&one));
    assert_eq!(limiter.len(), 1);
}

/// Capacity 1, exact keys, `WhenFull::Evict`: key 1 is resident but idle by `now = 100`.
/// Thread 1 looks key 1 up (pinning its slot while it compares); thread 2 inserts key 2,
/// which must evict the idle key 1 — never answer `Full` because a reader was comparing
/// it — and the comparison must not race the key's drop.
fn pin_races_idle_eviction() {
    let limiter: KeyedLimiter<TrackedKey, Gcra, MonotonicClock, FixedHasher> =
        KeyedLimiter::builder(gcra())
            .capacity(1)
            .shards(1)
            .key_storage(KeyStorage::Exact)
            .when_full(WhenFull::Evict)
            .hasher(FixedHasher::default())
            .build()
            .expect("a valid model table");
    let one = TrackedKey::new(1);
    assert!(limiter.check_at(&one, Nanos::ZERO).unwrap().allowed);
    let limiter = Arc::new(limiter);
    let inserter = {
        let limiter = Arc::clone(&limiter);
        loom::thread::spawn(move || {
            let two = TrackedKey::new(2);
            let d = limiter.check_at(&two, Nanos::new(100));
            assert!(
                matches!(d, Ok(ref d) if d.allowed),
                "an insert under WhenFull::Evict was refused: {d:?}"
            );
        })
    };
    let _ = limiter.contains(&one);
    inserter.join().unwrap();
    assert_eq!(limiter.len(), 1);
}

#[test]
fn keyed_exact_key_pin_races_idle_eviction() {
    model(
        "keyed/exact-key pin vs idle eviction",
        pin_races_idle_eviction,
    );
}

#[test]
fn keyed_exact_key_pin_races_eviction() {
    model("keyed/exact-key pin vs eviction", || {
        pin_races_eviction(None)
    });
}

/// Without the writer's wait for pins, loom finds a comparison racing the key's drop.
#[test]
#[should_panic(expected = "Causality violation")]
fn broken_pin_without_writer_wait_is_caught() {
    model("broken: exact-key pin vs eviction, no pin wait", || {
        pin_races_eviction(Some(LoomFault::NoPinWait))
    });
}
