//! `Policy::limited` on a [`RedisStore`] (a real redis-server on loopback): the store's
//! `SCAN` of its prefix lists the clients limited by any process on the same Redis, each
//! peeked under the rules in force — exactly the limited ones, none of another prefix or of
//! a global rule, none after a reset or once the window has passed — bounded by the keys
//! examined and the clients answered; a Redis that does not answer is an error, not an
//! empty list.

mod redis_support;

use std::time::Duration;

use redis_support::server::RedisServer;
use tollgate::policy::{LimitedClients, ListBounds, Policy};
use tollgate::{ManualClock, Nanos};
use tollgate_redis::{RedisConfig, RedisStore, RedisTarget, TimeSource};

const RULES: &str = r#"
    [[rules]]
    name = "default"
    limit = 2
    window = "1m"

    [[rules]]
    name = "search"
    endpoint = "/search"
    [[rules.tiers]]
    name = "burst"
    limit = 1
    window = "1s"
    [[rules.tiers]]
    name = "daily"
    limit = 100
    window = "1d"

    [[rules]]
    name = "everyone"
    endpoint = "/shared"
    per = "global"
    limit = 1
    window = "1m"
"#;

/// A policy on `server` under `prefix`, deciding on `clock`'s time (the client's: no
/// deny cache, TTLs padded by an hour so real time never expires logical state).
fn policy(
    server: &RedisServer,
    prefix: &str,
    clock: &ManualClock,
) -> Policy<ManualClock, RedisStore> {
    let config = RedisConfig::new(prefix)
        .unwrap()
        .with_time_source(TimeSource::Client)
        .with_deny_cache(0)
        .with_timeout(Duration::from_secs(5))
        .with_connect_timeout(Duration::from_secs(5))
        .with_ttl_slack(Duration::from_secs(3600));
    let store = RedisStore::new(RedisTarget::Single(server.url()), config).unwrap();
    Policy::from_toml(RULES, clock.clone())
        .unwrap()
        .store(store)
}

/// (rule, client, the denying tier's name, its remaining) of each client listed.
fn listed(limited: &LimitedClients) -> Vec<(String, String, String, u64)> {
    limited
        .clients
        .iter()
        .map(|c| {
            let denier = c
                .decision
                .tiers()
                .iter()
                .find(|t| !t.decision.allowed)
                .expect("a listed client has a denying tier");
            (
                c.rule.clone(),
                c.client.clone(),
                denier.name().to_owned(),
                denier.decision.remaining,
            )
        })
        .collect()
}

fn pair(rule: &str, client: &str, tier: &str) -> (String, String, String, u64) {
    (rule.into(), client.into(), tier.into(), 0)
}

#[test]
fn the_scan_lists_the_clients_another_process_limited() {
    let server = RedisServer::start();
    let clock = ManualClock::starting_at(Nanos::from_secs(1_700_000_000));
    let traffic = policy(&server, "list", &clock);
    // Another process on the same Redis, which denied no one itself: its record is empty,
    // so only the store's scan can find them.
    let admin = policy(&server, "list", &clock).with_limited_record(0);
    // Another prefix's limited client is not this fleet's.
    let other = policy(&server, "other", &clock);
    for _ in 0..3 {
        traffic.allow("alice", "/", 1).unwrap();
        other.allow("zed", "/", 1).unwrap();
    }
    for _ in 0..2 {
        traffic.allow("bob", "/search", 1).unwrap();
        traffic.allow("dave", "/shared", 1).unwrap();
    }
    // Clients whose names the key escapes or hashes are read back whole.
    for client in ["c:{x}", "", "@"] {
        for _ in 0..3 {
            traffic.allow(client, "/", 1).unwrap();
        }
    }
    traffic.allow("carol", "/", 1).unwrap();

    let limited = admin.limited(ListBounds::new(100)).unwrap();
    assert!(limited.complete);
    assert_eq!(
        listed(&limited),
        [
            pair("default", "", "default"),
            pair("default", "@", "default"),
            pair("default", "alice", "default"),
            pair("default", "c:{x}", "default"),
            pair("search", "bob", "burst"),
        ]
    );
    let bob = &limited.clients[4];
    assert_eq!(bob.decision.tiers().len(), 2);
    assert!(bob.decision.retry_after() > Nanos::ZERO);
    // The process that denied them answers the same, awaited too.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let awaited = runtime
        .block_on(traffic.limited_async(ListBounds::new(100)))
        .unwrap();
    assert_eq!(listed(&awaited), listed(&limited));

    // Bounded: by the clients answered...
    let two = admin.limited(ListBounds::new(2)).unwrap();
    assert_eq!(listed(&two), listed(&limited)[..2]);
    assert!(!two.complete);
    // ...and by the keys examined (a scan of one key at most: not complete).
    let one_key = admin
        .limited(ListBounds::new(100).with_max_keys(1))
        .unwrap();
    assert!(!one_key.complete);

    // A reset client is no longer listed; once the window has passed, no one is.
    admin.reset("alice", "/");
    let after_reset = admin.limited(ListBounds::new(100)).unwrap();
    assert_eq!(after_reset.clients.len(), 4);
    assert!(!listed(&after_reset).contains(&pair("default", "alice", "default")));
    clock.advance(Nanos::from_secs(61));
    let later = admin.limited(ListBounds::new(100)).unwrap();
    assert!(later.clients.is_empty() && later.complete, "{later:?}");
}

#[test]
fn a_redis_that_does_not_answer_is_an_error() {
    let mut server = RedisServer::start();
    let clock = ManualClock::starting_at(Nanos::from_secs(1_700_000_000));
    let policy = policy(&server, "down", &clock);
    for _ in 0..3 {
        policy.allow("alice", "/", 1).unwrap();
    }
    assert_eq!(
        policy.limited(ListBounds::new(10)).unwrap().clients.len(),
        1
    );
    server.kill();
    let error = policy.limited(ListBounds::new(10)).unwrap_err();
    assert!(!error.reason().is_empty(), "{error}");
}
