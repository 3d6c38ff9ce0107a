//! [`CellOracle`]: the sequential specification of a single-word cell.

use tollgate_core::Algorithm;

use crate::{Answer, FinalState, Op, Oracle, ReferenceModel, Refusal};

/// The pure transition [`Algorithm::decide`] run sequentially on a plain `u64`, in lockstep
/// with the algorithm's reference model: every step asserts that the two agree, so a model
/// that passes checks the cell against the reference model too (and a disagreement, which
/// would be a sequential bug in core, is reported as such rather than as a race).
#[derive(Clone, Debug)]
pub struct CellOracle<A, R> {
    algorithm: A,
    reference: R,
    state: u64,
}

impl<A, R> CellOracle<A, R>
where
    A: Algorithm + Clone + Send + Sync + 'static,
    R: ReferenceModel,
{
    /// A fresh key (state 0) of `algorithm`, whose reference model is `reference` (fresh).
    pub fn new(algorithm: A, reference: R) -> CellOracle<A, R> {
        CellOracle {
            algorithm,
            reference,
            state: 0,
        }
    }
}

impl<A, R> Oracle for CellOracle<A, R>
where
    A: Algorithm + Clone + Send + Sync + 'static,
    R: ReferenceModel,
{
    fn apply(&mut self, op: Op) -> Answer {
        let outcome = if op.commits() {
            self.algorithm.decide(self.state, op.now(), op.cost())
        } else {
            self.algorithm.peek(self.state, op.now(), op.cost())
        };
        let answer = outcome.map(|o| o.decision).map_err(Refusal::from);
        let expected = self
            .reference
            .check(op.now().as_u64(), op.cost(), op.commits())
            .map_err(Refusal::from);
        assert_eq!(
            answer, expected,
            "sequential bug, not a race: decide disagrees with the reference model \
             at state {:#x} for {op:?}",
            self.state
        );
        if let Ok(outcome) = outcome {
            if let Some(next) = outcome.next.filter(|_| op.commits()) {
                self.state = next;
            }
        }
        answer
    }

    fn final_state(&self) -> FinalState {
        FinalState::Word(self.state)
    }
}
