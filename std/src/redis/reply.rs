//! [`decode_reply`]: the per-tier decisions in the store script's reply (pure; what the
//! `redis_wire` fuzz target drives).

use redis::Value;

use crate::{Decision, Nanos};

/// A reply field: an integer (a value below 2^53) or 16 hex digits (any `u64`).
fn parse_hex(value: &Value) -> Option<u64> {
    match value {
        Value::Int(i) => u64::try_from(*i).ok(),
        Value::BulkString(bytes) => u64::from_str_radix(std::str::from_utf8(bytes).ok()?, 16).ok(),
        Value::SimpleString(s) => u64::from_str_radix(s, 16).ok(),
        _ => None,
    }
}

/// Decodes the reply of the store's script ([`LuaScript::for_store`](super::LuaScript::for_store))
/// to a check or peek of tiers with these `limits`: `[all admitted, then per tier: allowed,
/// remaining, reset_after, wait]`, where the wait is the `retry_after` of a deny and the
/// `delay` of an admit (a deny has no delay, an admit no `retry_after`); each number an
/// integer below 2^53, or 16 hex digits. One decision per tier, in order, each with its
/// tier's `limit`; `None` for any other shape (which the store treats as a server failure).
///
/// Only needed to run the script yourself; [`RedisStore`](super::RedisStore) does.
///
/// ```
/// use redis::Value;
/// use tollgate::redis::decode_reply;
/// use tollgate::{Decision, Nanos};
/// let hex = |v: u64| Value::BulkString(format!("{v:016x}").into_bytes());
/// let reply = Value::Array(vec![
///     Value::Int(1), // all admitted
///     Value::Int(1), Value::Int(9), hex(1_000_000_000), Value::Int(0),
/// ]);
/// let decisions = decode_reply(&[10], &reply).unwrap();
/// assert_eq!(decisions, [Decision::allow(10, 9, Nanos::from_secs(1))]);
/// assert_eq!(decode_reply(&[10], &Value::Nil), None);
/// ```
pub fn decode_reply(limits: &[u64], reply: &Value) -> Option<Vec<Decision>> {
    let Value::Array(items) = reply else {
        return None;
    };
    if items.len() != 1 + 4 * limits.len() {
        return None;
    }
    limits
        .iter()
        .zip(items[1..].chunks_exact(4))
        .map(|(&limit, f)| {
            let allowed = matches!(f[0], Value::Int(1));
            let remaining = parse_hex(&f[1])?;
            let reset_after = Nanos::new(parse_hex(&f[2])?);
            let wait = Nanos::new(parse_hex(&f[3])?);
            Some(if allowed {
                Decision::allow(limit, remaining, reset_after).with_delay(wait)
            } else {
                Decision::deny(limit, remaining, reset_after, wait)
            })
        })
        .collect()
}
