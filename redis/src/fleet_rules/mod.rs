//! [`FleetRules`]: one rules document for a whole fleet. An operator publishes it once into
//! Redis ([`FleetRules::publish`], versioned); every process that follows it
//! ([`FleetRules::follow`]) applies each new version to its policy within a stated bound,
//! and says in Redis which version it runs ([`FleetRules::running`]).
//!
//! In Redis, under the store's prefix (see `keys`): the hash `{prefix}:{#rules}` (`version`,
//! `rules`, `published_ms`), written by one script so a version and its text never part;
//! the channel of the same name, on which each publish announces its version; and the hash
//! `{prefix}:{#rules}:running` (process → `version unix_ms`), each follower's heartbeat.

mod config;
mod error;
mod follower;
mod link;

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use redis::Script;
use tokio::sync::watch;
use tollgate::policy::{PolicyConfig, ReloadToml};

pub use self::config::{FleetRulesConfig, DEFAULT_POLL_INTERVAL, DEFAULT_RULES_TIMEOUT};
pub use self::error::FleetRulesError;
use self::follower::Follower;
use self::link::{bounded, unix_ms, Link};
use crate::keys::{rules_key, running_key};
use crate::RedisTarget;

/// Publishes a document: its version one past the last (the first is 1), its text and
/// when, then announces the version. One script, so no reader sees a version with another
/// version's text.
const PUBLISH: &str = r"
local version = redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('HSET', KEYS[1], 'rules', ARGV[1], 'published_ms', ARGV[2])
redis.call('PUBLISH', KEYS[1], version)
return version
";

/// What a follower has done ([`FleetRules::status`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FleetRulesStatus {
    /// The published version in force in this process (`None`: its own rules, nothing
    /// applied from the fleet yet).
    pub version: Option<u64>,
    /// The newest version seen published (ahead of `version` when it was refused).
    pub latest: Option<u64>,
    /// Versions applied.
    pub applied: u64,
    /// Versions refused by the policy (the rules in force kept; each version tried once).
    pub refused: u64,
    /// Polls that failed (Redis down, slow or erring).
    pub failures: u64,
    /// The last refusal or failure, as said.
    pub last_error: Option<String>,
    /// Whether announcements arrive by pub/sub now (otherwise by polling only).
    pub subscribed: bool,
}

/// The version one process runs, as it last reported ([`FleetRules::running`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunningVersion {
    /// The process's name ([`FleetRulesConfig::with_process_name`]).
    pub process: String,
    /// The published version in force there (0: its own rules).
    pub version: u64,
    /// How long ago it reported (every poll interval while it runs).
    pub reported_ago: Duration,
}

/// A process following its fleet's rules: each version published under the prefix is
/// applied to the policy as it appears, on a thread of the follower's own (so a reload
/// never runs on, or waits for, an async runtime's worker). Dropping it stops following.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use tollgate::policy::Policy;
/// use tollgate::MonotonicClock;
/// use tollgate_redis::{FleetRules, FleetRulesConfig, RedisConfig, RedisStore, RedisTarget};
///
/// let target = RedisTarget::Single("redis://127.0.0.1:6379".into());
/// let store = RedisStore::new(target.clone(), RedisConfig::new("api")?)?;
/// let local = std::fs::read_to_string("rules.toml")?;
/// let policy = Arc::new(Policy::from_toml(&local, MonotonicClock::new())?.store(store));
/// // Every process: follow (the published rules replace the local ones once there are any).
/// let rules = FleetRules::follow(Arc::clone(&policy), target.clone(), FleetRulesConfig::new("api")?)?;
///
/// // The operator, once, from anywhere:
/// let raised = r#"
///     [[rules]]
///     name = "acct_123"
///     client = "acct_123"
///     limit = 500
///     window = "1m"
/// "#;
/// let version = FleetRules::publish(&target, &FleetRulesConfig::new("api")?, raised).await?;
/// // … within `FleetRulesConfig::bound()` every follower runs it:
/// for process in FleetRules::running(&target, &FleetRulesConfig::new("api")?).await? {
///     println!("{} runs version {}", process.process, process.version);
/// }
/// println!("{version}: {:?}", rules.status());
/// # Ok(()) }
/// ```
///
/// # When a version applies
///
/// Each publish announces its version on the channel; a follower subscribed to it reads
/// the document at once. Announcements can be missed (a subscription reconnecting, a
/// proxy without pub/sub), so every follower also reads the published version every poll
/// interval: a version is applied within [`FleetRulesConfig::bound`] of its publish (1 s
/// by default) while Redis answers. While it does not, each process keeps the rules it
/// has (failures counted in [`FleetRules::status`], a `warn` when polls start failing,
/// an `info` when they succeed again) and catches up at its first poll that succeeds.
///
/// A version the policy refuses (wrong rules, no rules: see [`Policy::reload`]) is not
/// applied: the rules in force stay, the refusal is counted and reported (the policy's own
/// event, and this follower's `warn` naming the version), and it is not tried again; the
/// next publish is. [`FleetRules::publish`] checks a document the same way first, so a
/// refusal means a document published by other means or a policy that differs.
///
/// # Safety while processes disagree
///
/// Between a publish and the last follower applying it, processes run different rules on
/// the same keys. Every stored state is tagged with the parameters it was written under,
/// and converted by the core's rescale when a check under other parameters meets it, so a
/// key is never admitted beyond what the rule deciding each request allows on top of what
/// was already used, whichever process decides it.
///
/// # Seeing what the fleet runs
///
/// Each follower writes its version to Redis at every poll; [`FleetRules::running`] lists
/// them, with how long ago each reported (a process that stopped reporting is gone or cut
/// off). Metrics (feature `metrics`): the gauge `tollgate_fleet_rules_version{prefix}` and
/// the counter `tollgate_fleet_rules_total{prefix,outcome}` (`applied`, `refused`,
/// `failed`).
///
/// [`Policy::reload`]: tollgate::policy::Policy::reload
pub struct FleetRules {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    thread: Option<JoinHandle<()>>,
}

/// What the follower's thread and its handle share.
pub(super) struct Shared {
    status: Mutex<FleetRulesStatus>,
}

impl Shared {
    pub(super) fn update(&self, change: impl FnOnce(&mut FleetRulesStatus)) {
        change(&mut self.status.lock().unwrap_or_else(PoisonError::into_inner));
    }
}

impl fmt::Debug for FleetRules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetRules")
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}

impl FleetRules {
    /// Follows the rules published under `config`'s prefix on `target`, applying each
    /// version to `rules` (a [`Policy`](tollgate::policy::Policy) on any store) from a
    /// thread of its own. Returns at once; the first poll reads what is published already
    /// (a process that starts after a publish runs the published rules within the bound).
    pub fn follow<R>(
        rules: Arc<R>,
        target: RedisTarget,
        config: FleetRulesConfig,
    ) -> Result<FleetRules, FleetRulesError>
    where
        R: ReloadToml + Send + Sync + 'static,
    {
        FleetRules::follow_with(move |text| rules.reload_toml(text), target, config)
    }

    /// [`follow`](Self::follow) for rules in a format of the caller's: `apply` is called,
    /// on the follower's thread, with each version's document; `Ok` says what changed, `Err`
    /// why it was refused (the rules in force kept, the version not tried again). What a
    /// server with a config format of its own plugs in.
    pub fn follow_with<F, D, E>(
        apply: F,
        target: RedisTarget,
        config: FleetRulesConfig,
    ) -> Result<FleetRules, FleetRulesError>
    where
        F: FnMut(&str) -> Result<D, E> + Send + 'static,
        D: fmt::Display,
        E: fmt::Display,
    {
        let shared = Arc::new(Shared {
            status: Mutex::new(FleetRulesStatus::default()),
        });
        let (stop, stopped) = watch::channel(false);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| FleetRulesError::Thread(e.to_string()))?;
        let follower = Follower::new(Arc::clone(&shared), apply, target, config);
        let thread = thread::Builder::new()
            .name("tollgate-fleet-rules".into())
            .spawn(move || runtime.block_on(follower.run(stopped)))
            .map_err(|e| FleetRulesError::Thread(e.to_string()))?;
        Ok(FleetRules {
            shared,
            stop,
            thread: Some(thread),
        })
    }

    /// What the follower has done so far.
    pub fn status(&self) -> FleetRulesStatus {
        self.shared
            .status
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Publishes `text` as the fleet's rules under `config`'s prefix: checked first
    /// ([`PolicyConfig::from_toml`]: a wrong or empty document is refused and nothing is
    /// published), then stored with the next version and announced. Returns the version.
    /// Publishers racing each get their own version; the last to publish wins.
    pub async fn publish(
        target: &RedisTarget,
        config: &FleetRulesConfig,
        text: &str,
    ) -> Result<u64, FleetRulesError> {
        FleetRules::publish_with(target, config, text, |text| {
            PolicyConfig::from_toml(text).map(drop)
        })
        .await
    }

    /// [`publish`](Self::publish) for rules in a format of the caller's, checked by
    /// `check` (the followers' [`follow_with`](Self::follow_with) applies them).
    pub async fn publish_with<E>(
        target: &RedisTarget,
        config: &FleetRulesConfig,
        text: &str,
        check: impl FnOnce(&str) -> Result<(), E>,
    ) -> Result<u64, FleetRulesError>
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        check(text).map_err(|e| FleetRulesError::Rules(Box::new(e)))?;
        let key = rules_key(&config.prefix);
        let mut link = Link::connect(target, config.timeout).await?;
        let now_ms = unix_ms();
        let script = Script::new(PUBLISH);
        let mut invocation = script.key(&key);
        invocation.arg(text).arg(now_ms);
        let version: u64 = bounded(config.timeout, async {
            match &mut link {
                Link::Single(c) => invocation.invoke_async(c).await,
                Link::Cluster(c) => invocation.invoke_async(c).await,
            }
        })
        .await?;
        Ok(version)
    }

    /// The rules published under `config`'s prefix: their version and text (`None` if
    /// nothing was ever published).
    pub async fn published(
        target: &RedisTarget,
        config: &FleetRulesConfig,
    ) -> Result<Option<(u64, String)>, FleetRulesError> {
        let mut link = Link::connect(target, config.timeout).await?;
        let (version, text): (Option<u64>, Option<String>) = link
            .query(
                redis::cmd("HMGET")
                    .arg(rules_key(&config.prefix))
                    .arg("version")
                    .arg("rules"),
                config.timeout,
            )
            .await?;
        Ok(version.zip(text))
    }

    /// The version each process following `config`'s prefix runs, as it last reported,
    /// sorted by process name. A process that stopped (or was cut off from Redis) stays
    /// listed with a growing [`reported_ago`](RunningVersion::reported_ago) until
    /// [`forget_process`](Self::forget_process) removes it; one that stops normally
    /// removes itself.
    pub async fn running(
        target: &RedisTarget,
        config: &FleetRulesConfig,
    ) -> Result<Vec<RunningVersion>, FleetRulesError> {
        let mut link = Link::connect(target, config.timeout).await?;
        let entries: Vec<(String, String)> = link
            .query(
                redis::cmd("HGETALL").arg(running_key(&config.prefix)),
                config.timeout,
            )
            .await?;
        let now = unix_ms();
        let mut running: Vec<RunningVersion> = entries
            .into_iter()
            .filter_map(|(process, report)| {
                let (version, at) = report.split_once(' ')?;
                Some(RunningVersion {
                    process,
                    version: version.parse().ok()?,
                    reported_ago: Duration::from_millis(now.saturating_sub(at.parse().ok()?)),
                })
            })
            .collect();
        running.sort_by(|a, b| a.process.cmp(&b.process));
        Ok(running)
    }

    /// Removes `process` from [`running`](Self::running) (a process that is gone for
    /// good without stopping normally).
    pub async fn forget_process(
        target: &RedisTarget,
        config: &FleetRulesConfig,
        process: &str,
    ) -> Result<(), FleetRulesError> {
        let mut link = Link::connect(target, config.timeout).await?;
        let _: u64 = link
            .query(
                redis::cmd("HDEL")
                    .arg(running_key(&config.prefix))
                    .arg(process),
                config.timeout,
            )
            .await?;
        Ok(())
    }
}

impl Drop for FleetRules {
    /// Stops following: the thread ends at its next await (after a reload under way, never
    /// waiting out a poll interval or a call), removes this process from
    /// [`running`](Self::running) within one timeout, and is joined. It blocks for that
    /// long: from async code, drop it where blocking is allowed (`spawn_blocking`).
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
