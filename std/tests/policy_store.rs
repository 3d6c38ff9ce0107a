//! One policy over pluggable stores: a second, deliberately plain [`Store`] (one mutex over
//! a map of states, run with the core's operations) decides exactly as the in-process
//! store on random multi-rule, multi-tier traces, and every policy feature (decorators,
//! reservations, waiting, refunds, reloads) works through the trait unchanged.

mod policy_support;

use policy_support::{MapStore, Rng, RULES};
use tollgate::policy::{Policy, PolicyCheck};
use tollgate::{ManualClock, Nanos};

/// Both stores answer the same random trace identically, decision by decision, tier by
/// tier (checks, peeks, refunds, charges and resets, several clients and endpoints, time moving).
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
                0 if rng.below(4) == 0 => {
                    ours.reset(client, endpoint);
                    plain.reset(client, endpoint);
                }
                0 => {
                    ours.refund(client, endpoint, cost);
                    plain.refund(client, endpoint, cost);
                }
                1 => {
                    ours.charge_at(
                        &tollgate::policy::Request::new(client, endpoint, cost),
                        tollgate::Clock::now(&clock),
                    );
                    plain.charge_at(
                        &tollgate::policy::Request::new(client, endpoint, cost),
                        tollgate::Clock::now(&clock),
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
    policy_support::exercise_every_feature(MapStore::default());
}
