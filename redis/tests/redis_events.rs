//! A Redis store tells the operator when Redis fails: one `warn` event when a group of
//! keys starts backing off (once, until it recovers: not per call, nor per backoff, nor
//! flapping while one master of a cluster is down), an `info` event when it recovers,
//! and, with the `metrics` feature, every call answered by the failure policy in
//! `tollgate_redis_failures_total{cause}` and the `tollgate_redis_degraded{prefix}` gauge.
//! Redis is first a closed loopback port, then a real server killed and restarted; then
//! (with `metrics`) a leased store over it reports its checks, leases and permits as its
//! `stats()` counts them.
#![cfg(feature = "tracing")]

#[path = "../../std/tests/events_support/mod.rs"]
mod events_support;
mod redis_support;

use std::sync::Arc;

use events_support::Events;
use std::time::{Duration, Instant};

use tollgate::policy::Policy;
use tollgate::MonotonicClock;
use tollgate_redis::{FailurePolicy, RedisConfig, RedisStore, RedisTarget};
#[cfg(feature = "metrics")]
use tollgate_redis::{LeaseConfig, LeasedStore};

#[cfg(feature = "metrics")]
mod recorder {
    //! A `metrics` recorder that keeps each counter's total by name and labels.
    use super::*;
    use metrics::{Counter, CounterFn, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata};
    use metrics::{Recorder, SharedString, Unit};
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    pub(crate) type Totals = Arc<Mutex<BTreeMap<String, u64>>>;

    struct Handle(String, Totals);

    impl CounterFn for Handle {
        fn increment(&self, value: u64) {
            *self.1.lock().unwrap().entry(self.0.clone()).or_default() += value;
        }
        fn absolute(&self, value: u64) {
            self.1.lock().unwrap().insert(self.0.clone(), value);
        }
    }

    impl GaugeFn for Handle {
        fn increment(&self, _: f64) {}
        fn decrement(&self, _: f64) {}
        fn set(&self, value: f64) {
            // The gauge here is 0 or 1.
            self.1
                .lock()
                .unwrap()
                .insert(self.0.clone(), u64::from(value > 0.5));
        }
    }

    fn name(key: &Key) -> String {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        format!("{}{{{}}}", key.name(), labels.join(","))
    }

    #[derive(Default)]
    pub(crate) struct Collect(pub(crate) Totals);

    impl Recorder for Collect {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            Counter::from_arc(Arc::new(Handle(name(key), self.0.clone())))
        }
        fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::from_arc(Arc::new(Handle(name(key), self.0.clone())))
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }
}

/// A policy of one rule of `limit` a minute per client on a store of `target` and `prefix`
/// with `timeout` and `backoff`, failing open, without a deny cache.
fn fail_open(
    target: RedisTarget,
    prefix: &str,
    timeout: Duration,
    backoff: Duration,
    limit: u32,
) -> Policy<MonotonicClock, RedisStore> {
    let store = RedisStore::new(
        target,
        RedisConfig::new(prefix)
            .unwrap()
            .with_connect_timeout(Duration::from_secs(1))
            .with_timeout(timeout)
            .with_retry_backoff(backoff)
            .with_failure_policy(FailurePolicy::FailOpen)
            .unwrap()
            .with_deny_cache(0),
    )
    .unwrap();
    Policy::from_toml(
        &format!("[[rules]]\nname = \"default\"\nlimit = {limit}\nwindow = \"1m\"\n"),
        MonotonicClock::new(),
    )
    .unwrap()
    .store(store)
}

#[test]
fn a_redis_failure_is_told_once_until_it_recovers_and_every_degraded_call_counted() {
    let warnings = Arc::new(Events::at_least(tracing::Level::INFO));
    tracing::subscriber::set_global_default(Arc::clone(&warnings)).unwrap();
    #[cfg(feature = "metrics")]
    let totals = {
        let recorder = recorder::Collect::default();
        let totals = Arc::clone(&recorder.0);
        metrics::set_global_recorder(recorder).unwrap();
        totals
    };
    let store = RedisStore::new(
        // Nothing listens on port 1: every connection is refused.
        RedisTarget::Single("redis://127.0.0.1:1".into()),
        RedisConfig::new("events")
            .unwrap()
            .with_connect_timeout(Duration::from_secs(1))
            .with_timeout(Duration::from_secs(1))
            .with_retry_backoff(Duration::from_secs(600))
            .with_failure_policy(FailurePolicy::FailOpen)
            .unwrap(),
    )
    .unwrap();
    let closed = Policy::from_toml(
        "[[rules]]\nname = \"default\"\nlimit = 5\nwindow = \"1m\"\n",
        MonotonicClock::new(),
    )
    .unwrap()
    .store(store);
    for _ in 0..4 {
        // Failing open: admitted, though Redis never answered.
        assert!(closed.allow("acct", "/", 1).unwrap().allowed());
    }
    let stats = closed.backend().stats();
    assert_eq!(stats.degraded, 4, "{stats:?}");
    let told = warnings.seen();
    assert_eq!(told.len(), 1, "one warning for the backoff: {told:#?}");
    // With what the connection said: the operator reads why, not only a cause.
    assert!(
        told[0].contains("cause=Connection")
            && told[0].contains("error=")
            && told[0].to_lowercase().contains("refused")
            && told[0].contains("backoff_ms=600000"),
        "{}",
        told[0]
    );
    #[cfg(feature = "metrics")]
    assert_eq!(
        totals.lock().unwrap().clone(),
        std::collections::BTreeMap::from([
            // The policy's rule count, set as it was built.
            ("tollgate_policy_rules{}".to_owned(), 1),
            // Every decision counted; the failed clock sample counted, no round trip.
            ("tollgate_redis_clock_syncs_total{}".to_owned(), 1),
            ("tollgate_redis_decisions_total{}".to_owned(), 4),
            ("tollgate_redis_degraded{prefix=events}".to_owned(), 1),
            ("tollgate_redis_failures_total{cause=backoff}".to_owned(), 3),
            (
                "tollgate_redis_failures_total{cause=connection}".to_owned(),
                1
            ),
        ])
    );

    // A real server: answering, killed (degraded), restarted (answering again, told once).
    let mut server = redis_support::server::RedisServer::start();
    let live = fail_open(
        RedisTarget::Single(server.url()),
        "events-live",
        Duration::from_secs(1),
        Duration::from_millis(50),
        1000,
    );
    let served = |policy: &Policy<MonotonicClock, RedisStore>| {
        let before = policy.backend().stats().redis_decisions;
        assert!(policy.allow("acct", "/", 1).unwrap().allowed());
        policy.backend().stats().redis_decisions > before
    };
    assert!(served(&live), "Redis decides while it runs");
    server.kill();
    assert!(!served(&live), "answered by the failure policy once killed");
    #[cfg(feature = "metrics")]
    assert_eq!(
        totals
            .lock()
            .unwrap()
            .get("tollgate_redis_degraded{prefix=events-live}"),
        Some(&1)
    );
    server.restart();
    let recovered = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(25));
        served(&live)
    });
    assert!(recovered, "Redis decides again after the restart");
    // Told recovered once no call has failed for twice the backoff plus the timeout.
    let answers_again = |prefix: &str| {
        warnings
            .seen()
            .iter()
            .filter(|e| e.contains("Redis answers again") && e.contains(prefix))
            .count()
    };
    let started = Instant::now();
    while answers_again("prefix=\"events-live\"") == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "never told recovered"
        );
        assert!(served(&live));
        std::thread::sleep(Duration::from_millis(25));
    }
    #[cfg(feature = "metrics")]
    assert_eq!(
        totals
            .lock()
            .unwrap()
            .get("tollgate_redis_degraded{prefix=events-live}"),
        Some(&0)
    );
    let events = warnings.seen();
    let back: Vec<_> = events
        .iter()
        .filter(|e| e.contains("Redis answers again"))
        .collect();
    assert_eq!(back.len(), 1, "{events:#?}");
    assert!(back[0].contains("prefix=\"events-live\""), "{}", back[0]);

    #[cfg(feature = "metrics")]
    {
        // A leased store (its counters registered now, with the recorder installed): a hot
        // global key gets a lease, then checks are answered locally.
        let redis = RedisStore::new(
            RedisTarget::Single(server.url()),
            RedisConfig::new("events-leased")
                .unwrap()
                .with_timeout(Duration::from_secs(2)),
        )
        .unwrap();
        let config = LeaseConfig::new()
            .with_hot_rate(50)
            .with_max_lease(100)
            .with_share(0.1);
        let policy = Policy::from_toml(
            "[[rules]]\nname = \"all\"\nper = \"global\"\nlimit = 1000\nwindow = \"3650d\"\n",
            MonotonicClock::new(),
        )
        .unwrap()
        .store(LeasedStore::new(redis, config).unwrap());
        for _ in 0..10_000 {
            assert!(policy.allow("c", "/", 1).unwrap().allowed());
            if policy.backend().stats().local_checks >= 10 {
                break;
            }
        }
        let stats = policy.backend().stats();
        assert!(stats.local_checks >= 10 && stats.leases >= 1, "{stats:?}");
        // The Redis counters are the process's: the three stores' sums.
        let redis = [
            closed.backend().stats(),
            live.backend().stats(),
            stats.redis,
        ];
        let sum = |of: fn(&tollgate_redis::RedisStats) -> u64| redis.iter().map(of).sum::<u64>();
        let totals = totals.lock().unwrap().clone();
        let reported = |name: &str| totals.get(name).copied().unwrap_or(0);
        assert_eq!(
            reported("tollgate_lease_checks_total{answered=local}"),
            stats.local_checks
        );
        assert_eq!(
            reported("tollgate_lease_checks_total{answered=redis}"),
            stats.remote_checks
        );
        assert_eq!(reported("tollgate_lease_leases_total{}"), stats.leases);
        assert_eq!(
            reported("tollgate_lease_permits_total{fate=leased}"),
            stats.leased_permits
        );
        for (name, of) in [
            (
                "tollgate_redis_decisions_total{}",
                (|s: &tollgate_redis::RedisStats| s.decisions) as fn(&_) -> u64,
            ),
            ("tollgate_redis_script_decisions_total{}", |s| {
                s.redis_decisions
            }),
            ("tollgate_redis_round_trips_total{}", |s| s.round_trips),
            ("tollgate_redis_script_reloads_total{}", |s| {
                s.script_reloads
            }),
            ("tollgate_redis_clock_syncs_total{}", |s| s.clock_syncs),
        ] {
            assert_eq!(reported(name), sum(of), "{name}: {redis:?}");
        }
        assert!(reported("tollgate_redis_round_trips_total{}") > 0);
    }

    // A cluster with one master frozen (`SIGSTOP`) while the others answer: the store is
    // told degraded once and stays so while that master's keys keep failing (before, every
    // call another master answered told it recovered, and the next failure degraded again:
    // a flapping gauge, and an `info` and a `warn` per backoff), then recovers once.
    let cluster = redis_support::server::RedisCluster::start();
    let part = fail_open(
        RedisTarget::Cluster(cluster.urls()),
        "events-part",
        Duration::from_millis(200),
        Duration::from_millis(500),
        100_000,
    );
    let clients: Vec<String> = (0..12).map(|i| format!("client{i}")).collect();
    // Connected to every master, answered by each.
    for client in &clients {
        part.allow(client, "/", 1).unwrap();
    }
    let told = |what: &str| {
        warnings
            .seen()
            .iter()
            .filter(|e| e.contains(what) && e.contains("prefix=\"events-part\""))
            .count()
    };
    assert_eq!(told("Redis failed"), 0);
    cluster.nodes()[0].sigstop();
    let before = part.backend().stats();
    let frozen = Instant::now();
    while frozen.elapsed() < Duration::from_millis(2500) {
        for client in &clients {
            assert!(part.allow(client, "/", 1).unwrap().allowed());
        }
    }
    let during = part.backend().stats();
    cluster.nodes()[0].sigcont();
    assert!(
        during.redis_decisions > before.redis_decisions && during.degraded > before.degraded,
        "some calls answered by the other masters, some failed: {during:?}"
    );
    assert_eq!(told("Redis failed"), 1, "{:#?}", warnings.seen());
    assert_eq!(told("Redis answers again"), 0, "{:#?}", warnings.seen());
    #[cfg(feature = "metrics")]
    assert_eq!(
        totals
            .lock()
            .unwrap()
            .get("tollgate_redis_degraded{prefix=events-part}"),
        Some(&1)
    );
    let thawed = Instant::now();
    while told("Redis answers again") == 0 {
        assert!(
            thawed.elapsed() < Duration::from_secs(30),
            "never told recovered"
        );
        for client in &clients {
            part.allow(client, "/", 1).unwrap();
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    assert_eq!(told("Redis failed"), 1);
    #[cfg(feature = "metrics")]
    assert_eq!(
        totals
            .lock()
            .unwrap()
            .get("tollgate_redis_degraded{prefix=events-part}"),
        Some(&0)
    );
}
