//! Reloads and validations do not grow memory (issue 27, item 6): rule and tier names and
//! tier labels live in the rule set that uses them and go with it, so neither reloading
//! new limits nor validating files with new names keeps anything. Measured by a counting
//! allocator (live heap bytes): the bounds below are a few kilobytes of slack over growth
//! that used to be megabytes (every distinct label and name was interned by leaking it).
//! The allocator counts the whole process, so the three measurements run one after the
//! other in one test.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use tollgate::policy::{Policy, PolicyConfig, RuleSet};
use tollgate::{ManualClock, Nanos};

/// Counts live heap bytes.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: defers every operation to `System`, only counting around it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// The process's resident set in KiB, where the OS tells it (Linux), for the log only: the
/// assertions are on the live heap, which does not depend on the allocator's caching.
fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Ten tenants' rules, each `limit` per minute (plus `shift`), named `prefix{i}`, and a
/// default rule with two tiers.
fn tenants(prefix: &str, limit: u64) -> String {
    let mut rules = String::from(
        "[[rules]]\nname = \"default\"\n[[rules.tiers]]\nname = \"burst\"\nlimit = 10\nwindow = \"1s\"\n[[rules.tiers]]\nname = \"daily\"\nlimit = 1000\nwindow = \"1d\"\n",
    );
    for i in 0..10 {
        rules.push_str(&format!(
            "[[rules]]\nname = \"{prefix}{i}\"\nclient = \"tenant_{i}\"\nlimit = {}\nwindow = \"1m\"\n",
            limit + i
        ));
    }
    rules
}

/// Growth of live heap bytes across `rounds` calls of `round`, after `warm` calls that
/// reach the steady state (tables allocated, generation nodes made).
fn growth(warm: usize, rounds: usize, mut round: impl FnMut(usize)) -> isize {
    for i in 0..warm {
        round(i);
    }
    let (before, rss) = (live(), rss_kib());
    for i in warm..warm + rounds {
        round(i);
    }
    if let (Some(a), Some(b)) = (rss, rss_kib()) {
        eprintln!("  RSS {a} -> {b} KiB");
    }
    live() - before
}

#[test]
fn reloads_and_validations_do_not_grow_memory() {
    reloads_changing_limits();
    validations_of_new_names();
    reloads_of_new_names();
}

/// Reloads changing ten tenants' limits (each reload a new limit for each, every tenant
/// checked in between; 2 000 in a debug build, 20 000 in release): the live heap does not
/// grow. On 4452f30, 20 000 such reloads grew RSS by 16 MB (every new (name, limit) label
/// was interned for good).
fn reloads_changing_limits() {
    let clock = ManualClock::starting_at(Nanos::from_secs(1_000));
    let policy = Policy::from_toml(&tenants("tenant", 100), clock).unwrap();
    // A decision kept across every reload: it holds its rule set (its labels point into
    // it), which is freed when the decision goes, after the measurement.
    let kept = policy.allow("tenant_3", "/", 1).unwrap();
    let rounds = if cfg!(debug_assertions) {
        2_000
    } else {
        20_000
    };
    let grew = growth(1_000, rounds, |i| {
        policy
            .reload_toml(&tenants("tenant", 100 + (i as u64 % 5_000)))
            .unwrap();
        for t in 0..10 {
            let d = policy.allow(&format!("tenant_{t}"), "/", 1).unwrap();
            assert!(d.tiers().iter().all(|o| o.name().starts_with("tenant")));
        }
    });
    eprintln!("{rounds} reloads changing limits: live heap {grew:+} bytes");
    assert!(
        grew < 64 * 1024,
        "{rounds} reloads grew the heap by {grew} bytes"
    );
    assert_eq!(kept.tiers()[0].name(), "tenant3");
}

/// Validations of rule files whose names are all new (as an admin tool checking files
/// does; 5 000 in a debug build, 200 000 in release): nothing stays behind. On 4452f30,
/// 200 000 of them: about +28 MB.
fn validations_of_new_names() {
    let rounds = if cfg!(debug_assertions) {
        5_000
    } else {
        200_000
    };
    let grew = growth(100, rounds, |i| {
        let config = PolicyConfig::from_toml(&tenants(&format!("v{i}_"), 50)).unwrap();
        let set = RuleSet::compile(&config).unwrap();
        assert_eq!(set.rules().len(), 11);
    });
    eprintln!("{rounds} validations of new names: live heap {grew:+} bytes");
    assert!(
        grew < 16 * 1024,
        "{rounds} validations grew the heap by {grew} bytes"
    );
}

/// Reloads whose rule names are all new each time (tenants come and go): the names of the
/// rules that left are forgotten with their rule sets.
fn reloads_of_new_names() {
    let clock = ManualClock::starting_at(Nanos::from_secs(1_000));
    let policy = Policy::from_toml(&tenants("r0_", 10), clock).unwrap();
    let rounds = if cfg!(debug_assertions) { 500 } else { 5_000 };
    let grew = growth(200, rounds, |i| {
        policy.reload_toml(&tenants(&format!("r{i}_"), 10)).unwrap();
        assert!(policy.allow("tenant_1", "/", 1).unwrap().allowed());
    });
    eprintln!("{rounds} reloads of new names: live heap {grew:+} bytes");
    assert!(
        grew < 64 * 1024,
        "{rounds} reloads of new names grew the heap by {grew} bytes"
    );
}
