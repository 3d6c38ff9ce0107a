//! What a Redis store tells the operator about its failures, through the kept facades: a
//! `tracing` event (feature `tracing`, on by default) and a `metrics` counter (feature
//! `metrics`), both compiled out without their feature.
//!
//! | event | `tracing` | `metrics` |
//! |---|---|---|
//! | a call answered by the failure policy (Redis slow, down, erring; a backoff; a fallback that could not decide) | | `tollgate_redis_failures_total{cause}` (`timeout`, `connection`, `server`, `backoff`, `expired`, `fallback_unavailable`: [`RedisStats::failures`](super::RedisStats)'s causes) |
//! | Redis unreachable or slow: the store becomes degraded (a group of keys starts backing off, none having failed for the recovery time) | `warn`: the prefix, the cause and the backoff; once, until it recovers | `tollgate_redis_degraded{prefix}` = 1 |
//! | an error answered by the server, or a fallback that could not decide | `debug`: the cause | |
//! | Redis recovered: it answers, and no call has failed for twice the backoff plus the timeout (so a cluster with one master down stays degraded, not flapping with every call the others answer) | `info` | `tollgate_redis_degraded{prefix}` = 0 |
//!
//! | a fleet rules follower applied a published version | `info`: prefix, version, what changed | `tollgate_fleet_rules_total{prefix,outcome="applied"}`, gauge `tollgate_fleet_rules_version{prefix}` |
//! | the policy refused a published version (the rules in force kept) | `warn`: the version, the one kept, the error | `tollgate_fleet_rules_total{prefix,outcome="refused"}` |
//! | a poll of the fleet rules failed | `warn` when polls start failing, `info` when one succeeds again | `tollgate_fleet_rules_total{prefix,outcome="failed"}` |
//! | a follower cannot subscribe to the announcements (polls only) | `warn` when it starts, `info` when it subscribes again | |
//! | the published fleet rules are older than those in force (Redis went back) | `warn`, then applied | |
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

/// Reports that the store with key prefix `prefix` is degraded: Redis failed by `cause`
/// (saying `error`, where it said something), and the failed call's keys skip it for
/// `backoff` (told once, until it recovers).
#[inline]
pub(crate) fn degraded(prefix: &str, cause: FailureCause, error: Option<&str>, backoff: Duration) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("tollgate_redis_degraded", "prefix" => prefix.to_owned()).set(1.0);
    #[cfg(feature = "tracing")]
    tracing::warn!(
        prefix,
        ?cause,
        error,
        backoff_ms = backoff.as_millis(),
        "tollgate-redis: Redis failed; the failed calls' keys are answered by the failure \
         policy, each group until its backoff ends"
    );
    let _ = (prefix, cause, error, backoff);
}

/// Reports that the store with key prefix `prefix` recovered: Redis answers, and has not
/// failed for the recovery time.
#[inline]
pub(crate) fn recovered(prefix: &str) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("tollgate_redis_degraded", "prefix" => prefix.to_owned()).set(0.0);
    #[cfg(feature = "tracing")]
    tracing::info!(prefix, "tollgate-redis: Redis answers again");
    let _ = prefix;
}

/// Reports that a fleet rules follower of `prefix` applied published `version`.
pub(crate) fn fleet_rules_applied(prefix: &str, version: u64, report: &dyn std::fmt::Display) {
    #[cfg(feature = "metrics")]
    {
        metrics::counter!("tollgate_fleet_rules_total", "prefix" => prefix.to_owned(), "outcome" => "applied")
            .increment(1);
        // A version is far below 2^53: exact as a gauge.
        #[allow(clippy::cast_precision_loss)]
        metrics::gauge!("tollgate_fleet_rules_version", "prefix" => prefix.to_owned())
            .set(version as f64);
    }
    #[cfg(feature = "tracing")]
    tracing::info!(prefix, version, %report, "tollgate-redis: fleet rules applied");
    let _ = (prefix, version, report);
}

/// Reports that the policy refused published `version` of `prefix`'s fleet rules, keeping
/// `kept` (`None`: its own rules).
pub(crate) fn fleet_rules_refused(
    prefix: &str,
    version: u64,
    kept: Option<u64>,
    error: &dyn std::fmt::Display,
) {
    #[cfg(feature = "metrics")]
    metrics::counter!("tollgate_fleet_rules_total", "prefix" => prefix.to_owned(), "outcome" => "refused")
        .increment(1);
    #[cfg(feature = "tracing")]
    tracing::warn!(
        prefix,
        version,
        kept = kept.unwrap_or(0),
        %error,
        "tollgate-redis: fleet rules refused; the rules in force kept"
    );
    let _ = (prefix, version, kept, error);
}

/// Counts a poll of `prefix`'s fleet rules that failed.
pub(crate) fn fleet_rules_failed(prefix: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("tollgate_fleet_rules_total", "prefix" => prefix.to_owned(), "outcome" => "failed")
        .increment(1);
    let _ = prefix;
}

/// Reports that polls of `prefix`'s fleet rules started failing (once, until one succeeds).
pub(crate) fn fleet_rules_unreachable(prefix: &str, error: &str) {
    #[cfg(feature = "tracing")]
    tracing::warn!(
        prefix,
        error,
        "tollgate-redis: fleet rules unreachable; the rules in force kept until Redis answers"
    );
    let _ = (prefix, error);
}

/// Reports that polls of `prefix`'s fleet rules succeed again.
pub(crate) fn fleet_rules_reachable(prefix: &str) {
    #[cfg(feature = "tracing")]
    tracing::info!(prefix, "tollgate-redis: fleet rules reachable again");
    let _ = prefix;
}

/// Reports that a fleet rules follower of `prefix` cannot subscribe to the announcements
/// (once, until it can): versions then arrive by polling only, still within the bound.
pub(crate) fn fleet_rules_unsubscribed(prefix: &str, error: &str) {
    #[cfg(feature = "tracing")]
    tracing::warn!(
        prefix,
        error,
        "tollgate-redis: fleet rules announcements unavailable; polling only"
    );
    let _ = (prefix, error);
}

/// Reports that a fleet rules follower of `prefix` is subscribed again.
pub(crate) fn fleet_rules_subscribed(prefix: &str) {
    #[cfg(feature = "tracing")]
    tracing::info!(
        prefix,
        "tollgate-redis: fleet rules announcements subscribed again"
    );
    let _ = prefix;
}

/// Reports that `prefix`'s published rules went back: `version`, published `earlier_ms`
/// before the version `kept` in force (a failover to a replica behind, a restore).
pub(crate) fn fleet_rules_went_back(prefix: &str, version: u64, kept: u64, earlier_ms: u64) {
    #[cfg(feature = "tracing")]
    tracing::warn!(
        prefix,
        version,
        kept,
        earlier_ms,
        "tollgate-redis: the published fleet rules are older than those in force (Redis went back?); applying them"
    );
    let _ = (prefix, version, kept, earlier_ms);
}
