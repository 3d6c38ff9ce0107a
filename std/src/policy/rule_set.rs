//! [`RuleSet`]: the validated rules and the index that finds the ones a request matches.

use std::collections::HashMap;

use super::index::Index;
use super::lists::Lists;
use super::store::fingerprint;
use super::{EndpointSelector, Listing, PolicyConfig, PolicyConfigError, Rule, Tier};

/// The largest `capacity` a rule set (or a rule) accepts: a single-word tier allocates its
/// table (about 19.2 bytes per key of capacity) the first time it is used.
///
/// Memory follows the rules: a rule that can only ever hold one key (`per = "global"`, or a
/// `client` rule) gets a one-key table (about 600 bytes per tier) whatever the capacity
/// says; any other rule gets its own `capacity` if it sets one, else the config's. Nothing
/// is allocated by [`PolicyConfig::validate`], and a reload allocates only the tiers it
/// changes (unchanged ones keep their state and their table).
pub const MAX_CAPACITY: usize = 1 << 26;

/// The rules of one endpoint selector: the any-client rule and the client-specific ones.
#[derive(Debug, Default)]
struct EndpointRules {
    any: Option<usize>,
    by_client: Index<usize>,
}

impl EndpointRules {
    /// The rule for `client` (whose fingerprint is `client_hash`), else the any-client one.
    #[inline]
    fn pick(&self, client: &str, client_hash: u64) -> Option<usize> {
        self.by_client
            .get(client, || client_hash)
            .copied()
            .or(self.any)
    }
}

/// A validated, indexed set of rules: what a [`Policy`](super::Policy) swaps on reload.
///
/// **Which rules apply.** A request `(client, endpoint)` is checked against one rule in each
/// of two slots, and must pass both:
///
/// - the *global slot* (rules without `endpoint`): the rule for this `client` if there is
///   one, otherwise the default rule (no `client`, no `endpoint`);
/// - the *endpoint slot* (rules with an `endpoint` or `prefix`): of the selectors that
///   match the request's endpoint, the most specific that has a rule for it — the exact
///   name first, then the prefixes longest first — and of its rules, the one for this
///   `client` if there is one, otherwise its any-client rule (see
///   [`EndpointSelector`](super::EndpointSelector)).
///
/// A client-specific rule thus *replaces* the generic rule of its slot (raising acct_123 to
/// 500/min is a client rule, not capped by the default 100/min), while the two slots
/// *stack* (a client's global 1000/min and the endpoint's stricter 10/min both apply).
///
/// **Before the rules**, the allow and deny lists: a client an entry names (by key, or by
/// a network holding its address) is admitted or refused by that entry alone (see
/// [`ListEntryConfig`](super::ListEntryConfig)). **Rules without limits**: a ban
/// (`limit = 0`) in either slot refuses the request; an `unlimited` rule adds no tier to
/// its slot (the other slot still applies). Lists and special rules are decided in the
/// policy, before any store is asked: nothing is stored or charged for them.
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
// Laid out for a check that finds the caches cold: what every check reads first, in the
// set's first cache line (`repr(C)`, aligned to a line), the indexes after.
#[derive(Debug)]
#[repr(C, align(64))]
pub struct RuleSet {
    rules: Vec<Rule>,
    default: Option<usize>,
    /// Whether `listings` is not empty.
    any_listing: bool,
    /// Whether any rule names a client or an endpoint (else a request matches the default
    /// rule, or none, with no index to look in).
    selective: bool,
    /// Whether any rule names an endpoint (exactly or by prefix): see
    /// [`reads_endpoints`](Self::reads_endpoints).
    endpoints: bool,
    by_client: Index<usize>,
    by_endpoint: Index<EndpointRules>,
    /// The prefix selectors' rules, longest prefix first.
    by_prefix: Vec<(Box<str>, EndpointRules)>,
    /// The allow and deny entries.
    lists: Lists,
    /// What each special rule and list entry is (rules first, in config order, then the
    /// allow entries, then the deny entries).
    listings: Vec<Listing>,
}

/// The rules of `selector` in `set`, made empty on first use.
fn endpoint_rules<'s>(set: &'s mut RuleSet, selector: &EndpointSelector) -> &'s mut EndpointRules {
    match selector {
        EndpointSelector::Exact(e) => set.by_endpoint.get_or_insert_with(e, Default::default),
        EndpointSelector::Prefix(p) => {
            let at = match set.by_prefix.iter().position(|(q, _)| q == p) {
                Some(at) => at,
                None => {
                    set.by_prefix.push((p.clone(), EndpointRules::default()));
                    set.by_prefix.len() - 1
                }
            };
            &mut set.by_prefix[at].1
        }
    }
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
            None => crate::keyed::DEFAULT_CAPACITY,
        };
        let listed = !config.allow.is_empty() || !config.deny.is_empty();
        if config.rules.is_empty() && !listed && !config.allow_empty {
            return Err(PolicyConfigError::new(
                "rules",
                "no rules: every request would be admitted and every key's state dropped; \
                 set `allow_empty = true` if that is meant",
            ));
        }
        let mut set = RuleSet {
            rules: Vec::with_capacity(config.rules.len()),
            default: None,
            by_client: Index::default(),
            by_endpoint: Index::default(),
            by_prefix: Vec::new(),
            lists: Lists::default(),
            listings: Vec::new(),
            any_listing: false,
            selective: false,
            endpoints: false,
        };
        let mut listings = Vec::new();
        let mut names: HashMap<&str, usize> = HashMap::new();
        // A rule's place in its file, which errors name it by (see `RuleConfig::place`).
        let place = |k: usize| config.rules[k].place.unwrap_or(k);
        for (i, rule_config) in config.rules.iter().enumerate() {
            let rule = Rule::compile(
                rule_config,
                i,
                capacity,
                config.launder_guard,
                &mut listings,
            )?;
            if let Some(j) = names.insert(&rule_config.name, i) {
                return Err(PolicyConfigError::new(
                    format!("rules[{}].name", place(i)),
                    format!(
                        "\"{}\" is already the name of rules[{}]",
                        rule.name(),
                        place(j)
                    ),
                ));
            }
            let conflict = |j: usize| {
                PolicyConfigError::new(
                    format!("rules[{}]", place(i)),
                    format!(
                        "matches the same client and endpoint as rules[{}]",
                        place(j)
                    ),
                )
            };
            let claim = |slot: &mut Option<usize>| match slot.replace(i) {
                Some(j) => Err(conflict(j)),
                None => Ok(()),
            };
            let claim_in = |map: &mut Index<usize>, key: &str| {
                let slot = map.get_or_insert_with(key, || i);
                match *slot {
                    j if j != i => Err(conflict(j)),
                    _ => Ok(()),
                }
            };
            match (rule.client(), rule.endpoint()) {
                (None, None) => claim(&mut set.default)?,
                (Some(c), None) => claim_in(&mut set.by_client, c)?,
                (client, Some(selector)) => {
                    let rules = endpoint_rules(&mut set, selector);
                    match client {
                        None => claim(&mut rules.any)?,
                        Some(c) => claim_in(&mut rules.by_client, c)?,
                    }
                }
            }
            set.rules.push(rule);
        }
        // Longest first; a stable sort, so of `/api` and `/api/`-like prefixes of one length
        // the first in the config comes first.
        set.by_prefix
            .sort_by_key(|(p, _)| core::cmp::Reverse(p.len()));
        set.selective =
            !(set.by_client.is_empty() && set.by_endpoint.is_empty() && set.by_prefix.is_empty());
        set.lists = Lists::compile(config, &mut listings)?;
        set.any_listing = !listings.is_empty();
        set.endpoints = !(set.by_endpoint.is_empty() && set.by_prefix.is_empty());
        set.listings = listings;
        Ok(set)
    }

    /// Every special rule (`unlimited`, ban) and list entry: what a decision's
    /// [`listing`](super::PolicyDecision::listing) names. Rules first, in config order,
    /// then the allow entries, then the deny entries.
    pub fn listings(&self) -> &[Listing] {
        &self.listings
    }

    /// Whether any rule selects by endpoint (an `endpoint` or `prefix`): else no request's
    /// endpoint changes which rules it matches.
    #[inline(always)]
    pub(crate) fn reads_endpoints(&self) -> bool {
        self.endpoints
    }

    /// Whether any rule selects endpoints by route template (`endpoint = "/users/{id}"`):
    /// names that only axum's `MatchedPath` gives, never a raw path.
    pub(crate) fn names_route_templates(&self) -> bool {
        self.rules.iter().any(|rule| {
            rule.endpoint()
                .is_some_and(EndpointSelector::is_route_template)
        })
    }

    /// Whether the set has any list entry or special rule (else no check needs to look
    /// for one).
    #[inline(always)]
    pub(crate) fn has_listings(&self) -> bool {
        self.any_listing
    }

    /// The list entry `client` (whose fingerprint is `client_hash`) meets, if any: its
    /// index in [`listings`](Self::listings).
    #[inline(always)]
    pub(crate) fn listed(&self, client: &str, client_hash: u64) -> Option<u32> {
        self.lists.find(client, client_hash)
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
        self.matching_fingerprinted(client, fingerprint(client), endpoint)
    }

    /// [`matching`](Self::matching) for a client whose [`fingerprint`] is `client_hash`
    /// (a check computes it anyway, for the client's state key).
    #[inline(always)]
    pub(crate) fn matching_fingerprinted(
        &self,
        client: &str,
        client_hash: u64,
        endpoint: &str,
    ) -> [Option<&Rule>; 2] {
        if self.selective {
            self.matching_indexed(client, client_hash, endpoint)
        } else {
            [self.default.map(|i| &self.rules[i]), None]
        }
    }

    /// [`matching_fingerprinted`](Self::matching_fingerprinted) in a set whose rules name
    /// clients or endpoints: through the indexes.
    fn matching_indexed(
        &self,
        client: &str,
        client_hash: u64,
        endpoint: &str,
    ) -> [Option<&Rule>; 2] {
        let global = self
            .by_client
            .get(client, || client_hash)
            .copied()
            .or(self.default);
        let exact = if self.by_endpoint.is_empty() {
            None
        } else {
            self.by_endpoint
                .get(endpoint, || fingerprint(endpoint))
                .and_then(|e| e.pick(client, client_hash))
        };
        let scoped = exact.or_else(|| {
            self.by_prefix
                .iter()
                .filter(|(p, _)| EndpointSelector::prefix_matches(p, endpoint))
                .find_map(|(_, e)| e.pick(client, client_hash))
        });
        [
            global.map(|i| &self.rules[i]),
            scoped.map(|i| &self.rules[i]),
        ]
    }

    pub(crate) fn rules_mut(&mut self) -> &mut [Rule] {
        &mut self.rules
    }

    /// Carries state over from `old`: every tier whose (rule name, tier name) existed there
    /// keeps its keyed state where its algorithm, capacity and laundering guard are
    /// unchanged ([`Tier::adopt`]); any other such tier has a state of its own, which the
    /// store converts from the old one's as keys are touched (see
    /// [`Policy::reload`](super::Policy::reload), and [`replacing`](Self::replacing)).
    pub(crate) fn adopt_state(&mut self, old: &RuleSet) {
        for rule in &mut self.rules {
            let Some(old_rule) = old.rule(rule.name()) else {
                continue;
            };
            for tier in rule.tiers_mut() {
                if let Some(old_tier) = old_rule.tiers().iter().find(|t| t.name() == tier.name()) {
                    tier.adopt(old_tier);
                }
            }
        }
    }

    /// Each tier of this set (a reload's new set) whose (rule name, tier name) existed in
    /// `old` with another keyed state (its algorithm, capacity or laundering guard
    /// changed), with the tier it replaces: the state a store converts to the new tier's as
    /// keys are touched. A tier that kept its state is not listed.
    pub fn replacing<'a>(
        &'a self,
        old: &'a RuleSet,
    ) -> impl Iterator<Item = (&'a Tier, &'a Tier)> + 'a {
        self.rules
            .iter()
            .filter_map(move |rule| Some((rule, old.rule(rule.name())?)))
            .flat_map(|(rule, old_rule)| {
                rule.tiers().iter().filter_map(move |tier| {
                    let old_tier = old_rule.tiers().iter().find(|t| t.name() == tier.name())?;
                    (!tier.shares_state(old_tier)).then_some((tier, old_tier))
                })
            })
    }

    /// Every tier of every rule, in order.
    pub(crate) fn tiers(&self) -> impl Iterator<Item = &Tier> {
        self.rules.iter().flat_map(|rule| rule.tiers())
    }
}

#[cfg(test)]
mod tests {
    use super::super::index::FEW;
    use super::*;

    /// Client and endpoint indexes: a name maps to the value first inserted for it; a
    /// client's endpoint rule replaces the endpoint's any-client rule.
    #[test]
    fn indexes_find_names_and_client_endpoint_rules() {
        // Few names (compared one by one), then many (through the table).
        for extra in [0, 2 * FEW] {
            let mut index: Index<usize> = Index::default();
            assert_eq!(index.get("x", || fingerprint("x")), None);
            let names: Vec<String> = ["/a", "/search", "acct_123456789012345678"]
                .iter()
                .map(|n| n.to_string())
                .chain((0..extra).map(|i| format!("/extra/{i}")))
                .collect();
            for (i, name) in names.iter().enumerate() {
                assert_eq!(*index.get_or_insert_with(name, || i), i);
            }
            assert_eq!(index.entries.len() <= FEW, extra == 0);
            assert_eq!(*index.get_or_insert_with("/search", || 99), 1);
            for (i, name) in names.iter().enumerate() {
                assert_eq!(index.get(name, || fingerprint(name)), Some(&i), "{name}");
            }
            assert_eq!(index.get("/searcH", || fingerprint("/searcH")), None);
            assert_eq!(index.get("/searc", || fingerprint("/searc")), None);
        }
        let set = RuleSet::compile(
            &PolicyConfig::from_toml(
                "[[rules]]\nname = \"s\"\nendpoint = \"/s\"\nlimit = 1\nwindow = \"1s\"\n\
                 [[rules]]\nname = \"vip\"\nclient = \"vip\"\nendpoint = \"/s\"\nlimit = 9\nwindow = \"1s\"\n",
            )
            .unwrap(),
        )
        .unwrap();
        let names = |c, e| {
            set.matching(c, e)
                .iter()
                .flatten()
                .map(|r| r.name())
                .collect::<Vec<_>>()
        };
        assert_eq!(names("vip", "/s"), ["vip"]);
        assert_eq!(names("other", "/s"), ["s"]);
        assert!(names("vip", "/t").is_empty());
    }
}
