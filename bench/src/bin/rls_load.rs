//! `rls_load`: `tollgate-server`'s Envoy Rate Limit Service (`ShouldRateLimit`, v3) under
//! load over loopback gRPC, side by side with the transport's ceiling and the library.
//!
//! ```text
//! cargo build --release -p tollgate-server
//! cargo run --release -p tollgate-bench --features rls --bin rls_load [-- --reps 3 --seconds 2]
//! ```
//!
//! Cases, all running at once in this invocation and measured in turn, round after round:
//!
//! - `bare`: a tonic service on envoy-types' generated `RateLimitService` that answers a
//!   fixed OK without deciding anything (on its own multi-threaded tokio runtime, in a
//!   thread of this process): what gRPC on loopback costs.
//! - `bare, TCP_NODELAY`: the same with `TCP_NODELAY` on its accepted connections, as the
//!   server sets it on its own (tonic's `serve_with_incoming`, as `bare` uses it, sets no
//!   socket option): the transport ceiling the server is held to.
//! - `in-process`: the real `tollgate-server` binary (found next to this executable) on a
//!   one-domain config, its state in its own process.
//! - `redis`: the same binary with `--redis`, on a `redis-server` started here on a free
//!   loopback port.
//! - `library`: the decision the server makes for the request, `Policy::check_all` on the
//!   rules the server compiles from that config, in a tight loop on as many threads as
//!   there are streams: a call's cost without any transport.
//!
//! Each server is loaded at 1 and 64 concurrent streams over one HTTP/2 connection by two
//! clients: this crate's tonic client (every call's latency, for p99 and the mean; every
//! answer checked: gRPC status 0 and `overall_code` OK) and then, when it is installed,
//! `h2load` (nghttp2's load generator, not ours) posting the same gRPC-framed request for
//! as many calls as the tonic client made in the same time (calls per second and the mean
//! it reports), its count of calls checked against what the server admitted: the bare
//! service's own count, or the server's state of the one key (h2load does not read gRPC
//! trailers, so a refused call would look like a success to it). The limit is 5·10^8 a
//! day: every call is admitted, none is denied.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tollgate::policy::{Policy, Request};
use tollgate::MonotonicClock;

/// The gRPC method's path.
const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// The config the server runs: one domain, one key-only descriptor, a limit no run reaches.
const CONFIG: &str = "domain: bench
descriptors:
  - key: client
    rate_limit:
      unit: day
      requests_per_unit: 500000000
";

/// [`CONFIG`]'s limit: a day's window, so its state counts every call of the run.
const LIMIT: u32 = 500_000_000;

/// The rules `tollgate-server` compiles [`CONFIG`] to (its `--config` → tollgate rules:
/// one fixed-window rule selected by the descriptor's path), for the library case.
const RULES: &str = r#"
allow_empty = true

[[rules]]
name = "bench.client"
endpoint = "bench/client"
[[rules.tiers]]
limit = 500000000
window = "1d"
algorithm = "fixed_window"
"#;

/// The library case's client key and endpoint: what the server builds for the request
/// (`client_key`: each of domain, key, value length-prefixed; the descriptor's path).
const LIBRARY_KEY: &str = "5:bench6:client2:c1";
/// See [`LIBRARY_KEY`].
const LIBRARY_ENDPOINT: &str = "bench/client";

/// The request every call sends.
fn request() -> RateLimitRequest {
    RateLimitRequest {
        domain: "bench".to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "client".to_owned(),
                value: "c1".to_owned(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

/// Stream counts measured.
const STREAMS: [usize; 2] = [1, 64];

fn main() {
    let options = Options::parse();
    let dir = std::env::temp_dir().join(format!("tollgate-rls-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config = dir.join("rules.yaml");
    std::fs::write(&config, CONFIG).expect("config written");
    let body = dir.join("request.grpc");
    std::fs::write(&body, grpc_frame(&request())).expect("request written");

    let h2load = Command::new("h2load")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !h2load {
        eprintln!("rls_load: h2load not found: only the tonic client's figures");
    }

    let bare = Bare::start(false);
    let bare_nodelay = Bare::start(true);
    let in_process = Server::start(&options.server, &config, &[], &dir);
    let redis = RedisServer::start(&options.redis_server, &dir);
    let url = format!("redis://{}", redis.address);
    let on_redis = Server::start(&options.server, &config, &["--redis", &url], &dir);
    let library = Policy::from_toml(RULES, MonotonicClock::new()).expect("the rules load");

    let targets: [(&str, Target<'_>); 4] = [
        ("bare tonic", Target::Bare(&bare)),
        ("tollgate-server in-process", Target::Server(&in_process)),
        ("tollgate-server Redis", Target::Server(&on_redis)),
        ("bare tonic TCP_NODELAY", Target::Bare(&bare_nodelay)),
    ];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // results[case][streams] = one Figures per round.
    let mut results: Vec<Vec<Vec<Figures>>> = vec![vec![Vec::new(); STREAMS.len()]; 5];
    for round in 0..options.reps {
        for (s, &streams) in STREAMS.iter().enumerate() {
            for (t, (name, target)) in targets.iter().enumerate() {
                let address = target.address();
                let tonic = runtime.block_on(tonic_load(address, streams, options.seconds));
                let mut figures = Figures {
                    tonic_rate: tonic.rate,
                    p99_us: tonic.p99_us,
                    mean_us: tonic.mean_us,
                    h2load_rate: None,
                    h2load_mean_us: None,
                    h2load_max_us: None,
                };
                if h2load {
                    // As many calls as the tonic client made in the same time.
                    let calls = (tonic.rate * options.seconds.as_secs_f64()) as u64;
                    let calls = calls.max(1000);
                    let (before, _) = target.answered(&runtime);
                    let run = run_h2load(address, &body, streams, calls);
                    let (after, read) = target.answered(&runtime);
                    assert_eq!(
                        after - before - read,
                        calls,
                        "{name}: h2load counted {calls} calls, the server admitted {}",
                        after - before - read
                    );
                    figures.h2load_rate = Some(run.rate);
                    figures.h2load_mean_us = Some(run.mean_us);
                    figures.h2load_max_us = Some(run.max_us);
                }
                eprintln!("round {round} {name} streams={streams}: {figures:?}");
                results[t][s].push(figures);
            }
            let lib = library_load(&library, streams, options.seconds);
            eprintln!("round {round} library threads={streams}: {lib:?}");
            results[4][s].push(lib);
        }
    }
    drop(on_redis);
    drop(redis);
    drop(in_process);
    report(&results, &options);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Command-line options.
struct Options {
    /// Rounds of every case (medians reported).
    reps: usize,
    /// Length of each measurement.
    seconds: Duration,
    /// The `tollgate-server` binary.
    server: PathBuf,
    /// The `redis-server` binary.
    redis_server: PathBuf,
}

impl Options {
    fn parse() -> Options {
        let mut options = Options {
            reps: 3,
            seconds: Duration::from_secs(2),
            server: std::env::current_exe()
                .ok()
                .and_then(|exe| exe.parent().map(|d| d.join("tollgate-server")))
                .unwrap_or_else(|| PathBuf::from("tollgate-server")),
            redis_server: PathBuf::from("redis-server"),
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut value = || args.next().unwrap_or_else(|| panic!("{arg} needs a value"));
            match arg.as_str() {
                "--reps" => options.reps = value().parse().expect("--reps N"),
                "--seconds" => {
                    options.seconds =
                        Duration::from_secs_f64(value().parse().expect("--seconds S"));
                }
                "--server" => options.server = PathBuf::from(value()),
                "--redis-server" => options.redis_server = PathBuf::from(value()),
                _ => panic!(
                    "usage: rls_load [--reps N] [--seconds S] [--server PATH] [--redis-server PATH]"
                ),
            }
        }
        options
    }
}

/// One measurement of one case at one concurrency.
#[derive(Clone, Debug)]
struct Figures {
    /// Calls per second, tonic client (library: calls per second over every thread).
    tonic_rate: f64,
    /// 99th percentile of one call's latency, µs (tonic client; library: one call).
    p99_us: f64,
    /// Mean latency of one call, µs.
    mean_us: f64,
    /// Calls per second, h2load.
    h2load_rate: Option<f64>,
    /// Mean time per request h2load reports, µs.
    h2load_mean_us: Option<f64>,
    /// Longest time of one request h2load reports, µs (printed per round, not tabled).
    h2load_max_us: Option<f64>,
}

/// What is loaded: a server and where it listens.
enum Target<'a> {
    Bare(&'a Bare),
    Server(&'a Server),
}

impl Target<'_> {
    fn address(&self) -> SocketAddr {
        match self {
            Target::Bare(bare) => bare.address,
            Target::Server(server) => server.grpc,
        }
    }

    /// Calls answered OK so far, and what reading it added to that count: the bare
    /// service's own count (nothing added), or the server's admitted calls, read from the
    /// state of the one key every call takes from: one more call, whose
    /// `limit_remaining` says how many the day's window has admitted (the read itself
    /// one of them). A call the server refused or failed takes nothing.
    fn answered(&self, runtime: &tokio::runtime::Runtime) -> (u64, u64) {
        match self {
            // Relaxed: a count, read after the calls that made it were answered.
            Target::Bare(bare) => (bare.answered.load(Ordering::Relaxed), 0),
            Target::Server(server) => runtime.block_on(async {
                let mut client = RateLimitServiceClient::connect(format!("http://{}", server.grpc))
                    .await
                    .expect("gRPC connects");
                let answer = client
                    .should_rate_limit(request())
                    .await
                    .expect("the count's call")
                    .into_inner();
                assert_eq!(answer.overall_code, Code::Ok as i32, "the count's call");
                (u64::from(LIMIT - answer.statuses[0].limit_remaining), 1)
            }),
        }
    }
}

/// `message` as one gRPC message on the wire: uncompressed flag, big-endian length, body.
fn grpc_frame(message: &RateLimitRequest) -> Vec<u8> {
    let body = prost::Message::encode_to_vec(message);
    let mut frame = Vec::with_capacity(5 + body.len());
    frame.push(0);
    frame.extend_from_slice(&u32::try_from(body.len()).expect("small").to_be_bytes());
    frame.extend_from_slice(&body);
    frame
}

/// The bare service: a fixed OK, nothing decided, every call counted.
struct Bare {
    address: SocketAddr,
    answered: Arc<AtomicU64>,
}

/// [`Bare`]'s handler.
struct BareService {
    answered: Arc<AtomicU64>,
}

#[tonic::async_trait]
impl RateLimitService for BareService {
    async fn should_rate_limit(
        &self,
        _request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        self.answered.fetch_add(1, Ordering::Relaxed);
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            ..RateLimitResponse::default()
        }))
    }
}

impl Bare {
    /// Starts it on a free loopback port, on a runtime of its own (tokio's default
    /// multi-threaded one, as the server's) in a thread that runs until the process ends.
    /// Its accepted connections are left as tonic leaves them (`serve_with_incoming` sets
    /// no socket option: Nagle on), or, with `nodelay`, `TCP_NODELAY`, as the server sets
    /// it on every accepted connection.
    fn start(nodelay: bool) -> Bare {
        let answered = Arc::new(AtomicU64::new(0));
        let (sender, receiver) = std::sync::mpsc::channel();
        let service = BareService {
            answered: Arc::clone(&answered),
        };
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let incoming = tonic::transport::server::TcpIncoming::bind(
                    "127.0.0.1:0".parse().expect("address"),
                )
                .expect("bare service binds")
                .with_nodelay(nodelay.then_some(true));
                sender
                    .send(incoming.local_addr().expect("bound"))
                    .expect("sent");
                tonic::transport::Server::builder()
                    .add_service(RateLimitServiceServer::new(service))
                    .serve_with_incoming(incoming)
                    .await
                    .expect("bare service serves");
            });
        });
        Bare {
            address: receiver.recv().expect("bare service listens"),
            answered,
        }
    }
}

/// A running `tollgate-server`, killed when dropped.
struct Server {
    child: Child,
    grpc: SocketAddr,
}

impl Server {
    /// Starts `binary` on `config` with `args` on free loopback ports, its gRPC address
    /// read from what it prints; its log goes to a file in `dir`.
    fn start(binary: &Path, config: &Path, args: &[&str], dir: &Path) -> Server {
        let log = dir.join(format!("server-{}.log", args.len()));
        let mut child = Command::new(binary)
            .arg("--config")
            .arg(config)
            .args(["--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"])
            .args(args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "{}: {e} (cargo build --release -p tollgate-server)",
                    binary.display()
                )
            });
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut grpc = None;
        while grpc.is_none() {
            let Some(Ok(line)) = lines.next() else {
                panic!(
                    "tollgate-server exited: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            };
            grpc = line
                .strip_prefix("tollgate-server: grpc listening on ")
                .and_then(|a| a.parse().ok());
        }
        std::thread::spawn(move || for _ in lines {});
        Server {
            child,
            grpc: grpc.expect("grpc"),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `redis-server` on a free loopback port, without persistence, killed when dropped.
struct RedisServer {
    child: Child,
    address: SocketAddr,
}

impl RedisServer {
    fn start(binary: &Path, dir: &Path) -> RedisServer {
        // A free port: bound, read, released (nothing else here takes ports meanwhile).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let address = SocketAddr::from(([127, 0, 0, 1], port));
        let child = Command::new(binary)
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", binary.display()));
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(address).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        RedisServer { child, address }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the tonic client measured.
struct TonicRun {
    rate: f64,
    p99_us: f64,
    mean_us: f64,
}

/// `streams` tasks on one connection to `address`, each calling back to back for
/// `length` (after a warm-up of a quarter of it, not counted); every answer must be
/// gRPC status 0 with `overall_code` OK.
async fn tonic_load(address: SocketAddr, streams: usize, length: Duration) -> TonicRun {
    let client = RateLimitServiceClient::connect(format!("http://{address}"))
        .await
        .expect("gRPC connects");
    let warm_up = length / 4;
    let start = Instant::now();
    let (from, until) = (start + warm_up, start + warm_up + length);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..streams {
        let mut client = client.clone();
        tasks.spawn(async move {
            let mut latencies: Vec<u32> = Vec::with_capacity(1 << 16);
            let message = request();
            loop {
                let sent = Instant::now();
                if sent >= until {
                    break;
                }
                let answer = client
                    .should_rate_limit(message.clone())
                    .await
                    .unwrap_or_else(|status| panic!("a call failed: {status}"));
                let took = sent.elapsed();
                assert_eq!(
                    answer.into_inner().overall_code,
                    Code::Ok as i32,
                    "a call was not admitted"
                );
                if sent >= from {
                    latencies.push(u32::try_from(took.as_nanos()).unwrap_or(u32::MAX));
                }
            }
            latencies
        });
    }
    let mut all = Vec::new();
    while let Some(done) = tasks.join_next().await {
        all.extend(done.expect("a load task"));
    }
    summarize(all, length)
}

/// Calls per second over `length`, p99 and mean of `latencies` (ns).
fn summarize(mut latencies: Vec<u32>, length: Duration) -> TonicRun {
    assert!(!latencies.is_empty(), "no call completed");
    latencies.sort_unstable();
    let n = latencies.len();
    let mean = latencies.iter().map(|&l| f64::from(l)).sum::<f64>() / n as f64;
    TonicRun {
        rate: n as f64 / length.as_secs_f64(),
        p99_us: f64::from(latencies[(n * 99 / 100).min(n - 1)]) / 1000.0,
        mean_us: mean / 1000.0,
    }
}

/// What h2load reported.
struct H2loadRun {
    rate: f64,
    mean_us: f64,
    max_us: f64,
}

/// `h2load -n calls -c 1 -m streams` over h2c: every call must have succeeded.
fn run_h2load(address: SocketAddr, body: &Path, streams: usize, calls: u64) -> H2loadRun {
    let output = Command::new("h2load")
        .args(["-n", &calls.to_string(), "-c", "1", "-t", "1"])
        .args(["-m", &streams.to_string()])
        .args(["-H", "content-type: application/grpc", "-H", "te: trailers"])
        .arg("-d")
        .arg(body)
        .arg(format!("http://{address}{PATH}"))
        .output()
        .expect("h2load runs");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "h2load failed: {text}");
    let line = |prefix: &str| -> &str {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} in h2load's output: {text}"))
    };
    // "requests: N total, N started, N done, N succeeded, 0 failed, 0 errored, 0 timeout"
    let requests = line("requests:");
    let count = |what: &str| -> u64 {
        requests
            .split(',')
            .find(|part| part.trim().ends_with(what))
            .and_then(|part| part.split_whitespace().rev().nth(1)?.parse().ok())
            .unwrap_or_else(|| panic!("no {what} count in {requests:?}"))
    };
    assert_eq!(
        (count("succeeded"), count("failed"), count("errored")),
        (calls, 0, 0),
        "h2load: {requests}"
    );
    let status = line("status codes:");
    assert!(
        status.starts_with(&format!("status codes: {calls} 2xx")),
        "h2load: {status}"
    );
    // "finished in 2.00s, 12345.67 req/s, 1.23MB/s"
    let rate = line("finished in")
        .split(',')
        .nth(1)
        .and_then(|p| p.trim().strip_suffix(" req/s")?.parse().ok())
        .expect("h2load's req/s");
    // "time for request:    37us     2.48ms       75us        33us    94.54%": min, max,
    // mean, sd.
    let times: Vec<&str> = line("time for request:").split_whitespace().collect();
    let time = |i: usize| times.get(i).map(|t| micros(t)).expect("h2load's times");
    H2loadRun {
        rate,
        mean_us: time(5),
        max_us: time(4),
    }
}

/// An h2load duration (`75us`, `2.48ms`, `1.2s`) in µs.
fn micros(text: &str) -> f64 {
    let (number, scale) = if let Some(n) = text.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix("ms") {
        (n, 1000.0)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1_000_000.0)
    } else {
        panic!("h2load duration {text:?}")
    };
    number.parse::<f64>().expect("a number") * scale
}

/// The server's decision for the request, `Policy::check_all`, back to back on `threads`
/// threads for `length`: calls per second over all of them, one call's p99 and mean.
fn library_load(policy: &Policy<MonotonicClock>, threads: usize, length: Duration) -> Figures {
    let go = AtomicBool::new(false);
    let latencies: Vec<u32> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let go = &go;
                scope.spawn(move || {
                    // Acquire: pairs with the starter's Release store of `go`.
                    while !go.load(Ordering::Acquire) {
                        std::hint::spin_loop();
                    }
                    let until = Instant::now() + length;
                    let mut latencies: Vec<u32> = Vec::with_capacity(1 << 20);
                    let requests = [Request::new(LIBRARY_KEY, LIBRARY_ENDPOINT, 1)];
                    loop {
                        let sent = Instant::now();
                        if sent >= until {
                            break;
                        }
                        let batch = policy.check_all(&requests).expect("decided");
                        let took = sent.elapsed();
                        assert!(batch.allowed(), "a call was denied");
                        latencies.push(u32::try_from(took.as_nanos()).unwrap_or(u32::MAX));
                    }
                    latencies
                })
            })
            .collect();
        // Release: every thread starts after the setup above (pairs with their Acquire).
        go.store(true, Ordering::Release);
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a library thread"))
            .collect()
    });
    let run = summarize(latencies, length);
    Figures {
        tonic_rate: run.rate,
        p99_us: run.p99_us,
        mean_us: run.mean_us,
        h2load_rate: None,
        h2load_mean_us: None,
        h2load_max_us: None,
    }
}

/// The median of `values`.
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The medians of every case as a Markdown table, and the target's ratio.
fn report(results: &[Vec<Vec<Figures>>], options: &Options) {
    let names = [
        "bare tonic, Nagle on (tonic's default on a given listener)",
        "tollgate-server, in-process store",
        "tollgate-server, Redis store",
        "bare tonic, accepted sockets `TCP_NODELAY`",
        "library `Policy::check_all` (threads = streams)",
    ];
    println!(
        "\nmedians of {} rounds of {:.1} s per case:\n",
        options.reps,
        options.seconds.as_secs_f64()
    );
    println!(
        "| case | streams | calls/s (h2load) | mean (h2load) | calls/s (tonic client) | mean (tonic client) | p99 (tonic client) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let medians = |case: usize, s: usize, pick: fn(&Figures) -> Option<f64>| -> Option<f64> {
        let values: Vec<f64> = results[case][s].iter().filter_map(pick).collect();
        (!values.is_empty()).then(|| median(values))
    };
    let show = |v: Option<f64>, unit: &str| match v {
        Some(v) if unit == "/s" => group(v),
        Some(v) if v >= 1000.0 => format!("{:.2} ms", v / 1000.0),
        Some(v) => format!("{v:.1} µs"),
        None => "—".to_owned(),
    };
    for (case, name) in names.iter().enumerate() {
        for (s, streams) in STREAMS.iter().enumerate() {
            println!(
                "| {name} | {streams} | {} | {} | {} | {} | {} |",
                show(medians(case, s, |f| f.h2load_rate), "/s"),
                show(medians(case, s, |f| f.h2load_mean_us), "µs"),
                show(medians(case, s, |f| Some(f.tonic_rate)), "/s"),
                show(medians(case, s, |f| Some(f.mean_us)), "µs"),
                show(medians(case, s, |f| Some(f.p99_us)), "µs"),
            );
        }
    }
    println!();
    for (s, streams) in STREAMS.iter().enumerate() {
        for (bare, which) in [(0, "bare"), (3, "bare TCP_NODELAY")] {
            let ratio = |pick: fn(&Figures) -> Option<f64>| -> String {
                match (medians(bare, s, pick), medians(1, s, pick)) {
                    (Some(b), Some(t)) => format!("{:.2}×", b / t),
                    _ => "—".to_owned(),
                }
            };
            println!(
                "{which} / in-process calls/s at {streams} streams: {} (h2load), {} (tonic client); target ≤ 1.30×",
                ratio(|f| f.h2load_rate),
                ratio(|f| Some(f.tonic_rate)),
            );
        }
    }
}

/// `value` rounded, thousands separated by spaces as in the benchmark doc.
fn group(value: f64) -> String {
    let digits = format!("{:.0}", value);
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    out
}
