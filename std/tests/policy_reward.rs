//! The adaptive penalty's reward (manual clock, in-process store): steps earned by active
//! windows without a deny, up to the cap; lost at a deny, faded by quiet; never for a new
//! or penalized client; never more than the multiplier's share admitted (proptest).

use proptest::prelude::*;
use tollgate::policy::{
    AdaptivePenalty, PenaltyConfig, PenaltyConfigError, Policy, PolicyCheck, Request, RewardConfig,
};
use tollgate::{ManualClock, Nanos};

const RULES: &str = r#"
    [[rules]]
    name = "default"
    limit = 10
    window = "1m"
    algorithm = "fixed_window"
"#;

const MINUTE: u64 = 60_000_000_000;

fn penalty() -> PenaltyConfig {
    PenaltyConfig {
        denials: 3,
        period: Nanos::from_secs(60),
        divisor: 2,
        cooldown: Nanos::from_secs(600),
    }
}

/// One step per active minute, doubling, up to 4.
fn reward() -> RewardConfig {
    RewardConfig {
        window: Nanos::from_secs(60),
        quiet_windows: 1,
        factor: 2,
        max_factor: 4,
    }
}

fn guarded() -> AdaptivePenalty<Policy<ManualClock>> {
    let policy = Policy::from_toml(RULES, ManualClock::new()).unwrap();
    AdaptivePenalty::new(policy, penalty())
        .unwrap()
        .reward(reward())
        .unwrap()
}

fn at(g: &AdaptivePenalty<Policy<ManualClock>>, ns: u64) {
    g.inner().clock().set(Nanos::new(ns));
}

/// Admitted requests of `client` until the first deny (at most `max`).
fn admitted_until_denied(g: &AdaptivePenalty<Policy<ManualClock>>, client: &str, max: u32) -> u32 {
    for n in 0..max {
        if !g.allow(client, "/", 1).unwrap().allowed() {
            return n;
        }
    }
    max
}

#[test]
fn a_steady_client_earns_steps_up_to_the_cap_and_a_deny_takes_them() {
    let g = guarded();
    // One request a minute: ×1 in the first minute, ×2 once one is complete, then ×4,
    // and ×4 it stays (its standing is kept at the top while it stays active).
    let mut multipliers = Vec::new();
    for minute in 0..8 {
        at(&g, minute * MINUTE + 1_000_000_000);
        let d = g.allow("steady", "/", 1).unwrap();
        assert!(d.allowed());
        multipliers.push(g.reward_multiplier("steady", g.now()));
    }
    assert_eq!(multipliers, [1, 2, 4, 4, 4, 4, 4, 4]);
    // A rewarded decision reports the raised limit.
    assert_eq!(g.peek("steady", "/", 1).unwrap().limit(), 40);
    // In a fresh minute at ×4: every fourth check is charged, so the limit of 10 admits
    // 37 to 40 (the count's phase decides the last three); then a deny takes the reward.
    at(&g, 8 * MINUTE + 1_000_000_000);
    let admitted = admitted_until_denied(&g, "steady", 100);
    assert!((37..=40).contains(&admitted), "{admitted}");
    assert_eq!(g.reward_multiplier("steady", g.now()), 1);
    assert_eq!(g.peek("steady", "/", 1).unwrap().limit(), 10);
    // The inner policy's own state holds exactly its limit.
    assert_eq!(g.inner().peek("steady", "/", 1).unwrap().remaining(), 0);
}

#[test]
fn standing_fades_when_the_client_goes_quiet() {
    let g = guarded();
    for minute in 0..4 {
        at(&g, minute * MINUTE);
        assert!(g.allow("c", "/", 1).unwrap().allowed());
    }
    assert_eq!(g.reward_multiplier("c", g.now()), 4);
    // Each quiet minute takes one minute of standing away: two steps at 4, one at 5,
    // none from 6.
    at(&g, 4 * MINUTE);
    assert_eq!(g.reward_multiplier("c", g.now()), 4);
    at(&g, 5 * MINUTE);
    assert_eq!(g.reward_multiplier("c", g.now()), 2);
    at(&g, 6 * MINUTE);
    assert_eq!(g.reward_multiplier("c", g.now()), 1);
    // Back to work at 7: standing is earned again from what was left.
    at(&g, 7 * MINUTE);
    assert!(g.allow("c", "/", 1).unwrap().allowed());
    assert_eq!(g.reward_multiplier("c", g.now()), 2);
}

#[test]
fn a_new_or_penalized_client_has_no_reward() {
    let g = guarded();
    assert_eq!(g.reward_multiplier("new", Nanos::ZERO), 1);
    assert_eq!(g.peek("new", "/", 1).unwrap().limit(), 10);
    // Earned ×2, then three denials in a minute: penalized, and the reward is gone.
    at(&g, 0);
    g.allow("p", "/", 1).unwrap();
    at(&g, MINUTE);
    g.allow("p", "/", 1).unwrap();
    assert_eq!(g.reward_multiplier("p", g.now()), 2);
    let admitted = admitted_until_denied(&g, "p", 100);
    assert!((17..=20).contains(&admitted), "{admitted}");
    g.allow("p", "/", 1).unwrap();
    g.allow("p", "/", 1).unwrap();
    assert!(g.is_penalized("p", g.now()));
    assert_eq!(g.reward_multiplier("p", g.now()), 1);
    assert_eq!(g.peek("p", "/", 1).unwrap().limit(), 5);
    // A reset lifts both.
    g.reset_at(&Request::new("p", "/", 0), g.now());
    assert!(!g.is_penalized("p", g.now()));
    assert_eq!(g.peek("p", "/", 1).unwrap().limit(), 10);
}

/// A client active every minute of its ten-minute penalty leaves it with no standing:
/// what it earned while penalized is taken as it is marked.
#[test]
fn a_penalized_client_earns_no_standing() {
    let g = guarded();
    at(&g, 0);
    // 10 admitted, then three denials: penalized until minute 10.
    assert_eq!(admitted_until_denied(&g, "p", 100), 10);
    g.allow("p", "/", 1).unwrap();
    g.allow("p", "/", 1).unwrap();
    assert!(g.is_penalized("p", g.now()));
    for minute in 1..10 {
        at(&g, minute * MINUTE);
        assert!(g.allow("p", "/", 1).unwrap().allowed());
    }
    at(&g, 10 * MINUTE + 1);
    assert!(!g.is_penalized("p", g.now()));
    assert_eq!(g.reward_multiplier("p", g.now()), 1);
    // Its first active minute after the penalty counts, as a new client's would.
    assert!(g.allow("p", "/", 1).unwrap().allowed());
    at(&g, 11 * MINUTE + 1);
    assert!(g.allow("p", "/", 1).unwrap().allowed());
    assert_eq!(g.reward_multiplier("p", g.now()), 2);
}

#[test]
fn with_a_reward_a_refund_gives_nothing_back() {
    let g = guarded();
    for minute in 0..2 {
        at(&g, minute * MINUTE);
        g.allow("r", "/", 1).unwrap();
    }
    assert_eq!(g.reward_multiplier("r", g.now()), 2);
    let before = g.inner().peek("r", "/", 1).unwrap().remaining();
    g.refund("r", "/", 1);
    assert_eq!(g.inner().peek("r", "/", 1).unwrap().remaining(), before);
    // With a reward configured no refund gives anything back, an unrewarded client's
    // either: whether its request was free is not known at the refund (its standing may
    // have gone since).
    at(&g, 10 * MINUTE);
    g.allow("u", "/", 1).unwrap();
    assert_eq!(g.inner().peek("u", "/", 1).unwrap().remaining(), 8);
    g.refund("u", "/", 1);
    assert_eq!(g.inner().peek("u", "/", 1).unwrap().remaining(), 8);
}

#[test]
fn a_reward_is_checked_field_by_field() {
    let policy = || Policy::from_toml(RULES, ManualClock::new()).unwrap();
    let with = |r: RewardConfig| {
        AdaptivePenalty::new(policy(), penalty())
            .unwrap()
            .reward(r)
            .err()
    };
    assert_eq!(
        with(RewardConfig {
            window: Nanos::ZERO,
            ..reward()
        }),
        Some(PenaltyConfigError::ZeroRewardWindow)
    );
    assert_eq!(
        with(RewardConfig {
            quiet_windows: 0,
            ..reward()
        }),
        Some(PenaltyConfigError::ZeroQuietWindows)
    );
    assert_eq!(
        with(RewardConfig {
            factor: 1,
            ..reward()
        }),
        Some(PenaltyConfigError::RewardFactorTooSmall)
    );
    assert_eq!(
        with(RewardConfig {
            max_factor: 1,
            ..reward()
        }),
        Some(PenaltyConfigError::MaxFactorBelowFactor)
    );
    let long = with(RewardConfig {
        window: Nanos::MAX_HORIZON,
        ..reward()
    });
    assert_eq!(
        long,
        Some(PenaltyConfigError::RewardTooLong {
            max: Nanos::MAX_HORIZON
        })
    );
    assert_eq!(
        long.unwrap().to_string(),
        format!(
            "reward.window: times quiet_windows for every step, at most {} ns",
            Nanos::MAX_HORIZON.as_u64()
        )
    );
}

/// Three tiers a client meets: its own 10 a minute on every endpoint, its own 6 a
/// minute more on `/b`, and 20 a minute on `/g` shared by every client.
const MIXED: &str = r#"
    [[rules]]
    name = "default"
    limit = 10
    window = "1m"
    algorithm = "fixed_window"

    [[rules]]
    name = "b"
    endpoint = "/b"
    limit = 6
    window = "1m"
    algorithm = "fixed_window"

    [[rules]]
    name = "g"
    endpoint = "/g"
    per = "global"
    limit = 20
    window = "1m"
    algorithm = "fixed_window"
"#;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever a rewarded client does — alternating endpoints and rules, mixing costs —
    /// no tier admits it more than `max_factor × (limit + endpoints)` permits in a window
    /// (each endpoint's count charges at least `admitted / m − 1` of them): no rule goes
    /// uncharged because another one was.
    #[test]
    fn a_reward_never_admits_beyond_its_bound(
        steps in proptest::collection::vec(
            (0u64..90_000_000_000, 0u32..12, 0usize..3, 1u32..4),
            1..60,
        )
    ) {
        let policy = Policy::from_toml(MIXED, ManualClock::new()).unwrap();
        let g = AdaptivePenalty::new(policy, penalty()).unwrap().reward(reward()).unwrap();
        let mut now = 0u64;
        // Permits admitted per (tier, window): 0 the client's default, 1 its /b, 2 /g's.
        let mut admitted = std::collections::BTreeMap::<(usize, u64), u32>::new();
        for (gap, burst, endpoint, cost) in steps {
            now += gap;
            at(&g, now);
            let endpoint = ["/a", "/b", "/g"][endpoint];
            for _ in 0..burst {
                if g.allow("x", endpoint, cost).unwrap().allowed() {
                    let w = now / MINUTE;
                    *admitted.entry((0, w)).or_default() += cost;
                    match endpoint {
                        "/b" => *admitted.entry((1, w)).or_default() += cost,
                        "/g" => *admitted.entry((2, w)).or_default() += cost,
                        _ => {}
                    }
                }
            }
        }
        for ((tier, window), permits) in admitted {
            let bound = [4 * (10 + 3), 4 * (6 + 1), 4 * (20 + 1)][tier];
            prop_assert!(permits <= bound, "tier {tier}, window {window}: {permits} > {bound}");
        }
    }
}
