//! [`LogSubject`]: core's `LogRing` (sequence-locked ring of timestamps) as a model subject.

use tollgate_core::{LogRing, Nanos, SlidingWindowLog};

use crate::{Answer, FinalState, Op, Subject};

/// The real multi-word executor: a [`LogRing`] of capacity `N` with its parameters, and
/// the probe times its final state is read at (see [`FinalState::Probes`]).
#[derive(Debug)]
pub struct LogSubject<const N: usize> {
    log: SlidingWindowLog,
    ring: LogRing<N>,
    probes: Vec<u64>,
}

impl<const N: usize> LogSubject<N> {
    /// A fresh ring for `log`, read back at `probes` when the model ends.
    pub fn new(log: SlidingWindowLog, probes: Vec<u64>) -> LogSubject<N> {
        LogSubject {
            log,
            ring: LogRing::new(),
            probes,
        }
    }
}

impl<const N: usize> Subject for LogSubject<N> {
    fn apply(&self, op: Op) -> Answer {
        let answer = if op.commits() {
            self.ring.check_at(&self.log, op.now(), op.cost())
        } else {
            self.ring.peek_at(&self.log, op.now(), op.cost())
        };
        Ok(answer?)
    }

    fn final_state(&self) -> FinalState {
        FinalState::Probes(
            self.probes
                .iter()
                .map(|&t| Ok(self.ring.peek_at(&self.log, Nanos::new(t), 1)?))
                .collect(),
        )
    }
}
