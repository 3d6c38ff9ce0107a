//! Stable rule ids: a policy numbers its rules by name, so a rule keeps its id across the
//! reloads that keep its name (what metrics and decisions index by).

use std::collections::HashMap;

use super::{PolicyConfigError, RuleId, RuleSet};

/// Stable rule ids by name: a rule keeps its id across reloads while its name stays in the
/// rules (metrics indexed by id keep meaning); a name that leaves is forgotten (a later rule
/// of that name gets a new id), so the registry holds the rules in force only.
#[derive(Debug, Default)]
pub(super) struct Registry {
    ids: HashMap<Box<str>, RuleId>,
    /// The id the next new name gets.
    next: u32,
}

/// Numbers `set`'s rules by name (a name in force keeps its id), then forgets the names
/// that left. Errors only after 2^32 distinct names (in one policy's lifetime), changing
/// nothing.
pub(super) fn assign_ids(
    registry: &mut Registry,
    set: &mut RuleSet,
) -> Result<(), PolicyConfigError> {
    let new = set
        .rules()
        .iter()
        .filter(|rule| !registry.ids.contains_key(rule.name()))
        .count();
    if u64::from(registry.next) + new as u64 > u64::from(u32::MAX) {
        return Err(PolicyConfigError::new(
            "rules",
            "this policy has numbered 2^32 distinct rule names: build a new policy",
        ));
    }
    let mut ids = HashMap::with_capacity(set.rules().len());
    for rule in set.rules_mut() {
        let id = match registry.ids.get(rule.name()) {
            Some(&id) => id,
            None => {
                let id = RuleId(registry.next);
                registry.next += 1;
                id
            }
        };
        ids.insert(Box::from(rule.name()), id);
        rule.set_id(id);
    }
    registry.ids = ids;
    Ok(())
}
