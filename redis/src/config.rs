//! A Redis store's settings: [`RedisConfig`] (key prefix, timeouts, failure policy, clock,
//! caches), [`RedisTarget`] (a single server or a cluster), [`TimeSource`] (which clock the
//! scripts decide with) and [`FailurePolicy`] (what a check answers when Redis cannot).

use std::time::Duration;

use super::keys::{push_key, validate_name};
use super::BuildError;

/// Settings of a [`RedisStore`](super::RedisStore), built with `with_*` methods.
///
/// Every setting is checked when a store is built ([`RedisStore::new`](super::RedisStore::new),
/// or [`validate`](Self::validate) on its own): a value out of its stated range is a
/// [`BuildError::OutOfRange`] naming the setting, never a store that fails (or admits
/// everything) at check time.
///
/// ```
/// use std::time::Duration;
/// use tollgate_redis::{BuildError, FailurePolicy, RedisConfig};
/// let config = RedisConfig::new("api")?
///     .with_timeout(Duration::from_millis(50))
///     .with_failure_policy(FailurePolicy::Fallback { share: 0.25 })?
///     .with_deny_cache(100_000);
/// assert_eq!(config.prefix(), "api");
/// assert_eq!(config.timeout(), Duration::from_millis(50));
/// assert_eq!(config.validate(), Ok(()));
/// let endless = config.with_ttl_slack(Duration::MAX);
/// assert!(matches!(endless.validate(), Err(BuildError::OutOfRange { setting: "ttl_slack", .. })));
/// # Ok::<(), tollgate_redis::BuildError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct RedisConfig {
    prefix: String,
    connect_timeout: Duration,
    timeout: Duration,
    retry_backoff: Duration,
    failure_policy: FailurePolicy,
    time_source: TimeSource,
    deny_cache: usize,
    deny_cache_max_age: Duration,
    fallback_keys: usize,
    ttl_slack: Duration,
    functions: bool,
}

/// The longest [`RedisConfig::with_timeout`], [`with_connect_timeout`](RedisConfig::with_connect_timeout)
/// and [`with_retry_backoff`](RedisConfig::with_retry_backoff) accepted: an hour. A check
/// that may wait longer than that for Redis, or a failure that keeps Redis untried for
/// longer, is a configuration mistake.
pub const MAX_WAIT: Duration = Duration::from_secs(3600);

/// The largest [`RedisConfig::with_ttl_slack`] accepted: 2⁴⁰ ms (about 34.8 years). Every TTL
/// the scripts write (at most the `u64` end of time in ms, about 1.8·10¹³, plus the
/// slack) then stays an exact integer in Lua's doubles and a valid `PX` for Redis.
pub const MAX_TTL_SLACK: Duration = Duration::from_millis(1 << 40);

/// The default of [`RedisConfig::with_deny_cache_max_age`]: a cached deny is trusted for at
/// most one second without asking Redis.
pub const DEFAULT_DENY_CACHE_MAX_AGE: Duration = Duration::from_secs(1);

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            prefix: "tollgate".to_owned(),
            connect_timeout: Duration::from_millis(500),
            timeout: Duration::from_millis(250),
            retry_backoff: Duration::from_millis(100),
            failure_policy: FailurePolicy::default(),
            time_source: TimeSource::Server,
            deny_cache: 10_000,
            deny_cache_max_age: DEFAULT_DENY_CACHE_MAX_AGE,
            fallback_keys: 100_000,
            ttl_slack: Duration::ZERO,
            functions: true,
        }
    }
}

impl RedisConfig {
    /// Defaults with the given key prefix (non-empty, no `{`, `}` or `:`): 500 ms connect
    /// timeout, 250 ms per-check timeout, 100 ms backoff, fail closed, server time, a deny
    /// cache of 10 000 entries trusted for at most 1 s each, a fallback of 100 000 keys per
    /// tier, no TTL slack, Redis Functions.
    pub fn new(prefix: &str) -> Result<RedisConfig, BuildError> {
        validate_name(prefix)?;
        Ok(RedisConfig {
            prefix: prefix.to_owned(),
            ..RedisConfig::default()
        })
    }

    /// Bound on establishing a connection to a node: in `(0, 1 h]` ([`MAX_WAIT`]).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Bound on each operation's calls to Redis (connecting, reloading a flushed script
    /// and the answers included), after which the failure policy answers for them. In
    /// `(0, 1 h]` ([`MAX_WAIT`]). An operation may make several calls, in turn: a check
    /// makes one for the client's tiers and one for the global rules' tiers, if it has
    /// both (on a cluster, one per client of a batch too), and when a later call denies,
    /// the earlier ones are given back and read again. They share this bound, counted from
    /// the operation's start: each call waits for what the earlier ones left, and a call
    /// left less than a tenth of it is not sent (its deadline on the server, below, has
    /// passed; the failure policy answers it, as
    /// [`FailureCause::Timeout`](super::FailureCause::Timeout), and nothing backs off). So a
    /// check waits at most about this long, however slow Redis is (each failed call also
    /// starts its keys' retry backoff, which later checks skip Redis for). A give-back left
    /// unsent keeps its permits taken (the strict side).
    ///
    /// It is also the operation's *deadline* on the server: every script call carries the
    /// instant, in the server's clock, after which the store will have given up on it
    /// (less a tenth of the timeout and the uncertainty of the store's estimate of that
    /// clock, see "Deadlines" on [`RedisStore`](super::RedisStore)); a call that reaches
    /// the script later (a stalled or paused server) is refused and changes nothing.
    ///
    /// Set it well above four round trips to Redis: the store keeps a sample of the
    /// server's clock only if its round trip took at most a quarter of the timeout, so over
    /// a slower link no check reaches Redis (each one goes to the failure policy, reported
    /// as [`FailureCause::Timeout`](super::FailureCause::Timeout)).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// After a failure, checks go straight to the failure policy for this long before
    /// Redis is tried again (so a dead server costs one timeout per backoff period, not
    /// one per check). Zero tries Redis on every check. At most 1 h ([`MAX_WAIT`]).
    pub fn with_retry_backoff(mut self, backoff: Duration) -> Self {
        self.retry_backoff = backoff;
        self
    }

    /// The failure policy; [`BuildError::InvalidShare`] for a fallback share outside
    /// `(0, 1]`, [`BuildError::OutOfRange`] for a fail-closed `retry_after` of zero.
    pub fn with_failure_policy(mut self, policy: FailurePolicy) -> Result<Self, BuildError> {
        validate_policy(policy)?;
        self.failure_policy = policy;
        Ok(self)
    }

    /// The clock used by checks without an explicit time.
    pub fn with_time_source(mut self, source: TimeSource) -> Self {
        self.time_source = source;
        self
    }

    /// Capacity of the local deny cache in entries (an entry per plan: the keys, versions
    /// and costs of a request's tiers, up to 4 costs each); 0 disables it. See "Deny cache"
    /// on [`RedisStore`](super::RedisStore) for what is cached, for how long, and what
    /// invalidates it. At most 2²⁶ ([`MAX_CAPACITY`](tollgate::policy::MAX_CAPACITY)).
    pub fn with_deny_cache(mut self, entries: usize) -> Self {
        self.deny_cache = entries;
        self
    }

    /// The longest a cached deny is trusted without asking Redis again (default 1 s,
    /// [`DEFAULT_DENY_CACHE_MAX_AGE`]; not zero: [`with_deny_cache(0)`](Self::with_deny_cache)
    /// disables the cache). A deny is cached until its retry time at most, which for a
    /// daily quota is the end of the day; what this process cannot see in the meantime
    /// (an operator's `DEL` of the key, a `FLUSHALL`, a restarted server, another
    /// process's refund) then keeps the client refused for at most this long. Measured in
    /// the deny cache's frame: the store's monotonic clock with [`TimeSource::Server`],
    /// the policy's clock with [`TimeSource::Client`].
    /// [`RedisStore::forget_denies`](super::RedisStore::forget_denies) drops a client's
    /// cached denies at once.
    pub fn with_deny_cache_max_age(mut self, max_age: Duration) -> Self {
        self.deny_cache_max_age = max_age;
        self
    }

    /// Most keys the in-process fallback tracks per tier at once (only used with
    /// [`FailurePolicy::Fallback`], checked always): from 1 to 2²⁶
    /// ([`MAX_CAPACITY`](tollgate::policy::MAX_CAPACITY), the policy's own bound per tier).
    pub fn with_fallback_keys(mut self, keys: usize) -> Self {
        self.fallback_keys = keys;
        self
    }

    /// Extra lifetime added to every key's TTL. Keys expire at their reset time plus a few
    /// milliseconds by default; with client-supplied times that run ahead of or behind the
    /// server's clock (tests replaying traces), add the largest possible skew here. Counted
    /// in whole milliseconds (a fraction rounds up), at most 2⁴⁰ ms ([`MAX_TTL_SLACK`]).
    pub fn with_ttl_slack(mut self, slack: Duration) -> Self {
        self.ttl_slack = slack;
        self
    }

    /// Whether scripts run as Redis Functions (`FUNCTION LOAD` once per server, then
    /// `FCALL`; the default) or by `EVALSHA` / `EVAL`. A server without functions (Redis 6)
    /// gets `EVALSHA` either way.
    pub fn with_functions(mut self, functions: bool) -> Self {
        self.functions = functions;
        self
    }

    /// Whether scripts run as Redis Functions where the server has them.
    pub fn functions(&self) -> bool {
        self.functions
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The Redis key a store with this configuration keeps `tier` of `rule` in, for `client`
    /// (`None`: a `per = "global"` rule): `{prefix}:{rule}:{tier}:{{client}}`, the rule and
    /// tier names with `%`, `:`, `{` and `}` escaped as `%XX` (so the parts cannot run
    /// together), the client as the Redis Cluster hash tag (so every per-client tier of a
    /// check is on one slot). A global rule's tag is `@`. A client that is empty, is `@` or
    /// holds `{` or `}` cannot be a tag itself: its tag is `#` and its 64-bit FNV-1a in
    /// hex, followed by `:` and the client. Distinct (rule, tier, client) triples never
    /// share a key (fuzzed by `redis_wire`).
    ///
    /// ```
    /// # use tollgate_redis::RedisConfig;
    /// let config = RedisConfig::new("api")?;
    /// assert_eq!(config.redis_key("default", "minute", Some("alice")), "api:default:minute:{alice}");
    /// assert_eq!(config.redis_key("all", "second", None), "api:all:second:{@}");
    /// assert_eq!(config.redis_key("a:b", "t", Some("")), "api:a%3Ab:t:{#cbf29ce484222325}:");
    /// assert_ne!(config.redis_key("all", "second", Some("@")), config.redis_key("all", "second", None));
    /// # Ok::<(), tollgate_redis::BuildError>(())
    /// ```
    pub fn redis_key(&self, rule: &str, tier: &str, client: Option<&str>) -> String {
        let mut key = String::with_capacity(64);
        push_key(&mut key, self.prefix(), rule, tier, client);
        key
    }

    /// The connect timeout.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The per-check timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The retry backoff after a failure.
    pub fn retry_backoff(&self) -> Duration {
        self.retry_backoff
    }

    /// The failure policy.
    pub fn failure_policy(&self) -> FailurePolicy {
        self.failure_policy
    }

    /// The time source.
    pub fn time_source(&self) -> TimeSource {
        self.time_source
    }

    /// The deny cache capacity (0: disabled).
    pub fn deny_cache(&self) -> usize {
        self.deny_cache
    }

    /// The longest a cached deny is trusted.
    pub fn deny_cache_max_age(&self) -> Duration {
        self.deny_cache_max_age
    }

    /// The in-process fallback's key capacity per tier.
    pub fn fallback_keys(&self) -> usize {
        self.fallback_keys
    }

    /// The TTL slack.
    pub fn ttl_slack(&self) -> Duration {
        self.ttl_slack
    }

    /// The TTL slack in whole milliseconds, rounded up (what the scripts add).
    pub(crate) fn ttl_slack_ms(&self) -> u128 {
        self.ttl_slack.as_nanos().div_ceil(1_000_000)
    }

    /// Why this configuration is rejected, if it is: the first setting out of its range, as
    /// [`BuildError::OutOfRange`] (or [`BuildError::InvalidShare`] for a fallback share).
    /// [`RedisStore::new`](super::RedisStore::new) calls it; so may a program checking its
    /// configuration before it starts.
    pub fn validate(&self) -> Result<(), BuildError> {
        let out = |setting, range| Err(BuildError::OutOfRange { setting, range });
        let wait = |d: Duration| !d.is_zero() && d <= MAX_WAIT;
        if !wait(self.connect_timeout) {
            return out("connect_timeout", "(0, 1 h]");
        }
        if !wait(self.timeout) {
            return out("timeout", "(0, 1 h]");
        }
        if self.retry_backoff > MAX_WAIT {
            return out("retry_backoff", "[0, 1 h]");
        }
        validate_policy(self.failure_policy)?;
        if self.deny_cache > tollgate::policy::MAX_CAPACITY {
            return out("deny_cache", "0..=2^26 entries");
        }
        if self.deny_cache_max_age.is_zero() {
            return out(
                "deny_cache_max_age",
                "above zero (with_deny_cache(0) disables the cache)",
            );
        }
        if self.fallback_keys == 0 || self.fallback_keys > tollgate::policy::MAX_CAPACITY {
            return out("fallback_keys", "1..=2^26 keys per tier");
        }
        if self.ttl_slack > MAX_TTL_SLACK {
            return out("ttl_slack", "at most 2^40 ms (about 34.8 years)");
        }
        Ok(())
    }
}

/// Why `policy` is rejected, if it is.
fn validate_policy(policy: FailurePolicy) -> Result<(), BuildError> {
    match policy {
        FailurePolicy::Fallback { share } if !(share > 0.0 && share <= 1.0) => {
            Err(BuildError::InvalidShare)
        }
        FailurePolicy::FailClosed { retry_after } if retry_after.is_zero() => {
            Err(BuildError::OutOfRange {
                setting: "failure_policy.retry_after",
                range: "above zero",
            })
        }
        FailurePolicy::Fallback { .. }
        | FailurePolicy::FailClosed { .. }
        | FailurePolicy::FailOpen => Ok(()),
    }
}

/// Settings of a [`LeasedStore`](super::LeasedStore): when a key is hot, how large its
/// leases are and how long they last, built with `with_*` methods and validated by
/// [`LeasedStore::new`](super::LeasedStore::new).
///
/// The overshoot bound follows from them: in any window, a fleet of `P` processes admits
/// at most `limit + P × max_lease_for(limit, max_cost)` on one key (see
/// [`LeasedStore`](super::LeasedStore)).
///
/// ```
/// use std::time::Duration;
/// use tollgate_redis::LeaseConfig;
/// let config = LeaseConfig::new()
///     .with_hot_rate(500)
///     .with_max_lease(200)
///     .with_share(0.05)
///     .with_ttl(Duration::from_millis(500));
/// // 5 % of a 10 000 limit is 500, above the 200 cap.
/// assert_eq!(config.max_lease_for(10_000, u64::MAX), 200);
/// // 5 % of 1 000 is 50.
/// assert_eq!(config.max_lease_for(1_000, u64::MAX), 50);
/// // Never above what one request may cost the tier, never below one permit.
/// assert_eq!(config.max_lease_for(1_000, 16), 16);
/// assert_eq!(config.max_lease_for(3, u64::MAX), 1);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct LeaseConfig {
    hot_rate: u64,
    max_lease: u32,
    share: f64,
    horizon: Duration,
    ttl: Duration,
    tick: Duration,
    slots: usize,
}

impl Default for LeaseConfig {
    fn default() -> LeaseConfig {
        LeaseConfig {
            hot_rate: 1_000,
            max_lease: 1_000,
            share: 0.1,
            horizon: Duration::from_millis(50),
            ttl: Duration::from_secs(1),
            tick: Duration::from_millis(10),
            slots: 1_024,
        }
    }
}

impl LeaseConfig {
    /// The defaults: a key is hot from 1 000 checks per second in this process; a lease
    /// covers 50 ms of the local rate, at most 1 000 permits and a tenth of the limit; it
    /// lasts 1 s; the lease thread wakes every 10 ms; 1 024 hot keys at once.
    pub fn new() -> LeaseConfig {
        LeaseConfig::default()
    }

    /// Admitted checks per second of one key (one tier of it) in this process from which
    /// the key is leased; slower keys go to Redis on every check. At least 1. Counted per
    /// 100 ms: rates below 10 per second make a key hot on its first admitted check in a
    /// period. At most `10 × u32::MAX` (a count per period is 32 bits).
    pub fn with_hot_rate(mut self, per_second: u64) -> Self {
        self.hot_rate = per_second;
        self
    }

    /// The most permits of one key this process holds at once (its leases in hand, refills
    /// included). At least 1.
    pub fn with_max_lease(mut self, permits: u32) -> Self {
        self.max_lease = permits;
        self
    }

    /// The most of a key's limit one process holds at once, as a share in `(0, 1]`
    /// (rounded down, but at least one permit: see
    /// [`max_lease_for`](Self::max_lease_for)).
    pub fn with_share(mut self, share: f64) -> Self {
        self.share = share;
        self
    }

    /// How much of the local rate one lease covers (the lease size is the rate seen since
    /// the last lease times this, within the bounds above). Not zero.
    pub fn with_horizon(mut self, horizon: Duration) -> Self {
        self.horizon = horizon;
        self
    }

    /// How often a lease is reviewed (what the key's rate no longer needs goes back to
    /// Redis), and how long a key may go unchecked before its whole lease goes back and
    /// its slot is freed. Not zero, at most 1 h ([`MAX_WAIT`]).
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How often the lease thread looks at expiries and idle keys (refills it does at
    /// once, when asked). Not zero, at most the TTL.
    pub fn with_tick(mut self, tick: Duration) -> Self {
        self.tick = tick;
        self
    }

    /// How many keys may be leased at once (rounded up to a power of two); a hot key that
    /// finds no free slot goes to Redis. From 1 to 2²⁰.
    pub fn with_slots(mut self, slots: usize) -> Self {
        self.slots = slots;
        self
    }

    /// The hot rate.
    pub fn hot_rate(&self) -> u64 {
        self.hot_rate
    }

    /// The lease cap in permits.
    pub fn max_lease(&self) -> u32 {
        self.max_lease
    }

    /// The lease cap as a share of the limit.
    pub fn share(&self) -> f64 {
        self.share
    }

    /// The lease horizon.
    pub fn horizon(&self) -> Duration {
        self.horizon
    }

    /// The lease lifetime.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The lease thread's period.
    pub fn tick(&self) -> Duration {
        self.tick
    }

    /// The slots for hot keys.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// The most permits this process holds at once of a key whose tier has `limit` and
    /// admits at most `max_cost` per request: `max_lease`, `share × limit` (rounded down)
    /// and `max_cost`, whichever is least, and at least 1. A fleet of `P` processes
    /// overshoots the key's limit by at most `P` times this in any window.
    pub fn max_lease_for(&self, limit: u64, max_cost: u64) -> u64 {
        // Truncation: the product is below 2^64 (share ≤ 1), and a float-to-int `as`
        // saturates; dropping the fraction is the rounding down wanted.
        #[allow(clippy::cast_possible_truncation)]
        let share = (limit as f64 * self.share) as u64;
        u64::from(self.max_lease)
            .min(share)
            .min(max_cost)
            .clamp(1, tollgate::lease::MAX_PERMITS)
    }

    /// Why this configuration is rejected, if it is.
    pub(crate) fn validate(&self) -> Result<(), BuildError> {
        let reason = if self.hot_rate == 0 {
            "hot_rate must be at least 1"
        } else if self.hot_rate > u64::from(u32::MAX) * 10 {
            // Counted per 100 ms in 32 bits: a rate above it could never be reached.
            "hot_rate must be at most 42 949 672 950 per second"
        } else if self.max_lease == 0 {
            "max_lease must be at least 1"
        } else if !(self.share > 0.0 && self.share <= 1.0) {
            "share must be in (0, 1]"
        } else if self.horizon.is_zero() {
            "horizon must not be zero"
        } else if self.ttl.is_zero() {
            "ttl must not be zero"
        } else if self.ttl > MAX_WAIT {
            "ttl must be at most 1 h"
        } else if self.tick.is_zero() || self.tick > self.ttl {
            "tick must be in (0, ttl]"
        } else if self.slots == 0 || self.slots > 1 << 20 {
            "slots must be in 1..=2^20"
        } else {
            return Ok(());
        };
        Err(BuildError::InvalidLease(reason))
    }
}

/// The Redis deployment to talk to.
///
/// ```
/// use tollgate_redis::RedisTarget;
/// let single = RedisTarget::Single("redis://127.0.0.1:6379".into());
/// let cluster = RedisTarget::Cluster(vec!["redis://127.0.0.1:7000".into()]);
/// assert_ne!(single, cluster);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RedisTarget {
    /// One server (or a proxy), by URL: `redis://host:port[/db]`.
    Single(String),
    /// A Redis Cluster, by the URLs of some of its nodes (the rest are discovered).
    Cluster(Vec<String>),
}

/// The clock behind checks that do not pass an explicit time.
///
/// ```
/// use tollgate_redis::TimeSource;
/// assert_eq!(TimeSource::default(), TimeSource::Server);
/// ```
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TimeSource {
    /// The Redis server's `TIME` (Unix epoch, ns), read inside the script: every client of
    /// the fleet shares one clock and client clock skew cannot matter. The default.
    #[default]
    Server,
    /// The caller's clock, sent with each call: the policy's clock (by default Unix time,
    /// see [`MonotonicClock`](tollgate::MonotonicClock)). For servers or proxies that forbid
    /// `TIME` in scripts, and for replaying traces.
    ///
    /// Clients' clocks must then agree. What a skew of `s` does (the transitions take
    /// `max(stored, now)`, so no state ever moves back):
    /// - a client **behind** by `s` sees every key `s` further from reset: it is refused
    ///   sooner and told to wait up to `s` longer; it never admits more than a synced one;
    /// - a client **ahead** by `s` sees keys `s` closer to reset: on GCRA, the token and
    ///   the leaky bucket it can admit up to `s × rate` permits more than the limit (the
    ///   debt it takes is then charged to everyone, who waits it out); on the windows it
    ///   starts each window `s` early, and clients behind it keep counting in that window
    ///   (a late caller's window is kept), so each window still admits at most its limit;
    ///   on the sliding log its stamps lie `s` in the future and keep counting `s` longer
    ///   for everyone.
    ///
    /// `tests/redis_policy.rs` pins these numbers for a one-second skew.
    Client,
}

/// What to answer while Redis is unreachable or too slow. Every such decision is counted
/// in [`RedisStats::degraded`](super::RedisStats::degraded).
///
/// ```
/// use std::time::Duration;
/// use tollgate_redis::FailurePolicy;
/// let open = FailurePolicy::FailOpen;
/// let closed = FailurePolicy::FailClosed { retry_after: Duration::from_secs(1) };
/// // Each process enforces half of every limit on its own while Redis is away.
/// let local = FailurePolicy::Fallback { share: 0.5 };
/// assert_ne!(open, closed);
/// assert_ne!(closed, local);
/// ```
#[derive(Copy, Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Admit everything (availability over enforcement), answering as a fresh key would
    /// (`remaining = limit − cost`).
    FailOpen,
    /// Deny everything, telling the caller to retry after `retry_after` (never zero).
    FailClosed {
        /// The `retry_after` of the degraded denies.
        retry_after: Duration,
    },
    /// Decide in this process, per key, with `share` (in `(0, 1]`) of every tier's limit, e.g. `1 / number of servers`. Its state starts
    /// fresh when Redis fails and is not merged back when Redis returns.
    Fallback {
        /// The fraction of each limit (limit, burst, capacity, refill, queue) enforced
        /// locally; scaled values are rounded down but kept at least 1 (queue at least 0).
        share: f64,
    },
}

impl Default for FailurePolicy {
    /// [`FailurePolicy::FailClosed`] with a one-second `retry_after`: a store that cannot
    /// see its state does not admit.
    fn default() -> Self {
        FailurePolicy::FailClosed {
            retry_after: Duration::from_secs(1),
        }
    }
}
