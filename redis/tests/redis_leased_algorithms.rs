//! The leased store keeps every algorithm's promise (a real redis-server on loopback, two
//! stores standing for two processes): over every leasable algorithm, what the stores
//! admit stays within the bound of its family (windows: `limit + P × cap` per window; GCRA
//! and the token bucket: `burst + rate × Δ + P × cap` over any interval Δ, with a GCRA that
//! refills while leased); a caller's decisions at one instant never admit after a deny;
//! `remaining` counts what this process holds.

mod redis_support;

use std::cell::Cell;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis_support::server::RedisServer;
use tollgate::policy::{FnClock, Policy, RateLimitHeaders};
use tollgate::Nanos;
use tollgate_redis::{
    FailurePolicy, LeaseConfig, LeasedStore, RedisConfig, RedisStore, RedisTarget, TimeSource,
};

thread_local! {
    /// The instant this thread's last check read (each check reads its clock once).
    static LAST_READ: Cell<u64> = const { Cell::new(0) };
}

/// Unix time, remembered per thread: the instant each check was decided at (the stores
/// use the client's time, so Redis decides at it too).
fn recording_clock() -> FnClock<fn() -> Nanos> {
    fn now() -> Nanos {
        let ns = u64::try_from(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos(),
        )
        .unwrap();
        LAST_READ.with(|c| c.set(ns));
        Nanos::new(ns)
    }
    FnClock(now)
}

fn redis(server: &RedisServer, prefix: &str, source: TimeSource) -> RedisStore {
    RedisStore::new(
        RedisTarget::Single(server.url()),
        RedisConfig::new(prefix)
            .unwrap()
            .with_time_source(source)
            .with_timeout(Duration::from_secs(2))
            .with_retry_backoff(Duration::from_millis(20)),
    )
    .unwrap()
}

fn lease_config() -> LeaseConfig {
    LeaseConfig::new()
        .with_hot_rate(50)
        .with_max_lease(100)
        .with_share(0.1)
        .with_ttl(Duration::from_millis(300))
}

/// At one frozen instant, each of many clients is checked until well past its quota: its
/// decisions are admits, then denies, never an admit after a deny (the lease thread
/// taking the key's last permits while a check is at Redis must not turn a deny into an
/// admit at the same instant), and never more than its limit admitted.
#[test]
fn decisions_at_one_instant_never_admit_after_a_deny() {
    let server = RedisServer::start();
    let frozen = Nanos::from_secs(1_800_000_000);
    let policy = Policy::from_toml(
        r#"
        [[rules]]
        name = "client"
        limit = 100
        window = "3650d"
        algorithm = "gcra"
        "#,
        FnClock(move || frozen),
    )
    .unwrap()
    .store(
        LeasedStore::new(
            redis(&server, "frozen", TimeSource::Client),
            lease_config().with_slots(64),
        )
        .unwrap(),
    );
    let mut broken = Vec::new();
    for c in 0..40 {
        let client = format!("c{c}");
        let decisions: Vec<bool> = (0..160)
            .map(|_| policy.allow(&client, "/", 1).unwrap().allowed())
            .collect();
        let admitted = decisions.iter().filter(|a| **a).count();
        let first_deny = decisions.iter().position(|a| !a).unwrap_or(decisions.len());
        if decisions[first_deny..].iter().any(|a| *a) || admitted > 100 {
            broken.push(format!("{client}: {admitted} admitted, {decisions:?}"));
        }
    }
    let stats = policy.backend().stats();
    assert!(stats.leases > 0, "nothing was leased: {stats:?}");
    assert!(broken.is_empty(), "{broken:#?}");
}

/// The most a family's promise lets through, with leases, for `admitted` (sorted instants).
#[derive(Copy, Clone, Debug)]
enum Family {
    /// At most `limit + P × cap` in each window (aligned to Unix time).
    Windows { window: u64 },
    /// At most `limit + P × cap` in any interval one window long.
    Sliding { window: u64 },
    /// At most `burst + rate × Δ + P × cap` over any interval Δ (`rate` per ns as
    /// `limit / window`).
    Bucket { limit: u64, window: u64 },
}

/// The largest excess of `admitted` (sorted instants) over `family`'s bound with `quota`
/// (`limit`, or the burst, plus `P × cap`): 0 when it holds.
fn excess(family: Family, admitted: &[u64], quota: u64) -> u64 {
    let mut worst = 0u64;
    match family {
        Family::Windows { window } => {
            let mut i = 0;
            while i < admitted.len() {
                let w = admitted[i] / window;
                let n = admitted[i..]
                    .iter()
                    .take_while(|t| **t / window == w)
                    .count();
                worst = worst.max((n as u64).saturating_sub(quota));
                i += n;
            }
        }
        Family::Sliding { window } => {
            let mut from = 0;
            for (j, &t) in admitted.iter().enumerate() {
                while admitted[from] + window <= t {
                    from += 1;
                }
                worst = worst.max(((j - from + 1) as u64).saturating_sub(quota));
            }
        }
        Family::Bucket { limit, window } => {
            // count(i..=j) − rate·(t_j − t_i) ≤ quota for every i ≤ j: in units of
            // 1/window, (j − i + 1)·window − limit·(t_j − t_i) ≤ quota·window.
            let (limit, window) = (i128::from(limit), i128::from(window));
            let mut best_start = i128::MIN;
            for (j, &t) in admitted.iter().enumerate() {
                let t = i128::from(t);
                let j = j as i128;
                // The start i maximising window·(1 − i) + limit·t_i.
                best_start = best_start.max(window * (1 - j) + limit * t);
                let over = window * j + best_start - limit * t - i128::from(quota) * window;
                if over > 0 {
                    worst = worst.max(u64::try_from(over / window + 1).unwrap_or(u64::MAX));
                }
            }
        }
    }
    worst
}

/// Two stores (two processes' worth) of two threads each hammer one global key of every
/// leasable algorithm for a second and a bit: what they admit stays within the bound of
/// the algorithm's family, with leases taken and spent. The GCRA and the token bucket
/// refill while leased (300 per second, a burst of 50).
#[test]
fn every_leasable_algorithm_stays_within_its_familys_bound() {
    const P: u64 = 2;
    let server = RedisServer::start();
    let window = 1_000_000_000u64;
    let cases: [(&str, &str, Family); 5] = [
        ("fixed_window", "", Family::Windows { window }),
        ("sliding_window_counter", "", Family::Windows { window }),
        ("sliding_window_log", "", Family::Sliding { window }),
        ("gcra", "burst = 50", Family::Bucket { limit: 300, window }),
        (
            "token_bucket",
            "burst = 50",
            Family::Bucket { limit: 300, window },
        ),
    ];
    for (algorithm, extra, family) in cases {
        let rules = format!(
            "[[rules]]\nname = \"hot\"\nper = \"global\"\nlimit = 300\nwindow = \"1s\"\n\
             algorithm = \"{algorithm}\"\n{extra}\n"
        );
        let policies: Vec<_> = (0..P)
            .map(|_| {
                Policy::from_toml(&rules, recording_clock()).unwrap().store(
                    LeasedStore::new(
                        redis(&server, algorithm, TimeSource::Client),
                        lease_config(),
                    )
                    .unwrap(),
                )
            })
            .collect();
        let set = policies[0].rule_set();
        let tier = &set.rules()[0].tiers()[0];
        let limit = tier.algorithm().limit();
        let cap = policies[0]
            .backend()
            .config()
            .max_lease_for(limit, tier.max_cost());
        let until = Instant::now() + Duration::from_millis(1_300);
        let mut admitted: Vec<u64> = std::thread::scope(|s| {
            let runs: Vec<_> = policies
                .iter()
                .flat_map(|policy| [policy, policy])
                .map(|policy| {
                    s.spawn(move || {
                        let mut mine = Vec::new();
                        while Instant::now() < until {
                            if policy.allow("c", "/", 1).unwrap().allowed() {
                                mine.push(LAST_READ.with(Cell::get));
                            }
                        }
                        mine
                    })
                })
                .collect();
            runs.into_iter().flat_map(|r| r.join().unwrap()).collect()
        });
        admitted.sort_unstable();
        let local: u64 = policies
            .iter()
            .map(|p| p.backend().stats().local_checks)
            .sum();
        let over = excess(family, &admitted, limit + P * cap);
        println!(
            "{algorithm}: {} admitted, {local} from leases; bound {family:?} with {limit} + {P} x {cap}: excess {over}",
            admitted.len()
        );
        assert!(local > 0, "{algorithm}: nothing spent from a lease");
        assert!(
            admitted.len() as u64 >= limit,
            "{algorithm}: only {} admitted",
            admitted.len()
        );
        assert_eq!(over, 0, "{algorithm}: admitted beyond the bound");
    }
}

/// One global GCRA quota of 1 000 that never refills in a test's time: what is left is
/// exactly the limit less what was admitted.
const GLOBAL_1000: &str = r#"
[[rules]]
name = "all"
per = "global"
limit = 1000
window = "3650d"
algorithm = "gcra"
"#;

/// A peek (answered by Redis) counts what this process holds in its lease: with one
/// process, exactly what the fleet has left once no lease is on its way; and no decision
/// says more is left than is. (Before, a peek said less by what the lease held.)
#[test]
fn remaining_counts_the_permits_this_process_holds() {
    let server = RedisServer::start();
    let frozen = Nanos::from_secs(1_800_000_000);
    let policy = Policy::from_toml(GLOBAL_1000, FnClock(move || frozen))
        .unwrap()
        .store(
            LeasedStore::new(
                redis(&server, "remaining", TimeSource::Client),
                lease_config(),
            )
            .unwrap(),
        );
    let mut admitted = 0u64;
    for _ in 0..300 {
        let d = policy.allow("c", "/", 1).unwrap();
        assert!(d.allowed());
        admitted += 1;
        assert!(
            d.remaining() <= 1000 - admitted,
            "{} left after {admitted}",
            d.remaining()
        );
    }
    // Once a lease is in hand and none is on its way, a peek says exactly what is left
    // (counting its own request); while one is, never more.
    let truth = 1000 - admitted - 1;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let held = policy.backend().stats().held_permits;
        let left = policy.peek("c", "/", 1).unwrap().remaining();
        assert!(left <= truth, "{left} left, {truth} in truth");
        if held > 0 && left == truth {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{left} left, {truth} in truth, {held} held"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Redis gone, failing open: a peek's made-up answer (everything left) is not Redis' word,
/// so the permits the process holds are not added to it (they would report more left than
/// the limit).
#[test]
fn a_failure_policys_answer_never_counts_the_lease_in_hand() {
    let mut server = RedisServer::start();
    let store = RedisStore::new(
        RedisTarget::Single(server.url()),
        RedisConfig::new("failopen")
            .unwrap()
            .with_failure_policy(FailurePolicy::FailOpen)
            .unwrap()
            .with_timeout(Duration::from_millis(200))
            .with_retry_backoff(Duration::from_millis(20)),
    )
    .unwrap();
    let policy = Policy::from_toml(GLOBAL_1000, recording_clock())
        .unwrap()
        .store(LeasedStore::new(store, lease_config()).unwrap());
    let deadline = Instant::now() + Duration::from_secs(5);
    while policy.backend().stats().held_permits < 2 {
        assert!(policy.allow("c", "/", 1).unwrap().allowed());
        assert!(Instant::now() < deadline, "no lease in hand");
    }
    server.kill();
    let peeked = policy.peek("c", "/", 1).unwrap();
    assert!(
        peeked.remaining() <= 1000,
        "{} left of 1000",
        peeked.remaining()
    );
}

/// The integer parameter `key` of the first item of a `RateLimit-Policy` or `RateLimit`
/// field (`"name";k=V;k=V, …`).
fn param(field: &str, key: &str) -> Option<u64> {
    let first = field.split(", ").next()?;
    first
        .split(';')
        .skip(1)
        .find_map(|p| p.split_once('=').filter(|(k, _)| *k == key))
        .and_then(|(_, v)| v.parse().ok())
}

/// The headers of a leased store's decisions never contradict each other: `r ≤ q` on every
/// response of a trace that drains each leasable algorithm's tier and lets it refill part
/// way, whatever the lease in hand (the in-process and Redis stores' decisions are those of
/// the in-process store, whose headers `policy_headers.rs` pins for every algorithm).
#[test]
fn a_leased_stores_remaining_never_exceeds_the_advertised_quota() {
    let server = RedisServer::start();
    for (algorithm, extra, q) in [
        ("fixed_window", "", 5),
        ("sliding_window_counter", "", 5),
        ("sliding_window_log", "", 5),
        ("gcra", "burst = 10", 10),
        ("token_bucket", "burst = 10", 10),
    ] {
        let rules = format!(
            "[[rules]]\nname = \"t\"\nper = \"global\"\nlimit = 5\nwindow = \"1m\"\n\
             algorithm = \"{algorithm}\"\n{extra}\n"
        );
        let clock = tollgate::ManualClock::starting_at(Nanos::from_secs(1_800_000_000));
        let policy = Policy::from_toml(&rules, clock.clone()).unwrap().store(
            LeasedStore::new(
                redis(
                    &server,
                    &format!("advertised-{algorithm}"),
                    TimeSource::Client,
                ),
                lease_config().with_hot_rate(1),
            )
            .unwrap(),
        );
        let mut denied = 0;
        for step in 0..40 {
            if step == 2 {
                // Hot now: the lease is asked for in the background; the trace goes on
                // once it is in hand, so that its decisions come from it (a loaded host
                // may take a while).
                let deadline = Instant::now() + Duration::from_secs(20);
                while policy.backend().stats().held_permits == 0 {
                    assert!(Instant::now() < deadline, "{algorithm}: no lease came");
                    policy.peek("c", "/", 1).unwrap();
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            let d = policy.allow("c", "/", 1).unwrap();
            denied += u32::from(!d.allowed());
            let headers = RateLimitHeaders::from_policy_decision(&d);
            let field = |name: &str| {
                headers
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.to_owned())
                    .unwrap_or_default()
            };
            let case = format!("{algorithm}, step {step}");
            assert_eq!(param(&field("RateLimit-Policy"), "q"), Some(q), "{case}");
            let r = param(&field("RateLimit"), "r");
            assert!(r.is_some_and(|r| r <= q), "{case}: r = {r:?}");
            let pause = if step % 8 == 7 { 20 } else { 0 };
            clock.advance(Nanos::from_millis(100 + pause * 1_000));
        }
        assert!(denied > 0, "{algorithm}: the trace never drained the tier");
        let stats = policy.backend().stats();
        assert!(
            stats.local_checks > 0,
            "{algorithm}: nothing from a lease: {stats:?}"
        );
    }
}
