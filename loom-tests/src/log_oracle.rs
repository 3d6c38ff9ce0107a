//! [`LogOracle`]: the sequential specification of the sliding window log.

use tollgate_core::reference::SlidingWindowLogModel;
use tollgate_core::SlidingWindowLog;

use crate::{Answer, FinalState, Op, Oracle};

/// [`SlidingWindowLogModel`] (a plain `VecDeque` of timestamps), read back at the same
/// probe times as the [`LogSubject`](crate::LogSubject).
#[derive(Clone, Debug)]
pub struct LogOracle {
    model: SlidingWindowLogModel,
    probes: Vec<u64>,
}

impl LogOracle {
    /// A fresh log of `log`, read back at `probes`.
    pub fn new(log: &SlidingWindowLog, probes: Vec<u64>) -> LogOracle {
        LogOracle {
            model: SlidingWindowLogModel::new(log),
            probes,
        }
    }

    /// Probe times that pin down the final in-window count at every instant, for a log of
    /// window `window` whose operations ran at `nows`: every recorded stamp is one of the
    /// `nows` (a permit is stamped `max(now, newest)`), so the count can only change at
    /// `t + window` for such a `t`; probe each `t`, `t + window − 1` and `t + window`.
    pub fn probes_for(window: u64, nows: impl IntoIterator<Item = u64>) -> Vec<u64> {
        let mut probes: Vec<u64> = nows
            .into_iter()
            .flat_map(|t| [t, t + window - 1, t + window])
            .collect();
        probes.sort_unstable();
        probes.dedup();
        probes
    }
}

impl Oracle for LogOracle {
    fn apply(&mut self, op: Op) -> Answer {
        Ok(self
            .model
            .check(op.now().as_u64(), op.cost(), op.commits())?)
    }

    fn final_state(&self) -> FinalState {
        let mut model = self.model.clone();
        FinalState::Probes(
            self.probes
                .iter()
                .map(|&t| Ok(model.check(t, 1, false)?))
                .collect(),
        )
    }
}
