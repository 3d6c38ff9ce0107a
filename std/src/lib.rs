//! # tollgate
//!
//! Fast, memory-bounded rate limiting for applications: limiters for code, and policies of
//! rules (per client, per endpoint, tiers) read from a rules file, reloaded live, answered
//! with rate-limit headers. The algorithms are those of [`tollgate_core`], re-exported
//! here under the names a user needs; this crate adds what needs `std`.
//!
//! - **Algorithms** ([`Gcra`], [`TokenBucket`], [`LeakyBucket`], [`FixedWindow`],
//!   [`SlidingWindowCounter`], [`SlidingWindowLog`]) and what a check answers: a
//!   [`Decision`] (`allowed`, `remaining`, `retry_after`, a leaky bucket's `delay`, … in
//!   [`Nanos`]). [`AlgorithmConfig`] and [`AnyLimiter`] choose the algorithm at run time.
//! - **Clocks** ([`clock`]): where "now" comes from, which one is the default, and the one
//!   time base (Unix time) that aligns windows across processes.
//! - [`RateLimiter`]: one limit plus a clock.
//! - [`KeyedLimiter`]: a limit per key in a table of fixed capacity, lock-free lookups,
//!   lossless-first eviction, no cleanup thread ([`keyed`]: sizing, eviction, fingerprinted
//!   keys, keeping evicted debt).
//! - **Waiting** ([`wait`]): `until_ready` futures that run under any executor, on a timer
//!   thread of tollgate's own.
//! - [`policy`]: rules from TOML ([`policy::Policy::from_toml`]), every matching rule's
//!   tiers checked all or nothing, hot reload that keeps each key's use, the
//!   `RateLimit-Policy` / `RateLimit` headers, reservations settled with the real cost,
//!   decorators ([`policy::Metered`], [`policy::AdaptivePenalty`]), and the
//!   [`policy::Store`] interface: in process by default, on Redis with `tollgate-redis`,
//!   behind HTTP with `tollgate-http`.
//! - [`lease`]: the cell a leased store (`tollgate-redis`'s `LeasedStore`) admits from.
//! - [`engine`]: the core's executors and packed-state plumbing, for code that drives the
//!   algorithms itself.
//!
//! Features: `tracing` (default: an event for every reload), `metrics` ([`policy::Metered`]
//! and the reload counters report through the `metrics` facade), `watch`
//! (`policy::RulesFile`, which follows a rules file and reloads the policy when it changes).
//!
//! ```
//! use tollgate::{Gcra, KeyedLimiter, Nanos, RateLimiter};
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
//!
//! // Exactly when a refused request may come back.
//! let burst = RateLimiter::new(Gcra::per_second(100).burst(1).build()?);
//! assert!(burst.check_at(Nanos::from_secs(1)).allowed);
//! assert_eq!(burst.check_at(Nanos::from_secs(1)).retry_after, Nanos::from_millis(10));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The algorithm as a configuration value:
//!
//! ```
//! use tollgate::{AlgorithmConfig, AnyLimiter, Nanos};
//!
//! let config = AlgorithmConfig::LeakyBucket { amount: 2, period: Nanos::from_secs(1), queue: 3 };
//! let shaper = AnyLimiter::<0>::new(config.build()?)?;
//! assert!(shaper.check_at(Nanos::ZERO).allowed);
//! assert_eq!(shaper.check_at(Nanos::ZERO).delay, Nanos::from_millis(500)); // hold it 500 ms
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The re-exported names are documented in `tollgate-core`, with examples written for that
//! crate (`use tollgate_core::…`); in this crate the same items are `tollgate::Gcra`,
//! `tollgate::Decision`, …, as above. Guides: the repository's `docs/` (rules, limiters,
//! algorithms, Redis, HTTP).

#![cfg_attr(docsrs, feature(doc_cfg))]
// Scope: this crate's library code and its unit tests only; the integration tests
// (`std/tests/`), benches and examples are separate crates and are not covered. A cast that
// stays carries `#[allow(clippy::cast_possible_truncation)]` on the smallest scope and a
// `// Truncation:` comment saying why it cannot truncate.
#![warn(clippy::cast_possible_truncation)]

// What a user names, from tollgate-core. The executors underneath (`Limiter`, which
// `RateLimiter` wraps; `StateCell`; the sliding log's `LogRing` and `SlidingLogLimiter`) and
// the algorithm-implementor types (`Outcome`, `LogView`, `LogOutcome`) stay in `engine`.
// `no_inline`: their pages are tollgate-core's, whose examples say `use tollgate_core::…`;
// inlined here they would show a `tollgate` user examples that do not compile for them.
#[doc(no_inline)]
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
    #[doc(no_inline)]
    pub use tollgate_core::{
        hash, Limiter, LogOutcome, LogRing, LogView, Outcome, SlidingLogLimiter, StateCell,
    };
}

pub mod clock;
pub mod keyed;
pub mod lease;
mod prefetch;
mod rate_limiter;
mod sync;
pub mod wait;

// The clocks and the keyed limiter's items, at their one public path (the `clock` and
// `keyed` modules hold their guides).
pub use clock::coarse::{CoarseClock, UpkeepHandle};
pub use clock::manual::ManualClock;
pub use clock::monotonic::MonotonicClock;
pub use clock::tsc::TscClock;
pub use keyed::builder::{DefaultHashBuilder, KeyedLimiterBuilder, DEFAULT_CAPACITY};
pub use keyed::config::{KeyStorage, WhenFull};
pub use keyed::error::{KeyedBuildError, KeyedError};
pub use keyed::limiter::{KeyedLimiter, KeyedStats};
// The loom models' broken twins (loom builds only): a test hook, not the product's API.
#[cfg(tollgate_loom)]
#[doc(hidden)]
pub use keyed::loom_fault::LoomFault;
pub use rate_limiter::RateLimiter;

pub mod policy;
