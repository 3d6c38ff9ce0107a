//! [`Step`]: one operation of a fuzzed trace.

use arbitrary::Arbitrary;

use crate::{Cost, Time};

/// Move the clock, then check (or peek) a cost.
#[derive(Arbitrary, Copy, Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// How the clock moves first.
    pub time: Time,
    /// The cost asked for.
    pub cost: Cost,
    /// A peek (consumes nothing) instead of a check.
    pub peek: bool,
}

impl Step {
    /// The trace as `(now, cost, commit)`, starting from a clock at 0.
    pub fn timeline(steps: &[Step]) -> impl Iterator<Item = (u64, u32, bool)> + '_ {
        steps.iter().scan(0u64, |now, step| {
            *now = step.time.apply(*now);
            Some((*now, step.cost.get(), !step.peek))
        })
    }
}
