//! Issue 16, item 4: a key type whose `Drop` panics, dropped by the table during an
//! eviction (idle or under pressure) or a removal, must not leak a unit of the shard's key
//! quota, leave a slot half-owned, or poison the table: afterwards `len()` counts exactly
//! the resident keys, the table still fills to its capacity, and checks keep working.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};

use tollgate::{Gcra, KeyStorage, KeyedLimiter, Nanos, WhenFull};

thread_local! {
    /// The id of the one key whose next drop on this thread panics (0: none). Per thread:
    /// the table drops an evicted key on the thread that evicts it, and each test runs on
    /// its own thread, so tests running in parallel never disarm each other's key (a
    /// shared static did, and made these tests flaky).
    static ARMED: Cell<u64> = const { Cell::new(0) };
}

/// Arms `id`: its next drop on this thread panics.
fn arm(id: u64) {
    ARMED.with(|armed| armed.set(id));
}

/// The armed id (0 once it went off).
fn armed() -> u64 {
    ARMED.with(Cell::get)
}

/// A key whose drop panics once, when its id is armed on the dropping thread.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Grenade(u64);

impl Drop for Grenade {
    fn drop(&mut self) {
        let went_off = ARMED
            .try_with(|armed| {
                let hit = armed.get() == self.0;
                if hit {
                    armed.set(0);
                }
                hit
            })
            .unwrap_or(false);
        if went_off {
            panic!("Grenade({}) dropped", self.0);
        }
    }
}

fn limiter(capacity: usize) -> KeyedLimiter<Grenade, Gcra> {
    KeyedLimiter::builder(Gcra::per_second(1).burst(10).build().unwrap())
        .capacity(capacity)
        .shards(1)
        .key_storage(KeyStorage::Exact)
        .when_full(WhenFull::Evict)
        .build()
        .unwrap()
}

/// Resident keys among `keys`, and the table's own count: they must agree.
fn resident(limiter: &KeyedLimiter<Grenade, Gcra>, keys: &[Grenade]) -> usize {
    keys.iter().filter(|k| limiter.contains(k)).count()
}

/// After a panic: the count is exact, the table fills to capacity again, every entry can
/// be swept out (no unit of quota stranded), and checks still work.
fn still_sound(limiter: &KeyedLimiter<Grenade, Gcra>, keys: &[Grenade], base: u64) {
    assert_eq!(
        limiter.len(),
        resident(limiter, keys),
        "len counts a key that is gone"
    );
    // Fill with fresh keys until the table is full: a stranded unit of quota would stop it
    // one short forever. (A new key whose two buckets are full evicts a neighbour even
    // while quota is left, so a few more keys than the capacity may be needed.)
    let cap = limiter.capacity();
    let mut fresh = Vec::new();
    for i in 0..64 * cap as u64 {
        if limiter.len() == cap {
            break;
        }
        let k = Grenade(base + i);
        assert!(
            limiter
                .check_at(&k, Nanos::from_secs(1_000))
                .unwrap()
                .allowed
        );
        fresh.push(k);
    }
    assert_eq!(
        limiter.len(),
        cap,
        "the table no longer fills: quota leaked"
    );
    assert_eq!(
        limiter.len(),
        resident(limiter, &fresh) + resident(limiter, keys)
    );
    assert_eq!(
        limiter.evict_idle_at(Nanos::from_secs(1_000_000)),
        limiter.capacity()
    );
    assert_eq!(limiter.len(), 0, "a unit of the key quota leaked");
}

#[test]
fn panicking_drop_during_pressure_eviction() {
    let limiter = limiter(2);
    let keys: Vec<Grenade> = (101..=103).map(Grenade).collect();
    // Keys 101 and 102 busy (not idle for seconds): key 103 must evict one under pressure.
    assert!(
        limiter
            .check_n_at(&keys[0], Nanos::ZERO, 5)
            .unwrap()
            .allowed
    );
    assert!(
        limiter
            .check_n_at(&keys[1], Nanos::ZERO, 9)
            .unwrap()
            .allowed
    );
    arm(101); // the least-loss victim
    let result = catch_unwind(AssertUnwindSafe(|| limiter.check_at(&keys[2], Nanos::ZERO)));
    assert!(result.is_err(), "the key's drop panicked through the check");
    assert_eq!(armed(), 0, "the victim's drop ran");
    assert!(!limiter.contains(&keys[0]));
    still_sound(&limiter, &keys, 1_100);
}

#[test]
fn panicking_drop_during_idle_eviction() {
    let limiter = limiter(2);
    let keys: Vec<Grenade> = (201..=203).map(Grenade).collect();
    assert!(limiter.check_at(&keys[0], Nanos::ZERO).unwrap().allowed);
    assert!(
        limiter
            .check_n_at(&keys[1], Nanos::ZERO, 9)
            .unwrap()
            .allowed
    );
    // By t = 2 s key 201 is idle again: key 203 evicts it losslessly.
    arm(201);
    let result = catch_unwind(AssertUnwindSafe(|| {
        limiter.check_at(&keys[2], Nanos::from_secs(2))
    }));
    assert!(result.is_err());
    assert_eq!(armed(), 0);
    still_sound(&limiter, &keys, 2_100);
}

#[test]
fn panicking_drop_during_removal() {
    let limiter = limiter(2);
    let keys: Vec<Grenade> = (301..=302).map(Grenade).collect();
    assert!(limiter.check_at(&keys[0], Nanos::ZERO).unwrap().allowed);
    assert!(limiter.check_at(&keys[1], Nanos::ZERO).unwrap().allowed);
    arm(301);
    assert!(catch_unwind(AssertUnwindSafe(|| limiter.remove(&keys[0]))).is_err());
    assert!(!limiter.contains(&keys[0]));
    still_sound(&limiter, &keys, 3_100);
}

#[test]
fn panicking_drop_during_a_sweep_of_idle_entries() {
    // A larger shard: the new key's buckets have room but the quota is spent, so the
    // sweep evicts several idle entries at once; one of them panics.
    let limiter = limiter(12);
    let keys: Vec<Grenade> = (401..=500).map(Grenade).collect();
    // Fill to capacity (a key whose two buckets are full evicts a neighbour even while
    // quota is left, so a few more keys than the capacity may be needed).
    let mut used = 0;
    while limiter.len() < 12 && used < keys.len() - 1 {
        assert!(limiter.check_at(&keys[used], Nanos::ZERO).unwrap().allowed);
        used += 1;
    }
    assert_eq!(limiter.len(), 12);
    let newcomer = &keys[used];
    for armed in &keys[..used] {
        if !limiter.contains(armed) {
            continue;
        }
        arm(armed.0);
        let _ = catch_unwind(AssertUnwindSafe(|| {
            limiter.check_at(newcomer, Nanos::from_secs(5))
        }));
        arm(0);
        assert_eq!(limiter.len(), resident(&limiter, &keys));
        if limiter.contains(newcomer) {
            break;
        }
    }
    still_sound(&limiter, &keys, 4_100);
}
