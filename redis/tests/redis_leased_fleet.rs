//! The fleet bound of `LeasedStore` across real processes (issue #14): four copies of this
//! test binary, each with its own `LeasedStore`, share one real redis-server on loopback.
//! Each sends requests on one global key (`/hot`: 5 000 per 1 s fixed window) and a Zipf
//! mix over 10 000 clients (`/api`: 50 per client per 1 s fixed window, 2 000 requests per
//! second per process) for six windows. The hot key is hammered in most windows and paced
//! in every third one (+1, +4: together 90 % of the limit, spread evenly), so a hammered
//! window comes either after a paced one, which leaves leases in hand when it ends (the
//! overshoot the bound allows: the fleet spends them in the next window on top of its
//! limit), or after a hammered one, which spent everything (nothing may go missing).
//!
//! The test checks every full window, summed over the processes:
//!
//! - **the bound:** the hot key admitted at most `limit + P × max_lease_for(limit,
//!   max_cost)` (5 000 + 4 × 200), and every client at most `50 + 4 × 10`;
//! - **no starvation:** a hammered window admitted at least `limit − max_lease_for(..)`
//!   (4 800). What Redis counted in a window and the fleet did not spend in it is what the
//!   processes still hold when it ends (or lost); hammering processes spend a lease as
//!   soon as they have it, so that is close to nothing, and the test allows one lease. A
//!   paced window admitted every request, or at least `limit − P × lease` (4 200) if Redis
//!   ran out (then the leases in hand at its end, up to one per process, are counted and
//!   unspent);
//! - **Redis agrees:** a watcher reads the keys' state (window index, count) straight from
//!   Redis every 5 ms, for the hot key and the three hottest clients: no sample of a window
//!   holds more than the limit.
//!
//! The same checks run in three fleets, one test each:
//!
//! - `fleet_stays_within_the_bound_every_window`: Redis up, four processes throughout.
//! - `a_process_killed_holding_a_lease_loses_at_most_that_lease_until_the_window_ends`: in
//!   hammered window +3 (after a hammered one), one process (the hot key only, so its lease
//!   counters are the hot key's) stops sending as soon as it holds leased permits, writes
//!   its counts and how many it holds, and is killed with SIGKILL. Those permits are
//!   counted in Redis and never spent nor returned: lost to the fleet until the key's
//!   window ends (a fixed window's state frees them then), so the windows from its lease to
//!   its death may fall short by that lease too (`≥ limit − 2 × lease` there); every later
//!   window is back within its range with one process fewer (the bound still with `P = 4`).
//! - `a_redis_restarted_mid_run_costs_one_window_and_the_fleet_converges`: the server is
//!   killed and started again, empty, 400 ms into hammered window +3. The windows the
//!   restart spans may admit up to another limit (Redis forgot what it had counted: what a
//!   plain `RedisStore` does too), checked against `2 × limit + P × lease` and the
//!   per-client equivalent; every window after them is back within its range, with no
//!   process restarted (no double counting, no stuck leases).
//!
//! The windows before every process had started are not full and are not checked; the
//! processes stop at a window boundary, so the last one is full. Only counts are asserted,
//! never times (the machine is shared and noisy).
//!
//! ## How it runs
//!
//! The test binary spawns itself (`current_exe() --exact fleet_child`) as the fleet's
//! processes; `fleet_child` does the work when `TOLLGATE_FLEET_ROLE` is set and returns at
//! once otherwise, so in a plain `cargo test` run it passes trivially. Each process counts
//! what it admitted per window (the window of the `now` its check was decided at: one clock
//! read per request, passed with `allow_at`; `MonotonicClock` counts Unix time, so the
//! processes, and the client time source the scripts decide at, agree on windows), and
//! writes its counts to a file the parent reads (the victim before it is killed). The
//! three fleets take one lock so they do not run at once. `TOLLGATE_FLEET_WINDOWS` sets the
//! number of full windows (default 6, at least 5).

mod redis_support;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use redis_support::server::RedisServer;
use tollgate::policy::Policy;
use tollgate::{Clock, MonotonicClock};
use tollgate_redis::{
    LeaseConfig, LeaseStats, LeasedStore, RedisConfig, RedisStore, RedisTarget, TimeSource,
};

/// Processes in each fleet.
const PROCESSES: u64 = 4;
/// The global key's limit per window.
const HOT_LIMIT: u64 = 5_000;
/// Each client's limit per window.
const API_LIMIT: u64 = 50;
/// Clients of the Zipf mix.
const CLIENTS: usize = 10_000;
/// The Zipf mix's requests per second per process (paced evenly, catching up if behind).
const API_RATE: u64 = 2_000;
/// The hot key's requests per second per process in a paced window: together 90 % of the
/// limit, spread evenly, so the processes hold leases when the window ends.
const PACED_RATE: u64 = HOT_LIMIT * 90 / 100 / PROCESSES;
/// The full window (counted from the first) a fault happens in: a hammered one after a
/// hammered one.
const FAULT: u64 = 3;
/// The window length, ns.
const SEC: u64 = 1_000_000_000;
const PREFIX: &str = "fleet";

/// How the test binary runs one of its fleet's processes: [`fleet_child`] alone.
const CHILD_ARGS: [&str; 5] = [
    "--exact",
    "fleet_child",
    "--nocapture",
    "--test-threads",
    "1",
];
/// The fleets run one at a time.
static FLEETS: Mutex<()> = Mutex::new(());

fn rules() -> String {
    format!(
        r#"
        [[rules]]
        name = "hot"
        endpoint = "/hot"
        per = "global"
        limit = {HOT_LIMIT}
        window = "1s"
        algorithm = "fixed_window"

        [[rules]]
        name = "api"
        endpoint = "/api"
        limit = {API_LIMIT}
        window = "1s"
        algorithm = "fixed_window"
        "#
    )
}

/// Leases that matter: a key is hot from 50 checks per second in a process, a lease covers
/// 100 ms of the local rate, at most 200 permits and a fifth of the limit (200 of the hot
/// key's 5 000, 10 of a client's 50), and lasts 500 ms.
fn lease_config() -> LeaseConfig {
    LeaseConfig::new()
        .with_hot_rate(50)
        .with_max_lease(200)
        .with_share(0.2)
        .with_horizon(Duration::from_millis(100))
        .with_ttl(Duration::from_millis(500))
}

fn redis_store(url: &str) -> RedisStore {
    RedisStore::new(
        RedisTarget::Single(url.to_owned()),
        RedisConfig::new(PREFIX)
            .unwrap()
            .with_time_source(TimeSource::Client)
            .with_timeout(Duration::from_secs(1))
            .with_retry_backoff(Duration::from_millis(20)),
    )
    .unwrap()
}

/// `max_lease_for(limit, max_cost)` of the rule named `rule`, and its limit.
fn lease_of<C: Clock>(policy: &Policy<C, LeasedStore>, rule: &str) -> (u64, u64) {
    let set = policy.rule_set();
    let tier = &set
        .rules()
        .iter()
        .find(|r| r.name() == rule)
        .expect("rule")
        .tiers()[0];
    let limit = tier.algorithm().limit();
    (
        limit,
        policy
            .backend()
            .config()
            .max_lease_for(limit, tier.max_cost()),
    )
}

/// splitmix64: the Zipf mix's generator.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn next_f64(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Zipf(`n`, `s`) over ranks `0..n` (rank 0 the hottest): a binary search in the
/// cumulative distribution.
struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    fn new(n: usize, s: f64) -> Zipf {
        let mut total = 0.0;
        let mut cumulative: Vec<f64> = (1..=n)
            .map(|k| {
                total += 1.0 / (k as f64).powf(s);
                total
            })
            .collect();
        for c in &mut cumulative {
            *c /= total;
        }
        Zipf { cumulative }
    }

    fn sample(&self, rng: &mut SplitMix64) -> usize {
        let u = rng.next_f64();
        self.cumulative
            .partition_point(|&c| c <= u)
            .min(self.cumulative.len() - 1)
    }
}

/// Whether the hot key is hammered in window `w`, or paced at [`PACED_RATE`]: windows
/// +1, +4, ... (counted from the first full one) are paced, the others hammered, so a
/// hammered window follows a paced one (and spends the leases it left: the overshoot) or
/// a hammered one (which spent everything: no overshoot, and nothing may go missing).
fn hammered(w: u64, first: u64) -> bool {
    (i128::from(w) - i128::from(first)).rem_euclid(3) != 1
}

fn client_name(rank: usize) -> String {
    format!("c{rank}")
}

/// What one process admitted, per window.
#[derive(Debug, Default)]
struct Tally {
    /// Window → (admitted, denied) of the hot key.
    hot: BTreeMap<u64, (u64, u64)>,
    /// (window, client rank) → admitted.
    api: BTreeMap<(u64, u32), u64>,
    /// Window → (admitted, denied) of the Zipf mix.
    api_total: BTreeMap<u64, (u64, u64)>,
}

impl Tally {
    fn merge(&mut self, other: &Tally) {
        for (&w, &(a, d)) in &other.hot {
            let e = self.hot.entry(w).or_default();
            e.0 += a;
            e.1 += d;
        }
        for (&k, &a) in &other.api {
            *self.api.entry(k).or_default() += a;
        }
        for (&w, &(a, d)) in &other.api_total {
            let e = self.api_total.entry(w).or_default();
            e.0 += a;
            e.1 += d;
        }
    }
}

/// Permits a process holds in leases now (every local check spends one permit of one
/// tier: the plans here have one tier and cost 1).
fn held(stats: &LeaseStats) -> u64 {
    stats
        .leased_permits
        .saturating_sub(stats.returned_permits + stats.lost_permits + stats.local_checks)
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

/// One process of a fleet (see the module docs): does nothing unless
/// `TOLLGATE_FLEET_ROLE` is set (`worker`: the hot key and the Zipf mix until
/// `TOLLGATE_FLEET_UNTIL`; `victim`: the hot key only, and from window
/// `TOLLGATE_FLEET_HOLD` on it stops as soon as it holds leased permits, writes its counts
/// and waits to be killed).
#[test]
fn fleet_child() {
    let Ok(role) = std::env::var("TOLLGATE_FLEET_ROLE") else {
        return;
    };
    let url = env("TOLLGATE_FLEET_URL");
    let until: u64 = env("TOLLGATE_FLEET_UNTIL").parse().unwrap();
    let first: u64 = env("TOLLGATE_FLEET_FIRST").parse().unwrap();
    let seed: u64 = env("TOLLGATE_FLEET_SEED").parse().unwrap();
    let out = PathBuf::from(env("TOLLGATE_FLEET_OUT"));
    let hold_at: Option<u64> =
        (role == "victim").then(|| env("TOLLGATE_FLEET_HOLD").parse().unwrap());
    let policy = Policy::from_toml(&rules(), MonotonicClock::new())
        .unwrap()
        .store(LeasedStore::new(redis_store(&url), lease_config()).unwrap());
    let start = policy.clock().now().as_u64();
    let mut tally = Tally::default();
    let mut holding = None;
    std::thread::scope(|s| {
        let hot = s.spawn(|| {
            let mut t = Tally::default();
            let (mut window, mut sent) = (0, 0);
            loop {
                let now = policy.clock().now();
                if now.as_u64() >= until {
                    return (t, None);
                }
                let w = now.as_u64() / SEC;
                if w != window {
                    (window, sent) = (w, 0);
                }
                if !hammered(w, first) {
                    // Paced evenly over the window.
                    let due = (now.as_u64() % SEC) * PACED_RATE / SEC + 1;
                    if sent >= due {
                        std::thread::sleep(Duration::from_micros(200));
                        continue;
                    }
                }
                sent += 1;
                let allowed = policy.allow_at("any", "/hot", 1, now).unwrap().allowed();
                let e = t.hot.entry(w).or_default();
                if allowed {
                    e.0 += 1;
                    if hold_at.is_some_and(|h| w >= h) && held(&policy.backend().stats()) > 0 {
                        return (t, Some(w));
                    }
                } else {
                    e.1 += 1;
                    // A denied client retries soon, not in a busy loop.
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
        });
        let api = (hold_at.is_none()).then(|| {
            s.spawn(|| {
                let mut t = Tally::default();
                let zipf = Zipf::new(CLIENTS, 1.0);
                let names: Vec<String> = (0..CLIENTS).map(client_name).collect();
                let mut rng = SplitMix64(seed);
                let began = Instant::now();
                let mut sent = 0u64;
                loop {
                    let now = policy.clock().now();
                    if now.as_u64() >= until {
                        return t;
                    }
                    // Paced at API_RATE per second (catching up if behind).
                    let due = began.elapsed().as_micros() as u64 * API_RATE / 1_000_000;
                    if sent >= due {
                        std::thread::sleep(Duration::from_millis(1));
                        continue;
                    }
                    sent += 1;
                    let w = now.as_u64() / SEC;
                    let rank = zipf.sample(&mut rng);
                    let allowed = policy
                        .allow_at(&names[rank], "/api", 1, now)
                        .unwrap()
                        .allowed();
                    let e = t.api_total.entry(w).or_default();
                    if allowed {
                        e.0 += 1;
                        *t.api.entry((w, rank as u32)).or_default() += 1;
                    } else {
                        e.1 += 1;
                    }
                }
            })
        });
        let (t, hold) = hot.join().unwrap();
        tally.merge(&t);
        holding = hold;
        if let Some(api) = api {
            tally.merge(&api.join().unwrap());
        }
    });
    let mut text = String::new();
    writeln!(text, "start {start}").unwrap();
    for (w, (a, d)) in &tally.hot {
        writeln!(text, "hot {w} {a} {d}").unwrap();
    }
    for (w, (a, d)) in &tally.api_total {
        writeln!(text, "apitotal {w} {a} {d}").unwrap();
    }
    for ((w, rank), a) in &tally.api {
        writeln!(text, "api {w} {rank} {a}").unwrap();
    }
    if let Some(w) = holding {
        // Stopped with leased permits in hand; a refill asked for meanwhile may still
        // come: report once the lease thread is quiet.
        let mut last = policy.backend().stats();
        loop {
            std::thread::sleep(Duration::from_millis(30));
            let now = policy.backend().stats();
            if now == last {
                break;
            }
            last = now;
        }
        writeln!(text, "stats {}", stats_line(&last)).unwrap();
        writeln!(text, "held {} {w}", held(&last)).unwrap();
        publish(&out, &text);
        // The parent kills this process now (SIGKILL): the store is never dropped, the
        // lease never returned.
        std::thread::sleep(Duration::from_secs(60));
        panic!("the victim was not killed");
    }
    let stats = policy.backend().stats();
    writeln!(text, "stats {}", stats_line(&stats)).unwrap();
    // Dropping the store returns the leases in hand (a hang here fails the parent's wait).
    let dropping = Instant::now();
    drop(policy);
    writeln!(text, "dropped {}", dropping.elapsed().as_millis()).unwrap();
    publish(&out, &text);
}

fn stats_line(s: &LeaseStats) -> String {
    format!(
        "{} {} {} {} {} {} {} {}",
        s.leases,
        s.local_checks,
        s.remote_checks,
        s.leased_permits,
        s.returned_permits,
        s.lost_permits,
        s.redis.round_trips,
        s.redis.deny_cache_hits
    )
}

/// Writes `text` to `out` whole (a reader never sees part of it).
fn publish(out: &Path, text: &str) {
    let tmp = out.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, out).unwrap();
}

/// One process's file, parsed.
#[derive(Debug, Default)]
struct Report {
    start: u64,
    tally: Tally,
    /// leases, local, remote, leased, returned, lost, round trips, deny-cache hits.
    stats: [u64; 8],
    /// Permits held when it stopped, and the window it stopped in (the victim).
    held: Option<(u64, u64)>,
    dropped_ms: Option<u64>,
}

fn parse_report(text: &str) -> Report {
    let mut r = Report::default();
    for line in text.lines() {
        let mut words = line.split(' ');
        let kind = words.next().unwrap();
        let n: Vec<u64> = words.map(|w| w.parse().unwrap()).collect();
        match kind {
            "start" => r.start = n[0],
            "hot" => {
                r.tally.hot.insert(n[0], (n[1], n[2]));
            }
            "apitotal" => {
                r.tally.api_total.insert(n[0], (n[1], n[2]));
            }
            "api" => {
                r.tally.api.insert((n[0], n[1] as u32), n[2]);
            }
            "stats" => r.stats.copy_from_slice(&n),
            "held" => r.held = Some((n[0], n[1])),
            "dropped" => r.dropped_ms = Some(n[0]),
            other => panic!("unknown line {other:?}"),
        }
    }
    r
}

/// A fleet's fault.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Fault {
    None,
    /// Process 0 is the victim: killed holding a lease in window +[`FAULT`].
    Kill,
    /// Redis restarted 400 ms into window +[`FAULT`].
    RestartRedis,
}

/// Watches keys' fixed-window states in Redis until `stop`: per key, per window index (as
/// Redis stores it), the highest count seen.
fn watch(url: &str, keys: &[String], stop: &AtomicBool) -> Vec<BTreeMap<u64, u64>> {
    let mut seen = vec![BTreeMap::new(); keys.len()];
    let mut con: Option<redis::Connection> = None;
    // Relaxed: a flag; the join that follows orders the rest.
    while !stop.load(Ordering::Relaxed) {
        if con.is_none() {
            con = redis::Client::open(url).ok().and_then(|c| {
                let con = c
                    .get_connection_with_timeout(Duration::from_millis(200))
                    .ok()?;
                con.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
                Some(con)
            });
        }
        if let Some(c) = con.as_mut() {
            match redis::cmd("MGET").arg(keys).query::<Vec<Option<String>>>(c) {
                Ok(values) => {
                    for (i, value) in values.iter().enumerate() {
                        // A fixed window's state: its 33-character tag ('f', the window
                        // and the limit), then the window index and the count, 16 hex
                        // digits each.
                        let Some(v) = value.as_deref().filter(|v| v.len() == 65) else {
                            continue;
                        };
                        let index = u64::from_str_radix(&v[33..49], 16).unwrap();
                        let count = u64::from_str_radix(&v[49..65], 16).unwrap();
                        let e = seen[i].entry(index).or_insert(0);
                        *e = (*e).max(count);
                    }
                }
                Err(_) => con = None,
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    seen
}

fn windows() -> u64 {
    std::env::var("TOLLGATE_FLEET_WINDOWS")
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(6)
        .max(5)
}

/// Runs a fleet with `fault` and checks it (see the module docs).
fn fleet(fault: Fault) {
    let _one_at_a_time = FLEETS.lock().unwrap_or_else(PoisonError::into_inner);
    let began = Instant::now();
    let mut server = RedisServer::start();
    let url = server.url();
    let clock = MonotonicClock::new();
    // At least 0.8 s for the processes to start before the first full window.
    let first = (clock.now().as_u64() + 800_000_000).div_ceil(SEC);
    let end = first + windows();
    let until = end * SEC;
    let dir = std::env::temp_dir().join(format!(
        "tollgate-fleet-{}-{:?}-{}",
        std::process::id(),
        fault,
        first
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = std::env::current_exe().unwrap();
    let hold_at = first + FAULT;
    let mut children: Vec<Option<Child>> = (0..PROCESSES)
        .map(|i| {
            let log = std::fs::File::create(dir.join(format!("child{i}.log"))).unwrap();
            let victim = fault == Fault::Kill && i == 0;
            let role = if victim { "victim" } else { "worker" };
            let mut cmd = Command::new(&exe);
            cmd.args(CHILD_ARGS)
                .env("TOLLGATE_FLEET_ROLE", role)
                .env("TOLLGATE_FLEET_URL", &url)
                .env("TOLLGATE_FLEET_UNTIL", until.to_string())
                .env("TOLLGATE_FLEET_FIRST", first.to_string())
                .env("TOLLGATE_FLEET_SEED", (0x5eed + i).to_string())
                .env("TOLLGATE_FLEET_OUT", dir.join(format!("child{i}.out")))
                .env("TOLLGATE_FLEET_HOLD", hold_at.to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::from(log.try_clone().unwrap()))
                .stderr(Stdio::from(log));
            Some(cmd.spawn().expect("spawn a fleet process"))
        })
        .collect();
    let probe = redis_store(&url);
    let keys = [
        probe.redis_key("hot", "hot", None),
        probe.redis_key("api", "api", Some(&client_name(0))),
        probe.redis_key("api", "api", Some(&client_name(1))),
        probe.redis_key("api", "api", Some(&client_name(2))),
    ];
    drop(probe);
    let stop = AtomicBool::new(false);
    // Windows spanned by the fault: the victim's lease to its death, or the restart.
    let mut faulted: Option<(u64, u64)> = None;
    let seen = std::thread::scope(|s| {
        let watcher = s.spawn(|| watch(&url, &keys, &stop));
        match fault {
            Fault::None => {}
            Fault::Kill => {
                let out = dir.join("child0.out");
                while !out.exists() && clock.now().as_u64() < until {
                    std::thread::sleep(Duration::from_millis(1));
                }
                let victim = children[0].as_mut().unwrap();
                victim.kill().unwrap();
                victim.wait().unwrap();
                let killed = clock.now().as_u64() / SEC;
                let report = parse_report(&std::fs::read_to_string(&out).unwrap_or_default());
                let (held, w) = report.held.expect("the victim held no lease");
                println!(
                    "{fault:?}: the victim stopped holding {held} leased permits in window +{}, \
                     killed (SIGKILL) in window +{}",
                    w - first,
                    killed - first
                );
                faulted = Some((w, killed));
            }
            Fault::RestartRedis => {
                let at = (first + FAULT) * SEC + 400_000_000;
                while clock.now().as_u64() < at {
                    std::thread::sleep(Duration::from_millis(1));
                }
                let down = clock.now().as_u64();
                server.restart();
                let up = clock.now().as_u64();
                println!(
                    "{fault:?}: Redis killed at +{:.3} s, back (empty) at +{:.3} s",
                    (down - first * SEC) as f64 / 1e9,
                    (up - first * SEC) as f64 / 1e9
                );
                faulted = Some((down / SEC, up / SEC));
            }
        }
        // Every process stops at `until`; each then drops its store (returning its
        // leases) and exits. A store that hangs on drop keeps its process alive.
        let deadline = Instant::now() + Duration::from_secs(120) + Duration::from_secs(windows());
        for (i, child) in children.iter_mut().enumerate() {
            let Some(c) = child.as_mut() else { continue };
            if fault == Fault::Kill && i == 0 {
                continue;
            }
            loop {
                if let Some(status) = c.try_wait().unwrap() {
                    let log = std::fs::read_to_string(dir.join(format!("child{i}.log")))
                        .unwrap_or_default();
                    assert!(status.success(), "process {i}: {status}\n{log}");
                    break;
                }
                if Instant::now() > deadline {
                    for c in children.iter_mut().flatten() {
                        let _ = c.kill();
                    }
                    panic!("process {i} did not exit (a store hanging on drop?)");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            *child = None;
        }
        // Relaxed: see `watch`.
        stop.store(true, Ordering::Relaxed);
        watcher.join().unwrap()
    });
    let reports: Vec<Report> = (0..PROCESSES)
        .map(|i| {
            let text = std::fs::read_to_string(dir.join(format!("child{i}.out")))
                .unwrap_or_else(|e| panic!("process {i} wrote no counts: {e}"));
            parse_report(&text)
        })
        .collect();
    check(fault, first, end, faulted, &reports, &seen);
    let _ = std::fs::remove_dir_all(&dir);
    println!("{fault:?}: done in {:.1} s", began.elapsed().as_secs_f64());
}

/// The assertions of the module docs on one fleet's counts.
fn check(
    fault: Fault,
    first: u64,
    end: u64,
    faulted: Option<(u64, u64)>,
    reports: &[Report],
    seen: &[BTreeMap<u64, u64>],
) {
    // The limits and leases as the policy computes them.
    let policy = Policy::from_toml(&rules(), MonotonicClock::new())
        .unwrap()
        .store(LeasedStore::new(redis_store("redis://127.0.0.1:1"), lease_config()).unwrap());
    let (hot_limit, hot_lease) = lease_of(&policy, "hot");
    let (api_limit, api_lease) = lease_of(&policy, "api");
    drop(policy);
    assert_eq!((hot_limit, hot_lease), (HOT_LIMIT, 200));
    assert_eq!((api_limit, api_lease), (API_LIMIT, 10));
    let hot_bound = hot_limit + PROCESSES * hot_lease;
    let api_bound = api_limit + PROCESSES * api_lease;
    // A window is full when every process ran from its start.
    let started = reports.iter().map(|r| r.start / SEC + 1).max().unwrap();
    let from = first.max(started);
    assert!(
        end - from >= 3,
        "the processes started too late: windows {from}..{end}"
    );
    let in_fault = |w: u64| faulted.is_some_and(|(a, b)| (a..=b).contains(&w));
    let mut fleet = Tally::default();
    for r in reports {
        fleet.merge(&r.tally);
    }
    let Tally {
        hot,
        api,
        api_total,
    } = fleet;
    println!(
        "{fault:?}: window | hot key admitted (denied) | asserted range | Redis count | \
         /api admitted (denied) | busiest client (bound {api_bound})"
    );
    let mut failures = Vec::new();
    for w in from..end {
        let (admitted, denied) = hot.get(&w).copied().unwrap_or_default();
        let redis = seen[0].get(&w).copied();
        let (api_admitted, api_denied) = api_total.get(&w).copied().unwrap_or_default();
        let busiest = api
            .range((w, 0)..(w + 1, 0))
            .max_by_key(|(_, &a)| a)
            .map(|(&(_, rank), &a)| (rank, a))
            .unwrap_or_default();
        let note = match faulted {
            Some((a, b)) if (a..=b).contains(&w) => match fault {
                Fault::Kill => "victim's lease lost",
                _ => "Redis restarted",
            },
            _ => "",
        };
        let (upper, lower) = match (fault, in_fault(w), hammered(w, first)) {
            // Redis forgot its count: another limit may go through.
            (Fault::RestartRedis, true, _) => (2 * hot_limit + PROCESSES * hot_lease, 0),
            // The victim's lease (at most one) is lost until the window ends.
            (Fault::Kill, true, true) => (hot_bound, hot_limit - 2 * hot_lease),
            // Hammered: the permits counted and not spent (held at the end) are at most
            // one lease.
            (_, _, true) => (hot_bound, hot_limit - hot_lease),
            // Paced below the limit: every request admitted, unless Redis ran out, which
            // leaves at most the leases in hand at the window's end unspent.
            (_, _, false) => (
                hot_bound,
                (admitted + denied).min(hot_limit - PROCESSES * hot_lease),
            ),
        };
        println!(
            "{fault:?}: +{} {} | {admitted} ({denied}) | [{lower}, {upper}] | {} | \
             {api_admitted} ({api_denied}) | c{} {} | {note}",
            w - first,
            if hammered(w, first) {
                "hammered"
            } else {
                "paced   "
            },
            redis.map_or("-".to_owned(), |c| c.to_string()),
            busiest.0,
            busiest.1,
        );
        if admitted > upper || admitted < lower {
            failures.push(format!(
                "window +{}: hot key admitted {admitted}, outside [{lower}, {upper}]",
                w - first
            ));
        }
        let client_upper = if fault == Fault::RestartRedis && in_fault(w) {
            2 * api_limit + PROCESSES * api_lease
        } else {
            api_bound
        };
        for (&(_, rank), &a) in api.range((w, 0)..(w + 1, 0)) {
            if a > client_upper {
                failures.push(format!(
                    "window +{}: client c{rank} admitted {a} > {client_upper}",
                    w - first
                ));
            }
        }
    }
    // Redis never counts more than the limit in a window, whatever the fleet does.
    for (key, (seen, limit)) in seen
        .iter()
        .zip([hot_limit, api_limit, api_limit, api_limit])
        .enumerate()
    {
        for (&index, &count) in seen {
            if count > limit {
                failures.push(format!(
                    "Redis key {key} counted {count} > {limit} in window {index}"
                ));
            }
        }
    }
    for (i, seen) in seen.iter().enumerate().skip(1) {
        println!(
            "{fault:?}: Redis count of client c{} per window: {:?}",
            i - 1,
            (from..end)
                .map(|w| seen.get(&w).copied().unwrap_or(0))
                .collect::<Vec<_>>()
        );
    }
    assert!(
        seen[0].range(from..end).count() as u64 >= (end - from) / 2,
        "the watcher saw too few windows of the hot key: {:?}",
        seen[0]
    );
    for (i, r) in reports.iter().enumerate() {
        let [leases, local, remote, leased, returned, lost, trips, hits] = r.stats;
        println!(
            "{fault:?}: process {i}: {leases} leases ({leased} permits, {returned} returned, \
             {lost} lost), {local} local checks, {remote} remote ({trips} round trips, {hits} \
             deny-cache hits){}{}",
            r.held
                .map_or(String::new(), |(h, _)| format!(", killed holding {h}")),
            r.dropped_ms
                .map_or(String::new(), |ms| format!(", dropped in {ms} ms")),
        );
        // Leases were taken and served checks in every process.
        assert!(leases > 0 && local > 0, "process {i}: {:?}", r.stats);
        match r.held {
            Some((held, _)) => assert!(held > 0, "process {i} was killed holding nothing"),
            None => assert!(r.dropped_ms.is_some(), "process {i} did not drop its store"),
        }
    }
    assert!(failures.is_empty(), "{fault:?}: {failures:#?}");
}

#[test]
fn fleet_stays_within_the_bound_every_window() {
    fleet(Fault::None);
}

#[test]
fn a_process_killed_holding_a_lease_loses_at_most_that_lease_until_the_window_ends() {
    fleet(Fault::Kill);
}

#[test]
fn a_redis_restarted_mid_run_costs_one_window_and_the_fleet_converges() {
    fleet(Fault::RestartRedis);
}
