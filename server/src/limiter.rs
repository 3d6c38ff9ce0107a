//! [`Limiter`]: the server's policy on the store it was started with — in this process
//! (one node) or on Redis (a fleet of servers) — with the operations the service needs.

use tollgate::policy::{
    BatchDecision, BatchError, Policy, PolicyConfigError, PolicyDecision, Request,
};
use tollgate::InsufficientCapacity;
use tollgate::MonotonicClock;
use tollgate_redis::RedisStore;

/// A policy on its store.
pub(crate) enum Limiter {
    /// State in this process.
    InProcess(Policy<MonotonicClock>),
    /// State on Redis, shared by every server on it.
    Redis(Policy<MonotonicClock, RedisStore>),
}

impl Limiter {
    /// Every request of `requests` as one, all or nothing.
    pub(crate) async fn check_all(
        &self,
        requests: &[Request<'_>],
    ) -> Result<BatchDecision, BatchError> {
        match self {
            Limiter::InProcess(policy) => policy.check_all(requests),
            Limiter::Redis(policy) => policy.check_all_async(requests).await,
        }
    }

    /// Gives `request.cost` permits back to `request`'s tiers.
    pub(crate) async fn refund(&self, request: &Request<'_>) {
        match self {
            Limiter::InProcess(policy) => {
                policy.refund(request.client, request.endpoint, request.cost);
            }
            Limiter::Redis(policy) => {
                policy
                    .refund_async(request.client, request.endpoint, request.cost)
                    .await;
            }
        }
    }

    /// What `request` would get now; consumes nothing (a cost of 0 reads the state).
    pub(crate) async fn peek(
        &self,
        request: &Request<'_>,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        match self {
            Limiter::InProcess(policy) => {
                policy.peek(request.client, request.endpoint, request.cost)
            }
            Limiter::Redis(policy) => {
                policy
                    .peek_async(request.client, request.endpoint, request.cost)
                    .await
            }
        }
    }

    /// Forgets `request.client`'s state under `request`'s tiers: whether the store took
    /// the reset. On Redis a failed call is counted in the store's `degraded` (and logged
    /// by it; the key keeps its state there), so an unchanged count says every call of the
    /// reset was taken. The test errs one way only: another call failing at the same
    /// moment can make a reset that took read as failed, never the reverse, and a reset
    /// is idempotent, so the operator's retry is safe.
    pub(crate) async fn reset(&self, request: &Request<'_>) -> bool {
        match self {
            Limiter::InProcess(policy) => {
                policy.reset(request.client, request.endpoint);
                true
            }
            Limiter::Redis(policy) => {
                let before = policy.backend().stats().degraded;
                policy.reset_async(request.client, request.endpoint).await;
                policy.backend().stats().degraded == before
            }
        }
    }

    /// Replaces the rules (every key keeps its state where its rule and tier survive).
    pub(crate) fn reload(&self, rules: &str) -> Result<(), PolicyConfigError> {
        match self {
            Limiter::InProcess(policy) => policy.reload_toml(rules).map(drop),
            Limiter::Redis(policy) => policy.reload_toml(rules).map(drop),
        }
    }

    /// Whether the store answers now: in this process always; on Redis, a peek of the
    /// probe rule ([`PROBE_ENDPOINT`]) that Redis decided, not the failure policy.
    pub(crate) async fn probe(&self) -> bool {
        match self {
            Limiter::InProcess(_) => true,
            Limiter::Redis(policy) => {
                let before = policy.backend().stats();
                // A peek takes nothing; its answer is not the point, who gave it is.
                let _ = policy.peek_async(PROBE_CLIENT, PROBE_ENDPOINT, 1).await;
                let after = policy.backend().stats();
                after.degraded == before.degraded && after.redis_decisions > before.redis_decisions
            }
        }
    }
}

/// The endpoint of the rule every server's rules end with, which only the readiness probe
/// checks (a name no descriptor's endpoint can take: those start with their domain).
pub(crate) const PROBE_ENDPOINT: &str = "~probe";

/// The probe's client.
const PROBE_CLIENT: &str = "probe";

/// The probe's rule, appended to every rules document the server runs.
pub(crate) const PROBE_RULE: &str = r#"
[[rules]]
name = "~probe"
endpoint = "~probe"
limit = 1
window = "1s"
"#;
