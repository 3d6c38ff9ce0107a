//! [`Subject`]: the concurrent object a model shares between its threads.

use crate::{Answer, FinalState, Op};

/// A concurrent limiter under test, shared by the model's threads.
pub trait Subject: Send + Sync + 'static {
    /// Performs `op` (from any thread).
    fn apply(&self, op: Op) -> Answer;

    /// The state left behind, read after every thread joined.
    fn final_state(&self) -> FinalState;
}
