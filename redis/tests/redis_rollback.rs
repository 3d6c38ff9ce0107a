//! Rollbacks on Redis (issue 27, item 3), on a real redis-server: a key rewritten under a
//! lowered limit keeps every permit it used, on Redis exactly as in process. Then the
//! property test of `policy_rollback.rs` (random traces of checks, refunds, charges,
//! reservations and reloads among random rule sets) on a `RedisStore` beside the
//! in-process store and the reference store: identical answers on every step, and on a
//! frozen clock no key ever holds more than the rule in force allows on top of what it
//! used.

#[path = "../../std/tests/policy_support/mod.rs"]
mod policy_support;
mod redis_support;
#[path = "../../std/tests/rollback_support/mod.rs"]
mod rollback_support;

use std::sync::atomic::{AtomicU64, Ordering};

use policy_support::MapStore;
use proptest::test_runner::{Config, TestRunner};
use redis_support::server::RedisServer;
use redis_support::vector_config;
use rollback_support::{replay, rule_set, trace, Counts, Subject, TierSpec, START};
use tollgate::policy::{AlgorithmKind, Policy, PolicyCheck, PolicyConfig, Request, Store};
use tollgate::ManualClock;
use tollgate_redis::{RedisStore, RedisTarget};

/// Store prefixes, one per policy, so no two cases share a key.
static PREFIX: AtomicU64 = AtomicU64::new(0);

fn redis_store(server: &RedisServer) -> RedisStore {
    let prefix = format!("rb{}", PREFIX.fetch_add(1, Ordering::Relaxed));
    RedisStore::new(RedisTarget::Single(server.url()), vector_config(&prefix)).expect("store")
}

fn per_minute(kind: AlgorithmKind, limit: u64) -> PolicyConfig {
    rule_set(&[TierSpec {
        kind,
        limit,
        window: "1m",
        extra: limit,
    }])
}

fn drain(policy: &impl PolicyCheck) -> usize {
    (0..10_000)
        .take_while(|_| policy.allow("k", "/", 1).unwrap().allowed())
        .count()
}

/// `from` at 100/min drained, `to` at 10/min, `touch`, drained, `from` at 100/min again
/// and drained, on a frozen clock: the three counts admitted.
fn lower_touch_restore<S: Store>(
    store: S,
    from: AlgorithmKind,
    to: AlgorithmKind,
    touch: impl Fn(&Policy<ManualClock, S>),
) -> [usize; 3] {
    let policy = Policy::new(per_minute(from, 100), ManualClock::starting_at(START))
        .unwrap()
        .store(store);
    let first = drain(&policy);
    policy.reload(per_minute(to, 10)).unwrap();
    touch(&policy);
    let lowered = drain(&policy);
    policy.reload(per_minute(from, 100)).unwrap();
    [first, lowered, drain(&policy)]
}

fn refund_one<S: Store>(p: &Policy<ManualClock, S>) {
    p.refund("k", "/", 1);
}

fn charge_one<S: Store>(p: &Policy<ManualClock, S>) {
    p.charge_at(&Request::new("k", "/", 1), PolicyCheck::now(p));
}

/// The report: sliding log 100/min → 10/min → `refund(1)` → 100/min admitted 100 + 0 + 90
/// on Redis (its script trimmed the log to the lowered limit when the refund rewrote it)
/// and 100 + 0 + 1 in process. Both now 100 + 0 + 1.
#[test]
fn sliding_log_lowered_refunded_and_rolled_back_agrees_with_in_process() {
    let server = RedisServer::start();
    let log = AlgorithmKind::SlidingWindowLog;
    let redis = lower_touch_restore(redis_store(&server), log, log, refund_one);
    let in_process =
        lower_touch_restore(tollgate::policy::InProcess::default(), log, log, refund_one);
    assert_eq!(in_process, [100, 0, 1]);
    assert_eq!(redis, in_process);
}

/// Every window algorithm, lowered from itself or from GCRA, then a refund or a charge,
/// then rolled back: Redis gives exactly what the in-process store gives, and neither
/// hands out a permit twice.
#[test]
fn every_window_lowered_touched_and_rolled_back_agrees_with_in_process() {
    let server = RedisServer::start();
    let windows = [
        AlgorithmKind::FixedWindow,
        AlgorithmKind::SlidingWindowCounter,
        AlgorithmKind::SlidingWindowLog,
    ];
    for from in [AlgorithmKind::Gcra].into_iter().chain(windows) {
        for to in windows {
            let redis = lower_touch_restore(redis_store(&server), from, to, refund_one);
            let local =
                lower_touch_restore(tollgate::policy::InProcess::default(), from, to, refund_one);
            assert_eq!(
                (redis, local),
                ([100, 0, 1], [100, 0, 1]),
                "{from:?} -> {to:?}, refund"
            );
            let redis = lower_touch_restore(redis_store(&server), from, to, charge_one);
            let local =
                lower_touch_restore(tollgate::policy::InProcess::default(), from, to, charge_one);
            assert_eq!(
                (redis, local),
                ([100, 0, 0], [100, 0, 0]),
                "{from:?} -> {to:?}, charge"
            );
        }
    }
}

/// The shared rollback vectors (`redis_support::vectors::rollback_cases`: every pair of
/// the six algorithms, lowered, refunded, charged or settled, rolled back) on Redis and
/// in process: the pinned counts on both.
#[test]
fn the_rollback_vectors_hold_on_redis_and_in_process() {
    use redis_support::vectors::{rollback_cases, run_rollback};
    let server = RedisServer::start();
    for case in rollback_cases() {
        let redis = run_rollback(redis_store(&server), &case, START);
        let local = run_rollback(tollgate::policy::InProcess::default(), &case, START);
        assert_eq!((redis, local), (case.expected, case.expected), "{case:?}");
    }
}

/// A reservation held across the reload and settled under the lowered limit, on Redis:
/// 90 used, 10 reserved, reload to 10/min, settled at 5: nothing under 10/min, 5 after
/// the rollback.
#[test]
fn a_reservation_settled_during_the_reload_grants_no_permit_twice_on_redis() {
    let server = RedisServer::start();
    for kind in [
        AlgorithmKind::FixedWindow,
        AlgorithmKind::SlidingWindowCounter,
        AlgorithmKind::SlidingWindowLog,
    ] {
        let policy = Policy::new(per_minute(kind, 100), ManualClock::starting_at(START))
            .unwrap()
            .store(redis_store(&server));
        for _ in 0..90 {
            assert!(policy.allow("k", "/", 1).unwrap().allowed());
        }
        let reservation = policy.reserve("k", "/", 10).unwrap();
        assert!(reservation.allowed());
        policy.reload(per_minute(kind, 10)).unwrap();
        assert_eq!(reservation.settle(5).unwrap().remaining(), 0, "{kind:?}");
        assert_eq!(drain(&policy), 0, "{kind:?}");
        policy.reload(per_minute(kind, 100)).unwrap();
        assert_eq!(drain(&policy), 5, "{kind:?}");
    }
}

/// `cases` random traces on Redis, in process and on the reference store side by side.
fn run_traces(server: &RedisServer, frozen: bool, cases: u32) -> Counts {
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let total = std::cell::Cell::new(Counts::default());
    runner
        .run(&trace(frozen, 60), |trace| {
            let clock = ManualClock::starting_at(START);
            let first = rule_set(&trace.sets[0]);
            let in_process = Policy::new(first.clone(), clock.clone()).unwrap();
            let redis = Policy::new(first.clone(), clock.clone())
                .unwrap()
                .store(redis_store(server));
            let reference = Policy::new(first, clock.clone())
                .unwrap()
                .store(MapStore::default());
            let subjects: [&dyn Subject; 3] = [&in_process, &redis, &reference];
            let counts = replay(&trace, &clock, &subjects)?;
            let mut sum = total.get();
            sum.admitted += counts.admitted;
            sum.denied += counts.denied;
            sum.errors += counts.errors;
            sum.reloads += counts.reloads;
            sum.reservations += counts.reservations;
            sum.bounded += counts.bounded;
            total.set(sum);
            Ok(())
        })
        .unwrap();
    total.get()
}

fn cases() -> u32 {
    std::env::var("ROLLBACK_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(256)
}

/// On a frozen clock: Redis and the in-process store answer every step identically, and
/// after every admission no tier's key holds more net than the rule in force allows.
#[test]
fn random_frozen_traces_on_redis_agree_and_never_admit_beyond_the_rule_in_force() {
    let server = RedisServer::start();
    let counts = run_traces(&server, true, cases());
    eprintln!("frozen clock, {} cases: {counts:?}", cases());
    assert!(counts.bounded > 0 && counts.denied > 0 && counts.reloads > 0);
}

/// With a clock that advances: Redis and the in-process store answer every step
/// identically.
#[test]
fn random_advancing_traces_on_redis_agree_with_in_process() {
    let server = RedisServer::start();
    let counts = run_traces(&server, false, cases());
    eprintln!("advancing clock, {} cases: {counts:?}", cases());
    assert!(counts.admitted > 0 && counts.denied > 0 && counts.reloads > 0);
}
