//! Golden tests: the exact headers rendered from decisions.

use tollgate::policy::{Policy, PolicyDecision, RateLimitHeaders, RuleId, TierLabel};
use tollgate::{Decision, ManualClock, Nanos};

fn render(headers: &RateLimitHeaders) -> Vec<String> {
    headers.iter().map(|(n, v)| format!("{n}: {v}")).collect()
}

const RULES: &str = r#"
    [[rules]]
    name = "default"
    limit = 100
    window = "1m"
    algorithm = "fixed_window"

    [[rules]]
    name = "search"
    endpoint = "/search"
    [[rules.tiers]]
    name = "burst"
    limit = 2
    window = "1s"
    algorithm = "gcra"
    [[rules.tiers]]
    name = "daily"
    limit = 1000
    window = "1d"
    algorithm = "fixed_window"
"#;

#[test]
fn allowed_request_lists_every_tier() {
    let clock = ManualClock::starting_at(Nanos::from_millis(30_250));
    let policy = Policy::from_toml(RULES, clock).unwrap();
    let d = policy.allow("acct_123", "/search", 1).unwrap();
    assert_eq!(
        render(&RateLimitHeaders::from_policy_decision(&d)),
        [
            "RateLimit-Policy: \"default\";q=100;w=60, \"burst\";q=2;w=1, \"daily\";q=1000;w=86400",
            // fixed window: 29.75 s to the minute boundary, rounded up; gcra: 0.5 s to
            // refill, rounded up; day: the rest of the day.
            "RateLimit: \"default\";r=99;t=30, \"burst\";r=1;t=1, \"daily\";r=999;t=86370",
            "X-RateLimit-Limit: 2",
            "X-RateLimit-Remaining: 1",
            "X-RateLimit-Reset: 1",
        ]
    );
}

#[test]
fn denied_request_has_retry_after_never_zero() {
    let clock = ManualClock::starting_at(Nanos::from_secs(30));
    let policy = Policy::from_toml(RULES, clock).unwrap();
    policy.allow("acct_123", "/search", 1).unwrap();
    policy.allow("acct_123", "/search", 1).unwrap();
    let d = policy.allow("acct_123", "/search", 1).unwrap();
    assert!(!d.allowed());
    assert_eq!(d.retry_after(), Nanos::from_millis(500));
    assert_eq!(
        render(&RateLimitHeaders::from_policy_decision(&d)),
        [
            "RateLimit-Policy: \"default\";q=100;w=60, \"burst\";q=2;w=1, \"daily\";q=1000;w=86400",
            // The request was refused: the admitting tiers report their state without it.
            "RateLimit: \"default\";r=98;t=30, \"burst\";r=0;t=1, \"daily\";r=998;t=86370",
            "X-RateLimit-Limit: 2",
            "X-RateLimit-Remaining: 0",
            "X-RateLimit-Reset: 1",
            "Retry-After: 1",
        ]
    );
}

#[test]
fn single_decision_rendering() {
    let allowed = Decision::allow(100, 50, Nanos::from_secs(30));
    assert_eq!(
        render(
            &RateLimitHeaders::from_decision("default", 100, Nanos::from_secs(60), &allowed)
                .unwrap()
        ),
        [
            "RateLimit-Policy: \"default\";q=100;w=60",
            "RateLimit: \"default\";r=50;t=30",
            "X-RateLimit-Limit: 100",
            "X-RateLimit-Remaining: 50",
            "X-RateLimit-Reset: 30",
        ]
    );
    // A deny that could pass in 1 ns still says "1 second", never 0.
    let denied = Decision::deny(10, 0, Nanos::new(1), Nanos::new(1));
    let h = RateLimitHeaders::from_decision("tiny", 10, Nanos::from_millis(1), &denied).unwrap();
    assert_eq!(
        render(&h),
        [
            "RateLimit-Policy: \"tiny\";q=10;w=1",
            "RateLimit: \"tiny\";r=0;t=1",
            "X-RateLimit-Limit: 10",
            "X-RateLimit-Remaining: 0",
            "X-RateLimit-Reset: 1",
            "Retry-After: 1",
        ]
    );
    // Whole seconds round up: 2.000000001 s is 3.
    let denied = Decision::deny(10, 0, Nanos::from_secs(5), Nanos::new(2_000_000_001));
    assert_eq!(RateLimitHeaders::retry_after(&denied).as_deref(), Some("3"));
    assert_eq!(RateLimitHeaders::retry_after(&allowed), None);
    // Retry-After is never earlier than the `t` it accompanies.
    let h = RateLimitHeaders::from_decision("x", 10, Nanos::from_secs(60), &denied).unwrap();
    assert_eq!(h.get("RateLimit"), Some("\"x\";r=0;t=3"));
    assert_eq!(h.get("retry-after"), Some("3"));
}

/// A decision of one tier named `name` (a leaked label: the test's own).
fn one_tier(name: &'static str) -> PolicyDecision {
    let label: &'static TierLabel = Box::leak(Box::new(TierLabel {
        rule: RuleId(0),
        rule_name: "r".into(),
        name: name.into(),
        quota: 5,
        window: Nanos::from_secs(1),
        shared: false,
    }));
    PolicyDecision::combine([(label, Decision::allow(5, 4, Nanos::from_millis(200)))])
}

#[test]
fn names_are_escaped_as_structured_field_strings() {
    let decision = one_tier("a \"quoted\" \\ name");
    let tier = decision.tiers();
    assert_eq!(
        RateLimitHeaders::policy_value(tier),
        "\"a \\\"quoted\\\" \\\\ name\";q=5;w=1"
    );
    assert_eq!(
        RateLimitHeaders::limit_value(tier),
        "\"a \\\"quoted\\\" \\\\ name\";r=4;t=1"
    );
}

/// Issue 16, item 5: a caller-supplied policy name never smuggles a line break, a raw
/// quote or any other byte outside printable ASCII into a header value.
#[test]
fn from_decision_rejects_names_that_would_break_the_header() {
    let d = Decision::allow(10, 9, Nanos::from_secs(1));
    for bad in [
        "a\r\nSet-Cookie: x=1",
        "line\nbreak",
        "cr\r",
        "nul\0",
        "tab\t",
        "caf\u{e9}",
        "",
    ] {
        let err = RateLimitHeaders::from_decision(bad, 10, Nanos::from_secs(1), &d)
            .expect_err("a name outside printable ASCII is an error");
        assert_eq!(err.name(), bad);
        assert!(!err.to_string().contains('\n'), "{err}");
    }
    // Quotes and backslashes are legal in an sf-string: escaped, never raw.
    let h = RateLimitHeaders::from_decision("a\"b\\c", 10, Nanos::from_secs(1), &d).unwrap();
    assert_eq!(h.get("RateLimit-Policy"), Some("\"a\\\"b\\\\c\";q=10;w=1"));
    assert_eq!(h.get("RateLimit"), Some("\"a\\\"b\\\\c\";r=9;t=1"));
}

/// Tier labels are plain public structs: a name built by hand with control characters is
/// rendered with each such character replaced by `?`, never copied into the value.
#[test]
fn tier_names_outside_printable_ascii_are_replaced() {
    let decision = one_tier("x\r\nInjected: 1\u{e9}");
    for value in [
        RateLimitHeaders::policy_value(decision.tiers()),
        RateLimitHeaders::limit_value(decision.tiers()),
    ] {
        assert!(
            value.bytes().all(|b| (b' '..=b'~').contains(&b)),
            "{value:?}"
        );
        assert!(value.starts_with("\"x??Injected: 1?\";"), "{value:?}");
    }
}

/// Parses `"name";k=V;k=V, …` into each item's integer parameters, in order.
fn items(field: &str) -> Vec<Vec<(String, u64)>> {
    field
        .split(", ")
        .map(|item| {
            item.split(';')
                .skip(1)
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap();
                    (k.to_owned(), v.parse().unwrap())
                })
                .collect()
        })
        .collect()
}

fn param(item: &[(String, u64)], key: &str) -> u64 {
    item.iter().find(|(k, _)| k == key).unwrap().1
}

/// `RateLimit-Policy` and `RateLimit` never contradict each other: for every algorithm,
/// with a burst or queue above, equal to and below the rate, `q` is what `r` counts down
/// from (`r ≤ q` on every response of a trace that drains the tier and lets it refill),
/// and `q / w` is the configured rate.
#[test]
fn remaining_never_exceeds_the_advertised_quota() {
    let tiers = [
        ("gcra", "burst = 10", 10, 120),
        ("gcra", "burst = 5", 5, 60),
        ("gcra", "burst = 2", 2, 24),
        ("token_bucket", "burst = 10", 10, 120),
        ("token_bucket", "burst = 3", 3, 36),
        ("leaky_bucket", "queue = 9", 10, 120),
        ("leaky_bucket", "queue = 4", 5, 60),
        ("fixed_window", "", 5, 60),
        ("sliding_window_counter", "", 5, 60),
        ("sliding_window_log", "", 5, 60),
    ];
    for (algorithm, extra, q, w) in tiers {
        let rules = format!(
            "[[rules]]\nname = \"t\"\nlimit = 5\nwindow = \"1m\"\nalgorithm = \"{algorithm}\"\n{extra}\n"
        );
        let clock = ManualClock::starting_at(Nanos::from_secs(600));
        let policy = Policy::from_toml(&rules, clock.clone()).unwrap();
        let mut denied = 0;
        for step in 0..40 {
            let d = policy.allow("c", "/", 1).unwrap();
            denied += u32::from(!d.allowed());
            let headers = RateLimitHeaders::from_policy_decision(&d);
            let field = |name: &str| {
                headers
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.to_owned())
                    .unwrap()
            };
            let advertised = &items(&field("RateLimit-Policy"))[0];
            let state = &items(&field("RateLimit"))[0];
            let case = format!("{algorithm} {extra}, step {step}");
            assert_eq!(
                (param(advertised, "q"), param(advertised, "w")),
                (q, w),
                "{case}"
            );
            assert!(param(state, "r") <= q, "{case}: {state:?}");
            // Bursts of requests, then pauses that let the tier refill part way.
            let pause = if step % 8 == 7 { 20 } else { 0 };
            clock.advance(Nanos::from_millis(100 + pause * 1_000));
        }
        assert!(
            denied > 0,
            "{algorithm} {extra}: the trace never drained the tier"
        );
    }
}
