//! The policy case: a gateway's check of one request against three tiers (a client's
//! per-second burst and daily quota, and the endpoint's per-client limit), all admitted, for
//! 10 000 clients in round robin.
//!
//! governor has no rules, tiers or all-or-nothing admission; its column is the nearest
//! composition a governor user would write: three keyed limiters (foldhash, quanta) checked
//! one after another, none undone when a later one denies. The floor has no such case.

use crate::direct_cases::governor_quota;
use crate::loops::keyed;
use crate::{CaseSpec, TimedCase};
use governor::clock::{QuantaClock, QuantaInstant};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::RateLimiter;
use std::hint::black_box;
use std::sync::Arc;
use tollgate::policy::Policy;
use tollgate::TscClock;

/// Clients in the policy case.
pub const POLICY_CLIENTS: usize = 10_000;

/// The rules: every tier admits every check of the run (limits far above what a run asks).
pub const POLICY_RULES: &str = r#"
capacity = 20000

[[rules]]
name = "default"
[[rules.tiers]]
name = "burst"
limit = 1000000
window = "1s"
[[rules.tiers]]
name = "day"
limit = 1000000000
window = "1d"
algorithm = "fixed_window"

[[rules]]
name = "search"
endpoint = "/search"
limit = 100000
window = "1m"
algorithm = "sliding_window_counter"
"#;

/// The policy cases, in report order.
pub fn specs() -> Vec<CaseSpec> {
    vec![CaseSpec::new("policy_3tiers_10k", |_| policy_case())]
}

type GovernorKeyed = RateLimiter<
    String,
    DashMapStateStore<String, foldhash::fast::RandomState>,
    QuantaClock,
    NoOpMiddleware<QuantaInstant>,
>;

fn governor_keyed(per_ns: u64, burst: u32) -> GovernorKeyed {
    RateLimiter::dashmap_with_clock_and_hasher(
        governor_quota(per_ns, burst),
        QuantaClock::default(),
        foldhash::fast::RandomState::default(),
    )
}

fn policy_case() -> TimedCase {
    let clients: Arc<[String]> = (0..POLICY_CLIENTS)
        .map(|i| format!("client-{i:05}"))
        .collect::<Vec<_>>()
        .into();
    let policy = match Policy::from_toml(POLICY_RULES, TscClock::new()) {
        Ok(policy) => policy,
        Err(e) => panic!("the benchmark's rules are valid: {e}"),
    };
    let tollgate = move |client: &String| {
        policy
            .allow(client, "/search", 1)
            .is_ok_and(|d| d.allowed())
    };
    // The same three limits: 10⁶/s (1 µs), 10⁹/day (86.4 µs), 10⁵/min (600 µs).
    let (burst, day, search) = (
        governor_keyed(1_000, 1_000_000),
        governor_keyed(86_400, 1_000_000_000),
        governor_keyed(600_000, 100_000),
    );
    let governor = move |client: &String| {
        burst.check_key(client).is_ok()
            && day.check_key(client).is_ok()
            && search.check_key(client).is_ok()
    };
    for client in clients.iter() {
        black_box(tollgate(client));
        black_box(governor(client));
    }
    TimedCase::new("policy_3tiers_10k")
        .tollgate(keyed(clients.clone(), tollgate))
        .governor(keyed(clients, governor))
}
