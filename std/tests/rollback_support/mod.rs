//! Shared support of the rollback tests (`policy_rollback.rs` in process,
//! `redis_rollback.rs` on a real redis-server): random rule sets that keep the rule's and
//! the tiers' names (so every reload carries each key's state, converted), random traces
//! mixing checks of various costs, refunds, charges, reservations (settled below or above
//! their estimate, or dropped, some across a reload) and reloads among those sets, on a
//! frozen clock or on one that advances, and a runner that replays one trace on several
//! policies at once. It asserts that:
//!
//! 1. every policy answers every step identically (decisions, errors, the state a settled
//!    reservation reports);
//! 2. on a frozen clock (nothing refills, nothing slides out, so the permits a key holds are
//!    exactly what it was given net), after every admission each tier's key has used net
//!    (admitted + charged − refunded, a refund clamped at what was used and at the tier's
//!    largest cost, as the policy clamps it) no more than the tier in force allows: its
//!    limit (the burst of GCRA and token bucket); for a leaky bucket, which admits while its
//!    queue is not full, at most `limit − 1` before the admitted cost.
#![allow(dead_code)]

use std::fmt;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tollgate::policy::{
    AlgorithmKind, Policy, PolicyCheck, PolicyConfig, PolicyDecision, RuleConfig, Store, TierConfig,
};
use tollgate::{AnyAlgorithm, InsufficientCapacity, ManualClock, Nanos, PackedAlgorithm};

/// The tier names every rule set uses, in order (a set has the first one or both).
pub(crate) const TIERS: [&str; 2] = ["a", "b"];

/// The clients a trace uses.
pub(crate) const CLIENTS: [&str; 2] = ["c0", "c1"];

/// Where every trace starts: a Unix time, so Redis' windows are wall-clock ones.
pub(crate) const START: Nanos = Nanos::from_secs(1_700_000_007);

const KINDS: [AlgorithmKind; 6] = [
    AlgorithmKind::Gcra,
    AlgorithmKind::TokenBucket,
    AlgorithmKind::LeakyBucket,
    AlgorithmKind::FixedWindow,
    AlgorithmKind::SlidingWindowCounter,
    AlgorithmKind::SlidingWindowLog,
];

const WINDOWS: [&str; 3] = ["1s", "10s", "1m"];

/// One tier of a rule set: its algorithm, limit, window and, for GCRA and token bucket its
/// burst, for a leaky bucket its queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TierSpec {
    pub(crate) kind: AlgorithmKind,
    pub(crate) limit: u64,
    pub(crate) window: &'static str,
    pub(crate) extra: u64,
}

impl TierSpec {
    /// The tier's configuration, named `name`.
    pub(crate) fn config(&self, name: &str) -> TierConfig {
        let tier = TierConfig::new(self.limit, self.window)
            .algorithm(self.kind)
            .named(name);
        match self.kind {
            AlgorithmKind::Gcra | AlgorithmKind::TokenBucket => tier.burst(self.extra.max(1)),
            AlgorithmKind::LeakyBucket => tier.queue(self.extra),
            _ => tier,
        }
    }
}

/// A rule set: one rule `r` for every client, with `tiers` named after [`TIERS`].
pub(crate) fn rule_set(tiers: &[TierSpec]) -> PolicyConfig {
    let rule = tiers
        .iter()
        .zip(TIERS)
        .fold(RuleConfig::new("r"), |rule, (spec, name)| {
            rule.tier(spec.config(name))
        });
    PolicyConfig::default().rule(rule)
}

/// One step of a trace (clients by index into [`CLIENTS`], rule sets into the trace's).
#[derive(Clone, Debug)]
pub(crate) enum Step {
    /// A check of `cost`.
    Check { client: usize, cost: u32 },
    /// A refund of `cost`.
    Refund { client: usize, cost: u32 },
    /// A charge of `cost`.
    Charge { client: usize, cost: u32 },
    /// A reservation of `estimate`, then (if `reload`) a reload to that set, then settled
    /// at `actual` (`None`: dropped unsettled, which refunds the estimate).
    Reserve {
        client: usize,
        estimate: u32,
        actual: Option<u32>,
        reload: Option<usize>,
    },
    /// A reload to rule set `n`.
    Reload(usize),
    /// The clock moves on (skipped on a frozen clock).
    Advance(Nanos),
}

/// A trace: the rule sets it moves among (it starts under the first) and its steps.
#[derive(Clone)]
pub(crate) struct Trace {
    pub(crate) sets: Vec<Vec<TierSpec>>,
    pub(crate) steps: Vec<Step>,
    pub(crate) frozen: bool,
}

impl fmt::Debug for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "frozen: {}", self.frozen)?;
        for (i, set) in self.sets.iter().enumerate() {
            writeln!(f, "set {i}: {set:?}")?;
        }
        for (i, step) in self.steps.iter().enumerate() {
            writeln!(f, "{i}: {step:?}")?;
        }
        Ok(())
    }
}

fn tier_spec() -> impl Strategy<Value = TierSpec> {
    (0..KINDS.len(), 1u64..=40, 0..WINDOWS.len(), 0u64..=60).prop_map(
        |(kind, limit, window, extra)| {
            let kind = KINDS[kind];
            let extra = match kind {
                // A burst from 1 to twice the limit; a queue from 0 to the limit.
                AlgorithmKind::Gcra | AlgorithmKind::TokenBucket => 1 + extra % (2 * limit),
                AlgorithmKind::LeakyBucket => extra % (limit + 1),
                _ => 0,
            };
            TierSpec {
                kind,
                limit,
                window: WINDOWS[window],
                extra,
            }
        },
    )
}

/// Costs of checks: mostly small, sometimes above a tier's largest cost (an error both
/// stores must agree on), sometimes 0 (a probe).
fn cost() -> impl Strategy<Value = u32> {
    prop_oneof![4 => 1u32..=3, 2 => 0u32..=12, 1 => 10u32..=45]
}

fn step(sets: usize) -> impl Strategy<Value = Step> {
    let client = 0..CLIENTS.len();
    prop_oneof![
        8 => (client.clone(), cost()).prop_map(|(client, cost)| Step::Check { client, cost }),
        2 => (client.clone(), 0u32..=12).prop_map(|(client, cost)| Step::Refund { client, cost }),
        2 => (client.clone(), 0u32..=30).prop_map(|(client, cost)| Step::Charge { client, cost }),
        2 => (
            client,
            1u32..=10,
            prop::option::weighted(0.8, 0u32..=20),
            prop::option::weighted(0.5, 0..sets),
        )
            .prop_map(|(client, estimate, actual, reload)| Step::Reserve {
                client,
                estimate,
                actual,
                reload,
            }),
        2 => (0..sets).prop_map(Step::Reload),
        2 => prop_oneof![
            0u64..=2_000,
            0u64..=70_000,
        ]
        .prop_map(|ms| Step::Advance(Nanos::from_millis(ms))),
    ]
}

/// The most reloads an advancing trace makes: the in-process store keeps
/// `MAX_GENERATIONS` (4) old stores per tier, and at the reload past that carries the
/// oldest's live keys over, converted at the reload's instant, where Redis (and the
/// reference store) convert a key when a request next writes it. On a frozen clock both
/// instants are one; on an advancing clock a conversion at another instant answers
/// differently (a bucket's debt carried into a log at the reload stays a window long
/// instead of draining): a matter of the reload protocol (`policy/store/tier/generations.rs`), not of a
/// conversion rule, left to its rewrite.
pub(crate) const ADVANCING_RELOADS: usize = 4;

/// Traces of up to `steps` steps among 2 to 4 random rule sets of one or two tiers (an
/// advancing trace's reloads past [`ADVANCING_RELOADS`] left out).
pub(crate) fn trace(frozen: bool, steps: usize) -> impl Strategy<Value = Trace> {
    (1usize..=2)
        .prop_flat_map(|tiers| {
            prop::collection::vec(prop::collection::vec(tier_spec(), tiers), 2..=4)
        })
        .prop_flat_map(move |sets| {
            let n = sets.len();
            (Just(sets), prop::collection::vec(step(n), 1..=steps))
        })
        .prop_map(move |(sets, mut steps)| {
            if !frozen {
                let mut reloads = 0;
                steps.retain_mut(|step| match step {
                    Step::Reload(_) => {
                        reloads += 1;
                        reloads <= ADVANCING_RELOADS
                    }
                    Step::Reserve { reload, .. } => {
                        if reload.is_some() {
                            reloads += 1;
                            if reloads > ADVANCING_RELOADS {
                                *reload = None;
                            }
                        }
                        true
                    }
                    _ => true,
                });
            }
            Trace {
                sets,
                steps,
                frozen,
            }
        })
}

/// What the runner needs of a policy on some store (one trait over every store type).
pub(crate) trait Subject {
    /// A check of `cost` for `client`.
    fn trace_check(&self, client: &str, cost: u32) -> Result<PolicyDecision, InsufficientCapacity>;
    /// A refund of `cost`.
    fn trace_refund(&self, client: &str, cost: u32);
    /// A charge of `cost`.
    fn trace_charge(&self, client: &str, cost: u32);
    /// Reserves `estimate`, reloads to `reload` (if any) while it is held, then settles it
    /// at `actual` (`None`: drops it). The decision on the estimate, and the state
    /// `settle` reported.
    fn trace_reserve(
        &self,
        client: &str,
        estimate: u32,
        actual: Option<u32>,
        reload: Option<&PolicyConfig>,
    ) -> Reserved;
    /// A reload.
    fn trace_reload(&self, config: &PolicyConfig);
    /// The tiers in force, in order: (limit, largest cost, whether a leaky bucket).
    fn tiers_in_force(&self) -> Vec<(u64, u64, bool)>;
}

/// What a reservation step answered.
pub(crate) type Reserved = (
    Result<PolicyDecision, InsufficientCapacity>,
    Option<Result<PolicyDecision, InsufficientCapacity>>,
);

impl<S: Store> Subject for Policy<ManualClock, S> {
    fn trace_check(&self, client: &str, cost: u32) -> Result<PolicyDecision, InsufficientCapacity> {
        self.allow(client, "/", cost)
    }

    fn trace_refund(&self, client: &str, cost: u32) {
        Policy::refund(self, client, "/", cost)
    }

    fn trace_charge(&self, client: &str, cost: u32) {
        let request = tollgate::policy::Request::new(client, "/", cost);
        self.charge_at(&request, PolicyCheck::now(self));
    }

    fn trace_reserve(
        &self,
        client: &str,
        estimate: u32,
        actual: Option<u32>,
        reload: Option<&PolicyConfig>,
    ) -> Reserved {
        match PolicyCheck::reserve(self, client, "/", estimate) {
            Ok(reservation) => {
                let decision = Ok(reservation.decision().clone());
                if let Some(config) = reload {
                    Subject::trace_reload(self, config);
                }
                let settled = match actual {
                    Some(actual) => Some(reservation.settle(actual)),
                    None => {
                        drop(reservation);
                        None
                    }
                };
                (decision, settled)
            }
            Err(e) => {
                if let Some(config) = reload {
                    Subject::trace_reload(self, config);
                }
                (Err(e), None)
            }
        }
    }

    fn trace_reload(&self, config: &PolicyConfig) {
        self.reload(config.clone()).expect("valid rule set");
    }

    fn tiers_in_force(&self) -> Vec<(u64, u64, bool)> {
        let set = self.rule_set();
        set.rules()[0]
            .tiers()
            .iter()
            .map(|tier| {
                let leaky = matches!(
                    tier.algorithm(),
                    AnyAlgorithm::Packed(PackedAlgorithm::LeakyBucket(_))
                );
                (tier.algorithm().limit(), tier.max_cost(), leaky)
            })
            .collect()
    }
}

/// Counts over a replay, to show the traces exercise what they should.
#[derive(Copy, Clone, Debug, Default)]
pub(crate) struct Counts {
    pub(crate) admitted: u64,
    pub(crate) denied: u64,
    pub(crate) errors: u64,
    pub(crate) reloads: u64,
    pub(crate) reservations: u64,
    /// Admissions checked against the bound (frozen clock only).
    pub(crate) bounded: u64,
}

/// What each client has used net, per tier (the frozen-clock model).
struct Model {
    net: [[u64; 2]; 2],
}

impl Model {
    /// An admission of `cost` for `client`: checks the bound of every tier in force.
    fn admit(
        &mut self,
        client: usize,
        cost: u32,
        tiers: &[(u64, u64, bool)],
        at: usize,
        trace: &Trace,
    ) -> Result<(), TestCaseError> {
        for (t, &(limit, _, leaky)) in tiers.iter().enumerate() {
            let net = &mut self.net[client][t];
            let before = *net;
            *net += u64::from(cost);
            // A leaky bucket admits while its queue holds at most `limit − 1` (Q) before
            // the request; every other algorithm while the total stays within the limit.
            let within = if leaky { before < limit } else { *net <= limit };
            prop_assert!(
                within,
                "step {}: {} tier {} holds {} net after admitting {} under limit {} \
                 (more than the rule in force allows on top of what was used)\n{:?}",
                at,
                CLIENTS[client],
                TIERS[t],
                *net,
                cost,
                limit,
                trace
            );
        }
        Ok(())
    }

    fn refund(&mut self, client: usize, cost: u32, tiers: &[(u64, u64, bool)]) {
        for (t, &(_, max_cost, _)) in tiers.iter().enumerate() {
            let back = u64::from(cost).min(max_cost);
            let net = &mut self.net[client][t];
            *net = net.saturating_sub(back);
        }
    }

    fn charge(&mut self, client: usize, cost: u32, tiers: &[(u64, u64, bool)]) {
        for t in 0..tiers.len() {
            self.net[client][t] += u64::from(cost);
        }
    }
}

/// Replays `trace` on every policy in `subjects` (all built on `clock`, under the trace's
/// first rule set), asserting the answers identical and, on a frozen clock, the bound.
pub(crate) fn replay(
    trace: &Trace,
    clock: &ManualClock,
    subjects: &[&dyn Subject],
) -> Result<Counts, TestCaseError> {
    let configs: Vec<PolicyConfig> = trace.sets.iter().map(|s| rule_set(s)).collect();
    let mut model = Model { net: [[0; 2]; 2] };
    let mut counts = Counts::default();
    let first = subjects[0];
    for (at, step) in trace.steps.iter().enumerate() {
        match *step {
            Step::Check { client, cost } => {
                let tiers = first.tiers_in_force();
                let got: Vec<_> = subjects
                    .iter()
                    .map(|s| s.trace_check(CLIENTS[client], cost))
                    .collect();
                for (i, other) in got.iter().enumerate().skip(1) {
                    prop_assert_eq!(
                        other,
                        &got[0],
                        "step {}: store {} differs\n{:?}",
                        at,
                        i,
                        trace
                    );
                }
                match &got[0] {
                    Ok(d) if d.allowed() => {
                        counts.admitted += 1;
                        if trace.frozen && cost > 0 {
                            counts.bounded += 1;
                            model.admit(client, cost, &tiers, at, trace)?;
                        }
                    }
                    Ok(_) => counts.denied += 1,
                    Err(_) => counts.errors += 1,
                }
            }
            Step::Refund { client, cost } => {
                let tiers = first.tiers_in_force();
                for s in subjects {
                    s.trace_refund(CLIENTS[client], cost);
                }
                model.refund(client, cost, &tiers);
            }
            Step::Charge { client, cost } => {
                let tiers = first.tiers_in_force();
                for s in subjects {
                    s.trace_charge(CLIENTS[client], cost);
                }
                model.charge(client, cost, &tiers);
            }
            Step::Reserve {
                client,
                estimate,
                actual,
                reload,
            } => {
                let tiers = first.tiers_in_force();
                let config = reload.map(|n| &configs[n]);
                let got: Vec<Reserved> = subjects
                    .iter()
                    .map(|s| s.trace_reserve(CLIENTS[client], estimate, actual, config))
                    .collect();
                for (i, other) in got.iter().enumerate().skip(1) {
                    prop_assert_eq!(
                        other,
                        &got[0],
                        "step {}: store {} differs\n{:?}",
                        at,
                        i,
                        trace
                    );
                }
                counts.reservations += 1;
                counts.reloads += u64::from(reload.is_some());
                if matches!(&got[0].0, Ok(d) if d.allowed()) {
                    counts.admitted += 1;
                    if trace.frozen {
                        counts.bounded += 1;
                        model.admit(client, estimate, &tiers, at, trace)?;
                    }
                    // Settled (or dropped) under the set in force after the reload.
                    let after = first.tiers_in_force();
                    match actual {
                        Some(actual) if actual < estimate => {
                            model.refund(client, estimate - actual, &after)
                        }
                        Some(actual) => model.charge(client, actual - estimate, &after),
                        None => model.refund(client, estimate, &after),
                    }
                }
            }
            Step::Reload(n) => {
                for s in subjects {
                    s.trace_reload(&configs[n]);
                }
                counts.reloads += 1;
            }
            Step::Advance(by) => {
                if !trace.frozen {
                    clock.advance(by);
                }
            }
        }
    }
    Ok(counts)
}
