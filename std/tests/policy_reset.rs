//! `Policy::reset`: a client's state forgotten under the tiers a request matches (every
//! algorithm, across a reload's generations), rules every client shares left alone, and a
//! penalty lifted by the decorator.

use tollgate::policy::{AdaptivePenalty, PenaltyConfig, Policy, PolicyCheck, Request};
use tollgate::{ManualClock, Nanos};

const ALGORITHMS: [&str; 6] = [
    "gcra",
    "token_bucket",
    "leaky_bucket",
    "fixed_window",
    "sliding_window_counter",
    "sliding_window_log",
];

fn rules(algorithm: &str, limit: u32) -> String {
    format!(
        r#"
        [[rules]]
        name = "default"
        limit = {limit}
        window = "1m"
        algorithm = "{algorithm}"

        [[rules]]
        name = "everyone"
        endpoint = "/shared"
        per = "global"
        limit = 3
        window = "1m"
        "#
    )
}

/// How many of `n` checks of cost 1 are admitted.
fn admitted(policy: &Policy<ManualClock>, client: &str, endpoint: &str, n: usize) -> usize {
    (0..n)
        .filter(|_| policy.allow(client, endpoint, 1).unwrap().allowed())
        .count()
}

#[test]
fn a_reset_client_starts_afresh_under_every_algorithm() {
    for algorithm in ALGORITHMS {
        let clock = ManualClock::starting_at(Nanos::from_secs(1_000));
        let policy = Policy::from_toml(&rules(algorithm, 4), clock.clone()).unwrap();
        assert_eq!(admitted(&policy, "a", "/", 6), 4, "{algorithm}");
        assert_eq!(admitted(&policy, "b", "/", 2), 2, "{algorithm}");
        assert_eq!(
            policy.peek("a", "/", 0).unwrap().remaining(),
            0,
            "{algorithm}"
        );
        policy.reset("a", "/");
        assert_eq!(
            policy.peek("a", "/", 0).unwrap().remaining(),
            4,
            "{algorithm}"
        );
        assert_eq!(
            admitted(&policy, "a", "/", 6),
            4,
            "{algorithm}: after the reset"
        );
        // Another client keeps what it used.
        assert_eq!(
            admitted(&policy, "b", "/", 6),
            2,
            "{algorithm}: b untouched"
        );
    }
}

#[test]
fn a_reset_reaches_keys_still_in_an_older_generation() {
    for algorithm in ALGORITHMS {
        let clock = ManualClock::starting_at(Nanos::from_secs(1_000));
        let policy = Policy::from_toml(&rules(algorithm, 4), clock.clone()).unwrap();
        assert_eq!(admitted(&policy, "a", "/", 4), 4, "{algorithm}");
        // A reload that changes the tier: "a" stays in the old generation until touched.
        policy.reload_toml(&rules(algorithm, 6)).unwrap();
        assert_eq!(
            policy.peek("a", "/", 0).unwrap().remaining(),
            2,
            "{algorithm}: carried"
        );
        policy.reset("a", "/");
        assert_eq!(
            admitted(&policy, "a", "/", 8),
            6,
            "{algorithm}: fresh under the new rule"
        );
    }
}

#[test]
fn a_reset_leaves_rules_every_client_shares() {
    let clock = ManualClock::starting_at(Nanos::from_secs(1_000));
    let policy = Policy::from_toml(&rules("gcra", 100), clock).unwrap();
    assert_eq!(admitted(&policy, "a", "/shared", 5), 3);
    policy.reset("a", "/shared");
    // The global tier is everyone's: a reset of one client does not refill it.
    assert_eq!(admitted(&policy, "a", "/shared", 5), 0);
    // ... while the client's own tier on that request (the default rule) was forgotten,
    // and the denied checks since took nothing.
    assert_eq!(policy.peek("a", "/", 0).unwrap().remaining(), 100);
}

#[test]
fn a_reset_through_the_penalty_lifts_it() {
    let clock = ManualClock::starting_at(Nanos::from_secs(1_000));
    let policy = Policy::from_toml(&rules("fixed_window", 4), clock.clone()).unwrap();
    let penalty = PenaltyConfig {
        denials: 1,
        period: Nanos::from_secs(60),
        divisor: 2,
        cooldown: Nanos::from_secs(600),
    };
    let guarded = AdaptivePenalty::new(policy, penalty).unwrap();
    let now = tollgate::Clock::now(&clock);
    for _ in 0..5 {
        guarded.allow("a", "/", 1).unwrap();
    }
    assert!(guarded.is_penalized("a", now));
    assert_eq!(guarded.peek("a", "/", 1).unwrap().limit(), 2);
    guarded.reset_at(&Request::new("a", "/", 0), now);
    assert!(!guarded.is_penalized("a", now));
    let admitted = (0..6)
        .filter(|_| guarded.allow("a", "/", 1).unwrap().allowed())
        .count();
    assert_eq!(admitted, 4, "the full limit again");
}

#[test]
fn an_awaited_reset_is_the_same_reset() {
    let clock = ManualClock::starting_at(Nanos::from_secs(1_000));
    let policy = Policy::from_toml(&rules("sliding_window_log", 2), clock).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        assert!(policy.allow_async("a", "/", 2).await.unwrap().allowed());
        assert!(!policy.allow_async("a", "/", 1).await.unwrap().allowed());
        policy.reset_async("a", "/").await;
        assert!(policy.allow_async("a", "/", 2).await.unwrap().allowed());
    });
}
