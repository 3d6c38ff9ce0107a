//! The fleet rule source (`FleetRules`) against a real redis-server on loopback: a publish
//! checks the document and counts versions; a follower applies each version, keeps its
//! rules on a refused one (and does not retry it), catches up by polling alone, rides out
//! a Redis restart and reports the version it runs; a cluster works as one server does.
//!
//! And the design's use case end to end, with four real processes (this test binary
//! spawned four times, as `redis_leased_fleet` does): each checks `acct_123` on one Redis
//! under rules that allow it 100 per minute; one publish raises it to 500 per minute; every
//! process answers with the new limit soon after (the lag of each is printed, and checked
//! not timed: these machines are noisy), never goes back, and the
//! fleet admits no more than the rules allow: before the change within the old rule's
//! bound, over the whole run within the new one's on top of what was already used.

mod redis_support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis_support::server::{RedisCluster, RedisServer};
use tollgate::policy::{Policy, ReloadToml};
use tollgate::{Clock, MonotonicClock};
use tollgate_redis::{
    FleetRules, FleetRulesConfig, FleetRulesError, FleetRulesStatus, RedisConfig, RedisStore,
    RedisTarget,
};

/// acct_123 at `limit` per minute, everyone else at 100.
fn rules(limit: u32) -> String {
    format!(
        r#"
[[rules]]
name = "default"
limit = 100
window = "1m"

[[rules]]
name = "acct_123"
client = "acct_123"
limit = {limit}
window = "1m"
"#
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn config(prefix: &str) -> FleetRulesConfig {
    FleetRulesConfig::new(prefix)
        .unwrap()
        .with_poll_interval(Duration::from_millis(50))
        .unwrap()
}

/// Waits (at most 20 s) for `done` to hold of the follower's status.
fn wait_for(rules: &FleetRules, what: &str, done: impl Fn(&FleetRulesStatus) -> bool) {
    let start = Instant::now();
    loop {
        let status = rules.status();
        if done(&status) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{what}: {status:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The quota acct_123 is limited to by `policy` now (a peek: charges nothing).
fn quota(policy: &impl PolicyPeek) -> u64 {
    policy.quota_of("acct_123")
}

trait PolicyPeek {
    fn quota_of(&self, client: &str) -> u64;
}

impl<C: Clock, S: tollgate::policy::Store> PolicyPeek for Policy<C, S> {
    fn quota_of(&self, client: &str) -> u64 {
        self.peek(client, "/", 0).unwrap().tiers()[0].quota()
    }
}

#[test]
fn a_publish_checks_the_document_and_counts_versions() {
    let redis = RedisServer::start();
    let target = RedisTarget::Single(redis.url());
    let config = config("pub");
    runtime().block_on(async {
        assert!(FleetRules::published(&target, &config)
            .await
            .unwrap()
            .is_none());
        // Wrong, or empty: refused before Redis, nothing published.
        for wrong in [
            "[[rules]]\nname = \"x\"\nlimit = 0\nwindow = \"1m\"\n",
            "",
            "nonsense =",
        ] {
            let error = FleetRules::publish(&target, &config, wrong)
                .await
                .unwrap_err();
            assert!(matches!(error, FleetRulesError::Rules(_)), "{error}");
            assert!(error.to_string().contains("nothing published"), "{error}");
        }
        assert!(FleetRules::published(&target, &config)
            .await
            .unwrap()
            .is_none());
        assert_eq!(
            FleetRules::publish(&target, &config, &rules(100))
                .await
                .unwrap(),
            1
        );
        assert_eq!(
            FleetRules::publish(&target, &config, &rules(500))
                .await
                .unwrap(),
            2
        );
        assert_eq!(
            FleetRules::published(&target, &config).await.unwrap(),
            Some((2, rules(500)))
        );
        // Another prefix is another fleet.
        assert!(
            FleetRules::published(&target, &FleetRulesConfig::new("other").unwrap())
                .await
                .unwrap()
                .is_none()
        );
    });
    // A Redis that is not there: a typed error within the timeout, not a hang.
    drop(redis);
    let error = runtime()
        .block_on(FleetRules::publish(&target, &config, &rules(1)))
        .unwrap_err();
    assert!(matches!(error, FleetRulesError::Redis(_)), "{error}");
}

#[test]
fn a_follower_applies_each_version_and_keeps_its_rules_on_a_refused_one() {
    let redis = RedisServer::start();
    let target = RedisTarget::Single(redis.url());
    let config = config("follow").with_process_name("p1");
    let policy = Arc::new(Policy::from_toml(&rules(100), MonotonicClock::new()).unwrap());
    // Published before the follower starts: its first poll applies it.
    let rt = runtime();
    rt.block_on(FleetRules::publish(&target, &config, &rules(200)))
        .unwrap();
    let follower = FleetRules::follow(Arc::clone(&policy), target.clone(), config.clone()).unwrap();
    wait_for(&follower, "version 1", |s| s.version == Some(1));
    assert_eq!(quota(&*policy), 200);
    wait_for(&follower, "subscribed", |s| s.subscribed);
    // A new version, announced.
    rt.block_on(FleetRules::publish(&target, &config, &rules(500)))
        .unwrap();
    wait_for(&follower, "version 2", |s| s.version == Some(2));
    assert_eq!(quota(&*policy), 500);
    // A document the policy refuses, written past publish's check: the rules in force stay,
    // the refusal is counted once (not retried at every poll).
    let mut raw = redis.connection();
    let key = "follow:{#rules}";
    let _: () = redis::cmd("HSET")
        .arg(key)
        .arg("version")
        .arg(3)
        .arg("published_ms")
        .arg(1)
        .arg("rules")
        .arg("[[rules]]\nname = \"x\"\nlimit = 0\nwindow = \"1m\"\n")
        .query(&mut raw)
        .unwrap();
    wait_for(&follower, "version 3 refused", |s| s.refused == 1);
    std::thread::sleep(Duration::from_millis(300));
    let status = follower.status();
    assert_eq!(
        (
            status.version,
            status.latest,
            status.refused,
            status.applied
        ),
        (Some(2), Some(3), 1, 2),
        "{status:?}"
    );
    assert!(
        status
            .last_error
            .as_deref()
            .unwrap()
            .contains("version 3 refused"),
        "{status:?}"
    );
    assert_eq!(quota(&*policy), 500);
    // The next good publish applies.
    rt.block_on(FleetRules::publish(&target, &config, &rules(300)))
        .unwrap();
    wait_for(&follower, "version 4", |s| s.version == Some(4));
    assert_eq!(quota(&*policy), 300);
    // What the fleet runs: this process, at 4.
    let start = Instant::now();
    loop {
        let running = rt.block_on(FleetRules::running(&target, &config)).unwrap();
        if running.len() == 1 && running[0].version == 4 {
            assert_eq!(running[0].process, "p1");
            assert!(running[0].reported_ago < Duration::from_secs(20));
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{running:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Stopping leaves the list.
    drop(follower);
    assert!(rt
        .block_on(FleetRules::running(&target, &config))
        .unwrap()
        .is_empty());
    // A process gone without stopping (its entry stays, its report ages) is forgotten on
    // request.
    let _: () = redis::cmd("HSET")
        .arg("follow:{#rules}:running")
        .arg("crashed-7")
        .arg("4 1000")
        .query(&mut raw)
        .unwrap();
    let running = rt.block_on(FleetRules::running(&target, &config)).unwrap();
    assert_eq!(running.len(), 1);
    assert_eq!(
        (running[0].process.as_str(), running[0].version),
        ("crashed-7", 4)
    );
    assert!(running[0].reported_ago > Duration::from_secs(3600));
    rt.block_on(FleetRules::forget_process(&target, &config, "crashed-7"))
        .unwrap();
    assert!(rt
        .block_on(FleetRules::running(&target, &config))
        .unwrap()
        .is_empty());
}

#[test]
fn polling_alone_applies_a_version() {
    let redis = RedisServer::start();
    let target = RedisTarget::Single(redis.url());
    let config = config("poll").without_pubsub();
    let policy = Arc::new(Policy::from_toml(&rules(100), MonotonicClock::new()).unwrap());
    let follower = FleetRules::follow(Arc::clone(&policy), target.clone(), config.clone()).unwrap();
    runtime()
        .block_on(FleetRules::publish(&target, &config, &rules(400)))
        .unwrap();
    wait_for(&follower, "version 1", |s| s.version == Some(1));
    assert!(!follower.status().subscribed);
    assert_eq!(quota(&*policy), 400);
}

#[test]
fn a_follower_rides_out_a_redis_restart() {
    let mut redis = RedisServer::start();
    let target = RedisTarget::Single(redis.url());
    let config = config("restart");
    let policy = Arc::new(Policy::from_toml(&rules(100), MonotonicClock::new()).unwrap());
    let rt = runtime();
    rt.block_on(FleetRules::publish(&target, &config, &rules(200)))
        .unwrap();
    let follower = FleetRules::follow(Arc::clone(&policy), target.clone(), config.clone()).unwrap();
    wait_for(&follower, "version 1", |s| s.version == Some(1));
    redis.kill();
    wait_for(&follower, "failing polls", |s| s.failures >= 3);
    wait_for(&follower, "the subscription gone", |s| !s.subscribed);
    assert!(follower.status().last_error.is_some());
    assert_eq!(quota(&*policy), 200, "the rules in force are kept");
    // Back, empty (no persistence): the next publish is version 1 again, published later
    // than the version 1 this process runs, so it applies.
    redis.restart();
    wait_for(&follower, "subscribed again", |s| s.subscribed);
    rt.block_on(FleetRules::publish(&target, &config, &rules(700)))
        .unwrap();
    wait_for(&follower, "the new version", |s| s.applied == 2);
    assert_eq!(quota(&*policy), 700);
}

#[test]
fn a_cluster_publishes_and_follows_as_one_server_does() {
    let cluster = RedisCluster::start();
    let target = RedisTarget::Cluster(cluster.urls());
    let config = config("cluster");
    let policy = Arc::new(Policy::from_toml(&rules(100), MonotonicClock::new()).unwrap());
    let follower = FleetRules::follow(Arc::clone(&policy), target.clone(), config.clone()).unwrap();
    let rt = runtime();
    assert_eq!(
        rt.block_on(FleetRules::publish(&target, &config, &rules(250)))
            .unwrap(),
        1
    );
    wait_for(&follower, "version 1", |s| s.version == Some(1));
    assert_eq!(quota(&*policy), 250);
    assert_eq!(
        rt.block_on(FleetRules::published(&target, &config))
            .unwrap()
            .map(|(v, _)| v),
        Some(1)
    );
}

/// A `ReloadToml` that is not a policy: what a server with rules of its own plugs in.
#[test]
fn anything_that_reloads_toml_can_follow() {
    struct Recorder(std::sync::Mutex<Vec<String>>);
    impl ReloadToml for Recorder {
        fn reload_toml(
            &self,
            text: &str,
        ) -> Result<tollgate::policy::ReloadReport, tollgate::policy::PolicyConfigError> {
            self.0.lock().unwrap().push(text.to_owned());
            let policy = Policy::from_toml(&rules(1), MonotonicClock::new())?;
            policy.reload_toml(text)
        }
    }
    let redis = RedisServer::start();
    let target = RedisTarget::Single(redis.url());
    let config = config("recorder");
    let recorder = Arc::new(Recorder(std::sync::Mutex::new(Vec::new())));
    let follower =
        FleetRules::follow(Arc::clone(&recorder), target.clone(), config.clone()).unwrap();
    runtime()
        .block_on(FleetRules::publish(&target, &config, &rules(9)))
        .unwrap();
    wait_for(&follower, "version 1", |s| s.version == Some(1));
    assert_eq!(*recorder.0.lock().unwrap(), vec![rules(9)]);
}

// ---- The fleet: four processes, one publish. ----

const PROCESSES: usize = 4;
/// How long the fleet runs after the publish.
const AFTER_MS: u64 = 4_000;

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// One process of the fleet: checks acct_123 every 2 ms until told time, writing
/// `unix_ms version allowed quota` per decision.
#[test]
fn fleet_rules_child() {
    let Ok(url) = std::env::var("TOLLGATE_FLEET_RULES_URL") else {
        return; // a plain `cargo test` run: nothing to do
    };
    let prefix = std::env::var("TOLLGATE_FLEET_RULES_PREFIX").unwrap();
    let until: u64 = std::env::var("TOLLGATE_FLEET_RULES_UNTIL")
        .unwrap()
        .parse()
        .unwrap();
    let out = std::env::var("TOLLGATE_FLEET_RULES_OUT").unwrap();
    let target = RedisTarget::Single(url);
    let store = RedisStore::new(target.clone(), RedisConfig::new(&prefix).unwrap()).unwrap();
    let policy = Arc::new(
        Policy::from_toml(&rules(100), MonotonicClock::new())
            .unwrap()
            .store(store),
    );
    let process = format!("child-{}", std::process::id());
    let config = FleetRulesConfig::new(&prefix)
        .unwrap()
        .with_process_name(&process);
    let follower = FleetRules::follow(Arc::clone(&policy), target, config).unwrap();
    let mut lines = String::new();
    let mut ready = false;
    while unix_ms() < until {
        let decision = policy.allow("acct_123", "/", 1).unwrap();
        let version = follower.status().version.unwrap_or(0);
        lines.push_str(&format!(
            "{} {} {} {}\n",
            unix_ms(),
            version,
            u8::from(decision.allowed()),
            decision.tiers()[0].quota()
        ));
        if !ready {
            std::fs::write(format!("{out}.ready"), "").unwrap();
            ready = true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    std::fs::write(&out, lines).unwrap();
}

/// A decision a child wrote.
struct Line {
    at: u64,
    version: u64,
    allowed: bool,
    quota: u64,
}

fn read_lines(path: &Path) -> Vec<Line> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<u64> = l.split(' ').map(|x| x.parse().unwrap()).collect();
            Line {
                at: f[0],
                version: f[1],
                allowed: f[2] == 1,
                quota: f[3],
            }
        })
        .collect()
}

#[test]
fn one_publish_raises_a_client_on_every_process() {
    let redis = RedisServer::start();
    let url = redis.url();
    let target = RedisTarget::Single(url.clone());
    let prefix = format!("fleet{}", std::process::id());
    let dir = std::env::temp_dir().join(format!("tollgate-fleet-rules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Long enough for every child to start and check under the old rules first.
    let publish_at = unix_ms() + 2_500;
    let until = publish_at + AFTER_MS;
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<Child> = (0..PROCESSES)
        .map(|i| {
            let log = std::fs::File::create(dir.join(format!("child{i}.log"))).unwrap();
            Command::new(&exe)
                .args([
                    "--exact",
                    "fleet_rules_child",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("TOLLGATE_FLEET_RULES_URL", &url)
                .env("TOLLGATE_FLEET_RULES_PREFIX", &prefix)
                .env("TOLLGATE_FLEET_RULES_UNTIL", until.to_string())
                .env(
                    "TOLLGATE_FLEET_RULES_OUT",
                    dir.join(format!("child{i}.out")),
                )
                .stdin(Stdio::null())
                .stdout(Stdio::from(log.try_clone().unwrap()))
                .stderr(Stdio::from(log))
                .spawn()
                .expect("spawn a fleet process")
        })
        .collect();
    // Every child checking before the publish (its first decision written).
    for i in 0..PROCESSES {
        let ready = dir.join(format!("child{i}.out.ready"));
        while !ready.exists() {
            assert!(unix_ms() < publish_at + 10_000, "child {i} never started");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    while unix_ms() < publish_at {
        std::thread::sleep(Duration::from_millis(1));
    }
    // The operator's one command.
    let config = FleetRulesConfig::new(&prefix).unwrap();
    let rt = runtime();
    let published = unix_ms();
    let version = rt
        .block_on(FleetRules::publish(&target, &config, &rules(500)))
        .unwrap();
    assert_eq!(version, 1);
    // Every process reports running it.
    let start = Instant::now();
    let running = loop {
        let running = rt.block_on(FleetRules::running(&target, &config)).unwrap();
        if running.len() == PROCESSES && running.iter().all(|r| r.version == 1) {
            break running;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{running:?}");
        std::thread::sleep(Duration::from_millis(10));
    };
    for child in &mut children {
        assert!(child.wait().unwrap().success());
    }
    assert!(running.iter().all(|r| r.process.starts_with("child-")));

    let bound = config.bound();
    let mut admitted = 0u64;
    let mut admitted_before = 0u64;
    let mut first = u64::MAX;
    let mut lags = Vec::new();
    for i in 0..PROCESSES {
        let lines = read_lines(&dir.join(format!("child{i}.out")));
        assert!(!lines.is_empty());
        first = first.min(lines[0].at);
        // Under the old rule until its first decision under the new one, then never back.
        let switch = lines
            .iter()
            .position(|l| l.quota == 500)
            .unwrap_or_else(|| panic!("child {i} never answered 500"));
        assert!(lines[..switch].iter().all(|l| l.quota == 100));
        assert!(lines[switch..].iter().all(|l| l.quota == 500));
        // The version it reports (read just after each decision) never goes back.
        assert!(lines.windows(2).all(|w| w[0].version <= w[1].version));
        assert_eq!(lines.last().unwrap().version, 1);
        lags.push(lines[switch].at.saturating_sub(published));
        for l in &lines {
            if l.allowed {
                admitted += 1;
                if l.at < published {
                    admitted_before += 1;
                }
            }
        }
    }
    let end = until;
    println!(
        "fleet rules: {PROCESSES} processes answered 500 after {lags:?} ms (bound {bound:?}); \
         admitted {admitted_before} before the publish, {admitted} in all"
    );
    // Every process answered 500 before it stopped (checked above); how soon is measured
    // and printed, not asserted (these machines are noisy).
    // GCRA, 100 then 500 per minute, burst = limit: admitted over Δ ms at most
    // burst + Δ / emission interval (+1 for the partial interval).
    let old_bound = 100 + (published - first) / 600 + 1;
    assert!(
        admitted_before <= old_bound,
        "{admitted_before} > {old_bound}"
    );
    let new_bound = 500 + (end - first) / 120 + 1;
    assert!(admitted <= new_bound, "{admitted} > {new_bound}");
    // The raise took effect across the fleet: far more than the old rule could admit.
    assert!(admitted > 100 + (end - first) / 600 + 1, "{admitted}");
    let _ = std::fs::remove_dir_all(&dir);
}
