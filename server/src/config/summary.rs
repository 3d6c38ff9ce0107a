//! [`Summary`]: the loaded config as `GET /v1/rules` shows it — each domain with its file,
//! its descriptor count and its limits (where, named how, enforced how).

use serde::Serialize;

use super::limit::Limit;
use super::tier::Tier;
use super::unit::Unit;
use super::Domains;

/// The whole config.
#[derive(Debug, Serialize)]
pub(super) struct Summary<'a> {
    /// The domains, in load order.
    domains: Vec<DomainSummary<'a>>,
}

/// One domain.
#[derive(Debug, Serialize)]
struct DomainSummary<'a> {
    /// Its name.
    domain: &'a str,
    /// Its file.
    source: &'a str,
    /// How many descriptors its tree has, at every level.
    descriptors: usize,
    /// Its descriptors with a `rate_limit`, in file order.
    limits: Vec<LimitSummary<'a>>,
}

/// One limit.
#[derive(Debug, Serialize)]
struct LimitSummary<'a> {
    /// The descriptor's place in its file.
    path: &'a str,
    /// The Go service's key of it (`domain.key_value.key`).
    key: &'a str,
    /// Its rule's name.
    name: &'a str,
    /// Its rule's endpoint.
    endpoint: &'a str,
    /// `rule`, `unlimited` or `blocked` (`requests_per_unit: 0`).
    enforced: &'static str,
    /// Whether denials are reported as OK.
    shadow_mode: bool,
    /// Envoy's name of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    envoy_name: Option<&'a str>,
    /// The names it replaces.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    replaces: &'a [Box<str>],
    /// What Envoy's `current_limit` reports.
    #[serde(skip_serializing_if = "Option::is_none")]
    current_limit: Option<CurrentLimit>,
    /// Its rule's tiers.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    tiers: &'a [Tier],
}

/// Envoy's `current_limit`.
#[derive(Debug, Serialize)]
struct CurrentLimit {
    /// Requests per unit.
    requests_per_unit: u32,
    /// The unit.
    unit: Unit,
}

impl<'a> Summary<'a> {
    /// The summary of `config`.
    pub(super) fn of(config: &'a Domains) -> Summary<'a> {
        let domains = config
            .domains
            .iter()
            .map(|domain| DomainSummary {
                domain: &domain.name,
                source: &domain.source,
                descriptors: domain.tree.len(),
                limits: config
                    .limits
                    .get(domain.limits.clone())
                    .unwrap_or_default()
                    .iter()
                    .map(LimitSummary::of)
                    .collect(),
            })
            .collect();
        Summary { domains }
    }
}

impl<'a> LimitSummary<'a> {
    /// The summary of `limit`.
    fn of(limit: &'a Limit) -> LimitSummary<'a> {
        let enforced = if limit.unlimited {
            "unlimited"
        } else if limit.blocked {
            "blocked"
        } else {
            "rule"
        };
        LimitSummary {
            path: &limit.path,
            key: &limit.key,
            name: &limit.name,
            endpoint: &limit.endpoint,
            enforced,
            shadow_mode: limit.shadow_mode,
            envoy_name: limit.envoy_name.as_deref(),
            replaces: &limit.replaces,
            current_limit: limit
                .current_limit
                .map(|(requests_per_unit, unit)| CurrentLimit {
                    requests_per_unit,
                    unit,
                }),
            tiers: &limit.tiers,
        }
    }
}
