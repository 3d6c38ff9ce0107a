//! The rules file as written: [`PolicyConfig`] (the whole file, parsed from TOML), [`RuleConfig`]
//! (one rule), [`TierConfig`] (one limit of a rule), [`AlgorithmKind`] (the algorithm as a
//! config value), [`Partition`] (how a rule splits its state among requests),
//! [`PenaltyConfig`] (when and how hard the adaptive penalty strikes) and [`parse_duration`]
//! (human durations: `250ms`, `1s`, `1m`, `1h`, `1d`, sums such as `1m30s`), and
//! [`ListEntryConfig`] (one entry of the allow or deny list).

use serde::Deserialize;
use tollgate_core::Nanos;

use super::{DurationError, PenaltyConfigError, PolicyConfigError, RuleSet};

/// A rules file before validation. Parse with [`from_toml`](Self::from_toml) (or build it
/// in code), then hand it to [`Policy`](super::Policy), which validates it into a
/// [`RuleSet`].
///
/// ```
/// use tollgate::policy::PolicyConfig;
/// let config = PolicyConfig::from_toml(r#"
///     [[rules]]
///     name = "default"
///     limit = 100
///     window = "1m"
/// "#)?;
/// assert_eq!(config.rules.len(), 1);
/// # Ok::<(), tollgate::policy::PolicyConfigError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct PolicyConfig {
    /// The most keys (clients) one tier keeps state for; memory is bounded by it. Default
    /// 100 000.
    #[serde(default)]
    pub capacity: Option<usize>,
    /// The rules.
    #[serde(default)]
    pub rules: Vec<RuleConfig>,
    /// Whether a config with no rules is meant (every request admitted, no state kept).
    /// Off by default: an empty rules file is far more often a file caught half-written
    /// (an editor saving it, a failed deploy) than a wish to stop limiting, and loading it
    /// would drop every key's state. TOML `allow_empty = true`.
    #[serde(default)]
    pub allow_empty: bool,
    /// Whether every rule's tiers keep the debts of clients they evict under pressure, so
    /// that a client cannot shed its limit by flooding the table with throwaway keys (each
    /// rule may say otherwise with its own `launder_guard`). Off by default: it costs about
    /// 12 bytes per key of capacity per tier, and innocent new clients after a flood of
    /// more than twice the capacity per reset horizon may start with a phantom debt (see
    /// `docs/rules.md`). In-process tiers only; `sliding_window_log` tiers cannot keep it.
    /// TOML `launder_guard = true`.
    #[serde(default)]
    pub launder_guard: bool,
    /// Clients admitted whatever the rules say, by key or by network (`[[allow]]`): no
    /// limit applies, nothing is stored or charged. See [`ListEntryConfig`] for which entry
    /// decides a request.
    #[serde(default)]
    pub allow: Vec<ListEntryConfig>,
    /// Clients refused whatever the rules say, by key or by network (`[[deny]]`), with a
    /// stated reason: a ban, not a limit (waiting does not end it).
    #[serde(default)]
    pub deny: Vec<ListEntryConfig>,
}

impl PolicyConfig {
    /// Parses TOML and validates it (a config that parses but cannot be built, such as a
    /// zero limit, is rejected here too, with the rule and field named).
    pub fn from_toml(text: &str) -> Result<PolicyConfig, PolicyConfigError> {
        let config: PolicyConfig =
            toml::from_str(text).map_err(|e| PolicyConfigError::new("toml", e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// Checks every rule and tier without building any state.
    pub fn validate(&self) -> Result<(), PolicyConfigError> {
        RuleSet::compile(self).map(|_| ())
    }

    /// Adds a rule.
    pub fn rule(mut self, rule: RuleConfig) -> PolicyConfig {
        self.rules.push(rule);
        self
    }

    /// Adds an allow list entry.
    ///
    /// ```
    /// use tollgate::policy::{ListEntryConfig, PolicyConfig, RuleConfig, TierConfig};
    /// let config = PolicyConfig::default()
    ///     .rule(RuleConfig::new("default").tier(TierConfig::new(100, "1m")))
    ///     .allowing(ListEntryConfig::cidr("10.0.0.0/8"))
    ///     .denying(ListEntryConfig::client("acct_666").reason("chargeback fraud"));
    /// assert!(config.validate().is_ok());
    /// ```
    pub fn allowing(mut self, entry: ListEntryConfig) -> PolicyConfig {
        self.allow.push(entry);
        self
    }

    /// Adds a deny list entry.
    pub fn denying(mut self, entry: ListEntryConfig) -> PolicyConfig {
        self.deny.push(entry);
        self
    }

    /// Accepts a config with no rules (see [`allow_empty`](Self::allow_empty)).
    ///
    /// ```
    /// use tollgate::policy::PolicyConfig;
    /// assert!(PolicyConfig::default().validate().is_err());
    /// assert!(PolicyConfig::default().allowing_empty().validate().is_ok());
    /// assert!(PolicyConfig::from_toml("allow_empty = true").is_ok());
    /// ```
    pub fn allowing_empty(mut self) -> PolicyConfig {
        self.allow_empty = true;
        self
    }

    /// Turns the laundering guard on or off for every rule that does not set its own (see
    /// [`launder_guard`](Self::launder_guard)).
    ///
    /// ```
    /// use tollgate::policy::{PolicyConfig, RuleConfig, TierConfig};
    /// let config = PolicyConfig::default()
    ///     .with_launder_guard(true)
    ///     .rule(RuleConfig::new("default").tier(TierConfig::new(10, "1h")));
    /// assert_eq!(config, PolicyConfig::from_toml(r#"
    ///     launder_guard = true
    ///     [[rules]]
    ///     name = "default"
    ///     [[rules.tiers]]
    ///     limit = 10
    ///     window = "1h"
    /// "#)?);
    /// # Ok::<(), tollgate::policy::PolicyConfigError>(())
    /// ```
    pub fn with_launder_guard(mut self, on: bool) -> PolicyConfig {
        self.launder_guard = on;
        self
    }
}

/// One rule before validation: which requests it matches, how it partitions them, and its
/// limits.
///
/// Selectors: `client` is a literal (exact match) or absent (any); the endpoint is
/// `endpoint` (exact, a route template, or `…/*`), `prefix`, or absent (any). That gives
/// the four kinds of rule: default (neither), client, endpoint, and (client, endpoint).
///
/// Limits: either `tiers = [...]` or the one-tier shorthand `limit`/`window`/`algorithm`/
/// `burst`/`queue` directly on the rule, not both. Or no limit at all: `unlimited = true`
/// (the rule's slot admits what it matches, keeping no state), or `limit = 0` alone, a ban
/// (what the rule matches is refused, with its `reason`).
///
/// ```
/// use tollgate::policy::{RuleConfig, TierConfig};
/// let rule = RuleConfig::new("search").endpoint("/search").tier(TierConfig::new(10, "1m"));
/// assert_eq!(rule.endpoint.as_deref(), Some("/search"));
/// assert_eq!(rule.tiers.len(), 1);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RuleConfig {
    /// Unique name; identifies the rule's state across reloads and in headers and metrics.
    #[serde(default)]
    pub name: String,
    /// The client this rule is for; absent = any client.
    #[serde(default)]
    pub client: Option<String>,
    /// The endpoint this rule is for: an exact name (a path, or a route template such as
    /// `/users/{id}`), or `…/*` for every endpoint below `…/`; absent = any endpoint. See
    /// [`EndpointSelector`](super::EndpointSelector) for the forms and the precedence.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Instead of `endpoint`: every endpoint that is this prefix or below it (by whole
    /// segments: `/api` covers `/api` and `/api/v1`, not `/apix`).
    #[serde(default)]
    pub prefix: Option<String>,
    /// One state per client (default) or one shared by all matching requests.
    #[serde(default)]
    pub per: Partition,
    /// The limits; all must admit.
    #[serde(default)]
    pub tiers: Vec<TierConfig>,
    /// Shorthand for a single tier: its limit.
    #[serde(default)]
    pub limit: Option<u64>,
    /// Shorthand for a single tier: its window.
    #[serde(default)]
    pub window: Option<String>,
    /// Shorthand for a single tier: its algorithm.
    #[serde(default)]
    pub algorithm: Option<AlgorithmKind>,
    /// Shorthand for a single tier: its burst.
    #[serde(default)]
    pub burst: Option<u64>,
    /// Shorthand for a single tier: its queue.
    #[serde(default)]
    pub queue: Option<u64>,
    /// The most keys (clients) this rule's tiers keep state for; defaults to the config's
    /// `capacity`. A rule that can only ever hold one key (`per = "global"`, or a `client`
    /// rule) always holds exactly one, whatever this says (but 0 or more than
    /// [`MAX_CAPACITY`](super::MAX_CAPACITY) is an error on any rule).
    #[serde(default)]
    pub capacity: Option<usize>,
    /// Whether this rule's tiers keep the debts of clients they evict under pressure (see
    /// [`PolicyConfig::launder_guard`]); absent = the config's. A rule that holds one key
    /// has nothing to guard (no other key can push it out) and keeps no summary. An error
    /// on a rule with a `sliding_window_log` tier, and on an `unlimited` rule or a ban
    /// (they keep no state).
    #[serde(default)]
    pub launder_guard: Option<bool>,
    /// No limit for what the rule matches: its slot admits, keeping no state (it replaces
    /// the generic rule of its slot, as any client or endpoint rule does; the other slot
    /// still applies). Takes no limit field. TOML `unlimited = true`.
    #[serde(default)]
    pub unlimited: bool,
    /// Why a ban (`limit = 0`) refuses: told to the refused client (the HTTP layer's 403
    /// body, the gRPC message) and in the decision's [`Listing`](super::Listing). Only on
    /// a ban.
    #[serde(default)]
    pub reason: Option<String>,
    /// Where the rule stands in the file it was read from, when that is not its place in
    /// its config's `rules`: a rule of a file split in two (tollgate-http's `ShadowSplit`
    /// sets it). Errors and refusals ([`Listing::path`](super::Listing::path)) name the
    /// rule `rules[place]`; absent, by its place in `rules`. Not a TOML key.
    #[serde(skip)]
    pub place: Option<usize>,
}

impl RuleConfig {
    /// A rule named `name` matching every request, with no tiers yet.
    pub fn new(name: &str) -> RuleConfig {
        RuleConfig {
            name: name.to_owned(),
            ..RuleConfig::default()
        }
    }

    /// Restricts the rule to one client.
    pub fn client(mut self, client: &str) -> RuleConfig {
        self.client = Some(client.to_owned());
        self
    }

    /// Restricts the rule to one endpoint.
    pub fn endpoint(mut self, endpoint: &str) -> RuleConfig {
        self.endpoint = Some(endpoint.to_owned());
        self
    }

    /// Restricts the rule to the endpoints under `prefix`.
    pub fn prefix(mut self, prefix: &str) -> RuleConfig {
        self.prefix = Some(prefix.to_owned());
        self
    }

    /// Turns the laundering guard on or off for this rule, whatever the config says (see
    /// [`launder_guard`](Self::launder_guard)).
    pub fn launder_guard(mut self, on: bool) -> RuleConfig {
        self.launder_guard = Some(on);
        self
    }

    /// Sets the partition.
    pub fn per(mut self, per: Partition) -> RuleConfig {
        self.per = per;
        self
    }

    /// Adds a tier.
    pub fn tier(mut self, tier: TierConfig) -> RuleConfig {
        self.tiers.push(tier);
        self
    }

    /// Makes the rule unlimited (`unlimited = true`).
    ///
    /// ```
    /// use tollgate::policy::{FnClock, Policy, PolicyConfig, RuleConfig, TierConfig};
    /// use tollgate::Nanos;
    /// let config = PolicyConfig::default()
    ///     .rule(RuleConfig::new("default").tier(TierConfig::new(1, "1m")))
    ///     .rule(RuleConfig::new("internal").client("batch-job").unlimited())
    ///     .rule(RuleConfig::new("legacy").endpoint("/v0/*").ban("/v0 was retired: use /v1"));
    /// let policy = Policy::new(config, FnClock(|| Nanos::ZERO))?;
    /// assert!(policy.allow("batch-job", "/", 1)?.allowed());
    /// assert!(policy.allow("batch-job", "/", 1)?.allowed());
    /// let refused = policy.allow("batch-job", "/v0/users", 1)?;
    /// assert_eq!(refused.listing().and_then(|l| l.reason()), Some("/v0 was retired: use /v1"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn unlimited(mut self) -> RuleConfig {
        self.unlimited = true;
        self
    }

    /// Makes the rule a ban (`limit = 0`) refusing with `reason`.
    pub fn ban(mut self, reason: &str) -> RuleConfig {
        self.limit = Some(0);
        self.reason = Some(reason.to_owned());
        self
    }
}

/// One entry of the allow or deny list (`[[allow]]`, `[[deny]]`): a client key (`client`,
/// matched exactly) or a network (`cidr`, IPv4 or IPv6, matching every client key that is
/// an IP address in it), and an optional `reason` (for a deny entry, told to the refused
/// client).
///
/// **Which entry decides.** The most specific entry that matches a request's client, in
/// either list: a `client` entry before any network, then the network with the longest
/// prefix. So a deny of `203.0.113.0/24` can spare `203.0.113.5/32` with an allow entry,
/// and an allow of `10.0.0.0/8` can still refuse `10.66.0.0/16`. The same client or
/// network in both lists, or twice in one, is a load error. An entry decides the request
/// before any rule: an allowed client meets no limit (nor ban rule), a denied one is
/// refused whatever its rules allow.
///
/// ```
/// use tollgate::policy::{FnClock, Policy};
/// use tollgate::Nanos;
/// let policy = Policy::from_toml(r#"
///     [[rules]]
///     name = "default"
///     limit = 1
///     window = "1m"
///     [[allow]]
///     cidr = "10.0.0.0/8"
///     [[deny]]
///     cidr = "10.66.0.0/16"
///     reason = "the load-test network"
/// "#, FnClock(|| Nanos::ZERO))?;
/// assert!(policy.allow("10.1.2.3", "/", 1)?.allowed());
/// assert!(policy.allow("10.1.2.3", "/", 1)?.allowed()); // no limit applies
/// assert!(!policy.allow("10.66.0.1", "/", 1)?.allowed()); // the longer prefix decides
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ListEntryConfig {
    /// The client key, matched exactly.
    #[serde(default)]
    pub client: Option<String>,
    /// Instead of `client`: the network, `10.0.0.0/8` or `2001:db8::/32` (one address is
    /// `/32` or `/128`).
    #[serde(default)]
    pub cidr: Option<String>,
    /// Why the entry is there; for a deny entry, told to the refused client.
    #[serde(default)]
    pub reason: Option<String>,
}

impl ListEntryConfig {
    /// An entry for the client key `key`.
    pub fn client(key: &str) -> ListEntryConfig {
        ListEntryConfig {
            client: Some(key.to_owned()),
            ..ListEntryConfig::default()
        }
    }

    /// An entry for the network `cidr`.
    pub fn cidr(cidr: &str) -> ListEntryConfig {
        ListEntryConfig {
            cidr: Some(cidr.to_owned()),
            ..ListEntryConfig::default()
        }
    }

    /// Sets the reason.
    pub fn reason(mut self, reason: &str) -> ListEntryConfig {
        self.reason = Some(reason.to_owned());
        self
    }
}

/// One limit (tier) of a rule, before validation. A rule holds one or more; a request must
/// pass all of them.
///
/// ```
/// use tollgate::policy::{AlgorithmKind, TierConfig};
/// let tier = TierConfig::new(10, "1s").algorithm(AlgorithmKind::TokenBucket).burst(20);
/// assert_eq!(tier.limit, 10);
/// assert_eq!(tier.burst, Some(20));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TierConfig {
    /// The name this tier has in `RateLimit` headers (default: the rule's name for its
    /// first tier, `rule.1`, `rule.2`, … for the others). Printable ASCII.
    #[serde(default)]
    pub name: Option<String>,
    /// Permits per window (see [`AlgorithmKind`] for what it means per algorithm); > 0.
    #[serde(default)]
    pub limit: u64,
    /// The window or period, such as `"1s"`, `"1m"`, `"1d"`.
    #[serde(default)]
    pub window: String,
    /// The algorithm (default GCRA).
    #[serde(default)]
    pub algorithm: AlgorithmKind,
    /// GCRA: the most admitted at once; token bucket: the capacity. Default `limit`.
    #[serde(default)]
    pub burst: Option<u64>,
    /// Leaky bucket: how many requests may wait. Default `limit − 1`.
    #[serde(default)]
    pub queue: Option<u64>,
}

impl TierConfig {
    /// `limit` per `window` with GCRA.
    pub fn new(limit: u64, window: &str) -> TierConfig {
        TierConfig {
            limit,
            window: window.to_owned(),
            ..TierConfig::default()
        }
    }

    /// Sets the algorithm.
    pub fn algorithm(mut self, algorithm: AlgorithmKind) -> TierConfig {
        self.algorithm = algorithm;
        self
    }

    /// Sets the header name.
    pub fn named(mut self, name: &str) -> TierConfig {
        self.name = Some(name.to_owned());
        self
    }

    /// Sets the burst (GCRA) or capacity (token bucket).
    pub fn burst(mut self, burst: u64) -> TierConfig {
        self.burst = Some(burst);
        self
    }

    /// Sets the leaky bucket's queue depth.
    pub fn queue(mut self, queue: u64) -> TierConfig {
        self.queue = Some(queue);
        self
    }
}

/// Which core algorithm a tier runs. In TOML: `algorithm = "gcra"` (the default),
/// `"token_bucket"`, `"leaky_bucket"`, `"fixed_window"`, `"sliding_window_counter"` or
/// `"sliding_window_log"`.
///
/// | kind | `limit` / `window` mean | extra fields |
/// |---|---|---|
/// | `gcra` | `limit` per `window`, evenly spaced | `burst` (default `limit`) |
/// | `token_bucket` | refill `limit` tokens per `window` | `burst` = capacity (default `limit`) |
/// | `leaky_bucket` | drain `limit` per `window` (a shaper: admitted requests carry a `delay`) | `queue` (default `limit − 1`) |
/// | `fixed_window` | `limit` per aligned `window` | — |
/// | `sliding_window_counter` | about `limit` per sliding `window` | — |
/// | `sliding_window_log` | exactly `limit` per sliding `window` (one timestamp per permit, at most 65 536) | — |
///
/// ```
/// use tollgate::policy::AlgorithmKind;
/// assert_eq!(AlgorithmKind::default(), AlgorithmKind::Gcra);
/// assert_eq!(AlgorithmKind::SlidingWindowLog.as_str(), "sliding_window_log");
/// ```
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AlgorithmKind {
    /// Generic cell rate algorithm.
    #[default]
    Gcra,
    /// Token bucket.
    TokenBucket,
    /// Leaky bucket as a shaper.
    LeakyBucket,
    /// Fixed window.
    FixedWindow,
    /// Sliding window counter.
    SlidingWindowCounter,
    /// Sliding window log.
    SlidingWindowLog,
}

impl AlgorithmKind {
    /// The config spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            AlgorithmKind::Gcra => "gcra",
            AlgorithmKind::TokenBucket => "token_bucket",
            AlgorithmKind::LeakyBucket => "leaky_bucket",
            AlgorithmKind::FixedWindow => "fixed_window",
            AlgorithmKind::SlidingWindowCounter => "sliding_window_counter",
            AlgorithmKind::SlidingWindowLog => "sliding_window_log",
        }
    }
}

/// Whose requests share one bucket under a rule. In TOML: `per = "client"` (the default)
/// or `per = "global"`.
///
/// - `Client`: every client has its own state under the rule. An endpoint rule with
///   `per = "client"` is a per-(client, endpoint) limit: each client gets its own 10/min on
///   `/search`.
/// - `Global`: one state shared by every request the rule matches (protects a backend:
///   `/export` takes 100/min in total, whoever calls).
///
/// ```
/// use tollgate::policy::Partition;
/// assert_eq!(Partition::default(), Partition::Client);
/// ```
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Partition {
    /// One state per client.
    #[default]
    Client,
    /// One state for all matching requests.
    Global,
}

/// After `denials` denied requests within `period`, a client's limits are divided by
/// `divisor` for `cooldown`, then restored.
///
/// ```
/// use tollgate::policy::PenaltyConfig;
/// use tollgate::Nanos;
/// let config = PenaltyConfig {
///     denials: 5,
///     period: Nanos::from_secs(60),
///     divisor: 4,
///     cooldown: Nanos::from_secs(300),
/// };
/// assert!(config.validate().is_ok());
/// assert_eq!(
///     PenaltyConfig { divisor: 1, ..config }.validate(),
///     Err(tollgate::policy::PenaltyConfigError::DivisorTooSmall)
/// );
/// assert_eq!(
///     PenaltyConfig { cooldown: Nanos::MAX, ..config }.validate(),
///     Err(tollgate::policy::PenaltyConfigError::CooldownTooLong { max: Nanos::MAX_HORIZON })
/// );
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PenaltyConfig {
    /// Denials that trigger the penalty (≥ 1).
    pub denials: u32,
    /// The window the denials are counted in (fixed windows).
    pub period: Nanos,
    /// The limit divisor while penalized (≥ 2): each request costs `divisor` permits.
    pub divisor: u32,
    /// How long the penalty lasts.
    pub cooldown: Nanos,
}

impl PenaltyConfig {
    /// Checks the numbers; the error names the field.
    pub fn validate(&self) -> Result<(), PenaltyConfigError> {
        if self.denials == 0 {
            return Err(PenaltyConfigError::ZeroDenials);
        }
        if self.period == Nanos::ZERO {
            return Err(PenaltyConfigError::ZeroPeriod);
        }
        if self.divisor < 2 {
            return Err(PenaltyConfigError::DivisorTooSmall);
        }
        if self.cooldown == Nanos::ZERO {
            return Err(PenaltyConfigError::ZeroCooldown);
        }
        if self.cooldown > Nanos::MAX_HORIZON {
            return Err(PenaltyConfigError::CooldownTooLong {
                max: Nanos::MAX_HORIZON,
            });
        }
        Ok(())
    }
}

/// Parses a duration as people write them — `1s`, `250ms`, `1m30s`, `1h 30m`, `1.5s`,
/// `1min`, `2days`, `1 week` — into [`Nanos`]: one or more parts, each a number (a decimal
/// fraction allowed, exact to the nanosecond) and a unit, summed; whitespace between parts
/// and between a number and its unit is allowed. Units: `ns` (`nsec`, `nanos`), `us` (`µs`,
/// `usec`, `micros`), `ms` (`msec`, `millis`), `s` (`sec`, `secs`, `second`, `seconds`),
/// `m` (`min`, `mins`, `minute`, `minutes`), `h` (`hr`, `hrs`, `hour`, `hours`), `d`
/// (`day`, `days`), `w` (`week`, `weeks`); no months or years (their length varies). Every
/// number needs a unit. A [`DurationError`] says what is wrong; its message is meant to
/// follow a field path (`rules[0].window: ...`).
///
/// ```
/// use tollgate::policy::parse_duration;
/// use tollgate::Nanos;
/// assert_eq!(parse_duration("1m"), Ok(Nanos::from_secs(60)));
/// assert_eq!(parse_duration("1d"), Ok(Nanos::from_secs(86_400)));
/// assert_eq!(parse_duration("1m30s"), Ok(Nanos::from_secs(90)));
/// assert_eq!(parse_duration("1h 30m"), Ok(Nanos::from_secs(5_400)));
/// assert_eq!(parse_duration("1.5s"), Ok(Nanos::from_millis(1_500)));
/// assert_eq!(parse_duration("1min"), Ok(Nanos::from_secs(60)));
/// assert_eq!(parse_duration("2days"), Ok(Nanos::from_secs(172_800)));
/// assert!(parse_duration("10").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Nanos, DurationError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    let bytes = text.as_bytes();
    let skip_spaces = |mut i: usize| {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    let digits_from = |mut i: usize| {
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        i
    };
    let too_long = || DurationError::TooLong { text: text.into() };
    let mut total: u64 = 0;
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        i = digits_from(i);
        if start == i {
            return Err(DurationError::ExpectedNumber {
                text: text.into(),
                at: start,
            });
        }
        let whole: u64 = text[start..i]
            .parse()
            .map_err(|_| DurationError::NumberTooLarge { text: text.into() })?;
        // A fraction: its digits, kept exactly (at most 18, so they fit a u64).
        let mut fraction = "";
        if i < bytes.len() && bytes[i] == b'.' {
            let from = i + 1;
            i = digits_from(from);
            if from == i {
                return Err(DurationError::ExpectedNumber {
                    text: text.into(),
                    at: from,
                });
            }
            fraction = &text[from..i];
        }
        i = skip_spaces(i);
        let unit_start = i;
        while i < bytes.len() && !bytes[i].is_ascii_digit() && !bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let unit = &text[unit_start..i];
        let scale: u64 = match unit {
            "ns" | "nsec" | "nanos" | "nanosecond" | "nanoseconds" => 1,
            "us" | "µs" | "usec" | "micros" | "microsecond" | "microseconds" => 1_000,
            "ms" | "msec" | "millis" | "millisecond" | "milliseconds" => 1_000_000,
            "s" | "sec" | "secs" | "second" | "seconds" => 1_000_000_000,
            "m" | "min" | "mins" | "minute" | "minutes" => 60_000_000_000,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3_600_000_000_000,
            "d" | "day" | "days" => 86_400_000_000_000,
            "w" | "week" | "weeks" => 604_800_000_000_000,
            "" => return Err(DurationError::MissingUnit { text: text.into() }),
            other => {
                return Err(DurationError::UnknownUnit {
                    text: text.into(),
                    unit: other.into(),
                })
            }
        };
        let mut part = whole.checked_mul(scale).ok_or_else(too_long)?;
        if !fraction.is_empty() {
            let precise = || DurationError::TooPrecise { text: text.into() };
            // More than 18 digits is finer than any unit's nanosecond can hold anyway.
            let digits = u32::try_from(fraction.len()).map_err(|_| precise())?;
            if digits > 18 {
                return Err(precise());
            }
            let numerator: u128 = fraction.parse().map_err(|_| precise())?;
            let scaled = numerator * u128::from(scale);
            let denominator = 10u128.pow(digits);
            if scaled % denominator != 0 {
                return Err(precise());
            }
            let nanos = u64::try_from(scaled / denominator).map_err(|_| too_long())?;
            part = part.checked_add(nanos).ok_or_else(too_long)?;
        }
        total = total.checked_add(part).ok_or_else(too_long)?;
        i = skip_spaces(i);
    }
    Ok(Nanos::new(total))
}

#[cfg(test)]
mod tests {
    use super::{parse_duration, DurationError};
    use tollgate_core::Nanos;

    #[test]
    fn units() {
        assert_eq!(parse_duration("5ns"), Ok(Nanos::new(5)));
        assert_eq!(parse_duration("10us"), Ok(Nanos::from_micros(10)));
        assert_eq!(parse_duration("250ms"), Ok(Nanos::from_millis(250)));
        assert_eq!(parse_duration("1s"), Ok(Nanos::from_secs(1)));
        assert_eq!(parse_duration("1h"), Ok(Nanos::from_secs(3600)));
        assert_eq!(parse_duration(" 1h30m "), Ok(Nanos::from_secs(5400)));
        assert_eq!(parse_duration("0s"), Ok(Nanos::ZERO));
    }

    #[test]
    fn durations_people_write() {
        let secs = Nanos::from_secs;
        for (text, want) in [
            ("1h 30m", secs(5_400)),
            ("1h30m", secs(5_400)),
            ("1.5s", Nanos::from_millis(1_500)),
            ("0.25h", secs(900)),
            ("1min", secs(60)),
            ("1 min", secs(60)),
            ("2days", secs(172_800)),
            ("1 week", secs(604_800)),
            ("1w 1d", secs(691_200)),
            ("3 hours 2 minutes 1 second", secs(10_921)),
            ("2hrs", secs(7_200)),
            ("10 secs", secs(10)),
            ("1.000000001s", Nanos::new(1_000_000_001)),
            ("250 millis", Nanos::from_millis(250)),
            ("1.5us", Nanos::new(1_500)),
            ("7 nanos", Nanos::new(7)),
        ] {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
    }

    proptest::proptest! {
        /// Every sum of parts written in any of the unit's names parses to the sum.
        #[test]
        fn parts_sum(parts in proptest::collection::vec((0u64..10_000, 0usize..8, proptest::bool::ANY), 1..5)) {
            const UNITS: [(&str, u64); 8] = [
                ("ns", 1), ("us", 1_000), ("ms", 1_000_000), ("seconds", 1_000_000_000),
                ("min", 60_000_000_000), ("hours", 3_600_000_000_000),
                ("days", 86_400_000_000_000), ("w", 604_800_000_000_000),
            ];
            let mut text = String::new();
            let mut want = 0u64;
            for (n, u, spaced) in parts {
                let (name, scale) = UNITS[u];
                text.push_str(&format!("{n}{}{name}{}", if spaced { " " } else { "" }, if spaced { " " } else { "" }));
                want += n * scale;
            }
            proptest::prop_assert_eq!(parse_duration(&text), Ok(Nanos::new(want)), "{}", text);
        }
    }

    #[test]
    fn errors() {
        let text = |t: &str| t.to_string();
        assert_eq!(parse_duration(" "), Err(DurationError::Empty));
        assert_eq!(
            parse_duration("1"),
            Err(DurationError::MissingUnit { text: text("1") })
        );
        assert_eq!(
            parse_duration("1y"),
            Err(DurationError::UnknownUnit {
                text: text("1y"),
                unit: text("y")
            })
        );
        assert_eq!(
            parse_duration("1 month"),
            Err(DurationError::UnknownUnit {
                text: text("1 month"),
                unit: text("month")
            })
        );
        assert_eq!(
            parse_duration("1s ms"),
            Err(DurationError::ExpectedNumber {
                text: text("1s ms"),
                at: 3
            })
        );
        assert_eq!(
            parse_duration("1.s"),
            Err(DurationError::ExpectedNumber {
                text: text("1.s"),
                at: 2
            })
        );
        assert_eq!(
            parse_duration("1.0000000001s"),
            Err(DurationError::TooPrecise {
                text: text("1.0000000001s")
            })
        );
        assert_eq!(
            parse_duration("0.5ns"),
            Err(DurationError::TooPrecise {
                text: text("0.5ns")
            })
        );
        assert_eq!(
            parse_duration("99999999999999999999s"),
            Err(DurationError::NumberTooLarge {
                text: text("99999999999999999999s")
            })
        );
        assert_eq!(
            parse_duration("999999d"),
            Err(DurationError::TooLong {
                text: text("999999d")
            })
        );
        // The messages that follow a config field's path.
        assert!(parse_duration("")
            .unwrap_err()
            .to_string()
            .contains("empty"));
        assert_eq!(
            parse_duration("1").unwrap_err().to_string(),
            "\"1\": missing unit (ns, us, ms, s, m, h, d, w, or their names: sec, min, hours, days, …)"
        );
        assert_eq!(
            parse_duration("s").unwrap_err().to_string(),
            "\"s\": expected a number at byte 0"
        );
        assert!(parse_duration("999999d")
            .unwrap_err()
            .to_string()
            .contains("too long"));
    }
}
