//! Policy rules: matching, the spec's use cases, tiers, peek and refund, with the manual
//! clock.

use tollgate::policy::{Policy, PolicyCheck, RateLimitHeaders};
use tollgate::{InsufficientCapacity, ManualClock, Nanos};

fn policy(toml: &str) -> (Policy<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    (Policy::from_toml(toml, clock.clone()).unwrap(), clock)
}

fn secs(s: u64) -> Nanos {
    Nanos::from_secs(s)
}

const SPEC: &str = r#"
    [[rules]]
    name = "default"
    limit = 20
    window = "1m"

    [[rules]]
    name = "acct_123"
    client = "acct_123"
    limit = 100
    window = "1m"

    [[rules]]
    name = "search"
    endpoint = "/search"
    limit = 10
    window = "1m"
    algorithm = "fixed_window"
"#;

#[test]
fn allow_returns_remaining_and_reset() {
    let (policy, _clock) = policy(
        r#"
        [[rules]]
        name = "default"
        limit = 20
        window = "1m"
    "#,
    );
    // GCRA 20/min: one permit every 3 s, bursts of 20.
    let mut last = None;
    for _ in 0..3 {
        last = Some(policy.allow("acct_123", "/search", 1).unwrap());
    }
    let d = last.unwrap();
    assert!(d.allowed());
    assert_eq!(d.remaining(), 17);
    assert_eq!(d.limit(), 20);
    assert_eq!(d.reset_after(), secs(9)); // full again after 3 intervals
    assert_eq!(d.retry_after(), Nanos::ZERO);
}

#[test]
fn over_the_limit_is_429_with_retry_after() {
    let (policy, clock) = policy(
        r#"
        [[rules]]
        name = "default"
        limit = 5
        window = "1m"
        algorithm = "fixed_window"
    "#,
    );
    clock.set(secs(10));
    for i in 0..5 {
        let d = policy.allow("acct_123", "/search", 1).unwrap();
        assert!(d.allowed(), "request {i}");
    }
    let denied = policy.allow("acct_123", "/search", 1).unwrap();
    assert!(!denied.allowed());
    assert_eq!(denied.retry_after(), secs(50)); // the window ends at t = 60 s
    assert_eq!(RateLimitHeaders::status(&denied.decision), 429);
    let headers = RateLimitHeaders::from_policy_decision(&denied);
    assert_eq!(headers.get("Retry-After"), Some("50"));
    // Another client is unaffected.
    assert!(policy.allow("acct_9", "/search", 1).unwrap().allowed());
    // The window rolls over.
    clock.set(secs(60));
    assert!(policy.allow("acct_123", "/search", 1).unwrap().allowed());
}

#[test]
fn client_rule_replaces_default_and_endpoint_rule_stacks() {
    let (policy, _clock) = policy(SPEC);
    // acct_123 on /search: its own 100/min and the endpoint's 10/min, both apply.
    let d = policy.allow("acct_123", "/search", 1).unwrap();
    let names: Vec<_> = d.tiers().iter().map(|t| t.name()).collect();
    assert_eq!(names, ["acct_123", "search"]);
    assert_eq!(d.remaining(), 9);
    // acct_9 on /home: only the default.
    let d = policy.allow("acct_9", "/home", 1).unwrap();
    let names: Vec<_> = d.tiers().iter().map(|t| t.name()).collect();
    assert_eq!(names, ["default"]);
}

#[test]
fn global_and_endpoint_limits_both_enforced() {
    let (policy, _clock) = policy(SPEC);
    // The endpoint's 10/min binds first on /search...
    let admitted = (0..30)
        .filter(|_| policy.allow("acct_9", "/search", 1).unwrap().allowed())
        .count();
    assert_eq!(admitted, 10);
    let denied = policy.allow("acct_9", "/search", 1).unwrap();
    assert_eq!(
        denied.denied_by().map(|t| t.name()).collect::<Vec<_>>(),
        ["search"]
    );
    // ...and those 10 counted against the global 20/min too (nothing more, nothing less:
    // the 20 denied requests consumed nothing).
    let admitted = (0..30)
        .filter(|_| policy.allow("acct_9", "/home", 1).unwrap().allowed())
        .count();
    assert_eq!(admitted, 10);
    let denied = policy.allow("acct_9", "/search", 1).unwrap();
    let by: Vec<_> = denied.denied_by().map(|t| t.name()).collect();
    assert_eq!(by, ["default", "search"]);
}

#[test]
fn per_second_burst_and_per_day_quota_together() {
    let (policy, clock) = policy(
        r#"
        [[rules]]
        name = "api"
        [[rules.tiers]]
        name = "burst"
        limit = 5
        window = "1s"
        algorithm = "token_bucket"
        [[rules.tiers]]
        name = "daily"
        limit = 12
        window = "1d"
        algorithm = "fixed_window"
    "#,
    );
    // Second 0: the burst allows 5.
    let admitted = (0..10)
        .filter(|_| policy.allow("c", "/", 1).unwrap().allowed())
        .count();
    assert_eq!(admitted, 5);
    let d = policy.allow("c", "/", 1).unwrap();
    assert_eq!(d.tightest().unwrap().name(), "burst");
    assert_eq!(d.retry_after(), Nanos::from_millis(200));
    // Second 1: the burst has refilled, 5 more.
    clock.set(secs(1));
    let admitted = (0..10)
        .filter(|_| policy.allow("c", "/", 1).unwrap().allowed())
        .count();
    assert_eq!(admitted, 5);
    // Second 2: the burst would allow 5, but the day has only 2 left.
    clock.set(secs(2));
    let admitted = (0..10)
        .filter(|_| policy.allow("c", "/", 1).unwrap().allowed())
        .count();
    assert_eq!(admitted, 2);
    let d = policy.allow("c", "/", 1).unwrap();
    assert!(!d.allowed());
    assert_eq!(d.tightest().unwrap().name(), "daily");
    assert_eq!(d.retry_after(), secs(86_400 - 2));
    // The denied requests did not drain the burst: it is full (5 minus the 2 admitted,
    // refilled at 200 ms each after one more second).
    clock.set(secs(3));
    let burst = policy.peek("c", "/", 1).unwrap().tiers()[0].decision;
    assert_eq!(burst.remaining, 4);
    // Next day.
    clock.set(secs(86_400));
    assert!(policy.allow("c", "/", 1).unwrap().allowed());
}

#[test]
fn global_partition_shares_one_bucket() {
    let (policy, _clock) = policy(
        r#"
        [[rules]]
        name = "export"
        endpoint = "/export"
        per = "global"
        limit = 3
        window = "1m"
        algorithm = "sliding_window_log"
    "#,
    );
    assert!(policy.allow("a", "/export", 1).unwrap().allowed());
    assert!(policy.allow("b", "/export", 1).unwrap().allowed());
    assert!(policy.allow("c", "/export", 1).unwrap().allowed());
    assert!(!policy.allow("d", "/export", 1).unwrap().allowed());
    // Unmatched endpoint: no rule, no limit.
    let free = policy.allow("d", "/home", 1).unwrap();
    assert!(free.allowed());
    assert_eq!(free.remaining(), u64::MAX);
    assert!(free.tiers().is_empty());
    assert!(RateLimitHeaders::from_policy_decision(&free)
        .iter()
        .next()
        .is_none());
}

#[test]
fn cost_above_a_tier_capacity_is_an_error_not_a_deny() {
    let (policy, _clock) = policy(SPEC);
    assert_eq!(
        policy.allow("acct_9", "/search", 11).unwrap_err(),
        InsufficientCapacity { max_cost: 10 }
    );
    // Nothing was consumed by the refused request (a peek reports what would remain after
    // it: 10 − 1).
    assert_eq!(policy.peek("acct_9", "/search", 1).unwrap().remaining(), 9);
}

/// A sliding-log tier takes at most `MAX_LOG_COST` permits in one request, whatever its
/// limit: each is a timestamp written under the key's lock.
#[test]
fn a_log_tier_caps_the_cost_of_one_request() {
    let (policy, _clock) = policy(
        "[[rules]]\nname = \"d\"\nlimit = 60000\nwindow = \"1m\"\nalgorithm = \"sliding_window_log\"\n",
    );
    let cap = tollgate::policy::MAX_LOG_COST;
    assert_eq!(
        policy.allow("a", "/", cap + 1).unwrap_err(),
        InsufficientCapacity {
            max_cost: u64::from(cap)
        }
    );
    let admitted = policy.allow("a", "/", cap).unwrap();
    assert_eq!(admitted.remaining(), 60_000 - u64::from(cap));
}

/// Every algorithm: peek consumes nothing; refund gives permits back.
#[test]
fn peek_and_refund_for_every_algorithm() {
    for algorithm in [
        "gcra",
        "token_bucket",
        "leaky_bucket",
        "fixed_window",
        "sliding_window_counter",
        "sliding_window_log",
    ] {
        let (policy, clock) = policy(&format!(
            "[[rules]]\nname = \"d\"\nlimit = 4\nwindow = \"1m\"\nalgorithm = \"{algorithm}\"\n"
        ));
        clock.set(secs(5));
        let fresh = policy.peek("c", "/", 1).unwrap();
        for _ in 0..10 {
            assert_eq!(policy.peek("c", "/", 1).unwrap(), fresh, "{algorithm}");
        }
        let admitted = (0..10)
            .filter(|_| policy.allow("c", "/", 1).unwrap().allowed())
            .count();
        assert_eq!(admitted, 4, "{algorithm}");
        assert!(!policy.peek("c", "/", 1).unwrap().allowed(), "{algorithm}");
        // Two requests were not served: give them back.
        policy.refund("c", "/", 2);
        let admitted = (0..10)
            .filter(|_| policy.allow("c", "/", 1).unwrap().allowed())
            .count();
        assert_eq!(admitted, 2, "{algorithm}");
        // Refunding more than was used never creates extra quota.
        policy.refund("c", "/", 100);
        assert_eq!(policy.peek("c", "/", 1).unwrap(), fresh, "{algorithm}");
        // Refund of an unknown key is a no-op and creates no state.
        policy.refund("stranger", "/", 1);
        let set = policy.rule_set();
        assert_eq!(policy.backend().keys(&set.rules()[0].tiers()[0]), 1);
    }
}

#[test]
fn leaky_bucket_tier_shapes_with_delay() {
    let (policy, _clock) = policy(
        r#"
        [[rules]]
        name = "shaped"
        limit = 10
        window = "1s"
        algorithm = "leaky_bucket"
        queue = 3
    "#,
    );
    let delays: Vec<_> = (0..5)
        .map(|_| policy.allow("c", "/", 1).unwrap())
        .map(|d| d.allowed().then_some(d.delay()))
        .collect();
    let ms = |m| Some(Nanos::from_millis(m));
    assert_eq!(delays, [ms(0), ms(100), ms(200), ms(300), None]);
}

#[test]
fn decorators_compose_through_the_trait() {
    let (policy, _clock) = policy(SPEC);
    let by_ref: &dyn Fn() -> bool = &|| policy.allow("x", "/", 1).unwrap().allowed();
    assert!(by_ref());
    // The trait's forms match the inherent ones.
    let via_trait = PolicyCheck::peek(&policy, "x", "/", 1).unwrap();
    assert_eq!(via_trait, policy.peek("x", "/", 1).unwrap());
}

/// Memory is bounded per tier, and under pressure the key that loses most by eviction (a
/// client that exhausted its limit) is the last to go.
#[test]
fn key_flood_stays_within_capacity_and_keeps_the_limited_key() {
    let (policy, clock) = policy(
        r#"
        capacity = 32
        [[rules]]
        name = "default"
        limit = 10
        window = "1m"
    "#,
    );
    for _ in 0..10 {
        assert!(policy.allow("hot", "/", 1).unwrap().allowed());
    }
    let set = policy.rule_set();
    let tier = &set.rules()[0].tiers()[0];
    assert_eq!(tier.capacity(), 32);
    for i in 0..5_000 {
        clock.advance(Nanos::new(1_000));
        assert!(policy
            .allow(&format!("flood-{i}"), "/", 1)
            .unwrap()
            .allowed());
        assert!(policy.backend().keys(tier) <= tier.capacity());
    }
    // Still exhausted: its state was never evicted.
    assert!(!policy.allow("hot", "/", 1).unwrap().allowed());
}

/// One time base: with the clock at Unix time (what the default clocks count), a daily
/// fixed-window quota resets at UTC midnight, not 24 h after the process started.
#[test]
fn a_daily_window_resets_at_utc_midnight() {
    // 2026-11-30T23:59:00Z, in seconds since the Unix epoch.
    const LATE_EVENING: u64 = 1_796_083_140;
    let clock = ManualClock::starting_at(secs(LATE_EVENING));
    let policy = Policy::from_toml(
        r#"
        [[rules]]
        name = "daily"
        limit = 3
        window = "1d"
        algorithm = "fixed_window"
        "#,
        clock.clone(),
    )
    .unwrap();
    for _ in 0..3 {
        assert!(policy.allow("c", "/", 1).unwrap().allowed());
    }
    let denied = policy.allow("c", "/", 1).unwrap();
    assert!(!denied.allowed());
    // Told to come back at midnight: 60 s from 23:59:00.
    assert_eq!(denied.retry_after(), secs(60));
    clock.advance(secs(59));
    assert!(!policy.allow("c", "/", 1).unwrap().allowed());
    clock.advance(secs(1));
    assert!(
        policy.allow("c", "/", 1).unwrap().allowed(),
        "a new UTC day"
    );
}
