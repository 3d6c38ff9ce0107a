//! [`Rule`]: a validated rule: its selectors, partition and tiers (or none: an
//! `unlimited` rule, a ban); [`RuleId`], its stable number within one policy.

use super::lists::check_reason;
use super::tier::check_name;
use super::AlgorithmKind;
use super::{
    EndpointSelector, Listing, ListingKind, Partition, PolicyConfigError, RuleConfig, Tier,
    TierConfig, MAX_CAPACITY,
};

/// What a rule without tiers does with what it matches, with its listing (its index in
/// the rule set's listings).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Special {
    /// `unlimited = true`: its slot admits, keeping no state.
    Unlimited(u32),
    /// `limit = 0`: refused.
    Ban(u32),
}

/// The most tiers one rule may hold.
pub const MAX_TIERS_PER_RULE: usize = 4;

/// A validated rule. Built by [`RuleSet`](super::RuleSet) from a [`RuleConfig`].
///
/// ```
/// use tollgate::policy::{EndpointSelector, Partition, Policy, PolicyConfig};
/// let policy = Policy::from_toml(r#"
///     [[rules]]
///     name = "export"
///     endpoint = "/export"
///     per = "global"
///     limit = 100
///     window = "1m"
/// "#, tollgate::policy::FnClock(|| tollgate::Nanos::ZERO))?;
/// let set = policy.rule_set();
/// let rule = &set.rules()[0];
/// let export = EndpointSelector::Exact("/export".into());
/// assert_eq!((rule.name(), rule.endpoint(), rule.partition()), ("export", Some(&export), Partition::Global));
/// # Ok::<(), tollgate::policy::PolicyConfigError>(())
/// ```
// What a check reads first (`repr(C)`, each rule on cache lines of its own): one line for
// a check that finds the caches cold.
#[derive(Debug)]
#[repr(C, align(64))]
pub struct Rule {
    tiers: Vec<Tier>,
    /// The key fingerprint of a [`Partition::Global`] rule (every request shares it),
    /// computed once here rather than on every check.
    global_key: u64,
    per: Partition,
    /// `None` for a rule of limits (tiers).
    special: Option<Special>,
    id: RuleId,
    name: Box<str>,
    client: Option<Box<str>>,
    endpoint: Option<EndpointSelector>,
    reason: Option<Box<str>>,
}

impl Rule {
    /// Validates `config`, the rule at `rules[index]` (named by its
    /// [`place`](RuleConfig::place) in its file where it has one); `guard` is the config's
    /// `launder_guard` (the rule's own, if set, wins); an `unlimited` rule or a ban adds
    /// its [`Listing`] to `listings`.
    pub(crate) fn compile(
        config: &RuleConfig,
        index: usize,
        capacity: usize,
        guard: bool,
        listings: &mut Vec<Listing>,
    ) -> Result<Rule, PolicyConfigError> {
        let path = format!("rules[{}]", config.place.unwrap_or(index));
        let field = |name: &str| format!("{path}.{name}");
        check_name(&config.name).map_err(|m| PolicyConfigError::new(field("name"), m))?;
        if config.client.as_deref() == Some("") {
            return Err(PolicyConfigError::new(
                field("client"),
                "must not be empty (omit it to match any client)",
            ));
        }
        let endpoint = match (&config.endpoint, &config.prefix) {
            (Some(_), Some(_)) => {
                return Err(PolicyConfigError::new(
                    field("prefix"),
                    "a rule has `endpoint` or `prefix`, not both",
                ))
            }
            (Some(e), None) => Some(
                EndpointSelector::parse(e)
                    .map_err(|e| PolicyConfigError::new(field("endpoint"), e.to_string()))?,
            ),
            (None, Some(p)) => Some(
                EndpointSelector::prefix(p)
                    .map_err(|e| PolicyConfigError::new(field("prefix"), e.to_string()))?,
            ),
            (None, None) => None,
        };
        let id = u32::try_from(index).map(RuleId).map_err(|_| {
            PolicyConfigError::new(path.clone(), "at most 2^32 rules (a rule's id is a u32)")
        })?;
        if let Some(kind) = special_kind(config, &path)? {
            let at = u32::try_from(listings.len())
                .map_err(|_| PolicyConfigError::new(path.clone(), "at most 2^32 entries"))?;
            listings.push(Listing::new(
                kind,
                path.clone(),
                config.name.clone(),
                config.reason.as_deref(),
            ));
            let special = if config.unlimited {
                Special::Unlimited(at)
            } else {
                Special::Ban(at)
            };
            return Ok(Rule {
                id,
                name: config.name.as_str().into(),
                client: config.client.as_deref().map(Box::from),
                endpoint,
                per: config.per,
                global_key: super::store::fingerprint(""),
                tiers: Vec::new(),
                special: Some(special),
                reason: config.reason.as_deref().map(Box::from),
            });
        }
        let shorthand = config.limit.is_some()
            || config.window.is_some()
            || config.algorithm.is_some()
            || config.burst.is_some()
            || config.queue.is_some();
        let tiers: Vec<(TierConfig, String)> = if config.tiers.is_empty() {
            if !shorthand {
                return Err(PolicyConfigError::new(
                    field("tiers"),
                    "a rule needs `limit` and `window`, or `tiers`",
                ));
            }
            let tier = TierConfig {
                name: None,
                limit: config.limit.unwrap_or(0),
                window: config.window.clone().unwrap_or_default(),
                algorithm: config.algorithm.unwrap_or_default(),
                burst: config.burst,
                queue: config.queue,
            };
            vec![(tier, path.clone())]
        } else {
            if shorthand {
                return Err(PolicyConfigError::new(
                    field("tiers"),
                    "give either `tiers` or the one-tier fields (limit, window, algorithm, burst, queue), not both",
                ));
            }
            if config.tiers.len() > MAX_TIERS_PER_RULE {
                return Err(PolicyConfigError::new(
                    field("tiers"),
                    format!("at most {MAX_TIERS_PER_RULE} tiers per rule"),
                ));
            }
            config
                .tiers
                .iter()
                .enumerate()
                .map(|(i, t)| (t.clone(), format!("{path}.tiers[{i}]")))
                .collect()
        };
        // Checked on every rule, so that a capacity no rule could have is never dropped
        // unread.
        let capacity = match config.capacity {
            None => capacity,
            Some(0) => return Err(PolicyConfigError::new(field("capacity"), "must be > 0")),
            Some(c) if c > MAX_CAPACITY => {
                return Err(PolicyConfigError::new(
                    field("capacity"),
                    format!("at most {MAX_CAPACITY} (each single-word tier allocates ~19.2 bytes per key on first use)"),
                ))
            }
            Some(c) => c,
        };
        // A rule whose key never varies holds one key: every request under `per = "global"`
        // shares one, and a `client` rule only ever sees its client.
        let capacity = if config.per == Partition::Global || config.client.is_some() {
            1
        } else {
            capacity
        };
        // A rule that holds one key has nothing to guard: no other key can push it out.
        let guard = config.launder_guard.unwrap_or(guard) && capacity > 1;
        if guard {
            if let Some(j) = tiers
                .iter()
                .position(|(t, _)| t.algorithm == AlgorithmKind::SlidingWindowLog)
            {
                let why = if config.launder_guard.is_some() {
                    String::new()
                } else {
                    " (on for every rule: `launder_guard = true` at the top; set \
                     `launder_guard = false` on this rule)"
                        .to_owned()
                };
                return Err(PolicyConfigError::new(
                    field("launder_guard"),
                    format!(
                        "not available for sliding_window_log tiers (tiers[{j}]: its state is \
                         a log, not one word a summary can keep){why}"
                    ),
                ));
            }
        }
        let labelled = (id, config.name.as_str(), config.per == Partition::Global);
        let mut compiled: Vec<Tier> = Vec::with_capacity(tiers.len());
        for (i, (tier, tier_path)) in tiers.iter().enumerate() {
            // The first tier is named after its rule whether the rule has one tier or more, so
            // adding a tier to a one-tier rule keeps the first tier's state (a new name would
            // start every client fresh); the others are `rule.1`, `rule.2`, …
            let default_name = if i == 0 {
                config.name.clone()
            } else {
                format!("{}.{i}", config.name)
            };
            let tier = Tier::compile(tier, tier_path, &default_name, capacity, guard, labelled)?;
            if let Some(j) = compiled.iter().position(|t| t.name() == tier.name()) {
                return Err(PolicyConfigError::new(
                    format!("{tier_path}.name"),
                    format!(
                        "\"{}\" is already the name of {path}.tiers[{j}]",
                        tier.name()
                    ),
                ));
            }
            compiled.push(tier);
        }
        Ok(Rule {
            id,
            name: config.name.as_str().into(),
            client: config.client.as_deref().map(Box::from),
            endpoint,
            per: config.per,
            global_key: super::store::fingerprint(""),
            tiers: compiled,
            special: None,
            reason: None,
        })
    }

    /// The rule's stable id (the same across reloads for the same name).
    pub fn id(&self) -> RuleId {
        self.id
    }

    /// The rule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The client it is for, if any.
    pub fn client(&self) -> Option<&str> {
        self.client.as_deref()
    }

    /// The endpoints it is for, if not every one.
    pub fn endpoint(&self) -> Option<&EndpointSelector> {
        self.endpoint.as_ref()
    }

    /// How its state is partitioned.
    pub fn partition(&self) -> Partition {
        self.per
    }

    /// Its tiers, all of which must admit (none for an `unlimited` rule or a ban).
    pub fn tiers(&self) -> &[Tier] {
        &self.tiers
    }

    /// [`ListingKind::Unlimited`] for an `unlimited` rule, [`ListingKind::Ban`] for a
    /// ban (`limit = 0`), `None` for a rule of limits.
    pub fn listing_kind(&self) -> Option<ListingKind> {
        match self.special? {
            Special::Unlimited(_) => Some(ListingKind::Unlimited),
            Special::Ban(_) => Some(ListingKind::Ban),
        }
    }

    /// A ban's `reason`, if it gives one.
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    /// What the rule does without tiers, if it has none.
    #[inline(always)]
    pub(crate) fn special(&self) -> Option<Special> {
        self.special
    }

    pub(crate) fn tiers_mut(&mut self) -> &mut [Tier] {
        &mut self.tiers
    }

    /// Gives the rule (and its tiers' labels) the id `id`.
    pub(crate) fn set_id(&mut self, id: RuleId) {
        self.id = id;
        for tier in &mut self.tiers {
            tier.relabel(id);
        }
    }

    /// The state key of `client` under this rule.
    #[inline]
    pub(crate) fn key_id(&self, client: u64) -> u64 {
        match self.per {
            Partition::Client => client,
            Partition::Global => self.global_key,
        }
    }
}

/// The kind of a rule without limits — `unlimited = true`, or a ban: `limit = 0` with no
/// other limit field — once its fields are checked (`path` is `rules[i]`); `None` for a
/// rule of limits, whose fields [`Rule::compile`] checks (`limit = 0` with a `window` is
/// such a rule, refused there: `must be > 0`). A field a rule without limits would ignore
/// is an error naming it.
fn special_kind(config: &RuleConfig, path: &str) -> Result<Option<ListingKind>, PolicyConfigError> {
    let field = |name: &str| format!("{path}.{name}");
    // The limit fields but `limit`, given.
    let tier_fields = [
        ("tiers", !config.tiers.is_empty()),
        ("window", config.window.is_some()),
        ("algorithm", config.algorithm.is_some()),
        ("burst", config.burst.is_some()),
        ("queue", config.queue.is_some()),
    ];
    let tier_field = tier_fields
        .iter()
        .find(|(_, given)| *given)
        .map(|(f, _)| *f);
    let ban = config.limit == Some(0) && tier_field.is_none();
    if !config.unlimited && !ban {
        return match (&config.reason, tier_field) {
            (None, _) => Ok(None),
            (Some(_), Some(f)) if config.limit == Some(0) => Err(PolicyConfigError::new(
                field(f),
                format!("a ban (`limit = 0`) has no limits and keeps no state: remove `{f}`"),
            )),
            (Some(_), _) => Err(PolicyConfigError::new(
                field("reason"),
                "only a ban (`limit = 0`) has a reason",
            )),
        };
    }
    let (what, kind) = if config.unlimited {
        ("an unlimited rule", ListingKind::Unlimited)
    } else {
        ("a ban (`limit = 0`)", ListingKind::Ban)
    };
    let given = [
        ("limit", config.limit.is_some() && config.unlimited),
        ("capacity", config.capacity.is_some()),
        ("launder_guard", config.launder_guard.is_some()),
    ];
    let extra = given
        .iter()
        .find(|(_, given)| *given)
        .map(|(f, _)| *f)
        .or(tier_field);
    if let Some(name) = extra {
        return Err(PolicyConfigError::new(
            field(name),
            format!("{what} has no limits and keeps no state: remove `{name}`"),
        ));
    }
    if config.per == Partition::Global {
        return Err(PolicyConfigError::new(
            field("per"),
            format!("{what} keeps no state to share: remove `per`"),
        ));
    }
    if config.unlimited && config.reason.is_some() {
        return Err(PolicyConfigError::new(
            field("reason"),
            "only a ban (`limit = 0`) has a reason",
        ));
    }
    check_reason(path, config.reason.as_deref())?;
    Ok(Some(kind))
}

/// A rule's number within one [`Policy`](super::Policy): assigned by name the first time a
/// rule is loaded and kept across reloads, so metrics indexed by it stay meaningful.
///
/// ```
/// use tollgate::policy::RuleId;
/// assert_eq!(RuleId(3).index(), 3);
/// ```
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId(pub u32);

impl RuleId {
    /// As an index.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}
