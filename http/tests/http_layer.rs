//! `tollgate-http` end to end: a real axum (or plain hyper) server on 127.0.0.1:0 behind
//! `RateLimitLayer`, driven by a real hyper HTTP/1.1 client. Exact 200/429 sequences and
//! header values per rule, IPv6 prefix grouping, route-template grouping, trusted
//! proxies, malformed keys, shadow rules, reloads under traffic, leaky-bucket delays and
//! their cancellation, settlement from the response; the client keys of issue 27 item 9
//! (`X-Forwarded-For` read as bytes, IPv4 behind NAT64 keyed by its IPv4), on the key
//! extractor and end to end; tier names an sf-string cannot hold written as
//! `RateLimitHeaders` writes them (issue 28 item 4); what a layer without headers still does.
//!
//! Limits use a `ManualClock` (time moves only when a test says so), so every sequence is
//! exact; the leaky-bucket delay test uses the monotonic clock and real sleeps.

#[cfg(feature = "tracing")]
#[path = "../../std/tests/events_support/mod.rs"]
mod events_support;
mod http_support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, Request, Response, StatusCode};
use http_body_util::{Empty, Full};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tollgate::policy::{Policy, PolicyCheck};
use tollgate::{ManualClock, MonotonicClock, Nanos};
use tollgate_http::{
    Admission, ClientKey, Endpoint, HeaderStyle, OnBadKey, RateLimitLayer, Settle, ShadowSplit,
    TokensUsed, TrustedProxies,
};
use tower::{Layer, Service, ServiceExt};

use http_support::{from_peer, in_process, send, serve, BoxError};

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

fn manual_policy(rules: &str) -> Result<(Arc<Policy<ManualClock>>, ManualClock), BoxError> {
    let clock = ManualClock::starting_at(Nanos::from_secs(15));
    Ok((Arc::new(Policy::from_toml(rules, clock.clone())?), clock))
}

async fn statuses(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &[u8])],
    n: usize,
) -> Result<Vec<u16>, BoxError> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(send(addr, path, headers).await?.status.as_u16());
    }
    Ok(out)
}

const API_KEY_RULES: &str = r#"
    [[rules]]
    name = "api"
    limit = 3
    window = "1m"
    algorithm = "fixed_window"
"#;

#[tokio::test]
async fn exact_sequence_and_draft11_headers() -> TestResult {
    let (policy, _clock) = manual_policy(API_KEY_RULES)?;
    let layer = RateLimitLayer::new(Arc::clone(&policy)).key(ClientKey::header("x-api-key")?);
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer.clone());
    let addr = serve(app).await?;
    let key: &[(&str, &[u8])] = &[("x-api-key", b"acct_1")];

    let mut replies = Vec::new();
    for _ in 0..4 {
        replies.push(send(addr, "/", key).await?);
    }
    let got: Vec<u16> = replies.iter().map(|r| r.status.as_u16()).collect();
    assert_eq!(got, [200, 200, 200, 429]);
    // 15 s into a 1-minute window: 45 s to the reset. pk is FNV-1a("acct_1").
    let pk = "pk=:6qCUvbV94do=:";
    for (i, r) in replies[..3].iter().enumerate() {
        assert_eq!(
            r.header("ratelimit-policy"),
            format!("\"api\";q=3;w=60;{pk}")
        );
        assert_eq!(
            r.header("ratelimit"),
            format!("\"api\";r={};t=45;{pk}", 2 - i)
        );
        assert_eq!(r.header("retry-after"), "");
        assert_eq!(r.body, "ok");
    }
    let denied = &replies[3];
    assert_eq!(denied.header("retry-after"), "45");
    assert_eq!(denied.header("ratelimit"), format!("\"api\";r=0;t=45;{pk}"));
    assert_eq!(denied.header("content-type"), "application/problem+json");
    assert_eq!(
        denied.body,
        "{\"type\":\"about:blank\",\"title\":\"Too Many Requests\",\"status\":429,\
         \"detail\":\"rate limit exceeded by rule 'api' tier 'api'; retry in 45 s\",\
         \"retry_after\":45,\"violated\":[{\"rule\":\"api\",\"tier\":\"api\",\"quota\":3,\
         \"window\":60,\"retry_after\":45}]}"
    );
    // Another key has its own allowance.
    assert_eq!(
        statuses(addr, "/", &[("x-api-key", b"acct_2")], 4).await?,
        [200, 200, 200, 429]
    );
    let stats = layer.stats();
    assert_eq!((stats.admitted, stats.denied), (6, 2));
    Ok(())
}

#[tokio::test]
async fn tiers_and_header_styles() -> TestResult {
    let rules = r#"
        [[rules]]
        name = "api"
        tiers = [
            { name = "burst", limit = 2, window = "1s", algorithm = "fixed_window" },
            { name = "daily", limit = 100, window = "1d", algorithm = "fixed_window" },
        ]
    "#;
    for (style, check) in [
        (HeaderStyle::Draft10, 0),
        (HeaderStyle::Legacy, 1),
        (HeaderStyle::None, 2),
    ] {
        let (policy, _clock) = manual_policy(rules)?;
        let layer = RateLimitLayer::new(policy)
            .key(ClientKey::header("x-api-key")?)
            .headers(style);
        let app = Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer);
        let addr = serve(app).await?;
        let key: &[(&str, &[u8])] = &[("x-api-key", b"k")];
        let first = send(addr, "/", key).await?;
        let _ = send(addr, "/", key).await?;
        let third = send(addr, "/", key).await?;
        assert_eq!(
            (first.status, third.status),
            (StatusCode::OK, StatusCode::TOO_MANY_REQUESTS)
        );
        assert_eq!(third.header("retry-after"), "1");
        match check {
            0 => {
                // 15 s on a 1 s window: reset at the next second; the day resets at 86400.
                assert_eq!(
                    first.header("ratelimit-policy"),
                    "\"burst\";q=2;w=1, \"daily\";q=100;w=86400"
                );
                assert_eq!(
                    first.header("ratelimit"),
                    "\"burst\";r=1;t=1, \"daily\";r=99;t=86385"
                );
                assert_eq!(
                    third.header("ratelimit"),
                    "\"burst\";r=0;t=1, \"daily\";r=98;t=86385"
                );
                assert_eq!(first.header("x-ratelimit-limit"), "");
            }
            1 => {
                assert_eq!(first.header("ratelimit"), "");
                assert_eq!(first.header("x-ratelimit-limit"), "2");
                assert_eq!(first.header("x-ratelimit-remaining"), "1");
                assert_eq!(first.header("x-ratelimit-reset"), "1");
                assert_eq!(third.header("x-ratelimit-remaining"), "0");
            }
            _ => {
                assert_eq!(first.header("ratelimit"), "");
                assert_eq!(first.header("x-ratelimit-limit"), "");
            }
        }
        assert!(third.body.contains("\"tier\":\"burst\""), "{}", third.body);
        assert!(!third.body.contains("daily"), "{}", third.body);
    }
    Ok(())
}

#[tokio::test]
async fn matched_path_groups_route_ids() -> TestResult {
    let (policy, _clock) = manual_policy(
        r#"
        [[rules]]
        name = "users"
        endpoint = "/users/{id}"
        limit = 2
        window = "1m"
        algorithm = "fixed_window"
    "#,
    )?;
    let app = Router::new()
        .route("/users/{id}", get(|| async { "user" }))
        .route("/health", get(|| async { "up" }))
        .layer(RateLimitLayer::new(policy));
    let addr = serve(app).await?;
    assert_eq!(send(addr, "/users/42", &[]).await?.status, 200);
    assert_eq!(send(addr, "/users/43", &[]).await?.status, 200);
    let third = send(addr, "/users/44", &[]).await?;
    assert_eq!(third.status, 429);
    assert!(third.body.contains("\"rule\":\"users\""));
    // No rule for /health: admitted, no rate-limit fields.
    let health = send(addr, "/health", &[]).await?;
    assert_eq!(
        (health.status.as_u16(), health.header("ratelimit")),
        (200, "")
    );
    Ok(())
}

/// A layer outside the rate limiter that plays the part of the network: it sets
/// `ConnectInfo` from an `x-test-peer` header (what a real IPv6 peer would give).
fn fake_peer<B>(mut request: Request<B>) -> Request<B> {
    let peer = request
        .headers()
        .get("x-test-peer")
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.parse::<SocketAddr>().ok());
    if let Some(peer) = peer {
        request.extensions_mut().insert(ConnectInfo(peer));
    }
    request
}

#[tokio::test]
async fn ipv6_peers_grouped_by_prefix() -> TestResult {
    let (policy, _clock) = manual_policy(API_KEY_RULES)?;
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(RateLimitLayer::new(policy))
        .layer(tower::util::MapRequestLayer::new(
            fake_peer::<axum::body::Body>,
        ));
    let addr = serve(app).await?;
    let peer = |p: &'static str| [("x-test-peer", p.as_bytes())];
    // Three addresses of one /64 share one allowance of 3.
    assert_eq!(
        send(addr, "/", &peer("[2001:db8:1:2::1]:1000"))
            .await?
            .status,
        200
    );
    assert_eq!(
        send(addr, "/", &peer("[2001:db8:1:2:ffff::9]:1001"))
            .await?
            .status,
        200
    );
    assert_eq!(
        send(addr, "/", &peer("[2001:db8:1:2:abcd::]:1002"))
            .await?
            .status,
        200
    );
    assert_eq!(
        send(addr, "/", &peer("[2001:db8:1:2::7]:1003"))
            .await?
            .status,
        429
    );
    // The neighbouring /64 is another client; so is every IPv4 address.
    assert_eq!(
        send(addr, "/", &peer("[2001:db8:1:3::1]:1000"))
            .await?
            .status,
        200
    );
    assert_eq!(send(addr, "/", &peer("192.0.2.1:80")).await?.status, 200);
    assert_eq!(
        statuses(addr, "/", &peer("192.0.2.2:80"), 4).await?,
        [200, 200, 200, 429]
    );
    Ok(())
}

#[tokio::test]
async fn ipv6_loopback_over_the_wire() -> TestResult {
    // Real IPv6 when the machine has it: ::1 is one /64 with itself.
    let Ok(listener) = TcpListener::bind("[::1]:0").await else {
        eprintln!(
            "no IPv6 loopback here; the prefix grouping is covered by ipv6_peers_grouped_by_prefix"
        );
        return Ok(());
    };
    let (policy, _clock) = manual_policy(API_KEY_RULES)?;
    let layer = RateLimitLayer::new(policy);
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await;
    });
    let first = send(addr, "/", &[]).await?;
    assert_eq!(first.status, 200);
    assert_eq!(statuses(addr, "/", &[], 3).await?, [200, 200, 429]);
    Ok(())
}

#[tokio::test]
async fn forwarded_for_only_from_trusted_proxies() -> TestResult {
    let rules = r#"
        [[rules]]
        name = "per-ip"
        limit = 1
        window = "1m"
        algorithm = "fixed_window"
    "#;
    // The loopback peer is the trusted proxy: the rightmost untrusted hop is the client.
    let (policy, _clock) = manual_policy(rules)?;
    let trusted = TrustedProxies::new(["127.0.0.0/8"])?;
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(RateLimitLayer::new(policy).key(ClientKey::forwarded_for(trusted)));
    let addr = serve(app).await?;
    let xff = |v: &'static str| [("x-forwarded-for", v.as_bytes())];
    assert_eq!(
        send(addr, "/", &xff("9.9.9.9, 203.0.113.9")).await?.status,
        200
    );
    // The client rewrote its part of the header: same client, denied.
    assert_eq!(
        send(addr, "/", &xff("8.8.8.8, 203.0.113.9")).await?.status,
        429
    );
    assert_eq!(send(addr, "/", &xff("203.0.113.10")).await?.status, 200);
    assert_eq!(send(addr, "/", &xff("not-an-ip")).await?.status, 400);

    // The peer is not trusted: whatever X-Forwarded-For it sends, it is the peer.
    let (policy, _clock) = manual_policy(rules)?;
    let trusted = TrustedProxies::new(["10.0.0.0/8"])?;
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(RateLimitLayer::new(policy).key(ClientKey::forwarded_for(trusted)));
    let addr = serve(app).await?;
    assert_eq!(send(addr, "/", &xff("1.1.1.1")).await?.status, 200);
    assert_eq!(send(addr, "/", &xff("2.2.2.2")).await?.status, 429);
    assert_eq!(send(addr, "/", &xff("not-an-ip")).await?.status, 429);
    Ok(())
}

#[tokio::test]
async fn missing_or_malformed_key() -> TestResult {
    let (policy, _clock) = manual_policy(API_KEY_RULES)?;
    let layer = RateLimitLayer::new(policy).key(ClientKey::header("x-api-key")?);
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer.clone());
    let addr = serve(app).await?;
    let long = vec![b'k'; 257];
    for (headers, why) in [
        (vec![], "missing client key: key header"),
        (
            vec![("x-api-key", &b""[..])],
            "malformed client key: key header empty",
        ),
        (
            vec![("x-api-key", &b"caf\xe9"[..])],
            "malformed client key: key header not visible ASCII",
        ),
        (
            vec![("x-api-key", &long[..])],
            "malformed client key: key header too long",
        ),
        (
            vec![("x-api-key", &b"a"[..]), ("x-api-key", &b"b"[..])],
            "malformed client key: key header repeated",
        ),
    ] {
        let r = send(addr, "/", &headers).await?;
        assert_eq!(r.status, 400, "{why}");
        assert_eq!(r.header("content-type"), "application/problem+json");
        assert_eq!(
            r.body,
            format!("{{\"type\":\"about:blank\",\"title\":\"Bad Request\",\"status\":400,\"detail\":\"{why}\"}}")
        );
    }
    assert_eq!(layer.stats().bad_key, 5);
    assert_eq!(layer.stats().admitted, 0);

    // With a fallback key, every keyless request shares one allowance.
    let (policy, _clock) = manual_policy(API_KEY_RULES)?;
    let layer = RateLimitLayer::new(policy)
        .key(ClientKey::header("x-api-key")?)
        .on_bad_key(OnBadKey::Fallback("anonymous".into()));
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let addr = serve(app).await?;
    assert_eq!(statuses(addr, "/", &[], 2).await?, [200, 200]);
    assert_eq!(
        statuses(addr, "/", &[("x-api-key", b"")], 2).await?,
        [200, 429]
    );
    assert_eq!(
        send(addr, "/", &[("x-api-key", b"real")]).await?.status,
        200
    );
    Ok(())
}

/// A server behind a layer of the enforced rule `default` (10 a minute) and the shadow
/// rule `trial` (2 a minute), keyed by `x-api-key`, writing `style` fields, with the shadow
/// tiers in them if `shown`; its address and its layer.
async fn shadow_trial(
    style: HeaderStyle,
    shown: bool,
) -> Result<(SocketAddr, RateLimitLayer), BoxError> {
    let split = ShadowSplit::from_toml(
        r#"
        [[rules]]
        name = "default"
        limit = 10
        window = "1m"
        algorithm = "fixed_window"

        [[rules]]
        name = "trial"
        limit = 2
        window = "1m"
        algorithm = "fixed_window"
        shadow = true
    "#,
    )?;
    let clock = ManualClock::starting_at(Nanos::from_secs(15));
    let enforced = Arc::new(Policy::new(split.enforced, clock.clone())?);
    let shadow = Arc::new(Policy::new(split.shadow, clock)?);
    let layer = RateLimitLayer::new(enforced)
        .shadow(shadow)
        .shadow_headers(shown)
        .key(ClientKey::header("x-api-key")?)
        .headers(style);
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer.clone());
    Ok((serve(app).await?, layer))
}

#[tokio::test]
async fn shadow_rules_report_but_never_block() -> TestResult {
    // Hidden from clients by default: a client pacing itself on `RateLimit` must not back
    // off for a rule nobody enforces. Shown with `shadow_headers(true)`.
    for shown in [false, true] {
        let (addr, layer) = shadow_trial(HeaderStyle::Draft10, shown).await?;
        let key: &[(&str, &[u8])] = &[("x-api-key", b"k")];
        let mut replies = Vec::new();
        for _ in 0..5 {
            replies.push(send(addr, "/", key).await?);
        }
        assert!(replies.iter().all(|r| r.status == 200));
        let want = |enforced: &str, trial: &str| match shown {
            true => format!("{enforced}, {trial}"),
            false => enforced.to_owned(),
        };
        assert_eq!(
            replies[0].header("ratelimit"),
            want("\"default\";r=9;t=45", "\"trial\";r=1;t=45")
        );
        assert_eq!(
            replies[0].header("ratelimit-policy"),
            want("\"default\";q=10;w=60", "\"trial\";q=2;w=60")
        );
        assert_eq!(
            replies[1].header("ratelimit"),
            want("\"default\";r=8;t=45", "\"trial\";r=0;t=45")
        );
        // The shadow rule would deny from the third request on: counted, not enforced.
        assert_eq!(
            replies[4].header("ratelimit"),
            want("\"default\";r=5;t=45", "\"trial\";r=0;t=45")
        );
        assert_eq!(replies[4].header("retry-after"), "");
        assert_eq!(layer.stats().shadow_denied, 3);
        assert_eq!(layer.stats().admitted, 5);
        // The enforced rule still blocks.
        assert_eq!(
            statuses(addr, "/", key, 6).await?,
            [200, 200, 200, 200, 200, 429]
        );
    }
    Ok(())
}

/// Legacy fields describe one tier, the tightest: of the enforced tiers, and of the shadow
/// ones too where `shadow_headers(true)` shows them (they were left out).
#[tokio::test]
async fn legacy_fields_show_the_tightest_shadow_tier_only_when_asked() -> TestResult {
    for shown in [false, true] {
        let (addr, _layer) = shadow_trial(HeaderStyle::Legacy, shown).await?;
        let key: &[(&str, &[u8])] = &[("x-api-key", b"k")];
        let mut fields = Vec::new();
        for _ in 0..3 {
            let reply = send(addr, "/", key).await?;
            assert_eq!(reply.status, 200);
            fields.push(
                [
                    "x-ratelimit-limit",
                    "x-ratelimit-remaining",
                    "x-ratelimit-reset",
                ]
                .map(|name| reply.header(name).to_owned()),
            );
        }
        let want: [[&str; 3]; 3] = if shown {
            // The trial's 2 a minute is the tighter; its third request it would deny.
            [["2", "1", "45"], ["2", "0", "45"], ["2", "0", "45"]]
        } else {
            [["10", "9", "45"], ["10", "8", "45"], ["10", "7", "45"]]
        };
        assert_eq!(fields, want.map(|f| f.map(str::to_owned)), "shown: {shown}");
    }
    Ok(())
}

/// A file's deny and allow lists hold behind a shadow split: the banned client is refused
/// with no shadow check, the allow-listed one is neither limited nor shadow-denied, and
/// everyone else meets both halves' rules.
#[tokio::test]
async fn shadow_split_keeps_the_lists() -> TestResult {
    let split = ShadowSplit::from_toml(
        r#"
        [[rules]]
        name = "default"
        limit = 3
        window = "1m"
        algorithm = "fixed_window"

        [[rules]]
        name = "trial"
        limit = 1
        window = "1m"
        algorithm = "fixed_window"
        shadow = true

        [[deny]]
        client = "acct_666"
        reason = "fraud"

        [[allow]]
        client = "partner"
    "#,
    )?;
    let clock = ManualClock::starting_at(Nanos::from_secs(15));
    let layer = RateLimitLayer::new(Arc::new(Policy::new(split.enforced, clock.clone())?))
        .shadow(Arc::new(Policy::new(split.shadow, clock)?))
        .key(ClientKey::header("x-api-key")?);
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer.clone());
    let addr = serve(app).await?;
    let banned: &[(&str, &[u8])] = &[("x-api-key", b"acct_666")];
    let partner: &[(&str, &[u8])] = &[("x-api-key", b"partner")];
    let other: &[(&str, &[u8])] = &[("x-api-key", b"acct_1")];
    assert_eq!(statuses(addr, "/", banned, 2).await?, [403, 403]);
    assert_eq!(statuses(addr, "/", partner, 5).await?, [200; 5]);
    let stats = layer.stats();
    assert_eq!((stats.refused, stats.shadow_denied), (2, 0));
    assert_eq!(statuses(addr, "/", other, 4).await?, [200, 200, 200, 429]);
    // The shadow rule (one per minute) would have denied acct_1's second and third.
    assert_eq!(layer.stats().shadow_denied, 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_while_requests_flow() -> TestResult {
    let rules = |limit: u32| {
        format!("[[rules]]\nname = \"api\"\nlimit = {limit}\nwindow = \"1m\"\nalgorithm = \"fixed_window\"\n")
    };
    let (policy, _clock) = manual_policy(&rules(5))?;
    let layer = RateLimitLayer::new(Arc::clone(&policy)).key(ClientKey::header("x-api-key")?);
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer.clone());
    let addr = serve(app).await?;
    // Ten concurrent requests race a reload that raises the limit to 8 (the key keeps the
    // permits it used), then twenty more follow: exactly 8 are admitted in all.
    let mut tasks = Vec::new();
    for i in 0..10 {
        if i == 5 {
            let policy = Arc::clone(&policy);
            let text = rules(8);
            tasks.push(tokio::spawn(async move {
                policy
                    .reload_toml(&text)
                    .map(|_| 0u16)
                    .map_err(|e| BoxError::from(e.to_string()))
            }));
        }
        tasks.push(tokio::spawn(async move {
            send(addr, "/", &[("x-api-key", b"k")])
                .await
                .map(|r| r.status.as_u16())
        }));
    }
    let mut codes = Vec::new();
    for t in tasks {
        codes.push(t.await??);
    }
    codes.extend(statuses(addr, "/", &[("x-api-key", b"k")], 20).await?);
    let ok = codes.iter().filter(|&&c| c == 200).count();
    let denied = codes.iter().filter(|&&c| c == 429).count();
    assert_eq!((ok, denied), (8, 22), "{codes:?}");
    assert_eq!(
        send(addr, "/", &[("x-api-key", b"other")])
            .await?
            .header("ratelimit-policy"),
        "\"api\";q=8;w=60;pk=:CiStYcJWKlU=:"
    );
    Ok(())
}

#[tokio::test]
async fn plain_hyper_service_behind_the_layer() -> TestResult {
    let (policy, _clock) = manual_policy(API_KEY_RULES)?;
    let layer = RateLimitLayer::new(policy).endpoint(Endpoint::matched_path().or_constant("hyper"));
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, peer)) = listener.accept().await {
            let handler = tower::service_fn(|_req: Request<hyper::body::Incoming>| async {
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"plain"))))
            });
            let service = tower::ServiceBuilder::new()
                // A plain hyper server hands the peer address over as an extension.
                .map_request(move |mut req: Request<hyper::body::Incoming>| {
                    req.extensions_mut().insert(peer);
                    req
                })
                .layer(layer.clone())
                .service(handler);
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(
                        TokioIo::new(stream),
                        hyper_util::service::TowerToHyperService::new(service),
                    )
                    .await;
            });
        }
    });
    let replies = [
        send(addr, "/a", &[]).await?,
        send(addr, "/b", &[]).await?,
        send(addr, "/c", &[]).await?,
        send(addr, "/d", &[]).await?,
    ];
    let got: Vec<u16> = replies.iter().map(|r| r.status.as_u16()).collect();
    assert_eq!(got, [200, 200, 200, 429]);
    assert_eq!(replies[0].body, "plain");
    assert!(replies[2]
        .header("ratelimit")
        .starts_with("\"api\";r=0;t=45;pk="));
    assert_eq!(replies[3].header("retry-after"), "45");
    Ok(())
}

/// A layer without headers passes a plainly admitted request on as it came (no field, no
/// extension; counted admitted), and still does what was asked or needed on the others:
/// the admission exposed, the exempt header of a listed client, the shadow rules checked,
/// a leaky bucket's delay waited out.
#[tokio::test]
async fn a_layer_without_headers_still_exposes_exempts_and_delays() -> TestResult {
    let rules = "[[rules]]\nname = \"api\"\nlimit = 5\nwindow = \"1m\"\nalgorithm = \"fixed_window\"\n\n[[allow]]\nclient = \"192.0.2.9\"\n";
    // Answers with the admission's remaining permits, if the request carried one.
    let handler = tower::service_fn(|request: Request<Empty<Bytes>>| async move {
        let mut response = Response::new(Empty::<Bytes>::new());
        if let Some(admission) = request.extensions().get::<Admission>() {
            response
                .headers_mut()
                .insert("x-remaining", admission.remaining.into());
        }
        Ok::<_, Infallible>(response)
    });
    let without_headers = |rules: &str| -> Result<RateLimitLayer, BoxError> {
        Ok(RateLimitLayer::new(manual_policy(rules)?.0)
            .headers(HeaderStyle::None)
            .endpoint(Endpoint::constant("/")))
    };

    let plain = without_headers(rules)?;
    for (peer, admitted) in [([192, 0, 2, 1], 1), ([192, 0, 2, 9], 2)] {
        let reply = plain.layer(handler).oneshot(from_peer(peer)).await?;
        assert_eq!(reply.status(), 200);
        assert!(reply.headers().is_empty(), "{:?}", reply.headers());
        assert_eq!(plain.stats().admitted, admitted);
    }

    let exposed = without_headers(rules)?.expose_admission();
    let reply = exposed
        .layer(handler)
        .oneshot(from_peer([192, 0, 2, 1]))
        .await?;
    assert_eq!(reply.headers()["x-remaining"], "4");
    assert_eq!(reply.headers().len(), 1);

    let exempt = without_headers(rules)?.exempt_header(HeaderName::from_static("ratelimit-exempt"));
    let reply = exempt
        .layer(handler)
        .oneshot(from_peer([192, 0, 2, 9]))
        .await?;
    assert_eq!(reply.headers()["ratelimit-exempt"], "allow");
    let reply = exempt
        .layer(handler)
        .oneshot(from_peer([192, 0, 2, 1]))
        .await?;
    assert!(reply.headers().is_empty(), "{:?}", reply.headers());

    // Shadow rules of one a minute: checked (and counted) on every admitted request.
    let shadowed = without_headers(rules)?
        .shadow(manual_policy("[[rules]]\nname = \"trial\"\nlimit = 1\nwindow = \"1m\"\n")?.0);
    for _ in 0..2 {
        let reply = shadowed
            .layer(handler)
            .oneshot(from_peer([192, 0, 2, 1]))
            .await?;
        assert!(reply.headers().is_empty(), "{:?}", reply.headers());
    }
    let stats = shadowed.stats();
    assert_eq!((stats.admitted, stats.shadow_denied), (2, 1));

    // One a second, five queued: the second request is held 1 s (its first poll waits).
    let shaped = without_headers(
        "[[rules]]\nname = \"shaped\"\nlimit = 1\nwindow = \"1s\"\nalgorithm = \"leaky_bucket\"\nqueue = 5\n",
    )?;
    let mut service = shaped.layer(handler);
    let first = service.clone().oneshot(from_peer([192, 0, 2, 1])).await?;
    assert_eq!(first.status(), 200);
    let second = std::pin::pin!(service.call(from_peer([192, 0, 2, 1])));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(std::future::Future::poll(second, &mut cx).is_pending());
    let stats = shaped.stats();
    assert_eq!((stats.admitted, stats.delayed), (2, 1));
    Ok(())
}

/// A delayed request inside a tokio runtime built without a timer is held and then
/// served: the delay does not sleep on tokio's timer, which panics there.
#[test]
fn a_delay_needs_no_tokio_timer() -> TestResult {
    // 10 a second, five queued: the second request at once is held 100 ms.
    let rules = "[[rules]]\nname = \"shaped\"\nlimit = 10\nwindow = \"1s\"\nalgorithm = \"leaky_bucket\"\nqueue = 5\n";
    let (policy, _clock) = manual_policy(rules)?;
    let layer = RateLimitLayer::new(policy);
    let service = in_process(&layer);
    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    let statuses = runtime.block_on(async {
        let mut statuses = Vec::new();
        for _ in 0..2 {
            let reply = service.clone().oneshot(from_peer([192, 0, 2, 1])).await?;
            statuses.push(reply.status().as_u16());
        }
        Ok::<_, BoxError>(statuses)
    })?;
    assert_eq!(statuses, [200, 200]);
    let stats = layer.stats();
    assert_eq!((stats.admitted, stats.delayed), (2, 1));
    Ok(())
}

#[tokio::test]
async fn leaky_bucket_delays_and_cancellation_refunds() -> TestResult {
    // In-process with a manual clock: the second request is admitted with a 1 s delay.
    let rules = "[[rules]]\nname = \"shaped\"\nlimit = 1\nwindow = \"1s\"\nalgorithm = \"leaky_bucket\"\nqueue = 5\n";
    let (policy, _clock) = manual_policy(rules)?;
    let layer = RateLimitLayer::new(Arc::clone(&policy)).endpoint(Endpoint::constant("/"));
    let service = in_process(&layer);
    let request = || from_peer([192, 0, 2, 1]);
    let first = service.clone().oneshot(request()).await?;
    assert_eq!(first.status(), 200);
    assert_eq!(
        policy.peek("192.0.2.1", "/", 1)?.delay(),
        Nanos::from_secs(1)
    );
    // The delayed request is dropped mid-wait: its permit comes back.
    let delayed = service.clone().oneshot(request());
    let timed_out = tokio::time::timeout(Duration::from_millis(50), delayed).await;
    assert!(timed_out.is_err(), "a 1 s delay must not resolve in 50 ms");
    assert_eq!(
        policy.peek("192.0.2.1", "/", 1)?.delay(),
        Nanos::from_secs(1)
    );
    let stats = layer.stats();
    assert_eq!((stats.delayed, stats.cancelled), (1, 1));

    // Over the wire with real time: 10 per second, the third of a burst waits ~200 ms.
    let policy = Arc::new(Policy::from_toml(
        "[[rules]]\nname = \"shaped\"\nlimit = 10\nwindow = \"1s\"\nalgorithm = \"leaky_bucket\"\nqueue = 5\n",
        MonotonicClock::new(),
    )?);
    let layer = RateLimitLayer::new(policy);
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer.clone());
    let addr = serve(app).await?;
    let start = Instant::now();
    let burst: Vec<_> = (0..3)
        .map(|_| tokio::spawn(async move { send(addr, "/", &[]).await }))
        .collect();
    for t in burst {
        assert_eq!(t.await??.status, 200);
    }
    assert!(
        start.elapsed() >= Duration::from_millis(150),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(layer.stats().delayed, 2);
    Ok(())
}

/// A settled response's fields are written as the admission's are: the shadow tiers stay
/// when `shadow_headers(true)` shows them (settled too: the shadow rule was charged the
/// same) and stay out when it does not, and an allow-listed client keeps the exempt header.
#[tokio::test]
async fn settlement_keeps_the_shadow_tiers_and_the_exempt_header() -> TestResult {
    for shown in [true, false] {
        let clock = ManualClock::starting_at(Nanos::from_secs(15));
        let enforced = "[[rules]]\nname = \"default\"\nlimit = 100\nwindow = \"1m\"\n\
            algorithm = \"fixed_window\"\n[[allow]]\nclient = \"partner\"\n";
        let shadow = "[[rules]]\nname = \"trial\"\nlimit = 50\nwindow = \"1m\"\n\
            algorithm = \"fixed_window\"\n";
        let layer = RateLimitLayer::new(Arc::new(Policy::from_toml(enforced, clock.clone())?))
            .shadow(Arc::new(Policy::from_toml(shadow, clock)?))
            .shadow_headers(shown)
            .exempt_header(HeaderName::from_static("ratelimit-exempt"))
            .key(ClientKey::header("x-api-key")?)
            .cost(|_| 10)
            .headers(HeaderStyle::Draft10)
            .settle(Settle::from_extension());
        let app = reporting_cost(4, layer);
        let addr = serve(app).await?;
        // Estimate 10, actual 4: both policies give 6 back.
        let r = send(addr, "/", &[("x-api-key", b"k")]).await?;
        assert_eq!(r.status, 200);
        let (limit, policy) = match shown {
            true => (
                "\"default\";r=96;t=45, \"trial\";r=46;t=45",
                "\"default\";q=100;w=60, \"trial\";q=50;w=60",
            ),
            false => ("\"default\";r=96;t=45", "\"default\";q=100;w=60"),
        };
        assert_eq!(
            (r.header("ratelimit"), r.header("ratelimit-policy")),
            (limit, policy)
        );
        let r = send(addr, "/", &[("x-api-key", b"partner")]).await?;
        assert_eq!(
            (r.header("ratelimit-exempt"), r.header("ratelimit")),
            ("allow", "")
        );
    }
    Ok(())
}

/// An app whose handler at `/` reports `used` as the request's actual cost
/// ([`TokensUsed`]), behind `layer`.
fn reporting_cost(used: u32, layer: RateLimitLayer) -> Router {
    Router::new()
        .route(
            "/",
            get(move || async move {
                let mut response = Response::new(axum::body::Body::from("done"));
                response.extensions_mut().insert(TokensUsed(used));
                response
            }),
        )
        .layer(layer)
}

/// A policy that counts the peeks it is asked for (the state read a settlement does to
/// write the response's fields), answering everything as the policy it wraps.
struct CountingPeeks<P> {
    policy: P,
    peeks: std::sync::atomic::AtomicU32,
}

impl<P: PolicyCheck> PolicyCheck for CountingPeeks<P> {
    fn now(&self) -> Nanos {
        self.policy.now()
    }
    fn run(
        &self,
        op: tollgate::policy::Op,
        request: &tollgate::policy::Request<'_>,
        now: Nanos,
    ) -> Result<Option<tollgate::policy::PolicyDecision>, tollgate::InsufficientCapacity> {
        if op == tollgate::policy::Op::Peek {
            self.peeks
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.policy.run(op, request, now)
    }
}

/// A settlement reads the key's state again only to write the response's fields: a layer
/// that writes none (`HeaderStyle::None`) settles without that read (one policy call, a
/// round trip on Redis, saved per settled request); one that writes them reads it once.
#[tokio::test]
async fn settlement_reads_the_state_again_only_for_headers() -> TestResult {
    let rules = "[[rules]]\nname = \"tokens\"\nlimit = 100\nwindow = \"1m\"\nalgorithm = \"fixed_window\"\n";
    for (style, peeks) in [(HeaderStyle::None, 0), (HeaderStyle::Draft11, 1)] {
        let (policy, _clock) = manual_policy(rules)?;
        let counting = Arc::new(CountingPeeks {
            policy: Arc::clone(&policy),
            peeks: 0.into(),
        });
        let layer = RateLimitLayer::new(Arc::clone(&counting))
            .key(ClientKey::header("x-api-key")?)
            .cost(|_| 40)
            .headers(style)
            .settle(Settle::from_extension());
        let app = reporting_cost(10, layer);
        let addr = serve(app).await?;
        let r = send(addr, "/", &[("x-api-key", b"k")]).await?;
        assert_eq!(r.status, 200);
        assert_eq!(
            r.header("ratelimit").is_empty(),
            style == HeaderStyle::None,
            "{style:?}"
        );
        assert_eq!(
            policy.peek("k", "/", 0)?.remaining(),
            90,
            "{style:?}: settled"
        );
        assert_eq!(
            counting.peeks.load(std::sync::atomic::Ordering::Relaxed),
            peeks,
            "{style:?}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn settlement_refunds_or_charges_the_difference() -> TestResult {
    let rules = "[[rules]]\nname = \"tokens\"\nlimit = 100\nwindow = \"1m\"\nalgorithm = \"fixed_window\"\n";
    let (policy, _clock) = manual_policy(rules)?;
    let layer = RateLimitLayer::new(Arc::clone(&policy))
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
            "/header",
            get(|headers: HeaderMap| async move {
                let used = headers.get("x-used").cloned();
                let mut response = Response::new(axum::body::Body::from("done"));
                if let Some(used) = used {
                    response.headers_mut().insert("x-tokens-used", used);
                }
                response
            }),
        )
        .route(
            "/extension",
            get(|| async {
                let mut response = Response::new(axum::body::Body::from("done"));
                response.extensions_mut().insert(TokensUsed(30));
                response
            }),
        )
        .route(
            "/both",
            get(|| async {
                let mut response = Response::new(axum::body::Body::from("done"));
                response.extensions_mut().insert(TokensUsed(3));
                response
                    .headers_mut()
                    .insert("x-tokens-used", http::HeaderValue::from_static("abc"));
                response
            }),
        )
        .layer(layer.clone());
    let addr = serve(app).await?;
    let remaining = || policy.peek("k", "/", 0).map(|d| d.remaining());
    // Estimate 40, actual 10: 30 refunded.
    let r = send(
        addr,
        "/header",
        &[
            ("x-api-key", b"k"),
            ("x-estimate", b"40"),
            ("x-used", b"10"),
        ],
    )
    .await?;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("x-tokens-used"),
        "",
        "the settlement header is internal"
    );
    assert_eq!(
        r.header("ratelimit").split(';').nth(1),
        Some("r=90"),
        "headers report the settled cost, not the estimate"
    );
    assert_eq!(remaining()?, 90);
    // Estimate 5, actual 30 (extension): 25 more charged.
    assert_eq!(
        send(
            addr,
            "/extension",
            &[("x-api-key", b"k"), ("x-estimate", b"5")]
        )
        .await?
        .status,
        200
    );
    assert_eq!(remaining()?, 60);
    // No actual stated: the estimate stands.
    assert_eq!(
        send(
            addr,
            "/header",
            &[("x-api-key", b"k"), ("x-estimate", b"7")]
        )
        .await?
        .status,
        200
    );
    assert_eq!(remaining()?, 53);
    // An actual the layer cannot read: the estimate stands, and the response is counted.
    assert_eq!(layer.stats().unreadable_costs, 0);
    for used in [&b"-5"[..], b"1.5", b"4294967296"] {
        let r = send(
            addr,
            "/header",
            &[("x-api-key", b"k"), ("x-estimate", b"1"), ("x-used", used)],
        )
        .await?;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-tokens-used"), "", "removed, read or not");
    }
    assert_eq!(remaining()?, 50);
    assert_eq!(layer.stats().unreadable_costs, 3);
    // The extension comes first: the header is not read, so not counted (removed all the
    // same). Estimate 1, actual 3: 2 more charged.
    let r = send(addr, "/both", &[("x-api-key", b"k")]).await?;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-tokens-used"), "");
    assert_eq!(remaining()?, 47);
    assert_eq!(layer.stats().unreadable_costs, 3);
    // An estimate beyond the limit can never pass: 413, not 429.
    let r = send(
        addr,
        "/header",
        &[("x-api-key", b"k"), ("x-estimate", b"101")],
    )
    .await?;
    assert_eq!(r.status, 413);
    assert!(r.body.contains("\"max_cost\":100"), "{}", r.body);
    // Extra beyond what is left is charged all the same (the work was done): the key is
    // in debt, and denied until it is repaid.
    assert_eq!(
        send(
            addr,
            "/header",
            &[
                ("x-api-key", b"k"),
                ("x-estimate", b"47"),
                ("x-used", b"57")
            ]
        )
        .await?
        .status,
        200
    );
    assert_eq!(remaining()?, 0);
    let denied = send(
        addr,
        "/header",
        &[("x-api-key", b"k"), ("x-estimate", b"1")],
    )
    .await?;
    assert_eq!(denied.status, 429, "in debt");
    let stats = layer.stats();
    assert_eq!(
        (stats.refunded, stats.charged, stats.too_costly),
        (30, 37, 1)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_get_exactly_the_limit() -> TestResult {
    let (policy, _clock) =
        manual_policy("[[rules]]\nname = \"api\"\nlimit = 50\nwindow = \"1m\"\n")?;
    let layer = RateLimitLayer::new(policy).key(ClientKey::header("x-api-key")?);
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer.clone());
    let addr = serve(app).await?;
    // 200 requests of one key from 200 connections at once: GCRA admits exactly its burst.
    let tasks: Vec<_> = (0..200)
        .map(|_| tokio::spawn(async move { send(addr, "/", &[("x-api-key", b"k")]).await }))
        .collect();
    let mut codes = Vec::new();
    for t in tasks {
        codes.push(t.await??.status.as_u16());
    }
    let ok = codes.iter().filter(|&&c| c == 200).count();
    let denied = codes.iter().filter(|&&c| c == 429).count();
    assert_eq!((ok, denied), (50, 150));
    assert_eq!((layer.stats().admitted, layer.stats().denied), (50, 150));
    Ok(())
}

/// A request from TCP peer `peer` with one `X-Forwarded-For` line per entry of `lines`.
fn with_forwarded_for(peer: &str, lines: &[&[u8]]) -> Result<Request<()>, BoxError> {
    let mut request = Request::new(());
    for line in lines {
        request
            .headers_mut()
            .append("x-forwarded-for", http::HeaderValue::from_bytes(line)?);
    }
    request.extensions_mut().insert(peer.parse::<SocketAddr>()?);
    Ok(request)
}

/// Issue 27, item 9: one byte outside ASCII that a client writes into its own part of
/// `X-Forwarded-For` (proxies append to it verbatim) made the whole field fail `to_str`,
/// so the key was "malformed" and, with `OnBadKey::Fallback`, the client escaped into the
/// shared fallback bucket. The field is read as bytes: the rightmost untrusted hop is
/// still found, whatever the client wrote left of it.
#[test]
fn issue27_item9_a_non_ascii_byte_in_x_forwarded_for_keeps_the_clients_key() -> TestResult {
    let key = ClientKey::forwarded_for(TrustedProxies::new(["10.0.0.0/8"])?);
    let client_parts: [&[u8]; 6] = [
        b"\xff",
        b"caf\xe9",
        b"\x80, 1.1.1.1",
        b"1.2.3.4\xff",
        b"\xc3\xa9\xc3\xa9, , \xff:\xff",
        b"203.0.113.9\xff",
    ];
    for part in client_parts {
        // One field, as a proxy appends to it...
        let mut field = part.to_vec();
        field.extend_from_slice(b", 203.0.113.9, 10.0.0.7");
        let request = with_forwarded_for("10.0.0.1:443", &[&field])?;
        assert_eq!(
            key.extract(&tollgate_http::Head::of(&request)).as_deref(),
            Ok("203.0.113.9"),
            "{part:?}"
        );
        // ...or one line per hop.
        let request = with_forwarded_for("10.0.0.1:443", &[part, b"203.0.113.9", b"10.0.0.7"])?;
        assert_eq!(
            key.extract(&tollgate_http::Head::of(&request)).as_deref(),
            Ok("203.0.113.9"),
            "{part:?} on its own line"
        );
    }
    Ok(())
}

/// Issue 27, item 9: IPv4 clients arriving as IPv4-embedded IPv6 (through a NAT64 /
/// SIIT front end, `64:ff9b::/96`, or a dual-stack socket, `::ffff:a.b.c.d`) all fell into
/// one /64 key, so one abuser locked out every IPv4 user behind the translator. They are
/// keyed by the embedded IPv4.
#[test]
fn issue27_item9_ipv4_behind_nat64_is_keyed_by_the_ipv4() -> TestResult {
    let peer_key = |peer: &str| -> Result<String, BoxError> {
        let mut request = Request::new(());
        request.extensions_mut().insert(peer.parse::<SocketAddr>()?);
        Ok(ClientKey::peer_ip()
            .extract(&tollgate_http::Head::of(&request))?
            .into_owned())
    };
    // Two IPv4 clients behind NAT64: two keys.
    assert_eq!(peer_key("[64:ff9b::c000:201]:4000")?, "192.0.2.1");
    assert_eq!(peer_key("[64:ff9b::192.0.2.2]:4000")?, "192.0.2.2");
    // The same IPv4, native, mapped and embedded: one key.
    assert_eq!(peer_key("192.0.2.1:4000")?, "192.0.2.1");
    assert_eq!(peer_key("[::ffff:192.0.2.1]:4000")?, "192.0.2.1");
    // An IPv4 prefix applies to them as to any IPv4 address.
    let mut request = Request::new(());
    request
        .extensions_mut()
        .insert("[64:ff9b::c000:2a1]:1".parse::<SocketAddr>()?);
    let per_24 = ClientKey::peer_ip().prefix(tollgate_http::IpPrefix::new(24, 64));
    assert_eq!(
        per_24
            .extract(&tollgate_http::Head::of(&request))
            .as_deref(),
        Ok("192.0.2.0")
    );
    // Native IPv6 keeps its /64.
    assert_eq!(peer_key("[2001:db8:1:2::9]:4000")?, "2001:db8:1:2::");
    // Behind a trusted proxy, the same.
    let key = ClientKey::forwarded_for(TrustedProxies::new(["10.0.0.0/8"])?);
    for (xff, client) in [
        (&b"64:ff9b::c633:6407"[..], "198.51.100.7"),
        (b"[64:ff9b::c633:6408]:443", "198.51.100.8"),
        (b"::ffff:198.51.100.7", "198.51.100.7"),
        (b"198.51.100.7", "198.51.100.7"),
    ] {
        let request = with_forwarded_for("10.0.0.1:443", &[xff])?;
        assert_eq!(
            key.extract(&tollgate_http::Head::of(&request)).as_deref(),
            Ok(client),
            "{xff:?}"
        );
    }
    Ok(())
}

/// Item 9 end to end, on the real axum + hyper loopback setup: a client behind the
/// (loopback) trusted proxy cannot escape into the fallback bucket with a byte outside
/// ASCII in its part of `X-Forwarded-For`, and IPv4 clients behind NAT64 get one key each.
#[tokio::test]
async fn issue27_item9_end_to_end_keys_behind_proxies_and_nat64() -> TestResult {
    let rules = r#"
        [[rules]]
        name = "per-ip"
        limit = 1
        window = "1m"
        algorithm = "fixed_window"
    "#;
    let (policy, _clock) = manual_policy(rules)?;
    let layer = RateLimitLayer::new(policy)
        .key(ClientKey::forwarded_for(TrustedProxies::new([
            "127.0.0.0/8",
        ])?))
        .on_bad_key(OnBadKey::Fallback("anonymous".into()));
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer.clone());
    let addr = serve(app).await?;
    let xff = |v: &'static [u8]| [("x-forwarded-for", v)];
    assert_eq!(send(addr, "/", &xff(b"203.0.113.9")).await?.status, 200);
    // The same client, whatever it writes into its own part: its own key, spent.
    assert_eq!(
        send(addr, "/", &xff(b"\xff, 203.0.113.9")).await?.status,
        429
    );
    assert_eq!(
        send(
            addr,
            "/",
            &[
                ("x-forwarded-for", &b"caf\xe9"[..]),
                ("x-forwarded-for", &b"203.0.113.9"[..])
            ]
        )
        .await?
        .status,
        429
    );
    assert_eq!(layer.stats().bad_key, 0);
    // IPv4 behind NAT64: keyed by the IPv4, one key per client.
    assert_eq!(
        send(addr, "/", &xff(b"64:ff9b::c633:6407")).await?.status,
        200
    );
    assert_eq!(send(addr, "/", &xff(b"198.51.100.7")).await?.status, 429);
    assert_eq!(
        send(addr, "/", &xff(b"64:ff9b::c633:6408")).await?.status,
        200
    );
    // Garbage a trusted proxy wrote (right of the client's hop) is still a bad key.
    assert_eq!(
        send(addr, "/", &xff(b"203.0.113.7, \xff")).await?.status,
        200
    );
    assert_eq!(layer.stats().bad_key, 1);
    // The fallback key's one permit went to that request.
    assert_eq!(send(addr, "/", &xff(b"unknown")).await?.status, 429);
    assert_eq!(layer.stats().bad_key, 2);
    Ok(())
}

/// A policy answering one fixed decision, whatever it is asked: tiers whose labels were
/// built by hand, as a decorator or a custom store can build them (config validation
/// keeps such names out of a `Policy`).
struct FixedDecision(tollgate::policy::PolicyDecision);

impl PolicyCheck for FixedDecision {
    fn now(&self) -> Nanos {
        Nanos::ZERO
    }
    fn run(
        &self,
        op: tollgate::policy::Op,
        _: &tollgate::policy::Request<'_>,
        _: Nanos,
    ) -> Result<Option<tollgate::policy::PolicyDecision>, tollgate::InsufficientCapacity> {
        Ok(op.decides().then(|| self.0.clone()))
    }
}

/// Issue 28 item 4: one structured-field writer. A tier name an sf-string cannot hold
/// (non-ASCII, CR, LF) reaches the client over HTTP exactly as `RateLimitHeaders` writes
/// it — each such character a `?`, the fields parseable, every number in them kept —
/// in every header style, admitted and denied. (Before, `RateLimitHeaders` wrote `?` and
/// the layer left both fields out.)
#[tokio::test]
async fn tier_names_an_sf_string_cannot_hold_read_alike_over_http_and_in_rate_limit_headers(
) -> TestResult {
    use std::borrow::Cow;
    use tollgate::policy::{PolicyDecision, RateLimitHeaders, RuleId, TierLabel};
    use tollgate::Decision;

    static ODD: TierLabel = TierLabel {
        rule: RuleId(0),
        rule_name: Cow::Borrowed("odd"),
        name: Cow::Borrowed("caf\u{e9} \"\\\r\nInjected: 1"),
        quota: 10,
        window: Nanos::from_secs(60),
        shared: false,
    };
    static PLAIN: TierLabel = TierLabel {
        rule: RuleId(1),
        rule_name: Cow::Borrowed("plain"),
        name: Cow::Borrowed("daily"),
        quota: 1000,
        window: Nanos::from_secs(86_400),
        shared: false,
    };
    let admitted = PolicyDecision::combine([
        (&ODD, Decision::allow(10, 9, Nanos::from_millis(5_500))),
        (&PLAIN, Decision::allow(1000, 998, Nanos::from_secs(3_600))),
    ]);
    let denied = PolicyDecision::combine([
        (
            &ODD,
            Decision::deny(10, 0, Nanos::from_secs(30), Nanos::from_millis(2_500)),
        ),
        (&PLAIN, Decision::allow(1000, 998, Nanos::from_secs(3_600))),
    ]);
    let want_policy = "\"caf? \\\"\\\\??Injected: 1\";q=10;w=60, \"daily\";q=1000;w=86400";
    for (decision, status, want_limit) in [
        (
            &admitted,
            StatusCode::OK,
            "\"caf? \\\"\\\\??Injected: 1\";r=9;t=6, \"daily\";r=998;t=3600",
        ),
        (
            &denied,
            StatusCode::TOO_MANY_REQUESTS,
            "\"caf? \\\"\\\\??Injected: 1\";r=0;t=3, \"daily\";r=998;t=3600",
        ),
    ] {
        let expected = RateLimitHeaders::from_policy_decision(decision);
        assert_eq!(expected.get("RateLimit-Policy"), Some(want_policy));
        assert_eq!(expected.get("RateLimit"), Some(want_limit));
        for style in [
            HeaderStyle::Draft10,
            HeaderStyle::Draft11,
            HeaderStyle::Legacy,
        ] {
            let layer = RateLimitLayer::new(Arc::new(FixedDecision(decision.clone())))
                .key(ClientKey::header("x-api-key")?)
                .headers(style);
            let app = Router::new()
                .route("/", get(|| async { "ok" }))
                .layer(layer);
            let addr = serve(app).await?;
            let reply = send(addr, "/", &[("x-api-key", b"k")]).await?;
            assert_eq!(reply.status, status, "{style:?}");
            // Draft-11 items are draft-10's with the client's partition key appended.
            let unkeyed = |value: &str| value.replace(";pk=:r2PmTIYB/Yo=:", "");
            match style {
                HeaderStyle::Draft10 | HeaderStyle::Draft11 => {
                    for name in ["RateLimit-Policy", "RateLimit"] {
                        let sent = reply.header(&name.to_ascii_lowercase());
                        assert_eq!(
                            Some(unkeyed(sent).as_str()),
                            expected.get(name),
                            "{style:?}"
                        );
                        let pk = sent.matches(";pk=:r2PmTIYB/Yo=:").count();
                        let want_pk = if style == HeaderStyle::Draft11 { 2 } else { 0 };
                        assert_eq!(pk, want_pk, "{style:?} {name}: {sent}");
                    }
                    assert_eq!(reply.header("x-ratelimit-limit"), "");
                }
                HeaderStyle::Legacy => {
                    for name in [
                        "X-RateLimit-Limit",
                        "X-RateLimit-Remaining",
                        "X-RateLimit-Reset",
                    ] {
                        let sent = reply.header(&name.to_ascii_lowercase());
                        assert_eq!(Some(sent), expected.get(name), "{name}");
                    }
                    assert_eq!(reply.header("ratelimit"), "");
                }
                // `HeaderStyle` is non-exhaustive: a style this loop does not list.
                other => panic!("untested style {other:?}"),
            }
            assert_eq!(
                Some(reply.header("retry-after")).filter(|v| !v.is_empty()),
                expected.get("Retry-After"),
                "{style:?}"
            );
            assert_eq!(reply.header("injected"), "", "{style:?}");
        }
    }
    Ok(())
}

/// A server not wired to give the layer its peers' addresses (axum served without
/// `into_make_service_with_connect_info`) answers 500, not a 400 blaming the client, and
/// tells the operator once (not once per request) how to fix it.
#[cfg(feature = "tracing")]
#[tokio::test]
async fn no_peer_address_is_the_servers_error() -> TestResult {
    let errors = Arc::new(events_support::Events::at_least(tracing::Level::ERROR));
    let _default = tracing::subscriber::set_default(Arc::clone(&errors));
    let (policy, _clock) =
        manual_policy("[[rules]]\nname = \"api\"\nlimit = 10\nwindow = \"1m\"\n")?;
    // The default key is the peer's IP.
    let layer = RateLimitLayer::new(policy);
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    // No connect info: the wiring mistake.
    tokio::spawn(async move { axum::serve(listener, app).await });
    for _ in 0..3 {
        let reply = send(addr, "/", &[]).await?;
        assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(reply.header("content-type"), "application/problem+json");
        assert!(
            reply
                .body
                .contains("into_make_service_with_connect_info::<SocketAddr>()"),
            "{}",
            reply.body
        );
    }
    let stats = layer.stats();
    assert_eq!(
        (stats.no_peer_address, stats.bad_key, stats.admitted),
        (3, 0, 0)
    );
    let logged = errors.seen();
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert!(logged[0].contains("total=1"), "{logged:?}");
    assert!(
        logged[0].contains("into_make_service_with_connect_info"),
        "{logged:?}"
    );
    Ok(())
}

/// An endpoint (the raw path) that counts how often it is named.
fn counting_endpoint() -> (Arc<std::sync::atomic::AtomicUsize>, Endpoint) {
    let named = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counting = Arc::clone(&named);
    let endpoint = Endpoint::custom(move |head| {
        counting.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some(head.uri.path().to_owned())
    });
    (named, endpoint)
}

/// The endpoint is named only where it is read, and once per request: never for a request
/// the rules admit without looking at it, once for a rule set that selects by endpoint
/// (the policy's reading and the denial's report share it).
#[tokio::test]
async fn the_endpoint_is_named_once_and_only_where_read() -> TestResult {
    use std::sync::atomic::Ordering;
    let (policy, _clock) = manual_policy(
        "[[rules]]\nname = \"default\"\nlimit = 2\nwindow = \"1m\"\nalgorithm = \"fixed_window\"\n",
    )?;
    let (named, endpoint) = counting_endpoint();
    let app = Router::new()
        .route("/a", get(|| async { "a" }))
        .layer(RateLimitLayer::new(Arc::clone(&policy)).endpoint(endpoint));
    let addr = serve(app).await?;
    assert_eq!(statuses(addr, "/a", &[], 3).await?, [200, 200, 429]);
    // Only the denial, which reports it.
    assert_eq!(named.load(Ordering::Relaxed), 1);
    policy.reload_toml(
        "[[rules]]\nname = \"a\"\nendpoint = \"/a\"\nlimit = 1\nwindow = \"1m\"\nalgorithm = \"fixed_window\"\n",
    )?;
    assert_eq!(statuses(addr, "/a", &[], 2).await?, [200, 429]);
    // Once per request: the policy's reading, and the denial's report of the same name.
    assert_eq!(named.load(Ordering::Relaxed), 3);
    Ok(())
}

/// Enforced rules that select no endpoint, shadow rules that do: the shadow check still
/// sees the request's endpoint, and the endpoint is named once per admitted request (the
/// shadow check's and the settlement's charge share it).
#[tokio::test]
async fn a_shadow_check_reads_the_endpoint_the_enforced_rules_skip() -> TestResult {
    use std::sync::atomic::Ordering;
    let (policy, clock) = manual_policy(
        "[[rules]]\nname = \"default\"\nlimit = 100\nwindow = \"1m\"\nalgorithm = \"fixed_window\"\n",
    )?;
    let shadow = Arc::new(Policy::from_toml(
        "[[rules]]\nname = \"a\"\nendpoint = \"/\"\nlimit = 1\nwindow = \"1m\"\nalgorithm = \"fixed_window\"\n",
        clock,
    )?);
    let (named, endpoint) = counting_endpoint();
    let layer = RateLimitLayer::new(Arc::clone(&policy))
        .shadow(shadow)
        .endpoint(endpoint)
        .settle(Settle::from_extension());
    let addr = serve(reporting_cost(1, layer.clone())).await?;
    assert_eq!(statuses(addr, "/", &[], 3).await?, [200, 200, 200]);
    assert_eq!(layer.stats().shadow_denied, 2);
    assert_eq!(named.load(Ordering::Relaxed), 3);
    Ok(())
}
