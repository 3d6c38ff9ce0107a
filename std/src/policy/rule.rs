//! [`Rule`]: a validated rule: its selectors, partition and tiers; [`RuleId`], its stable
//! number within one policy.

use super::tier::check_name;
use super::AlgorithmKind;
use super::{
    EndpointSelector, Partition, PolicyConfigError, RuleConfig, Tier, TierConfig, MAX_CAPACITY,
};

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
#[derive(Debug)]
pub struct Rule {
    id: RuleId,
    name: Box<str>,
    client: Option<Box<str>>,
    endpoint: Option<EndpointSelector>,
    per: Partition,
    /// The key fingerprint of a [`Partition::Global`] rule (every request shares it),
    /// computed once here rather than on every check.
    global_key: u64,
    tiers: Vec<Tier>,
}

impl Rule {
    /// Validates `config`, the rule at `rules[index]`; `guard` is the config's
    /// `launder_guard` (the rule's own, if set, wins).
    pub(crate) fn compile(
        config: &RuleConfig,
        index: usize,
        capacity: usize,
        guard: bool,
    ) -> Result<Rule, PolicyConfigError> {
        let path = format!("rules[{index}]");
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
        // A rule whose key never varies holds one key: every request under `per = "global"`
        // shares one, and a `client` rule only ever sees its client.
        let capacity = if config.per == Partition::Global || config.client.is_some() {
            1
        } else {
            match config.capacity {
                None => capacity,
                Some(0) => return Err(PolicyConfigError::new(field("capacity"), "must be > 0")),
                Some(c) if c > MAX_CAPACITY => {
                    return Err(PolicyConfigError::new(
                        field("capacity"),
                        format!("at most {MAX_CAPACITY} (each single-word tier allocates ~19.2 bytes per key on first use)"),
                    ))
                }
                Some(c) => c,
            }
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
        let id = u32::try_from(index).map(RuleId).map_err(|_| {
            PolicyConfigError::new(path.clone(), "at most 2^32 rules (a rule's id is a u32)")
        })?;
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

    /// Its tiers, all of which must admit.
    pub fn tiers(&self) -> &[Tier] {
        &self.tiers
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
