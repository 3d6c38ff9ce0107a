//! Differential test: a policy (two rules, three tiers, random algorithms) against a
//! sequential model built from the core's own limiters, decision by decision, on random
//! traces of clients, endpoints, costs and times. The model applies the all-or-nothing rule
//! literally: peek every matching tier; admit only if all would admit, then check each.
//! It also pits the policy's sliding-window-log cells against the core's `LogRing`.

use std::collections::HashMap;

use crate::policy::Policy;
use crate::{AlgorithmConfig, AnyLimiter, Decision, InsufficientCapacity, ManualClock, Nanos};
use proptest::prelude::*;

const KINDS: [&str; 6] = [
    "gcra",
    "token_bucket",
    "leaky_bucket",
    "fixed_window",
    "sliding_window_counter",
    "sliding_window_log",
];

#[derive(Clone, Debug)]
struct TierSpec {
    kind: usize,
    limit: u64,
    window_ms: u64,
}

impl TierSpec {
    fn toml(&self, name: &str) -> String {
        format!(
            "[[rules.tiers]]\nname = \"{name}\"\nlimit = {}\nwindow = \"{}ms\"\nalgorithm = \"{}\"\n",
            self.limit, self.window_ms, KINDS[self.kind]
        )
    }

    /// The same tier as a core config (defaults as the policy applies them).
    fn core(&self) -> AlgorithmConfig {
        let (limit, window) = (self.limit, Nanos::from_millis(self.window_ms));
        match KINDS[self.kind] {
            "gcra" => AlgorithmConfig::Gcra {
                limit,
                period: window,
                burst: limit,
            },
            "token_bucket" => AlgorithmConfig::TokenBucket {
                capacity: limit,
                refill_amount: limit,
                refill_period: window,
            },
            "leaky_bucket" => AlgorithmConfig::LeakyBucket {
                amount: limit,
                period: window,
                queue: limit - 1,
            },
            "fixed_window" => AlgorithmConfig::FixedWindow { limit, window },
            "sliding_window_counter" => AlgorithmConfig::SlidingWindowCounter { limit, window },
            _ => AlgorithmConfig::SlidingWindowLog { limit, window },
        }
    }
}

fn tier() -> impl Strategy<Value = TierSpec> {
    (
        0..KINDS.len(),
        1..6u64,
        prop_oneof![Just(1000u64), Just(2500), Just(10_000)],
    )
        .prop_map(|(kind, limit, window_ms)| TierSpec {
            kind,
            limit,
            window_ms,
        })
}

#[derive(Clone, Debug)]
struct Step {
    client: usize,
    on_endpoint: bool,
    cost: u32,
    advance_ms: u64,
    peek: bool,
}

fn step() -> impl Strategy<Value = Step> {
    (
        0..3usize,
        any::<bool>(),
        prop_oneof![3 => 1..3u32, 1 => 0..7u32],
        prop_oneof![3 => Just(0u64), 2 => 0..1500u64],
        prop::bool::weighted(0.2),
    )
        .prop_map(|(client, on_endpoint, cost, advance_ms, peek)| Step {
            client,
            on_endpoint,
            cost,
            advance_ms,
            peek,
        })
}

/// The model: one core limiter per (tier, state key).
struct Model {
    tiers: Vec<(TierSpec, bool)>, // (spec, per-client?)
    cells: HashMap<(usize, String), AnyLimiter<8>>,
}

impl Model {
    fn cell(&mut self, tier: usize, key: &str) -> &AnyLimiter<8> {
        let spec = &self.tiers[tier].0;
        self.cells
            .entry((tier, key.to_owned()))
            .or_insert_with(|| AnyLimiter::new(spec.core().build().unwrap()).unwrap())
    }

    /// The tiers a request matches, with their state keys.
    fn matching(&self, client: &str, on_endpoint: bool) -> Vec<(usize, String)> {
        let mut out = vec![(0, client.to_owned()), (1, client.to_owned())];
        if on_endpoint {
            out.push((
                2,
                if self.tiers[2].1 {
                    client.to_owned()
                } else {
                    String::new()
                },
            ));
        }
        out
    }

    fn check(
        &mut self,
        client: &str,
        on_endpoint: bool,
        cost: u32,
        now: Nanos,
        peek: bool,
    ) -> Result<(bool, Vec<Decision>), InsufficientCapacity> {
        let tiers = self.matching(client, on_endpoint);
        let mut peeks = Vec::new();
        for (t, key) in &tiers {
            peeks.push(self.cell(*t, key).peek_n_at(now, cost)?);
        }
        let all = peeks.iter().all(|d| d.allowed);
        if !all || peek {
            if !peek {
                // A denied request reports admitting tiers as they are (cost 0).
                for (i, (t, key)) in tiers.iter().enumerate() {
                    if peeks[i].allowed {
                        peeks[i] = self.cell(*t, key).peek_n_at(now, 0)?;
                    }
                }
            }
            return Ok((all, peeks));
        }
        let mut decisions = Vec::new();
        for (t, key) in &tiers {
            decisions.push(self.cell(*t, key).check_n_at(now, cost)?);
        }
        assert!(decisions.iter().all(|d| d.allowed));
        Ok((true, decisions))
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn policy_matches_the_sequential_model(
        a in tier(),
        b in tier(),
        c in tier(),
        endpoint_global in any::<bool>(),
        precheck in any::<bool>(),
        steps in prop::collection::vec(step(), 1..60),
    ) {
        let toml = format!(
            "[[rules]]\nname = \"client\"\n{}{}[[rules]]\nname = \"endpoint\"\nendpoint = \"/e\"\nper = \"{}\"\n{}",
            a.toml("a"), b.toml("b"),
            if endpoint_global { "global" } else { "client" },
            c.toml("c"),
        );
        let clock = ManualClock::starting_at(Nanos::from_secs(100));
        let policy = Policy::from_toml(&toml, clock.clone()).unwrap().with_precheck(precheck);
        let mut model = Model {
            tiers: vec![(a, true), (b, true), (c, !endpoint_global)],
            cells: HashMap::new(),
        };
        for (i, s) in steps.iter().enumerate() {
            clock.advance(Nanos::from_millis(s.advance_ms));
            let now = crate::Clock::now(&clock);
            let client = ["x", "y", "z"][s.client];
            let endpoint = if s.on_endpoint { "/e" } else { "/other" };
            let expected = model.check(client, s.on_endpoint, s.cost, now, s.peek);
            let actual = if s.peek {
                policy.peek(client, endpoint, s.cost)
            } else {
                policy.allow(client, endpoint, s.cost)
            };
            match (expected, actual) {
                (Err(e), Err(a)) => prop_assert_eq!(e.max_cost, a.max_cost, "step {}", i),
                (Ok((allowed, decisions)), Ok(got)) => {
                    prop_assert_eq!(got.allowed(), allowed, "step {}: {:?}", i, s);
                    let tiers: Vec<Decision> = got.tiers().iter().map(|t| t.decision).collect();
                    prop_assert_eq!(tiers, decisions, "step {}: {:?}", i, s);
                }
                (e, a) => prop_assert!(false, "step {}: model {:?}, policy {:?}", i, e, a.map(|d| d.decision)),
            }
        }
    }
}
