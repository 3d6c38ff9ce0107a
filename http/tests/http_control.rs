//! The responses a service controls, over a real axum server and hyper client on
//! loopback: skipped methods and path prefixes (no check, no headers, no cost), limited
//! methods (every other skipped), denials answered by the service's own closure, a custom
//! key with the raw path as the endpoint, and a kept settlement header.

mod http_support;

use std::sync::Arc;

use axum::routing::{get, options};
use axum::Router;
use http::{Method, StatusCode};
use http_body_util::Full;
use tollgate::policy::Policy;
use tollgate::{ManualClock, Nanos};
use tollgate_http::{ClientKey, Endpoint, Head, PrefixError, RateLimitLayer, Settle};

use http_support::{send, send_method, serve, BoxError};

type TestResult = Result<(), BoxError>;

const RULES: &str = r#"
    [[rules]]
    name = "api"
    limit = 2
    window = "1m"
    algorithm = "fixed_window"
"#;

fn policy() -> Result<Arc<Policy<ManualClock>>, BoxError> {
    let clock = ManualClock::starting_at(Nanos::from_secs(15));
    Ok(Arc::new(Policy::from_toml(RULES, clock)?))
}

#[tokio::test]
async fn skipped_requests_are_unchecked_unheaded_and_free() -> TestResult {
    let policy = policy()?;
    let layer = RateLimitLayer::new(Arc::clone(&policy))
        .key(ClientKey::header("x-api-key")?)
        .skip_method(Method::OPTIONS)
        .skip_path_prefix("/health")?;
    let app = Router::new()
        .route(
            "/",
            get(|| async { "ok" }).merge(options(|| async { "preflight" })),
        )
        .route("/health", get(|| async { "up" }))
        .route("/health/live", get(|| async { "live" }))
        .route("/healthz", get(|| async { "z" }))
        .layer(layer.clone());
    let addr = serve(app).await?;
    let key: &[(&str, &[u8])] = &[("x-api-key", b"acct_1")];

    // Preflights and health checks, many more than the limit, keyless or not: all pass,
    // with no rate-limit field, and spend nothing.
    for _ in 0..5 {
        for (method, path, body) in [
            (Method::OPTIONS, "/", "preflight"),
            (Method::GET, "/health", "up"),
            (Method::GET, "/health/live", "live"),
        ] {
            for headers in [key, &[]] {
                let reply = send_method(addr, method.clone(), path, headers).await?;
                assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, body));
                assert_eq!(reply.header("ratelimit"), "");
                assert_eq!(reply.header("ratelimit-policy"), "");
            }
        }
    }
    // The client's whole allowance is still there; `/healthz` is not under `/health`.
    let mut got = Vec::new();
    for path in ["/", "/healthz", "/"] {
        got.push(send(addr, path, key).await?.status.as_u16());
    }
    assert_eq!(got, [200, 200, 429]);
    // A keyless GET is still checked (and refused for its missing key).
    assert_eq!(send(addr, "/", &[]).await?.status, StatusCode::BAD_REQUEST);
    let stats = layer.stats();
    assert_eq!(
        (stats.skipped, stats.admitted, stats.denied, stats.bad_key),
        (30, 2, 1, 1)
    );
    Ok(())
}

/// `limit_methods` checks the methods it names and lets every other pass as a skipped
/// one does: `tower_governor`'s `.methods(..)`.
#[tokio::test]
async fn only_the_limited_methods_are_checked() -> TestResult {
    use axum::routing::post;
    let policy = policy()?;
    let layer = RateLimitLayer::new(Arc::clone(&policy))
        .key(ClientKey::header("x-api-key")?)
        .limit_methods([Method::POST, Method::DELETE])
        .skip_method(Method::DELETE);
    let app = Router::new()
        .route(
            "/",
            get(|| async { "read" })
                .merge(post(|| async { "wrote" }))
                .merge(axum::routing::delete(|| async { "gone" })),
        )
        .layer(layer.clone());
    let addr = serve(app).await?;
    let key: &[(&str, &[u8])] = &[("x-api-key", b"acct_1")];
    // Reads, keyless or not, as many as wanted: unchecked, no fields.
    for _ in 0..4 {
        for headers in [key, &[]] {
            let reply = send(addr, "/", headers).await?;
            assert_eq!(
                (reply.status, reply.body.as_str()),
                (StatusCode::OK, "read")
            );
            assert_eq!(reply.header("ratelimit"), "");
        }
    }
    // Writes spend the allowance of two, then are denied; a keyless write is refused.
    let mut got = Vec::new();
    for _ in 0..3 {
        let reply = send_method(addr, Method::POST, "/", key).await?;
        got.push(reply.status.as_u16());
    }
    assert_eq!(got, [200, 200, 429]);
    let keyless = send_method(addr, Method::POST, "/", &[]).await?;
    assert_eq!(keyless.status, StatusCode::BAD_REQUEST);
    // Limited and skipped: skipped.
    let gone = send_method(addr, Method::DELETE, "/", key).await?;
    assert_eq!(
        (gone.status, gone.header("ratelimit")),
        (StatusCode::OK, "")
    );
    let stats = layer.stats();
    assert_eq!(
        (stats.skipped, stats.admitted, stats.denied, stats.bad_key),
        (9, 2, 1, 1)
    );
    // No method named: none checked (a layer that names none at all checks every one).
    let all = in_process_layer_checks(RateLimitLayer::new(Arc::clone(&policy))).await?;
    let none = in_process_layer_checks(RateLimitLayer::new(policy).limit_methods([])).await?;
    assert_eq!((all, none), (true, false));
    Ok(())
}

/// Whether `layer` checks a GET: called in process, it answers one with rate-limit fields.
async fn in_process_layer_checks(layer: RateLimitLayer) -> Result<bool, BoxError> {
    use tower::ServiceExt;
    let mut request = http_support::from_peer([192, 0, 2, 1]);
    *request.method_mut() = Method::GET;
    let response = http_support::in_process(&layer).oneshot(request).await?;
    Ok(response.headers().contains_key("ratelimit"))
}

#[test]
fn a_prefix_that_can_never_match_is_refused() {
    const TEMPLATE: &str = "it is matched against the request's own path, not a route \
         template: write the literal prefix (`/users/`, not `/users/{id}` or `/static/{*path}`)";
    for (prefix, reason) in [
        ("health", "a request path starts with '/'"),
        ("/users/*", TEMPLATE),
        ("/a?b", "a request path holds no query or fragment"),
        ("/users/{id", TEMPLATE),
        ("/users/{id}", TEMPLATE),
        ("/static/{*path}", TEMPLATE),
    ] {
        let Ok(policy) = policy() else {
            panic!("the rules parse")
        };
        let got = RateLimitLayer::new(policy).skip_path_prefix(prefix).err();
        let Some(PrefixError {
            prefix: p,
            reason: r,
            ..
        }) = got
        else {
            panic!("{prefix:?} accepted")
        };
        assert_eq!((p.as_str(), r), (prefix, reason));
    }
}

#[tokio::test]
async fn denials_are_answered_by_the_services_closure() -> TestResult {
    let policy = policy()?;
    let layer = RateLimitLayer::new(Arc::clone(&policy))
        .key(ClientKey::header("x-api-key")?)
        .on_denied(|denial| {
            let tiers: Vec<&str> = denial.decision().denied_by().map(|t| t.name()).collect();
            let body = format!(
                "{} on {}: over {:?}, back in {} s ({:?})",
                denial.client(),
                denial.endpoint(),
                tiers,
                denial.retry_after_secs(),
                denial.retry_after(),
            );
            let mut response = http::Response::new(Full::from(body));
            *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            response.headers_mut().extend(denial.headers().clone());
            response
        });
    let app = Router::new()
        .route("/users/{id}", get(|| async { "ok" }))
        .layer(layer);
    let addr = serve(app).await?;
    let key: &[(&str, &[u8])] = &[("x-api-key", b"acct_1")];
    let mut replies = Vec::new();
    for _ in 0..3 {
        replies.push(send(addr, "/users/7", key).await?);
    }
    let got: Vec<u16> = replies.iter().map(|r| r.status.as_u16()).collect();
    assert_eq!(got, [200, 200, 503]);
    let denied = &replies[2];
    assert_eq!(
        denied.body,
        "acct_1 on /users/{id}: over [\"api\"], back in 45 s (45s)"
    );
    // The headers the layer's own answer would carry, as the closure copied them.
    assert_eq!(denied.header("retry-after"), "45");
    assert_eq!(
        denied.header("ratelimit"),
        "\"api\";r=0;t=45;pk=:6qCUvbV94do=:"
    );
    assert_eq!(
        denied.header("ratelimit-policy"),
        "\"api\";q=2;w=60;pk=:6qCUvbV94do=:"
    );
    // Admitted answers are the layer's as ever.
    assert_eq!(
        replies[0].header("ratelimit"),
        "\"api\";r=1;t=45;pk=:6qCUvbV94do=:"
    );
    Ok(())
}

#[tokio::test]
async fn the_default_response_is_the_layers_own() -> TestResult {
    // A closure that defers to the layer: the same 429 as without it.
    let with = RateLimitLayer::new(policy()?)
        .key(ClientKey::header("x-api-key")?)
        .on_denied(|denial| denial.default_response());
    let without = RateLimitLayer::new(policy()?).key(ClientKey::header("x-api-key")?);
    let key: &[(&str, &[u8])] = &[("x-api-key", b"acct_1")];
    let mut last = Vec::new();
    for layer in [with, without] {
        let addr = serve(
            Router::new()
                .route("/", get(|| async { "ok" }))
                .layer(layer),
        )
        .await?;
        let mut reply = None;
        for _ in 0..3 {
            reply = Some(send(addr, "/", key).await?);
        }
        let Some(reply) = reply else {
            panic!("three requests sent")
        };
        assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
        let mut headers: Vec<(String, String)> = reply
            .headers
            .iter()
            .filter(|(n, _)| *n != "date")
            .map(|(n, v)| {
                (
                    n.to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        headers.sort();
        last.push((headers, reply.body));
    }
    assert_eq!(last[0], last[1]);
    Ok(())
}

#[tokio::test]
async fn prefix_rules_cover_routes_and_raw_paths_under_them() -> TestResult {
    // `/users/*` matches the route templates below `/users/` (what the layer names
    // endpoints by); `prefix = "/files"` a raw path under a nested router's fallback.
    let rules = r#"
        [[rules]]
        name = "users"
        endpoint = "/users/*"
        limit = 2
        window = "1m"
        algorithm = "fixed_window"

        [[rules]]
        name = "files"
        prefix = "/files"
        limit = 1
        window = "1m"
        algorithm = "fixed_window"
    "#;
    let clock = ManualClock::starting_at(Nanos::from_secs(15));
    let policy = Arc::new(Policy::from_toml(rules, clock)?);
    let layer = RateLimitLayer::new(policy)
        .key(ClientKey::header("x-api-key")?)
        .endpoint(tollgate_http::Endpoint::matched_path().or_raw_path());
    let app = Router::new()
        .route("/users/{id}", get(|| async { "user" }))
        .route("/users/{id}/posts", get(|| async { "posts" }))
        .fallback(|| async { "file" })
        .layer(layer);
    let addr = serve(app).await?;
    let key: &[(&str, &[u8])] = &[("x-api-key", b"acct_1")];
    let mut got = Vec::new();
    for path in [
        "/users/1",
        "/users/2/posts",
        "/users/3",
        "/files/a",
        "/files/b",
        "/other",
    ] {
        let reply = send(addr, path, key).await?;
        got.push((
            path,
            reply.status.as_u16(),
            reply.header("ratelimit").to_owned(),
        ));
    }
    let pk = "pk=:6qCUvbV94do=:";
    assert_eq!(
        got,
        [
            ("/users/1", 200, format!("\"users\";r=1;t=45;{pk}")),
            ("/users/2/posts", 200, format!("\"users\";r=0;t=45;{pk}")),
            ("/users/3", 429, format!("\"users\";r=0;t=45;{pk}")),
            ("/files/a", 200, format!("\"files\";r=0;t=45;{pk}")),
            ("/files/b", 429, format!("\"files\";r=0;t=45;{pk}")),
            ("/other", 200, String::new()),
        ]
    );
    Ok(())
}

/// A cost of 0 takes nothing: admitted once the key's permits are spent, its fields the
/// key's state, and refused only once the key is in debt (charged past its limit).
#[tokio::test]
async fn a_cost_of_zero_takes_nothing() -> TestResult {
    let policy = policy()?;
    let layer = RateLimitLayer::new(Arc::clone(&policy))
        .key(ClientKey::header("x-api-key")?)
        .cost(|head| {
            head.headers
                .get("x-cost")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or(1)
        });
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let addr = serve(app).await?;
    let headers = |cost: &'static [u8]| [("x-api-key", &b"k"[..]), ("x-cost", cost)];
    let mut got = Vec::new();
    for cost in [b"1", b"1", b"1", b"0"] {
        let reply = send(addr, "/", &headers(cost)).await?;
        got.push((reply.status.as_u16(), reply.header("ratelimit").to_owned()));
    }
    let fields = "\"api\";r=0;t=45;pk=:r2PmTIYB/Yo=:";
    assert_eq!(got[3], (200, fields.to_owned()), "{got:?}");
    assert_eq!(
        got.iter().map(|g| g.0).collect::<Vec<_>>(),
        [200, 200, 429, 200]
    );
    // Three more charged (work done past the limit): in debt, even nothing is refused.
    tollgate::policy::PolicyCheck::charge_at(
        &*policy,
        &tollgate::policy::Request::new("k", "/", 3),
        Nanos::from_secs(15),
    );
    assert_eq!(send(addr, "/", &headers(b"0")).await?.status, 429);
    Ok(())
}

/// A custom key and the raw path as the endpoint, as a service keyed by tenant and limited
/// per path writes them: each tenant's `/…/orders` its own endpoint (not the route
/// template), keyed by its path segment; a request naming no tenant is a malformed key.
#[tokio::test]
async fn a_custom_key_and_the_raw_path_name_the_request() -> TestResult {
    let policy = Arc::new(Policy::from_toml(
        r#"
        [[rules]]
        name = "acme-orders"
        endpoint = "/acme/orders"
        limit = 1
        window = "1m"

        [[rules]]
        name = "default"
        limit = 2
        window = "1m"
        "#,
        ManualClock::starting_at(Nanos::from_secs(15)),
    )?);
    let by_tenant = ClientKey::custom(|head: &Head<'_>| {
        let tenant = head.uri.path().split('/').nth(1);
        Ok(tenant.unwrap_or_default().to_owned())
    });
    let layer = RateLimitLayer::new(policy)
        .key(by_tenant)
        .endpoint(Endpoint::raw_path());
    let app = Router::new()
        .route("/{tenant}/orders", get(|| async { "ok" }))
        .layer(layer.clone());
    let addr = serve(app).await?;
    let statuses = |path: &'static str| async move {
        let mut got = Vec::new();
        for _ in 0..3 {
            got.push(send(addr, path, &[]).await?.status.as_u16());
        }
        Ok::<_, BoxError>(got)
    };
    assert_eq!(statuses("/acme/orders").await?, [200, 429, 429]);
    assert_eq!(statuses("/beta/orders").await?, [200, 200, 429]);
    // The route template would have put both tenants under the default rule only.
    let reply = send(addr, "/acme/orders", &[]).await?;
    let fields = reply.header("ratelimit");
    assert!(fields.contains("\"acme-orders\";r=0;t=60"), "{fields}");
    // No tenant segment: an empty key, refused as malformed.
    let reply = send(addr, "//orders", &[]).await?;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(reply.body.contains("custom key empty"), "{}", reply.body);
    assert_eq!(layer.stats().bad_key, 1);
    Ok(())
}

/// `Settle::keep_header` leaves the actual-cost header in the response the client gets;
/// the settlement happens all the same.
#[tokio::test]
async fn a_kept_settlement_header_reaches_the_client() -> TestResult {
    for keep in [false, true] {
        let policy = policy()?;
        let settle = Settle::from_header("x-tokens-used")?;
        let settle = if keep { settle.keep_header() } else { settle };
        let layer = RateLimitLayer::new(Arc::clone(&policy))
            .key(ClientKey::header("x-api-key")?)
            .cost(|_| 2)
            .settle(settle);
        let app = Router::new()
            .route("/", get(|| async { ([("x-tokens-used", "1")], "ok") }))
            .layer(layer);
        let addr = serve(app).await?;
        let reply = send(addr, "/", &[("x-api-key", b"k")]).await?;
        assert_eq!(reply.status, StatusCode::OK);
        let want = if keep { "1" } else { "" };
        assert_eq!(reply.header("x-tokens-used"), want, "keep: {keep}");
        // Estimate 2, actual 1: one given back.
        assert_eq!(policy.peek("k", "/", 0)?.remaining(), 1, "keep: {keep}");
    }
    Ok(())
}
