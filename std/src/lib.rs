//! # tollgate
//!
//! Fast, memory-bounded rate limiting. This crate re-exports the algorithms of
//! [`tollgate_core`] ([`Gcra`], [`TokenBucket`], …, with [`Decision`] and [`Nanos`]; the
//! core's executors are in [`engine`]) and adds what needs `std`:
//!
//! - clocks ([`TscClock`], [`CoarseClock`], [`MonotonicClock`], [`ManualClock`]);
//! - [`RateLimiter`]: one limit plus a clock;
//! - [`KeyedLimiter`]: a limit per key in a table of fixed capacity, lock-free lookups,
//!   automatic lossless-first eviction, no cleanup thread (see [`keyed`]).
//!
//! ```
//! use tollgate::{Gcra, KeyedLimiter, RateLimiter};
//!
//! // One global limit: 1000 per second.
//! let global = RateLimiter::new(Gcra::per_second(1000).build()?);
//! assert!(global.check().allowed);
//!
//! // 10 per second per client, at most 50 000 clients remembered (≈ 1 MB, fixed).
//! let per_client: KeyedLimiter<u64, Gcra> = KeyedLimiter::new(Gcra::per_second(10).build()?, 50_000)?;
//! let decision = per_client.check(&42)?;
//! assert!(decision.allowed);
//! assert_eq!(decision.remaining, 9);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]
// Scope: this crate's library code and its unit tests only; the integration tests
// (`std/tests/`), benches and examples are separate crates and are not covered. A cast that
// stays carries `#[allow(clippy::cast_possible_truncation)]` on the smallest scope and a
// `// Truncation:` comment saying why it cannot truncate.
#![warn(clippy::cast_possible_truncation)]

// What a user names, from tollgate-core. The executors underneath (`Limiter`, which
// `RateLimiter` wraps; `StateCell`; the sliding log's `LogRing` and `SlidingLogLimiter`) and
// the algorithm-implementor types (`Outcome`, `LogView`, `LogOutcome`) stay in `engine`.
pub use tollgate_core::{
    Algorithm, AlgorithmConfig, AnyAlgorithm, AnyLimiter, Clock, ConfigError, Decision,
    FixedWindow, Gcra, GcraBuilder, InsufficientCapacity, LeakyBucket, Nanos, PackedAlgorithm,
    SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};

/// The executors and the packed-state plumbing of [`tollgate_core`] underneath the limiters,
/// for code that drives the algorithms itself.
///
/// The names a limiter's user needs ([`Gcra`], [`Decision`], [`Nanos`], …) are at the top
/// level of this crate, and only there: this module holds what is not. The clockless
/// [`Limiter`](engine::Limiter) that [`RateLimiter`] wraps, the bare
/// [`StateCell`](engine::StateCell), the sliding log's [`LogRing`](engine::LogRing) and
/// [`SlidingLogLimiter`](engine::SlidingLogLimiter), the [`Outcome`](engine::Outcome) an
/// [`Algorithm`] returns, the log's [`LogView`](engine::LogView) and
/// [`LogOutcome`](engine::LogOutcome), and the fleet-stable [`hash`](engine::hash)es. (The
/// core's reference models are `tollgate_core::reference`, behind its `reference` feature.)
///
/// ```
/// use tollgate::engine::Limiter;
/// use tollgate::{Gcra, Nanos};
///
/// let limiter = Limiter::new(Gcra::per_second(10).build()?);
/// assert!(limiter.check_at(Nanos::from_secs(1)).allowed);
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
pub mod engine {
    pub use tollgate_core::{
        hash, Limiter, LogOutcome, LogRing, LogView, Outcome, SlidingLogLimiter, StateCell,
    };
}

pub mod clock;
pub mod keyed;
pub mod lease;
mod rate_limiter;
mod sync;
pub mod wait;

pub use clock::{CoarseClock, ManualClock, MonotonicClock, TscClock, UpkeepHandle};
pub use keyed::{
    DefaultHashBuilder, KeyStorage, KeyedBuildError, KeyedError, KeyedLimiter, KeyedLimiterBuilder,
    KeyedStats, WhenFull,
};
pub use rate_limiter::RateLimiter;

pub mod policy;
