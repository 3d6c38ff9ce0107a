//! A hot reload from an HTTP admin route never hangs the server (issue 27, item 1, end to
//! end): a real axum server on two workers, [`RateLimitLayer::awaited`] over a `Policy` on
//! a [`RedisStore::on_runtime`] (the store's I/O on the server's own runtime), a real
//! redis-server paused so that checks are suspended mid-round-trip, and a `POST /reload`
//! route that calls `reload_toml`. Two admins post at once while the checks wait; both
//! answer, and once Redis is let go every request answers. On 4452f30 each reload spun on a
//! worker until the paused checks finished, and those checks needed a worker to finish: the
//! server never answered again.

mod http_support;
#[path = "../../redis/tests/redis_support/mod.rs"]
mod redis_support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::routing::{get, post};
use axum::Router;
use http::StatusCode;
use redis_support::server::RedisServer;
use tollgate::policy::Policy;
use tollgate::MonotonicClock;
use tollgate_http::{ClientKey, RateLimitLayer};
use tollgate_redis::{RedisConfig, RedisStore, RedisTarget};

use http_support::{send, serve, BoxError};

type Server = Arc<Policy<MonotonicClock, RedisStore>>;

fn rules(limit: u64) -> String {
    format!("[[rules]]\nname = \"api\"\nlimit = {limit}\nwindow = \"1h\"\nalgorithm = \"fixed_window\"\n")
}

/// `POST /reload?limit=N`: reloads the policy with that limit.
async fn reload(State(policy): State<Server>, body: String) -> (StatusCode, String) {
    let limit: u64 = body.trim().parse().unwrap_or(10);
    match policy.reload_toml(&rules(limit)) {
        Ok(report) => (StatusCode::OK, report.to_string()),
        Err(e) => (StatusCode::BAD_REQUEST, e.to_string()),
    }
}

/// One POST of `body` to `path` on a fresh connection.
async fn post_to(addr: SocketAddr, path: &str, body: &'static str) -> Result<StatusCode, BoxError> {
    use http_body_util::Full;
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let request = http::Request::post(path)
        .header("host", "localhost")
        .body(Full::new(bytes::Bytes::from_static(body.as_bytes())))?;
    Ok(sender.send_request(request).await?.status())
}

#[test]
fn two_admins_reloading_while_checks_wait_on_redis_never_hang_the_server() -> Result<(), BoxError> {
    let redis = RedisServer::start();
    // The server: its own runtime of two workers, which the store's I/O runs on too.
    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let config = RedisConfig::new("reload-e2e")?.with_timeout(Duration::from_secs(30));
    let store = RedisStore::on_runtime(
        RedisTarget::Single(redis.url()),
        config,
        server.handle().clone(),
    )?;
    let policy: Server =
        Arc::new(Policy::from_toml(&rules(100), MonotonicClock::new())?.store(store));
    let layer = RateLimitLayer::awaited(Arc::clone(&policy)).key(ClientKey::header("x-api-key")?);
    let app = Router::new()
        .route("/limited", get(|| async { "ok" }))
        .layer(layer)
        .route("/reload", post(reload))
        .with_state(Arc::clone(&policy));
    let addr = server.block_on(serve(app))?;

    // The client: its own runtime; a watchdog turns a hang into a failure.
    let client = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    client.block_on(async move {
        let key: &[(&str, &[u8])] = &[("x-api-key", b"acct_1")];
        assert_eq!(send(addr, "/limited", key).await?.status, StatusCode::OK);
        let paused = redis.pause_writes()?;
        // Checks on their way to the paused Redis, each suspended in its round trip.
        let limited: Vec<_> = (0..4)
            .map(|_| tokio::spawn(async move { send(addr, "/limited", key).await }))
            .collect();
        // Give the checks time to reach Redis (not a timed assertion: it only orders the
        // reloads after them).
        tokio::time::sleep(Duration::from_millis(300)).await;
        let admins = [
            tokio::spawn(post_to(addr, "/reload", "200")),
            tokio::spawn(post_to(addr, "/reload", "300")),
        ];
        for admin in admins {
            let status = tokio::time::timeout(Duration::from_secs(20), admin)
                .await
                .map_err(|_| "a reload hung while checks waited on Redis")???;
            assert_eq!(status, StatusCode::OK);
        }
        assert!(
            limited.iter().all(|l| !l.is_finished()),
            "the checks still wait on the paused Redis"
        );
        paused.unpause()?;
        for check in limited {
            let reply = tokio::time::timeout(Duration::from_secs(20), check)
                .await
                .map_err(|_| "a check hung after the reloads")???;
            assert_eq!(reply.status, StatusCode::OK);
        }
        // The server still answers, on the rules the last reload published.
        let reply = send(addr, "/limited", key).await?;
        assert_eq!(reply.status, StatusCode::OK);
        let limit = policy.rule_set().rules()[0].tiers()[0].quota();
        assert!([200, 300].contains(&limit), "{limit}");
        Ok::<(), BoxError>(())
    })?;
    drop(server);
    Ok(())
}
