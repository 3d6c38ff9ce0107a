//! Tests of the config: the structures of envoyproxy/ratelimit's README examples (written
//! out anew) resolved request by request, every load error by its message, the client
//! key's injectivity, and the compiled rules deciding Envoy's fixed windows in tollgate.

use std::collections::HashSet;

use tollgate::policy::{EndpointSelector, FnClock, Policy, PolicyConfig};
use tollgate::Nanos;

use super::{client_key, is_replaced, parse_client_key, Domains, Limit, Unit};

/// Loads one document named `rules.yaml`.
fn load(yaml: &str) -> Domains {
    match Domains::from_yaml(&[("rules.yaml", yaml)]) {
        Ok(domains) => domains,
        Err(e) => panic!("refused: {e}"),
    }
}

/// The error loading one document named `rules.yaml` gives.
fn refused(yaml: &str) -> String {
    match Domains::from_yaml(&[("rules.yaml", yaml)]) {
        Ok(_) => panic!("loaded:\n{yaml}"),
        Err(e) => e.to_string(),
    }
}

/// The name of the limit `entries` of `domain` resolve to.
fn resolved<'d>(domains: &'d Domains, domain: &str, entries: &[(&str, &str)]) -> Option<&'d str> {
    domains.resolve(domain, entries).map(|l| &*l.name)
}

/// The limit `entries` of `domain` resolve to, which must exist.
fn limit<'d>(domains: &'d Domains, domain: &str, entries: &[(&str, &str)]) -> &'d Limit {
    match domains.resolve(domain, entries) {
        Some(limit) => limit,
        None => panic!("no limit for {entries:?}"),
    }
}

/// A policy of the compiled rules, its clock at 0 (checks give their own `now`).
fn policy(domains: &Domains) -> Policy<FnClock<fn() -> Nanos>> {
    fn zero() -> Nanos {
        Nanos::from_secs(0)
    }
    match Policy::from_toml(domains.rules_toml(), FnClock(zero as fn() -> Nanos)) {
        Ok(policy) => policy,
        Err(e) => panic!("rules refused: {e}\n{}", domains.rules_toml()),
    }
}

/// Whether a request descriptor of `domain` with cost 1 is admitted at `secs`.
fn admitted(
    policy: &Policy<FnClock<fn() -> Nanos>>,
    domains: &Domains,
    domain: &str,
    entries: &[(&str, &str)],
    secs: u64,
) -> bool {
    let limit = limit(domains, domain, entries);
    assert!(limit.has_rule(), "{} has no rule", limit.name);
    let mut client = String::new();
    client_key(domain, entries, &mut client);
    match policy.allow_at(&client, &limit.endpoint, 1, Nanos::from_secs(secs)) {
        Ok(decision) => decision.allowed(),
        Err(e) => panic!("{e:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// The README's structures, resolved.

#[test]
fn values_at_one_level() {
    let domains = load(
        "
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 200
",
    );
    let users = limit(&domains, "mongo_cps", &[("database", "users")]);
    assert_eq!(&*users.name, "mongo_cps.database_users");
    assert_eq!(&*users.endpoint, "mongo_cps/database=users");
    assert_eq!(users.current_limit, Some((500, Unit::Second)));
    assert!(users.has_rule() && !users.unlimited && !users.blocked && !users.shadow_mode);
    assert_eq!(
        resolved(&domains, "mongo_cps", &[("database", "default")]),
        Some("mongo_cps.database_default")
    );
    // No node for the value, the key, the domain; a request deeper or empty.
    assert_eq!(
        resolved(&domains, "mongo_cps", &[("database", "orders")]),
        None
    );
    assert_eq!(resolved(&domains, "mongo_cps", &[("table", "users")]), None);
    assert_eq!(resolved(&domains, "mongo", &[("database", "users")]), None);
    assert_eq!(
        resolved(
            &domains,
            "mongo_cps",
            &[("database", "users"), ("op", "read")]
        ),
        None
    );
    assert_eq!(resolved(&domains, "mongo_cps", &[]), None);
    // Case matters.
    assert_eq!(
        resolved(&domains, "mongo_cps", &[("database", "Users")]),
        None
    );
}

#[test]
fn nested_levels_and_key_only_nodes() {
    let domains = load(
        "
domain: messaging
descriptors:
  # Marketing messages: 5 a day per number.
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  # Any message: 100 a day per number.
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
",
    );
    let marketing = [("message_type", "marketing"), ("to_number", "2065550100")];
    assert_eq!(
        resolved(&domains, "messaging", &marketing),
        Some("messaging.message_type_marketing.to_number")
    );
    assert_eq!(
        limit(&domains, "messaging", &marketing).current_limit,
        Some((5, Unit::Day))
    );
    assert_eq!(
        resolved(&domains, "messaging", &[("to_number", "2065550100")]),
        Some("messaging.to_number")
    );
    // Shallower than the limited node: the placeholder has no limit.
    assert_eq!(
        resolved(&domains, "messaging", &[("message_type", "marketing")]),
        None
    );
    // Another type: no node at the first entry.
    assert_eq!(
        resolved(
            &domains,
            "messaging",
            &[("message_type", "receipt"), ("to_number", "2065550100")]
        ),
        None
    );
    // The entries in the other order.
    assert_eq!(
        resolved(
            &domains,
            "messaging",
            &[("to_number", "2065550100"), ("message_type", "marketing")]
        ),
        None
    );
    // Deeper than the tree below a leaf.
    assert_eq!(
        resolved(
            &domains,
            "messaging",
            &[("to_number", "2065550100"), ("campaign", "spring")]
        ),
        None
    );
}

#[test]
fn a_value_before_its_key_alone_and_zero_blocks() {
    let domains = load(
        "
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  # This address gets nothing.
  - key: remote_address
    value: 198.51.100.7
    rate_limit:
      unit: second
      requests_per_unit: 0
",
    );
    let any = limit(
        &domains,
        "edge_proxy_per_ip",
        &[("remote_address", "198.51.100.1")],
    );
    assert_eq!(&*any.name, "edge_proxy_per_ip.remote_address");
    assert_eq!(&*any.endpoint, "edge_proxy_per_ip/remote_address");
    let blocked = limit(
        &domains,
        "edge_proxy_per_ip",
        &[("remote_address", "198.51.100.7")],
    );
    assert_eq!(
        &*blocked.name,
        "edge_proxy_per_ip.remote_address_198.51.100.7"
    );
    assert!(blocked.blocked && !blocked.unlimited && !blocked.has_rule());
    assert_eq!(blocked.current_limit, Some((0, Unit::Second)));
    // Only the rule-bearing node is in the rules.
    assert_eq!(domains.rules_toml().matches("[[rules]]").count(), 1);
}

#[test]
fn the_limit_is_at_the_last_entry() {
    let flat = load(
        "
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
",
    );
    let request = [("key", "value"), ("subkey", "subvalue")];
    assert_eq!(resolved(&flat, "example4", &request), None);
    assert_eq!(
        resolved(&flat, "example4", &[("key", "value")]),
        Some("example4.key_value")
    );
    let nested = load(
        "
domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
",
    );
    assert_eq!(
        resolved(&nested, "example4", &request),
        Some("example4.key_value.subkey")
    );
    assert_eq!(resolved(&nested, "example4", &[("key", "value")]), None);
}

#[test]
fn a_node_with_a_limit_and_children() {
    let domains = load(
        "
domain: d
descriptors:
  - key: tenant
    value: acme
    rate_limit: { unit: day, requests_per_unit: 15 }
    descriptors:
      - key: user
        value: bob
        rate_limit: { unit: day, requests_per_unit: 25 }
",
    );
    assert_eq!(
        resolved(&domains, "d", &[("tenant", "acme")]),
        Some("d.tenant_acme")
    );
    assert_eq!(
        resolved(&domains, "d", &[("tenant", "acme"), ("user", "bob")]),
        Some("d.tenant_acme.user_bob")
    );
    assert_eq!(
        resolved(&domains, "d", &[("tenant", "acme"), ("user", "eve")]),
        None
    );
}

#[test]
fn unlimited() {
    let domains = load(
        "
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
",
    );
    let ldap = limit(&domains, "internal", &[("ldap", "anything")]);
    assert!(ldap.unlimited && !ldap.blocked && !ldap.has_rule());
    assert_eq!(ldap.current_limit, None);
    let azure = limit(&domains, "internal", &[("azure", "x")]);
    assert!(azure.has_rule() && !azure.unlimited);
    assert_eq!(azure.current_limit, Some((100, Unit::Minute)));
    assert_eq!(domains.rules_toml().matches("[[rules]]").count(), 1);
}

#[test]
fn shadow_mode() {
    let domains = load(
        "
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
",
    );
    let a = limit(
        &domains,
        "example6",
        &[("service", "auth"), ("user", "user-a")],
    );
    assert!(a.shadow_mode && a.has_rule());
    let b = limit(
        &domains,
        "example6",
        &[("service", "auth"), ("user", "user-b")],
    );
    assert!(!b.shadow_mode);
    assert_eq!(b.current_limit, Some((20, Unit::Second)));
    // A descriptor stating it is not in shadow mode.
    let off = load(
        "
domain: d
descriptors:
  - key: k
    shadow_mode: false
    rate_limit: { unit: second, requests_per_unit: 1 }
",
    );
    assert!(!limit(&off, "d", &[("k", "v")]).shadow_mode);
}

#[test]
fn replaces() {
    let domains = load(
        "
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: alice
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: alice
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
",
    );
    let first = limit(
        &domains,
        "example7",
        &[("key_1", "value_1"), ("user", "alice")],
    );
    let second = limit(
        &domains,
        "example7",
        &[("key_2", "value_2"), ("user", "alice")],
    );
    assert_eq!(&*first.name, "specific_limit");
    assert_eq!(first.envoy_name.as_deref(), Some("specific_limit"));
    assert_eq!(&*second.name, "example7.key_2_value_2.user_alice");
    assert_eq!(second.envoy_name, None);
    assert_eq!(&*second.replaces, [Box::from("specific_limit")]);
    // Each alone applies.
    assert!(!is_replaced(&[Some(first)], 0));
    assert!(!is_replaced(&[Some(second)], 0));
    // Both: the first is dropped, the second applies; an unmatched descriptor is nothing.
    let both = [Some(first), None, Some(second)];
    assert_eq!(
        (0..3).map(|i| is_replaced(&both, i)).collect::<Vec<_>>(),
        [true, false, false]
    );
    assert!(!is_replaced(&both, 7));
}

#[test]
fn replacing_follows_go_across_the_request() {
    // Two limits replacing each other are both dropped; an unlimited one replaces, and is
    // never dropped.
    let domains = load(
        "
domain: d
descriptors:
  - key: a
    rate_limit: { name: x, replaces: [{ name: y }], unit: second, requests_per_unit: 1 }
  - key: b
    rate_limit: { name: y, replaces: [{ name: x }], unit: second, requests_per_unit: 1 }
  - key: c
    rate_limit: { name: z, unlimited: true, replaces: [{ name: w }] }
  - key: e
    rate_limit: { name: w, unit: second, requests_per_unit: 1, replaces: [{ name: z }] }
",
    );
    let get = |key: &str| limit(&domains, "d", &[(key, "v")]);
    let pair = [Some(get("a")), Some(get("b"))];
    assert!(is_replaced(&pair, 0) && is_replaced(&pair, 1));
    let unlimited = [Some(get("c")), Some(get("e"))];
    assert!(!is_replaced(&unlimited, 0));
    assert!(is_replaced(&unlimited, 1));
}

#[test]
fn value_patterns() {
    let domains = load(
        "
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit: { unit: minute, requests_per_unit: 20 }
  - key: path
    value: /api/*/action
    rate_limit: { unit: minute, requests_per_unit: 20 }
  - key: route
    value: /api/*/resource/*/action
    rate_limit: { unit: minute, requests_per_unit: 10 }
  - key: file
    value: test1
    rate_limit: { unit: minute, requests_per_unit: 50 }
  - key: file
    value: te*
    rate_limit: { unit: minute, requests_per_unit: 100 }
  - key: file
    value: test*
    rate_limit: { unit: minute, requests_per_unit: 200 }
  - key: file
    rate_limit: { unit: minute, requests_per_unit: 300 }
  - key: all
    value: '*'
    rate_limit: { unit: minute, requests_per_unit: 1 }
",
    );
    let name = |key: &str, value: &str| resolved(&domains, "example9", &[(key, value)]);
    assert_eq!(name("key1", "value"), Some("example9.key1_value*"));
    assert_eq!(name("key1", "valueXYZ"), Some("example9.key1_value*"));
    assert_eq!(name("key1", "valu"), None);
    assert_eq!(
        name("path", "/api/123/action"),
        Some("example9.path_/api/*/action")
    );
    assert_eq!(
        name("path", "/api//action"),
        Some("example9.path_/api/*/action")
    );
    assert_eq!(name("path", "/api/123/other"), None);
    assert_eq!(name("path", "/api/action"), None);
    assert_eq!(
        name("route", "/api/v1/resource/42/action"),
        Some("example9.route_/api/*/resource/*/action")
    );
    assert_eq!(name("route", "/api/v1/resource/action"), None);
    // Exact first, then the first pattern in file order, then the key alone.
    assert_eq!(name("file", "test1"), Some("example9.file_test1"));
    assert_eq!(name("file", "test2"), Some("example9.file_te*"));
    assert_eq!(name("file", "other"), Some("example9.file"));
    // A value that is a pattern's own text reaches it, as Go's key_value lookup does.
    assert_eq!(name("file", "test*"), Some("example9.file_test*"));
    // `*` matches the empty value too.
    assert_eq!(name("all", ""), Some("example9.all_*"));
    // Each value of a pattern is its own client: its own counter.
    let policy = policy(&domains);
    let at = |value: &str| admitted(&policy, &domains, "example9", &[("all", value)], 0);
    assert!(at("x") && !at("x") && at("y"));
}

#[test]
fn keys_and_values_are_compared_apart() {
    // The Go service would find these by the joined `a_b_c`; here they are other entries.
    let domains = load(
        "
domain: d
descriptors:
  - key: a_b
    value: c
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: x_y
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: p
    value: q*
    rate_limit: { unit: second, requests_per_unit: 1 }
",
    );
    assert_eq!(resolved(&domains, "d", &[("a_b", "c")]), Some("d.a_b_c"));
    assert_eq!(resolved(&domains, "d", &[("a", "b_c")]), None);
    assert_eq!(resolved(&domains, "d", &[("x", "y")]), None);
    assert_eq!(resolved(&domains, "d", &[("p_q", "z")]), None);
    assert_eq!(resolved(&domains, "d", &[("p", "qz")]), Some("d.p_q*"));
}

#[test]
fn values_are_text_as_written() {
    let domains = load(
        "
domain: d
descriptors:
  - key: to_number
    value: 0123
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: 404
    value: 1.50
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: flag
    value: true
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: empty
    value: ''
    rate_limit: { unit: second, requests_per_unit: 1 }
",
    );
    assert_eq!(
        resolved(&domains, "d", &[("to_number", "0123")]),
        Some("d.to_number_0123")
    );
    assert_eq!(resolved(&domains, "d", &[("to_number", "123")]), None);
    assert_eq!(
        resolved(&domains, "d", &[("404", "1.50")]),
        Some("d.404_1.50")
    );
    assert_eq!(
        resolved(&domains, "d", &[("flag", "true")]),
        Some("d.flag_true")
    );
    // An empty value is no value: any value matches.
    assert_eq!(resolved(&domains, "d", &[("empty", "x")]), Some("d.empty"));
}

#[test]
fn units() {
    let mut yaml = String::from("domain: d\ndescriptors:\n");
    for (i, unit) in ["second", "MINUTE", "Hour", "day", "week", "month", "year"]
        .iter()
        .enumerate()
    {
        yaml.push_str(&format!(
            "  - key: k{i}\n    rate_limit: {{ unit: {unit}, requests_per_unit: {} }}\n",
            i + 1
        ));
    }
    let domains = load(&yaml);
    let want = [
        (Unit::Second, "1s", 1, 1),
        (Unit::Minute, "1m", 60, 2),
        (Unit::Hour, "1h", 3_600, 3),
        (Unit::Day, "1d", 86_400, 4),
        (Unit::Week, "7d", 604_800, 7),
        (Unit::Month, "30d", 2_592_000, 5),
        (Unit::Year, "365d", 31_536_000, 6),
    ];
    for (i, (unit, window, seconds, proto)) in want.into_iter().enumerate() {
        let key = format!("k{i}");
        let limit = limit(&domains, "d", &[(&key, "v")]);
        assert_eq!(limit.current_limit, Some((i as u32 + 1, unit)));
        assert_eq!(&*limit.tiers[0].window, window);
        assert_eq!(
            tollgate::policy::parse_duration(window),
            Ok(Nanos::from_secs(seconds))
        );
        assert_eq!(unit.seconds(), seconds);
        assert_eq!(unit.proto() as i32, proto);
        assert_eq!(Unit::of_window(Nanos::from_secs(seconds)), Some(unit));
    }
    assert_eq!(Unit::parse("UNKNOWN"), None);
    assert_eq!(Unit::parse("seconds"), None);
}

// ---------------------------------------------------------------------------------------
// The compiled rules in tollgate.

#[test]
fn envoy_fixed_windows_align_to_unix_time() {
    let domains = load(
        "
domain: api
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 2 }
",
    );
    let policy = policy(&domains);
    let at = |user: &str, secs: u64| admitted(&policy, &domains, "api", &[("user", user)], secs);
    assert!(at("alice", 0));
    assert!(at("alice", 30));
    assert!(!at("alice", 59));
    assert!(at("alice", 60));
    assert!(at("alice", 61));
    assert!(!at("alice", 119));
    assert!(at("alice", 120));
    // Per user (the key-only node counts each value apart).
    assert!(at("bob", 120) && at("bob", 121) && !at("bob", 121));
    // The window is the minute, not a minute from the first request.
    assert!(at("carol", 179) && at("carol", 179) && !at("carol", 179) && at("carol", 180));
}

#[test]
fn long_envoy_units_are_go_dividers() {
    let domains = load(
        "
domain: d
descriptors:
  - key: week
    rate_limit: { unit: week, requests_per_unit: 1 }
  - key: month
    rate_limit: { unit: month, requests_per_unit: 1 }
  - key: year
    rate_limit: { unit: year, requests_per_unit: 1 }
",
    );
    let policy = policy(&domains);
    for (key, divider) in [
        ("week", 604_800),
        ("month", 2_592_000),
        ("year", 31_536_000),
    ] {
        let at = |secs: u64| admitted(&policy, &domains, "d", &[(key, "v")], secs);
        // Go's window of `now` starts at now / divider * divider.
        let start = 3 * divider;
        assert!(at(start + 5), "{key}");
        assert!(!at(start + divider - 1), "{key}");
        assert!(at(start + divider), "{key}");
    }
}

#[test]
fn tollgate_forms() {
    let domains = load(
        "
domain: d
descriptors:
  - key: one
    rate_limit:
      limit: 3
      window: 1m
      algorithm: fixed_window
  - key: odd
    rate_limit: { limit: 3, window: 90s }
  - key: spelled
    rate_limit: { limit: 3, window: 1 week, algorithm: sliding_window_counter }
  - key: big
    rate_limit: { limit: 5000000000, window: 1d, algorithm: fixed_window }
  - key: two
    rate_limit:
      name: paired
      tiers:
        - { name: burst, limit: 2, window: 1s, algorithm: token_bucket }
        - { limit: 3, window: 1m, algorithm: fixed_window }
",
    );
    let get = |key: &str| limit(&domains, "d", &[(key, "v")]);
    assert_eq!(get("one").current_limit, Some((3, Unit::Minute)));
    assert_eq!(get("odd").current_limit, None);
    assert_eq!(get("spelled").current_limit, Some((3, Unit::Week)));
    assert_eq!(get("big").current_limit, None);
    assert_eq!(get("two").current_limit, Some((2, Unit::Second)));
    assert_eq!(&*get("two").name, "paired");
    let policy = policy(&domains);
    let one = |secs: u64| admitted(&policy, &domains, "d", &[("one", "v")], secs);
    assert!(one(0) && one(1) && one(2) && !one(59) && one(60));
    // Both tiers enforced: the burst of 2, then the minute's 3.
    let two = |secs: u64| admitted(&policy, &domains, "d", &[("two", "v")], secs);
    assert!(two(0) && two(0) && !two(0));
    assert!(two(1));
    assert!(!two(2));
    assert!(two(60));
}

#[test]
fn compiled_rules_text() {
    let domains = load(
        "
domain: shop
descriptors:
  - key: path
    value: /cart
    descriptors:
      - key: user
        rate_limit: { unit: second, requests_per_unit: 4 }
  - key: region
    value: eu
    rate_limit:
      tiers:
        - { name: fast, limit: 5, window: 1s, burst: 10 }
        - { limit: 100, window: 1h, algorithm: sliding_window_log }
  - key: free
    rate_limit: { unlimited: true }
",
    );
    assert_eq!(
        domains.rules_toml(),
        r#"# Compiled by tollgate-server from Envoy ratelimit descriptors: one rule per
# descriptor with a limit, selected by the descriptor's path as its endpoint.
allow_empty = true

# "rules.yaml", domain "shop", descriptors[0].descriptors[0]
[[rules]]
name = "shop.path_/cart.user"
endpoint = "shop/path=%2Fcart/user"
[[rules.tiers]]
limit = 4
window = "1s"
algorithm = "fixed_window"

# "rules.yaml", domain "shop", descriptors[1]
[[rules]]
name = "shop.region_eu"
endpoint = "shop/region=eu"
capacity = 1
[[rules.tiers]]
name = "fast"
limit = 5
window = "1s"
algorithm = "gcra"
burst = 10
[[rules.tiers]]
limit = 100
window = "1h"
algorithm = "sliding_window_log"
"#
    );
    assert!(PolicyConfig::from_toml(domains.rules_toml()).is_ok());
}

#[test]
fn no_rules_is_still_a_loadable_file() {
    let domains =
        load("domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unlimited: true }\n");
    assert!(PolicyConfig::from_toml(domains.rules_toml()).is_ok());
    let empty = match Domains::from_yaml(&[]) {
        Ok(domains) => domains,
        Err(e) => panic!("{e}"),
    };
    assert!(empty.is_empty());
    assert!(PolicyConfig::from_toml(empty.rules_toml()).is_ok());
    assert_eq!(resolved(&empty, "d", &[("k", "v")]), None);
}

#[test]
fn endpoints_are_unique_exact_selectors_and_names_printable() {
    let domains = load(
        r#"
domain: "we:ird/{d}*"
descriptors:
  - key: "a/b"
    value: "c=d"
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: "a"
    value: "b/c=d"
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: ":id"
    value: "{x}*"
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: "%2F"
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: "/"
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: "naïve"
    value: "line\nbreak"
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: "x"
    value: "/*"
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: "~"
    rate_limit: { name: "~probe", unit: second, requests_per_unit: 1 }
"#,
    );
    let requests: [(&str, &str); 8] = [
        ("a/b", "c=d"),
        ("a", "b/c=d"),
        (":id", "{x}*"),
        ("%2F", "v"),
        ("/", "v"),
        ("naïve", "line\nbreak"),
        ("x", "/*"),
        ("~", "v"),
    ];
    let mut endpoints = HashSet::new();
    for request in requests {
        let limit = limit(&domains, "we:ird/{d}*", &[request]);
        assert!(
            matches!(
                EndpointSelector::parse(&limit.endpoint),
                Ok(EndpointSelector::Exact(_))
            ),
            "{}",
            limit.endpoint
        );
        assert!(
            endpoints.insert(limit.endpoint.clone()),
            "{}",
            limit.endpoint
        );
        assert!(
            limit.name.chars().all(|c| (' '..='~').contains(&c)),
            "{}",
            limit.name
        );
        assert!(!limit.name.starts_with('~') && !limit.endpoint.starts_with('~'));
    }
    assert_eq!(
        &*limit(&domains, "we:ird/{d}*", &[("~", "v")]).name,
        "%7Eprobe"
    );
    assert_eq!(
        &*limit(&domains, "we:ird/{d}*", &[("naïve", "line\nbreak")]).name,
        "we:ird/{d}*.na%C3%AFve_line%0Abreak"
    );
    assert_eq!(
        &*limit(&domains, "we:ird/{d}*", &[("a/b", "c=d")]).endpoint,
        "we%3Aird%2F%7Bd%7D%2A/a%2Fb=c%3Dd"
    );
    let policy = policy(&domains);
    for request in requests {
        assert!(admitted(&policy, &domains, "we:ird/{d}*", &[request], 0));
        assert!(!admitted(&policy, &domains, "we:ird/{d}*", &[request], 0));
    }
}

#[test]
fn rule_names_are_made_unique() {
    let a = "
domain: a
descriptors:
  - key: user
    rate_limit: { name: per_user, unit: second, requests_per_unit: 1 }
  - key: ip
    rate_limit: { name: per_user, unit: second, requests_per_unit: 1 }
";
    let b = "
domain: b
descriptors:
  - key: user
    rate_limit: { name: per_user, unit: second, requests_per_unit: 1 }
  - key: tenant
    rate_limit: { name: 'per_user#2', unit: second, requests_per_unit: 1 }
";
    let domains = match Domains::from_yaml(&[("a.yaml", a), ("b.yaml", b)]) {
        Ok(domains) => domains,
        Err(e) => panic!("{e}"),
    };
    let name = |domain: &str, key: &str| resolved(&domains, domain, &[(key, "v")]);
    assert_eq!(name("a", "user"), Some("per_user"));
    assert_eq!(name("a", "ip"), Some("per_user#2"));
    assert_eq!(name("b", "user"), Some("per_user#3"));
    assert_eq!(name("b", "tenant"), Some("per_user#2#2"));
    // `replaces` still goes by Envoy's name.
    assert_eq!(
        limit(&domains, "b", &[("user", "v")]).envoy_name.as_deref(),
        Some("per_user")
    );
}

#[test]
fn summary() {
    let domains = load(
        "
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit: { unit: second, requests_per_unit: 500, name: users }
    shadow_mode: true
  - key: database
    descriptors:
      - key: op
        rate_limit: { unlimited: true, replaces: [{ name: users }] }
",
    );
    let json = match serde_json::to_value(domains.summary()) {
        Ok(json) => json,
        Err(e) => panic!("{e}"),
    };
    let want = serde_json::json!({
        "domains": [{
            "domain": "mongo_cps",
            "source": "rules.yaml",
            "descriptors": 3,
            "limits": [
                {
                    "path": "descriptors[0]",
                    "key": "mongo_cps.database_users",
                    "name": "users",
                    "endpoint": "mongo_cps/database=users",
                    "enforced": "rule",
                    "shadow_mode": true,
                    "envoy_name": "users",
                    "current_limit": { "requests_per_unit": 500, "unit": "SECOND" },
                    "tiers": [{ "limit": 500, "window": "1s", "algorithm": "fixed_window" }]
                },
                {
                    "path": "descriptors[1].descriptors[0]",
                    "key": "mongo_cps.database.op",
                    "name": "mongo_cps.database.op",
                    "endpoint": "mongo_cps/database/op",
                    "enforced": "unlimited",
                    "shadow_mode": false,
                    "replaces": ["users"]
                }
            ]
        }]
    });
    assert_eq!(json, want);
}

#[test]
fn loads_a_directory_by_name() {
    let dir = std::env::temp_dir().join(format!("tollgate-config-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let write = |name: &str, text: &str| {
        if let Err(e) = std::fs::write(dir.join(name), text) {
            panic!("{name}: {e}");
        }
    };
    if let Err(e) = std::fs::create_dir_all(dir.join("sub.yaml")) {
        panic!("{e}");
    }
    let rule = |domain: &str| {
        format!("domain: {domain}\ndescriptors:\n  - key: k\n    rate_limit: {{ unit: second, requests_per_unit: 1 }}\n")
    };
    write("b.yml", &rule("second"));
    write("a.yaml", &rule("first"));
    write(".hidden.yaml", "not: [valid");
    write("notes.txt", "not yaml");
    let domains = Domains::load(&dir);
    let file = dir.join("a.yaml");
    let single = Domains::load(&file);
    write("c.yaml", &rule("first"));
    let twice = Domains::load(&dir).map(|_| ()).map_err(|e| e.to_string());
    let missing = Domains::load(&dir.join("none.yaml"))
        .map(|_| ())
        .map_err(|e| e.to_string());
    let _ = std::fs::remove_dir_all(&dir);

    let domains = match domains {
        Ok(domains) => domains,
        Err(e) => panic!("{e}"),
    };
    let sources: Vec<String> = domains
        .domains
        .iter()
        .map(|d| d.source.to_string())
        .collect();
    assert_eq!(
        sources,
        [
            dir.join("a.yaml").display().to_string(),
            dir.join("b.yml").display().to_string()
        ]
    );
    assert_eq!(
        resolved(&domains, "second", &[("k", "v")]),
        Some("second.k")
    );
    assert!(single.is_ok_and(|d| d.domains.len() == 1));
    assert_eq!(
        twice,
        Err(format!(
            "{}: domain \"first\": already loaded from {}",
            dir.join("c.yaml").display(),
            dir.join("a.yaml").display()
        ))
    );
    let missing = missing.err().unwrap_or_default();
    assert!(
        missing.starts_with(&format!(
            "{}: cannot read: ",
            dir.join("none.yaml").display()
        )),
        "{missing}"
    );
}

// ---------------------------------------------------------------------------------------
// Load errors, each by its message.

/// A file of domain `d` with one descriptor `key: k` whose `rate_limit` is `rate_limit`.
fn with_rate_limit(rate_limit: &str) -> String {
    format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {rate_limit}\n")
}

#[test]
fn unsupported_fields_are_named() {
    let nested = |field: &str, value: &str| {
        format!(
            "
domain: mongo_cps
descriptors:
  - key: database
    descriptors:
      - key: op
        rate_limit: {{ unit: second, requests_per_unit: 1 }}
      - key: user
        {field}: {value}
        rate_limit: {{ unit: second, requests_per_unit: 1 }}
"
        )
    };
    for field in [
        "detailed_metric",
        "value_to_metric",
        "share_threshold",
        "quota_mode",
    ] {
        assert_eq!(
            refused(&nested(field, "true")),
            format!(
                "rules.yaml: domain \"mongo_cps\": descriptors[0].descriptors[1].{field}: not \
                 supported by tollgate-server"
            )
        );
        // Their default is what tollgate-server does.
        load(&nested(field, "false"));
    }
    assert_eq!(
        refused(&nested("metadata", "{ service: billing }")),
        "rules.yaml: domain \"mongo_cps\": descriptors[0].descriptors[1].metadata: not \
         supported by tollgate-server"
    );
    load(&nested("metadata", "{}"));
}

#[test]
fn unknown_fields_are_named_with_their_place() {
    assert_eq!(
        refused("domain: d\nlimits: []\n"),
        "rules.yaml: domain \"d\": unknown field `limits`, expected `domain` or `descriptors` \
         at line 2 column 1"
    );
    assert_eq!(
        refused("domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        ratelimit: {}\n"),
        "rules.yaml: domain \"d\": descriptors[0].descriptors[0]: unknown field `ratelimit`, \
         expected one of `key`, `value`, `rate_limit`, `descriptors`, `shadow_mode`, \
         `quota_mode`, `detailed_metric`, `value_to_metric`, `share_threshold`, `metadata` \
         at line 6 column 9"
    );
    assert_eq!(
        refused(&with_rate_limit("{ unit: day, requestsperunit: 5 }")),
        "rules.yaml: domain \"d\": descriptors[0].rate_limit: unknown field `requestsperunit`, \
         expected one of `unit`, `requests_per_unit`, `unlimited`, `name`, `replaces`, \
         `limit`, `window`, `algorithm`, `burst`, `tiers` at line 4 column 30"
    );
    assert_eq!(
        refused(&with_rate_limit(
            "{ tiers: [{ limit: 1, window: 1s, queue: 3 }] }"
        )),
        "rules.yaml: domain \"d\": descriptors[0].rate_limit.tiers[0]: unknown field `queue`, \
         expected one of `name`, `limit`, `window`, `algorithm`, `burst` at line 4 column 51"
    );
    assert_eq!(
        refused(&with_rate_limit(
            "{ name: n, replaces: [{ nam: m }], unit: second, requests_per_unit: 1 }"
        )),
        "rules.yaml: domain \"d\": descriptors[0].rate_limit.replaces[0]: unknown field `nam`, \
         expected `name` at line 4 column 41"
    );
    // Go refuses merge keys as unknown too.
    assert_eq!(
        refused("domain: d\ndescriptors:\n  - &base\n    key: a\n  - <<: *base\n    value: b\n"),
        "rules.yaml: domain \"d\": descriptors[1]: unknown field `<<`, expected one of `key`, \
         `value`, `rate_limit`, `descriptors`, `shadow_mode`, `quota_mode`, \
         `detailed_metric`, `value_to_metric`, `share_threshold`, `metadata` at line 5 column 5"
    );
}

#[test]
fn malformed_yaml() {
    assert_eq!(
        refused("'''"),
        "rules.yaml: found unexpected end of stream at line 1 column 4, while scanning a \
         quoted scalar"
    );
    assert_eq!(
        refused("domain: d\ndescriptors:\n  - a\n  - b\n"),
        "rules.yaml: domain \"d\": descriptors[0]: invalid type: string \"a\", expected a \
         descriptor (a mapping with key, value, rate_limit, descriptors, …) at line 3 column 5"
    );
    assert_eq!(
        refused("domain: d\ndescriptors:\n  - key: k\n    shadow_mode: yes\n"),
        "rules.yaml: domain \"d\": descriptors[0].shadow_mode: invalid type: string \"yes\", \
         expected a boolean at line 4 column 18"
    );
    assert_eq!(
        refused(&with_rate_limit("{ unit: second, requests_per_unit: -1 }")),
        "rules.yaml: domain \"d\": descriptors[0].rate_limit.requests_per_unit: invalid type: \
         integer `-1`, expected u32 at line 4 column 52"
    );
    assert_eq!(
        refused(&with_rate_limit(
            "{ unit: second, requests_per_unit: 4294967296 }"
        )),
        "rules.yaml: domain \"d\": descriptors[0].rate_limit.requests_per_unit: invalid value: \
         integer `4294967296`, expected u32 at line 4 column 52"
    );
    assert_eq!(
        refused("domain: a\n---\ndomain: b\n"),
        "rules.yaml: deserializing from YAML containing more than one document is not supported"
    );
    assert_eq!(
        refused("domain: d\ndomain: e\n"),
        "rules.yaml: duplicate field `domain`"
    );
}

#[test]
fn domains() {
    assert_eq!(refused(""), "rules.yaml: domain: missing");
    assert_eq!(refused("descriptors: []\n"), "rules.yaml: domain: missing");
    assert_eq!(refused("domain: ''\n"), "rules.yaml: domain: missing");
    let one = "domain: d\n";
    assert_eq!(
        Domains::from_yaml(&[("a.yaml", one), ("b.yaml", one)])
            .map(|_| ())
            .map_err(|e| e.to_string()),
        Err("b.yaml: domain \"d\": already loaded from a.yaml".to_owned())
    );
    // A domain without descriptors is loaded (and limits nothing).
    let domains = load(one);
    assert_eq!(resolved(&domains, "d", &[("k", "v")]), None);
}

#[test]
fn descriptor_errors() {
    assert_eq!(
        refused("domain: d\ndescriptors:\n  - value: v\n"),
        "rules.yaml: domain \"d\": descriptors[0].key: missing"
    );
    assert_eq!(
        refused("domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: ''\n"),
        "rules.yaml: domain \"d\": descriptors[0].descriptors[0].key: missing"
    );
    assert_eq!(
        refused("domain: d\ndescriptors:\n  - key: ab*\n"),
        "rules.yaml: domain \"d\": descriptors[0].key: \"ab*\": a `*` in a key is not supported \
         by tollgate-server (the Go service takes it as a pattern over key_value)"
    );
    assert_eq!(
        refused("domain: d\ndescriptors:\n  - key: a\n    value: v\n  - key: b\n  - key: a\n    value: v\n"),
        "rules.yaml: domain \"d\": descriptors[2]: duplicate descriptor \"a_v\": descriptors[0] \
         has the same key_value"
    );
    assert_eq!(
        refused("domain: d\ndescriptors:\n  - key: x\n    descriptors:\n      - key: a\n      - key: a\n        value: ''\n"),
        "rules.yaml: domain \"d\": descriptors[0].descriptors[1]: duplicate descriptor \"a\": \
         descriptors[0].descriptors[0] has the same key_value"
    );
    // Go's map key joins them: refused as it refuses them.
    assert_eq!(
        refused(
            "domain: d\ndescriptors:\n  - key: a\n    value: b_c\n  - key: a_b\n    value: c\n"
        ),
        "rules.yaml: domain \"d\": descriptors[1]: duplicate descriptor \"a_b_c\": \
         descriptors[0] has the same key_value"
    );
    assert_eq!(
        refused("domain: d\ndescriptors:\n  - key: a\n    shadow_mode: true\n    descriptors:\n      - key: b\n        rate_limit: { unit: second, requests_per_unit: 1 }\n"),
        "rules.yaml: domain \"d\": descriptors[0].shadow_mode: applies to this descriptor's \
         rate_limit, and it has none"
    );
    // The same key and value at other levels are other descriptors.
    load("domain: d\ndescriptors:\n  - key: a\n    value: v\n    descriptors:\n      - key: a\n        value: v\n");
}

#[test]
fn envoy_rate_limit_errors() {
    let at = |field: &str, message: &str| {
        format!("rules.yaml: domain \"d\": descriptors[0].rate_limit{field}: {message}")
    };
    for (rate_limit, field, message) in [
        ("{ requests_per_unit: 5 }", ".unit", "missing"),
        (
            "{ unit: fortnight, requests_per_unit: 5 }",
            ".unit",
            "\"fortnight\" is not a unit (second, minute, hour, day, week, month, year)",
        ),
        (
            "{ unit: unknown, requests_per_unit: 5 }",
            ".unit",
            "\"unknown\" is not a unit (second, minute, hour, day, week, month, year)",
        ),
        (
            "{ unit: second }",
            ".requests_per_unit",
            "missing (the Go service reads a missing one as 0, which denies every request: \
             write 0 if that is meant)",
        ),
        (
            "{ unlimited: true, unit: day, requests_per_unit: 25 }",
            ".unit",
            "not with unlimited: true (an unlimited limit has no limit to give)",
        ),
        (
            "{ unlimited: true, requests_per_unit: 25 }",
            ".requests_per_unit",
            "not with unlimited: true (an unlimited limit has no limit to give)",
        ),
        (
            "{ unlimited: true, window: 1s }",
            ".window",
            "not with unlimited: true (an unlimited limit has no limit to give)",
        ),
        (
            "{ unlimited: true, tiers: [] }",
            ".tiers",
            "not with unlimited: true (an unlimited limit has no limit to give)",
        ),
        (
            "{}",
            "",
            "no limit: give unit and requests_per_unit (or tollgate's limit and window, or \
             tiers), or unlimited: true",
        ),
        (
            "{ unlimited: false, name: n }",
            "",
            "no limit: give unit and requests_per_unit (or tollgate's limit and window, or \
             tiers), or unlimited: true",
        ),
        (
            "{ name: self, replaces: [{ name: self }], unit: second, requests_per_unit: 5 }",
            ".replaces[0].name",
            "\"self\" is this limit's own name",
        ),
        (
            "{ name: self, replaces: [{ name: other }, { name: }], unit: second, requests_per_unit: 5 }",
            ".replaces[1].name",
            "missing",
        ),
        (
            "{ replaces: [{}], unit: second, requests_per_unit: 5 }",
            ".replaces[0].name",
            "missing",
        ),
    ] {
        assert_eq!(refused(&with_rate_limit(rate_limit)), at(field, message), "{rate_limit}");
    }
    // Go's null rate_limit is no rate_limit.
    let domains = load("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n");
    assert_eq!(resolved(&domains, "d", &[("k", "v")]), None);
}

#[test]
fn tollgate_rate_limit_errors() {
    let at = |field: &str, message: &str| {
        format!("rules.yaml: domain \"d\": descriptors[0].rate_limit.{field}: {message}")
    };
    let forms = "a rate_limit is written in one form, Envoy's unit and requests_per_unit, \
                 tollgate's limit and window, or tiers";
    for (rate_limit, field, message) in [
        (
            "{ unit: second, requests_per_unit: 1, limit: 1, window: 1s }",
            "limit",
            format!("not with unit: {forms}"),
        ),
        (
            "{ requests_per_unit: 1, tiers: [] }",
            "tiers",
            format!("not with requests_per_unit: {forms}"),
        ),
        (
            "{ burst: 3, tiers: [{ limit: 1, window: 1s }] }",
            "tiers",
            format!("not with burst: {forms}"),
        ),
        ("{ window: 1s }", "limit", "missing".to_owned()),
        (
            "{ limit: 1 }",
            "window",
            "missing (write e.g. \"1s\", \"1m\", \"1d\")".to_owned(),
        ),
        (
            "{ limit: 1, window: '10' }",
            "window",
            "\"10\": missing unit (ns, us, ms, s, m, h, d, w, or their names: sec, min, hours, \
             days, …)"
                .to_owned(),
        ),
        (
            "{ limit: 1, window: 1 month }",
            "window",
            "\"1 month\": unknown unit \"month\" (ns, us, ms, s, m, h, d, w, or their names: \
             sec, min, hours, days, …)"
                .to_owned(),
        ),
        (
            "{ limit: 1, window: 1s, algorithm: GCRA }",
            "algorithm",
            "unknown algorithm \"GCRA\" (gcra, token_bucket, fixed_window, \
             sliding_window_counter, sliding_window_log)"
                .to_owned(),
        ),
        (
            "{ limit: 1, window: 1s, algorithm: leaky_bucket }",
            "algorithm",
            "leaky_bucket admits with a delay to wait, which a rate limit service's answer \
             cannot carry: use gcra (the same rate and burst, answered at once)"
                .to_owned(),
        ),
        ("{ tiers: [] }", "tiers", "must not be empty".to_owned()),
        (
            "{ tiers: [{ limit: 1, window: 1s }, { window: 1m }] }",
            "tiers[1].limit",
            "missing".to_owned(),
        ),
        // tollgate's verdicts, at the YAML's fields.
        ("{ limit: 0, window: 1m }", "limit", "must be > 0".to_owned()),
        ("{ limit: 5, window: 0s }", "window", "must be > 0".to_owned()),
        (
            "{ limit: 5, window: 1m, algorithm: fixed_window, burst: 9 }",
            "burst",
            "not used by fixed_window (only gcra and token_bucket)".to_owned(),
        ),
        (
            "{ tiers: [{ limit: 1, window: 1s }, { limit: 2, window: 0s }] }",
            "tiers[1].window",
            "must be > 0".to_owned(),
        ),
        (
            "{ tiers: [{ name: a, limit: 1, window: 1s }, { name: a, limit: 2, window: 1m }] }",
            "tiers[1].name",
            "\"a\" is already the name of descriptors[0].rate_limit.tiers[0]".to_owned(),
        ),
        (
            "{ tiers: [{ name: 'é', limit: 1, window: 1s }] }",
            "tiers[0].name",
            "'é' is not allowed: names appear in headers (printable ASCII only)".to_owned(),
        ),
        (
            "{ tiers: [{ limit: 1, window: 1s }, { limit: 1, window: 2s }, { limit: 1, window: 3s }, { limit: 1, window: 4s }, { limit: 1, window: 5s }] }",
            "tiers",
            "at most 4 tiers per rule".to_owned(),
        ),
        (
            "{ limit: 100000, window: 1s, algorithm: sliding_window_log }",
            "limit",
            "sliding_window_log keeps one timestamp per permit: at most 65536".to_owned(),
        ),
        (
            "{ unit: second, requests_per_unit: 4000000000 }",
            "requests_per_unit",
            "too large for this window: at most 536870911".to_owned(),
        ),
    ] {
        assert_eq!(refused(&with_rate_limit(rate_limit)), at(field, &message), "{rate_limit}");
    }
}

// ---------------------------------------------------------------------------------------
// The client key.

#[test]
fn client_keys_tell_descriptors_apart() {
    let key = |domain: &str, entries: &[(&str, &str)]| {
        let mut out = String::new();
        client_key(domain, entries, &mut out);
        out
    };
    assert_eq!(
        key("mongo_cps", &[("database", "users")]),
        "9:mongo_cps8:database5:users"
    );
    assert_eq!(key("d", &[]), "1:d");
    for (a, b) in [
        (("d", &[("a_b", "c")][..]), ("d", &[("a", "b_c")][..])),
        (("d", &[("a", "")][..]), ("d", &[("", "a")][..])),
        (
            ("d", &[("a", "b"), ("c", "d")][..]),
            ("d", &[("a", "b1:c1:d")][..]),
        ),
        (("d_a", &[("b", "c")][..]), ("d", &[("a_b", "c")][..])),
        (("d", &[("", "")][..]), ("d", &[][..])),
        (("1:d", &[][..]), ("d", &[("", "")][..])),
    ] {
        assert_ne!(key(a.0, a.1), key(b.0, b.1), "{a:?} {b:?}");
    }
    // Every descriptor of short strings over an alphabet with the separators in it.
    let alphabet = ["a", "_", "1", ":"];
    let mut strings = vec![String::new()];
    for _ in 0..2 {
        let longer: Vec<String> = strings
            .iter()
            .filter(|s| s.len() == strings.last().map_or(0, |l| l.len()))
            .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
            .collect();
        strings.extend(longer);
    }
    assert_eq!(strings.len(), 21);
    let mut seen = HashSet::new();
    let mut count = 0;
    for domain in &strings {
        seen.insert(key(domain, &[]));
        count += 1;
        for k in &strings {
            for v in &strings {
                seen.insert(key(domain, &[(k, v)]));
                count += 1;
            }
        }
    }
    for k1 in &strings {
        for v1 in &strings {
            for k2 in &strings {
                for v2 in &strings {
                    seen.insert(key("d", &[(k1, v1), (k2, v2)]));
                    count += 1;
                }
            }
        }
    }
    assert_eq!(seen.len(), count);
}

/// `parse_client_key` reads back every descriptor `client_key` wrote (over an alphabet
/// with the separators and digits in it, multi-byte text too), and nothing else.
#[test]
fn parse_client_key_inverts_client_key() {
    let alphabet = ["", "a", "_", "1", ":", "é", "10:"];
    let mut key = String::new();
    for domain in alphabet.iter().filter(|d| !d.is_empty()) {
        for k1 in alphabet {
            for v1 in alphabet {
                for second in [None, Some(("k", "v")), Some((":", ""))] {
                    let mut entries = vec![(k1.to_string(), v1.to_string())];
                    entries.extend(second.map(|(k, v)| (k.to_owned(), v.to_owned())));
                    let borrowed: Vec<(&str, &str)> = entries
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str()))
                        .collect();
                    client_key(domain, &borrowed, &mut key);
                    assert_eq!(
                        parse_client_key(&key),
                        Some((domain.to_string(), entries.clone())),
                        "{key}"
                    );
                }
            }
        }
    }
    client_key("d", &[], &mut key);
    assert_eq!(parse_client_key(&key), Some(("d".to_owned(), vec![])));
    for other in [
        "", "d", "1:", "1:d1:k", "01:d", "+1:d", "2:d", "1:d9:k", "1:dx", "1:\u{e9}",
    ] {
        assert_eq!(parse_client_key(other), None, "{other}");
    }
}

#[test]
fn client_key_reuses_its_buffer() {
    let mut out = String::with_capacity(64);
    client_key("old", &[("x", "y")], &mut out);
    let (at, capacity) = (out.as_ptr(), out.capacity());
    client_key(
        "mongo_cps",
        &[("database", "users"), ("op", "read")],
        &mut out,
    );
    assert_eq!(out, "9:mongo_cps8:database5:users2:op4:read");
    assert_eq!((out.as_ptr(), out.capacity()), (at, capacity));
}

/// A published config is its documents after `---` lines: a directory of two domains
/// comes back as the same two domains; a document that starts with its own `---`, blank
/// documents and a missing final newline are all read; an error names the document.
#[test]
fn a_published_config_reads_back_as_its_documents() {
    let dir = std::env::temp_dir().join(format!("tollgate-published-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("a.yaml"),
        "---\ndomain: a\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1 }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("b.yml"),
        "domain: b\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 2 }",
    )
    .unwrap();
    let text = Domains::published(&dir).unwrap();
    let domains = Domains::from_published(&text).unwrap();
    assert_eq!(
        limit(&domains, "a", &[("k", "x")]).current_limit,
        Some((1, Unit::Second))
    );
    assert_eq!(
        limit(&domains, "b", &[("k", "x")]).current_limit,
        Some((2, Unit::Minute))
    );
    let blank = format!("---\n\n---\n{text}---\n   \n");
    assert!(Domains::from_published(&blank)
        .unwrap()
        .resolve("b", &[("k", "x")])
        .is_some());
    let broken = format!("{text}---\ndomain: c\ndescriptors: 7\n");
    let error = Domains::from_published(&broken).unwrap_err().to_string();
    assert!(error.starts_with("published document 3"), "{error}");
    // The same mistake in a file is named by its path.
    std::fs::write(dir.join("c.yaml"), "domain: c\ndescriptors: 7\n").unwrap();
    let error = Domains::published(&dir).unwrap_err().to_string();
    assert!(error.contains("c.yaml"), "{error}");
    std::fs::remove_dir_all(&dir).unwrap();
}
