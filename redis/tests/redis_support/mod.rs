//! Shared support of the Redis tests: real servers and the shared vectors.
#![allow(dead_code)]

pub(crate) mod server;
pub(crate) mod vectors;

use std::time::Duration;

use tollgate::policy::{AlgorithmKind, Policy, PolicyConfig, RuleConfig, TierConfig};
use tollgate::{AlgorithmConfig, ManualClock, Nanos};
use tollgate_redis::{RedisConfig, RedisStore, RedisTarget, TimeSource};

/// The tier that compiles to exactly `config` (the policy's `limit` / `window` / `burst` /
/// `queue` per algorithm, the window in ns).
pub(crate) fn tier_of(name: &str, config: AlgorithmConfig) -> TierConfig {
    let ns = |n: Nanos| format!("{}ns", n.as_u64());
    let tier = match config {
        AlgorithmConfig::Gcra {
            limit,
            period,
            burst,
        } => TierConfig::new(limit, &ns(period)).burst(burst),
        AlgorithmConfig::TokenBucket {
            capacity,
            refill_amount,
            refill_period,
        } => TierConfig::new(refill_amount, &ns(refill_period))
            .algorithm(AlgorithmKind::TokenBucket)
            .burst(capacity),
        AlgorithmConfig::LeakyBucket {
            amount,
            period,
            queue,
        } => TierConfig::new(amount, &ns(period))
            .algorithm(AlgorithmKind::LeakyBucket)
            .queue(queue),
        AlgorithmConfig::FixedWindow { limit, window } => {
            TierConfig::new(limit, &ns(window)).algorithm(AlgorithmKind::FixedWindow)
        }
        AlgorithmConfig::SlidingWindowCounter { limit, window } => {
            TierConfig::new(limit, &ns(window)).algorithm(AlgorithmKind::SlidingWindowCounter)
        }
        AlgorithmConfig::SlidingWindowLog { limit, window } => {
            TierConfig::new(limit, &ns(window)).algorithm(AlgorithmKind::SlidingWindowLog)
        }
        other => panic!("no tier compiles to {other:?}"),
    };
    tier.named(name)
}

/// One rule, `tiers` in order, for every client.
pub(crate) fn one_rule(tiers: &[(&str, AlgorithmConfig)]) -> PolicyConfig {
    let rule = tiers
        .iter()
        .fold(RuleConfig::new("r"), |rule, (name, config)| {
            rule.tier(tier_of(name, *config))
        });
    PolicyConfig::default().rule(rule)
}

/// The configuration of a store replaying vectors: the policy's (manual) time decides, no
/// deny cache, TTLs padded by an hour so real time passing during the test never expires
/// logical state early.
pub(crate) fn vector_config(prefix: &str) -> RedisConfig {
    RedisConfig::new(prefix)
        .expect("prefix")
        .with_time_source(TimeSource::Client)
        .with_deny_cache(0)
        .with_timeout(Duration::from_secs(10))
        .with_connect_timeout(Duration::from_secs(5))
        .with_ttl_slack(Duration::from_secs(3600))
}

/// A policy of one rule with `tiers` on a store replaying vectors ([`vector_config`]).
pub(crate) fn vector_policy(
    target: RedisTarget,
    prefix: &str,
    tiers: &[(&str, AlgorithmConfig)],
) -> Policy<ManualClock, RedisStore> {
    let store = RedisStore::new(target, vector_config(prefix)).expect("store");
    Policy::new(one_rule(tiers), ManualClock::new())
        .expect("valid tiers")
        .store(store)
}
