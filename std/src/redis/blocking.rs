//! [`BlockingRedisLimiter`]: the Redis limiter for synchronous code, driving the async one
//! on a private one-thread tokio runtime.

use super::{
    BuildError, CheckError, RedisConfig, RedisDecision, RedisLimiter, RedisRule, RedisStats,
    RedisTarget,
};
use crate::Nanos;

/// A [`RedisLimiter`] with blocking methods, callable from any number of threads at once
/// (they share one connection and one background I/O thread). Not for use inside an async
/// runtime: there the methods return [`CheckError::BlockingInAsyncContext`].
///
/// ```no_run
/// use tollgate::redis::{BlockingRedisLimiter, RedisConfig, RedisRule, RedisTarget};
/// use tollgate::{AlgorithmConfig, Nanos};
/// let limiter = BlockingRedisLimiter::new(
///     RedisTarget::Single("redis://127.0.0.1:6379".into()),
///     vec![RedisRule::new("login", AlgorithmConfig::SlidingWindowLog { limit: 5, window: Nanos::from_secs(60) })?],
///     RedisConfig::new("auth")?,
/// )?;
/// let d = limiter.check("alice@example.com")?;
/// println!("allowed: {}, degraded: {}", d.allowed(), d.is_degraded());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct BlockingRedisLimiter {
    runtime: tokio::runtime::Runtime,
    inner: RedisLimiter,
}

impl BlockingRedisLimiter {
    /// Builds the async limiter and its runtime (no network yet).
    pub fn new(
        target: RedisTarget,
        rules: Vec<RedisRule>,
        config: RedisConfig,
    ) -> Result<BlockingRedisLimiter, BuildError> {
        let runtime = super::connection::io_runtime("tollgate-redis")?;
        Ok(BlockingRedisLimiter {
            runtime,
            inner: RedisLimiter::new(target, rules, config)?,
        })
    }

    /// The async limiter underneath.
    pub fn inner(&self) -> &RedisLimiter {
        &self.inner
    }

    /// Counters since construction.
    pub fn stats(&self) -> RedisStats {
        self.inner.stats()
    }

    fn block<T>(
        &self,
        f: impl std::future::Future<Output = Result<T, CheckError>>,
    ) -> Result<T, CheckError> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(CheckError::BlockingInAsyncContext);
        }
        self.runtime.block_on(f)
    }

    /// [`RedisLimiter::check`], blocking.
    pub fn check(&self, key: &str) -> Result<RedisDecision, CheckError> {
        self.block(self.inner.check(key))
    }

    /// [`RedisLimiter::check_n`], blocking.
    pub fn check_n(&self, key: &str, cost: u32) -> Result<RedisDecision, CheckError> {
        self.block(self.inner.check_n(key, cost))
    }

    /// [`RedisLimiter::check_n_at`], blocking.
    pub fn check_n_at(
        &self,
        key: &str,
        cost: u32,
        now: Nanos,
    ) -> Result<RedisDecision, CheckError> {
        self.block(self.inner.check_n_at(key, cost, now))
    }

    /// [`RedisLimiter::check_scoped`], blocking.
    pub fn check_scoped(
        &self,
        key: &str,
        scopes: &[&str],
        cost: u32,
    ) -> Result<RedisDecision, CheckError> {
        self.block(self.inner.check_scoped(key, scopes, cost))
    }

    /// [`RedisLimiter::peek_n`], blocking.
    pub fn peek_n(&self, key: &str, cost: u32) -> Result<RedisDecision, CheckError> {
        self.block(self.inner.peek_n(key, cost))
    }
}
