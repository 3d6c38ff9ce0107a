//! Redis backend benchmark: decisions per second through one process (1 and 16 concurrent
//! tasks), round trips per decision (client counters and the server's own command
//! statistics) and the server's µs per decision (`INFO commandstats`), side by side in one
//! run:
//!
//! - baselines: a plain `INCR` + `EXPIRE` fixed window (pipelined: one round trip), and the
//!   textbook float GCRA script (`TIME`, `GET`, `SET` of a double) by `EVALSHA` and as a
//!   Redis function (`FCALL`);
//! - a `Policy` on a `RedisStore` (server time): one exact GCRA tier, and three tiers (GCRA,
//!   fixed window, sliding window counter) in one rule, each by `FCALL` and by `EVALSHA`;
//!   and a hot denied client with the store's deny cache off and on;
//! - the same policies awaited from tokio tasks (`Policy::allow_async`): one GCRA tier and
//!   three tiers, by `FCALL`, with the store's I/O on its own thread (`RedisStore::new`)
//!   and on the tasks' runtime (`RedisStore::on_runtime`);
//! - the `LeasedStore` against the plain `RedisStore`: one hot global key, and 10 000 cold
//!   clients (never leased), at 1, 2 and 16 threads;
//! - the float GCRA script against one exact GCRA tier (both by `FCALL` from tokio tasks on a
//!   multiplexed connection driven by the tasks' runtime, the tier through
//!   `Policy::allow_async` on `RedisStore::on_runtime`; 10 000 clients),
//!   interleaved: five rounds, each a short run of one then the other (the order alternating),
//!   at 1 and 16 concurrent callers; the median decisions/s of each and the median of the
//!   rounds' ratios (so that one burst of a noisy neighbour does not decide the ratio), and
//!   the server's µs and socket reads per decision of each over all rounds;
//! - the server's capacity for the same two scripts, as `redis-benchmark` measures it (16
//!   connections, 10 000 keys; the tier's `FCALL` exactly as the store sends it, read back
//!   from the slow log), interleaved in the same way: both sides driven by the same C
//!   client, so they differ only by the server's work.
//!
//! Starts its own `redis-server` on a free loopback port (no persistence):
//!
//! ```text
//! cargo run --release -p tollgate-bench --features redis --bin redis_bench [seconds per run]
//! ```
//!
//! `TOLLGATE_REDIS_BENCH=leased` (or `store`) runs only the baselines and the leased-store
//! (or `RedisStore`) rows; `TOLLGATE_REDIS_BENCH=awaited` the baselines and the awaited
//! rows; `TOLLGATE_REDIS_BENCH=interleaved` only the interleaved and capacity rows;
//! `TOLLGATE_REDIS_BENCH=count-float:N` (or `count-tier:N`) exactly `N` decisions of one
//! side of the interleaved comparison at 16 callers, for counting the client's
//! instructions per decision under callgrind.

#[cfg(feature = "redis")]
#[path = "../../../redis/tests/redis_support/server.rs"]
mod server;

#[cfg(not(feature = "redis"))]
fn main() {
    eprintln!("redis_bench needs --features redis");
}

#[cfg(feature = "redis")]
fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(bench::run(std::time::Duration::from_secs_f64(secs)));
}

#[cfg(feature = "redis")]
mod bench {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use redis::aio::ConnectionManager;
    use tollgate::policy::Policy;
    use tollgate::MonotonicClock;
    use tollgate_redis::{LeaseConfig, LeasedStore, RedisConfig, RedisStore, RedisTarget};

    use super::server::RedisServer;

    /// Clears the server's command statistics.
    fn reset_server_stats(server: &RedisServer) {
        let _: String = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut server.connection())
            .expect("RESETSTAT");
    }

    /// (commands executed, µs the server spent in them) since the last reset, over the
    /// commands a decision sends: EVALSHA/EVAL for tollgate, INCR/EXPIRE for the baseline.
    fn server_work(server: &RedisServer) -> (u64, f64) {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut server.connection())
            .expect("INFO");
        let field = |line: &str, name: &str| -> Option<f64> {
            line.split(&[':', ','][..])
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
        };
        info.lines()
            .filter(|l| {
                [
                    "cmdstat_evalsha:",
                    "cmdstat_eval:",
                    "cmdstat_fcall:",
                    "cmdstat_incr:",
                    "cmdstat_expire:",
                ]
                .iter()
                .any(|p| l.starts_with(p))
            })
            .fold((0, 0.0), |(calls, usec), l| {
                (
                    calls + field(l, "calls").unwrap_or(0.0) as u64,
                    usec + field(l, "usec").unwrap_or(0.0),
                )
            })
    }

    /// The reads the server made from its clients' sockets since the last reset (`INFO
    /// stats`: `total_reads_processed`): fewer reads per decision means more commands
    /// arrived together, each read serving several.
    fn server_reads(server: &RedisServer) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .query(&mut server.connection())
            .expect("INFO");
        info.lines()
            .find_map(|l| l.strip_prefix("total_reads_processed:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// One result line.
    fn report(
        name: &str,
        tasks: usize,
        rate: f64,
        client_rt: Option<f64>,
        n: u64,
        server: &RedisServer,
    ) {
        let (calls, usec) = server_work(server);
        let client = client_rt.map_or("-".to_owned(), |rt| format!("{rt:.3}"));
        println!(
            "{:<58} {:>5} {:>12.0} {:>10} {:>12.3} {:>12.2}",
            name,
            tasks,
            rate,
            client,
            calls as f64 / n.max(1) as f64,
            usec / n.max(1) as f64
        );
    }

    /// The textbook float GCRA (`TIME`, `GET`, `SET` of a double, seconds): `KEYS[1]` the
    /// key, ARGV the emission interval T and the tolerance τ (seconds). Reply: allowed,
    /// remaining, retry after and reset after (ms).
    const FLOAT_GCRA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local emission = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local new_tat = tat + emission
local ahead = new_tat - now
if ahead > tolerance then
  return { 0, 0, math.ceil((ahead - tolerance) * 1000), math.ceil((tat - now) * 1000) }
end
redis.call('SET', KEYS[1], tostring(new_tat), 'PX', math.ceil(ahead * 1000))
return { 1, math.floor((tolerance - ahead) / emission), 0, math.ceil(ahead * 1000) }
"#;

    /// Runs `threads` OS threads calling the blocking `op(thread, i)` for `duration`;
    /// decisions per second and the count.
    fn drive_blocking<F>(threads: usize, duration: Duration, op: F) -> (f64, u64)
    where
        F: Fn(usize, u64) + Send + Sync + 'static,
    {
        let op = Arc::new(op);
        let start = Instant::now();
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let op = op.clone();
                std::thread::spawn(move || {
                    let mut i = 0u64;
                    while start.elapsed() < duration {
                        op(t, i);
                        i += 1;
                    }
                    i
                })
            })
            .collect();
        let n: u64 = handles.into_iter().map(|h| h.join().expect("thread")).sum();
        (n as f64 / start.elapsed().as_secs_f64(), n)
    }

    /// Runs `tasks` tasks calling `op(task, i)` for `duration`; decisions per second.
    async fn drive<F, Fut>(tasks: usize, duration: Duration, op: F) -> (f64, u64)
    where
        F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let op = Arc::new(op);
        let done = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        let handles: Vec<_> = (0..tasks)
            .map(|t| {
                let (op, done) = (op.clone(), done.clone());
                tokio::spawn(async move {
                    let mut i = 0u64;
                    while start.elapsed() < duration {
                        op(t, i).await;
                        i += 1;
                    }
                    done.fetch_add(i, Ordering::Relaxed);
                })
            })
            .collect();
        for h in handles {
            h.await.expect("task");
        }
        let n = done.load(Ordering::Relaxed);
        (n as f64 / start.elapsed().as_secs_f64(), n)
    }

    /// [`drive`] of a policy awaited from each task (`Policy::allow_async`), over 10 000
    /// clients.
    async fn drive_awaited(
        policy: &Arc<Policy<MonotonicClock, RedisStore>>,
        tasks: usize,
        duration: Duration,
    ) -> (f64, u64) {
        let p = policy.clone();
        drive(tasks, duration, move |t, i| {
            let p = p.clone();
            async move {
                let client = format!("c{}", (t as u64 * 7919 + i) % 10_000);
                let d = p.allow_async(&client, "/", 1).await.expect("allow");
                std::hint::black_box(d);
            }
        })
        .await
    }

    /// The policies awaited from tasks (`Policy::allow_async`): mostly-admitting traffic
    /// over 10 000 clients, every decision a script call, with the store's I/O on its own
    /// thread (`RedisStore::new`) and on this runtime, the tasks' own
    /// (`RedisStore::on_runtime`).
    async fn awaited(server: &RedisServer, duration: Duration) {
        for (rules, tiers) in [(ONE_TIER, "1 tier GCRA"), (THREE_TIERS, "3 tiers")] {
            for (given, io) in [(false, "own I/O thread"), (true, "on_runtime")] {
                for tasks in [1usize, 16] {
                    let config = RedisConfig::new("ba")
                        .unwrap()
                        .with_timeout(Duration::from_secs(5));
                    let target = RedisTarget::Single(server.url());
                    let store = if given {
                        RedisStore::on_runtime(target, config, tokio::runtime::Handle::current())
                    } else {
                        RedisStore::new(target, config)
                    }
                    .unwrap();
                    let policy = Arc::new(
                        Policy::from_toml(rules, MonotonicClock::new())
                            .expect("rules")
                            .store(store),
                    );
                    // Connect and load the script before measuring.
                    policy.allow_async("warmup", "/", 1).await.expect("warmup");
                    reset_server_stats(server);
                    let before = policy.backend().stats();
                    let (rate, n) = drive_awaited(&policy, tasks, duration).await;
                    let stats = policy.backend().stats();
                    assert_eq!(stats.degraded, before.degraded);
                    let trips = stats.round_trips - before.round_trips;
                    report(
                        &format!("Policy on RedisStore, awaited ({io}), {tiers}, FCALL"),
                        tasks,
                        rate,
                        Some(trips as f64 / n as f64),
                        n,
                        server,
                    );
                }
            }
        }
    }

    pub(crate) async fn run(duration: Duration) {
        let server = RedisServer::start();
        println!(
            "redis-server {} on 127.0.0.1:{}, {:?} per run; RT = round trips, cmds = commands the server ran",
            redis_version(&server),
            server.port(),
            duration
        );
        println!(
            "{:<58} {:>5} {:>12} {:>10} {:>12} {:>12}",
            "workload", "tasks", "decisions/s", "client RT/d", "server cmds/d", "server µs/d"
        );
        match std::env::var("TOLLGATE_REDIS_BENCH").as_deref() {
            // Only one section's rows (with the baselines for scale).
            Ok("leased") => {
                baselines(&server, duration).await;
                tokio::task::block_in_place(|| leased(&server, duration));
                return;
            }
            Ok("awaited") => {
                baselines(&server, duration).await;
                awaited(&server, duration).await;
                return;
            }
            Ok("interleaved") => {
                interleaved(&server, duration).await;
                capacity(&server, duration).await;
                return;
            }
            Ok(mode) if mode.starts_with("count-") => {
                counted(&server, mode).await;
                return;
            }
            Ok("store") => {
                baselines(&server, duration).await;
                interleaved(&server, duration).await;
                capacity(&server, duration).await;
                tokio::task::block_in_place(|| policies(&server, duration));
                return;
            }
            _ => {}
        }
        baselines(&server, duration).await;
        interleaved(&server, duration).await;
        capacity(&server, duration).await;
        // The store blocks its caller and owns a runtime: run it off the async workers.
        tokio::task::block_in_place(|| policies(&server, duration));
        tokio::task::block_in_place(|| leased(&server, duration));
        awaited(&server, duration).await;
        // Baseline: INCR + EXPIRE NX of a fixed window, pipelined (one round trip).
        let client = redis::Client::open(server.url()).expect("url");
        let manager = ConnectionManager::new(client).await.expect("connect");
        for tasks in [1usize, 16] {
            reset_server_stats(&server);
            let m = manager.clone();
            let (rate, n) = drive(tasks, duration, move |t, i| {
                let mut m = m.clone();
                async move {
                    let key = format!("base:{}", (t as u64 * 7919 + i) % 10_000);
                    let (count, _): (u64, i64) = redis::pipe()
                        .cmd("INCR")
                        .arg(&key)
                        .cmd("EXPIRE")
                        .arg(&key)
                        .arg(60)
                        .arg("NX")
                        .query_async(&mut m)
                        .await
                        .expect("INCR+EXPIRE");
                    std::hint::black_box(count <= 1_000_000);
                }
            })
            .await;
            report(
                "baseline INCR+EXPIRE NX (pipelined)",
                tasks,
                rate,
                Some(1.0),
                n,
                &server,
            );
        }
    }

    /// Loads the float GCRA script as the function library `bench_float_gcra` (for `FCALL`).
    async fn load_float_library(manager: &ConnectionManager) {
        let library = format!(
            "#!lua name=bench_float_gcra\nredis.register_function('bench_float_gcra', function(KEYS, ARGV)\n{FLOAT_GCRA}\nend)\n"
        );
        let _: String = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(&library)
            .query_async(&mut manager.clone())
            .await
            .expect("FUNCTION LOAD");
    }

    /// The float GCRA script, by `EVALSHA` and by `FCALL`, over 10 000 keys.
    async fn baselines(server: &RedisServer, duration: Duration) {
        let client = redis::Client::open(server.url()).expect("url");
        let manager = ConnectionManager::new(client).await.expect("connect");
        let script = redis::Script::new(FLOAT_GCRA);
        load_float_library(&manager).await;
        // T = 1 µs, τ = 1 s: 1 000 000/s with a burst of 1 000 000, as the tollgate rows.
        let (emission, tolerance) = ("0.000001", "1");
        for fcall in [false, true] {
            for tasks in [1usize, 16] {
                let (m, script) = (manager.clone(), script.clone());
                // Warm the script cache (EVALSHA) before measuring.
                let _: Vec<i64> = script
                    .key("fg:warm")
                    .arg(emission)
                    .arg(tolerance)
                    .invoke_async(&mut m.clone())
                    .await
                    .expect("float GCRA");
                reset_server_stats(server);
                let (rate, n) = drive(tasks, duration, move |t, i| {
                    let (mut m, script) = (m.clone(), script.clone());
                    async move {
                        let key = format!("fg:{}", (t as u64 * 7919 + i) % 10_000);
                        let reply: Vec<i64> = if fcall {
                            redis::cmd("FCALL")
                                .arg("bench_float_gcra")
                                .arg(1)
                                .arg(&key)
                                .arg(emission)
                                .arg(tolerance)
                                .query_async(&mut m)
                                .await
                                .expect("FCALL")
                        } else {
                            script
                                .key(&key)
                                .arg(emission)
                                .arg(tolerance)
                                .invoke_async(&mut m)
                                .await
                                .expect("EVALSHA")
                        };
                        std::hint::black_box(reply);
                    }
                })
                .await;
                let name = if fcall {
                    "baseline float GCRA script, FCALL"
                } else {
                    "baseline float GCRA script, EVALSHA"
                };
                report(name, tasks, rate, Some(1.0), n, server);
            }
        }
    }

    /// The two sides of [`interleaved`], [`capacity`] and [`counted`]: a connection with the
    /// float GCRA script loaded as a function, and a policy of one exact GCRA tier on a
    /// `RedisStore` with keys under `prefix`, its I/O on this runtime (as the float script's
    /// connection is), connected and its library loaded by a first check.
    async fn float_and_tier(
        server: &RedisServer,
        prefix: &str,
    ) -> (ConnectionManager, Arc<Policy<MonotonicClock, RedisStore>>) {
        let client = redis::Client::open(server.url()).expect("url");
        let manager = ConnectionManager::new(client).await.expect("connect");
        load_float_library(&manager).await;
        let config = RedisConfig::new(prefix)
            .unwrap()
            .with_timeout(Duration::from_secs(5));
        let store = RedisStore::on_runtime(
            RedisTarget::Single(server.url()),
            config,
            tokio::runtime::Handle::current(),
        )
        .expect("store");
        let policy = Arc::new(
            Policy::from_toml(ONE_TIER, MonotonicClock::new())
                .expect("rules")
                .store(store),
        );
        policy.allow_async("warmup", "/", 1).await.expect("warmup");
        (manager, policy)
    }

    /// The least and the greatest of `values`.
    fn range(values: &[f64]) -> (f64, f64) {
        values
            .iter()
            .fold((f64::MAX, 0.0f64), |(lo, hi), &r| (lo.min(r), hi.max(r)))
    }

    /// The median of `values` (the upper one of an even count).
    fn median(values: &[f64]) -> f64 {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        sorted[sorted.len() / 2]
    }

    /// The float GCRA script (`FCALL`) and a `Policy` on a `RedisStore` with one exact GCRA
    /// tier (`FCALL`, server time), interleaved over `ROUNDS` rounds of `duration / 2` each
    /// per side, alternating which runs first; the same 10 000 clients, the same tokio tasks
    /// and the same kind of connection (multiplexed: the script through a
    /// `ConnectionManager`, the policy awaited with `allow_async`), so the two differ only
    /// by what runs on the server and the policy's own work in the client. Per
    /// concurrency: median decisions/s of each, the median (and range) of the per-round
    /// ratios policy / float, and each side's server µs per decision over every round.
    async fn interleaved(server: &RedisServer, duration: Duration) {
        const ROUNDS: usize = 5;
        let run = duration / 2;
        let (manager, policy) = float_and_tier(server, "bi").await;
        println!(
            "interleaved, {ROUNDS} rounds of {run:?} per side: float GCRA script (FCALL) against 1 exact GCRA tier (policy on RedisStore::on_runtime, awaited, FCALL)"
        );
        for tasks in [1usize, 16] {
            let (mut float_rates, mut policy_rates, mut ratios) = (vec![], vec![], vec![]);
            // (decisions, server µs, server reads) of each side over every round
            let (mut float_work, mut policy_work) = ((0u64, 0.0, 0u64), (0u64, 0.0, 0u64));
            for round in 0..ROUNDS {
                let (mut float_rate, mut policy_rate) = (0.0, 0.0);
                for side in 0..2 {
                    reset_server_stats(server);
                    if (side == 0) == (round % 2 == 0) {
                        let m = manager.clone();
                        let (rate, n) = drive(tasks, run, move |t, i| {
                            let mut m = m.clone();
                            async move {
                                let key = format!("fi:{}", (t as u64 * 7919 + i) % 10_000);
                                let reply: Vec<i64> = redis::cmd("FCALL")
                                    .arg("bench_float_gcra")
                                    .arg(1)
                                    .arg(&key)
                                    .arg("0.000001")
                                    .arg("1")
                                    .query_async(&mut m)
                                    .await
                                    .expect("FCALL");
                                std::hint::black_box(reply);
                            }
                        })
                        .await;
                        let (_, usec) = server_work(server);
                        let reads = server_reads(server);
                        float_rate = rate;
                        float_work = (float_work.0 + n, float_work.1 + usec, float_work.2 + reads);
                    } else {
                        let before = policy.backend().stats().degraded;
                        let (rate, n) = drive_awaited(&policy, tasks, run).await;
                        assert_eq!(policy.backend().stats().degraded, before, "degraded");
                        let (_, usec) = server_work(server);
                        let reads = server_reads(server);
                        policy_rate = rate;
                        policy_work = (
                            policy_work.0 + n,
                            policy_work.1 + usec,
                            policy_work.2 + reads,
                        );
                    }
                }
                float_rates.push(float_rate);
                policy_rates.push(policy_rate);
                ratios.push(policy_rate / float_rate);
            }
            let (lo, hi) = range(&ratios);
            println!(
                "  {tasks:>2} callers: float {:.0}/s, 1 tier {:.0}/s (medians); ratio 1 tier / float: median {:.2} (rounds {lo:.2}..{hi:.2}); server µs/d float {:.2}, 1 tier {:.2}; server reads/d float {:.2}, 1 tier {:.2}",
                median(&float_rates),
                median(&policy_rates),
                median(&ratios),
                float_work.1 / float_work.0.max(1) as f64,
                policy_work.1 / policy_work.0.max(1) as f64,
                float_work.2 as f64 / float_work.0.max(1) as f64,
                policy_work.2 as f64 / policy_work.0.max(1) as f64,
            );
        }
    }

    /// The server's capacity for each script, as `redis-benchmark` measures it (16
    /// connections, one command in flight on each, 10 000 keys): the float GCRA script's
    /// `FCALL` against the very `FCALL` a `RedisStore` sends for one exact GCRA tier (read
    /// back from the server's slow log after one real check, the client's hash tag then
    /// replaced by `redis-benchmark`'s random key), interleaved over `ROUNDS` rounds,
    /// alternating which runs first. The client here is `redis-benchmark`'s C loop for
    /// both, so the two differ only by what runs on the server: this is the measure issue
    /// 13 started from (~30 000 against ~64 000 decisions/s).
    async fn capacity(server: &RedisServer, duration: Duration) {
        const ROUNDS: usize = 5;
        let (_manager, policy) = float_and_tier(server, "bk").await;
        // The exact command of one check, from the slow log (every command logged).
        let mut c = server.connection();
        let set = |c: &mut redis::Connection, v: &str| {
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg("slowlog-log-slower-than")
                .arg(v)
                .query(c)
                .expect("CONFIG SET");
        };
        set(&mut c, "0");
        let _: () = redis::cmd("SLOWLOG")
            .arg("RESET")
            .query(&mut c)
            .expect("RESET");
        policy.allow_async("c42", "/", 1).await.expect("check");
        set(&mut c, "10000");
        let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
            .arg("GET")
            .arg(100)
            .query(&mut c)
            .expect("SLOWLOG GET");
        let text = |v: &redis::Value| match v {
            redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            redis::Value::SimpleString(s) => s.clone(),
            other => panic!("slow log argument {other:?}"),
        };
        let tier: Vec<String> = log
            .iter()
            .find_map(|entry| {
                let redis::Value::Array(fields) = entry else {
                    return None;
                };
                let redis::Value::Array(args) = fields.get(3)? else {
                    return None;
                };
                let args: Vec<String> = args.iter().map(text).collect();
                (args.first()?.eq_ignore_ascii_case("FCALL")).then_some(args)
            })
            .expect("the check's FCALL in the slow log")
            .into_iter()
            .map(|a| a.replace("{c42}", "{c__rand_int__}"))
            .collect();
        // The call's deadline (server ms, in the mode after the keys) lies a timeout
        // ahead: replayed for seconds, every call would be refused as expired. Never
        // reached instead (13 digits, as the store's; one mode string for every call, as
        // the store's calls within one ms share theirs).
        let mut tier = tier;
        let keys: usize = tier
            .get(2)
            .and_then(|n| n.parse().ok())
            .expect("FCALL numkeys");
        let mode = tier.get_mut(3 + keys).expect("FCALL mode");
        let op = mode.split(' ').next().expect("mode").to_owned();
        *mode = format!("{op} 9007199254740");
        assert!(
            tier.iter().any(|a| a.contains("__rand_int__"))
                && !tier.iter().any(|a| a.contains("more bytes")),
            "the check's FCALL, whole, with its client's key: {tier:?}"
        );
        let float: Vec<String> = [
            "FCALL",
            "bench_float_gcra",
            "1",
            "fk:__rand_int__",
            "0.000001",
            "1",
        ]
        .map(String::from)
        .to_vec();
        // About `duration / 2` per run at the rates seen here.
        let requests = ((duration.as_secs_f64() / 2.0) * 60_000.0).max(20_000.0) as u64;
        let bench = |command: &[String]| -> f64 {
            let out = std::process::Command::new("redis-benchmark")
                .args(["-h", "127.0.0.1", "-p", &server.port().to_string()])
                .args(["-c", "16", "-r", "10000", "--csv"])
                .args(["-n", &requests.to_string()])
                .args(command)
                .output()
                .expect("redis-benchmark (from the redis-tools package) on PATH");
            assert!(out.status.success(), "redis-benchmark: {out:?}");
            // `"test","rps",...` then one line per test: the rate is the second field.
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| l.split(',').nth(1)?.trim_matches('"').parse().ok())
                .next()
                .expect("a rate in redis-benchmark's CSV")
        };
        println!(
            "server capacity, redis-benchmark (16 connections, 10 000 keys), {ROUNDS} rounds of {requests} requests per side: float GCRA script (FCALL) against the FCALL of 1 exact GCRA tier"
        );
        let (mut floats, mut tiers, mut ratios) = (vec![], vec![], vec![]);
        let (mut float_work, mut tier_work) = ((0u64, 0.0), (0u64, 0.0));
        for round in 0..ROUNDS {
            let (mut f, mut t) = (0.0, 0.0);
            for side in 0..2 {
                reset_server_stats(server);
                if (side == 0) == (round % 2 == 0) {
                    f = tokio::task::block_in_place(|| bench(&float));
                    let (calls, usec) = server_work(server);
                    float_work = (float_work.0 + calls, float_work.1 + usec);
                } else {
                    t = tokio::task::block_in_place(|| bench(&tier));
                    let (calls, usec) = server_work(server);
                    tier_work = (tier_work.0 + calls, tier_work.1 + usec);
                }
            }
            floats.push(f);
            tiers.push(t);
            ratios.push(t / f);
        }
        let (lo, hi) = range(&ratios);
        println!(
            "  16 connections: float {:.0}/s, 1 tier {:.0}/s (medians); ratio 1 tier / float: median {:.2} (rounds {lo:.2}..{hi:.2}); server µs/d float {:.2}, 1 tier {:.2}",
            median(&floats),
            median(&tiers),
            median(&ratios),
            float_work.1 / float_work.0.max(1) as f64,
            tier_work.1 / tier_work.0.max(1) as f64,
        );
    }

    /// `TOLLGATE_REDIS_BENCH=count-float:N` (or `count-tier:N`): exactly `N` decisions of the
    /// float script (or of the policy's one exact GCRA tier), as in [`interleaved`]'s 16
    /// callers, and nothing else, for counting the client's instructions per decision
    /// under callgrind (which does not follow the `redis-server` child): the difference
    /// between a run of `2N` and one of `N`, divided by `N`.
    async fn counted(server: &RedisServer, mode: &str) {
        const TASKS: u64 = 16;
        let (side, n) = mode
            .strip_prefix("count-")
            .and_then(|m| m.split_once(':'))
            .expect("count-float:N or count-tier:N");
        let per_task = n.parse::<u64>().expect("N") / TASKS;
        let (manager, policy) = float_and_tier(server, "bc").await;
        let float = match side {
            "float" => true,
            "tier" => false,
            other => panic!("count-{other}: float or tier"),
        };
        let handles: Vec<_> = (0..TASKS)
            .map(|t| {
                let (m, p) = (manager.clone(), policy.clone());
                tokio::spawn(async move {
                    for i in 0..per_task {
                        let key = format!("c{}", (t * 7919 + i) % 10_000);
                        if float {
                            let reply: Vec<i64> = redis::cmd("FCALL")
                                .arg("bench_float_gcra")
                                .arg(1)
                                .arg(&key)
                                .arg("0.000001")
                                .arg("1")
                                .query_async(&mut m.clone())
                                .await
                                .expect("FCALL");
                            std::hint::black_box(reply);
                        } else {
                            let d = p.allow_async(&key, "/", 1).await.expect("allow");
                            std::hint::black_box(d);
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.await.expect("task");
        }
        assert_eq!(policy.backend().stats().degraded, 0, "degraded");
        println!("{side}: {} decisions", per_task * TASKS);
    }

    /// A `Policy` on a `RedisStore` (server time): one GCRA tier, and three tiers in one
    /// rule, each by `FCALL` and by `EVALSHA`, over 10 000 clients; then one client over
    /// its limit (1 per hour) checking as fast as it can, with the deny cache off and on.
    /// One GCRA tier that admits everything the bench sends.
    const ONE_TIER: &str = r#"
        [[rules]]
        name = "default"
        tiers = [{ name = "s", limit = 1000000, window = "1s", algorithm = "gcra" }]
    "#;

    /// Three tiers of three algorithms (GCRA, fixed window, sliding window counter) that
    /// admit everything the bench sends.
    const THREE_TIERS: &str = r#"
        [[rules]]
        name = "default"
        tiers = [
            { name = "s", limit = 1000000, window = "1s", algorithm = "gcra" },
            { name = "m", limit = 1073741824, window = "60s", algorithm = "fixed_window" },
            { name = "h", limit = 1000000, window = "1h", algorithm = "sliding_window_counter" },
        ]
    "#;

    fn policies(server: &RedisServer, duration: Duration) {
        for (rules, tiers) in [
            (ONE_TIER, "1 tier GCRA"),
            (THREE_TIERS, "3 tiers GCRA+fixed+sliding ctr"),
        ] {
            for functions in [true, false] {
                for threads in [1usize, 16] {
                    let config = RedisConfig::new("bp")
                        .unwrap()
                        .with_timeout(Duration::from_secs(5))
                        .with_functions(functions);
                    let store =
                        RedisStore::new(RedisTarget::Single(server.url()), config).expect("store");
                    let policy = Arc::new(
                        Policy::from_toml(rules, MonotonicClock::new())
                            .expect("rules")
                            .store(store),
                    );
                    // Connect and load the script before measuring.
                    policy.allow("warmup", "/", 1).expect("warmup");
                    reset_server_stats(server);
                    let before = policy.backend().stats();
                    let p = policy.clone();
                    let (rate, n) = drive_blocking(threads, duration, move |t, i| {
                        let client = format!("c{}", (t as u64 * 7919 + i) % 10_000);
                        let d = p.allow(&client, "/", 1).expect("allow");
                        std::hint::black_box(d);
                    });
                    let after = policy.backend().stats();
                    assert_eq!(after.degraded, before.degraded, "degraded decisions");
                    let trips = after.round_trips - before.round_trips;
                    let how = if functions { "FCALL" } else { "EVALSHA" };
                    report(
                        &format!("policy on RedisStore, {tiers}, {how}"),
                        threads,
                        rate,
                        Some(trips as f64 / n as f64),
                        n,
                        server,
                    );
                }
            }
        }
        let closed = r#"
            [[rules]]
            name = "default"
            tiers = [{ name = "d", limit = 1, window = "1h", algorithm = "gcra" }]
        "#;
        for (cache, state) in [(0usize, "off"), (10_000, "on")] {
            for threads in [1usize, 16] {
                let config = RedisConfig::new("bhot")
                    .unwrap()
                    .with_timeout(Duration::from_secs(5))
                    .with_deny_cache(cache);
                let store =
                    RedisStore::new(RedisTarget::Single(server.url()), config).expect("store");
                let policy = Arc::new(
                    Policy::from_toml(closed, MonotonicClock::new())
                        .expect("rules")
                        .store(store),
                );
                // Connect, load the script and use up the hot client's hour before measuring.
                policy.allow("hot", "/", 1).expect("warmup");
                assert!(!policy.allow("hot", "/", 1).expect("warmup").allowed());
                reset_server_stats(server);
                let before = policy.backend().stats();
                let p = policy.clone();
                let (rate, n) = drive_blocking(threads, duration, move |_, _| {
                    let d = p.allow("hot", "/", 1).expect("allow");
                    assert!(!d.allowed());
                });
                let after = policy.backend().stats();
                assert_eq!(after.degraded, before.degraded, "degraded decisions");
                let trips = after.round_trips - before.round_trips;
                report(
                    &format!("policy on RedisStore, hot denied client, deny cache {state}"),
                    threads,
                    rate,
                    Some(trips as f64 / n as f64),
                    n,
                    server,
                );
            }
        }
    }

    /// The leased store against the plain one, side by side (issue #14): one global key
    /// every check hits (a limit of 10⁹ per second, never exhausted, so every check is an
    /// admission), then 10 000 clients each checked a few times per second (cold: never
    /// leased). Default `LeaseConfig`. Round trips per decision count the leases' calls.
    fn leased(server: &RedisServer, duration: Duration) {
        let hot = r#"
            [[rules]]
            name = "all"
            per = "global"
            tiers = [{ name = "s", limit = 1000000000, window = "1s", algorithm = "gcra" }]
        "#;
        let cold = r#"
            [[rules]]
            name = "default"
            tiers = [{ name = "s", limit = 1000000, window = "1s", algorithm = "gcra" }]
        "#;
        for (rules, keys, workload) in [
            (hot, 1u64, "hot global key"),
            (cold, 10_000, "10 000 cold clients"),
        ] {
            for leasing in [false, true] {
                for threads in [1usize, 2, 16] {
                    let config = RedisConfig::new("bl")
                        .unwrap()
                        .with_timeout(Duration::from_secs(5));
                    let store =
                        RedisStore::new(RedisTarget::Single(server.url()), config).expect("store");
                    let policy = Policy::from_toml(rules, MonotonicClock::new()).expect("rules");
                    let (rate, n, trips) = if leasing {
                        let leased = LeasedStore::new(store, LeaseConfig::new()).expect("lease");
                        let policy = Arc::new(policy.store(leased));
                        let trips = || policy.backend().stats().redis.round_trips;
                        let measured =
                            drive_policy(server, &policy, threads, duration, keys, trips);
                        assert_eq!(policy.backend().stats().redis.degraded, 0, "degraded");
                        measured
                    } else {
                        let policy = Arc::new(policy.store(store));
                        let trips = || policy.backend().stats().round_trips;
                        let measured =
                            drive_policy(server, &policy, threads, duration, keys, trips);
                        assert_eq!(policy.backend().stats().degraded, 0, "degraded");
                        measured
                    };
                    let how = if leasing { "LeasedStore" } else { "RedisStore" };
                    report(
                        &format!("{workload}, {how}"),
                        threads,
                        rate,
                        Some(trips as f64 / n as f64),
                        n,
                        server,
                    );
                }
            }
        }
    }

    /// Warms `policy` up for 200 ms (connect, load the script, let a hot key be leased),
    /// then checks clients `c0..c{keys}` from `threads` threads for `duration`, every
    /// check admitted: (decisions/s, decisions, round trips meanwhile by `trips`).
    fn drive_policy<S: tollgate::policy::Store + 'static>(
        server: &RedisServer,
        policy: &Arc<Policy<MonotonicClock, S>>,
        threads: usize,
        duration: Duration,
        keys: u64,
        trips: impl Fn() -> u64,
    ) -> (f64, u64, u64) {
        let warm = Instant::now();
        while warm.elapsed() < Duration::from_millis(200) {
            assert!(policy.allow("c0", "/", 1).expect("allow").allowed());
        }
        reset_server_stats(server);
        let before = trips();
        let p = Arc::clone(policy);
        let (rate, n) = drive_blocking(threads, duration, move |t, i| {
            let d = if keys == 1 {
                p.allow("c0", "/", 1)
            } else {
                p.allow(&format!("c{}", (t as u64 * 7919 + i) % keys), "/", 1)
            };
            assert!(d.expect("allow").allowed());
        });
        (rate, n, trips() - before)
    }

    fn redis_version(server: &RedisServer) -> String {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut server.connection())
            .unwrap_or_default();
        info.lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("?")
            .trim()
            .to_owned()
    }
}
