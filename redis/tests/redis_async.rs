//! A policy on a [`RedisStore`] awaited from async code ([`Policy::allow_async`] and its
//! peek, refund and charge twins), against a real redis-server on loopback: the awaited
//! checks decide exactly as the blocking ones on the same traces, tasks and threads mixing
//! both admit exactly the bound, a single-threaded runtime is never blocked by a round
//! trip, and failures answer by the failure policy as they do when blocking.

#[path = "../../std/tests/policy_support/mod.rs"]
mod policy_support;
mod redis_support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use policy_support::{Rng, RULES};
use redis_support::server::RedisServer;
use tollgate::policy::Policy;
use tollgate::{ManualClock, MonotonicClock, Nanos};
use tollgate_redis::{FailurePolicy, RedisConfig, RedisStore, RedisTarget, TimeSource};

/// A store with the policy's clock deciding (so a manual clock replays a trace).
fn client_time_store(server: &RedisServer, prefix: &str) -> RedisStore {
    let config = RedisConfig::new(prefix)
        .unwrap()
        .with_time_source(TimeSource::Client)
        .with_timeout(Duration::from_secs(10))
        .with_ttl_slack(Duration::from_secs(3600));
    RedisStore::new(RedisTarget::Single(server.url()), config).unwrap()
}

/// The same random trace (checks, peeks, refunds, charges over several rules and tiers of
/// every kind) through `allow_async` and friends on one store and the blocking methods on
/// another (separate keys): every decision identical.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn awaited_checks_decide_exactly_as_blocking_ones() {
    let server = RedisServer::start();
    let clock = ManualClock::starting_at(Nanos::from_secs(1_700_000_000));
    let awaited = Policy::from_toml(RULES, clock.clone())
        .unwrap()
        .store(client_time_store(&server, "awaited"));
    let blocking = Arc::new(
        Policy::from_toml(RULES, clock.clone())
            .unwrap()
            .store(client_time_store(&server, "blocking")),
    );
    let clients = ["a", "b", "vip", "c"];
    let endpoints = ["/", "/search", "/upload"];
    let mut rng = Rng(0x5eed_0001);
    let (mut admitted, mut denied) = (0, 0);
    for step in 0..400 {
        clock.advance(Nanos::from_millis(rng.below(4) * rng.below(200)));
        let client = clients[rng.below(4) as usize];
        let endpoint = endpoints[rng.below(3) as usize];
        let cost = [1, 1, 1, 2, 0, 3][rng.below(6) as usize];
        let op = rng.below(10);
        // The blocking policy runs on a blocking-pool thread (a round trip there holds no
        // worker of this runtime).
        let other = Arc::clone(&blocking);
        let (client_s, endpoint_s) = (client.to_owned(), endpoint.to_owned());
        let expected = tokio::task::spawn_blocking(move || match op {
            0 => {
                other.refund(&client_s, &endpoint_s, cost);
                None
            }
            1 => {
                let request = tollgate::policy::Request::new(&client_s, &endpoint_s, cost);
                tollgate::policy::PolicyCheck::charge_at(
                    &*other,
                    &request,
                    tollgate::Clock::now(other.clock()),
                );
                None
            }
            2 => Some(other.peek(&client_s, &endpoint_s, cost)),
            _ => Some(other.allow(&client_s, &endpoint_s, cost)),
        })
        .await
        .unwrap();
        let got = match op {
            0 => {
                awaited.refund_async(client, endpoint, cost).await;
                None
            }
            1 => {
                awaited.charge_async(client, endpoint, cost).await;
                None
            }
            2 => Some(awaited.peek_async(client, endpoint, cost).await),
            _ => Some(awaited.allow_async(client, endpoint, cost).await),
        };
        assert_eq!(
            got, expected,
            "step {step}: op {op} {client} {endpoint} {cost}"
        );
        if let Some(Ok(d)) = got {
            if op >= 3 {
                if d.allowed() {
                    admitted += 1;
                } else {
                    denied += 1;
                }
            }
        }
    }
    // The trace exercised both answers (a test of equal decisions that never denies would
    // prove little).
    assert!(
        admitted > 50 && denied > 50,
        "admitted {admitted}, denied {denied}"
    );
    assert_eq!(awaited.backend().stats().degraded, 0);
}

const HOT_RULES: &str = r#"
    [[rules]]
    name = "default"
    tiers = [
        { name = "hour", limit = 300, window = "1h", algorithm = "fixed_window" },
        { name = "rate", limit = 400, window = "1h" },
    ]
"#;

/// 16 tasks awaiting checks on a two-worker runtime, plus two plain threads blocking on
/// the same policy, all on one key: exactly the limit admitted.
#[test]
fn tasks_and_threads_on_one_key_admit_exactly_the_bound() {
    let server = RedisServer::start();
    let store = RedisStore::new(
        RedisTarget::Single(server.url()),
        RedisConfig::new("mixed").unwrap(),
    )
    .unwrap();
    let policy = Arc::new(
        Policy::from_toml(HOT_RULES, MonotonicClock::new())
            .unwrap()
            .store(store),
    );
    let admitted = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let policy = Arc::clone(&policy);
            let admitted = Arc::clone(&admitted);
            std::thread::spawn(move || {
                for _ in 0..60 {
                    if policy.allow("hot", "/", 1).unwrap().allowed() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let policy = Arc::clone(&policy);
                let admitted = Arc::clone(&admitted);
                tokio::spawn(async move {
                    for _ in 0..30 {
                        if policy.allow_async("hot", "/", 1).await.unwrap().allowed() {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
    for t in threads {
        t.join().unwrap();
    }
    // 16 × 30 + 2 × 60 = 600 requests for 300 permits.
    assert_eq!(admitted.load(Ordering::Relaxed), 300);
    let stats = policy.backend().stats();
    assert_eq!(stats.degraded, 0);
}

/// On a current-thread runtime, awaited checks leave the thread free while Redis answers:
/// a ticker task sharing the thread keeps running during a stream of checks, and a check
/// runs while another task holds a round trip open.
#[tokio::test(flavor = "current_thread")]
async fn a_single_threaded_runtime_keeps_running_while_checks_wait() {
    let server = RedisServer::start();
    let store = RedisStore::new(
        RedisTarget::Single(server.url()),
        RedisConfig::new("one-thread").unwrap(),
    )
    .unwrap();
    let policy = Arc::new(
        Policy::from_toml(HOT_RULES, MonotonicClock::new())
            .unwrap()
            .store(store),
    );
    let ticks = Arc::new(AtomicU64::new(0));
    let ticker = {
        let ticks = Arc::clone(&ticks);
        tokio::spawn(async move {
            loop {
                ticks.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        })
    };
    let checks: Vec<_> = (0..4)
        .map(|_| {
            let policy = Arc::clone(&policy);
            tokio::spawn(async move {
                let mut admitted = 0;
                for _ in 0..100 {
                    admitted += u64::from(policy.allow_async("k", "/", 1).await.unwrap().allowed());
                }
                admitted
            })
        })
        .collect();
    let mut admitted = 0;
    for check in checks {
        admitted += check.await.unwrap();
    }
    ticker.abort();
    assert_eq!(admitted, 300);
    // The ticker ran between the round trips: at least once per check that awaited Redis.
    assert!(
        ticks.load(Ordering::Relaxed) >= 400,
        "ticks {}",
        ticks.load(Ordering::Relaxed)
    );
}

/// A Redis that is not there: awaited checks answer by the failure policy (closed here,
/// with its retry time) exactly as blocking ones do, and never hang past the timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn awaited_checks_answer_by_the_failure_policy_when_redis_is_down() {
    let mut server = RedisServer::start();
    let url = server.url();
    server.kill();
    let config = RedisConfig::new("down")
        .unwrap()
        .with_connect_timeout(Duration::from_millis(200))
        .with_timeout(Duration::from_millis(200))
        .with_failure_policy(FailurePolicy::FailClosed {
            retry_after: Duration::from_secs(7),
        })
        .unwrap();
    let store = RedisStore::new(RedisTarget::Single(url), config).unwrap();
    let policy = Policy::from_toml(HOT_RULES, MonotonicClock::new())
        .unwrap()
        .store(store);
    for _ in 0..3 {
        let d = policy.allow_async("x", "/", 1).await.unwrap();
        assert!(!d.allowed());
        assert_eq!(d.decision.retry_after, Nanos::from_secs(7));
    }
    let stats = policy.backend().stats();
    assert_eq!(stats.redis_decisions, 0);
    assert!(stats.degraded >= 3);
}

/// A runtime built with neither timers nor I/O (`Builder::new_current_thread().build()`,
/// no `enable_all`): awaited checks still connect, decide, and time out into the failure
/// policy while the server is paused, because the call's timer, socket and reconnects
/// belong to the store's own runtime. A timer of the caller's runtime would panic here.
#[test]
fn a_runtime_without_timers_or_io_awaits_checks_and_their_timeouts() {
    let server = RedisServer::start();
    let config = RedisConfig::new("bare")
        .unwrap()
        .with_timeout(Duration::from_millis(300))
        .with_retry_backoff(Duration::from_millis(50))
        .with_failure_policy(FailurePolicy::FailClosed {
            retry_after: Duration::from_secs(3),
        })
        .unwrap();
    let store = RedisStore::new(RedisTarget::Single(server.url()), config).unwrap();
    let policy = Policy::from_toml(HOT_RULES, MonotonicClock::new())
        .unwrap()
        .store(store);
    let bare = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let admitted = bare.block_on(async {
        let mut admitted = 0;
        for _ in 0..400 {
            admitted += u64::from(policy.allow_async("k", "/", 1).await.unwrap().allowed());
        }
        admitted
    });
    assert_eq!(admitted, 300);
    assert_eq!(policy.backend().stats().degraded, 0);
    let _: String = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1000)
        .arg("ALL")
        .query(&mut server.connection())
        .unwrap();
    let started = std::time::Instant::now();
    let d = bare.block_on(policy.allow_async("other", "/", 1)).unwrap();
    assert!(!d.allowed());
    assert_eq!(d.decision.retry_after, Nanos::from_secs(3));
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(policy.backend().stats().degraded, 1);
}

/// A multi-threaded runtime of `workers` workers, and a policy of [`HOT_RULES`] on a store
/// whose I/O runs on it ([`RedisStore::on_runtime`]).
fn on_a_runtime(
    server: &RedisServer,
    workers: usize,
    prefix: &str,
) -> (
    tokio::runtime::Runtime,
    Arc<Policy<MonotonicClock, RedisStore>>,
) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap();
    let store = RedisStore::on_runtime(
        RedisTarget::Single(server.url()),
        RedisConfig::new(prefix)
            .unwrap()
            .with_timeout(Duration::from_secs(10)),
        runtime.handle().clone(),
    )
    .unwrap();
    let policy = Policy::from_toml(HOT_RULES, MonotonicClock::new())
        .unwrap()
        .store(store);
    (runtime, Arc::new(policy))
}

/// A store on the application's runtime ([`RedisStore::on_runtime`]): tasks awaiting
/// checks, tasks blocking on that runtime's own workers, plain threads blocking, and a
/// task of another (current-thread) runtime blocking, all on one key: exactly the limit
/// admitted, every decision made by Redis. Dropping the store leaves the runtime running.
#[test]
fn a_store_on_the_application_runtime_admits_exactly_the_bound_from_every_kind_of_caller() {
    let server = RedisServer::start();
    let (runtime, policy) = on_a_runtime(&server, 2, "given");
    let admitted = Arc::new(AtomicU64::new(0));
    let count = |allowed: bool, admitted: &AtomicU64| {
        if allowed {
            admitted.fetch_add(1, Ordering::Relaxed);
        }
    };
    // Plain threads: 2 × 40.
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (policy, admitted) = (Arc::clone(&policy), Arc::clone(&admitted));
            std::thread::spawn(move || {
                for _ in 0..40 {
                    count(policy.allow("hot", "/", 1).unwrap().allowed(), &admitted);
                }
            })
        })
        .collect();
    // A task of a current-thread runtime blocking: 40.
    let other = {
        let (policy, admitted) = (Arc::clone(&policy), Arc::clone(&admitted));
        std::thread::spawn(move || {
            let local = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            local.block_on(async {
                for _ in 0..40 {
                    count(policy.allow("hot", "/", 1).unwrap().allowed(), &admitted);
                }
            });
        })
    };
    runtime.block_on(async {
        // 12 tasks awaiting (× 20) and 2 tasks blocking their worker (× 40).
        let mut tasks: Vec<_> = (0..12)
            .map(|_| {
                let (policy, admitted) = (Arc::clone(&policy), Arc::clone(&admitted));
                tokio::spawn(async move {
                    for _ in 0..20 {
                        count(
                            policy.allow_async("hot", "/", 1).await.unwrap().allowed(),
                            &admitted,
                        );
                    }
                })
            })
            .collect();
        tasks.extend((0..2).map(|_| {
            let (policy, admitted) = (Arc::clone(&policy), Arc::clone(&admitted));
            tokio::spawn(async move {
                for _ in 0..40 {
                    count(policy.allow("hot", "/", 1).unwrap().allowed(), &admitted);
                }
            })
        }));
        for task in tasks {
            task.await.unwrap();
        }
    });
    for t in threads {
        t.join().unwrap();
    }
    other.join().unwrap();
    // 2 × 40 + 40 + 12 × 20 + 2 × 40 = 440 requests for 300 permits.
    assert_eq!(admitted.load(Ordering::Relaxed), 300);
    let stats = policy.backend().stats();
    assert_eq!(stats.degraded, 0);
    assert_eq!(stats.redis_decisions, 440);
    // The store does not own the runtime: dropping it (here, inside the runtime) leaves
    // the runtime running.
    runtime.block_on(async move {
        drop(policy);
        assert_eq!(tokio::spawn(async { 7 }).await.unwrap(), 7);
    });
}

/// A blocking check on the only worker of the runtime the store's I/O runs on: the worker
/// hands its other tasks on before it blocks, so the runtime still answers.
#[test]
fn a_blocking_check_on_the_only_worker_of_the_given_runtime_is_answered() {
    let server = RedisServer::start();
    let (runtime, policy) = on_a_runtime(&server, 1, "one-worker");
    // Watched from this thread: a starved runtime would wait forever, not time out.
    let (done, finished) = std::sync::mpsc::channel();
    let checks = {
        let policy = Arc::clone(&policy);
        runtime.spawn(async move {
            let mut admitted = 0u64;
            for _ in 0..310 {
                admitted += u64::from(policy.allow("k", "/", 1).unwrap().allowed());
            }
            let _ = done.send(admitted);
        })
    };
    let Ok(admitted) = finished.recv_timeout(Duration::from_secs(60)) else {
        // Not dropped: shutting a starved runtime down would wait for its blocked worker.
        std::mem::forget(runtime);
        panic!("the blocking checks were not answered in 60 s: the runtime starved");
    };
    runtime.block_on(checks).unwrap();
    assert_eq!(admitted, 300);
    assert_eq!(policy.backend().stats().degraded, 0);
}

/// A current-thread runtime cannot carry the store's I/O: refused with a typed error.
#[test]
fn a_current_thread_runtime_is_refused_for_the_store_io() {
    let local = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let built = RedisStore::on_runtime(
        RedisTarget::Single("redis://127.0.0.1:1".into()),
        RedisConfig::new("local").unwrap(),
        local.handle().clone(),
    );
    assert_eq!(
        built.err(),
        Some(tollgate_redis::BuildError::CurrentThreadRuntime)
    );
}
