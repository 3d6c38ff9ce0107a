//! # tollgate
//!
//! Fast, memory-bounded rate limiting. This crate re-exports [`tollgate_core`] (the
//! algorithms as lock-free packed cells) and adds what needs `std`:
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

pub use tollgate_core::*;

pub mod clock;
pub mod keyed;
pub mod lease;
mod rate_limiter;
mod sync;

pub use clock::{CoarseClock, ManualClock, MonotonicClock, TscClock, UpkeepHandle};
pub use keyed::{
    DefaultHashBuilder, KeyStorage, KeyedBuildError, KeyedError, KeyedLimiter, KeyedLimiterBuilder,
    KeyedStats, WhenFull,
};
pub use rate_limiter::RateLimiter;

pub mod policy;

#[cfg(feature = "redis")]
pub mod redis;

#[cfg(feature = "http")]
pub mod http;

/// The repository's README, compiled as a doctest so its examples cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
