//! One policy over pluggable stores: a second, deliberately plain [`Store`] (one mutex over
//! a map of states, run with the core's operations) decides exactly as the in-process
//! store on random multi-rule, multi-tier traces, and every policy feature (decorators,
//! reservations, waiting, refunds, reloads) works through the trait unchanged.

mod policy_support;

use policy_support::{MapStore, Rng, RULES};
use tollgate::policy::{AdaptivePenalty, Metered, PenaltyConfig, Policy, PolicyCheck};
use tollgate::{ManualClock, Nanos};

/// Both stores answer the same random trace identically, decision by decision, tier by
/// tier (checks, peeks, refunds and charges, several clients and endpoints, time moving).
#[test]
fn a_plain_store_decides_exactly_as_the_in_process_one() {
    for seed in 1..=20u64 {
        let clock = ManualClock::starting_at(Nanos::from_secs(1_000_000));
        let ours = Policy::from_toml(RULES, clock.clone()).unwrap();
        let plain = Policy::from_toml(RULES, clock.clone())
            .unwrap()
            .store(MapStore::default());
        let clients = ["a", "b", "vip", "c"];
        let endpoints = ["/", "/search", "/upload"];
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        for step in 0..600 {
            clock.advance(Nanos::from_millis(rng.below(4) * rng.below(200)));
            let client = clients[rng.below(4) as usize];
            let endpoint = endpoints[rng.below(3) as usize];
            let cost = [1, 1, 1, 2, 0, 3][rng.below(6) as usize];
            match rng.below(10) {
                0 => {
                    ours.refund(client, endpoint, cost);
                    plain.refund(client, endpoint, cost);
                }
                1 => {
                    ours.charge_at(
                        &tollgate::policy::Request::new(client, endpoint, cost),
                        clock.now_nanos(),
                    );
                    plain.charge_at(
                        &tollgate::policy::Request::new(client, endpoint, cost),
                        clock.now_nanos(),
                    );
                }
                2 => assert_eq!(
                    ours.peek(client, endpoint, cost),
                    plain.peek(client, endpoint, cost),
                    "seed {seed} step {step}: peek {client} {endpoint} {cost}"
                ),
                _ => assert_eq!(
                    ours.allow(client, endpoint, cost),
                    plain.allow(client, endpoint, cost),
                    "seed {seed} step {step}: {client} {endpoint} {cost}"
                ),
            }
        }
    }
}

/// The decorators, reservations and waiting are written against `PolicyCheck`: they run on
/// any store.
#[test]
fn every_policy_feature_works_through_the_trait() {
    let clock = ManualClock::starting_at(Nanos::from_secs(1_000_000));
    let policy = Policy::from_toml(RULES, clock.clone())
        .unwrap()
        .store(MapStore::default());
    // Reservations.
    let reservation = policy.reserve("vip", "/", 10).unwrap();
    assert!(reservation.allowed());
    assert_eq!(reservation.settle(4).unwrap().remaining(), 16);
    // A reload keeps state where the tier is unchanged (the store keys by names), and a
    // changed tier's states carry their used permits, converted on their next check by
    // their version tag: 4 of 8 used on /search, lowered to 3 and to a fixed window.
    for _ in 0..4 {
        assert!(policy.allow("b", "/search", 1).unwrap().allowed());
    }
    policy
        .reload_toml(&RULES.replace(
            "limit = 8
    window = \"10s\"
    algorithm = \"sliding_window_counter\"",
            "limit = 3
    window = \"10s\"
    algorithm = \"fixed_window\"",
        ))
        .unwrap();
    assert_eq!(policy.peek("vip", "/", 0).unwrap().remaining(), 16);
    let search = policy.allow("b", "/search", 1).unwrap();
    assert!(
        !search.allowed(),
        "4 used of a new 3: exhausted, not a fresh burst"
    );
    assert_eq!(search.tiers().last().unwrap().quota, 3);
    // Metered and AdaptivePenalty over it.
    let metered = Metered::new(
        AdaptivePenalty::new(
            &policy,
            PenaltyConfig {
                denials: 2,
                period: Nanos::from_secs(60),
                divisor: 2,
                cooldown: Nanos::from_secs(60),
            },
        )
        .unwrap(),
    );
    let admitted = (0..10)
        .filter(|_| metered.allow("a", "/", 1).unwrap().allowed())
        .count();
    assert_eq!(admitted, 5);
    assert_eq!((metered.allowed(), metered.denied()), (5, 5));
    assert!(metered.inner().is_penalized("a", clock.now_nanos()));
    // Waiting: `wait_with` sleeps on a manual clock until admitted.
    let decision = policy
        .wait_with(&tollgate::policy::Request::new("b", "/", 1), |d| {
            clock.advance(d);
        })
        .unwrap();
    assert!(decision.allowed());
}

trait NowNanos {
    fn now_nanos(&self) -> Nanos;
}

impl NowNanos for ManualClock {
    fn now_nanos(&self) -> Nanos {
        tollgate::Clock::now(self)
    }
}
