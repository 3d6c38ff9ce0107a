//! [`KeyedStats`]: counters of a keyed table's inserts and evictions.

/// A snapshot of a keyed limiter's occupancy and eviction counters (each read with a
/// relaxed load, so a snapshot taken under traffic is approximate but never torn per field).
///
/// ```
/// use tollgate::{Gcra, KeyedLimiter, Nanos};
/// let limiter: KeyedLimiter<u64, Gcra> =
///     KeyedLimiter::new(Gcra::per_second(1).build().unwrap(), 1000).unwrap();
/// limiter.check_at(&7, Nanos::ZERO).unwrap();
/// let stats = limiter.stats();
/// assert_eq!((stats.len, stats.inserts, stats.pressure_evictions), (1, 1, 0));
/// ```
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct KeyedStats {
    /// Keys resident now.
    pub len: usize,
    /// The most keys the table will ever hold.
    pub capacity: usize,
    /// New keys inserted since construction.
    pub inserts: u64,
    /// Entries evicted because their state was idle (equal to a fresh key's): lossless.
    pub idle_evictions: u64,
    /// Entries evicted under pressure ([`WhenFull::Evict`](crate::WhenFull::Evict)) while
    /// still holding limiting state: the key starts fresh if it comes back, unless the
    /// limiter keeps a [debt summary](crate::KeyedLimiterBuilder::debt_summary).
    pub pressure_evictions: u64,
    /// New keys refused ([`WhenFull::Refuse`](crate::WhenFull::Refuse)).
    pub refusals: u64,
    /// Keys removed by [`KeyedLimiter::remove`](crate::KeyedLimiter::remove).
    pub removals: u64,
}
