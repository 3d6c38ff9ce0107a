//! A policy from a rules file (`rules.toml`, next to this file): what a request gets, a
//! 429, a live reload. `cargo run -p tollgate --example rules_file`
use tollgate::policy::{Policy, RateLimitHeaders};
use tollgate::{ManualClock, Nanos};

const RULES: &str = include_str!("rules.toml");

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A clock the example sets; a server passes `MonotonicClock::new()`.
    let policy = Policy::from_toml(RULES, ManualClock::starting_at(Nanos::from_secs(30)))?;

    // acct_123 on /search: its own 500/min and the endpoint's 10/min both apply.
    for _ in 0..10 {
        assert!(policy.allow("acct_123", "/search", 1)?.allowed());
    }
    let denied = policy.allow("acct_123", "/search", 1)?;
    let headers = RateLimitHeaders::from_policy_decision(&denied);
    assert_eq!(RateLimitHeaders::status(&denied.decision), 429);
    assert_eq!(
        headers.get("RateLimit"),
        Some(r#""acct_123";r=490;t=2, "search";r=0;t=30"#)
    );
    assert_eq!(headers.get("Retry-After"), Some("30"));

    // The deny list refuses acct_666 for good (no Retry-After: waiting does not end it),
    // and the probes' network is never limited.
    let refused = policy.allow("acct_666", "/search", 1)?;
    assert!(refused.is_ban());
    assert_eq!(
        refused.listing().and_then(|l| l.reason()),
        Some("chargeback fraud: write to billing@example.com")
    );
    assert!(RateLimitHeaders::from_policy_decision(&refused)
        .get("Retry-After")
        .is_none());
    for _ in 0..20 {
        assert!(policy.allow("10.20.0.7", "/search", 1)?.allowed());
    }

    // An operator raises acct_123 to 1000/min: no restart, the permits used still count.
    policy.reload_toml(&RULES.replace("limit = 500", "limit = 1000"))?;
    let next = policy.allow("acct_123", "/home", 1)?;
    assert_eq!((next.limit(), next.remaining()), (1000, 989));
    println!("rules_file: every assertion held");
    Ok(())
}
