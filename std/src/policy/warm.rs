//! [`Warm`]: the cache lines a policy's check reads one after another, named ahead, so that
//! a check from a cold cache fetches them together.
//!
//! A check follows a chain: the policy, the published set, the rule the request matches,
//! its tier, the tier's state, the state's table, the key's bucket. Each is found through
//! the one before, so from a cold cache (a server that did other work since the last
//! request) each is a miss that waits for the last. The policy keeps, on a line of its own,
//! the addresses of the lines its last check read past the first few; a check starts by
//! asking the CPU to fetch them all, and the chain then finds them on its way.
//!
//! They are hints and nothing else. A prefetch never faults and changes nothing a program
//! observes, so an address that went stale (a reload replaced the set, the set was freed)
//! costs a wasted fetch and no more. They are taken again by the first check under a set
//! other than the one they were taken from, from that check's plan: its first tier's rule,
//! tier, state and table. Under loom they are not kept: nothing there to model.
//!
//! ```text
//!   Warm ─ of:          the set the hints were taken under
//!        ├ holds, mask: the node's holds (each thread fetches its own stripe)
//!        └ lines:       the set, the rule, the tier, the state's first slot, and the first
//!                       and last lines of the table's cells
//! ```

use super::published::Active;
#[cfg(not(tollgate_loom))]
use super::published::Holds;
use super::{Plan, RuleSet};
#[cfg(not(tollgate_loom))]
use crate::sync::{AtomicPtr, AtomicUsize, Ordering};

/// How many lines a [`Warm`] names besides the hold's.
#[cfg(not(tollgate_loom))]
const LINES: usize = 6;

/// The bytes of a cache line.
#[cfg(not(tollgate_loom))]
const LINE: usize = 64;

/// The lines a check reads past its first (see the module docs).
#[derive(Debug)]
#[repr(C, align(64))]
pub(super) struct Warm {
    /// The set the hints were taken under (null: none yet).
    #[cfg(not(tollgate_loom))]
    of: AtomicPtr<RuleSet>,
    /// The first hold of the set's node (null: none yet) and the stripe mask: each thread
    /// holds its own stripe (see `Holds`).
    #[cfg(not(tollgate_loom))]
    holds: AtomicPtr<u8>,
    #[cfg(not(tollgate_loom))]
    mask: AtomicUsize,
    /// The set, the rule, the tier, the state's first slot, the first and last lines of
    /// the table's cells (null: none yet).
    #[cfg(not(tollgate_loom))]
    lines: [AtomicPtr<u8>; LINES],
}

impl Warm {
    /// No hints yet: the first check takes them.
    pub(super) fn new() -> Warm {
        Warm {
            #[cfg(not(tollgate_loom))]
            of: AtomicPtr::new(core::ptr::null_mut()),
            #[cfg(not(tollgate_loom))]
            holds: AtomicPtr::new(core::ptr::null_mut()),
            #[cfg(not(tollgate_loom))]
            mask: AtomicUsize::new(0),
            #[cfg(not(tollgate_loom))]
            lines: core::array::from_fn(|_| AtomicPtr::new(core::ptr::null_mut())),
        }
    }

    /// Asks the CPU to fetch every line named (a null one is skipped), and this thread's
    /// hold's.
    #[inline(always)]
    pub(super) fn fetch(&self) {
        #[cfg(not(tollgate_loom))]
        {
            // Relaxed, here and below: hints (see the module docs); nothing is read
            // through them.
            let first = self.holds.load(Ordering::Relaxed);
            if !first.is_null() {
                let mask = self.mask.load(Ordering::Relaxed);
                crate::prefetch::prefetch(Holds { first, mask }.line());
            }
            for line in &self.lines {
                let at = line.load(Ordering::Relaxed);
                if !at.is_null() {
                    crate::prefetch::prefetch(at);
                }
            }
        }
    }

    /// Takes the hints again from `plan`, checked under `set`, unless they were taken
    /// under that set already: one load and a comparison when they were.
    #[inline(always)]
    pub(super) fn follow(&self, set: &Active<'_, RuleSet>, plan: &Plan<'_>) {
        #[cfg(not(tollgate_loom))]
        // Relaxed: a hint; a check racing a reload may take the hints of either set, and
        // the next check under the other set takes them again.
        if !core::ptr::eq(self.of.load(Ordering::Relaxed), &**set) {
            self.take(set, plan);
        }
        #[cfg(tollgate_loom)]
        let _ = (set, plan);
    }

    /// [`follow`](Self::follow)'s work: the lines of `plan`'s first tier under `set`.
    #[cfg(not(tollgate_loom))]
    #[cold]
    #[inline(never)]
    fn take(&self, set: &Active<'_, RuleSet>, plan: &Plan<'_>) {
        let Some(first) = plan.iter().next() else {
            // Nothing planned (no rule matched, or a listing decided): the next check
            // tries again.
            return;
        };
        let set_line: *const u8 = (&**set as *const RuleSet).cast();
        let mut lines = [set_line; LINES];
        let (slot, table) = first.tier.state().warm_lines();
        lines[1] = (first.rule as *const super::Rule).cast();
        lines[2] = (first.tier as *const super::Tier).cast();
        lines[3] = slot;
        if let Some(table) = table {
            let (start, len) = table.warm_bytes();
            // The first line of the cells, and their last (`start` moved on by whole lines
            // stays in the same place of a line).
            let spans = (start as usize % LINE + len.max(1)).div_ceil(LINE);
            lines[4] = start;
            lines[5] = start.wrapping_add((spans - 1) * LINE);
        }
        for (hint, line) in self.lines.iter().zip(lines) {
            hint.store(line.cast_mut(), Ordering::Relaxed);
        }
        let holds = set.holds();
        self.mask.store(holds.mask, Ordering::Relaxed);
        self.holds.store(holds.first.cast_mut(), Ordering::Relaxed);
        self.of
            .store((&**set as *const RuleSet).cast_mut(), Ordering::Relaxed);
    }

    /// The lines named, in order (null: none yet).
    #[cfg(all(test, not(tollgate_loom)))]
    pub(super) fn lines(&self) -> [*const u8; LINES] {
        // Relaxed: read by the test that wrote them.
        core::array::from_fn(|i| self.lines[i].load(Ordering::Relaxed).cast_const())
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::super::Policy;
    use crate::clock::manual::FnClock;
    use tollgate_core::Nanos;

    const RULES: &str = r#"
        [[rules]]
        name = "api"
        endpoint = "/api"
        tiers = [{ algorithm = "gcra", limit = 10, window = "1s" }]

        [[rules]]
        name = "carol"
        client = "carol"
        tiers = [{ algorithm = "token_bucket", limit = 5, window = "1s" }]
    "#;

    fn policy() -> Policy<FnClock<fn() -> Nanos>> {
        let zero: fn() -> Nanos = || Nanos::ZERO;
        Policy::from_toml(RULES, FnClock(zero)).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The lines of the first tier of the rule named `rule` under the policy's set in
    /// force, in [`Warm`](super::Warm)'s order.
    fn lines_of<C, S>(policy: &Policy<C, S>, rule: &str) -> [*const u8; super::LINES] {
        let set = policy.active_set();
        let Some(rule) = set.rules().iter().find(|r| r.name() == rule) else {
            panic!("no rule {rule}");
        };
        let tier = &rule.tiers()[0];
        let (slot, table) = tier.state().warm_lines();
        let (cells, len) = table.map_or((core::ptr::null(), 1), |t| t.warm_bytes());
        let last = cells.wrapping_add(
            ((cells as usize % super::LINE + len).div_ceil(super::LINE) - 1) * super::LINE,
        );
        [
            (&*set as *const super::RuleSet).cast(),
            (rule as *const super::super::Rule).cast(),
            (tier as *const super::super::Tier).cast(),
            slot,
            cells,
            last,
        ]
    }

    /// Before any check nothing is named; the first check names the lines of its plan's
    /// first tier, table included; a check of another rule under the same set changes
    /// nothing; a reload's set is followed by its first check.
    #[test]
    fn hints_follow_the_first_checked_tier_of_each_set() {
        let policy = policy();
        assert_eq!(policy.warm().lines(), [core::ptr::null(); super::LINES]);

        let admitted = |client, endpoint| {
            policy
                .allow(client, endpoint, 1)
                .map(|d| d.allowed())
                .unwrap_or(false)
        };
        assert!(admitted("bob", "/api"));
        let api = lines_of(&policy, "api");
        assert!(!api[4].is_null(), "the checked tier's table is built");
        assert_eq!(policy.warm().lines(), api);
        // The cells span more than one line: their last is a line further on.
        assert!(api[5] > api[4]);

        assert!(admitted("carol", "/other"));
        assert_ne!(lines_of(&policy, "carol"), api);
        assert_eq!(policy.warm().lines(), api, "taken once per set");

        let report = policy.reload_toml(RULES);
        assert!(report.is_ok());
        assert!(admitted("carol", "/other"));
        let fresh = lines_of(&policy, "carol");
        assert_ne!(fresh[0], api[0], "a reload publishes a new set");
        assert_eq!(policy.warm().lines(), fresh);
    }

    /// A set whose rules match nothing a request asks names nothing (and keeps trying).
    #[test]
    fn a_check_of_no_tier_names_nothing() {
        let policy = Policy::from_toml(
            r#"
            [[rules]]
            name = "api"
            endpoint = "/api"
            tiers = [{ algorithm = "gcra", limit = 10, window = "1s" }]
            "#,
            FnClock(|| Nanos::ZERO),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        for _ in 0..3 {
            assert!(policy
                .allow("alice", "/", 1)
                .map(|d| d.allowed())
                .unwrap_or(false));
            assert_eq!(policy.warm().lines(), [core::ptr::null(); super::LINES]);
        }
        assert!(policy
            .allow("alice", "/api", 1)
            .map(|d| d.allowed())
            .unwrap_or(false));
        assert_eq!(policy.warm().lines(), lines_of(&policy, "api"));
    }
}
