//! [`PolicyFault`]: a step of the policy's reload protocol switched off, so that the loom
//! models (`loom-tests/tests/policy.rs`) can show their broken twins failing. Compiled only
//! with `--cfg tollgate_loom`; never part of a normal build or of the public API.

/// A protocol step a loom model may switch off on one policy
/// ([`Policy::loom_inject`](super::Policy::loom_inject)).
#[doc(hidden)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PolicyFault {
    /// A reload retires the stores it replaces only after it has published the new set: a
    /// check on the new rules may carry a key out of an old store while a check still on
    /// the old rules inserts that key there afresh (its take is then lost).
    RetireAfterPublish,
    /// A reload reclaims the rule set it replaced at once, whatever still holds it: a
    /// check suspended on the old set finds it gone.
    ReclaimAtPublish,
}
