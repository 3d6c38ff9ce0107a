//! Reservations (reserve-then-settle): every settle path, on every algorithm, and the
//! accounting bound under threads.

use std::sync::atomic::{AtomicU64, Ordering};

use tollgate::policy::{Policy, PolicyCheck};
use tollgate::{ManualClock, Nanos};

fn policy(algorithm: &str, limit: u64) -> (Policy<ManualClock>, ManualClock) {
    let clock = ManualClock::starting_at(Nanos::from_secs(1_000));
    let rules = format!(
        "[[rules]]\nname = \"tokens\"\nlimit = {limit}\nwindow = \"1m\"\nalgorithm = \"{algorithm}\"\n"
    );
    (Policy::from_toml(&rules, clock.clone()).unwrap(), clock)
}

const ALGORITHMS: [&str; 5] = [
    "gcra",
    "token_bucket",
    "fixed_window",
    "sliding_window_counter",
    "sliding_window_log",
];

/// What is left now, by a peek of nothing.
fn remaining(policy: &Policy<ManualClock>) -> u64 {
    policy.peek("acct", "/chat", 0).unwrap().remaining()
}

#[test]
fn settling_below_the_estimate_refunds_the_rest() {
    for algorithm in ALGORITHMS {
        let (policy, _) = policy(algorithm, 100);
        let reservation = policy.reserve("acct", "/chat", 40).unwrap();
        assert!(reservation.allowed());
        assert_eq!(remaining(&policy), 60, "{algorithm}: the estimate is held");
        let after = reservation.settle(15).unwrap();
        assert_eq!(after.remaining(), 85, "{algorithm}");
        assert_eq!(remaining(&policy), 85, "{algorithm}");
    }
}

#[test]
fn settling_at_the_estimate_changes_nothing() {
    for algorithm in ALGORITHMS {
        let (policy, _) = policy(algorithm, 100);
        let after = policy
            .reserve("acct", "/chat", 40)
            .unwrap()
            .settle(40)
            .unwrap();
        assert_eq!(after.remaining(), 60, "{algorithm}");
    }
}

#[test]
fn settling_above_the_estimate_charges_the_excess_even_past_the_limit() {
    for algorithm in ALGORITHMS {
        let (policy, clock) = policy(algorithm, 100);
        let after = policy
            .reserve("acct", "/chat", 40)
            .unwrap()
            .settle(70)
            .unwrap();
        assert_eq!(after.remaining(), 30, "{algorithm}");
        // Past the limit: the work is done, so it is recorded; the key is then denied.
        let over = policy.reserve("acct", "/chat", 30).unwrap();
        assert!(over.allowed(), "{algorithm}");
        let after = over.settle(50).unwrap();
        assert_eq!(after.remaining(), 0, "{algorithm}");
        let denied = policy.reserve("acct", "/chat", 1).unwrap();
        assert!(!denied.allowed(), "{algorithm}: in debt");
        assert!(denied.decision().retry_after() > Nanos::ZERO);
        // Settling a denied reservation records nothing.
        let _ = denied.settle(1_000).unwrap();
        // A full window later everything has come back.
        clock.advance(Nanos::from_secs(130));
        assert_eq!(remaining(&policy), 100, "{algorithm}");
    }
}

#[test]
fn a_dropped_or_cancelled_reservation_refunds_itself() {
    for algorithm in ALGORITHMS {
        let (policy, _) = policy(algorithm, 100);
        {
            let reservation = policy.reserve("acct", "/chat", 40).unwrap();
            assert!(reservation.allowed());
            assert_eq!(remaining(&policy), 60);
            // The work failed: the guard goes out of scope unsettled.
        }
        assert_eq!(remaining(&policy), 100, "{algorithm}: dropped");
        policy.reserve("acct", "/chat", 25).unwrap().cancel();
        assert_eq!(remaining(&policy), 100, "{algorithm}: cancelled");
        // A panic while the work runs refunds too.
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _reservation = policy.reserve("acct", "/chat", 10).unwrap();
            panic!("the work failed");
        }));
        assert!(caught.is_err());
        assert_eq!(remaining(&policy), 100, "{algorithm}: panicked");
    }
}

#[test]
fn an_estimate_over_the_limit_is_denied_and_holds_nothing() {
    let (policy, _) = policy("fixed_window", 100);
    let first = policy.reserve("acct", "/chat", 80).unwrap();
    let second = policy.reserve("acct", "/chat", 30).unwrap();
    assert!(first.allowed());
    assert!(!second.allowed());
    drop(second);
    assert_eq!(
        remaining(&policy),
        20,
        "dropping a denied reservation gives nothing back"
    );
    let _ = first.settle(80).unwrap();
    assert_eq!(remaining(&policy), 20);
}

/// Four threads reserve estimates of 10 and settle at a random actual cost (0..=10): an
/// estimate is admitted only within the limit, and at the end exactly the settled costs
/// are charged, nothing lost and nothing extra.
#[test]
fn under_threads_exactly_the_settled_costs_are_charged() {
    for algorithm in ["fixed_window", "sliding_window_log", "gcra"] {
        let (policy, _) = policy(algorithm, 1_000);
        let charged = AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (policy, charged) = (&policy, &charged);
                s.spawn(move || {
                    let mut seed = t.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                    for _ in 0..500 {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        let reservation = policy.reserve("acct", "/chat", 10).unwrap();
                        if !reservation.allowed() {
                            continue;
                        }
                        let actual = (seed % 11) as u32;
                        // Relaxed: a counter, read after the scope joins.
                        charged.fetch_add(u64::from(actual), Ordering::Relaxed);
                        let _ = reservation.settle(actual).unwrap();
                    }
                });
            }
        });
        let charged = charged.into_inner();
        // The limit was reached (2 000 estimates of 10 were asked for) and never passed.
        assert!((900..=1_000).contains(&charged), "{algorithm}: {charged}");
        assert_eq!(remaining(&policy), 1_000 - charged, "{algorithm}");
    }
}
