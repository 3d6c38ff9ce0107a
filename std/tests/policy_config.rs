//! Policy config: TOML into validated types, errors naming rule and field.

use tollgate::policy::{AlgorithmKind, Partition, PolicyConfig, RuleConfig, TierConfig};

fn err(toml: &str) -> String {
    PolicyConfig::from_toml(toml).unwrap_err().to_string()
}

#[test]
fn full_file_parses() {
    let config = PolicyConfig::from_toml(
        r#"
        capacity = 5000

        [[rules]]
        name = "default"
        limit = 100
        window = "1m"

        [[rules]]
        name = "partner"
        client = "acct_123"
        endpoint = "/search"
        per = "global"
        [[rules.tiers]]
        name = "burst"
        limit = 10
        window = "1s"
        algorithm = "token_bucket"
        burst = 20
        [[rules.tiers]]
        name = "daily"
        limit = 10000
        window = "1d"
        algorithm = "sliding_window_counter"

        [[rules]]
        name = "shaped"
        endpoint = "/upload"
        limit = 5
        window = "1s"
        algorithm = "leaky_bucket"
        queue = 10
    "#,
    )
    .unwrap();
    assert_eq!(config.capacity, Some(5000));
    assert_eq!(config.rules.len(), 3);
    let partner = &config.rules[1];
    assert_eq!(partner.per, Partition::Global);
    assert_eq!(partner.tiers[0].algorithm, AlgorithmKind::TokenBucket);
    assert_eq!(partner.tiers[0].burst, Some(20));
    assert_eq!(partner.tiers[1].window, "1d");
}

#[test]
fn errors_name_rule_and_field() {
    let rule = |body: &str| {
        format!(
            "[[rules]]\nname = \"ok\"\nlimit = 1\nwindow = \"1s\"\n[[rules]]\nname = \"r\"\n{body}"
        )
    };
    assert_eq!(
        err(&rule("limit = 0\nwindow = \"1m\"")),
        "rules[1].limit: must be > 0"
    );
    assert_eq!(
        err(&rule("limit = 5")),
        "rules[1].window: missing (write e.g. \"1s\", \"1m\", \"1d\")"
    );
    assert_eq!(
        err(&rule("limit = 5\nwindow = \"5y\"")),
        "rules[1].window: \"5y\": unknown unit \"y\" (ns, us, ms, s, m, h, d, w, or their names: sec, min, hours, days, …)"
    );
    assert_eq!(
        err(&rule("limit = 5\nwindow = \"0s\"")),
        "rules[1].window: must be > 0"
    );
    assert_eq!(
        err(&rule("limit = 5\nwindow = \"1s\"\nburst = 0")),
        "rules[1].burst: must be > 0"
    );
    assert_eq!(
        err(&rule(
            "limit = 5\nwindow = \"1s\"\nalgorithm = \"fixed_window\"\nburst = 3"
        )),
        "rules[1].burst: not used by fixed_window (only gcra and token_bucket)"
    );
    assert_eq!(
        err(&rule("limit = 5\nwindow = \"1s\"\nqueue = 3")),
        "rules[1].queue: not used by gcra (only leaky_bucket)"
    );
    assert_eq!(
        err(&rule("limit = 2000000000\nwindow = \"1s\"")),
        "rules[1].window: too short for the limit: more than one permit per nanosecond"
    );
    assert_eq!(
        err(&rule(
            "limit = 100000\nwindow = \"1s\"\nalgorithm = \"sliding_window_log\""
        )),
        "rules[1].limit: sliding_window_log keeps one timestamp per permit: at most 65536"
    );
    assert_eq!(
        err(&rule("[[rules.tiers]]\nlimit = 1\nwindow = \"1s\"\n[[rules.tiers]]\nlimit = 0\nwindow = \"1d\"")),
        "rules[1].tiers[1].limit: must be > 0"
    );
    assert_eq!(
        err(&rule("limit = 1\nwindow = \"1s\"\n[[rules.tiers]]\nlimit = 1\nwindow = \"1s\"")),
        "rules[1].tiers: give either `tiers` or the one-tier fields (limit, window, algorithm, burst, queue), not both"
    );
    assert_eq!(
        err(&rule("")),
        "rules[1].tiers: a rule needs `limit` and `window`, or `tiers`"
    );
    assert_eq!(
        err("[[rules]]\nname = \"a\"\nlimit = 1\nwindow = \"1s\"\n[[rules]]\nname = \"a\"\nlimit = 1\nwindow = \"1s\"\nclient = \"x\"\n"),
        "rules[1].name: \"a\" is already the name of rules[0]"
    );
    assert_eq!(
        err("[[rules]]\nname = \"a\"\nlimit = 1\nwindow = \"1s\"\n[[rules]]\nname = \"b\"\nlimit = 1\nwindow = \"1s\"\n"),
        "rules[1]: matches the same client and endpoint as rules[0]"
    );
    assert_eq!(
        err("[[rules]]\nname = \"\"\nlimit = 1\nwindow = \"1s\"\n"),
        "rules[0].name: must not be empty"
    );
    assert_eq!(
        err("[[rules]]\nname = \"caf\u{e9}\"\nlimit = 1\nwindow = \"1s\"\n"),
        "rules[0].name: '\u{e9}' is not allowed: names appear in headers (printable ASCII only)"
    );
    assert_eq!(err("capacity = 0\n"), "capacity: must be > 0");
    // A rule that holds one key (a client's, a global one) ignores its capacity, but a
    // capacity no rule could have is refused there too, not silently dropped.
    for selector in ["client = \"x\"", "per = \"global\""] {
        assert_eq!(
            err(&format!(
                "[[rules]]\nname = \"a\"\n{selector}\nlimit = 1\nwindow = \"1s\"\ncapacity = 0\n"
            )),
            "rules[0].capacity: must be > 0",
            "{selector}"
        );
        let huge = tollgate::policy::MAX_CAPACITY + 1;
        assert!(
            err(&format!("[[rules]]\nname = \"a\"\n{selector}\nlimit = 1\nwindow = \"1s\"\ncapacity = {huge}\n"))
                .starts_with("rules[0].capacity: at most"),
            "{selector}"
        );
    }
    // Tier tables are allocated when the rules compile: a capacity beyond the bound is a
    // typed error naming the field, not an attempt to allocate gigabytes.
    let huge = tollgate::policy::MAX_CAPACITY + 1;
    assert!(err(&format!("capacity = {huge}\n")).starts_with(&format!(
        "capacity: at most {}",
        tollgate::policy::MAX_CAPACITY
    )));
    let tiers = (0..5)
        .map(|_| "[[rules.tiers]]\nlimit = 1\nwindow = \"1s\"\n")
        .collect::<String>();
    assert_eq!(
        err(&format!("[[rules]]\nname = \"a\"\n{tiers}")),
        "rules[0].tiers: at most 4 tiers per rule"
    );
    assert_eq!(
        err("[[rules]]\nname = \"a\"\n[[rules.tiers]]\nname = \"x\"\nlimit = 1\nwindow = \"1s\"\n[[rules.tiers]]\nname = \"x\"\nlimit = 1\nwindow = \"1m\"\n"),
        "rules[0].tiers[1].name: \"x\" is already the name of rules[0].tiers[0]"
    );
}

#[test]
fn syntax_and_type_errors_come_from_toml() {
    let e = PolicyConfig::from_toml("[[rules]]\nname = \"a\"\nlimit = -1\n").unwrap_err();
    assert_eq!(e.path, "toml");
    let e = PolicyConfig::from_toml("[[rules]]\nname = \"a\"\nlimt = 1\n").unwrap_err();
    assert_eq!(e.path, "toml");
    assert!(e.message.contains("limt"), "{e}");
    let e =
        PolicyConfig::from_toml("[[rules]]\nname = \"a\"\nalgorithm = \"magic\"\n").unwrap_err();
    assert!(e.message.contains("magic"), "{e}");
}

#[test]
fn durations_and_algorithms_are_config_values() {
    for (window, secs) in [
        ("1s", 1),
        ("1m", 60),
        ("1h", 3600),
        ("1d", 86_400),
        ("1m30s", 90),
    ] {
        let config = PolicyConfig::from_toml(&format!(
            "[[rules]]\nname = \"a\"\nlimit = 1\nwindow = \"{window}\"\n"
        ))
        .unwrap();
        let set = tollgate::policy::RuleSet::compile(&config).unwrap();
        assert_eq!(
            set.rules()[0].tiers()[0].window(),
            tollgate::Nanos::from_secs(secs)
        );
    }
    for (name, kind) in [
        ("gcra", AlgorithmKind::Gcra),
        ("token_bucket", AlgorithmKind::TokenBucket),
        ("leaky_bucket", AlgorithmKind::LeakyBucket),
        ("fixed_window", AlgorithmKind::FixedWindow),
        (
            "sliding_window_counter",
            AlgorithmKind::SlidingWindowCounter,
        ),
        ("sliding_window_log", AlgorithmKind::SlidingWindowLog),
    ] {
        let config = PolicyConfig::from_toml(&format!(
            "[[rules]]\nname = \"a\"\nlimit = 3\nwindow = \"1s\"\nalgorithm = \"{name}\"\n"
        ))
        .unwrap();
        let set = tollgate::policy::RuleSet::compile(&config).unwrap();
        assert_eq!(set.rules()[0].tiers()[0].kind(), kind);
        assert_eq!(kind.as_str(), name);
    }
}

/// Issue 27, item 7: one permit per 200 000 days built, and then `now + T` overflowed, so a
/// fresh client's first request was denied today and forever. Through the TOML path it is
/// the core's typed error, on the field that holds the number, with the exact maximum.
#[test]
fn issue27_item7_a_rule_that_can_never_admit_is_refused() {
    use tollgate::policy::{FnClock, Policy};
    use tollgate::{ConfigError, Nanos};
    // 2025-10-09 on a Unix clock.
    let today = || Nanos::new(1_760_000_000_000_000_000);
    let rule = |body: &str| format!("[[rules]]\nname = \"r\"\n{body}\n");
    for algorithm in ["gcra", "token_bucket", "leaky_bucket"] {
        let text = rule(&format!(
            "limit = 1\nwindow = \"200000d\"\nalgorithm = \"{algorithm}\""
        ));
        let e = match Policy::from_toml(&text, FnClock(today)) {
            Ok(policy) => panic!(
                "{algorithm}: builds, and a fresh client's first request today is {:?}",
                policy.allow("client", "/", 1)
            ),
            Err(e) => e,
        };
        assert_eq!(e.path, "rules[0].window", "{algorithm}");
        assert_eq!(
            e.message,
            "too long for 1 per window: at most 9223372036854775808 ns (106751 days) per permit",
            "{algorithm}"
        );
        assert_eq!(
            e.config,
            Some(ConfigError::PeriodTooLong {
                max: Nanos::MAX_HORIZON
            }),
            "{algorithm}"
        );
        assert_eq!(
            std::error::Error::source(&e).map(|s| s.to_string()),
            e.config.map(|c| c.to_string())
        );
        // At the boundary it builds and admits; one nanosecond more is refused.
        let longest = rule(&format!(
            "limit = 1\nwindow = \"9223372036854775808ns\"\nalgorithm = \"{algorithm}\""
        ));
        let policy = Policy::from_toml(&longest, FnClock(today)).unwrap();
        assert!(
            policy.allow("client", "/", 1).unwrap().allowed(),
            "{algorithm}"
        );
        assert!(
            !policy.allow("client", "/", 1).unwrap().allowed(),
            "{algorithm}"
        );
        let past = rule(&format!(
            "limit = 1\nwindow = \"9223372036854775809ns\"\nalgorithm = \"{algorithm}\""
        ));
        assert_eq!(
            Policy::from_toml(&past, FnClock(today))
                .err()
                .map(|e| e.path),
            Some("rules[0].window".to_owned())
        );
    }
    // A burst or queue past the horizon is blamed on that field, written or defaulted.
    let e = PolicyConfig::from_toml(&rule("limit = 1\nwindow = \"1s\"\nburst = 9223372037"))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "rules[0].burst: too large for this window: at most 9223372036"
    );
    assert_eq!(
        e.config,
        Some(ConfigError::LimitTooLarge { max: 9_223_372_036 })
    );
    let e = PolicyConfig::from_toml(&rule(
        "[[rules.tiers]]\nlimit = 1\nwindow = \"1s\"\n[[rules.tiers]]\nlimit = 2\nwindow = \"9223372036854775808ns\"\nalgorithm = \"leaky_bucket\"",
    ))
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "rules[0].tiers[1].queue: too large for this window (default: limit - 1, 1): at most 0"
    );
    assert_eq!(e.config, Some(ConfigError::LimitTooLarge { max: 0 }));
    // Window algorithms need no horizon: 200 000 days is a valid window.
    for algorithm in [
        "fixed_window",
        "sliding_window_counter",
        "sliding_window_log",
    ] {
        let text = rule(&format!(
            "limit = 1\nwindow = \"200000d\"\nalgorithm = \"{algorithm}\""
        ));
        let policy = Policy::from_toml(&text, FnClock(today)).unwrap();
        assert!(
            policy.allow("client", "/", 1).unwrap().allowed(),
            "{algorithm}"
        );
        assert!(
            !policy.allow("client", "/", 1).unwrap().allowed(),
            "{algorithm}"
        );
    }
    // Errors found before the core carry no core error.
    let e = PolicyConfig::from_toml(&rule("limit = 0\nwindow = \"1s\"")).unwrap_err();
    assert_eq!((e.path.as_str(), e.config), ("rules[0].limit", None));
}

/// A rule taken out of a larger file (`RuleConfig::place`) is named by its place there, in
/// its own errors, in another rule's that names it, and in a ban's listing.
#[test]
fn a_rules_place_in_its_file_names_it() -> Result<(), Box<dyn std::error::Error>> {
    let rule = |name: &str, place: usize, limit: u64| {
        let mut rule = RuleConfig::new(name).tier(TierConfig::new(limit, "1m"));
        rule.place = Some(place);
        rule
    };
    let config = PolicyConfig::default()
        .rule(rule("a", 3, 1))
        .rule(rule("b", 7, 0));
    assert_eq!(
        config.validate().map_err(|e| e.to_string()),
        Err("rules[7].tiers[0].limit: must be > 0".to_owned())
    );
    let config = PolicyConfig::default()
        .rule(rule("a", 3, 1))
        .rule(rule("a", 7, 1));
    assert_eq!(
        config.validate().map_err(|e| e.to_string()),
        Err("rules[7].name: \"a\" is already the name of rules[3]".to_owned())
    );
    let mut ban = RuleConfig::new("retired").prefix("/v0").ban("use /v1");
    ban.place = Some(4);
    let config = PolicyConfig::default().rule(rule("a", 3, 1)).rule(ban);
    let policy = tollgate::policy::Policy::new(config, tollgate::ManualClock::new())?;
    let decision = policy.allow("k", "/v0/x", 1)?;
    assert_eq!(decision.listing().map(|l| l.path()), Some("rules[4]"));
    Ok(())
}
