//! A real HTTP gateway in front of a rules file, driven by its own load generator.
//!
//! It starts an axum server on 127.0.0.1 behind `tollgate_http::RateLimitLayer` (clients
//! by `x-api-key`, endpoints by route template, a shadow rule, a leaky-bucket upload
//! shaper), then sends real HTTP/1.1 requests from several clients: a steady client, a
//! search-heavy one, a partner's burst, an abuser, an uploader that gets shaped, and
//! requests with no key. Midway the operator reloads the rules (search raised from 5 to 8
//! per minute) without a restart. It prints a per-client table of 200 / 429 / 400 counts
//! and delayed requests, sample headers, and exits non-zero if any total differs from
//! what the rules dictate.
//!
//! The policy's clock is a `ManualClock` held still for the run, so every count is exact
//! (the leaky bucket's delays are still real sleeps).
//!
//! Run: `cargo run --release -p tollgate-http --example gateway`
//! (with `--features metrics` it also serves `/metrics` in Prometheus format, through
//! metrics-exporter-prometheus, unchecked by the layer; at the end it scrapes it and checks
//! the layer's counters there against the same totals)
//! (`--rules FILE` to read the initial rules from a file instead; the checks then assume
//! the built-in numbers; `--redis redis://127.0.0.1:6379` keeps
//! the enforced rules' state in that Redis through `tollgate_redis::RedisStore`, with the
//! same totals.)

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tollgate::policy::{Policy, Store};
use tollgate::{ManualClock, Nanos};
use tollgate_http::{Admission, ClientKey, LayerStats, RateLimitLayer, ShadowSplit};
use tollgate_redis::{RedisConfig, RedisStore, RedisTarget, TimeSource};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const RULES: &str = r#"
# Every client: 20 requests per minute.
[[rules]]
name = "default"
limit = 20
window = "1m"
algorithm = "fixed_window"

# The partner gets 100 per minute instead.
[[rules]]
name = "partner"
client = "partner"
limit = 100
window = "1m"
algorithm = "fixed_window"

# Search is expensive: 5 per minute per client, on top of the above.
[[rules]]
name = "search"
endpoint = "/search"
limit = 5
window = "1m"
algorithm = "fixed_window"

# Uploads are shaped: 10 per second, at most 5 waiting.
[[rules]]
name = "upload"
endpoint = "/upload"
limit = 10
window = "1s"
algorithm = "leaky_bucket"
queue = 5

# Trying out 30 per minute per client on item pages: reported, not enforced.
[[rules]]
name = "items-trial"
endpoint = "/items/{id}"
limit = 30
window = "1m"
algorithm = "fixed_window"
shadow = true
"#;

/// One client's results.
#[derive(Default, Clone, Copy)]
struct Counts {
    sent: u64,
    ok: u64,
    limited: u64,
    bad: u64,
    delayed: u64,
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

async fn send(addr: SocketAddr, path: &str, key: Option<&str>) -> Result<Reply, BoxError> {
    let stream = TcpStream::connect(addr).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let mut request = http::Request::get(path).header("host", "localhost");
    if let Some(key) = key {
        request = request.header("x-api-key", key);
    }
    let response = sender
        .send_request(request.body(Empty::<Bytes>::new())?)
        .await?;
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await?.to_bytes();
    Ok(Reply {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// Sends `part`'s requests (all at once, or one after another), keeping the first reply
/// of each client and status in `samples`; their counts.
async fn drive(
    addr: SocketAddr,
    part: &Part,
    samples: &mut BTreeMap<String, Reply>,
) -> Result<Counts, BoxError> {
    let (key, path) = (part.key, part.path);
    let mut replies = Vec::with_capacity(part.requests);
    if part.at_once {
        let tasks: Vec<_> = (0..part.requests)
            .map(|i| tokio::spawn(async move { send(addr, &path(i), key).await }))
            .collect();
        for t in tasks {
            replies.push(t.await??);
        }
    } else {
        for i in 0..part.requests {
            replies.push(send(addr, &path(i), key).await?);
        }
    }
    let mut counts = Counts::default();
    for r in replies {
        counts.sent += 1;
        match r.status.as_u16() {
            200 => counts.ok += 1,
            429 => counts.limited += 1,
            400 => counts.bad += 1,
            other => return Err(format!("unexpected status {other}").into()),
        }
        if r.headers.get("x-delayed-ms").is_some_and(|v| v != "0") {
            counts.delayed += 1;
        }
        let label = format!("{} {}", part.client, r.status.as_u16());
        samples.entry(label).or_insert(r);
    }
    Ok(counts)
}

/// Echoes the delay the layer held the request for, so the load generator can count it.
async fn handler(request: Request) -> ([(&'static str, String); 1], &'static str) {
    let delay = request
        .extensions()
        .get::<Admission>()
        .map_or(0, |a| a.delay.as_duration().as_millis());
    ([("x-delayed-ms", delay.to_string())], "ok")
}

fn add(total: &mut BTreeMap<&'static str, Counts>, client: &'static str, c: Counts) {
    let t = total.entry(client).or_default();
    t.sent += c.sent;
    t.ok += c.ok;
    t.limited += c.limited;
    t.bad += c.bad;
    t.delayed += c.delayed;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().collect();
    let rules = match args.iter().position(|a| a == "--rules") {
        Some(i) => std::fs::read_to_string(args.get(i + 1).ok_or("--rules needs a path")?)?,
        None => RULES.to_owned(),
    };
    // Rules: the enforced half in one policy, the shadow rule in another.
    let clock = ManualClock::starting_at(Nanos::from_secs(15));
    let split = ShadowSplit::from_toml(&rules)?;
    let shadow = Policy::new(split.shadow, clock.clone())?;
    let enforced = Policy::new(split.enforced, clock.clone())?;
    match args.iter().position(|a| a == "--redis") {
        Some(i) => {
            let url = args.get(i + 1).ok_or("--redis needs a URL")?.clone();
            redis_run(url, enforced, shadow, rules).await
        }
        None => run(Arc::new(enforced), RateLimitLayer::new, shadow, rules).await,
    }
}

/// The enforced rules on a Redis store: every count is the same as in-process. The store
/// takes the policy's (held) clock as client time, and a fresh key prefix per run.
async fn redis_run(
    url: String,
    enforced: Policy<ManualClock>,
    shadow: Policy<ManualClock>,
    rules: String,
) -> Result<(), BoxError> {
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let prefix = format!("gateway-{}-{unix}", std::process::id());
    let config = RedisConfig::new(&prefix)?.with_time_source(TimeSource::Client);
    // The connection on this server's runtime: an awaited check's round trip stays on it.
    let store = RedisStore::on_runtime(
        RedisTarget::Single(url.clone()),
        config,
        tokio::runtime::Handle::current(),
    )?;
    println!("state in Redis at {url}, keys {prefix}:*");
    // Awaited: a check's round trip to Redis holds no worker thread.
    run(
        Arc::new(enforced.store(store)),
        RateLimitLayer::awaited,
        shadow,
        rules,
    )
    .await
}

/// One client's part of a phase: its name in the table, its key (`None`: no key), how
/// many requests, whether they are sent at once, and the path of each.
struct Part {
    client: &'static str,
    key: Option<&'static str>,
    requests: usize,
    at_once: bool,
    path: fn(usize) -> String,
}

/// A [`Part`] (a `const` table row).
const fn part(
    client: &'static str,
    key: Option<&'static str>,
    requests: usize,
    at_once: bool,
    path: fn(usize) -> String,
) -> Part {
    Part {
        client,
        key,
        requests,
        at_once,
        path,
    }
}

fn items(i: usize) -> String {
    format!("/items/{i}")
}

fn search(_: usize) -> String {
    "/search".to_owned()
}

fn upload(_: usize) -> String {
    "/upload".to_owned()
}

/// Before the reload: a steady client, a search-heavy one, a partner's burst, an abuser,
/// an uploader the leaky bucket shapes, and requests without a key.
const BEFORE: [Part; 6] = [
    part("alice", Some("alice"), 10, false, items),
    part("bob", Some("bob"), 10, false, search),
    part("partner", Some("partner"), 40, true, items),
    part("abuser", Some("abuser"), 60, true, items),
    part("uploader", Some("uploader"), 8, true, upload),
    part("(no key)", None, 2, false, items),
];

/// After the reload (search 5 -> 8 per minute).
const AFTER: [Part; 3] = [
    part("alice", Some("alice"), 10, false, items),
    part("bob", Some("bob"), 5, false, search),
    part("abuser", Some("abuser"), 10, true, items),
];

/// What the rules dictate, per client: sent, 200, 429, 400, delayed.
const EXPECTED: [(&str, [u64; 5]); 6] = [
    ("alice", [20, 20, 0, 0, 0]),
    ("bob", [15, 8, 7, 0, 0]),
    ("partner", [40, 40, 0, 0, 0]),
    ("abuser", [70, 20, 50, 0, 0]),
    ("uploader", [8, 6, 2, 0, 5]),
    ("(no key)", [2, 0, 0, 2, 0]),
];

/// What the layer should have counted: admitted, denied, delayed, shadow-denied, bad key.
const LAYER_EXPECTED: (u64, u64, u64, u64, u64) = (94, 59, 5, 10, 2);

/// Serves the gateway behind `layer` (and `/metrics`, with the feature) on a port of its
/// own; its address, and the layer as configured.
async fn serve(layer: RateLimitLayer) -> Result<(SocketAddr, RateLimitLayer), BoxError> {
    let app = Router::new()
        .route("/items/{id}", get(handler))
        .route("/search", get(handler))
        .route("/upload", get(handler));
    #[cfg(feature = "metrics")]
    let (app, layer) = {
        let prometheus =
            metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
        let app = app.route("/metrics", get(move || async move { prometheus.render() }));
        (app, layer.skip_path_prefix("/metrics")?)
    };
    let app = app.layer(layer.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    println!("gateway on http://{addr}");
    Ok((addr, layer))
}

/// Sends each part of a phase in turn, adding its counts to `total`.
async fn run_phase(
    addr: SocketAddr,
    parts: &[Part],
    total: &mut BTreeMap<&'static str, Counts>,
    samples: &mut BTreeMap<String, Reply>,
) -> Result<(), BoxError> {
    for part in parts {
        add(total, part.client, drive(addr, part, samples).await?);
    }
    Ok(())
}

async fn run<S: Store + 'static>(
    policy: Arc<Policy<ManualClock, S>>,
    layer_over: impl FnOnce(Arc<Policy<ManualClock, S>>) -> RateLimitLayer,
    shadow: Policy<ManualClock>,
    rules: String,
) -> Result<(), BoxError> {
    let layer = layer_over(Arc::clone(&policy))
        .shadow(Arc::new(shadow))
        .key(ClientKey::header("x-api-key")?)
        .expose_admission();
    let (addr, layer) = serve(layer).await?;
    let mut samples = BTreeMap::new();
    let mut total = BTreeMap::new();
    run_phase(addr, &BEFORE, &mut total, &mut samples).await?;
    // The operator raises search to 8 per minute: no restart, no state lost.
    let raised = rules.replace("limit = 5\n", "limit = 8\n");
    policy.reload(ShadowSplit::from_toml(&raised)?.enforced)?;
    println!("reloaded: search 5 -> 8 per minute");
    run_phase(addr, &AFTER, &mut total, &mut samples).await?;

    let stats = layer.stats();
    report(&total, &stats, &samples);
    let wrong = check(&total, &stats);
    #[cfg(feature = "metrics")]
    let wrong = [wrong, check_metrics(addr).await?].concat();
    if wrong.is_empty() {
        println!("\nall totals as the rules dictate");
        Ok(())
    } else {
        for w in &wrong {
            eprintln!("MISMATCH {w}");
        }
        // Give the server task a moment; then fail.
        tokio::time::sleep(Duration::from_millis(10)).await;
        std::process::exit(1);
    }
}

/// Prints the per-client table, the layer's counts and a sample response of each kind.
fn report(
    total: &BTreeMap<&'static str, Counts>,
    stats: &LayerStats,
    samples: &BTreeMap<String, Reply>,
) {
    println!();
    println!(
        "{:<10} {:>5} {:>5} {:>5} {:>5} {:>8}",
        "client", "sent", "200", "429", "400", "delayed"
    );
    for (client, c) in total {
        println!(
            "{client:<10} {:>5} {:>5} {:>5} {:>5} {:>8}",
            c.sent, c.ok, c.limited, c.bad, c.delayed
        );
    }
    println!(
        "\nlayer: admitted {} denied {} delayed {} shadow-denied {} bad-key {}",
        stats.admitted, stats.denied, stats.delayed, stats.shadow_denied, stats.bad_key
    );
    println!("\nsample responses:");
    for (label, r) in samples {
        println!("  {label}");
        for name in [
            "ratelimit-policy",
            "ratelimit",
            "retry-after",
            "x-delayed-ms",
        ] {
            if let Some(v) = r.headers.get(name).and_then(|v| v.to_str().ok()) {
                println!("    {name}: {v}");
            }
        }
        if r.status != StatusCode::OK {
            println!("    body: {}", r.body);
        }
    }
}

/// Where the totals and the layer's counts differ from what the rules dictate.
fn check(total: &BTreeMap<&'static str, Counts>, stats: &LayerStats) -> Vec<String> {
    let mut wrong = Vec::new();
    for (client, want) in EXPECTED {
        let c = total.get(client).copied().unwrap_or_default();
        let got = [c.sent, c.ok, c.limited, c.bad, c.delayed];
        if got != want {
            wrong.push(format!("{client}: got {got:?}, want {want:?}"));
        }
    }
    let got = (
        stats.admitted,
        stats.denied,
        stats.delayed,
        stats.shadow_denied,
        stats.bad_key,
    );
    if got != LAYER_EXPECTED {
        wrong.push(format!("layer: got {got:?}, want {LAYER_EXPECTED:?}"));
    }
    wrong
}

/// Scrapes `/metrics` and says where the layer's request counters there differ from
/// what the rules dictate.
#[cfg(feature = "metrics")]
async fn check_metrics(addr: SocketAddr) -> Result<Vec<String>, BoxError> {
    let scrape = send(addr, "/metrics", None).await?;
    println!("\n/metrics (tollgate-http's counters):");
    for line in scrape.body.lines() {
        if line.starts_with("tollgate_http_requests_total") {
            println!("  {line}");
        }
    }
    let outcome = |o: &str| {
        let prefix = format!("tollgate_http_requests_total{{outcome=\"{o}\"}} ");
        scrape
            .body
            .lines()
            .find_map(|l| l.strip_prefix(&prefix)?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let scraped = (
        outcome("admitted"),
        outcome("denied"),
        outcome("delayed"),
        outcome("shadow_denied"),
        outcome("bad_key"),
    );
    Ok(if scraped == LAYER_EXPECTED {
        Vec::new()
    } else {
        vec![format!(
            "/metrics: got {scraped:?}, want {LAYER_EXPECTED:?}"
        )]
    })
}
