//! Every rule of `rules.toml` (next to this file) at work: the rules a request meets, the
//! headers it gets, a 429, the partner's tiers, a live reload.
//! `cargo run -p tollgate --example rules_tour`
use tollgate::policy::{Policy, RateLimitHeaders};
use tollgate::{ManualClock, Nanos};

const RULES: &str = include_str!("rules.toml");

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let clock = ManualClock::starting_at(Nanos::from_secs(30)); // or MonotonicClock::new()
    let policy = Policy::from_toml(RULES, clock.clone())?;

    // acct_123 on /search: its own 500/min and the endpoint's 10/min both apply.
    let decision = policy.allow("acct_123", "/search", 1)?;
    assert!(decision.allowed());
    assert_eq!(decision.remaining(), 9);
    let headers = RateLimitHeaders::from_policy_decision(&decision);
    let lines: Vec<String> = headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}"))
        .collect();
    assert_eq!(
        lines,
        [
            r#"RateLimit-Policy: "acct_123";q=500;w=60, "search";q=10;w=60"#,
            r#"RateLimit: "acct_123";r=499;t=1, "search";r=9;t=30"#,
            "X-RateLimit-Limit: 10",
            "X-RateLimit-Remaining: 9",
            "X-RateLimit-Reset: 30",
        ]
    );

    // Nine more pass; the eleventh is a 429 with Retry-After.
    for _ in 0..9 {
        assert!(policy.allow("acct_123", "/search", 1)?.allowed());
    }
    let denied = policy.allow("acct_123", "/search", 1)?;
    assert_eq!(RateLimitHeaders::status(&denied.decision), 429);
    let headers = RateLimitHeaders::from_policy_decision(&denied);
    assert_eq!(
        headers.get("RateLimit"),
        Some(r#""acct_123";r=490;t=2, "search";r=0;t=30"#)
    );
    assert_eq!(headers.get("Retry-After"), Some("30"));

    // The partner: 5 at once, then the burst refills at 5 per second; the day caps the total.
    let admitted = (0..8)
        .filter(|_| policy.allow("partner", "/search", 1).unwrap().allowed())
        .count();
    assert_eq!(admitted, 5);
    let denied = policy.allow("partner", "/export", 1)?;
    assert_eq!(
        RateLimitHeaders::from_policy_decision(&denied).get("RateLimit"),
        Some(r#""burst";r=0;t=1, "daily";r=9995;t=172770"#),
    );

    // An operator raises acct_123 to 1000/min: the next request sees it, no restart, and
    // the permits already used still count.
    policy.reload_toml(&RULES.replace("limit = 500", "limit = 1000"))?;
    let next = policy.allow("acct_123", "/home", 1)?;
    assert_eq!((next.limit(), next.remaining()), (1000, 989));
    println!("rules_tour: every assertion held");
    Ok(())
}
