//! Decorators: metrics counts (exact under threads) and the adaptive penalty (manual
//! clock), stacked on one policy.

use std::sync::Arc;

use tollgate::policy::{
    AdaptivePenalty, Metered, PenaltyConfig, PenaltyConfigError, Policy, PolicyCheck,
    RateLimitHeaders,
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
    let default = snapshot.iter().find(|r| &*r.rule == "default").unwrap();
    let search = snapshot.iter().find(|r| &*r.rule == "search").unwrap();
    assert_eq!((default.allowed, default.denied), (40, 40));
    // The endpoint rule admitted every request it saw (its 100 were never exhausted).
    assert_eq!((search.allowed, search.denied), (60, 0));
    // Peeks and refunds are not counted.
    metered.peek("c0", "/search", 1).unwrap();
    metered.refund("c0", "/search", 1);
    assert_eq!(metered.allowed() + metered.denied(), 80);
}

/// `Metered`'s in-place forms are the inner policy's: the endpoint is named only where a
/// rule reads it, and every check is counted once, whichever form made it.
#[test]
fn metered_checks_in_place_name_the_endpoint_only_where_rules_read_it() {
    use std::cell::Cell;
    use tollgate::policy::PolicyDecision;
    let per_client = "[[rules]]\nname = \"default\"\nlimit = 1\nwindow = \"1m\"\n";
    let metered = Metered::new(Policy::from_toml(per_client, ManualClock::new()).unwrap());
    let named = Cell::new(0);
    let endpoint = || {
        named.set(named.get() + 1);
        "/search"
    };
    let mut decision = PolicyDecision::empty();
    metered
        .allow_into_with("a", endpoint, 1, &mut decision)
        .unwrap();
    assert!(decision.allowed());
    metered
        .allow_into_with("a", endpoint, 1, &mut decision)
        .unwrap();
    assert!(!decision.allowed());
    assert_eq!(named.get(), 0, "no rule reads the endpoint");
    metered.allow_into("b", "/", 1, &mut decision).unwrap();
    assert!(decision.allowed());
    // More than the limit can ever admit: an error, not a decision, and not counted.
    assert!(metered.allow_into("c", "/", 5, &mut decision).is_err());
    assert_eq!((metered.allowed(), metered.denied()), (2, 1));
    let default = metered.snapshot();
    assert_eq!((default[0].allowed, default[0].denied), (2, 1));

    metered.inner().reload_toml(RULES).unwrap();
    metered
        .allow_into_with("a", endpoint, 1, &mut decision)
        .unwrap();
    assert_eq!(named.get(), 1, "an endpoint rule reads it, once");
    assert_eq!(metered.allowed() + metered.denied(), 4);
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
        PenaltyConfigError::DivisorTooSmall
    );
    assert_eq!(
        PenaltyConfigError::DivisorTooSmall.to_string(),
        "divisor: must be >= 2"
    );
    // A capacity no table can hold is a typed error before anything is allocated.
    let huge = AdaptivePenalty::with_capacity(
        Policy::from_toml(RULES, ManualClock::new()).unwrap(),
        penalty(),
        usize::MAX,
    );
    assert!(matches!(
        huge.unwrap_err(),
        PenaltyConfigError::CapacityTooLarge { max } if max < usize::MAX
    ));
}

/// A tier every client shares (`per = "global"`) denies nobody in particular: its denials
/// penalize no one, while the client's own tiers still do.
#[test]
fn a_global_tier_deny_penalizes_nobody() {
    let clock = ManualClock::new();
    let rules = r#"
        [[rules]]
        name = "everyone"
        per = "global"
        limit = 5
        window = "1m"
        algorithm = "fixed_window"

        [[rules]]
        name = "own"
        endpoint = "/own"
        limit = 2
        window = "1m"
        algorithm = "fixed_window"
    "#;
    let guarded =
        AdaptivePenalty::new(Policy::from_toml(rules, clock.clone()).unwrap(), penalty()).unwrap();
    // One heavy client exhausts the global limit, then everyone gets denied by it.
    for _ in 0..5 {
        assert!(guarded.allow("heavy", "/", 1).unwrap().allowed());
    }
    for client in ["a", "b", "c", "heavy"] {
        for _ in 0..4 {
            let d = guarded.allow(client, "/", 1).unwrap();
            assert!(!d.allowed());
            assert!(d.denied_by().all(|t| t.shared()));
        }
        assert!(!guarded.is_penalized(client, Nanos::ZERO), "{client}");
    }
    // Denials by a client's own tier still count.
    clock.set(Nanos::from_secs(60));
    for _ in 0..5 {
        let _ = guarded.allow("x", "/own", 1).unwrap();
    }
    assert!(guarded.is_penalized("x", Nanos::from_secs(60)));
}

/// A refund gives back the request's plain cost, never the penalty's multiple of it: a
/// request admitted before a penalty started cannot be refunded at the penalty's price.
#[test]
fn a_refund_never_gives_back_more_than_the_check_took() {
    let clock = ManualClock::new();
    let guarded =
        AdaptivePenalty::new(Policy::from_toml(RULES, clock.clone()).unwrap(), penalty()).unwrap();
    // 9 of 10 used unpenalized by "victim"; then it is penalized by its own denials (the
    // 10th admitted, 3 denied).
    for _ in 0..10 {
        assert!(guarded.allow("victim", "/home", 1).unwrap().allowed());
    }
    for _ in 0..3 {
        assert!(!guarded.allow("victim", "/home", 1).unwrap().allowed());
    }
    assert!(guarded.is_penalized("victim", Nanos::ZERO));
    // Refunding one request taken before the penalty gives back one permit, not two.
    guarded.refund("victim", "/home", 1);
    let inner = guarded.inner().peek("victim", "/home", 1).unwrap();
    assert_eq!(
        inner.remaining(),
        0,
        "one permit back, used by this peek's request"
    );
    assert!(inner.allowed());
}

trait NowForTest {
    fn now_for_test(&self) -> Nanos;
}

impl NowForTest for ManualClock {
    fn now_for_test(&self) -> Nanos {
        tollgate::Clock::now(self)
    }
}

/// Penalty state is bounded: a flood of clients past the penalty's capacity, each denied
/// (some penalized), leaves its tables at the size they had after the first denial, keeps
/// a penalized client's penalty over clients that merely have denials, and among many
/// penalized clients keeps the ones whose penalty ends last.
#[test]
fn penalty_state_is_bounded_and_keeps_the_penalties_that_matter() {
    let rules =
        "[[rules]]\nname = \"d\"\nlimit = 1\nwindow = \"1h\"\nalgorithm = \"fixed_window\"\n";
    let clock = ManualClock::new();
    let policy = Policy::from_toml(rules, clock.clone()).unwrap();
    let config = PenaltyConfig {
        denials: 3,
        period: Nanos::from_secs(60),
        divisor: 2,
        cooldown: Nanos::from_secs(86_400),
    };
    let guarded = AdaptivePenalty::with_capacity(policy, config, 1_000).unwrap();
    assert_eq!(
        guarded.memory_bytes(),
        0,
        "nothing allocated before a denial"
    );
    for _ in 0..4 {
        guarded.allow("abuser", "/", 1).unwrap();
    }
    assert!(guarded.is_penalized("abuser", clock.now_for_test()));
    let bytes = guarded.memory_bytes();
    assert!(bytes > 0);
    // 20 000 clients, each denied once (one admitted, one denied): none penalized.
    for i in 0..20_000 {
        let client = format!("c{i}");
        guarded.allow(&client, "/", 1).unwrap();
        assert!(!guarded.allow(&client, "/", 1).unwrap().allowed());
    }
    assert_eq!(guarded.memory_bytes(), bytes, "bounded: no growth");
    assert!(guarded.is_penalized("abuser", clock.now_for_test()));
    // 5 000 clients penalized one second apart (each for a day), five times the capacity:
    // the latest penalties survive (an eviction forgives the penalty closest to its end
    // first).
    for i in 0..5_000u64 {
        clock.set(Nanos::from_secs(i));
        let client = format!("p{i}");
        for _ in 0..4 {
            guarded.allow(&client, "/", 1).unwrap();
        }
    }
    let now = clock.now_for_test();
    assert_eq!(guarded.memory_bytes(), bytes, "bounded: no growth");
    assert!(guarded.is_penalized("p4999", now));
    let kept = (4_500..5_000)
        .filter(|i| guarded.is_penalized(&format!("p{i}"), now))
        .count();
    assert!(kept >= 450, "the latest 500 penalties mostly kept: {kept}");
    let early = (0..1_000)
        .filter(|i| guarded.is_penalized(&format!("p{i}"), now))
        .count();
    assert!(
        early <= 100,
        "the earliest penalties forgiven first: {early} kept"
    );
    eprintln!("kept {kept} of the latest 500, {early} of the earliest 1000");
}
