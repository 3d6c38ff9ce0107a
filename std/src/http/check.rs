//! `Check`: the object-safe part of a policy the layer calls, so
//! [`RateLimitLayer`](super::RateLimitLayer) is one type whatever policy it wraps —
//! answered at once ([`PolicyCheck`]) or in a future (`Awaited`, an [`AsyncPolicyCheck`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tollgate_core::InsufficientCapacity;

use crate::policy::{AsyncPolicyCheck, PolicyCheck, PolicyDecision};

/// The object-safe part of [`PolicyCheck`] the layer needs, so the layer is one type
/// whatever policy (and decorators) it wraps.
pub(super) trait Check: Send + Sync {
    fn check(
        &self,
        client: &str,
        endpoint: &str,
        cost: u32,
    ) -> Result<PolicyDecision, InsufficientCapacity>;
    fn refund(&self, client: &str, endpoint: &str, cost: u32);
    fn charge(&self, client: &str, endpoint: &str, cost: u32);
    fn peek(
        &self,
        client: &str,
        endpoint: &str,
        cost: u32,
    ) -> Result<PolicyDecision, InsufficientCapacity>;
    /// Whether the layer awaits this policy's answers (its store makes remote calls)
    /// rather than taking them from the methods above.
    fn awaited(&self) -> bool {
        false
    }
    /// The operation, as a future owning what it needs. The default runs the synchronous
    /// method and returns its answer ready (a shadow or in-process policy next to an
    /// awaited one).
    fn run(self: Arc<Self>, op: Op, client: String, endpoint: String, cost: u32) -> Answer {
        let answer = match op {
            Op::Check => Some(self.check(&client, &endpoint, cost)),
            Op::Peek => Some(self.peek(&client, &endpoint, cost)),
            Op::Refund => {
                self.refund(&client, &endpoint, cost);
                None
            }
            Op::Charge => {
                self.charge(&client, &endpoint, cost);
                None
            }
        };
        Box::pin(std::future::ready(answer))
    }
}

/// A policy operation the layer runs (see [`Check::run`]).
#[derive(Copy, Clone, Debug)]
pub(super) enum Op {
    Check,
    Peek,
    Refund,
    Charge,
}

/// The answer of an awaited operation: the decision of a check or peek, `None` for a
/// refund or charge.
pub(super) type Answer =
    Pin<Box<dyn Future<Output = Option<Result<PolicyDecision, InsufficientCapacity>>> + Send>>;

/// A policy whose checks are awaited ([`AsyncPolicyCheck`]): see
/// [`RateLimitLayer::awaited`](super::RateLimitLayer::awaited).
pub(super) struct Awaited<P>(pub(super) P);

impl<P: AsyncPolicyCheck + Send + Sync + 'static> Check for Awaited<P> {
    // The blocking forms, for completeness: the layer runs this policy through `run`.
    fn check(
        &self,
        client: &str,
        endpoint: &str,
        cost: u32,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        Check::check(&self.0, client, endpoint, cost)
    }
    fn refund(&self, client: &str, endpoint: &str, cost: u32) {
        Check::refund(&self.0, client, endpoint, cost)
    }
    fn charge(&self, client: &str, endpoint: &str, cost: u32) {
        Check::charge(&self.0, client, endpoint, cost)
    }
    fn peek(
        &self,
        client: &str,
        endpoint: &str,
        cost: u32,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        Check::peek(&self.0, client, endpoint, cost)
    }
    fn awaited(&self) -> bool {
        true
    }
    fn run(self: Arc<Self>, op: Op, client: String, endpoint: String, cost: u32) -> Answer {
        Box::pin(async move {
            let policy = &self.0;
            let request = crate::policy::Request::new(&client, &endpoint, cost);
            let now = policy.now();
            match op {
                Op::Check => Some(policy.check_at_async(&request, now).await),
                Op::Peek => Some(policy.peek_at_async(&request, now).await),
                Op::Refund => {
                    policy.refund_at_async(&request, now).await;
                    None
                }
                Op::Charge => {
                    policy.charge_at_async(&request, now).await;
                    None
                }
            }
        })
    }
}

impl<P: PolicyCheck + Send + Sync> Check for P {
    fn check(
        &self,
        client: &str,
        endpoint: &str,
        cost: u32,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        PolicyCheck::allow(self, client, endpoint, cost)
    }
    fn refund(&self, client: &str, endpoint: &str, cost: u32) {
        PolicyCheck::refund(self, client, endpoint, cost)
    }
    fn charge(&self, client: &str, endpoint: &str, cost: u32) {
        let request = crate::policy::Request::new(client, endpoint, cost);
        PolicyCheck::charge_at(self, &request, PolicyCheck::now(self))
    }
    fn peek(
        &self,
        client: &str,
        endpoint: &str,
        cost: u32,
    ) -> Result<PolicyDecision, InsufficientCapacity> {
        PolicyCheck::peek(self, client, endpoint, cost)
    }
}
