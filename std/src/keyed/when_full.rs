//! [`WhenFull`]: what a full keyed table does with a key it has never seen.

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
    Refuse,
}
