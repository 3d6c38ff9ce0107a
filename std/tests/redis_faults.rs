//! Redis backend under faults, against real servers: `kill -9` mid-traffic gives the
//! configured failure policy without panics or hangs past the timeout, a restart recovers
//! without rebuilding the limiter, a paused or sleeping server times out into the policy,
//! and `SCRIPT FLUSH` (on `EVALSHA`) and `FUNCTION FLUSH` (on `FCALL`) are reloaded
//! transparently; a server without Redis Functions gets `EVALSHA`.
#![cfg(feature = "redis")]

mod redis_support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis_support::server::RedisServer;
use tollgate::redis::{
    DecisionSource, FailureCause, FailurePolicy, RedisConfig, RedisDecision, RedisLimiter,
    RedisRule, RedisTarget,
};
use tollgate::{AlgorithmConfig, Nanos};

const TIMEOUT: Duration = Duration::from_millis(300);
/// Far above the timeout: a check that needs this long is hung.
const HANG: Duration = Duration::from_secs(5);

fn limiter(server: &RedisServer, policy: FailurePolicy) -> Arc<RedisLimiter> {
    limiter_with(server, policy, true)
}

/// `limiter`, running scripts as Redis Functions or (`functions` false) by `EVALSHA`.
fn limiter_with(server: &RedisServer, policy: FailurePolicy, functions: bool) -> Arc<RedisLimiter> {
    let config = RedisConfig::new("faults")
        .unwrap()
        .with_timeout(TIMEOUT)
        .with_connect_timeout(TIMEOUT)
        .with_retry_backoff(Duration::from_millis(50))
        .with_failure_policy(policy)
        .unwrap()
        .with_deny_cache(0)
        .with_functions(functions);
    let rules = vec![RedisRule::new(
        "day",
        AlgorithmConfig::Gcra {
            limit: 1,
            period: Nanos::from_secs(86_400),
            burst: 10,
        },
    )
    .unwrap()];
    Arc::new(RedisLimiter::new(RedisTarget::Single(server.url()), rules, config).unwrap())
}

/// A check that must answer within HANG.
async fn check(limiter: &RedisLimiter, key: &str) -> RedisDecision {
    tokio::time::timeout(HANG, limiter.check(key))
        .await
        .expect("a check hung past the timeout")
        .expect("check")
}

/// Checks until Redis decides again (bounded), proving recovery without a restart.
async fn until_recovered(limiter: &RedisLimiter, key: &str) -> RedisDecision {
    for _ in 0..200 {
        let d = check(limiter, key).await;
        if d.source == DecisionSource::Redis {
            return d;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no recovery after the server came back");
}

/// Traffic from 4 tasks; `kill -9` the server in the middle; returns every decision made
/// while it was down.
async fn kill_mid_traffic(
    server: &mut RedisServer,
    limiter: &Arc<RedisLimiter>,
) -> Vec<RedisDecision> {
    assert_eq!(
        until_recovered(limiter, "warmup").await.source,
        DecisionSource::Redis
    );
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..4)
        .map(|t| {
            let (limiter, stop) = (limiter.clone(), stop.clone());
            tokio::spawn(async move {
                let mut seen = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    seen.push(check(&limiter, &format!("traffic{t}")).await);
                }
                seen
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.kill();
    let killed = Instant::now();
    tokio::time::sleep(TIMEOUT * 3).await;
    stop.store(true, Ordering::Relaxed);
    let mut down = Vec::new();
    for t in tasks {
        down.extend(
            t.await
                .expect("no task panicked")
                .into_iter()
                .filter(|d| d.is_degraded()),
        );
    }
    assert!(!down.is_empty(), "checks after the kill were degraded");
    // While down, checks keep answering (each within the bound, see `check`).
    let d = check(limiter, "while-down").await;
    assert!(d.is_degraded());
    assert!(killed.elapsed() < HANG * 2);
    down
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_fail_open_admits_degraded_then_recovers() {
    let mut server = RedisServer::start();
    let limiter = limiter(&server, FailurePolicy::FailOpen);
    let down = kill_mid_traffic(&mut server, &limiter).await;
    for d in &down {
        assert!(d.allowed());
        assert!(matches!(d.source, DecisionSource::Degraded(_)));
    }
    server.restart();
    let d = until_recovered(&limiter, "after").await;
    assert!(d.allowed());
    // The restarted server had no scripts: NOSCRIPT was answered by a transparent reload.
    assert!(limiter.stats().script_reloads >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_fail_closed_denies_degraded_then_recovers() {
    let mut server = RedisServer::start();
    let retry = Duration::from_millis(1500);
    let limiter = limiter(&server, FailurePolicy::FailClosed { retry_after: retry });
    let down = kill_mid_traffic(&mut server, &limiter).await;
    for d in &down {
        assert!(!d.allowed());
        assert_eq!(d.decision.retry_after, Nanos::from_duration(retry));
    }
    server.restart();
    assert!(until_recovered(&limiter, "after").await.allowed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_fallback_enforces_the_share_locally_then_recovers() {
    let mut server = RedisServer::start();
    let limiter = limiter(&server, FailurePolicy::Fallback { share: 0.5 });
    kill_mid_traffic(&mut server, &limiter).await;
    // A fresh key while Redis is down: half of the burst of 10, decided in-process.
    let mut admitted = 0;
    for _ in 0..20 {
        let d = check(&limiter, "fresh").await;
        assert!(d.is_degraded());
        assert_eq!(d.decision.limit, 5);
        if d.allowed() {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 5);
    server.restart();
    let d = until_recovered(&limiter, "fresh").await;
    // Redis' state for the key is its own (empty after the restart): the full limit.
    assert_eq!(d.decision.limit, 10);
    assert_eq!(d.decision.remaining, 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_server_times_out_into_the_policy() {
    let server = RedisServer::start();
    let limiter = limiter(
        &server,
        FailurePolicy::FailClosed {
            retry_after: Duration::from_secs(1),
        },
    );
    assert_eq!(check(&limiter, "k").await.source, DecisionSource::Redis);
    let _: String = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1500)
        .arg("ALL")
        .query(&mut server.connection())
        .unwrap();
    let d = check(&limiter, "k").await;
    assert_eq!(d.source, DecisionSource::Degraded(FailureCause::Timeout));
    assert!(!d.allowed());
    // Within the backoff Redis is not even tried.
    let d = check(&limiter, "k").await;
    assert!(d.is_degraded());
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let d = until_recovered(&limiter, "k").await;
    assert!(d.allowed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_sleep_times_out_into_the_policy() {
    let server = RedisServer::start();
    let limiter = limiter(&server, FailurePolicy::FailOpen);
    assert_eq!(check(&limiter, "k").await.source, DecisionSource::Redis);
    let mut side = server.connection();
    let sleeper = std::thread::spawn(move || {
        let _: redis::RedisResult<String> =
            redis::cmd("DEBUG").arg("SLEEP").arg(1).query(&mut side);
    });
    // Check until the sleep is seen (the side command may take a moment to arrive): the
    // server sleeps 1 s, far beyond the 300 ms timeout, so a check overlapping it times
    // out into the policy.
    let mut timed_out = false;
    while !sleeper.is_finished() && !timed_out {
        let d = check(&limiter, "k").await;
        assert!(d.allowed());
        timed_out = d.source == DecisionSource::Degraded(FailureCause::Timeout);
    }
    assert!(timed_out, "a check overlapping DEBUG SLEEP timed out");
    tokio::task::spawn_blocking(move || sleeper.join().unwrap())
        .await
        .unwrap();
    assert_eq!(
        until_recovered(&limiter, "k").await.source,
        DecisionSource::Redis
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_is_reloaded_transparently() {
    let server = RedisServer::start();
    let limiter = limiter_with(
        &server,
        FailurePolicy::FailClosed {
            retry_after: Duration::from_secs(1),
        },
        false,
    );
    // First use on a fresh server: EVALSHA → NOSCRIPT → EVAL.
    let d = check(&limiter, "k").await;
    assert_eq!((d.source, d.decision.remaining), (DecisionSource::Redis, 9));
    let before = limiter.stats();
    assert_eq!(before.script_reloads, 1);
    let d = check(&limiter, "k").await;
    assert_eq!(d.decision.remaining, 8);
    assert_eq!(
        limiter.stats().round_trips,
        before.round_trips + 1,
        "one round trip per decision"
    );
    let _: String = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut server.connection())
        .unwrap();
    let d = check(&limiter, "k").await;
    assert_eq!((d.source, d.decision.remaining), (DecisionSource::Redis, 7));
    let after = limiter.stats();
    assert_eq!(after.script_reloads, 2);
    assert_eq!(after.round_trips, before.round_trips + 3);
    assert_eq!(after.degraded, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn function_flush_is_reloaded_transparently() {
    let server = RedisServer::start();
    let limiter = limiter(
        &server,
        FailurePolicy::FailClosed {
            retry_after: Duration::from_secs(1),
        },
    );
    // First use on a fresh server: FCALL → Function not found → FUNCTION LOAD → FCALL.
    let d = check(&limiter, "k").await;
    assert_eq!((d.source, d.decision.remaining), (DecisionSource::Redis, 9));
    let before = limiter.stats();
    assert_eq!(before.script_reloads, 1);
    assert_eq!(before.round_trips, 3);
    let d = check(&limiter, "k").await;
    assert_eq!(d.decision.remaining, 8);
    assert_eq!(
        limiter.stats().round_trips,
        before.round_trips + 1,
        "one round trip per decision"
    );
    // The script cache is not what FCALL uses: flushing it changes nothing.
    let _: String = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut server.connection())
        .unwrap();
    let d = check(&limiter, "k").await;
    assert_eq!(d.decision.remaining, 7);
    assert_eq!(limiter.stats().round_trips, before.round_trips + 2);
    let _: String = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query(&mut server.connection())
        .unwrap();
    let d = check(&limiter, "k").await;
    assert_eq!((d.source, d.decision.remaining), (DecisionSource::Redis, 6));
    let after = limiter.stats();
    assert_eq!(after.script_reloads, 2);
    assert_eq!(after.round_trips, before.round_trips + 5);
    assert_eq!(after.degraded, 0);
    // Loaded once per server, not per call.
    let libraries: Vec<redis::Value> = redis::cmd("FUNCTION")
        .arg("LIST")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(libraries.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_functions_gets_evalsha() {
    // As Redis 6 answers: `unknown command` for FCALL and FUNCTION.
    let server = RedisServer::start_with(&[
        "--rename-command",
        "FCALL",
        "",
        "--rename-command",
        "FUNCTION",
        "",
    ]);
    let limiter = limiter(
        &server,
        FailurePolicy::FailClosed {
            retry_after: Duration::from_secs(1),
        },
    );
    // FCALL → unknown command → EVALSHA → NOSCRIPT → EVAL.
    let d = check(&limiter, "k").await;
    assert_eq!((d.source, d.decision.remaining), (DecisionSource::Redis, 9));
    let before = limiter.stats();
    assert_eq!((before.round_trips, before.script_reloads), (3, 1));
    // From then on EVALSHA only: one round trip.
    let d = check(&limiter, "k").await;
    assert_eq!(d.decision.remaining, 8);
    let after = limiter.stats();
    assert_eq!(after.round_trips, before.round_trips + 1);
    assert_eq!(after.degraded, 0);
}
