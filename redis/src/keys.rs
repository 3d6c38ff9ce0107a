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
