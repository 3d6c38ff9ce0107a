//! The server's rules: Envoy ratelimit's YAML descriptor trees, read as operators already
//! write them for the Go service (envoyproxy/ratelimit), compiled to a tollgate policy.
//!
//! [`Domains`] is the loaded config: every domain's descriptor tree ([`Domains::resolve`]
//! finds the [`Limit`] of a request descriptor) and the tollgate rules file
//! ([`Domains::rules_toml`]) that enforces the limits, one rule per limited descriptor.
//! A request descriptor is checked as tollgate's `Request { client: client_key(..),
//! endpoint: limit.endpoint, cost }` ([`client_key`]).
//!
//! # The format
//!
//! A file (or every `*.yaml` / `*.yml` of a directory, by name, hidden files skipped) holds
//! one domain:
//!
//! ```yaml
//! domain: messaging            # required, unique across files
//! descriptors:
//!   - key: message_type        # required
//!     value: marketing         # optional: absent or empty matches any value
//!     descriptors:             # the next entry of a request descriptor
//!       - key: to_number
//!         rate_limit:
//!           unit: day          # second, minute, hour, day, week, month (30 days),
//!           requests_per_unit: 5 # year (365 days), in any case
//!   - key: to_number
//!     rate_limit:
//!       name: per_number       # what other limits' `replaces` name
//!       replaces:
//!         - name: other_limit  # drop that limit from a request this one applies to
//!       unit: day
//!       requests_per_unit: 100
//!     shadow_mode: true        # denials are counted, reported as OK
//!   - key: internal
//!     rate_limit:
//!       unlimited: true        # OK, no state
//! ```
//!
//! A `value` may hold `*`s, each matching any run of characters (`files/*`, `/api/*/v1`).
//! `requests_per_unit: 0` denies every request (the Go README's blocklist).
//!
//! **Matching** ([`Domains::resolve`], the Go service's `GetLimit`): entry by entry from
//! the top, the node with the entry's key and exactly its value, else the first (in file
//! order) whose value pattern matches, else the node with the key and no value; no node
//! ends the walk. The limit is that of the node the last entry reaches, if it has one: a
//! request deeper than the tree, or one stopping above the limited node, gets none.
//!
//! **What the service applies** from a [`Limit`], as the Go service does
//! (`src/service/ratelimit.go`, `src/limiter/base_limiter.go`): `unlimited` is OK with
//! `limit_remaining` `u32::MAX`; `blocked` is over the limit for any cost > 0; a limit
//! with a `name` that any limit of the same request `replaces` is dropped ([`is_replaced`]):
//! OK, no current limit, not counted; `shadow_mode` turns the descriptor's OVER_LIMIT into
//! OK (so the overall code too) after counting it.
//!
//! # tollgate's additions
//!
//! In `rate_limit`, instead of `unit` and `requests_per_unit`, a tollgate tier:
//!
//! ```yaml
//! rate_limit:
//!   limit: 100
//!   window: 1m             # tollgate's durations: 1s, 1m, 1h 30m, 7d, ...
//!   algorithm: gcra        # gcra (default), token_bucket, fixed_window,
//!   burst: 20              # sliding_window_counter, sliding_window_log; burst: gcra, token_bucket
//! ```
//!
//! or several, all enforced (`name` is the tier's in headers):
//!
//! ```yaml
//! rate_limit:
//!   tiers:
//!     - { name: burst, limit: 10, window: 1s, algorithm: token_bucket }
//!     - { name: daily, limit: 10000, window: 1d, algorithm: sliding_window_counter }
//! ```
//!
//! One form per `rate_limit`; `name`, `replaces` and `shadow_mode` apply to all. Envoy's
//! `current_limit` for them: the first tier's limit per the unit exactly as long as its
//! window, none when no unit is.
//!
//! # The compiled rules
//!
//! Envoy's form is tollgate's `fixed_window` of `requests_per_unit` per the unit's length
//! (`1s` … `30d`, `365d`): tollgate's windows align to Unix time as the Go service's
//! `now / divider * divider` does, so both reset at the same instants. A limit's rule
//! selects its node's endpoint (`domain/key=value/key`, escaped, unique) with one state per
//! client key, or a single state (`per = "global"`) when only one request descriptor can
//! reach it (every level a literal value). Unlimited and blocked limits have no rule.
//! tollgate's verdict on the compiled rules is reported at the YAML field it came from
//! (`descriptors[0].rate_limit.limit: must be > 0`).
//!
//! # Refused at load
//!
//! Every error names the file, the domain and the field:
//! `rules.yaml: domain "mongo_cps": descriptors[0].descriptors[1].detailed_metric: not
//! supported by tollgate-server`. Refused: an unknown field; a missing or empty `domain`
//! or `key`; a domain already loaded (the Go service's `MERGE_DOMAIN_CONFIG` is not
//! supported); two descriptors of a level that join to the same `key_value`; a bad or
//! missing `unit`; a missing `requests_per_unit` (Go reads it as 0, denying everything);
//! `unlimited: true` with any limit field (Go refuses it with a valid unit and ignores the
//! rest); forms mixed; an empty `replaces` name or a limit's own; `shadow_mode: true`
//! without a `rate_limit` (Go ignores it); `quota_mode`, `detailed_metric`,
//! `value_to_metric` or `share_threshold` `true`, and a non-empty `metadata` (not
//! supported; `false` and empty are their defaults and accepted); a `*` in a key (Go
//! matches it as a pattern over `key_value`); YAML 1.1 booleans (`yes`, `on`), which YAML
//! 1.2 reads as strings; YAML merge keys (`<<`), which the Go service refuses too.
//!
//! One deliberate difference: the Go service joins key and value with `_` before looking
//! them up, so there a request `("a", "b_c")` also reaches `key: a_b, value: c` (or a
//! value-less `key: a_b_c`), and a value pattern also runs over the key. Here keys and
//! values are compared separately.

mod client;
mod compile;
mod error;
mod limit;
mod name;
mod pattern;
mod rate_limit;
mod summary;
mod tier;
mod tree;
mod unit;
mod walk;
mod yaml;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;

pub(crate) use client::client_key;
pub(crate) use error::ConfigError;
pub(crate) use limit::{is_replaced, Limit};
pub(crate) use unit::Unit;

use name::Names;
use tree::Tree;

/// Every domain's descriptor tree, compiled.
#[derive(Debug)]
pub(crate) struct Domains {
    /// The domains, in load order.
    domains: Vec<Domain>,
    /// Each domain's index in `domains`, by name.
    by_name: HashMap<Box<str>, usize>,
    /// Every limit, domain by domain, each domain's in file order.
    limits: Vec<Limit>,
    /// The compiled tollgate rules.
    rules: compile::Rules,
}

/// One domain.
#[derive(Debug)]
struct Domain {
    /// Its name.
    name: Box<str>,
    /// The file it came from.
    source: Box<str>,
    /// Its descriptors.
    tree: Tree,
    /// Its limits in [`Domains::limits`].
    limits: Range<usize>,
}

impl Domains {
    /// Loads a file, or every `*.yaml` / `*.yml` in a directory (Go's runtime dir), sorted
    /// by name; hidden files (`.name`) and subdirectories are skipped.
    pub(crate) fn load(path: &Path) -> Result<Domains, ConfigError> {
        let shown = path.display().to_string();
        let metadata = std::fs::metadata(path)
            .map_err(|e| ConfigError::new(&shown, format!("cannot read: {e}")))?;
        let mut files = Vec::new();
        if metadata.is_dir() {
            let entries = std::fs::read_dir(path)
                .map_err(|e| ConfigError::new(&shown, format!("cannot list: {e}")))?;
            for entry in entries {
                let entry =
                    entry.map_err(|e| ConfigError::new(&shown, format!("cannot list: {e}")))?;
                let file = entry.path();
                let name = entry.file_name();
                let name = name.to_string_lossy();
                let yaml = name.ends_with(".yaml") || name.ends_with(".yml");
                if !yaml || name.starts_with('.') || file.is_dir() {
                    continue;
                }
                files.push(file);
            }
            files.sort();
        } else {
            files.push(path.to_path_buf());
        }
        let mut docs = Vec::with_capacity(files.len());
        for file in files {
            let shown = file.display().to_string();
            let text = std::fs::read_to_string(&file)
                .map_err(|e| ConfigError::new(&shown, format!("cannot read: {e}")))?;
            docs.push((shown, text));
        }
        let docs: Vec<(&str, &str)> = docs.iter().map(|(s, t)| (s.as_str(), t.as_str())).collect();
        Domains::from_yaml(&docs)
    }

    /// From documents already read: (source name for errors, YAML text).
    pub(crate) fn from_yaml(docs: &[(&str, &str)]) -> Result<Domains, ConfigError> {
        let mut domains: Vec<Domain> = Vec::with_capacity(docs.len());
        let mut by_name: HashMap<Box<str>, usize> = HashMap::new();
        let mut limits = Vec::new();
        let mut names = Names::default();
        for (source, text) in docs {
            let file = yaml::parse(source, text)?;
            let name = walk::domain(source, &file)?;
            if let Some(earlier) = by_name.get(&name).and_then(|&i| domains.get(i)) {
                return Err(ConfigError::new(
                    source,
                    format!("already loaded from {}", earlier.source),
                )
                .in_domain(&name));
            }
            let first = limits.len();
            let mut sink = walk::Sink {
                limits: &mut limits,
                names: &mut names,
            };
            let tree = walk::descriptors(source, &name, domains.len(), file, &mut sink)?;
            by_name.insert(name.clone(), domains.len());
            domains.push(Domain {
                name,
                source: (*source).into(),
                tree,
                limits: first..limits.len(),
            });
        }
        let rules = compile::rules(&domains, &limits);
        compile::check(&rules, &domains, &limits)?;
        Ok(Domains {
            domains,
            by_name,
            limits,
            rules,
        })
    }

    /// The tollgate rules document (TOML, `tollgate::policy::Policy::from_toml` /
    /// `reload_toml` accept it): one `[[rules]]` per limited node with a rule, its
    /// `endpoint` the node's [`Limit::endpoint`].
    pub(crate) fn rules_toml(&self) -> &str {
        &self.rules.toml
    }

    /// The limit a request descriptor of `domain` gets (Go's `GetLimit`): `None` = no node
    /// with a limit matched (or no such domain).
    pub(crate) fn resolve(&self, domain: &str, entries: &[(&str, &str)]) -> Option<&Limit> {
        let domain = self.domains.get(*self.by_name.get(domain)?)?;
        self.limits.get(domain.tree.resolve(entries)?)
    }

    /// Domains and their descriptor count, for `GET /v1/rules`: a serializable view of the
    /// whole config (each domain's file, descriptor count and limits).
    pub(crate) fn summary(&self) -> impl serde::Serialize + '_ {
        summary::Summary::of(self)
    }

    /// Whether no domain is loaded (no file, or an empty directory).
    pub(crate) fn is_empty(&self) -> bool {
        self.domains.is_empty()
    }
}
