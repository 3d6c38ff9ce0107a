//! The walk over one file's descriptors: every check the Go service's loader makes
//! (`loadConfig`, `loadDescriptors`) and ours, building the domain's [`Tree`] and its
//! [`Limit`]s.

use std::collections::HashMap;

use super::error::Place;
use super::limit::Limit;
use super::name::{endpoint_segment, escape_segment, Names};
use super::rate_limit::{self, Enforcement};
use super::tree::{NodeId, Tree};
use super::yaml;
use super::ConfigError;

/// The domain a file is for: required, not empty.
pub(super) fn domain(source: &str, file: &yaml::File) -> Result<Box<str>, ConfigError> {
    match file.domain.as_deref() {
        Some(domain) if !domain.is_empty() => Ok(domain.into()),
        Some(_) | None => Err(ConfigError::new(source, "missing").at("domain")),
    }
}

/// What a walk adds to: the config's limits and rule names.
pub(super) struct Sink<'a> {
    /// Every limit so far; the walk appends its own.
    pub(super) limits: &'a mut Vec<Limit>,
    /// Every rule name so far.
    pub(super) names: &'a mut Names,
}

/// Where a level of the walk is.
struct Level<'a> {
    /// The parent node.
    node: NodeId,
    /// The YAML path of the parent (`descriptors[0].`, or empty at the top).
    path: &'a str,
    /// The Go service's key of the parent (`domain.key_value`).
    key: &'a str,
    /// The tollgate endpoint of the parent.
    endpoint: &'a str,
    /// Whether every level so far matches one value only (no pattern, no key-only node):
    /// then one request descriptor alone reaches the node.
    literal: bool,
}

/// One walk: a file's domain being built.
struct Walk<'a, 's> {
    place: Place<'a>,
    domain_index: usize,
    tree: Tree,
    sink: &'a mut Sink<'s>,
}

/// Walks the descriptors of `file`, whose domain (`domain`, the config's `domain_index`-th)
/// is already checked, into its tree; appends its limits to `sink`.
pub(super) fn descriptors(
    source: &str,
    domain: &str,
    domain_index: usize,
    file: yaml::File,
    sink: &mut Sink<'_>,
) -> Result<Tree, ConfigError> {
    let mut endpoint = String::new();
    escape_segment(domain, &mut endpoint);
    let mut walk = Walk {
        place: Place { source, domain },
        domain_index,
        tree: Tree::new(),
        sink,
    };
    let top = Level {
        node: Tree::ROOT,
        path: "",
        key: domain,
        endpoint: &endpoint,
        literal: true,
    };
    walk.level(&top, file.descriptors.unwrap_or_default())?;
    Ok(walk.tree)
}

impl Walk<'_, '_> {
    /// The descriptors of one level, under `parent`.
    fn level(
        &mut self,
        parent: &Level<'_>,
        descriptors: Vec<yaml::Descriptor>,
    ) -> Result<(), ConfigError> {
        // Go's map key of each node of the level: `key_value`, or `key` without a value.
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (i, descriptor) in descriptors.into_iter().enumerate() {
            let path = format!("{}descriptors[{i}]", parent.path);
            let error = |field: &str, message: String| {
                let at = if field.is_empty() {
                    path.clone()
                } else {
                    format!("{path}.{field}")
                };
                self.place.error(&at, message)
            };
            let key = match descriptor.key.as_deref() {
                Some(key) if !key.is_empty() => key,
                Some(_) | None => return Err(error("key", "missing".into())),
            };
            if key.contains('*') {
                return Err(error(
                    "key",
                    format!(
                        "{key:?}: a `*` in a key is not supported by tollgate-server (the Go \
                         service takes it as a pattern over key_value)"
                    ),
                ));
            }
            let value = descriptor.value.as_deref().filter(|v| !v.is_empty());
            let joined = match value {
                Some(value) => format!("{key}_{value}"),
                None => key.to_owned(),
            };
            if let Some(j) = seen.get(&joined) {
                return Err(error(
                    "",
                    format!(
                        "duplicate descriptor {joined:?}: {}descriptors[{j}] has the same \
                         key_value",
                        parent.path
                    ),
                ));
            }
            seen.insert(joined.clone(), i);
            for (field, set) in [
                ("quota_mode", descriptor.quota_mode),
                ("detailed_metric", descriptor.detailed_metric),
                ("value_to_metric", descriptor.value_to_metric),
                ("share_threshold", descriptor.share_threshold),
            ] {
                if set == Some(true) {
                    return Err(error(field, "not supported by tollgate-server".into()));
                }
            }
            let metadata_given = match &descriptor.metadata {
                None | Some(serde_norway::Value::Null) => false,
                Some(serde_norway::Value::Mapping(fields)) => !fields.is_empty(),
                Some(_) => true,
            };
            if metadata_given {
                return Err(error("metadata", "not supported by tollgate-server".into()));
            }
            let shadow_mode = descriptor.shadow_mode == Some(true);
            if shadow_mode && descriptor.rate_limit.is_none() {
                return Err(error(
                    "shadow_mode",
                    "applies to this descriptor's rate_limit, and it has none".into(),
                ));
            }

            let go_key = format!("{}.{joined}", parent.key);
            let mut endpoint = String::with_capacity(parent.endpoint.len() + joined.len() + 1);
            endpoint.push_str(parent.endpoint);
            endpoint.push('/');
            endpoint_segment(key, value, &mut endpoint);
            let literal = parent.literal && value.is_some_and(|v| !v.contains('*'));

            let limit = match descriptor.rate_limit {
                None => None,
                Some(raw) => {
                    let checked = rate_limit::check(raw, self.place, &path)?;
                    let name = self
                        .sink
                        .names
                        .claim(checked.name.as_deref().unwrap_or(&go_key));
                    let (tiers, current_limit, unlimited, blocked) = match checked.enforcement {
                        Enforcement::Unlimited => (Vec::new(), None, true, false),
                        Enforcement::Blocked(unit) => (Vec::new(), Some((0, unit)), false, true),
                        Enforcement::Tiers(tiers, current) => (tiers, current, false, false),
                    };
                    self.sink.limits.push(Limit {
                        endpoint: endpoint.as_str().into(),
                        name,
                        unlimited,
                        blocked,
                        shadow_mode,
                        replaces: checked.replaces,
                        envoy_name: checked.name,
                        current_limit,
                        tiers: tiers.into(),
                        shared: literal,
                        key: go_key.as_str().into(),
                        domain: self.domain_index,
                        path: path.as_str().into(),
                    });
                    Some(self.sink.limits.len() - 1)
                }
            };
            let node = self.tree.add(parent.node, key, value, limit);
            let children = descriptor.descriptors.unwrap_or_default();
            if !children.is_empty() {
                let below = Level {
                    node,
                    path: &format!("{path}."),
                    key: &go_key,
                    endpoint: &endpoint,
                    literal,
                };
                self.level(&below, children)?;
            }
        }
        Ok(())
    }
}
