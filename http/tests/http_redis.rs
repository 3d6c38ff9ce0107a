//! `tollgate-http` on a Redis store: real axum servers on loopback behind
//! [`RateLimitLayer::awaited`] over a `Policy` on a [`RedisStore`], a real redis-server,
//! a real hyper client. Two servers (a fleet of two) share one allowance with the exact
//! status and header sequence of one in-process server; a check waiting on a paused Redis
//! holds no worker (a one-thread server keeps answering other routes); settlement, a
//! cancelled delayed request and a request dropped during its check give permits back in
//! Redis; the decorators (`Metered`,
//! `AdaptivePenalty`) over a Redis policy are awaited too.

mod http_support;
#[path = "../../redis/tests/redis_support/mod.rs"]
mod redis_support;

use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use http::{HeaderMap, Response};
use redis_support::server::RedisServer;
use tollgate::policy::{AdaptivePenalty, Metered, PenaltyConfig, Policy, PolicyCheck};
use tollgate::{ManualClock, Nanos};
use tollgate_http::{ClientKey, Endpoint, RateLimitLayer, Settle};
use tollgate_redis::{RedisConfig, RedisStore, RedisTarget, TimeSource};
use tower::ServiceExt;

use http_support::{eventually, from_peer, in_process, send, serve, BoxError};

type TestResult = Result<(), BoxError>;

/// A policy of `rules` on a store of `server` under `prefix`, deciding at the time of
/// `clock` (client time: the headers' reset times are exact).
fn redis_policy(
    server: &RedisServer,
    prefix: &str,
    rules: &str,
    clock: &ManualClock,
) -> Result<Arc<Policy<ManualClock, RedisStore>>, BoxError> {
    let config = RedisConfig::new(prefix)?
        .with_time_source(TimeSource::Client)
        .with_timeout(Duration::from_secs(5));
    let store = RedisStore::new(RedisTarget::Single(server.url()), config)?;
    Ok(Arc::new(
        Policy::from_toml(rules, clock.clone())?.store(store),
    ))
}

const API_RULES: &str = r#"
    [[rules]]
    name = "api"
    limit = 3
    window = "1m"
    algorithm = "fixed_window"
"#;

/// Two servers, each with its own policy and store on one Redis (a fleet of two), take
/// turns answering one client: together they admit exactly the limit, with the same
/// statuses, `RateLimit` fields and `Retry-After` as one in-process server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_share_one_allowance_with_in_process_headers() -> TestResult {
    let redis = RedisServer::start();
    // 15 s into a UTC minute: 45 s to the fixed window's reset.
    let clock = ManualClock::starting_at(Nanos::from_secs(1_700_000_000 - 1_700_000_000 % 60 + 15));
    let mut fleet = Vec::new();
    for _ in 0..2 {
        let layer = RateLimitLayer::awaited(redis_policy(&redis, "fleet", API_RULES, &clock)?)
            .key(ClientKey::header("x-api-key")?);
        let app = Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer.clone());
        fleet.push((serve(app).await?, layer));
    }
    let local = Arc::new(Policy::from_toml(API_RULES, clock.clone())?);
    let layer = RateLimitLayer::new(local).key(ClientKey::header("x-api-key")?);
    let reference = serve(
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer),
    )
    .await?;

    for client in [&b"acct_1"[..], b"acct_2"] {
        let key: &[(&str, &[u8])] = &[("x-api-key", client)];
        for i in 0..5 {
            let (addr, _) = &fleet[i % 2];
            let got = send(*addr, "/", key).await?;
            let want = send(reference, "/", key).await?;
            assert_eq!(got.status, want.status, "request {i}");
            for name in ["ratelimit-policy", "ratelimit", "retry-after"] {
                assert_eq!(got.header(name), want.header(name), "request {i}: {name}");
            }
        }
    }
    let counts: Vec<_> = fleet
        .iter()
        .map(|(_, l)| (l.stats().admitted, l.stats().denied))
        .collect();
    // Requests 0, 2, 4 went to the first server: 2 admitted and 1 denied per client.
    assert_eq!(counts, [(4, 2), (2, 2)]);
    Ok(())
}

/// A server on a runtime with one thread: while Redis is paused, a rate-limited request
/// waits for its check, and a request to another route on the same thread is answered in
/// the meantime (before Redis is let go). A layer that blocked its worker for the round
/// trip would answer neither until the pause ended, and the pause ends only after the
/// other route answered: the unlimited request would then come only after the limited
/// one (answered by its timeout), and the assertion below would fail.
#[test]
fn a_check_waiting_on_redis_holds_no_worker() -> TestResult {
    let redis = RedisServer::start();
    let clock = ManualClock::starting_at(Nanos::from_secs(1_700_000_000));
    let policy = redis_policy(&redis, "one-thread", API_RULES, &clock)?;
    let layer = RateLimitLayer::awaited(Arc::clone(&policy)).endpoint(Endpoint::constant("/"));
    let app = Router::new()
        .route("/limited", get(|| async { "ok" }))
        .layer(layer)
        .route("/health", get(|| async { "up" }));
    // The server: its own runtime, one thread.
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("server runtime");
        runtime.block_on(async move {
            let addr = serve(app).await.expect("serve");
            addr_tx.send(addr).expect("send addr");
            std::future::pending::<()>().await;
        });
    });
    let addr = addr_rx.recv()?;
    let client = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    client.block_on(async move {
        // Connected and loaded before the pause.
        assert_eq!(send(addr, "/limited", &[]).await?.status, 200);
        let paused = redis.pause_writes()?;
        let limited = tokio::spawn(async move { send(addr, "/limited", &[]).await });
        // Let the limited request reach its check (not a timed assertion: it only gives
        // the request time to be on its way to the paused server).
        tokio::time::sleep(Duration::from_millis(300)).await;
        let health = send(addr, "/health", &[]).await?;
        assert_eq!(health.status, 200);
        assert!(
            !limited.is_finished(),
            "the limited request waits on Redis while the other route answers"
        );
        paused.unpause()?;
        let limited = limited.await??;
        assert_eq!(limited.status, 200);
        assert_eq!(limited.header("ratelimit").split(';').nth(1), Some("r=1"));
        assert_eq!(policy.backend().stats().degraded, 0);
        Ok(())
    })
}

/// Settlement on Redis: the estimate is charged, the difference refunded or the extra
/// charged in Redis, and the headers report the state after settling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settlement_refunds_and_charges_in_redis() -> TestResult {
    let redis = RedisServer::start();
    let clock = ManualClock::starting_at(Nanos::from_secs(1_700_000_000 - 1_700_000_000 % 60));
    let rules = "[[rules]]\nname = \"tokens\"\nlimit = 100\nwindow = \"1m\"\nalgorithm = \"fixed_window\"\n";
    let policy = redis_policy(&redis, "settle", rules, &clock)?;
    let layer = RateLimitLayer::awaited(Arc::clone(&policy))
        .key(ClientKey::header("x-api-key")?)
        .cost(|head| {
            head.headers
                .get("x-estimate")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or(1)
        })
        .settle(Settle::from_header("x-tokens-used")?);
    let app = Router::new()
        .route(
            "/",
            get(|headers: HeaderMap| async move {
                let mut response = Response::new(axum::body::Body::from("done"));
                if let Some(used) = headers.get("x-used").cloned() {
                    response.headers_mut().insert("x-tokens-used", used);
                }
                response
            }),
        )
        .layer(layer.clone());
    let addr = serve(app).await?;
    let remaining = || policy.peek("k", "/", 0).map(|d| d.remaining());
    let call = |estimate: &'static [u8], used: &'static [u8]| async move {
        let headers: [(&str, &[u8]); 3] = [
            ("x-api-key", b"k"),
            ("x-estimate", estimate),
            ("x-used", used),
        ];
        send(addr, "/", &headers).await
    };
    // Estimate 40, used 10: 30 back.
    let r = call(b"40", b"10").await?;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("ratelimit").split(';').nth(1), Some("r=90"));
    assert_eq!(remaining()?, 90);
    // Estimate 5, used 30: 25 more.
    let r = call(b"5", b"30").await?;
    assert_eq!(r.header("ratelimit").split(';').nth(1), Some("r=60"));
    assert_eq!(remaining()?, 60);
    // Estimate 50, used 70: charged past the limit (the work was done): in debt.
    assert_eq!(call(b"50", b"70").await?.status, 200);
    assert_eq!(remaining()?, 0);
    assert_eq!(call(b"1", b"1").await?.status, 429);
    let stats = layer.stats();
    assert_eq!((stats.refunded, stats.charged), (30, 45));
    assert_eq!(policy.backend().stats().degraded, 0);
    Ok(())
}

/// A leaky-bucket request delayed by the layer and dropped while it waits gives its
/// permit back in Redis (on a task the drop spawns).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_delayed_request_gives_its_permit_back_in_redis() -> TestResult {
    let redis = RedisServer::start();
    let clock = ManualClock::starting_at(Nanos::from_secs(1_700_000_000));
    let rules = "[[rules]]\nname = \"shaped\"\nlimit = 1\nwindow = \"1s\"\nalgorithm = \"leaky_bucket\"\nqueue = 5\n";
    let policy = redis_policy(&redis, "shaped", rules, &clock)?;
    let layer = RateLimitLayer::awaited(Arc::clone(&policy)).endpoint(Endpoint::constant("/"));
    let service = in_process(&layer);
    let request = || from_peer([192, 0, 2, 1]);
    assert_eq!(service.clone().oneshot(request()).await?.status(), 200);
    let delay = || policy.peek("192.0.2.1", "/", 1).map(|d| d.delay());
    assert_eq!(delay()?, Nanos::from_secs(1));
    // Admitted with a 1 s delay, then dropped mid-wait.
    let delayed = service.clone().oneshot(request());
    let timed_out = tokio::time::timeout(Duration::from_millis(200), delayed).await;
    assert!(timed_out.is_err(), "a 1 s delay must not resolve in 200 ms");
    let stats = layer.stats();
    assert_eq!((stats.delayed, stats.cancelled), (1, 1));
    // The refund runs on a spawned task: wait for it to land.
    let back = eventually(|| Ok(delay()? == Nanos::from_secs(1))).await?;
    assert!(
        back,
        "the cancelled request's permit is back: {:?}",
        delay()?
    );
    Ok(())
}

/// A request dropped while its check waits on a paused Redis is counted `cancelled`, and
/// once Redis runs the script it was sent (which took the permit), the permit comes back:
/// the answer is awaited on a task the drop spawns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_dropped_during_its_redis_check_gives_its_permit_back() -> TestResult {
    let redis = RedisServer::start();
    let clock = ManualClock::starting_at(Nanos::from_secs(1_700_000_000 - 1_700_000_000 % 60));
    let policy = redis_policy(&redis, "in-flight", API_RULES, &clock)?;
    let layer = RateLimitLayer::awaited(Arc::clone(&policy)).endpoint(Endpoint::constant("/"));
    let service = in_process(&layer);
    let request = || from_peer([192, 0, 2, 7]);
    // Connected and loaded: one of three taken.
    assert_eq!(service.clone().oneshot(request()).await?.status(), 200);
    let remaining = || policy.peek("192.0.2.7", "/", 0).map(|d| d.remaining());
    assert_eq!(remaining()?, 2);
    let paused = redis.pause_writes()?;
    // Sent to the paused Redis, then dropped before its answer.
    let waiting = service.clone().oneshot(request());
    let timed_out = tokio::time::timeout(Duration::from_millis(300), waiting).await;
    assert!(
        timed_out.is_err(),
        "a check on a paused Redis cannot answer"
    );
    let stats = layer.stats();
    assert_eq!((stats.cancelled, stats.admitted), (1, 1));
    paused.unpause()?;
    // A check of another client through the same store, after the dropped one's script on
    // its connection: once it answers, that script has run (two taken). Then the spawned
    // task's refund gives one back.
    assert!(policy.allow_async("192.0.2.8", "/", 1).await?.allowed());
    let back = eventually(|| Ok(remaining()? == 2)).await?;
    assert!(
        back,
        "the dropped request's permit is back: {:?}",
        remaining()?
    );
    assert_eq!(service.clone().oneshot(request()).await?.status(), 200);
    assert_eq!(remaining()?, 1);
    Ok(())
}

/// The decorators over a Redis policy, awaited: `Metered` counts every awaited decision and
/// `AdaptivePenalty` penalizes a client after its denials (its limit halved in the
/// headers), each of their checks awaiting Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decorators_over_a_redis_policy_are_awaited() -> TestResult {
    let redis = RedisServer::start();
    let clock = ManualClock::starting_at(Nanos::from_secs(1_700_000_000 - 1_700_000_000 % 60));
    let rules =
        "[[rules]]\nname = \"api\"\nlimit = 4\nwindow = \"1m\"\nalgorithm = \"fixed_window\"\n";
    let metered = Arc::new(Metered::new(redis_policy(
        &redis,
        "decorated",
        rules,
        &clock,
    )?));
    let penalty = PenaltyConfig {
        denials: 2,
        period: Nanos::from_secs(60),
        divisor: 2,
        cooldown: Nanos::from_secs(600),
    };
    let guarded = Arc::new(AdaptivePenalty::new(Arc::clone(&metered), penalty)?);
    let layer = RateLimitLayer::awaited(Arc::clone(&guarded)).key(ClientKey::header("x-api-key")?);
    let addr = serve(
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer.clone()),
    )
    .await?;
    let key: &[(&str, &[u8])] = &[("x-api-key", b"k")];
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(send(addr, "/", key).await?.status.as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 200, 429, 429]);
    assert!(guarded.is_penalized("k", tollgate::Clock::now(&clock)));
    // Penalized: the next window advertises half the limit.
    clock.advance(Nanos::from_secs(60));
    let r = send(addr, "/", key).await?;
    assert_eq!(r.status, 200);
    assert!(r
        .header("ratelimit-policy")
        .starts_with("\"api\";q=2;w=60;"));
    assert_eq!((metered.allowed(), metered.denied()), (5, 2));
    Ok(())
}
