//! Keyed limiters under real threads, with time injected (`check_at`): every phase, all
//! threads check at the same instant, so the sequential model's admitted count does not
//! depend on the interleaving, and the threads' total must equal it exactly. A lost
//! admission (a CAS applied to the wrong state, an eviction racing a check) or a double
//! count would show up as a difference.

use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;

use tollgate::{
    Decision, FixedWindow, Gcra, KeyStorage, KeyedError, KeyedLimiter, LeakyBucket, Nanos,
    PackedAlgorithm, SlidingWindowCounter, TokenBucket, WhenFull,
};
use tollgate_core::reference::PackedModel;

const THREADS: usize = 4;

/// The reference model of a packed algorithm, checked one permit at a time.
#[derive(Clone, Debug)]
struct Model(PackedModel);

impl Model {
    fn of(algorithm: &PackedAlgorithm) -> Model {
        Model(PackedModel::new(algorithm))
    }

    fn check(&mut self, now: Nanos) -> Decision {
        self.0.check(now.as_u64(), 1, true).unwrap()
    }

    /// How many of `attempts` one-permit checks at `now` the model admits.
    fn admit(&mut self, now: Nanos, attempts: u64) -> u64 {
        (0..attempts).filter(|_| self.check(now).allowed).count() as u64
    }
}

fn algorithms() -> Vec<PackedAlgorithm> {
    let s = Nanos::from_secs;
    vec![
        Gcra::per_second(4).burst(7).build().unwrap().into(),
        TokenBucket::new(9, 3, s(1)).unwrap().into(),
        LeakyBucket::new(2, s(1), 5).unwrap().into(),
        FixedWindow::new(6, s(2)).unwrap().into(),
        SlidingWindowCounter::new(8, s(2)).unwrap().into(),
    ]
}

/// The instant of phase `p`: uneven steps, so states are partly refilled, windows roll over.
fn phase_time(p: u64) -> Nanos {
    Nanos::new(p * 700_000_000 + (p % 3) * 130_000_000)
}

#[test]
fn threads_on_one_key_admit_exactly_what_the_model_admits() {
    const PHASES: u64 = 40;
    const PER_THREAD: u64 = 6;
    for algorithm in algorithms() {
        let limiter: KeyedLimiter<u64> = KeyedLimiter::new(algorithm, 100).unwrap();
        let admitted: Vec<AtomicU64> = (0..PHASES).map(|_| AtomicU64::new(0)).collect();
        let barrier = Barrier::new(THREADS);
        std::thread::scope(|scope| {
            for _ in 0..THREADS {
                scope.spawn(|| {
                    for p in 0..PHASES {
                        barrier.wait();
                        let now = phase_time(p);
                        for _ in 0..PER_THREAD {
                            if limiter.check_at(&42, now).unwrap().allowed {
                                admitted[p as usize].fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                });
            }
        });
        let mut model = Model::of(&algorithm);
        for p in 0..PHASES {
            let expected = model.admit(phase_time(p), THREADS as u64 * PER_THREAD);
            let got = admitted[p as usize].load(Ordering::Relaxed);
            assert_eq!(got, expected, "{algorithm:?}, phase {p}");
        }
    }
}

#[test]
fn threads_on_many_keys_admit_exactly_what_the_model_admits() {
    const KEYS: u64 = 307; // prime: each thread's stride visits every key equally
    const PHASES: u64 = 12;
    for algorithm in algorithms() {
        let limiter: KeyedLimiter<u64> = KeyedLimiter::new(algorithm, 1_000).unwrap();
        // admitted[phase][key]
        let admitted: Vec<Vec<AtomicU64>> = (0..PHASES)
            .map(|_| (0..KEYS).map(|_| AtomicU64::new(0)).collect())
            .collect();
        let barrier = Barrier::new(THREADS);
        std::thread::scope(|scope| {
            for t in 0..THREADS as u64 {
                let (limiter, admitted, barrier) = (&limiter, &admitted, &barrier);
                scope.spawn(move || {
                    for p in 0..PHASES {
                        barrier.wait();
                        let now = phase_time(p);
                        // Each thread walks the keys in its own order, twice.
                        for i in 0..2 * KEYS {
                            let key = (i * (2 * t + 1) + t * 37) % KEYS;
                            if limiter.check_at(&key, now).unwrap().allowed {
                                admitted[p as usize][key as usize].fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                });
            }
        });
        for key in 0..KEYS {
            let mut model = Model::of(&algorithm);
            for p in 0..PHASES {
                let expected = model.admit(phase_time(p), 2 * THREADS as u64);
                let got = admitted[p as usize][key as usize].load(Ordering::Relaxed);
                assert_eq!(got, expected, "{algorithm:?}, key {key}, phase {p}");
            }
        }
        assert_eq!(limiter.stats().pressure_evictions, 0);
    }
}

/// Small table, large key universe: every phase brings a new set of keys, so inserts,
/// idle evictions (of the previous phases' keys) and checks race in the same buckets. With
/// `WhenFull::Refuse` nothing is ever evicted while limited, so each key's admissions in a
/// phase must equal the model run on its attempts that were not refused.
fn churn<K: Hash + Eq + Clone + Send + Sync + 'static>(make: fn(u64) -> K, storage: KeyStorage) {
    const CAPACITY: usize = 64;
    const PER_PHASE: u64 = 48;
    const PHASES: u64 = 30;
    // Idle 5 s after a burst of 5; phases 10 s apart: every old key is idle.
    let gcra = Gcra::per_second(1).burst(5).build().unwrap();
    let limiter: KeyedLimiter<K, Gcra> = KeyedLimiter::builder(gcra)
        .capacity(CAPACITY)
        .when_full(WhenFull::Refuse)
        .key_storage(storage)
        .build()
        .unwrap();
    let slots = (PHASES * PER_PHASE) as usize;
    let admitted: Vec<AtomicU64> = (0..slots).map(|_| AtomicU64::new(0)).collect();
    let accepted: Vec<AtomicU64> = (0..slots).map(|_| AtomicU64::new(0)).collect();
    let barrier = Barrier::new(THREADS);
    std::thread::scope(|scope| {
        for t in 0..THREADS as u64 {
            let (limiter, admitted, accepted, barrier) = (&limiter, &admitted, &accepted, &barrier);
            scope.spawn(move || {
                for p in 0..PHASES {
                    barrier.wait();
                    let now = Nanos::from_secs(10 * p);
                    for i in 0..3 * PER_PHASE {
                        let local = (i * (2 * t + 1) + t * 11) % PER_PHASE;
                        let index = (p * PER_PHASE + local) as usize;
                        let key = make(p * 1_000 + local);
                        match limiter.check_at(&key, now) {
                            Ok(decision) => {
                                accepted[index].fetch_add(1, Ordering::Relaxed);
                                if decision.allowed {
                                    admitted[index].fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            Err(KeyedError::Full) => {}
                            Err(other) => panic!("{other}"),
                        }
                        assert!(limiter.len() <= CAPACITY);
                    }
                }
            });
        }
    });
    let mut total = 0;
    for index in 0..slots {
        let accepted = accepted[index].load(Ordering::Relaxed);
        let got = admitted[index].load(Ordering::Relaxed);
        assert_eq!(
            got,
            accepted.min(5),
            "key slot {index}: {accepted} accepted"
        );
        total += got;
    }
    let stats = limiter.stats();
    assert_eq!(stats.pressure_evictions, 0);
    assert!(stats.idle_evictions > 0, "{stats:?}");
    // Most attempts found room (old keys are idle and make way).
    assert!(
        total >= PHASES * PER_PHASE * 5 * 9 / 10,
        "{total} admitted, {stats:?}"
    );
}

#[test]
fn insert_evict_check_races_lose_and_double_count_nothing_integer_keys() {
    churn(|k| k, KeyStorage::Exact);
}

#[test]
fn insert_evict_check_races_lose_and_double_count_nothing_string_keys() {
    churn(|k| format!("user-{k}"), KeyStorage::Exact);
}

#[test]
fn insert_evict_check_races_lose_and_double_count_nothing_fingerprints() {
    churn(|k| format!("user-{k}"), KeyStorage::Fingerprint);
}

/// With `WhenFull::Evict` and more live keys than capacity, limited keys do get evicted;
/// what must still hold is the memory bound, and that every admission is accounted for by
/// some key's budget: admitted ≤ burst × (keys + pressure evictions).
#[test]
fn pressure_eviction_under_threads_stays_bounded() {
    const CAPACITY: usize = 32;
    const KEYS: u64 = 200;
    let gcra = Gcra::per_second(1).burst(3).build().unwrap();
    let limiter: KeyedLimiter<u64, Gcra> = KeyedLimiter::new(gcra, CAPACITY).unwrap();
    let admitted = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for t in 0..THREADS as u64 {
            let (limiter, admitted) = (&limiter, &admitted);
            scope.spawn(move || {
                for i in 0..5_000u64 {
                    let key = (i * 7 + t * 13) % KEYS;
                    if limiter.check_at(&key, Nanos::ZERO).unwrap().allowed {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                    assert!(limiter.len() <= CAPACITY);
                }
            });
        }
    });
    let stats = limiter.stats();
    assert!(stats.pressure_evictions > 0);
    let admitted = admitted.load(Ordering::Relaxed);
    assert!(
        admitted <= 3 * (KEYS + stats.pressure_evictions),
        "{admitted} admitted, {stats:?}"
    );
}
