//! A policy on a [`RedisStore`] against a real 3-master Redis Cluster (slots assigned by
//! the harness): the shared vectors give the core's decisions with keys spread over all
//! three masters, a check's tiers run on one slot, all or nothing, tasks awaiting
//! checks of one client admit exactly the bound, and a listing of the clients limited
//! scans every master.

mod redis_support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis_support::server::RedisCluster;
use redis_support::vectors::{self, Rng};
use redis_support::{one_rule, vector_policy};
use tollgate::policy::Policy;
use tollgate::{AlgorithmConfig, AnyLimiter, MonotonicClock, Nanos};
use tollgate_redis::{RedisConfig, RedisStore, RedisTarget};

#[test]
fn cluster_runs_the_shared_vectors_on_all_three_masters() {
    let cluster = RedisCluster::start();
    let cases = vectors::cases(60);
    let mut owners = BTreeSet::new();
    for (i, case) in cases.iter().enumerate() {
        let policy = vector_policy(
            RedisTarget::Cluster(cluster.urls()),
            "cvec",
            &[("r", case.config)],
        );
        let key = format!("case{i}");
        vectors::assert_case(&policy, &key, case);
        let redis_key = policy.backend().redis_key("r", "r", Some(&key));
        owners.insert(cluster.owner(&redis_key));
        // The state really is on the owning master.
        let mut con = cluster.nodes()[cluster.owner(&redis_key)].connection();
        let exists: i64 = redis::cmd("EXISTS")
            .arg(&redis_key)
            .query(&mut con)
            .unwrap();
        let admitted_any = vectors::core_decisions(case)
            .iter()
            .zip(&case.trace)
            .any(|(d, &(_, cost))| cost > 0 && matches!(d, Ok(d) if d.allowed));
        assert!(exists == 1 || !admitted_any, "{redis_key}");
    }
    assert_eq!(owners.len(), 3, "keys spread over every master: {owners:?}");
}

#[test]
fn cluster_multi_tier_checks_run_on_one_slot_all_or_nothing() {
    let cluster = RedisCluster::start();
    let tiers = [
        (
            "second",
            AlgorithmConfig::Gcra {
                limit: 4,
                period: Nanos::from_secs(1),
                burst: 4,
            },
        ),
        (
            "minute",
            AlgorithmConfig::SlidingWindowLog {
                limit: 20,
                window: Nanos::from_secs(60),
            },
        ),
        (
            "hour",
            AlgorithmConfig::FixedWindow {
                limit: 100,
                window: Nanos::from_secs(3600),
            },
        ),
    ];
    let policy = vector_policy(RedisTarget::Cluster(cluster.urls()), "ctier", &tiers);
    let clients = ["alice", "bob", "carol", "dave", "erin", "frank"];
    let key = |tier: &str, client: &str| policy.backend().redis_key("r", tier, Some(client));
    for client in clients {
        let slots: BTreeSet<u16> = tiers
            .iter()
            .map(|(tier, _)| cluster.slot(&key(tier, client)))
            .collect();
        assert_eq!(slots.len(), 1, "{client}: every tier on one slot");
    }
    let masters: BTreeSet<usize> = clients
        .iter()
        .map(|c| cluster.owner(&key("second", c)))
        .collect();
    assert!(
        masters.len() >= 2,
        "clients on several masters: {masters:?}"
    );

    for client in ["alice", "bob", "carol"] {
        let core: Vec<AnyLimiter<{ vectors::RING }>> = tiers
            .iter()
            .map(|(_, c)| AnyLimiter::new(c.build().unwrap()).unwrap())
            .collect();
        let mut rng = Rng::new(client.len() as u64 * 7919);
        let mut now = 1_790_000_000_000_000_000u64;
        let (mut yes, mut no) = (0, 0);
        for step in 0..300 {
            now += rng.below(2_000_000_000);
            let want = vectors::core_multi(&core, now, 1).unwrap();
            let got = policy.allow_at(client, "/", 1, Nanos::new(now)).unwrap();
            let decisions: Vec<_> = got.tiers().iter().map(|t| t.decision).collect();
            assert_eq!(decisions, want, "{client} step {step}");
            if got.allowed() {
                yes += 1
            } else {
                no += 1
            }
        }
        assert!(yes > 20 && no > 20, "{client}: {yes}/{no}");
    }
    assert_eq!(policy.backend().stats().degraded, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_concurrent_tasks_admit_exactly_the_bound() {
    let cluster = RedisCluster::start();
    let tiers = [
        (
            "day",
            AlgorithmConfig::Gcra {
                limit: 1,
                period: Nanos::from_secs(86_400),
                burst: 50,
            },
        ),
        (
            "log",
            AlgorithmConfig::SlidingWindowLog {
                limit: 64,
                window: Nanos::from_secs(3600),
            },
        ),
    ];
    let store = RedisStore::new(
        RedisTarget::Cluster(cluster.urls()),
        RedisConfig::new("cconc")
            .unwrap()
            .with_timeout(Duration::from_secs(10))
            .with_deny_cache(0),
    )
    .unwrap();
    let policy = Arc::new(
        Policy::new(one_rule(&tiers), MonotonicClock::new())
            .unwrap()
            .store(store),
    );
    let admitted = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (policy, admitted) = (policy.clone(), admitted.clone());
            tokio::spawn(async move {
                for _ in 0..8 {
                    if policy.allow_async("hot", "/", 1).await.unwrap().allowed() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(admitted.load(Ordering::Relaxed), 50);
    assert_eq!(policy.backend().stats().degraded, 0);
}

/// A policy of one rule (1 an hour) on `cluster` under `prefix`, with no deny cache and
/// no in-process record of denials: only the scan of the masters finds its limited clients.
fn listed_policy(cluster: &RedisCluster, prefix: &str) -> Policy<MonotonicClock, RedisStore> {
    let config = RedisConfig::new(prefix)
        .unwrap()
        .with_deny_cache(0)
        .with_timeout(Duration::from_secs(5))
        .with_connect_timeout(Duration::from_secs(5));
    let store = RedisStore::new(RedisTarget::Cluster(cluster.urls()), config).unwrap();
    Policy::from_toml(
        "[[rules]]\nname = \"r\"\nlimit = 1\nwindow = \"1h\"\n",
        MonotonicClock::new(),
    )
    .unwrap()
    .store(store)
    .with_limited_record(0)
}

#[test]
fn cluster_listing_scans_every_master() {
    let cluster = RedisCluster::start();
    let policy = listed_policy(&cluster, "clist");
    // Clients until their keys are on every master, each denied.
    let mut denied = BTreeSet::new();
    let mut owners = BTreeSet::new();
    for i in 0..64 {
        let client = format!("client{i}");
        owners.insert(cluster.owner(&policy.backend().redis_key("r", "r", Some(&client))));
        assert!(policy.allow(&client, "/", 1).unwrap().allowed());
        assert!(!policy.allow(&client, "/", 1).unwrap().allowed());
        denied.insert(client);
        if owners.len() == 3 && denied.len() >= 6 {
            break;
        }
    }
    assert_eq!(owners.len(), 3);
    let limited = policy
        .limited(tollgate::policy::ListBounds::new(1000))
        .unwrap();
    assert!(limited.complete);
    let listed: BTreeSet<String> = limited.clients.iter().map(|c| c.client.clone()).collect();
    assert_eq!(listed, denied);
    assert!(limited
        .clients
        .iter()
        .all(|c| c.rule == "r" && c.decision.remaining() == 0));
}

/// `CLUSTER MYID` of `node`.
fn node_id(node: &redis_support::server::RedisServer) -> String {
    redis::cmd("CLUSTER")
        .arg("MYID")
        .query(&mut node.connection())
        .expect("CLUSTER MYID")
}

/// A slot moving from one master to another (`CLUSTER SETSLOT … IMPORTING` on the target,
/// `MIGRATING` on the source): a check of a key the source does not hold is redirected by
/// `ASK` to the target, a master whose functions were flushed (or that never had the
/// library: a node just added). The check is decided there, by Redis, not failed.
#[test]
fn cluster_check_redirected_by_ask_to_a_master_without_the_library_is_decided() {
    let cluster = RedisCluster::start();
    let store = RedisStore::new(
        RedisTarget::Cluster(cluster.urls()),
        RedisConfig::new("cask")
            .unwrap()
            .with_timeout(Duration::from_secs(5))
            .with_deny_cache(0),
    )
    .unwrap();
    let policy = Policy::from_toml(
        "[[rules]]\nname = \"r\"\nlimit = 2\nwindow = \"1h\"\n",
        MonotonicClock::new(),
    )
    .unwrap()
    .store(store);
    // A client on master 0, checked once: the library is loaded there.
    let client = (0..)
        .map(|i| format!("mover{i}"))
        .find(|c| cluster.owner(&policy.backend().redis_key("r", "r", Some(c))) == 0)
        .unwrap();
    assert!(policy.allow(&client, "/", 1).unwrap().allowed());
    // Another client of the same slot, never checked: its key is on no node.
    let key = policy.backend().redis_key("r", "r", Some(&client));
    let slot = cluster.slot(&key);
    let other = (0..)
        .map(|i| format!("other{i}"))
        .find(|c| cluster.slot(&policy.backend().redis_key("r", "r", Some(c))) == slot)
        .unwrap();
    let (source, target) = (&cluster.nodes()[0], &cluster.nodes()[1]);
    let _: String = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query(&mut target.connection())
        .unwrap();
    let _: String = redis::cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg("IMPORTING")
        .arg(node_id(source))
        .query(&mut target.connection())
        .unwrap();
    let _: String = redis::cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg("MIGRATING")
        .arg(node_id(target))
        .query(&mut source.connection())
        .unwrap();
    // The migrating client's key is still on the source: decided there.
    assert!(policy.allow(&client, "/", 1).unwrap().allowed());
    assert!(!policy.allow(&client, "/", 1).unwrap().allowed());
    // The new client's key is created on the target, through `ASK`.
    for allowed in [true, true, false] {
        let decision = policy.allow(&other, "/", 1).unwrap();
        let stats = policy.backend().stats();
        assert_eq!(decision.allowed(), allowed, "{stats:?}");
    }
    let other_key = policy.backend().redis_key("r", "r", Some(&other));
    let mut con = target.connection();
    let _: String = redis::cmd("ASKING").query(&mut con).unwrap();
    let on_target: i64 = redis::cmd("EXISTS")
        .arg(&other_key)
        .query(&mut con)
        .unwrap();
    assert_eq!(on_target, 1, "{other_key} created on the importing master");
    let stats = policy.backend().stats();
    assert_eq!(stats.degraded, 0, "{stats:?}");
}

/// A listing after a resharding this process's checks have not seen: slot 0 moved from
/// the first master to the second (`CLUSTER SETSLOT 0 NODE`), so the second master's first
/// slot in `CLUSTER SLOTS` is one the client's slot map still gives to the first. Every
/// master is scanned all the same: the second master's clients are listed.
#[test]
fn cluster_listing_after_a_resharding_scans_every_master() {
    let cluster = RedisCluster::start();
    let policy = listed_policy(&cluster, "creshard");
    let mut denied = BTreeSet::new();
    for master in 0..3 {
        let client = (0..)
            .map(|i| format!("m{master}c{i}"))
            .find(|c| cluster.owner(&policy.backend().redis_key("r", "r", Some(c))) == master)
            .unwrap();
        assert!(policy.allow(&client, "/", 1).unwrap().allowed());
        assert!(!policy.allow(&client, "/", 1).unwrap().allowed());
        denied.insert(client);
    }
    // Slot 0 (empty) from master 0 to master 1, told to every node.
    let to = node_id(&cluster.nodes()[1]);
    for node in cluster.nodes() {
        let _: String = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(0)
            .arg("NODE")
            .arg(&to)
            .query(&mut node.connection())
            .unwrap();
    }
    let listed = policy
        .limited(tollgate::policy::ListBounds::new(1000))
        .unwrap();
    assert!(listed.complete);
    let listed: BTreeSet<String> = listed.clients.iter().map(|c| c.client.clone()).collect();
    assert_eq!(listed, denied);
}

/// A check of a client whose keys are being moved (`MIGRATE`, one key already on the
/// importing master, the other not yet): Redis answers `TRYAGAIN` until the migration
/// ends, a few milliseconds later. The check waits for it within its timeout and is
/// decided by Redis.
#[test]
fn cluster_check_retries_a_migrating_slots_tryagain_within_its_timeout() {
    let cluster = RedisCluster::start();
    let tiers = [
        (
            "second",
            AlgorithmConfig::FixedWindow {
                limit: 10,
                window: Nanos::from_secs(3600),
            },
        ),
        (
            "hour",
            AlgorithmConfig::FixedWindow {
                limit: 100,
                window: Nanos::from_secs(3600),
            },
        ),
    ];
    let store = RedisStore::new(
        RedisTarget::Cluster(cluster.urls()),
        RedisConfig::new("ctry")
            .unwrap()
            .with_timeout(Duration::from_millis(250))
            .with_deny_cache(0),
    )
    .unwrap();
    let policy = Policy::new(one_rule(&tiers), MonotonicClock::new())
        .unwrap()
        .store(store);
    assert!(policy.allow("mover", "/", 1).unwrap().allowed());
    let keys = ["second", "hour"].map(|t| policy.backend().redis_key("r", t, Some("mover")));
    let slot = cluster.slot(&keys[0]);
    let from = cluster.owner(&keys[0]);
    let to = (from + 1) % 3;
    let (source, target) = (&cluster.nodes()[from], &cluster.nodes()[to]);
    let setslot = |node: &redis_support::server::RedisServer, state: &str, id: &str| {
        let _: String = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(state)
            .arg(id)
            .query(&mut node.connection())
            .unwrap();
    };
    setslot(target, "IMPORTING", &node_id(source));
    setslot(source, "MIGRATING", &node_id(target));
    let migrate = |key: &str| {
        let _: String = redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(target.port())
            .arg(key)
            .arg(0)
            .arg(5000)
            .query(&mut source.connection())
            .unwrap();
    };
    migrate(&keys[0]);
    let target_id = node_id(target);
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(5));
            migrate(&keys[1]);
            for node in [target, source] {
                setslot(node, "NODE", &target_id);
            }
        });
        let decision = policy.allow("mover", "/", 1).unwrap();
        let stats = policy.backend().stats();
        assert!(decision.allowed(), "{stats:?}");
        assert_eq!(stats.degraded, 0, "{stats:?}");
    });
    let used: Vec<String> = keys
        .iter()
        .map(|k| {
            redis::cmd("GET")
                .arg(k)
                .query::<Option<String>>(&mut target.connection())
                .unwrap()
                .unwrap_or_default()
        })
        .collect();
    assert!(used.iter().all(|v| !v.is_empty()), "{used:?}");
}
