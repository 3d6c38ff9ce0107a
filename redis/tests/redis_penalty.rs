//! The adaptive penalty and its reward with their state on Redis (a real redis-server on
//! loopback), as a fleet uses them: a client penalized through one process is penalized
//! in a process started after it, a reset through a third lifts it for all, a reward
//! earned through one holds in another, and every key the penalty writes expires with
//! its state. Each process is this test binary spawned again (as `redis_fleet_rules`
//! does), with its own connections and clock.

mod redis_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use redis_support::server::RedisServer;
use tollgate::policy::{
    AdaptivePenalty, PenaltyConfig, Policy, PolicyCheck, Request, RewardConfig,
};
use tollgate::{MonotonicClock, Nanos};
use tollgate_redis::{FailurePolicy, RedisConfig, RedisStore, RedisTarget};

type Guarded = AdaptivePenalty<Policy<MonotonicClock, RedisStore>, RedisStore>;

/// 4 per minute; 2 denials in a minute halve it for 10 minutes; each active second
/// without a deny earns a doubling, once.
fn guarded(url: &str, prefix: &str) -> Guarded {
    let target = RedisTarget::Single(url.to_owned());
    let store = |p: &str| RedisStore::new(target.clone(), RedisConfig::new(p).unwrap()).unwrap();
    let policy = Policy::from_toml(
        r#"
        [[rules]]
        name = "default"
        limit = 4
        window = "1m"
        algorithm = "fixed_window"
        "#,
        MonotonicClock::new(),
    )
    .unwrap()
    .store(store(prefix));
    let penalty = PenaltyConfig {
        denials: 2,
        period: Nanos::from_secs(60),
        divisor: 2,
        cooldown: Nanos::from_secs(600),
    };
    let reward = RewardConfig {
        window: Nanos::from_secs(1),
        quiet_windows: 1,
        factor: 2,
        max_factor: 2,
    };
    AdaptivePenalty::new(policy, penalty)
        .unwrap()
        .reward(reward)
        .unwrap()
        .store(store(&format!("{prefix}-penalty")))
}

/// What a process saw of `client`: `penalized limit multiplier`.
fn report(g: &Guarded, client: &str) -> String {
    let now = g.now();
    format!(
        "{} {} {}",
        u8::from(g.is_penalized(client, now)),
        g.peek(client, "/", 1).unwrap().limit(),
        g.reward_multiplier(client, now)
    )
}

/// One process of the fleet, doing what `TOLLGATE_PENALTY_ROLE` says and writing what it
/// saw to `TOLLGATE_PENALTY_OUT`.
#[test]
fn penalty_fleet_child() {
    let Ok(url) = std::env::var("TOLLGATE_PENALTY_URL") else {
        return; // a plain `cargo test` run: nothing to do
    };
    let prefix = std::env::var("TOLLGATE_PENALTY_PREFIX").unwrap();
    let role = std::env::var("TOLLGATE_PENALTY_ROLE").unwrap();
    let out = std::env::var("TOLLGATE_PENALTY_OUT").unwrap();
    let g = guarded(&url, &prefix);
    let written = match role.as_str() {
        // Eight checks against a limit of 4: the last four denied, penalized at the second.
        "abuse" => {
            let admitted = (0..8)
                .filter(|_| g.allow("abuser", "/", 1).unwrap().allowed())
                .count();
            format!("{admitted} {}", report(&g, "abuser"))
        }
        // A check, and another in the next second: one second complete without a deny.
        "earn" => {
            assert!(g.allow("steady", "/", 1).unwrap().allowed());
            std::thread::sleep(Duration::from_millis(1_100));
            assert!(g.allow("steady", "/", 1).unwrap().allowed());
            report(&g, "steady")
        }
        "observe" => format!(
            "{}\n{}\n{}",
            report(&g, "abuser"),
            report(&g, "steady"),
            report(&g, "fresh")
        ),
        other => panic!("unknown role {other}"),
    };
    std::fs::write(out, written).unwrap();
}

/// Runs one process of the fleet in `role` and returns what it wrote.
fn run(dir: &Path, url: &str, prefix: &str, role: &str) -> String {
    let out: PathBuf = dir.join(format!("{role}.out"));
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "penalty_fleet_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TOLLGATE_PENALTY_URL", url)
        .env("TOLLGATE_PENALTY_PREFIX", prefix)
        .env("TOLLGATE_PENALTY_ROLE", role)
        .env("TOLLGATE_PENALTY_OUT", &out)
        .stdin(Stdio::null())
        .status()
        .expect("spawn a fleet process");
    assert!(status.success(), "the {role} process failed");
    std::fs::read_to_string(out).unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tollgate-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_client_penalized_on_one_process_is_penalized_on_another() {
    let redis = RedisServer::start();
    let url = redis.url();
    let prefix = format!("pen{}", std::process::id());
    let dir = scratch("penalty");
    // Process 1: 4 admitted, then penalized: its limit halved to 2, no reward.
    assert_eq!(run(&dir, &url, &prefix, "abuse"), "4 1 2 1");
    // Process 2, started after: the same client is penalized there too (and out of its
    // quota, which is on Redis as well); a client it never saw is not.
    let seen = run(&dir, &url, &prefix, "observe");
    let lines: Vec<&str> = seen.lines().collect();
    assert_eq!(lines[0], "1 2 1", "abuser, on another process");
    assert_eq!(lines[2], "0 4 1", "a fresh client");
    // The penalty's keys are Redis keys with a TTL: the cooldown's runs out with it (its
    // reset, 10 minutes, plus less than the tier's horizon of headroom: the store's key
    // lifetime rule).
    let store = RedisStore::new(
        RedisTarget::Single(url.clone()),
        RedisConfig::new(&format!("{prefix}-penalty")).unwrap(),
    )
    .unwrap();
    let key = store.redis_key("tollgate:penalty", "cooldown", Some("abuser"));
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&key)
        .query(&mut redis.connection())
        .unwrap();
    let slack = store.config().ttl_slack().as_millis() as i64;
    assert!(
        (1..=1_200_000 + slack + 3).contains(&pttl),
        "{key}: {pttl} ms"
    );
    // An operator's reset through a third process lifts it for everyone.
    let operator = guarded(&url, &prefix);
    operator.reset_at(&Request::new("abuser", "/", 0), operator.now());
    let seen = run(&dir, &url, &prefix, "observe");
    assert_eq!(seen.lines().next(), Some("0 4 1"), "abuser after the reset");
}

#[test]
fn a_reward_earned_on_one_process_holds_on_another() {
    let redis = RedisServer::start();
    let url = redis.url();
    let prefix = format!("rew{}", std::process::id());
    let dir = scratch("reward");
    // Process 1: active in two seconds, never denied: doubled, 8 a minute.
    assert_eq!(run(&dir, &url, &prefix, "earn"), "0 8 2");
    // Process 2, within the second that follows: the same standing.
    let seen = run(&dir, &url, &prefix, "observe");
    assert_eq!(
        seen.lines().nth(1),
        Some("0 8 2"),
        "steady, on another process"
    );
}

/// The penalty's store down, failing closed: its made-up denies say nothing of a client,
/// so nobody is penalized for them (the policy's own limits decide), and nothing is
/// started on them either.
#[test]
fn a_penalty_store_that_is_down_penalizes_nobody() {
    let policy = Policy::from_toml(
        r#"
        [[rules]]
        name = "default"
        limit = 4
        window = "1m"
        algorithm = "fixed_window"
        "#,
        MonotonicClock::new(),
    )
    .unwrap();
    let down = RedisStore::new(
        RedisTarget::Single("redis://127.0.0.1:1".to_owned()),
        RedisConfig::new("down")
            .unwrap()
            .with_failure_policy(FailurePolicy::FailClosed {
                retry_after: Duration::from_secs(1),
            })
            .unwrap()
            .with_connect_timeout(Duration::from_millis(50)),
    )
    .unwrap();
    let penalty = PenaltyConfig {
        denials: 1,
        period: Nanos::from_secs(60),
        divisor: 2,
        cooldown: Nanos::from_secs(600),
    };
    let g = AdaptivePenalty::new(policy, penalty).unwrap().store(down);
    let admitted = (0..6)
        .filter(|_| g.allow("c", "/", 1).unwrap().allowed())
        .count();
    assert_eq!(admitted, 4, "the policy's own limit, undivided");
    assert!(!g.is_penalized("c", g.now()));
    assert_eq!(g.peek("fresh", "/", 1).unwrap().limit(), 4);
}
