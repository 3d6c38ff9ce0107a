//! The same rules across a fleet: every process running this against one Redis shares the
//! limits; hot keys are served from leases each process holds. Needs a redis-server:
//! `cargo run -p tollgate-redis --example fleet [RULES_FILE] [REDIS_URL]`
use tollgate::{policy::Policy, MonotonicClock};
use tollgate_redis::{LeaseConfig, LeasedStore, RedisConfig, RedisStore, RedisTarget};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let rules = std::fs::read_to_string(args.next().unwrap_or_else(|| "rules.toml".into()))?;
    let url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    // `RedisTarget::Cluster(urls)` for a Redis Cluster.
    let redis = RedisStore::new(RedisTarget::Single(url), RedisConfig::new("api")?)?;
    // A process holds at most 500 permits of a hot key: the fleet's overshoot bound.
    let leases = LeaseConfig::new().with_max_lease(500).with_share(0.05);
    let policy =
        Policy::from_toml(&rules, MonotonicClock::new())?.store(LeasedStore::new(redis, leases)?);

    let decision = policy.allow("customer-42", "/search", 1)?;
    println!(
        "allowed: {}, remaining: {}",
        decision.allowed(),
        decision.remaining()
    );
    Ok(())
}
