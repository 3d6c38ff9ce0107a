//! Memory follows the rules, measured with a counting allocator: a rule for one client or
//! with `per = "global"` holds one key, not a table sized for every client; a rule may set
//! its own capacity; validating a config allocates no table; a reload allocates only the
//! tiers it changes; a sliding-log tier stays within its stated bound however many clients
//! pass through it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use tollgate::policy::{Policy, PolicyConfig};
use tollgate::{ManualClock, Nanos};

/// Counts live heap bytes (allocated, net of frees) of the whole process.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
/// Bytes ever allocated (not net of frees).
static TOTAL: AtomicUsize = AtomicUsize::new(0);

// SAFETY: defers every operation to `System`, only counting around it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        TOTAL.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Heap bytes allocated while `f` runs, whether or not they are freed by its end.
fn total_by<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let before = TOTAL.load(Ordering::Relaxed);
    let r = f();
    (r, TOTAL.load(Ordering::Relaxed) - before)
}

/// Heap bytes that `f` leaves live (what it returns, or keeps in what it touched).
fn allocated_by<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let before = LIVE.load(Ordering::Relaxed);
    let r = f();
    (r, LIVE.load(Ordering::Relaxed).saturating_sub(before))
}

fn client_rules(n: usize) -> String {
    let mut toml = String::from(
        "[[rules]]\nname = \"default\"\nlimit = 10\nwindow = \"1s\"\ncapacity = 1000\n",
    );
    for i in 0..n {
        toml.push_str(&format!(
            "[[rules]]\nname = \"c{i}\"\nclient = \"client-{i}\"\nlimit = 100\nwindow = \"1m\"\n"
        ));
    }
    toml
}

/// The scenarios measure the global allocator, so they run one after the other in a single
/// test (the only one in this binary).
#[test]
fn memory_follows_the_rules() {
    one_thousand_client_rules_cost_less_than_a_megabyte();
    validating_allocates_no_table();
    a_reload_allocates_only_what_changed();
    global_and_per_rule_capacities();
    log_tiers_stay_within_their_stated_bound();
}

fn one_thousand_client_rules_cost_less_than_a_megabyte() {
    let toml = client_rules(1_000);
    let ((policy, clock), bytes) = allocated_by(|| {
        let clock = ManualClock::new();
        let policy = Policy::from_toml(&toml, clock.clone()).unwrap();
        // Use every rule once, so every tier's table exists.
        for i in 0..1_000 {
            assert!(policy
                .allow(&format!("client-{i}"), "/", 1)
                .unwrap()
                .allowed());
        }
        assert!(policy.allow("anyone", "/", 1).unwrap().allowed());
        (policy, clock)
    });
    // Before: each client rule allocated a 100 000-key table (~1.9 MB) when compiled,
    // ~1.9 GB for these rules. Now the tables take under 1 MB, and everything (rules,
    // indexes, names, tables) under 1.5 MB.
    let set = policy.rule_set();
    let tables: usize = set
        .rules()
        .iter()
        .flat_map(|rule| rule.tiers())
        .map(|tier| policy.backend().memory_bytes(tier))
        .sum();
    assert!(
        tables < 1 << 20,
        "{tables} bytes of tables for 1 000 client rules"
    );
    assert!(
        bytes < 3 << 19,
        "{bytes} bytes in all for 1 000 client rules"
    );
    let rule = set.rule("c7").unwrap();
    assert_eq!(rule.tiers()[0].capacity(), 1);
    assert_eq!(set.rule("default").unwrap().tiers()[0].capacity(), 1_000);
    clock.advance(Nanos::from_secs(1));
}

fn validating_allocates_no_table() {
    // One default rule with a 1 000 000-key capacity: ~19 MB if a table were built.
    let toml = "capacity = 1000000\n[[rules]]\nname = \"d\"\nlimit = 5\nwindow = \"1s\"\n";
    let (config, bytes) = total_by(|| PolicyConfig::from_toml(toml).unwrap());
    assert!(bytes < 64 << 10, "validating allocated {bytes} bytes");
    // Building the policy allocates nothing big either, until a check uses the tier.
    let (policy, bytes) = total_by(|| Policy::new(config, ManualClock::new()).unwrap());
    assert!(bytes < 64 << 10, "building allocated {bytes} bytes");
    let (_, bytes) = allocated_by(|| policy.allow("a", "/", 1).unwrap().allowed());
    assert!(
        bytes > 10 << 20,
        "the first check builds the table: {bytes} bytes"
    );
}

fn a_reload_allocates_only_what_changed() {
    let v1 = "capacity = 500000\n[[rules]]\nname = \"a\"\nlimit = 5\nwindow = \"1s\"\n\
              [[rules]]\nname = \"b\"\nendpoint = \"/b\"\nlimit = 5\nwindow = \"1s\"\n";
    let policy = Policy::from_toml(v1, ManualClock::new()).unwrap();
    assert!(policy.allow("x", "/b", 1).unwrap().allowed());
    // Rule b changes its limit (a new table, on first use); rule a is kept as it is.
    let v2 = v1.replace(
        "name = \"b\"\nendpoint = \"/b\"\nlimit = 5",
        "name = \"b\"\nendpoint = \"/b\"\nlimit = 6",
    );
    let (_, bytes) = total_by(|| policy.reload_toml(&v2).unwrap());
    // No table is built by the reload itself (keys move when first written, no sweep): the
    // unchanged tier reuses its table (another ~9.6 MB if it did not), the changed tier's
    // successor is built on first use.
    assert!(bytes < 64 << 10, "the reload allocated {bytes} bytes");
    // A peek reads the key in the old table, converted, allocating nothing.
    let (remaining, bytes) = allocated_by(|| policy.peek("x", "/b", 1).unwrap().remaining());
    assert_eq!(
        remaining, 3,
        "state kept (as before the reload: 3 after this peek)"
    );
    assert!(bytes < 64 << 10, "the peek allocated {bytes} bytes");
    // The first check that records builds the changed tier's table (~9.6 MB).
    let (admitted, bytes) = allocated_by(|| policy.allow("x", "/b", 1).unwrap().allowed());
    assert!(admitted);
    assert!(
        bytes > 5 << 20 && bytes < 14 << 20,
        "the changed tier got its table: {bytes} bytes"
    );
    assert_eq!(
        policy.peek("x", "/b", 1).unwrap().remaining(),
        2,
        "state kept, and the check recorded"
    );
}

fn global_and_per_rule_capacities() {
    let toml = r#"
        [[rules]]
        name = "everyone"
        per = "global"
        limit = 100
        window = "1s"

        [[rules]]
        name = "search"
        endpoint = "/search"
        limit = 5
        window = "1s"
        capacity = 2000
    "#;
    let policy = Policy::from_toml(toml, ManualClock::new()).unwrap();
    let set = policy.rule_set();
    assert_eq!(set.rule("everyone").unwrap().tiers()[0].capacity(), 1);
    assert_eq!(set.rule("search").unwrap().tiers()[0].capacity(), 2_000);
    let bad = toml.replace("capacity = 2000", "capacity = 0");
    let err = PolicyConfig::from_toml(&bad).unwrap_err();
    assert!(err.to_string().contains("rules[1].capacity"), "{err}");
}

/// A sliding-log tier of limit `L` and capacity `C` holds at most its table (16 bytes per
/// slot), its slab (48 bytes per slot) and under `16 · L` bytes per live log, with about
/// 1.25 slots per key of capacity (the module docs of `policy::store::log`): under `C · (2 · 64 + 16 · L)`
/// bytes here. 20 000 clients each recording 20 stamps through a tier of capacity 1 000
/// leave it within that bound, and the second 10 000 clients add nothing to what the first
/// left: evicted logs are let go of.
fn log_tiers_stay_within_their_stated_bound() {
    let (limit, capacity) = (50usize, 1_000usize);
    let toml = format!(
        "[[rules]]\nname = \"log\"\nlimit = {limit}\nwindow = \"1h\"\nalgorithm = \"sliding_window_log\"\ncapacity = {capacity}\n"
    );
    let clock = ManualClock::starting_at(Nanos::from_secs(1_000));
    let policy = Policy::from_toml(&toml, clock.clone()).unwrap();
    let flood = |from: usize, to: usize| {
        for i in from..to {
            let client = format!("client-{i}");
            for _ in 0..20 {
                assert!(policy.allow(&client, "/", 1).unwrap().allowed());
            }
            clock.advance(Nanos::from_millis(1));
        }
    };
    let ((), first) = allocated_by(|| flood(0, 10_000));
    let ((), second) = allocated_by(|| flood(10_000, 20_000));
    let bound = capacity * (2 * 64 + 16 * limit);
    let set = policy.rule_set();
    let tier = &set.rule("log").unwrap().tiers()[0];
    assert!(
        first <= bound && policy.backend().memory_bytes(tier) <= bound,
        "{first} live bytes, the tier reports {}, bound {bound}",
        policy.backend().memory_bytes(tier)
    );
    assert!(
        second <= bound / 100,
        "the second 10 000 clients left {second} more live bytes"
    );
    assert!(
        policy.backend().memory_bytes(tier) >= capacity * 64,
        "the slab is counted"
    );
    eprintln!(
        "log tier: first {first} B, second {second} B, reported {} B, bound {bound} B",
        policy.backend().memory_bytes(tier)
    );
}
