//! [`PolicyFault`]: a step of the policy's reload protocol switched off, so that the loom
//! models (`loom-tests/tests/policy.rs`) can show their broken twins failing. Compiled only
//! with `--cfg tollgate_loom`; never part of a normal build or of the public API.

/// A protocol step a loom model may switch off on one policy
/// ([`Policy::loom_inject`](super::Policy::loom_inject)).
#[doc(hidden)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PolicyFault {
    /// A reload does not hold the new stores' gates through the grace period: a check on
    /// the new rule set may carry a key out of an old store while a check still on the old
    /// set has taken from it and has yet to undo that take.
    NoReloadGate,
}
