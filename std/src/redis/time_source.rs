//! [`TimeSource`]: which clock the scripts decide with.

/// The clock behind checks that do not pass an explicit time.
///
/// ```
/// use tollgate::redis::TimeSource;
/// assert_eq!(TimeSource::default(), TimeSource::Server);
/// ```
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TimeSource {
    /// The Redis server's `TIME` (Unix epoch, ns), read inside the script: every client of
    /// the fleet shares one clock and client clock skew cannot matter. The default.
    #[default]
    Server,
    /// The caller's clock, sent with each call: the policy's clock (by default Unix time,
    /// see [`MonotonicClock`](crate::MonotonicClock)). For servers or proxies that forbid
    /// `TIME` in scripts, and for replaying traces.
    ///
    /// Clients' clocks must then agree. What a skew of `s` does (the transitions take
    /// `max(stored, now)`, so no state ever moves back):
    /// - a client **behind** by `s` sees every key `s` further from reset: it is refused
    ///   sooner and told to wait up to `s` longer; it never admits more than a synced one;
    /// - a client **ahead** by `s` sees keys `s` closer to reset: on GCRA, the token and
    ///   the leaky bucket it can admit up to `s × rate` permits more than the limit (the
    ///   debt it takes is then charged to everyone, who waits it out); on the windows it
    ///   starts each window `s` early, and clients behind it keep counting in that window
    ///   (a late caller's window is kept), so each window still admits at most its limit;
    ///   on the sliding log its stamps lie `s` in the future and keep counting `s` longer
    ///   for everyone.
    ///
    /// `tests/redis_policy.rs` pins these numbers for a one-second skew.
    Client,
}
