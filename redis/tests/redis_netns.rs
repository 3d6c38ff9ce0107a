//! A fleet on a real network (issue 31): processes in their own network namespaces reach
//! one redis-server across veth pairs, through a delaying TCP proxy (this kernel has no
//! `netem`), at round trips of 0.5 ms and 2 ms. `netns_fleet` (ignored by default: it needs
//! root and `ip netns`; `scripts/stages/netns.sh` runs it) measures, at each round trip,
//! the decisions per second of a fleet of `P` processes each checking one hot global key
//! as fast as it can (a denied check retries after 100 µs), on the plain `RedisStore` and
//! on `LeasedStore`: with a limit of 5 × 10⁸ per second that never binds (what a process
//! serves), with a fixed window (20 000 per 1 s) and with GCRA (20 000 per second, burst
//! 2 000), and checks the admitted totals against the bound:
//!
//! - fixed window: every window admits at most `limit + P × cap` (`limit` on the plain
//!   store), `cap` being `LeaseConfig::max_lease_for` of the tier (what one process holds
//!   at most);
//! - GCRA: every interval `Δ` (in 10 ms buckets, `Δ` rounded up to whole buckets) admits
//!   at most `burst + rate × Δ + P × cap` (no `P × cap` on the plain store).
//!
//! Then a partition, on each store and algorithm at the last round trip: every process but
//! the last has its link set down (`ip link set … down`) for a few seconds, then up. The
//! cut processes keep checking, except process 1 (with three processes or more), which
//! checks 1 000 times per second and is idle while cut, so it goes idle holding part of a
//! lease that outlives its idle time: its give-back fails until the heal. Checked: the
//! failure policy (fail closed, the default) answered the cut processes that kept checking
//! (their stores count degraded calls); while cut they admitted nothing on the plain store
//! and at most one lease's worth (`cap`) on the leased store; every cut process had Redis
//! decisions again after the heal; every window or interval of the run, the partition and
//! after it included, is within the bound; and no lease is lost uncounted: once a
//! leased process has stopped checking and nothing is in transit, the `LeaseStats`
//! identity holds, `local + held + returned + lost ≤ leased ≤ local + held + returned +
//! lost + unknown` (every permit leased was spent by a local check, is held, was given
//! back or counted lost; a give-back whose outcome Redis never told counts as unknown).
//!
//! Only counts and bounds are asserted, never times; the decisions per second, round
//! trips and measured PING times are printed as a table (docs/benchmarks.md quotes one).
//!
//! ## How it runs
//!
//! Redis runs in the root namespace on loopback, unreachable from the fleet's namespaces
//! except through the proxies (one per process, on the root side of its veth pair, each
//! direction delayed by half the round trip). The test binary spawns itself in each
//! namespace (`ip netns exec NS <this binary> --exact netns_child`); `netns_child` does the
//! work when `TOLLGATE_NETNS_ROLE` is set and returns at once otherwise. Sizes:
//! `TOLLGATE_NETNS_PROCESSES` (default 3, at least 2), `TOLLGATE_NETNS_SECS` (each
//! measured run, default 3), `TOLLGATE_NETNS_RTTS_US` (default `500,2000`),
//! `TOLLGATE_NETNS_PARTITION_SECS` (default 3; the run has 2 s before it and
//! `TOLLGATE_NETNS_HEAL_SECS`, default 5, after it: keep it longer than the partition, as a
//! cut connection may wait for TCP's next retransmission, whose interval doubles while
//! the link is down).

#[path = "redis_support/delay_proxy.rs"]
mod delay_proxy;
#[path = "redis_support/netns.rs"]
mod netns;
mod redis_support;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use delay_proxy::DelayProxy;
use netns::Netns;
use redis_support::server::RedisServer;
use tollgate::policy::{Policy, Store};
use tollgate::{Clock, MonotonicClock};
use tollgate_redis::{LeaseConfig, LeasedStore, RedisConfig, RedisStore, RedisTarget, TimeSource};

/// Both algorithms' limit per second.
const LIMIT: u64 = 20_000;
/// The limit of [`Alg::Unlimited`].
const UNLIMITED: u64 = 500_000_000;
/// GCRA's burst.
const BURST: u64 = 2_000;
/// The buckets decisions are counted in (by the `now` they were decided at), ns.
const BUCKET: u64 = 10_000_000;
const SEC: u64 = 1_000_000_000;
/// The checks per second of the process that is idle while cut (it holds part of a lease:
/// 100 ms of this rate).
const IDLE_HOLDER_PACE: u64 = 1_000;
/// A denied client retries after this (not in a busy loop: the machine has two cores).
const DENIED_BACKOFF: Duration = Duration::from_micros(100);
/// How the test binary runs one of the fleet's processes.
const CHILD_ARGS: [&str; 5] = [
    "--exact",
    "netns_child",
    "--nocapture",
    "--test-threads",
    "1",
];

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Alg {
    FixedWindow,
    Gcra,
    /// A fixed window of 5 × 10⁸ per second, never reached: what a process serves when the
    /// limit does not bind.
    Unlimited,
}

impl Alg {
    fn name(self) -> &'static str {
        match self {
            Alg::FixedWindow => "fixed_window",
            Alg::Gcra => "gcra",
            Alg::Unlimited => "unlimited",
        }
    }

    /// The limit per second.
    fn limit(self) -> u64 {
        match self {
            Alg::FixedWindow | Alg::Gcra => LIMIT,
            Alg::Unlimited => UNLIMITED,
        }
    }

    fn parse(s: &str) -> Alg {
        match s {
            "fixed_window" => Alg::FixedWindow,
            "gcra" => Alg::Gcra,
            "unlimited" => Alg::Unlimited,
            other => panic!("unknown algorithm {other}"),
        }
    }
}

/// The hot key's rule (`/hot`, one global key) and a per-client rule with room to spare
/// that warms the connection up before the run (`/warm`).
fn rules(alg: Alg) -> String {
    let hot = match alg {
        Alg::FixedWindow => {
            format!("limit = {LIMIT}\nwindow = \"1s\"\nalgorithm = \"fixed_window\"")
        }
        Alg::Gcra => format!("limit = {LIMIT}\nwindow = \"1s\"\nburst = {BURST}"),
        Alg::Unlimited => {
            format!("limit = {UNLIMITED}\nwindow = \"1s\"\nalgorithm = \"fixed_window\"")
        }
    };
    format!(
        r#"
        [[rules]]
        name = "hot"
        endpoint = "/hot"
        per = "global"
        {hot}

        [[rules]]
        name = "warm"
        endpoint = "/warm"
        limit = 1000000
        window = "1s"
        algorithm = "fixed_window"
        "#
    )
}

/// The fleet test's leases: hot from 50 checks per second, a lease covers 100 ms of the
/// local rate, at most 200 permits and a fifth of the limit, reviewed every 500 ms.
fn lease_config() -> LeaseConfig {
    LeaseConfig::new()
        .with_hot_rate(50)
        .with_max_lease(200)
        .with_share(0.2)
        .with_horizon(Duration::from_millis(100))
        .with_ttl(Duration::from_millis(500))
}

/// Client time (the processes share the machine's clock, so windows agree with the
/// buckets counted here), the default timeout (50 ms) and failure policy (fail closed).
fn redis_store(url: &str, prefix: &str) -> RedisStore {
    RedisStore::new(
        RedisTarget::Single(url.to_owned()),
        RedisConfig::new(prefix)
            .unwrap()
            .with_time_source(TimeSource::Client),
    )
    .unwrap()
}

/// The most one process holds of the hot key: `max_lease_for(limit, max_cost)` of its tier.
fn cap_of(alg: Alg) -> u64 {
    let policy = Policy::from_toml(&rules(alg), MonotonicClock::new())
        .unwrap()
        .store(
            LeasedStore::new(redis_store("redis://127.0.0.1:1", "cap"), lease_config()).unwrap(),
        );
    let set = policy.rule_set();
    let tier = &set
        .rules()
        .iter()
        .find(|r| r.name() == "hot")
        .expect("rule")
        .tiers()[0];
    policy
        .backend()
        .config()
        .max_lease_for(tier.algorithm().limit(), tier.max_cost())
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The median of 21 `PING`s on a fresh connection to `url`, µs.
fn ping_rtt_us(url: &str) -> u64 {
    let client = redis::Client::open(url).unwrap();
    let mut con = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .expect("connect through the proxy");
    let mut rtts: Vec<u64> = (0..21)
        .map(|_| {
            let began = Instant::now();
            let _: String = redis::cmd("PING").query(&mut con).expect("PING");
            began.elapsed().as_micros() as u64
        })
        .collect();
    rtts.sort_unstable();
    rtts[rtts.len() / 2]
}

/// What one process decided: per bucket (admitted, denied), and samples of its store's
/// (degraded calls, Redis decisions) per bucket.
#[derive(Debug, Default)]
struct Tally {
    buckets: BTreeMap<u64, (u64, u64)>,
    samples: BTreeMap<u64, (u64, u64)>,
    errors: u64,
    /// Permits held when an idle span began.
    idle_held: Option<u64>,
}

/// Checks the hot key from `start` to `until` (Unix ns) as fast as it can; a sampler
/// thread reads the store's counters every 5 ms.
fn drive<S: Store + Sync>(
    policy: &Policy<MonotonicClock, S>,
    sample: &(dyn Fn() -> (u64, u64) + Sync),
    held: &dyn Fn() -> u64,
    start: u64,
    until: u64,
) -> Tally {
    // Checks per second (0: as fast as it can), and a span without checks (Unix ns).
    let pace = env_or("TOLLGATE_NETNS_PACE", 0);
    let idle: Option<(u64, u64)> = std::env::var("TOLLGATE_NETNS_IDLE").ok().map(|v| {
        let (from, to) = v.split_once(',').expect("TOLLGATE_NETNS_IDLE: from,to");
        (from.parse().unwrap(), to.parse().unwrap())
    });
    let clock = policy.clock();
    while clock.now().as_u64() < start {
        let left = start - clock.now().as_u64().min(start);
        std::thread::sleep(Duration::from_nanos(left.min(1_000_000)));
    }
    std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut samples = BTreeMap::new();
            loop {
                let now = clock.now().as_u64();
                samples.insert((now - start) / BUCKET, sample());
                if now >= until {
                    return samples;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        let mut t = Tally::default();
        let mut sent = 0;
        loop {
            let now = clock.now();
            if now.as_u64() >= until {
                break;
            }
            if let Some((_, to)) = idle.filter(|&(from, to)| (from..to).contains(&now.as_u64())) {
                // Idle: what it holds now stays in hand until the span ends.
                if t.idle_held.is_none() {
                    t.idle_held = Some(held());
                }
                std::thread::sleep(Duration::from_nanos((to - now.as_u64()).min(1_000_000)));
                // The pace resumes from the span's end (no catching up).
                sent = (to - start) * pace / SEC;
                continue;
            }
            if pace > 0 {
                let due = (now.as_u64() - start) * pace / SEC + 1;
                if sent >= due {
                    std::thread::sleep(Duration::from_micros(200));
                    continue;
                }
                sent += 1;
            }
            let e = t
                .buckets
                .entry((now.as_u64() - start) / BUCKET)
                .or_default();
            match policy.allow_at("any", "/hot", 1, now) {
                Ok(d) if d.allowed() => e.0 += 1,
                Ok(_) => {
                    e.1 += 1;
                    std::thread::sleep(DENIED_BACKOFF);
                }
                Err(err) => {
                    if t.errors == 0 {
                        eprintln!("check failed: {err}");
                    }
                    t.errors += 1;
                    std::thread::sleep(DENIED_BACKOFF);
                }
            }
        }
        t.samples = sampler.join().unwrap();
        t
    })
}

/// One process of the fleet (see the module docs): does nothing unless
/// `TOLLGATE_NETNS_ROLE` is set (`plain` or `leased`).
#[test]
fn netns_child() {
    let Ok(role) = std::env::var("TOLLGATE_NETNS_ROLE") else {
        return;
    };
    let url = env("TOLLGATE_NETNS_URL");
    let prefix = env("TOLLGATE_NETNS_PREFIX");
    let alg = Alg::parse(&env("TOLLGATE_NETNS_ALG"));
    let start: u64 = env("TOLLGATE_NETNS_START").parse().unwrap();
    let until: u64 = env("TOLLGATE_NETNS_UNTIL").parse().unwrap();
    let out = PathBuf::from(env("TOLLGATE_NETNS_OUT"));
    let mut text = String::new();
    writeln!(text, "rtt_us {}", ping_rtt_us(&url)).unwrap();
    let policy = Policy::from_toml(&rules(alg), MonotonicClock::new()).unwrap();
    let store = redis_store(&url, &prefix);
    let tally = if role == "leased" {
        let policy = policy.store(LeasedStore::new(store, lease_config()).unwrap());
        // Connects and loads the functions before the run.
        assert!(policy.allow("warm", "/warm", 1).unwrap().allowed());
        let sample = || {
            let s = policy.backend().stats();
            (s.redis.degraded, s.redis.redis_decisions)
        };
        let held = || policy.backend().stats().held_permits;
        let tally = drive(&policy, &sample, &held, start, until);
        // Stopped checking: wait (10 s at most) until nothing is in transit and the
        // counters are still, then read them.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut last = policy.backend().stats();
        loop {
            std::thread::sleep(Duration::from_millis(50));
            let now = policy.backend().stats();
            if (now == last && now.unsettled_permits == 0) || Instant::now() > deadline {
                last = now;
                break;
            }
            last = now;
        }
        let s = last;
        writeln!(
            text,
            "leased {} {} {} {} {} {} {} {} {} {} {} {} {}",
            s.local_checks,
            s.remote_checks,
            s.leases,
            s.leased_permits,
            s.returned_permits,
            s.lost_permits,
            s.unknown_permits,
            s.unsettled_permits,
            s.held_permits,
            s.redis.round_trips,
            s.redis.degraded,
            s.redis.redis_decisions,
            s.redis.deny_cache_hits,
        )
        .unwrap();
        // Dropping the store returns the leases in hand.
        let dropping = Instant::now();
        drop(policy);
        writeln!(text, "dropped {}", dropping.elapsed().as_millis()).unwrap();
        tally
    } else {
        let policy = policy.store(store);
        assert!(policy.allow("warm", "/warm", 1).unwrap().allowed());
        let sample = || {
            let s = policy.backend().stats();
            (s.degraded, s.redis_decisions)
        };
        let tally = drive(&policy, &sample, &|| 0, start, until);
        let s = policy.backend().stats();
        writeln!(
            text,
            "plain {} {} {} {} {}",
            s.decisions, s.redis_decisions, s.round_trips, s.degraded, s.deny_cache_hits
        )
        .unwrap();
        tally
    };
    for (b, (a, d)) in &tally.buckets {
        writeln!(text, "b {b} {a} {d}").unwrap();
    }
    for (b, (degraded, decided)) in &tally.samples {
        writeln!(text, "s {b} {degraded} {decided}").unwrap();
    }
    writeln!(text, "errors {}", tally.errors).unwrap();
    if let Some(held) = tally.idle_held {
        writeln!(text, "idle_held {held}").unwrap();
    }
    let tmp = out.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, &out).unwrap();
}

/// One process's report, parsed.
#[derive(Debug, Default)]
struct Report {
    rtt_us: u64,
    tally: Tally,
    /// The plain store's decisions, Redis decisions, round trips, degraded, deny-cache hits.
    plain: Option<[u64; 5]>,
    /// The leased store's local, remote, leases, leased, returned, lost, unknown,
    /// unsettled, held, round trips, degraded, Redis decisions, deny-cache hits.
    leased: Option<[u64; 13]>,
    dropped_ms: Option<u64>,
}

fn parse_report(text: &str) -> Report {
    let mut r = Report::default();
    for line in text.lines() {
        let mut words = line.split(' ');
        let kind = words.next().unwrap();
        let n: Vec<u64> = words.map(|w| w.parse().unwrap()).collect();
        match kind {
            "rtt_us" => r.rtt_us = n[0],
            "b" => {
                r.tally.buckets.insert(n[0], (n[1], n[2]));
            }
            "s" => {
                r.tally.samples.insert(n[0], (n[1], n[2]));
            }
            "errors" => r.tally.errors = n[0],
            "idle_held" => r.tally.idle_held = Some(n[0]),
            "plain" => r.plain = Some(n.try_into().unwrap()),
            "leased" => r.leased = Some(n.try_into().unwrap()),
            "dropped" => r.dropped_ms = Some(n[0]),
            other => panic!("unknown line {other:?}"),
        }
    }
    r
}

/// Kills the fleet's processes still running when dropped (a failed test).
struct Fleet(Vec<Child>);

impl Drop for Fleet {
    fn drop(&mut self) {
        for c in &mut self.0 {
            if c.try_wait().ok().flatten().is_none() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// A partition: how long before, during and after it, s.
#[derive(Copy, Clone, Debug)]
struct Cut {
    before: u64,
    down: u64,
    after: u64,
}

/// One run's figures, for the table.
struct Row {
    rtt_us: u64,
    measured_us: u64,
    leased: bool,
    alg: Alg,
    secs: f64,
    decisions: u64,
    admitted: u64,
    round_trips: u64,
    /// The largest overshoot (admitted beyond the limit, or beyond `burst + rate × Δ`),
    /// and what the bound allows (`P × cap`).
    worst: (i64, u64),
    note: String,
}

/// Everything a run needs.
struct Setup<'a> {
    net: &'a Netns,
    proxies: &'a [DelayProxy],
    exe: &'a Path,
    dir: &'a Path,
    rtt_us: u64,
}

/// Runs the fleet once and checks it; the failures go to `failures`.
fn run(
    setup: &Setup<'_>,
    leased: bool,
    alg: Alg,
    secs: u64,
    cut: Option<Cut>,
    failures: &mut Vec<String>,
) -> Row {
    let processes = setup.proxies.len();
    let clock = MonotonicClock::new();
    let total = cut.map_or(secs, |c| c.before + c.down + c.after);
    // At least 1.5 s for the processes to start and connect; windows start on the second.
    let start = (clock.now().as_u64() + 1_500_000_000).div_ceil(SEC) * SEC;
    let until = start + total * SEC;
    let store = if leased { "leased" } else { "plain" };
    let label = format!(
        "{} µs {store} {}{}",
        setup.rtt_us,
        alg.name(),
        if cut.is_some() { " partition" } else { "" }
    );
    let prefix = format!("ns{}{store}{}{}", setup.rtt_us, alg.name(), cut.is_some());
    let out = |i: usize| setup.dir.join(format!("{prefix}-{i}.out"));
    // Every process but the last is cut; with three or more, process 1 is paced (so it
    // holds part of a lease) and idle while cut: its lease outlives its idle time and its
    // review, which cannot give the permits back until the heal.
    let cut_procs = processes - 1;
    let idle_holder = (cut.is_some() && processes >= 3).then_some(1);
    let idle = cut.map(|c| {
        let from = start + c.before * SEC;
        (from, from + c.down * SEC)
    });
    let mut fleet = Fleet(
        (0..processes)
            .map(|i| {
                let log =
                    std::fs::File::create(setup.dir.join(format!("{prefix}-{i}.log"))).unwrap();
                let mut cmd = setup.net.command(i, setup.exe);
                cmd.args(CHILD_ARGS)
                    .env("TOLLGATE_NETNS_ROLE", store)
                    .env(
                        "TOLLGATE_NETNS_URL",
                        format!("redis://{}", setup.proxies[i].addr()),
                    )
                    .env("TOLLGATE_NETNS_PREFIX", &prefix)
                    .env("TOLLGATE_NETNS_ALG", alg.name())
                    .env("TOLLGATE_NETNS_START", start.to_string())
                    .env("TOLLGATE_NETNS_UNTIL", until.to_string())
                    .env("TOLLGATE_NETNS_OUT", out(i))
                    .env_remove("TOLLGATE_NETNS_PACE")
                    .env_remove("TOLLGATE_NETNS_IDLE");
                if idle_holder == Some(i) {
                    let (from, to) = idle.expect("a cut");
                    cmd.env("TOLLGATE_NETNS_PACE", IDLE_HOLDER_PACE.to_string())
                        .env("TOLLGATE_NETNS_IDLE", format!("{from},{to}"));
                }
                cmd.stdin(Stdio::null())
                    .stdout(Stdio::from(log.try_clone().unwrap()))
                    .stderr(Stdio::from(log));
                cmd.spawn().expect("spawn a fleet process")
            })
            .collect(),
    );
    // The buckets strictly inside the partition: after the links were down, before they
    // were set up again.
    let mut cut_buckets = None;
    if let Some(c) = cut {
        let at = start + c.before * SEC;
        while clock.now().as_u64() < at {
            std::thread::sleep(Duration::from_millis(1));
        }
        for i in 0..cut_procs {
            setup.net.set_link(i, false);
        }
        let down = clock.now().as_u64();
        let at = at + c.down * SEC;
        while clock.now().as_u64() < at {
            std::thread::sleep(Duration::from_millis(1));
        }
        let up = clock.now().as_u64();
        for i in 0..cut_procs {
            setup.net.set_link(i, true);
        }
        println!(
            "{label}: links of processes 0..{cut_procs} down at +{:.3} s, up at +{:.3} s",
            (down - start) as f64 / 1e9,
            (up - start) as f64 / 1e9
        );
        cut_buckets = Some(((down - start) / BUCKET + 1, (up - start) / BUCKET));
    }
    let deadline = Instant::now() + Duration::from_secs(total + 60);
    for (i, c) in fleet.0.iter_mut().enumerate() {
        loop {
            if let Some(status) = c.try_wait().unwrap() {
                let log = std::fs::read_to_string(setup.dir.join(format!("{prefix}-{i}.log")))
                    .unwrap_or_default();
                assert!(status.success(), "{label}: process {i}: {status}\n{log}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{label}: process {i} did not exit"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    drop(fleet);
    let reports: Vec<Report> = (0..processes)
        .map(|i| {
            let text = std::fs::read_to_string(out(i))
                .unwrap_or_else(|e| panic!("{label}: process {i} wrote no counts: {e}"));
            parse_report(&text)
        })
        .collect();
    let mut fail = |msg: String| {
        println!("{label}: FAILED: {msg}");
        failures.push(format!("{label}: {msg}"));
    };
    // The fleet's admitted count per bucket.
    let buckets = total * SEC / BUCKET;
    let mut admitted = vec![0u64; buckets as usize];
    let mut decisions = 0;
    for r in &reports {
        if r.tally.errors > 0 {
            fail(format!("{} checks returned an error", r.tally.errors));
        }
        for (&b, &(a, d)) in &r.tally.buckets {
            admitted[b as usize] += a;
            decisions += a + d;
        }
    }
    let cap = if leased { cap_of(alg) } else { 0 };
    let p = processes as u64;
    // The overshoot: what a window (an interval) admitted beyond the limit (burst + rate ×
    // Δ), at its largest; the bound allows `P × cap` (nothing on the plain store).
    let allowed = p * cap;
    let mut overshoot = i64::MIN;
    match alg {
        Alg::FixedWindow | Alg::Unlimited => {
            for (w, window) in admitted.chunks((SEC / BUCKET) as usize).enumerate() {
                let sum: u64 = window.iter().sum();
                let over = sum as i64 - alg.limit() as i64;
                overshoot = overshoot.max(over);
                if over > allowed as i64 {
                    fail(format!(
                        "window +{w} admitted {sum} > {} + {allowed}",
                        alg.limit()
                    ));
                }
            }
        }
        Alg::Gcra => {
            // Every interval of whole buckets [a, b]: Δ = (b − a + 1) buckets (the
            // decisions' instants lie within it).
            let mut prefix_sum = vec![0u64; admitted.len() + 1];
            for (i, a) in admitted.iter().enumerate() {
                prefix_sum[i + 1] = prefix_sum[i] + a;
            }
            let mut reported = 0;
            for a in 0..admitted.len() {
                for b in a..admitted.len() {
                    let sum = prefix_sum[b + 1] - prefix_sum[a];
                    let delta = (b - a + 1) as u64 * BUCKET;
                    let base = BURST + LIMIT * delta / SEC;
                    let over = sum as i64 - base as i64;
                    overshoot = overshoot.max(over);
                    if over > allowed as i64 && reported < 5 {
                        reported += 1;
                        fail(format!(
                            "buckets {a}..={b} ({} ms) admitted {sum} > {base} + {allowed}",
                            delta / 1_000_000
                        ));
                    }
                }
            }
        }
    }
    let mut round_trips = 0;
    let mut notes = Vec::new();
    for (i, r) in reports.iter().enumerate() {
        let (own_admitted, own_denied) = r
            .tally
            .buckets
            .values()
            .fold((0, 0), |(a, d), &(x, y)| (a + x, d + y));
        let degraded = match (r.plain, r.leased) {
            (Some([decided, redis, trips, degraded, hits]), _) => {
                round_trips += trips;
                println!(
                    "{label}: process {i}: ping {} µs, {own_admitted} admitted, {own_denied} \
                     denied; {decided} decisions, {redis} by Redis, {trips} round trips, \
                     {degraded} degraded, {hits} deny-cache hits",
                    r.rtt_us
                );
                degraded
            }
            (_, Some(s)) => {
                let [local, remote, leases, leased_p, returned, lost, unknown, unsettled, held, trips, degraded, redis, hits] =
                    s;
                round_trips += trips;
                println!(
                    "{label}: process {i}: ping {} µs, {own_admitted} admitted, {own_denied} \
                     denied; {local} local checks, {remote} remote; {leases} leases: {leased_p} \
                     permits leased, {returned} returned, {lost} lost, {unknown} unknown, \
                     {held} held, {unsettled} unsettled; {trips} round trips, {degraded} \
                     degraded, {redis} Redis decisions, {hits} deny-cache hits; store dropped \
                     in {} ms",
                    r.rtt_us,
                    r.dropped_ms.unwrap_or(0)
                );
                // No lease lost uncounted (see the module docs).
                let accounted = local + held + returned + lost;
                if unsettled != 0 || leased_p < accounted || leased_p > accounted + unknown {
                    fail(format!(
                        "process {i}: leased {leased_p} vs local {local} + held {held} + returned \
                         {returned} + lost {lost} (unknown {unknown}, unsettled {unsettled})"
                    ));
                }
                // (The idle holder checks slowly against a key the others spend: it may
                // never have been leased.)
                if (leases == 0 || local == 0) && idle_holder != Some(i) {
                    fail(format!(
                        "process {i} took no lease or served no check locally"
                    ));
                }
                degraded
            }
            _ => panic!("{label}: process {i} reported no stats"),
        };
        if let Some((from, to)) = cut_buckets {
            let during: u64 = r.tally.buckets.range(from..to).map(|(_, &(a, _))| a).sum();
            let denied_during: u64 = r.tally.buckets.range(from..to).map(|(_, &(_, d))| d).sum();
            // Redis decisions by the end, against at the heal.
            let at_heal = r
                .tally
                .samples
                .range(..=to)
                .next_back()
                .map_or(0, |(_, s)| s.1);
            let at_end = r.tally.samples.values().next_back().map_or(0, |s| s.1);
            // When Redis decided again (printed only: the sampler's 10 ms buckets).
            let back_ms = r
                .tally
                .samples
                .range(to..)
                .find(|(_, s)| s.1 > at_heal)
                .map(|(&b, _)| (b - to) * BUCKET / 1_000_000);
            println!(
                "{label}: process {i}{}: while cut {during} admitted, {denied_during} denied; \
                 {degraded} degraded calls in all; {} Redis decisions after the heal, the \
                 first within {back_ms:?} ms",
                if i < cut_procs { " (cut)" } else { "" },
                at_end - at_heal
            );
            if idle_holder == Some(i) {
                let held = r.tally.idle_held.unwrap_or(0);
                let fate = r.leased.map_or(String::new(), |s| {
                    format!(
                        ", in all {} permits returned, {} unknown, {} lost",
                        s[4], s[6], s[5]
                    )
                });
                println!("{label}: process {i} went idle while cut holding {held} permits{fate}");
                if at_end <= at_heal {
                    fail(format!("process {i}: no Redis decision after the heal"));
                }
                notes.push(format!(
                    "p{i} cut and idle holding {held} permits{fate}, Redis again within {} ms \
                     of the heal",
                    back_ms.map_or("-".to_owned(), |ms| ms.to_string())
                ));
            } else if i < cut_procs {
                if degraded == 0 {
                    fail(format!("process {i}: cut, and no failure-policy answer"));
                }
                if during > cap {
                    fail(format!(
                        "process {i}: admitted {during} while cut, above one lease ({cap})"
                    ));
                }
                if at_end <= at_heal {
                    fail(format!("process {i}: no Redis decision after the heal"));
                }
                notes.push(format!(
                    "p{i} cut: {during} admitted, {denied_during} denied, {degraded} degraded, \
                     Redis again within {} ms of the heal",
                    back_ms.map_or("-".to_owned(), |ms| ms.to_string())
                ));
            }
        }
    }
    let measured_us = {
        let mut m: Vec<u64> = reports.iter().map(|r| r.rtt_us).collect();
        m.sort_unstable();
        m[m.len() / 2]
    };
    let row = Row {
        rtt_us: setup.rtt_us,
        measured_us,
        leased,
        alg,
        secs: total as f64,
        decisions,
        admitted: admitted.iter().sum(),
        round_trips,
        worst: (overshoot, allowed),
        note: notes.join("; "),
    };
    println!(
        "{label}: {} decisions/s, {} admitted/s, {:.3} round trips per decision, overshoot {} (the bound allows {})",
        (row.decisions as f64 / row.secs) as u64,
        (row.admitted as f64 / row.secs) as u64,
        row.round_trips as f64 / row.decisions.max(1) as f64,
        row.worst.0,
        row.worst.1
    );
    row
}

#[test]
#[ignore = "needs root and `ip netns`: scripts/stages/netns.sh runs it"]
fn netns_fleet() {
    if let Some(reason) = netns::unavailable() {
        println!("netns_fleet skipped: {reason}");
        return;
    }
    let began = Instant::now();
    let processes = env_or("TOLLGATE_NETNS_PROCESSES", 3).max(2) as usize;
    let secs = env_or("TOLLGATE_NETNS_SECS", 3).max(1);
    let cut = Cut {
        before: 2,
        down: env_or("TOLLGATE_NETNS_PARTITION_SECS", 3).max(1),
        after: env_or("TOLLGATE_NETNS_HEAL_SECS", 5).max(1),
    };
    let rtts: Vec<u64> = std::env::var("TOLLGATE_NETNS_RTTS_US")
        .unwrap_or_else(|_| "500,2000".into())
        .split(',')
        .map(|r| {
            r.trim()
                .parse()
                .expect("TOLLGATE_NETNS_RTTS_US: µs, comma-separated")
        })
        .collect();
    let server = RedisServer::start();
    let upstream = SocketAddr::from((Ipv4Addr::LOCALHOST, server.port()));
    let net = Netns::create(processes).expect("namespaces");
    let exe = std::env::current_exe().unwrap();
    let dir = std::env::temp_dir().join(format!("tollgate-netns-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for (k, &rtt_us) in rtts.iter().enumerate() {
        let proxies: Vec<DelayProxy> = net
            .links()
            .iter()
            .map(|l| {
                DelayProxy::start(
                    SocketAddr::from((l.host_addr, 0)),
                    upstream,
                    Duration::from_micros(rtt_us) / 2,
                )
                .expect("start a proxy")
            })
            .collect();
        let setup = Setup {
            net: &net,
            proxies: &proxies,
            exe: &exe,
            dir: &dir,
            rtt_us,
        };
        for leased in [false, true] {
            for alg in [Alg::Unlimited, Alg::FixedWindow, Alg::Gcra] {
                rows.push(run(&setup, leased, alg, secs, None, &mut failures));
            }
        }
        if k == rtts.len() - 1 {
            for leased in [false, true] {
                for alg in [Alg::FixedWindow, Alg::Gcra] {
                    rows.push(run(&setup, leased, alg, secs, Some(cut), &mut failures));
                }
            }
        }
    }
    println!();
    println!(
        "{processes} processes, {secs} s per run, partition: {} s, {} s cut, {} s after",
        cut.before, cut.down, cut.after
    );
    println!("| round trip (PING median) | store | algorithm | decisions/s | admitted/s | round trips per decision | largest overshoot / allowed (P × cap) | partition |");
    println!("|---|---|---|---:|---:|---:|---|---|");
    for r in &rows {
        println!(
            "| {} ms ({:.2} ms) | {} | {} | {} | {} | {:.3} | {} | {} |",
            r.rtt_us as f64 / 1000.0,
            r.measured_us as f64 / 1000.0,
            if r.leased {
                "`LeasedStore`"
            } else {
                "`RedisStore`"
            },
            r.alg.name(),
            (r.decisions as f64 / r.secs) as u64,
            (r.admitted as f64 / r.secs) as u64,
            r.round_trips as f64 / r.decisions.max(1) as f64,
            if r.alg == Alg::Unlimited {
                "-".to_owned()
            } else {
                format!("{} / {}", r.worst.0, r.worst.1)
            },
            if r.note.is_empty() { "-" } else { &r.note },
        );
    }
    println!(
        "netns_fleet: done in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{failures:#?}");
}
