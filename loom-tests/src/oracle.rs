//! [`Oracle`]: the sequential specification a model's history is checked against.

use crate::{Answer, FinalState, Op};

/// A sequential specification: fresh state, then one operation at a time.
///
/// Cloned at every branch of the search for a sequential order
/// ([`linearization::find`](crate::linearization::find)), so it must be cheap to clone.
pub trait Oracle: Clone + Send + Sync + 'static {
    /// Performs `op` sequentially.
    fn apply(&mut self, op: Op) -> Answer;

    /// The state after the operations applied so far.
    fn final_state(&self) -> FinalState;
}
