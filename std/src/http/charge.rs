//! `Charge`: the permits one admitted request holds — given back if it is never
//! forwarded (`Held`, cancel-safe), settled from its response otherwise (refund or
//! charge the difference, at once or awaited).

use std::sync::Arc;

use super::check::{Check, Op};
use super::header_style::Fields;
use super::layer::Shared;
use super::stats::Counters;
use crate::policy::PolicyDecision;

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
    /// Gives `cost` permits back to the policy, and to the shadow policy if it took them
    /// too.
    fn refund(&self, cost: u32) {
        self.shared
            .policy
            .refund(&self.client, &self.endpoint, cost);
        if self.shadow_taken {
            if let Some(shadow) = &self.shared.shadow {
                shadow.refund(&self.client, &self.endpoint, cost);
            }
        }
    }

    /// Settles the estimate against `actual`; returns the key's state afterwards (a peek
    /// of nothing), for the response's rate-limit fields.
    pub(super) fn settle(&self, actual: u32) -> Option<PolicyDecision> {
        let counters = &self.shared.counters;
        if actual < self.cost {
            let back = self.cost - actual;
            self.refund(back);
            Counters::add(&counters.refunded, u64::from(back));
        } else if actual > self.cost {
            // The work is done: the excess is recorded whatever the limits say (the key
            // goes into debt and is denied until it is repaid).
            let extra = actual - self.cost;
            self.shared
                .policy
                .charge(&self.client, &self.endpoint, extra);
            Counters::add(&counters.charged, u64::from(extra));
            if self.shadow_taken {
                if let Some(shadow) = &self.shared.shadow {
                    shadow.charge(&self.client, &self.endpoint, extra);
                }
            }
        }
        self.shared
            .policy
            .peek(&self.client, &self.endpoint, 0)
            .ok()
    }

    /// Runs `op` for `n` permits on the policy, and on the shadow policy if it took the
    /// request too, each awaited.
    async fn run_awaited(&self, op: Op, n: u32) {
        let run = |check: &Arc<dyn Check>| {
            Arc::clone(check).run(op, self.client.clone(), self.endpoint.clone(), n)
        };
        run(&self.shared.policy).await;
        if let (true, Some(shadow)) = (self.shadow_taken, &self.shared.shadow) {
            run(shadow).await;
        }
    }

    /// [`settle`](Self::settle) on a policy whose store is awaited: the refund or charge,
    /// then the peek, each awaited; the rate-limit fields of the state afterwards.
    pub(super) async fn settle_awaited(self: Box<Self>, actual: u32) -> Option<Fields> {
        let counters = &self.shared.counters;
        let (op, n) = if actual < self.cost {
            Counters::add(&counters.refunded, u64::from(self.cost - actual));
            (Op::Refund, self.cost - actual)
        } else {
            // Recorded whatever the limits say, as in `settle`.
            Counters::add(&counters.charged, u64::from(actual - self.cost));
            (Op::Charge, actual - self.cost)
        };
        if n > 0 {
            self.run_awaited(op, n).await;
        }
        let after = Arc::clone(&self.shared.policy)
            .run(Op::Peek, self.client.clone(), self.endpoint.clone(), 0)
            .await?
            .ok()?;
        Some(self.shared.style.fields(&after, &[], &self.client))
    }

    /// Gives the whole charge back: awaited on a spawned task when the policy's store is
    /// awaited and a tokio runtime is at hand (a drop cannot wait), else here.
    pub(super) fn give_back(self: Box<Self>) {
        Counters::add(&self.shared.counters.cancelled, 1);
        if self.shared.policy.awaited() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move { self.run_awaited(Op::Refund, self.cost).await });
                return;
            }
        }
        self.refund(self.cost);
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
