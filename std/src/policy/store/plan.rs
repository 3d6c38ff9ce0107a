//! [`Plan`]: the tiers one request is checked against, each a [`PlannedTier`] (rule, tier,
//! key, cost), inline and bounded by [`MAX_TIERS`].

use std::fmt;

use arrayvec::ArrayVec;

use super::tier::Spot;
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
/// most [`MAX_TIERS`], kept inline (no allocation).
#[derive(Clone)]
pub struct Plan<'a> {
    /// The tiers, inline (an unused slot is never written nor read, so an empty plan costs
    /// no clearing).
    entries: ArrayVec<Entry<'a>, MAX_TIERS>,
}

/// One tier of a plan, and where the in-process store located its key's table slot when
/// the plan was made (so its check need not locate it again).
#[derive(Copy, Clone, Debug)]
pub(super) struct Entry<'a> {
    pub(super) tier: PlannedTier<'a>,
    /// In `tier.tier.store`'s own table (`None`: not located).
    pub(super) at: Option<Spot<'a>>,
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
            entries: ArrayVec::new_const(),
        }
    }

    /// Appends `tier`, not located; `false` if the plan is full (a store's plan of some of
    /// a plan's tiers: the leased store's plan of what it sends to Redis).
    #[inline]
    pub fn push(&mut self, tier: PlannedTier<'a>) -> bool {
        self.push_located(tier, None)
    }

    /// Appends `tier`, whose key lives at `at` in its store's table (as that store's
    /// `prefetch` answered); `false` if the plan is full.
    #[inline]
    pub(crate) fn push_located(&mut self, tier: PlannedTier<'a>, at: Option<Spot<'a>>) -> bool {
        // Checked first, so the push below writes the entry in place.
        if self.entries.is_full() {
            return false;
        }
        self.entries.push(Entry { tier, at });
        true
    }

    /// The filled entries.
    #[inline]
    pub(super) fn entries(&self) -> &[Entry<'a>] {
        &self.entries
    }

    /// How many tiers.
    #[inline]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no rule matched.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The tiers, in order.
    #[inline]
    pub fn iter(&self) -> PlanIter<'_, 'a> {
        PlanIter {
            entries: self.entries().iter(),
        }
    }

    /// Tier `i`.
    #[inline]
    pub fn get(&self, i: usize) -> Option<&PlannedTier<'a>> {
        self.entries().get(i).map(|e| &e.tier)
    }

    /// Tier `i`'s cost, to raise (a batch charging one key for two requests at once).
    #[inline]
    pub(crate) fn cost_mut(&mut self, i: usize) -> Option<&mut u32> {
        self.entries.get_mut(i).map(|e| &mut e.tier.cost)
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
    /// The plan's filled entries.
    entries: core::slice::Iter<'p, Entry<'a>>,
}

impl<'p, 'a> Iterator for PlanIter<'p, 'a> {
    type Item = &'p PlannedTier<'a>;

    #[inline]
    fn next(&mut self) -> Option<&'p PlannedTier<'a>> {
        self.entries.next().map(|e| &e.tier)
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.entries.size_hint()
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
        assert!(plan.push_located(planned(0), None));
        assert!(plan.push_located(planned(1), None));
        let copy = plan.clone();
        assert_eq!(copy.len(), 2);
        assert_eq!(copy.iter().map(|p| p.key).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(copy.get(1).map(|p| p.tier.name()), Some("b"));
        assert!(copy.get(2).is_none());
        assert_eq!(format!("{copy:?}").matches("PlannedTier").count(), 2);
        for i in 2..MAX_TIERS {
            assert!(plan.push_located(planned(i), None));
        }
        assert!(!plan.push_located(planned(MAX_TIERS), None));
        assert_eq!(plan.iter().len(), MAX_TIERS);
        assert_eq!(
            plan.iter().last().map(|p| p.key),
            Some(MAX_TIERS as u64 - 1)
        );
    }
}
