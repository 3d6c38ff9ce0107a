//! A policy on a [`RedisStore`] under faults, awaited from tokio tasks against real
//! servers: `kill -9` mid-traffic answers by the configured failure policy (open, closed, or
//! the in-process fallback with its share) without panics or hangs past the timeout, and a
//! restart recovers without rebuilding anything; a paused or sleeping server times out into
//! the policy; `SCRIPT FLUSH` (on `EVALSHA`) and `FUNCTION FLUSH` (on `FCALL`) are reloaded
//! transparently, one round trip per decision otherwise; a server without Redis Functions
//! gets `EVALSHA`. (The blocking methods' fault tests are in `redis_policy.rs`.)

mod redis_support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis_support::server::RedisServer;
use tollgate::policy::{Policy, PolicyDecision};
use tollgate::{MonotonicClock, Nanos};
use tollgate_redis::{FailurePolicy, RedisConfig, RedisStore, RedisTarget};

const TIMEOUT: Duration = Duration::from_millis(300);
/// Far above the timeout: a check that needs this long is hung.
const HANG: Duration = Duration::from_secs(5);

/// Ten a day per client, as a GCRA burst of ten (a fresh client has 9 left after one).
const RULES: &str = r#"
    [[rules]]
    name = "default"
    limit = 10
    window = "1d"
"#;

type RedisPolicy = Policy<MonotonicClock, RedisStore>;

fn policy(server: &RedisServer, failure: FailurePolicy) -> Arc<RedisPolicy> {
    policy_with(server, failure, true)
}

/// [`policy`], running scripts as Redis Functions or (`functions` false) by `EVALSHA`.
fn policy_with(server: &RedisServer, failure: FailurePolicy, functions: bool) -> Arc<RedisPolicy> {
    let config = RedisConfig::new("faults")
        .unwrap()
        .with_timeout(TIMEOUT)
        .with_connect_timeout(TIMEOUT)
        .with_retry_backoff(Duration::from_millis(50))
        .with_failure_policy(failure)
        .unwrap()
        .with_deny_cache(0)
        .with_functions(functions);
    let store = RedisStore::new(RedisTarget::Single(server.url()), config).unwrap();
    Arc::new(
        Policy::from_toml(RULES, MonotonicClock::new())
            .unwrap()
            .store(store),
    )
}

fn closed(retry_after: Duration) -> FailurePolicy {
    FailurePolicy::FailClosed { retry_after }
}

/// A check that must answer within HANG.
async fn check(policy: &RedisPolicy, client: &str) -> PolicyDecision {
    tokio::time::timeout(HANG, policy.allow_async(client, "/", 1))
        .await
        .expect("a check hung past the timeout")
        .expect("check")
}

/// A check, and whether Redis decided it (no other check running at the same time).
async fn served(policy: &RedisPolicy, client: &str) -> (PolicyDecision, bool) {
    let before = policy.backend().stats().redis_decisions;
    let d = check(policy, client).await;
    (d, policy.backend().stats().redis_decisions > before)
}

/// Checks until Redis decides again (bounded), proving recovery without a restart.
async fn until_recovered(policy: &RedisPolicy, client: &str) -> PolicyDecision {
    for _ in 0..200 {
        if let (d, true) = served(policy, client).await {
            return d;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no recovery after the server came back");
}

/// Traffic from 4 tasks on their own clients; `kill -9` of the server in the middle;
/// returns every decision of a check that started after the kill.
async fn kill_mid_traffic(
    server: &mut RedisServer,
    policy: &Arc<RedisPolicy>,
) -> Vec<PolicyDecision> {
    until_recovered(policy, "warmup").await;
    let stop = Arc::new(AtomicBool::new(false));
    let killed_at: Arc<std::sync::OnceLock<Instant>> = Arc::default();
    let tasks: Vec<_> = (0..4)
        .map(|t| {
            let (policy, stop, killed_at) = (policy.clone(), stop.clone(), killed_at.clone());
            tokio::spawn(async move {
                let mut after_kill = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let d = check(&policy, &format!("traffic{t}")).await;
                    if killed_at.get().is_some_and(|&k| started > k) {
                        after_kill.push(d);
                    }
                }
                after_kill
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let served_before = policy.backend().stats().redis_decisions;
    assert!(served_before > 4, "traffic reached Redis before the kill");
    server.kill();
    let killed = Instant::now();
    killed_at.set(killed).unwrap();
    tokio::time::sleep(TIMEOUT * 3).await;
    stop.store(true, Ordering::Relaxed);
    let mut down = Vec::new();
    for t in tasks {
        down.extend(t.await.expect("no task panicked"));
    }
    assert!(!down.is_empty(), "checks went on after the kill");
    // While down, checks keep answering (each within the bound, see `check`), by the
    // failure policy.
    let (_, redis) = served(policy, "while-down").await;
    assert!(!redis);
    assert!(killed.elapsed() < HANG * 2);
    assert!(policy.backend().stats().degraded >= down.len() as u64);
    down
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_fail_open_admits_then_recovers() {
    let mut server = RedisServer::start();
    let policy = policy(&server, FailurePolicy::FailOpen);
    let down = kill_mid_traffic(&mut server, &policy).await;
    // Each task's client had used its ten long before: only the failure policy admits.
    assert!(down.iter().all(PolicyDecision::allowed));
    server.restart();
    let d = until_recovered(&policy, "after").await;
    assert_eq!(d.remaining(), 9);
    // The restarted server had no functions: a transparent FUNCTION LOAD again.
    assert!(policy.backend().stats().script_reloads >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_fail_closed_denies_then_recovers() {
    let mut server = RedisServer::start();
    let retry = Duration::from_millis(1500);
    let policy = policy(&server, closed(retry));
    let down = kill_mid_traffic(&mut server, &policy).await;
    for d in &down {
        assert!(!d.allowed());
        assert_eq!(d.decision.retry_after, Nanos::from_duration(retry));
    }
    server.restart();
    assert!(until_recovered(&policy, "after").await.allowed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_fallback_enforces_the_share_locally_then_recovers() {
    let mut server = RedisServer::start();
    let policy = policy(&server, FailurePolicy::Fallback { share: 0.5 });
    kill_mid_traffic(&mut server, &policy).await;
    // A fresh client while Redis is down: half of its ten, decided in-process.
    let mut admitted = 0;
    for _ in 0..20 {
        let (d, redis) = served(&policy, "fresh").await;
        assert!(!redis);
        admitted += u64::from(d.allowed());
    }
    assert_eq!(admitted, 5);
    server.restart();
    // Redis' state for the client is its own (empty after the restart): all ten.
    assert_eq!(until_recovered(&policy, "fresh").await.remaining(), 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_times_out_into_the_policy() {
    let server = RedisServer::start();
    let policy = policy(&server, closed(Duration::from_secs(1)));
    let (d, redis) = served(&policy, "k").await;
    assert_eq!((d.remaining(), redis), (9, true));
    let _: String = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1500)
        .arg("ALL")
        .query(&mut server.connection())
        .unwrap();
    let started = Instant::now();
    let (d, redis) = served(&policy, "k").await;
    assert!(!redis && !d.allowed());
    assert!(
        started.elapsed() >= TIMEOUT,
        "answered by the timeout, not earlier"
    );
    // Within the backoff Redis is not even tried.
    let (d, redis) = served(&policy, "k").await;
    assert!(!redis && !d.allowed());
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert!(until_recovered(&policy, "k").await.allowed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debug_sleep_times_out_into_the_policy() {
    let server = RedisServer::start();
    let policy = policy(&server, FailurePolicy::FailOpen);
    assert!(served(&policy, "k").await.1);
    let mut side = server.connection();
    let sleeper = std::thread::spawn(move || {
        let _: redis::RedisResult<String> =
            redis::cmd("DEBUG").arg("SLEEP").arg(1).query(&mut side);
    });
    // Check until the sleep is seen (the side command may take a moment to arrive): the
    // server sleeps 1 s, far beyond the 300 ms timeout, so a check overlapping it times
    // out into the policy, open. Until then Redis answers, and denies once the nine
    // permits left are spent (checks may outrun the side command).
    let mut timed_out = false;
    while !sleeper.is_finished() && !timed_out {
        let (d, redis) = served(&policy, "k").await;
        timed_out = !redis;
        assert!(d.allowed() || !timed_out, "a timed-out check fails open");
    }
    assert!(timed_out, "a check overlapping DEBUG SLEEP timed out");
    tokio::task::spawn_blocking(move || sleeper.join().unwrap())
        .await
        .unwrap();
    until_recovered(&policy, "k").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_is_reloaded_transparently() {
    let server = RedisServer::start();
    let policy = policy_with(&server, closed(Duration::from_secs(1)), false);
    // First use on a fresh server: EVALSHA → NOSCRIPT → EVAL.
    assert_eq!(check(&policy, "k").await.remaining(), 9);
    let before = policy.backend().stats();
    assert_eq!((before.round_trips, before.script_reloads), (2, 1));
    assert_eq!(check(&policy, "k").await.remaining(), 8);
    assert_eq!(
        policy.backend().stats().round_trips,
        before.round_trips + 1,
        "one round trip per decision"
    );
    let _: String = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(check(&policy, "k").await.remaining(), 7);
    let after = policy.backend().stats();
    assert_eq!(after.script_reloads, 2);
    assert_eq!(after.round_trips, before.round_trips + 3);
    assert_eq!(after.degraded, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn function_flush_is_reloaded_transparently() {
    let server = RedisServer::start();
    let policy = policy(&server, closed(Duration::from_secs(1)));
    // First use on a fresh server: FCALL → Function not found → FUNCTION LOAD → FCALL.
    assert_eq!(check(&policy, "k").await.remaining(), 9);
    let before = policy.backend().stats();
    assert_eq!((before.round_trips, before.script_reloads), (3, 1));
    assert_eq!(check(&policy, "k").await.remaining(), 8);
    assert_eq!(
        policy.backend().stats().round_trips,
        before.round_trips + 1,
        "one round trip per decision"
    );
    // The script cache is not what FCALL uses: flushing it changes nothing.
    let _: String = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(check(&policy, "k").await.remaining(), 7);
    assert_eq!(policy.backend().stats().round_trips, before.round_trips + 2);
    let _: String = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(check(&policy, "k").await.remaining(), 6);
    let after = policy.backend().stats();
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
    let policy = policy(&server, closed(Duration::from_secs(1)));
    // FCALL → unknown command → EVALSHA → NOSCRIPT → EVAL.
    assert_eq!(check(&policy, "k").await.remaining(), 9);
    let before = policy.backend().stats();
    assert_eq!((before.round_trips, before.script_reloads), (3, 1));
    // From then on EVALSHA only: one round trip.
    assert_eq!(check(&policy, "k").await.remaining(), 8);
    let after = policy.backend().stats();
    assert_eq!(after.round_trips, before.round_trips + 1);
    assert_eq!(after.degraded, 0);
}

/// Issue 27, item 8: settings that used to be accepted and then fail silently are build
/// errors. `with_fallback_keys(usize::MAX)` with a fallback policy built no table, so the
/// fallback skipped the tier and admitted everything while Redis was down (20 of 20 on a
/// limit of 5); `with_ttl_slack(Duration::MAX)` made every check fail on a healthy server.
/// Every other setting out of its range is refused the same way, naming itself; the
/// largest values accepted work.
#[test]
fn settings_that_would_fail_silently_are_build_errors() {
    use tollgate_redis::{BuildError, LeaseConfig, LeasedStore, MAX_TTL_SLACK, MAX_WAIT};
    let server = RedisServer::start();
    let target = || RedisTarget::Single(server.url());
    let base = || RedisConfig::new("cfg").unwrap();
    let fallback = FailurePolicy::Fallback { share: 1.0 };
    let setting_of = |config: RedisConfig| match RedisStore::new(target(), config) {
        Err(BuildError::OutOfRange { setting, .. }) => setting,
        other => panic!("accepted: {:?}", other.map(|s| s.config().clone())),
    };
    // The two reported cases.
    assert_eq!(
        setting_of(
            base()
                .with_failure_policy(fallback)
                .unwrap()
                .with_fallback_keys(usize::MAX)
        ),
        "fallback_keys"
    );
    assert_eq!(
        setting_of(base().with_ttl_slack(Duration::MAX)),
        "ttl_slack"
    );
    // Every other range.
    let over = MAX_WAIT + Duration::from_nanos(1);
    for (config, setting) in [
        (base().with_fallback_keys(0), "fallback_keys"),
        (base().with_fallback_keys((1 << 26) + 1), "fallback_keys"),
        (
            base().with_ttl_slack(MAX_TTL_SLACK + Duration::from_millis(1)),
            "ttl_slack",
        ),
        (base().with_timeout(Duration::ZERO), "timeout"),
        (base().with_timeout(Duration::MAX), "timeout"),
        (base().with_timeout(over), "timeout"),
        (
            base().with_connect_timeout(Duration::ZERO),
            "connect_timeout",
        ),
        (base().with_connect_timeout(over), "connect_timeout"),
        (base().with_retry_backoff(Duration::MAX), "retry_backoff"),
        (base().with_deny_cache(usize::MAX), "deny_cache"),
        (
            base().with_deny_cache_max_age(Duration::ZERO),
            "deny_cache_max_age",
        ),
    ] {
        assert_eq!(setting_of(config), setting);
    }
    assert_eq!(
        base()
            .with_failure_policy(closed(Duration::ZERO))
            .err()
            .unwrap(),
        BuildError::OutOfRange {
            setting: "failure_policy.retry_after",
            range: "above zero",
        }
    );
    assert_eq!(
        base()
            .with_failure_policy(FailurePolicy::Fallback { share: f64::NAN })
            .err(),
        Some(BuildError::InvalidShare)
    );
    // The largest accepted: a healthy server decides every check (with the largest
    // slack, every TTL is still a valid PX), and a fallback of 2^26 keys per tier builds.
    let policy = Policy::from_toml(RULES, MonotonicClock::new())
        .unwrap()
        .store(
            RedisStore::new(
                target(),
                base()
                    .with_ttl_slack(MAX_TTL_SLACK)
                    .with_timeout(MAX_WAIT)
                    .with_connect_timeout(MAX_WAIT)
                    .with_retry_backoff(MAX_WAIT)
                    .with_deny_cache(1 << 26)
                    .with_deny_cache_max_age(Duration::MAX)
                    .with_failure_policy(fallback)
                    .unwrap()
                    .with_fallback_keys(1 << 26),
            )
            .unwrap(),
        );
    for left in (0..10).rev() {
        let d = policy.allow("k", "/", 1).unwrap();
        assert!(d.allowed() && d.remaining() == left, "{d:?}");
    }
    assert_eq!(policy.backend().stats().degraded, 0);
    let ttl: i64 = redis::cmd("PTTL")
        .arg(policy.backend().redis_key("default", "default", Some("k")))
        .query(&mut server.connection())
        .unwrap();
    assert!(ttl > (1 << 40), "{ttl}");
    // The target: a cluster of no node.
    assert!(matches!(
        RedisStore::new(RedisTarget::Cluster(Vec::new()), base()),
        Err(BuildError::Url(_))
    ));
    // The leased store's settings too (an hour-long TTL at most).
    assert_eq!(
        LeasedStore::new(
            RedisStore::new(target(), base()).unwrap(),
            LeaseConfig::new().with_ttl(Duration::MAX)
        )
        .err(),
        Some(BuildError::InvalidLease("ttl must be at most 1 h"))
    );
}
