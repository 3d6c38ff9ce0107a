//! [`Tree`]: one domain's descriptors, and the matching of a request descriptor against
//! them, as the Go service's `GetLimit` (`src/config/config_impl.go`) does it.
//!
//! Entry by entry from the top: at each level the node with the entry's key and exactly
//! its value, else the first (in file order) whose value pattern matches it, else the node
//! with the key and no value (any value); no such node ends the walk with no limit. The
//! limit is that of the node the *last* entry reaches, if it has one: a request deeper
//! than the tree, or shallower than the limited node, gets none.
//!
//! One deliberate difference: the Go service joins key and value with `_` before looking
//! them up (`key_value`), so a request `("a", "b_c")` also reaches a node `key: a_b,
//! value: c`, or one `key: a_b_c` with no value, and a value pattern also runs over the
//! key. Here key and value are compared separately. Files where two nodes of one level
//! join to the same `key_value` are refused, as the Go service refuses them.

use std::collections::HashMap;

use super::pattern::Pattern;

/// A node's index in its tree.
pub(super) type NodeId = usize;

/// One domain's descriptor tree. The root is the domain itself (it has no limit).
#[derive(Debug)]
pub(super) struct Tree {
    /// Every node; `nodes[0]` is the root.
    nodes: Vec<Node>,
}

/// One descriptor: its limit and the next level.
#[derive(Debug, Default)]
struct Node {
    /// Its limit's index in the config's limits.
    limit: Option<usize>,
    /// The next level, by key.
    children: HashMap<Box<str>, Keyed>,
}

/// The nodes of one level with one key.
#[derive(Debug, Default)]
struct Keyed {
    /// By value as written (a pattern too: a request whose value is the pattern's own
    /// text reaches it first, as Go's lookup of `key_value` does).
    exact: HashMap<Box<str>, NodeId>,
    /// The values with a `*`, in file order.
    patterns: Vec<(Pattern, NodeId)>,
    /// The node without a value.
    any: Option<NodeId>,
}

impl Tree {
    /// A tree with only its root.
    pub(super) fn new() -> Tree {
        Tree {
            nodes: vec![Node::default()],
        }
    }

    /// The root.
    pub(super) const ROOT: NodeId = 0;

    /// Adds a node under `parent` for `key` and `value` (`None`: any value) with the
    /// limit `limit`. The caller has refused duplicates.
    pub(super) fn add(
        &mut self,
        parent: NodeId,
        key: &str,
        value: Option<&str>,
        limit: Option<usize>,
    ) -> NodeId {
        let id = self.nodes.len();
        self.nodes.push(Node {
            limit,
            children: HashMap::new(),
        });
        if let Some(node) = self.nodes.get_mut(parent) {
            let keyed = node.children.entry(key.into()).or_default();
            match value {
                None => keyed.any = Some(id),
                Some(value) => {
                    keyed.exact.insert(value.into(), id);
                    if let Some(pattern) = Pattern::new(value) {
                        keyed.patterns.push((pattern, id));
                    }
                }
            }
        }
        id
    }

    /// The descriptors in the tree (the root not counted).
    pub(super) fn len(&self) -> usize {
        self.nodes.len() - 1
    }

    /// The limit (its index) a request descriptor of `entries` gets.
    pub(super) fn resolve(&self, entries: &[(&str, &str)]) -> Option<usize> {
        let mut at = self.nodes.first()?;
        if entries.is_empty() {
            return None;
        }
        for (key, value) in entries {
            let keyed = at.children.get(*key)?;
            let next = keyed
                .exact
                .get(*value)
                .copied()
                .or_else(|| {
                    keyed
                        .patterns
                        .iter()
                        .find(|(pattern, _)| pattern.matches(value))
                        .map(|(_, id)| *id)
                })
                .or(keyed.any)?;
            at = self.nodes.get(next)?;
        }
        at.limit
    }
}
