//! The per-tier decisions in the store script's reply: [`decode_into`] (pure, allocation
//! free; what the store runs), and `decode_reply`, its allocating form that the
//! `redis_wire` fuzz target drives (built only with `--cfg fuzzing`, which cargo-fuzz sets).

use redis::Value;

use tollgate::{Decision, Nanos};

/// A reply field: an integer (a value below 2^53) or 16 hex digits (any `u64`).
fn parse_hex(value: &Value) -> Option<u64> {
    match value {
        Value::Int(i) => u64::try_from(*i).ok(),
        Value::BulkString(bytes) => u64::from_str_radix(std::str::from_utf8(bytes).ok()?, 16).ok(),
        Value::SimpleString(s) => u64::from_str_radix(s, 16).ok(),
        _ => None,
    }
}

/// The wait field: `(allowed, wait)`, from an integer (its sign: `>= 0` an admit's delay,
/// `< 0` minus a deny's `retry_after`) or 16 hex digits (after `-` on a deny).
fn parse_wait(value: &Value) -> Option<(bool, u64)> {
    let text = match value {
        Value::Int(i) => return Some((*i >= 0, i.unsigned_abs())),
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok()?,
        Value::SimpleString(s) => s.as_str(),
        _ => return None,
    };
    let (allowed, digits) = match text.strip_prefix('-') {
        Some(digits) => (false, digits),
        None => (true, text),
    };
    // (from_str_radix would take a second sign)
    if digits.starts_with(['+', '-']) {
        return None;
    }
    Some((allowed, u64::from_str_radix(digits, 16).ok()?))
}

/// Decodes the reply of the store's script ([`LuaScript::for_store`](super::LuaScript::for_store))
/// to a check or peek of tiers with these `limits`: `[all admitted, then per tier:
/// remaining, reset_after, wait]`, where the wait tells both whether the tier admits and
/// how long to wait: the `delay` of an admit (`>= 0`), or minus the `retry_after` of a deny
/// (`<= -1`); a deny has no delay, an admit no `retry_after`. Each number an integer of
/// magnitude below 2^53, or 16 hex digits (the wait's after `-` on a deny). One decision
/// per tier, in order, each with its tier's `limit`; `None` for any other shape (which the
/// store treats as a server failure).
///
/// The fuzzing entry point of the reply decoder (`--cfg fuzzing`, which cargo-fuzz sets):
/// [`RedisStore`](super::RedisStore) decodes its replies itself, without allocating
/// ([`decode_into`]).
#[cfg(any(test, fuzzing))]
#[cfg_attr(not(fuzzing), allow(unreachable_pub))]
#[doc(hidden)]
pub fn decode_reply(limits: &[u64], reply: &Value) -> Option<Vec<Decision>> {
    let mut decisions = vec![Decision::allow(0, 0, Nanos::ZERO); limits.len()];
    decode_into(limits, reply, &mut decisions)?;
    Some(decisions)
}

/// Decodes a reply (see `decode_reply`) into `out` (its first `limits.len()` entries), without allocating:
/// `None` if the reply has another shape or `out` is shorter than `limits` (then `out` may
/// hold some decisions of the tiers before the malformed field).
pub(crate) fn decode_into(limits: &[u64], reply: &Value, out: &mut [Decision]) -> Option<()> {
    let Value::Array(items) = reply else {
        return None;
    };
    if items.len() != 1 + 3 * limits.len() || out.len() < limits.len() {
        return None;
    }
    for ((&limit, f), slot) in limits.iter().zip(items[1..].chunks_exact(3)).zip(out) {
        let remaining = parse_hex(&f[0])?;
        let reset_after = Nanos::new(parse_hex(&f[1])?);
        let (allowed, wait) = parse_wait(&f[2])?;
        let wait = Nanos::new(wait);
        *slot = if allowed {
            Decision::allow(limit, remaining, reset_after).with_delay(wait)
        } else {
            Decision::deny(limit, remaining, reset_after, wait)
        };
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An admit, a deny (retry in 5 ms) and a reply of another shape.
    #[test]
    fn replies_decode_to_one_decision_per_tier() {
        let hex = |v: u64| Value::BulkString(format!("{v:016x}").into_bytes());
        let reply = Value::Array(vec![
            Value::Int(1),
            Value::Int(9),
            hex(1_000_000_000),
            Value::Int(0),
        ]);
        assert_eq!(
            decode_reply(&[10], &reply).unwrap(),
            [Decision::allow(10, 9, Nanos::from_secs(1))]
        );
        let reply = Value::Array(vec![
            Value::Int(0),
            Value::Int(0),
            Value::Int(5_000_000),
            Value::Int(-5_000_000),
        ]);
        let denied = Decision::deny(10, 0, Nanos::from_millis(5), Nanos::from_millis(5));
        assert_eq!(decode_reply(&[10], &reply).unwrap(), [denied]);
        assert_eq!(decode_reply(&[10], &Value::Nil), None);
    }
}
