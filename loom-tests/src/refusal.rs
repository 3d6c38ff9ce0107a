//! [`Refusal`]: every way an operation can fail, across the modelled subjects.

use tollgate_core::InsufficientCapacity;

/// Why an operation returned no decision.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The cost exceeds what the limit can ever admit.
    Capacity(InsufficientCapacity),
    /// A keyed table had no room for a new key (`KeyedError::Full`).
    Full,
}

impl From<InsufficientCapacity> for Refusal {
    fn from(error: InsufficientCapacity) -> Refusal {
        Refusal::Capacity(error)
    }
}
