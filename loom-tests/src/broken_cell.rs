//! [`BrokenCell`]: a deliberately wrong single-word executor, to prove the cell models can
//! fail.

use loom::sync::atomic::{AtomicU64, Ordering};
use tollgate_core::Algorithm;

use crate::{Answer, FinalState, Op, Subject};

/// `StateCell` with its compare-and-swap replaced by a plain load and a later store: two
/// threads that both load the same state both get admitted and one update is lost. A model
/// run against it must panic.
#[derive(Debug)]
pub struct BrokenCell<A> {
    algorithm: A,
    state: AtomicU64,
}

impl<A: Algorithm> BrokenCell<A> {
    /// A fresh broken cell for `algorithm`.
    pub fn new(algorithm: A) -> BrokenCell<A> {
        BrokenCell {
            algorithm,
            state: AtomicU64::new(0),
        }
    }
}

impl<A: Algorithm + Send + Sync + 'static> Subject for BrokenCell<A> {
    fn apply(&self, op: Op) -> Answer {
        // SeqCst everywhere: the bug under test is the missing read-modify-write, not a
        // weak ordering.
        let current = self.state.load(Ordering::SeqCst);
        let outcome = if op.commits() {
            self.algorithm.decide(current, op.now(), op.cost())?
        } else {
            self.algorithm.peek(current, op.now(), op.cost())?
        };
        if let Some(next) = outcome.next {
            self.state.store(next, Ordering::SeqCst);
        }
        Ok(outcome.decision)
    }

    fn final_state(&self) -> FinalState {
        FinalState::Word(self.state.load(Ordering::SeqCst))
    }
}
