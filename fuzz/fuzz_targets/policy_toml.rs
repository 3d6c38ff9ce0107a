//! The TOML rule loader on arbitrary text: `PolicyConfig::from_toml` gives rules or a typed
//! error, never a panic; every accepted config builds a `Policy`, whose decisions for the
//! clients and endpoints it names (and a few others) are well-formed, with well-formed
//! headers (printable ASCII only); `reload_toml` of the same text keeps it working.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate::policy::{FnClock, Policy, PolicyConfig, RateLimitHeaders};
use tollgate_core::Nanos;
use tollgate_fuzz::{check_decision, check_headers};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = PolicyConfig::from_toml(text) else {
        return;
    };
    let mut clients = vec!["", "client"];
    let mut endpoints = vec!["", "/"];
    for rule in &config.rules {
        clients.extend(rule.client.as_deref());
        endpoints.extend(rule.endpoint.as_deref());
    }
    clients.truncate(6);
    endpoints.truncate(6);
    let policy = Policy::new(config.clone(), FnClock(|| Nanos::from_secs(1)))
        .expect("a config from_toml accepted compiles");
    for (round, now) in [1u64, 1, 2, 90_000].into_iter().enumerate() {
        for client in &clients {
            for endpoint in &endpoints {
                let cost = round as u32;
                let Ok(decision) = policy.allow_at(client, endpoint, cost, Nanos::from_secs(now))
                else {
                    continue;
                };
                if decision.tiers().is_empty() {
                    continue;
                }
                check_decision(&decision.decision, decision.limit());
                let headers = RateLimitHeaders::from_policy_decision(&decision);
                check_headers(&headers, &decision.decision);
                // Names were validated as printable ASCII: no header value can carry a
                // control character (a CR LF would inject a header).
                for (name, value) in headers.iter() {
                    assert!(
                        value.bytes().all(|b| (0x20..0x7f).contains(&b)),
                        "{name}: {value:?} is not printable ASCII"
                    );
                }
            }
        }
    }
    policy
        .reload_toml(text)
        .expect("reloading an accepted config succeeds");
});
