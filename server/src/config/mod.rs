//! The server's rules: Envoy ratelimit's YAML descriptor trees, read as operators already
//! write them for the Go service (envoyproxy/ratelimit), compiled to a tollgate policy.
//!
//! [`Domains`] is the loaded config: every domain's descriptor tree ([`Domains::resolve`]
//! finds the [`Limit`] of a request descriptor) and the tollgate rules file
//! ([`Domains::rules_toml`]) that enforces the limits, one rule per limited descriptor.
//! A request descriptor is checked as tollgate's `Request { client: client_key(..),
//! endpoint: limit.endpoint, cost }` ([`client_key`]).
//!
//! The format, tollgate's additions, how a limit is enforced and what is refused at load
//! are the user's reference, `docs/server.md` ("The rules file"); its examples are this
//! module's tests.
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

pub(crate) use client::{client_key, parse_client_key};
pub(crate) use error::ConfigError;
pub(crate) use limit::{is_replaced, Limit};
pub(crate) use unit::Unit;

use name::Names;
use tree::Tree;

/// The line before each document of a published config (YAML's document marker).
const PUBLISHED_SEPARATOR: &str = "---\n";

/// The documents of the config at `path`: a file, or every `*.yaml` / `*.yml` of a
/// directory sorted by name (hidden files and subdirectories skipped), each with its path.
fn read(path: &Path) -> Result<Vec<(String, String)>, ConfigError> {
    let shown = path.display().to_string();
    let metadata = std::fs::metadata(path)
        .map_err(|e| ConfigError::new(&shown, format!("cannot read: {e}")))?;
    let mut files = Vec::new();
    if metadata.is_dir() {
        let entries = std::fs::read_dir(path)
            .map_err(|e| ConfigError::new(&shown, format!("cannot list: {e}")))?;
        for entry in entries {
            let entry = entry.map_err(|e| ConfigError::new(&shown, format!("cannot list: {e}")))?;
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
    Ok(docs)
}

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
        let docs = read(path)?;
        let docs: Vec<(&str, &str)> = docs.iter().map(|(s, t)| (s.as_str(), t.as_str())).collect();
        Domains::from_yaml(&docs)
    }

    /// The rules a fleet publishes: the documents of the config at `path` (as
    /// [`load`](Self::load) reads them) in one YAML stream, each after a `---` line; checked
    /// first, as `load` would (a config that does not load is an error naming its file).
    pub(crate) fn published(path: &Path) -> Result<String, ConfigError> {
        let docs = read(path)?;
        let named: Vec<(&str, &str)> = docs.iter().map(|(s, t)| (s.as_str(), t.as_str())).collect();
        Domains::from_yaml(&named)?;
        let mut text = String::new();
        for (_, doc) in &docs {
            text.push_str(PUBLISHED_SEPARATOR);
            text.push_str(doc);
            if !doc.ends_with('\n') {
                text.push('\n');
            }
        }
        Ok(text)
    }

    /// The domains of a published stream ([`published`](Self::published)): its documents
    /// split at each `---` line, those of blank lines and comments alone skipped; errors
    /// name the document by number.
    pub(crate) fn from_published(text: &str) -> Result<Domains, ConfigError> {
        let mut docs: Vec<(String, &str)> = Vec::new();
        let mut start = 0;
        let mut ends = Vec::new();
        let mut offset = 0;
        for line in text.split_inclusive('\n') {
            if line.trim_end() == PUBLISHED_SEPARATOR.trim_end() {
                ends.push((start, offset));
                start = offset + line.len();
            }
            offset += line.len();
        }
        ends.push((start, text.len()));
        for (from, to) in ends {
            let doc = &text[from..to];
            // Comments (or directives) alone are no document: a file's header above its own
            // `---` line.
            let content = doc.lines().any(|line| {
                let line = line.trim();
                !line.is_empty() && !line.starts_with('#') && !line.starts_with('%')
            });
            if content {
                docs.push((format!("published document {}", docs.len() + 1), doc));
            }
        }
        let docs: Vec<(&str, &str)> = docs.iter().map(|(s, t)| (s.as_str(), *t)).collect();
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

    /// The limit whose tollgate rule is named `rule`, if one is.
    pub(crate) fn limit_of_rule(&self, rule: &str) -> Option<&Limit> {
        self.limits
            .iter()
            .find(|limit| limit.has_rule() && &*limit.name == rule)
    }

    /// Whether no domain is loaded (no file, or an empty directory).
    pub(crate) fn is_empty(&self) -> bool {
        self.domains.is_empty()
    }
}
