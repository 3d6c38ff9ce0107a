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

fn scale(value: u64, share: f64) -> u64 {
    ((value as f64 * share) as u64).clamp(1, value.max(1))
}

/// `config` with every amount scaled by `share` (at least 1; a queue may reach 0).
fn scaled(config: &AlgorithmConfig, share: f64) -> AlgorithmConfig {
    match *config {
        AlgorithmConfig::Gcra {
            limit,
            period,
            burst,
        } => AlgorithmConfig::Gcra {
            limit: scale(limit, share),
            period,
            burst: scale(burst, share),
        },
        AlgorithmConfig::TokenBucket {
            capacity,
            refill_amount,
            refill_period,
        } => AlgorithmConfig::TokenBucket {
            capacity: scale(capacity, share),
            refill_amount: scale(refill_amount, share),
            refill_period,
        },
        AlgorithmConfig::LeakyBucket {
            amount,
            period,
            queue,
        } => AlgorithmConfig::LeakyBucket {
            amount: scale(amount, share),
            period,
            queue: (queue as f64 * share) as u64,
        },
        AlgorithmConfig::FixedWindow { limit, window } => AlgorithmConfig::FixedWindow {
            limit: scale(limit, share),
            window,
        },
        AlgorithmConfig::SlidingWindowCounter { limit, window } => {
            AlgorithmConfig::SlidingWindowCounter {
                limit: scale(limit, share),
                window,
            }
        }
        AlgorithmConfig::SlidingWindowLog { limit, window } => AlgorithmConfig::SlidingWindowLog {
            limit: scale(limit, share).min(FALLBACK_LOG_RING as u64),
            window,
        },
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
                        _ => true,
                    })
            });
            if keys.len() >= self.capacity {
                keys.clear();
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
                _ => (deny_all(Self::limit(rule)), None),
            };
            decisions.push(decision);
            nexts.push(next);
        }
        if decisions.iter().all(|d| d.allowed) {
            for ((state, rule), next) in states.iter_mut().zip(&self.rules).zip(nexts) {
                match (state, rule) {
                    (LocalState::Word(s), _) => {
                        if let Some(next) = next {
                            *s = next;
                        }
                    }
                    (LocalState::Ring(ring), LocalRule::Log(log)) => {
                        // Under the map lock nothing changed since the peek: same answer.
                        let _ = ring.check_at(log, now, cost);
                    }
                    _ => {}
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
