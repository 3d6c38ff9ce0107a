//! Thread stress of every executor, every algorithm, many keys, checked against the
//! reference models (`tollgate_core::reference`), sized by environment variables so a
//! reviewer can soak it (issue 16, item 6).
//!
//! Executors: the lock-free cells (`AnyLimiter`: `StateCell` for the five single-word
//! algorithms, `LogRing` for the sliding log), the keyed table (`KeyedLimiter`, integer keys
//! and exact `String` keys), and the policy (`Policy`, one rule of two tiers: the algorithm
//! under test and a fixed window, all-or-nothing with compensation).
//!
//! How the count is exact: time is injected, and the run is a sequence of *phases*. In a
//! phase every thread checks every key `ATTEMPTS` times at the same `now` (threads start
//! each phase on a barrier and walk the keys in different orders, so they collide on the
//! same keys). Requests of one phase are identical, so whatever order they linearize in,
//! a key admits exactly what the reference model admits for `threads × ATTEMPTS` checks at
//! that `now` after the previous phases. The test asserts that number **per key per
//! phase**, so also per window: no admission lost or doubled under contention, never
//! more than the model's bound in any window. Phases are spaced unevenly (partly refilled
//! buckets, windows rolling over, sliding-window interpolation).
//!
//! Sizes (defaults keep the test command fast; raise them for a soak):
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `TOLLGATE_STRESS_THREADS` | threads checking at once | 4 |
//! | `TOLLGATE_STRESS_KEYS` | keys per executor | 16 |
//! | `TOLLGATE_STRESS_ITERS` | phases (each: every thread × every key × 2 checks) | 20 |
//!
//! ```text
//! TOLLGATE_STRESS_THREADS=16 TOLLGATE_STRESS_KEYS=1000 TOLLGATE_STRESS_ITERS=2000 \
//!     cargo test --release -p tollgate --test stress
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;

use tollgate::policy::{Policy, PolicyCheck, Request};
use tollgate::{
    AnyAlgorithm, AnyLimiter, Decision, FixedWindow, Gcra, KeyStorage, KeyedLimiter, LeakyBucket,
    ManualClock, Nanos, PackedAlgorithm, SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};
use tollgate_core::reference::{PackedModel, SlidingWindowLogModel};

/// Checks per thread per key per phase.
const ATTEMPTS: u64 = 2;
/// Ring size of the cell executor's sliding log.
const LOG_RING: usize = 16;

/// The run's size, from the environment.
#[derive(Copy, Clone, Debug)]
struct Sizes {
    threads: u64,
    keys: u64,
    phases: u64,
}

fn env_or(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(n) if n > 0 => n,
            _ => panic!("{name}={v:?}: expected a positive whole number"),
        },
        Err(_) => default,
    }
}

impl Sizes {
    fn from_env() -> Sizes {
        Sizes {
            threads: env_or("TOLLGATE_STRESS_THREADS", 4),
            keys: env_or("TOLLGATE_STRESS_KEYS", 16),
            phases: env_or("TOLLGATE_STRESS_ITERS", 20),
        }
    }

    /// Checks of one key in one phase, over all threads.
    fn per_key_phase(&self) -> u64 {
        self.threads * ATTEMPTS
    }
}

/// The instant of phase `p`: uneven steps of 0.35–0.61 s, so states partly refill and the
/// 2 s windows roll over every few phases.
fn phase_time(p: u64) -> Nanos {
    Nanos::new(1_000_000_000 + p * 350_000_000 + (p % 3) * 130_000_000)
}

/// Every algorithm, with parameters small enough that each phase both admits and denies.
fn algorithms() -> Vec<AnyAlgorithm> {
    let s = Nanos::from_secs;
    vec![
        PackedAlgorithm::from(Gcra::per_second(4).burst(7).build().unwrap()).into(),
        PackedAlgorithm::from(TokenBucket::new(9, 3, s(1)).unwrap()).into(),
        PackedAlgorithm::from(LeakyBucket::new(2, s(1), 5).unwrap()).into(),
        PackedAlgorithm::from(FixedWindow::new(6, s(2)).unwrap()).into(),
        PackedAlgorithm::from(SlidingWindowCounter::new(8, s(2)).unwrap()).into(),
        SlidingWindowLog::new(7, s(2)).unwrap().into(),
    ]
}

/// The reference model of any algorithm.
#[derive(Clone, Debug)]
enum Model {
    Packed(PackedModel),
    Log(SlidingWindowLogModel),
}

impl Model {
    fn of(algorithm: &AnyAlgorithm) -> Model {
        match algorithm {
            AnyAlgorithm::Packed(a) => Model::Packed(PackedModel::new(a)),
            AnyAlgorithm::Log(log) => Model::Log(SlidingWindowLogModel::new(log)),
        }
    }

    fn check(&mut self, now: Nanos, commit: bool) -> Decision {
        match self {
            Model::Packed(m) => m.check(now.as_u64(), 1, commit),
            Model::Log(m) => m.check(now.as_u64(), 1, commit),
        }
        .unwrap()
    }
}

/// The sequential answer for one key: a list of tiers, each admitting iff all admit.
#[derive(Clone, Debug)]
struct Tiers(Vec<Model>);

impl Tiers {
    /// How many of `attempts` one-permit checks at `now` are admitted.
    fn admit(&mut self, now: Nanos, attempts: u64) -> u64 {
        let mut admitted = 0;
        for _ in 0..attempts {
            if self.0.iter_mut().all(|m| m.check(now, false).allowed) {
                for m in &mut self.0 {
                    assert!(m.check(now, true).allowed);
                }
                admitted += 1;
            }
        }
        admitted
    }
}

/// Runs `check(key, now) -> allowed` from `sizes.threads` threads, phase by phase, and
/// asserts each key's admissions per phase against `model`.
fn stress(name: &str, sizes: Sizes, model: Tiers, check: impl Fn(u64, Nanos) -> bool + Sync) {
    let Sizes {
        threads,
        keys,
        phases,
    } = sizes;
    // admitted[phase][key]
    let admitted: Vec<Vec<AtomicU64>> = (0..phases)
        .map(|_| (0..keys).map(|_| AtomicU64::new(0)).collect())
        .collect();
    let barrier = Barrier::new(threads as usize);
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (admitted, barrier, check) = (&admitted, &barrier, &check);
            scope.spawn(move || {
                for p in 0..phases {
                    barrier.wait();
                    let now = phase_time(p);
                    // Each thread its own walk (rotated by thread, odd threads backwards),
                    // each a bijection per pass: every key exactly `ATTEMPTS` times.
                    for i in 0..ATTEMPTS * keys {
                        let key = (i + t * 5) % keys;
                        let key = if t % 2 == 1 { keys - 1 - key } else { key };
                        if check(key, now) {
                            // Relaxed: a count, read after the threads are joined.
                            admitted[p as usize][key as usize].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
    let mut total = 0;
    for key in 0..keys {
        let mut model = model.clone();
        for p in 0..phases {
            let expected = model.admit(phase_time(p), sizes.per_key_phase());
            // Relaxed: the threads are joined.
            let got = admitted[p as usize][key as usize].load(Ordering::Relaxed);
            assert_eq!(got, expected, "{name}: key {key}, phase {p} ({sizes:?})");
            total += got;
        }
    }
    assert!(total > 0, "{name}: nothing admitted");
}

#[test]
fn cells_admit_what_the_model_admits() {
    let sizes = Sizes::from_env();
    for algorithm in algorithms() {
        let cells: Vec<AnyLimiter<LOG_RING>> = (0..sizes.keys)
            .map(|_| AnyLimiter::new(algorithm).unwrap())
            .collect();
        stress(
            &format!("cell {algorithm:?}"),
            sizes,
            Tiers(vec![Model::of(&algorithm)]),
            |key, now| cells[key as usize].check_n_at(now, 1).unwrap().allowed,
        );
    }
}

#[test]
fn keyed_tables_admit_what_the_model_admits() {
    let sizes = Sizes::from_env();
    for algorithm in algorithms() {
        let AnyAlgorithm::Packed(packed) = algorithm else {
            continue; // the keyed table holds single-word states; the log is the policy's
        };
        // Room for every key: this counts admissions, eviction has its own tests.
        let capacity = (sizes.keys as usize).max(16) * 2;
        let ints: KeyedLimiter<u64, PackedAlgorithm> = KeyedLimiter::new(packed, capacity).unwrap();
        stress(
            &format!("keyed u64 {packed:?}"),
            sizes,
            Tiers(vec![Model::of(&algorithm)]),
            |key, now| ints.check_at(&key, now).unwrap().allowed,
        );
        let strings: KeyedLimiter<String, PackedAlgorithm> = KeyedLimiter::builder(packed)
            .capacity(capacity)
            .key_storage(KeyStorage::Exact)
            .build()
            .unwrap();
        let names: Vec<String> = (0..sizes.keys).map(|k| format!("client-{k}")).collect();
        stress(
            &format!("keyed String {packed:?}"),
            sizes,
            Tiers(vec![Model::of(&algorithm)]),
            |key, now| strings.check_at(&names[key as usize], now).unwrap().allowed,
        );
    }
}

/// The TOML of one rule: the algorithm under test as tier `x`, then a fixed window of 11
/// per 3 s (so the two tiers take turns being the tighter one).
fn policy_toml(algorithm: &AnyAlgorithm, keys: u64) -> String {
    let (kind, limit, window_ms, extra) = match algorithm {
        AnyAlgorithm::Packed(PackedAlgorithm::Gcra(_)) => ("gcra", 4, 1_000, "burst = 7"),
        AnyAlgorithm::Packed(PackedAlgorithm::TokenBucket(_)) => {
            ("token_bucket", 3, 1_000, "burst = 9")
        }
        AnyAlgorithm::Packed(PackedAlgorithm::LeakyBucket(_)) => {
            ("leaky_bucket", 2, 1_000, "queue = 5")
        }
        AnyAlgorithm::Packed(PackedAlgorithm::FixedWindow(_)) => ("fixed_window", 6, 2_000, ""),
        AnyAlgorithm::Packed(PackedAlgorithm::SlidingWindowCounter(_)) => {
            ("sliding_window_counter", 8, 2_000, "")
        }
        AnyAlgorithm::Log(_) => ("sliding_window_log", 7, 2_000, ""),
    };
    format!(
        r#"
        capacity = {capacity}
        [[rules]]
        name = "client"
        [[rules.tiers]]
        name = "x"
        limit = {limit}
        window = "{window_ms}ms"
        algorithm = "{kind}"
        {extra}
        [[rules.tiers]]
        name = "y"
        limit = 11
        window = "3s"
        algorithm = "fixed_window"
        "#,
        // Room for every key in every one of the sliding log's 16 map shards (it evicts per
        // shard): this counts admissions, eviction has its own tests.
        capacity = (keys * 64).max(1024)
    )
}

#[test]
fn policies_admit_what_the_model_admits() {
    let sizes = Sizes::from_env();
    for algorithm in algorithms() {
        let policy = Policy::from_toml(&policy_toml(&algorithm, sizes.keys), ManualClock::new())
            .unwrap_or_else(|e| panic!("{algorithm:?}: {e}"));
        // The model is built from the tiers the policy compiled, not re-derived.
        let rules = policy.rule_set();
        let tiers = rules.rules()[0].tiers();
        let tiers = Tiers(tiers.iter().map(|t| Model::of(t.algorithm())).collect());
        let names: Vec<String> = (0..sizes.keys).map(|k| format!("client-{k}")).collect();
        stress(
            &format!("policy {algorithm:?}"),
            sizes,
            tiers,
            |key, now| {
                let request = Request::new(&names[key as usize], "/", 1);
                policy.check_at(&request, now).unwrap().allowed()
            },
        );
    }
}
