//! # tollgate-core
//!
//! The `no_std`, allocation-free heart of tollgate: every classic rate-limiting algorithm as
//! validated, precomputed parameters plus one pure transition on a packed state, run by
//! lock-free atomic cells.
//!
//! | algorithm | state | burst | precision |
//! |---|---|---|---|
//! | [`Gcra`] | 8 B | up to `burst` at once | exact |
//! | [`TokenBucket`] | 8 B | up to `capacity` at once | exact |
//! | [`LeakyBucket`] | 8 B | none: output paced at the drain rate, `delay` says how long to hold | exact |
//! | [`FixedWindow`] | 8 B | up to `2·L` across a window boundary | per window |
//! | [`SlidingWindowCounter`] | 8 B | smoothed; bounded approximation | approximate |
//! | [`SlidingWindowLog`] | `8·(N+1)` B ([`LogRing`]) | none beyond `L` in any window | exact |
//!
//! ```
//! use tollgate_core::{Gcra, Limiter, Nanos};
//!
//! // 100 requests per second, bursts of up to 10.
//! let limiter = Limiter::new(Gcra::per_second(100).burst(10).build()?);
//! let now = Nanos::from_secs(1);
//! let admitted = (0..15).filter(|_| limiter.check_at(now).allowed).count();
//! assert_eq!(admitted, 10);
//! let denied = limiter.check_at(now);
//! assert!(!denied.allowed);
//! assert_eq!(denied.retry_after, Nanos::from_millis(10));
//! # Ok::<(), tollgate_core::ConfigError>(())
//! ```
//!
//! ## The pieces
//!
//! - Values every check deals in: [`Nanos`] (time and durations), the [`Clock`] trait,
//!   [`Decision`] (`allowed`, `limit`, `remaining`, `reset_after`, `retry_after`, `delay`)
//!   and [`Decision::combine`] for the tiers of one multi-tier check; errors
//!   [`ConfigError`] and [`InsufficientCapacity`].
//! - Per algorithm, next to [`Algorithm::decide`], everything an executor needs: `undo`
//!   (give back a take another tier's deny cancelled), `refund`, `used` / `with_used`,
//!   `is_idle` (lossless eviction), `max_cost`, and [`PackedAlgorithm::rescale`] (a state
//!   carried to new parameters or another algorithm).
//! - [`AlgorithmConfig`] (the algorithm as a value) builds an [`AnyAlgorithm`] /
//!   [`PackedAlgorithm`].
//! - [`hash`]: the stable hashes every layer of tollgate shares.
//!
//! Applications usually depend on `tollgate` instead, which re-exports these names
//! (`tollgate::Gcra`, `tollgate::Decision`, …) and adds clocks, keyed limiters and policies;
//! this crate alone is for `no_std` targets and for executors of your own.
//!
//! ## Executors
//!
//! - [`StateCell`]: one `AtomicU64`; load → [`Algorithm::decide`] → `compare_exchange_weak`,
//!   retried on conflict. A deny or a peek is a single load.
//! - [`Limiter`]: parameters + one cell, with `check`/`check_n`/`peek` and `*_at(now)` forms.
//! - [`LogRing`] / [`SlidingLogLimiter`]: the sliding log's fixed ring (sequence lock).
//! - [`AnyLimiter`]: whichever algorithm an [`AlgorithmConfig`] chose, dispatched by `match`.
//!
//! ## Targets without 64-bit atomics
//!
//! Atomics come from [`portable-atomic`](https://docs.rs/portable-atomic), which is the
//! native type wherever 64-bit atomics exist. Elsewhere:
//!
//! - `thumbv7em-none-eabihf`, `riscv32imac-unknown-none-elf` (32-bit CAS only): builds as is,
//!   using portable-atomic's lock-based fallback. That lock is not interrupt-safe: a check
//!   in an interrupt handler that preempts a check holding it spins for ever. This crate's
//!   `critical-section` feature does not change it (portable-atomic uses `critical-section`
//!   only on targets without CAS). To check from interrupt handlers, the final binary
//!   enables portable-atomic's `unsafe-assume-single-core` feature on a single-core chip
//!   (each atomic step masks interrupts), or `unsafe-assume-privileged` on a multi-core one
//!   (the fallback's lock taken with interrupts masked); their safety contracts are the
//!   binary's to keep, so this library does not forward them.
//! - `thumbv6m-none-eabi` (no CAS at all): enable `critical-section` (and link a
//!   `critical-section` implementation, e.g. from your HAL), which is interrupt-safe. On a
//!   single-core chip the final binary may instead enable portable-atomic's
//!   `unsafe-assume-single-core` feature (not together with `critical-section`).
//!
//! ```toml
//! # thumbv6m:
//! tollgate-core = { version = "0.1", features = ["critical-section"] }
//! # thumbv7em / riscv32imac, single core, checks from interrupt handlers too:
//! tollgate-core = "0.1"
//! portable-atomic = { version = "1.11", features = ["unsafe-assume-single-core"] }
//! ```
//!
//! ## Features
//!
//! - `reference`: plain, unpacked reference models (module `reference`, u128 arithmetic) used as oracles by
//!   the tests, the fuzz targets and the loom models. Uses `alloc`.
//! - `critical-section`: forwarded to portable-atomic, see above (it only takes effect on
//!   targets without CAS, such as `thumbv6m-none-eabi`).
#![no_std]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(
    clippy::std_instead_of_core,
    clippy::std_instead_of_alloc,
    clippy::alloc_instead_of_core
)]
// Scope: this crate's library code and its unit tests only; the integration tests
// (`core/tests/`), benches and examples are separate crates and are not covered. A cast that
// stays carries `#[allow(clippy::cast_possible_truncation)]` on the smallest scope and a
// `// Truncation:` comment saying why it cannot truncate.
#![warn(clippy::cast_possible_truncation)]

#[cfg(feature = "reference")]
extern crate alloc;

mod algorithm;
mod any_algorithm;
mod clock;
mod decision;
mod error;
mod fixed_window;
mod gcra;
pub mod hash;
mod leaky_bucket;
mod limiter;
mod log_ring;
mod nanos;
mod sliding_window_counter;
mod sliding_window_log;
mod state_cell;
mod sync;
mod token_bucket;
mod window;

#[cfg(feature = "reference")]
pub mod reference;

pub use algorithm::Algorithm;
pub use any_algorithm::{AlgorithmConfig, AnyAlgorithm, AnyLimiter, PackedAlgorithm};
pub use clock::Clock;
pub use decision::{Decision, Outcome};
pub use error::{ConfigError, InsufficientCapacity};
pub use fixed_window::FixedWindow;
pub use gcra::{Gcra, GcraBuilder};
pub use leaky_bucket::LeakyBucket;
pub use limiter::Limiter;
pub use log_ring::{LogRing, SlidingLogLimiter};
pub use nanos::Nanos;
pub use sliding_window_counter::SlidingWindowCounter;
pub use sliding_window_log::{LogOutcome, LogView, SlidingWindowLog};
pub use state_cell::StateCell;
pub use token_bucket::TokenBucket;
