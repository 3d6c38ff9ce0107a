//! [`Limit`]: what a descriptor node with a `rate_limit` compiles to — the tollgate rule
//! that enforces it (if any), and what the Go service's `RateLimit` carries into a
//! response: unlimited, shadow mode, `replaces`, the `current_limit` it reports — and
//! [`is_replaced`], Go's rule for dropping replaced limits from a request.

use super::tier::Tier;
use super::unit::Unit;

/// A limited descriptor node, compiled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Limit {
    /// The tollgate endpoint (rule selector) of this node: requests matching it are checked
    /// as `Request { client: <the request's concrete descriptor key>, endpoint: <this>,
    /// cost }`. Unique, and an exact selector (`*`, `{`, `}`, `:`, `/`, `=`, `%` and `~` in
    /// the domain, keys and values are `%XX`-escaped; levels are `/`-separated, `key=value`
    /// or `key`), so never beginning with `~`, the prefix left to the server's own rules.
    /// Also set when the node has no rule ([`has_rule`](Self::has_rule)).
    pub(crate) endpoint: Box<str>,
    /// The rule's name in tollgate (headers, metrics): Envoy's `name` if given, else the
    /// Go service's key of the node (`mongo_cps.database_users`); outside printable ASCII
    /// `%XX`-escaped, a leading `~` too (that prefix is left to the server's own rules),
    /// and made unique by a `#2`, `#3`, … suffix in load order.
    pub(crate) name: Box<str>,
    /// `unlimited: true`: every request is OK with `limit_remaining` `u32::MAX`, no
    /// state, no rule.
    pub(crate) unlimited: bool,
    /// `requests_per_unit: 0`: every request with a cost is over the limit (the Go service
    /// counts `hits > 0`; a cost of 0 is OK), no state, no rule. The README's blocklist.
    pub(crate) blocked: bool,
    /// `shadow_mode: true`: an over-limit verdict of this limit is reported as OK (the
    /// descriptor's status code, hence the overall code), after being counted.
    pub(crate) shadow_mode: bool,
    /// The `name`s of the limits this one drops from a request it applies to (see
    /// [`is_replaced`]).
    pub(crate) replaces: Box<[Box<str>]>,
    /// Envoy's `rate_limit.name` as written, what other limits' `replaces` name; `None`
    /// when not given (such a limit is never replaced).
    pub(crate) envoy_name: Option<Box<str>>,
    /// What Envoy's `DescriptorStatus.current_limit` reports: `requests_per_unit` and the
    /// unit. For a tollgate-form limit: the first tier's limit and the unit exactly as
    /// long as its window, or `None` when no unit is (or the limit exceeds `u32`).
    /// `None` for an unlimited one.
    pub(crate) current_limit: Option<(u32, Unit)>,
    /// The tiers of its tollgate rule; empty when it has none (unlimited, blocked).
    pub(super) tiers: Box<[Tier]>,
    /// Whether one request descriptor alone reaches it (every level of its path a literal
    /// value): its rule keeps one client's state (`capacity = 1`) instead of a table of
    /// clients.
    pub(super) shared: bool,
    /// The Go service's key of the node, `domain.key_value.key` (metrics, the summary).
    pub(super) key: Box<str>,
    /// Its domain's index in the config.
    pub(super) domain: usize,
    /// The node's place in its file: `descriptors[0].descriptors[1]`.
    pub(super) path: Box<str>,
}

impl Limit {
    /// Whether a tollgate rule enforces it (neither unlimited nor blocked): only then may
    /// its endpoint be checked.
    pub(crate) fn has_rule(&self) -> bool {
        !self.tiers.is_empty()
    }

    /// The tiers of its rule (0 when it has none).
    pub(crate) fn tier_count(&self) -> usize {
        self.tiers.len()
    }
}

/// Whether the limit `limits[index]` is dropped from a request whose descriptors got
/// `limits` (one per descriptor, `None` where none matched), as the Go service's
/// `constructLimitsToCheck` drops them: a limit with a name is dropped when any limit of the
/// request (itself included, an unlimited one too, a dropped one too) `replaces` that
/// name. A dropped descriptor is answered OK with no current limit, and is not counted.
/// An unlimited limit is never dropped (it is answered as unlimited whatever replaces it).
///
/// Decide every index against the same, unmodified `limits`.
pub(crate) fn is_replaced(limits: &[Option<&Limit>], index: usize) -> bool {
    let Some(Some(limit)) = limits.get(index) else {
        return false;
    };
    let Some(name) = &limit.envoy_name else {
        return false;
    };
    if limit.unlimited {
        return false;
    }
    limits
        .iter()
        .flatten()
        .any(|other| other.replaces.iter().any(|replaced| replaced == name))
}
