//! [`ReloadReport`]: what a reload changed, rule by rule, so that whoever reloads (an
//! operator's tool, a file watcher) can log it, and, asking for it first
//! ([`Policy::preview`](super::Policy::preview)), refuse a suspicious change.

use std::fmt;

use super::{Listing, ListingKind, Rule, RuleSet};

/// What [`Policy::reload`](super::Policy::reload) changed: the rules added, removed and
/// changed (by name; a changed rule matches other requests, or has tiers added, removed or
/// given other numbers or another laundering guard, or made `unlimited` or a ban), and how
/// many stayed as they were; and the allow and deny entries added, removed and changed (a
/// new reason). Names only: no state.
///
/// ```
/// use tollgate::policy::{FnClock, Policy};
/// use tollgate::Nanos;
/// let policy = Policy::from_toml(r#"
///     [[rules]]
///     name = "default"
///     limit = 10
///     window = "1m"
///     [[rules]]
///     name = "search"
///     endpoint = "/search"
///     limit = 5
///     window = "1s"
/// "#, FnClock(|| Nanos::ZERO))?;
/// let report = policy.reload_toml(r#"
///     [[rules]]
///     name = "default"
///     limit = 20
///     window = "1m"
///     [[rules]]
///     name = "export"
///     endpoint = "/export"
///     limit = 1
///     window = "1h"
/// "#)?;
/// assert_eq!(report.added(), ["export"]);
/// assert_eq!(report.removed(), ["search"]);
/// assert_eq!(report.changed(), ["default"]);
/// assert_eq!(report.unchanged(), 0);
/// assert_eq!(report.to_string(), "added export; removed search; changed default");
///
/// let report = policy.reload_toml(r#"
///     [[rules]]
///     name = "default"
///     limit = 20
///     window = "1m"
///     [[rules]]
///     name = "export"
///     endpoint = "/export"
///     limit = 0
///     reason = "exports are paused"
///     [[deny]]
///     cidr = "203.0.113.0/24"
/// "#)?;
/// assert_eq!(report.changed(), ["export"]);
/// assert_eq!(report.listed(), ["deny cidr 203.0.113.0/24"]);
/// assert_eq!(report.to_string(), "changed export; listed deny cidr 203.0.113.0/24");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReloadReport {
    added: Vec<String>,
    removed: Vec<String>,
    changed: Vec<String>,
    unchanged: usize,
    listed: Vec<String>,
    unlisted: Vec<String>,
    relisted: Vec<String>,
}

/// A list entry's name in a report: `allow client "probe"`, `deny cidr 203.0.113.0/24`;
/// `None` for a special rule (reported as a rule).
fn entry_name(listing: &Listing) -> Option<String> {
    match listing.kind() {
        ListingKind::AllowClient => Some(format!("allow client {:?}", listing.subject())),
        ListingKind::AllowCidr => Some(format!("allow cidr {}", listing.subject())),
        ListingKind::DenyClient => Some(format!("deny client {:?}", listing.subject())),
        ListingKind::DenyCidr => Some(format!("deny cidr {}", listing.subject())),
        ListingKind::Unlimited | ListingKind::Ban => None,
    }
}

impl ReloadReport {
    /// What replacing `old` by `new` changes (rules in config order).
    pub(crate) fn between(old: &RuleSet, new: &RuleSet) -> ReloadReport {
        let mut report = ReloadReport::default();
        for rule in new.rules() {
            match old.rule(rule.name()) {
                None => report.added.push(rule.name().to_owned()),
                Some(before) if same(before, rule) => report.unchanged += 1,
                Some(_) => report.changed.push(rule.name().to_owned()),
            }
        }
        report.removed = old
            .rules()
            .iter()
            .filter(|rule| new.rule(rule.name()).is_none())
            .map(|rule| rule.name().to_owned())
            .collect();
        let entries = |set: &RuleSet| -> Vec<(String, Option<String>)> {
            set.listings()
                .iter()
                .filter_map(|l| Some((entry_name(l)?, l.reason().map(str::to_owned))))
                .collect()
        };
        let (before, after) = (entries(old), entries(new));
        for (name, reason) in &after {
            match before.iter().find(|(n, _)| n == name) {
                None => report.listed.push(name.clone()),
                Some((_, r)) if r != reason => report.relisted.push(name.clone()),
                Some(_) => {}
            }
        }
        report.unlisted = before
            .into_iter()
            .filter(|(name, _)| !after.iter().any(|(n, _)| n == name))
            .map(|(name, _)| name)
            .collect();
        report
    }

    /// Rules the reload added (they start fresh).
    pub fn added(&self) -> &[String] {
        &self.added
    }

    /// Rules the reload removed (their state is dropped).
    pub fn removed(&self) -> &[String] {
        &self.removed
    }

    /// Rules the reload changed (their surviving tiers keep their state, converted).
    pub fn changed(&self) -> &[String] {
        &self.changed
    }

    /// How many rules the reload left as they were.
    pub fn unchanged(&self) -> usize {
        self.unchanged
    }

    /// Allow and deny entries the reload added (`deny cidr 203.0.113.0/24`, `allow client
    /// "probe"`): they decide the next request.
    pub fn listed(&self) -> &[String] {
        &self.listed
    }

    /// Allow and deny entries the reload removed.
    pub fn unlisted(&self) -> &[String] {
        &self.unlisted
    }

    /// Allow and deny entries whose reason the reload changed.
    pub fn relisted(&self) -> &[String] {
        &self.relisted
    }

    /// Whether the reload changed nothing.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.changed.is_empty()
            && self.listed.is_empty()
            && self.unlisted.is_empty()
            && self.relisted.is_empty()
    }
}

/// Whether `a` and `b` (rules of one name) match the same requests with the same tiers
/// (the same numbers, capacity and laundering guard: a tier that keeps its state).
fn same(a: &Rule, b: &Rule) -> bool {
    a.listing_kind() == b.listing_kind()
        && a.reason() == b.reason()
        && a.client() == b.client()
        && a.endpoint() == b.endpoint()
        && a.partition() == b.partition()
        && a.tiers().len() == b.tiers().len()
        && a.tiers().iter().zip(b.tiers()).all(|(x, y)| {
            x.name() == y.name()
                && x.kind() == y.kind()
                && x.version() == y.version()
                && x.quota() == y.quota()
                && x.window() == y.window()
                && x.capacity() == y.capacity()
                && x.launder_guard() == y.launder_guard()
        })
}

/// `added a, b; removed c; changed d; listed e; unlisted f; relisted g` (the non-empty
/// parts), or `no change`.
impl fmt::Display for ReloadReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("no change");
        }
        let parts = [
            ("added", &self.added),
            ("removed", &self.removed),
            ("changed", &self.changed),
            ("listed", &self.listed),
            ("unlisted", &self.unlisted),
            ("relisted", &self.relisted),
        ];
        let mut first = true;
        for (what, names) in parts {
            if names.is_empty() {
                continue;
            }
            if !first {
                f.write_str("; ")?;
            }
            first = false;
            write!(f, "{what} {}", names.join(", "))?;
        }
        Ok(())
    }
}
