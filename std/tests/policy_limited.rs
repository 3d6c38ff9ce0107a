//! `Policy::limited`: the clients a check would deny now, listed from the policy's record
//! of denied (rule, client) pairs and peeked under the rules in force — exactly the limited
//! ones with their tiers, none once the window has passed or after a reset, none from a
//! global rule or a ban, bounded by the record's capacity and the listing's `max`.

use tollgate::policy::{FnClock, LimitedClients, ListBounds, Policy, Request};
use tollgate::Nanos;

use std::sync::atomic::{AtomicU64, Ordering};

/// The tests' time, in ns: each test that moves it runs its own policy, but they share it,
/// so each starts its own epoch far from the others' (see `epoch`).
static NOW: AtomicU64 = AtomicU64::new(0);

fn now() -> Nanos {
    Nanos::new(NOW.load(Ordering::SeqCst))
}

type Clock = FnClock<fn() -> Nanos>;

const RULES: &str = r#"
    [[rules]]
    name = "default"
    limit = 2
    window = "1m"

    [[rules]]
    name = "search"
    endpoint = "/search"
    [[rules.tiers]]
    name = "burst"
    limit = 1
    window = "1s"
    [[rules.tiers]]
    name = "daily"
    limit = 100
    window = "1d"

    [[rules]]
    name = "everyone"
    endpoint = "/shared"
    per = "global"
    limit = 1
    window = "1m"

    [[rules]]
    name = "scrapers"
    endpoint = "/scrape"
    limit = 0
"#;

fn policy() -> Policy<Clock> {
    Policy::from_toml(RULES, FnClock(now as fn() -> Nanos)).unwrap()
}

/// (rule, client, the denying tier's name, its remaining) of each client listed.
fn listed(limited: &LimitedClients) -> Vec<(String, String, String, u64)> {
    limited
        .clients
        .iter()
        .map(|c| {
            let denier = c
                .decision
                .tiers()
                .iter()
                .find(|t| !t.decision.allowed)
                .expect("a listed client has a denying tier");
            (
                c.rule.clone(),
                c.client.clone(),
                denier.name().to_owned(),
                denier.decision.remaining,
            )
        })
        .collect()
}

fn pair(rule: &str, client: &str, tier: &str) -> (String, String, String, u64) {
    (rule.into(), client.into(), tier.into(), 0)
}

/// Every test's time, one hour of its own apart (the clock is shared: the tests of this
/// file run in one process).
fn epoch(hour: u64) {
    NOW.store(Nanos::from_secs(3600 * hour).as_u64(), Ordering::SeqCst);
}

/// One lock for the shared clock.
static CLOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn exactly_the_limited_clients_are_listed_with_their_tiers() {
    let _clock = CLOCK.lock().unwrap_or_else(|e| e.into_inner());
    epoch(1);
    let policy = policy();
    // alice exhausts the default rule and is denied; bob the search burst.
    for _ in 0..3 {
        policy.allow("alice", "/", 1).unwrap();
    }
    for _ in 0..2 {
        policy.allow("bob", "/search", 1).unwrap();
    }
    // carol is under her limits; dave is denied by a rule every client shares; erin by a
    // ban: neither is limited as a client.
    policy.allow("carol", "/", 1).unwrap();
    for _ in 0..2 {
        policy.allow("dave", "/shared", 1).unwrap();
    }
    assert!(!policy.allow("dave", "/shared", 1).unwrap().allowed());
    assert!(!policy.allow("erin", "/scrape", 1).unwrap().allowed());

    let limited = policy.limited(ListBounds::new(100)).unwrap();
    assert!(limited.complete);
    assert_eq!(
        listed(&limited),
        [
            pair("default", "alice", "default"),
            pair("search", "bob", "burst")
        ]
    );
    // Every tier of the rule, as a peek of one permit reports it: bob's burst denies (none
    // left), his daily tier would admit and leave 98 (99 now: the denied check took
    // nothing).
    let bob = &limited.clients[1];
    let tiers: Vec<_> = bob
        .decision
        .tiers()
        .iter()
        .map(|t| (t.name(), t.decision.allowed, t.decision.remaining))
        .collect();
    assert_eq!(tiers, [("burst", false, 0), ("daily", true, 98)]);
    assert_eq!(bob.decision.limit(), 1);
    assert!(bob.decision.retry_after() > Nanos::ZERO);
    assert!(bob.decision.retry_after() <= Nanos::from_secs(1));
    let alice = &limited.clients[0];
    assert_eq!(alice.decision.remaining(), 0);
    assert_eq!(alice.decision.tiers()[0].rule_name(), "default");
    // Listing charged nothing: alice is as she was.
    assert_eq!(policy.peek("alice", "/", 0).unwrap().remaining(), 0);
    assert_eq!(policy.peek("carol", "/", 0).unwrap().remaining(), 1);

    // Bounded by `max`: the first by rule then client, and not complete.
    let first = policy.limited(ListBounds::new(1)).unwrap();
    assert_eq!(listed(&first), [pair("default", "alice", "default")]);
    assert!(!first.complete);
    assert!(policy
        .limited(ListBounds::new(0))
        .unwrap()
        .clients
        .is_empty());

    // The awaited form answers the same.
    let awaited = tollgate::wait::finish(policy.limited_async(ListBounds::new(100))).unwrap();
    assert_eq!(awaited, limited);
}

#[test]
fn nobody_is_listed_once_the_window_has_passed() {
    let _clock = CLOCK.lock().unwrap_or_else(|e| e.into_inner());
    epoch(2);
    let policy = policy();
    for client in ["a", "b", "c"] {
        for _ in 0..3 {
            policy.allow(client, "/", 1).unwrap();
        }
    }
    assert_eq!(
        policy.limited(ListBounds::new(10)).unwrap().clients.len(),
        3
    );
    // Half a window later, one permit of two has come back (GCRA: 30 s each).
    NOW.fetch_add(Nanos::from_secs(30).as_u64(), Ordering::SeqCst);
    assert!(policy
        .limited(ListBounds::new(10))
        .unwrap()
        .clients
        .is_empty());
    // Denied again: listed again, until the window passes.
    for _ in 0..2 {
        policy.allow("b", "/", 1).unwrap();
    }
    assert_eq!(
        listed(&policy.limited(ListBounds::new(10)).unwrap()),
        [pair("default", "b", "default")]
    );
    NOW.fetch_add(Nanos::from_secs(60).as_u64(), Ordering::SeqCst);
    let limited = policy.limited(ListBounds::new(10)).unwrap();
    assert!(limited.clients.is_empty() && limited.complete);
}

#[test]
fn a_reset_client_is_no_longer_listed() {
    let _clock = CLOCK.lock().unwrap_or_else(|e| e.into_inner());
    epoch(3);
    let policy = policy();
    for client in ["a", "b"] {
        for _ in 0..3 {
            policy.allow(client, "/", 1).unwrap();
        }
    }
    policy.reset("a", "/");
    assert_eq!(
        listed(&policy.limited(ListBounds::new(10)).unwrap()),
        [pair("default", "b", "default")]
    );
}

#[test]
fn only_denials_are_recorded_by_checks_single_or_batched() {
    let _clock = CLOCK.lock().unwrap_or_else(|e| e.into_inner());
    epoch(4);
    let policy = policy();
    // Exhausted but never denied, then peeked: not recorded, so not listed.
    for _ in 0..2 {
        assert!(policy.allow("a", "/", 1).unwrap().allowed());
    }
    assert!(!policy.peek("a", "/", 1).unwrap().allowed());
    assert!(policy
        .limited(ListBounds::new(10))
        .unwrap()
        .clients
        .is_empty());
    // A batch denied by bob's search burst records bob under that rule only.
    let call = [Request::new("c", "/", 1), Request::new("bob", "/search", 1)];
    assert!(policy.check_all(&call).unwrap().allowed());
    assert!(!policy.check_all(&call).unwrap().allowed());
    assert_eq!(
        listed(&policy.limited(ListBounds::new(10)).unwrap()),
        [pair("search", "bob", "burst")]
    );
}

#[test]
fn a_rule_removed_by_a_reload_lists_no_one() {
    let _clock = CLOCK.lock().unwrap_or_else(|e| e.into_inner());
    epoch(5);
    let policy = policy();
    for _ in 0..2 {
        policy.allow("bob", "/search", 1).unwrap();
    }
    assert_eq!(
        policy.limited(ListBounds::new(10)).unwrap().clients.len(),
        1
    );
    policy
        .reload_toml("[[rules]]\nname = \"default\"\nlimit = 2\nwindow = \"1m\"\n")
        .unwrap();
    assert!(policy
        .limited(ListBounds::new(10))
        .unwrap()
        .clients
        .is_empty());
}

#[test]
fn the_record_is_bounded_by_its_capacity() {
    let _clock = CLOCK.lock().unwrap_or_else(|e| e.into_inner());
    epoch(6);
    let small = policy().with_limited_record(8);
    assert_eq!(small.limited_record_capacity(), 8);
    for i in 0..200 {
        let client = format!("client-{i}");
        for _ in 0..3 {
            small.allow(&client, "/", 1).unwrap();
        }
    }
    let limited = small.limited(ListBounds::new(1000)).unwrap();
    assert!(!limited.clients.is_empty());
    assert!(limited.clients.len() <= 8, "{}", limited.clients.len());
    assert!(limited.complete);
    // A record of no slots lists nothing; capacities are rounded up to whole buckets.
    let none = policy().with_limited_record(0);
    for _ in 0..3 {
        none.allow("a", "/", 1).unwrap();
    }
    assert!(none
        .limited(ListBounds::new(10))
        .unwrap()
        .clients
        .is_empty());
    assert_eq!(policy().with_limited_record(5).limited_record_capacity(), 8);
    assert_eq!(
        policy().limited_record_capacity(),
        tollgate::policy::DEFAULT_LIMITED_RECORD
    );
}

/// A listing stops peeking at its time budget and says it is incomplete: with no time at
/// all, it looks at nothing; with time, it finds the client.
#[test]
fn a_listing_stops_at_its_time_budget() {
    let _clock = CLOCK.lock().unwrap_or_else(|e| e.into_inner());
    epoch(7);
    let policy = policy();
    for _ in 0..3 {
        policy.allow("late", "/", 1).unwrap();
    }
    let rushed = policy
        .limited(ListBounds::new(10).with_max_time(std::time::Duration::ZERO))
        .unwrap();
    assert!(rushed.clients.is_empty() && !rushed.complete);
    let unhurried = policy.limited(ListBounds::new(10)).unwrap();
    assert!(unhurried.complete);
    assert_eq!(unhurried.clients.len(), 1);
}
