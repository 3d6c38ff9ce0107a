//! [`TierConfig`]: one limit of a rule, as written in the config.

use serde::Deserialize;

use super::AlgorithmKind;

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
    /// The name this tier has in `RateLimit` headers (default: the rule's name, or
    /// `rule.N` when the rule has several tiers). Printable ASCII.
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
