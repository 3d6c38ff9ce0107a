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

mod redis_support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis_support::server::{RedisCluster, RedisServer};
use tollgate::policy::{Policy, PolicyCheck};
use tollgate::MonotonicClock;
use tollgate_redis::{
    FailurePolicy, LeaseConfig, LeasedStore, RedisConfig, RedisStore, RedisTarget,
};

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

/// One client of the daily quota spends a request and reserves 1 000 more, then, through
/// a stall of its server (`freeze`, then `thaw`), gets a refund of 500, settles the
/// reservation at 3 000 (a charge of 2 000) and keeps asking: it gets nothing during the
/// stall, and after it the quota holds what it held before the stall (the late refund and
/// charge changed nothing either). Returns how many script calls were sent during the
/// stall.
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
    let reservation = policy.reserve("tenant", "/", 1_000).unwrap();
    assert!(reservation.allowed());
    assert_eq!(reservation.decision().remaining(), 7_000);
    freeze();
    let sent_before = policy.backend().stats().round_trips;
    let started = Instant::now();
    policy.refund("tenant", "/", 500);
    // Past the backoff the timeout started, so that the charge is sent too.
    std::thread::sleep(Duration::from_millis(60));
    let settled = reservation.settle(3_000).unwrap();
    assert!(!settled.allowed(), "fail closed: {settled:?}");
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
    assert_eq!(
        admitted, 0,
        "fail closed: nothing admitted during the stall"
    );
    assert!(
        denied + 2 >= sent && sent >= 4,
        "{denied} denied, {sent} sent"
    );
    // The calls sent during the stall ran when the server resumed, and changed nothing.
    assert_eq!(
        remaining_after_the_stall(&policy, "tenant"),
        7_000,
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
        while policy.backend().stats().leases < 3 || policy.backend().stats().held_permits < 100 {
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
    // The idle key gives its lease back and frees its slot, and every lease operation
    // that timed out during the stall has had its answer.
    let started = Instant::now();
    loop {
        let stats = policy.backend().stats();
        if stats.hot_keys == 0 && stats.held_permits == 0 && stats.unsettled_permits == 0 {
            break;
        }
        assert!(started.elapsed() < HANG, "{:?}", policy.backend().stats());
        std::thread::sleep(Duration::from_millis(10));
    }
    let stats = policy.backend().stats();
    let used = limit - policy.peek("c", "/", 0).unwrap().remaining();
    let admitted = admitted.load(Ordering::Relaxed);
    eprintln!("Redis used {used}, admitted {admitted}: {stats:?}");
    assert_eq!(
        used,
        admitted + stats.lost_permits,
        "Redis used {used}, admitted {admitted}: {stats:?}"
    );
    // The connection stayed up: every outcome was told.
    assert_eq!(stats.unknown_permits, 0, "{stats:?}");
    // Lease operations did time out during the stall (and were settled afterwards).
    assert!(stats.redis.degraded > 0, "{stats:?}");
}

/// The script itself: every operation the store sends (check, peek, refund, charge, as
/// read back from the server's slow log), replayed with a deadline in the past, by `FCALL`
/// and by `EVALSHA`, is refused with `TGEXPIRED` and leaves the key as it was; the same
/// check with a deadline ahead is decided and written.
#[test]
fn every_operation_past_its_deadline_is_refused_and_changes_nothing() {
    let server = RedisServer::start();
    let mut con = server.connection();
    let set = |con: &mut redis::Connection, name: &str, value: &str| {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query::<()>(con)
            .unwrap();
    };
    set(&mut con, "slowlog-max-len", "1000");
    let store = quota_store(RedisTarget::Single(server.url()), "late", true);
    let key = store.redis_key("quota", "quota", Some("tenant"));
    let policy = Policy::from_toml(QUOTA, MonotonicClock::new())
        .unwrap()
        .store(store);
    assert!(policy.allow("tenant", "/", COST).unwrap().allowed());
    set(&mut con, "slowlog-log-slower-than", "0");
    redis::cmd("SLOWLOG")
        .arg("RESET")
        .query::<()>(&mut con)
        .unwrap();
    assert!(policy.allow("tenant", "/", COST).unwrap().allowed());
    assert!(policy.peek("tenant", "/", COST).unwrap().allowed());
    policy.refund("tenant", "/", 100);
    let reservation = policy.reserve("tenant", "/", 100).unwrap();
    reservation.settle(300).unwrap();
    set(&mut con, "slowlog-log-slower-than", "10000");
    let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(1000)
        .query(&mut con)
        .unwrap();
    let text = |v: &redis::Value| match v {
        redis::Value::BulkString(b) => String::from_utf8(b.clone()).unwrap(),
        redis::Value::SimpleString(s) => s.clone(),
        other => panic!("slow log argument {other:?}"),
    };
    let calls: Vec<Vec<String>> = log
        .iter()
        .filter_map(|entry| {
            let redis::Value::Array(fields) = entry else {
                return None;
            };
            let redis::Value::Array(args) = fields.get(3)? else {
                return None;
            };
            let args: Vec<String> = args.iter().map(text).collect();
            args[0].eq_ignore_ascii_case("FCALL").then_some(args)
        })
        .collect();
    // FCALL name numkeys key mode plan: the mode is the operation, the TTL slack and the
    // deadline.
    let mut ops: Vec<char> = calls.iter().map(|c| c[4].chars().next().unwrap()).collect();
    ops.sort_unstable();
    ops.dedup();
    assert_eq!(ops, ['c', 'g', 'p', 'r'], "{calls:?}");
    let script = tollgate_redis::LuaScript::for_store();
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(script.body())
        .query::<String>(&mut con)
        .unwrap();
    let stored = |con: &mut redis::Connection| -> Option<String> {
        redis::cmd("GET").arg(&key).query(con).unwrap()
    };
    let before = stored(&mut con);
    assert!(before.is_some());
    let with_deadline = |call: &[String], ms: &str| -> Vec<String> {
        let mut call = call.to_vec();
        let op = call[4].split(' ').next().unwrap().to_owned();
        call[4] = format!("{op} {ms}");
        call
    };
    for call in &calls {
        let late = with_deadline(call, "1");
        let by_fcall = redis::cmd("FCALL")
            .arg(&late[1..])
            .query::<redis::Value>(&mut con);
        let mut evalsha = vec![script.sha().to_owned()];
        evalsha.extend_from_slice(&late[2..]);
        let by_evalsha = redis::cmd("EVALSHA")
            .arg(&evalsha)
            .query::<redis::Value>(&mut con);
        for reply in [by_fcall, by_evalsha] {
            let error = reply.expect_err("a late call is refused");
            assert_eq!(error.code(), Some("TGEXPIRED"), "{error:?}");
        }
        assert_eq!(stored(&mut con), before, "{late:?} changed the key");
    }
    // The same check, in time, is decided and written.
    let check = calls.iter().find(|c| c[4].starts_with('c')).unwrap();
    let in_time = with_deadline(check, "9007199254740");
    let reply: redis::Value = redis::cmd("FCALL")
        .arg(&in_time[1..])
        .query(&mut con)
        .unwrap();
    assert!(matches!(reply, redis::Value::Array(_)), "{reply:?}");
    assert_ne!(stored(&mut con), before);
}

/// A call the server runs past its deadline but before the store gives up on it (in the
/// last tenth of the timeout) is refused too, and the store hears the refusal: the failure
/// policy answers, as `FailureCause::Expired`, counted in `expired`, and the quota is
/// untouched. (The server is resumed at 95 % of a 2 s timeout; an attempt the machine's
/// noise pushes out of the last tenth is tried again.)
#[test]
fn a_refusal_heard_within_the_timeout_is_answered_by_the_failure_policy() {
    use tollgate_redis::FailureCause;
    let server = RedisServer::start();
    let timeout = Duration::from_secs(2);
    let config = RedisConfig::new("heard")
        .unwrap()
        .with_timeout(timeout)
        .with_retry_backoff(Duration::ZERO)
        .with_failure_policy(FailurePolicy::FailClosed {
            retry_after: Duration::from_secs(1),
        })
        .unwrap();
    let store = RedisStore::new(RedisTarget::Single(server.url()), config).unwrap();
    let policy = Policy::from_toml(QUOTA, MonotonicClock::new())
        .unwrap()
        .store(store);
    assert_eq!(
        policy.allow("tenant", "/", COST).unwrap().remaining(),
        8_000
    );
    let mut heard = false;
    for _ in 0..5 {
        let before = policy.backend().stats();
        server.sigstop();
        let d = std::thread::scope(|s| {
            let check = s.spawn(|| policy.allow("tenant", "/", COST).unwrap());
            std::thread::sleep(timeout * 19 / 20);
            server.sigcont();
            check.join().unwrap()
        });
        assert!(!d.allowed(), "{d:?}");
        assert_eq!(d.retry_after(), tollgate::Nanos::from_secs(1));
        let after = policy.backend().stats();
        if after.expired > before.expired {
            assert_eq!(after.expired, before.expired + 1);
            assert_eq!(after.last_failure, Some(FailureCause::Expired));
            assert!(after.degraded > before.degraded);
            heard = true;
            break;
        }
    }
    assert!(heard, "no refusal heard: {:?}", policy.backend().stats());
    assert_eq!(remaining_after_the_stall(&policy, "tenant"), 8_000);
}
