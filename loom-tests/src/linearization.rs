//! The search for a sequential order that explains a concurrent history.
//!
//! Given each thread's operations and the answers they got, [`find`] looks for an
//! interleaving of the threads (each thread's own order kept) which, run through an
//! [`Oracle`] from a fresh state, gives every operation the same answer and ends in the same
//! [`FinalState`]. A depth-first search over the interleavings (and over the choices an
//! oracle leaves open, see [`Oracle::successors`]), pruned at the first mismatching
//! answer; histories in the models have at most a handful of operations.

use crate::{Answer, FinalState, Op, Oracle};

/// One step of a sequential order: `(thread, index of the operation in that thread)`.
pub type Step = (usize, usize);

/// A sequential order explaining the history, if one exists.
pub fn find<O: Oracle>(
    oracle: &O,
    threads: &[Vec<Op>],
    answers: &[Vec<Answer>],
    final_state: &FinalState,
) -> Option<Vec<Step>> {
    assert_eq!(threads.len(), answers.len(), "one answer list per thread");
    for (ops, got) in threads.iter().zip(answers) {
        assert_eq!(ops.len(), got.len(), "one answer per operation");
    }
    let total = threads.iter().map(Vec::len).sum();
    let mut next = vec![0; threads.len()];
    let mut order = Vec::with_capacity(total);
    search(
        oracle,
        threads,
        answers,
        final_state,
        &mut next,
        &mut order,
        total,
    )
    .then_some(order)
}

fn search<O: Oracle>(
    oracle: &O,
    threads: &[Vec<Op>],
    answers: &[Vec<Answer>],
    final_state: &FinalState,
    next: &mut [usize],
    order: &mut Vec<Step>,
    total: usize,
) -> bool {
    if order.len() == total {
        return oracle.final_state() == *final_state;
    }
    for thread in 0..threads.len() {
        let index = next[thread];
        let Some(&op) = threads[thread].get(index) else {
            continue;
        };
        for (after, answer) in oracle.successors(op) {
            if answer != answers[thread][index] {
                continue;
            }
            next[thread] += 1;
            order.push((thread, index));
            if search(&after, threads, answers, final_state, next, order, total) {
                return true;
            }
            order.pop();
            next[thread] -= 1;
        }
    }
    false
}
