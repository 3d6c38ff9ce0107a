//! The laundering guard on the policy path (`launder_guard`): a client that spent its quota
//! sends throwaway keys to push its entry out of a tier's table, then comes back. The
//! issue's scenario: limit 10 per hour, capacity 1 000, 10 admitted, then 3 000 throwaway
//! keys × 11 requests, then the abuser again. Without the guard it comes back fresh (pinned
//! below, so the difference is visible); with it, it gets nothing more, and innocent new
//! clients are falsely denied at most 1 % of their limit.

use tollgate::policy::{Policy, PolicyConfig};
use tollgate::{ManualClock, Nanos};

const LIMIT: usize = 10;
const THROWAWAY: usize = 3_000;
const INNOCENTS: usize = 2_000;

/// The issue's rules: 10 per hour per client, 1 000 clients kept; `top` and `rule` are
/// extra lines at the top of the file and in the rule.
fn rules(top: &str, rule: &str) -> String {
    format!(
        r#"
        capacity = 1000
        {top}

        [[rules]]
        name = "default"
        limit = 10
        window = "1h"
        {rule}
        "#
    )
}

fn admitted(policy: &Policy<ManualClock>, client: &str, n: usize) -> usize {
    (0..n)
        .filter(|_| policy.allow(client, "/", 1).unwrap().allowed())
        .count()
}

/// The abuser spends its quota (the 11th request denied), then, 1 ms later (so that its
/// entry is strictly the one losing least: its debt ends first), `THROWAWAY` keys named
/// `{tag}-{i}` send 11 requests each. Returns what the abuser gets from 10 more requests.
fn launder(policy: &Policy<ManualClock>, clock: &ManualClock, tag: &str) -> usize {
    assert_eq!(admitted(policy, "abuser", LIMIT + 1), LIMIT);
    clock.advance(Nanos::from_millis(1));
    for i in 0..THROWAWAY {
        admitted(policy, &format!("{tag}-{i}"), LIMIT + 1);
    }
    admitted(policy, "abuser", LIMIT)
}

/// `INNOCENTS` new clients that would each ask for their whole limit: the share of those
/// requests denied (a fresh client gets all of them: the false-deny rate).
///
/// Read with `peek`, which answers an absent client from the state its first check would
/// start from, so that measuring does not itself flood the table; the first 100 are then
/// really checked `LIMIT` times and must be denied exactly as often as their peek said.
fn false_deny_rate(policy: &Policy<ManualClock>) -> f64 {
    let phantom = |client: &str| {
        let peek = policy.peek(client, "/", 1).unwrap();
        if peek.allowed() {
            LIMIT - 1 - peek.remaining() as usize
        } else {
            LIMIT
        }
    };
    let denied: usize = (0..INNOCENTS)
        .map(|i| phantom(&format!("innocent-{i}")))
        .sum();
    for i in 0..100 {
        let client = format!("innocent-{i}");
        let predicted = phantom(&client);
        assert_eq!(
            LIMIT - admitted(policy, &client, LIMIT),
            predicted,
            "{client}: peek and checks disagree"
        );
    }
    denied as f64 / (INNOCENTS * LIMIT) as f64
}

fn policy(text: &str) -> (Policy<ManualClock>, ManualClock) {
    let clock = ManualClock::starting_at(Nanos::from_secs(1_000_000));
    (Policy::from_toml(text, clock.clone()).unwrap(), clock)
}

#[test]
fn without_the_guard_the_abuser_comes_back_fresh() {
    let (policy, clock) = policy(&rules("", ""));
    let back = launder(&policy, &clock, "t");
    println!("guard off: the abuser got {back} of {LIMIT} more within the hour");
    assert_eq!(back, LIMIT, "the tier forgot the evicted abuser: laundered");
    assert_eq!(false_deny_rate(&policy), 0.0);
}

#[test]
fn with_the_guard_the_abuser_is_held_and_innocents_pass() {
    for (top, rule) in [("launder_guard = true", ""), ("", "launder_guard = true")] {
        let (policy, clock) = policy(&rules(top, rule));
        let back = launder(&policy, &clock, "t");
        let rate = false_deny_rate(&policy);
        println!(
            "guard on ({top}{rule}): the abuser got {back} of {LIMIT} more within the hour; \
             innocents' false-deny rate {rate:.4}"
        );
        assert_eq!(back, 0, "{top}{rule}: the abuser laundered its limit");
        assert!(rate <= 0.01, "{top}{rule}: false-deny rate {rate} > 1 %");
    }
}

/// A rule's own `launder_guard = false` wins over the file's.
#[test]
fn a_rule_can_opt_out_of_the_files_guard() {
    let (policy, clock) = policy(&rules("launder_guard = true", "launder_guard = false"));
    assert_eq!(launder(&policy, &clock, "t"), LIMIT);
}

/// A reload keeping the guard keeps the tier (and the debts it holds); one dropping it
/// gives the tier a successor without a summary (the next flood launders again); one
/// adding it gives the tier a successor with one (the next flood does not).
#[test]
fn reload_keeps_or_drops_the_guard() {
    let guarded = rules("launder_guard = true", "");
    let (policy, clock) = policy(&guarded);
    let back = launder(&policy, &clock, "a");
    assert_eq!(back, 0);
    // The same rules plus another one: the tier and its debts stay.
    let more = format!(
        "{guarded}\n[[rules]]\nname = \"search\"\nendpoint = \"/search\"\nlimit = 5\nwindow = \"1m\"\n"
    );
    policy
        .reload(PolicyConfig::from_toml(&more).unwrap())
        .unwrap();
    assert_eq!(admitted(&policy, "abuser", LIMIT), 0);

    // Dropped: a new abuser floods and comes back fresh.
    policy
        .reload(PolicyConfig::from_toml(&rules("", "")).unwrap())
        .unwrap();
    clock.advance(Nanos::from_secs(3_600));
    assert_eq!(launder(&policy, &clock, "b"), LIMIT);

    // Added again: held.
    policy
        .reload(PolicyConfig::from_toml(&rules("", "launder_guard = true")).unwrap())
        .unwrap();
    clock.advance(Nanos::from_secs(3_600));
    assert_eq!(launder(&policy, &clock, "c"), 0);
}

/// Adding or dropping the guard gives the rule's tier a successor (its clients' state is
/// converted, as for any changed tier): the reload's report says the rule changed, as the
/// store does, rather than "no change".
#[test]
fn a_reload_adding_or_dropping_the_guard_reports_the_rule_changed() {
    let (policy, _clock) = policy(&rules("", ""));
    for top in ["launder_guard = true", ""] {
        let old = policy.rule_set();
        let report = policy.reload_toml(&rules(top, "")).unwrap();
        let new = policy.rule_set();
        assert_eq!(
            new.replacing(&old).count(),
            1,
            "{top:?}: the tier was replaced"
        );
        assert_eq!(report.changed(), ["default"], "{top:?}: {report}");
        assert_eq!(report.unchanged(), 0, "{top:?}: {report}");
    }
    // Kept: the tier and its state stay, and the report says so.
    let report = policy.reload_toml(&rules("", "")).unwrap();
    assert!(report.is_empty(), "{report}");
}

/// The guard is refused, naming the field, where a tier cannot keep it: a
/// `sliding_window_log` tier keeps a log per key, not one word.
#[test]
fn the_guard_on_a_log_tier_is_an_error_naming_the_field() {
    let log = |top: &str, rule: &str| {
        format!(
            "{top}\n[[rules]]\nname = \"default\"\nlimit = 10\nwindow = \"1h\"\n\
             algorithm = \"sliding_window_log\"\n{rule}\n"
        )
    };
    let on_rule = PolicyConfig::from_toml(&log("", "launder_guard = true")).unwrap_err();
    assert_eq!(on_rule.path, "rules[0].launder_guard", "{on_rule}");
    assert!(
        on_rule.to_string().contains("sliding_window_log"),
        "{on_rule}"
    );
    let on_file = PolicyConfig::from_toml(&log("launder_guard = true", "")).unwrap_err();
    assert_eq!(on_file.path, "rules[0].launder_guard", "{on_file}");
    assert!(
        on_file.to_string().contains("launder_guard = false"),
        "{on_file}"
    );
    // Opted out on the rule: accepted.
    assert!(PolicyConfig::from_toml(&log("launder_guard = true", "launder_guard = false")).is_ok());
    // A one-key rule has nothing to guard: accepted, whatever its algorithm.
    let global = "launder_guard = true\n[[rules]]\nname = \"all\"\nper = \"global\"\n\
                  limit = 10\nwindow = \"1h\"\nalgorithm = \"sliding_window_log\"\n";
    assert!(PolicyConfig::from_toml(global).is_ok());
    // Not a boolean: the parser names it.
    let bad = PolicyConfig::from_toml(&rules("launder_guard = \"yes\"", "")).unwrap_err();
    assert!(bad.to_string().contains("launder_guard"), "{bad}");
}
