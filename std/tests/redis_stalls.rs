//! Stalls (`SIGSTOP` … `SIGCONT` of a real `redis-server`): a call the store has given up on
//! never changes Redis' state when the server resumes and runs it late. The calls sent
//! while the server is frozen wait in its socket buffer; each carries a deadline in the
//! server's clock, and the script refuses it once that has passed (issue 27, item 2).
//!
//! - a fail-closed daily quota: the checks a client sends during a 3 s stall are all
//!   answered by the failure policy, and after the stall the client still has every permit
//!   it had before (by `FCALL`, by `EVALSHA`, and on the frozen master of a 3-master
//!   cluster);
//! - a leased store hammered through a stall: what Redis records is exactly what the
//!   process admitted, plus what it lost (counted in its stats).
#![cfg(feature = "redis")]

mod redis_support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis_support::server::{RedisCluster, RedisServer};
use tollgate::policy::Policy;
use tollgate::redis::{
    FailurePolicy, LeaseConfig, LeasedStore, RedisConfig, RedisStore, RedisTarget,
};
use tollgate::MonotonicClock;

/// The per-check timeout: far below the stall.
const TIMEOUT: Duration = Duration::from_millis(300);
/// How long the server is frozen (below the cluster's node timeout of 5 s, so that the
/// cluster does not mark the frozen master as failed).
const STALL: Duration = Duration::from_secs(3);
/// Far above anything the store should need once Redis is back.
const HANG: Duration = Duration::from_secs(20);

/// A daily quota of 10 000 tokens per client (GCRA, all of it available at once).
const QUOTA: &str = r#"
    [[rules]]
    name = "quota"
    limit = 10000
    window = "1d"
"#;

/// What one request of the test's clients costs.
const COST: u32 = 2_000;

fn quota_store(target: RedisTarget, prefix: &str, functions: bool) -> RedisStore {
    let config = RedisConfig::new(prefix)
        .unwrap()
        .with_timeout(TIMEOUT)
        .with_connect_timeout(TIMEOUT)
        .with_retry_backoff(Duration::from_millis(50))
        .with_failure_policy(FailurePolicy::FailClosed {
            retry_after: Duration::from_secs(1),
        })
        .unwrap()
        .with_functions(functions);
    RedisStore::new(target, config).unwrap()
}

/// How many times Redis refused a call whose deadline had passed (`INFO errorstats`).
fn expired_on(con: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("errorstats").query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("errorstat_TGEXPIRED:count="))
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// The client's remaining tokens as Redis has them, once Redis answers again: a peek of
/// cost 0, sent (on the same connection) after every call of the stall, so Redis ran
/// those first.
fn remaining_after_the_stall(policy: &Policy<MonotonicClock, RedisStore>, client: &str) -> u64 {
    let started = Instant::now();
    loop {
        let before = policy.backend().stats().redis_decisions;
        let d = policy.peek(client, "/", 0).unwrap();
        if policy.backend().stats().redis_decisions > before {
            return d.remaining();
        }
        assert!(started.elapsed() < HANG, "Redis did not answer again");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One client of the daily quota spends a request, then keeps asking through a stall of
/// its server (`freeze`, then `thaw`): it gets nothing during the stall, and after it the
/// quota holds what it held before the stall. Returns how many script calls were sent
/// during the stall.
fn a_daily_quota_through_a_stall(
    store: RedisStore,
    freeze: impl FnOnce(),
    thaw: impl FnOnce(),
) -> u64 {
    let policy = Policy::from_toml(QUOTA, MonotonicClock::new())
        .unwrap()
        .store(store);
    let first = policy.allow("tenant", "/", COST).unwrap();
    assert!(first.allowed(), "{first:?}");
    assert_eq!(first.remaining(), 8_000);
    freeze();
    let sent_before = policy.backend().stats().round_trips;
    let started = Instant::now();
    let (mut admitted, mut denied) = (0, 0);
    while started.elapsed() < STALL {
        if policy.allow("tenant", "/", COST).unwrap().allowed() {
            admitted += 1;
        } else {
            denied += 1;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let sent = policy.backend().stats().round_trips - sent_before;
    thaw();
    assert_eq!(admitted, 0, "fail closed: nothing admitted during the stall");
    assert!(denied >= sent && sent >= 2, "{denied} denied, {sent} sent");
    // The calls sent during the stall ran when the server resumed, and changed nothing.
    assert_eq!(
        remaining_after_the_stall(&policy, "tenant"),
        8_000,
        "{sent} checks sent during the stall: {:?}",
        policy.backend().stats()
    );
    sent
}

/// The issue's case: 10 000 tokens a day, requests of 2 000, a 3 s `SIGSTOP`. Before the
/// fix the checks sent during the stall ran when the server resumed and spent the quota:
/// 0 admitted, 17 denied, then 0 of 10 000 left.
#[test]
fn a_fail_closed_daily_quota_is_untouched_by_checks_sent_during_a_sigstop() {
    for functions in [true, false] {
        let server = RedisServer::start();
        let store = quota_store(RedisTarget::Single(server.url()), "stall", functions);
        let sent = a_daily_quota_through_a_stall(store, || server.sigstop(), || server.sigcont());
        // Every one of them was refused by the script as expired, by FCALL or by EVALSHA.
        assert_eq!(
            expired_on(&mut server.connection()),
            sent,
            "functions: {functions}"
        );
    }
}

/// The same on a cluster: the master holding the client's key is frozen.
#[test]
fn on_a_cluster_the_frozen_masters_late_checks_change_nothing() {
    let cluster = RedisCluster::start();
    let store = quota_store(RedisTarget::Cluster(cluster.urls()), "stallc", true);
    let key = store.redis_key("quota", "quota", Some("tenant"));
    let owner = &cluster.nodes()[cluster.owner(&key)];
    a_daily_quota_through_a_stall(store, || owner.sigstop(), || owner.sigcont());
    assert!(expired_on(&mut owner.connection()) >= 1);
}

/// One global GCRA rule of 10⁷ per ten years: nothing refills during the test.
const GLOBAL: &str = r#"
    [[rules]]
    name = "all"
    per = "global"
    limit = 10000000
    window = "3650d"
    algorithm = "gcra"
"#;

/// Two threads check one global key about 10 000 times a second each through a leased
/// store; the server is frozen for 3 s in the middle. Lease refills sent during the stall
/// time out; before the fix they ran when the server resumed and Redis recorded permits
/// the process never had (the issue: Redis 8 351 used, 8 097 admitted, `lost_permits: 0`).
/// Once the traffic stops and the key's lease has gone back, what Redis records is exactly
/// what was admitted, plus what the store counts as lost.
#[test]
fn leased_accounting_stays_exact_across_a_sigstop() {
    let server = RedisServer::start();
    let limit = 10_000_000u64;
    let redis = RedisStore::new(
        RedisTarget::Single(server.url()),
        RedisConfig::new("lstall")
            .unwrap()
            .with_timeout(TIMEOUT)
            .with_retry_backoff(Duration::from_millis(50)),
    )
    .unwrap();
    let leases = LeaseConfig::new()
        .with_hot_rate(100)
        .with_max_lease(1_000)
        .with_ttl(Duration::from_millis(300));
    let policy = Policy::from_toml(GLOBAL, MonotonicClock::new())
        .unwrap()
        .store(LeasedStore::new(redis, leases).unwrap());
    let admitted = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    if policy.allow("c", "/", 1).unwrap().allowed() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_micros(100));
                }
            });
        }
        // Hot and leased, with permits in hand, before the stall.
        let started = Instant::now();
        while policy.backend().stats().leases < 3 || policy.backend().stats().held_permits < 100
        {
            assert!(started.elapsed() < HANG, "{:?}", policy.backend().stats());
            std::thread::sleep(Duration::from_millis(1));
        }
        server.sigstop();
        std::thread::sleep(STALL);
        server.sigcont();
        // Leased again after the stall.
        let leases = policy.backend().stats().leases;
        let started = Instant::now();
        while policy.backend().stats().leases < leases + 3 {
            assert!(started.elapsed() < HANG, "{:?}", policy.backend().stats());
            std::thread::sleep(Duration::from_millis(1));
        }
        stop.store(true, Ordering::Relaxed);
    });
    // The idle key gives its lease back.
    let started = Instant::now();
    while policy.backend().stats().held_permits > 0 {
        assert!(started.elapsed() < HANG, "{:?}", policy.backend().stats());
        std::thread::sleep(Duration::from_millis(10));
    }
    let stats = policy.backend().stats();
    let used = limit - policy.peek("c", "/", 0).unwrap().remaining();
    let admitted = admitted.load(Ordering::Relaxed);
    assert_eq!(
        used,
        admitted + stats.lost_permits,
        "Redis used {used}, admitted {admitted}: {stats:?}"
    );
}
