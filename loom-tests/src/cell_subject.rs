//! [`CellSubject`]: core's `StateCell` driving one algorithm, as a model subject.

use tollgate_core::{Algorithm, StateCell};

use crate::{Answer, FinalState, Op, Subject};

/// The real executor: [`StateCell`] (load → decide → `compare_exchange_weak`) with its
/// algorithm parameters.
#[derive(Debug)]
pub struct CellSubject<A> {
    algorithm: A,
    cell: StateCell,
}

impl<A: Algorithm> CellSubject<A> {
    /// A fresh cell for `algorithm`.
    pub fn new(algorithm: A) -> CellSubject<A> {
        CellSubject {
            algorithm,
            cell: StateCell::new(),
        }
    }
}

impl<A: Algorithm + Send + Sync + 'static> Subject for CellSubject<A> {
    fn apply(&self, op: Op) -> Answer {
        let answer = if op.commits() {
            self.cell.check_at(&self.algorithm, op.now(), op.cost())
        } else {
            self.cell.peek_at(&self.algorithm, op.now(), op.cost())
        };
        Ok(answer?)
    }

    fn final_state(&self) -> FinalState {
        FinalState::Word(self.cell.load())
    }
}
