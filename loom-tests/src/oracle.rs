//! [`Oracle`]: the sequential specification a model's history is checked against.

use crate::{Answer, FinalState, Op};

/// A sequential specification: fresh state, then one operation at a time.
///
/// Cloned at every branch of the search for a sequential order
/// ([`linearization::find`](crate::linearization::find)), so it must be cheap to clone.
pub trait Oracle: Clone + Send + Sync + 'static {
    /// Performs `op` sequentially.
    fn apply(&mut self, op: Op) -> Answer;

    /// Every state (with its answer) `op` may lead to from this one. A deterministic
    /// specification has one, [`apply`](Self::apply)'s (the default); one that leaves a
    /// choice open (which entry a full keyed table evicts) has one per choice, and the
    /// search for a sequential order tries each.
    fn successors(&self, op: Op) -> Vec<(Self, Answer)> {
        let mut after = self.clone();
        let answer = after.apply(op);
        vec![(after, answer)]
    }

    /// The state after the operations applied so far.
    fn final_state(&self) -> FinalState;
}
