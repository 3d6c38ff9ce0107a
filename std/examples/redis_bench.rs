//! Redis backend benchmark: decisions per second through one process (1 and 16 concurrent
//! tasks), round trips per decision (client counters and the server's own command
//! statistics), the deny cache's effect on a hot denied key, against a plain `INCR` +
//! `EXPIRE` fixed window (pipelined: one round trip) as the baseline.
//!
//! Starts its own `redis-server` on a free loopback port (no persistence):
//!
//! ```text
//! cargo run --release -p tollgate --features redis --example redis_bench [seconds per run]
//! ```

#[cfg(feature = "redis")]
#[path = "../tests/redis_support/server.rs"]
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

    /// Calls to EVALSHA + EVAL the server has counted.
    fn script_calls(server: &RedisServer) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut server.connection())
            .expect("INFO");
        info.lines()
            .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
            .filter_map(|l| {
                l.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    }

    fn limiter(
        server: &RedisServer,
        deny_cache: usize,
        config: AlgorithmConfig,
    ) -> Arc<RedisLimiter> {
        Arc::new(
            RedisLimiter::new(
                RedisTarget::Single(server.url()),
                vec![RedisRule::new("bench", config).expect("rule")],
                RedisConfig::new("bench")
                    .expect("prefix")
                    .with_deny_cache(deny_cache)
                    .with_timeout(Duration::from_secs(5)),
            )
            .expect("limiter"),
        )
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
            "redis-server {} on 127.0.0.1:{}, {:?} per run",
            redis_version(&server),
            server.port(),
            duration
        );
        println!(
            "{:<44} {:>8} {:>14} {:>12} {:>12}",
            "workload", "tasks", "decisions/s", "RT/decision", "server RT/d"
        );
        // Mostly-admitting traffic over 10 000 keys: every decision is a script call.
        let open = AlgorithmConfig::Gcra {
            limit: 1_000_000,
            period: Nanos::from_secs(1),
            burst: 1_000_000,
        };
        for tasks in [1usize, 16] {
            let l = limiter(&server, 0, open);
            let calls0 = script_calls(&server);
            let lc = l.clone();
            let (rate, n) = drive(tasks, duration, move |t, i| {
                let l = lc.clone();
                async move {
                    let key = format!("k{}", (t as u64 * 7919 + i) % 10_000);
                    let d = l.check(&key).await.expect("check");
                    assert!(!d.is_degraded());
                }
            })
            .await;
            let stats = l.stats();
            let server_calls = script_calls(&server) - calls0;
            println!(
                "{:<44} {:>8} {:>14.0} {:>12.3} {:>12.3}",
                "tollgate GCRA (EVALSHA, server TIME)",
                tasks,
                rate,
                stats.round_trips as f64 / n as f64,
                server_calls as f64 / n as f64
            );
        }
        // Three tiers in one call.
        for tasks in [1usize, 16] {
            let l = Arc::new(
                RedisLimiter::new(
                    RedisTarget::Single(server.url()),
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
                    ],
                    RedisConfig::new("bench3")
                        .unwrap()
                        .with_deny_cache(0)
                        .with_timeout(Duration::from_secs(5)),
                )
                .unwrap(),
            );
            let lc = l.clone();
            let (rate, n) = drive(tasks, duration, move |t, i| {
                let l = lc.clone();
                async move {
                    let key = format!("k{}", (t as u64 * 7919 + i) % 10_000);
                    l.check(&key).await.expect("check");
                }
            })
            .await;
            println!(
                "{:<44} {:>8} {:>14.0} {:>12.3} {:>12}",
                "tollgate 3 tiers (GCRA+fixed+sliding counter)",
                tasks,
                rate,
                l.stats().round_trips as f64 / n as f64,
                "-"
            );
        }
        // A hot key that is denied (limit long exhausted): with and without the deny cache.
        let closed = AlgorithmConfig::Gcra {
            limit: 1,
            period: Nanos::from_secs(3600),
            burst: 1,
        };
        for (name, cache) in [
            ("hot denied key, deny cache off", 0usize),
            ("hot denied key, deny cache on", 10_000),
        ] {
            for tasks in [1usize, 16] {
                let l = limiter(&server, cache, closed);
                let lc = l.clone();
                let (rate, n) = drive(tasks, duration, move |_, _| {
                    let l = lc.clone();
                    async move {
                        l.check("hot").await.expect("check");
                    }
                })
                .await;
                let stats = l.stats();
                println!(
                    "{:<44} {:>8} {:>14.0} {:>12.5} {:>12}",
                    format!("tollgate {name}"),
                    tasks,
                    rate,
                    stats.round_trips as f64 / n as f64,
                    "-"
                );
            }
        }
        // Baseline: INCR + EXPIRE NX of a fixed window, pipelined (one round trip).
        let client = redis::Client::open(server.url()).expect("url");
        let manager = ConnectionManager::new(client).await.expect("connect");
        for tasks in [1usize, 16] {
            let m = manager.clone();
            let (rate, _) = drive(tasks, duration, move |t, i| {
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
            println!(
                "{:<44} {:>8} {:>14.0} {:>12.3} {:>12}",
                "baseline INCR+EXPIRE NX (pipelined)", tasks, rate, 1.0, "-"
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
