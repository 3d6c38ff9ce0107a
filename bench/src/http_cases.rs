//! The HTTP layer's cases, shared by the `http` criterion bench, the `http_instr`
//! instruction counter and the `http_compare` runner ([`specs`]): a ready
//! no-op handler, the request (keys cycling over [`KEYS`] peer IPv4 addresses), one call
//! polled once, and each contender's service — tollgate's layer in every header style and
//! `tower_governor`'s, on rules that never deny or, for the deny path, on keys already
//! exhausted.

use std::convert::Infallible;
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use http::{Request, Response};
use tollgate::policy::Policy;
use tollgate::TscClock;
use tollgate_http::{HeaderStyle, RateLimit, RateLimitLayer};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;
use tower_layer::Layer;
use tower_service::Service;

use crate::{CaseSpec, Stopwatch, TimedCase};

/// How many clients (peer addresses) the requests cycle over.
pub const KEYS: u32 = 1024;

/// A limit no client of the admit cases reaches.
const RULES: &str = r#"
[[rules]]
name = "default"
limit = 1000000
window = "1s"
"#;

/// One request per client per hour: after one round, every client is denied.
const DENY_RULES: &str = "[[rules]]\nname = \"default\"\nlimit = 1\nwindow = \"1h\"\n";

/// The handler every contender wraps: answers at once, with an empty body.
#[derive(Clone, Debug)]
pub struct Handler;

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

/// Request `i`: `GET /users/42` from client `i % KEYS`, as axum's `ConnectInfo` gives it.
pub fn request(i: u32) -> Request<Body> {
    let mut req = Request::new(Body::empty());
    *req.uri_mut() = http::Uri::from_static("/users/42");
    let ip = Ipv4Addr::from(0x0a00_0000 | (i % KEYS));
    req.extensions_mut()
        .insert(ConnectInfo(SocketAddr::from((ip, 40000))));
    req
}

/// Calls `service` with request `i` and polls the future once (every contender here is
/// ready immediately); the status, so the work is not optimised away (0: not ready).
pub fn call_once<S, B>(service: &mut S, i: u32) -> u16
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

fn policy(rules: &str) -> Arc<Policy<TscClock>> {
    Arc::new(Policy::from_toml(rules, TscClock::new()).unwrap_or_else(|e| panic!("{e}")))
}

/// tollgate's layer with header style `style`, on rules no client reaches.
pub fn tollgate(style: HeaderStyle) -> RateLimit<Handler> {
    RateLimitLayer::new(policy(RULES))
        .headers(style)
        .layer(Handler)
}

/// `tower_governor`'s layer (its defaults: peer IP, no headers), at a rate no client
/// reaches.
pub fn governor() -> impl Service<Request<Body>, Response = Response<Body>> {
    let config = GovernorConfigBuilder::default()
        .per_nanosecond(1)
        .burst_size(1_000_000)
        .finish()
        .unwrap_or_else(|| panic!("governor config"));
    GovernorLayer::new(config).layer(Handler)
}

/// [`governor()`] with its `use_headers()`: `x-ratelimit-*` on every answer.
pub fn governor_headers() -> impl Service<Request<Body>, Response = Response<Body>> {
    let config = GovernorConfigBuilder::default()
        .per_nanosecond(1)
        .burst_size(1_000_000)
        .use_headers()
        .finish()
        .unwrap_or_else(|| panic!("governor config"));
    GovernorLayer::new(config).layer(Handler)
}

/// tollgate's default layer with every client already denied (the deny path: 429,
/// `Retry-After`, draft-11 fields, an RFC 9457 body).
pub fn tollgate_denying() -> RateLimit<Handler> {
    let mut service = RateLimitLayer::new(policy(DENY_RULES)).layer(Handler);
    exhaust(&mut service);
    service
}

/// `tower_governor`'s layer with every client already denied (429, its
/// `x-ratelimit-after` / `retry-after`, a text body).
pub fn governor_denying() -> impl Service<Request<Body>, Response = Response<Body>> {
    let config = GovernorConfigBuilder::default()
        .per_second(3600)
        .burst_size(1)
        .finish()
        .unwrap_or_else(|| panic!("governor config"));
    let mut service = GovernorLayer::new(config).layer(Handler);
    exhaust(&mut service);
    service
}

/// One request from every client, spending each one's allowance.
fn exhaust<S, B>(service: &mut S)
where
    S: Service<Request<Body>, Response = Response<B>>,
{
    for i in 0..KEYS {
        call_once(service, i);
    }
}

/// The HTTP cases of `http_compare`, in report order: each contender's layer timed in
/// turns with the others (so the host's slow and fast phases fall on all of them), the
/// floor being the handler with no limiter.
///
/// - `http_admit_draft11`: tollgate's default layer (draft-11 fields) against
///   `tower_governor` with `use_headers()`;
/// - `http_admit_no_headers`: tollgate without headers against `tower_governor`'s
///   defaults (no headers);
/// - `http_deny`: both deny paths (no floor).
pub fn specs() -> Vec<CaseSpec> {
    vec![
        CaseSpec::new("http_admit_draft11", |_| {
            TimedCase::new("http_admit_draft11")
                .tollgate(calls(tollgate(HeaderStyle::Draft11)))
                .governor(calls(governor_headers()))
                .floor(calls(Handler))
        }),
        CaseSpec::new("http_admit_no_headers", |_| {
            TimedCase::new("http_admit_no_headers")
                .tollgate(calls(tollgate(HeaderStyle::None)))
                .governor(calls(governor()))
                .floor(calls(Handler))
        }),
        CaseSpec::new("http_deny", |_| {
            TimedCase::new("http_deny")
                .tollgate(calls(tollgate_denying()))
                .governor(calls(governor_denying()))
        }),
    ]
}

/// A runner of `iters` calls of `service` ([`call_once`]), the clients in turn.
fn calls<S, B>(mut service: S) -> impl FnMut(u64) -> Duration + Send + 'static
where
    S: Service<Request<Body>, Response = Response<B>> + Send + 'static,
{
    let mut i = 0u32;
    move |iters| {
        let start = Stopwatch::start();
        for _ in 0..iters {
            i = i.wrapping_add(1);
            std::hint::black_box(call_once(&mut service, i));
        }
        start.elapsed()
    }
}
