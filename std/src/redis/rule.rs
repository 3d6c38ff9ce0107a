//! [`RedisRule`]: one named limit (a tier) of a Redis limiter, and how its parameters and a
//! request's cost are encoded as script arguments.

use super::{BuildError, MAX_LOG_LIMIT};
use crate::{Algorithm, AlgorithmConfig, AnyAlgorithm, InsufficientCapacity, PackedAlgorithm};

/// A named, validated limit. Its Redis key for a client key `k` is
/// `{prefix}:{name}:{k}` with `k` in braces, so every rule of one check hashes to the same
/// Redis Cluster slot.
///
/// ```
/// use tollgate::redis::RedisRule;
/// use tollgate::{AlgorithmConfig, Nanos};
/// let per_second = RedisRule::new(
///     "per_second",
///     AlgorithmConfig::Gcra { limit: 10, period: Nanos::from_secs(1), burst: 20 },
/// )?;
/// assert_eq!(per_second.name(), "per_second");
/// assert_eq!(per_second.limit(), 20);
/// # Ok::<(), tollgate::redis::BuildError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisRule {
    name: String,
    config: AlgorithmConfig,
    algorithm: AnyAlgorithm,
}

/// Checks a rule name or key prefix: non-empty, no hash-tag braces, no separator.
pub(crate) fn validate_name(name: &str) -> Result<(), BuildError> {
    if name.is_empty() || name.contains(['{', '}', ':']) {
        Err(BuildError::InvalidName(name.to_owned()))
    } else {
        Ok(())
    }
}

/// An algorithm argument as the scripts' `arg` reads it (prelude.lua): below 2^52, hex
/// without padding (at most 13 digits: one `tonumber(s, 16)`, exact in a Lua double, and
/// cheaper there than a decimal), else 16 hex digits.
pub(crate) fn arg(value: u64) -> String {
    if value < 1 << 52 {
        format!("{value:x}")
    } else {
        format!("{value:016x}")
    }
}

impl RedisRule {
    /// Validates `config` (as the core does) and the name.
    pub fn new(name: impl Into<String>, config: AlgorithmConfig) -> Result<RedisRule, BuildError> {
        let name = name.into();
        validate_name(&name)?;
        let algorithm = config.build()?;
        if let AnyAlgorithm::Log(log) = algorithm {
            if log.limit() > MAX_LOG_LIMIT {
                return Err(BuildError::LogTooLarge { max: MAX_LOG_LIMIT });
            }
        }
        Ok(RedisRule {
            name,
            config,
            algorithm,
        })
    }

    /// The rule's name (part of its Redis key).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The configuration it was built from.
    pub fn config(&self) -> &AlgorithmConfig {
        &self.config
    }

    /// The validated algorithm (what the in-process core would run).
    pub fn algorithm(&self) -> &AnyAlgorithm {
        &self.algorithm
    }

    /// The most cost-1 requests admissible at once (the decision's `limit`).
    pub fn limit(&self) -> u64 {
        self.algorithm.limit()
    }

    /// The largest cost one check can admit.
    pub fn max_cost(&self) -> u64 {
        self.algorithm.max_cost()
    }

    /// The name of the Lua transition that runs this rule.
    pub(crate) fn script_algorithm(&self) -> &'static str {
        script_algorithm(&self.algorithm)
    }

    /// Appends this tier's script arguments for a request of `cost`: the algorithm's name,
    /// its precomputed parameters and the cost-derived products (computed here in `u64`,
    /// checked, so the script only adds, compares and divides). Every number is hex: without
    /// padding below 2^52 (what one Lua `tonumber(s, 16)` reads exactly), else 16 digits.
    ///
    /// Only needed to run [`LuaScript`](super::LuaScript) yourself (its reply decodes with
    /// [`decode_reply`](super::decode_reply)); [`RedisLimiter`](super::RedisLimiter) does
    /// both.
    ///
    /// ```
    /// use tollgate::redis::RedisRule;
    /// use tollgate::{AlgorithmConfig, Nanos};
    /// let rule = RedisRule::new(
    ///     "api",
    ///     AlgorithmConfig::FixedWindow { limit: 10, window: Nanos::from_secs(1) },
    /// )?;
    /// let mut args = Vec::new();
    /// rule.encode(3, &mut args)?;
    /// assert_eq!(args, ["fixed", "3b9aca00", "a", "3"]);
    /// assert!(rule.encode(11, &mut args).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn encode(&self, cost: u32, args: &mut Vec<String>) -> Result<(), InsufficientCapacity> {
        let max_cost = self.max_cost();
        if u64::from(cost) > max_cost {
            return Err(InsufficientCapacity { max_cost });
        }
        encode_algorithm(&self.algorithm, cost, args);
        Ok(())
    }
}

/// The script's name for `algorithm`'s transition (the token bucket runs GCRA's).
pub(crate) fn script_algorithm(algorithm: &AnyAlgorithm) -> &'static str {
    match algorithm {
        AnyAlgorithm::Packed(PackedAlgorithm::Gcra(_) | PackedAlgorithm::TokenBucket(_)) => "gcra",
        AnyAlgorithm::Packed(PackedAlgorithm::LeakyBucket(_)) => "leaky",
        AnyAlgorithm::Packed(PackedAlgorithm::FixedWindow(_)) => "fixed",
        AnyAlgorithm::Packed(PackedAlgorithm::SlidingWindowCounter(_)) => "swc",
        AnyAlgorithm::Log(_) => "log",
    }
}

/// Appends the script name and arguments of `algorithm` for a request of `cost` (already
/// checked against its `max_cost`).
pub(crate) fn encode_algorithm(algorithm: &AnyAlgorithm, cost: u32, args: &mut Vec<String>) {
    let cost64 = u64::from(cost);
    args.push(script_algorithm(algorithm).to_owned());
    match algorithm {
        AnyAlgorithm::Packed(PackedAlgorithm::Gcra(g)) => encode_gcra(g, cost, args),
        AnyAlgorithm::Packed(PackedAlgorithm::TokenBucket(t)) => {
            encode_gcra(t.as_gcra(), cost, args)
        }
        AnyAlgorithm::Packed(PackedAlgorithm::LeakyBucket(l)) => {
            let interval = l.drain_interval().as_u64();
            // cost ≤ max_cost, which the core keeps within u64 ns of drain.
            let drain = interval.saturating_mul(cost64);
            args.push(arg(interval));
            args.push(arg(l.horizon().as_u64()));
            args.push(arg(drain));
            args.push(arg(cost64));
        }
        AnyAlgorithm::Packed(PackedAlgorithm::FixedWindow(w)) => {
            args.push(arg(w.window().as_u64()));
            args.push(arg(w.limit()));
            args.push(arg(cost64));
        }
        AnyAlgorithm::Packed(PackedAlgorithm::SlidingWindowCounter(w)) => {
            args.push(arg(w.window().as_u64()));
            args.push(arg(w.limit()));
            args.push(arg(cost64));
        }
        AnyAlgorithm::Log(log) => {
            args.push(arg(log.window().as_u64()));
            args.push(arg(log.limit()));
            args.push(arg(cost64));
        }
    }
}

fn encode_gcra(g: &crate::Gcra, cost: u32, args: &mut Vec<String>) {
    let interval = g.emission_interval().as_u64();
    args.push(arg(interval));
    args.push(arg(g.tolerance().as_u64()));
    // cost ≤ burst, so cost·T ≤ τ fits (checked by the core at construction).
    args.push(arg(interval.saturating_mul(u64::from(cost))));
    args.push(arg(u64::from(cost)));
}
