//! [`Warm`]: the cache lines a policy's check reads one after another, named ahead, so that
//! a check from a cold cache fetches them together.
//!
//! A check follows a chain: the policy, the published set and this thread's hold on it,
//! the rule the request matches, its tier, the tier's state, the state's table, the key's
//! bucket. Each is found through the one before, so from a cold cache (a server that did
//! other work since the last request) each is a miss that waits for the last. The policy
//! keeps, on lines of its own, the addresses of the lines after its own; a check starts by
//! asking the CPU to fetch them all, and the chain then finds them on its way.
//!
//! They are hints and nothing else. A prefetch never faults and changes nothing a program
//! observes, so an address that went stale (a reload replaced the set, the set was freed)
//! costs a wasted fetch and no more. The first check under each set takes them from its
//! plan (its first tier's rule, tier, state and table): they are keyed by the set's
//! generation number, unique among a policy's sets (a freed set's address may be reused by
//! the next; its number is not). Under loom they are not kept: nothing there to model.
//!
//! ```text
//!   Warm ─ generation:     the set's number the hints were taken under
//!        ├ holds, stripes: the set's node's holds (each thread fetches its own stripe)
//!        └ lines:          the set, the rule, the tier, the state's first slot, the first
//!                          and last lines of the table's cells (the set's own address
//!                          where the state has no table yet)
//! ```

use super::published::Active;
#[cfg(not(tollgate_loom))]
use super::published::{Holds, Stripe};
use super::{Plan, RuleSet};
#[cfg(not(tollgate_loom))]
use crate::sync::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

/// How many lines a [`Warm`] names besides the hold's.
#[cfg(not(tollgate_loom))]
const LINES: usize = 6;

/// The bytes of a cache line.
#[cfg(not(tollgate_loom))]
const LINE: usize = 64;

/// No set's number: no hints taken yet.
#[cfg(not(tollgate_loom))]
const NONE: u64 = u64::MAX;

/// The lines a check reads after the policy's own (see the module docs): nine words, on
/// two lines of their own, fetched together with the policy's first.
#[derive(Debug)]
#[repr(C, align(64))]
pub(super) struct Warm {
    /// The number of the set the hints were taken under ([`NONE`]: none yet).
    #[cfg(not(tollgate_loom))]
    generation: AtomicU64,
    /// The set's node's first stripe (null: none yet) and how many there are.
    #[cfg(not(tollgate_loom))]
    holds: AtomicPtr<Stripe>,
    #[cfg(not(tollgate_loom))]
    stripes: AtomicUsize,
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
            generation: AtomicU64::new(NONE),
            #[cfg(not(tollgate_loom))]
            holds: AtomicPtr::new(core::ptr::null_mut()),
            #[cfg(not(tollgate_loom))]
            stripes: AtomicUsize::new(1),
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
            let first = self.holds.load(Ordering::Relaxed).cast_const();
            if !first.is_null() {
                let stripes = self.stripes.load(Ordering::Relaxed);
                crate::prefetch::line(Holds { first, stripes }.line());
            }
            for line in &self.lines {
                let at = line.load(Ordering::Relaxed);
                if !at.is_null() {
                    crate::prefetch::line(at);
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
        if self.generation.load(Ordering::Relaxed) != set.generation() {
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
        // Never empty here (a check returns before for an empty plan or a listing); were it,
        // the next check would try again.
        let Some(first) = plan.iter().next() else {
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
            lines[4] = start;
            lines[5] = last_line(start, len);
        }
        for (hint, line) in self.lines.iter().zip(lines) {
            hint.store(line.cast_mut(), Ordering::Relaxed);
        }
        let holds = set.holds();
        self.stripes.store(holds.stripes, Ordering::Relaxed);
        self.holds.store(holds.first.cast_mut(), Ordering::Relaxed);
        self.generation.store(set.generation(), Ordering::Relaxed);
    }

    /// The lines named, in order (null: none yet), and the hold's line for this thread
    /// (null: none yet).
    #[cfg(all(test, not(tollgate_loom)))]
    pub(super) fn lines(&self) -> ([*const u8; LINES], *const u8) {
        // Relaxed: read by the test that wrote them.
        let first = self.holds.load(Ordering::Relaxed).cast_const();
        let stripes = self.stripes.load(Ordering::Relaxed);
        let hold = if first.is_null() {
            core::ptr::null()
        } else {
            Holds { first, stripes }.line()
        };
        (
            core::array::from_fn(|i| self.lines[i].load(Ordering::Relaxed).cast_const()),
            hold,
        )
    }
}

/// An address in the last line of the `len` bytes from `start` (`start` itself if they
/// fit in its line; `len` 0 counts as 1): moved on by whole lines, it keeps its place in
/// a line.
#[cfg(not(tollgate_loom))]
fn last_line(start: *const u8, len: usize) -> *const u8 {
    let spans = (start as usize % LINE + len.max(1)).div_ceil(LINE);
    start.wrapping_add((spans - 1) * LINE)
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::super::Policy;
    use super::{last_line, LINE, LINES};
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

    fn policy(rules: &str) -> Policy<FnClock<fn() -> Nanos>> {
        let zero: fn() -> Nanos = || Nanos::ZERO;
        Policy::from_toml(rules, FnClock(zero)).unwrap_or_else(|e| panic!("{e}"))
    }

    /// What a [`Warm`](super::Warm) names for the first tier of the rule named `rule`
    /// under the policy's set in force, and this thread's hold on that set.
    fn hints_of<C, S>(policy: &Policy<C, S>, rule: &str) -> ([*const u8; LINES], *const u8) {
        let set = policy.active_set();
        let Some(rule) = set.rules().iter().find(|r| r.name() == rule) else {
            panic!("no rule {rule}");
        };
        let tier = &rule.tiers()[0];
        let (slot, table) = tier.state().warm_lines();
        let Some((cells, len)) = table.map(|t| t.warm_bytes()) else {
            panic!("the tier's table is not built");
        };
        let lines = [
            (&*set as *const super::RuleSet).cast(),
            (rule as *const super::super::Rule).cast(),
            (tier as *const super::super::Tier).cast(),
            slot,
            cells,
            last_line(cells, len),
        ];
        (lines, set.holds().line())
    }

    fn admitted<C: tollgate_core::Clock + Sync>(
        policy: &Policy<C>,
        client: &str,
        endpoint: &str,
    ) -> bool {
        policy
            .allow(client, endpoint, 1)
            .map(|d| d.allowed())
            .unwrap_or(false)
    }

    /// The last line of a span: the start's own line while the span fits in it, a line
    /// further on for each line boundary it crosses, the same place in that line.
    #[test]
    fn the_last_line_of_a_span_holds_its_last_byte() {
        let base = 0x1000usize;
        for (offset, len, lines_on) in [
            (0, 0, 0),
            (0, 1, 0),
            (0, 64, 0),
            (0, 65, 1),
            (63, 1, 0),
            (63, 2, 1),
            (8, 172, 2),
            (32, 160, 2),
            (32, 161, 3),
        ] {
            let start = (base + offset) as *const u8;
            let last = last_line(start, len) as usize;
            assert_eq!(last, base + offset + lines_on * LINE, "{offset} + {len}");
            let end = base + offset + len.max(1) - 1;
            assert_eq!(
                last / LINE,
                end / LINE,
                "{offset} + {len}: the last byte's line"
            );
        }
    }

    /// Before any check nothing is named; the first check names its plan's first tier's
    /// lines, table included, and this thread's hold's; a check of another rule under the
    /// same set changes nothing; a reload's set is followed by its first check.
    #[test]
    fn hints_follow_the_first_checked_tier_of_each_set() {
        let policy = policy(RULES);
        assert_eq!(
            policy.warm().lines(),
            ([core::ptr::null(); LINES], core::ptr::null())
        );

        assert!(admitted(&policy, "bob", "/api"));
        let api = hints_of(&policy, "api");
        assert_eq!(policy.warm().lines(), api);
        assert!(!api.1.is_null());

        assert!(admitted(&policy, "carol", "/other"));
        assert_ne!(hints_of(&policy, "carol"), api);
        assert_eq!(policy.warm().lines(), api, "taken once per set");

        for round in 0..2 {
            let report = policy.reload_toml(RULES);
            assert!(report.is_ok());
            assert!(admitted(&policy, "carol", "/other"));
            let fresh = hints_of(&policy, "carol");
            assert_ne!(fresh.0[0], api.0[0], "a reload publishes a new set");
            assert_eq!(policy.warm().lines(), fresh, "after reload {round}");
        }
    }

    /// A check whose request meets no rule names nothing (and the next check tries again).
    #[test]
    fn a_check_of_no_tier_names_nothing() {
        let policy = policy(
            r#"
            [[rules]]
            name = "api"
            endpoint = "/api"
            tiers = [{ algorithm = "gcra", limit = 10, window = "1s" }]
            "#,
        );
        for _ in 0..3 {
            assert!(admitted(&policy, "alice", "/"));
            assert_eq!(
                policy.warm().lines(),
                ([core::ptr::null(); LINES], core::ptr::null())
            );
        }
        assert!(admitted(&policy, "alice", "/api"));
        assert_eq!(policy.warm().lines(), hints_of(&policy, "api"));
    }
}
