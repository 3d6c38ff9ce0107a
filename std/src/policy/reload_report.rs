//! [`ReloadReport`]: what a reload changed, rule by rule, so that whoever reloads (an
//! operator's tool, a file watcher) can log it and refuse a suspicious change.

use std::fmt;

use super::{Rule, RuleSet};

/// What [`Policy::reload`](super::Policy::reload) changed: the rules added, removed and
/// changed (by name; a changed rule matches other requests, or has tiers added, removed or
/// given other numbers), and how many stayed as they were. Rule names only: no state.
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
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReloadReport {
    added: Vec<String>,
    removed: Vec<String>,
    changed: Vec<String>,
    unchanged: usize,
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

    /// Whether the reload changed nothing.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// Whether `a` and `b` (rules of one name) match the same requests with the same tiers.
fn same(a: &Rule, b: &Rule) -> bool {
    a.client() == b.client()
        && a.endpoint() == b.endpoint()
        && a.partition() == b.partition()
        && a.tiers().len() == b.tiers().len()
        && a.tiers().iter().zip(b.tiers()).all(|(x, y)| {
            x.name() == y.name()
                && x.kind() == y.kind()
                && x.version() == y.version()
                && x.quota() == y.quota()
                && x.window() == y.window()
                && x.store.configured_capacity() == y.store.configured_capacity()
        })
}

/// `added a, b; removed c; changed d` (the non-empty parts), or `no change`.
impl fmt::Display for ReloadReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("no change");
        }
        let parts = [
            ("added", &self.added),
            ("removed", &self.removed),
            ("changed", &self.changed),
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
