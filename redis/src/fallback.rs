//! [`PlanFallback`]: the in-process fallback that decides a
//! [`RedisStore`](super::RedisStore)'s plans while Redis is unreachable
//! ([`FailurePolicy::Fallback`](super::FailurePolicy::Fallback)), with a share of every
//! limit, per key, in the policy's own bounded keyed tables.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::stats::Counters;
use super::store::Mode;
use super::{BuildError, FailureCause};
use tollgate::policy::{Plan, Tier, TierOutcome, TierStore};
use tollgate::{AlgorithmConfig, Decision, Nanos};

/// `config` with `share` of its allowance (the core decides which fields scale).
fn scaled(config: &AlgorithmConfig, share: f64) -> AlgorithmConfig {
    // Parts per million: the share as an exact fraction for the core's integer scaling.
    const WHOLE: u64 = 1_000_000;
    // Truncation: the product is in 0..=WHOLE (NaN gives 0), and dropping the fraction is the
    // rounding down wanted.
    #[allow(clippy::cast_possible_truncation)]
    let parts = (share.clamp(0.0, 1.0) * WHOLE as f64) as u64;
    config.share(parts, WHOLE)
}

/// The most tier tables a [`PlanFallback`] keeps (one per tier and version met while Redis
/// was down); past it they are all dropped and built again on use.
const PLAN_FALLBACK_TABLES: usize = 64;

/// A [`RedisStore`](super::RedisStore)'s fallback: each tier of a plan decided in this
/// process with a share of its limit, in a bounded lock-free keyed table of its own (the
/// in-process store's tables), built on the tier's first use while Redis is down.
///
/// A tier it cannot decide (its scaled rule does not build, or its table cannot be made)
/// is never skipped: it denies (retry after the store's backoff, when Redis is tried
/// again), counted in [`RedisStats::fallback_failures`](super::RedisStats::fallback_failures)
/// as [`FailureCause::FallbackUnavailable`].
#[derive(Debug)]
pub(crate) struct PlanFallback {
    share: f64,
    capacity: usize,
    /// The `retry_after` of a tier it cannot decide.
    retry: Nanos,
    /// By the tier's names ([`Tier::names`]) and version: tiers of the same numbers in other
    /// rules are other limits (their keys' fingerprints coincide: a client's, or a global
    /// rule's one key), so they never share a table.
    tables: Mutex<HashMap<(u64, u64), Arc<TierStore>>>,
}

impl PlanFallback {
    /// A fallback granting `share` of every limit, for up to `capacity` keys per tier,
    /// denying a tier it cannot decide with `retry`; a [`BuildError::OutOfRange`] if no
    /// table of `capacity` keys can be built (the tables are allocated on first use, but
    /// their shape is checked now).
    pub(crate) fn new(
        share: f64,
        capacity: usize,
        retry: Nanos,
    ) -> Result<PlanFallback, BuildError> {
        let out = BuildError::OutOfRange {
            setting: "fallback_keys",
            range: "1..=2^26 keys per tier",
        };
        // Any rule: a table's shape depends on its capacity alone.
        let probe = AlgorithmConfig::FixedWindow {
            limit: 1,
            window: Nanos::from_secs(1),
        }
        .build()
        .map_err(|_| out.clone())?;
        TierStore::new(probe, capacity).map_err(|_| out)?;
        Ok(PlanFallback {
            share,
            capacity,
            retry,
            tables: Mutex::new(HashMap::new()),
        })
    }

    /// A fallback whose capacity is not checked (unit tests of the failure path).
    #[cfg(test)]
    fn unchecked(share: f64, capacity: usize, retry: Nanos) -> PlanFallback {
        PlanFallback {
            share,
            capacity,
            retry,
            tables: Mutex::new(HashMap::new()),
        }
    }

    /// The table of `tier` (by names and version), built on first use; `None` if its scaled
    /// rule or its table cannot be built.
    fn table(&self, tier: &Tier) -> Option<Arc<TierStore>> {
        let id = (tier.names(), tier.version());
        let mut tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(table) = tables.get(&id) {
            return Some(Arc::clone(table));
        }
        if tables.len() >= PLAN_FALLBACK_TABLES {
            tables.clear();
        }
        // Scaling down can make a valid config invalid (a window too long for a limit of
        // 1): the tier is then not decided here (never decided with its whole limit).
        let algorithm = scaled(tier.config(), self.share).build().ok()?;
        let table = Arc::new(TierStore::new(algorithm, self.capacity).ok()?);
        tables.insert(id, Arc::clone(&table));
        Some(table)
    }

    /// Runs `op` on the plan's tiers `tiers` at `now`, writing their decisions (for the
    /// deciding operations) into `outcomes`; whether every tier admitted. A tier it cannot
    /// decide denies, counted in `counters`.
    pub(crate) fn run(
        &self,
        plan: &Plan<'_>,
        tiers: &[usize],
        op: Mode,
        now: Nanos,
        outcomes: &mut [TierOutcome],
        counters: &Counters,
    ) -> bool {
        let mut taken = Vec::with_capacity(tiers.len());
        let mut all = true;
        for &i in tiers {
            let Some(p) = plan.get(i) else { continue };
            let Some(table) = self.table(p.tier) else {
                Counters::bump(&counters.fallback_failures);
                counters.failed(FailureCause::FallbackUnavailable);
                if matches!(op, Mode::Check | Mode::Peek | Mode::PeekDenied) {
                    all = false;
                    let limit = p.tier.algorithm().limit();
                    outcomes[i].decision = Decision::deny(limit, 0, self.retry, self.retry);
                }
                continue;
            };
            let refuse = || deny_all(table.algorithm().limit());
            let decision = match op {
                Mode::Check => match table.take(p.key, now, p.cost) {
                    Ok((decision, receipt)) => {
                        if let Some(receipt) = receipt {
                            taken.push((p.key, receipt, p.cost, Arc::clone(&table)));
                        }
                        decision
                    }
                    Err(_) => refuse(),
                },
                Mode::Peek | Mode::PeekDenied => {
                    table.peek(p.key, now, p.cost).unwrap_or_else(|_| refuse())
                }
                Mode::Charge => {
                    table.charge(p.key, now, p.cost);
                    continue;
                }
                Mode::Reset => {
                    table.reset(p.key);
                    continue;
                }
                // Not asked for: a refund Redis did not take is not given back to the
                // local share (which errs on the strict side).
                Mode::Refund => continue,
            };
            all &= decision.allowed;
            outcomes[i].decision = decision;
        }
        if (op == Mode::Check && !all) || op == Mode::PeekDenied {
            for (key, receipt, cost, table) in taken {
                table.compensate(key, receipt, cost, now);
            }
            // The request did not count: admitting tiers report their current state.
            for &i in tiers {
                if let (Some(p), true) = (plan.get(i), outcomes[i].decision.allowed) {
                    if let Some(Ok(current)) = self.table(p.tier).map(|t| t.peek(p.key, now, 0)) {
                        outcomes[i].decision = current;
                    }
                }
            }
        }
        all
    }
}

/// A scaled limit smaller than the cost: this process alone cannot admit it while
/// degraded.
fn deny_all(limit: u64) -> Decision {
    Decision::deny(limit, 0, Nanos::MAX, Nanos::MAX)
}

#[cfg(test)]
mod tests {
    use super::PlanFallback;
    use crate::stats::Counters;
    use crate::FailureCause;
    use tollgate::policy::{Op, Plan, Policy, Store, TierOutcome};
    use tollgate::{InsufficientCapacity, ManualClock, Nanos};

    /// A store that decides every plan by a fallback alone (as a Redis store does while
    /// Redis is down).
    #[derive(Debug)]
    struct Down {
        fallback: PlanFallback,
        counters: Counters,
    }

    impl Store for Down {
        fn run(
            &self,
            op: Op,
            plan: &Plan<'_>,
            now: Nanos,
            outcomes: &mut [TierOutcome],
        ) -> Result<(), InsufficientCapacity> {
            let tiers: Vec<usize> = (0..plan.len()).collect();
            self.fallback
                .run(plan, &tiers, op.into(), now, outcomes, &self.counters);
            Ok(())
        }
    }

    const RULES: &str = r#"
        [[rules]]
        name = "r"
        tiers = [
            { name = "second", limit = 5, window = "1s" },
            { name = "hour", limit = 100, window = "1h", algorithm = "fixed_window" },
        ]
    "#;

    /// A fallback that cannot build its tables (a capacity the build checks would refuse)
    /// never skips a tier: every tier it cannot decide denies, with the retry it was
    /// given, counted as a fallback failure; nothing is admitted.
    #[test]
    fn a_tier_whose_table_cannot_be_built_denies_and_is_counted() {
        let retry = Nanos::from_millis(100);
        let store = Down {
            fallback: PlanFallback::unchecked(1.0, usize::MAX, retry),
            counters: Counters::default(),
        };
        let policy = Policy::from_toml(RULES, ManualClock::new())
            .unwrap()
            .store(store);
        for _ in 0..20 {
            let d = policy.allow("c", "/", 1).unwrap();
            assert!(!d.allowed());
            for tier in d.tiers() {
                assert!(!tier.decision.allowed);
                assert_eq!(tier.decision.retry_after, retry);
            }
        }
        let stats = policy.backend().counters.snapshot();
        assert_eq!(stats.fallback_failures, 40);
        assert_eq!(stats.last_failure, Some(FailureCause::FallbackUnavailable));
        // A capacity no table can have is refused when the fallback is built.
        assert!(PlanFallback::new(1.0, usize::MAX, retry).is_err());
        // A sound one decides: five a second.
        let store = Down {
            fallback: PlanFallback::new(1.0, 1_000, retry).unwrap(),
            counters: Counters::default(),
        };
        let policy = Policy::from_toml(RULES, ManualClock::new())
            .unwrap()
            .store(store);
        let admitted = (0..20)
            .filter(|_| policy.allow("c", "/", 1).unwrap().allowed())
            .count();
        assert_eq!(admitted, 5);
        assert_eq!(policy.backend().counters.snapshot().fallback_failures, 0);
    }
}
