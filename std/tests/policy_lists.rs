//! Allow and deny lists, `unlimited` rules and bans: pinned decisions for every kind, the
//! precedence between entries, nothing stored and no store asked for a listed request,
//! reloads adding and removing entries, load errors naming the field, and a proptest of
//! list membership against a naive reference.

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use tollgate::policy::{
    FnClock, InProcess, ListingKind, Op, Plan, Policy, PolicyConfig, RateLimitHeaders, ReloadStep,
    Request, Store, TierOutcome,
};
use tollgate::{InsufficientCapacity, Nanos};

/// The in-process store, counting the calls that reach it.
#[derive(Debug, Default)]
struct Counting {
    calls: AtomicUsize,
    inner: InProcess,
}

impl Store for Counting {
    fn run(
        &self,
        op: Op,
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.run(op, plan, now, outcomes)
    }

    fn reload(&self, step: ReloadStep<'_>) {
        self.inner.reload(step);
    }
}

const RULES: &str = r#"
[[rules]]
name = "default"
limit = 2
window = "1m"

[[rules]]
name = "batch"
client = "batch-job"
unlimited = true

[[rules]]
name = "search"
endpoint = "/search"
limit = 1
window = "1m"

[[rules]]
name = "health"
endpoint = "/health"
unlimited = true

[[rules]]
name = "legacy"
prefix = "/v0"
limit = 0
reason = "/v0 was retired: use /v1"

[[allow]]
client = "probe"
reason = "the uptime probe"

[[allow]]
cidr = "10.0.0.0/8"

[[allow]]
cidr = "203.0.113.5/32"

[[deny]]
client = "acct_666"
reason = "chargeback fraud"

[[deny]]
cidr = "203.0.113.0/24"
reason = "scraping"

[[deny]]
cidr = "10.66.0.0/16"

[[deny]]
cidr = "2001:db8::/32"
reason = "documentation network"
"#;

fn policy() -> Policy<FnClock<fn() -> Nanos>, Counting> {
    let zero: fn() -> Nanos = || Nanos::ZERO;
    Policy::from_toml(RULES, FnClock(zero))
        .unwrap()
        .store(Counting::default())
}

/// The kind, subject and reason of the listing that decided `client` on `endpoint`, and
/// whether it was admitted.
fn listed(
    policy: &Policy<FnClock<fn() -> Nanos>, Counting>,
    client: &str,
    endpoint: &str,
) -> (bool, Option<(ListingKind, String, Option<String>)>) {
    let d = policy.allow(client, endpoint, 1).unwrap();
    let listing = d.listing().map(|l| {
        (
            l.kind(),
            l.subject().to_owned(),
            l.reason().map(str::to_owned),
        )
    });
    (d.allowed(), listing)
}

fn some(
    kind: ListingKind,
    subject: &str,
    reason: Option<&str>,
) -> Option<(ListingKind, String, Option<String>)> {
    Some((kind, subject.to_owned(), reason.map(str::to_owned)))
}

#[test]
fn every_kind_is_decided_as_pinned() {
    let policy = policy();
    use ListingKind::*;
    for (client, endpoint, want) in [
        // Allow entries: by key, by network (IPv4, and IPv4-mapped IPv6).
        (
            "probe",
            "/search",
            (true, some(AllowClient, "probe", Some("the uptime probe"))),
        ),
        (
            "10.1.2.3",
            "/v0/x",
            (true, some(AllowCidr, "10.0.0.0/8", None)),
        ),
        (
            "::ffff:10.1.2.3",
            "/",
            (true, some(AllowCidr, "10.0.0.0/8", None)),
        ),
        // Deny entries: by key, by IPv4 and IPv6 network.
        (
            "acct_666",
            "/",
            (
                false,
                some(DenyClient, "acct_666", Some("chargeback fraud")),
            ),
        ),
        (
            "203.0.113.9",
            "/",
            (false, some(DenyCidr, "203.0.113.0/24", Some("scraping"))),
        ),
        (
            "2001:db8:1:2::",
            "/",
            (
                false,
                some(DenyCidr, "2001:db8::/32", Some("documentation network")),
            ),
        ),
        (
            "2001:DB8::7",
            "/",
            (
                false,
                some(DenyCidr, "2001:db8::/32", Some("documentation network")),
            ),
        ),
        // Precedence: the longer prefix decides, either way.
        (
            "203.0.113.5",
            "/",
            (true, some(AllowCidr, "203.0.113.5/32", None)),
        ),
        (
            "10.66.1.1",
            "/",
            (false, some(DenyCidr, "10.66.0.0/16", None)),
        ),
        // Special rules.
        ("batch-job", "/", (true, some(Unlimited, "batch", None))),
        ("anyone", "/health", (true, None)), // the default slot still limits it
        (
            "batch-job",
            "/health",
            (true, some(Unlimited, "batch", None)),
        ),
        (
            "anyone",
            "/v0/users",
            (false, some(Ban, "legacy", Some("/v0 was retired: use /v1"))),
        ),
        (
            "batch-job",
            "/v0/users",
            (false, some(Ban, "legacy", Some("/v0 was retired: use /v1"))),
        ),
        // Unlisted: the limits.
        ("203.0.114.1", "/", (true, None)),
        ("2001:db9::1", "/", (true, None)),
        ("acct_6666", "/", (true, None)),
    ] {
        assert_eq!(
            listed(&policy, client, endpoint),
            want,
            "{client} {endpoint}"
        );
    }
}

#[test]
fn listed_requests_store_nothing_and_never_reach_the_store() {
    let policy = policy();
    let keys = |policy: &Policy<_, Counting>| -> usize {
        policy
            .rule_set()
            .rules()
            .iter()
            .flat_map(|r| r.tiers())
            .map(|t| policy.backend().inner.keys(t))
            .sum()
    };
    for _ in 0..5 {
        for (client, endpoint) in [
            ("probe", "/search"),
            ("10.1.2.3", "/"),
            ("acct_666", "/"),
            ("203.0.113.9", "/search"),
            ("batch-job", "/"),
            ("batch-job", "/health"),
            ("x", "/v0/a"),
        ] {
            policy.allow(client, endpoint, 1).unwrap();
            policy.peek(client, endpoint, 1).unwrap();
            policy.refund(client, endpoint, 1);
            policy.reset(client, endpoint);
            PolicyCheckExt::charge(&policy, client, endpoint);
        }
    }
    assert_eq!(policy.backend().calls.load(Ordering::Relaxed), 0);
    assert_eq!(keys(&policy), 0);
    // An allowed client passes far beyond the limit: nothing counted it.
    for _ in 0..100 {
        assert!(policy.allow("probe", "/search", 1).unwrap().allowed());
    }
    // An unlisted request is limited, and its state stored.
    assert!(policy.allow("c", "/search", 1).unwrap().allowed());
    assert!(!policy.allow("c", "/search", 1).unwrap().allowed());
    assert_eq!(policy.backend().calls.load(Ordering::Relaxed), 2);
    assert_eq!(keys(&policy), 2);
}

/// A charge through the policy's check interface.
trait PolicyCheckExt {
    fn charge(&self, client: &str, endpoint: &str);
}

impl<P: tollgate::policy::PolicyCheck> PolicyCheckExt for P {
    fn charge(&self, client: &str, endpoint: &str) {
        self.charge_at(&Request::new(client, endpoint, 1), self.now());
    }
}

#[test]
fn a_ban_never_says_retry_and_renders_no_header() {
    let policy = policy();
    for (client, endpoint) in [("acct_666", "/"), ("x", "/v0/a")] {
        let d = policy.allow(client, endpoint, 1).unwrap();
        assert!(!d.allowed() && d.is_ban());
        assert_eq!((d.limit(), d.remaining()), (0, 0));
        assert_eq!(d.retry_after(), Nanos::MAX);
        assert!(d.tiers().is_empty());
        assert_eq!(RateLimitHeaders::from_policy_decision(&d).iter().count(), 0);
    }
    // A limit reached is not a ban.
    policy.allow("c", "/search", 1).unwrap();
    let d = policy.allow("c", "/search", 1).unwrap();
    assert!(!d.allowed() && !d.is_ban() && d.listing().is_none());
    // An allowed request renders nothing either, and is no ban.
    let d = policy.allow("probe", "/", 1).unwrap();
    assert!(d.allowed() && !d.is_ban());
    assert_eq!(RateLimitHeaders::from_policy_decision(&d).iter().count(), 0);
    assert_eq!((d.limit(), d.remaining()), (u64::MAX, u64::MAX));
}

#[test]
fn an_unlimited_rule_replaces_its_slot_only() {
    let policy = policy();
    // batch-job is unlimited in the global slot; /search still limits it.
    let d = policy.allow("batch-job", "/search", 1).unwrap();
    assert!(d.allowed() && d.listing().is_none());
    let names: Vec<_> = d.tiers().iter().map(|t| t.name()).collect();
    assert_eq!(names, ["search"]);
    assert!(!policy.allow("batch-job", "/search", 1).unwrap().allowed());
    // /health is unlimited in the endpoint slot; the default still limits anyone there.
    assert!(policy.allow("a", "/health", 1).unwrap().allowed());
    assert!(policy.allow("a", "/health", 1).unwrap().allowed());
    assert!(!policy.allow("a", "/health", 1).unwrap().allowed());
}

#[test]
fn a_batch_with_a_banned_request_is_refused_and_charges_nothing() {
    let policy = policy();
    let batch = [Request::new("c", "/", 1), Request::new("acct_666", "/", 1)];
    let d = policy.check_all(&batch).unwrap();
    assert!(!d.allowed() && d.decision.is_ban());
    assert_eq!(d.decision.listing().unwrap().subject(), "acct_666");
    assert_eq!(policy.peek("c", "/", 0).unwrap().remaining(), 2);
    // An allowed request adds no tier; the other is charged.
    let batch = [Request::new("c", "/", 1), Request::new("probe", "/", 1)];
    let d = policy.check_all(&batch).unwrap();
    assert!(d.allowed());
    assert_eq!(d.tiers_of(0).count(), 1);
    assert_eq!(d.tiers_of(1).count(), 0);
    assert_eq!(policy.peek("c", "/", 0).unwrap().remaining(), 1);
}

#[test]
fn async_checks_decide_lists_the_same_way() {
    let policy = policy();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        let d = policy.allow_async("203.0.113.9", "/", 1).await.unwrap();
        assert!(d.is_ban());
        assert_eq!(d.listing().unwrap().reason(), Some("scraping"));
        let d = policy.allow_async("10.9.9.9", "/", 1).await.unwrap();
        assert_eq!(d.listing().unwrap().kind(), ListingKind::AllowCidr);
    });
    assert_eq!(policy.backend().calls.load(Ordering::Relaxed), 0);
}

#[test]
fn reloads_add_and_remove_entries_for_the_next_request() {
    let policy = policy();
    assert!(policy.allow("203.0.114.1", "/", 1).unwrap().allowed());
    let text = RULES.to_owned() + "\n[[deny]]\ncidr = \"203.0.114.0/24\"\nreason = \"new abuse\"\n";
    let text = text.replace(
        "[[allow]]\nclient = \"probe\"\nreason = \"the uptime probe\"\n",
        "",
    );
    let text = text.replace("reason = \"scraping\"", "reason = \"scraping, again\"");
    let report = policy.reload_toml(&text).unwrap();
    assert_eq!(report.listed(), ["deny cidr 203.0.114.0/24"]);
    assert_eq!(report.unlisted(), ["allow client \"probe\""]);
    assert_eq!(report.relisted(), ["deny cidr 203.0.113.0/24"]);
    assert!(report.added().is_empty() && report.changed().is_empty());
    assert_eq!(
        report.to_string(),
        "listed deny cidr 203.0.114.0/24; unlisted allow client \"probe\"; relisted deny cidr 203.0.113.0/24"
    );
    let d = policy.allow("203.0.114.1", "/", 1).unwrap();
    assert_eq!(d.listing().unwrap().reason(), Some("new abuse"));
    // The probe is limited again: the default's 2.
    assert!(policy.allow("probe", "/", 1).unwrap().allowed());
    assert!(policy.allow("probe", "/", 1).unwrap().allowed());
    assert!(!policy.allow("probe", "/", 1).unwrap().allowed());
    // A rule turned into a ban, and back, is a changed rule.
    let banned = text.replace(
        "name = \"search\"\nendpoint = \"/search\"\nlimit = 1\nwindow = \"1m\"",
        "name = \"search\"\nendpoint = \"/search\"\nlimit = 0",
    );
    let report = policy.reload_toml(&banned).unwrap();
    assert_eq!(report.changed(), ["search"]);
    assert!(policy.allow("z", "/search", 1).unwrap().is_ban());
    let report = policy.reload_toml(&text).unwrap();
    assert_eq!(report.changed(), ["search"]);
    assert!(policy.allow("z", "/search", 1).unwrap().allowed());
    // A decision keeps its listing across a reload that removes it.
    let held = policy.allow("acct_666", "/", 1).unwrap();
    policy
        .reload_toml(&text.replace("client = \"acct_666\"", "client = \"acct_667\""))
        .unwrap();
    assert_eq!(held.listing().unwrap().subject(), "acct_666");
    assert!(policy.allow("acct_666", "/", 1).unwrap().allowed());
}

#[test]
fn load_errors_name_the_field_and_the_entry() {
    let err = |extra: &str| {
        PolicyConfig::from_toml(&format!(
            "[[rules]]\nname = \"d\"\nlimit = 1\nwindow = \"1s\"\n{extra}"
        ))
        .unwrap_err()
        .to_string()
    };
    for (extra, want) in [
        ("[[deny]]\n", "deny[0]: an entry needs `client` (a client key) or `cidr` (a network)"),
        ("[[allow]]\nclient = \"a\"\ncidr = \"10.0.0.0/8\"\n", "allow[0].cidr: an entry has `client` or `cidr`, not both"),
        ("[[allow]]\nclient = \"\"\n", "allow[0].client: must not be empty"),
        ("[[deny]]\ncidr = \"10.0.0.1/8\"\n", "deny[0].cidr: \"10.0.0.1/8\": host bits set past the prefix length (the network is 10.0.0.0/8)"),
        ("[[deny]]\ncidr = \"10.0.0.0/33\"\n", "deny[0].cidr: \"10.0.0.0/33\": the prefix length must be a number from 0 to 32"),
        ("[[deny]]\ncidr = \"10.0.0.0/+8\"\n", "deny[0].cidr: \"10.0.0.0/+8\": the prefix length must be a number from 0 to 32"),
        ("[[deny]]\ncidr = \"10.0.0.0/ 8\"\n", "deny[0].cidr: \"10.0.0.0/ 8\": the prefix length must be a number from 0 to 32"),
        ("[[deny]]\ncidr = \"2001:db8::/129\"\n", "deny[0].cidr: \"2001:db8::/129\": the prefix length must be a number from 0 to 128"),
        ("[[deny]]\ncidr = \"10.0.0.1\"\n", "deny[0].cidr: \"10.0.0.1\": not a network: write it with its prefix length (\"10.0.0.1/32\" or \"10.0.0.1/128\" for one address)"),
        ("[[deny]]\ncidr = \"localhost/8\"\n", "deny[0].cidr: \"localhost/8\": \"localhost\" is not an IP address"),
        ("[[allow]]\nclient = \"a\"\n[[allow]]\nclient = \"a\"\n", "allow[1].client: \"a\" is already listed at allow[0] (a client or network is listed once, in one list)"),
        ("[[allow]]\ncidr = \"10.0.0.0/8\"\n[[deny]]\ncidr = \"10.0.0.0/8\"\n", "deny[0].cidr: 10.0.0.0/8 is already listed at allow[0] (a client or network is listed once, in one list)"),
        ("[[allow]]\ncidr = \"::ffff:10.0.0.0/104\"\n[[deny]]\ncidr = \"10.0.0.0/8\"\n", "deny[0].cidr: 10.0.0.0/8 is already listed at allow[0] (a client or network is listed once, in one list)"),
        ("[[deny]]\nclient = \"a\"\nreason = \"\"\n", "deny[0].reason: must not be empty (omit it to give none)"),
        ("[[deny]]\nclient = \"a\"\nreason = \"a\\nb\"\n", "deny[0].reason: '\\n' is not allowed (a reason is one line of text)"),
        ("[[deny]]\nclient = \"a\"\nfoo = 1\n", "unknown field `foo`"),
        ("[[rules]]\nname = \"u\"\nclient = \"u\"\nunlimited = true\nlimit = 5\n", "rules[1].limit: an unlimited rule has no limits and keeps no state: remove `limit`"),
        ("[[rules]]\nname = \"u\"\nclient = \"u\"\nunlimited = true\nwindow = \"1s\"\n", "rules[1].window: an unlimited rule has no limits and keeps no state: remove `window`"),
        ("[[rules]]\nname = \"u\"\nclient = \"u\"\nunlimited = true\n[[rules.tiers]]\nlimit = 1\nwindow = \"1s\"\n", "rules[1].tiers: an unlimited rule has no limits and keeps no state: remove `tiers`"),
        ("[[rules]]\nname = \"u\"\nclient = \"u\"\nunlimited = true\nreason = \"x\"\n", "rules[1].reason: only a ban (`limit = 0`) has a reason"),
        ("[[rules]]\nname = \"u\"\nendpoint = \"/u\"\nunlimited = true\nper = \"global\"\n", "rules[1].per: an unlimited rule keeps no state to share: remove `per`"),
        ("[[rules]]\nname = \"b\"\nendpoint = \"/b\"\nlimit = 0\ncapacity = 5\n", "rules[1].capacity: a ban (`limit = 0`) has no limits and keeps no state: remove `capacity`"),
        ("[[rules]]\nname = \"b\"\nendpoint = \"/b\"\nlimit = 0\nwindow = \"1m\"\n", "rules[1].limit: must be > 0"),
        ("[[rules]]\nname = \"b\"\nendpoint = \"/b\"\nlimit = 0\nwindow = \"1m\"\nreason = \"x\"\n", "rules[1].window: a ban (`limit = 0`) has no limits and keeps no state: remove `window`"),
        ("[[rules]]\nname = \"b\"\nendpoint = \"/b\"\nlimit = 5\nwindow = \"1m\"\nreason = \"x\"\n", "rules[1].reason: only a ban (`limit = 0`) has a reason"),
        ("[[rules]]\nname = \"b\"\nendpoint = \"/b\"\nunlimited = true\n[[rules]]\nname = \"c\"\nendpoint = \"/b\"\nlimit = 0\n", "rules[2]: matches the same client and endpoint as rules[1]"),
    ] {
        let got = err(extra);
        assert!(got.contains(want), "{extra}: {got}");
    }
    // A file of lists only is not an empty file.
    assert!(PolicyConfig::from_toml("[[deny]]\nclient = \"a\"\n").is_ok());
    let long = "x".repeat(257);
    assert!(
        err(&format!("[[deny]]\nclient = \"a\"\nreason = \"{long}\"\n"))
            .contains("at most 256 bytes")
    );
}

/// A naive reference of the lists: every entry checked in turn; the client entry if one
/// names the key, else the longest network holding the key's address.
fn reference<'a>(
    key: &str,
    clients: &'a [(String, bool)],
    nets: &'a [(IpAddr, u8, bool)],
) -> Option<bool> {
    if let Some((_, allow)) = clients.iter().find(|(c, _)| c == key) {
        return Some(*allow);
    }
    let ip: IpAddr = key.parse().ok()?;
    let ip = ip.to_canonical();
    let holds = |net: &IpAddr, len: u8| match (net, ip) {
        (IpAddr::V4(n), IpAddr::V4(a)) => {
            let m = if len == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(len))
            };
            u32::from(*n) & m == u32::from(a) & m
        }
        (IpAddr::V6(n), IpAddr::V6(a)) => {
            let m = if len == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(len))
            };
            u128::from(*n) & m == u128::from(a) & m
        }
        _ => false,
    };
    nets.iter()
        .filter(|(n, len, _)| holds(n, *len))
        .max_by_key(|(_, len, _)| *len)
        .map(|(_, _, allow)| *allow)
}

/// An address near a few fixed ones (so networks and keys meet often).
fn address() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        (0u32..4, any::<u16>()).prop_map(|(hi, lo)| IpAddr::from(
            (0x0a00_0000u32 | hi << 16 | u32::from(lo)).to_be_bytes()
        )),
        (0u128..4, any::<u16>()).prop_map(|(hi, lo)| IpAddr::from(
            (0x2001_0db8u128 << 96 | hi << 64 | u128::from(lo)).to_be_bytes()
        )),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    /// Whatever the entries, the policy admits or refuses exactly as the reference does.
    #[test]
    fn membership_equals_a_naive_reference(
        clients in proptest::collection::vec(("[a-c]{1,2}", any::<bool>()), 0..6),
        nets in proptest::collection::vec((address(), 0u8..=128, any::<bool>()), 0..12),
        keys in proptest::collection::vec(prop_oneof![
            "[a-c]{1,2}".prop_map(|k| k),
            address().prop_map(|a| a.to_string()),
        ], 1..20),
    ) {
        let mut toml = String::from("[[rules]]\nname = \"none\"\nlimit = 1\nwindow = \"1d\"\n");
        let mut seen_clients: Vec<(String, bool)> = Vec::new();
        let mut seen_nets: Vec<(IpAddr, u8, bool)> = Vec::new();
        for (client, allow) in clients {
            if seen_clients.iter().any(|(c, _)| *c == client) { continue; }
            toml += &format!("[[{}]]\nclient = \"{client}\"\n", if allow { "allow" } else { "deny" });
            seen_clients.push((client, allow));
        }
        for (ip, len, allow) in nets {
            let len = if ip.is_ipv4() { len % 33 } else { len };
            let masked = match ip {
                IpAddr::V4(a) => IpAddr::from((u32::from(a) & if len == 0 { 0 } else { u32::MAX << (32 - u32::from(len)) }).to_be_bytes()),
                IpAddr::V6(a) => IpAddr::from((u128::from(a) & if len == 0 { 0 } else { u128::MAX << (128 - u32::from(len)) }).to_be_bytes()),
            };
            if seen_nets.iter().any(|(n, l, _)| *n == masked && *l == len) { continue; }
            toml += &format!("[[{}]]\ncidr = \"{masked}/{len}\"\n", if allow { "allow" } else { "deny" });
            seen_nets.push((masked, len, allow));
        }
        let policy = Policy::from_toml(&toml, FnClock(|| Nanos::ZERO)).unwrap();
        for key in keys {
            let d = policy.peek(&key, "/", 1).unwrap();
            let got = d.listing().map(|l| l.admits());
            prop_assert_eq!(got, reference(&key, &seen_clients, &seen_nets), "{} in\n{}", key, toml);
            if let Some(admits) = got {
                prop_assert_eq!(d.allowed(), admits);
            }
        }
    }
}

/// `launder_guard` on an unlimited rule or a ban guards nothing (such a rule keeps no
/// state): like `capacity`, an error naming it, not a setting silently ignored. The file's
/// own `launder_guard = true` still loads with such rules in it.
#[test]
fn a_rule_without_limits_refuses_launder_guard() {
    let load = |extra: &str| {
        PolicyConfig::from_toml(&format!(
            "[[rules]]\nname = \"d\"\nlimit = 1\nwindow = \"1s\"\n{extra}"
        ))
        .map(|_| ())
        .map_err(|e| e.to_string())
    };
    for (extra, want) in [
        ("[[rules]]\nname = \"b\"\nendpoint = \"/b\"\nlimit = 0\nlaunder_guard = true\n", "rules[1].launder_guard: a ban (`limit = 0`) has no limits and keeps no state: remove `launder_guard`"),
        ("[[rules]]\nname = \"u\"\nclient = \"u\"\nunlimited = true\nlaunder_guard = false\n", "rules[1].launder_guard: an unlimited rule has no limits and keeps no state: remove `launder_guard`"),
    ] {
        assert_eq!(load(extra), Err(want.to_owned()), "{extra}");
    }
    assert!(PolicyConfig::from_toml(
        "launder_guard = true\n[[rules]]\nname = \"d\"\nlimit = 1\nwindow = \"1h\"\n\
         [[rules]]\nname = \"b\"\nendpoint = \"/b\"\nlimit = 0\n"
    )
    .is_ok());
}
