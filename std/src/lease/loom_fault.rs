//! [`LeaseFault`]: a step of the [`LeaseCell`](super::LeaseCell) protocol switched off, so
//! that the loom models (`loom-tests/tests/lease_cell.rs`) can show their broken twins
//! failing. Compiled only with `--cfg tollgate_loom`; never part of a normal build or of
//! the public API.

/// A protocol step a loom model may switch off on one cell
/// ([`LeaseCell::loom_inject`](super::LeaseCell::loom_inject)).
#[doc(hidden)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LeaseFault {
    /// A spend checks the owner on its first pass only, not again after a failed
    /// compare-and-swap: a spend that read the word under the old key's lease, then lost
    /// its compare-and-swap to the keeper's hand-off, takes permits granted for the new
    /// key.
    NoOwnerRecheck,
    /// A spend writes the word with a load and a plain store instead of a compare-and-swap
    /// (a lost update): two spends of the last permit both take it, and a spend racing a
    /// revoke writes back the old generation with the revoked permits.
    SpendLoadStore,
}
