//! [`Slot`] and [`Bucket`]: the keyed table's storage, 16 bytes per slot, four slots per
//! 64-byte cache line.

use crate::sync::AtomicU64;

/// Slots per bucket: one bucket is one cache line.
pub(crate) const BUCKET_SLOTS: usize = 4;

/// One key's entry: its 64-bit identity and its masked packed state.
///
/// - `ident`: the key's identity (a seeded bijection of an integer key, or a 64-bit hash),
///   or the bucket's *empty* value, chosen so that no key that can live in this bucket has
///   it (see `Table::empty_ident`).
/// - `state`: the algorithm's packed state XOR a mask derived from `ident` (see
///   `key_ident::state_mask`), so a check that loaded one key's state can never
///   compare-and-swap it into a different key's (except with probability 2⁻⁶⁴).
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Slot {
    pub(crate) ident: AtomicU64,
    pub(crate) state: AtomicU64,
}

/// Four slots on one cache line: a lookup touches one line per candidate bucket.
#[derive(Debug)]
#[repr(C, align(64))]
pub(crate) struct Bucket {
    pub(crate) slots: [Slot; BUCKET_SLOTS],
}

impl Bucket {
    /// A bucket whose slots all hold `empty`.
    pub(crate) fn new(empty: u64) -> Bucket {
        Bucket {
            slots: core::array::from_fn(|_| Slot {
                ident: AtomicU64::new(empty),
                state: AtomicU64::new(0),
            }),
        }
    }
}
