//! [`PlanFallback`]: the in-process fallback that decides a
//! [`RedisStore`](super::RedisStore)'s plans while Redis is unreachable
//! ([`FailurePolicy::Fallback`](super::FailurePolicy::Fallback)), with a share of every
//! limit, per key, in the policy's own bounded keyed tables.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::policy::{Plan, Tier, TierOutcome, TierStore};
use crate::{AlgorithmConfig, Decision, Nanos};

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

/// The most tier tables a [`PlanFallback`] keeps (one per tier version met while Redis was
/// down); past it they are all dropped and built again on use.
const PLAN_FALLBACK_TABLES: usize = 64;

/// What a [`PlanFallback`] is asked to do with some tiers of a plan.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum LocalOp {
    /// Decide, record all or nothing.
    Check,
    /// Decide, record nothing.
    Peek,
    /// Decide, record nothing, admitting tiers reported at cost 0.
    PeekDenied,
    /// Record whatever the limits say.
    Charge,
}

/// A [`RedisStore`](super::RedisStore)'s fallback: each tier of a plan decided in this
/// process with a share of its limit, in a bounded lock-free keyed table of its own (the
/// in-process store's tables), built on the tier's first use while Redis is down.
#[derive(Debug)]
pub(crate) struct PlanFallback {
    share: f64,
    capacity: usize,
    tables: Mutex<HashMap<u64, Arc<TierStore>>>,
}

impl PlanFallback {
    /// A fallback granting `share` of every limit, for up to `capacity` keys per tier.
    pub(crate) fn new(share: f64, capacity: usize) -> PlanFallback {
        PlanFallback {
            share,
            capacity: capacity.max(1),
            tables: Mutex::new(HashMap::new()),
        }
    }

    /// The table of `tier` (by version), built on first use.
    fn table(&self, tier: &Tier) -> Option<Arc<TierStore>> {
        let mut tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(table) = tables.get(&tier.version()) {
            return Some(Arc::clone(table));
        }
        if tables.len() >= PLAN_FALLBACK_TABLES {
            tables.clear();
        }
        // Scaling down cannot make a valid config invalid; keep the tier's own if it does.
        let algorithm = scaled(tier.config(), self.share)
            .build()
            .unwrap_or(*tier.algorithm());
        let table = Arc::new(TierStore::new(algorithm, self.capacity).ok()?);
        tables.insert(tier.version(), Arc::clone(&table));
        Some(table)
    }

    /// Runs `op` on the plan's tiers `tiers` at `now`, writing their decisions (for the
    /// deciding operations) into `outcomes`; whether every tier admitted.
    pub(crate) fn run(
        &self,
        plan: &Plan<'_>,
        tiers: &[usize],
        op: LocalOp,
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) -> bool {
        let planned = tiers
            .iter()
            .filter_map(|&i| Some((i, plan.get(i)?, self.table(plan.get(i)?.tier)?)));
        let mut taken = Vec::with_capacity(tiers.len());
        let mut all = true;
        for (i, p, table) in planned {
            let refuse = || deny_all(table.algorithm().limit());
            let decision = match op {
                LocalOp::Check => match table.take(p.key, now, p.cost) {
                    Ok((decision, receipt)) => {
                        if let Some(receipt) = receipt {
                            taken.push((p.key, receipt, p.cost, Arc::clone(&table)));
                        }
                        decision
                    }
                    Err(_) => refuse(),
                },
                LocalOp::Peek | LocalOp::PeekDenied => {
                    table.peek(p.key, now, p.cost).unwrap_or_else(|_| refuse())
                }
                LocalOp::Charge => {
                    table.charge(p.key, now, p.cost);
                    continue;
                }
            };
            all &= decision.allowed;
            outcomes[i].decision = decision;
        }
        if (op == LocalOp::Check && !all) || op == LocalOp::PeekDenied {
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
