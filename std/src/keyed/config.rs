//! The keyed limiter's options: [`WhenFull`] (what a full table does with a new key) and
//! [`KeyStorage`] (whether keys or their fingerprints are stored).

/// What a [`KeyedLimiter`](crate::KeyedLimiter) does when a new key arrives and there is no
/// room for it (the table, or the two buckets the key may live in, are full).
///
/// Both policies first evict *idle* entries (state equal to a fresh key's, so forgetting them
/// loses nothing). They differ only when no idle entry is at hand.
///
/// ```
/// use tollgate::WhenFull;
/// assert_eq!(WhenFull::default(), WhenFull::Evict);
/// ```
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WhenFull {
    /// Evict the entry that loses least: the one closest to fresh (smallest `reset_after`,
    /// then most `remaining`). The new key is admitted as a fresh key. Fail open: a flood of
    /// new keys can push out the state of limited ones, but never grows memory; with a
    /// [debt summary](crate::KeyedLimiterBuilder::debt_summary) an evicted key comes back
    /// with its debt instead (bounded phantom debt for new keys after a flood).
    #[default]
    Evict,
    /// Refuse the new key with [`KeyedError::Full`](crate::KeyedError::Full). Fail closed:
    /// no limited key ever loses its state, and a flood of new keys is turned away.
    ///
    /// A key is refused only when no idle entry can make room and either the table holds
    /// its capacity of keys, or both of the key's buckets are full and no move of one or two
    /// entries to their other bucket frees a slot in them. The second case can happen short
    /// of the capacity, more often with many shards: a shard has `1.2 ×` its share of slots
    /// (at least 16), hashing never spreads keys evenly, and a key whose two buckets coincide
    /// has one. It refuses that key, not later ones: offered more distinct keys, the table
    /// still fills to its capacity. (With 64 to 1 024 shards of 10 to 24 keys each and
    /// random keys, the first such refusal came after 56 to 88 % of the capacity in the
    /// crate's tests; the default shard count, ≥ 1 024 keys a shard, makes it rare.) Size
    /// the capacity with that margin, or use fewer shards, if a refusal must mean a full
    /// table.
    Refuse,
}

/// How a [`KeyedLimiter`](crate::KeyedLimiter) remembers which slot belongs to which key.
///
/// Integer keys (`u8`…`u64`, `i8`…`i64`, `usize`, `isize`, `char`, `Ipv4Addr`) are always
/// stored exactly in 8 bytes, as a seeded bijection of their value, whatever this says:
/// two different integer keys can never share a slot.
///
/// ```
/// use tollgate::KeyStorage;
/// assert_eq!(KeyStorage::default(), KeyStorage::Exact);
/// ```
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum KeyStorage {
    /// Store a clone of each key (cloned once, on insert) next to its slot and compare keys
    /// with `Eq`. Exact. A lookup of such a key marks the slot in use with one atomic
    /// increment and decrement (so the insert lock never frees a key a reader is comparing).
    #[default]
    Exact,
    /// Store only a seeded 64-bit hash of each key: 8 bytes whatever the key's size, no
    /// clone, no key comparison. Two distinct keys share a limit only if their hashes are
    /// equal: with `n` keys resident, a new key collides with one of them with probability
    /// about `n / 2^64` (≈ 5·10⁻¹⁴ for a million keys), and the chance of any collision
    /// among `n` keys is about `n² / 2^65`. The hasher's seed is random per limiter (with the
    /// default hasher), so collisions cannot be aimed at.
    Fingerprint,
}
