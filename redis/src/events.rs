//! What a Redis store tells the operator about its failures, through the kept facades: a
//! `tracing` event (feature `tracing`, on by default) and a `metrics` counter (feature
//! `metrics`), both compiled out without their feature.
//!
//! | event | `tracing` | `metrics` |
//! |---|---|---|
//! | a call answered by the failure policy (Redis slow, down, erring; a backoff; a fallback that could not decide) | | `tollgate_redis_failures_total{cause}` (`timeout`, `connection`, `server`, `backoff`, `expired`, `fallback_unavailable`: [`RedisStats::failures`](super::RedisStats)'s causes) |
//! | Redis unreachable or slow: a group of keys starts backing off | `warn`: the cause and the backoff; at most once per group per backoff | |
//! | an error answered by the server, or a fallback that could not decide | `debug`: the cause | |
//! | Redis failed, and has not answered since (set at the failure, cleared by its next answer) | `info` when it answers again | `tollgate_redis_degraded{prefix}` (gauge: 1 while degraded, 0 once it answers) |
//!
//! A leased store's counts go through the facade too: see `leased::stats`.
//!
//! Keys and clients are never logged or used as labels.

use std::time::Duration;

use super::FailureCause;

/// The label of `cause` in `tollgate_redis_failures_total`.
#[cfg(feature = "metrics")]
fn label(cause: FailureCause) -> &'static str {
    match cause {
        FailureCause::Timeout => "timeout",
        FailureCause::Connection => "connection",
        FailureCause::Server => "server",
        FailureCause::Backoff => "backoff",
        FailureCause::Expired => "expired",
        FailureCause::FallbackUnavailable => "fallback_unavailable",
    }
}

/// Reports one call answered by the failure policy because of `cause`.
#[inline]
pub(crate) fn failed(cause: FailureCause) {
    #[cfg(feature = "metrics")]
    metrics::counter!("tollgate_redis_failures_total", "cause" => label(cause)).increment(1);
    #[cfg(feature = "tracing")]
    match cause {
        FailureCause::Server | FailureCause::FallbackUnavailable => {
            tracing::debug!(
                ?cause,
                "tollgate-redis: call answered by the failure policy"
            );
        }
        // Reported when the backoff starts (`backing_off`), or counted only.
        FailureCause::Timeout
        | FailureCause::Connection
        | FailureCause::Expired
        | FailureCause::Backoff => {}
    }
    let _ = cause;
}

/// Reports that a group of keys backs off Redis for `backoff` after a failure by `cause`
/// (at most once per group per backoff: calls meanwhile skip Redis).
#[inline]
pub(crate) fn backing_off(cause: FailureCause, backoff: Duration) {
    #[cfg(feature = "tracing")]
    tracing::warn!(
        ?cause,
        backoff_ms = backoff.as_millis(),
        "tollgate-redis: Redis failed; its keys answered by the failure policy until the backoff ends"
    );
    let _ = (cause, backoff);
}

/// Reports that the store with key prefix `prefix` is `degraded` (Redis failed and has not
/// answered since) or answers again.
#[inline]
pub(crate) fn degraded(prefix: &str, degraded: bool) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("tollgate_redis_degraded", "prefix" => prefix.to_owned()).set(if degraded {
        1.0
    } else {
        0.0
    });
    #[cfg(feature = "tracing")]
    if !degraded {
        tracing::info!(prefix, "tollgate-redis: Redis answers again");
    }
    let _ = (prefix, degraded);
}
