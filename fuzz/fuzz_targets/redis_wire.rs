//! The Redis backend's pure wire format, without a server (`tollgate::redis`):
//!
//! - `RedisRule::new` on arbitrary names and algorithm configs: a rule or a typed error;
//! - `RedisRule::encode` (the script arguments of one tier): `InsufficientCapacity` exactly
//!   when the cost exceeds `max_cost` (appending nothing), otherwise the script algorithm's
//!   name and its numbers, each lowercase hex as `prelude.lua`'s `arg` reads it (unpadded
//!   below 2^52, else 16 digits), equal to the core algorithm's parameters;
//!   the products computed on the client (`cost·T`, `T·queue`) are exact, never saturated;
//!   `LuaScript::for_rules` holds every transition the rules use;
//! - `decode_reply` (the runner's reply): a well-formed reply of arbitrary numbers decodes
//!   to exactly those decisions with each rule's limit; a reply of any other shape or
//!   content never panics, and what it decodes to keeps the decision contract's shape
//!   (limit, `retry_after ≥ 1` and no delay on a deny, none on an admit);
//! - `RedisDecision::combine` (the core's `Decision::combine`): all or nothing; the tightest
//!   tier is the admit with the fewest `remaining` (ties: the longer `reset_after`, then the
//!   first) or the deny with the longest `retry_after` (first on ties); `remaining` the
//!   fewest of any tier; the longest delay when admitted, none when denied;
//! - `RedisLimiter::redis_key_scoped`: `{prefix}:{rule}:{key}[:scope]` with the key as the
//!   Redis Cluster hash tag, the same tag (so the same slot) for every rule of one check,
//!   and distinct keys for distinct (rule, key, scope) when scopes hold no `}`.
//!
//! (A scope holding `}` can make two identities share a Redis key: key `a}:s` with no scope
//! and key `a` with scope `s}` both map to `p:r:{a}:s}`; not asserted here.)
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use redis::Value;
use tollgate::redis::{
    decode_reply, DecisionSource, LuaScript, RedisConfig, RedisDecision, RedisLimiter, RedisRule,
    RedisTarget,
};
use tollgate::{Algorithm, AlgorithmConfig, AnyAlgorithm, Decision, Nanos, PackedAlgorithm};
use tollgate_fuzz::{Cost, Count, ReplyValue, Span};

#[derive(Arbitrary, Debug)]
enum Config {
    Gcra(Count, Span, Count),
    TokenBucket(Count, Count, Span),
    LeakyBucket(Count, Span, Count),
    FixedWindow(Count, Span),
    SlidingWindowCounter(Count, Span),
    SlidingWindowLog(Count, Span),
}

impl Config {
    fn get(&self) -> AlgorithmConfig {
        match *self {
            Config::Gcra(limit, period, burst) => AlgorithmConfig::Gcra {
                limit: limit.get(),
                period: period.get(),
                burst: burst.get(),
            },
            Config::TokenBucket(capacity, refill_amount, refill_period) => {
                AlgorithmConfig::TokenBucket {
                    capacity: capacity.get(),
                    refill_amount: refill_amount.get(),
                    refill_period: refill_period.get(),
                }
            }
            Config::LeakyBucket(amount, period, queue) => AlgorithmConfig::LeakyBucket {
                amount: amount.get(),
                period: period.get(),
                queue: queue.get(),
            },
            Config::FixedWindow(limit, window) => AlgorithmConfig::FixedWindow {
                limit: limit.get(),
                window: window.get(),
            },
            Config::SlidingWindowCounter(limit, window) => AlgorithmConfig::SlidingWindowCounter {
                limit: limit.get(),
                window: window.get(),
            },
            Config::SlidingWindowLog(limit, window) => AlgorithmConfig::SlidingWindowLog {
                limit: limit.get(),
                window: window.get(),
            },
        }
    }
}

/// A rule or key-prefix name: mostly valid, sometimes anything.
#[derive(Arbitrary, Debug)]
enum Name {
    Numbered(u8),
    Any(String),
}

impl Name {
    fn get(&self) -> String {
        match self {
            Name::Numbered(n) => format!("r{n}"),
            Name::Any(s) => s.clone(),
        }
    }
}

/// One tier's numbers as the runner reports them.
#[derive(Arbitrary, Debug, Clone, Copy)]
struct Reported {
    allowed: bool,
    remaining: u64,
    reset_after: u64,
    retry_after: u64,
    delay: u64,
}

#[derive(Arbitrary, Debug)]
enum Reply {
    /// The runner's shape with these numbers (one per rule, padded with `Reported`s of 0).
    WellFormed {
        all: i64,
        time: u64,
        tiers: Vec<Reported>,
    },
    /// Anything.
    Raw(ReplyValue),
}

#[derive(Arbitrary, Debug)]
struct Input {
    rules: Vec<(Name, Config)>,
    cost: Cost,
    prefix: Name,
    keys: [(String, String); 2],
    reply: Reply,
}

fn hex(v: u64) -> Value {
    Value::BulkString(format!("{v:016x}").into_bytes())
}

/// A 16-digit lowercase hex argument's value.
fn unhex(arg: &str) -> u64 {
    assert!(
        arg.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "not lowercase hex: {arg:?}"
    );
    let value = u64::from_str_radix(arg, 16).unwrap();
    // The scripts' `arg`: unpadded below 2^52 (at most 13 digits, no leading zero), else
    // exactly 16 digits.
    if value < 1 << 52 {
        assert_eq!(arg, format!("{value:x}"), "not unpadded hex: {arg:?}");
    } else {
        assert_eq!(arg.len(), 16, "not 16 hex digits: {arg:?}");
    }
    value
}

/// The arguments `encode` must append for `rule` and an admissible `cost`.
fn expected_args(rule: &RedisRule, cost: u32) -> (&'static str, Vec<u64>) {
    let cost64 = u64::from(cost);
    let gcra = |g: &tollgate::Gcra| {
        let t = g.emission_interval().as_u64();
        let cost_t = t.checked_mul(cost64).expect("cost·T overflows u64");
        assert!(cost_t <= g.tolerance().as_u64(), "cost·T above τ");
        ("gcra", vec![t, g.tolerance().as_u64(), cost_t, cost64])
    };
    match rule.algorithm() {
        AnyAlgorithm::Packed(PackedAlgorithm::Gcra(g)) => gcra(g),
        AnyAlgorithm::Packed(PackedAlgorithm::TokenBucket(t)) => gcra(t.as_gcra()),
        AnyAlgorithm::Packed(PackedAlgorithm::LeakyBucket(l)) => {
            let t = l.drain_interval().as_u64();
            let horizon = t.checked_mul(l.queue_depth()).expect("T·queue overflows");
            let drain = t.checked_mul(cost64).expect("T·cost overflows");
            ("leaky", vec![t, horizon, drain, cost64])
        }
        AnyAlgorithm::Packed(PackedAlgorithm::FixedWindow(w)) => {
            ("fixed", vec![w.window().as_u64(), w.limit(), cost64])
        }
        AnyAlgorithm::Packed(PackedAlgorithm::SlidingWindowCounter(w)) => {
            ("swc", vec![w.window().as_u64(), w.limit(), cost64])
        }
        AnyAlgorithm::Log(log) => ("log", vec![log.window().as_u64(), log.limit(), cost64]),
    }
}

fn check_encode(rule: &RedisRule, cost: u32) {
    let mut args = vec!["before".to_owned()];
    match rule.encode(cost, &mut args) {
        Err(e) => {
            assert!(
                u64::from(cost) > rule.max_cost(),
                "refused an admissible cost"
            );
            assert_eq!(e.max_cost, rule.max_cost());
            assert_eq!(args, ["before"], "a refused cost appended arguments");
        }
        Ok(()) => {
            assert!(
                u64::from(cost) <= rule.max_cost(),
                "encoded an inadmissible cost"
            );
            let (name, numbers) = expected_args(rule, cost);
            assert_eq!(args[1], name);
            assert_eq!(args.len(), 2 + numbers.len(), "argument count: {args:?}");
            for (i, (arg, want)) in args[2..].iter().zip(&numbers).enumerate() {
                assert_eq!(unhex(arg), *want, "argument {i} of {name}: {args:?}");
            }
        }
    }
}

fn decision(limit: u64, r: Reported) -> Decision {
    if r.allowed {
        Decision::allow(limit, r.remaining, Nanos::new(r.reset_after))
            .with_delay(Nanos::new(r.delay))
    } else {
        Decision::deny(
            limit,
            r.remaining,
            Nanos::new(r.reset_after),
            Nanos::new(r.retry_after),
        )
    }
}

fn check_combine(tiers: &[Decision]) {
    let combined = RedisDecision::combine(tiers.to_vec(), DecisionSource::Redis);
    assert_eq!(combined.tiers, tiers);
    let Some(i) = combined.tier else {
        assert!(tiers.is_empty(), "no tier picked among {tiers:?}");
        assert_eq!(combined.decision, Decision::allow(0, 0, Nanos::ZERO));
        return;
    };
    let all = tiers.iter().all(|d| d.allowed);
    assert_eq!(combined.allowed(), all, "not all or nothing");
    let fewest = tiers.iter().map(|d| d.remaining).min().unwrap();
    let mut expected = tiers[i];
    expected.remaining = fewest;
    if all {
        let tightest = tiers
            .iter()
            .filter(|d| d.remaining == fewest)
            .map(|d| d.reset_after)
            .max()
            .unwrap();
        let first = tiers
            .iter()
            .position(|d| d.remaining == fewest && d.reset_after == tightest);
        assert_eq!(Some(i), first);
        expected.delay = tiers.iter().map(|d| d.delay).max().unwrap();
    } else {
        let longest = tiers
            .iter()
            .filter(|d| !d.allowed)
            .map(|d| d.retry_after)
            .max()
            .unwrap();
        let first = tiers
            .iter()
            .position(|d| !d.allowed && d.retry_after == longest);
        assert_eq!(Some(i), first);
        expected.delay = Nanos::ZERO;
    }
    assert_eq!(combined.decision, expected);
}

fn check_decode(rules: &[RedisRule], reply: &Reply) {
    match reply {
        Reply::WellFormed { all, time, tiers } => {
            let mut reported = tiers.clone();
            reported.resize(
                rules.len(),
                Reported {
                    allowed: false,
                    remaining: 0,
                    reset_after: 0,
                    retry_after: 0,
                    delay: 0,
                },
            );
            let mut items = vec![Value::Int(*all), hex(*time)];
            for r in &reported {
                items.extend([
                    Value::Int(i64::from(r.allowed)),
                    hex(r.remaining),
                    hex(r.reset_after),
                    hex(r.retry_after),
                    hex(r.delay),
                ]);
            }
            let decoded = decode_reply(rules, &Value::Array(items.clone()))
                .expect("a well-formed reply decodes");
            let want: Vec<Decision> = rules
                .iter()
                .zip(&reported)
                .map(|(rule, &r)| decision(rule.limit(), r))
                .collect();
            assert_eq!(decoded, want);
            check_combine(&decoded);
            // One field more or less is another shape.
            items.push(Value::Nil);
            assert_eq!(decode_reply(rules, &Value::Array(items.clone())), None);
            items.truncate(items.len() - 2);
            assert_eq!(decode_reply(rules, &Value::Array(items)), None);
        }
        Reply::Raw(value) => {
            if let Some(decoded) = decode_reply(rules, &value.to_value(4)) {
                assert_eq!(decoded.len(), rules.len());
                for (d, rule) in decoded.iter().zip(rules) {
                    assert_eq!(d.limit, rule.limit());
                    if d.allowed {
                        assert_eq!(d.retry_after, Nanos::ZERO);
                    } else {
                        assert!(d.retry_after.as_u64() >= 1, "deny with retry_after 0");
                        assert_eq!(d.delay, Nanos::ZERO);
                    }
                }
                check_combine(&decoded);
            }
        }
    }
}

/// The Redis Cluster hash tag of `key`: what lies between its first `{` and the next `}`.
fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let len = key[open + 1..].find('}')?;
    Some(&key[open + 1..open + 1 + len])
}

fn check_keys(rules: &[RedisRule], prefix: &str, keys: &[(String, String); 2]) {
    let Ok(config) = RedisConfig::new(prefix) else {
        assert!(
            prefix.is_empty() || prefix.contains(['{', '}', ':']),
            "valid prefix {prefix:?} refused"
        );
        return;
    };
    let Ok(limiter) = RedisLimiter::new(
        RedisTarget::Single("redis://127.0.0.1:1".into()),
        rules.to_vec(),
        config,
    ) else {
        return; // no rules, or a duplicate name
    };
    assert_eq!(limiter.redis_key_scoped(rules.len(), "k", ""), None);
    let mut seen: Vec<(String, usize, &str, &str)> = Vec::new();
    for (key, scope) in keys {
        // What a check accepts as a key: non-empty, no `}` (the tag is the whole key).
        if key.is_empty() || key.contains('}') {
            continue;
        }
        let tag = key.as_str();
        for (i, rule) in rules.iter().enumerate() {
            let redis_key = limiter.redis_key_scoped(i, key, scope).unwrap();
            assert!(redis_key.starts_with(&format!("{prefix}:{}:{{", rule.name())));
            assert_eq!(
                hash_tag(&redis_key),
                Some(tag),
                "{redis_key:?}: not one slot"
            );
            assert_eq!(
                limiter.redis_key(i, key),
                limiter.redis_key_scoped(i, key, "")
            );
            // Any scope: with no `}` in keys, (rule, key, scope) names one Redis key.
            for (other, j, k, s) in &seen {
                if (*j, *k, *s) != (i, key.as_str(), scope.as_str()) {
                    assert_ne!(
                        other, &redis_key,
                        "rule {i} ({key:?}, {scope:?}) shares a key"
                    );
                }
            }
            seen.push((redis_key, i, key, scope));
        }
    }
}

fuzz_target!(|input: Input| {
    let cost = input.cost.get();
    let mut rules = Vec::new();
    for (name, config) in input.rules.iter().take(4) {
        let name = name.get();
        let config = config.get();
        match RedisRule::new(name.clone(), config) {
            Ok(rule) => {
                assert_eq!(rule.name(), name);
                assert_eq!(rule.config(), &config);
                assert_eq!(Ok(*rule.algorithm()), config.build());
                check_encode(&rule, cost);
                rules.push(rule);
            }
            Err(_) => assert!(
                name.is_empty()
                    || name.contains(['{', '}', ':'])
                    || config.build().is_err()
                    || matches!(config, AlgorithmConfig::SlidingWindowLog { limit, .. } if limit > tollgate::redis::MAX_LOG_LIMIT),
                "a valid rule refused: {name:?} {config:?}"
            ),
        }
    }
    if !rules.is_empty() {
        let script = LuaScript::for_rules(&rules);
        for rule in &rules {
            let mut args = Vec::new();
            if rule.encode(0, &mut args).is_ok() {
                assert!(script.body().contains(&format!("ALGOS['{}']", args[0])));
            }
        }
    }
    check_decode(&rules, &input.reply);
    check_keys(&rules, &input.prefix.get(), &input.keys);
});
