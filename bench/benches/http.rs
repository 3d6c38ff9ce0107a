//! The per-request overhead of `tollgate_http::RateLimitLayer` against no limiter and
//! against `tower_governor`, in-process: one `Service::call` on a ready no-op handler and
//! one poll of its future, per request, keys cycling over 1024 peer IPv4 addresses whose
//! limits never deny (so every contender does its admit path and calls the handler).
//!
//! `cargo bench -p tollgate-bench --features http --bench http`
//!
//! Cases: `none` (the handler alone: building the request and calling it; subtract it from
//! the others), `tollgate_draft11` (the default layer: peer IP key, raw-path endpoint,
//! draft-11 `RateLimit-Policy`/`RateLimit` headers), `tollgate_no_headers`
//! (`HeaderStyle::None`), `governor` (`tower_governor` defaults: peer IP, no headers) and
//! `governor_headers` (its `use_headers()`: `x-ratelimit-*`).

use std::convert::Infallible;
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use criterion::{criterion_group, criterion_main, Criterion};
use http::{Request, Response};
use tollgate::policy::Policy;
use tollgate::TscClock;
use tollgate_http::{HeaderStyle, RateLimitLayer};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;
use tower_layer::Layer;
use tower_service::Service;

const KEYS: u32 = 1024;

const RULES: &str = r#"
[[rules]]
name = "default"
limit = 1000000
window = "1s"
"#;

#[derive(Clone)]
struct Handler;

impl Service<Request<Body>> for Handler {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<Body>, Infallible>>;
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, _req: Request<Body>) -> Self::Future {
        std::future::ready(Ok(Response::new(Body::empty())))
    }
}

fn request(i: u32) -> Request<Body> {
    let mut req = Request::new(Body::empty());
    *req.uri_mut() = http::Uri::from_static("/users/42");
    let ip = Ipv4Addr::from(0x0a00_0000 | (i % KEYS));
    req.extensions_mut()
        .insert(ConnectInfo(SocketAddr::from((ip, 40000))));
    req
}

/// Calls `service` once and polls the future once (every contender here is ready
/// immediately); returns the status so the work is not optimised away.
fn call_once<S, B>(service: &mut S, i: u32) -> u16
where
    S: Service<Request<Body>, Response = Response<B>>,
{
    let mut cx = Context::from_waker(Waker::noop());
    if service.poll_ready(&mut cx).is_pending() {
        return 0;
    }
    let future = pin!(service.call(request(i)));
    match future.poll(&mut cx) {
        Poll::Ready(Ok(r)) => r.status().as_u16(),
        _ => 0,
    }
}

fn bench_service<S, B>(c: &mut Criterion, group: &str, name: &str, mut service: S)
where
    S: Service<Request<Body>, Response = Response<B>>,
{
    bench_status(c, group, name, 200, &mut service);
}

/// Benches `service`, which must answer `status` to every request.
fn bench_status<S, B>(c: &mut Criterion, group: &str, name: &str, status: u16, service: &mut S)
where
    S: Service<Request<Body>, Response = Response<B>>,
{
    let mut g = c.benchmark_group(group);
    g.sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let mut i = 0u32;
    let service = &mut *service;
    assert_eq!(call_once(service, 0), status, "{name} must answer {status}");
    g.bench_function(name, |b| {
        b.iter(|| {
            i = i.wrapping_add(1);
            call_once(service, i)
        })
    });
    g.finish();
}

fn http_overhead(c: &mut Criterion) {
    let group = "http_layer_call";
    bench_service(c, group, "none", Handler);

    let policy =
        || Arc::new(Policy::from_toml(RULES, TscClock::new()).unwrap_or_else(|e| panic!("{e}")));
    bench_service(
        c,
        group,
        "tollgate_draft11",
        RateLimitLayer::new(policy()).layer(Handler),
    );
    bench_service(
        c,
        group,
        "tollgate_legacy",
        RateLimitLayer::new(policy())
            .headers(HeaderStyle::Legacy)
            .layer(Handler),
    );
    bench_service(
        c,
        group,
        "tollgate_no_headers",
        RateLimitLayer::new(policy())
            .headers(HeaderStyle::None)
            .layer(Handler),
    );

    // Reference: the policy check alone, on pre-formatted keys (what the layer adds on top
    // of it is the rest of `tollgate_no_headers`).
    {
        let policy = policy();
        let keys: Vec<String> = (0..KEYS)
            .map(|i| Ipv4Addr::from(0x0a00_0000 | i).to_string())
            .collect();
        let mut g = c.benchmark_group(group);
        g.sample_size(30)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
        let mut i = 0usize;
        g.bench_function("policy_allow_only", |b| {
            b.iter(|| {
                i = i.wrapping_add(1);
                let key = &keys[i % keys.len()];
                policy.allow(key, "/users/42", 1).map(|d| d.allowed())
            })
        });
        g.finish();
    }

    let governor = GovernorConfigBuilder::default()
        .per_nanosecond(1)
        .burst_size(1_000_000)
        .finish()
        .unwrap_or_else(|| panic!("governor config"));
    bench_service(
        c,
        group,
        "governor",
        GovernorLayer::new(governor).layer(Handler),
    );
    let governor_headers = GovernorConfigBuilder::default()
        .per_nanosecond(1)
        .burst_size(1_000_000)
        .use_headers()
        .finish()
        .unwrap_or_else(|| panic!("governor config"));
    bench_service(
        c,
        group,
        "governor_headers",
        GovernorLayer::new(governor_headers).layer(Handler),
    );
}

/// The deny path (an abuser's flood): every key already exhausted, so each request is
/// answered by the limiter itself (tollgate: 429 + `Retry-After` + draft-11 fields + RFC
/// 9457 body; tower_governor: 429 + its `x-ratelimit-after` / `retry-after` + text body).
fn http_deny(c: &mut Criterion) {
    let group = "http_layer_deny";
    const DENY_RULES: &str = "[[rules]]\nname = \"default\"\nlimit = 1\nwindow = \"1h\"\n";
    let policy =
        Arc::new(Policy::from_toml(DENY_RULES, TscClock::new()).unwrap_or_else(|e| panic!("{e}")));
    let mut tollgate = RateLimitLayer::new(policy).layer(Handler);
    let governor = GovernorConfigBuilder::default()
        .per_second(3600)
        .burst_size(1)
        .finish()
        .unwrap_or_else(|| panic!("governor config"));
    let mut governor = GovernorLayer::new(governor).layer(Handler);
    for i in 0..KEYS {
        call_once(&mut tollgate, i);
        call_once(&mut governor, i);
    }
    bench_status(c, group, "tollgate", 429, &mut tollgate);
    bench_status(c, group, "governor", 429, &mut governor);
}

criterion_group!(benches, http_overhead, http_deny);
criterion_main!(benches);
