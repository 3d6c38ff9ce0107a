//! `KeyedLimiter::allow` (the lean check) admits exactly what `check` admits, leaves the
//! same state behind, and fails closed when a new key cannot be tracked; a table large
//! enough to be backed by huge pages behaves like any other.

use tollgate::{
    FixedWindow, Gcra, KeyStorage, KeyedError, KeyedLimiter, ManualClock, Nanos, WhenFull,
};

/// Key `i` of a pseudo-random trace over `keys` distinct keys.
fn key_at(i: u64, keys: u64) -> u64 {
    i.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17) % keys
}

/// The hasher of the twins: a fixed seed, so both lay keys out (and evict) identically.
type Fixed = foldhash::fast::FixedState;

/// Replays one trace through `allow` on one limiter and `check` on an identically seeded
/// twin, both on their own manual clock advanced identically, and compares every answer
/// (evictions included: 8 keys share 6 places).
fn same_answers<K, A>(
    make: impl Fn(ManualClock) -> KeyedLimiter<K, A, ManualClock, Fixed>,
    key: fn(u64) -> K,
) where
    K: std::hash::Hash + Eq + Clone + 'static,
    A: tollgate::Algorithm,
{
    let (lean_clock, full_clock) = (ManualClock::new(), ManualClock::new());
    let (lean, full) = (make(lean_clock.clone()), make(full_clock.clone()));
    let mut admitted = 0;
    for i in 0..3_000u64 {
        let k = key(key_at(i, 8));
        let expected = full.check(&k).is_ok_and(|d| d.allowed);
        assert_eq!(lean.allow(&k), expected, "step {i}");
        admitted += u32::from(expected);
        if i % 7 == 0 {
            lean_clock.advance(Nanos::from_millis(5));
            full_clock.advance(Nanos::from_millis(5));
        }
    }
    assert_eq!(lean.len(), full.len());
    assert_eq!(lean.stats(), full.stats());
    // Both admitted some and denied some: the trace exercised both answers.
    assert!(admitted > 0 && admitted < 3_000, "{admitted}");
}

#[test]
fn allow_answers_as_check_for_integer_string_and_fingerprint_keys() {
    let gcra = Gcra::per_second(20).burst(3).build().unwrap();
    same_answers(
        |clock| {
            KeyedLimiter::builder(gcra)
                .capacity(6)
                .clock(clock)
                .hasher(Fixed::with_seed(99))
                .build()
                .unwrap()
        },
        |k| k,
    );
    let window = FixedWindow::new(4, Nanos::from_millis(100)).unwrap();
    for storage in [KeyStorage::Exact, KeyStorage::Fingerprint] {
        same_answers(
            |clock| {
                KeyedLimiter::builder(window)
                    .capacity(6)
                    .key_storage(storage)
                    .clock(clock)
                    .hasher(Fixed::with_seed(99))
                    .build()
                    .unwrap()
            },
            |k| format!("client-{k}"),
        );
    }
}

#[test]
fn allow_fails_closed_when_a_new_key_is_refused() {
    let limiter: KeyedLimiter<u64, Gcra, ManualClock> =
        KeyedLimiter::builder(Gcra::per_second(1).burst(2).build().unwrap())
            .capacity(1)
            .when_full(WhenFull::Refuse)
            .clock(ManualClock::new())
            .build()
            .unwrap();
    assert!(limiter.allow(&1));
    assert!(!limiter.allow(&2));
    assert_eq!(limiter.check(&2), Err(KeyedError::Full));
    assert!(limiter.allow(&1)); // the resident key keeps its burst of 2
    assert!(!limiter.allow(&1));
    assert_eq!(limiter.len(), 1);
}

#[test]
fn a_table_of_several_mebibytes_holds_and_limits_every_key() {
    // 300 000 keys: a 5.8 MB bucket array, past the 2 MiB at which Linux builds ask for
    // transparent huge pages.
    let n = if cfg!(miri) { 1_000 } else { 300_000 };
    let limiter: KeyedLimiter<u64, Gcra, ManualClock> =
        KeyedLimiter::builder(Gcra::per_second(1).burst(1).build().unwrap())
            .capacity(n)
            .clock(ManualClock::new())
            .build()
            .unwrap();
    assert!(limiter.memory_bytes() <= 20 * n);
    for k in 0..n as u64 {
        assert!(limiter.allow(&k), "key {k}");
    }
    assert_eq!(limiter.len(), n);
    for k in 0..n as u64 {
        assert!(!limiter.allow(&k), "key {k} again");
    }
}
