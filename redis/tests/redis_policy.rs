//! One policy across a fleet: a [`Policy`] built from the same TOML runs on a
//! [`RedisStore`] (a real redis-server, single node and a 3-master cluster, started on
//! loopback) and decides exactly as the reference store of `policy_support` on random
//! traces (every algorithm, client and global rules, checks, peeks, refunds, charges) and
//! across reloads from every algorithm to every other under live keys; two policies on
//! one Redis admit exactly the bound, also while they run different rule versions.

#[path = "redis_support/delay_proxy.rs"]
mod delay_proxy;
#[path = "../../std/tests/policy_support/mod.rs"]
mod policy_support;
mod redis_support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use delay_proxy::DelayProxy;
use policy_support::{MapStore, Rng, RULES};
use redis_support::server::{RedisCluster, RedisServer};
use tollgate::policy::{Policy, PolicyCheck, Request};
use tollgate::{ManualClock, Nanos};
use tollgate_redis::{FailurePolicy, RedisConfig, RedisStats, RedisStore, RedisTarget, TimeSource};

/// A store replaying traces: the policy's (manual) clock, TTLs padded by an hour so real
/// time passing during the test never expires logical state early.
fn store(target: RedisTarget, prefix: &str) -> RedisStore {
    RedisStore::new(target, config(prefix)).expect("store")
}

/// The configuration of [`store`].
fn config(prefix: &str) -> RedisConfig {
    RedisConfig::new(prefix)
        .expect("prefix")
        .with_time_source(TimeSource::Client)
        .with_timeout(Duration::from_secs(10))
        .with_connect_timeout(Duration::from_secs(5))
        .with_ttl_slack(Duration::from_secs(3600))
}

/// [`store`] without the deny cache: for tests that compare Redis' exact figures while
/// another process writes the same keys, or right after a reload (states of the old
/// version converted on every read), which a local cache by design does not see (see
/// "Deny cache" on `RedisStore`: its answers then only stop early or deny on the strict
/// side).
fn uncached_store(target: RedisTarget, prefix: &str) -> RedisStore {
    RedisStore::new(target, config(prefix).with_deny_cache(0)).expect("store")
}

/// Runs the same random trace on the in-process store, the reference store and `redis`,
/// asserting every decision equal; `reloads` rule files are applied in turn every `every`
/// steps. Returns
/// the store's counters.
fn replay(
    seed: u64,
    steps: usize,
    redis: RedisStore,
    reloads: &[String],
    every: usize,
) -> RedisStats {
    let clock = ManualClock::starting_at(Nanos::from_secs(1_700_000_000));
    let reference = Policy::from_toml(RULES, clock.clone())
        .unwrap()
        .store(MapStore::default());
    let ours = Policy::from_toml(RULES, clock.clone())
        .unwrap()
        .store(redis);
    // The in-process store answers the same trace identically too, reloads included: every
    // store converts a state of another rule version when a request first touches it.
    let in_process = Policy::from_toml(RULES, clock.clone()).unwrap();
    let clients = ["a", "b", "vip", "c"];
    let endpoints = ["/", "/search", "/upload"];
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    for step in 0..steps {
        if every > 0 && step > 0 && step % every == 0 && !reloads.is_empty() {
            let rules = &reloads[(step / every - 1) % reloads.len()];
            reference.reload_toml(rules).unwrap();
            ours.reload_toml(rules).unwrap();
            in_process.reload_toml(rules).unwrap();
        }
        clock.advance(Nanos::from_millis(rng.below(4) * rng.below(200)));
        let client = clients[rng.below(4) as usize];
        let endpoint = endpoints[rng.below(3) as usize];
        let cost = [1, 1, 1, 2, 0, 3][rng.below(6) as usize];
        let request = Request::new(client, endpoint, cost);
        match rng.below(10) {
            0 if rng.below(4) == 0 => {
                reference.reset(client, endpoint);
                ours.reset(client, endpoint);
                in_process.reset(client, endpoint);
            }
            0 => {
                reference.refund(client, endpoint, cost);
                ours.refund(client, endpoint, cost);
                in_process.refund(client, endpoint, cost);
            }
            1 => {
                reference.charge_at(&request, tollgate::Clock::now(&clock));
                ours.charge_at(&request, tollgate::Clock::now(&clock));
                in_process.charge_at(&request, tollgate::Clock::now(&clock));
            }
            2 => {
                let expected = in_process.peek(client, endpoint, cost);
                assert_eq!(
                    reference.peek(client, endpoint, cost),
                    expected,
                    "seed {seed} step {step}: reference peek {client} {endpoint} {cost}"
                );
                assert_eq!(
                    ours.peek(client, endpoint, cost),
                    expected,
                    "seed {seed} step {step}: peek {client} {endpoint} {cost}"
                );
            }
            _ => {
                let expected = in_process.allow(client, endpoint, cost);
                assert_eq!(
                    reference.allow(client, endpoint, cost),
                    expected,
                    "seed {seed} step {step}: reference {client} {endpoint} {cost}"
                );
                assert_eq!(
                    ours.allow(client, endpoint, cost),
                    expected,
                    "seed {seed} step {step}: {client} {endpoint} {cost}"
                );
            }
        }
    }
    ours.backend().stats()
}

const ALGORITHMS: [&str; 6] = [
    "gcra",
    "token_bucket",
    "leaky_bucket",
    "fixed_window",
    "sliding_window_counter",
    "sliding_window_log",
];

/// RULES with the "default" rule's burst tier and the "/search" rule under `algorithm`,
/// with `limit` and `window`.
fn variant(algorithm: &str, limit: u32, window: &str) -> String {
    RULES
        .replace(
            r#"{ name = "burst", limit = 5, window = "1s" }"#,
            &format!(
                r#"{{ name = "burst", limit = {limit}, window = "{window}", algorithm = "{algorithm}" }}"#
            ),
        )
        .replace(
            "limit = 8\n    window = \"10s\"\n    algorithm = \"sliding_window_counter\"",
            &format!("limit = {limit}\n    window = \"{window}\"\n    algorithm = \"{algorithm}\""),
        )
}

#[test]
fn a_policy_on_redis_decides_exactly_as_the_reference_store() {
    let server = RedisServer::start();
    for seed in 1..=4u64 {
        let redis = store(RedisTarget::Single(server.url()), &format!("trace{seed}"));
        replay(seed, 400, redis, &[], 0);
    }
}

#[test]
fn reloads_between_every_pair_of_algorithms_carry_live_keys_like_the_reference() {
    let server = RedisServer::start();
    let mut pair = 0u64;
    for from in ALGORITHMS {
        for to in ALGORITHMS {
            pair += 1;
            let redis = uncached_store(RedisTarget::Single(server.url()), &format!("pair{pair}"));
            // Start under `from`, move to `to` with other parameters, and back.
            let reloads = [
                variant(from, 6, "2s"),
                variant(to, 4, "3s"),
                variant(from, 9, "2s"),
            ];
            let rules = variant(from, 6, "2s");
            let clock = ManualClock::starting_at(Nanos::from_secs(1_700_000_000));
            let reference = Policy::from_toml(&rules, clock.clone())
                .unwrap()
                .store(MapStore::default());
            let ours = Policy::from_toml(&rules, clock.clone())
                .unwrap()
                .store(redis);
            let in_process = Policy::from_toml(&rules, clock.clone()).unwrap();
            let mut rng = Rng(pair.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1);
            for step in 0..120 {
                if step % 40 == 39 {
                    let next = &reloads[(step / 40) % reloads.len()];
                    reference.reload_toml(next).unwrap();
                    ours.reload_toml(next).unwrap();
                    in_process.reload_toml(next).unwrap();
                }
                clock.advance(Nanos::from_millis(rng.below(3) * rng.below(150)));
                let client = ["a", "b"][rng.below(2) as usize];
                let endpoint = ["/", "/search"][rng.below(2) as usize];
                let cost = [1, 1, 2, 0][rng.below(4) as usize];
                let expected = in_process.allow(client, endpoint, cost);
                assert_eq!(
                    reference.allow(client, endpoint, cost),
                    expected,
                    "{from} -> {to}, step {step}: reference {client} {endpoint} {cost}"
                );
                assert_eq!(
                    ours.allow(client, endpoint, cost),
                    expected,
                    "{from} -> {to}, step {step}: {client} {endpoint} {cost}"
                );
            }
        }
    }
}

#[test]
fn a_policy_on_a_cluster_decides_exactly_as_the_reference_store() {
    let cluster = RedisCluster::start();
    let reloads = [variant("fixed_window", 7, "2s"), variant("gcra", 5, "1s")];
    for seed in 1..=2u64 {
        let redis = store(
            RedisTarget::Cluster(cluster.urls()),
            &format!("ctrace{seed}"),
        );
        replay(seed, 300, redis, &reloads, 100);
    }
}

/// `rules` on the reference store, on `redis` and in-process from `start` (checks, peeks
/// and charges), the clock moving on by up to 0.6 s a step and by `jump` every 25th step;
/// every decision equal.
fn replay_from(seed: u64, steps: usize, redis: RedisStore, rules: &str, start: Nanos, jump: Nanos) {
    let clock = ManualClock::starting_at(start);
    let reference = Policy::from_toml(rules, clock.clone())
        .unwrap()
        .store(MapStore::default());
    let ours = Policy::from_toml(rules, clock.clone())
        .unwrap()
        .store(redis);
    let in_process = Policy::from_toml(rules, clock.clone()).unwrap();
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    for step in 0..steps {
        if step % 25 == 24 {
            clock.advance(jump);
        }
        clock.advance(Nanos::from_millis(rng.below(4) * rng.below(200)));
        let client = ["a", "b", "vip", "c"][rng.below(4) as usize];
        let endpoint = ["/", "/search", "/upload"][rng.below(3) as usize];
        let cost = [1, 1, 1, 2, 0, 3][rng.below(6) as usize];
        let roll = rng.below(10);
        if roll == 0 {
            let request = Request::new(client, endpoint, cost);
            let now = tollgate::Clock::now(&clock);
            reference.charge_at(&request, now);
            ours.charge_at(&request, now);
            in_process.charge_at(&request, now);
            continue;
        }
        let (expected, got) = if roll < 3 {
            (
                in_process.peek(client, endpoint, cost),
                ours.peek(client, endpoint, cost),
            )
        } else {
            let expected = in_process.allow(client, endpoint, cost);
            assert_eq!(reference.allow(client, endpoint, cost), expected);
            (expected, ours.allow(client, endpoint, cost))
        };
        assert_eq!(
            got, expected,
            "seed {seed} step {step}: {client} {endpoint} {cost}"
        );
    }
}

/// The store's script works on instants relative to the call's time while they are within
/// about 2^52 ns (52 days) of it, and on full-width values otherwise: states left 120 days
/// behind by a jump of the clock, tiers whose debt runs more than that ahead (400-day
/// windows), and a clock a few seconds short of `u64::MAX` decide exactly as in-process.
#[test]
fn instants_far_from_now_and_near_the_end_of_time_decide_as_in_process() {
    let server = RedisServer::start();
    let day = 86_400u64;
    let start = Nanos::from_secs(1_700_000_000);
    for (i, (rules, start, jump)) in [
        (RULES.to_owned(), start, Nanos::from_secs(120 * day)),
        (
            variant("gcra", 3, "400d"),
            start,
            Nanos::from_secs(120 * day),
        ),
        (
            variant("leaky_bucket", 3, "400d"),
            start,
            Nanos::from_secs(30 * day),
        ),
        (
            variant("fixed_window", 3, "400d"),
            start,
            Nanos::from_secs(130 * day),
        ),
        (
            variant("sliding_window_counter", 3, "400d"),
            start,
            Nanos::from_secs(130 * day),
        ),
        (
            RULES.to_owned(),
            Nanos::new(u64::MAX - 30_000_000_000),
            Nanos::from_secs(1),
        ),
        (
            variant("gcra", 5, "1d"),
            Nanos::new(u64::MAX - 30_000_000_000),
            Nanos::from_secs(1),
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let redis = store(RedisTarget::Single(server.url()), &format!("far{i}"));
        replay_from(i as u64 + 1, 150, redis, &rules, start, jump);
    }
}

/// Two processes' worth of policies (each its own store and connection) on one key,
/// from four threads: exactly the limit is admitted.
#[test]
fn two_policies_racing_on_one_key_admit_exactly_the_bound() {
    let server = RedisServer::start();
    let rules = r#"
        [[rules]]
        name = "default"
        tiers = [
            { name = "hour", limit = 300, window = "1h", algorithm = "fixed_window" },
            { name = "rate", limit = 400, window = "1h" },
        ]
    "#;
    let policies: Vec<_> = (0..2)
        .map(|_| {
            let config = RedisConfig::new("race").unwrap();
            let store = RedisStore::new(RedisTarget::Single(server.url()), config).unwrap();
            Arc::new(
                Policy::from_toml(rules, tollgate::MonotonicClock::new())
                    .unwrap()
                    .store(store),
            )
        })
        .collect();
    let admitted = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let policy = Arc::clone(&policies[t % 2]);
            let admitted = Arc::clone(&admitted);
            std::thread::spawn(move || {
                for _ in 0..150 {
                    if policy.allow("hot", "/", 1).unwrap().allowed() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(admitted.load(Ordering::Relaxed), 300);
}

/// A rolling deploy: one process already runs a lowered limit while the other still runs
/// the old one, on the same keys. Each reads the other's writes through its own rule: the
/// new process stops at its limit counting what the old one admitted, and the old one
/// goes on counting what the new one admitted.
#[test]
fn a_rolling_deploy_never_admits_beyond_either_rule() {
    let server = RedisServer::start();
    let old_rules = r#"
        [[rules]]
        name = "default"
        limit = 100
        window = "1h"
        algorithm = "fixed_window"
    "#;
    let new_rules = old_rules.replace("limit = 100", "limit = 60");
    let clock = ManualClock::starting_at(Nanos::from_secs(1_700_000_000));
    let policy = |rules: &str| {
        Policy::from_toml(rules, clock.clone())
            .unwrap()
            .store(store(RedisTarget::Single(server.url()), "deploy"))
    };
    let old = policy(old_rules);
    let new = policy(&new_rules);
    let admit = |p: &Policy<ManualClock, RedisStore>, n: usize| {
        (0..n)
            .filter(|_| p.allow("k", "/", 1).unwrap().allowed())
            .count()
    };
    assert_eq!(admit(&old, 50), 50);
    // The new rule sees 50 used of its 60.
    assert_eq!(admit(&new, 30), 10);
    // The old rule sees the 60 (capped at the new limit when rewritten) and admits up to
    // its own 100.
    assert_eq!(admit(&old, 60), 40);
    assert_eq!(admit(&new, 5), 0);
    // Next window: both start fresh under their own rules.
    clock.advance(Nanos::from_secs(3600));
    assert_eq!(admit(&new, 70), 60);
    assert_eq!(admit(&old, 70), 40);
}

/// Redis down: the failure policy answers (closed: denied; open: admitted), and the store
/// recovers by itself once the server is back.
#[test]
fn a_store_answers_by_its_failure_policy_while_redis_is_down_and_recovers() {
    let mut server = RedisServer::start();
    let rules = r#"
        [[rules]]
        name = "default"
        limit = 5
        window = "1h"
    "#;
    let build = |failure: FailurePolicy| {
        let config = RedisConfig::new("down")
            .unwrap()
            .with_timeout(Duration::from_millis(300))
            .with_connect_timeout(Duration::from_millis(300))
            .with_retry_backoff(Duration::from_millis(50))
            .with_failure_policy(failure)
            .unwrap();
        Policy::from_toml(rules, tollgate::MonotonicClock::new())
            .unwrap()
            .store(RedisStore::new(RedisTarget::Single(server.url()), config).unwrap())
    };
    let closed = build(FailurePolicy::FailClosed {
        retry_after: Duration::from_secs(1),
    });
    let open = build(FailurePolicy::FailOpen);
    assert!(closed.allow("a", "/", 1).unwrap().allowed());
    server.kill();
    let denied = closed.allow("a", "/", 1).unwrap();
    assert!(!denied.allowed());
    assert!(open.allow("a", "/", 1).unwrap().allowed());
    assert!(closed.backend().stats().degraded >= 1);
    server.restart();
    // Recovers within a few backoffs; state written before the kill is gone (no
    // persistence in the test server), so the key starts fresh.
    let mut recovered = false;
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(50));
        if closed.allow("b", "/", 1).unwrap().allowed() {
            recovered = true;
            break;
        }
    }
    assert!(recovered, "the store did not recover after the restart");
}

#[test]
fn sliding_log_costs_above_the_cap_are_errors() {
    let server = RedisServer::start();
    let rules = r#"
        [[rules]]
        name = "default"
        limit = 60000
        window = "1m"
        algorithm = "sliding_window_log"
    "#;
    let clock = ManualClock::starting_at(Nanos::from_secs(1_700_000_000));
    let policy = Policy::from_toml(rules, clock)
        .unwrap()
        .store(store(RedisTarget::Single(server.url()), "cap"));
    assert!(policy
        .allow("a", "/", tollgate::policy::MAX_LOG_COST)
        .is_ok());
    assert!(policy
        .allow("a", "/", tollgate::policy::MAX_LOG_COST + 1)
        .is_err());
}

/// A store whose failures are quick to see: 300 ms timeouts, 50 ms backoff.
fn fault_store(target: RedisTarget, prefix: &str, failure: FailurePolicy) -> RedisStore {
    // No deny cache: every check goes to Redis. With it, a key denied before a fault
    // begins (checks faster than the fault's side command) is answered locally for the
    // rest of its window, and no check would meet the fault.
    let config = RedisConfig::new(prefix)
        .unwrap()
        .with_deny_cache(0)
        .with_timeout(Duration::from_millis(300))
        .with_connect_timeout(Duration::from_millis(300))
        .with_retry_backoff(Duration::from_millis(50))
        .with_failure_policy(failure)
        .unwrap();
    RedisStore::new(target, config).unwrap()
}

const TEN_PER_HOUR: &str = r#"
    [[rules]]
    name = "default"
    limit = 10
    window = "1h"
    algorithm = "fixed_window"
"#;

fn closed() -> FailurePolicy {
    FailurePolicy::FailClosed {
        retry_after: Duration::from_secs(1),
    }
}

/// Checks until a decision comes from Redis again (the store recovers by itself).
fn until_served(policy: &Policy<tollgate::MonotonicClock, RedisStore>, client: &str) -> u64 {
    for _ in 0..200 {
        let before = policy.backend().stats().redis_decisions;
        let d = policy.allow(client, "/", 1).unwrap();
        if policy.backend().stats().redis_decisions > before {
            return d.remaining();
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("the store did not recover");
}

#[test]
fn a_paused_server_times_out_into_the_failure_policy_and_recovers() {
    let server = RedisServer::start();
    let policy = Policy::from_toml(TEN_PER_HOUR, tollgate::MonotonicClock::new())
        .unwrap()
        .store(fault_store(
            RedisTarget::Single(server.url()),
            "pause",
            closed(),
        ));
    assert_eq!(policy.allow("k", "/", 1).unwrap().remaining(), 9);
    let _: String = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1500)
        .arg("ALL")
        .query(&mut server.connection())
        .unwrap();
    assert!(!policy.allow("k", "/", 1).unwrap().allowed());
    assert_eq!(policy.backend().stats().degraded, 1);
    // Within the backoff Redis is not tried: answered at once, degraded.
    assert!(!policy.allow("k", "/", 1).unwrap().allowed());
    assert_eq!(policy.backend().stats().degraded, 2);
    std::thread::sleep(Duration::from_millis(1600));
    // The check that timed out was already in the server's input buffer and ran when the
    // pause ended, past its deadline: refused, it changed nothing (issue 27: it used to
    // count, though answered by the failure policy); the one skipped by the backoff never
    // reached Redis. 9 left, then this check: 8.
    let remaining = until_served(&policy, "k");
    assert_eq!(remaining, 8);
}

#[test]
fn a_debug_sleep_times_out_into_the_failure_policy_and_recovers() {
    let server = RedisServer::start();
    let policy = Policy::from_toml(TEN_PER_HOUR, tollgate::MonotonicClock::new())
        .unwrap()
        .store(fault_store(
            RedisTarget::Single(server.url()),
            "sleep",
            FailurePolicy::FailOpen,
        ));
    assert_eq!(policy.allow("k", "/", 1).unwrap().remaining(), 9);
    let mut side = server.connection();
    let sleeper = std::thread::spawn(move || {
        let _: redis::RedisResult<String> =
            redis::cmd("DEBUG").arg("SLEEP").arg(1).query(&mut side);
    });
    // The server sleeps 1 s, beyond the 300 ms timeout: a check overlapping it fails open.
    // Until the side command arrives (a loaded machine may run more than the nine checks
    // left first), Redis answers, and may deny.
    let mut degraded = false;
    while !sleeper.is_finished() && !degraded {
        let allowed = policy.allow("k", "/", 1).unwrap().allowed();
        degraded = policy.backend().stats().degraded > 0;
        assert!(allowed || !degraded, "a timed-out check fails open");
    }
    assert!(degraded, "a check overlapping DEBUG SLEEP timed out");
    sleeper.join().unwrap();
    until_served(&policy, "k");
}

#[test]
fn flushed_scripts_are_reloaded_transparently() {
    let server = RedisServer::start();
    let policy = Policy::from_toml(TEN_PER_HOUR, tollgate::MonotonicClock::new())
        .unwrap()
        .store(fault_store(
            RedisTarget::Single(server.url()),
            "flush",
            closed(),
        ));
    assert_eq!(policy.allow("k", "/", 1).unwrap().remaining(), 9);
    for command in ["SCRIPT", "FUNCTION"] {
        let _: String = redis::cmd(command)
            .arg("FLUSH")
            .query(&mut server.connection())
            .unwrap();
    }
    assert_eq!(policy.allow("k", "/", 1).unwrap().remaining(), 8);
    assert_eq!(policy.allow("k", "/", 1).unwrap().remaining(), 7);
    assert_eq!(policy.backend().stats().degraded, 0);
}

/// A value of another type at one client's key is a script error for that client's checks
/// only: every other client is still served by Redis.
#[test]
fn a_key_whose_script_errors_degrades_only_its_own_checks() {
    let server = RedisServer::start();
    let store = fault_store(RedisTarget::Single(server.url()), "scope", closed());
    let bad = store.redis_key("default", "default", Some("bad"));
    let _: i64 = redis::cmd("HSET")
        .arg(&bad)
        .arg("field")
        .arg("value")
        .query(&mut server.connection())
        .unwrap();
    let policy = Policy::from_toml(TEN_PER_HOUR, tollgate::MonotonicClock::new())
        .unwrap()
        .store(store);
    assert!(!policy.allow("bad", "/", 1).unwrap().allowed());
    assert_eq!(policy.backend().stats().degraded, 1);
    for expected in (5..10).rev() {
        assert_eq!(policy.allow("good", "/", 1).unwrap().remaining(), expected);
    }
    assert_eq!(policy.backend().stats().degraded, 1);
}

/// One paused master of three: checks of clients on it fail closed, clients on the other
/// masters are still served by Redis, and everything recovers after the pause.
#[test]
fn one_slow_master_does_not_degrade_the_keys_of_the_others() {
    let cluster = RedisCluster::start();
    let store = fault_store(RedisTarget::Cluster(cluster.urls()), "slow", closed());
    // Clients on master 0, and clients elsewhere in other backoff groups (the group of a
    // client is FNV-1a of its name, modulo 64).
    let group = |client: &str| tollgate::engine::hash::fnv1a(client.as_bytes()) % 64;
    let mut on_paused = Vec::new();
    let mut elsewhere = Vec::new();
    for i in 0..400 {
        let client = format!("client{i}");
        let key = store.redis_key("default", "default", Some(&client));
        if cluster.owner(&key) == 0 {
            on_paused.push(client);
        } else if on_paused
            .first()
            .is_some_and(|p: &String| group(p) != group(&client))
        {
            elsewhere.push(client);
        }
    }
    let policy = Policy::from_toml(TEN_PER_HOUR, tollgate::MonotonicClock::new())
        .unwrap()
        .store(store);
    // Connect to every master first.
    for client in on_paused.iter().chain(&elsewhere).take(20) {
        policy.allow(client, "/", 1).unwrap();
    }
    let _: String = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(2000)
        .arg("ALL")
        .query(&mut cluster.nodes()[0].connection())
        .unwrap();
    assert!(!policy.allow(&on_paused[0], "/", 1).unwrap().allowed());
    let degraded = policy.backend().stats().degraded;
    assert!(degraded >= 1);
    for client in elsewhere.iter().take(20) {
        assert!(policy.allow(client, "/", 1).unwrap().allowed(), "{client}");
    }
    assert_eq!(policy.backend().stats().degraded, degraded);
}

/// Client time with skewed clocks (`TimeSource::Client`, documented there): on GCRA 10/s
/// (burst 10), a client one second ahead admits `skew × rate` = 10 more after a synced one
/// exhausted the key, and the synced one then waits out that debt; a client one second
/// behind is refused with a retry one second longer, never admitting more. On a fixed
/// window the ahead client opens the next window early and the others count in it: still
/// at most the limit per window.
#[test]
fn client_clocks_ahead_or_behind_shift_decisions_by_the_skew_only() {
    let server = RedisServer::start();
    let rules = r#"
        [[rules]]
        name = "default"
        tiers = [{ name = "rate", limit = 10, window = "1s" }]
    "#;
    let synced_clock = ManualClock::starting_at(Nanos::from_secs(1_700_000_000));
    let ahead_clock = ManualClock::starting_at(Nanos::from_secs(1_700_000_001));
    let behind_clock = ManualClock::starting_at(Nanos::from_secs(1_699_999_999));
    let on = |clock: &ManualClock, rules: &str| {
        Policy::from_toml(rules, clock.clone())
            .unwrap()
            .store(uncached_store(RedisTarget::Single(server.url()), "skew"))
    };
    let admit = |p: &Policy<ManualClock, RedisStore>, client: &str, n: usize| {
        (0..n)
            .filter(|_| p.allow(client, "/", 1).unwrap().allowed())
            .count()
    };
    let (synced, ahead, behind) = (
        on(&synced_clock, rules),
        on(&ahead_clock, rules),
        on(&behind_clock, rules),
    );
    // Ahead: 10 more than the limit, then the synced client waits out the debt.
    assert_eq!(admit(&synced, "a", 20), 10);
    assert_eq!(admit(&ahead, "a", 20), 10);
    let refused = synced.allow("a", "/", 1).unwrap();
    assert!(!refused.allowed());
    assert_eq!(refused.retry_after(), Nanos::from_millis(1100));
    // Behind: nothing more than synced, and a retry one second longer.
    assert_eq!(admit(&synced, "b", 20), 10);
    let refused = behind.allow("b", "/", 1).unwrap();
    assert!(!refused.allowed());
    assert_eq!(refused.retry_after(), Nanos::from_millis(1100));
    synced_clock.advance(Nanos::from_millis(500));
    behind_clock.advance(Nanos::from_millis(500));
    assert_eq!(admit(&synced, "b", 20), 5);
    assert_eq!(admit(&behind, "b", 20), 0);

    // Fixed window of 10 per minute: the ahead client opens the next minute 1 s early
    // (the synced clock is 20 s into its minute, so that is 39 s from now).
    let fixed = rules.replace(
        r#"window = "1s" }"#,
        r#"window = "1m", algorithm = "fixed_window" }"#,
    );
    let (synced, ahead) = (on(&synced_clock, &fixed), on(&ahead_clock, &fixed));
    assert_eq!(admit(&synced, "c", 20), 10);
    synced_clock.advance(Nanos::from_millis(38_500));
    ahead_clock.advance(Nanos::from_millis(39_000));
    // Ahead is in the next minute: a fresh window; synced counts in it as a late caller.
    assert_eq!(admit(&ahead, "c", 4), 4);
    assert_eq!(admit(&synced, "c", 20), 6);
    assert_eq!(admit(&ahead, "c", 20), 0);
}

/// Reservations, reloads, `Metered` over `AdaptivePenalty` and waiting, on Redis: the same
/// exercise as on the reference store, with the same numbers.
#[test]
fn every_policy_feature_works_on_redis() {
    let server = RedisServer::start();
    policy_support::exercise_every_feature(store(RedisTarget::Single(server.url()), "features"));
}

/// The bug of the old scripts the tags fix: a fixed window moved from 1 s to 1 d under live
/// keys reported `reset_after = u64::MAX` and set a TTL of 584 years. On the store the key
/// is converted: its reset and its TTL are within the new day (plus the TTL slack), and
/// the key of a rule removed by a reload keeps its TTL, so it expires.
#[test]
fn a_changed_or_removed_rule_leaves_keys_with_ttls_at_their_reset() {
    let server = RedisServer::start();
    let second = r#"
        [[rules]]
        name = "default"
        limit = 5
        window = "1s"
        algorithm = "fixed_window"

        [[rules]]
        name = "search"
        endpoint = "/search"
        limit = 5
        window = "1m"
        algorithm = "fixed_window"
    "#;
    let store = RedisStore::new(
        RedisTarget::Single(server.url()),
        RedisConfig::new("ttl").unwrap(),
    )
    .unwrap();
    let default_key = store.redis_key("default", "default", Some("k"));
    let search_key = store.redis_key("search", "search", Some("k"));
    let policy = Policy::from_toml(second, tollgate::MonotonicClock::new())
        .unwrap()
        .store(store);
    let slack_ms = policy.backend().config().ttl_slack().as_millis() as i64;
    let pttl = |key: &str| -> i64 {
        redis::cmd("PTTL")
            .arg(key)
            .query(&mut server.connection())
            .unwrap()
    };
    assert!(policy.allow("k", "/search", 1).unwrap().allowed());
    assert!((1..=60_000 + 3 + slack_ms).contains(&pttl(&search_key)));
    // The window grows from a second to a day, and /search is removed.
    let day = r#"
        [[rules]]
        name = "default"
        limit = 5
        window = "1d"
        algorithm = "fixed_window"
    "#;
    policy.reload_toml(day).unwrap();
    let d = policy.allow("k", "/", 1).unwrap();
    assert!(d.allowed());
    assert!(d.reset_after() <= Nanos::from_secs(86_400));
    let ttl = pttl(&default_key);
    assert!((1..=86_400_000 + 3 + slack_ms).contains(&ttl), "{ttl} ms");
    // The removed rule's key is never written again and still expires.
    let ttl = pttl(&search_key);
    assert!((1..=60_000 + 3 + slack_ms).contains(&ttl), "{ttl} ms");
}

/// Redis down under `FailurePolicy::Fallback`: each client gets the configured share of
/// its limit from this process' own bounded tables (half of 10 per hour: exactly 5), and
/// Redis answers again once it is back.
#[test]
fn a_fallback_store_enforces_its_share_locally_while_redis_is_down() {
    let mut server = RedisServer::start();
    let policy = Policy::from_toml(TEN_PER_HOUR, tollgate::MonotonicClock::new())
        .unwrap()
        .store(fault_store(
            RedisTarget::Single(server.url()),
            "fallback",
            FailurePolicy::Fallback { share: 0.5 },
        ));
    assert_eq!(policy.allow("a", "/", 1).unwrap().remaining(), 9);
    server.kill();
    for client in ["a", "b"] {
        let admitted = (0..20)
            .filter(|_| policy.allow(client, "/", 1).unwrap().allowed())
            .count();
        assert_eq!(admitted, 5, "{client}");
    }
    let local = policy.peek("a", "/", 1).unwrap();
    assert_eq!((local.allowed(), local.limit()), (false, 5));
    server.restart();
    // Back on Redis (which lost its data with the restart: the key starts fresh).
    assert_eq!(until_served(&policy, "a"), 9);
}

/// Two endpoints' rules of the same numbers, per client and global: distinct limits,
/// which the fallback keeps apart as Redis does (before, its tables were keyed by the
/// tier's parameters alone, so the two rules' keys of one client, or the two global
/// keys, shared one local count: /upload was refused once /search had used its share).
#[test]
fn a_fallback_keeps_rules_of_the_same_numbers_apart() {
    const SAME_NUMBERS: &str = r#"
        [[rules]]
        name = "search"
        endpoint = "/search"
        limit = 10
        window = "1h"
        algorithm = "fixed_window"

        [[rules]]
        name = "upload"
        endpoint = "/upload"
        limit = 10
        window = "1h"
        algorithm = "fixed_window"

        [[rules]]
        name = "search_all"
        endpoint = "/search/all"
        per = "global"
        limit = 10
        window = "1h"
        algorithm = "fixed_window"

        [[rules]]
        name = "upload_all"
        endpoint = "/upload/all"
        per = "global"
        limit = 10
        window = "1h"
        algorithm = "fixed_window"
    "#;
    let mut server = RedisServer::start();
    let policy = Policy::from_toml(SAME_NUMBERS, tollgate::MonotonicClock::new())
        .unwrap()
        .store(fault_store(
            RedisTarget::Single(server.url()),
            "fallback_rules",
            FailurePolicy::Fallback { share: 0.5 },
        ));
    assert!(policy.allow("a", "/search", 1).unwrap().allowed());
    server.kill();
    for endpoint in ["/search", "/upload", "/search/all", "/upload/all"] {
        let admitted = (0..20)
            .filter(|_| policy.allow("a", endpoint, 1).unwrap().allowed())
            .count();
        assert_eq!(admitted, 5, "{endpoint}");
    }
}

/// A process whose Redis is a round trip of 40 ms away (a delaying proxy), well within its
/// 300 ms timeout, has its first check decided by Redis. Its first `TIME`, which samples
/// the server's clock, also waited for the connection's setup, took more than a quarter
/// of the timeout and was thrown away: the check was refused by the failure policy (fail
/// closed) as a timeout, and its keys backed off, at every start of a process.
#[test]
fn a_first_check_over_a_slower_link_is_decided_by_redis() {
    let server = RedisServer::start();
    let rules = TEN_PER_HOUR;
    // Another process has loaded the script already (a fleet's usual case).
    let direct = Policy::from_toml(rules, tollgate::MonotonicClock::new())
        .unwrap()
        .store(fault_store(
            RedisTarget::Single(server.url()),
            "far",
            closed(),
        ));
    assert!(direct.allow("other", "/", 1).unwrap().allowed());
    let upstream = format!("127.0.0.1:{}", server.port()).parse().unwrap();
    let one_way = Duration::from_millis(20);
    let proxy = DelayProxy::start("127.0.0.1:0".parse().unwrap(), upstream, one_way).unwrap();
    let config = RedisConfig::new("far")
        .unwrap()
        .with_deny_cache(0)
        .with_timeout(Duration::from_millis(300))
        .with_connect_timeout(Duration::from_millis(300))
        .with_failure_policy(closed())
        .unwrap();
    let far = RedisStore::new(
        RedisTarget::Single(format!("redis://{}", proxy.addr())),
        config,
    );
    let policy = Policy::from_toml(rules, tollgate::MonotonicClock::new())
        .unwrap()
        .store(far.unwrap());
    let first = policy.allow("a", "/", 1).unwrap();
    let stats = policy.backend().stats();
    assert_eq!((stats.degraded, stats.last_failure), (0, None));
    assert!(first.allowed());
    assert_eq!(first.remaining(), 9);
}

/// A policy of a client rule and a global rule (two calls per check) on a Redis behind a
/// delaying proxy (no delay yet), with `timeout` and `backoff`, failing closed, whose
/// first check was answered by Redis (both calls; the server's clock sampled): the server
/// (keep it), the proxy, the policy.
fn two_calls_behind_a_proxy(
    prefix: &str,
    timeout: Duration,
    backoff: Duration,
) -> (
    RedisServer,
    DelayProxy,
    Policy<tollgate::MonotonicClock, RedisStore>,
) {
    let server = RedisServer::start();
    let upstream = format!("127.0.0.1:{}", server.port()).parse().unwrap();
    let proxy =
        DelayProxy::start("127.0.0.1:0".parse().unwrap(), upstream, Duration::ZERO).unwrap();
    let config = RedisConfig::new(prefix)
        .unwrap()
        .with_deny_cache(0)
        .with_timeout(timeout)
        .with_connect_timeout(timeout)
        .with_retry_backoff(backoff)
        .with_failure_policy(closed())
        .unwrap();
    let store = RedisStore::new(
        RedisTarget::Single(format!("redis://{}", proxy.addr())),
        config,
    )
    .unwrap();
    let rules = r#"
        [[rules]]
        name = "client"
        limit = 100
        window = "1m"

        [[rules]]
        name = "everyone"
        endpoint = "/"
        limit = 1000
        window = "1m"
        per = "global"
    "#;
    let policy = Policy::from_toml(rules, tollgate::MonotonicClock::new())
        .unwrap()
        .store(store);
    let first = policy.allow("a", "/", 1).unwrap();
    let fast = policy.backend().stats();
    assert!(first.allowed(), "{first:?}");
    assert_eq!(first.tiers().len(), 2);
    assert_eq!((fast.redis_decisions, fast.degraded), (2, 0), "{fast:?}");
    (server, proxy, policy)
}

/// A check's calls share one timeout. With a client rule and a global rule (two calls per
/// check) and a Redis each of whose round trips takes 60 % of the timeout (a delaying
/// proxy, slowed once the server's clock was sampled), the first call is answered and the
/// second is given what is left, not a timeout of its own: the check goes to the failure
/// policy (fail closed) as a timeout instead of waiting 1.2 timeouts for an admit. Before,
/// every call had the whole timeout, and a check of N calls could wait N timeouts.
#[test]
fn a_checks_calls_share_one_timeout() {
    // Every check goes to Redis, failed calls or not (no backoff).
    let (_server, proxy, policy) =
        two_calls_behind_a_proxy("budget", Duration::from_secs(1), Duration::ZERO);
    let fast = policy.backend().stats();
    // Each round trip now takes 600 ms of the 1 s: one call fits, two do not.
    proxy.set_one_way(Duration::from_millis(300));
    let slow = policy.allow("a", "/", 1).unwrap();
    let after = policy.backend().stats();
    assert!(
        !slow.allowed(),
        "the check's time ran out: fail closed: {slow:?}"
    );
    assert!(
        after.redis_decisions - fast.redis_decisions <= 1,
        "the second call was answered after the check's time: {after:?}"
    );
    assert_eq!(
        after.last_failure,
        Some(tollgate_redis::FailureCause::Timeout)
    );
}

/// A call of a check sent when less than a tenth of the timeout is left carries a deadline
/// the server has passed already: the script refuses it (`TGEXPIRED`), which says nothing
/// of the server's clock or health. So it is not sent, and, as nothing failed (Redis
/// answered every call sent), no backoff follows it. Here the check's first call takes 91 %
/// of the timeout (a delaying proxy, made fast again while its answer is on the way back),
/// so its second is left 9 %: before, it was sent, refused as expired (the clock estimate
/// dropped, `expired` counted) and every check skipped Redis for the retry backoff.
#[test]
fn a_call_left_too_little_time_is_not_sent_and_backs_nothing_off() {
    let (_server, proxy, policy) =
        two_calls_behind_a_proxy("tail", Duration::from_secs(2), Duration::from_secs(600));
    let fast = policy.backend().stats();
    // The first call's round trip: 910 ms each way; its answer is held by the proxy from
    // about 910 ms on, so the delay dropped at 1.4 s leaves that answer due at 1.82 s (the
    // first call answered 180 ms before the timeout) and lets the second call through at
    // once.
    proxy.set_one_way(Duration::from_millis(910));
    let slow = std::thread::scope(|s| {
        let check = s.spawn(|| policy.allow("a", "/", 1).unwrap());
        std::thread::sleep(Duration::from_millis(1400));
        proxy.set_one_way(Duration::ZERO);
        check.join().unwrap()
    });
    let after = policy.backend().stats();
    assert!(!slow.allowed(), "the check's time ran out: {slow:?}");
    assert_eq!(
        (after.expired, after.last_failure),
        (fast.expired, Some(tollgate_redis::FailureCause::Timeout)),
        "a call was sent past its deadline on the server: {after:?}"
    );
    let next = policy.allow("a", "/", 1).unwrap();
    let last = policy.backend().stats();
    assert!(
        next.allowed(),
        "backed off after a call left unsent: {next:?}"
    );
    assert_eq!(last.redis_decisions, after.redis_decisions + 2, "{last:?}");
}

/// Rules of the deny cache tests: a GCRA burst of 2 per second (a permit every 500 ms)
/// and a fixed minute window that admits throughout (the clocks start 20 s into a minute).
const HOT_RULES: &str = r#"
    [[rules]]
    name = "default"
    tiers = [
        { name = "burst", limit = 2, window = "1s" },
        { name = "minute", limit = 40, window = "1m", algorithm = "fixed_window" },
    ]
"#;

/// A policy on a store with the deny cache (the default capacity) and one on a store
/// without it, on the same Redis keys and the same manual clock.
fn cached_and_uncached(
    server: &RedisServer,
    prefix: &str,
    clock: &ManualClock,
) -> (
    Policy<ManualClock, RedisStore>,
    Policy<ManualClock, RedisStore>,
) {
    let on = |redis: RedisStore| {
        Policy::from_toml(HOT_RULES, clock.clone())
            .unwrap()
            .store(redis)
    };
    (
        on(store(RedisTarget::Single(server.url()), prefix)),
        on(uncached_store(RedisTarget::Single(server.url()), prefix)),
    )
}

/// A hot client denied once is answered locally until its retry time: no round trip, the
/// same decisions (every tier, every figure) as a store without the cache asking Redis at
/// the same instants; at the retry time Redis is asked again and admits.
#[test]
fn a_hot_denied_client_is_answered_locally_until_its_retry_time() {
    let server = RedisServer::start();
    let clock = ManualClock::starting_at(Nanos::from_secs(1_700_000_000));
    let (cached, uncached) = cached_and_uncached(&server, "hot", &clock);
    assert!(cached.allow("a", "/", 1).unwrap().allowed());
    assert!(cached.allow("a", "/", 1).unwrap().allowed());
    let denied = cached.allow("a", "/", 1).unwrap();
    assert!(!denied.allowed());
    let retry = denied.retry_after().as_u64();
    assert_eq!(retry, 500_000_000);
    let before = cached.backend().stats();
    assert_eq!(before.deny_cache_hits, 0);
    let offsets = [0, 1, 10_000_000, retry / 2, retry - 1_000_000, retry - 1];
    let mut elapsed = 0;
    for offset in offsets {
        clock.advance(Nanos::new(offset - elapsed));
        elapsed = offset;
        let local = cached.allow("a", "/", 1).unwrap();
        let redis = uncached.allow("a", "/", 1).unwrap();
        assert_eq!(local, redis, "{offset} ns after the deny");
        assert!(!local.allowed());
        assert_eq!(local.retry_after().as_u64(), retry - offset);
    }
    let after = cached.backend().stats();
    assert_eq!(after.round_trips, before.round_trips, "no round trip");
    assert_eq!(after.redis_decisions, before.redis_decisions);
    assert_eq!(after.deny_cache_hits, offsets.len() as u64);
    assert_eq!(after.decisions, before.decisions + offsets.len() as u64);
    assert_eq!(uncached.backend().stats().deny_cache_hits, 0);
    assert_eq!(
        uncached.backend().stats().round_trips,
        offsets.len() as u64,
        "one call a check (the script is loaded already)"
    );
    // Another client, or another cost, is not answered from the cache.
    assert!(cached.allow("b", "/", 1).unwrap().allowed());
    assert!(!cached.allow("a", "/", 2).unwrap().allowed());
    assert_eq!(
        cached.backend().stats().deny_cache_hits,
        offsets.len() as u64
    );
    // At the retry time Redis is asked again, and admits.
    clock.advance(Nanos::new(retry - elapsed));
    let trips = cached.backend().stats().round_trips;
    assert!(cached.allow("a", "/", 1).unwrap().allowed());
    let last = cached.backend().stats();
    assert_eq!(last.round_trips, trips + 1);
    assert_eq!(last.deny_cache_hits, offsets.len() as u64);
}

/// This process's refund and charge invalidate the cached deny (the next check asks
/// Redis, and answers as the uncached store does); a reload to other limits misses it.
#[test]
fn refunds_charges_and_reloads_are_not_answered_from_a_stale_deny() {
    let server = RedisServer::start();
    let clock = ManualClock::starting_at(Nanos::from_secs(1_700_000_000));
    let (cached, uncached) = cached_and_uncached(&server, "stale", &clock);
    let stats = || cached.backend().stats();
    assert!(cached.allow("b", "/", 1).unwrap().allowed());
    assert!(cached.allow("b", "/", 1).unwrap().allowed());
    assert!(!cached.allow("b", "/", 1).unwrap().allowed());
    clock.advance(Nanos::from_millis(100));
    assert!(!cached.allow("b", "/", 1).unwrap().allowed());
    assert_eq!(stats().deny_cache_hits, 1);

    // A refund gives a permit back: the deny is stale, Redis admits.
    cached.refund("b", "/", 1);
    let s = stats();
    assert!(cached.allow("b", "/", 1).unwrap().allowed());
    assert_eq!(stats().deny_cache_hits, s.deny_cache_hits);
    assert_eq!(stats().round_trips, s.round_trips + 1);

    // Denied again (by Redis, then from the cache).
    let denied = cached.allow("b", "/", 1).unwrap();
    assert!(!denied.allowed());
    clock.advance(Nanos::from_millis(10));
    let local = cached.allow("b", "/", 1).unwrap();
    assert_eq!(local, uncached.allow("b", "/", 1).unwrap());
    assert_eq!(stats().deny_cache_hits, s.deny_cache_hits + 1);

    // A charge moves the retry time later: Redis is asked, and agrees with the uncached
    // store.
    let now = tollgate::Clock::now(&clock);
    cached.charge_at(&Request::new("b", "/", 1), now);
    let s = stats();
    let after_charge = cached.allow("b", "/", 1).unwrap();
    assert_eq!(after_charge, uncached.allow("b", "/", 1).unwrap());
    assert_eq!(stats().deny_cache_hits, s.deny_cache_hits);
    assert_eq!(stats().round_trips, s.round_trips + 1);
    assert_eq!(
        after_charge.retry_after().as_u64(),
        local.retry_after().as_u64() + 500_000_000
    );
    // ... and caches the new deny.
    assert_eq!(cached.allow("b", "/", 1).unwrap(), after_charge);
    assert_eq!(stats().deny_cache_hits, s.deny_cache_hits + 1);

    // A reload to other limits is another request: Redis decides it.
    let wider = HOT_RULES.replace("limit = 2,", "limit = 4,");
    cached.reload_toml(&wider).unwrap();
    let s = stats();
    let reloaded = cached.allow("b", "/", 1).unwrap();
    assert_eq!(stats().deny_cache_hits, s.deny_cache_hits);
    assert_eq!(stats().round_trips, s.round_trips + 1);
    assert_eq!(reloaded.tiers()[0].quota(), 4);
}

/// Many distinct denied clients never hold more entries than the configured capacity:
/// of 200 clients denied (each cached if there is room), at most 32 are answered locally.
#[test]
fn the_deny_cache_holds_at_most_its_capacity() {
    let server = RedisServer::start();
    let clock = ManualClock::starting_at(Nanos::from_secs(1_700_000_000));
    let rules = r#"
        [[rules]]
        name = "default"
        tiers = [{ name = "minute", limit = 1, window = "1m", algorithm = "fixed_window" }]
    "#;
    let redis = RedisStore::new(
        RedisTarget::Single(server.url()),
        config("capacity").with_deny_cache(32),
    )
    .unwrap();
    let policy = Policy::from_toml(rules, clock.clone())
        .unwrap()
        .store(redis);
    let clients: Vec<String> = (0..200).map(|i| format!("client-{i}")).collect();
    for client in &clients {
        assert!(policy.allow(client, "/", 1).unwrap().allowed());
        assert!(!policy.allow(client, "/", 1).unwrap().allowed());
    }
    for pass in 0..3 {
        let s = policy.backend().stats();
        for client in &clients {
            assert!(!policy.allow(client, "/", 1).unwrap().allowed());
        }
        let after = policy.backend().stats();
        let hits = after.deny_cache_hits - s.deny_cache_hits;
        assert!(hits <= 32, "pass {pass}: {hits} answers from a cache of 32");
        assert!(hits > 0, "pass {pass}: the cache holds denies");
        assert_eq!(after.round_trips - s.round_trips, 200 - hits);
    }
}

/// With the server's clock, the cache measures time on the store's monotonic clock, not
/// the policy's: a policy clock that stands still does not keep a deny alive.
#[test]
fn with_server_time_a_deny_is_cached_for_its_real_retry_time() {
    let server = RedisServer::start();
    let clock = ManualClock::starting_at(Nanos::from_secs(1_700_000_000));
    let redis = RedisStore::new(
        RedisTarget::Single(server.url()),
        config("server-time").with_time_source(TimeSource::Server),
    )
    .unwrap();
    let rules = HOT_RULES.replace("limit = 2, window = \"1s\"", "limit = 20, window = \"1s\"");
    let policy = Policy::from_toml(&rules, clock.clone())
        .unwrap()
        .store(redis);
    let mut admitted = 0;
    let (denied, sent) = loop {
        let sent = std::time::Instant::now();
        let d = policy.allow("s", "/", 1).unwrap();
        if !d.allowed() {
            break (d, sent);
        }
        admitted += 1;
    };
    assert!(admitted >= 20);
    // A permit every 50 ms of server time: a check within the retry time (measured from
    // before the denied one was sent) is local.
    let s = policy.backend().stats();
    let local = policy.allow("s", "/", 1).unwrap();
    let after = policy.backend().stats();
    if sent.elapsed() < denied.retry_after().as_duration() {
        assert!(!local.allowed());
        assert_eq!(after.deny_cache_hits, s.deny_cache_hits + 1);
        assert_eq!(after.round_trips, s.round_trips);
    }
    // After the retry time in real time, Redis is asked (and admits), though the policy's
    // clock has not moved.
    std::thread::sleep(Duration::from_millis(120));
    let s = policy.backend().stats();
    assert!(policy.allow("s", "/", 1).unwrap().allowed());
    let after = policy.backend().stats();
    assert_eq!(after.deny_cache_hits, s.deny_cache_hits);
    assert_eq!(after.round_trips, s.round_trips + 1);
}

/// Random traces (every algorithm, checks, peeks, refunds, charges) with the deny cache on
/// decide exactly as the reference store, every tier and figure, while a share of the
/// checks is answered locally.
#[test]
fn traces_with_the_deny_cache_decide_exactly_and_answer_some_checks_locally() {
    let server = RedisServer::start();
    let mut hits = 0;
    for seed in 5..=8u64 {
        let redis = store(
            RedisTarget::Single(server.url()),
            &format!("dc-trace{seed}"),
        );
        hits += replay(seed, 400, redis, &[], 0).deny_cache_hits;
    }
    assert!(hits > 0, "no check was answered by the deny cache");
}

/// Three a day per client, in a fixed window: a deny lasts until midnight (UTC).
const THREE_A_DAY: &str = r#"
    [[rules]]
    name = "daily"
    limit = 3
    window = "1d"
    algorithm = "fixed_window"
"#;

/// Issue 27, item 10: a cached deny used to outlive the state it cached. A daily quota's
/// deny is cached until midnight; after an operator's `DEL` of the client's key, or a
/// `FLUSHALL`, the client is admitted again once the deny cache's trust has run out (at
/// most its default of 1 s), and at once after `forget_denies` (what a reset calls).
#[test]
fn a_cached_deny_is_trusted_for_a_second_at_most_and_forgotten_on_demand() {
    let server = RedisServer::start();
    let config = RedisConfig::new("trust").unwrap();
    assert_eq!(config.deny_cache_max_age(), Duration::from_secs(1));
    assert_eq!(
        tollgate_redis::DEFAULT_DENY_CACHE_MAX_AGE,
        Duration::from_secs(1)
    );
    let store = RedisStore::new(RedisTarget::Single(server.url()), config).unwrap();
    let key = store.redis_key("daily", "daily", Some("tenant"));
    let policy = Policy::from_toml(THREE_A_DAY, tollgate::MonotonicClock::new())
        .unwrap()
        .store(store);
    let mut con = server.connection();
    // Spends the day's three, then is denied, then answered from the cache.
    let spend_and_cache = || {
        for _ in 0..3 {
            assert!(policy.allow("tenant", "/", 1).unwrap().allowed());
        }
        let hits = policy.backend().stats().deny_cache_hits;
        assert!(!policy.allow("tenant", "/", 1).unwrap().allowed());
        let cached = policy.allow("tenant", "/", 1).unwrap();
        assert!(!cached.allowed());
        assert_eq!(policy.backend().stats().deny_cache_hits, hits + 1);
        // Cached until the day ends, far beyond the trust.
        cached.retry_after()
    };
    let resets: [&dyn Fn(&mut redis::Connection); 2] = [
        &|con| redis::cmd("DEL").arg(&key).query::<()>(con).unwrap(),
        &|con| redis::cmd("FLUSHALL").query::<()>(con).unwrap(),
    ];
    for reset in resets {
        let retry = spend_and_cache();
        reset(&mut con);
        // The cap has surely passed (1 s on the store's monotonic clock): Redis is asked,
        // and the reset client is admitted.
        std::thread::sleep(Duration::from_millis(1_100));
        let before = policy.backend().stats();
        let d = policy.allow("tenant", "/", 1).unwrap();
        assert!(
            d.allowed(),
            "a deny cached for {retry:?} still answered after the reset: {d:?}"
        );
        let after = policy.backend().stats();
        assert_eq!(after.deny_cache_hits, before.deny_cache_hits);
        assert_eq!(after.redis_decisions, before.redis_decisions + 1);
        redis::cmd("DEL").arg(&key).query::<()>(&mut con).unwrap();
    }
    // Forgotten on demand: at once, no waiting for the cap.
    spend_and_cache();
    redis::cmd("DEL").arg(&key).query::<()>(&mut con).unwrap();
    // Another client's deny stays cached.
    for _ in 0..4 {
        policy.allow("other", "/", 1).unwrap();
    }
    assert!(policy.backend().forget_denies(Some("nobody")) == 0);
    assert_eq!(policy.backend().forget_denies(Some("tenant")), 1);
    let before = policy.backend().stats();
    assert!(policy.allow("tenant", "/", 1).unwrap().allowed());
    assert!(!policy.allow("other", "/", 1).unwrap().allowed());
    let after = policy.backend().stats();
    assert_eq!(after.redis_decisions, before.redis_decisions + 1);
    assert_eq!(after.deny_cache_hits, before.deny_cache_hits + 1);
    // The cap is a setting: zero is refused (a cache of 0 entries disables it).
    let zero = RedisConfig::new("trust")
        .unwrap()
        .with_deny_cache_max_age(Duration::ZERO);
    assert!(matches!(
        RedisStore::new(RedisTarget::Single(server.url()), zero),
        Err(tollgate_redis::BuildError::OutOfRange {
            setting: "deny_cache_max_age",
            ..
        })
    ));
}

/// The deny cache's trust in the policy's clock (client time source): a deny is
/// answered locally for exactly `max_age`, then Redis is asked again.
#[test]
fn a_cached_deny_is_trusted_for_exactly_its_max_age_on_the_policys_clock() {
    let server = RedisServer::start();
    let clock = ManualClock::starting_at(Nanos::from_secs(1_700_000_000));
    let config = RedisConfig::new("trustc")
        .unwrap()
        .with_time_source(TimeSource::Client)
        .with_ttl_slack(Duration::from_secs(3600))
        .with_deny_cache_max_age(Duration::from_millis(200));
    let store = RedisStore::new(RedisTarget::Single(server.url()), config).unwrap();
    let policy = Policy::from_toml(THREE_A_DAY, clock.clone())
        .unwrap()
        .store(store);
    for _ in 0..3 {
        assert!(policy.allow("tenant", "/", 1).unwrap().allowed());
    }
    assert!(!policy.allow("tenant", "/", 1).unwrap().allowed());
    clock.advance(Nanos::from_millis(200) - Nanos::new(1));
    let before = policy.backend().stats();
    assert!(!policy.allow("tenant", "/", 1).unwrap().allowed());
    assert_eq!(
        policy.backend().stats().deny_cache_hits,
        before.deny_cache_hits + 1
    );
    clock.advance(Nanos::new(1));
    assert!(!policy.allow("tenant", "/", 1).unwrap().allowed());
    let after = policy.backend().stats();
    assert_eq!(after.deny_cache_hits, before.deny_cache_hits + 1);
    assert_eq!(after.redis_decisions, before.redis_decisions + 1);
}

/// Batches (`Policy::check_all_async`: several clients' requests as one, all or nothing)
/// decide on Redis exactly as in-process and on the reference store, each in one round
/// trip when every tier is a client's (one call), two when a shared tier joins.
#[test]
fn batches_on_redis_decide_as_in_process_in_one_call() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let clock = ManualClock::starting_at(Nanos::from_secs(1_700_000_000));
    let reference = Policy::from_toml(RULES, clock.clone())
        .unwrap()
        .store(MapStore::default());
    let ours = Policy::from_toml(RULES, clock.clone())
        .unwrap()
        .store(uncached_store(RedisTarget::Single(server.url()), "batch"));
    let in_process = Policy::from_toml(RULES, clock.clone()).unwrap();
    let clients = ["a", "b", "vip", "c"];
    let endpoints = ["/", "/search", "/upload"];
    let mut rng = Rng(0x5eed_ba7c);
    let (mut admitted, mut denied) = (0, 0);
    for step in 0..400 {
        clock.advance(Nanos::from_millis(rng.below(4) * rng.below(200)));
        let batch: Vec<Request<'_>> = (0..1 + rng.below(3))
            .map(|_| {
                Request::new(
                    clients[rng.below(4) as usize],
                    endpoints[rng.below(3) as usize],
                    [1, 1, 2, 3][rng.below(4) as usize],
                )
            })
            .collect();
        let expected = in_process.check_all(&batch);
        assert_eq!(
            reference.check_all(&batch),
            expected,
            "step {step}: reference {batch:?}"
        );
        let before = ours.backend().stats().round_trips;
        let got = runtime.block_on(ours.check_all_async(&batch));
        assert_eq!(got, expected, "step {step}: {batch:?}");
        let Ok(got) = got else { continue };
        if got.allowed() {
            admitted += 1;
        } else {
            denied += 1;
        }
        let shared = batch.iter().any(|r| r.endpoint == "/upload");
        let trips = ours.backend().stats().round_trips - before;
        if !shared {
            assert_eq!(trips, 1, "step {step}: one round trip for {batch:?}");
        }
    }
    assert!(
        admitted > 50 && denied > 50,
        "{admitted} admitted, {denied} denied"
    );
}

/// Batches on a cluster: each client's tiers run in a call of their own (their hash tag's
/// slot), and the calls are all or nothing (a call that denies has the calls before it give
/// back what they took), so batches of one client and of several clients on different
/// masters decide step by step as in-process, never a partial admission, and nothing is
/// answered by the failure policy.
#[test]
fn batches_on_a_cluster_decide_as_in_process() {
    let cluster = RedisCluster::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let clock = ManualClock::starting_at(Nanos::from_secs(1_700_000_000));
    let ours = Policy::from_toml(RULES, clock.clone()).unwrap().store(
        RedisStore::new(
            RedisTarget::Cluster(cluster.urls()),
            config("cbatch")
                .with_deny_cache(0)
                .with_failure_policy(closed())
                .unwrap(),
        )
        .unwrap(),
    );
    let in_process = Policy::from_toml(RULES, clock.clone()).unwrap();
    let one_client = [Request::new("a", "/", 1), Request::new("a", "/search", 2)];
    // Clients whose keys live on different masters (three of them: every master).
    let clients = ["b", "c", "d", "e", "f"];
    let masters: std::collections::HashSet<usize> = clients
        .iter()
        .map(|c| cluster.owner(&format!("{{{c}}}")))
        .collect();
    assert!(masters.len() >= 2, "the clients span several masters");
    let (mut admitted, mut denied) = (0, 0);
    for step in 0..40 {
        let expected = in_process.check_all(&one_client);
        let got = runtime.block_on(ours.check_all_async(&one_client));
        assert_eq!(got, expected, "step {step}");
        let (x, y) = (clients[step % 5], clients[(step * 3 + 1) % 5]);
        let several = [
            Request::new(x, "/", 1),
            Request::new(y, "/search", 1),
            Request::new(clients[(step + 2) % 5], "/", 2),
        ];
        let expected = in_process.check_all(&several);
        let got = runtime.block_on(ours.check_all_async(&several));
        assert_eq!(got, expected, "step {step}: {several:?}");
        if expected.is_ok_and(|d| d.allowed()) {
            admitted += 1;
        } else {
            denied += 1;
        }
        clock.advance(Nanos::from_millis(60));
    }
    assert!(
        admitted > 5 && denied > 5,
        "{admitted} admitted, {denied} denied"
    );
    assert_eq!(ours.backend().stats().degraded, 0);
}

/// A reset deletes the client's keys in Redis (every tier it matches, the global rule's
/// left alone), answers denies cached for it no more, and reaches the cluster's slots too.
#[test]
fn a_reset_forgets_the_client_in_redis_and_in_the_deny_cache() {
    let rules = r#"
        [[rules]]
        name = "default"
        limit = 2
        window = "1h"
        algorithm = "fixed_window"

        [[rules]]
        name = "everyone"
        endpoint = "/shared"
        per = "global"
        limit = 2
        window = "1h"
    "#;
    let server = RedisServer::start();
    let cluster = RedisCluster::start();
    for (target, single) in [
        (RedisTarget::Single(server.url()), true),
        (RedisTarget::Cluster(cluster.urls()), false),
    ] {
        let clock = ManualClock::starting_at(Nanos::from_secs(1_700_000_000));
        let policy = Policy::from_toml(rules, clock.clone())
            .unwrap()
            .store(store(target, "reset"));
        let key = policy.backend().redis_key("default", "default", Some("a"));
        // Whether the key is in Redis (asked of the single node only).
        let exists = || {
            single.then(|| {
                redis::cmd("EXISTS")
                    .arg(&key)
                    .query::<i64>(&mut server.connection())
                    .unwrap()
                    == 1
            })
        };
        for _ in 0..2 {
            assert!(policy.allow("a", "/shared", 1).unwrap().allowed());
        }
        // Denied, and the deny cached: the next ones are answered here.
        assert!(!policy.allow("a", "/", 1).unwrap().allowed());
        let hits = policy.backend().stats().deny_cache_hits;
        assert!(!policy.allow("a", "/", 1).unwrap().allowed());
        assert_eq!(policy.backend().stats().deny_cache_hits, hits + 1);
        assert_ne!(exists(), Some(false), "{key} before the reset");
        policy.reset("a", "/shared");
        assert_ne!(exists(), Some(true), "{key} after the reset");
        assert_eq!(policy.peek("a", "/", 0).unwrap().remaining(), 2);
        assert!(policy.allow("a", "/", 1).unwrap().allowed());
        // The global tier is everyone's: still spent.
        assert!(!policy.allow("b", "/shared", 1).unwrap().allowed());
    }
}
