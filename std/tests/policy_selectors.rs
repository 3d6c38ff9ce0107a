//! Endpoint selectors: exact names, route templates and prefixes, which rule each request
//! gets (exact first, then the longest prefix with a rule for it), pinned decisions, and
//! every selector that could never match refused at load naming its field.

use tollgate::policy::{FnClock, Policy, PolicyConfig, RuleSet};
use tollgate::Nanos;

const RULES: &str = r#"
    [[rules]]
    name = "default"
    limit = 100
    window = "1m"

    [[rules]]
    name = "users"
    endpoint = "/users/*"
    limit = 3
    window = "1m"
    algorithm = "fixed_window"

    [[rules]]
    name = "user-posts"
    prefix = "/users/{id}/posts"
    limit = 1
    window = "1m"
    algorithm = "fixed_window"

    [[rules]]
    name = "vip-users"
    client = "vip"
    endpoint = "/users/*"
    limit = 50
    window = "1m"

    [[rules]]
    name = "user-page"
    endpoint = "/users/{id}"
    limit = 2
    window = "1m"
    algorithm = "fixed_window"

    [[rules]]
    name = "api"
    prefix = "/api"
    limit = 5
    window = "1m"
"#;

fn set() -> RuleSet {
    let config = PolicyConfig::from_toml(RULES).unwrap_or_else(|e| panic!("{e}"));
    RuleSet::compile(&config).unwrap_or_else(|e| panic!("{e}"))
}

fn names(set: &RuleSet, client: &str, endpoint: &str) -> Vec<String> {
    set.matching(client, endpoint)
        .iter()
        .flatten()
        .map(|r| r.name().to_owned())
        .collect()
}

#[test]
fn the_most_specific_selector_with_a_rule_wins() {
    let set = set();
    let cases: &[(&str, &str, &[&str])] = &[
        // An exact template beats the prefix that also covers it.
        ("a", "/users/{id}", &["default", "user-page"]),
        // A raw path under the prefix (a layer keyed by raw paths, or a mounted router).
        ("a", "/users/42", &["default", "users"]),
        ("a", "/users/42/avatar", &["default", "users"]),
        // The longer prefix wins, by whole segments.
        ("a", "/users/{id}/posts", &["default", "user-posts"]),
        ("a", "/users/{id}/posts/7", &["default", "user-posts"]),
        ("a", "/users/{id}/postsx", &["default", "users"]),
        // A client's rule on a prefix replaces the any-client rule of that prefix only:
        // the exact template and the longer prefix still come first.
        ("vip", "/users/42", &["default", "vip-users"]),
        ("vip", "/users/{id}", &["default", "user-page"]),
        ("vip", "/users/{id}/posts", &["default", "user-posts"]),
        // `/users/*` is below `/users/`: not `/users` itself.
        ("a", "/users", &["default"]),
        ("a", "/usersx/1", &["default"]),
        ("a", "/api", &["default", "api"]),
        ("a", "/api/v1/items", &["default", "api"]),
        ("a", "/apis", &["default"]),
        ("a", "/", &["default"]),
    ];
    for (client, endpoint, want) in cases {
        assert_eq!(names(&set, client, endpoint), *want, "{client} {endpoint}");
    }
}

#[test]
fn a_prefix_rule_holds_one_state_per_client_across_its_endpoints(
) -> Result<(), Box<dyn std::error::Error>> {
    let policy = Policy::from_toml(RULES, FnClock(|| Nanos::from_secs(15)))?;
    // `users` (3 per minute) counts every path under `/users/` together.
    let got: Vec<bool> = ["/users/1", "/users/2", "/users/3/avatar", "/users/4"]
        .iter()
        .map(|e| policy.allow("a", e, 1).map(|d| d.allowed()))
        .collect::<Result<_, _>>()?;
    assert_eq!(got, [true, true, true, false]);
    // Another client has its own; the exact template has its own rule and state.
    assert!(policy.allow("b", "/users/1", 1)?.allowed());
    let got: Vec<bool> = (0..3)
        .map(|_| policy.allow("a", "/users/{id}", 1).map(|d| d.allowed()))
        .collect::<Result<_, _>>()?;
    assert_eq!(got, [true, true, false]);
    Ok(())
}

#[test]
fn selectors_that_could_never_match_are_load_errors() {
    let cases = [
        (
            "endpoint = \"/users/*/posts\"",
            "rules[0].endpoint",
            "a wildcard is only supported as a trailing `/*`",
        ),
        (
            "endpoint = \"/users*\"",
            "rules[0].endpoint",
            "a wildcard is only supported as a trailing `/*`",
        ),
        (
            "endpoint = \"*\"",
            "rules[0].endpoint",
            "a wildcard is only supported as a trailing `/*`",
        ),
        (
            "endpoint = \"/users/:id\"",
            "rules[0].endpoint",
            "`:param` is axum 0.7's syntax",
        ),
        (
            "endpoint = \"/users/{id\"",
            "rules[0].endpoint",
            "a route template's parameter is one `{name}`",
        ),
        ("endpoint = \"\"", "rules[0].endpoint", "must not be empty"),
        (
            "endpoint = \"/search?q=1\"",
            "rules[0].endpoint",
            "never hold a query (`?`) or a fragment (`#`)",
        ),
        (
            "endpoint = \"/files/{*path}/x\"",
            "rules[0].endpoint",
            "only ever a route's last segment",
        ),
        (
            "endpoint = \"/users*/{*p}\"",
            "rules[0].endpoint",
            "a wildcard is only supported",
        ),
        (
            "prefix = \"/static/{*path}\"",
            "rules[0].prefix",
            "nothing is below it",
        ),
        (
            "prefix = \"/api/*\"",
            "rules[0].prefix",
            "a wildcard is only supported",
        ),
        ("prefix = \"\"", "rules[0].prefix", "must not be empty"),
        (
            "endpoint = \"/a\"\nprefix = \"/a\"",
            "rules[0].prefix",
            "`endpoint` or `prefix`, not both",
        ),
    ];
    for (selector, path, message) in cases {
        let toml = format!("[[rules]]\nname = \"r\"\n{selector}\nlimit = 1\nwindow = \"1s\"\n");
        let err = match PolicyConfig::from_toml(&toml).and_then(|c| RuleSet::compile(&c)) {
            Ok(_) => panic!("{selector} accepted"),
            Err(e) => e,
        };
        let text = err.to_string();
        assert!(
            text.contains(path) && text.contains(message),
            "{selector}: {text}"
        );
    }
    // Two rules on one prefix for the same clients conflict, as two exact ones do.
    let twice = "[[rules]]\nname = \"a\"\nprefix = \"/p\"\nlimit = 1\nwindow = \"1s\"\n\
                 [[rules]]\nname = \"b\"\nendpoint = \"/p/*\"\nlimit = 1\nwindow = \"1s\"\n\
                 [[rules]]\nname = \"c\"\nprefix = \"/p/\"\nlimit = 1\nwindow = \"1s\"\n";
    let err = PolicyConfig::from_toml(twice).and_then(|c| RuleSet::compile(&c));
    let text = err.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        text.contains("rules[2]") && text.contains("rules[1]"),
        "{text}"
    );
}

/// `allow_into_with` decides as `allow` does, whatever the rules (client rules, a ban, an
/// unlimited rule, deny and allow entries, endpoint and prefix rules), and names the
/// endpoint once if the rules select by it, never otherwise.
#[test]
fn allow_into_with_decides_as_allow_and_names_the_endpoint_only_if_read() {
    use std::cell::Cell;
    use tollgate::policy::{PolicyCheck, PolicyDecision};
    let without = r#"
        [[rules]]
        name = "default"
        limit = 2
        window = "1m"
        algorithm = "fixed_window"
        [[rules]]
        name = "vip"
        client = "vip"
        limit = 3
        window = "1m"
        [[rules]]
        name = "banned"
        client = "bad"
        limit = 0
        reason = "no"
        [[rules]]
        name = "internal"
        client = "job"
        unlimited = true
        [[deny]]
        client = "fraud"
        [[allow]]
        client = "probe"
    "#;
    let exact = format!(
        "{without}\n[[rules]]\nname = \"s\"\nendpoint = \"/s\"\nlimit = 1\nwindow = \"1m\"\n"
    );
    let prefix = format!(
        "{without}\n[[rules]]\nname = \"p\"\nprefix = \"/p\"\nlimit = 1\nwindow = \"1m\"\n"
    );
    for (rules, reads) in [(without.to_owned(), false), (exact, true), (prefix, true)] {
        let clock = || FnClock(|| Nanos::ZERO);
        let lazy = Policy::from_toml(&rules, clock()).unwrap();
        let eager = Policy::from_toml(&rules, clock()).unwrap();
        let mut decision = PolicyDecision::empty();
        for _ in 0..4 {
            for client in ["a", "vip", "bad", "job", "fraud", "probe"] {
                for endpoint in ["/s", "/p/x", "/", ""] {
                    let named = Cell::new(0);
                    let name = || {
                        named.set(named.get() + 1);
                        endpoint
                    };
                    let got = lazy.allow_into_with(client, name, 1, &mut decision);
                    let want = eager.allow(client, endpoint, 1).unwrap();
                    got.unwrap();
                    let seen = |d: &PolicyDecision| {
                        (
                            d.allowed(),
                            d.is_ban(),
                            d.limit(),
                            d.remaining(),
                            d.listing().is_some(),
                        )
                    };
                    assert_eq!(seen(&decision), seen(&want), "{client} {endpoint} {rules}");
                    assert_eq!(named.get(), usize::from(reads), "{client} {endpoint}");
                }
            }
        }
    }
}
