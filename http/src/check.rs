//! `Check`: the object-safe form of [`PolicyCheck`] the layer calls, so
//! [`RateLimitLayer`](super::RateLimitLayer) is one type whatever policy it wraps. It is
//! the policy's own interface, type-erased: one operation ([`Op`]), answered at once or in
//! a future (`Awaited`, a policy whose [`run_async`](PolicyCheck::run_async) waits on the
//! network).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tollgate::InsufficientCapacity;

use tollgate::policy::{Op, PolicyCheck, PolicyDecision, Request};

/// What [`PolicyCheck::run`] answers: the decision of a check or peek, `None` for a refund
/// or charge.
pub(super) type Answered = Result<Option<PolicyDecision>, InsufficientCapacity>;

/// The same answer, awaited.
pub(super) type Answer = Pin<Box<dyn Future<Output = Answered> + Send>>;

/// The decision of a check or peek the layer asked for: `None` decided nothing, which is
/// what no matching rule decides (admitted, unlimited), as [`PolicyCheck::check_at`] reads
/// it.
pub(super) fn decided(answer: Answered) -> Result<PolicyDecision, InsufficientCapacity> {
    answer.map(|decision| decision.unwrap_or_else(PolicyDecision::empty))
}

/// [`PolicyCheck`], object-safe (see the module docs).
pub(super) trait Check: Send + Sync {
    /// `op` for `cost` permits of `client` on `endpoint` at the policy's clock, blocking.
    fn run_now(&self, op: Op, client: &str, endpoint: &str, cost: u32) -> Answered;

    /// The check of `cost` permits of `client` on the endpoint `endpoint` names (asked only
    /// if the rules read it) at the policy's clock, blocking, into `decision`
    /// ([`PolicyCheck::allow_into_with`]: the request's one decision, never moved).
    fn check_now<'e>(
        &self,
        client: &str,
        endpoint: &dyn Fn() -> &'e str,
        cost: u32,
        decision: &mut PolicyDecision,
    ) -> Result<(), InsufficientCapacity>;

    /// Whether the layer awaits this policy's answers (its store makes remote calls)
    /// rather than taking them from [`run_now`](Self::run_now).
    fn awaited(&self) -> bool {
        false
    }

    /// [`PolicyCheck::names_route_templates`] (asked only to warn, with `tracing`).
    #[cfg(feature = "tracing")]
    fn names_route_templates(&self) -> bool;

    /// [`run_now`](Self::run_now) as a future owning what it needs. By default the
    /// blocking answer, ready (a shadow or in-process policy next to an awaited one).
    fn run(self: Arc<Self>, op: Op, client: String, endpoint: String, cost: u32) -> Answer {
        Box::pin(std::future::ready(
            self.run_now(op, &client, &endpoint, cost),
        ))
    }
}

impl<P: PolicyCheck + Send> Check for P {
    #[cfg(feature = "tracing")]
    fn names_route_templates(&self) -> bool {
        PolicyCheck::names_route_templates(self)
    }

    #[inline]
    fn check_now<'e>(
        &self,
        client: &str,
        endpoint: &dyn Fn() -> &'e str,
        cost: u32,
        decision: &mut PolicyDecision,
    ) -> Result<(), InsufficientCapacity> {
        PolicyCheck::allow_into_with(self, client, endpoint, cost, decision)
    }

    #[inline]
    fn run_now(&self, op: Op, client: &str, endpoint: &str, cost: u32) -> Answered {
        match op {
            // The policy's own forms, which read its clock once the rules matched.
            Op::Check => PolicyCheck::allow(self, client, endpoint, cost).map(Some),
            Op::Peek => PolicyCheck::peek(self, client, endpoint, cost).map(Some),
            Op::Refund | Op::Charge | Op::Reset => {
                let request = Request::new(client, endpoint, cost);
                PolicyCheck::run(self, op, &request, PolicyCheck::now(self))
            }
        }
    }
}

/// A policy whose checks are awaited ([`PolicyCheck::run_async`]): see
/// [`RateLimitLayer::awaited`](super::RateLimitLayer::awaited).
pub(super) struct Awaited<P>(pub(super) P);

impl<P: PolicyCheck + Send + 'static> Check for Awaited<P> {
    // The blocking form, for completeness: the layer runs this policy through `run`.
    fn run_now(&self, op: Op, client: &str, endpoint: &str, cost: u32) -> Answered {
        self.0.run_now(op, client, endpoint, cost)
    }

    fn check_now<'e>(
        &self,
        client: &str,
        endpoint: &dyn Fn() -> &'e str,
        cost: u32,
        decision: &mut PolicyDecision,
    ) -> Result<(), InsufficientCapacity> {
        self.0.check_now(client, endpoint, cost, decision)
    }

    fn awaited(&self) -> bool {
        true
    }

    #[cfg(feature = "tracing")]
    fn names_route_templates(&self) -> bool {
        self.0.names_route_templates()
    }

    fn run(self: Arc<Self>, op: Op, client: String, endpoint: String, cost: u32) -> Answer {
        Box::pin(async move {
            let policy = &self.0;
            let request = Request::new(&client, &endpoint, cost);
            policy.run_async(op, &request, policy.now()).await
        })
    }
}
