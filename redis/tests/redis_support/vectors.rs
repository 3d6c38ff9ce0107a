//! Shared test vectors: (algorithm, parameters, trace of (time, cost)) cases, run through
//! the core's in-process cell as the reference and through a policy on Redis with
//! client-supplied time.
#![allow(dead_code)]

use tollgate::policy::Policy;
use tollgate::{
    AlgorithmConfig, AnyAlgorithm, AnyLimiter, Decision, InsufficientCapacity, Nanos,
    PackedAlgorithm,
};
use tollgate_redis::RedisStore;

/// The ring capacity used for sliding window log references (every log case has L ≤ it).
pub(crate) const RING: usize = 64;

/// One vector: a limit and a trace of checks.
#[derive(Clone, Debug)]
pub(crate) struct Case {
    pub name: String,
    pub config: AlgorithmConfig,
    pub trace: Vec<(u64, u32)>,
}

/// A deterministic xorshift64* generator (no dependency, reproducible traces).
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

const SEC: u64 = 1_000_000_000;
/// About 2026-09 in Unix ns: what the server's TIME looks like.
const UNIX: u64 = 1_790_000_000 * SEC;

fn ns(n: u64) -> Nanos {
    Nanos::new(n)
}

/// A random trace around `start`: steps of 0, 1 ns, a fraction of `scale`, a few `scale`s,
/// occasional late callers (time going back) and costs from 0 to past `max_cost`.
fn random_trace(
    rng: &mut Rng,
    start: u64,
    scale: u64,
    max_cost: u64,
    steps: usize,
) -> Vec<(u64, u32)> {
    let mut now = start;
    let mut trace = Vec::with_capacity(steps);
    for _ in 0..steps {
        let step = match rng.below(10) {
            0 | 1 => 0,
            2 => 1,
            3 | 4 => rng.below(scale.max(1)),
            5 | 6 => rng.below(scale.max(1) / 4 + 1),
            7 => scale.saturating_mul(rng.below(3) + 1),
            8 => rng.below(scale.max(1)).saturating_mul(rng.below(40)),
            _ => 0,
        };
        let late = rng.below(12) == 0;
        let t = if late {
            now.saturating_sub(rng.below(scale.max(1)))
        } else {
            now.saturating_add(step)
        };
        if !late {
            now = t;
        }
        let cost = match rng.below(12) {
            0 => 0,
            1 => (max_cost + 1).min(u32::MAX as u64) as u32,
            2 | 3 => rng.below(max_cost.min(1_000_000) + 1) as u32,
            _ => 1,
        };
        trace.push((t, cost));
    }
    trace
}

/// The largest cost the algorithm admits (traces also try one more).
fn max_cost_of(config: &AlgorithmConfig) -> u64 {
    config.build().map_or(1, |a| a.max_cost())
}

/// The algorithm's time step: the emission / refill / drain interval, or the window.
fn scale_of(config: &AlgorithmConfig) -> u64 {
    match config.build() {
        Ok(AnyAlgorithm::Packed(PackedAlgorithm::Gcra(g))) => g.emission_interval().as_u64(),
        Ok(AnyAlgorithm::Packed(PackedAlgorithm::TokenBucket(t))) => t.refill_interval().as_u64(),
        Ok(AnyAlgorithm::Packed(PackedAlgorithm::LeakyBucket(l))) => l.drain_interval().as_u64(),
        Ok(AnyAlgorithm::Packed(PackedAlgorithm::FixedWindow(w))) => w.window().as_u64(),
        Ok(AnyAlgorithm::Packed(PackedAlgorithm::SlidingWindowCounter(w))) => w.window().as_u64(),
        Ok(AnyAlgorithm::Log(l)) => l.window().as_u64(),
        Err(_) => 1,
    }
}

/// Every configuration the vectors cover: ordinary limits, extreme parameters (u128
/// products, horizons past 2^53 ns, 1 ns windows) and every algorithm.
pub(crate) fn configs() -> Vec<(&'static str, AlgorithmConfig)> {
    use AlgorithmConfig::*;
    vec![
        (
            "gcra_10s_b5",
            Gcra {
                limit: 10,
                period: ns(SEC),
                burst: 5,
            },
        ),
        (
            "gcra_day_b1000",
            Gcra {
                limit: 1,
                period: ns(86_400 * SEC),
                burst: 1000,
            },
        ),
        (
            "gcra_fine",
            Gcra {
                limit: 999_999_937,
                period: ns(SEC),
                burst: 3,
            },
        ),
        (
            "gcra_odd",
            Gcra {
                limit: 7,
                period: ns(1_000_003),
                burst: 11,
            },
        ),
        (
            "token_frac",
            TokenBucket {
                capacity: 3,
                refill_amount: 2,
                refill_period: ns(5 * SEC),
            },
        ),
        (
            "token_big",
            TokenBucket {
                capacity: 1 << 40,
                refill_amount: 1_000_000,
                refill_period: ns(SEC),
            },
        ),
        (
            "leaky_q3",
            LeakyBucket {
                amount: 2,
                period: ns(SEC),
                queue: 3,
            },
        ),
        (
            "leaky_q0",
            LeakyBucket {
                amount: 100,
                period: ns(SEC),
                queue: 0,
            },
        ),
        (
            "leaky_day",
            LeakyBucket {
                amount: 1,
                period: ns(86_400 * SEC),
                queue: 500,
            },
        ),
        (
            "fixed_3s",
            FixedWindow {
                limit: 3,
                window: ns(SEC),
            },
        ),
        (
            "fixed_day",
            FixedWindow {
                limit: 100_000,
                window: ns(86_400 * SEC),
            },
        ),
        (
            "fixed_7ns",
            FixedWindow {
                limit: 2,
                window: ns(7),
            },
        ),
        (
            "fixed_prime",
            FixedWindow {
                limit: 1000,
                window: ns(999_999_937),
            },
        ),
        (
            "swc_10s",
            SlidingWindowCounter {
                limit: 10,
                window: ns(SEC),
            },
        ),
        (
            "swc_max_1s",
            SlidingWindowCounter {
                limit: 16_383,
                window: ns(SEC),
            },
        ),
        (
            "swc_hour",
            SlidingWindowCounter {
                limit: 5000,
                window: ns(3600 * SEC),
            },
        ),
        (
            "swc_prime",
            SlidingWindowCounter {
                limit: 3,
                window: ns(999_999_937),
            },
        ),
        // L·W ≈ 2^74: products past three limbs.
        (
            "swc_huge",
            SlidingWindowCounter {
                limit: 16_000_000,
                window: ns(1 << 50),
            },
        ),
        (
            "log_3s",
            SlidingWindowLog {
                limit: 3,
                window: ns(SEC),
            },
        ),
        (
            "log_1",
            SlidingWindowLog {
                limit: 1,
                window: ns(10 * SEC),
            },
        ),
        (
            "log_64_min",
            SlidingWindowLog {
                limit: 64,
                window: ns(60 * SEC),
            },
        ),
    ]
}

/// The cases: per configuration, a few handwritten traces and random traces starting at
/// 0, at today's Unix time and near the end of u64 time.
pub(crate) fn cases(random_steps: usize) -> Vec<Case> {
    let mut out = Vec::new();
    let mut rng = Rng::new(0x7011_6a7e);
    for (name, config) in configs() {
        let scale = scale_of(&config);
        let max_cost = max_cost_of(&config);
        // Handwritten: a burst at one instant, then the same after one interval, then late.
        let burst: Vec<(u64, u32)> = (0..(max_cost.min(20) + 2))
            .map(|_| (UNIX, 1))
            .chain([
                (UNIX + scale, 1),
                (UNIX + scale, 1),
                (UNIX + scale / 2, 1),
                (UNIX + 10 * scale, 0),
            ])
            .collect();
        out.push(Case {
            name: format!("{name}/burst"),
            config,
            trace: burst,
        });
        for (start_name, start) in [
            ("zero", 0),
            ("unix", UNIX),
            ("end", u64::MAX - 3 * scale.min(u64::MAX / 8)),
        ] {
            out.push(Case {
                name: format!("{name}/random_{start_name}"),
                config,
                trace: random_trace(&mut rng, start, scale, max_cost, random_steps),
            });
        }
        // The very last instants of u64 time: saturation and overflow paths.
        out.push(Case {
            name: format!("{name}/end_of_time"),
            config,
            trace: vec![
                (u64::MAX - 1, 1),
                (u64::MAX, 1),
                (u64::MAX, 1),
                (u64::MAX, 0),
                (u64::MAX - scale.min(5), 1),
            ],
        });
    }
    out
}

/// The core cell's decisions for a case.
pub(crate) fn core_decisions(case: &Case) -> Vec<Result<Decision, InsufficientCapacity>> {
    let limiter = AnyLimiter::<RING>::new(case.config.build().expect("valid vector config"))
        .expect("ring fits");
    case.trace
        .iter()
        .map(|&(t, cost)| limiter.check_n_at(ns(t), cost))
        .collect()
}

/// Replays `case` through `policy` (one rule of the case's one tier, on a store without
/// deny cache, deciding at the policy's time) for client `key`, and asserts every decision
/// equals the core's.
pub(crate) fn assert_case<C: tollgate::Clock>(
    policy: &Policy<C, RedisStore>,
    key: &str,
    case: &Case,
) {
    let expected = core_decisions(case);
    for (i, (&(t, cost), want)) in case.trace.iter().zip(&expected).enumerate() {
        let served = policy.backend().stats().redis_decisions;
        let got = policy.allow_at(key, "/", cost, ns(t));
        match (want, got) {
            (Ok(want), Ok(got)) => {
                assert_eq!(
                    policy.backend().stats().redis_decisions,
                    served + 1,
                    "{}: step {i} not decided by redis",
                    case.name
                );
                assert_eq!(
                    &got.decision, want,
                    "{}: step {i} (t={t}, cost={cost})",
                    case.name
                );
                assert_eq!(got.tiers().len(), 1);
                assert_eq!(&got.tiers()[0].decision, want, "{}: step {i}", case.name);
            }
            (Err(want), Err(got)) => assert_eq!(&got, want, "{}: step {i}", case.name),
            (want, got) => panic!(
                "{}: step {i} (t={t}, cost={cost}): core {want:?}, redis {got:?}",
                case.name
            ),
        }
    }
}

/// All-or-nothing reference for tiers: peek every tier, then consume every tier only if
/// all admit (what one Redis script call does). When one denies, the tiers that would
/// have admitted report their state as it stands (a peek of cost 0: the request did not
/// count).
pub(crate) fn core_multi(
    limiters: &[AnyLimiter<RING>],
    now: u64,
    cost: u32,
) -> Result<Vec<Decision>, InsufficientCapacity> {
    let now = Nanos::new(now);
    let peeks: Vec<Decision> = limiters
        .iter()
        .map(|l| l.peek_n_at(now, cost))
        .collect::<Result<_, _>>()?;
    if peeks.iter().all(|d| d.allowed) {
        for l in limiters {
            let _ = l.check_n_at(now, cost)?;
        }
        return Ok(peeks);
    }
    limiters
        .iter()
        .zip(peeks)
        .map(|(l, d)| {
            if d.allowed {
                l.peek_n_at(now, 0)
            } else {
                Ok(d)
            }
        })
        .collect()
}

/// What a rollback vector does to the key while the limit is lowered.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Touch {
    /// A refund of 1.
    Refund,
    /// A charge of 1.
    Charge,
    /// The last 10 of the 100 reserved before the reload, settled at 5 after it.
    Settle,
}

/// One rollback vector: on a frozen clock, a key drained under `from` (100 per minute),
/// a reload to `to` (10 per minute), the `touch`, a drain, a reload back to `from` and a
/// drain: the three counts admitted (for `Settle`, the first is the 90 checked plus the
/// reservation).
#[derive(Clone, Debug)]
pub(crate) struct RollbackCase {
    pub from: AlgorithmConfig,
    pub to: AlgorithmConfig,
    pub touch: Touch,
    pub expected: [usize; 3],
}

/// `kind` at `limit` per minute (a burst, capacity or queue + 1 of `limit`).
fn per_minute(kind: usize, limit: u64) -> AlgorithmConfig {
    let minute = Nanos::from_secs(60);
    match kind {
        0 => AlgorithmConfig::Gcra {
            limit,
            period: minute,
            burst: limit,
        },
        1 => AlgorithmConfig::TokenBucket {
            capacity: limit,
            refill_amount: limit,
            refill_period: minute,
        },
        2 => AlgorithmConfig::LeakyBucket {
            amount: limit,
            period: minute,
            queue: limit - 1,
        },
        3 => AlgorithmConfig::FixedWindow {
            limit,
            window: minute,
        },
        4 => AlgorithmConfig::SlidingWindowCounter {
            limit,
            window: minute,
        },
        _ => AlgorithmConfig::SlidingWindowLog {
            limit,
            window: minute,
        },
    }
}

/// Every pair of the six algorithms, each touch: a conversion carries every permit used
/// (never a count capped at the lowered limit), so the rollback gives back exactly what
/// was left: 100 used, 1 refunded: 1; 1 charged: 0; 95 settled: 5.
pub(crate) fn rollback_cases() -> Vec<RollbackCase> {
    let mut out = Vec::new();
    for from in 0..6 {
        for to in 0..6 {
            for (touch, expected) in [
                (Touch::Refund, [100, 0, 1]),
                (Touch::Charge, [100, 0, 0]),
                (Touch::Settle, [91, 0, 5]),
            ] {
                out.push(RollbackCase {
                    from: per_minute(from, 100),
                    to: per_minute(to, 10),
                    touch,
                    expected,
                });
            }
        }
    }
    out
}

/// Runs `case` on a policy over `store` (one rule, one tier named `t`, clock frozen at
/// `start`): the three counts admitted.
pub(crate) fn run_rollback<S: tollgate::policy::Store>(
    store: S,
    case: &RollbackCase,
    start: Nanos,
) -> [usize; 3] {
    use tollgate::policy::{PolicyCheck, Request};
    let config = |c: AlgorithmConfig| super::one_rule(&[("t", c)]);
    let policy = Policy::new(config(case.from), tollgate::ManualClock::starting_at(start))
        .expect("valid vector")
        .store(store);
    let drain = |p: &Policy<tollgate::ManualClock, S>| {
        (0..1000)
            .take_while(|_| p.allow("k", "/", 1).unwrap().allowed())
            .count()
    };
    let (first, reservation) = match case.touch {
        Touch::Settle => {
            let checked = (0..90)
                .take_while(|_| policy.allow("k", "/", 1).unwrap().allowed())
                .count();
            let reservation = policy.reserve("k", "/", 10).unwrap();
            (
                checked + usize::from(reservation.allowed()),
                Some(reservation),
            )
        }
        Touch::Refund | Touch::Charge => (drain(&policy), None),
    };
    policy.reload(config(case.to)).unwrap();
    match case.touch {
        Touch::Refund => policy.refund("k", "/", 1),
        Touch::Charge => policy.charge_at(&Request::new("k", "/", 1), policy.now()),
        Touch::Settle => {
            if let Some(reservation) = reservation {
                let _ = reservation.settle(5);
            }
        }
    }
    let lowered = drain(&policy);
    policy.reload(config(case.from)).unwrap();
    [first, lowered, drain(&policy)]
}
