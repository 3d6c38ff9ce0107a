//! The Redis store's pure wire format, without a server (`tollgate-redis`):
//!
//! - `decode_reply` (the store script's reply to a check or peek): a well-formed reply of
//!   arbitrary numbers, each field an integer or 16 hex digits, decodes to exactly those
//!   decisions with each tier's limit; one field more or less is refused; a reply of any
//!   other shape or content never panics, and what it decodes to keeps the decision
//!   contract's shape (limit, `retry_after ≥ 1` and no delay on a deny, none on an admit);
//! - the core's `Decision::combine` on decoded tiers (the policy's one combine rule): all
//!   or nothing; the tightest tier is the admit with the fewest `remaining` (ties: the
//!   longer `reset_after`, then the first) or the deny with the longest `retry_after`
//!   (first on ties); `remaining` the fewest of any tier; the longest delay when admitted,
//!   none when denied;
//! - `RedisConfig::new` (a prefix or a typed error) and `RedisConfig::redis_key`:
//!   `{prefix}:{rule}:{tier}:{…}` with every tier of one client on one hash tag (so one
//!   Redis Cluster slot), `@` for global rules, and distinct keys for distinct
//!   (rule, tier, client) whatever the names hold.
//!
//! What the scripts are sent (each tier's encoded parameters) is checked end to end
//! against the core by the Redis tests, which need a server.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use redis::Value;
use tollgate_redis::{decode_reply, RedisConfig};
use tollgate::{Decision, Nanos};
use tollgate_fuzz::ReplyValue;

/// A rule, tier, client or prefix name: mostly plain, sometimes anything.
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

/// One tier's numbers as the script reports them, and how each field is written.
#[derive(Arbitrary, Debug, Clone, Copy)]
struct Reported {
    allowed: bool,
    remaining: u64,
    reset_after: u64,
    /// retry_after on a deny, delay on an admit
    wait: u64,
    /// Bit i: field i as 16 hex digits (else an integer, when it fits one).
    hex_fields: u8,
}

#[derive(Arbitrary, Debug)]
enum Reply {
    /// The script's shape with these numbers (one per tier, padded with zeros).
    WellFormed { all: i64, tiers: Vec<Reported> },
    /// Anything.
    Raw(ReplyValue),
}

#[derive(Arbitrary, Debug)]
struct Input {
    limits: Vec<u64>,
    reply: Reply,
    prefix: Name,
    /// (rule, tier) names.
    tiers: Vec<(Name, Name)>,
    /// Clients (`None`: a global rule's key).
    clients: Vec<Option<Name>>,
}

/// Field `v` as the script writes it: an integer below 2^53, else (or if asked) 16 hex
/// digits.
fn field(v: u64, as_hex: bool) -> Value {
    if !as_hex && v < 1 << 53 {
        Value::Int(v as i64)
    } else {
        Value::BulkString(format!("{v:016x}").into_bytes())
    }
}

/// The wait field as the script writes it: the delay of an admit, minus the retry_after of
/// a deny (a deny's retry_after is at least 1: `Decision::deny` makes 0 one), as an integer
/// below 2^53 in magnitude, else (or if asked) 16 hex digits, after `-` on a deny.
fn wait_field(allowed: bool, v: u64, as_hex: bool) -> Value {
    let v = if allowed { v } else { v.max(1) };
    if !as_hex && v < 1 << 53 {
        let v = v as i64;
        Value::Int(if allowed { v } else { -v })
    } else {
        let sign = if allowed { "" } else { "-" };
        Value::BulkString(format!("{sign}{v:016x}").into_bytes())
    }
}

fn decision(limit: u64, r: Reported) -> Decision {
    if r.allowed {
        Decision::allow(limit, r.remaining, Nanos::new(r.reset_after))
            .with_delay(Nanos::new(r.wait))
    } else {
        Decision::deny(
            limit,
            r.remaining,
            Nanos::new(r.reset_after),
            Nanos::new(r.wait),
        )
    }
}

fn check_combine(tiers: &[Decision]) {
    let Some((i, combined)) = Decision::combine(tiers.iter().copied()) else {
        assert!(tiers.is_empty(), "no tier picked among {tiers:?}");
        return;
    };
    let all = tiers.iter().all(|d| d.allowed);
    assert_eq!(combined.allowed, all, "not all or nothing");
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
    assert_eq!(combined, expected);
}

fn check_decode(limits: &[u64], reply: &Reply) {
    match reply {
        Reply::WellFormed { all, tiers } => {
            let mut reported = tiers.clone();
            reported.resize(
                limits.len(),
                Reported {
                    allowed: false,
                    remaining: 0,
                    reset_after: 0,
                    wait: 0,
                    hex_fields: 0,
                },
            );
            let mut items = vec![Value::Int(*all)];
            for r in &reported {
                let h = |i: u8| r.hex_fields & (1 << i) != 0;
                items.extend([
                    field(r.remaining, h(0)),
                    field(r.reset_after, h(1)),
                    wait_field(r.allowed, r.wait, h(2)),
                ]);
            }
            let decoded = decode_reply(limits, &Value::Array(items.clone()))
                .expect("a well-formed reply decodes");
            let want: Vec<Decision> = limits
                .iter()
                .zip(&reported)
                .map(|(&limit, &r)| decision(limit, r))
                .collect();
            assert_eq!(decoded, want);
            check_combine(&decoded);
            // One field more or less is another shape.
            items.push(Value::Nil);
            assert_eq!(decode_reply(limits, &Value::Array(items.clone())), None);
            items.truncate(items.len() - 2);
            assert_eq!(decode_reply(limits, &Value::Array(items)), None);
        }
        Reply::Raw(value) => {
            if let Some(decoded) = decode_reply(limits, &value.to_value(4)) {
                assert_eq!(decoded.len(), limits.len());
                for (d, &limit) in decoded.iter().zip(limits) {
                    assert_eq!(d.limit, limit);
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

fn check_keys(prefix: &str, tiers: &[(String, String)], clients: &[Option<String>]) {
    let Ok(config) = RedisConfig::new(prefix) else {
        assert!(
            prefix.is_empty() || prefix.contains(['{', '}', ':']),
            "valid prefix {prefix:?} refused"
        );
        return;
    };
    let mut seen: Vec<(String, &str, &str, Option<&str>)> = Vec::new();
    for client in clients {
        let client = client.as_deref();
        let mut tags = Vec::new();
        for (rule, tier) in tiers {
            let key = config.redis_key(rule, tier, client);
            assert!(key.starts_with(&format!("{prefix}:")), "{key:?}");
            let tag = hash_tag(&key).expect("every key has a hash tag");
            match client {
                None => assert_eq!(tag, "@"),
                Some(c) if !c.is_empty() && c != "@" && !c.contains(['{', '}']) => {
                    assert_eq!(tag, c)
                }
                Some(_) => assert!(tag.starts_with('#') && tag.len() == 17, "{tag:?}"),
            }
            tags.push(tag.to_owned());
            for (other, r, t, c) in &seen {
                if (*r, *t, *c) != (rule.as_str(), tier.as_str(), client) {
                    assert_ne!(
                        other, &key,
                        "({rule:?}, {tier:?}, {client:?}) shares a key with ({r:?}, {t:?}, {c:?})"
                    );
                }
            }
            seen.push((key, rule, tier, client));
        }
        tags.dedup();
        assert!(
            tags.len() <= 1,
            "one client's tiers on several slots: {tags:?}"
        );
    }
}

fuzz_target!(|input: Input| {
    let limits: Vec<u64> = input.limits.iter().take(8).copied().collect();
    check_decode(&limits, &input.reply);
    let tiers: Vec<(String, String)> = input
        .tiers
        .iter()
        .take(4)
        .map(|(rule, tier)| (rule.get(), tier.get()))
        .collect();
    let clients: Vec<Option<String>> = input
        .clients
        .iter()
        .take(4)
        .map(|c| c.as_ref().map(Name::get))
        .collect();
    check_keys(&input.prefix.get(), &tiers, &clients);
});
