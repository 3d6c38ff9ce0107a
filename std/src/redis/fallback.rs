//! The in-process fallbacks that decide while Redis is unreachable
//! ([`FailurePolicy::Fallback`](super::FailurePolicy::Fallback)), with a share of every
//! limit, per key, in bounded memory: [`Fallback`] for a limiter's flat rules, and
//! [`PlanFallback`] for a [`RedisStore`](super::RedisStore)'s plans, in the policy's own
//! bounded keyed tables.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::RedisRule;
use crate::policy::{Plan, Tier, TierOutcome, TierStore};
use crate::{
    Algorithm, AlgorithmConfig, AnyAlgorithm, Decision, LogRing, Nanos, PackedAlgorithm,
    SlidingWindowLog,
};

/// Ring capacity of a sliding window log tier in the fallback: a scaled log limit above it
/// is enforced as this (stricter, never looser).
pub(crate) const FALLBACK_LOG_RING: usize = 256;

/// One rule, scaled.
#[derive(Debug)]
enum LocalRule {
    Packed(PackedAlgorithm),
    Log(SlidingWindowLog),
}

/// One key's state for one rule.
#[derive(Debug)]
enum LocalState {
    Word(u64),
    Ring(Box<LogRing<FALLBACK_LOG_RING>>),
}

/// Scaled rules plus a bounded map of key states, behind one lock (this is the degraded
/// path; a check holds the lock for the few nanoseconds of its transitions).
#[derive(Debug)]
pub(crate) struct Fallback {
    rules: Vec<LocalRule>,
    keys: Mutex<HashMap<String, Vec<LocalState>>>,
    capacity: usize,
}

/// `config` with `share` of its allowance (the core decides which fields scale), a log's
/// limit capped at the fallback's ring.
fn scaled(config: &AlgorithmConfig, share: f64) -> AlgorithmConfig {
    // Parts per million: the share as an exact fraction for the core's integer scaling.
    const WHOLE: u64 = 1_000_000;
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
                table.compensate(key, receipt, cost);
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

impl Fallback {
    pub(crate) fn new(rules: &[RedisRule], share: f64, capacity: usize) -> Fallback {
        let rules = rules
            .iter()
            .map(|rule| {
                // Scaling down cannot make a valid config invalid; keep the original if it
                // somehow does.
                let algorithm = scaled(rule.config(), share)
                    .build()
                    .unwrap_or(*rule.algorithm());
                match algorithm {
                    AnyAlgorithm::Packed(a) => LocalRule::Packed(a),
                    // The ring enforces at most its capacity (stricter, never looser).
                    AnyAlgorithm::Log(log) => LocalRule::Log(log),
                }
            })
            .collect();
        Fallback {
            rules,
            keys: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
        }
    }

    fn fresh(&self) -> Vec<LocalState> {
        self.rules
            .iter()
            .map(|rule| match rule {
                LocalRule::Packed(_) => LocalState::Word(0),
                LocalRule::Log(_) => LocalState::Ring(Box::new(LogRing::new())),
            })
            .collect()
    }

    fn limit(rule: &LocalRule) -> u64 {
        match rule {
            LocalRule::Packed(a) => a.limit(),
            LocalRule::Log(log) => log.limit().min(FALLBACK_LOG_RING as u64),
        }
    }

    /// Decides every tier for `key` at local time `now`, all or nothing.
    /// The fraction of quota left on a key's most-used tier at `now` (1: fresh).
    fn headroom(&self, states: &[LocalState], now: Nanos) -> f64 {
        states
            .iter()
            .zip(&self.rules)
            .map(|(state, rule)| {
                let decision = match (state, rule) {
                    (LocalState::Word(s), LocalRule::Packed(a)) => {
                        a.peek(*s, now, 0).map(|o| o.decision)
                    }
                    (LocalState::Ring(ring), LocalRule::Log(log)) => ring.peek_at(log, now, 0),
                    (LocalState::Word(_), LocalRule::Log(_))
                    | (LocalState::Ring(_), LocalRule::Packed(_)) => return 1.0,
                };
                decision.map_or(0.0, |d| d.remaining as f64 / d.limit.max(1) as f64)
            })
            .fold(1.0, f64::min)
    }

    pub(crate) fn check(&self, key: &str, cost: u32, now: u64) -> Vec<Decision> {
        let now = Nanos::new(now);
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        if !keys.contains_key(key) && keys.len() >= self.capacity {
            // Bounded memory: forget idle keys first (lossless), then anything.
            keys.retain(|_, states| {
                !states
                    .iter()
                    .zip(&self.rules)
                    .all(|(state, rule)| match (state, rule) {
                        (LocalState::Word(s), LocalRule::Packed(a)) => a.is_idle(*s, now),
                        (LocalState::Ring(ring), LocalRule::Log(log)) => ring.is_idle(log, now),
                        // `fresh` pairs each rule with its state.
                        (LocalState::Word(_), LocalRule::Log(_))
                        | (LocalState::Ring(_), LocalRule::Packed(_)) => true,
                    })
            });
            if keys.len() >= self.capacity {
                // Every key is limiting: forget the one closest to fresh (the most quota
                // left on its most-used tier), so no other client is reset. One scan of a
                // bounded map, on the degraded path only.
                let victim = keys
                    .iter()
                    .map(|(key, states)| (self.headroom(states, now), key))
                    .max_by(|a, b| a.0.total_cmp(&b.0))
                    .map(|(_, key)| key.clone());
                if let Some(victim) = victim {
                    keys.remove(&victim);
                }
            }
        }
        let states = keys.entry(key.to_owned()).or_insert_with(|| self.fresh());
        let mut decisions = Vec::with_capacity(self.rules.len());
        let mut nexts = Vec::with_capacity(self.rules.len());
        for (state, rule) in states.iter().zip(&self.rules) {
            let (decision, next) = match (state, rule) {
                (LocalState::Word(s), LocalRule::Packed(a)) => match a.decide(*s, now, cost) {
                    Ok(outcome) => (outcome.decision, outcome.next),
                    Err(_) => (deny_all(Self::limit(rule)), None),
                },
                (LocalState::Ring(ring), LocalRule::Log(log)) => {
                    match ring.peek_at(log, now, cost) {
                        Ok(d) => (d, None),
                        Err(_) => (deny_all(Self::limit(rule)), None),
                    }
                }
                (LocalState::Word(_), LocalRule::Log(_))
                | (LocalState::Ring(_), LocalRule::Packed(_)) => {
                    (deny_all(Self::limit(rule)), None)
                }
            };
            decisions.push(decision);
            nexts.push(next);
        }
        if decisions.iter().all(|d| d.allowed) {
            for ((state, rule), next) in states.iter_mut().zip(&self.rules).zip(nexts) {
                match (state, rule) {
                    (LocalState::Word(s), LocalRule::Packed(_) | LocalRule::Log(_)) => {
                        if let Some(next) = next {
                            *s = next;
                        }
                    }
                    (LocalState::Ring(ring), LocalRule::Log(log)) => {
                        // Under the map lock nothing changed since the peek: same answer.
                        let _ = ring.check_at(log, now, cost);
                    }
                    (LocalState::Ring(_), LocalRule::Packed(_)) => {}
                }
            }
        }
        decisions
    }
}

/// A scaled limit smaller than the cost: this process alone cannot admit it while
/// degraded.
fn deny_all(limit: u64) -> Decision {
    Decision::deny(limit, 0, Nanos::MAX, Nanos::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full fallback forgets the key closest to fresh, not every key: the exhausted
    /// client stays denied (clearing the map, as before, admitted it again).
    #[test]
    fn a_full_fallback_evicts_the_key_closest_to_fresh_only() {
        let rule = RedisRule::new(
            "r",
            AlgorithmConfig::FixedWindow {
                limit: 10,
                window: Nanos::from_secs(60),
            },
        )
        .unwrap();
        let fallback = Fallback::new(&[rule], 1.0, 2);
        let now = 1_000;
        for _ in 0..10 {
            assert!(fallback.check("abuser", 1, now)[0].allowed);
        }
        assert!(fallback.check("light", 1, now)[0].allowed);
        // Full: "newcomer" pushes out "light" (9 of 10 left), not "abuser" (none left).
        assert!(fallback.check("newcomer", 1, now)[0].allowed);
        assert!(!fallback.check("abuser", 1, now)[0].allowed);
        assert_eq!(fallback.keys.lock().unwrap().len(), 2);
    }
}
