//! The policy cases: a gateway's check of one request against three tiers (a client's
//! per-second burst and daily quota, and the endpoint's per-client limit) for 10 000 clients
//! in round robin:
//!
//! - `policy_3tiers_10k`: every check admitted;
//! - `policy_3tiers_10k_deny`: every check denied by every tier (each client exhausted its
//!   three limits during setup);
//! - `policy_3tiers_10k_reload` (a latency case: rows `policy_3tiers_10k_reload_p50` and
//!   `_p99`, in units `ns_p50` and `ns_p99`): every check admitted while another thread
//!   reloads the rules every 5 ms ([`RELOAD_EVERY`]), changing the endpoint tier's
//!   limit each time (so the reload builds a new store for that tier and carries every key
//!   over, converting its state). Each check is timed on its own (`Instant` before and
//!   after, the timer's own median cost subtracted). Paced, not back to back: a faster
//!   reload would otherwise run more reloads per check and report its own speed as the
//!   checks' latency.
//!
//! - `policy_log_10k`: one sliding-window-log tier (100 per 10 ms) for 10 000 clients, every
//!   check admitted (each client's log holds a handful of stamps): the log tiers' keyed
//!   table and per-key slot. governor has no sliding log; its column is one keyed GCRA
//!   limiter of the same rate, for scale.
//!
//! governor has no rules, tiers, all-or-nothing admission or reload; its column is the
//! nearest composition a governor user would write: three keyed limiters (foldhash, quanta)
//! checked one after another, none undone when a later one denies. In the deny case all
//! three are asked (a policy decision reports every tier, for headers; `&&` would stop at
//! the first refusal and ask one). In the reload case the three limiters sit behind an
//! `ArcSwap` that another thread refills with three new limiters back to back (governor
//! cannot change a quota in place; the new limiters start with no state). The floor has
//! no such cases.

use crate::direct_cases::governor_quota;
use crate::loops::keyed;
use crate::{CaseSpec, LatencySpec, Row, Scale, Schedule, TimedCase, Unit};
use arc_swap::ArcSwap;
use governor::clock::{QuantaClock, QuantaInstant};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::RateLimiter;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tollgate::policy::Policy;
use tollgate::TscClock;

/// Clients in the policy case.
pub const POLICY_CLIENTS: usize = 10_000;

/// The rules: every tier admits every check of the run (limits far above what a run asks).
pub const POLICY_RULES: &str = r#"
capacity = 20000

[[rules]]
name = "default"
[[rules.tiers]]
name = "burst"
limit = 1000000
window = "1s"
[[rules.tiers]]
name = "day"
limit = 1000000000
window = "1d"
algorithm = "fixed_window"

[[rules]]
name = "search"
endpoint = "/search"
limit = 100000
window = "1m"
algorithm = "sliding_window_counter"
"#;

/// The rules of the deny case: the same three tiers, each admitting one request per hour
/// or day, so that once every client has made one request, every tier denies it.
pub const POLICY_DENY_RULES: &str = r#"
capacity = 20000

[[rules]]
name = "default"
[[rules.tiers]]
name = "burst"
limit = 1
window = "1h"
[[rules.tiers]]
name = "day"
limit = 1
window = "1d"
algorithm = "fixed_window"

[[rules]]
name = "search"
endpoint = "/search"
limit = 1
window = "1h"
algorithm = "sliding_window_counter"
"#;

/// The timed policy cases, in report order.
pub fn specs() -> Vec<CaseSpec> {
    vec![
        CaseSpec::new("policy_3tiers_10k", |_| policy_case()),
        CaseSpec::new("policy_3tiers_10k_deny", |_| policy_deny_case()),
        CaseSpec::new("policy_log_10k", |_| policy_log_case()),
    ]
}

/// The latency policy cases, in report order.
pub fn latency_specs() -> Vec<LatencySpec> {
    vec![LatencySpec::new("policy_3tiers_10k_reload", reload_case)]
}

type GovernorKeyed = RateLimiter<
    String,
    DashMapStateStore<String, foldhash::fast::RandomState>,
    QuantaClock,
    NoOpMiddleware<QuantaInstant>,
>;

fn governor_keyed(per_ns: u64, burst: u32) -> GovernorKeyed {
    RateLimiter::dashmap_with_clock_and_hasher(
        governor_quota(per_ns, burst),
        QuantaClock::default(),
        foldhash::fast::RandomState::default(),
    )
}

fn clients() -> Arc<[String]> {
    (0..POLICY_CLIENTS)
        .map(|i| format!("client-{i:05}"))
        .collect::<Vec<_>>()
        .into()
}

fn policy(rules: &str) -> Policy<TscClock> {
    match Policy::from_toml(rules, TscClock::new()) {
        Ok(policy) => policy,
        Err(e) => panic!("the benchmark's rules are valid: {e}"),
    }
}

/// The governor column of the admitting cases: 10⁶/s (1 µs), 10⁹/day (86.4 µs), 10⁵/min
/// (600 µs).
struct GovernorTrio {
    burst: GovernorKeyed,
    day: GovernorKeyed,
    search: GovernorKeyed,
}

impl GovernorTrio {
    fn new() -> GovernorTrio {
        GovernorTrio {
            burst: governor_keyed(1_000, 1_000_000),
            day: governor_keyed(86_400, 1_000_000_000),
            search: governor_keyed(600_000, 100_000),
        }
    }

    fn check(&self, client: &String) -> bool {
        self.burst.check_key(client).is_ok()
            && self.day.check_key(client).is_ok()
            && self.search.check_key(client).is_ok()
    }
}

fn policy_case() -> TimedCase {
    let clients = clients();
    let policy = policy(POLICY_RULES);
    let tollgate = move |client: &String| {
        policy
            .allow(client, "/search", 1)
            .is_ok_and(|d| d.allowed())
    };
    let governor = GovernorTrio::new();
    let governor = move |client: &String| governor.check(client);
    for client in clients.iter() {
        black_box(tollgate(client));
        black_box(governor(client));
    }
    TimedCase::new("policy_3tiers_10k")
        .tollgate(keyed(clients.clone(), tollgate))
        .governor(keyed(clients, governor))
}

fn policy_deny_case() -> TimedCase {
    let clients = clients();
    let policy = policy(POLICY_DENY_RULES);
    let tollgate = move |client: &String| {
        policy
            .allow(client, "/search", 1)
            .is_ok_and(|d| d.allowed())
    };
    // The same three limits: 1/hour, 1/day, 1/hour.
    let hour = 3_600_000_000_000;
    let (burst, day, search) = (
        governor_keyed(hour, 1),
        governor_keyed(24 * hour, 1),
        governor_keyed(hour, 1),
    );
    let governor = move |client: &String| {
        // Every limiter is asked (see the module docs).
        let burst = burst.check_key(client).is_ok();
        let day = day.check_key(client).is_ok();
        let search = search.check_key(client).is_ok();
        burst && day && search
    };
    // Each client's first request takes its one permit of every tier; from then on every
    // check is refused by every tier.
    for client in clients.iter() {
        assert!(tollgate(client) && governor(client));
        assert!(!tollgate(client) && !governor(client));
    }
    TimedCase::new("policy_3tiers_10k_deny")
        .tollgate(keyed(clients.clone(), tollgate))
        .governor(keyed(clients, governor))
}

/// The rules of the log case: 100 per 10 ms, a sliding window log.
pub const POLICY_LOG_RULES: &str = r#"
capacity = 20000

[[rules]]
name = "default"
limit = 100
window = "10ms"
algorithm = "sliding_window_log"
"#;

fn policy_log_case() -> TimedCase {
    let clients = clients();
    let policy = policy(POLICY_LOG_RULES);
    let tollgate = move |client: &String| policy.allow(client, "/", 1).is_ok_and(|d| d.allowed());
    // 100 per 10 ms: one permit per 100 µs, a burst of 100.
    let gcra = governor_keyed(100_000, 100);
    let governor = move |client: &String| gcra.check_key(client).is_ok();
    for client in clients.iter() {
        black_box(tollgate(client));
        black_box(governor(client));
    }
    TimedCase::new("policy_log_10k")
        .tollgate(keyed(clients.clone(), tollgate))
        .governor(keyed(clients, governor))
}

/// Runs `check` over `clients` in round robin for about `batch` (resuming at `*pos`), timing
/// each call on its own; appends each latency in ns, less `overhead`, to `samples`.
fn sample_latencies(
    clients: &[String],
    pos: &mut usize,
    batch: Duration,
    overhead: u64,
    samples: &mut Vec<u64>,
    check: impl Fn(&String) -> bool,
) {
    let started = Instant::now();
    loop {
        for _ in 0..1024 {
            let client = &clients[*pos];
            *pos = (*pos + 1) % clients.len();
            let t0 = Instant::now();
            black_box(check(black_box(client)));
            let ns = t0.elapsed().as_nanos() as u64;
            samples.push(ns.saturating_sub(overhead));
        }
        if started.elapsed() >= batch {
            return;
        }
    }
}

/// The median cost of the timing itself (two `Instant` reads around nothing).
fn timer_overhead() -> u64 {
    let mut samples: Vec<u64> = (0..100_000)
        .map(|_| {
            let t0 = Instant::now();
            black_box(());
            t0.elapsed().as_nanos() as u64
        })
        .collect();
    samples.sort_unstable();
    samples[samples.len() / 2]
}

/// Runs `reload` back to back on another thread while `f` runs.
/// How often the reload case reloads (one reload, then a sleep until the next tick).
pub const RELOAD_EVERY: Duration = Duration::from_millis(5);

fn while_reloading<R: FnMut() + Send>(mut reload: R, f: impl FnOnce()) {
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let stop = &stop;
        scope.spawn(move || {
            let mut next = Instant::now();
            // Relaxed: a flag polled in a loop; nothing is published with it.
            while !stop.load(Ordering::Relaxed) {
                reload();
                next += RELOAD_EVERY;
                if let Some(wait) = next.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
            }
        });
        f();
        // Relaxed: see above.
        stop.store(true, Ordering::Relaxed);
    });
}

fn percentile(sorted: &[u64], p: usize) -> Option<f64> {
    (!sorted.is_empty()).then(|| sorted[(sorted.len() - 1) * p / 100] as f64)
}

fn reload_case(_: &Scale, schedule: Schedule) -> Vec<Row> {
    let clients = clients();
    let policy = policy(POLICY_RULES);
    // The endpoint tier's limit alternates, so each reload changes that tier.
    let changed = POLICY_RULES.replace("limit = 100000", "limit = 100001");
    assert_ne!(changed, POLICY_RULES);
    let texts = [POLICY_RULES.to_owned(), changed];
    let governor = ArcSwap::from_pointee(GovernorTrio::new());
    for client in clients.iter() {
        assert!(policy
            .allow(client, "/search", 1)
            .is_ok_and(|d| d.allowed()));
        assert!(governor.load().check(client));
    }
    let overhead = timer_overhead();
    let mut samples: [Vec<u64>; 2] = Default::default();
    let mut positions = [0usize; 2];
    let mut reloads = [0u64; 2];
    for round in 0..schedule.rounds {
        for step in 0..2 {
            let contender = (round + step) % 2;
            let pos = &mut positions[contender];
            let out = &mut samples[contender];
            let count = &mut reloads[contender];
            if contender == 0 {
                let mut next = 0;
                while_reloading(
                    || {
                        next ^= 1;
                        if let Err(e) = policy.reload_toml(&texts[next]) {
                            panic!("the benchmark's rules are valid: {e}");
                        }
                        *count += 1;
                    },
                    || {
                        sample_latencies(&clients, pos, schedule.batch, overhead, out, |c| {
                            policy.allow(c, "/search", 1).is_ok_and(|d| d.allowed())
                        })
                    },
                );
            } else {
                while_reloading(
                    || {
                        governor.store(Arc::new(GovernorTrio::new()));
                        *count += 1;
                    },
                    || {
                        sample_latencies(&clients, pos, schedule.batch, overhead, out, |c| {
                            governor.load().check(c)
                        })
                    },
                );
            }
        }
    }
    eprintln!(
        "  reloads during the timed checks: tollgate {}, governor {}",
        reloads[0], reloads[1]
    );
    let [mut tollgate, mut governor] = samples;
    tollgate.sort_unstable();
    governor.sort_unstable();
    [(Unit::NsP50, 50), (Unit::NsP99, 99)]
        .into_iter()
        .map(|(unit, p)| Row {
            name: format!("policy_3tiers_10k_reload_p{p}"),
            unit,
            values: [percentile(&tollgate, p), percentile(&governor, p), None],
        })
        .collect()
}
