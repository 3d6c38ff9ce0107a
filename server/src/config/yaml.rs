//! The YAML schema of one rules file as written: Envoy ratelimit's fields (every one the Go
//! service knows, so that those tollgate-server does not support are refused by name rather
//! than as unknown) and tollgate's additions to `rate_limit`. An unknown field anywhere is
//! refused by the parser, with its path, line and column.
//!
//! Strings are read from any scalar as written, as the Go service's YAML decoder does:
//! `value: 0123` is the text `0123`, `value: 500` is `500`. Booleans are YAML 1.2's
//! (`true`/`false`); YAML 1.1's `yes`/`on`, which the Go service takes, are refused as not
//! booleans.

use serde::Deserialize;

use super::ConfigError;

/// A file: one domain and its descriptors.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a rules file (a mapping with domain and descriptors)"
)]
pub(super) struct File {
    /// The domain; required, unique across files.
    pub(super) domain: Option<String>,
    /// The top level of the descriptor tree.
    pub(super) descriptors: Option<Vec<Descriptor>>,
}

/// A descriptor: one (key, value) level of the tree.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a descriptor (a mapping with key, value, rate_limit, descriptors, …)"
)]
pub(super) struct Descriptor {
    /// The entry's key; required.
    pub(super) key: Option<String>,
    /// The entry's value; absent or empty: any value. A `*` matches any run of characters.
    pub(super) value: Option<String>,
    /// The limit of a request descriptor that ends here.
    pub(super) rate_limit: Option<RateLimit>,
    /// The next level.
    pub(super) descriptors: Option<Vec<Descriptor>>,
    /// Report this limit's denials as OK.
    pub(super) shadow_mode: Option<bool>,
    /// Go: over-limit counts only when every quota descriptor of a request is over. Not
    /// supported (`true` is refused).
    pub(super) quota_mode: Option<bool>,
    /// Go: per-value metrics. Not supported (`true` is refused).
    pub(super) detailed_metric: Option<bool>,
    /// Go: the runtime value in the metric key. Not supported (`true` is refused).
    pub(super) value_to_metric: Option<bool>,
    /// Go: one counter for every value a wildcard matches. Not supported (`true` is refused).
    pub(super) share_threshold: Option<bool>,
    /// Go: dynamic metadata returned with the response. Not supported (a non-empty one is
    /// refused).
    pub(super) metadata: Option<serde_norway::Value>,
}

/// A `rate_limit` block: Envoy's form (`unit`, `requests_per_unit`), tollgate's one tier
/// (`limit`, `window`, `algorithm`, `burst`) or tiers (`tiers`), or `unlimited`.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a rate_limit (a mapping with unit and requests_per_unit, or unlimited, …)"
)]
pub(super) struct RateLimit {
    /// Envoy: second, minute, hour, day, week, month or year, in any case.
    pub(super) unit: Option<String>,
    /// Envoy: requests per unit; 0 denies every request.
    pub(super) requests_per_unit: Option<u32>,
    /// No limit: every request is OK, no state kept.
    pub(super) unlimited: Option<bool>,
    /// The name `replaces` refers to.
    pub(super) name: Option<String>,
    /// The limits (by name) this one drops from a request it applies to.
    pub(super) replaces: Option<Vec<Replace>>,
    /// tollgate: permits per window.
    pub(super) limit: Option<u64>,
    /// tollgate: the window, a duration (`1m`, `1h 30m`).
    pub(super) window: Option<String>,
    /// tollgate: the algorithm (default gcra).
    pub(super) algorithm: Option<String>,
    /// tollgate: GCRA's burst or the token bucket's capacity.
    pub(super) burst: Option<u64>,
    /// tollgate: several tiers, all enforced.
    pub(super) tiers: Option<Vec<Tier>>,
}

/// One entry of `replaces`.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a replaces entry (a mapping with name)"
)]
pub(super) struct Replace {
    /// The name of the limit replaced.
    pub(super) name: Option<String>,
}

/// One tollgate tier of `tiers`.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a tier (a mapping with limit, window, algorithm, burst, name)"
)]
pub(super) struct Tier {
    /// The tier's name in headers.
    pub(super) name: Option<String>,
    /// Permits per window.
    pub(super) limit: Option<u64>,
    /// The window.
    pub(super) window: Option<String>,
    /// The algorithm (default gcra).
    pub(super) algorithm: Option<String>,
    /// GCRA's burst or the token bucket's capacity.
    pub(super) burst: Option<u64>,
}

/// Only the domain, read leniently, to name it in a parse error of the rest.
#[derive(Deserialize)]
struct Head {
    domain: Option<serde_norway::Value>,
}

/// Parses the file `source`.
pub(super) fn parse(source: &str, text: &str) -> Result<File, ConfigError> {
    serde_norway::from_str(text).map_err(|e| {
        let error = ConfigError::new(source, e.to_string());
        let head: Option<Head> = serde_norway::from_str(text).ok();
        match head.as_ref().and_then(|h| h.domain.as_ref()?.as_str()) {
            Some(domain) => error.in_domain(domain),
            None => error,
        }
    })
}
