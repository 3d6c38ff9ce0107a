//! # tollgate-redis: the Redis and Redis Cluster stores
//!
//! When a fleet of stateless servers must share limits, the state moves to Redis and the
//! core's transitions run there, as Lua scripts, atomically. The policy is the same one
//! that runs in one process; only its [`Store`](tollgate::policy::Store) changes:
//!
//! - [`RedisStore`]: the same rules file, tiers, reloads, peeks, refunds, charges and
//!   reservations as in one process, for the whole fleet; states are tagged with the
//!   parameters they were written under and converted on read when a reload or a rolling
//!   deploy changed them (`scripts/store.lua`). Called from blocking code
//!   ([`Policy::allow`](tollgate::policy::Policy::allow)) or awaited from async code
//!   ([`Policy::allow_async`](tollgate::policy::Policy::allow_async): the round trip holds no
//!   worker thread);
//! - [`LeasedStore`]: a [`RedisStore`] whose hot keys are served in process from leases
//!   (slices of their quota taken from Redis ahead of time, returned when unused), with a
//!   stated overshoot bound per key ([`LeaseConfig::max_lease_for`]).
//! - [`FleetRules`]: one rules document for the whole fleet, published once (checked and
//!   versioned) and applied by every process that follows it within a stated bound
//!   ([`FleetRulesConfig`]), with the version each process runs listed in Redis.
//! - Listing the clients a store keeps state for, behind
//!   [`Policy::limited`](tollgate::policy::Policy::limited).
//!
//! Features: `tracing` (default: a warning when the store becomes degraded, once until it
//! recovers, and an event when it recovers) and `metrics` (failures, the degraded state, [`RedisStats`] and a
//! leased store's counts through the `metrics` facade). The guide is the repository's
//! `docs/redis.md`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use tollgate::policy::Policy;
//! use tollgate_redis::{RedisConfig, RedisStore, RedisTarget};
//! use tollgate::MonotonicClock;
//! let store = RedisStore::new(RedisTarget::Single("redis://127.0.0.1:6379".into()), RedisConfig::new("api")?)?;
//! let policy = Policy::from_toml(r#"
//!     [[rules]]
//!     name = "default"
//!     tiers = [
//!         { name = "second", limit = 10, window = "1s" },
//!         { name = "day", limit = 10000, window = "1d", algorithm = "fixed_window" },
//!     ]
//! "#, MonotonicClock::new())?
//! .store(store);
//! let d = policy.allow_async("customer-42", "/search", 1).await?;
//! if !d.allowed() {
//!     println!("429, retry after {}", d.decision.retry_after);
//! }
//! # Ok(()) }
//! ```
//!
//! How it works:
//!
//! - **One file per algorithm** (`scripts/*.lua`): its pure transition (state in, decision
//!   and next state out), mirroring the core's `decide` line by line, with its `refund`
//!   and `charge` next to it; the token bucket runs GCRA's, as in the core. The clock is
//!   the server's `TIME` ([`TimeSource::Server`]); the policy's clock is an explicit option
//!   ([`TimeSource::Client`]).
//! - **Keys** `{prefix}:{rule}:{tier}:{{client}}` (see [`RedisStore::redis_key`]): the
//!   client is the hash tag, so every per-client tier of one check lives in one Redis
//!   Cluster slot. Every write sets a TTL at the key's reset time (rounded up, plus 3 ms
//!   for Redis' millisecond expiry clock, plus [`RedisConfig::with_ttl_slack`]), so idle
//!   state disappears and memory is bounded by the active keys; a GCRA, token bucket or
//!   leaky bucket key whose state runs at least half its tolerance (horizon) ahead gets
//!   *headroom*, a TTL to the end of its tolerance-long quantum of time, so that it
//!   outlives its reset by less than one tolerance (see "Key lifetime" on [`RedisStore`]).
//!   A deny writes nothing.
//! - **Redis Functions**: the script is a function library named after its SHA-1
//!   ([`LuaScript::library`]), loaded with `FUNCTION LOAD REPLACE` on the server (in a
//!   cluster: the slot's master) that answers `Function not found` (first use, restart,
//!   failover, `FUNCTION FLUSH`), then called with `FCALL`; the prelude and the algorithms
//!   are defined once per load, not per call. Where functions are missing (Redis 6) or
//!   disabled ([`RedisConfig::with_functions`]): **`EVALSHA`**, and on `NOSCRIPT` (restart,
//!   failover, `SCRIPT FLUSH`) one `EVAL` of the body, which caches it again. Either reload
//!   is transparent and counted in [`RedisStats::script_reloads`].
//! - **Tiers, all or nothing, one round trip** per hash tag: the script decides every tier,
//!   then writes all of them only if all admit (combined by the core's one rule, as in
//!   process).
//! - **Failures** (connect timeout, per-check timeout, connection loss, server errors) go
//!   to the [`FailurePolicy`]: fail open, fail closed, or the in-process fallback with a
//!   share of each limit; they are counted in [`RedisStats::degraded`]. After a failure the
//!   failed keys' group is skipped for the retry backoff, then tried again: recovery needs
//!   no restart.
//! - **Deadlines**: every call carries the instant, on the server's clock (estimated from
//!   `TIME`), after which its caller has given up; a call that reaches the script later (a
//!   stalled server ran it from its buffer) changes nothing and is refused (see
//!   "Deadlines" on [`RedisStore`]).
//! - **Deny cache**: a deny is remembered until its `retry_after` has passed (measured from
//!   when the request was sent, so never too long), for at most a second by default
//!   ([`RedisConfig::with_deny_cache_max_age`]); meanwhile the same request is answered
//!   locally with the same deadline (see "Deny cache" on [`RedisStore`]).
//!
//! Built on the [`redis`](https://docs.rs/redis) crate (features `tokio-comp`,
//! `connection-manager`, `cluster-async`, `script`) and tokio, whose minimum Rust is this
//! crate's (`rust-version`; the table of every crate's is in the repository's README), and
//! on `tollgate`'s public API only: a store for another backend could be written the same
//! way.
//! Tested against Redis 7.0 (`CLUSTER ADDSLOTSRANGE` in the test harness needs 7.0+; the
//! scripts themselves only need `TIME` in scripts, i.e. effects replication, the default
//! since 5.0).
//!
//! ## Exact arithmetic in Redis' Lua
//!
//! Redis embeds Lua 5.1, whose only number is an IEEE double: integers are exact only below
//! 2^53 (about 104 days in ns). Unix time in ns is about 1.8·10^18 (61 bits), window
//! indexes times windows and the sliding counter's `prev·(W − elapsed)` and `L·W` are
//! `u128` in the core. Rounding any of them would make Redis drift from the in-process
//! engine, so the scripts do not use doubles for values at all:
//!
//! - a value is a Lua number when it is an integer below 2^53 (counts, durations,
//!   parameters: exact), and otherwise an array of 24-bit limbs (little-endian); every
//!   operation normalises its result, so "limbs" always means "≥ 2^53". `prelude.lua`
//!   implements compare, add, subtract (and saturating subtract), multiply and divide on
//!   these values: two numbers take one double operation, kept only when the result is
//!   provably exact (a rounded sum or product below 2^53 is exact, because a true result
//!   of 2^53 or more never rounds below it); anything else goes through the limb routines;
//! - three limbs (72 bits) hold every intermediate of GCRA, token and leaky bucket, fixed
//!   window and log (sums of two `u64`s; `w·W + W ≤ now + W`); the sliding window
//!   counter's products of a count and a duration (`prev·elapsed`, `L·W`; counts are
//!   below 2^31, which the core's layout guarantees) use four (96 bits). The client puts
//!   the limb count in the script. Each limb operation stays below 2^53: sums of limbs
//!   are below 2^25, limb products below 2^48 and a column of at most four of them below
//!   2^50;
//! - instants are mostly *relative*: the policy store's script (unless a sliding-log tier
//!   takes part) hands the algorithms `now = 0` and every stored instant as its distance
//!   from the call's time, a number while it lies within about 2^52 ns (52 days) of it, so
//!   GCRA, token and leaky bucket work in plain numbers; an instant further ahead is a limb
//!   value, one as far behind sends the call to absolute mode (all instants as they are). Written
//!   instants go back to absolute hex, and the saturation at `u64::MAX` is checked against
//!   `u64::MAX − now`;
//! - the window algorithms read the index of the call's time and the offset into its
//!   window from `window_of`, which keeps, per window length, the last window and its
//!   start (a pure cache in the function library, so replicas and the `EVAL` fallback
//!   compute the same): a limb division only when the time enters a window more than 2^52
//!   ns past the remembered one. The sliding window counter uses the exact identity
//!   `⌊(L·W − prev·(W − e)) / W⌋ = (L − prev) + ⌊prev·e / W⌋` (for `prev ≤ L`) instead of a
//!   `u128` division; see the comments in its script;
//! - division of two numbers below 2^52 is one double division corrected by one exact
//!   multiply-subtract; otherwise it computes a double-precision estimate of the quotient
//!   biased low by 2^-40, which provably keeps `estimate × divisor ≤ remainder` despite
//!   the rounding of the limbs-to-double conversions (relative error below 2^-49),
//!   subtracts `estimate × divisor` exactly, and repeats while the remainder is at least
//!   the divisor (each round cuts the remainder by 2^39: two or three rounds for `u64`);
//! - values are stored in Redis as 16-digit hex strings, parsed into and printed from two
//!   32-bit halves (each exact in a double); arguments are sent as hex without padding
//!   below 2^52 (one `tonumber(s, 16)`); a decision's durations come back as integer
//!   replies when below 2^53 (exact), as hex otherwise;
//! - `TIME`'s seconds and microseconds become `s·10^9 + µs·10^3` ns as two 32-bit halves;
//! - products that only depend on the request and the parameters (`cost·T`, `cost/r`) are
//!   computed by the client in checked `u64` (the core already bounds them), so the
//!   scripts only add, compare and divide in the hot path.
//!
//! The state a script stores is the core's state, unpacked, after a tag naming the
//! parameters it was written under (see `scripts/store.lua`): GCRA / token bucket / leaky
//! bucket keep their one instant; the fixed window keeps (index, count) and the sliding
//! window counter (index, prev, curr) as hex fields of one string (no bit packing needed,
//! so no layout limits beyond the core's own validation); the sliding window log keeps a
//! sorted set bounded to `L` members, one per admitted permit, all with score 0 and named
//! `hex(stamp) ‖ hex(sequence)`, so that lexicographic order is recording order and rank
//! `r` is the core ring's live slot `h − n + r` (binary search by `ZRANGE` rank). An
//! expired key reads as the core's fresh state, and keys expire only once their state is
//! indistinguishable from fresh, so expiry never changes a decision. (A bucket key given
//! headroom ends in `h`: see "Key lifetime" on [`RedisStore`].)
//!
//! The shared test vectors (`tests/redis_support/vectors.rs`) replay the same traces
//! through the core cell and through a policy on Redis deciding at the policy's time
//! (single node and cluster), including instants
//! near `u64::MAX`, late callers and `u128` intermediates, and require identical
//! [`Decision`](tollgate::Decision)s.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod args;
mod clock;
mod config;
mod connection;
mod deny_cache;
mod error;
mod events;
mod fallback;
mod fleet_rules;
mod keys;
mod leased;
mod reply;
mod script;
mod stats;
mod store;
mod sync;

pub use config::{
    FailurePolicy, LeaseConfig, RedisConfig, RedisTarget, TimeSource, DEFAULT_DENY_CACHE_MAX_AGE,
    MAX_TTL_SLACK, MAX_WAIT,
};
pub use error::{BuildError, FailureCause};
pub use fleet_rules::{
    FleetRules, FleetRulesConfig, FleetRulesError, FleetRulesStatus, RunningVersion,
    DEFAULT_POLL_INTERVAL, DEFAULT_RULES_TIMEOUT,
};
pub use leased::{LeaseStats, LeasedStore};
// The fuzzing entry point only (see `reply`).
#[cfg(fuzzing)]
pub use reply::decode_reply;
pub use script::LuaScript;
pub use stats::RedisStats;
pub use store::RedisStore;
