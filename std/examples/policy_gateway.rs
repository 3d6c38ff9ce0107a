//! A simulated API gateway in front of a rules file: each request is checked against every
//! matching rule, answered 200 or 429, and given its rate-limit headers. Then an operator
//! raises a client's limit without a restart.
//!
//! Run: `cargo run -p tollgate --example policy_gateway`

use tollgate::policy::{Policy, RateLimitHeaders};
use tollgate::{ManualClock, Nanos};

const RULES: &str = r#"
[[rules]]
name = "default"
limit = 100
window = "1m"

[[rules]]
name = "acct_123"
client = "acct_123"
limit = 100
window = "1m"

[[rules]]
name = "search"
endpoint = "/search"
limit = 3
window = "10s"
algorithm = "fixed_window"
"#;

fn serve(policy: &Policy<ManualClock>, client: &str, endpoint: &str) {
    let decision = match policy.allow(client, endpoint, 1) {
        Ok(decision) => decision,
        Err(e) => {
            println!("{client} {endpoint}: 413 ({e})");
            return;
        }
    };
    let status = RateLimitHeaders::status(&decision.decision);
    println!("{client} GET {endpoint} -> {status}");
    for (name, value) in RateLimitHeaders::from_policy_decision(&decision).iter() {
        println!("    {name}: {value}");
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let clock = ManualClock::starting_at(Nanos::from_secs(5));
    let policy = Policy::from_toml(RULES, clock.clone())?;

    println!("# acct_123 calls /search four times in a row");
    for _ in 0..4 {
        serve(&policy, "acct_123", "/search");
    }

    println!("\n# five seconds later the /search window has rolled over");
    clock.advance(Nanos::from_secs(5));
    serve(&policy, "acct_123", "/search");

    println!("\n# the operator raises acct_123 to 500/min (no restart, usage kept)");
    policy.reload_toml(&RULES.replacen(
        "limit = 100\nwindow = \"1m\"\n\n[[rules]]\nname = \"search\"",
        "limit = 500\nwindow = \"1m\"\n\n[[rules]]\nname = \"search\"",
        1,
    ))?;
    serve(&policy, "acct_123", "/home");
    Ok(())
}
