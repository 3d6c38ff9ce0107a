//! [`FleetRules`]: one rules document for a whole fleet. An operator publishes it once into
//! Redis ([`FleetRules::publish`], versioned); every process that follows it
//! ([`FleetRules::follow`]) applies each new version to its policy within a stated bound,
//! and says in Redis which version it runs ([`FleetRules::running`]).
//!
//! In Redis, under the store's prefix (see `keys`): the hash `{prefix}:{#rules}` (`version`,
//! `rules`, `published_ms`), written by one script so a version and its text never part;
//! the channel of the same name, on which each publish announces its version; and the hash
//! `{prefix}:{#rules}:running` (process → `version unix_ms`), each follower's heartbeat.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use redis::aio::{MultiplexedConnection, PubSubStream};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Client, Cmd, FromRedisValue, RedisError, Script};
use tokio::sync::watch;
use tollgate::policy::{PolicyConfig, ReloadToml};

use super::keys::{rules_key, running_key, validate_name};
use super::{events, BuildError, RedisTarget};

/// How often a follower reads the published version by default (its fallback when an
/// announcement is missed: a subscription down, a proxy without pub/sub).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(500);

/// How long a follower or a publisher waits for each Redis call by default.
pub const DEFAULT_RULES_TIMEOUT: Duration = Duration::from_millis(250);

/// The shortest [`FleetRulesConfig::with_poll_interval`].
const MIN_POLL_INTERVAL: Duration = Duration::from_millis(10);
/// The longest [`FleetRulesConfig::with_poll_interval`] and
/// [`FleetRulesConfig::with_timeout`].
const MAX_INTERVAL: Duration = Duration::from_secs(3600);

/// Publishes a document: its version one past the last (the first is 1), its text and
/// when, then announces the version. One script, so no reader sees a version with another
/// version's text.
const PUBLISH: &str = r"
local version = redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('HSET', KEYS[1], 'rules', ARGV[1], 'published_ms', ARGV[2])
redis.call('PUBLISH', KEYS[1], version)
return version
";

/// How a process follows, or an operator publishes, the fleet rules of one key prefix.
///
/// ```
/// use std::time::Duration;
/// use tollgate_redis::FleetRulesConfig;
/// let config = FleetRulesConfig::new("api")?.with_poll_interval(Duration::from_millis(200))?;
/// assert_eq!(config.bound(), Duration::from_millis(700));
/// assert!(FleetRulesConfig::new("a:b").is_err());
/// # Ok::<(), tollgate_redis::BuildError>(())
/// ```
#[derive(Clone, Debug)]
pub struct FleetRulesConfig {
    prefix: String,
    poll_interval: Duration,
    timeout: Duration,
    subscribe: bool,
    process: String,
}

impl FleetRulesConfig {
    /// The fleet rules under `prefix` (the prefix of the fleet's stores, by convention):
    /// announcements by pub/sub, a poll every [`DEFAULT_POLL_INTERVAL`], each call given
    /// [`DEFAULT_RULES_TIMEOUT`], this process named `{host}-{pid}`.
    pub fn new(prefix: &str) -> Result<FleetRulesConfig, BuildError> {
        validate_name(prefix)?;
        Ok(FleetRulesConfig {
            prefix: prefix.to_owned(),
            poll_interval: DEFAULT_POLL_INTERVAL,
            timeout: DEFAULT_RULES_TIMEOUT,
            subscribe: true,
            process: default_process_name(),
        })
    }

    /// How often a follower reads the published version (10 ms to an hour).
    pub fn with_poll_interval(mut self, interval: Duration) -> Result<Self, BuildError> {
        if !(MIN_POLL_INTERVAL..=MAX_INTERVAL).contains(&interval) {
            return Err(BuildError::OutOfRange {
                setting: "poll_interval",
                range: "10ms..=1h",
            });
        }
        self.poll_interval = interval;
        Ok(self)
    }

    /// How long each Redis call may take before it counts as failed (1 ms to an hour).
    pub fn with_timeout(mut self, timeout: Duration) -> Result<Self, BuildError> {
        if !(Duration::from_millis(1)..=MAX_INTERVAL).contains(&timeout) {
            return Err(BuildError::OutOfRange {
                setting: "timeout",
                range: "1ms..=1h",
            });
        }
        self.timeout = timeout;
        Ok(self)
    }

    /// Polls only, without subscribing to announcements: for a Redis proxy without
    /// pub/sub. Versions then arrive at the next poll, still within [`bound`](Self::bound).
    pub fn without_pubsub(mut self) -> Self {
        self.subscribe = false;
        self
    }

    /// The name this process reports its version under ([`FleetRules::running`]).
    pub fn with_process_name(mut self, name: &str) -> Self {
        name.clone_into(&mut self.process);
        self
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The bound on when a follower applies a published version, while Redis answers:
    /// a poll interval (it may just have polled) and the two calls of a poll that finds
    /// it (the version, then the document). An announcement usually brings it in one round
    /// trip. Compiling the rules comes on top (microseconds per rule). 1 s by default.
    pub fn bound(&self) -> Duration {
        self.poll_interval + 2 * self.timeout
    }
}

/// `{host}-{pid}`, the host from the environment or the kernel.
fn default_process_name() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "process".to_owned());
    format!("{host}-{}", std::process::id())
}

/// What went wrong publishing or reading the fleet rules, or starting a follower.
#[derive(Debug)]
#[non_exhaustive]
pub enum FleetRulesError {
    /// The document was refused before it reached Redis: its rules are wrong, or it has
    /// none. Nothing was published. From [`FleetRules::publish`], a
    /// [`PolicyConfigError`](tollgate::policy::PolicyConfigError) (downcast to read its
    /// path); from [`FleetRules::publish_with`], the check's own error.
    Rules(Box<dyn std::error::Error + Send + Sync>),
    /// Redis failed, or did not answer within the timeout: what it said.
    Redis(String),
    /// The follower's thread could not be started.
    Thread(String),
}

impl fmt::Display for FleetRulesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FleetRulesError::Rules(e) => write!(f, "rules refused, nothing published: {e}"),
            FleetRulesError::Redis(e) => write!(f, "fleet rules: Redis failed: {e}"),
            FleetRulesError::Thread(e) => {
                write!(f, "fleet rules: cannot start the follower: {e}")
            }
        }
    }
}

impl std::error::Error for FleetRulesError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FleetRulesError::Rules(e) => Some(&**e),
            FleetRulesError::Redis(_) | FleetRulesError::Thread(_) => None,
        }
    }
}

impl From<RedisError> for FleetRulesError {
    fn from(e: RedisError) -> Self {
        FleetRulesError::Redis(e.to_string())
    }
}

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
struct Shared {
    status: Mutex<FleetRulesStatus>,
}

impl Shared {
    fn update(&self, change: impl FnOnce(&mut FleetRulesStatus)) {
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
        let follower = Follower {
            shared: Arc::clone(&shared),
            apply,
            target,
            config,
            link: None,
            applied: None,
            refused: None,
            failing: false,
        };
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
    /// Stops following: the thread ends (after a reload under way, never waiting out a
    /// poll interval), removes this process from [`running`](Self::running) within one
    /// timeout, and is joined.
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A connection for the fleet rules' few calls: one server or a cluster.
enum Link {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Link {
    /// Connects to `target`, within `timeout`.
    async fn connect(target: &RedisTarget, timeout: Duration) -> Result<Link, FleetRulesError> {
        bounded(timeout, async {
            match target {
                RedisTarget::Single(url) => {
                    let config = AsyncConnectionConfig::new()
                        .set_connection_timeout(Some(timeout))
                        .set_response_timeout(Some(timeout));
                    let client = Client::open(url.as_str())?;
                    Ok(Link::Single(
                        client
                            .get_multiplexed_async_connection_with_config(&config)
                            .await?,
                    ))
                }
                RedisTarget::Cluster(urls) => {
                    let client = ClusterClient::builder(urls.iter().map(String::as_str))
                        .connection_timeout(timeout)
                        .response_timeout(timeout)
                        .build()?;
                    Ok(Link::Cluster(client.get_async_connection().await?))
                }
            }
        })
        .await
    }

    /// Runs `cmd`, within `timeout`.
    async fn query<T: FromRedisValue>(
        &mut self,
        cmd: &Cmd,
        timeout: Duration,
    ) -> Result<T, FleetRulesError> {
        bounded(timeout, async {
            match self {
                Link::Single(c) => cmd.query_async(c).await,
                Link::Cluster(c) => cmd.query_async(c).await,
            }
        })
        .await
    }
}

/// Subscribes to `channel` on `target` (a cluster: on its first node; a publish reaches
/// every node of a cluster), within `timeout`.
async fn subscribe(
    target: &RedisTarget,
    channel: &str,
    timeout: Duration,
) -> Result<PubSubStream, FleetRulesError> {
    let url = match target {
        RedisTarget::Single(url) => url.as_str(),
        RedisTarget::Cluster(urls) => urls
            .first()
            .map(String::as_str)
            .ok_or_else(|| FleetRulesError::Redis("a cluster without nodes".into()))?,
    };
    bounded(timeout, async {
        let mut pubsub = Client::open(url)?.get_async_pubsub().await?;
        pubsub.subscribe(channel).await?;
        Ok(pubsub.into_on_message())
    })
    .await
}

/// `work`, failed if it takes longer than `timeout`.
async fn bounded<T>(
    timeout: Duration,
    work: impl std::future::Future<Output = Result<T, RedisError>>,
) -> Result<T, FleetRulesError> {
    match tokio::time::timeout(timeout, work).await {
        Ok(result) => result.map_err(FleetRulesError::from),
        Err(_) => Err(FleetRulesError::Redis(format!(
            "no answer within {timeout:?}"
        ))),
    }
}

/// Milliseconds since the Unix epoch.
fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The follower's thread.
struct Follower<F> {
    shared: Arc<Shared>,
    /// Applies a version's document.
    apply: F,
    target: RedisTarget,
    config: FleetRulesConfig,
    /// The connection of the polls, made again after a failure.
    link: Option<Link>,
    /// The version in force, with when it was published (its identity: see `try_poll`).
    applied: Option<(u64, u64)>,
    /// The last version the policy refused, with when it was published (not tried again).
    refused: Option<(u64, u64)>,
    /// Whether the last poll failed (a `warn` when polls start failing, an `info` when
    /// one succeeds again).
    failing: bool,
}

impl<F, D, E> Follower<F>
where
    F: FnMut(&str) -> Result<D, E>,
    D: fmt::Display,
    E: fmt::Display,
{
    /// Polls and applies until told to stop, waking early on each announcement.
    async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let channel = rules_key(&self.config.prefix);
        let mut announcements: Option<PubSubStream> = None;
        while !*stop.borrow() {
            if self.config.subscribe && announcements.is_none() {
                // Subscribed before the poll: a version published after it is announced.
                announcements = subscribe(&self.target, &channel, self.config.timeout)
                    .await
                    .ok();
                let subscribed = announcements.is_some();
                self.shared.update(|s| s.subscribed = subscribed);
            }
            self.poll().await;
            tokio::select! {
                _ = stop.changed() => {}
                () = tokio::time::sleep(self.config.poll_interval) => {}
                announced = next(&mut announcements) => {
                    if announced.is_none() {
                        // The subscription's connection ended: polls carry on alone, and
                        // the next round subscribes again.
                        announcements = None;
                        self.shared.update(|s| s.subscribed = false);
                    }
                }
            }
        }
        // Leaving the fleet's list: best effort, one timeout at most.
        if let Some(link) = &mut self.link {
            let _: Result<u64, _> = link
                .query(
                    redis::cmd("HDEL")
                        .arg(running_key(&self.config.prefix))
                        .arg(&self.config.process),
                    self.config.timeout,
                )
                .await;
        }
    }

    /// One poll: reads the published version, applies a new one, reports this process's.
    async fn poll(&mut self) {
        match self.try_poll().await {
            Ok(()) => {
                if self.failing {
                    self.failing = false;
                    events::fleet_rules_reachable(&self.config.prefix);
                }
            }
            Err(error) => {
                self.link = None;
                let message = error.to_string();
                if !self.failing {
                    self.failing = true;
                    events::fleet_rules_unreachable(&self.config.prefix, &message);
                }
                events::fleet_rules_failed(&self.config.prefix);
                self.shared.update(|s| {
                    s.failures += 1;
                    s.last_error = Some(message);
                });
            }
        }
    }

    async fn try_poll(&mut self) -> Result<(), FleetRulesError> {
        let timeout = self.config.timeout;
        let key = rules_key(&self.config.prefix);
        let link = match &mut self.link {
            Some(link) => link,
            None => self
                .link
                .insert(Link::connect(&self.target, timeout).await?),
        };
        // A version with when it was published: a Redis that lost its data (restarted
        // without persistence) counts from 1 again, and its version 1 is not ours.
        let latest: (Option<u64>, Option<u64>) = link
            .query(
                redis::cmd("HMGET")
                    .arg(&key)
                    .arg("version")
                    .arg("published_ms"),
                timeout,
            )
            .await?;
        let latest = latest.0.zip(latest.1);
        if latest.is_some() && latest != self.applied && latest != self.refused {
            let (version, at, text): (Option<u64>, Option<u64>, Option<String>) = link
                .query(
                    redis::cmd("HMGET")
                        .arg(&key)
                        .arg("version")
                        .arg("published_ms")
                        .arg("rules"),
                    timeout,
                )
                .await?;
            if let (Some(version), Some(at), Some(text)) = (version, at, text) {
                self.apply((version, at), &text);
            }
        }
        let running = self.applied.map_or(0, |(version, _)| version);
        let report = format!("{running} {}", unix_ms());
        let running = redis::cmd("HSET")
            .arg(running_key(&self.config.prefix))
            .arg(&self.config.process)
            .arg(report)
            .clone();
        if let Some(link) = &mut self.link {
            let _: u64 = link.query(&running, timeout).await?;
        }
        Ok(())
    }

    /// Applies published `version` (its number and when it was published; its `text`) to
    /// the policy, or keeps the rules in force if it refuses them.
    fn apply(&mut self, version: (u64, u64), text: &str) {
        let prefix = &self.config.prefix;
        let number = version.0;
        match (self.apply)(text) {
            Ok(report) => {
                self.applied = Some(version);
                events::fleet_rules_applied(prefix, number, &report);
                self.shared.update(|s| {
                    s.version = Some(number);
                    s.latest = Some(number);
                    s.applied += 1;
                });
            }
            Err(error) => {
                self.refused = Some(version);
                let message = format!("version {number} refused: {error}");
                let kept = self.applied.map(|(kept, _)| kept);
                events::fleet_rules_refused(prefix, number, kept, &error);
                self.shared.update(|s| {
                    s.latest = Some(number);
                    s.refused += 1;
                    s.last_error = Some(message);
                });
            }
        }
    }
}

/// The next announcement; never, without a subscription.
async fn next(announcements: &mut Option<PubSubStream>) -> Option<redis::Msg> {
    match announcements {
        Some(stream) => stream.next().await,
        None => std::future::pending().await,
    }
}
