//! [`Tier`]: one validated limit of a rule, and the identity of the per-key state it is
//! checked against (the state itself is the store's).

use std::sync::Arc;

use tollgate_core::{AlgorithmConfig, AnyAlgorithm, ConfigError, Nanos};

use super::state_id::StateId;
use super::{parse_duration, AlgorithmKind, PolicyConfigError, RuleId, TierConfig, TierLabel};
use crate::keyed::Geometry;

/// The largest limit a sliding-window-log tier accepts: it keeps one timestamp per permit
/// and key, so a key's log takes under `16 · limit` bytes while it holds anything (in a
/// deque that grows by doubling; let go of when the key is evicted), and under
/// `16 · (limit + 4096)` when charged or converted beyond its limit (the core's
/// [`SlidingWindowLog::ceiling`](crate::SlidingWindowLog::ceiling), where it saturates).
pub const MAX_LOG_LIMIT: u64 = 65_536;

/// The most permits one request may charge a sliding-window-log tier, in any store: each
/// is one timestamp written under the key's lock in process (one sorted-set member in
/// Redis), so this bounds how long one request can hold a key. A larger cost is
/// [`InsufficientCapacity`](crate::InsufficientCapacity), like any cost above a limit.
pub const MAX_LOG_COST: u32 = 4096;

/// One validated limit: the algorithm built from its config, what headers advertise
/// (`name`, `quota`, `window`), and which keyed state it is checked against (kept across a
/// reload that keeps the tier's algorithm and capacity; the state lives in the store).
///
/// ```
/// use tollgate::policy::{Policy, PolicyConfig, RuleConfig, TierConfig};
/// let config = PolicyConfig::default()
///     .rule(RuleConfig::new("api").tier(TierConfig::new(10, "1s").named("burst")));
/// let policy = Policy::new(config, tollgate::policy::FnClock(|| tollgate::Nanos::ZERO))?;
/// let set = policy.rule_set();
/// let tier = &set.rules()[0].tiers()[0];
/// assert_eq!((tier.name(), tier.quota(), tier.window()), ("burst", 10, tollgate::Nanos::from_secs(1)));
/// # Ok::<(), tollgate::policy::PolicyConfigError>(())
/// ```
// What a check reads first (`repr(C)`, each tier on cache lines of its own): its cost
// bound, its state, its label's quota (see `TierLabel`), in one line.
#[derive(Debug)]
#[repr(C, align(64))]
pub struct Tier {
    max_cost: u64,
    /// Which keyed state it is checked against.
    state: Arc<StateId>,
    /// Its name, and what headers and metrics say about it (relabelled if its rule's id
    /// changes); decisions point to it.
    label: TierLabel,
    kind: AlgorithmKind,
    quota: u64,
    window: Nanos,
    /// The configuration the algorithm was built from.
    config: AlgorithmConfig,
    algorithm: AnyAlgorithm,
    /// A fingerprint of its rule's name and its own (the tier's identity by name, for a
    /// store that keys per-process state by it: the leased store).
    names: u64,
    /// The shape of a table for its capacity (validated when compiled).
    geometry: Geometry,
    /// Whether a table for it keeps the debts of keys evicted under pressure (its rule's
    /// laundering guard).
    launder_guard: bool,
}

impl Tier {
    /// Validates `config` (found at `path`, e.g. `rules[2].tiers[0]`) into a tier with fresh
    /// state for up to `capacity` keys, keeping evicted debts if `guard` (the rule's
    /// laundering guard). `default_name` is used when the tier has none; `rule` describes
    /// the rule it belongs to (id, name, whether shared) for its label.
    pub(crate) fn compile(
        config: &TierConfig,
        path: &str,
        default_name: &str,
        capacity: usize,
        guard: bool,
        rule: (RuleId, &str, bool),
    ) -> Result<Tier, PolicyConfigError> {
        let field = |name: &str| format!("{path}.{name}");
        let name = match &config.name {
            Some(name) => {
                check_name(name).map_err(|m| PolicyConfigError::new(field("name"), m))?;
                name.as_str()
            }
            None => default_name,
        };
        if config.limit == 0 {
            return Err(PolicyConfigError::new(field("limit"), "must be > 0"));
        }
        if config.window.trim().is_empty() {
            return Err(PolicyConfigError::new(
                field("window"),
                "missing (write e.g. \"1s\", \"1m\", \"1d\")",
            ));
        }
        let window = parse_duration(&config.window)
            .map_err(|e| PolicyConfigError::new(field("window"), e.to_string()))?;
        if window == Nanos::ZERO {
            return Err(PolicyConfigError::new(field("window"), "must be > 0"));
        }
        let kind = config.algorithm;
        let uses_burst = match kind {
            AlgorithmKind::Gcra | AlgorithmKind::TokenBucket => true,
            AlgorithmKind::LeakyBucket
            | AlgorithmKind::FixedWindow
            | AlgorithmKind::SlidingWindowCounter
            | AlgorithmKind::SlidingWindowLog => false,
        };
        if config.burst.is_some() && !uses_burst {
            return Err(PolicyConfigError::new(
                field("burst"),
                format!("not used by {} (only gcra and token_bucket)", kind.as_str()),
            ));
        }
        if config.queue.is_some() && kind != AlgorithmKind::LeakyBucket {
            return Err(PolicyConfigError::new(
                field("queue"),
                format!("not used by {} (only leaky_bucket)", kind.as_str()),
            ));
        }
        if kind == AlgorithmKind::SlidingWindowLog && config.limit > MAX_LOG_LIMIT {
            return Err(PolicyConfigError::new(
                field("limit"),
                format!(
                    "sliding_window_log keeps one timestamp per permit: at most {MAX_LOG_LIMIT}"
                ),
            ));
        }
        let limit = config.limit;
        let algorithm_config = match kind {
            AlgorithmKind::Gcra => AlgorithmConfig::Gcra {
                limit,
                period: window,
                burst: config.burst.unwrap_or(limit),
            },
            AlgorithmKind::TokenBucket => AlgorithmConfig::TokenBucket {
                capacity: config.burst.unwrap_or(limit),
                refill_amount: limit,
                refill_period: window,
            },
            AlgorithmKind::LeakyBucket => AlgorithmConfig::LeakyBucket {
                amount: limit,
                period: window,
                queue: config.queue.unwrap_or(limit - 1),
            },
            AlgorithmKind::FixedWindow => AlgorithmConfig::FixedWindow { limit, window },
            AlgorithmKind::SlidingWindowCounter => {
                AlgorithmConfig::SlidingWindowCounter { limit, window }
            }
            AlgorithmKind::SlidingWindowLog => AlgorithmConfig::SlidingWindowLog { limit, window },
        };
        let algorithm = algorithm_config
            .build()
            .map_err(|e| config_error(e, config, kind, &field))?;
        let max_cost = match algorithm {
            AnyAlgorithm::Log(_) => algorithm.max_cost().min(u64::from(MAX_LOG_COST)),
            AnyAlgorithm::Packed(_) => algorithm.max_cost(),
        };
        let (rule, rule_name, shared) = rule;
        let (quota, quota_window) = advertised(limit, window, algorithm.limit());
        let geometry = Geometry::new(capacity, None)
            .map_err(|e| PolicyConfigError::new("capacity", e.to_string()))?;
        Ok(Tier {
            names: super::store::fingerprint(rule_name)
                ^ super::store::fingerprint(name).rotate_left(32),
            kind,
            quota: limit,
            window,
            config: algorithm_config,
            algorithm,
            max_cost,
            label: TierLabel {
                rule,
                rule_name: rule_name.to_owned().into(),
                name: name.to_owned().into(),
                quota,
                window: quota_window,
                shared,
            },
            geometry,
            launder_guard: guard,
            state: StateId::fresh(),
        })
    }

    /// Takes `old`'s keyed state as its own if it can run on it unchanged (the same
    /// algorithm and parameters, capacity and laundering guard: a reload that keeps the
    /// tier); whether it did. Otherwise its state is its own, which a store fills by
    /// converting `old`'s as keys are touched.
    pub(crate) fn adopt(&mut self, old: &Tier) -> bool {
        let same = self.algorithm == old.algorithm
            && self.geometry == old.geometry
            && self.launder_guard == old.launder_guard;
        if same {
            self.state = Arc::clone(&old.state);
        }
        same
    }

    /// Whether it is checked against the same keyed state as `other`.
    pub(crate) fn shares_state(&self, other: &Tier) -> bool {
        Arc::ptr_eq(&self.state, &other.state)
    }

    /// The identity of its keyed state.
    #[inline]
    pub(crate) fn state(&self) -> &Arc<StateId> {
        &self.state
    }

    /// The shape of a table for its capacity.
    pub(crate) fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// Whether a table for it keeps the debts of keys evicted under pressure.
    pub(crate) fn launder_guard(&self) -> bool {
        self.launder_guard
    }

    /// The name headers and metrics use for this tier.
    pub fn name(&self) -> &str {
        &self.label.name
    }

    /// What headers and metrics say about this tier (its rule, names, quota and window).
    #[inline]
    pub fn label(&self) -> &TierLabel {
        &self.label
    }

    /// The tier's identity by its rule's name and its own: a fingerprint (seeded per
    /// process) that a store keeping per-process state per tier can key it by, the same
    /// across reloads that keep both names (the leased store's leases).
    #[inline]
    pub fn names(&self) -> u64 {
        self.names
    }

    /// Gives the tier's label the rule id `rule` (a policy numbers rules by name).
    pub(crate) fn relabel(&mut self, rule: RuleId) {
        self.label.rule = rule;
    }

    /// The configured algorithm.
    pub fn kind(&self) -> AlgorithmKind {
        self.kind
    }

    /// The configured limit per window (`limit`). What headers advertise is its label's
    /// [`quota`](TierLabel::quota), which differs for a burst or queue of another size.
    pub fn quota(&self) -> u64 {
        self.quota
    }

    /// The configured window (`window`).
    pub fn window(&self) -> Nanos {
        self.window
    }

    /// The executable algorithm.
    pub fn algorithm(&self) -> &AnyAlgorithm {
        &self.algorithm
    }

    /// A stable version of this tier's algorithm and parameters
    /// ([`AnyAlgorithm::version`]): a store tags the states it keeps with it, so a state
    /// written under other parameters (a reload, another process in a rolling deploy) is
    /// converted, not misread.
    pub fn version(&self) -> u64 {
        self.algorithm.version()
    }

    /// The configuration its algorithm was built from (what a store scales for a share of
    /// the limit, e.g. a fallback while the shared store is down).
    pub fn config(&self) -> &AlgorithmConfig {
        &self.config
    }

    /// The largest cost one request can have under this tier.
    pub fn max_cost(&self) -> u64 {
        self.max_cost
    }

    /// The most keys this tier keeps state for (its memory bound in the in-process store:
    /// see [`InProcess::memory_bytes`](super::InProcess::memory_bytes)).
    pub fn capacity(&self) -> usize {
        self.geometry.capacity
    }
}

/// The core's refusal of a tier's numbers, blamed on the field that holds the number the
/// error is about (the typed error kept in [`PolicyConfigError::config`]).
fn config_error(
    e: ConfigError,
    config: &TierConfig,
    kind: AlgorithmKind,
    field: &dyn Fn(&str) -> String,
) -> PolicyConfigError {
    let (blamed, message) = match e {
        // A token bucket's capacity is its burst.
        ConfigError::ZeroLimit if config.burst == Some(0) => ("burst", "must be > 0".to_owned()),
        ConfigError::ZeroLimit => ("limit", "must be > 0".to_owned()),
        ConfigError::ZeroBurst => ("burst", "must be > 0".to_owned()),
        ConfigError::ZeroPeriod => ("window", "must be > 0".to_owned()),
        ConfigError::RateTooFine => (
            "window",
            "too short for the limit: more than one permit per nanosecond".to_owned(),
        ),
        ConfigError::PeriodTooLong { max } => (
            "window",
            format!(
                "too long for {} per window: at most {} ns ({} days) per permit",
                config.limit,
                max.as_u64(),
                max.as_u64() / 86_400_000_000_000
            ),
        ),
        // Each bucket's maximum is the count at this window's interval: the burst
        // (capacity) of GCRA and the token bucket, the queue of the leaky bucket, also
        // when it is the default.
        ConfigError::LimitTooLarge { max } => match kind {
            AlgorithmKind::Gcra | AlgorithmKind::TokenBucket => match config.burst {
                Some(_) => ("burst", format!("too large for this window: at most {max}")),
                None => (
                    "burst",
                    format!(
                        "too large for this window (default: the limit, {}): at most {max}",
                        config.limit
                    ),
                ),
            },
            AlgorithmKind::LeakyBucket => match config.queue {
                Some(_) => ("queue", format!("too large for this window: at most {max}")),
                None => (
                    "queue",
                    format!(
                        "too large for this window (default: limit - 1, {}): at most {max}",
                        config.limit - 1
                    ),
                ),
            },
            AlgorithmKind::FixedWindow
            | AlgorithmKind::SlidingWindowCounter
            | AlgorithmKind::SlidingWindowLog => {
                ("limit", format!("too large for this window: at most {max}"))
            }
        },
        other => ("limit", other.to_string()),
    };
    PolicyConfigError::from_config(field(blamed), message, e)
}

/// Names appear in headers as structured-field strings: printable ASCII only.
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if let Some(bad) = name.chars().find(|c| !(' '..='~').contains(c)) {
        return Err(format!(
            "{bad:?} is not allowed: names appear in headers (printable ASCII only)"
        ));
    }
    Ok(())
}

/// What a tier advertises (`q` and `w` of `RateLimit-Policy`, the quota and window of a 429
/// body and of metrics): `q` is `capacity`, the most it admits at once, which `remaining`
/// counts down from (the burst of GCRA and the token bucket, the queue plus the request in
/// service of the leaky bucket, the limit of the windows); `w` is the time the tier takes to
/// restore `q` at its configured rate of `limit` per `window`: `q × window / limit`,
/// rounded up (the window itself when `q` is the limit). So `r ≤ q` in every `RateLimit`
/// item, and `q / w` is the configured rate: `limit = 5, window = "1m", burst = 10`
/// advertises `q=10;w=120`.
fn advertised(limit: u64, window: Nanos, capacity: u64) -> (u64, Nanos) {
    if capacity == limit || limit == 0 {
        return (capacity, window);
    }
    let ns = (u128::from(window.as_u64()) * u128::from(capacity)).div_ceil(u128::from(limit));
    (capacity, Nanos::new(u64::try_from(ns).unwrap_or(u64::MAX)))
}
