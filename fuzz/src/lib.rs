//! Shared pieces of tollgate's fuzz targets (`fuzz_targets/*.rs`, run with cargo-fuzz on
//! nightly; see `scripts/stages/fuzz.sh`).
//!
//! - Input vocabulary, all `Arbitrary`, biased towards the interesting cases: [`Count`]
//!   and [`Span`] for parameters (small values that make traces cross many windows, and any
//!   `u64`), [`Step`]s of a trace ([`Time`] moving forwards, backwards, to anywhere or to the
//!   end of `u64` time; [`Cost`] from 0 to `u32::MAX`; checks and peeks).
//! - [`constructed`]: a direct constructor and its `AlgorithmConfig` must agree (both build
//!   the same algorithm, or fail with the same `ConfigError`; neither panics).
//! - [`Differential`]: runs a trace through core's `StateCell`, through `AnyLimiter` (the
//!   config path) and through the reference model, asserting identical answers and the
//!   decision invariants ([`check_decision`]) at every step.
//!
//! - [`check_headers`]: the rate-limit headers rendered from a decision (`policy_toml`,
//!   `headers`); [`check_header_styles`]: every `tollgate_http::HeaderStyle` sends what
//!   `RateLimitHeaders` renders, sf-strings that parse back (`headers`).
//!
//! `policy_toml` feeds arbitrary text to the TOML rule loader (`PolicyConfig::from_toml`:
//! rules or a typed error, never a panic) and runs requests through every policy it
//! accepts; `headers` renders arbitrary decisions; `redis_wire` drives the Redis backend's
//! pure wire format (script arguments, reply decoding with [`ReplyValue`]s, tier
//! combination, key building) without a server.

mod cost;
mod count;
mod decision_check;
mod differential;
mod header_check;
mod reply_value;
mod span;
mod step;
mod time;

pub use cost::Cost;
pub use count::Count;
pub use decision_check::check_decision;
pub use differential::{constructed, Differential};
pub use header_check::{check_header_styles, check_headers};
pub use reply_value::ReplyValue;
pub use span::Span;
pub use step::Step;
pub use time::Time;

/// What one check or peek answered.
pub type Answer = Result<tollgate_core::Decision, tollgate_core::InsufficientCapacity>;
