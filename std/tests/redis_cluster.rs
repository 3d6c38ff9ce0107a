//! Redis backend against a real 3-master Redis Cluster (slots assigned by the harness):
//! the shared vectors give the core's decisions with keys spread over all three masters,
//! and multi-tier checks run on one slot, all or nothing.
#![cfg(feature = "redis")]

mod redis_support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis_support::server::RedisCluster;
use redis_support::vector_limiter;
use redis_support::vectors::{self, Rng};
use tollgate::redis::{DecisionSource, RedisConfig, RedisLimiter, RedisRule, RedisTarget};
use tollgate::{AlgorithmConfig, AnyLimiter, Nanos};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_runs_the_shared_vectors_on_all_three_masters() {
    let cluster = RedisCluster::start();
    let cases = vectors::cases(60);
    let mut owners = BTreeSet::new();
    for (i, case) in cases.iter().enumerate() {
        let limiter = vector_limiter(
            RedisTarget::Cluster(cluster.urls()),
            "cvec",
            &[("r", case.config)],
        );
        let key = format!("case{i}");
        vectors::assert_case(&limiter, &key, case).await;
        let redis_key = limiter.redis_key(0, &key).unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_multi_tier_checks_run_on_one_slot_all_or_nothing() {
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
    let limiter = vector_limiter(RedisTarget::Cluster(cluster.urls()), "ctier", &tiers);
    let mut slots_by_client = Vec::new();
    for client in ["alice", "bob", "carol", "dave", "erin", "frank"] {
        let slots: BTreeSet<u16> = (0..tiers.len())
            .map(|i| cluster.slot(&limiter.redis_key(i, client).unwrap()))
            .collect();
        assert_eq!(slots.len(), 1, "{client}: every tier on one slot");
        slots_by_client.push(*slots.iter().next().unwrap());
    }
    // Scoped rules (per client, per client and endpoint) share the client's slot too.
    let scoped: BTreeSet<u16> = ["", "/search", "/upload"]
        .iter()
        .flat_map(|scope| (0..tiers.len()).map(move |i| (i, *scope)))
        .map(|(i, scope)| cluster.slot(&limiter.redis_key_scoped(i, "alice", scope).unwrap()))
        .collect();
    assert_eq!(scoped.len(), 1);
    let d = limiter
        .check_scoped_at(
            "zoe",
            &["", "/search", "/upload"],
            1,
            Nanos::from_secs(1_790_000_000),
        )
        .await
        .unwrap();
    assert_eq!((d.source, d.allowed()), (DecisionSource::Redis, true));
    let masters: BTreeSet<usize> = ["alice", "bob", "carol", "dave", "erin", "frank"]
        .iter()
        .map(|c| cluster.owner(&limiter.redis_key(0, c).unwrap()))
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
            let got = limiter
                .check_n_at(client, 1, Nanos::new(now))
                .await
                .unwrap();
            assert_eq!(got.source, DecisionSource::Redis);
            assert_eq!(got.tiers, want, "{client} step {step}");
            if got.allowed() {
                yes += 1
            } else {
                no += 1
            }
        }
        assert!(yes > 20 && no > 20, "{client}: {yes}/{no}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_concurrent_tasks_admit_exactly_the_bound() {
    let cluster = RedisCluster::start();
    let limiter = Arc::new(
        RedisLimiter::new(
            RedisTarget::Cluster(cluster.urls()),
            vec![
                RedisRule::new(
                    "day",
                    AlgorithmConfig::Gcra {
                        limit: 1,
                        period: Nanos::from_secs(86_400),
                        burst: 50,
                    },
                )
                .unwrap(),
                RedisRule::new(
                    "log",
                    AlgorithmConfig::SlidingWindowLog {
                        limit: 64,
                        window: Nanos::from_secs(3600),
                    },
                )
                .unwrap(),
            ],
            RedisConfig::new("cconc")
                .unwrap()
                .with_timeout(Duration::from_secs(10))
                .with_deny_cache(0),
        )
        .unwrap(),
    );
    let admitted = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (limiter, admitted) = (limiter.clone(), admitted.clone());
            tokio::spawn(async move {
                for _ in 0..8 {
                    if limiter.check("hot").await.unwrap().allowed() {
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
    assert_eq!(limiter.stats().degraded, 0);
}
