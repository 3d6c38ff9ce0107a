//! [`RuleConfig`]: one rule as written in the config.

use serde::Deserialize;

use super::{AlgorithmKind, Partition, TierConfig};

/// One rule before validation: which requests it matches, how it partitions them, and its
/// limits.
///
/// Selectors: `client` and `endpoint` are each either a literal (exact match) or absent
/// (any). That gives the four kinds of rule: default (neither), client, endpoint, and
/// (client, endpoint).
///
/// Limits: either `tiers = [...]` or the one-tier shorthand `limit`/`window`/`algorithm`/
/// `burst`/`queue` directly on the rule, not both.
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
    /// The endpoint this rule is for; absent = any endpoint.
    #[serde(default)]
    pub endpoint: Option<String>,
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
    /// rule) always holds exactly one, whatever this says.
    #[serde(default)]
    pub capacity: Option<usize>,
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
}
