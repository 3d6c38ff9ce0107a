//! Shared support of the Redis tests: real servers and the shared vectors.
#![allow(dead_code)]

pub mod server;
pub mod vectors;

use std::time::Duration;

use tollgate::redis::{RedisConfig, RedisLimiter, RedisRule, RedisTarget};
use tollgate::AlgorithmConfig;

/// A limiter for replaying vectors: client time, no deny cache, TTLs padded by an hour so
/// real time passing during the test never expires logical state early.
pub fn vector_limiter(
    target: RedisTarget,
    prefix: &str,
    rules: &[(&str, AlgorithmConfig)],
) -> RedisLimiter {
    let rules = rules
        .iter()
        .map(|(name, config)| RedisRule::new(*name, *config).expect("valid rule"))
        .collect();
    let config = RedisConfig::new(prefix)
        .expect("prefix")
        .with_deny_cache(0)
        .with_timeout(Duration::from_secs(10))
        .with_connect_timeout(Duration::from_secs(5))
        .with_ttl_slack(Duration::from_secs(3600));
    RedisLimiter::new(target, rules, config).expect("limiter")
}
