//! Decorators: metrics counts (exact under threads) and the adaptive penalty (manual
//! clock), stacked on one policy.

use std::sync::Arc;

use tollgate::policy::{
    AdaptivePenalty, Metered, PenaltyConfig, Policy, PolicyCheck, RateLimitHeaders,
};
use tollgate::{ManualClock, Nanos};

const RULES: &str = r#"
    [[rules]]
    name = "default"
    limit = 10
    window = "1m"
    algorithm = "fixed_window"

    [[rules]]
    name = "search"
    endpoint = "/search"
    per = "global"
    limit = 100
    window = "1m"
    algorithm = "fixed_window"
"#;

#[test]
fn metrics_count_allowed_and_denied_per_rule_under_threads() {
    let clock = ManualClock::new();
    let metered = Arc::new(Metered::new(Policy::from_toml(RULES, clock).unwrap()));
    std::thread::scope(|s| {
        for t in 0..4 {
            let metered = metered.clone();
            s.spawn(move || {
                let client = format!("c{t}");
                for _ in 0..15 {
                    metered.allow(&client, "/search", 1).unwrap();
                }
                for _ in 0..5 {
                    metered.allow(&client, "/home", 1).unwrap();
                }
            });
        }
    });
    // Each client: 10 admitted on /search, then 5 denied there and 5 denied on /home.
    assert_eq!(metered.allowed(), 40);
    assert_eq!(metered.denied(), 40);
    let snapshot = metered.snapshot();
    let default = snapshot.iter().find(|r| r.rule == "default").unwrap();
    let search = snapshot.iter().find(|r| r.rule == "search").unwrap();
    assert_eq!((default.allowed, default.denied), (40, 40));
    // The endpoint rule admitted every request it saw (its 100 were never exhausted).
    assert_eq!((search.allowed, search.denied), (60, 0));
    // Peeks and refunds are not counted.
    metered.peek("c0", "/search", 1).unwrap();
    metered.refund("c0", "/search", 1);
    assert_eq!(metered.allowed() + metered.denied(), 80);
}

#[test]
fn rule_ids_are_stable_across_reloads() {
    let metered = Metered::new(Policy::from_toml(RULES, ManualClock::new()).unwrap());
    metered.allow("a", "/search", 1).unwrap();
    // Reload with the rules in the other order: same names, same ids, same counters.
    let reordered = "[[rules]]\nname = \"search\"\nendpoint = \"/search\"\nper = \"global\"\nlimit = 100\nwindow = \"1m\"\nalgorithm = \"fixed_window\"\n[[rules]]\nname = \"default\"\nlimit = 10\nwindow = \"1m\"\nalgorithm = \"fixed_window\"\n";
    metered.inner().reload_toml(reordered).unwrap();
    metered.allow("a", "/search", 1).unwrap();
    let snapshot = metered.snapshot();
    assert_eq!(snapshot.len(), 2);
    assert!(snapshot.iter().all(|r| r.allowed == 2), "{snapshot:?}");
}

fn penalty() -> PenaltyConfig {
    PenaltyConfig {
        denials: 3,
        period: Nanos::from_secs(60),
        divisor: 2,
        cooldown: Nanos::from_secs(300),
    }
}

#[test]
fn penalty_drops_the_limit_for_a_cooldown_then_recovers() {
    let clock = ManualClock::new();
    let policy = Policy::from_toml(RULES, clock.clone()).unwrap();
    let guarded = AdaptivePenalty::new(policy, penalty()).unwrap();
    let admitted = |n: usize| {
        (0..n)
            .filter(|_| guarded.allow("abuser", "/home", 1).unwrap().allowed())
            .count()
    };
    // Minute 0: 10 admitted, then 2 denials: not yet penalized.
    assert_eq!(admitted(12), 10);
    assert!(!guarded.is_penalized("abuser", clock.now_for_test()));
    // The third denial within the minute triggers the penalty.
    assert_eq!(admitted(1), 0);
    assert_eq!(
        guarded.penalized_until("abuser", Nanos::from_secs(1)),
        Some(Nanos::from_secs(300))
    );
    // Minute 1 (penalized): the limit is 10 / 2 = 5, and the decision says so.
    clock.set(Nanos::from_secs(60));
    let first = guarded.allow("abuser", "/home", 1).unwrap();
    assert_eq!((first.limit(), first.remaining()), (5, 4));
    let headers = RateLimitHeaders::from_policy_decision(&first);
    assert_eq!(
        headers.get("RateLimit-Policy"),
        Some("\"default\";q=5;w=60")
    );
    assert_eq!(admitted(10), 4);
    // A well-behaved client is unaffected.
    assert_eq!(
        (0..12)
            .filter(|_| guarded.allow("polite", "/home", 1).unwrap().allowed())
            .count(),
        10
    );
    // Minute 1 saw 5 more denials: hammering while penalized re-triggered the penalty at
    // t = 60 s, so the cooldown now ends at 360 s.
    assert_eq!(
        guarded.penalized_until("abuser", Nanos::from_secs(61)),
        Some(Nanos::from_secs(360))
    );
    // Still penalized at 300 s (a peek shows the reduced limit and counts nothing).
    clock.set(Nanos::from_secs(300));
    assert_eq!(guarded.peek("abuser", "/home", 1).unwrap().limit(), 5);
    // Recovered after the cooldown: the full limit again.
    clock.set(Nanos::from_secs(360));
    assert!(!guarded.is_penalized("abuser", Nanos::from_secs(360)));
    assert_eq!(guarded.peek("abuser", "/home", 1).unwrap().limit(), 10);
    assert_eq!(admitted(10), 10);
}

#[test]
fn decorators_stack() {
    let clock = ManualClock::new();
    let policy = Policy::from_toml(RULES, clock.clone()).unwrap();
    let stack = Metered::new(AdaptivePenalty::new(policy, penalty()).unwrap());
    for _ in 0..13 {
        stack.allow("x", "/home", 1).unwrap();
    }
    assert_eq!((stack.allowed(), stack.denied()), (10, 3));
    assert!(stack.inner().is_penalized("x", Nanos::ZERO));
    assert!(PenaltyConfig {
        denials: 0,
        ..penalty()
    }
    .validate()
    .is_err());
    assert_eq!(
        AdaptivePenalty::new(
            Policy::from_toml(RULES, clock).unwrap(),
            PenaltyConfig {
                divisor: 1,
                ..penalty()
            }
        )
        .unwrap_err(),
        "divisor: must be >= 2"
    );
}

trait NowForTest {
    fn now_for_test(&self) -> Nanos;
}

impl NowForTest for ManualClock {
    fn now_for_test(&self) -> Nanos {
        tollgate::Clock::now(self)
    }
}
