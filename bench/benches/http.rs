//! The per-request overhead of `tollgate_http::RateLimitLayer` against no limiter and
//! against `tower_governor`, in-process: one `Service::call` on a ready no-op handler and
//! one poll of its future, per request, keys cycling over 1024 peer IPv4 addresses whose
//! limits never deny (so every contender does its admit path and calls the handler); and
//! the deny path, every key already exhausted. The cases are `tollgate_bench::http_cases`.
//!
//! `cargo bench -p tollgate-bench --features http --bench http`
//!
//! Cases: `none` (the handler alone: building the request and calling it; subtract it from
//! the others), `tollgate_draft11` (the default layer: peer IP key, raw-path endpoint,
//! draft-11 `RateLimit-Policy`/`RateLimit` headers), `tollgate_legacy`,
//! `tollgate_no_headers` (`HeaderStyle::None`), `governor` (`tower_governor` defaults: peer
//! IP, no headers) and `governor_headers` (its `use_headers()`: `x-ratelimit-*`).

use std::net::Ipv4Addr;
use std::time::Duration;

use axum::body::Body;
use criterion::{criterion_group, criterion_main, Criterion};
use http::{Request, Response};
use tollgate::policy::Policy;
use tollgate::TscClock;
use tollgate_bench::http_cases::{self, call_once, Handler, KEYS};
use tollgate_http::HeaderStyle;
use tower_service::Service;

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
    bench_service(
        c,
        group,
        "tollgate_draft11",
        http_cases::tollgate(HeaderStyle::Draft11),
    );
    bench_service(
        c,
        group,
        "tollgate_legacy",
        http_cases::tollgate(HeaderStyle::Legacy),
    );
    bench_service(
        c,
        group,
        "tollgate_no_headers",
        http_cases::tollgate(HeaderStyle::None),
    );

    // Reference: the policy check alone, on pre-formatted keys (what the layer adds on top
    // of it is the rest of `tollgate_no_headers`).
    {
        let rules = "[[rules]]\nname = \"default\"\nlimit = 1000000\nwindow = \"1s\"\n";
        let policy = Policy::from_toml(rules, TscClock::new()).unwrap_or_else(|e| panic!("{e}"));
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

    bench_service(c, group, "governor", http_cases::governor());
    bench_service(c, group, "governor_headers", http_cases::governor_headers());
}

/// The deny path (an abuser's flood): every key already exhausted, so each request is
/// answered by the limiter itself (tollgate: 429 + `Retry-After` + draft-11 fields + RFC
/// 9457 body; tower_governor: 429 + its `x-ratelimit-after` / `retry-after` + text body).
fn http_deny(c: &mut Criterion) {
    let group = "http_layer_deny";
    bench_status(
        c,
        group,
        "tollgate",
        429,
        &mut http_cases::tollgate_denying(),
    );
    bench_status(
        c,
        group,
        "governor",
        429,
        &mut http_cases::governor_denying(),
    );
}

criterion_group!(benches, http_overhead, http_deny);
criterion_main!(benches);
