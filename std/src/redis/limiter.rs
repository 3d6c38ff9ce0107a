//! [`RedisLimiter`]: the async Redis / Redis Cluster limiter. One check is one `FCALL`
//! (or `EVALSHA`) of the rules' script on one slot: every tier decided, all written or none.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use super::connection::Connection;
use super::deny_cache::DenyCache;
use super::fallback::Fallback;
use super::reply::decode_reply;
use super::stats::Counters;
use super::{
    BuildError, CheckError, DecisionSource, FailureCause, FailurePolicy, LuaScript, RedisConfig,
    RedisDecision, RedisRule, RedisStats, RedisTarget, TimeSource,
};
use crate::sync::plain::{AtomicU64, Ordering};
use crate::{Decision, Nanos};

/// A rate limiter whose state lives in Redis, shared by every process that uses the same
/// target, prefix and rules.
///
/// Each rule is a tier; a check of key `k` runs every tier on its key
/// `{prefix}:{rule}:{k}` (`k` in braces, so one slot), in one round trip, and admits only
/// if all tiers admit (then all are consumed; otherwise none is). The arithmetic is the
/// core's, exactly: see the [module docs](super).
///
/// The connection is made by the first check and runs its I/O on that check's tokio
/// runtime: use one limiter from one runtime (share it across tasks freely); for threads
/// without a runtime use [`BlockingRedisLimiter`](super::BlockingRedisLimiter).
///
/// ```no_run
/// use tollgate::redis::{RedisConfig, RedisLimiter, RedisRule, RedisTarget};
/// use tollgate::{AlgorithmConfig, Nanos};
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = RedisLimiter::new(
///     RedisTarget::Single("redis://127.0.0.1:6379".into()),
///     vec![
///         RedisRule::new("second", AlgorithmConfig::Gcra { limit: 10, period: Nanos::from_secs(1), burst: 10 })?,
///         RedisRule::new("day", AlgorithmConfig::FixedWindow { limit: 10_000, window: Nanos::from_secs(86_400) })?,
///     ],
///     RedisConfig::new("api")?,
/// )?;
/// let d = limiter.check("customer-42").await?;
/// if !d.allowed() {
///     println!("429, retry after {}", d.decision.retry_after);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct RedisLimiter {
    rules: Vec<RedisRule>,
    script: LuaScript,
    config: RedisConfig,
    connection: Connection,
    deny_cache: DenyCache,
    fallback: Option<Fallback>,
    counters: Counters,
    epoch: Instant,
    /// Local ns (since `epoch`) before which Redis is not tried again; 0: no backoff.
    backoff_until: AtomicU64,
    slack_ms: String,
}

/// What one check asks for.
#[derive(Copy, Clone, Debug)]
struct Request<'a> {
    key: &'a str,
    /// Per-rule refinements of the key (empty: none), see `check_scoped`.
    scopes: &'a [&'a str],
    cost: u32,
    /// Explicit client time, if the caller passed one.
    at: Option<Nanos>,
    /// false: a peek (decide, write nothing, bypass the deny cache).
    commit: bool,
}

impl RedisLimiter {
    /// A limiter for `rules` (tiers, all or nothing) on `target`. Touches no network: the
    /// connection is made by the first check, inside the caller's tokio runtime, and a
    /// limiter built while Redis is down works (degraded) and recovers by itself.
    pub fn new(
        target: RedisTarget,
        rules: Vec<RedisRule>,
        config: RedisConfig,
    ) -> Result<RedisLimiter, BuildError> {
        if rules.is_empty() {
            return Err(BuildError::NoRules);
        }
        for (i, rule) in rules.iter().enumerate() {
            if rules[..i].iter().any(|r| r.name() == rule.name()) {
                return Err(BuildError::DuplicateRule(rule.name().to_owned()));
            }
        }
        let fallback = match config.failure_policy() {
            FailurePolicy::Fallback { share } => {
                Some(Fallback::new(&rules, share, config.fallback_keys()))
            }
            _ => None,
        };
        Ok(RedisLimiter {
            script: LuaScript::for_rules(&rules),
            connection: Connection::new(&target, &config)?,
            deny_cache: DenyCache::new(config.deny_cache()),
            fallback,
            counters: Counters::default(),
            epoch: Instant::now(),
            backoff_until: AtomicU64::new(0),
            slack_ms: config.ttl_slack().as_millis().to_string(),
            rules,
            config,
        })
    }

    /// The rules (tiers), in order.
    pub fn rules(&self) -> &[RedisRule] {
        &self.rules
    }

    /// The configuration.
    pub fn config(&self) -> &RedisConfig {
        &self.config
    }

    /// The script every check runs.
    pub fn script(&self) -> &LuaScript {
        &self.script
    }

    /// Counters since construction.
    pub fn stats(&self) -> RedisStats {
        self.counters.snapshot()
    }

    /// The Redis key holding rule `rule`'s state for `key` (`None` for a bad index):
    /// `{prefix}:{rule}:{{key}}`.
    pub fn redis_key(&self, rule: usize, key: &str) -> Option<String> {
        self.redis_key_scoped(rule, key, "")
    }

    /// The Redis key of rule `rule` for `key` refined by `scope`:
    /// `{prefix}:{rule}:{{key}}:{scope}` (without the last part when `scope` is empty).
    pub fn redis_key_scoped(&self, rule: usize, key: &str, scope: &str) -> Option<String> {
        let rule = self.rules.get(rule)?;
        Some(if scope.is_empty() {
            format!("{}:{}:{{{}}}", self.config.prefix(), rule.name(), key)
        } else {
            format!(
                "{}:{}:{{{}}}:{}",
                self.config.prefix(),
                rule.name(),
                key,
                scope
            )
        })
    }

    /// Checks one permit for `key` with the configured clock.
    pub async fn check(&self, key: &str) -> Result<RedisDecision, CheckError> {
        self.check_n(key, 1).await
    }

    /// Checks `cost` permits for `key` with the configured clock, all tiers or none.
    pub async fn check_n(&self, key: &str, cost: u32) -> Result<RedisDecision, CheckError> {
        self.run(Request {
            key,
            scopes: &[],
            cost,
            at: None,
            commit: true,
        })
        .await
    }

    /// Multi-rule check: rule `i` applies to `key` refined by `scopes[i]` (an empty scope
    /// means the key itself), e.g. rules "per client" and "per client and endpoint" with
    /// scopes `["", "/search"]`. Still one slot (the hash tag is `key`), one round trip, all
    /// or nothing. `scopes` must have one entry per rule.
    pub async fn check_scoped(
        &self,
        key: &str,
        scopes: &[&str],
        cost: u32,
    ) -> Result<RedisDecision, CheckError> {
        self.run(Request {
            key,
            scopes,
            cost,
            at: None,
            commit: true,
        })
        .await
    }

    /// [`check_scoped`](Self::check_scoped) at an explicit client-supplied time.
    pub async fn check_scoped_at(
        &self,
        key: &str,
        scopes: &[&str],
        cost: u32,
        now: Nanos,
    ) -> Result<RedisDecision, CheckError> {
        self.run(Request {
            key,
            scopes,
            cost,
            at: Some(now),
            commit: true,
        })
        .await
    }

    /// Checks `cost` permits at an explicit, client-supplied time `now` (ns since the
    /// epoch all clients of these keys agree on): for replaying traces in tests, and for
    /// servers that forbid `TIME` in scripts. The deny cache and the fallback limiter then
    /// measure time in the same frame, so do not mix it with [`check_n`](Self::check_n)
    /// on one limiter.
    pub async fn check_n_at(
        &self,
        key: &str,
        cost: u32,
        now: Nanos,
    ) -> Result<RedisDecision, CheckError> {
        self.run(Request {
            key,
            scopes: &[],
            cost,
            at: Some(now),
            commit: true,
        })
        .await
    }

    /// What [`check_n`](Self::check_n) would answer, consuming nothing (one round trip; the
    /// deny cache is not consulted).
    pub async fn peek_n(&self, key: &str, cost: u32) -> Result<RedisDecision, CheckError> {
        self.run(Request {
            key,
            scopes: &[],
            cost,
            at: None,
            commit: false,
        })
        .await
    }

    /// What [`check_n_at`](Self::check_n_at) would answer, consuming nothing.
    pub async fn peek_n_at(
        &self,
        key: &str,
        cost: u32,
        now: Nanos,
    ) -> Result<RedisDecision, CheckError> {
        self.run(Request {
            key,
            scopes: &[],
            cost,
            at: Some(now),
            commit: false,
        })
        .await
    }

    /// Local monotonic ns since construction.
    fn local_now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    async fn run(&self, req: Request<'_>) -> Result<RedisDecision, CheckError> {
        // No `}` anywhere: the key is then exactly the hash tag, and `{prefix}:{rule}:{{key}}`
        // plus an optional `:{scope}` names one (key, scope) pair only (with a `}` inside,
        // key `a}:s` and key `a` scoped `s}` would share `p:r:{a}:s}`).
        if req.key.is_empty() || req.key.contains('}') {
            return Err(CheckError::InvalidKey);
        }
        if !req.scopes.is_empty() && req.scopes.len() != self.rules.len() {
            return Err(CheckError::ScopeCount {
                rules: self.rules.len(),
                scopes: req.scopes.len(),
            });
        }
        // The identity of this check for the deny cache and the fallback: the key, or the
        // key, `}` (which a key never contains, so an unscoped identity never looks scoped)
        // and each scope length-prefixed (a scope may contain any character, so no
        // separator alone could keep the scope lists apart).
        let identity: std::borrow::Cow<'_, str> = if req.scopes.iter().all(|s| s.is_empty()) {
            req.key.into()
        } else {
            let mut id = String::from(req.key);
            id.push('}');
            for scope in req.scopes {
                id.push_str(&scope.len().to_string());
                id.push(':');
                id.push_str(scope);
            }
            id.into()
        };
        let mut args = Vec::with_capacity(4 + 5 * self.rules.len());
        let now_arg = match (req.at, self.config.time_source()) {
            (Some(now), _) => format!("{:016x}", now.as_u64()),
            (None, TimeSource::Client) => {
                let unix = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default();
                format!("{:016x}", Nanos::from_duration(unix).as_u64())
            }
            (None, TimeSource::Server) => String::new(),
        };
        args.push(now_arg);
        args.push(self.slack_ms.clone());
        args.push(if req.commit { "1" } else { "0" }.to_owned());
        args.push(self.rules.len().to_string());
        for rule in &self.rules {
            rule.encode(req.cost, &mut args)?;
        }
        // The time frame of the deny cache and the fallback: the caller's, or ours.
        let local = self.local_now();
        let frame_now = req.at.map_or(local, Nanos::as_u64);
        Counters::bump(&self.counters.decisions);

        if req.commit {
            if let Some((decision, tier)) = self.deny_cache.lookup(&identity, req.cost, frame_now) {
                Counters::bump(&self.counters.deny_cache_hits);
                return Ok(RedisDecision {
                    decision,
                    source: DecisionSource::DenyCache,
                    tier,
                    tiers: Vec::new(),
                });
            }
        }
        // Relaxed: a hint about when to try Redis again; no data is published with it.
        if local < self.backoff_until.load(Ordering::Relaxed) {
            return Ok(self.degrade(FailureCause::Backoff, req, &identity, frame_now));
        }

        let keys: Vec<String> = (0..self.rules.len())
            .filter_map(|i| {
                self.redis_key_scoped(i, req.key, req.scopes.get(i).copied().unwrap_or(""))
            })
            .collect();
        let call = self
            .connection
            .eval(&self.script, &keys, &args, &self.counters);
        let outcome = match tokio::time::timeout(self.config.timeout(), call).await {
            Ok(Ok(value)) => decode_reply(&self.rules, &value).ok_or(FailureCause::Server),
            Ok(Err(error)) => Err(FailureCause::of(&error)),
            Err(_elapsed) => Err(FailureCause::Timeout),
        };
        match outcome {
            Ok(tiers) => {
                Counters::bump(&self.counters.redis_decisions);
                let decision = RedisDecision::combine(tiers, DecisionSource::Redis);
                if req.commit {
                    self.deny_cache.insert(
                        &identity,
                        req.cost,
                        frame_now,
                        decision.decision,
                        decision.tier,
                    );
                }
                Ok(decision)
            }
            Err(cause) => {
                let backoff =
                    u64::try_from(self.config.retry_backoff().as_nanos()).unwrap_or(u64::MAX);
                // Relaxed: see the load above.
                self.backoff_until
                    .store(self.local_now().saturating_add(backoff), Ordering::Relaxed);
                Ok(self.degrade(cause, req, &identity, frame_now))
            }
        }
    }

    /// The failure policy's answer.
    fn degrade(
        &self,
        cause: FailureCause,
        req: Request<'_>,
        identity: &str,
        frame_now: u64,
    ) -> RedisDecision {
        Counters::bump(&self.counters.degraded);
        let cost = u64::from(req.cost);
        let tiers = match (self.config.failure_policy(), &self.fallback) {
            (FailurePolicy::Fallback { .. }, Some(fallback)) if req.commit => {
                fallback.check(identity, req.cost, frame_now)
            }
            (FailurePolicy::FailClosed { retry_after }, _) => self
                .rules
                .iter()
                .map(|r| {
                    let retry = Nanos::from_duration(retry_after);
                    Decision::deny(r.limit(), 0, retry, retry)
                })
                .collect(),
            // Fail open, or a peek under the fallback policy (which must not consume).
            _ => self
                .rules
                .iter()
                .map(|r| Decision::allow(r.limit(), r.limit().saturating_sub(cost), Nanos::ZERO))
                .collect(),
        };
        RedisDecision::combine(tiers, DecisionSource::Degraded(cause))
    }
}
