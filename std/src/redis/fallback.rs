//! [`Fallback`]: the in-process limiter that decides while Redis is unreachable
//! ([`FailurePolicy::Fallback`](super::FailurePolicy::Fallback)), with a share of every
//! rule's limit, per key, in bounded memory.

use std::collections::HashMap;
use std::sync::Mutex;

use super::RedisRule;
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
