//! [`RedisConfig`]: key prefix, timeouts, failure policy, clock and caches of a Redis
//! limiter.

use std::time::Duration;

use super::rule::validate_name;
use super::{BuildError, FailurePolicy, TimeSource};

/// Settings of a [`RedisLimiter`](super::RedisLimiter), built with `with_*` methods.
///
/// ```
/// use std::time::Duration;
/// use tollgate::redis::{FailurePolicy, RedisConfig};
/// let config = RedisConfig::new("api")?
///     .with_timeout(Duration::from_millis(50))
///     .with_failure_policy(FailurePolicy::Fallback { share: 0.25 })?
///     .with_deny_cache(100_000);
/// assert_eq!(config.prefix(), "api");
/// assert_eq!(config.timeout(), Duration::from_millis(50));
/// # Ok::<(), tollgate::redis::BuildError>(())
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
    fallback_keys: usize,
    ttl_slack: Duration,
    functions: bool,
}

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
            fallback_keys: 100_000,
            ttl_slack: Duration::ZERO,
            functions: true,
        }
    }
}

impl RedisConfig {
    /// Defaults with the given key prefix (non-empty, no `{`, `}` or `:`): 500 ms connect
    /// timeout, 250 ms per-check timeout, 100 ms backoff, fail closed, server time, a deny
    /// cache of 10 000 entries, no TTL slack.
    pub fn new(prefix: &str) -> Result<RedisConfig, BuildError> {
        validate_name(prefix)?;
        Ok(RedisConfig {
            prefix: prefix.to_owned(),
            ..RedisConfig::default()
        })
    }

    /// Bound on establishing a connection to a node.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Bound on one whole check (connecting, reloading a flushed script and the answer
    /// included): no check waits longer for Redis before the failure policy answers.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// After a failure, checks go straight to the failure policy for this long before
    /// Redis is tried again (so a dead server costs one timeout per backoff period, not
    /// one per check). Zero tries Redis on every check.
    pub fn with_retry_backoff(mut self, backoff: Duration) -> Self {
        self.retry_backoff = backoff;
        self
    }

    /// The failure policy; [`BuildError::InvalidShare`] for a fallback share outside
    /// `(0, 1]`.
    pub fn with_failure_policy(mut self, policy: FailurePolicy) -> Result<Self, BuildError> {
        if let FailurePolicy::Fallback { share } = policy {
            if !(share > 0.0 && share <= 1.0) {
                return Err(BuildError::InvalidShare);
            }
        }
        self.failure_policy = policy;
        Ok(self)
    }

    /// The clock used by checks without an explicit time.
    pub fn with_time_source(mut self, source: TimeSource) -> Self {
        self.time_source = source;
        self
    }

    /// Capacity of the local deny cache in entries; 0 disables it. It applies to both the
    /// [`RedisLimiter`](super::RedisLimiter) (an entry per key, up to 4 costs each) and the
    /// [`RedisStore`](super::RedisStore) (an entry per plan: the keys, versions and costs
    /// of a request's tiers, up to 4 costs each); see "Deny cache" on each for what is
    /// cached, for how long, and what invalidates it.
    pub fn with_deny_cache(mut self, entries: usize) -> Self {
        self.deny_cache = entries;
        self
    }

    /// Most keys the fallback limiter tracks at once (only with
    /// [`FailurePolicy::Fallback`]).
    pub fn with_fallback_keys(mut self, keys: usize) -> Self {
        self.fallback_keys = keys;
        self
    }

    /// Extra lifetime added to every key's TTL. Keys expire at their reset time plus a few
    /// milliseconds by default; with client-supplied times that run ahead of or behind the
    /// server's clock (tests replaying traces), add the largest possible skew here.
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

    /// The fallback limiter's key capacity.
    pub fn fallback_keys(&self) -> usize {
        self.fallback_keys
    }

    /// The TTL slack.
    pub fn ttl_slack(&self) -> Duration {
        self.ttl_slack
    }
}
