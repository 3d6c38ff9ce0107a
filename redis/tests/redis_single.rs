//! A policy on a [`RedisStore`] against one real `redis-server`: the shared vectors give
//! the core's exact decisions through the policy, several tiers are all or nothing like
//! the core, tasks on one key admit exactly the bound for every algorithm, keys carry TTLs
//! at their reset time, decisions at the server's time follow the core; and the store's
//! script decides and writes exactly as the core at the edges of its number representation
//! (its exact limb arithmetic included).

mod redis_support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis_support::server::RedisServer;
use redis_support::vectors::{self, Rng};
use redis_support::{one_rule, vector_policy};
use tollgate::policy::Policy;
use tollgate::{AlgorithmConfig, AnyLimiter, ManualClock, MonotonicClock, Nanos};
use tollgate_redis::{RedisConfig, RedisStore, RedisTarget, TimeSource};

const SEC: u64 = 1_000_000_000;

fn single(server: &RedisServer) -> RedisTarget {
    RedisTarget::Single(server.url())
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query(&mut server.connection())
        .expect("PTTL")
}

#[test]
fn shared_vectors_give_the_core_decisions() {
    let server = RedisServer::start();
    let cases = vectors::cases(200);
    let mut steps = 0;
    for (i, case) in cases.iter().enumerate() {
        let policy = vector_policy(single(&server), "vec", &[("r", case.config)]);
        vectors::assert_case(&policy, &format!("case{i}"), case);
        steps += case.trace.len();
        // One decision per step, one round trip each (plus, on the server's first use, the
        // function load and the retried FCALL).
        assert!(policy.backend().stats().round_trips <= case.trace.len() as u64 + 2);
    }
    assert!(steps > 10_000, "{steps} steps");
}

#[test]
fn multi_tier_checks_are_all_or_nothing_like_the_core() {
    let server = RedisServer::start();
    let tiers = [
        (
            "burst",
            AlgorithmConfig::Gcra {
                limit: 5,
                period: Nanos::from_secs(1),
                burst: 5,
            },
        ),
        (
            "minute",
            AlgorithmConfig::FixedWindow {
                limit: 30,
                window: Nanos::from_secs(60),
            },
        ),
        (
            "log",
            AlgorithmConfig::SlidingWindowLog {
                limit: 8,
                window: Nanos::from_secs(10),
            },
        ),
        (
            "smooth",
            AlgorithmConfig::SlidingWindowCounter {
                limit: 9,
                window: Nanos::from_secs(20),
            },
        ),
    ];
    let policy = vector_policy(single(&server), "multi", &tiers);
    let core: Vec<AnyLimiter<{ vectors::RING }>> = tiers
        .iter()
        .map(|(_, c)| AnyLimiter::new(c.build().unwrap()).unwrap())
        .collect();
    let mut rng = Rng::new(42);
    let mut now = 1_790_000_000 * SEC;
    let (mut admitted, mut denied) = (0, 0);
    for step in 0..600 {
        now += rng.below(3 * SEC);
        let cost = if rng.below(5) == 0 { 2 } else { 1 };
        let want = vectors::core_multi(&core, now, cost).expect("cost within every tier");
        let got = policy
            .allow_at("client", "/", cost, Nanos::new(now))
            .expect("check");
        let tiers: Vec<_> = got.tiers().iter().map(|t| t.decision).collect();
        assert_eq!(tiers, want, "step {step}");
        let all = want.iter().all(|d| d.allowed);
        assert_eq!(got.allowed(), all, "step {step}");
        if all {
            admitted += 1
        } else {
            denied += 1
        }
    }
    assert!(
        admitted > 50 && denied > 50,
        "trace exercises both: {admitted} / {denied}"
    );
    assert_eq!(policy.backend().stats().degraded, 0);
    // Every tier's key of one check shares the hash tag.
    for (name, _) in tiers {
        assert!(policy
            .backend()
            .redis_key("r", name, Some("client"))
            .ends_with(":{client}"));
    }
}

/// Configurations whose bound over a short test is exact with the server's clock: no
/// window boundary and no refill can fall inside the test (refill ≥ 14 min; the windows
/// are ten years long, so a boundary falls in one in 10⁸ runs of a second).
fn bounded_configs() -> Vec<(&'static str, AlgorithmConfig, u64)> {
    let decade = Nanos::from_secs(10 * 365 * 86_400);
    vec![
        (
            "gcra",
            AlgorithmConfig::Gcra {
                limit: 1,
                period: Nanos::from_secs(86_400),
                burst: 100,
            },
            100,
        ),
        (
            "token",
            AlgorithmConfig::TokenBucket {
                capacity: 77,
                refill_amount: 1,
                refill_period: Nanos::from_secs(3600),
            },
            77,
        ),
        (
            "leaky",
            AlgorithmConfig::LeakyBucket {
                amount: 1,
                period: Nanos::from_secs(86_400),
                queue: 49,
            },
            50,
        ),
        (
            "log",
            AlgorithmConfig::SlidingWindowLog {
                limit: 60,
                window: Nanos::from_secs(3600),
            },
            60,
        ),
        (
            "fixed",
            AlgorithmConfig::FixedWindow {
                limit: 90,
                window: decade,
            },
            90,
        ),
        (
            "swc",
            AlgorithmConfig::SlidingWindowCounter {
                limit: 70,
                window: decade,
            },
            70,
        ),
    ]
}

/// 32 tasks awaiting checks of one client, the server's clock deciding: exactly the bound
/// admitted, for every algorithm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_tasks_on_one_key_admit_exactly_the_bound() {
    let server = RedisServer::start();
    for (name, config, bound) in bounded_configs() {
        let store = RedisStore::new(
            single(&server),
            RedisConfig::new("conc")
                .unwrap()
                .with_timeout(Duration::from_secs(10))
                .with_deny_cache(0),
        )
        .unwrap();
        let policy = Arc::new(
            Policy::new(one_rule(&[(name, config)]), MonotonicClock::new())
                .unwrap()
                .store(store),
        );
        let admitted = Arc::new(AtomicU64::new(0));
        let tasks: Vec<_> = (0..32)
            .map(|_| {
                let (policy, admitted) = (policy.clone(), admitted.clone());
                tokio::spawn(async move {
                    for _ in 0..10 {
                        let d = policy.allow_async("hot", "/", 1).await.expect("check");
                        if d.allowed() {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("task");
        }
        assert_eq!(admitted.load(Ordering::Relaxed), bound, "{name}");
        let stats = policy.backend().stats();
        assert_eq!((stats.redis_decisions, stats.degraded), (320, 0), "{name}");
    }
}

#[test]
fn every_write_sets_a_ttl_at_the_reset_time() {
    let server = RedisServer::start();
    let tiers = [
        (
            "g",
            AlgorithmConfig::Gcra {
                limit: 10,
                period: Nanos::from_secs(1),
                burst: 10,
            },
        ),
        (
            "f",
            AlgorithmConfig::FixedWindow {
                limit: 5,
                window: Nanos::from_secs(3600),
            },
        ),
        (
            "s",
            AlgorithmConfig::SlidingWindowCounter {
                limit: 5,
                window: Nanos::from_secs(60),
            },
        ),
        (
            "l",
            AlgorithmConfig::SlidingWindowLog {
                limit: 5,
                window: Nanos::from_secs(30),
            },
        ),
        (
            "q",
            AlgorithmConfig::LeakyBucket {
                amount: 4,
                period: Nanos::from_secs(1),
                queue: 3,
            },
        ),
    ];
    // At most four tiers per rule: the shaper gets a policy of its own.
    let (four, shaper) = tiers.split_at(4);
    let policies: Vec<_> = [four, shaper]
        .iter()
        .map(|tiers| {
            let store = RedisStore::new(single(&server), RedisConfig::new("ttl").unwrap());
            Policy::new(one_rule(tiers), MonotonicClock::new())
                .unwrap()
                .store(store.unwrap())
        })
        .collect();
    let key = |tier: &str| policies[0].backend().redis_key("r", tier, Some("user"));
    for (policy, tiers) in policies.iter().zip([four, shaper]) {
        let d = policy.allow("user", "/", 1).unwrap();
        assert!(d.allowed());
        for ((name, _), tier) in tiers.iter().zip(d.tiers()) {
            let ttl = pttl(&server, &key(name));
            let reset_ms = tier.decision.reset_after.as_u64().div_ceil(1_000_000) as i64;
            assert!(ttl > 0, "{name} has no TTL ({ttl})");
            assert!(
                ttl <= reset_ms + 3,
                "{name}: ttl {ttl} ms beyond reset {reset_ms} ms"
            );
        }
    }
    // GCRA's key (100 ms) and the shaper's (250 ms) disappear once the state is fresh again.
    std::thread::sleep(Duration::from_millis(400));
    let mut con = server.connection();
    let exists = |con: &mut redis::Connection, tier: &str| -> i64 {
        redis::cmd("EXISTS").arg(key(tier)).query(con).unwrap()
    };
    assert_eq!(exists(&mut con, "g"), 0);
    assert_eq!(exists(&mut con, "q"), 0);
    assert_eq!(exists(&mut con, "f"), 1);
    // A sliding log stays bounded to L members (and its tag).
    for _ in 0..20 {
        policies[0].allow("user", "/", 1).unwrap();
    }
    let card: i64 = redis::cmd("ZCARD").arg(key("l")).query(&mut con).unwrap();
    assert!(card <= 5 + 1, "{card}");
}

/// Calls of `command` (lower case) the server counted since its statistics were reset.
fn command_calls(server: &RedisServer, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.connection())
        .expect("INFO");
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .map_or(0, |rest| {
            rest.split(',').next().unwrap().parse().expect("calls")
        })
}

/// A GCRA key whose state runs H/2 or more ahead (H: its tolerance, 10 s here) is SET with
/// headroom: its value marked 'h', a TTL to the end of its 10 s quantum of time (counted
/// from instant 0), so at most H beyond its reset; later checks whose state stays in that
/// quantum only rewrite the state (SETRANGE), and every decision is the in-process store's.
/// Client time on a manual clock (the quanta are then the test's), TTLs padded by an hour
/// (real time passes meanwhile).
#[test]
fn a_key_well_ahead_gets_headroom_and_later_checks_only_rewrite_its_state() {
    let server = RedisServer::start();
    let slack_ms = 3_600_000;
    let config = RedisConfig::new("head")
        .unwrap()
        .with_time_source(TimeSource::Client)
        .with_ttl_slack(Duration::from_millis(slack_ms as u64))
        .with_deny_cache(0);
    let store = RedisStore::new(single(&server), config).unwrap();
    let gcra = AlgorithmConfig::Gcra {
        limit: 10,
        period: Nanos::from_secs(10),
        burst: 10,
    };
    // the start of a quantum
    let clock = ManualClock::starting_at(Nanos::from_secs(1_700_000_000));
    let policy = Policy::new(one_rule(&[("g", gcra)]), clock.clone())
        .unwrap()
        .store(store);
    let in_process = Policy::new(one_rule(&[("g", gcra)]), clock.clone()).unwrap();
    let key = policy.backend().redis_key("r", "g", Some("k"));
    // Connect and load the script first.
    assert!(policy.allow("warm", "/", 1).unwrap().allowed());
    let _: String = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut server.connection())
        .unwrap();
    for check in 1..=11 {
        let d = policy.allow("k", "/", 1).unwrap();
        assert_eq!(d, in_process.allow("k", "/", 1).unwrap(), "check {check}");
        assert_eq!(d.allowed(), check <= 10, "check {check}");
        let value: String = redis::cmd("GET")
            .arg(&key)
            .query(&mut server.connection())
            .unwrap();
        let ttl = pttl(&server, &key);
        let reset_ms = d.reset_after().as_u64().div_ceil(1_000_000) as i64;
        // the state 1 s further on per check: a TTL of its own up to 4 s ahead, headroom
        // from 5 s (H/2) on
        assert_eq!(value.ends_with('h'), check >= 5, "check {check}: {value}");
        let most = if check >= 5 { 10_000 } else { 0 };
        assert!(
            ttl >= reset_ms && ttl <= reset_ms + most + 3 + slack_ms,
            "check {check}: ttl {ttl} ms, reset {reset_ms} ms"
        );
    }
    // SET for checks 1 to 5 (the state 1 to 5 s ahead) and 10 (10 s: the next quantum),
    // SETRANGE for 6 to 9; the deny writes nothing
    assert_eq!(command_calls(&server, "set"), 6);
    assert_eq!(command_calls(&server, "setrange"), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_time_decisions_follow_the_core_rules() {
    let server = RedisServer::start();
    let store = RedisStore::new(
        single(&server),
        RedisConfig::new("srv").unwrap().with_deny_cache(0),
    )
    .unwrap();
    let gcra = AlgorithmConfig::Gcra {
        limit: 1,
        period: Nanos::from_secs(3600),
        burst: 3,
    };
    let policy = Policy::new(one_rule(&[("g", gcra)]), MonotonicClock::new())
        .unwrap()
        .store(store);
    let mut remaining = Vec::new();
    for _ in 0..3 {
        let d = policy.allow_async("k", "/", 1).await.unwrap();
        assert!(d.allowed());
        remaining.push(d.remaining());
    }
    assert_eq!(remaining, vec![2, 1, 0]);
    let denied = policy.allow_async("k", "/", 1).await.unwrap();
    assert!(!denied.allowed());
    // The next permit is one emission interval (1 h) after the first, minus the time the
    // checks took: just under an hour, never more.
    let retry = denied.decision.retry_after.as_u64();
    assert!(retry <= 3600 * SEC && retry > 3500 * SEC, "{retry}");
    // A peek consumes nothing.
    let other = policy.peek_async("other", "/", 1).await.unwrap();
    assert_eq!(other.remaining(), 2);
    assert_eq!(
        policy
            .allow_async("other", "/", 1)
            .await
            .unwrap()
            .remaining(),
        2
    );
}

#[test]
fn lua_limb_arithmetic_is_exact() {
    let server = RedisServer::start();
    let script = format!(
        "local NL = 6\n{}\n{}",
        include_str!("../src/scripts/prelude.lua"),
        r#"
bind()
local out = {}
for i = 1, #ARGV, 3 do
  local x, y, z = hex(ARGV[i]), hex(ARGV[i + 1]), hex(ARGV[i + 2])
  local q, r = divmod(add(mul(x, y), z), y)
  out[#out + 1] = tohex(q) .. tohex(r) .. tohex(clamp_u64(mul(x, y))) .. tohex(sat_sub(x, y))
end
return out
"#
    );
    let mut rng = Rng::new(2026);
    let mut con = server.connection();
    let mut checked = 0;
    for round in 0..30 {
        let mut args = Vec::new();
        let mut triples = Vec::new();
        for _ in 0..200 {
            // Full width, random widths, small (double fast paths), near u64::MAX, around
            // 2^52..2^53 (the number/limb boundary) and around √2^53 (products crossing it).
            let width = |rng: &mut Rng| match round % 6 {
                0 => rng.next(),
                1 => rng.next() >> (rng.below(64) as u32),
                2 => rng.below(1 << 26),
                3 => u64::MAX - rng.below(1000),
                4 => (1u64 << (52 + rng.below(2))) + rng.below(2000) - 1000,
                _ => 94_906_265 + rng.below(2000) - 1000,
            };
            let x = width(&mut rng);
            let y = width(&mut rng).max(1);
            let z = rng.next() % y;
            args.extend([x, y, z].map(|v| format!("{v:016x}")));
            triples.push((x, y, z));
        }
        let got: Vec<String> = redis::cmd("EVAL")
            .arg(&script)
            .arg(0)
            .arg(&args)
            .query(&mut con)
            .expect("EVAL");
        for ((x, y, z), line) in triples.into_iter().zip(got) {
            let product = u128::from(x) * u128::from(y);
            let want = format!(
                "{x:016x}{z:016x}{:016x}{:016x}",
                u64::try_from(product).unwrap_or(u64::MAX),
                x.saturating_sub(y)
            );
            assert_eq!(line, want, "x={x} y={y} z={z}");
            checked += 1;
        }
    }
    assert_eq!(checked, 6000);
}

/// One tier of the store script's differential below: a core algorithm and what the
/// script is told of it (state tag letter, parameters, the most a window count holds).
#[derive(Clone, Copy)]
struct ScriptTier {
    algorithm: tollgate::PackedAlgorithm,
    name: &'static str,
    kind: char,
    a: u64,
    b: u64,
    cmax: u64,
    extra: u64,
    max_cost: u64,
}

impl ScriptTier {
    fn tag(&self) -> String {
        if self.kind == 't' {
            format!("t{:016x}", self.a)
        } else {
            format!("{}{:016x}{:016x}", self.kind, self.a, self.b)
        }
    }

    /// The stored value of core state `s` under this tier's tag.
    fn value(&self, s: u64) -> String {
        use tollgate::PackedAlgorithm as P;
        let fields = match self.algorithm {
            P::FixedWindow(f) => {
                let (i, c) = f.unpack(s);
                format!("{i:016x}{c:016x}")
            }
            P::SlidingWindowCounter(f) => {
                let (i, p, c) = f.unpack(s);
                format!("{i:016x}{p:016x}{c:016x}")
            }
            _ => format!("{s:016x}"),
        };
        format!("{}{fields}", self.tag())
    }
}

/// Values where the script changes representation: 2^52, 2^53, u64::MAX − 2^53 (where a
/// relative number could pass u64::MAX), 32-bit carries, today, the end of time.
fn edge_value(rng: &mut Rng) -> u64 {
    const PICKS: [u64; 12] = [
        u64::MAX,
        u64::MAX - (1 << 53),
        u64::MAX - (1 << 53) + 1,
        1 << 53,
        1 << 52,
        (1 << 53) - 1,
        0,
        1,
        1 << 32,
        (1 << 32) - 1,
        (4_292_870_144u64 << 32) - 1,
        4_292_870_144u64 << 32,
    ];
    match rng.below(9) {
        0 => PICKS[rng.below(PICKS.len() as u64) as usize],
        1 => rng.below(1 << 20),
        2 => 1_700_000_000_000_000_000 + rng.below(1 << 40),
        3 => u64::MAX - rng.below(1 << 40),
        4 => (1u64 << 53) - 20 + rng.below(40),
        5 => ((rng.below(1 << 32)) << 32) | (0xffff_fff0 + rng.below(16)),
        6 => rng.next(),
        7 => rng.below(1 << 53),
        _ => 1_700_000_000_000_000_000 + rng.below(1 << 55),
    }
}

fn edge_window(rng: &mut Rng) -> u64 {
    match rng.below(9) {
        0 => 1 + rng.below(5),
        1 => 1_000_000_000,
        2 => 60_000_000_000,
        3 => (1u64 << 52) - 2 + rng.below(5),
        4 => (1u64 << 53) - 2 + rng.below(5),
        5 => 1 + rng.below(1 << 52),
        6 => 400 * 86_400 * SEC,
        7 => u64::MAX - rng.below(1000),
        _ => (rng.next() >> rng.below(64)).max(1),
    }
}

fn script_tier(rng: &mut Rng) -> Option<ScriptTier> {
    use tollgate::Algorithm as _;
    use tollgate::{FixedWindow, Gcra, LeakyBucket, PackedAlgorithm as P, SlidingWindowCounter};
    let limit = |rng: &mut Rng| {
        let most = if rng.below(2) == 0 { 10 } else { u64::MAX - 1 };
        1 + rng.below(most)
    };
    Some(match rng.below(4) {
        0 | 1 => {
            let interval = match rng.below(3) {
                0 => 1 + rng.below(1000),
                1 => edge_window(rng),
                _ => 1 + rng.below(1 << 52),
            };
            let most = (u64::MAX / interval).min(limit(rng));
            let burst = 1 + rng.below(most);
            if rng.below(2) == 0 {
                let g = Gcra::from_interval(interval, burst).ok()?;
                let (extra, max_cost) = (g.tolerance().as_u64(), burst);
                ScriptTier {
                    algorithm: P::Gcra(g),
                    name: "gcra",
                    kind: 't',
                    a: interval,
                    b: 0,
                    cmax: 0,
                    extra,
                    max_cost,
                }
            } else {
                let l = LeakyBucket::from_interval(Nanos::new(interval), burst - 1).ok()?;
                let (extra, max_cost) = (l.horizon().as_u64(), P::LeakyBucket(l).max_cost());
                ScriptTier {
                    algorithm: P::LeakyBucket(l),
                    name: "leaky",
                    kind: 't',
                    a: interval,
                    b: 0,
                    cmax: 0,
                    extra,
                    max_cost,
                }
            }
        }
        2 => {
            let w = edge_window(rng);
            let f = FixedWindow::new(limit(rng), Nanos::new(w))
                .or_else(|_| FixedWindow::new(1 + rng.below(3), Nanos::new(w)))
                .ok()?;
            let (b, cmax) = (f.limit(), f.unpack(u64::MAX).1);
            ScriptTier {
                algorithm: P::FixedWindow(f),
                name: "fixed",
                kind: 'f',
                a: w,
                b,
                cmax,
                extra: 0,
                max_cost: b,
            }
        }
        _ => {
            let w = edge_window(rng);
            let f = SlidingWindowCounter::new(limit(rng), Nanos::new(w))
                .or_else(|_| SlidingWindowCounter::new(1 + rng.below(3), Nanos::new(w)))
                .ok()?;
            let (b, cmax) = (f.limit(), f.unpack(u64::MAX).2);
            ScriptTier {
                algorithm: P::SlidingWindowCounter(f),
                name: "swc",
                kind: 'c',
                a: w,
                b,
                cmax,
                extra: 0,
                max_cost: b,
            }
        }
    })
}

/// A stored state of `tier` near `now`: windows now's, late, stale or anywhere; instants
/// fresh, around 2^52 and 2^53 ns either side of now (where the script leaves relative
/// numbers), far ahead, at the end of time.
fn script_state(rng: &mut Rng, tier: &ScriptTier, now: u64) -> u64 {
    use tollgate::PackedAlgorithm as P;
    let count = |rng: &mut Rng| match rng.below(3) {
        0 => 0,
        1 => rng.below(tier.cmax.min(20) + 1),
        _ => rng.below(tier.cmax.saturating_add(1).max(1)),
    };
    let index = |rng: &mut Rng| {
        let (cur, last) = (now / tier.a, u64::MAX / tier.a);
        match rng.below(5) {
            0 => cur,
            1 => cur.saturating_sub(1 + rng.below(3)),
            2 => (cur + 1 + rng.below(3)).min(last),
            3 => rng.below(last.saturating_add(1).max(1)),
            _ => cur.saturating_sub(rng.below(1 << 53)),
        }
    };
    match tier.algorithm {
        P::FixedWindow(f) => f.pack(index(rng), count(rng)),
        P::SlidingWindowCounter(f) => f.pack(index(rng), count(rng), count(rng)),
        _ => {
            const AROUND: [u64; 4] = [
                1 << 52,
                1 << 53,
                (1 << 52) - (1 << 32),
                (1 << 52) + (1 << 32),
            ];
            let around = AROUND[rng.below(4) as usize];
            match rng.below(9) {
                0 => 0,
                1 => now.saturating_add(rng.below(tier.extra.saturating_add(2))),
                2 => now.saturating_sub(rng.below(1 << 40)),
                3 => now.saturating_add(rng.below(1 << 54)),
                4 => now.saturating_sub(rng.below(1 << 54)),
                5 => u64::MAX - rng.below(3),
                6 => now
                    .wrapping_sub(around)
                    .wrapping_add(rng.below(5))
                    .wrapping_sub(2),
                7 => now
                    .wrapping_add(around)
                    .wrapping_add(rng.below(5))
                    .wrapping_sub(2),
                _ => edge_value(rng),
            }
        }
    }
}

/// The script's argument encoding (`arg` in prelude.lua): hex, unpadded below 2^52.
fn script_arg(v: u64) -> String {
    if v < 1 << 52 {
        format!("{v:x}")
    } else {
        format!("{v:016x}")
    }
}

/// A reply field: an integer, or 16 hex digits.
fn reply_u64(v: &redis::Value) -> u64 {
    match v {
        redis::Value::Int(i) => u64::try_from(*i).expect("non-negative"),
        redis::Value::BulkString(b) => {
            u64::from_str_radix(std::str::from_utf8(b).expect("utf-8"), 16).expect("hex")
        }
        other => panic!("unexpected reply field {other:?}"),
    }
}

/// The policy store's script (a function library, so its per-window-length memo and cached
/// high digits persist across calls as in production) against the core, one tier per
/// call: random algorithms and parameters (windows of 1 ns to u64::MAX, bursts up to the
/// layout's maximum), states near the representation edges, stored under the tier's tag
/// or another algorithm's (a conversion: the core's `rescale`), checks, peeks, refunds
/// and charges, at times that step, jump, go back, and land on window boundaries and near
/// u64::MAX. Every decision and every written state equals the core's.
#[test]
fn the_store_script_decides_and_writes_exactly_as_the_core_at_the_edges() {
    use tollgate::Algorithm as _;
    let server = RedisServer::start();
    let mut con = server.connection();
    let script = tollgate_redis::LuaScript::for_store();
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(script.library())
        .query(&mut con)
        .expect("FUNCTION LOAD");
    let cases: usize = std::env::var("TOLLGATE_SCRIPT_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let mut rng = Rng::new(0x5eed_2026);
    let mut now = edge_value(&mut rng);
    let mut done = 0;
    while done < cases {
        now = match rng.below(6) {
            0 => edge_value(&mut rng),
            1 => now.wrapping_sub(rng.below(1 << 33)),
            2 => now.saturating_add(rng.below(1 << 50)),
            _ => now.saturating_add(rng.below(1 << 31)),
        };
        let Some(tier) = script_tier(&mut rng) else {
            continue;
        };
        if tier.kind != 't' && rng.below(3) == 0 {
            // on, just before, at the end of, or after a window boundary
            let base = (now / tier.a)
                .saturating_add(rng.below(3))
                .saturating_sub(1)
                .saturating_mul(tier.a);
            now = match rng.below(4) {
                0 => base,
                1 => base.saturating_sub(1),
                2 => base.saturating_add(tier.a - 1),
                _ => base.saturating_add(tier.a),
            };
        }
        let old = if rng.below(4) == 0 {
            match script_tier(&mut rng) {
                Some(o) => o,
                None => continue,
            }
        } else {
            tier
        };
        let present = rng.below(6) != 0;
        let stored = if present {
            script_state(&mut rng, &old, now)
        } else {
            0
        };
        let op = ["c", "c", "c", "p", "r", "g"][rng.below(6) as usize];
        let max_cost = tier.max_cost.min(u64::from(u32::MAX));
        let cost = match rng.below(4) {
            0 => 0,
            1 => 1,
            2 => rng.below(max_cost + 1),
            _ => max_cost,
        } as u32;
        let at = Nanos::new(now);
        // What the core does with the state as the script reads it (converted if foreign).
        let state = if present {
            tier.algorithm.rescale(&old.algorithm, stored, at)
        } else {
            0
        };
        // A GCRA / leaky bucket value sometimes as a key given headroom writes it (with 'h':
        // see write_word in store.lua), which reads the same.
        let suffix = if old.kind == 't' && rng.below(3) == 0 {
            "h"
        } else {
            ""
        };
        let stored_value = present.then(|| format!("{}{suffix}", old.value(stored)));
        let mut want_value = stored_value.clone();
        let mut want = None;
        match op {
            "c" | "p" => {
                let out = tier
                    .algorithm
                    .decide(state, at, cost)
                    .expect("cost within max_cost");
                want = Some(out.decision);
                if let (Some(next), "c") = (out.next, op) {
                    want_value = Some(tier.value(next));
                }
            }
            "r" => {
                if present {
                    want_value = Some(tier.value(tier.algorithm.refund(state, at, cost)));
                }
            }
            _ => want_value = Some(tier.value(tier.algorithm.charge(state, at, cost))),
        }
        // The tier's spec: name, tag, cmax and arguments, space-separated (store.lua).
        let mut spec = vec![
            tier.name.to_owned(),
            tier.tag(),
            script_arg(tier.cmax),
            script_arg(tier.a),
        ];
        if tier.kind == 't' {
            let cost_t = tier.a.saturating_mul(u64::from(cost));
            spec.extend([
                script_arg(tier.extra),
                script_arg(cost_t),
                script_arg(u64::from(cost)),
            ]);
        } else {
            spec.extend([script_arg(tier.b), script_arg(u64::from(cost))]);
        }
        // The mode (operation, TTL slack and a deadline in server ms never reached), the
        // spec, the client's time.
        let args = [
            format!("{op}3600000 9007199254740"),
            spec.join(" "),
            format!("{now:016x}"),
        ];
        let _: () = redis::cmd("DEL").arg("k").query(&mut con).expect("DEL");
        if present {
            let _: () = redis::cmd("SET")
                .arg("k")
                .arg(stored_value.as_deref().expect("present"))
                .query(&mut con)
                .expect("SET");
        }
        let reply: redis::Value = redis::cmd("FCALL")
            .arg(script.function_name())
            .arg(1)
            .arg("k")
            .arg(&args)
            .query(&mut con)
            .unwrap_or_else(|e| panic!("case {done} {op} {}->{}: {e}", old.name, tier.name));
        let what = format!(
            "case {done}: {op} {} -> {}, now {now:#x}, stored {stored:#x}, cost {cost}",
            old.name, tier.name
        );
        if let Some(d) = want {
            let redis::Value::Array(items) = &reply else {
                panic!("{what}: reply {reply:?}")
            };
            assert_eq!(items.len(), 4, "{what}: reply {reply:?}");
            // remaining, reset_after, then the wait: delay on an admit, minus retry_after
            // on a deny (the other is 0)
            let mut got: Vec<(bool, u64)> =
                items[1..3].iter().map(|v| (true, reply_u64(v))).collect();
            got.push(match &items[3] {
                redis::Value::Int(i) => (*i >= 0, i.unsigned_abs()),
                redis::Value::BulkString(b) => {
                    let s = std::str::from_utf8(b).expect("utf-8");
                    let (allowed, digits) = s.strip_prefix('-').map_or((true, s), |d| (false, d));
                    (allowed, u64::from_str_radix(digits, 16).expect("hex"))
                }
                other => panic!("{what}: wait {other:?}"),
            });
            let wait = if d.allowed {
                assert_eq!(d.retry_after, Nanos::ZERO);
                d.delay
            } else {
                assert_eq!(d.delay, Nanos::ZERO);
                d.retry_after
            };
            let expected = [
                (true, d.remaining),
                (true, d.reset_after.as_u64()),
                (d.allowed, wait.as_u64()),
            ];
            assert_eq!(got, expected, "{what}: decision");
        }
        let value: Option<String> = redis::cmd("GET").arg("k").query(&mut con).expect("GET");
        // A GCRA / leaky bucket state written may carry the headroom mark (write_word).
        let value = match (value, &want_value) {
            (Some(v), Some(w)) if tier.kind == 't' && v.len() == w.len() + 1 => {
                assert!(v.ends_with('h'), "{what}: stored {v}");
                Some(v[..w.len()].to_owned())
            }
            (v, _) => v,
        };
        assert_eq!(value, want_value, "{what}: stored state");
        done += 1;
    }
}

/// The store's function answers a one-tier GCRA check on an absent key by a fast path
/// (what the spec fixes, computed once: see `main` in `scripts/store.lua`); the `EVALSHA`
/// fallback, which never takes it, runs the general steps. Over GCRA and token-bucket
/// tiers of many shapes, fresh keys at the same client time: both give the in-process
/// store's decision and store the same value, their TTLs agree within 100 ms (the real
/// time between the two writes and the two reads; a TTL a few ms off is not caught here),
/// and a second check of each key (which reads what the first wrote, on the general
/// steps) still agrees with the in-process store.
#[test]
fn the_absent_key_fast_path_writes_what_the_general_steps_write() {
    let server = RedisServer::start();
    let store = |prefix: &str, functions: bool| {
        // Client time runs on a manual clock, but a key's TTL runs in real time: a minute of
        // slack keeps a key whose state resets within milliseconds alive until the second
        // check reads it, however slow the machine (the TTLs still compare within 100 ms).
        let config = RedisConfig::new(prefix)
            .unwrap()
            .with_time_source(TimeSource::Client)
            .with_functions(functions)
            .with_deny_cache(0)
            .with_ttl_slack(Duration::from_secs(60));
        RedisStore::new(single(&server), config).unwrap()
    };
    let mut rng = Rng::new(0x5eed_fa57);
    let clock = ManualClock::starting_at(Nanos::from_secs(1_700_000_000));
    let mut shapes = 0;
    for round in 0..60u64 {
        let limit = 1 + rng.below(1_000);
        let period = Nanos::from_millis(1 + rng.below(120_000));
        let burst = 1 + rng.below(limit.min(500));
        let algorithm = if round % 3 == 0 {
            AlgorithmConfig::TokenBucket {
                capacity: burst,
                refill_amount: limit,
                refill_period: period,
            }
        } else {
            AlgorithmConfig::Gcra {
                limit,
                period,
                burst,
            }
        };
        let rules = one_rule(&[("g", algorithm)]);
        let fast = Policy::new(rules.clone(), clock.clone())
            .unwrap()
            .store(store(&format!("fast{round}"), true));
        let general = Policy::new(rules.clone(), clock.clone())
            .unwrap()
            .store(store(&format!("general{round}"), false));
        let in_process = Policy::new(rules, clock.clone()).unwrap();
        // Connect and load the library (and its lookup tables) first.
        fast.allow("warm", "/", 1).unwrap();
        general.allow("warm", "/", 1).unwrap();
        in_process.allow("warm", "/", 1).unwrap();
        // Costs from 1 to the burst: half of them past the headroom mark, which the fast
        // path leaves to the general steps.
        for cost in [1, 1 + rng.below(burst), burst].map(|c| c as u32) {
            clock.advance(Nanos::from_micros(1 + rng.below(5_000_000)));
            let client = format!("c{round}-{cost}");
            let expected = in_process.allow(&client, "/", cost).unwrap();
            let by_fast = fast.allow(&client, "/", cost).unwrap();
            let by_general = general.allow(&client, "/", cost).unwrap();
            assert_eq!(by_fast, expected, "round {round}, cost {cost}: fast path");
            assert_eq!(by_general, expected, "round {round}, cost {cost}: general");
            let fast_key = fast.backend().redis_key("r", "g", Some(&client));
            let general_key = general.backend().redis_key("r", "g", Some(&client));
            let value = |key: &str| -> Option<String> {
                redis::cmd("GET")
                    .arg(key)
                    .query(&mut server.connection())
                    .unwrap()
            };
            assert_eq!(
                value(&fast_key),
                value(&general_key),
                "round {round}, cost {cost}: stored state"
            );
            let (a, b) = (pttl(&server, &fast_key), pttl(&server, &general_key));
            assert!(
                (a - b).abs() <= 100,
                "round {round}, cost {cost}: TTLs {a} and {b} ms"
            );
            // A second check reads what the first wrote.
            clock.advance(Nanos::from_micros(rng.below(1_000)));
            let expected = in_process.allow(&client, "/", 1).unwrap();
            assert_eq!(
                fast.allow(&client, "/", 1).unwrap(),
                expected,
                "round {round}"
            );
            assert_eq!(
                general.allow(&client, "/", 1).unwrap(),
                expected,
                "round {round}"
            );
            shapes += 1;
        }
    }
    assert_eq!(shapes, 180);
}
