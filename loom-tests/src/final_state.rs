//! [`FinalState`]: what a model compares after all threads joined.

use crate::Answer;

/// The state left behind by a model execution, in a form both the concurrent subject and
/// the sequential oracle can produce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FinalState {
    /// A single-word cell's packed state.
    Word(u64),
    /// For multi-word state (the log ring): the answers of cost-1 peeks at fixed probe
    /// times, chosen so that they determine the in-window count at every instant.
    Probes(Vec<Answer>),
    /// A keyed table: how many entries it holds, and cost-1 peeks of each modelled key at
    /// each probe time (an absent key answers as a fresh one).
    Table {
        /// Resident entries.
        entries: usize,
        /// Peeks, key-major.
        probes: Vec<Answer>,
    },
}
