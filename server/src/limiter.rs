//! [`Limiter`]: the server's policy on the store it was started with — in this process
//! (one node), on Redis (a fleet of servers), or on Redis with hot descriptors served from
//! leases — with the operations the service needs, each written once for every store.

use tollgate::policy::{
    BatchDecision, BatchError, LimitedClients, ListBounds, Policy, PolicyCheck, PolicyConfigError,
    PolicyDecision, Request,
};
use tollgate::MonotonicClock;
use tollgate::{InsufficientCapacity, Nanos};
use tollgate_redis::{LeasedStore, RedisStore};

/// A policy on its store.
pub(crate) enum Limiter {
    /// State in this process.
    InProcess(Policy<MonotonicClock>),
    /// State on Redis, shared by every server on it.
    Redis(Policy<MonotonicClock, RedisStore>),
    /// State on Redis, hot keys spent from leases this server holds (given back when it
    /// stops: dropping the store returns them).
    Leased(Policy<MonotonicClock, LeasedStore>),
}

/// `$body` with `$policy` bound to the limiter's policy, whatever its store: an operation
/// written once (the awaited methods serve every store; in process they are ready at once).
macro_rules! with_policy {
    ($limiter:expr, $policy:ident => $body:expr) => {
        match $limiter {
            Limiter::InProcess($policy) => $body,
            Limiter::Redis($policy) => $body,
            Limiter::Leased($policy) => $body,
        }
    };
}

impl Limiter {
    /// Whether its answers are awaited on the network (a future of it can be dropped
    /// half done), not ready at once.
    pub(crate) fn awaits(&self) -> bool {
        match self {
            Limiter::InProcess(_) => false,
            Limiter::Redis(_) | Limiter::Leased(_) => true,
        }
    }

    /// Its policy's clock now (Unix time: see `tollgate::MonotonicClock`).
    pub(crate) fn now(&self) -> Nanos {
        with_policy!(self, policy => PolicyCheck::now(policy))
    }

    /// Every request of `requests` as one, all or nothing.
    pub(crate) async fn check_all(
        &self,
        requests: &[Request<'_>],
    ) -> Result<BatchDecision, BatchError> {
        with_policy!(self, policy => policy.check_all_async(requests).await)
    }

    /// Gives `request.cost` permits back to `request`'s tiers.
    pub(crate) async fn refund(&self, request: &Request<'_>) {
        let Request {
            client,
            endpoint,
            cost,
            ..
        } = *request;
        with_policy!(self, policy => policy.refund_async(client, endpoint, cost).await);
    }

    /// What `request` would get now; consumes nothing (a cost of 0 reads the state).
    pub(crate) async fn peek(
        &self,
        request: &Request<'_>,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        let Request {
            client,
            endpoint,
            cost,
            ..
        } = *request;
        with_policy!(self, policy => policy.peek_async(client, endpoint, cost).await)
    }

    /// What `request` would get now, as [`peek`](Self::peek), if the store itself answered:
    /// `None` when Redis failed and the failure policy answered instead (a state made up,
    /// not read: never shown to an operator as the client's).
    pub(crate) async fn read(
        &self,
        request: &Request<'_>,
    ) -> Option<Result<PolicyDecision, InsufficientCapacity>> {
        let degraded = || self.redis().map(|redis| redis.stats().degraded);
        let before = degraded();
        let read = self.peek(request).await;
        (degraded() == before).then_some(read)
    }

    /// Forgets `request.client`'s state under `request`'s tiers: whether the store took
    /// the reset. On Redis a failed call is counted in the store's `degraded` (and logged
    /// by it; the key keeps its state there), so an unchanged count says every call of the
    /// reset was taken. The test errs one way only: another call failing at the same
    /// moment can make a reset that took read as failed, never the reverse, and a reset
    /// is idempotent, so the operator's retry is safe.
    pub(crate) async fn reset(&self, request: &Request<'_>) -> bool {
        let degraded = || self.redis().map(|redis| redis.stats().degraded);
        let before = degraded();
        let (client, endpoint) = (request.client, request.endpoint);
        with_policy!(self, policy => policy.reset_async(client, endpoint).await);
        degraded() == before
    }

    /// The clients a check would deny now, within `bounds` ([`Policy::limited`]), if the
    /// store itself answered: `None` when its scan failed or the failure policy answered a
    /// peek instead (a state made up, not read: never shown to an operator). The same
    /// `degraded` test as [`reset`](Self::reset)'s, erring the same safe way.
    pub(crate) async fn limited(&self, bounds: ListBounds) -> Option<LimitedClients> {
        let degraded = || self.redis().map(|redis| redis.stats().degraded);
        let before = degraded();
        let listed = with_policy!(self, policy => policy.limited_async(bounds).await);
        match listed {
            Ok(listed) if degraded() == before => Some(listed),
            Ok(_) => None,
            Err(error) => {
                tracing::warn!(%error, "listing the limited clients");
                None
            }
        }
    }

    /// Replaces the rules (every key keeps its state where its rule and tier survive).
    pub(crate) fn reload(&self, rules: &str) -> Result<(), PolicyConfigError> {
        with_policy!(self, policy => policy.reload_toml(rules).map(drop))
    }

    /// Whether the store answers now: in this process always; on Redis, a peek of the
    /// probe rule ([`PROBE_ENDPOINT`]) that Redis decided, not the failure policy.
    pub(crate) async fn probe(&self) -> bool {
        let Some(redis) = self.redis() else {
            return true;
        };
        let before = redis.stats();
        // A peek takes nothing; its answer is not the point, who gave it is. (Under
        // leases too: the probe's key is never hot, so Redis decides it.)
        let probe = Request::new(PROBE_CLIENT, PROBE_ENDPOINT, 1);
        let _ = self.peek(&probe).await;
        let after = redis.stats();
        after.degraded == before.degraded && after.redis_decisions > before.redis_decisions
    }

    /// The Redis store behind the policy, if the state is on Redis.
    fn redis(&self) -> Option<&RedisStore> {
        match self {
            Limiter::InProcess(_) => None,
            Limiter::Redis(policy) => Some(policy.backend()),
            Limiter::Leased(policy) => Some(policy.backend().redis()),
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
