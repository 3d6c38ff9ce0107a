//! [`RuleSet`]: the validated rules and the index that finds the ones a request matches.

use std::collections::HashMap;
use std::sync::Arc;

use tollgate_core::Nanos;

use super::{PolicyConfig, PolicyConfigError, Rule};

/// The largest `capacity` a rule set (or a rule) accepts: a single-word tier allocates its
/// table (about 19.2 bytes per key of capacity) the first time it is used.
///
/// Memory follows the rules: a rule that can only ever hold one key (`per = "global"`, or a
/// `client` rule) gets a one-key table (about 600 bytes per tier) whatever the capacity
/// says; any other rule gets its own `capacity` if it sets one, else the config's. Nothing
/// is allocated by [`PolicyConfig::validate`], and a reload allocates only the tiers it
/// changes (unchanged ones keep their state and their table).
pub const MAX_CAPACITY: usize = 1 << 26;

/// Default number of keys one tier keeps state for.
pub const DEFAULT_CAPACITY: usize = 100_000;

type Index = HashMap<Box<str>, usize, foldhash::fast::RandomState>;

/// The rules of one endpoint: the any-client rule and the client-specific ones.
#[derive(Debug, Default)]
struct EndpointRules {
    any: Option<usize>,
    by_client: Index,
}

/// A validated, indexed set of rules: what a [`Policy`](super::Policy) swaps on reload.
///
/// **Which rules apply.** A request `(client, endpoint)` is checked against one rule in each
/// of two slots, and must pass both:
///
/// - the *global slot* (rules without `endpoint`): the rule for this `client` if there is
///   one, otherwise the default rule (no `client`, no `endpoint`);
/// - the *endpoint slot* (rules with this `endpoint`): the rule for this (`client`,
///   `endpoint`) if there is one, otherwise the endpoint's any-client rule.
///
/// A client-specific rule thus *replaces* the generic rule of its slot (raising acct_123 to
/// 500/min is a client rule, not capped by the default 100/min), while the two slots
/// *stack* (a client's global 1000/min and the endpoint's stricter 10/min both apply).
///
/// ```
/// use tollgate::policy::{PolicyConfig, RuleSet};
/// let set = RuleSet::compile(&PolicyConfig::from_toml(r#"
///     [[rules]]
///     name = "default"
///     limit = 100
///     window = "1m"
///     [[rules]]
///     name = "acct_123"
///     client = "acct_123"
///     limit = 500
///     window = "1m"
///     [[rules]]
///     name = "search"
///     endpoint = "/search"
///     limit = 10
///     window = "1m"
/// "#)?)?;
/// let names = |c, e| set.matching(c, e).iter().flatten().map(|r| r.name()).collect::<Vec<_>>();
/// assert_eq!(names("acct_123", "/search"), ["acct_123", "search"]);
/// assert_eq!(names("acct_9", "/search"), ["default", "search"]);
/// assert_eq!(names("acct_9", "/home"), ["default"]);
/// # Ok::<(), tollgate::policy::PolicyConfigError>(())
/// ```
#[derive(Debug)]
pub struct RuleSet {
    rules: Vec<Rule>,
    default: Option<usize>,
    by_client: Index,
    by_endpoint: HashMap<Box<str>, EndpointRules, foldhash::fast::RandomState>,
}

impl RuleSet {
    /// Validates and indexes `config`. Every tier starts with fresh state; a
    /// [`Policy`](super::Policy) carries state over from the set it replaces.
    pub fn compile(config: &PolicyConfig) -> Result<RuleSet, PolicyConfigError> {
        let capacity = match config.capacity {
            Some(0) => return Err(PolicyConfigError::new("capacity", "must be > 0")),
            Some(c) if c > MAX_CAPACITY => {
                return Err(PolicyConfigError::new(
                    "capacity",
                    format!("at most {MAX_CAPACITY} (each single-word tier allocates ~19.2 bytes per key on first use)"),
                ))
            }
            Some(c) => c,
            None => DEFAULT_CAPACITY,
        };
        let mut set = RuleSet {
            rules: Vec::with_capacity(config.rules.len()),
            default: None,
            by_client: Index::default(),
            by_endpoint: HashMap::default(),
        };
        let mut names: HashMap<&str, usize> = HashMap::new();
        for (i, rule_config) in config.rules.iter().enumerate() {
            let rule = Rule::compile(rule_config, i, capacity)?;
            if let Some(j) = names.insert(rule.name(), i) {
                return Err(PolicyConfigError::new(
                    format!("rules[{i}].name"),
                    format!("\"{}\" is already the name of rules[{j}]", rule.name()),
                ));
            }
            let conflict = |j: usize| {
                PolicyConfigError::new(
                    format!("rules[{i}]"),
                    format!("matches the same client and endpoint as rules[{j}]"),
                )
            };
            let claim = |slot: &mut Option<usize>| match slot.replace(i) {
                Some(j) => Err(conflict(j)),
                None => Ok(()),
            };
            let claim_in = |map: &mut Index, key: &str| match map.insert(key.into(), i) {
                Some(j) => Err(conflict(j)),
                None => Ok(()),
            };
            match (rule.client(), rule.endpoint()) {
                (None, None) => claim(&mut set.default)?,
                (Some(c), None) => claim_in(&mut set.by_client, c)?,
                (None, Some(e)) => claim(&mut set.by_endpoint.entry(e.into()).or_default().any)?,
                (Some(c), Some(e)) => claim_in(
                    &mut set.by_endpoint.entry(e.into()).or_default().by_client,
                    c,
                )?,
            }
            set.rules.push(rule);
        }
        Ok(set)
    }

    /// The rules, in config order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The rule named `name`.
    pub fn rule(&self, name: &str) -> Option<&Rule> {
        self.rules.iter().find(|r| r.name() == name)
    }

    /// The rules a request matches: `[global slot, endpoint slot]` (see the type docs).
    #[inline]
    pub fn matching(&self, client: &str, endpoint: &str) -> [Option<&Rule>; 2] {
        let global = self.by_client.get(client).copied().or(self.default);
        let scoped = self
            .by_endpoint
            .get(endpoint)
            .and_then(|e| e.by_client.get(client).copied().or(e.any));
        [
            global.map(|i| &self.rules[i]),
            scoped.map(|i| &self.rules[i]),
        ]
    }

    pub(crate) fn rules_mut(&mut self) -> &mut [Rule] {
        &mut self.rules
    }

    /// Carries state over from `old`: every tier whose (rule name, tier name) existed there
    /// keeps its keyed state: the same store where the algorithm is unchanged, else its own
    /// fresh store as the old one's successor, which converts the old keys as they are
    /// carried over (see [`Policy::reload`](super::Policy::reload) and
    /// [`settle_predecessors`](Self::settle_predecessors)).
    pub(crate) fn adopt_state(&mut self, old: &RuleSet) {
        for rule in &mut self.rules {
            let Some(old_rule) = old.rule(rule.name()) else {
                continue;
            };
            for tier in rule.tiers_mut() {
                if let Some(old_tier) = old_rule.tiers().iter().find(|t| t.name() == tier.name()) {
                    if old_tier.store.algorithm() == tier.store.algorithm()
                        && old_tier.store.configured_capacity() == tier.store.configured_capacity()
                    {
                        tier.store = Arc::clone(&old_tier.store);
                    } else {
                        tier.store.succeed(&old_tier.store);
                    }
                }
            }
        }
    }

    /// The gates of every tier store that replaces one of the old set's: a reload holds
    /// them through the grace period (see `TierStore::hold_gate`).
    pub(crate) fn hold_gates(&self) -> Vec<impl Drop + '_> {
        self.rules
            .iter()
            .flat_map(|rule| rule.tiers())
            .filter_map(|tier| tier.store.hold_gate())
            .collect()
    }

    /// After the grace period of a reload that published this set: lets the keys of every
    /// replaced store move (each on its first touch) and drops the old generations that
    /// hold nothing live (see `TierStore::settle_predecessors`).
    pub(crate) fn settle_predecessors(&self, now: Nanos) {
        for tier in self.rules.iter().flat_map(|rule| rule.tiers()) {
            tier.store.settle_predecessors(now);
        }
    }
}
