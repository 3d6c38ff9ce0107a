//! [`decode_reply`]: the per-tier decisions in the runner script's reply (pure; what the
//! `redis_wire` fuzz target drives).

use redis::Value;

use super::RedisRule;
use crate::{Decision, Nanos};

/// A 16-digit hex value of the reply (`tohex` in `prelude.lua`).
/// A reply field: an integer (a value below 2^53) or 16 hex digits (any `u64`).
fn parse_hex(value: &Value) -> Option<u64> {
    match value {
        Value::Int(i) => u64::try_from(*i).ok(),
        Value::BulkString(bytes) => u64::from_str_radix(std::str::from_utf8(bytes).ok()?, 16).ok(),
        Value::SimpleString(s) => u64::from_str_radix(s, 16).ok(),
        _ => None,
    }
}

/// Decodes the reply of the script [`LuaScript::for_rules`](super::LuaScript::for_rules)
/// builds for `rules`: `[all admitted, time used (ms, not read), then per rule: allowed, remaining,
/// reset_after, retry_after, delay]` (numbers as 16-digit hex strings). One decision per
/// rule, in rule order, each with that rule's `limit`; `None` for any other shape (which a
/// limiter treats as a server failure).
///
/// Only needed to run the script yourself (its arguments come from
/// [`RedisRule::encode`]); [`RedisLimiter`](super::RedisLimiter) does both.
///
/// ```
/// use redis::Value;
/// use tollgate::redis::{decode_reply, RedisRule};
/// use tollgate::{AlgorithmConfig, Decision, Nanos};
/// let rule = RedisRule::new(
///     "api",
///     AlgorithmConfig::FixedWindow { limit: 10, window: Nanos::from_secs(1) },
/// )?;
/// let hex = |v: u64| Value::BulkString(format!("{v:016x}").into_bytes());
/// let reply = Value::Array(vec![
///     Value::Int(1), hex(5_000_000_000), // admitted, at t = 5 s
///     Value::Int(1), hex(9), hex(1_000_000_000), hex(0), hex(0),
/// ]);
/// let decisions = decode_reply(std::slice::from_ref(&rule), &reply).unwrap();
/// assert_eq!(decisions, [Decision::allow(10, 9, Nanos::from_secs(1))]);
/// assert_eq!(decode_reply(&[rule], &Value::Nil), None);
/// # Ok::<(), tollgate::redis::BuildError>(())
/// ```
pub fn decode_reply(rules: &[RedisRule], reply: &Value) -> Option<Vec<Decision>> {
    let limits: Vec<u64> = rules.iter().map(RedisRule::limit).collect();
    decode_limits(&limits, reply)
}

/// The per-tier decisions of a runner reply for tiers of these `limits`, in order.
pub(crate) fn decode_limits(limits: &[u64], reply: &Value) -> Option<Vec<Decision>> {
    let Value::Array(items) = reply else {
        return None;
    };
    if items.len() != 2 + 5 * limits.len() {
        return None;
    }
    limits
        .iter()
        .zip(items[2..].chunks_exact(5))
        .map(|(&limit, f)| {
            let allowed = matches!(f[0], Value::Int(1));
            let remaining = parse_hex(&f[1])?;
            let reset_after = Nanos::new(parse_hex(&f[2])?);
            let retry_after = Nanos::new(parse_hex(&f[3])?);
            let delay = Nanos::new(parse_hex(&f[4])?);
            Some(if allowed {
                Decision::allow(limit, remaining, reset_after).with_delay(delay)
            } else {
                Decision::deny(limit, remaining, reset_after, retry_after)
            })
        })
        .collect()
}
