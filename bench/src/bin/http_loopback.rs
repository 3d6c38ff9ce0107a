//! The HTTP layer over real loopback requests: five axum servers on 127.0.0.1 — no
//! limiter, `tollgate_http::RateLimitLayer` with draft-11 headers and without headers, and
//! `tower_governor` with its `use_headers()` and without — each answering
//! `GET /users/{id}`, limits that never deny. One keep-alive hyper client connection per
//! server; requests go round-robin over the servers (so machine noise hits them alike),
//! each round starting one server further on (a server is measured slower right after
//! another, so none always follows the same one), and each round trip is timed.
//!
//! ```text
//! cargo run --release -p tollgate-bench --features http --bin http_loopback [requests per server]
//! ```
//!
//! Prints median, p90 and mean round-trip time per server and the difference to no
//! limiter. On a shared machine the round trip (tens of µs) dwarfs the layers' sub-µs
//! cost: see the `http` criterion bench for the in-process figures.

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

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    let per_server: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let policy = || Policy::from_toml(RULES, TscClock::new()).map(Arc::new);
    let governor_headers = GovernorConfigBuilder::default()
        .per_nanosecond(1)
        .burst_size(1_000_000)
        .use_headers()
        .finish()
        .ok_or("governor config")?;
    let governor = GovernorConfigBuilder::default()
        .per_nanosecond(1)
        .burst_size(1_000_000)
        .finish()
        .ok_or("governor config")?;
    let servers = [
        ("none", serve(app()).await?),
        (
            "tollgate_draft11",
            serve(app().layer(RateLimitLayer::new(policy()?))).await?,
        ),
        (
            "governor_headers",
            serve(app().layer(GovernorLayer::new(governor_headers))).await?,
        ),
        (
            "tollgate_no_headers",
            serve(app().layer(RateLimitLayer::new(policy()?).headers(HeaderStyle::None))).await?,
        ),
        (
            "governor",
            serve(app().layer(GovernorLayer::new(governor))).await?,
        ),
    ];
    let mut senders = Vec::new();
    for (_, addr) in &servers {
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
                return Err(format!("{}: status {status}", servers[i].0).into());
            }
            if round >= warmup {
                times[i].push(elapsed);
            }
        }
    }
    println!("{per_server} requests per server over loopback, round-robin, keep-alive:");
    let base = summary(servers[0].0, &mut times[0], None);
    for (i, (name, _)) in servers.iter().enumerate().skip(1) {
        summary(name, &mut times[i], Some(base));
    }
    Ok(())
}
