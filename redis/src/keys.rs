//! Redis key naming, in one place: the check of a key prefix, the key of a tier
//! (`{prefix}:{rule}:{tier}:{{client}}`, see [`RedisConfig::redis_key`]), its hash tag and
//! [`TierKey`], a tier's key owned.
//!
//! [`RedisConfig::redis_key`]: super::RedisConfig::redis_key

use std::fmt::Write as _;

use super::BuildError;
use tollgate::engine::hash::fnv1a;
use tollgate::policy::{Partition, PlannedTier};
use tollgate::AnyAlgorithm;

/// Checks a key prefix: non-empty, no hash-tag braces, no separator.
pub(super) fn validate_name(name: &str) -> Result<(), BuildError> {
    if name.is_empty() || name.contains(['{', '}', ':']) {
        Err(BuildError::InvalidName(name.to_owned()))
    } else {
        Ok(())
    }
}

/// Appends `name` with `%`, `:`, `{` and `}` escaped, so key parts cannot run together.
fn push_escaped(key: &mut String, name: &str) {
    // The common case, a name with nothing to escape, in one copy.
    if !name.contains(['%', ':', '{', '}']) {
        key.push_str(name);
        return;
    }
    for c in name.chars() {
        match c {
            // Writing to a `String` cannot fail.
            '%' | ':' | '{' | '}' => {
                let _ = write!(key, "%{:02X}", c as u32);
            }
            c => key.push(c),
        }
    }
}

/// Appends the Redis key of `tier` of `rule` for `client` under `prefix` to `key` (see
/// [`RedisConfig::redis_key`](super::RedisConfig::redis_key)).
pub(super) fn push_key(
    key: &mut String,
    prefix: &str,
    rule: &str,
    tier: &str,
    client: Option<&str>,
) {
    key.push_str(prefix);
    key.push(':');
    push_escaped(key, rule);
    key.push(':');
    push_escaped(key, tier);
    key.push(':');
    match client {
        None => key.push_str("{@}"),
        // `@` is the global rules' tag: a client of that name is hashed, so it never shares
        // a key with the global state of a rule that a reload made per-client.
        Some(c) if !c.is_empty() && c != "@" && !c.contains(['{', '}']) => {
            key.push('{');
            key.push_str(c);
            key.push('}');
        }
        Some(c) => {
            // Writing to a `String` cannot fail.
            let _ = write!(key, "{{#{:016x}}}:", fnv1a(c.as_bytes()));
            key.push_str(c);
        }
    }
}

/// A tier key's parts, as [`parse_key`] reads them back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KeyParts {
    pub(crate) rule: String,
    pub(crate) tier: String,
    /// `None`: a global rule's key (`{@}`).
    pub(crate) client: Option<String>,
}

/// `name` with its `%XX` escapes undone: `None` unless every escape is one
/// [`push_escaped`] writes (`%25`, `%3A`, `%7B`, `%7D`) and nothing it escapes is left
/// raw.
fn unescape(name: &str) -> Option<String> {
    if name.contains([':', '{', '}']) {
        return None;
    }
    if !name.contains('%') {
        return Some(name.to_owned());
    }
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let code = rest.get(at + 1..at + 3)?;
        out.push(match code {
            "25" => '%',
            "3A" => ':',
            "7B" => '{',
            "7D" => '}',
            _ => return None,
        });
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Some(out)
}

/// The client part of a tier key (from its `{`), as [`push_key`] writes it: `Some(None)`
/// for a global rule's `{@}`, `None` if it is no such part.
fn parse_client(part: &str) -> Option<Option<String>> {
    if part == "{@}" {
        return Some(None);
    }
    // `{#` and 16 hex digits of the client's FNV-1a, `}:` and the client.
    if let (Some(hex), Some(client)) = (part.get(2..18), part.get(20..)) {
        if part.starts_with("{#")
            && part.get(18..20) == Some("}:")
            && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            let hashed = u64::from_str_radix(hex, 16).ok()? == fnv1a(client.as_bytes());
            let needed = client.is_empty() || client == "@" || client.contains(['{', '}']);
            return (hashed && needed).then(|| Some(client.to_owned()));
        }
    }
    let client = part.strip_prefix('{')?.strip_suffix('}')?;
    let tag = !client.is_empty() && client != "@" && !client.contains(['{', '}']);
    tag.then(|| Some(client.to_owned()))
}

/// The rule, tier and client of `key`, a tier key [`push_key`] wrote under `prefix`: its
/// inverse. `None` for any other key (another prefix, the fleet rules' keys, a key no
/// store writes).
pub(crate) fn parse_key(prefix: &str, key: &str) -> Option<KeyParts> {
    let rest = key.strip_prefix(prefix)?.strip_prefix(':')?;
    let mut parts = rest.splitn(3, ':');
    let (rule, tier, client) = (parts.next()?, parts.next()?, parts.next()?);
    // The client part is the rest from the first `{`: the rule and tier hold none.
    let client = match rest.find('{') {
        Some(at) if at == rule.len() + tier.len() + 2 => client,
        Some(_) | None => return None,
    };
    Some(KeyParts {
        rule: unescape(rule)?,
        tier: unescape(tier)?,
        client: parse_client(client)?,
    })
}

/// `MATCH` pattern of every key under `prefix`: `{prefix}:*`, the prefix's glob
/// characters escaped.
pub(crate) fn match_prefix(prefix: &str) -> String {
    let mut pattern = String::with_capacity(prefix.len() + 2);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push_str(":*");
    pattern
}

/// Appends the Redis key of planned tier `p` under `prefix` to `out`.
pub(super) fn push_tier_key(out: &mut String, prefix: &str, p: &PlannedTier<'_>) {
    let client = match p.rule.partition() {
        Partition::Global => None,
        Partition::Client => Some(p.client),
    };
    push_key(out, prefix, p.rule.name(), p.tier.name(), client);
}

/// FNV-1a of planned tier `p`'s hash tag: its client, or `@` for a global rule (what
/// groups calls for the retry backoff).
pub(super) fn tag_hash(p: &PlannedTier<'_>) -> u64 {
    match p.rule.partition() {
        Partition::Global => fnv1a(b"@"),
        Partition::Client => fnv1a(p.client.as_bytes()),
    }
}

/// The client part of the keys of `client` (`None`: of the global rules' keys), as
/// [`push_key`] writes it: what follows the first `{` (the prefix, rule and tier names
/// cannot hold one: it is escaped). See [`key_tag`].
pub(super) fn client_tag(client: Option<&str>) -> String {
    let mut tag = String::with_capacity(64);
    push_key(&mut tag, "", "", "", client);
    tag.split_off(tag.find('{').unwrap_or(0))
}

/// The client part of a Redis key: from its first `{` (see [`push_key`]).
pub(super) fn key_tag(key: &str) -> Option<&str> {
    key.find('{').map(|i| &key[i..])
}

/// One tier of one key, owned (what a lease of [`LeasedStore`](super::LeasedStore) names
/// after the request that made the key hot is gone): its Redis key, backoff group and
/// algorithm.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct TierKey {
    /// The Redis key ([`push_tier_key`]).
    pub(super) key: String,
    /// FNV-1a of its hash tag ([`tag_hash`]).
    pub(super) tag: u64,
    pub(super) algorithm: AnyAlgorithm,
}

impl TierKey {
    /// Planned tier `p` of its key under `prefix`.
    pub(super) fn of(prefix: &str, p: &PlannedTier<'_>) -> TierKey {
        let mut key = String::with_capacity(64);
        push_tier_key(&mut key, prefix, p);
        TierKey {
            key,
            tag: tag_hash(p),
            algorithm: *p.tier.algorithm(),
        }
    }
}

/// The hash tag of the fleet rules' keys. A tier key's rule part has its `{` escaped, so
/// `{prefix}:{#rules}…` is never a tier's key; both keys of one prefix share a slot.
const RULES_TAG: &str = "{#rules}";

/// The key of the fleet rules document under `prefix` (a hash: `version`, `rules`,
/// `published_ms`), also the name of the channel its versions are announced on.
pub(super) fn rules_key(prefix: &str) -> String {
    format!("{prefix}:{RULES_TAG}")
}

/// The key of the versions the processes following `prefix`'s fleet rules run (a hash:
/// process → `version unix_ms`).
pub(super) fn running_key(prefix: &str) -> String {
    format!("{prefix}:{RULES_TAG}:running")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Any name, with the characters the key escapes or tags with over-represented.
    fn name() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![
                Just('%'),
                Just(':'),
                Just('{'),
                Just('}'),
                Just('@'),
                Just('#'),
                any::<char>(),
                proptest::char::range('a', 'f'),
            ],
            0..12,
        )
        .prop_map(|chars| chars.into_iter().collect())
    }

    proptest! {
        /// `parse_key` reads back exactly what `push_key` wrote, for every rule, tier and
        /// client (global too), and nothing under another prefix.
        #[test]
        fn parse_key_inverts_push_key(
            rule in name(),
            tier in name(),
            client in proptest::option::of(name()),
        ) {
            let mut key = String::new();
            push_key(&mut key, "api", &rule, &tier, client.as_deref());
            let parts = parse_key("api", &key);
            prop_assert_eq!(parts, Some(KeyParts { rule, tier, client }));
            prop_assert_eq!(parse_key("ap", &key), None);
            prop_assert_eq!(parse_key("apix", &key), None);
        }
    }

    /// Keys no tier is kept at are refused.
    #[test]
    fn other_keys_are_not_parsed() {
        for key in [
            "api:{#rules}",
            "api:{#rules}:running",
            "api:r:t",
            "api:r:t:alice",
            "api:r:t:{alice",
            "api:r:t:{}",
            "api:r%2:t:{a}",
            "api:r%41:t:{a}",
            "api:r:t:{#0000000000000000}:",
            "api:r:t:{#cbf29ce484222325}:a",
            "other:r:t:{a}",
        ] {
            assert_eq!(parse_key("api", key), None, "{key}");
        }
        assert_eq!(
            parse_key("api", "api:a%3Ab:t:{#cbf29ce484222325}:"),
            Some(KeyParts {
                rule: "a:b".into(),
                tier: "t".into(),
                client: Some(String::new())
            })
        );
        assert_eq!(match_prefix("a*b"), "a\\*b:*");
    }
}
