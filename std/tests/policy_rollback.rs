//! Rollbacks never grant permits twice (issue 27, item 3). A key converted to a lowered
//! window tier (by a refund, a charge or a reservation settled during the reload) keeps
//! every permit it used, not a count capped at the lower limit, so rolling the change back
//! gives it only what it had left. Then a property test over random traces of checks,
//! refunds, charges, reservations and reloads among random rule sets: the in-process store
//! and the plain reference store answer identically, and on a frozen clock no key ever
//! holds more than the rule in force allows on top of what it used.
//! (`redis_rollback.rs` runs the same traces on a real redis-server.)

mod policy_support;
mod rollback_support;

use policy_support::MapStore;
use proptest::test_runner::{Config, TestRunner};
use rollback_support::{replay, rule_set, trace, Counts, Subject, TierSpec, START};
use tollgate::policy::{AlgorithmKind, Policy, PolicyCheck};
use tollgate::ManualClock;

/// One tier `a` of `kind` at `limit` per minute (a GCRA's or token bucket's burst = limit).
fn per_minute(kind: AlgorithmKind, limit: u64) -> tollgate::policy::PolicyConfig {
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

/// On a frozen clock: `from` at 100/min drained, then `to` at 10/min, `touch` the key
/// (a refund, a charge...), drain, then `from` at 100/min again and drain: the three
/// counts admitted.
fn lower_touch_restore(
    from: AlgorithmKind,
    to: AlgorithmKind,
    touch: impl Fn(&Policy<ManualClock>),
) -> [usize; 3] {
    let policy = Policy::new(per_minute(from, 100), ManualClock::starting_at(START)).unwrap();
    let first = drain(&policy);
    policy.reload(per_minute(to, 10)).unwrap();
    touch(&policy);
    let lowered = drain(&policy);
    policy.reload(per_minute(from, 100)).unwrap();
    [first, lowered, drain(&policy)]
}

const WINDOWS: [AlgorithmKind; 3] = [
    AlgorithmKind::FixedWindow,
    AlgorithmKind::SlidingWindowCounter,
    AlgorithmKind::SlidingWindowLog,
];

/// The report: fixed window 100/min → 10/min → `refund(1)` → 100/min admitted
/// 100 + 1 + 90 (the refund carried the key with its count capped at 10, and the rollback
/// restored only that). 100 used, 1 given back: 99 used, so 0 under 10/min and 1 after.
#[test]
fn fixed_window_lowered_refunded_and_rolled_back_grants_no_permit_twice() {
    let counts = lower_touch_restore(
        AlgorithmKind::FixedWindow,
        AlgorithmKind::FixedWindow,
        |p| p.refund("k", "/", 1),
    );
    assert_eq!(counts, [100, 0, 1]);
}

#[test]
fn sliding_window_counter_lowered_refunded_and_rolled_back_grants_no_permit_twice() {
    let counts = lower_touch_restore(
        AlgorithmKind::SlidingWindowCounter,
        AlgorithmKind::SlidingWindowCounter,
        |p| p.refund("k", "/", 1),
    );
    assert_eq!(counts, [100, 0, 1]);
}

#[test]
fn sliding_window_log_lowered_refunded_and_rolled_back_grants_no_permit_twice() {
    let counts = lower_touch_restore(
        AlgorithmKind::SlidingWindowLog,
        AlgorithmKind::SlidingWindowLog,
        |p| p.refund("k", "/", 1),
    );
    assert_eq!(counts, [100, 0, 1]);
}

/// From any algorithm into a lowered window: GCRA's debt of 100 permits is carried whole
/// into each window tier, then restored to GCRA whole (less the refund).
#[test]
fn gcra_into_a_lowered_window_refunded_and_rolled_back_grants_no_permit_twice() {
    for window in WINDOWS {
        let counts = lower_touch_restore(AlgorithmKind::Gcra, window, |p| p.refund("k", "/", 1));
        assert_eq!(counts, [100, 0, 1], "gcra -> {window:?} -> gcra");
    }
    // And between windows of different kinds.
    for from in WINDOWS {
        for to in WINDOWS {
            let counts = lower_touch_restore(from, to, |p| p.refund("k", "/", 1));
            assert_eq!(counts, [100, 0, 1], "{from:?} -> {to:?} -> {from:?}");
        }
    }
}

/// A charge in between counts on top of the whole 100: nothing is left after the rollback.
#[test]
fn a_charge_on_a_lowered_window_counts_on_top_of_every_permit_used() {
    for from in [AlgorithmKind::Gcra, AlgorithmKind::TokenBucket]
        .into_iter()
        .chain(WINDOWS)
    {
        for to in WINDOWS {
            let counts = lower_touch_restore(from, to, |p| {
                let request = tollgate::policy::Request::new("k", "/", 1);
                p.charge_at(&request, PolicyCheck::now(p));
            });
            assert_eq!(counts, [100, 0, 0], "{from:?} -> {to:?} -> {from:?}");
        }
    }
}

/// A reservation held across the reload and settled under the lowered limit: 90 used,
/// 10 reserved, reload to 10/min, settled at 5 (5 refunded): 95 used, so nothing under
/// 10/min and 5 after the rollback (before the fix: 5 under 10/min, then 90). Settled at 15
/// instead (5 charged): 105 used, nothing either way.
#[test]
fn a_reservation_settled_during_the_reload_grants_no_permit_twice() {
    for from in [AlgorithmKind::Gcra].into_iter().chain(WINDOWS) {
        for to in WINDOWS {
            for (actual, restored) in [(5, 5), (15, 0), (0, 10)] {
                let policy =
                    Policy::new(per_minute(from, 100), ManualClock::starting_at(START)).unwrap();
                for _ in 0..90 {
                    assert!(policy.allow("k", "/", 1).unwrap().allowed());
                }
                let reservation = policy.reserve("k", "/", 10).unwrap();
                assert!(reservation.allowed());
                policy.reload(per_minute(to, 10)).unwrap();
                let after = reservation.settle(actual).unwrap();
                assert_eq!(
                    after.remaining(),
                    0,
                    "{from:?} -> {to:?}, settled at {actual}"
                );
                assert_eq!(drain(&policy), 0, "{from:?} -> {to:?}, settled at {actual}");
                policy.reload(per_minute(from, 100)).unwrap();
                assert_eq!(
                    drain(&policy),
                    restored,
                    "{from:?} -> {to:?} -> {from:?}, settled at {actual}"
                );
            }
        }
    }
}

/// Runs `cases` random traces (frozen clock or not) on the in-process store and the
/// reference store side by side; returns the summed counts.
fn run_traces(frozen: bool, cases: u32) -> Counts {
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let total = std::cell::Cell::new(Counts::default());
    runner
        .run(&trace(frozen, 80), |trace| {
            let clock = ManualClock::starting_at(START);
            let first = rule_set(&trace.sets[0]);
            let in_process = Policy::new(first.clone(), clock.clone()).unwrap();
            let reference = Policy::new(first, clock.clone())
                .unwrap()
                .store(MapStore::default());
            let subjects: [&dyn Subject; 2] = [&in_process, &reference];
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
        .unwrap_or(512)
}

/// The property on a frozen clock: the two stores agree, and after every admission no
/// tier's key holds more net than the rule in force allows.
#[test]
fn random_frozen_traces_never_admit_beyond_the_rule_in_force() {
    let counts = run_traces(true, cases());
    eprintln!("frozen clock, {} cases: {counts:?}", cases());
    // The traces do reach both sides of the bound.
    assert!(counts.bounded > 0 && counts.denied > 0 && counts.reloads > 0);
}

/// With a clock that advances (windows roll, buckets refill, logs slide): the two stores
/// agree on every answer.
#[test]
fn random_advancing_traces_decide_identically_in_both_stores() {
    let counts = run_traces(false, cases());
    eprintln!("advancing clock, {} cases: {counts:?}", cases());
    assert!(counts.admitted > 0 && counts.denied > 0 && counts.reloads > 0);
}
