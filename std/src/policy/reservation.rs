//! [`Reservation`]: reserve-then-settle, for work whose cost is known only afterwards (LLM
//! tokens, bytes sent, CPU time).
//!
//! [`PolicyCheck::reserve`] checks an *estimate* now, all or nothing like any check. If it
//! is admitted, the guard holds those permits until the work is done, and then:
//!
//! | how it ends | what happens |
//! |---|---|
//! | [`settle`](Reservation::settle)`(actual)`, `actual < estimate` | the difference is refunded |
//! | `settle(actual)`, `actual == estimate` | nothing more |
//! | `settle(actual)`, `actual > estimate` | the excess is charged ([`PolicyCheck::charge_at`]): the work is done, so it is recorded even over the limit, and the key waits the debt out |
//! | [`cancel`](Reservation::cancel), or dropped unsettled (an error path, a panic, a cancelled future) | the whole estimate is refunded |
//!
//! So over any window, what a key is charged is exactly what its settled work cost, and
//! what it can hold at once is bounded by the limit (an estimate is only admitted within
//! it). There is no timer: a guard leaked with `mem::forget` keeps its permits until they
//! come back by themselves, like any admitted request.

use std::cmp::Ordering;

use tollgate_core::{InsufficientCapacity, Nanos};

use super::{Op, PolicyCheck, PolicyDecision, Request};

/// Permits reserved by [`PolicyCheck::reserve`], settled later with the actual cost (see
/// the module docs). A denied reservation holds nothing: settling or dropping it does
/// nothing.
#[derive(Debug)]
#[must_use = "dropping a reservation refunds it: settle it with the actual cost"]
pub struct Reservation<'a, P: PolicyCheck + ?Sized> {
    policy: &'a P,
    request: Request<'a>,
    decision: PolicyDecision,
    /// Whether the estimate is still held (admitted and not yet settled or cancelled).
    held: bool,
}

impl<'a, P: PolicyCheck + ?Sized> Reservation<'a, P> {
    /// A reservation of `request.cost` that `policy` answered with `decision`.
    pub(crate) fn new(
        policy: &'a P,
        request: Request<'a>,
        decision: PolicyDecision,
    ) -> Reservation<'a, P> {
        Reservation {
            policy,
            request,
            held: decision.allowed(),
            decision,
        }
    }

    /// Whether the estimate was admitted (and is held until settled).
    pub fn allowed(&self) -> bool {
        self.decision.allowed()
    }

    /// The decision on the estimate (for a denied reservation: when to retry).
    pub fn decision(&self) -> &PolicyDecision {
        &self.decision
    }

    /// The reserved estimate.
    pub fn estimate(&self) -> u32 {
        self.request.cost
    }

    /// Settles the reservation at its actual cost, now: refunds `estimate − actual`, or
    /// charges `actual − estimate`. Returns the key's state afterwards (a peek of nothing:
    /// what headers should report after the settled cost). For a denied reservation the
    /// actual cost is ignored (nothing was admitted, so no work should have been done).
    pub fn settle(mut self, actual: u32) -> Result<PolicyDecision, InsufficientCapacity> {
        let now = self.policy.now();
        if std::mem::replace(&mut self.held, false) {
            if let Some((op, cost)) = settlement(self.request.cost, actual) {
                // A refund or a charge decides nothing, so it cannot fail.
                let _ = self.policy.run(
                    op,
                    &Request {
                        cost,
                        ..self.request
                    },
                    now,
                );
            }
        }
        self.policy.peek_at(
            &Request {
                cost: 0,
                ..self.request
            },
            now,
        )
    }

    /// Gives the whole estimate back now (the work did not happen).
    pub fn cancel(mut self) {
        self.release(self.policy.now());
    }

    fn release(&mut self, now: Nanos) {
        if std::mem::replace(&mut self.held, false) {
            self.policy.refund_at(&self.request, now);
        }
    }
}

/// What settling an `estimate` against the `actual` cost records: a refund of the
/// difference, a charge of the excess (the work is done: recorded whatever the limits say,
/// the key going into debt), or nothing. The one settlement rule, of a [`Reservation`] and
/// of the HTTP layer's settled requests.
pub fn settlement(estimate: u32, actual: u32) -> Option<(Op, u32)> {
    match actual.cmp(&estimate) {
        Ordering::Less => Some((Op::Refund, estimate - actual)),
        Ordering::Greater => Some((Op::Charge, actual - estimate)),
        Ordering::Equal => None,
    }
}

impl<P: PolicyCheck + ?Sized> Drop for Reservation<'_, P> {
    /// Unsettled: the work did not complete, so the estimate goes back.
    fn drop(&mut self) {
        self.release(self.policy.now());
    }
}
