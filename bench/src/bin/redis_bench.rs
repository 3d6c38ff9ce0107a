//! Redis backend benchmark: decisions per second through one process (1 and 16 concurrent
//! tasks), round trips per decision (client counters and the server's own command
//! statistics), the deny cache's effect on a hot denied key, against a plain `INCR` +
//! `EXPIRE` fixed window (pipelined: one round trip) as the baseline.
//!
//! Starts its own `redis-server` on a free loopback port (no persistence):
//!
//! ```text
//! cargo run --release -p tollgate-bench --features redis --bin redis_bench [seconds per run]
//! ```

#[cfg(feature = "redis")]
#[path = "../../../std/tests/redis_support/server.rs"]
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
    use tollgate::redis::{RedisConfig, RedisLimiter, RedisRule, RedisTarget};
    use tollgate::{AlgorithmConfig, Nanos};

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
            "{:<46} {:>5} {:>12.0} {:>10} {:>12.3} {:>12.2}",
            name,
            tasks,
            rate,
            client,
            calls as f64 / n.max(1) as f64,
            usec / n.max(1) as f64
        );
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

    pub async fn run(duration: Duration) {
        let server = RedisServer::start();
        println!(
            "redis-server {} on 127.0.0.1:{}, {:?} per run; RT = round trips, cmds = commands the server ran",
            redis_version(&server),
            server.port(),
            duration
        );
        println!(
            "{:<46} {:>5} {:>12} {:>10} {:>12} {:>12}",
            "workload", "tasks", "decisions/s", "client RT/d", "server cmds/d", "server µs/d"
        );
        // Mostly-admitting traffic over 10 000 keys: every decision is a script call.
        let open = AlgorithmConfig::Gcra {
            limit: 1_000_000,
            period: Nanos::from_secs(1),
            burst: 1_000_000,
        };
        let three = move || {
            vec![
                RedisRule::new("s", open).unwrap(),
                RedisRule::new(
                    "m",
                    AlgorithmConfig::FixedWindow {
                        limit: 1 << 30,
                        window: Nanos::from_secs(60),
                    },
                )
                .unwrap(),
                RedisRule::new(
                    "h",
                    AlgorithmConfig::SlidingWindowCounter {
                        limit: 1_000_000,
                        window: Nanos::from_secs(3600),
                    },
                )
                .unwrap(),
            ]
        };
        let closed = AlgorithmConfig::Gcra {
            limit: 1,
            period: Nanos::from_secs(3600),
            burst: 1,
        };
        type Workload = (&'static str, Box<dyn Fn() -> Arc<RedisLimiter>>, bool);
        let url = server.url();
        let make = move |rules: Vec<RedisRule>, cache: usize| {
            Arc::new(
                RedisLimiter::new(
                    RedisTarget::Single(url.clone()),
                    rules,
                    RedisConfig::new("bench")
                        .unwrap()
                        .with_deny_cache(cache)
                        .with_timeout(Duration::from_secs(5)),
                )
                .unwrap(),
            )
        };
        let (m1, m2, m3, m4) = (make.clone(), make.clone(), make.clone(), make);
        let workloads: Vec<Workload> = vec![
            (
                "tollgate GCRA, server TIME, 10k keys",
                Box::new(move || m1(vec![RedisRule::new("g", open).unwrap()], 0)),
                false,
            ),
            (
                "tollgate 3 tiers (GCRA+fixed+sliding ctr)",
                Box::new(move || m2(three(), 0)),
                false,
            ),
            (
                "tollgate hot denied key, deny cache off",
                Box::new(move || m3(vec![RedisRule::new("d", closed).unwrap()], 0)),
                true,
            ),
            (
                "tollgate hot denied key, deny cache on",
                Box::new(move || m4(vec![RedisRule::new("c", closed).unwrap()], 10_000)),
                true,
            ),
        ];
        for (name, build, hot) in &workloads {
            for tasks in [1usize, 16] {
                let l = build();
                // Connect and load the script before measuring.
                l.check("warmup").await.expect("warmup");
                reset_server_stats(&server);
                let before = l.stats();
                let lc = l.clone();
                let hot = *hot;
                let (rate, n) = drive(tasks, duration, move |t, i| {
                    let l = lc.clone();
                    async move {
                        let key = if hot {
                            "hot".to_owned()
                        } else {
                            format!("k{}", (t as u64 * 7919 + i) % 10_000)
                        };
                        let d = l.check(&key).await.expect("check");
                        assert!(!d.is_degraded());
                    }
                })
                .await;
                let trips = l.stats().round_trips - before.round_trips;
                report(name, tasks, rate, Some(trips as f64 / n as f64), n, &server);
            }
        }
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
