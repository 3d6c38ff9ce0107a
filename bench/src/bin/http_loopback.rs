//! The HTTP layer over real loopback requests: axum servers on 127.0.0.1 — no limiter,
//! `tollgate_http::RateLimitLayer` with draft-11 headers and without headers, and
//! `tower_governor` with its `use_headers()` and without, three servers of each — each
//! answering `GET /users/{id}`, limits that never deny. One keep-alive hyper client
//! connection per server; requests go round-robin over the servers (so machine noise hits
//! them alike), each round starting one server further on (a server is measured slower
//! right after another, so none always follows the same one), and each round trip is
//! timed. Between two requests to one server the process serves fourteen others, so each
//! finds the layer's data as a busy server does: out of the core's own caches.
//!
//! ```text
//! cargo run --release -p tollgate-bench --features http --bin http_loopback [requests per server]
//! ```
//!
//! Prints median, p90 and mean round-trip time per contender (its three servers' requests
//! together), the difference to no limiter, and the spread of its servers' own medians. On
//! a shared machine the round trip (tens of µs) dwarfs the layers' sub-µs cost: see
//! `http_compare` and `http_cold` for the in-process figures.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tollgate::policy::Policy;
use tollgate::TscClock;
use tollgate_http::{HeaderStyle, RateLimitLayer};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const RULES: &str = "[[rules]]\nname = \"default\"\nlimit = 1000000\nwindow = \"1s\"\n";

async fn serve(app: Router) -> Result<SocketAddr, BoxError> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await;
    });
    Ok(addr)
}

fn app() -> Router {
    Router::new().route("/users/{id}", get(|| async { "ok" }))
}

/// The median of `times`, in µs (sorts them).
fn median(times: &mut [Duration]) -> f64 {
    times.sort_unstable();
    times
        .get((times.len().max(1) - 1) / 2)
        .map_or(0.0, |d| d.as_nanos() as f64 / 1000.0)
}

fn summary(name: &str, times: &mut [Duration], base: Option<f64>) -> f64 {
    times.sort_unstable();
    let n = times.len().max(1);
    let at = |q: f64| times[((n - 1) as f64 * q) as usize].as_nanos() as f64 / 1000.0;
    let mean = times.iter().map(|d| d.as_nanos() as f64).sum::<f64>() / n as f64 / 1000.0;
    let median = at(0.5);
    let delta = base.map_or(String::new(), |b| {
        format!("  ({:+.2} µs median)", median - b)
    });
    println!(
        "{name:<22} median {median:>7.2} µs   p90 {:>7.2} µs   mean {mean:>7.2} µs{delta}",
        at(0.9)
    );
    median
}

/// How many servers (each with its own client connection) stand for each contender: a
/// connection's own placement moves its round trips by up to about 1 µs, so one server per
/// contender cannot tell sub-µs costs apart.
const INSTANCES: usize = 3;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    let per_server: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let policy = || Policy::from_toml(RULES, TscClock::new()).map(Arc::new);
    let governor = |headers: bool| {
        let mut config = GovernorConfigBuilder::default();
        config.per_nanosecond(1).burst_size(1_000_000);
        if headers {
            config.use_headers();
        }
        config.finish().ok_or("governor config")
    };
    let contenders = [
        "none",
        "tollgate_draft11",
        "governor_headers",
        "tollgate_no_headers",
        "governor",
    ];
    // Server `k` is instance `k / contenders.len()` of contender `k % contenders.len()`.
    let mut servers = Vec::new();
    for _ in 0..INSTANCES {
        servers.push(serve(app()).await?);
        servers.push(serve(app().layer(RateLimitLayer::new(policy()?))).await?);
        servers.push(serve(app().layer(GovernorLayer::new(governor(true)?))).await?);
        servers.push(
            serve(app().layer(RateLimitLayer::new(policy()?).headers(HeaderStyle::None))).await?,
        );
        servers.push(serve(app().layer(GovernorLayer::new(governor(false)?))).await?);
    }
    let mut senders = Vec::new();
    for addr in &servers {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        senders.push(sender);
    }
    let mut times: Vec<Vec<Duration>> = vec![Vec::with_capacity(per_server); servers.len()];
    let warmup = per_server / 10;
    let n = senders.len();
    for round in 0..per_server + warmup {
        // Each round starts one server further on: no server always follows the same one
        // (the one right after another is measured slower, whichever it is).
        for k in 0..n {
            let i = (round + k) % n;
            let sender = &mut senders[i];
            let request = http::Request::get(format!("/users/{}", round % 100))
                .header("host", "localhost")
                .body(Empty::<Bytes>::new())?;
            let start = Instant::now();
            sender.ready().await?;
            let response = sender.send_request(request).await?;
            let status = response.status();
            response.into_body().collect().await?;
            let elapsed = start.elapsed();
            if status != 200 {
                let name = contenders[i % contenders.len()];
                return Err(format!("{name}: status {status}").into());
            }
            if round >= warmup {
                times[i].push(elapsed);
            }
        }
    }
    println!(
        "{per_server} requests per server, {INSTANCES} servers per contender, over loopback, \
         round-robin, keep-alive:"
    );
    let mut base = None;
    for (c, name) in contenders.iter().enumerate() {
        let mut instances: Vec<Vec<Duration>> = times
            .iter()
            .skip(c)
            .step_by(contenders.len())
            .cloned()
            .collect();
        let medians: Vec<f64> = instances.iter_mut().map(|t| median(t)).collect();
        let mut all: Vec<Duration> = instances.concat();
        let pooled = summary(name, &mut all, base);
        let (lo, hi) = medians
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), &m| (lo.min(m), hi.max(m)));
        println!("{:<22} its servers' medians {lo:.2}–{hi:.2} µs", "");
        base.get_or_insert(pooled);
    }
    Ok(())
}
