//! [`Plan`]: the tiers one request is checked against, each a [`PlannedTier`] (rule, tier,
//! key, cost), inline and bounded by [`MAX_TIERS`].

use std::fmt;

use arrayvec::ArrayVec;

use crate::policy::{Rule, Tier, MAX_TIERS};

/// One tier of a request's plan: everything a store needs to decide it.
#[derive(Copy, Clone, Debug)]
pub struct PlannedTier<'a> {
    /// The rule the tier belongs to.
    pub rule: &'a Rule,
    /// The tier: its name, algorithm and parameters.
    pub tier: &'a Tier,
    /// The 64-bit fingerprint of the key the tier's state is kept under (the client's, or
    /// the rule's one shared key for `per = "global"`).
    pub key: u64,
    /// The client the request came from, as given (a store that names its keys, such as
    /// Redis, builds them from it; a shared rule's key does not depend on it).
    pub client: &'a str,
    /// The permits the request charges this tier.
    pub cost: u32,
}

/// The tiers one request is checked against, in order (the global-slot rule's first): at
/// most [`MAX_TIERS`], kept inline (no allocation). A plain list: what a store keeps to
/// find a tier's state (the in-process store's tables) is the store's own.
#[derive(Clone)]
pub struct Plan<'a> {
    /// The tiers, inline (an unused slot is never written nor read, so an empty plan costs
    /// no clearing).
    tiers: ArrayVec<PlannedTier<'a>, MAX_TIERS>,
}

impl Default for Plan<'_> {
    fn default() -> Self {
        Plan::new()
    }
}

impl<'a> Plan<'a> {
    /// An empty plan.
    #[inline]
    pub fn new() -> Plan<'a> {
        Plan {
            tiers: ArrayVec::new_const(),
        }
    }

    /// Appends `tier`; `false` if the plan is full (a policy's plan never is: two rules of
    /// at most [`MAX_TIERS_PER_RULE`](crate::policy::MAX_TIERS_PER_RULE) tiers each; a
    /// store's plan of some of a plan's tiers, such as the leased store's plan of what it
    /// sends to Redis, is no longer than the plan).
    #[inline]
    pub fn push(&mut self, tier: PlannedTier<'a>) -> bool {
        // Checked first, so the push below writes the tier in place.
        if self.tiers.is_full() {
            return false;
        }
        self.tiers.push(tier);
        true
    }

    /// The tiers, as a slice.
    #[inline]
    pub(super) fn as_slice(&self) -> &[PlannedTier<'a>] {
        &self.tiers
    }

    /// How many tiers.
    #[inline]
    pub fn len(&self) -> usize {
        self.tiers.len()
    }

    /// Whether no rule matched.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.tiers.is_empty()
    }

    /// The tiers, in order.
    #[inline]
    pub fn iter(&self) -> PlanIter<'_, 'a> {
        PlanIter {
            tiers: self.tiers.iter(),
        }
    }

    /// Tier `i`.
    #[inline]
    pub fn get(&self, i: usize) -> Option<&PlannedTier<'a>> {
        self.tiers.get(i)
    }

    /// Tier `i`'s cost, to raise (a batch charging one key for two requests at once).
    #[inline]
    pub(crate) fn cost_mut(&mut self, i: usize) -> Option<&mut u32> {
        self.tiers.get_mut(i).map(|t| &mut t.cost)
    }
}

impl fmt::Debug for Plan<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// The iterator of [`Plan::iter`]: the tiers, in order.
#[derive(Clone, Debug)]
pub struct PlanIter<'p, 'a> {
    /// The plan's filled slots.
    tiers: core::slice::Iter<'p, PlannedTier<'a>>,
}

impl<'p, 'a> Iterator for PlanIter<'p, 'a> {
    type Item = &'p PlannedTier<'a>;

    #[inline]
    fn next(&mut self) -> Option<&'p PlannedTier<'a>> {
        self.tiers.next()
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.tiers.size_hint()
    }
}

impl ExactSizeIterator for PlanIter<'_, '_> {}

impl<'p, 'a> IntoIterator for &'p Plan<'a> {
    type Item = &'p PlannedTier<'a>;
    type IntoIter = PlanIter<'p, 'a>;

    #[inline]
    fn into_iter(self) -> PlanIter<'p, 'a> {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{PolicyConfig, RuleSet};

    /// A plan fills its slots in order, refuses past [`MAX_TIERS`], and (copied, iterated,
    /// formatted) reads only the slots it filled.
    #[test]
    fn a_plan_reads_only_the_tiers_pushed() {
        let set = RuleSet::compile(
            &PolicyConfig::from_toml(
                "[[rules]]\nname = \"d\"\n[[rules.tiers]]\nname = \"a\"\nlimit = 1\nwindow = \"1s\"\n[[rules.tiers]]\nname = \"b\"\nlimit = 2\nwindow = \"1s\"\n",
            )
            .unwrap(),
        )
        .unwrap();
        let rule = &set.rules()[0];
        let planned = |i: usize| PlannedTier {
            rule,
            tier: &rule.tiers()[i % 2],
            key: i as u64,
            client: "c",
            cost: 1,
        };
        let mut plan = Plan::new();
        assert!(plan.is_empty() && plan.iter().next().is_none() && plan.get(0).is_none());
        assert!(plan.push(planned(0)));
        assert!(plan.push(planned(1)));
        let copy = plan.clone();
        assert_eq!(copy.len(), 2);
        assert_eq!(copy.iter().map(|p| p.key).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(copy.get(1).map(|p| p.tier.name()), Some("b"));
        assert!(copy.get(2).is_none());
        assert_eq!(format!("{copy:?}").matches("PlannedTier").count(), 2);
        for i in 2..MAX_TIERS {
            assert!(plan.push(planned(i)));
        }
        assert!(!plan.push(planned(MAX_TIERS)));
        assert_eq!(plan.iter().len(), MAX_TIERS);
        assert_eq!(
            plan.iter().last().map(|p| p.key),
            Some(MAX_TIERS as u64 - 1)
        );
    }
}
