//! `Charge`: the permits one admitted request holds — given back if it is never
//! forwarded (`Held`, cancel-safe), settled from its response otherwise (refund or
//! charge the difference: one settlement, awaited or finished in place).

use std::sync::Arc;

use super::admit::fields;
use super::check::{decided, Check};
use super::header_style::{Fields, HeaderStyle};
use super::layer::Shared;
use super::stats::Outcome;
use tollgate::policy::{settlement, Op, PolicyDecision};
use tollgate::wait::finish;

/// The permits one admitted request holds: given back if it is never forwarded, settled
/// from its response otherwise.
pub(super) struct Charge {
    pub(super) shared: Arc<Shared>,
    pub(super) client: String,
    pub(super) endpoint: String,
    pub(super) cost: u32,
    /// The shadow policy admitted (and so charged) the request too.
    pub(super) shadow_taken: bool,
}

impl Charge {
    /// Runs `op` (a refund or charge) for `n` permits on the policy, and on the shadow
    /// policy if it took the request too, each awaited (ready at once for a policy that is
    /// not awaited).
    async fn run(&self, op: Op, n: u32) {
        let run = |check: &Arc<dyn Check>| {
            Arc::clone(check).run(op, self.client.clone(), self.endpoint.clone(), n)
        };
        // A refund or charge decides nothing, so it cannot fail.
        let _ = run(&self.shared.policy).await;
        if let (true, Some(shadow)) = (self.shadow_taken, &self.shared.shadow) {
            let _ = run(shadow).await;
        }
    }

    /// Settles the estimate against `actual` (the policy's one rule, [`settlement`]), then
    /// reads the key's state afterwards (a peek of nothing) and answers the response's
    /// rate-limit fields from it, as an admission writes them
    /// ([`fields`](super::admit::fields): the exempt header of a listed client, the shadow
    /// tiers, peeked too, when [`shadow_headers`](super::RateLimitLayer::shadow_headers)
    /// asks). `None`, the admission's fields standing, if the layer writes no rate-limit
    /// fields ([`HeaderStyle::None`]: the state is not read again, since nothing would
    /// show it; a listed client's exempt header is the admission's) or the state cannot be
    /// read. Awaited on a policy whose store is; a policy that is not answers at once, and
    /// the layer [`finish`](tollgate::wait::finish)es it in place.
    pub(super) async fn settle(&self, actual: u32) -> Option<Fields> {
        if let Some((op, n)) = settlement(self.cost, actual) {
            let counters = &self.shared.counters;
            let counter = match op {
                Op::Refund => &counters.refunded,
                // (a settlement only refunds or charges)
                Op::Check | Op::Peek | Op::Charge | Op::Reset => &counters.charged,
            };
            counter.add(u64::from(n));
            self.run(op, n).await;
        }
        if self.shared.style == HeaderStyle::None {
            return None;
        }
        let peek = |check: &Arc<dyn Check>| {
            Arc::clone(check).run(Op::Peek, self.client.clone(), self.endpoint.clone(), 0)
        };
        let after = decided(peek(&self.shared.policy).await).ok()?;
        let shadow = match &self.shared.shadow {
            Some(shadow) if self.shared.shadow_headers => decided(peek(shadow).await).ok(),
            _ => None,
        };
        let shadow_tiers = shadow.as_ref().map_or(&[][..], PolicyDecision::tiers);
        Some(fields(&self.shared, &after, shadow_tiers, &self.client))
    }

    /// Gives the whole charge back: awaited on a spawned task when the policy's store is
    /// awaited and a tokio runtime is at hand (a drop cannot wait), else here.
    pub(super) fn give_back(self: Box<Self>) {
        self.shared.counters.count(Outcome::Cancelled);
        if self.shared.awaited {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move { self.run(Op::Refund, self.cost).await });
                return;
            }
        }
        finish(self.run(Op::Refund, self.cost));
    }
}

/// A [`Charge`] that gives its permits back when dropped, unless taken out first: held
/// while a delayed request waits, so a cancelled wait leaves nothing consumed.
pub(super) struct Held(pub(super) Option<Box<Charge>>);

impl Held {
    /// Takes the charge out: the request is forwarded, its permits spent.
    pub(super) fn release(&mut self) -> Option<Box<Charge>> {
        self.0.take()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(charge) = self.0.take() {
            charge.give_back();
        }
    }
}
