//! The policy layer: what turns the core's cells into the limiter an API gateway calls on
//! every request.
//!
//! - **Rules** per client, per endpoint, per (client, endpoint) and a default, each with
//!   one or more **tiers** (a per-second burst and a per-day quota), each tier any core
//!   algorithm. [`Policy::allow`] applies every matching rule and admits only if all tiers
//!   admit — all-or-nothing, also under concurrent callers (see [`Policy`] for how).
//! - **Config** from TOML ([`PolicyConfig`]), validated into typed errors naming the rule
//!   and field ([`PolicyConfigError`]: `rules[3].limit: must be > 0`); durations such as
//!   `1s`, `1m`, `1d`; the algorithm is a config value ([`AlgorithmKind`]).
//! - **Allow and deny lists** by client key or network ([`ListEntryConfig`]),
//!   `unlimited = true` rules and bans (`limit = 0`), decided before any store is asked;
//!   the decision names the entry or rule ([`Listing`]).
//! - **Hot reload** ([`Policy::reload`]) without restart or lost state.
//! - **Headers** ([`RateLimitHeaders`]): `RateLimit-Policy` / `RateLimit` (IETF draft 10),
//!   `X-RateLimit-*`, `Retry-After`.
//! - **Decorators**: [`Metered`] (allowed/denied per rule) and [`AdaptivePenalty`].
//! - **Waiting**: [`PolicyCheck::wait`] (blocking) and [`PolicyCheck::until_ready`]
//!   (async, any runtime), honouring the leaky bucket's `delay`.
//! - [`PolicyCheck::peek`] and [`PolicyCheck::refund`]; [`Policy::reset`] of a client, and
//!   [`Policy::limited`]: a bounded listing of the clients a check would deny now.
//!
//! ```
//! use tollgate::policy::{FnClock, Policy, RateLimitHeaders};
//! use tollgate::Nanos;
//!
//! let rules = r#"
//!     [[rules]]                 # every client: 100 per minute
//!     name = "default"
//!     limit = 100
//!     window = "1m"
//!
//!     [[rules]]                 # and at most 10 per minute on /search
//!     name = "search"
//!     endpoint = "/search"
//!     limit = 10
//!     window = "1m"
//!     algorithm = "fixed_window"
//! "#;
//! let policy = Policy::from_toml(rules, FnClock(|| Nanos::from_secs(30)))?;
//! let decision = policy.allow("acct_123", "/search", 1)?;
//! assert!(decision.allowed());
//! assert_eq!(decision.remaining(), 9); // the tighter of 99 and 9
//! let headers = RateLimitHeaders::from_policy_decision(&decision);
//! assert_eq!(headers.get("RateLimit"), Some("\"default\";r=99;t=1, \"search\";r=9;t=30"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#[cfg(test)]
mod atomic_tests;
mod batch;
mod check;
mod cidr;
mod config;
mod decision;
mod denied_record;
#[cfg(test)]
mod differential_tests;
mod error;
mod events;
mod headers;
mod index;
mod limited;
#[allow(clippy::module_inception)]
mod limiter;
mod listing;
mod lists;
#[cfg(tollgate_loom)]
mod loom_fault;
mod metered;
mod penalty;
mod planning;
mod published;
mod reload_report;
mod reservation;
mod rule;
mod rule_ids;
mod rule_set;
mod selector;
mod source;
mod state_id;
mod store;
mod striped_counter;
pub mod structured_fields;
mod tier;
mod until_ready;
mod warm;
#[cfg(feature = "watch")]
mod watch;

pub use crate::clock::manual::FnClock;
pub use batch::{BatchDecision, BatchError};
pub use check::{PolicyCheck, Request};
pub use config::{
    parse_duration, AlgorithmKind, ListEntryConfig, Partition, PenaltyConfig, PolicyConfig,
    RuleConfig, TierConfig,
};
pub use decision::{PolicyDecision, TierLabel, TierOutcome, MAX_TIERS};
pub use denied_record::{DEFAULT_LIMITED_RECORD, MAX_LIMITED_RECORD, MAX_RECORDED_NAME};
pub use error::{DurationError, HeaderNameError, PenaltyConfigError, PolicyConfigError};
pub use headers::RateLimitHeaders;
pub use limited::{LimitedClient, LimitedClients, ListBounds, DEFAULT_MAX_KEYS, DEFAULT_MAX_TIME};
pub use limiter::Policy;
pub use listing::{Listing, ListingKind};
#[cfg(tollgate_loom)]
pub use loom_fault::PolicyFault;
pub use metered::{Metered, RuleMetrics};
pub use penalty::{AdaptivePenalty, RewardConfig};
pub use reload_report::ReloadReport;
pub use reservation::settlement;
pub use reservation::Reservation;
pub use rule::{Rule, RuleId, MAX_TIERS_PER_RULE};
pub use rule_set::{RuleSet, MAX_CAPACITY};
pub use selector::{EndpointSelector, SelectorError};
pub use source::ReloadToml;
pub use store::{
    InProcess, Op, Plan, PlanIter, PlannedTier, ReloadStep, ScanError, Store, StoreScan,
    StoredClient, TakeReceipt, TierStore,
};
pub use striped_counter::StripedCounter;
pub use tier::{Tier, MAX_LOG_COST, MAX_LOG_LIMIT};
pub use until_ready::UntilReady;
#[cfg(feature = "watch")]
pub use watch::{ReloadError, RulesFile, RulesFileBuilder, WatchError, WatchStatus};
