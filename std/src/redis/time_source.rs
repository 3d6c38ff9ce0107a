//! [`TimeSource`]: which clock the scripts decide with.

/// The clock behind checks that do not pass an explicit time.
///
/// ```
/// use tollgate::redis::TimeSource;
/// assert_eq!(TimeSource::default(), TimeSource::Server);
/// ```
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum TimeSource {
    /// The Redis server's `TIME` (Unix epoch, ns), read inside the script: every client of
    /// the fleet shares one clock and client clock skew cannot matter. The default.
    #[default]
    Server,
    /// This process' wall clock (`SystemTime` since the Unix epoch, ns), sent with each
    /// call: for servers or proxies that forbid `TIME` in scripts. Clients' clocks must then
    /// agree; a lagging client is refused, never over-admitted (the transitions use `max`).
    Client,
}
