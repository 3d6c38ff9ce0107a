//! [`LoomFault`]: a step of the keyed table's protocol switched off, so that the loom
//! models can show their broken twins failing. Compiled only with `--cfg tollgate_loom`;
//! never part of a normal build or of the public API.

/// A protocol step a loom model may switch off on one table
/// ([`KeyedLimiter::loom_inject`](super::KeyedLimiter::loom_inject)).
#[doc(hidden)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LoomFault {
    /// Lookups that miss trust "absent" even when a cuckoo move raced them (the move
    /// sequence is ignored).
    NoMoveRetry,
    /// Writers do not wait for pinned readers before moving or dropping a key (the
    /// exact-key pin handshake loses its writer half).
    NoPinWait,
    /// The debt summary's records do not take its record lock (two records racing from
    /// two shards can interleave their load-and-store merges into one cell and lose one).
    SummaryLostUpdate,
    /// `Table::borrow` (under `WhenFull::Refuse`) lowers the lender's base with a load and
    /// a store instead of one read-modify-write of its quota word, so an insert the lender
    /// counted in between is lost and the quota counts one unit twice.
    LendByLoadStore,
    /// A `Refuse` table's shards count their own keys with a load and a store of the
    /// quota word (as tables that never lend do), so a borrower's lowering of the base
    /// between the two is overwritten and the quota counts one unit twice.
    LenderLoadStore,
}
